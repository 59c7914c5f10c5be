-- timeline: the incident as events in time: every log record of the affected requests' evidence chains, and every node start.
-- input: affected_requests (the result of queries/affected_requests.sql, provided by the caller as the view affected_requests_result; its parameters limit_tokens, start, end, node select the affected requests)
-- columns: ts, event, node, layer, tenant_id, request_id, header_request_id, engine_rid, confidence, status
-- columns: prompt_tokens, detail, evidence, file_id, line_no
--
-- One row per log record (what forensics export timesketch writes, one event each):
--   gateway_request   each gateway record of an affected request: the one its evidence names, and
--                     any other layer's record carrying the same request id or x-request-id
--   router_request    router (smg) request lines carrying the request id or x-request-id
--   scheduler_rejection, prefill_received, prefill_finished, decode_received, decode_finished:
--                     the engine lines of the affected request's evidence chain
--   node_start        every engine start (affected or not): pool, context, admission limit, verdict
-- ts is the record's own time (UTC; for a gateway record its start time). request_id, tenant_id
-- and confidence are the affected request's (NULL for node starts). evidence = FILE:LINE of the
-- record (path relative to the evidence root), file_id / line_no the same as numbers.
-- Ordered by ts, then evidence file and line.
-- MATERIALIZED: the affected set is read by six CTEs below; without it DuckDB runs the whole
-- affected_requests query once per reference (0.2 s -> 3 s on the sample)
WITH a AS MATERIALIZED (
    SELECT * FROM affected_requests_result
),
engine_refs AS (
    SELECT request_id, 'scheduler_rejection' AS event, rejection_file_id AS file_id, rejection_line_no AS line_no FROM a
    UNION ALL SELECT request_id, 'prefill_received', prefill_received_file_id, prefill_received_line_no FROM a
    UNION ALL SELECT request_id, 'prefill_finished', prefill_finished_file_id, prefill_finished_line_no FROM a
    UNION ALL SELECT request_id, 'decode_received', decode_received_file_id, decode_received_line_no FROM a
    UNION ALL SELECT request_id, 'decode_finished', decode_finished_file_id, decode_finished_line_no FROM a
),
engine_events AS (
    SELECT r.request_id, r.event, e.ts, e.node, CAST(NULL AS VARCHAR(64)) AS layer, e.rid AS engine_rid,
           CAST(e.finish_status_code AS INTEGER) AS status, e.prompt_tokens,
           CASE WHEN r.event LIKE '%finished' THEN 'finish ' || COALESCE(e.finish_type, '?')
                    || ', prompt_tokens ' || COALESCE(CAST(e.prompt_tokens AS VARCHAR(64)), '?')
                ELSE 'bootstrap_room ' || COALESCE(CAST(e.bootstrap_room AS VARCHAR(64)), '?') END AS detail,
           e.file_id, e.line_no
    FROM engine_refs r
    JOIN engine_requests e ON e.file_id = r.file_id AND e.line_no = r.line_no
    WHERE r.event <> 'scheduler_rejection'
    UNION ALL
    SELECT r.request_id, r.event, j.ts, j.node, NULL, j.rid, NULL, j.input_tokens,
           'input ' || COALESCE(CAST(j.input_tokens AS VARCHAR(64)), '?') || ' tokens, limit '
               || COALESCE(CAST(j.limit_tokens AS VARCHAR(64)), '?'),
           j.file_id, j.line_no
    FROM engine_refs r
    JOIN engine_rejections j ON j.file_id = r.file_id AND j.line_no = r.line_no
    WHERE r.event = 'scheduler_rejection'
),
ids AS (
    SELECT request_id, request_id AS id FROM a WHERE request_id IS NOT NULL
    UNION
    SELECT request_id, header_request_id FROM a WHERE header_request_id IS NOT NULL
),
gateway_hits AS (
    SELECT a.request_id, a.gateway_file_id AS file_id, a.gateway_line_no AS line_no FROM a
    WHERE a.gateway_file_id IS NOT NULL
    UNION
    SELECT i.request_id, g.file_id, g.line_no FROM ids i JOIN gateway_requests_unique g ON g.request_id = i.id
    UNION
    SELECT i.request_id, g.file_id, g.line_no FROM ids i JOIN gateway_requests_unique g ON g.header_request_id = i.id
),
gateway_events AS (
    SELECT h.request_id, 'gateway_request' AS event, g.ts_start AS ts, CAST(NULL AS VARCHAR(64)) AS node, g.layer,
           CAST(NULL AS VARCHAR(64)) AS engine_rid, g.status, g.prompt_tokens,
           COALESCE(g.method, '?') || ' ' || COALESCE(g.path, '?') || ' -> ' || COALESCE(CAST(g.status AS VARCHAR(64)), '?')
               || COALESCE(', model ' || g.model, '') AS detail,
           g.file_id, g.line_no
    FROM gateway_hits h
    JOIN gateway_requests_unique g ON g.file_id = h.file_id AND g.line_no = h.line_no
),
router_events AS (
    SELECT i.request_id, 'router_request' AS event, r.ts, r.node, 'router' AS layer, CAST(NULL AS VARCHAR(64)),
           r.status, CAST(NULL AS BIGINT),
           COALESCE(r.method, '?') || ' ' || COALESCE(r.uri, '?') || ' -> ' || COALESCE(CAST(r.status AS VARCHAR(64)), '?'),
           r.file_id, r.line_no
    FROM ids i
    JOIN router_requests r ON r.request_id = i.id
),
request_events AS (
    SELECT * FROM engine_events
    UNION ALL SELECT * FROM gateway_events
    UNION ALL SELECT * FROM router_events
),
events AS (
    SELECT x.event, x.ts, x.node, x.layer, a.tenant_id, x.request_id, a.header_request_id, x.engine_rid,
           a.confidence, x.status, x.prompt_tokens, x.detail, x.file_id, x.line_no
    FROM request_events x
    JOIN (SELECT DISTINCT request_id, header_request_id, tenant_id, confidence FROM a) a
      ON a.request_id IS NOT DISTINCT FROM x.request_id
    UNION ALL
    SELECT 'node_start', s.ts_start, s.node, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           'start #' || CAST(s.start_seq AS VARCHAR(64)) || ' (' || COALESCE(s.role, 'role unknown') || '): context '
               || COALESCE(CAST(s.context_len AS VARCHAR(64)), 'unknown') || ', KV pool '
               || COALESCE(CAST(s.max_total_num_tokens AS VARCHAR(64)), 'unknown') || ', admission limit '
               || COALESCE(CAST(s.admission_limit AS VARCHAR(64)), 'unknown') || ', verdict ' || COALESCE(s.verdict, 'unknown'),
           s.file_id, s.line_no
    FROM start_periods s
)
SELECT e.ts, e.event, e.node, e.layer, e.tenant_id, e.request_id, e.header_request_id, e.engine_rid,
       e.confidence, e.status, e.prompt_tokens, e.detail,
       COALESCE(p.rel, 'file' || CAST(e.file_id AS VARCHAR(64))) || ':' || CAST(e.line_no AS VARCHAR(64)) AS evidence,
       e.file_id, e.line_no
FROM events e
LEFT JOIN evidence_paths p ON p.file_id = e.file_id
ORDER BY e.ts NULLS LAST, e.file_id, e.line_no, e.event, e.request_id
