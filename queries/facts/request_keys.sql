-- request_keys: one row per request: the gateway record that reported it (record_id) and the engine chain that served it (chain_id), and how the two were matched.
-- reads: request_chains, chain_matches, match_candidates, gateway_top
-- stored as: table
--
-- Every chain with the gateway record that matched it (chain_matches, the outermost layer's;
-- match_method engine_only and record_id NULL when none did), and every gateway record that
-- matched no chain (match_method none, chain_id NULL). A record folded into a more outer layer's
-- record of the same chain is not a request of its own. match_ambiguous: the record or the chain
-- is a candidate of an ambiguous match (match_candidates.ambiguous, listed by ambiguous_matches):
-- the pairing, or its absence (a record that lost its best chain, a chain no record took), rests on
-- a pick among candidates the evidence does not tell apart.
-- A table of integers: the requests view joins the columns and the evidence text to it, and a
-- question about a few requests finds them here by their keys.
SELECT m.record_id, c.chain_id, COALESCE(m.match_method, 'engine_only') AS match_method,
       m.match_confidence, (ac.chain_id IS NOT NULL OR ar.record_id IS NOT NULL) AS match_ambiguous
FROM request_chains c
LEFT JOIN chain_matches m ON m.chain_id = c.chain_id AND m.outermost
LEFT JOIN (SELECT DISTINCT chain_id FROM match_candidates WHERE ambiguous) ac ON ac.chain_id = c.chain_id
LEFT JOIN (SELECT DISTINCT record_id FROM match_candidates WHERE ambiguous) ar ON ar.record_id = m.record_id
UNION ALL
SELECT g.record_id, CAST(NULL AS BIGINT), 'none', CAST(NULL AS DOUBLE), a.record_id IS NOT NULL
FROM gateway_top g
LEFT JOIN (SELECT DISTINCT record_id FROM match_candidates WHERE ambiguous) a ON a.record_id = g.record_id
WHERE NOT EXISTS (SELECT 1 FROM chain_matches m WHERE m.record_id = g.record_id)
