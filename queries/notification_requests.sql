-- notification_requests: the requests behind each notice: one row per tenant and request, with its notice type, time and model.
-- input: affected_requests (the received responses: the result of queries/affected_requests.sql, provided by the caller as the view affected_requests_result; its parameters limit_tokens, start, end, node select them)
-- input: leak_sources (the possible sources: the result of queries/leak_sources.sql, provided as the view leak_sources_result, with the same parameters and window_s)
-- columns: tenant_id, notice_type, request_id, header_request_id, ts, model, confidence
--
-- What a per-tenant notification packet lists: for a recipient, each affected response it received
-- ('received-other-data': its time, confidence); for a possible source, each of its requests that
-- finished on the same decode node shortly before an affected response ('data-possibly-exposed':
-- its finish time). Only the tenant's own request ids: never the id or tenant of the other side of
-- a pair. A source pair of the recipient's own tenant is left out (as in notifications). model is
-- the model name the gateway logged for the request (several layers' distinct names joined
-- with ' / '; NULL when no layer logged one).
-- Ordered by tenant_id (NULL last), received before exposed, time, request id.
WITH received AS (
    SELECT a.tenant_id, 'received-other-data' AS notice_type, a.request_id, a.header_request_id,
           a.ts, a.confidence
    FROM affected_requests_result a
),
exposed AS (
    SELECT DISTINCT s.source_tenant_id AS tenant_id, 'data-possibly-exposed' AS notice_type,
           s.source_request_id AS request_id, s.source_header_request_id AS header_request_id,
           s.source_finished_ts AS ts, CAST(NULL AS VARCHAR(64)) AS confidence
    FROM leak_sources_result s
    WHERE NOT s.same_tenant
),
both_sides AS (
    SELECT * FROM received
    UNION ALL
    SELECT * FROM exposed
),
models AS (
    SELECT g.request_id, string_agg(DISTINCT g.model, ' / ' ORDER BY g.model) AS model
    FROM gateway_requests_unique g
    WHERE g.model IS NOT NULL
      AND g.request_id IN (SELECT request_id FROM both_sides)
    GROUP BY g.request_id
)
SELECT b.tenant_id, b.notice_type, b.request_id, b.header_request_id, b.ts, m.model, b.confidence
FROM both_sides b
LEFT JOIN models m ON m.request_id = b.request_id
ORDER BY b.tenant_id NULLS LAST,
         CASE b.notice_type WHEN 'received-other-data' THEN 0 ELSE 1 END,
         b.ts, b.request_id
