-- requests: one row per request: the gateway record that reported it, the engine chain that served it, how the two were matched, the evidence.
-- reads: request_keys, chain_evidence, record_evidence
-- stored as: view
--
-- The rows a responder thinks in (request_keys): every chain with the gateway record that matched
-- it (match_method engine_only when none did), and every gateway record that matched no chain
-- (match_method none); match_ambiguous when that pairing rests on an ambiguous match. The columns of the gateway record
-- (gateway_tokens is its prompt_tokens, gateway_header_request_id its header id) and of the chain
-- (request_chains; engine_header_request_id the x-request-id the engine logged); header_request_id
-- is the gateway's, else the engine's; ts the gateway's start, else the engine's.
-- evidence: the record's and the chain's evidence text ('gateway=FILE:LINE; rejection=...').
-- A view: a question about a few requests selects them by key (WHERE chain_id IN (...) or
-- record_id IN (...)): only those rows are then joined and their text built.
SELECT r.record_id, g.file_id, g.line_no, r.chain_id, r.match_method, r.match_confidence, r.match_ambiguous,
       g.request_id, g.header_request_id AS gateway_header_request_id,
       COALESCE(g.header_request_id, c.header_request_id) AS header_request_id,
       g.tenant_id, g.model, g.layer, g.layer_rank, g.ts_start, g.ts_end, g.status, g.streamed,
       g.in_band_error, g.prompt_tokens AS gateway_tokens, g.tokens_source, g.request_bytes,
       COALESCE(g.ts_start, c.ts_engine) AS ts,
       c.engine_mode, c.prefill_leg_id, c.decode_leg_id, c.bootstrap_room, c.bootstrap_host,
       c.header_request_id AS engine_header_request_id,
       c.prefill_node, c.prefill_pod, c.prefill_rid, c.prefill_tokens, c.prefill_ts, c.prefill_finish_type,
       c.prefill_received_file_id, c.prefill_received_line_no,
       c.prefill_finished_file_id, c.prefill_finished_line_no,
       c.decode_node, c.decode_pod, c.decode_rid, c.decode_tokens, c.decode_start_ts, c.decode_finished_ts,
       c.decode_finished_inferred, c.decode_finish_type, c.decode_finish_status_code,
       c.decode_received_file_id, c.decode_received_line_no,
       c.decode_finished_file_id, c.decode_finished_line_no,
       c.ts_engine, c.engine_tokens, c.engine_stream, c.aborted, c.abort_message,
       c.abort_file_id, c.abort_line_no,
       c.rejection_ts, c.rejected_input_tokens, c.rejected_limit_tokens,
       c.rejection_file_id, c.rejection_line_no,
       c.transfer_failure, c.transfer_message, c.transfer_file_id, c.transfer_line_no,
       g.gateway_evidence, c.rejection_evidence, c.prefill_evidence, c.decode_evidence,
       c.transfer_evidence, c.abort_evidence, c.engine_evidence,
       concat_ws('; ', g.gateway_evidence, c.engine_evidence) AS evidence
FROM request_keys r
LEFT JOIN record_evidence g ON g.record_id = r.record_id
LEFT JOIN chain_evidence c ON c.chain_id = r.chain_id
