-- chain_matches: which gateway record (gateway_top) answered which engine chain (request_chains), how they were matched, and how sure the match is.
-- reads: gateway_top, request_chains
-- stored as: table
--
-- The matching rule, in order (a record or chain matched by a rule is not offered to the next):
--   header_id    the gateway's request_id or header_request_id equals the x-request-id header the
--                engine logged (SGLANG_LOG_REQUEST_HEADERS)
--   rid          the gateway's id equals an engine rid (a proxy that sets the rid, e.g. LiteLLM:
--                its request_id is the decode rid)
--   time_tokens  no shared id: the nearest chain within 30 s whose prompt tokens equal the
--                gateway's within 1 % (at least 2 tokens), mutual best match only
--   time         as time_tokens, but one side logged no token count
-- A redirect record (3xx) matches by id only, and keeps its match only when no other record matched
-- the chain (the sample's 308 before the client's second try is a request of its own).
-- For time matches a token is at least one byte of request body (request_bytes bounds the engine's
-- tokens). match_confidence: 1.0 an id that matched one chain, 0.7 several (the nearest in time is
-- taken); 0.8 / 0.6 time_tokens (one / several candidates), 0.5 / 0.3 time. n_candidates: how many
-- chains the record could have matched. A record (record_id, gateway_top) matches at most one
-- chain. When records of several layers matched one chain, the outermost layer's report the
-- request (outermost true); the others were folded into them (outermost false: the same request,
-- logged further in).
WITH
gw AS (
    -- a redirect (3xx) is answered by the gateway: the request the client sent next is the one that
    -- reached the engine. A 3xx record matches a chain only by an id, and only when no other record
    -- matched that chain (then the gateway's answer to that request was the 3xx)
    SELECT record_id, layer_rank, request_id, header_request_id, ts_start, prompt_tokens,
           request_bytes, COALESCE(status BETWEEN 300 AND 399, false) AS redirect
    FROM gateway_top
),
chain_ids AS (
    -- one pass over the chains: their header id (priority 1) and their rids (priority 2)
    SELECT c.chain_id, c.ts_engine,
           CASE k.n WHEN 1 THEN c.header_request_id WHEN 2 THEN c.decode_rid ELSE c.prefill_rid END AS id,
           CASE k.n WHEN 1 THEN 1 ELSE 2 END AS prio
    FROM request_chains c
    CROSS JOIN (VALUES (1), (2), (3)) k (n)
    WHERE CASE k.n WHEN 1 THEN c.header_request_id IS NOT NULL
                   WHEN 2 THEN c.decode_rid IS NOT NULL
                   ELSE c.prefill_rid IS NOT NULL AND (c.decode_rid IS NULL OR c.prefill_rid <> c.decode_rid) END
),
gw_ids AS (
    SELECT record_id, ts_start, redirect, request_id AS id FROM gw WHERE request_id IS NOT NULL
    UNION ALL
    SELECT record_id, ts_start, redirect, header_request_id FROM gw
    WHERE header_request_id IS NOT NULL AND (request_id IS NULL OR header_request_id <> request_id)
),
id_pairs AS (
    SELECT g.record_id, c.chain_id, g.redirect, min(c.prio) AS prio,
           min(abs(date_diff('microsecond', g.ts_start, c.ts_engine))) AS dt_us
    FROM gw_ids g JOIN chain_ids c ON c.id = g.id
    GROUP BY g.record_id, c.chain_id, g.redirect
),
id_ranked AS (
    SELECT m.*,
           count(*) OVER (PARTITION BY m.record_id) AS n_cand,
           ROW_NUMBER() OVER (PARTITION BY m.record_id ORDER BY m.prio, m.dt_us, m.chain_id) AS rn
    FROM id_pairs m
),
gw_free AS (
    SELECT g.record_id, g.ts_start, g.prompt_tokens, g.request_bytes,
           CAST(floor(date_diff('second', TIMESTAMP '1970-01-01 00:00:00', g.ts_start) / 30.0) AS BIGINT) AS bucket
    FROM gw g
    WHERE NOT g.redirect AND NOT EXISTS (SELECT 1 FROM id_pairs m WHERE m.record_id = g.record_id)
),
chain_free AS (
    SELECT c.chain_id, c.ts_engine, c.engine_tokens,
           CAST(floor(date_diff('second', TIMESTAMP '1970-01-01 00:00:00', c.ts_engine) / 30.0) AS BIGINT) AS bucket
    FROM request_chains c
    WHERE NOT EXISTS (SELECT 1 FROM id_pairs m WHERE m.chain_id = c.chain_id AND NOT m.redirect)
),
time_cand AS (
    SELECT g.record_id, c.chain_id,
           abs(date_diff('microsecond', g.ts_start, c.ts_engine)) AS dt_us,
           CASE WHEN g.prompt_tokens IS NOT NULL AND c.engine_tokens IS NOT NULL THEN 1 ELSE 0 END AS tok
    FROM gw_free g
    CROSS JOIN (VALUES (-1), (0), (1)) o (k)
    JOIN chain_free c ON c.bucket = g.bucket + o.k
    WHERE abs(date_diff('microsecond', g.ts_start, c.ts_engine)) <= 30000000
      AND (g.prompt_tokens IS NULL OR c.engine_tokens IS NULL
           OR abs(g.prompt_tokens - c.engine_tokens) <= GREATEST(2, g.prompt_tokens / 100))
      AND (g.request_bytes IS NULL OR c.engine_tokens IS NULL OR c.engine_tokens <= g.request_bytes)
),
time_ranked AS (
    SELECT t.*,
           count(*) OVER (PARTITION BY t.record_id) AS n_cand,
           ROW_NUMBER() OVER (PARTITION BY t.record_id ORDER BY t.tok DESC, t.dt_us, t.chain_id) AS rn_g,
           ROW_NUMBER() OVER (PARTITION BY t.chain_id ORDER BY t.tok DESC, t.dt_us, t.record_id) AS rn_c
    FROM time_cand t
),
matches AS (
    SELECT record_id, chain_id, redirect,
           CASE WHEN prio = 1 THEN 'header_id' ELSE 'rid' END AS match_method,
           CAST(CASE WHEN n_cand = 1 THEN 1.0 ELSE 0.7 END AS DOUBLE) AS match_confidence,
           n_cand AS n_candidates
    FROM id_ranked WHERE rn = 1
    UNION ALL
    SELECT record_id, chain_id, false,
           CASE WHEN tok = 1 THEN 'time_tokens' ELSE 'time' END,
           CAST(CASE WHEN tok = 1 THEN CASE WHEN n_cand = 1 THEN 0.8 ELSE 0.6 END
                ELSE CASE WHEN n_cand = 1 THEN 0.5 ELSE 0.3 END END AS DOUBLE),
           n_cand
    FROM time_ranked WHERE rn_g = 1 AND rn_c = 1
),
kept AS (
    -- a redirect's match gives way to any other record's match of the same chain
    SELECT m.*
    FROM (SELECT m.*, min(CASE WHEN m.redirect THEN 1 ELSE 0 END) OVER (PARTITION BY m.chain_id) AS only_redirects
          FROM matches m) m
    WHERE NOT m.redirect OR m.only_redirects = 1
),
ranked AS (
    SELECT m.*, g.layer_rank, min(g.layer_rank) OVER (PARTITION BY m.chain_id) AS best_rank
    FROM kept m
    JOIN gateway_top g ON g.record_id = m.record_id
)
SELECT record_id, chain_id, match_method, match_confidence, n_candidates,
       layer_rank = best_rank AS outermost
FROM ranked
