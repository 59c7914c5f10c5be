-- request_chain: one row per request: gateway record, prefill leg and decode leg, and how they matched.
-- param $start TIMESTAMP: only requests at or after this UTC time (NULL: no bound)
-- param $end TIMESTAMP: only requests before this UTC time (NULL: no bound)
-- param $node VARCHAR: only requests whose prefill or decode leg ran on this node (NULL: all)
-- param $request_id VARCHAR: only this request: gateway request_id or header id, engine rid (NULL: all)
--
-- Legs: engine_requests records grouped by (node, rid), health checks excluded (is_health_check,
-- rid prefix HEALTH_CHECK_, bootstrap_room 0, bootstrap_host 2.2.2.2). A leg's role is its node's
-- role from engine_starts (else the time-stats type). Prefill and decode legs are paired by
-- bootstrap_room (and bootstrap_host when both legs logged it): rids never join the two.
-- Gateway records (gateway_requests_unique; a record shadowed by a more outer layer's record with
-- the same logical id, COALESCE(header_request_id, request_id), is left out: edge < proxy < router)
-- are matched to chains:
--   header_id    the gateway's header_request_id or request_id = the x-request-id logged by the engine
--   rid          the gateway's request_id or header_request_id = an engine rid (e.g. LiteLLM = decode rid)
--   time_tokens  no shared id: the nearest unmatched chain within 30 s whose prompt tokens equal the
--                gateway's (within 1 %); mutual best match only
--   time         as time_tokens, but the gateway logged no token count (only time and size plausibility)
--   none         a gateway record with no engine chain; engine_only: a chain with no gateway record
-- match_confidence: 1.0 unique id match, 0.7 id matched several chains (nearest in time taken),
-- 0.8/0.6 time_tokens (unique/several candidates), 0.5/0.3 time. When one chain matches records of
-- several layers, only the outermost layer's record is kept.
-- Rows come in no particular order: this is the full export (one row per request, millions of
-- rows), and sorting it costs more than building it. Order what you keep (the forensics chain
-- command sorts by ts, request_id, evidence).
WITH
node_roles AS (
    SELECT node, max(role) AS role FROM engine_starts GROUP BY node
),
eng AS (
    SELECT r.node, r.rid, r.kind, r.ts, r.ts_inferred, r.bootstrap_host, r.bootstrap_room, r.stream,
           r.header_request_id, r.prompt_tokens, r.input_len, r.finish_type, r.finish_status_code,
           COALESCE(nr.role, r.stats_type, 'unknown') AS role,
           -- (file, line) packed into one sortable number so min() picks a deterministic line
           CAST(r.file_id AS BIGINT) * 10000000000 + r.line_no AS ref
    FROM engine_requests r
    LEFT JOIN node_roles nr ON nr.node = r.node
    WHERE r.rid IS NOT NULL
      AND NOT COALESCE(r.is_health_check, false)
      AND substr(r.rid, 1, 13) <> 'HEALTH_CHECK_'
      AND COALESCE(r.bootstrap_room, -1) <> 0
      AND COALESCE(r.bootstrap_host, '') <> '2.2.2.2'
),
pd_chains AS (
    -- PD: every record of one request carries its bootstrap_room, so one integer GROUP BY pairs
    -- the prefill and the decode leg (a room retried on several prefill legs keeps the greatest rid)
    SELECT 'pd' AS engine_mode,
           max(CASE WHEN e.role = 'prefill' THEN e.node END) AS prefill_node,
           max(CASE WHEN e.role = 'prefill' THEN e.rid END) AS prefill_rid,
           COALESCE(max(CASE WHEN e.role = 'prefill' AND e.kind IN ('finished', 'metrics') THEN e.prompt_tokens END),
                    max(CASE WHEN e.role = 'prefill' AND e.kind = 'time_stats' THEN e.input_len END)) AS prefill_tokens,
           min(CASE WHEN e.role = 'prefill' THEN e.ts END) AS prefill_ts,
           max(CASE WHEN e.role = 'prefill' AND e.kind IN ('finished', 'metrics') THEN e.finish_type END) AS prefill_finish_type,
           min(CASE WHEN e.role = 'prefill' AND e.kind = 'received' THEN e.ref END) AS prefill_received_ref,
           min(CASE WHEN e.role = 'prefill' AND e.kind IN ('finished', 'metrics') THEN e.ref END) AS prefill_finished_ref,
           max(CASE WHEN e.role = 'decode' THEN e.node END) AS decode_node,
           max(CASE WHEN e.role = 'decode' THEN e.rid END) AS decode_rid,
           COALESCE(max(CASE WHEN e.role = 'decode' AND e.kind IN ('finished', 'metrics') THEN e.prompt_tokens END),
                    max(CASE WHEN e.role = 'decode' AND e.kind = 'time_stats' THEN e.input_len END)) AS decode_tokens,
           -- a decode Receive line without its own timestamp (0.5.8-0.5.11 request logs) got the
           -- previous line's time: the router sent both legs at once, so the prefill Receive
           -- (when later) is the better estimate of when the decode leg started
           CASE WHEN max(CASE WHEN e.role = 'decode' AND e.kind = 'received' AND e.ts_inferred THEN 1 ELSE 0 END) = 1
                     AND min(CASE WHEN e.role = 'prefill' AND e.kind = 'received' THEN e.ts END)
                         > min(CASE WHEN e.role = 'decode' THEN e.ts END)
                THEN min(CASE WHEN e.role = 'prefill' AND e.kind = 'received' THEN e.ts END)
                ELSE min(CASE WHEN e.role = 'decode' THEN e.ts END) END AS decode_ts,
           max(CASE WHEN e.role = 'decode' AND e.kind IN ('finished', 'metrics') THEN e.ts END) AS decode_finished_ts,
           max(CASE WHEN e.role = 'decode' AND e.kind IN ('finished', 'metrics') THEN e.finish_type END) AS decode_finish_type,
           max(CASE WHEN e.role = 'decode' THEN e.finish_status_code END) AS decode_finish_status_code,
           min(CASE WHEN e.role = 'decode' AND e.kind = 'received' THEN e.ref END) AS decode_received_ref,
           min(CASE WHEN e.role = 'decode' AND e.kind IN ('finished', 'metrics') THEN e.ref END) AS decode_finished_ref,
           e.bootstrap_room,
           max(e.bootstrap_host) AS bootstrap_host,
           COALESCE(max(CASE WHEN e.role = 'decode' THEN e.header_request_id END),
                    max(e.header_request_id)) AS header_request_id,
           max(CASE WHEN e.stream THEN 1 ELSE 0 END) = 1 AS engine_stream
    FROM eng e
    WHERE e.bootstrap_room IS NOT NULL AND e.role IN ('prefill', 'decode')
    GROUP BY e.bootstrap_room
),
other_legs AS (
    -- unified (or unknown-role) nodes, and records without a room: one leg is the whole request
    SELECT CASE WHEN max(e.role) = 'unified' THEN 'unified'
                WHEN max(e.role) IN ('prefill', 'decode') THEN 'pd' ELSE 'unknown' END AS engine_mode,
           e.node, e.rid,
           COALESCE(max(CASE WHEN e.kind IN ('finished', 'metrics') THEN e.prompt_tokens END),
                    max(CASE WHEN e.kind = 'time_stats' THEN e.input_len END)) AS tokens,
           min(e.ts) AS ts_first,
           max(CASE WHEN e.kind IN ('finished', 'metrics') THEN e.ts END) AS ts_finished,
           max(CASE WHEN e.kind IN ('finished', 'metrics') THEN e.finish_type END) AS finish_type,
           max(e.finish_status_code) AS finish_status_code,
           min(CASE WHEN e.kind = 'received' THEN e.ref END) AS received_ref,
           min(CASE WHEN e.kind IN ('finished', 'metrics') THEN e.ref END) AS finished_ref,
           max(e.bootstrap_room) AS bootstrap_room, max(e.bootstrap_host) AS bootstrap_host,
           max(e.header_request_id) AS header_request_id,
           max(CASE WHEN e.stream THEN 1 ELSE 0 END) = 1 AS stream,
           max(e.role) AS role
    FROM (
        -- the records of eng (same filter), read again rather than kept: eng is 4 M rows
        SELECT r.node, r.rid, r.kind, r.ts, r.bootstrap_host, r.bootstrap_room, r.stream,
               r.header_request_id, r.prompt_tokens, r.input_len, r.finish_type, r.finish_status_code,
               COALESCE(nr.role, r.stats_type, 'unknown') AS role,
               CAST(r.file_id AS BIGINT) * 10000000000 + r.line_no AS ref
        FROM engine_requests r
        LEFT JOIN node_roles nr ON nr.node = r.node
        WHERE r.rid IS NOT NULL
          AND NOT COALESCE(r.is_health_check, false)
          AND substr(r.rid, 1, 13) <> 'HEALTH_CHECK_'
          AND COALESCE(r.bootstrap_room, -1) <> 0
          AND COALESCE(r.bootstrap_host, '') <> '2.2.2.2'
          AND (r.bootstrap_room IS NULL OR COALESCE(nr.role, r.stats_type, 'unknown') NOT IN ('prefill', 'decode'))
    ) e
    GROUP BY e.node, e.rid
),
other_chains AS (
    SELECT u.engine_mode,
           CASE WHEN u.role = 'decode' THEN NULL ELSE u.node END AS prefill_node,
           CASE WHEN u.role = 'decode' THEN NULL ELSE u.rid END AS prefill_rid,
           CASE WHEN u.role = 'decode' THEN NULL ELSE u.tokens END AS prefill_tokens,
           CASE WHEN u.role = 'decode' THEN NULL ELSE u.ts_first END AS prefill_ts,
           CASE WHEN u.role = 'decode' THEN NULL ELSE u.finish_type END AS prefill_finish_type,
           CASE WHEN u.role = 'decode' THEN NULL ELSE u.received_ref END AS prefill_received_ref,
           CASE WHEN u.role = 'decode' THEN NULL ELSE u.finished_ref END AS prefill_finished_ref,
           CASE WHEN u.role = 'prefill' THEN NULL ELSE u.node END AS decode_node,
           CASE WHEN u.role = 'prefill' THEN NULL ELSE u.rid END AS decode_rid,
           CASE WHEN u.role = 'prefill' THEN NULL ELSE u.tokens END AS decode_tokens,
           CASE WHEN u.role = 'prefill' THEN NULL ELSE u.ts_first END AS decode_ts,
           CASE WHEN u.role = 'prefill' THEN NULL ELSE u.ts_finished END AS decode_finished_ts,
           CASE WHEN u.role = 'prefill' THEN NULL ELSE u.finish_type END AS decode_finish_type,
           CASE WHEN u.role = 'prefill' THEN NULL ELSE u.finish_status_code END AS decode_finish_status_code,
           CASE WHEN u.role = 'prefill' THEN NULL ELSE u.received_ref END AS decode_received_ref,
           CASE WHEN u.role = 'prefill' THEN NULL ELSE u.finished_ref END AS decode_finished_ref,
           u.bootstrap_room, u.bootstrap_host, u.header_request_id, u.stream AS engine_stream
    FROM other_legs u
),
other_keyed AS (
    SELECT o.*,
           COALESCE('room:' || CAST(o.bootstrap_room AS VARCHAR) || '>' || o.engine_mode,
                    COALESCE(o.prefill_node || '|' || o.prefill_rid, '') || '>'
                        || COALESCE(o.decode_node || '|' || o.decode_rid, '')) AS other_key
    FROM other_chains o
),
chains0 AS (
    -- a chain's identity is the pair (ck_room, ck_seq), integers: (room, 0) for a PD room, else
    -- (0, n) with n the rank of its text key among the other chains. Joins, groups and partitions
    -- use the pair; only tie-breaks spell the text key out: 'room:<room>><mode>', or
    -- '<prefill node>|<rid>><decode node>|<rid>' for a chain without a room
    SELECT engine_mode, prefill_node, prefill_rid, prefill_tokens, prefill_ts, prefill_finish_type,
           prefill_received_ref, prefill_finished_ref, decode_node, decode_rid, decode_tokens,
           decode_ts, decode_finished_ts, decode_finish_type, decode_finish_status_code,
           decode_received_ref, decode_finished_ref, bootstrap_room, bootstrap_host,
           header_request_id, engine_stream,
           bootstrap_room AS ck_room, 0 AS ck_seq, CAST(NULL AS VARCHAR) AS other_key
    FROM pd_chains
    UNION ALL
    SELECT engine_mode, prefill_node, prefill_rid, prefill_tokens, prefill_ts, prefill_finish_type,
           prefill_received_ref, prefill_finished_ref, decode_node, decode_rid, decode_tokens,
           decode_ts, decode_finished_ts, decode_finish_type, decode_finish_status_code,
           decode_received_ref, decode_finished_ref, bootstrap_room, bootstrap_host,
           header_request_id, engine_stream,
           0, DENSE_RANK() OVER (ORDER BY other_key), other_key
    FROM other_keyed
),
chains AS (
    SELECT c.*,
           COALESCE(LEAST(c.prefill_ts, c.decode_ts), c.prefill_ts, c.decode_ts) AS ts_engine,
           COALESCE(c.decode_tokens, c.prefill_tokens) AS engine_tokens
    FROM chains0 c
),
gw_shadowed AS (
    -- a record that a more outer layer also logged (same logical id); only a record below the
    -- outermost layer (rank > 1) can be shadowed: probe with those
    SELECT DISTINCT i.file_id, i.line_no
    FROM gateway_requests_unique i
    JOIN gateway_requests_unique o
      ON COALESCE(o.header_request_id, o.request_id) = COALESCE(i.header_request_id, i.request_id)
     AND CASE o.layer WHEN 'edge' THEN 1 WHEN 'router' THEN 3 ELSE 2 END
         < CASE i.layer WHEN 'edge' THEN 1 WHEN 'router' THEN 3 ELSE 2 END
    WHERE CASE i.layer WHEN 'edge' THEN 1 WHEN 'router' THEN 3 ELSE 2 END > 1
),
gw_top AS (
    -- the gateway columns matching needs (the others are read once, for the output rows)
    SELECT g.file_id, g.line_no, g.request_id, g.header_request_id, g.ts_start, g.prompt_tokens,
           g.request_bytes,
           CASE g.layer WHEN 'edge' THEN 1 WHEN 'router' THEN 3 ELSE 2 END AS layer_rank
    FROM gateway_requests_unique g
    WHERE NOT EXISTS (SELECT 1 FROM gw_shadowed s WHERE s.file_id = g.file_id AND s.line_no = g.line_no)
),
chain_ids AS (
    -- one pass over the chains: their header id (prio 1) and their rids (prio 2)
    SELECT c.ck_room, c.ck_seq, c.ts_engine, c.other_key,
           CASE k.n WHEN 1 THEN c.header_request_id WHEN 2 THEN c.decode_rid ELSE c.prefill_rid END AS id,
           CASE k.n WHEN 1 THEN 1 ELSE 2 END AS prio
    FROM chains c
    CROSS JOIN (VALUES (1), (2), (3)) k (n)
    WHERE CASE k.n WHEN 1 THEN c.header_request_id IS NOT NULL
                   WHEN 2 THEN c.decode_rid IS NOT NULL
                   ELSE c.prefill_rid IS NOT NULL AND (c.decode_rid IS NULL OR c.prefill_rid <> c.decode_rid) END
),
gw_ids AS (
    SELECT file_id, line_no, ts_start, request_id AS id FROM gw_top WHERE request_id IS NOT NULL
    UNION ALL
    SELECT file_id, line_no, ts_start, header_request_id FROM gw_top
    WHERE header_request_id IS NOT NULL AND (request_id IS NULL OR header_request_id <> request_id)
),
id_pairs AS (
    SELECT g.file_id, g.line_no, c.ck_room, c.ck_seq, c.other_key, min(c.prio) AS prio,
           min(abs(EXTRACT(EPOCH FROM c.ts_engine) - EXTRACT(EPOCH FROM g.ts_start))) AS dt
    FROM gw_ids g JOIN chain_ids c ON c.id = g.id
    GROUP BY g.file_id, g.line_no, c.ck_room, c.ck_seq, c.other_key
),
id_counted AS (
    SELECT m.*, count(*) OVER (PARTITION BY m.file_id, m.line_no) AS n_cand
    FROM id_pairs m
),
id_ranked AS (
    -- a record with one candidate takes it; the few with several rank them (the text key last)
    SELECT m.file_id, m.line_no, m.ck_room, m.ck_seq, m.prio, m.n_cand, 1 AS rn
    FROM id_counted m WHERE m.n_cand = 1
    UNION ALL
    SELECT m.file_id, m.line_no, m.ck_room, m.ck_seq, m.prio, m.n_cand,
           ROW_NUMBER() OVER (PARTITION BY m.file_id, m.line_no
                              ORDER BY m.prio, m.dt,
                                       COALESCE(m.other_key, 'room:' || CAST(m.ck_room AS VARCHAR) || '>pd'))
    FROM id_counted m
    WHERE m.n_cand > 1
),
gw_free AS (
    SELECT g.*, CAST(floor(EXTRACT(EPOCH FROM g.ts_start) / 30) AS BIGINT) AS bucket
    FROM gw_top g
    WHERE NOT EXISTS (SELECT 1 FROM id_pairs m WHERE m.file_id = g.file_id AND m.line_no = g.line_no)
),
ch_free AS (
    SELECT c.ck_room, c.ck_seq, c.ts_engine, c.engine_tokens,
           COALESCE(c.other_key, 'room:' || CAST(c.ck_room AS VARCHAR) || '>pd') AS chain_key,
           CAST(floor(EXTRACT(EPOCH FROM c.ts_engine) / 30) AS BIGINT) AS bucket
    FROM chains c
    WHERE NOT EXISTS (SELECT 1 FROM id_pairs m WHERE m.ck_room = c.ck_room AND m.ck_seq = c.ck_seq)
),
time_cand AS (
    SELECT g.file_id, g.line_no, c.ck_room, c.ck_seq, c.chain_key,
           abs(EXTRACT(EPOCH FROM c.ts_engine) - EXTRACT(EPOCH FROM g.ts_start)) AS dt,
           CASE WHEN g.prompt_tokens IS NOT NULL AND c.engine_tokens IS NOT NULL THEN 1 ELSE 0 END AS tok
    FROM gw_free g
    CROSS JOIN (VALUES (-1), (0), (1)) o (k)
    JOIN ch_free c ON c.bucket = g.bucket + o.k
    WHERE abs(EXTRACT(EPOCH FROM c.ts_engine) - EXTRACT(EPOCH FROM g.ts_start)) <= 30
      AND (g.prompt_tokens IS NULL OR c.engine_tokens IS NULL
           OR abs(g.prompt_tokens - c.engine_tokens) <= GREATEST(2, g.prompt_tokens / 100))
      -- a token is at least one byte of request body
      AND (g.request_bytes IS NULL OR c.engine_tokens IS NULL OR c.engine_tokens <= g.request_bytes)
),
time_ranked AS (
    SELECT t.*,
           count(*) OVER (PARTITION BY t.file_id, t.line_no) AS n_cand,
           ROW_NUMBER() OVER (PARTITION BY t.file_id, t.line_no ORDER BY t.tok DESC, t.dt, t.chain_key) AS rn_g,
           ROW_NUMBER() OVER (PARTITION BY t.ck_room, t.ck_seq ORDER BY t.tok DESC, t.dt, t.file_id, t.line_no) AS rn_c
    FROM time_cand t
),
matches AS (
    SELECT file_id, line_no, ck_room, ck_seq,
           CASE WHEN prio = 1 THEN 'header_id' ELSE 'rid' END AS match_method,
           CASE WHEN n_cand = 1 THEN 1.0 ELSE 0.7 END AS match_confidence
    FROM id_ranked WHERE rn = 1
    UNION ALL
    SELECT file_id, line_no, ck_room, ck_seq,
           CASE WHEN tok = 1 THEN 'time_tokens' ELSE 'time' END,
           CASE WHEN tok = 1 THEN CASE WHEN n_cand = 1 THEN 0.8 ELSE 0.6 END
                ELSE CASE WHEN n_cand = 1 THEN 0.5 ELSE 0.3 END END
    FROM time_ranked WHERE rn_g = 1 AND rn_c = 1
),
matches_r AS (
    SELECT m.*, g.layer_rank
    FROM matches m
    JOIN gw_top g ON g.file_id = m.file_id AND g.line_no = m.line_no
),
chain_multi AS (
    -- the few chains matched by several records: keep the outermost layer's
    SELECT ck_room, ck_seq, min(layer_rank) AS best_rank
    FROM matches_r
    GROUP BY ck_room, ck_seq
    HAVING count(*) > 1
),
matches_top AS (
    -- one logical request seen at several layers: keep the outermost layer's record
    SELECT m.*
    FROM matches_r m
    LEFT JOIN chain_multi x ON x.ck_room = m.ck_room AND x.ck_seq = m.ck_seq
    WHERE x.best_rank IS NULL OR m.layer_rank = x.best_rank
),
rej AS (
    SELECT node, rid, min(ts) AS ts, max(input_tokens) AS input_tokens,
           max(limit_tokens) AS limit_tokens,
           min(CAST(file_id AS BIGINT) * 10000000000 + line_no) AS ref
    FROM engine_rejections
    WHERE kind = 'input_length' AND rid IS NOT NULL
    GROUP BY node, rid
),
xfer AS (
    SELECT bootstrap_room, min(ts) AS ts, min(kind) AS kind,
           min(CAST(file_id AS BIGINT) * 10000000000 + line_no) AS ref
    FROM engine_events
    WHERE kind IN ('prefill_transfer_failed', 'decode_transfer_failed', 'kvpoll_timeout',
                   'bootstrap_failed', 'transfer_backend_error')
      AND bootstrap_room IS NOT NULL AND bootstrap_room <> 0
    GROUP BY bootstrap_room
),
rows0 AS (
    -- every chain, with the gateway record it matched (none: engine_only) ...
    SELECT m.file_id AS gw_file_id, m.line_no AS gw_line_no, c.ck_room, c.ck_seq,
           COALESCE(m.match_method, 'engine_only') AS match_method, m.match_confidence,
           c.engine_mode, c.bootstrap_room, c.bootstrap_host, c.header_request_id AS engine_header_request_id,
           c.prefill_node, c.prefill_rid, c.prefill_tokens, c.prefill_ts, c.prefill_finish_type,
           c.prefill_received_ref, c.prefill_finished_ref,
           c.decode_node, c.decode_rid, c.decode_tokens, c.decode_ts, c.decode_finished_ts,
           c.decode_finish_type, c.decode_finish_status_code, c.decode_received_ref, c.decode_finished_ref,
           c.ts_engine, c.engine_stream, c.other_key
    FROM chains c
    LEFT JOIN matches_top m ON m.ck_room = c.ck_room AND m.ck_seq = c.ck_seq
    UNION ALL
    -- ... and every gateway record that matched no chain
    SELECT g.file_id, g.line_no, NULL, NULL, 'none', CAST(NULL AS DOUBLE),
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM gw_top g
    WHERE NOT EXISTS (SELECT 1 FROM matches m WHERE m.file_id = g.file_id AND m.line_no = g.line_no)
),
joined AS (
    SELECT r.*, g.request_id, g.header_request_id AS gw_header_request_id, g.tenant_id, g.layer,
           g.ts_start, g.status, g.streamed, g.in_band_error, g.prompt_tokens AS gateway_tokens,
           g.tokens_source
    FROM rows0 r
    LEFT JOIN gateway_requests_unique g ON g.file_id = r.gw_file_id AND g.line_no = r.gw_line_no
),
filtered AS (
    SELECT j.*, COALESCE(j.ts_start, j.ts_engine) AS ts
    FROM joined j
    WHERE ($start IS NULL OR COALESCE(j.ts_start, j.ts_engine) >= $start)
      AND ($end IS NULL OR COALESCE(j.ts_start, j.ts_engine) < $end)
      AND ($node IS NULL OR j.prefill_node = $node OR j.decode_node = $node)
      AND ($request_id IS NULL OR $request_id IN (j.request_id, j.gw_header_request_id,
                                                  j.engine_header_request_id, j.prefill_rid, j.decode_rid))
),
refd AS (
    -- unpack the (file, line) references; integer division written portably
    SELECT f.*,
           CAST((rj.ref - rj.ref % 10000000000) / 10000000000 AS INTEGER) AS rej_file, rj.ref % 10000000000 AS rej_line,
           rj.input_tokens AS rejected_input_tokens, rj.limit_tokens AS rejected_limit_tokens,
           CAST((f.prefill_received_ref - f.prefill_received_ref % 10000000000) / 10000000000 AS INTEGER) AS pr_file,
           f.prefill_received_ref % 10000000000 AS pr_line,
           CAST((f.prefill_finished_ref - f.prefill_finished_ref % 10000000000) / 10000000000 AS INTEGER) AS pf_file,
           f.prefill_finished_ref % 10000000000 AS pf_line,
           CAST((f.decode_received_ref - f.decode_received_ref % 10000000000) / 10000000000 AS INTEGER) AS dr_file,
           f.decode_received_ref % 10000000000 AS dr_line,
           CAST((f.decode_finished_ref - f.decode_finished_ref % 10000000000) / 10000000000 AS INTEGER) AS df_file,
           f.decode_finished_ref % 10000000000 AS df_line,
           x.kind AS transfer_failure,
           CAST((x.ref - x.ref % 10000000000) / 10000000000 AS INTEGER) AS x_file, x.ref % 10000000000 AS x_line
    FROM filtered f
    LEFT JOIN rej rj ON rj.node = f.prefill_node AND rj.rid = f.prefill_rid
    LEFT JOIN xfer x ON x.bootstrap_room = f.bootstrap_room
)
SELECT
    f.request_id,
    COALESCE(f.gw_header_request_id, f.engine_header_request_id) AS header_request_id,
    f.tenant_id,
    f.layer,
    f.ts,
    f.status,
    COALESCE(f.streamed, f.engine_stream) AS streamed,
    f.in_band_error,
    f.match_method,
    f.match_confidence,
    f.engine_mode,
    f.bootstrap_room,
    f.bootstrap_host,
    f.gateway_tokens,
    f.tokens_source,
    f.prefill_node,
    f.prefill_rid,
    f.prefill_tokens,
    f.prefill_finish_type,
    f.decode_node,
    f.decode_rid,
    f.decode_tokens,
    f.decode_finish_type,
    f.decode_finish_status_code,
    f.decode_ts AS decode_start_ts,
    f.decode_finished_ts,
    f.rejected_input_tokens,
    f.rejected_limit_tokens,
    f.transfer_failure,
    concat_ws('; ',
        'gateway=' || COALESCE(eg.rel, 'file' || CAST(f.gw_file_id AS VARCHAR)) || ':' || CAST(f.gw_line_no AS VARCHAR),
        'rejection=' || COALESCE(er.rel, 'file' || CAST(f.rej_file AS VARCHAR)) || ':' || CAST(f.rej_line AS VARCHAR),
        'prefill=' || concat_ws(',',
            COALESCE(epr.rel, 'file' || CAST(f.pr_file AS VARCHAR)) || ':' || CAST(f.pr_line AS VARCHAR),
            COALESCE(epf.rel, 'file' || CAST(f.pf_file AS VARCHAR)) || ':' || CAST(f.pf_line AS VARCHAR)),
        'decode=' || concat_ws(',',
            COALESCE(edr.rel, 'file' || CAST(f.dr_file AS VARCHAR)) || ':' || CAST(f.dr_line AS VARCHAR),
            COALESCE(edf.rel, 'file' || CAST(f.df_file AS VARCHAR)) || ':' || CAST(f.df_line AS VARCHAR)),
        'transfer_failure=' || COALESCE(ex.rel, 'file' || CAST(f.x_file AS VARCHAR)) || ':' || CAST(f.x_line AS VARCHAR)
    ) AS evidence
FROM refd f
LEFT JOIN evidence_paths eg ON eg.file_id = f.gw_file_id
LEFT JOIN evidence_paths er ON er.file_id = f.rej_file
LEFT JOIN evidence_paths epr ON epr.file_id = f.pr_file
LEFT JOIN evidence_paths epf ON epf.file_id = f.pf_file
LEFT JOIN evidence_paths edr ON edr.file_id = f.dr_file
LEFT JOIN evidence_paths edf ON edf.file_id = f.df_file
LEFT JOIN evidence_paths ex ON ex.file_id = f.x_file
