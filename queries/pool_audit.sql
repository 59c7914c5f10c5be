-- pool_audit: every node start with its KV pool, context length, admission limit and verdict.
-- param $node VARCHAR: only this node (NULL: all)
-- columns: node, pod, start_seq, role, ts_start, ts_ready, period_start, period_end, period_open, context_len
-- columns: max_total_num_tokens, kv_cache_tokens, pool_minus_context, admission_limit, rejected_band_tokens
-- columns: verdict, n_scheduler_rejections, first_rejection, last_rejection, kv_pool_warning
-- columns: kv_checksum_enabled, allow_auto_truncate, notes, evidence
--
-- One row per engine start period (start_periods), per node and pod (the process: each pod is its
-- own start series). The period a start was in force runs from its ts_start to its pod's next
-- start, or to the first start of another pod of the node after the pod's last line (a restart as
-- a new pod; period_open = false), or to the pod's last log line of any kind (period_open = true:
-- nothing later was logged, the pod may still run this configuration). Scheduler rejections count
-- in the period of their own pod.
--
-- admission_limit = min(context_len - 1, max_total_num_tokens - 1) - 5 (SGLang's max_req_input_len);
-- the scheduler rejects input_tokens >= admission_limit. The front end only refuses prompts of
-- context_len tokens or more, so prompts of admission_limit .. context_len - 1 tokens pass it and
-- reach the scheduler's placeholder path (rejected_band_tokens of them).
--
-- verdict:
--   exposed  a prefill-capable start (role prefill/unified; unknown role counts as capable) whose
--            pool is smaller than its context length, i.e. admission_limit < context_len - 6: whole
--            ranges of accepted prompts take the placeholder path.
--   ok       otherwise. Every healthy start still has the fixed 6-token scheduler margin
--            (context_len - 6 .. context_len - 1); it is shown in rejected_band_tokens and notes,
--            with the scheduler rejections actually logged in the period, but is not a verdict.
--   unknown  a prefill-capable start whose context_len= / max_total_num_tokens= line was not found;
--            also a node with engine lines but no startup lines at all (start_seq 0: one row from
--            its first line, its scheduler rejections counted).
WITH
rej AS (
    SELECT j.node, j.pod, j.start_seq,
           count(*) AS n_rejections,
           min(r.ts) AS first_rejection,
           max(r.ts) AS last_rejection
    FROM start_periods j
    JOIN engine_rejections r
      ON r.node = j.node AND r.pod = j.pod AND r.kind = 'input_length'
     AND r.ts >= j.ts_start AND (j.next_start IS NULL OR r.ts < j.next_start)
    GROUP BY j.node, j.pod, j.start_seq
)
SELECT
    j.node,
    j.pod,
    j.start_seq,
    j.role,
    j.ts_start,
    j.ts_ready,
    j.ts_start AS period_start,
    j.period_end,
    j.period_open,
    j.context_len,
    j.max_total_num_tokens,
    j.kv_cache_tokens,
    j.max_total_num_tokens - j.context_len AS pool_minus_context,
    j.admission_limit,
    j.context_len - j.admission_limit AS rejected_band_tokens,
    j.verdict,
    COALESCE(r.n_rejections, 0) AS n_scheduler_rejections,
    r.first_rejection,
    r.last_rejection,
    j.kv_pool_warning,
    j.kv_checksum_enabled,
    j.allow_auto_truncate,
    CASE
        WHEN NOT j.start_logged THEN
            'no startup lines in the logs for this node (lines from ' || CAST(j.ts_start AS VARCHAR(64))
            || '): its pool and context length are unknown'
            || CASE WHEN COALESCE(r.n_rejections, 0) > 0
                    THEN '; ' || CAST(r.n_rejections AS VARCHAR(64)) || ' scheduler rejection(s) logged' ELSE '' END
        WHEN j.verdict = 'unknown' THEN 'startup line with max_total_num_tokens/context_len not found'
        WHEN j.verdict = 'exposed' THEN
            'pool ' || CAST(j.max_total_num_tokens AS VARCHAR(64)) || ' < context '
            || CAST(j.context_len AS VARCHAR(64)) || ': prompts of '
            || CAST(j.admission_limit AS VARCHAR(64)) || '..' || CAST(j.context_len - 1 AS VARCHAR(64))
            || ' tokens pass the front end and take the placeholder path'
        WHEN COALESCE(j.role, 'unified') NOT IN ('prefill', 'unified')
             AND j.max_total_num_tokens < j.context_len THEN
            'decode pool smaller than context: not the placeholder trigger, but lower the context length'
        ELSE
            'scheduler margin only: prompts of ' || CAST(j.admission_limit AS VARCHAR(64)) || '..'
            || CAST(j.context_len - 1 AS VARCHAR(64)) || ' tokens pass the front end but are rejected'
            || CASE WHEN COALESCE(r.n_rejections, 0) > 0
                    THEN '; ' || CAST(r.n_rejections AS VARCHAR(64)) || ' scheduler rejection(s) logged in this period'
                    ELSE '' END
    END AS notes,
    CASE WHEN j.start_logged
         THEN COALESCE(ef.rel, 'file' || CAST(j.file_id AS VARCHAR(64))) || ':' || CAST(j.line_no AS VARCHAR(64))
         ELSE 'no startup lines' END AS evidence
FROM start_periods j
LEFT JOIN rej r ON r.node = j.node AND r.pod = j.pod AND r.start_seq = j.start_seq
LEFT JOIN evidence_paths ef ON ef.file_id = j.file_id
WHERE $node IS NULL OR j.node = $node
ORDER BY j.node, j.ts_start, j.start_seq, j.pod
