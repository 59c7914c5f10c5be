-- match_candidates: how gateway records (gateway_top) meet engine chains (request_chains): the match the rule chose for each record, and every other candidate as good as it (the ambiguous ones).
-- reads: gateway_top, request_chains, router_requests
-- stored as: table
--
-- The matching rule, in order (a record or chain matched by a tier is not offered to the next):
--   header_id    the gateway's request_id or header_request_id equals the x-request-id header the
--                engine logged (SGLANG_LOG_REQUEST_HEADERS)
--   rid          the gateway's id equals an engine rid (a proxy that sets the rid, e.g. LiteLLM:
--                its request_id is the decode rid)
--   router       no id reached the engine, but the router (smg / sgl-router) logged the record's id:
--                the router line with that id (the one with the record's status when the id was
--                retried, else the nearest in time) starting within 30 s of the record gives the
--                request's span at the router, [line time - latency, line time]; the chain whose
--                first engine line falls in it (from 2 s before its start, engine and router lines
--                have whole seconds, to 30 s after it and 1 s after its end) with prompt tokens
--                agreeing (as below), nearest to the router's start, mutual best match only
--   time_tokens  no shared id and no router line: the nearest chain within 30 s of the record's
--                start whose prompt tokens equal the gateway's within 1 % (at least 2 tokens),
--                mutual best match only
--   time         as time_tokens (or router), but one side logged no token count
-- The bootstrap room is not a key here: it pairs the prefill and decode legs into the chain
-- (request_chains), and router lines do not log it.
-- A redirect record (3xx) matches by id only, and keeps its match only when no other record matched
-- the chain (the sample's 308 before the client's second try is a request of its own).
-- For router and time matches a token is at least one byte of request body (request_bytes bounds
-- the engine's tokens). match_confidence: 1.0 an id that matched one chain, 0.7 several (the nearest
-- in time is taken); 0.9 / 0.7 router (one / several candidates); 0.8 / 0.6 time_tokens, 0.5 / 0.3
-- time. n_candidates: how many chains the record could have matched in its tier. When records of
-- several layers matched one chain, the outermost layer's report the request (outermost true); the
-- others were folded into them (outermost false: the same request, logged further in).
-- Ambiguity (never resolved silently): two candidates are equally good when the tier and its
-- keys agree (id priority; token agreement) and their distances in time differ by less than 1 s
-- (the resolution of engine and router lines). n_equal: the record's equally good chains, the
-- chosen one included; n_claims: the records claiming the chain equally well (the outermost
-- chosen ones, and the records whose best chain it was and that lost it by less than 1 s).
-- ambiguous: n_equal > 1 or n_claims > 1. Rows: every record's chosen match (chosen true), its
-- equally good alternatives, and each record's best chain that it did not get (chosen false).
WITH
gw AS (
    -- a redirect (3xx) is answered by the gateway: the request the client sent next is the one that
    -- reached the engine. A 3xx record matches a chain only by an id, and only when no other record
    -- matched that chain (then the gateway's answer to that request was the 3xx)
    SELECT record_id, layer_rank, request_id, header_request_id, ts_start, status, prompt_tokens,
           request_bytes, COALESCE(status BETWEEN 300 AND 399, false) AS redirect,
           date_diff('microsecond', TIMESTAMP '1970-01-01 00:00:00', ts_start) AS start_us
    FROM gateway_top
    WHERE EXISTS (SELECT 1 FROM request_chains)  -- no chain, no candidate: nothing to read (a gateway-only case)
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
    SELECT record_id, layer_rank, ts_start, redirect, request_id AS id FROM gw WHERE request_id IS NOT NULL
    UNION ALL
    SELECT record_id, layer_rank, ts_start, redirect, header_request_id FROM gw
    WHERE header_request_id IS NOT NULL AND (request_id IS NULL OR header_request_id <> request_id)
),
id_pairs AS (
    SELECT g.record_id, c.chain_id, g.redirect, g.layer_rank, min(c.prio) AS prio,
           min(abs(date_diff('microsecond', g.ts_start, c.ts_engine))) AS dt_us
    FROM gw_ids g JOIN chain_ids c ON c.id = g.id
    GROUP BY g.record_id, c.chain_id, g.redirect, g.layer_rank
),
id_ranked AS (
    -- one sort per record (id_order): the rule's order, the count, and the first candidate's keys (the band of
    -- the equally good ones below is measured from them)
    SELECT m.*,
           count(*) OVER (PARTITION BY m.record_id) AS n_cand,
           ROW_NUMBER() OVER id_order AS rn,
           first_value(m.prio) OVER id_order AS best_key,
           first_value(m.dt_us) OVER id_order AS best_dt_us
    FROM id_pairs m
    WINDOW id_order AS (PARTITION BY m.record_id ORDER BY m.prio, m.dt_us, m.chain_id)
),
gw_free AS (
    SELECT g.record_id, g.layer_rank, g.start_us, g.status, g.prompt_tokens, g.request_bytes
    FROM gw g
    WHERE NOT g.redirect AND NOT EXISTS (SELECT 1 FROM id_pairs m WHERE m.record_id = g.record_id)
),
chain_free AS (
    SELECT c.chain_id, c.engine_tokens, c.eng_us, CAST(floor(c.eng_us / 30000000.0) AS BIGINT) AS bucket
    FROM (SELECT chain_id, engine_tokens,
                 date_diff('microsecond', TIMESTAMP '1970-01-01 00:00:00', ts_engine) AS eng_us
          FROM request_chains) c
    WHERE NOT EXISTS (SELECT 1 FROM id_pairs m WHERE m.chain_id = c.chain_id AND NOT m.redirect)
),
router_lines AS (
    -- a router line whose own time was cut off (ts_inferred) gives no span
    SELECT request_id, status, file_id, line_no,
           date_diff('microsecond', TIMESTAMP '1970-01-01 00:00:00', ts) AS end_us,
           date_diff('microsecond', TIMESTAMP '1970-01-01 00:00:00', ts) - latency_us AS begin_us
    FROM router_requests
    WHERE request_id IS NOT NULL AND ts IS NOT NULL AND latency_us IS NOT NULL
      AND NOT COALESCE(ts_inferred, false)
),
gw_router AS (
    -- the router line of a free record: its id, starting within 30 s of the record; a retried id:
    -- the line with the record's status, else the nearest
    SELECT x.record_id, x.begin_us, x.end_us
    FROM (
        SELECT g.record_id, r.begin_us, r.end_us,
               ROW_NUMBER() OVER (PARTITION BY g.record_id
                                  ORDER BY CASE WHEN r.status = g.status THEN 0 ELSE 1 END,
                                           abs(r.begin_us - g.start_us), r.file_id, r.line_no) AS rn
        FROM gw_free g
        JOIN gw_ids i ON i.record_id = g.record_id
        JOIN router_lines r ON r.request_id = i.id
        WHERE abs(r.begin_us - g.start_us) <= 30000000
    ) x
    WHERE x.rn = 1
),
probes AS (
    -- where a free record is looked for: its router span (tier 1), else its own start (tier 2)
    SELECT g.record_id, g.layer_rank, 1 AS tier, r.begin_us AS ref_us, r.begin_us - 2000000 AS lo_us,
           LEAST(r.end_us + 1000000, r.begin_us + 30000000) AS hi_us, g.prompt_tokens, g.request_bytes
    FROM gw_free g JOIN gw_router r ON r.record_id = g.record_id
    UNION ALL
    SELECT g.record_id, g.layer_rank, 2, g.start_us, g.start_us - 30000000, g.start_us + 30000000,
           g.prompt_tokens, g.request_bytes
    FROM gw_free g
),
time_cand AS (
    SELECT p.record_id, p.layer_rank, c.chain_id, p.tier,
           abs(c.eng_us - p.ref_us) AS dt_us,
           CASE WHEN p.prompt_tokens IS NOT NULL AND c.engine_tokens IS NOT NULL THEN 1 ELSE 0 END AS tok
    FROM probes p
    CROSS JOIN (VALUES (-1), (0), (1)) o (k)
    JOIN chain_free c ON c.bucket = CAST(floor(p.ref_us / 30000000.0) AS BIGINT) + o.k
    WHERE c.eng_us >= p.lo_us AND c.eng_us <= p.hi_us
      AND (p.prompt_tokens IS NULL OR c.engine_tokens IS NULL OR abs(p.prompt_tokens - c.engine_tokens) <= GREATEST(2, p.prompt_tokens / 100))
      AND (p.request_bytes IS NULL OR c.engine_tokens IS NULL OR c.engine_tokens <= p.request_bytes)
),
time_tiered AS (
    -- a record with a router span is matched in that tier only (its own start is then not used)
    SELECT t.* FROM time_cand t
    LEFT JOIN gw_router r ON r.record_id = t.record_id
    WHERE t.tier = 1 OR r.record_id IS NULL
),
time_ranked AS (
    -- one sort per record (as id_ranked) and one per chain (the mutual best match)
    SELECT t.*,
           count(*) OVER (PARTITION BY t.record_id) AS n_cand,
           ROW_NUMBER() OVER record_order AS rn_g,
           first_value(t.tier) OVER record_order AS best_tier,
           first_value(t.tok) OVER record_order AS best_key,
           first_value(t.dt_us) OVER record_order AS best_dt_us,
           ROW_NUMBER() OVER (PARTITION BY t.chain_id ORDER BY t.tier, t.tok DESC, t.dt_us, t.record_id) AS rn_c
    FROM time_tiered t
    WINDOW record_order AS (PARTITION BY t.record_id ORDER BY t.tier, t.tok DESC, t.dt_us, t.chain_id)
),
banded AS (
    -- every candidate with its tier's keys (id tiers: tier 0, key = priority; router / time: tier 1, 2,
    -- key = token agreement): each record's best candidate, and the others as good as it (same tier
    -- and key, < 1 s apart). A record's candidates are all of one kind (a record with an id match is
    -- not offered to router / time), so each branch bands its own records
    SELECT record_id, chain_id, redirect, layer_rank, 0 AS tier, prio AS key, dt_us, n_cand,
           CASE WHEN prio = 1 THEN 'header_id' ELSE 'rid' END AS match_method,
           CAST(CASE WHEN n_cand = 1 THEN 1.0 ELSE 0.7 END AS DOUBLE) AS match_confidence,
           rn = 1 AS picked, rn AS rn_g
    FROM id_ranked
    WHERE rn = 1 OR (prio = best_key AND dt_us < best_dt_us + 1000000)
    UNION ALL
    SELECT record_id, chain_id, false, layer_rank, tier, tok, dt_us, n_cand,
           CASE WHEN tier = 1 THEN 'router' WHEN tok = 1 THEN 'time_tokens' ELSE 'time' END,
           CAST(CASE WHEN tier = 1 THEN CASE WHEN n_cand = 1 THEN 0.9 ELSE 0.7 END
                     WHEN tok = 1 THEN CASE WHEN n_cand = 1 THEN 0.8 ELSE 0.6 END
                     ELSE CASE WHEN n_cand = 1 THEN 0.5 ELSE 0.3 END END AS DOUBLE),
           rn_g = 1 AND rn_c = 1, rn_g
    FROM time_ranked
    WHERE rn_g = 1 OR (tier = best_tier AND tok = best_key AND dt_us < best_dt_us + 1000000)
),
chain_best AS (
    -- per chain: a redirect's match gives way to any other record's match of the same chain (direct:
    -- a non-redirect record picked it), so the chosen records' outermost layer is the direct picks'
    -- when there are any, else the redirects'; the chain's winner in a router / time tier (its keys:
    -- who lost it by less than 1 s; such a pick is never a redirect, so it is chosen). Aggregates
    -- joined back by key, not windows: no sort of every candidate row (it spilled at 1 M requests)
    SELECT chain_id,
           max(CASE WHEN picked AND NOT redirect THEN 1 ELSE 0 END) AS direct,
           min(CASE WHEN picked AND NOT redirect THEN layer_rank END) AS direct_rank,
           min(CASE WHEN picked THEN layer_rank END) AS picked_rank,
           max(CASE WHEN picked AND tier > 0 THEN tier END) AS win_tier,
           max(CASE WHEN picked AND tier > 0 THEN key END) AS win_key,
           max(CASE WHEN picked AND tier > 0 THEN dt_us END) AS win_dt_us
    FROM banded
    GROUP BY chain_id
),
record_equal AS (
    SELECT record_id, count(*) AS n_equal FROM banded GROUP BY record_id
),
claims AS (
    SELECT r.*,
           COALESCE(r.chosen AND r.layer_rank = r.best_rank, false) AS outermost,
           (r.chosen AND r.layer_rank = r.best_rank)
           OR (NOT r.chosen AND r.rn_g = 1 AND r.tier = r.win_tier AND r.key = r.win_key
               AND abs(r.dt_us - r.win_dt_us) < 1000000) AS claim
    FROM (SELECT b.*, k.win_tier, k.win_key, k.win_dt_us, e.n_equal,
                 b.picked AND (NOT b.redirect OR k.direct = 0) AS chosen,
                 COALESCE(k.direct_rank, k.picked_rank) AS best_rank
          FROM banded b
          JOIN chain_best k ON k.chain_id = b.chain_id
          JOIN record_equal e ON e.record_id = b.record_id) r
),
chain_claims AS (
    SELECT chain_id, sum(CASE WHEN claim THEN 1 ELSE 0 END) AS n_claims FROM claims GROUP BY chain_id
)
SELECT c.record_id, c.chain_id, c.match_method, c.match_confidence, c.n_cand AS n_candidates, c.outermost,
       c.chosen, c.dt_us, c.n_equal, n.n_claims, c.n_equal > 1 OR n.n_claims > 1 AS ambiguous
FROM claims c
JOIN chain_claims n ON n.chain_id = c.chain_id
