-- leak_sources: whose data may have been exposed: requests whose decode finished shortly before an affected request's decode started on the same node.
-- input: affected_requests (the result of queries/affected_requests.sql, provided by the caller as the view affected_requests_result; its parameters limit_tokens, start, end, node select the affected requests)
-- param $window_s BIGINT: look-back in seconds before the affected decode start (default 600)
--
-- For every affected request (affected_requests, confirmed or suspected) whose decode leg is known:
-- each request whose decode 'Finish:' (or metrics record) was logged on the SAME decode node at t_f
-- with t_r - $window_s <= t_f <= t_r, t_r being the affected request's decode 'Receive:' time. Its
-- KV pages were freed shortly before and may be what the placeholder request decoded over.
-- Sources are gateway-visible requests (matched by the x-request-id the decode node logged, or
-- gateway id = decode rid; outermost layer's record); health checks, aborted decodes (front-end
-- 400, transfer failures) and the affected request itself are not sources. same_tenant flags a
-- source of the recipient's own tenant (kept: still a finding, not a cross-tenant one).
-- gap_s = t_r - t_f in seconds. Ordered by affected request time, then source finish time.
WITH RECURSIVE
victims AS (
    SELECT a.request_id, a.tenant_id, a.confidence, a.ts, a.decode_node, a.decode_rid,
           a.decode_start_ts AS decode_ts, CAST(floor(EXTRACT(EPOCH FROM a.decode_start_ts) / 60) AS BIGINT) AS bucket,
           -- (file, line) of the decode Receive line packed into one sortable number
           CAST(a.decode_received_file_id AS BIGINT) * 10000000000 + a.decode_received_line_no AS decode_received_ref
    FROM affected_requests_result a
    WHERE a.decode_node IS NOT NULL AND a.decode_start_ts IS NOT NULL
),
offs (k) AS (
    SELECT 0
    UNION ALL
    -- 15 extra minutes: a finish line without its own timestamp carries an earlier line's time
    SELECT k + 1 FROM offs WHERE k <= CAST($window_s AS BIGINT) / 60 + 16
),
victim_buckets AS (
    SELECT DISTINCT v.decode_node AS node, v.bucket - o.k AS bucket
    FROM victims v CROSS JOIN offs o
),
src_finish AS (
    SELECT e.node, e.rid, min(e.ts) AS ts_finished,
           max(CASE WHEN e.ts_inferred THEN 1 ELSE 0 END) = 1 AS inferred,
           min(CAST(e.file_id AS BIGINT) * 10000000000 + e.line_no) AS ref
    FROM engine_requests e
    JOIN victim_buckets b
      ON b.node = e.node AND b.bucket = CAST(floor(EXTRACT(EPOCH FROM e.ts) / 60) AS BIGINT)
    WHERE e.kind IN ('finished', 'metrics')
      AND e.rid IS NOT NULL
      AND NOT COALESCE(e.is_health_check, false)
      AND substr(e.rid, 1, 13) <> 'HEALTH_CHECK_'
      AND COALESCE(e.bootstrap_room, -1) <> 0
      AND COALESCE(e.bootstrap_host, '') <> '2.2.2.2'
    GROUP BY e.node, e.rid
    HAVING max(CASE WHEN e.finish_type = 'abort' THEN 1 ELSE 0 END) = 0
),
src_legs AS (
    SELECT f.node, f.rid, f.ts_finished, f.inferred, f.ref, max(e.header_request_id) AS header_request_id
    FROM src_finish f
    JOIN engine_requests e ON e.node = f.node AND e.rid = f.rid
    GROUP BY f.node, f.rid, f.ts_finished, f.inferred, f.ref
),
src_ids AS (
    SELECT node, rid, header_request_id AS id, 1 AS prio FROM src_legs WHERE header_request_id IS NOT NULL
    UNION ALL
    SELECT node, rid, rid, 2 FROM src_legs
),
src_hits AS (
    SELECT s.node, s.rid, s.prio, g.file_id, g.line_no
    FROM src_ids s JOIN gateway_requests_unique g ON g.request_id = s.id
    UNION
    SELECT s.node, s.rid, s.prio, g.file_id, g.line_no
    FROM src_ids s JOIN gateway_requests_unique g ON g.header_request_id = s.id
),
src_gw AS (
    SELECT h.node, h.rid, g.request_id, g.header_request_id, g.tenant_id, g.layer,
           g.file_id, g.line_no, g.ts_end,
           ROW_NUMBER() OVER (PARTITION BY h.node, h.rid
                              ORDER BY CASE g.layer WHEN 'edge' THEN 1 WHEN 'router' THEN 3 ELSE 2 END,
                                       -- a redirect the client followed never reached the engine
                                       CASE WHEN g.status BETWEEN 300 AND 399 THEN 1 ELSE 0 END,
                                       h.prio, g.ts_start, g.file_id, g.line_no) AS rn
    FROM src_hits h
    JOIN gateway_requests_unique g ON g.file_id = h.file_id AND g.line_no = h.line_no
),
src AS (
    -- a finish line whose time was inferred (no timestamp of its own) happened at or after that
    -- time: the client's response end (gateway ts_end) is then the better estimate
    SELECT l.*, g.request_id, g.header_request_id AS gw_header_request_id, g.tenant_id, g.layer,
           g.file_id AS gw_file, g.line_no AS gw_line,
           CASE WHEN l.inferred AND g.ts_end > l.ts_finished THEN g.ts_end ELSE l.ts_finished END AS ts_finished_est
    FROM src_legs l
    JOIN src_gw g ON g.node = l.node AND g.rid = l.rid AND g.rn = 1
),
pairs AS (
    SELECT v.*, l.rid AS source_decode_rid, l.ts_finished_est AS source_finished_ts,
           l.inferred AS source_finish_inferred, l.ref AS source_ref,
           l.request_id AS source_request_id, l.gw_header_request_id AS source_header_request_id,
           l.tenant_id AS source_tenant_id, l.layer AS source_layer,
           l.gw_file AS source_gw_file, l.gw_line AS source_gw_line
    FROM victims v
    JOIN src l
      ON l.node = v.decode_node
     AND EXTRACT(EPOCH FROM l.ts_finished_est) >= EXTRACT(EPOCH FROM v.decode_ts) - $window_s
     AND l.ts_finished <= v.decode_ts
     AND l.rid <> COALESCE(v.decode_rid, '')
     -- lines of one file are in time order: a finish logged after the Receive line came later
     AND NOT (l.ref - l.ref % 10000000000 = v.decode_received_ref - v.decode_received_ref % 10000000000
              AND l.ref > v.decode_received_ref)
)
SELECT
    p.request_id,
    p.tenant_id,
    p.confidence,
    p.decode_node,
    p.decode_ts AS decode_start_ts,
    p.source_request_id,
    p.source_header_request_id,
    p.source_tenant_id,
    p.source_layer,
    p.source_decode_rid,
    p.source_finished_ts,
    p.source_finish_inferred,
    EXTRACT(EPOCH FROM p.decode_ts) - EXTRACT(EPOCH FROM p.source_finished_ts) AS gap_s,
    p.source_tenant_id IS NOT DISTINCT FROM p.tenant_id AS same_tenant,
    EXISTS (SELECT 1 FROM affected_requests_result a WHERE a.request_id = p.source_request_id) AS source_is_affected,
    concat_ws('; ',
        'gateway=' || COALESCE(eg.rel, 'file' || CAST(p.source_gw_file AS VARCHAR)) || ':' || CAST(p.source_gw_line AS VARCHAR),
        'decode_finish=' || COALESCE(ed.rel, 'file' || CAST(CAST((p.source_ref - p.source_ref % 10000000000) / 10000000000 AS INTEGER) AS VARCHAR))
            || ':' || CAST(p.source_ref % 10000000000 AS VARCHAR)
    ) AS source_evidence
FROM pairs p
LEFT JOIN evidence_paths eg ON eg.file_id = p.source_gw_file
LEFT JOIN evidence_paths ed ON ed.file_id = CAST((p.source_ref - p.source_ref % 10000000000) / 10000000000 AS INTEGER)
ORDER BY p.ts, p.request_id, p.source_finished_ts, p.source_request_id, p.source_decode_rid
