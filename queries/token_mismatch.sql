-- token_mismatch: requests whose token counts disagree: gateway vs engine, prefill vs decode.
-- param $start TIMESTAMP: only requests at or after this UTC time (NULL: no bound)
-- param $end TIMESTAMP: only requests before this UTC time (NULL: no bound)
-- param $node VARCHAR: only requests whose prefill or decode leg ran on this node (NULL: all)
--
-- Engine counts are the prompt_tokens of the legs' Finish records (health checks excluded);
-- prefill and decode legs pair by bootstrap_room; gateway records match by shared id only
-- (x-request-id logged by the engine, or gateway id = engine rid; a time match already requires
-- similar counts, so it proves nothing here; the outermost layer's record). Narrow joins only, so
-- it stays cheap on millions of requests. One row per request with a disagreement; mismatch:
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
fin AS (
    -- one narrow row per finished leg
    SELECT e.node, e.rid, e.bootstrap_room, e.prompt_tokens, e.ts,
           COALESCE(nr.role, e.stats_type, 'unknown') AS role
    FROM engine_requests e
    LEFT JOIN node_roles nr ON nr.node = e.node
    WHERE e.kind = 'finished' AND e.prompt_tokens IS NOT NULL AND e.rid IS NOT NULL
      AND NOT COALESCE(e.is_health_check, false)
      AND substr(e.rid, 1, 13) <> 'HEALTH_CHECK_'
      AND COALESCE(e.bootstrap_room, -1) <> 0
      AND COALESCE(e.bootstrap_host, '') <> '2.2.2.2'
),
pd AS (
    SELECT d.node AS decode_node, d.rid AS decode_rid, d.prompt_tokens AS decode_tokens,
           p.node AS prefill_node, p.rid AS prefill_rid, p.prompt_tokens AS prefill_tokens,
           d.bootstrap_room, COALESCE(LEAST(p.ts, d.ts), d.ts) AS ts_engine
    FROM fin p
    JOIN fin d ON d.bootstrap_room = p.bootstrap_room
    WHERE p.role = 'prefill' AND d.role = 'decode' AND p.prompt_tokens <> d.prompt_tokens
),
gwt AS (
    SELECT g.request_id, g.header_request_id, g.prompt_tokens, g.file_id, g.line_no
    FROM gateway_requests_unique g
    WHERE g.prompt_tokens IS NOT NULL
),
hdr AS (
    -- the x-request-id each leg logged (Receive lines)
    SELECT e.node, e.rid, e.header_request_id FROM engine_requests e
    WHERE e.kind = 'received' AND e.header_request_id IS NOT NULL
),
gw_leg AS (
    -- gateway records with a token count, tied to the decode (or unified) leg that served them
    SELECT g.file_id, g.line_no, g.prompt_tokens AS gateway_tokens, f.node, f.rid,
           f.prompt_tokens AS engine_tokens, f.bootstrap_room, f.ts
    FROM gwt g JOIN fin f ON f.rid = g.request_id
    WHERE f.role <> 'prefill'
    UNION
    SELECT g.file_id, g.line_no, g.prompt_tokens, f.node, f.rid, f.prompt_tokens, f.bootstrap_room, f.ts
    FROM gwt g
    JOIN (
        -- only the Receive lines whose header a token-counting gateway record carries
        SELECT e.node, e.rid, e.header_request_id FROM engine_requests e
        WHERE e.kind = 'received'
          AND e.header_request_id IN (SELECT header_request_id FROM gwt WHERE header_request_id IS NOT NULL)
    ) h ON h.header_request_id = g.header_request_id
    JOIN fin f ON f.node = h.node AND f.rid = h.rid
    WHERE f.role <> 'prefill'
),
gw_mis AS (
    SELECT * FROM gw_leg WHERE gateway_tokens <> engine_tokens
),
cand AS (
    -- every request with a disagreement, keyed by its decode leg
    SELECT decode_node AS node, decode_rid AS rid FROM pd
    UNION
    SELECT node, rid FROM gw_mis
),
cand_full AS (
    SELECT c.node AS decode_node, c.rid AS decode_rid,
           COALESCE(p.bootstrap_room, m.bootstrap_room) AS bootstrap_room,
           p.prefill_node, p.prefill_rid, p.prefill_tokens,
           COALESCE(p.decode_tokens, m.engine_tokens) AS decode_tokens,
           COALESCE(p.ts_engine, m.ts) AS ts_engine,
           m.file_id AS m_file_id, m.line_no AS m_line_no
    FROM cand c
    LEFT JOIN pd p ON p.decode_node = c.node AND p.decode_rid = c.rid
    LEFT JOIN (SELECT * FROM (SELECT g.*, ROW_NUMBER() OVER (PARTITION BY node, rid ORDER BY file_id, line_no) AS rn
                              FROM gw_mis g) x WHERE rn = 1) m
      ON m.node = c.node AND m.rid = c.rid
),
cand_pl AS (
    -- the prefill leg of gateway mismatches (same bootstrap_room), when not known yet
    SELECT c.decode_node, c.decode_rid, min(f.node) AS prefill_node, min(f.rid) AS prefill_rid,
           min(f.prompt_tokens) AS prefill_tokens
    FROM cand_full c JOIN fin f ON f.bootstrap_room = c.bootstrap_room AND f.role = 'prefill'
    WHERE c.prefill_rid IS NULL
    GROUP BY c.decode_node, c.decode_rid
),
cand_ids AS (
    SELECT c.decode_node, c.decode_rid, c.decode_rid AS id, 2 AS prio FROM cand_full c
    UNION ALL
    SELECT c.decode_node, c.decode_rid, h.header_request_id, 1
    FROM cand_full c JOIN hdr h ON h.node = c.decode_node AND h.rid = c.decode_rid
),
cand_gw AS (
    SELECT decode_node, decode_rid, file_id, line_no
    FROM (
        SELECT i.decode_node, i.decode_rid, g.file_id, g.line_no,
               ROW_NUMBER() OVER (PARTITION BY i.decode_node, i.decode_rid
                                  ORDER BY CASE g.layer WHEN 'edge' THEN 1 WHEN 'router' THEN 3 ELSE 2 END,
                                           -- a redirect the client followed never reached the engine
                                           CASE WHEN g.status BETWEEN 300 AND 399 THEN 1 ELSE 0 END,
                                           i.prio, g.ts_start, g.file_id, g.line_no) AS rn
        FROM cand_ids i
        JOIN (
            SELECT i2.id, g2.* FROM (SELECT DISTINCT id FROM cand_ids) i2
            JOIN gateway_requests_unique g2 ON g2.request_id = i2.id
            UNION ALL
            SELECT i2.id, g2.* FROM (SELECT DISTINCT id FROM cand_ids) i2
            JOIN gateway_requests_unique g2 ON g2.header_request_id = i2.id
        ) g ON g.id = i.id
    ) x
    WHERE rn = 1
),
rows0 AS (
    SELECT c.decode_node, c.decode_rid, c.bootstrap_room, c.ts_engine, c.decode_tokens,
           COALESCE(c.prefill_node, pl.prefill_node) AS prefill_node,
           COALESCE(c.prefill_rid, pl.prefill_rid) AS prefill_rid,
           COALESCE(c.prefill_tokens, pl.prefill_tokens) AS prefill_tokens,
           g.request_id, g.header_request_id, g.tenant_id, g.layer, g.ts_start,
           g.prompt_tokens AS gateway_tokens, g.tokens_source
    FROM cand_full c
    LEFT JOIN cand_pl pl ON pl.decode_node = c.decode_node AND pl.decode_rid = c.decode_rid
    LEFT JOIN cand_gw cg ON cg.decode_node = c.decode_node AND cg.decode_rid = c.decode_rid
    LEFT JOIN gateway_requests_unique g ON g.file_id = cg.file_id AND g.line_no = cg.line_no
),
flagged AS (
    SELECT r.*,
           CASE WHEN r.prefill_tokens = 1 AND r.decode_tokens > 1 THEN 1 ELSE 0 END AS is_placeholder,
           CASE WHEN r.prefill_tokens <> r.decode_tokens AND NOT (r.prefill_tokens = 1 AND r.decode_tokens > 1)
                THEN 1 ELSE 0 END AS is_pd_diff,
           CASE WHEN r.gateway_tokens <> r.decode_tokens THEN 1 ELSE 0 END AS is_gw_diff
    FROM rows0 r
)
SELECT
    r.request_id,
    r.header_request_id,
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
    r.gateway_tokens - r.decode_tokens AS gateway_minus_engine,
    r.decode_tokens - r.prefill_tokens AS decode_minus_prefill,
    r.bootstrap_room
FROM flagged r
WHERE ($start IS NULL OR COALESCE(r.ts_start, r.ts_engine) >= $start)
  AND ($end IS NULL OR COALESCE(r.ts_start, r.ts_engine) < $end)
  AND ($node IS NULL OR r.prefill_node = $node OR r.decode_node = $node)
ORDER BY ts, r.request_id, r.prefill_rid, r.decode_rid
