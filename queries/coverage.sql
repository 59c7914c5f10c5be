-- coverage: what the engine logs show, per node and file: lines by kind, the share recognised, the startup facts found, the time span, the wrapper and zone used.
-- param $node VARCHAR: only this node's files (NULL: all)
-- columns: node, file_id, path, format, wrapper, tz, lines_read, lines_joined, rows_loaded, rows_rejected
-- columns: complete, lines_by_kind, lines_recognised, lines_foreign, lines_unknown, share_recognised
-- columns: first_ts, last_ts, n_starts, with_pool, with_context, node_verdict, node_unknown_starts
--
-- One row per engine evidence file (evidence_files kind 'engine'), ordered by node and path:
--   lines_read            physical lines read (evidence_files); lines_joined: partial lines joined
--                         into the line they continue (CRI P chunks, split Docker records)
--   lines_by_kind         'kind=N, ...' from engine_line_kinds (most frequent first); a file
--                         loaded without them (an older case) counts the rows of each engine table
--   lines_recognised      lines of an engine or router kind; lines_foreign: other libraries'
--                         lines; lines_unknown: lines of no known kind; noise lines count in none
--   share_recognised      lines_recognised / (all lines but noise), NULL when the file has none
--   first_ts / last_ts    the time span of its lines that carry a time (UTC)
--   n_starts              node starts whose evidence line is in this file; with_pool /
--                         with_context: how many of them show max_total_num_tokens / context_len
--   wrapper, tz           the collection wrapper stripped and the zone applied (evidence_files)
--   node_verdict          the node's starts judged: 'exposed' if any start ran exposed, else
--                         'unknown' if any start (or the node's whole run: no startup lines) the
--                         logs do not judge, else 'ok'; NULL for a node with no engine start
--                         period (a router log)
--   node_unknown_starts   how many of the node's start periods are unknown
WITH
files AS (
    SELECT f.file_id, f.node, COALESCE(p.rel, f.path) AS path, f.format, f.wrapper, f.tz,
           f.lines_read, f.lines_joined, f.rows_loaded, f.rows_rejected, f.complete
    FROM evidence_files f
    LEFT JOIN evidence_paths p ON p.file_id = f.file_id
    WHERE f.kind = 'engine' AND ($node IS NULL OR f.node = $node)
),
line_kinds AS (
    SELECT file_id, kind, family, n_lines, first_ts, last_ts
    FROM engine_line_kinds
    WHERE file_id IN (SELECT file_id FROM files)
    UNION ALL
    -- a file loaded without a per-kind count (an older case): the rows of each engine table
    SELECT t.file_id, t.kind, t.family, t.n_lines, t.first_ts, t.last_ts
    FROM (
        SELECT file_id, 'request_record' AS kind, 'engine' AS family, count(*) AS n_lines,
               min(ts) AS first_ts, max(ts) AS last_ts FROM engine_requests GROUP BY file_id
        UNION ALL SELECT file_id, 'batch', 'engine', count(*), min(ts), max(ts) FROM engine_batches GROUP BY file_id
        UNION ALL SELECT file_id, 'rejection', 'engine', count(*), min(ts), max(ts) FROM engine_rejections GROUP BY file_id
        UNION ALL SELECT file_id, 'event', 'engine', count(*), min(ts), max(ts) FROM engine_events GROUP BY file_id
        UNION ALL SELECT file_id, 'http', 'engine', count(*), min(ts), max(ts) FROM engine_http GROUP BY file_id
        UNION ALL SELECT file_id, 'router_request', 'router', count(*), min(ts), max(ts) FROM router_requests GROUP BY file_id
        UNION ALL SELECT file_id, COALESCE(kind, 'other'),
                         CASE WHEN kind = 'unrecognised' THEN 'unknown' WHEN kind = 'noise' THEN 'noise' ELSE 'engine' END,
                         count(*), min(ts), max(ts)
                  FROM engine_other_lines GROUP BY file_id, kind
    ) t
    WHERE t.file_id IN (SELECT file_id FROM files)
      AND t.file_id NOT IN (SELECT file_id FROM engine_line_kinds)
),
kinds AS (
    SELECT k.file_id,
           string_agg(k.kind || '=' || CAST(k.n_lines AS VARCHAR(64)), ', ' ORDER BY k.n_lines DESC, k.kind) AS lines_by_kind,
           CAST(sum(CASE WHEN k.family IN ('engine', 'router') THEN k.n_lines ELSE 0 END) AS BIGINT) AS lines_recognised,
           CAST(sum(CASE WHEN k.family = 'foreign' THEN k.n_lines ELSE 0 END) AS BIGINT) AS lines_foreign,
           CAST(sum(CASE WHEN k.family = 'unknown' THEN k.n_lines ELSE 0 END) AS BIGINT) AS lines_unknown,
           CAST(sum(CASE WHEN k.family <> 'noise' THEN k.n_lines ELSE 0 END) AS BIGINT) AS lines_counted,
           min(k.first_ts) AS first_ts,
           max(k.last_ts) AS last_ts
    FROM line_kinds k
    GROUP BY k.file_id
),
starts AS (
    SELECT s.file_id, count(*) AS n_starts,
           count(s.max_total_num_tokens) AS with_pool,
           count(s.context_len) AS with_context
    FROM engine_starts s
    GROUP BY s.file_id
),
nodes AS (
    SELECT node,
           CASE WHEN count(CASE WHEN verdict = 'exposed' THEN 1 END) > 0 THEN 'exposed'
                WHEN count(CASE WHEN verdict = 'unknown' THEN 1 END) > 0 THEN 'unknown'
                ELSE 'ok' END AS node_verdict,
           count(CASE WHEN verdict = 'unknown' THEN 1 END) AS node_unknown_starts
    FROM start_periods
    GROUP BY node
)
SELECT f.node, f.file_id, f.path, f.format, f.wrapper, f.tz,
       f.lines_read, f.lines_joined, f.rows_loaded, f.rows_rejected, f.complete,
       k.lines_by_kind,
       COALESCE(k.lines_recognised, 0) AS lines_recognised,
       COALESCE(k.lines_foreign, 0) AS lines_foreign,
       COALESCE(k.lines_unknown, 0) AS lines_unknown,
       CASE WHEN k.lines_counted > 0 THEN round(CAST(k.lines_recognised AS DOUBLE) / k.lines_counted, 4) END AS share_recognised,
       k.first_ts, k.last_ts,
       COALESCE(s.n_starts, 0) AS n_starts,
       COALESCE(s.with_pool, 0) AS with_pool,
       COALESCE(s.with_context, 0) AS with_context,
       n.node_verdict,
       COALESCE(n.node_unknown_starts, 0) AS node_unknown_starts
FROM files f
LEFT JOIN kinds k ON k.file_id = f.file_id
LEFT JOIN starts s ON s.file_id = f.file_id
LEFT JOIN nodes n ON n.node = f.node
ORDER BY f.node, f.path, f.file_id
