-- ambiguous_matches: the gateway records with more than one equally good engine chain, and the chains claimed by several records: every candidate, which one the rule took, and why it is not certain.
-- param $start TIMESTAMP: only records at or after this UTC time (NULL: no bound)
-- param $end TIMESTAMP: only records before this UTC time (NULL: no bound)
-- param $node VARCHAR: only candidates whose prefill or decode leg ran on this node (NULL: all)
-- columns: record_id, request_id, header_request_id, tenant_id, layer, ts, status, gateway_tokens
-- columns: match_method, match_confidence, ambiguity, chain_id, chosen, taken_by, dt_s, n_equal, n_claims
-- columns: ts_engine, engine_tokens, prefill_node, prefill_rid, decode_node, decode_rid, reason, evidence
--
-- The matching rule and what "equally good" means are in queries/facts/match_candidates.sql (and
-- docs/queries.md): the same tier and keys (id priority; token agreement), distances in time less
-- than 1 s apart (engine and router lines log whole seconds). The rule still decides (the nearest
-- candidate, then the lower chain or record id), and every request that rests on such a decision
-- is flagged (requests.match_ambiguous; affected_requests.ambiguous_match): the tenant it names may
-- be the wrong one.
-- One row per (record, candidate chain):
--   ambiguity   several_chains  the record had n_equal chains as good as each other
--               several_records the chain was claimed by n_claims records as well as each other
--   chosen      true: the rule paired this record with this chain
--   taken_by    the record the chain went to (NULL: none took it)
--   dt_s        seconds between the chain's first engine line and the record's start (router
--               tier: the router line's start)
--   reason      the decision in words
-- evidence: the record's and the chain's lines ('gateway=FILE:LINE; prefill=...').
WITH
amb AS (
    SELECT m.*, w.record_id AS taken_by, o.record_id IS NOT NULL AS record_matched
    FROM match_candidates m
    LEFT JOIN (SELECT chain_id, min(record_id) AS record_id FROM match_candidates
               WHERE chosen AND outermost GROUP BY chain_id) w ON w.chain_id = m.chain_id
    LEFT JOIN (SELECT DISTINCT record_id FROM match_candidates WHERE chosen) o ON o.record_id = m.record_id
    WHERE m.ambiguous
)
SELECT
    a.record_id,
    g.request_id,
    g.header_request_id,
    g.tenant_id,
    g.layer,
    g.ts_start AS ts,
    g.status,
    g.prompt_tokens AS gateway_tokens,
    a.match_method,
    a.match_confidence,
    CASE WHEN a.n_equal > 1 THEN 'several_chains' ELSE 'several_records' END AS ambiguity,
    a.chain_id,
    a.chosen,
    a.taken_by,
    CAST(a.dt_us AS DOUBLE) / 1000000 AS dt_s,
    a.n_equal,
    a.n_claims,
    c.ts_engine,
    c.engine_tokens,
    c.prefill_node,
    c.prefill_rid,
    c.decode_node,
    c.decode_rid,
    CASE
        WHEN a.chosen AND a.n_equal > 1 THEN
            'taken: the nearest of ' || CAST(a.n_equal AS VARCHAR(64))
            || ' chains as good as each other for this record (less than 1 s apart)'
        WHEN a.chosen AND a.match_method IN ('header_id', 'rid') THEN
            'taken: ' || CAST(a.n_claims AS VARCHAR(64))
            || ' records of one layer carry this chain''s id: each is reported as this request'
        WHEN a.chosen THEN
            'taken: ' || CAST(a.n_claims AS VARCHAR(64))
            || ' records claim this chain as well as each other (less than 1 s apart); this one is nearest'
        WHEN a.taken_by IS NOT NULL THEN
            'not taken: the chain went to record ' || CAST(a.taken_by AS VARCHAR(64))
            || CASE WHEN a.record_matched THEN '' ELSE '; this record matched no chain' END
        WHEN a.record_matched THEN 'not taken: as good as the chain taken for this record'
        ELSE 'not taken: this record''s best chain went to another record (mutual best match only); '
             || 'this record matched no chain'
    END AS reason,
    concat_ws('; ', g.gateway_evidence, c.engine_evidence) AS evidence
FROM amb a
JOIN record_evidence g ON g.record_id = a.record_id
LEFT JOIN chain_evidence c ON c.chain_id = a.chain_id
WHERE ($start IS NULL OR g.ts_start >= $start)
  AND ($end IS NULL OR g.ts_start < $end)
  AND ($node IS NULL OR c.prefill_node = $node OR c.decode_node = $node)
ORDER BY g.ts_start, a.record_id, a.chosen DESC, a.dt_us, a.chain_id
