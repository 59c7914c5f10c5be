-- node_activity: per engine node and pod, its first and last line of any kind, and how many lines of each kind were loaded for it.
-- reads: engine_requests, engine_batches, engine_rejections, engine_events, engine_http, engine_other_lines, engine_starts
-- stored as: table
--
-- The pod (the process: a Kubernetes pod, host/unit; = the node when the logs name none) is the unit
-- of a start series: its last line ends its open (last) start period (start_periods), and a pod with
-- lines but no start gets a period of its own. The first line tells whether the pod ran before its
-- first logged start (the logs then do not show the configuration of that time). node_last_seen is
-- the node's last line over its pods. Kept as a table: finding them reads every engine table.
WITH
lines AS (
    SELECT node, pod, min(ts) AS first_ts, max(ts) AS last_ts, count(*) AS n, 'requests' AS what FROM engine_requests GROUP BY node, pod
    UNION ALL SELECT node, pod, min(ts), max(ts), count(*), 'batches' FROM engine_batches GROUP BY node, pod
    UNION ALL SELECT node, pod, min(ts), max(ts), count(*), 'rejections' FROM engine_rejections GROUP BY node, pod
    UNION ALL SELECT node, pod, min(ts), max(ts), count(*), 'events' FROM engine_events GROUP BY node, pod
    UNION ALL SELECT node, pod, min(ts), max(ts), count(*), 'http' FROM engine_http GROUP BY node, pod
    UNION ALL SELECT node, pod, min(ts), max(ts), count(*), 'other' FROM engine_other_lines GROUP BY node, pod
    UNION ALL SELECT node, pod, min(ts_start), max(COALESCE(ts_ready, ts_start)), count(*), 'starts' FROM engine_starts GROUP BY node, pod
)
SELECT node, pod,
       min(first_ts) AS first_ts,
       max(last_ts) AS last_ts,
       CAST(sum(CASE WHEN what = 'requests' THEN n ELSE 0 END) AS BIGINT) AS n_request_records,
       CAST(sum(CASE WHEN what = 'batches' THEN n ELSE 0 END) AS BIGINT) AS n_batch_lines,
       CAST(sum(CASE WHEN what = 'rejections' THEN n ELSE 0 END) AS BIGINT) AS n_rejection_lines,
       CAST(sum(CASE WHEN what = 'events' THEN n ELSE 0 END) AS BIGINT) AS n_event_lines,
       CAST(sum(CASE WHEN what = 'http' THEN n ELSE 0 END) AS BIGINT) AS n_http_lines,
       CAST(sum(CASE WHEN what = 'other' THEN n ELSE 0 END) AS BIGINT) AS n_other_lines,
       CAST(sum(CASE WHEN what = 'starts' THEN n ELSE 0 END) AS BIGINT) AS n_starts
FROM lines
GROUP BY node, pod
