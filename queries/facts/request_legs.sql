-- request_legs: one row per engine leg of a request (a node and its rid): times, tokens, room, host, finish, evidence lines.
-- reads: engine_requests, engine_starts
-- stored as: table
-- uncompressed: rid, header_request_id
--
-- A leg is every engine_requests record of one (node, rid): its Receive and Finish lines, metrics
-- records, time stats. Health checks are never legs: the loader flags them (is_health_check: rid
-- HEALTH_CHECK..., bootstrap_room 0 or bootstrap_host 2.2.2.2; the rule is the loader's alone) and
-- this is the only place that reads the flag. A row without it (NULL: a case written by another
-- tool) is a request: a health check may then show as one, a request is never hidden. Records
-- without a rid belong to no leg.
--   pod           the process that logged it (the start series whose period it falls in)
--   role          the node's role (engine_starts), else the type its time stats name, else 'unknown'
--   tokens        prompt tokens of the Finish (or metrics) record, else the time-stats input_len
--   ts_received   the first Receive record; ts_finished the first Finish or metrics record
--   *_inferred    that line had no timestamp of its own (the loader gave it the previous line's)
--   aborted       a record finished with finish_reason abort (abort_message, abort line, and
--                 the finish_status_code it carried)
-- leg_id identifies the leg: its first record's file_id * 10^10 + line_no (unique, stable).
-- Evidence lines are kept as (file_id, line_no): the first Receive, Finish and abort record.
-- rid and header_request_id are stored uncompressed: nearly unique per leg, they barely compress,
-- and analysing them for compression was ~1.6 of the ~4 CPU-s of writing the table (2 M legs).
WITH
node_roles AS (
    -- a node's role: its starts' (server_args or batch lines), else what its time stats name
    SELECT n.node, COALESCE(s.role, t.role, 'unknown') AS role
    FROM (SELECT DISTINCT node FROM engine_requests) n
    LEFT JOIN (SELECT node, max(role) AS role FROM engine_starts GROUP BY node) s ON s.node = n.node
    LEFT JOIN (SELECT node, max(stats_type) AS role FROM engine_requests
               WHERE kind = 'time_stats' GROUP BY node) t ON t.node = n.node
),
leg_records AS (
    SELECT e.node, e.pod, e.rid, e.kind, e.ts, e.ts_inferred, e.bootstrap_room, e.bootstrap_host,
           e.header_request_id, e.stream, e.prompt_tokens, e.input_len, e.finish_type,
           -- (file, line) packed into one number so min() picks one line, deterministically
           CAST(e.file_id AS BIGINT) * 10000000000 + e.line_no AS ref,
           e.kind IN ('finished', 'metrics') AS is_finish
    FROM engine_requests e
    WHERE e.rid IS NOT NULL AND NOT COALESCE(e.is_health_check, false)
),
legs AS (
    SELECT r.node, r.rid,
           min(r.ref) AS leg_id,
           min(r.pod) AS pod,
           min(r.ts) AS ts_first,
           min(CASE WHEN r.kind = 'received' THEN r.ts END) AS ts_received,
           max(CASE WHEN r.kind = 'received' AND r.ts_inferred THEN 1 ELSE 0 END) = 1 AS received_inferred,
           min(CASE WHEN r.is_finish THEN r.ts END) AS ts_finished,
           max(CASE WHEN r.is_finish AND r.ts_inferred THEN 1 ELSE 0 END) = 1 AS finished_inferred,
           max(r.bootstrap_room) AS bootstrap_room,
           max(r.bootstrap_host) AS bootstrap_host,
           max(r.header_request_id) AS header_request_id,
           COALESCE(max(CASE WHEN r.is_finish THEN r.prompt_tokens END),
                    max(CASE WHEN r.kind = 'time_stats' THEN r.input_len END)) AS tokens,
           max(CASE WHEN r.is_finish THEN r.finish_type END) AS finish_type,
           max(CASE WHEN r.stream THEN 1 ELSE 0 END) = 1 AS stream,
           min(CASE WHEN r.kind = 'received' THEN r.ref END) AS received_ref,
           min(CASE WHEN r.is_finish THEN r.ref END) AS finished_ref
    FROM leg_records r
    GROUP BY r.node, r.rid
),
aborts AS (
    -- the few legs that finished with finish_reason abort (an aggregate of their own: cheap)
    SELECT e.node, e.rid, max(e.finish_status_code) AS finish_status_code,
           min(e.finish_message) AS abort_message,
           min(CAST(e.file_id AS BIGINT) * 10000000000 + e.line_no) AS abort_ref
    FROM engine_requests e
    WHERE e.finish_type = 'abort' AND e.rid IS NOT NULL AND NOT COALESCE(e.is_health_check, false)
    GROUP BY e.node, e.rid
)
SELECT
    l.leg_id,
    l.node,
    l.pod,
    l.rid,
    nr.role,
    l.bootstrap_room,
    l.bootstrap_host,
    l.header_request_id,
    l.ts_first,
    l.ts_received,
    l.received_inferred,
    l.ts_finished,
    l.finished_inferred,
    l.tokens,
    l.finish_type,
    a.finish_status_code,
    a.node IS NOT NULL AS aborted,
    a.abort_message,
    l.stream,
    -- integer division written portably
    CAST((l.received_ref - l.received_ref % 10000000000) / 10000000000 AS INTEGER) AS received_file_id,
    l.received_ref % 10000000000 AS received_line_no,
    CAST((l.finished_ref - l.finished_ref % 10000000000) / 10000000000 AS INTEGER) AS finished_file_id,
    l.finished_ref % 10000000000 AS finished_line_no,
    CAST((a.abort_ref - a.abort_ref % 10000000000) / 10000000000 AS INTEGER) AS abort_file_id,
    a.abort_ref % 10000000000 AS abort_line_no
FROM legs l
JOIN node_roles nr ON nr.node = l.node
LEFT JOIN aborts a ON a.node = l.node AND a.rid = l.rid
