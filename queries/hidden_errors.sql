-- hidden_errors: 2xx responses that carried an error: in-band (SSE/body) errors, KV transfer failures, engine aborts.
-- param $start TIMESTAMP: only requests at or after this UTC time (NULL: no bound)
-- param $end TIMESTAMP: only requests before this UTC time (NULL: no bound)
-- param $node VARCHAR: only requests whose prefill or decode leg ran on this node (NULL: all)
--
-- "An error hidden behind a 200": the status line was committed before the engine failed (streams),
-- or a proxy logged success for a failed call. Reported separately from affected_requests, never
-- mixed in. One row per gateway record (duplicates excluded; outermost layer when several layers
-- logged the request) with status 2xx and at least one of:
--   in_band_error     the gateway saw an error event inside the body/SSE stream (gateway_requests.in_band_error)
--   transfer_failure  a KV transfer failure / KVPoll timeout / bootstrap failure was logged for the
--                     request's bootstrap_room (prefill or decode side)
--   engine_abort      the request's prefill or decode leg finished with finish_reason abort
-- Engine legs are tied to the record by the logged x-request-id or by rid = gateway id; legs of one
-- request by bootstrap_room. kinds lists every finding; detail is the first error text.
WITH
xfer AS (
    SELECT bootstrap_room, min(kind) AS kind, min(message) AS message,
           min(CAST(file_id AS BIGINT) * 10000000000 + line_no) AS ref
    FROM engine_events
    WHERE kind IN ('prefill_transfer_failed', 'decode_transfer_failed', 'kvpoll_timeout',
                   'bootstrap_failed', 'transfer_backend_error')
      AND bootstrap_room IS NOT NULL AND bootstrap_room <> 0
    GROUP BY bootstrap_room
),
aborted AS (
    SELECT DISTINCT node, rid, bootstrap_room FROM engine_requests
    WHERE finish_type = 'abort' AND rid IS NOT NULL
),
cand_rooms AS (
    SELECT bootstrap_room FROM xfer
    UNION
    SELECT bootstrap_room FROM aborted WHERE bootstrap_room IS NOT NULL AND bootstrap_room <> 0
),
legrows AS (
    -- whole requests by bootstrap_room (an integer join); roomless aborted legs by rid
    SELECT e.* FROM engine_requests e JOIN cand_rooms m ON m.bootstrap_room = e.bootstrap_room
    UNION ALL
    SELECT e.* FROM engine_requests e JOIN aborted a ON a.rid = e.rid AND a.node = e.node
    WHERE e.bootstrap_room IS NULL
),
legs AS (
    SELECT e.node, e.rid,
           max(e.bootstrap_room) AS bootstrap_room,
           max(e.header_request_id) AS header_request_id,
           max(CASE WHEN e.finish_type = 'abort' THEN 1 ELSE 0 END) = 1 AS aborted,
           min(CASE WHEN e.finish_type = 'abort' THEN e.finish_message END) AS abort_message,
           min(CASE WHEN e.finish_type = 'abort' THEN CAST(e.file_id AS BIGINT) * 10000000000 + e.line_no END) AS abort_ref
    FROM legrows e
    WHERE e.rid IS NOT NULL
      AND NOT COALESCE(e.is_health_check, false)
      AND substr(e.rid, 1, 13) <> 'HEALTH_CHECK_'
      AND COALESCE(e.bootstrap_host, '') <> '2.2.2.2'
    GROUP BY e.node, e.rid
),
node_roles AS (
    SELECT node, max(role) AS role FROM engine_starts GROUP BY node
),
reqs AS (
    -- one row per request: its legs folded by bootstrap_room (a roomless leg stands alone)
    SELECT COALESCE(CAST(l.bootstrap_room AS VARCHAR), l.node || '|' || l.rid) AS req_key,
           max(l.bootstrap_room) AS bootstrap_room,
           max(l.header_request_id) AS header_request_id,
           max(CASE WHEN nr.role = 'prefill' THEN l.node END) AS prefill_node,
           max(CASE WHEN COALESCE(nr.role, 'decode') <> 'prefill' THEN l.node END) AS decode_node,
           max(CASE WHEN nr.role = 'prefill' THEN l.rid END) AS prefill_rid,
           max(CASE WHEN COALESCE(nr.role, 'decode') <> 'prefill' THEN l.rid END) AS decode_rid,
           max(CASE WHEN l.aborted THEN 1 ELSE 0 END) = 1 AS aborted,
           min(l.abort_message) AS abort_message,
           min(l.abort_ref) AS abort_ref
    FROM legs l LEFT JOIN node_roles nr ON nr.node = l.node
    GROUP BY COALESCE(CAST(l.bootstrap_room AS VARCHAR), l.node || '|' || l.rid)
),
req_ids AS (
    SELECT req_key, header_request_id AS id, 1 AS prio FROM reqs WHERE header_request_id IS NOT NULL
    UNION ALL SELECT req_key, decode_rid, 2 FROM reqs WHERE decode_rid IS NOT NULL
    UNION ALL SELECT req_key, prefill_rid, 2 FROM reqs WHERE prefill_rid IS NOT NULL
),
gw_hits AS (
    -- probe the gateway table with the few request ids (two equi-joins, no OR join)
    SELECT g.file_id, g.line_no, r.req_key, r.prio
    FROM req_ids r JOIN gateway_requests_unique g ON g.request_id = r.id
    WHERE g.status BETWEEN 200 AND 299
    UNION ALL
    SELECT g.file_id, g.line_no, r.req_key, r.prio
    FROM req_ids r JOIN gateway_requests_unique g ON g.header_request_id = r.id
    WHERE g.status BETWEEN 200 AND 299
),
gw_req AS (
    SELECT file_id, line_no, req_key
    FROM (
        SELECT h.*, ROW_NUMBER() OVER (PARTITION BY h.file_id, h.line_no ORDER BY h.prio, h.req_key) AS rn
        FROM gw_hits h
    ) x
    WHERE rn = 1
),
gw AS (
    SELECT g.*, CASE g.layer WHEN 'edge' THEN 1 WHEN 'router' THEN 3 ELSE 2 END AS layer_rank,
           COALESCE(g.header_request_id, g.request_id) AS lid
    FROM gateway_requests_unique g
    WHERE g.status BETWEEN 200 AND 299
      AND (g.in_band_error IS NOT NULL
           OR EXISTS (SELECT 1 FROM gw_req m WHERE m.file_id = g.file_id AND m.line_no = g.line_no))
),
found AS (
    SELECT g.request_id, COALESCE(g.header_request_id, q.header_request_id) AS header_request_id,
           g.tenant_id, g.layer, g.layer_rank, g.lid, g.ts_start AS ts, g.status, g.streamed,
           g.in_band_error, g.file_id, g.line_no,
           q.req_key, q.bootstrap_room, q.prefill_node, q.decode_node, q.aborted, q.abort_message,
           q.abort_ref, x.kind AS xfer_kind, x.message AS xfer_message, x.ref AS xfer_ref
    FROM gw g
    LEFT JOIN gw_req m ON m.file_id = g.file_id AND m.line_no = g.line_no
    LEFT JOIN reqs q ON q.req_key = m.req_key
    LEFT JOIN xfer x ON x.bootstrap_room = q.bootstrap_room
),
top AS (
    -- the same request at several layers: the outermost layer's record
    SELECT f.* FROM found f
    WHERE NOT EXISTS (
        SELECT 1 FROM found o
        WHERE o.layer_rank < f.layer_rank
          AND (o.lid = f.lid OR (o.req_key IS NOT NULL AND o.req_key = f.req_key)))
)
SELECT
    t.request_id,
    t.header_request_id,
    t.tenant_id,
    t.layer,
    t.ts,
    t.status,
    t.streamed,
    concat_ws(';',
        CASE WHEN t.in_band_error IS NOT NULL THEN 'in_band_error' END,
        CASE WHEN t.xfer_kind IS NOT NULL THEN 'transfer_failure' END,
        CASE WHEN t.aborted THEN 'engine_abort' END) AS kinds,
    COALESCE(t.in_band_error, t.xfer_message, t.abort_message, t.xfer_kind) AS detail,
    t.prefill_node,
    t.decode_node,
    t.bootstrap_room,
    concat_ws('; ',
        'gateway=' || COALESCE(eg.rel, 'file' || CAST(t.file_id AS VARCHAR)) || ':' || CAST(t.line_no AS VARCHAR),
        'transfer_failure=' || COALESCE(ex.rel, 'file' || CAST(CAST((t.xfer_ref - t.xfer_ref % 10000000000) / 10000000000 AS INTEGER) AS VARCHAR))
            || ':' || CAST(t.xfer_ref % 10000000000 AS VARCHAR),
        'abort=' || COALESCE(ea.rel, 'file' || CAST(CAST((t.abort_ref - t.abort_ref % 10000000000) / 10000000000 AS INTEGER) AS VARCHAR))
            || ':' || CAST(t.abort_ref % 10000000000 AS VARCHAR)
    ) AS evidence
FROM top t
LEFT JOIN evidence_paths eg ON eg.file_id = t.file_id
LEFT JOIN evidence_paths ex ON ex.file_id = CAST((t.xfer_ref - t.xfer_ref % 10000000000) / 10000000000 AS INTEGER)
LEFT JOIN evidence_paths ea ON ea.file_id = CAST((t.abort_ref - t.abort_ref % 10000000000) / 10000000000 AS INTEGER)
WHERE (t.in_band_error IS NOT NULL OR t.xfer_kind IS NOT NULL OR t.aborted)
  AND ($start IS NULL OR t.ts >= $start)
  AND ($end IS NULL OR t.ts < $end)
  AND ($node IS NULL OR t.prefill_node = $node OR t.decode_node = $node)
ORDER BY t.ts, t.request_id, t.file_id, t.line_no
