-- affected_requests: the 2xx responses that should have been 400, confirmed or suspected, with evidence.
-- param $limit_tokens BIGINT: admission limit override for the over-limit tests (NULL: the limit of the exposed start in force)
-- param $start TIMESTAMP: only requests at or after this UTC time; with $end, the window for suspected requests (NULL: derived)
-- param $end TIMESTAMP: only requests before this UTC time (NULL: derived)
-- param $node VARCHAR: only requests whose prefill or decode leg ran on this node (NULL: all)
-- columns: request_id, header_request_id, tenant_id, ts, prompt_tokens, status, prefill_node, decode_node
-- columns: admission_limit, confidence, reasons, evidence
-- more columns: decode_rid, decode_start_ts, decode_received_file_id, decode_received_line_no
-- more columns: gateway_file_id, gateway_line_no, rejection_file_id, rejection_line_no
-- more columns: prefill_received_file_id, prefill_received_line_no, prefill_finished_file_id
-- more columns: prefill_finished_line_no, decode_finished_file_id, decode_finished_line_no, ambiguous_match
--
-- The judgement only: the requests, their legs, the gateway record that reported each and the
-- evidence text are derived tables and views (queries/facts/); the candidates are the rows of the
-- requests view whose chain or record may be affected.
-- confirmed: the prefill leg took the placeholder path (a scheduler input_length rejection line for
--   its rid, or prefill prompt_tokens = 1 while the decode leg saw the full prompt) on a node inside
--   an exposed period of the pod that ran it (start_periods verdict 'exposed'), and the client got a 2xx with no in-band
--   error and no KV transfer failure. Without a gateway record (engine-only case) the decode leg
--   must have finished normally (status is then NULL).
-- suspected: a 2xx gateway record (no in-band error) with no engine evidence either way (no chain,
--   no prefill record, or a prefill record on an exposed node without a token count), prompt tokens
--   (gateway, else decode) >= the admission limit, inside the fleet window (any exposed period; or
--   [$start, $end) when both are given). A prefill record with the full prompt, or on a node that
--   was not exposed at the time, clears a request.
-- Not affected: over-limit requests answered 400 (front end) or 5xx (transfer failure), 2xx with an
--   in-band error (see hidden_errors), health checks, duplicate gateway records, prompts below the
--   limit. Placeholder rejections on nodes that were not exposed (the 6-token scheduler margin) are
--   surfaced by pool_audit and post_fix_check, not here.
-- One row per request: the gateway record reporting it (the outermost layer's) and its chain.
-- ambiguous_match: that record and chain were paired by a pick among equally good candidates (or
--   the record matched nothing because an equally good chain went to another record): its tenant
--   may be the wrong one; the candidates are listed by ambiguous_matches.
-- evidence: 'gateway=FILE:LINE; rejection=FILE:LINE; prefill=FILE:LINE[,FILE:LINE]; decode=...'
--   (received and finished lines), file names relative to the common directory of the evidence;
--   the same lines as (file_id, line_no) columns: gateway_*, rejection_*, prefill_received_*,
--   prefill_finished_*, decode_received_*, decode_finished_* (NULL where the chain has no such line).
WITH
exposed AS (
    SELECT node, pod, period_start, period_end, period_open, admission_limit
    FROM start_periods
    WHERE verdict = 'exposed'
),
fleet_limit AS (
    SELECT COALESCE(CAST($limit_tokens AS BIGINT), min(admission_limit)) AS lim FROM exposed
),
candidate_chains AS (
    -- chains that took the placeholder path, or whose prompt is at or over the smallest limit
    -- (DISTINCT: the filter runs before any join, not after one)
    SELECT DISTINCT c.chain_id
    FROM request_chains c CROSS JOIN fleet_limit f
    WHERE c.rejection_line_no IS NOT NULL
       OR (c.prefill_tokens = 1 AND c.decode_tokens > 1)
       OR c.decode_tokens >= f.lim
),
candidate_records AS (
    -- 2xx gateway records of prompts at or over the smallest limit
    SELECT DISTINCT g.record_id
    FROM gateway_top g CROSS JOIN fleet_limit f
    WHERE g.status BETWEEN 200 AND 299 AND g.prompt_tokens >= f.lim
),
candidates AS (
    -- their requests (one key at a time: the requests view is then only probed for those keys)
    SELECT r.*,
           r.engine_mode = 'pd' AND r.prefill_tokens = 1 AND r.decode_tokens > 1 AS placeholder_tokens
    FROM (SELECT * FROM requests WHERE chain_id IN (SELECT chain_id FROM candidate_chains)
          UNION
          SELECT * FROM requests WHERE record_id IN (SELECT record_id FROM candidate_records)) r
),
with_periods AS (
    SELECT c.*,
           COALESCE(c.rejection_line_no IS NOT NULL OR c.placeholder_tokens, false) AS placeholder_path,
           pe.node IS NOT NULL AS prefill_exposed,
           -- the fleet window: inside any exposed period of any node; its limit = the smallest there
           (SELECT min(e.admission_limit) FROM exposed e
            WHERE c.ts >= e.period_start
              AND (c.ts < e.period_end OR (e.period_open AND c.ts <= e.period_end))) AS window_limit,
           pe.admission_limit AS prefill_limit
    FROM candidates c
    LEFT JOIN exposed pe
      ON pe.node = c.prefill_node AND pe.pod = c.prefill_pod
     AND COALESCE(c.rejection_ts, c.prefill_ts) >= pe.period_start
     AND (COALESCE(c.rejection_ts, c.prefill_ts) < pe.period_end
          OR (pe.period_open AND COALESCE(c.rejection_ts, c.prefill_ts) <= pe.period_end))
),
limits AS (
    SELECT w.*, w.window_limit IS NOT NULL AS in_derived_window,
           COALESCE(CAST($limit_tokens AS BIGINT), w.prefill_limit, w.window_limit) AS admission_limit
    FROM with_periods w
),
classified AS (
    SELECT r.*,
           CASE
               WHEN r.placeholder_path AND r.prefill_exposed
                    AND r.in_band_error IS NULL AND r.transfer_failure IS NULL
                    AND ((r.file_id IS NOT NULL AND r.status BETWEEN 200 AND 299)
                         OR (r.file_id IS NULL AND r.decode_finish_type IS NOT NULL
                             AND r.decode_finish_type <> 'abort'))
                   THEN 'confirmed'
               WHEN NOT r.placeholder_path
                    AND r.file_id IS NOT NULL AND r.status BETWEEN 200 AND 299
                    AND r.in_band_error IS NULL AND r.transfer_failure IS NULL
                    AND COALESCE(r.decode_finish_type, '') <> 'abort'
                    -- a prefill record that ran the full prompt, or ran on a node not exposed at
                    -- that time, clears the request
                    AND NOT (r.prefill_rid IS NOT NULL
                             AND (COALESCE(r.prefill_tokens > 1, false) OR NOT r.prefill_exposed))
                    AND COALESCE(r.gateway_tokens, r.decode_tokens) >= r.admission_limit
                    AND (($start IS NOT NULL AND $end IS NOT NULL) OR r.in_derived_window)
                   THEN 'suspected'
           END AS confidence
    FROM limits r
),
affected AS (
    SELECT c.*,
           CASE WHEN c.confidence = 'confirmed'
                THEN COALESCE(c.rejected_input_tokens, CASE WHEN c.decode_tokens > 1 THEN c.decode_tokens END,
                              c.gateway_tokens)
                ELSE COALESCE(c.gateway_tokens, c.decode_tokens) END AS prompt_tokens
    FROM classified c
    WHERE c.confidence IS NOT NULL
      AND ($start IS NULL OR c.ts >= $start)
      AND ($end IS NULL OR c.ts < $end)
      AND ($node IS NULL OR c.prefill_node = $node OR c.decode_node = $node)
)
SELECT
    a.request_id,
    a.header_request_id,
    a.tenant_id,
    a.ts,
    a.prompt_tokens,
    a.status,
    a.prefill_node,
    a.decode_node,
    a.admission_limit,
    a.confidence,
    concat_ws(';',
        CASE WHEN a.rejection_line_no IS NOT NULL THEN 'scheduler_rejection' END,
        CASE WHEN a.placeholder_tokens THEN 'placeholder_prompt_tokens' END,
        CASE WHEN a.confidence = 'confirmed' THEN 'exposed_period' END,
        CASE WHEN a.confidence = 'suspected' THEN
            CASE WHEN a.chain_id IS NULL THEN 'no_engine_record'
                 WHEN a.prefill_rid IS NULL THEN 'no_prefill_record'
                 ELSE 'prefill_record_incomplete' END END,
        CASE WHEN a.prompt_tokens >= a.admission_limit THEN
            CASE WHEN a.confidence = 'confirmed' THEN 'over_limit'
                 WHEN a.gateway_tokens IS NOT NULL THEN 'over_limit_gateway_tokens'
                 ELSE 'over_limit_engine_tokens' END END,
        CASE WHEN a.confidence = 'suspected' AND a.gateway_tokens IS NOT NULL
                  AND a.tokens_source = 'estimated' THEN 'tokens_estimated' END,
        CASE WHEN a.confidence = 'suspected' THEN
            CASE WHEN a.in_derived_window THEN 'in_fleet_window' ELSE 'in_given_window' END END,
        CASE WHEN a.file_id IS NOT NULL THEN 'status_2xx' ELSE 'no_gateway_record_decode_ok' END,
        CASE WHEN COALESCE(a.streamed, a.engine_stream) THEN 'streamed' END,
        CASE WHEN a.file_id IS NOT NULL AND a.chain_id IS NOT NULL THEN 'match_' || a.match_method END,
        CASE WHEN a.match_ambiguous THEN 'ambiguous_match' END
    ) AS reasons,
    a.evidence,
    -- the decode leg (what leak_sources starts from): its rid, start time and Receive line
    a.decode_rid,
    a.decode_start_ts,
    a.decode_received_file_id,
    a.decode_received_line_no,
    -- the rest of the evidence chain as (file_id, line_no) pairs: what 'evidence' names, for
    -- joins (the timeline of forensics export timesketch reads each line's record by them)
    a.file_id AS gateway_file_id,
    a.line_no AS gateway_line_no,
    a.rejection_file_id,
    a.rejection_line_no,
    a.prefill_received_file_id,
    a.prefill_received_line_no,
    a.prefill_finished_file_id,
    a.prefill_finished_line_no,
    a.decode_finished_file_id,
    a.decode_finished_line_no,
    -- the tenant named rests on a gateway-engine match that was not certain (ambiguous_matches)
    a.match_ambiguous AS ambiguous_match
FROM affected a
ORDER BY CASE a.confidence WHEN 'confirmed' THEN 0 ELSE 1 END, a.ts, a.request_id, evidence
