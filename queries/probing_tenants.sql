-- probing_tenants: tenants that sent $threshold or more over-limit prompts within one hour: possible probing of the exposure.
-- param $threshold BIGINT: over-limit prompts within one hour that flag a tenant
-- param $limit_tokens BIGINT: admission limit override for every request (NULL: the limit of the node start in force)
-- columns: tenant_id, n_over_limit, max_in_one_hour, first_ts, last_ts
--
-- Over-limit: the request's prompt tokens (the decode leg's count, else the scheduler rejection
-- line's, else the gateway's) at or above the admission limit of the node start in force when its
-- prefill leg ran (start_periods, whatever the start's verdict: the limit the scheduler applied
-- to that request). A request whose prefill leg is not in the logs is measured against the
-- smallest limit of the prefill-capable starts in force at its time (the tightest node it could
-- have reached). A request with no known limit (no start in force shows pool and context length)
-- is not counted: the heuristic cannot judge it. Requests are those of the requests view (health
-- checks out); records without a tenant are left out.
-- n_over_limit: the tenant's over-limit requests; max_in_one_hour: the most of them within one
-- hour (a window [t - 1 hour, t] ending at one of them); first_ts / last_ts: the first and last.
-- Ordered by max_in_one_hour descending, then tenant_id.
WITH
candidates AS (
    SELECT r.record_id, r.chain_id, r.tenant_id, r.ts, r.prefill_node,
           COALESCE(r.rejection_ts, r.prefill_ts) AS engine_ts,
           COALESCE(r.decode_tokens, r.rejected_input_tokens, r.gateway_tokens) AS tokens
    FROM requests r
    WHERE r.tenant_id IS NOT NULL AND r.ts IS NOT NULL
      AND COALESCE(r.decode_tokens, r.rejected_input_tokens, r.gateway_tokens) IS NOT NULL
),
limits AS (
    -- per request the smallest limit in force: on its own prefill node, else on any prefill node
    SELECT c.record_id, c.chain_id, c.tenant_id, c.ts, c.tokens,
           COALESCE(CAST($limit_tokens AS BIGINT), min(own.admission_limit), min(fleet.admission_limit))
               AS admission_limit
    FROM candidates c
    LEFT JOIN start_periods own
      ON own.node = c.prefill_node
     AND c.engine_ts >= own.period_start
     AND (c.engine_ts < own.period_end OR (own.period_open AND c.engine_ts <= own.period_end))
    LEFT JOIN start_periods fleet
      ON c.prefill_node IS NULL
     AND COALESCE(fleet.role, 'unified') IN ('prefill', 'unified')
     AND c.ts >= fleet.period_start
     AND (c.ts < fleet.period_end OR (fleet.period_open AND c.ts <= fleet.period_end))
    GROUP BY c.record_id, c.chain_id, c.tenant_id, c.ts, c.tokens
),
over_limit AS (
    SELECT l.tenant_id, l.ts,
           count(*) OVER (PARTITION BY l.tenant_id ORDER BY l.ts
                          RANGE BETWEEN INTERVAL 1 HOUR PRECEDING AND CURRENT ROW) AS in_one_hour
    FROM limits l
    WHERE l.tokens >= l.admission_limit
)
SELECT o.tenant_id,
       count(*) AS n_over_limit,
       max(o.in_one_hour) AS max_in_one_hour,
       min(o.ts) AS first_ts,
       max(o.ts) AS last_ts
FROM over_limit o
GROUP BY o.tenant_id
HAVING max(o.in_one_hour) >= $threshold
ORDER BY max_in_one_hour DESC, o.tenant_id
