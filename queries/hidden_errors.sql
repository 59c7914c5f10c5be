-- hidden_errors: 2xx responses that carried an error: in-band (SSE/body) errors, KV transfer failures, engine aborts.
-- param $start TIMESTAMP: only requests at or after this UTC time (NULL: no bound)
-- param $end TIMESTAMP: only requests before this UTC time (NULL: no bound)
-- param $node VARCHAR: only requests whose prefill or decode leg ran on this node (NULL: all)
-- columns: request_id, header_request_id, tenant_id, layer, ts, status, streamed, kinds, detail, prefill_node
-- columns: decode_node, bootstrap_room, evidence
--
-- "An error hidden behind a 200": the status line was committed before the engine failed (streams),
-- or a proxy logged success for a failed call. Reported separately from affected_requests, never
-- mixed in. One row per gateway record reporting a request (gateway_top: duplicates out, the
-- outermost layer's record) with status 2xx and at least one of:
--   in_band_error     the gateway saw an error event inside the body/SSE stream (gateway_requests.in_band_error)
--   transfer_failure  a KV transfer failure / KVPoll timeout / bootstrap failure was logged for the
--                     request's bootstrap_room (prefill or decode side)
--   engine_abort      the request's prefill or decode leg finished with finish_reason abort
-- The record's engine chain is the one it matched (requests, chain_matches). kinds lists every
-- finding; detail is the first error text.
WITH
failed AS (
    -- what may have hidden an error: a failed transfer or an aborted leg, an error in the body
    -- (DISTINCT: the filter runs before any join)
    SELECT DISTINCT chain_id FROM request_chains WHERE transfer_failure IS NOT NULL OR aborted
),
in_band AS (
    SELECT DISTINCT record_id FROM gateway_top WHERE in_band_error IS NOT NULL
),
found AS MATERIALIZED (
    -- their requests (one key at a time: the requests view is then only probed for those keys).
    -- MATERIALIZED: inlined, the outer filters were pushed into the requests view and DuckDB
    -- joined the whole of it (1 M requests: 490 MiB more peak RSS, 300 of it outside its buffer
    -- pool); built on its own it touches the few keys only (+67 MiB), same rows
    SELECT * FROM requests WHERE chain_id IN (SELECT chain_id FROM failed)
    UNION
    SELECT * FROM requests WHERE record_id IN (SELECT record_id FROM in_band)
)
SELECT
    r.request_id,
    r.header_request_id,
    r.tenant_id,
    r.layer,
    r.ts,
    r.status,
    r.streamed,
    concat_ws(';',
        CASE WHEN r.in_band_error IS NOT NULL THEN 'in_band_error' END,
        CASE WHEN r.transfer_failure IS NOT NULL THEN 'transfer_failure' END,
        CASE WHEN r.aborted THEN 'engine_abort' END) AS kinds,
    COALESCE(r.in_band_error, r.transfer_message, r.abort_message, r.transfer_failure) AS detail,
    r.prefill_node,
    r.decode_node,
    r.bootstrap_room,
    concat_ws('; ', r.gateway_evidence, r.transfer_evidence, r.abort_evidence) AS evidence
FROM found r
WHERE r.record_id IS NOT NULL AND r.status BETWEEN 200 AND 299
  AND (r.in_band_error IS NOT NULL OR r.transfer_failure IS NOT NULL OR r.aborted)
  AND ($start IS NULL OR r.ts >= $start)
  AND ($end IS NULL OR r.ts < $end)
  AND ($node IS NULL OR r.prefill_node = $node OR r.decode_node = $node)
ORDER BY r.ts, r.request_id, r.file_id, r.line_no
