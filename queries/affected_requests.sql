-- affected_requests: the 2xx responses that should have been 400, confirmed or suspected, with evidence.
-- param $limit_tokens BIGINT: admission limit override for the over-limit tests (NULL: the limit of the exposed start in force)
-- param $start TIMESTAMP: only requests at or after this UTC time; with $end, the window for suspected requests (NULL: derived)
-- param $end TIMESTAMP: only requests before this UTC time (NULL: derived)
-- param $node VARCHAR: only requests whose prefill or decode leg ran on this node (NULL: all)
--
-- confirmed: the prefill leg took the placeholder path (a scheduler input_length rejection line for
--   its rid, or prefill prompt_tokens = 1 while the decode leg saw the full prompt) on a node inside
--   an exposed period (pool_audit verdict 'exposed'), and the client got a 2xx with no in-band error
--   and no KV transfer failure. Without a gateway record (engine-only case) the decode leg must have
--   finished normally (status is then NULL).
-- suspected: a 2xx gateway record (no in-band error) with no engine evidence either way (no chain,
--   no prefill record, or a prefill record on an exposed node without a token count), prompt tokens
--   (gateway, else decode) >= the admission limit, inside the fleet window (any exposed period; or
--   [$start, $end) when both are given). A prefill record with the full prompt, or on a node that
--   was not exposed at the time, clears a request.
-- Not affected: over-limit requests answered 400 (front end) or 5xx (transfer failure), 2xx with an
--   in-band error (see hidden_errors), health checks, duplicate gateway records, prompts below the
--   limit. Placeholder rejections on nodes that were not exposed (the 6-token scheduler margin) are
--   surfaced by pool_audit and post_fix_check, not here.
-- One row per logical request: when several gateway layers logged it, the outermost layer's record.
-- evidence: 'gateway=FILE:LINE; rejection=FILE:LINE; prefill=FILE:LINE[,FILE:LINE]; decode=...'
--   (received and finished lines), file names relative to the common directory of the evidence;
--   the same lines as (file_id, line_no) columns: gateway_*, rejection_*, prefill_received_*,
--   prefill_finished_*, decode_received_*, decode_finished_* (NULL where the chain has no such line).
WITH
exposed AS (
    SELECT node, ts_start, next_start, period_end, period_open, limit_tokens
    FROM start_periods
    WHERE verdict = 'exposed'
),
fleet_limit AS (
    SELECT COALESCE(CAST($limit_tokens AS BIGINT), min(limit_tokens)) AS lim FROM exposed
),
node_roles AS (
    SELECT node, max(role) AS role FROM engine_starts GROUP BY node
),
rej AS (
    SELECT node, rid, min(ts) AS ts, max(input_tokens) AS input_tokens,
           max(limit_tokens) AS limit_tokens,
           min(CAST(file_id AS BIGINT) * 10000000000 + line_no) AS ref
    FROM engine_rejections
    WHERE kind = 'input_length' AND rid IS NOT NULL
    GROUP BY node, rid
),
-- candidates, found cheaply before anything is grouped: over-limit 2xx gateway records ...
gw_over AS (
    SELECT g.request_id, g.header_request_id, g.ts_start, g.prompt_tokens, g.request_bytes,
           g.file_id, g.line_no,
           CAST(floor(EXTRACT(EPOCH FROM g.ts_start) / 30) AS BIGINT) AS bucket
    FROM gateway_requests_unique g CROSS JOIN fleet_limit f
    WHERE g.status BETWEEN 200 AND 299 AND g.prompt_tokens >= f.lim
),
gw_over_ids AS (
    SELECT request_id AS id FROM gw_over WHERE request_id IS NOT NULL
    UNION SELECT header_request_id FROM gw_over WHERE header_request_id IS NOT NULL
),
-- ... and engine records: rejected, 1-token prefills, over-limit prompts, or tied to such records.
-- Whole requests are then gathered by bootstrap_room (an integer join, cheap on millions of rows);
-- rid joins only touch records that logged no room.
cand_rows AS (
    SELECT e.node, e.rid, e.bootstrap_room
    FROM engine_requests e JOIN rej r ON r.rid = e.rid AND r.node = e.node
    UNION ALL
    SELECT e.node, e.rid, e.bootstrap_room FROM engine_requests e
    WHERE e.rid IS NOT NULL
      -- a scalar bound (not a join) lets the scan filter the column itself
      AND (e.prompt_tokens = 1 OR e.input_len = 1
           OR e.prompt_tokens >= (SELECT lim FROM fleet_limit)
           OR e.input_len >= (SELECT lim FROM fleet_limit))
      AND (e.kind IN ('finished', 'metrics', 'time_stats'))
    UNION ALL
    SELECT e.node, e.rid, e.bootstrap_room FROM engine_requests e JOIN gw_over_ids i ON i.id = e.header_request_id
    UNION ALL
    SELECT e.node, e.rid, e.bootstrap_room FROM engine_requests e JOIN gw_over_ids i ON i.id = e.rid
    UNION ALL
    -- engine records near an over-limit gateway record, for the time-proximity match
    SELECT e.node, e.rid, e.bootstrap_room
    FROM (SELECT DISTINCT bucket FROM gw_over) b
    CROSS JOIN (VALUES (-1), (0), (1)) o (k)
    JOIN engine_requests e
      ON e.kind = 'received'
     AND CAST(floor(EXTRACT(EPOCH FROM e.ts) / 30) AS BIGINT) = b.bucket + o.k
    WHERE e.rid IS NOT NULL
),
cand_rooms AS (
    SELECT DISTINCT bootstrap_room FROM cand_rows
    WHERE bootstrap_room IS NOT NULL AND bootstrap_room <> 0
),
eng0 AS (
    SELECT r.* FROM engine_requests r JOIN cand_rooms m ON m.bootstrap_room = r.bootstrap_room
),
cand_keys AS (
    SELECT node, rid FROM cand_rows WHERE rid IS NOT NULL
    UNION
    SELECT node, rid FROM eng0 WHERE rid IS NOT NULL
),
eng1 AS (
    SELECT r.* FROM eng0 r
    UNION ALL
    -- records of those legs that logged no bootstrap_room (e.g. metrics records)
    SELECT r.* FROM engine_requests r JOIN cand_keys k ON k.rid = r.rid AND k.node = r.node
    WHERE r.bootstrap_room IS NULL
),
eng AS (
    SELECT r.node, r.rid, r.kind, r.ts, r.ts_inferred, r.bootstrap_host, r.bootstrap_room, r.stream,
           r.header_request_id, r.prompt_tokens, r.input_len, r.finish_type, r.stats_type,
           CAST(r.file_id AS BIGINT) * 10000000000 + r.line_no AS ref
    FROM eng1 r
    WHERE r.rid IS NOT NULL
      AND NOT COALESCE(r.is_health_check, false)
      AND substr(r.rid, 1, 13) <> 'HEALTH_CHECK_'
      AND COALESCE(r.bootstrap_room, -1) <> 0
      AND COALESCE(r.bootstrap_host, '') <> '2.2.2.2'
),
legs AS (
    SELECT e.node, e.rid,
           min(e.ts) AS ts_first,
           min(CASE WHEN e.kind = 'received' THEN e.ts END) AS ts_received,
           max(CASE WHEN e.kind = 'received' AND e.ts_inferred THEN 1 ELSE 0 END) = 1 AS received_inferred,
           max(CASE WHEN e.kind IN ('finished', 'metrics') THEN e.ts END) AS ts_finished,
           max(e.bootstrap_room) AS bootstrap_room,
           max(e.bootstrap_host) AS bootstrap_host,
           max(e.header_request_id) AS header_request_id,
           COALESCE(max(CASE WHEN e.kind IN ('finished', 'metrics') THEN e.prompt_tokens END),
                    max(CASE WHEN e.kind = 'time_stats' THEN e.input_len END)) AS tokens,
           max(CASE WHEN e.kind IN ('finished', 'metrics') THEN e.finish_type END) AS finish_type,
           max(CASE WHEN e.stream THEN 1 ELSE 0 END) = 1 AS stream,
           max(e.stats_type) AS stats_type,
           min(CASE WHEN e.kind = 'received' THEN e.ref END) AS received_ref,
           min(CASE WHEN e.kind IN ('finished', 'metrics') THEN e.ref END) AS finished_ref
    FROM eng e
    GROUP BY e.node, e.rid
),
legs_r AS (
    SELECT l.*, COALESCE(nr.role, l.stats_type, 'unknown') AS role
    FROM legs l LEFT JOIN node_roles nr ON nr.node = l.node
),
pl AS (SELECT * FROM legs_r WHERE role = 'prefill'),
dl AS (SELECT * FROM legs_r WHERE role = 'decode'),
chains0 AS (
    SELECT 'pd' AS engine_mode,
           p.node AS prefill_node, p.rid AS prefill_rid, p.tokens AS prefill_tokens,
           p.ts_first AS prefill_ts, p.received_ref AS prefill_received_ref,
           p.finished_ref AS prefill_finished_ref,
           d.node AS decode_node, d.rid AS decode_rid, d.tokens AS decode_tokens,
           -- a decode Receive line without its own timestamp (0.5.8-0.5.11 request logs) got the
           -- previous line's time: the router sent both legs at once, so the prefill Receive
           -- (when later) is the better estimate of when the decode leg started
           CASE WHEN d.received_inferred AND p.ts_received > d.ts_first THEN p.ts_received
                ELSE d.ts_first END AS decode_ts, d.finish_type AS decode_finish_type,
           d.received_ref AS decode_received_ref, d.finished_ref AS decode_finished_ref,
           COALESCE(p.bootstrap_room, d.bootstrap_room) AS bootstrap_room,
           COALESCE(d.header_request_id, p.header_request_id) AS header_request_id,
           (COALESCE(d.stream, false) OR COALESCE(p.stream, false)) AS engine_stream
    FROM pl p
    FULL OUTER JOIN dl d
      ON p.bootstrap_room = d.bootstrap_room
     AND (p.bootstrap_host IS NULL OR d.bootstrap_host IS NULL OR p.bootstrap_host = d.bootstrap_host)
    UNION ALL
    -- unified (or unknown-role) nodes do prefill and decode in one process: the leg is both
    SELECT CASE WHEN u.role = 'unified' THEN 'unified' ELSE 'unknown' END,
           u.node, u.rid, u.tokens, u.ts_first, u.received_ref, u.finished_ref,
           u.node, u.rid, u.tokens, u.ts_first, u.finish_type, u.received_ref, u.finished_ref,
           u.bootstrap_room, u.header_request_id, u.stream
    FROM legs_r u
    WHERE u.role NOT IN ('prefill', 'decode')
),
chains AS (
    SELECT c.*,
           COALESCE(c.prefill_node || '|' || c.prefill_rid, '') || '>'
               || COALESCE(c.decode_node || '|' || c.decode_rid, '') AS chain_key,
           COALESCE(LEAST(c.prefill_ts, c.decode_ts), c.prefill_ts, c.decode_ts) AS ts_engine,
           COALESCE(c.decode_tokens, c.prefill_tokens) AS engine_tokens,
           CAST(floor(EXTRACT(EPOCH FROM COALESCE(LEAST(c.prefill_ts, c.decode_ts), c.prefill_ts, c.decode_ts)) / 30) AS BIGINT) AS bucket
    FROM chains0 c
),
-- gateway records of the candidate chains: by shared id first ...
chain_ids AS (
    SELECT chain_key, ts_engine, header_request_id AS id, 1 AS prio FROM chains WHERE header_request_id IS NOT NULL
    UNION ALL
    SELECT chain_key, ts_engine, decode_rid, 2 FROM chains WHERE decode_rid IS NOT NULL
    UNION ALL
    SELECT chain_key, ts_engine, prefill_rid, 2 FROM chains
    WHERE prefill_rid IS NOT NULL AND (decode_rid IS NULL OR prefill_rid <> decode_rid)
),
gw_idhit AS (
    -- probe the gateway table with the few candidate ids (never unpivot all of it)
    SELECT g.file_id, g.line_no, g.ts_start, c.chain_key, c.prio, c.ts_engine
    FROM gateway_requests_unique g JOIN chain_ids c ON c.id = g.request_id
    UNION ALL
    SELECT g.file_id, g.line_no, g.ts_start, c.chain_key, c.prio, c.ts_engine
    FROM gateway_requests_unique g JOIN chain_ids c ON c.id = g.header_request_id
    WHERE g.request_id IS NULL OR g.header_request_id <> g.request_id
),
id_pairs AS (
    SELECT file_id, line_no, chain_key, min(prio) AS prio,
           min(abs(EXTRACT(EPOCH FROM ts_engine) - EXTRACT(EPOCH FROM ts_start))) AS dt
    FROM gw_idhit
    GROUP BY file_id, line_no, chain_key
),
id_ranked AS (
    SELECT m.*,
           count(*) OVER (PARTITION BY m.file_id, m.line_no) AS n_cand,
           ROW_NUMBER() OVER (PARTITION BY m.file_id, m.line_no ORDER BY m.prio, m.dt, m.chain_key) AS rn
    FROM id_pairs m
),
-- ... then, for what shares no id, by time proximity and token similarity
ch_free AS (
    SELECT c.* FROM chains c
    WHERE NOT EXISTS (SELECT 1 FROM id_pairs m WHERE m.chain_key = c.chain_key)
),
free_buckets AS (
    SELECT DISTINCT c.bucket + o.k AS bucket
    FROM ch_free c CROSS JOIN (VALUES (-1), (0), (1)) o (k)
),
gw_near AS (
    SELECT g.request_id, g.header_request_id, g.ts_start, g.prompt_tokens, g.request_bytes,
           g.file_id, g.line_no, b.bucket
    FROM gateway_requests_unique g
    JOIN free_buckets b ON b.bucket = CAST(floor(EXTRACT(EPOCH FROM g.ts_start) / 30) AS BIGINT)
    UNION
    SELECT request_id, header_request_id, ts_start, prompt_tokens, request_bytes, file_id, line_no, bucket
    FROM gw_over
),
gw_near_ids AS (
    SELECT file_id, line_no, request_id AS id FROM gw_near WHERE request_id IS NOT NULL
    UNION ALL
    SELECT file_id, line_no, header_request_id FROM gw_near WHERE header_request_id IS NOT NULL
),
gw_near_hit AS (
    -- records whose id some engine request logged: they belong to that request, not to a neighbour
    SELECT i.file_id, i.line_no FROM gw_near_ids i JOIN engine_requests e ON e.header_request_id = i.id
    UNION
    SELECT i.file_id, i.line_no FROM gw_near_ids i JOIN engine_requests e ON e.rid = i.id
),
gw_free AS (
    SELECT g.* FROM gw_near g
    WHERE NOT EXISTS (SELECT 1 FROM gw_near_hit h WHERE h.file_id = g.file_id AND h.line_no = g.line_no)
),
time_cand AS (
    SELECT g.file_id, g.line_no, c.chain_key,
           abs(EXTRACT(EPOCH FROM c.ts_engine) - EXTRACT(EPOCH FROM g.ts_start)) AS dt,
           CASE WHEN g.prompt_tokens IS NOT NULL AND c.engine_tokens IS NOT NULL THEN 1 ELSE 0 END AS tok
    FROM gw_free g
    CROSS JOIN (VALUES (-1), (0), (1)) o (k)
    JOIN ch_free c ON c.bucket = g.bucket + o.k
    WHERE abs(EXTRACT(EPOCH FROM c.ts_engine) - EXTRACT(EPOCH FROM g.ts_start)) <= 30
      AND (g.prompt_tokens IS NULL OR c.engine_tokens IS NULL
           OR abs(g.prompt_tokens - c.engine_tokens) <= GREATEST(2, g.prompt_tokens / 100))
      AND (g.request_bytes IS NULL OR c.engine_tokens IS NULL OR c.engine_tokens <= g.request_bytes)
),
time_ranked AS (
    SELECT t.*,
           count(*) OVER (PARTITION BY t.file_id, t.line_no) AS n_cand,
           ROW_NUMBER() OVER (PARTITION BY t.file_id, t.line_no ORDER BY t.tok DESC, t.dt, t.chain_key) AS rn_g,
           ROW_NUMBER() OVER (PARTITION BY t.chain_key ORDER BY t.tok DESC, t.dt, t.file_id, t.line_no) AS rn_c
    FROM time_cand t
),
matches AS (
    SELECT file_id, line_no, chain_key,
           CASE WHEN prio = 1 THEN 'header_id' ELSE 'rid' END AS match_method
    FROM id_ranked WHERE rn = 1
    UNION ALL
    SELECT file_id, line_no, chain_key, CASE WHEN tok = 1 THEN 'time_tokens' ELSE 'time' END
    FROM time_ranked WHERE rn_g = 1 AND rn_c = 1
),
gw_keys AS (
    SELECT file_id, line_no FROM matches
    UNION
    SELECT file_id, line_no FROM gw_over
),
gw AS (
    SELECT g.request_id, g.header_request_id, g.tenant_id, g.ts_start, g.ts_end, g.status,
           g.prompt_tokens, g.tokens_source, g.request_bytes, g.streamed, g.in_band_error,
           g.layer, g.file_id, g.line_no,
           CASE g.layer WHEN 'edge' THEN 1 WHEN 'router' THEN 3 ELSE 2 END AS layer_rank,
           COALESCE(g.header_request_id, g.request_id) AS lid
    FROM gateway_requests_unique g
    JOIN gw_keys k ON k.file_id = g.file_id AND k.line_no = g.line_no
),
gw_outer AS (
    -- the same logical request logged by a more outer layer (edge < proxy < router)
    SELECT DISTINCT c.file_id, c.line_no
    FROM gw c
    JOIN gateway_requests_unique o
      ON COALESCE(o.header_request_id, o.request_id) = c.lid
     AND CASE o.layer WHEN 'edge' THEN 1 WHEN 'router' THEN 3 ELSE 2 END < c.layer_rank
),
gw_cand_top AS (
    SELECT c.* FROM gw c
    WHERE NOT EXISTS (SELECT 1 FROM gw_outer x WHERE x.file_id = c.file_id AND x.line_no = c.line_no)
),
matches_top AS (
    SELECT m.*
    FROM (
        SELECT m.*, g.layer_rank,
               min(g.layer_rank) OVER (PARTITION BY m.chain_key) AS best_rank
        FROM matches m
        JOIN gw_cand_top g ON g.file_id = m.file_id AND g.line_no = m.line_no
    ) m
    WHERE m.layer_rank = m.best_rank
),
rows0 AS (
    SELECT m.file_id AS gw_file_id, m.line_no AS gw_line_no, m.chain_key, m.match_method
    FROM matches_top m
    UNION ALL
    SELECT o.file_id, o.line_no, CAST(NULL AS VARCHAR), 'none'
    FROM gw_over o
    WHERE EXISTS (SELECT 1 FROM gw_cand_top t WHERE t.file_id = o.file_id AND t.line_no = o.line_no)
      AND NOT EXISTS (SELECT 1 FROM matches m WHERE m.file_id = o.file_id AND m.line_no = o.line_no)
    UNION ALL
    SELECT CAST(NULL AS INTEGER), CAST(NULL AS BIGINT), c.chain_key, 'engine_only'
    FROM chains c
    WHERE NOT EXISTS (SELECT 1 FROM matches m WHERE m.chain_key = c.chain_key)
),
xfer AS (
    SELECT bootstrap_room, min(kind) AS kind
    FROM engine_events
    WHERE kind IN ('prefill_transfer_failed', 'decode_transfer_failed', 'kvpoll_timeout',
                   'bootstrap_failed', 'transfer_backend_error')
      AND bootstrap_room IS NOT NULL AND bootstrap_room <> 0
    GROUP BY bootstrap_room
),
joined AS (
    SELECT r.gw_file_id, r.gw_line_no, r.chain_key, r.match_method,
           g.request_id, g.header_request_id AS gw_header_request_id, g.tenant_id, g.ts_start,
           g.status, g.streamed, g.in_band_error, g.prompt_tokens AS gateway_tokens, g.tokens_source,
           c.engine_mode, c.bootstrap_room, c.header_request_id AS engine_header_request_id,
           c.prefill_node, c.prefill_rid, c.prefill_tokens, c.prefill_ts,
           c.prefill_received_ref, c.prefill_finished_ref,
           c.decode_node, c.decode_rid, c.decode_tokens, c.decode_ts, c.decode_finish_type,
           c.decode_received_ref, c.decode_finished_ref, c.engine_stream,
           COALESCE(g.ts_start, c.ts_engine) AS ts,
           rj.ts AS rej_ts, rj.input_tokens AS rej_tokens, rj.ref AS rej_ref,
           x.kind AS transfer_failure
    FROM rows0 r
    LEFT JOIN gw g ON g.file_id = r.gw_file_id AND g.line_no = r.gw_line_no
    LEFT JOIN chains c ON c.chain_key = r.chain_key
    LEFT JOIN rej rj ON rj.node = c.prefill_node AND rj.rid = c.prefill_rid
    LEFT JOIN xfer x ON x.bootstrap_room = c.bootstrap_room
),
judged_rows AS (
    SELECT j.*,
           pe.limit_tokens AS prefill_exposed_limit,
           pe.node IS NOT NULL AS prefill_exposed,
           fw.lim AS window_limit,
           fw.n_periods IS NOT NULL AS in_derived_window,
           CASE WHEN j.rej_ref IS NOT NULL
                     OR (j.engine_mode = 'pd' AND j.prefill_tokens = 1 AND j.decode_tokens > 1)
                THEN true ELSE false END AS placeholder_path,
           CASE WHEN j.engine_mode = 'pd' AND j.prefill_tokens = 1 AND j.decode_tokens > 1
                THEN true ELSE false END AS placeholder_tokens
    FROM joined j
    LEFT JOIN exposed pe
      ON pe.node = j.prefill_node
     AND COALESCE(j.rej_ts, j.prefill_ts) >= pe.ts_start
     AND (COALESCE(j.rej_ts, j.prefill_ts) < pe.next_start
          OR (pe.next_start IS NULL AND COALESCE(j.rej_ts, j.prefill_ts) <= pe.period_end))
    LEFT JOIN (
        -- the fleet window: inside any exposed period of any node; its limit = the smallest there
        SELECT j2.gw_file_id, j2.gw_line_no, j2.chain_key, min(e.limit_tokens) AS lim, count(*) AS n_periods
        FROM joined j2
        JOIN exposed e
          ON j2.ts >= e.ts_start
         AND (j2.ts < e.next_start OR (e.next_start IS NULL AND j2.ts <= e.period_end))
        GROUP BY j2.gw_file_id, j2.gw_line_no, j2.chain_key
    ) fw
      ON fw.gw_file_id IS NOT DISTINCT FROM j.gw_file_id
     AND fw.gw_line_no IS NOT DISTINCT FROM j.gw_line_no
     AND fw.chain_key IS NOT DISTINCT FROM j.chain_key
),
classified AS (
    SELECT r.*,
           CASE
               WHEN r.placeholder_path AND r.prefill_exposed
                    AND r.in_band_error IS NULL AND r.transfer_failure IS NULL
                    AND ((r.gw_file_id IS NOT NULL AND r.status BETWEEN 200 AND 299)
                         OR (r.gw_file_id IS NULL AND r.decode_finish_type IS NOT NULL
                             AND r.decode_finish_type <> 'abort'))
                   THEN 'confirmed'
               WHEN NOT r.placeholder_path
                    AND r.gw_file_id IS NOT NULL AND r.status BETWEEN 200 AND 299
                    AND r.in_band_error IS NULL AND r.transfer_failure IS NULL
                    AND COALESCE(r.decode_finish_type, '') <> 'abort'
                    -- a prefill record that ran the full prompt, or ran on a node not exposed at
                    -- that time, clears the request
                    AND NOT (r.prefill_rid IS NOT NULL
                             AND (COALESCE(r.prefill_tokens > 1, false) OR NOT r.prefill_exposed))
                    AND COALESCE(r.gateway_tokens, r.decode_tokens)
                        >= COALESCE(CAST($limit_tokens AS BIGINT), r.prefill_exposed_limit, r.window_limit)
                    AND (($start IS NOT NULL AND $end IS NOT NULL) OR r.in_derived_window)
                   THEN 'suspected'
           END AS confidence,
           COALESCE(CAST($limit_tokens AS BIGINT), r.prefill_exposed_limit, r.window_limit) AS admission_limit
    FROM judged_rows r
),
affected AS (
    SELECT c.*,
           CASE WHEN c.confidence = 'confirmed'
                THEN COALESCE(c.rej_tokens, CASE WHEN c.decode_tokens > 1 THEN c.decode_tokens END,
                              c.gateway_tokens)
                ELSE COALESCE(c.gateway_tokens, c.decode_tokens) END AS prompt_tokens
    FROM classified c
    WHERE c.confidence IS NOT NULL
      AND ($start IS NULL OR c.ts >= $start)
      AND ($end IS NULL OR c.ts < $end)
      AND ($node IS NULL OR c.prefill_node = $node OR c.decode_node = $node)
),
refd AS (
    SELECT a.*,
           CAST((a.rej_ref - a.rej_ref % 10000000000) / 10000000000 AS INTEGER) AS rej_file,
           a.rej_ref % 10000000000 AS rej_line,
           CAST((a.prefill_received_ref - a.prefill_received_ref % 10000000000) / 10000000000 AS INTEGER) AS pr_file,
           a.prefill_received_ref % 10000000000 AS pr_line,
           CAST((a.prefill_finished_ref - a.prefill_finished_ref % 10000000000) / 10000000000 AS INTEGER) AS pf_file,
           a.prefill_finished_ref % 10000000000 AS pf_line,
           CAST((a.decode_received_ref - a.decode_received_ref % 10000000000) / 10000000000 AS INTEGER) AS dr_file,
           a.decode_received_ref % 10000000000 AS dr_line,
           CAST((a.decode_finished_ref - a.decode_finished_ref % 10000000000) / 10000000000 AS INTEGER) AS df_file,
           a.decode_finished_ref % 10000000000 AS df_line
    FROM affected a
),
evidenced AS (
    SELECT f.*,
           concat_ws(';',
               CASE WHEN f.rej_ref IS NOT NULL THEN 'scheduler_rejection' END,
               CASE WHEN f.placeholder_tokens THEN 'placeholder_prompt_tokens' END,
               CASE WHEN f.confidence = 'confirmed' THEN 'exposed_period' END,
               CASE WHEN f.confidence = 'suspected' THEN
                   CASE WHEN f.chain_key IS NULL THEN 'no_engine_record'
                        WHEN f.prefill_rid IS NULL THEN 'no_prefill_record'
                        ELSE 'prefill_record_incomplete' END END,
               CASE WHEN f.prompt_tokens >= f.admission_limit THEN
                   CASE WHEN f.confidence = 'confirmed' THEN 'over_limit'
                        WHEN f.gateway_tokens IS NOT NULL THEN 'over_limit_gateway_tokens'
                        ELSE 'over_limit_engine_tokens' END END,
               CASE WHEN f.confidence = 'suspected' AND f.gateway_tokens IS NOT NULL
                         AND f.tokens_source = 'estimated' THEN 'tokens_estimated' END,
               CASE WHEN f.confidence = 'suspected' THEN
                   CASE WHEN f.in_derived_window THEN 'in_fleet_window' ELSE 'in_given_window' END END,
               CASE WHEN f.gw_file_id IS NOT NULL THEN 'status_2xx' ELSE 'no_gateway_record_decode_ok' END,
               CASE WHEN COALESCE(f.streamed, f.engine_stream) THEN 'streamed' END,
               CASE WHEN f.gw_file_id IS NOT NULL AND f.chain_key IS NOT NULL THEN 'match_' || f.match_method END
           ) AS reasons,
           concat_ws('; ',
               'gateway=' || COALESCE(eg.rel, 'file' || CAST(f.gw_file_id AS VARCHAR)) || ':' || CAST(f.gw_line_no AS VARCHAR),
               'rejection=' || COALESCE(er.rel, 'file' || CAST(f.rej_file AS VARCHAR)) || ':' || CAST(f.rej_line AS VARCHAR),
               'prefill=' || concat_ws(',',
                   COALESCE(epr.rel, 'file' || CAST(f.pr_file AS VARCHAR)) || ':' || CAST(f.pr_line AS VARCHAR),
                   COALESCE(epf.rel, 'file' || CAST(f.pf_file AS VARCHAR)) || ':' || CAST(f.pf_line AS VARCHAR)),
               'decode=' || concat_ws(',',
                   COALESCE(edr.rel, 'file' || CAST(f.dr_file AS VARCHAR)) || ':' || CAST(f.dr_line AS VARCHAR),
                   COALESCE(edf.rel, 'file' || CAST(f.df_file AS VARCHAR)) || ':' || CAST(f.df_line AS VARCHAR))
           ) AS evidence
    FROM refd f
    LEFT JOIN evidence_paths eg ON eg.file_id = f.gw_file_id
    LEFT JOIN evidence_paths er ON er.file_id = f.rej_file
    LEFT JOIN evidence_paths epr ON epr.file_id = f.pr_file
    LEFT JOIN evidence_paths epf ON epf.file_id = f.pf_file
    LEFT JOIN evidence_paths edr ON edr.file_id = f.dr_file
    LEFT JOIN evidence_paths edf ON edf.file_id = f.df_file
)
SELECT
    e.request_id,
    COALESCE(e.gw_header_request_id, e.engine_header_request_id) AS header_request_id,
    e.tenant_id,
    e.ts,
    e.prompt_tokens,
    e.status,
    e.prefill_node,
    e.decode_node,
    e.admission_limit,
    e.confidence,
    e.reasons,
    e.evidence,
    -- the decode leg (what leak_sources starts from): its rid, start time and Receive line
    e.decode_rid,
    e.decode_ts AS decode_start_ts,
    e.dr_file AS decode_received_file_id,
    e.dr_line AS decode_received_line_no,
    -- the rest of the evidence chain as (file_id, line_no) pairs: what 'evidence' names, for
    -- joins (the timeline of forensics export timesketch reads each line's record by them)
    e.gw_file_id AS gateway_file_id,
    e.gw_line_no AS gateway_line_no,
    e.rej_file AS rejection_file_id,
    e.rej_line AS rejection_line_no,
    e.pr_file AS prefill_received_file_id,
    e.pr_line AS prefill_received_line_no,
    e.pf_file AS prefill_finished_file_id,
    e.pf_line AS prefill_finished_line_no,
    e.df_file AS decode_finished_file_id,
    e.df_line AS decode_finished_line_no
FROM evidenced e
ORDER BY CASE e.confidence WHEN 'confirmed' THEN 0 ELSE 1 END, e.ts, e.request_id, e.evidence
