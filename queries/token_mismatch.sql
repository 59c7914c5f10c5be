-- token_mismatch: requests whose token counts disagree: gateway vs engine, prefill vs decode.
-- param $start TIMESTAMP: only requests at or after this UTC time (NULL: no bound)
-- param $end TIMESTAMP: only requests before this UTC time (NULL: no bound)
-- param $node VARCHAR: only requests whose prefill or decode leg ran on this node (NULL: all)
-- columns: request_id, header_request_id, tenant_id, layer, ts, mismatch, gateway_tokens, tokens_source
-- columns: prefill_node, prefill_rid, prefill_tokens, decode_node, decode_rid, decode_tokens
-- columns: gateway_minus_engine, decode_minus_prefill, bootstrap_room
--
-- Engine counts are the legs' prompt tokens (request_legs: the Finish or metrics record, else the
-- time stats), prefill and decode legs paired as everywhere (request_chains); the gateway record
-- counts only when it matched the chain by a shared id (chain_matches header_id or rid: a time
-- match already requires similar counts, so it proves nothing here). One row per request with a
-- disagreement; mismatch:
--   placeholder        prefill counted 1 prompt token while decode counted more: the scheduler
--                      swapped the prompt for the 1-token placeholder (the incident's bug)
--   prefill_vs_decode  any other difference between the two legs' prompt_tokens
--   gateway_vs_engine  the gateway's prompt_tokens differ from the engine's (decode, else prefill);
--                      gateway counts are provider-reported, the gap is evidence in itself
-- gateway_minus_engine and decode_minus_prefill are signed differences.
WITH
disagreeing AS (
    -- chains whose legs disagree, and chains whose id-matched gateway record counted otherwise
    SELECT chain_id FROM request_chains
    WHERE engine_mode = 'pd' AND prefill_tokens <> decode_tokens
    UNION
    SELECT m.chain_id
    FROM chain_matches m
    JOIN gateway_top g ON g.record_id = m.record_id
    JOIN request_chains c ON c.chain_id = m.chain_id
    WHERE m.outermost AND m.match_method IN ('header_id', 'rid') AND g.prompt_tokens <> c.decode_tokens
),
flagged AS (
    -- a gateway record that matched the chain by time shows no count of its own here
    SELECT r.ts_engine, r.bootstrap_room, r.prefill_node, r.prefill_rid, r.prefill_tokens,
           r.decode_node, r.decode_rid, r.decode_tokens,
           CASE WHEN r.by_id THEN r.request_id END AS request_id,
           CASE WHEN r.by_id THEN r.gateway_header_request_id END AS header_request_id,
           CASE WHEN r.by_id THEN r.tenant_id END AS tenant_id,
           CASE WHEN r.by_id THEN r.layer END AS layer,
           CASE WHEN r.by_id THEN r.ts_start END AS ts_start,
           CASE WHEN r.by_id THEN r.gateway_tokens END AS gateway_tokens,
           CASE WHEN r.by_id THEN r.tokens_source END AS tokens_source,
           r.engine_mode = 'pd' AND r.prefill_tokens = 1 AND r.decode_tokens > 1 AS is_placeholder,
           r.engine_mode = 'pd' AND r.prefill_tokens <> r.decode_tokens
               AND NOT (r.prefill_tokens = 1 AND r.decode_tokens > 1) AS is_pd_diff,
           r.by_id AND r.gateway_tokens <> r.decode_tokens AS is_gw_diff
    FROM (SELECT q.*, q.match_method IN ('header_id', 'rid') AS by_id FROM requests q
          WHERE q.chain_id IN (SELECT chain_id FROM disagreeing)) r
)
SELECT
    r.request_id,
    r.header_request_id,
    r.tenant_id,
    r.layer,
    COALESCE(r.ts_start, r.ts_engine) AS ts,
    concat_ws(';',
        CASE WHEN r.is_placeholder THEN 'placeholder' END,
        CASE WHEN r.is_pd_diff THEN 'prefill_vs_decode' END,
        CASE WHEN r.is_gw_diff THEN 'gateway_vs_engine' END) AS mismatch,
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
