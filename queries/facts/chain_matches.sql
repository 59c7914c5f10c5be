-- chain_matches: which gateway record (gateway_top) answered which engine chain (request_chains), how they were matched, and how sure the match is.
-- reads: match_candidates
-- stored as: view
--
-- The matches the rule chose (match_candidates, where the rule and its tiers are: header_id, rid,
-- router, time_tokens, time): a record matches at most one chain; outermost says which layer's
-- record reports the request when records of several layers matched one chain. ambiguous: the
-- record had another chain as good as this one, or another record claimed this chain as well
-- (the candidates are listed by the ambiguous_matches query).
SELECT record_id, chain_id, match_method, match_confidence, n_candidates, outermost, ambiguous
FROM match_candidates
WHERE chosen
