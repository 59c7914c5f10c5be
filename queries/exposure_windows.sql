-- exposure_windows: per node the periods it ran exposed (pool < context), plus the fleet window.
-- param $node VARCHAR: only this node's windows (NULL: all; the fleet row always spans all nodes)
-- param $start TIMESTAMP: fleet window start override, e.g. for a gateway-only case (NULL: from the logs)
-- param $end TIMESTAMP: fleet window end override (NULL: from the logs)
-- param $limit_tokens BIGINT: fleet admission limit override (NULL: smallest limit of the exposed starts)
-- columns: scope, node, role, window_start, window_end, window_open, admission_limit, context_len
-- columns: max_total_num_tokens, n_starts, n_rejections, first_rejection_seen, last_rejection_seen, source
--
-- scope = 'node': consecutive exposed starts of one node with the same admission limit merged into
-- one window [window_start, window_end): from the first exposed start to the node's next start that
-- is not exposed (or its last log line, window_open = true).
-- scope = 'fleet': the hull of all node windows (window_start = earliest, window_end = latest), its
-- admission limit = the smallest of the exposed starts; source says whether it came from the logs,
-- from the given $start/$end/$limit_tokens, or both.
-- n_rejections / first_rejection_seen / last_rejection_seen: the scheduler input_length rejections
-- (over-limit prompts that took the placeholder path) actually logged on the node inside the window.
WITH
marked AS (
    SELECT j.*,
           CASE WHEN j.verdict = 'exposed'
                 AND LAG(j.verdict) OVER w = 'exposed'
                 AND LAG(j.admission_limit) OVER w = j.admission_limit
                THEN 0 ELSE 1 END AS new_island
    FROM start_periods j
    WINDOW w AS (PARTITION BY j.node ORDER BY j.ts_start, j.start_seq)
),
islands AS (
    SELECT m.*,
           SUM(m.new_island) OVER (PARTITION BY m.node ORDER BY m.ts_start, m.start_seq
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS island
    FROM marked m
),
node_windows AS (
    SELECT node,
           min(role) AS role,
           min(ts_start) AS window_start,
           max(period_end) AS window_end,
           -- the last merged start decides whether the window is still open
           max(CASE WHEN period_open THEN 1 ELSE 0 END) = 1 AS window_open,
           min(admission_limit) AS admission_limit,
           min(context_len) AS context_len,
           min(max_total_num_tokens) AS max_total_num_tokens,
           count(*) AS n_starts,
           min(start_seq) AS first_start_seq
    FROM islands
    WHERE verdict = 'exposed'
    GROUP BY node, island
),
node_rows AS (
    SELECT 'node' AS scope, w.node, w.role, w.window_start, w.window_end, w.window_open,
           w.admission_limit, w.context_len, w.max_total_num_tokens, w.n_starts,
           count(r.ts) AS n_rejections,
           min(r.ts) AS first_rejection_seen,
           max(r.ts) AS last_rejection_seen,
           'logs' AS source
    FROM node_windows w
    LEFT JOIN engine_rejections r
      ON r.node = w.node AND r.kind = 'input_length'
     AND r.ts >= w.window_start
     AND (r.ts < w.window_end OR (w.window_open AND r.ts <= w.window_end))
    GROUP BY w.node, w.role, w.window_start, w.window_end, w.window_open,
             w.admission_limit, w.context_len, w.max_total_num_tokens, w.n_starts
),
fleet AS (
    SELECT 'fleet' AS scope,
           CAST(NULL AS VARCHAR) AS node,
           CAST(NULL AS VARCHAR) AS role,
           COALESCE(CAST($start AS TIMESTAMP), min(window_start)) AS window_start,
           COALESCE(CAST($end AS TIMESTAMP), max(window_end)) AS window_end,
           CASE WHEN $end IS NOT NULL THEN false
                ELSE max(CASE WHEN window_open THEN 1 ELSE 0 END) = 1 END AS window_open,
           COALESCE(CAST($limit_tokens AS BIGINT), min(admission_limit)) AS admission_limit,
           max(context_len) AS context_len,
           min(max_total_num_tokens) AS max_total_num_tokens,
           CAST(sum(n_starts) AS BIGINT) AS n_starts,
           CAST(sum(n_rejections) AS BIGINT) AS n_rejections,
           min(first_rejection_seen) AS first_rejection_seen,
           max(last_rejection_seen) AS last_rejection_seen,
           CASE
               WHEN $start IS NULL AND $end IS NULL AND $limit_tokens IS NULL THEN 'logs'
               WHEN count(*) = 0 THEN 'given'
               ELSE 'logs+given'
           END AS source
    FROM node_rows
)
SELECT scope, node, role, window_start, window_end, window_open, admission_limit, context_len,
       max_total_num_tokens, n_starts, n_rejections, first_rejection_seen, last_rejection_seen, source
FROM (
    SELECT n.*, 0 AS scope_order FROM node_rows n WHERE $node IS NULL OR n.node = $node
    UNION ALL
    SELECT f.*, 1 AS scope_order FROM fleet f
    WHERE f.window_start IS NOT NULL OR f.window_end IS NOT NULL OR f.admission_limit IS NOT NULL
) u
ORDER BY scope_order, window_start, node
