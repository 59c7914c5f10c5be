-- leak_sources: whose data may have been exposed: requests whose decode finished shortly before an affected request's decode started on the same node.
-- input: affected_requests (the result of queries/affected_requests.sql, provided by the caller as the view affected_requests_result; its parameters limit_tokens, start, end, node select the affected requests)
-- param $window_s BIGINT: look-back in seconds before the affected decode start
-- columns: request_id, tenant_id, confidence, decode_node, decode_start_ts, source_request_id
-- columns: source_header_request_id, source_tenant_id, source_layer, source_decode_rid, source_finished_ts
-- columns: source_finish_inferred, gap_s, same_tenant, source_is_affected, source_evidence
--
-- For every affected request (affected_requests, confirmed or suspected) whose decode leg is known:
-- each request whose decode 'Finish:' (or metrics record) was logged on the SAME decode node at t_f
-- with t_r - $window_s <= t_f <= t_r, t_r being the affected request's decode 'Receive:' time. Its
-- KV pages were freed shortly before and may be what the placeholder request decoded over.
-- Sources are gateway-visible requests: the decode leg's request and the gateway record that
-- reported it (requests: the outermost layer's record); health checks,
-- aborted decodes (front-end 400, transfer failures) and the affected request itself are not sources. same_tenant flags a
-- source of the recipient's own tenant (kept: still a finding, not a cross-tenant one).
-- gap_s = t_r - t_f in seconds. Ordered by affected request time, then source finish time.
WITH RECURSIVE
victims AS (
    SELECT a.request_id, a.tenant_id, a.confidence, a.ts, a.decode_node, a.decode_rid,
           a.decode_start_ts AS decode_ts, a.decode_received_file_id, a.decode_received_line_no,
           CAST(floor(date_diff('second', TIMESTAMP '1970-01-01 00:00:00', a.decode_start_ts) / 60.0) AS BIGINT) AS bucket
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
finished AS (
    -- legs that finished on a victim's decode node near its time (never aborted ones)
    SELECT l.leg_id, l.node, l.rid, l.ts_finished, l.finished_inferred, l.finished_file_id, l.finished_line_no
    FROM request_legs l
    JOIN victim_buckets b
      ON b.node = l.node
     AND b.bucket = CAST(floor(date_diff('second', TIMESTAMP '1970-01-01 00:00:00', l.ts_finished) / 60.0) AS BIGINT)
    WHERE NOT l.aborted
),
reported AS (
    -- the gateway record that reported each such leg's request (one, if several did)
    SELECT f.*, r.request_id, r.gateway_header_request_id AS header_request_id, r.tenant_id,
           r.layer, r.ts_end, r.gateway_evidence,
           ROW_NUMBER() OVER (PARTITION BY f.leg_id ORDER BY r.ts_start, r.file_id, r.line_no) AS rn
    FROM finished f
    JOIN (SELECT * FROM requests
          WHERE chain_id IN (SELECT c.chain_id FROM request_chains c
                             WHERE c.decode_leg_id IN (SELECT leg_id FROM finished))) r
      ON r.decode_leg_id = f.leg_id
    WHERE r.record_id IS NOT NULL
),
sources AS (
    -- a finish line whose time was inferred (no timestamp of its own) happened at or after that
    -- time: the client's response end (gateway ts_end) is then the better estimate
    SELECT r.*,
           CASE WHEN r.finished_inferred AND r.ts_end > r.ts_finished THEN r.ts_end ELSE r.ts_finished END AS ts_finished_est
    FROM reported r
    WHERE r.rn = 1
),
pairs AS (
    SELECT v.*, s.rid AS source_decode_rid, s.ts_finished_est AS source_finished_ts,
           s.finished_inferred AS source_finish_inferred,
           s.finished_file_id AS source_file_id, s.finished_line_no AS source_line_no,
           s.request_id AS source_request_id, s.header_request_id AS source_header_request_id,
           s.tenant_id AS source_tenant_id, s.layer AS source_layer,
           s.gateway_evidence AS source_gateway_evidence
    FROM victims v
    JOIN sources s
      ON s.node = v.decode_node
     AND date_diff('microsecond', s.ts_finished_est, v.decode_ts) <= CAST($window_s AS BIGINT) * 1000000
     AND s.ts_finished <= v.decode_ts
     AND s.rid <> COALESCE(v.decode_rid, '')
     -- lines of one file are in time order: a finish logged after the Receive line came later
     AND NOT (s.finished_file_id = v.decode_received_file_id AND s.finished_line_no > v.decode_received_line_no)
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
    date_diff('microsecond', p.source_finished_ts, p.decode_ts) / 1000000.0 AS gap_s,
    p.source_tenant_id IS NOT DISTINCT FROM p.tenant_id AS same_tenant,
    EXISTS (SELECT 1 FROM affected_requests_result a WHERE a.request_id = p.source_request_id) AS source_is_affected,
    concat_ws('; ', p.source_gateway_evidence,
        'decode_finish=' || COALESCE(ed.rel, 'file' || CAST(p.source_file_id AS VARCHAR(64)))
            || ':' || CAST(p.source_line_no AS VARCHAR(64))) AS source_evidence
FROM pairs p
LEFT JOIN evidence_paths ed ON ed.file_id = p.source_file_id
ORDER BY p.ts, p.request_id, p.source_finished_ts, p.source_request_id, p.source_decode_rid
