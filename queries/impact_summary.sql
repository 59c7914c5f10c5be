-- impact_summary: the headline answers: was a node exposed, and is it over? yes / no / unknown, with the count and the node starts each rests on.
-- input: post_fix_check (the result of queries/post_fix_check.sql, provided by the caller as the view post_fix_check_result; its parameter node selects the checks)
-- param $node VARCHAR: only this node's starts and checks (NULL: the whole fleet)
-- columns: question, answer, n, n_nodes, n_unknown, unknown_starts, detail
--
-- One row per question, in this order:
--   exposed  yes      n = the node starts that ran exposed (start_periods verdict 'exposed');
--            unknown  no start exposed, and n starts whose pool or context length the logs do not
--                     show (verdict 'unknown'), or no engine start at all (n = 0);
--            no       every one of the n starts has a pool at least its context length.
--   over     no       n post-fix checks fail (post_fix_check result 'fail');
--            unknown  none fails, but n starts are unknown (or no engine start at all);
--            yes      every post-fix check passes, every start was judged.
-- Unknown is never "no": a start the logs do not judge turns "no" into unknown, and "yes, it is
-- over" into unknown. n_nodes: the distinct nodes behind n. n_unknown / unknown_starts: the
-- unknown starts in scope, named 'node #seq (no pool / context length)' or 'node (no startup
-- lines)', all of them in node order, ', '-separated. detail: the answer as one sentence (naming
-- the first ten unknown starts).
WITH
scope AS (
    SELECT * FROM start_periods WHERE $node IS NULL OR node = $node
),
unknowns AS (
    SELECT node, start_seq,
           CASE WHEN NOT start_logged
                THEN node || CASE WHEN pod <> node THEN ' pod ' || pod ELSE '' END || ' (no startup lines)'
                ELSE node || ' #' || CAST(start_seq AS VARCHAR(64)) || ' (no '
                     || CASE WHEN max_total_num_tokens IS NULL AND context_len IS NULL THEN 'pool / context length'
                             WHEN max_total_num_tokens IS NULL THEN 'pool'
                             ELSE 'context length' END || ')' END AS label,
           ROW_NUMBER() OVER (ORDER BY node, start_seq, pod) AS rn
    FROM scope
    WHERE verdict = 'unknown'
),
counts AS (
    SELECT count(*) AS n_starts,
           count(CASE WHEN verdict = 'exposed' THEN 1 END) AS n_exposed,
           count(DISTINCT CASE WHEN verdict = 'exposed' THEN node END) AS n_exposed_nodes,
           count(CASE WHEN verdict = 'unknown' THEN 1 END) AS n_unknown,
           count(DISTINCT CASE WHEN verdict = 'unknown' THEN node END) AS n_unknown_nodes,
           count(DISTINCT node) AS n_nodes
    FROM scope
),
unknown_text AS (
    SELECT string_agg(CASE WHEN rn <= 10 THEN label END, ', ' ORDER BY rn) AS first_labels,
           string_agg(label, ', ' ORDER BY rn) AS labels
    FROM unknowns
),
checks AS (
    SELECT count(CASE WHEN result = 'fail' THEN 1 END) AS n_fail FROM post_fix_check_result
),
parts AS (
    SELECT c.*, k.n_fail,
           CASE WHEN c.n_unknown > 0
                THEN CAST(c.n_unknown AS VARCHAR(64)) || ' node start(s) without pool / context in the logs: '
                     || u.first_labels || CASE WHEN c.n_unknown > 10 THEN ' ...' ELSE '' END END AS unknown_list,
           u.labels
    FROM counts c CROSS JOIN checks k CROSS JOIN unknown_text u
),
answers AS (
    SELECT 1 AS ord, 'exposed' AS question,
           CASE WHEN n_exposed > 0 THEN 'yes' WHEN n_unknown > 0 OR n_starts = 0 THEN 'unknown' ELSE 'no' END AS answer,
           CASE WHEN n_exposed > 0 THEN n_exposed WHEN n_unknown > 0 THEN n_unknown ELSE n_starts END AS n,
           CASE WHEN n_exposed > 0 THEN n_exposed_nodes WHEN n_unknown > 0 THEN n_unknown_nodes ELSE n_nodes END AS n_nodes,
           CASE WHEN n_exposed > 0
                THEN 'yes: ' || CAST(n_exposed_nodes AS VARCHAR(64)) || ' node(s) ran with a KV pool smaller than the context length'
                     || CASE WHEN n_unknown > 0 THEN '; also ' || unknown_list ELSE '' END
                WHEN n_unknown > 0 THEN 'unknown (' || unknown_list || ')'
                WHEN n_starts = 0 THEN 'unknown (no engine startup lines in the case: no node''s pool or context is known)'
                ELSE 'no: every one of the ' || CAST(n_starts AS VARCHAR(64)) || ' node start(s) has a pool at least its context length'
           END AS detail,
           n_unknown, labels
    FROM parts
    UNION ALL
    SELECT 2, 'over',
           CASE WHEN n_fail > 0 THEN 'no' WHEN n_unknown > 0 OR n_starts = 0 THEN 'unknown' ELSE 'yes' END,
           CASE WHEN n_fail > 0 THEN n_fail WHEN n_unknown > 0 THEN n_unknown ELSE n_starts END,
           CASE WHEN n_fail > 0 THEN NULL WHEN n_unknown > 0 THEN n_unknown_nodes ELSE n_nodes END,
           CASE WHEN n_fail > 0 THEN 'no: ' || CAST(n_fail AS VARCHAR(64)) || ' failing check(s)'
                WHEN n_unknown > 0 THEN 'unknown (' || unknown_list || ')'
                WHEN n_starts = 0 THEN 'unknown (no engine startup lines: no node''s configuration is known)'
                ELSE 'yes: every post-fix check passes' END,
           n_unknown, labels
    FROM parts
)
SELECT question, answer, n, n_nodes, n_unknown, labels AS unknown_starts, detail
FROM answers
ORDER BY ord
