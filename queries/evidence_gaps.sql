-- evidence_gaps: what the case's evidence lacks or flags, one row per file and problem: the partial-evidence warnings of every output.
-- columns: problem, partial, file_id, path, kind, node, n_lines, detail
--
-- partial = true: the answers rest on partial evidence (an output never says a clean "no",
-- "nobody affected" or "it is over" while such a row exists):
--   unfinished      an ingest stopped before this file's rows were committed (status 'loading'):
--                   some of its rows may be in the case, some not; the next ingest of its kind rolls
--                   them back and reads the file again
--   incomplete      the file was not read whole (a truncated or damaged gzip/zstd stream, bytes
--                   after its last complete member, ...): detail is the loader's warning
--   not_read        a path an ingest could not read (--skip-unreadable: unread_paths), file_id NULL
-- partial = false: recorded and shown, but the answer is not partial because of them:
--   rejected_lines  lines read but not loaded (n_lines of them), each kept with its reason in
--                   rejected_lines
--   grown           a newer version of a file already in the case: only its new lines were loaded,
--                   numbered on from first_line (detail names the earlier version's file_id)
--   warning         any other warning of a file read whole (e.g. it changed while read: the bytes
--                   read are the evidence, the rest is read by the next ingest)
-- path is relative to the evidence root (evidence_paths), as in the report's sources table; an
-- unread path is shown as given.
-- Ordered: partial rows first, then by problem and file_id.
WITH files AS (
    SELECT e.*, COALESCE(p.rel, e.path) AS shown_path
    FROM evidence_files e
    LEFT JOIN evidence_paths p ON p.file_id = e.file_id
),
gaps AS (
    SELECT 'unfinished' AS problem, true AS partial, file_id, shown_path AS path, kind, node,
           CAST(NULL AS BIGINT) AS n_lines,
           'an ingest stopped before this file was committed: run the same ingest again' AS detail
    FROM files WHERE status <> 'done'
    UNION ALL
    SELECT 'incomplete', true, file_id, shown_path, kind, node, CAST(NULL AS BIGINT),
           COALESCE(warning, 'not read whole')
    FROM files WHERE status = 'done' AND complete = false
    UNION ALL
    SELECT 'not_read', true, CAST(NULL AS INTEGER), path, kind, node, CAST(NULL AS BIGINT),
           'not read: ' || reason
    FROM unread_paths
    UNION ALL
    SELECT 'rejected_lines', false, file_id, shown_path, kind, node, rows_rejected,
           CAST(rows_rejected AS VARCHAR(64)) || ' line(s) rejected, kept with their reason in rejected_lines'
    FROM files WHERE status = 'done' AND rows_rejected > 0
    UNION ALL
    SELECT 'grown', false, file_id, shown_path, kind, node, CAST(NULL AS BIGINT),
           'a newer version of file_id ' || CAST(prior_file_id AS VARCHAR(64)) || ': lines '
               || CAST(first_line AS VARCHAR(64)) || ' on were loaded from it'
    FROM files WHERE status = 'done' AND prior_file_id IS NOT NULL
    UNION ALL
    SELECT 'warning', false, file_id, shown_path, kind, node, CAST(NULL AS BIGINT), warning
    FROM files WHERE status = 'done' AND complete IS DISTINCT FROM false AND warning IS NOT NULL
)
SELECT problem, partial, file_id, path, kind, node, n_lines, detail
FROM gaps
ORDER BY partial DESC, problem, file_id, path
