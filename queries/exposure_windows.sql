-- exposure_windows: per node the periods it ran exposed (pool < context), plus the fleet window.
-- param $node VARCHAR: only this node's windows (NULL: all; the fleet row always spans all nodes)
-- param $start TIMESTAMP: fleet window start override, e.g. for a gateway-only case (NULL: from the logs)
-- param $end TIMESTAMP: fleet window end override (NULL: from the logs)
-- param $limit_tokens BIGINT: fleet admission limit override (NULL: smallest limit of the exposed starts)
-- columns: scope, node, role, window_start, window_end, window_open, admission_limit, context_len
-- columns: max_total_num_tokens, n_starts, n_rejections, first_rejection_seen, last_rejection_seen, source
--
-- scope = 'node': a node's exposed start periods with the same admission limit that overlap or
-- follow each other without a gap (a restart with the same configuration, a restarted pod, or
-- concurrent replicas of one logical node: start_periods, one series per pod) merged into one
-- window [window_start, window_end): from the first exposed start to the end of the last merged
-- period (the next start that is not exposed, or its pod's last log line, window_open = true).
-- A healthy start between two exposed ones (or another limit) makes two windows; a healthy pod
-- running beside an exposed one never ends the exposed one's window.
-- scope = 'fleet': the hull of all node windows (window_start = earliest, window_end = latest), its
-- admission limit = the smallest of the exposed starts; source says whether it came from the logs,
-- from the given $start/$end/$limit_tokens, or both.
-- n_rejections / first_rejection_seen / last_rejection_seen: the scheduler input_length rejections
-- (over-limit prompts that took the placeholder path) logged inside the window by a pod while it
-- ran one of the window's exposed periods.
WITH
exposed AS (
    SELECT j.*,
           -- the latest end of the node's earlier exposed periods with this limit
           max(j.period_end) OVER (PARTITION BY j.node, j.admission_limit
                                   ORDER BY j.period_start, j.start_seq, j.pod
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS earlier_end
    FROM start_periods j
    WHERE j.verdict = 'exposed'
),
islands AS (
    SELECT e.*,
           SUM(CASE WHEN e.earlier_end IS NOT NULL AND e.period_start <= e.earlier_end THEN 0 ELSE 1 END)
               OVER (PARTITION BY e.node, e.admission_limit ORDER BY e.period_start, e.start_seq, e.pod
                     ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS island
    FROM exposed e
),
node_windows AS (
    SELECT node, admission_limit, island,
           min(role) AS role,
           min(ts_start) AS window_start,
           max(period_end) AS window_end,
           -- an open merged period leaves the window open
           max(CASE WHEN period_open THEN 1 ELSE 0 END) = 1 AS window_open,
           min(context_len) AS context_len,
           min(max_total_num_tokens) AS max_total_num_tokens,
           count(*) AS n_starts
    FROM islands
    GROUP BY node, admission_limit, island
),
window_rejections AS (
    SELECT e.node, e.admission_limit, e.island,
           count(r.ts) AS n_rejections, min(r.ts) AS first_rejection_seen, max(r.ts) AS last_rejection_seen
    FROM islands e
    JOIN engine_rejections r
      ON r.node = e.node AND r.pod = e.pod AND r.kind = 'input_length'
     AND r.ts >= e.period_start
     AND (r.ts < e.period_end OR (e.period_open AND r.ts <= e.period_end))
    GROUP BY e.node, e.admission_limit, e.island
),
node_rows AS (
    SELECT 'node' AS scope, w.node, w.role, w.window_start, w.window_end, w.window_open,
           w.admission_limit, w.context_len, w.max_total_num_tokens, w.n_starts,
           COALESCE(r.n_rejections, 0) AS n_rejections,
           r.first_rejection_seen,
           r.last_rejection_seen,
           'logs' AS source
    FROM node_windows w
    LEFT JOIN window_rejections r
      ON r.node = w.node AND r.admission_limit = w.admission_limit AND r.island = w.island
),
fleet AS (
    SELECT 'fleet' AS scope,
           CAST(NULL AS VARCHAR(64)) AS node,
           CAST(NULL AS VARCHAR(64)) AS role,
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
