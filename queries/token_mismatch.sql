-- token_mismatch: requests whose token counts disagree: gateway vs engine, prefill vs decode.
-- param $start TIMESTAMP: only requests at or after this UTC time (NULL: no bound)
-- param $end TIMESTAMP: only requests before this UTC time (NULL: no bound)
-- param $node VARCHAR: only requests whose prefill or decode leg ran on this node (NULL: all)
--
-- Chains as in request_chain (legs by node + rid, prefill and decode paired by bootstrap_room,
-- health checks excluded), gateway records matched by shared id only (x-request-id or rid; a time
-- match already requires similar token counts, so it proves nothing here). One row per chain with
-- at least one disagreement; mismatch lists them:
--   placeholder        prefill counted 1 prompt token while decode counted more: the scheduler
--                      swapped the prompt for the 1-token placeholder (the incident's bug)
--   prefill_vs_decode  any other difference between the two legs' prompt_tokens
--   gateway_vs_engine  the gateway's prompt_tokens differ from the engine's (decode, else prefill);
--                      gateway counts are provider-reported, the gap is evidence in itself
-- gateway_minus_engine and decode_minus_prefill are signed differences.
WITH
node_roles AS (
    SELECT node, max(role) AS role FROM engine_starts GROUP BY node
),
eng AS (
    SELECT r.node, r.rid, r.kind, r.ts, r.ts_inferred, r.bootstrap_host, r.bootstrap_room, r.stream,
           r.header_request_id, r.prompt_tokens, r.completion_tokens, r.input_len, r.finish_type,
           r.finish_status_code, r.stats_type,
           -- (file, line) packed into one sortable number so min() picks a deterministic line
           CAST(r.file_id AS BIGINT) * 10000000000 + r.line_no AS ref
    FROM engine_requests r
    WHERE r.rid IS NOT NULL
      AND NOT COALESCE(r.is_health_check, false)
      AND substr(r.rid, 1, 13) <> 'HEALTH_CHECK_'
      AND COALESCE(r.bootstrap_room, -1) <> 0
      AND COALESCE(r.bootstrap_host, '') <> '2.2.2.2'
),
legs AS (
    SELECT e.node, e.rid,
           min(e.ts) AS ts_first,
           min(CASE WHEN e.kind = 'received' THEN e.ts END) AS ts_received,
           max(CASE WHEN e.kind = 'received' AND e.ts_inferred THEN 1 ELSE 0 END) = 1 AS received_inferred,
           max(CASE WHEN e.kind IN ('finished', 'metrics') THEN e.ts END) AS ts_finished,
           max(e.bootstrap_room) AS bootstrap_room,
           max(e.bootstrap_host) AS bootstrap_host,
           max(e.header_request_id) AS header_request_id,
           COALESCE(max(CASE WHEN e.kind IN ('finished', 'metrics') THEN e.prompt_tokens END),
                    max(CASE WHEN e.kind = 'time_stats' THEN e.input_len END)) AS tokens,
           max(CASE WHEN e.kind IN ('finished', 'metrics') THEN e.finish_type END) AS finish_type,
           max(e.finish_status_code) AS finish_status_code,
           max(CASE WHEN e.stream THEN 1 ELSE 0 END) = 1 AS stream,
           max(e.stats_type) AS stats_type,
           min(CASE WHEN e.kind = 'received' THEN e.ref END) AS received_ref,
           min(CASE WHEN e.kind IN ('finished', 'metrics') THEN e.ref END) AS finished_ref
    FROM eng e
    GROUP BY e.node, e.rid
),
legs_r AS (
    SELECT l.*, COALESCE(nr.role, l.stats_type, 'unknown') AS role
    FROM legs l LEFT JOIN node_roles nr ON nr.node = l.node
),
pl AS (SELECT * FROM legs_r WHERE role = 'prefill'),
dl AS (SELECT * FROM legs_r WHERE role = 'decode'),
chains0 AS (
    SELECT 'pd' AS engine_mode,
           p.node AS prefill_node, p.rid AS prefill_rid, p.tokens AS prefill_tokens,
           p.ts_first AS prefill_ts, p.finish_type AS prefill_finish_type,
           p.received_ref AS prefill_received_ref, p.finished_ref AS prefill_finished_ref,
           d.node AS decode_node, d.rid AS decode_rid, d.tokens AS decode_tokens,
           -- a decode Receive line without its own timestamp (0.5.8-0.5.11 request logs) got the
           -- previous line's time: the router sent both legs at once, so the prefill Receive
           -- (when later) is the better estimate of when the decode leg started
           CASE WHEN d.received_inferred AND p.ts_received > d.ts_first THEN p.ts_received
                ELSE d.ts_first END AS decode_ts, d.ts_finished AS decode_finished_ts,
           d.finish_type AS decode_finish_type, d.finish_status_code AS decode_finish_status_code,
           d.received_ref AS decode_received_ref, d.finished_ref AS decode_finished_ref,
           COALESCE(p.bootstrap_room, d.bootstrap_room) AS bootstrap_room,
           COALESCE(p.bootstrap_host, d.bootstrap_host) AS bootstrap_host,
           COALESCE(d.header_request_id, p.header_request_id) AS header_request_id,
           (COALESCE(d.stream, false) OR COALESCE(p.stream, false)) AS engine_stream
    FROM pl p
    FULL OUTER JOIN dl d
      ON p.bootstrap_room = d.bootstrap_room
     AND (p.bootstrap_host IS NULL OR d.bootstrap_host IS NULL OR p.bootstrap_host = d.bootstrap_host)
    UNION ALL
    -- unified (or unknown-role) nodes do prefill and decode in one process: the leg is both
    SELECT CASE WHEN u.role = 'unified' THEN 'unified' ELSE 'unknown' END,
           u.node, u.rid, u.tokens, u.ts_first, u.finish_type, u.received_ref, u.finished_ref,
           u.node, u.rid, u.tokens, u.ts_first, u.ts_finished, u.finish_type, u.finish_status_code,
           u.received_ref, u.finished_ref,
           u.bootstrap_room, u.bootstrap_host, u.header_request_id, u.stream
    FROM legs_r u
    WHERE u.role NOT IN ('prefill', 'decode')
),
chains AS (
    SELECT c.*,
           COALESCE(c.prefill_node || '|' || c.prefill_rid, '') || '>'
               || COALESCE(c.decode_node || '|' || c.decode_rid, '') AS chain_key,
           COALESCE(LEAST(c.prefill_ts, c.decode_ts), c.prefill_ts, c.decode_ts) AS ts_engine,
           COALESCE(c.decode_tokens, c.prefill_tokens) AS engine_tokens
    FROM chains0 c
),
gw AS (
    SELECT g.request_id, g.header_request_id, g.tenant_id, g.ts_start, g.prompt_tokens,
           g.tokens_source, g.layer, g.file_id, g.line_no,
           CASE g.layer WHEN 'edge' THEN 1 WHEN 'router' THEN 3 ELSE 2 END AS layer_rank
    FROM gateway_requests_unique g
),
chain_ids AS (
    SELECT chain_key, header_request_id AS id, 1 AS prio FROM chains WHERE header_request_id IS NOT NULL
    UNION ALL
    SELECT chain_key, decode_rid, 2 FROM chains WHERE decode_rid IS NOT NULL
    UNION ALL
    SELECT chain_key, prefill_rid, 2 FROM chains
    WHERE prefill_rid IS NOT NULL AND (decode_rid IS NULL OR prefill_rid <> decode_rid)
),
gw_ids AS (
    SELECT file_id, line_no, layer_rank, ts_start, request_id AS id FROM gw WHERE request_id IS NOT NULL
    UNION ALL
    SELECT file_id, line_no, layer_rank, ts_start, header_request_id FROM gw
    WHERE header_request_id IS NOT NULL AND (request_id IS NULL OR header_request_id <> request_id)
),
best_gw AS (
    -- the outermost layer's record of the chain (then the best id, then the earliest)
    SELECT chain_key, file_id, line_no
    FROM (
        SELECT c.chain_key, g.file_id, g.line_no,
               ROW_NUMBER() OVER (PARTITION BY c.chain_key
                                  ORDER BY g.layer_rank, c.prio, g.ts_start, g.file_id, g.line_no) AS rn
        FROM chain_ids c JOIN gw_ids g ON g.id = c.id
    ) r
    WHERE rn = 1
),
rows0 AS (
    SELECT c.*, g.request_id, g.header_request_id AS gw_header_request_id, g.tenant_id, g.layer,
           g.ts_start, g.prompt_tokens AS gateway_tokens, g.tokens_source,
           CASE WHEN c.engine_mode = 'pd' AND c.prefill_tokens = 1 AND c.decode_tokens > 1
                THEN 1 ELSE 0 END AS is_placeholder,
           CASE WHEN c.engine_mode = 'pd' AND c.prefill_tokens IS NOT NULL AND c.decode_tokens IS NOT NULL
                     AND c.prefill_tokens <> c.decode_tokens
                     AND NOT (c.prefill_tokens = 1 AND c.decode_tokens > 1)
                THEN 1 ELSE 0 END AS is_pd_diff,
           CASE WHEN g.prompt_tokens IS NOT NULL AND c.engine_tokens IS NOT NULL
                     AND g.prompt_tokens <> c.engine_tokens
                THEN 1 ELSE 0 END AS is_gw_diff
    FROM chains c
    LEFT JOIN best_gw b ON b.chain_key = c.chain_key
    LEFT JOIN gw g ON g.file_id = b.file_id AND g.line_no = b.line_no
)
SELECT
    r.request_id,
    COALESCE(r.gw_header_request_id, r.header_request_id) AS header_request_id,
    r.tenant_id,
    r.layer,
    COALESCE(r.ts_start, r.ts_engine) AS ts,
    concat_ws(';',
        CASE WHEN r.is_placeholder = 1 THEN 'placeholder' END,
        CASE WHEN r.is_pd_diff = 1 THEN 'prefill_vs_decode' END,
        CASE WHEN r.is_gw_diff = 1 THEN 'gateway_vs_engine' END) AS mismatch,
    r.gateway_tokens,
    r.tokens_source,
    r.prefill_node,
    r.prefill_rid,
    r.prefill_tokens,
    r.decode_node,
    r.decode_rid,
    r.decode_tokens,
    r.gateway_tokens - r.engine_tokens AS gateway_minus_engine,
    r.decode_tokens - r.prefill_tokens AS decode_minus_prefill,
    r.bootstrap_room
FROM rows0 r
WHERE (r.is_placeholder + r.is_pd_diff + r.is_gw_diff) > 0
  AND ($start IS NULL OR COALESCE(r.ts_start, r.ts_engine) >= $start)
  AND ($end IS NULL OR COALESCE(r.ts_start, r.ts_engine) < $end)
  AND ($node IS NULL OR r.prefill_node = $node OR r.decode_node = $node)
ORDER BY ts, r.request_id, r.prefill_rid, r.decode_rid
