-- notifications: the customer notification list: one row per tenant to notify, the notice it needs and the request ids behind it.
-- input: affected_tenants (the recipients: the result of queries/affected_tenants.sql, provided by the caller as the view affected_tenants_result; its parameters limit_tokens, start, end, node select the affected requests)
-- input: leak_sources (the possible sources: the result of queries/leak_sources.sql, provided as the view leak_sources_result, with the same parameters and window_s)
-- columns: tenant_id, notice_type, n_responses_received, n_confirmed, n_suspected
-- columns: n_requests_possibly_exposed, first_ts, last_ts, received_request_ids, exposed_request_ids
--
-- notice_type is 'received-other-data' (the tenant received affected responses: 2xx answers built
-- on another request's KV pages), 'data-possibly-exposed' (a request of theirs finished on the
-- same decode node shortly before an affected response started: their data may be in it), or
-- 'both'. A source pair of the recipient's own tenant is not a cross-tenant exposure and does not
-- make a tenant a source. A NULL tenant_id row (records whose tenant could not be read) is kept: it
-- cannot be sent, but it must not vanish from the count.
-- received_request_ids: the tenant's affected responses (confirmed first, by time);
-- exposed_request_ids: its source requests (sorted); first_ts / last_ts span both.
-- Ordered: recipients first (most responses received first), then possible sources only (most
-- source requests first), then tenant_id.
WITH sources AS (
    SELECT
        s.source_tenant_id AS tenant_id,
        count(DISTINCT s.source_request_id) AS n_requests_possibly_exposed,
        min(s.source_finished_ts) AS first_ts,
        max(s.source_finished_ts) AS last_ts,
        string_agg(DISTINCT s.source_request_id, ' ' ORDER BY s.source_request_id) AS exposed_request_ids
    FROM leak_sources_result s
    WHERE NOT s.same_tenant
    GROUP BY s.source_tenant_id
),
joined AS (
    SELECT
        COALESCE(r.tenant_id, s.tenant_id) AS tenant_id,
        r.n_requests IS NOT NULL AS is_recipient,
        s.n_requests_possibly_exposed IS NOT NULL AS is_source,
        COALESCE(r.n_requests, 0) AS n_responses_received,
        COALESCE(r.n_confirmed, 0) AS n_confirmed,
        COALESCE(r.n_suspected, 0) AS n_suspected,
        COALESCE(s.n_requests_possibly_exposed, 0) AS n_requests_possibly_exposed,
        CASE WHEN r.first_ts IS NULL THEN s.first_ts
             WHEN s.first_ts IS NULL THEN r.first_ts
             ELSE LEAST(r.first_ts, s.first_ts) END AS first_ts,
        CASE WHEN r.last_ts IS NULL THEN s.last_ts
             WHEN s.last_ts IS NULL THEN r.last_ts
             ELSE GREATEST(r.last_ts, s.last_ts) END AS last_ts,
        COALESCE(r.request_ids, '') AS received_request_ids,
        COALESCE(s.exposed_request_ids, '') AS exposed_request_ids
    FROM affected_tenants_result r
    FULL OUTER JOIN sources s ON r.tenant_id IS NOT DISTINCT FROM s.tenant_id
)
SELECT
    tenant_id,
    CASE WHEN is_recipient AND is_source THEN 'both'
         WHEN is_recipient THEN 'received-other-data'
         ELSE 'data-possibly-exposed' END AS notice_type,
    n_responses_received,
    n_confirmed,
    n_suspected,
    n_requests_possibly_exposed,
    first_ts,
    last_ts,
    received_request_ids,
    exposed_request_ids
FROM joined
ORDER BY CASE WHEN is_recipient THEN 0 ELSE 1 END,
         CASE WHEN is_recipient THEN n_responses_received ELSE n_requests_possibly_exposed END DESC,
         tenant_id NULLS LAST
