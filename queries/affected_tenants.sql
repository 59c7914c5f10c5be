-- affected_tenants: per tenant, the affected responses it received (confirmed / suspected), first and last time.
-- input: affected_requests (the result of queries/affected_requests.sql, provided by the caller as the view affected_requests_result)
-- columns: tenant_id, n_requests, n_confirmed, n_suspected, first_ts, last_ts
-- more columns: request_ids
--
-- The recipients of question 4: the tenants of affected_requests (its rows, with the caller's
-- parameters), one row per tenant (NULL tenant: records whose tenant could not be read). n_requests =
-- n_confirmed + n_suspected; request_ids lists the gateway ids (confirmed first, by time).
-- Ordered by n_requests descending, then tenant_id.
SELECT
    e.tenant_id,
    count(*) AS n_requests,
    -- COUNT of a CASE: a BIGINT (a SUM of integers is HUGEINT, a float in pandas)
    count(CASE WHEN e.confidence = 'confirmed' THEN 1 END) AS n_confirmed,
    count(CASE WHEN e.confidence = 'suspected' THEN 1 END) AS n_suspected,
    min(e.ts) AS first_ts,
    max(e.ts) AS last_ts,
    string_agg(COALESCE(e.request_id, '(no gateway record)'), ' '
               ORDER BY CASE e.confidence WHEN 'confirmed' THEN 0 ELSE 1 END, e.ts, e.request_id) AS request_ids
FROM affected_requests_result e
GROUP BY e.tenant_id
ORDER BY n_requests DESC, e.tenant_id NULLS LAST
