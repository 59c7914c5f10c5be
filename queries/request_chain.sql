-- request_chain: one row per request: gateway record, prefill leg and decode leg, and how they matched.
-- param $start TIMESTAMP: only requests at or after this UTC time (NULL: no bound)
-- param $end TIMESTAMP: only requests before this UTC time (NULL: no bound)
-- param $node VARCHAR: only requests whose prefill or decode leg ran on this node (NULL: all)
-- param $request_id VARCHAR: only this request: gateway request_id or header id, engine rid (NULL: all)
-- columns: request_id, header_request_id, tenant_id, layer, ts, status, streamed, in_band_error, match_method
-- columns: match_confidence, engine_mode, bootstrap_room, bootstrap_host, gateway_tokens, tokens_source
-- columns: prefill_node, prefill_rid, prefill_tokens, prefill_finish_type, decode_node, decode_rid
-- columns: decode_tokens, decode_finish_type, decode_finish_status_code, decode_start_ts, decode_finished_ts
-- columns: rejected_input_tokens, rejected_limit_tokens, transfer_failure, evidence
-- order: ts, request_id, evidence, bootstrap_room, prefill_rid, decode_rid
--
-- The derived tables hold the parts (queries/facts/): the engine legs (request_legs, health checks
-- excluded), the chains pairing a prefill and a decode leg by bootstrap_room and bootstrap_host
-- (request_chains), the gateway records that report a request (gateway_top: the outermost layer's),
-- how each record matched a chain (chain_matches: header_id, rid, time_tokens, time, with a
-- confidence) and the rows they make (requests, with their evidence text: requests). Each
-- chain is one row, with the record that matched it (engine_only: none did); each record that
-- matched no chain is one row too (match_method none).
-- Rows come in no particular order: this is the full export (one row per request, millions of
-- rows), and sorting it costs more than building it. Order what you keep (the forensics chain
-- command sorts by ts, request_id, evidence).
SELECT
    r.request_id,
    r.header_request_id,
    r.tenant_id,
    r.layer,
    r.ts,
    r.status,
    COALESCE(r.streamed, r.engine_stream) AS streamed,
    r.in_band_error,
    r.match_method,
    r.match_confidence,
    r.engine_mode,
    r.bootstrap_room,
    r.bootstrap_host,
    r.gateway_tokens,
    r.tokens_source,
    r.prefill_node,
    r.prefill_rid,
    r.prefill_tokens,
    r.prefill_finish_type,
    r.decode_node,
    r.decode_rid,
    r.decode_tokens,
    r.decode_finish_type,
    r.decode_finish_status_code,
    r.decode_start_ts,
    r.decode_finished_ts,
    r.rejected_input_tokens,
    r.rejected_limit_tokens,
    r.transfer_failure,
    r.evidence
FROM requests r
WHERE ($start IS NULL OR r.ts >= $start)
  AND ($end IS NULL OR r.ts < $end)
  AND ($node IS NULL OR r.prefill_node = $node OR r.decode_node = $node)
  AND ($request_id IS NULL OR $request_id IN (r.request_id, r.gateway_header_request_id,
                                              r.engine_header_request_id, r.prefill_rid, r.decode_rid))
