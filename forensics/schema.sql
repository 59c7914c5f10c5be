-- The case database schema, part 3 of 3: the views (and the derived tables they need) over the
-- tables of schema_tables.sql and schema_engine.sql, created after them.

-- The analysis view of gateway records: delivery-retry duplicates excluded (still in the table).
CREATE OR REPLACE VIEW gateway_requests_unique AS
SELECT * FROM gateway_requests WHERE NOT is_duplicate;

-- Every evidence file's path relative to the common directory of all evidence paths (the common
-- prefix of the smallest and largest path, up to its last directory separator), so that evidence
-- references do not depend on where the evidence was ingested from. Used by the query files.
CREATE OR REPLACE VIEW evidence_paths AS
WITH RECURSIVE
ev_bounds AS (
    SELECT min(path) AS a, max(path) AS b FROM evidence_files
),
ev_common (n, cut) AS (
    SELECT 0, 0 FROM ev_bounds WHERE a IS NOT NULL
    UNION ALL
    SELECT c.n + 1,
           CASE WHEN substr(b.a, c.n + 1, 1) IN ('/', '\') THEN c.n + 1 ELSE c.cut END
    FROM ev_common c CROSS JOIN ev_bounds b
    WHERE c.n < length(b.a) AND substr(b.a, c.n + 1, 1) = substr(b.b, c.n + 1, 1)
)
SELECT f.file_id, substr(f.path, r.cut + 1) AS rel
FROM evidence_files f CROSS JOIN (SELECT max(cut) AS cut FROM ev_common) r;

-- Per engine node and pod (the process), its first and last line of any kind and the lines loaded
-- per kind: a derived table, rebuilt from the engine tables with the other derived tables
-- (queries/facts/node_activity.sql; declared here so that the views below exist on a new case).
CREATE TABLE IF NOT EXISTS node_activity (
    node               VARCHAR,
    pod                VARCHAR,     -- the process (= node when the logs name none)
    first_ts           TIMESTAMP,   -- the pod's first line of any kind, UTC
    last_ts            TIMESTAMP,   -- its last line of any kind (or startup), UTC
    n_request_records  BIGINT,      -- engine_requests rows
    n_batch_lines      BIGINT,      -- engine_batches rows
    n_rejection_lines  BIGINT,      -- engine_rejections rows
    n_event_lines      BIGINT,      -- engine_events rows
    n_http_lines       BIGINT,      -- engine_http rows
    n_other_lines      BIGINT,      -- engine_other_lines rows
    n_starts           BIGINT       -- engine_starts rows
);

-- Per node, the time of its last engine line of any kind (requests, batches, rejections, events,
-- HTTP lines, other lines, start-ups), over all its pods.
CREATE OR REPLACE VIEW node_last_seen AS
SELECT node, max(last_ts) AS last_ts FROM node_activity GROUP BY node;

-- One row per engine start with the configuration it ran and the period it was in force: the one
-- place the admission limit and the start periods are defined (every query and the parameters
-- recorded with every output read them here).
-- admission_limit: SGLang's max_req_input_len = min(context_len - 1, max_total_num_tokens - 1) - 5
-- (NULL when the logs show only one of the two); the scheduler rejects prompts of admission_limit
-- tokens or more.
-- Start series: a pod (a process: a Kubernetes pod, a host/unit; = the node when the logs name
-- none) is its own series, and the pods of one logical node follow each other in time. A start is
-- in force until its pod's next start; a pod's last start until the first start of another pod of
-- the node at or after the pod's last line (a restart as a new pod: next_start, period_open false),
-- else until the pod's last line of any kind (period_open true: nothing shows it stopped; a pod
-- whose lines end while a replica runs on is not taken as stopped). So concurrent replicas keep
-- their own periods: one pod's start never ends another's still-running period.
-- period_start is ts_start; period_end is next_start, or the pod's last line. A time t is inside
-- the period when period_start <= t and (t < period_end, or t <= period_end while period_open).
-- verdict: 'exposed' a prefill-capable start (role prefill or unified; an unknown role counts as
-- capable) with admission_limit below context_len - 6, i.e. a pool smaller than the context:
-- prompts the front end accepts take the placeholder path; 'unknown' a prefill-capable start whose
-- context length or pool the logs do not show; else 'ok' (a decode start never takes the
-- placeholder path).
-- A pod with engine lines (request, batch or rejection lines: an SGLang server, not a router) but
-- no start logged at all (its startup lines were not collected) gets one period of its own:
-- start_seq 0, start_logged false, from its first to its last line, role unknown, verdict
-- 'unknown' (unknown is never "no"); its rejection lines still count in pool_audit.
CREATE OR REPLACE VIEW start_periods AS
WITH
periods AS (
    SELECT s.node, s.pod, s.start_seq, true AS start_logged, s.role, s.role_source, s.ts_start, s.ts_ready,
           s.ts_inferred, s.context_len, s.max_total_num_tokens,
           CASE WHEN s.context_len IS NOT NULL AND s.max_total_num_tokens IS NOT NULL
                THEN LEAST(s.context_len - 1, s.max_total_num_tokens - 1) - 5 END AS admission_limit,
           s.context_length_arg, s.chunked_prefill_size, s.max_prefill_tokens, s.max_running_requests,
           s.tp_size, s.dp_size, s.model_path, s.kv_dtype, s.kv_cache_tokens, s.kv_pool_warning,
           s.allow_auto_truncate, s.kv_checksum_enabled, s.server_args, s.file_id, s.line_no,
           LEAD(s.ts_start) OVER (PARTITION BY s.node, s.pod ORDER BY s.ts_start, s.start_seq) AS next_in_pod
    FROM engine_starts s
    UNION ALL
    SELECT a.node, a.pod, 0, false, CAST(NULL AS VARCHAR(64)), 'none', a.first_ts, CAST(NULL AS TIMESTAMP),
           CAST(NULL AS BOOLEAN), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT),
           CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT),
           CAST(NULL AS INTEGER), CAST(NULL AS INTEGER), CAST(NULL AS VARCHAR(64)), CAST(NULL AS VARCHAR(64)),
           CAST(NULL AS BIGINT), CAST(NULL AS BOOLEAN), CAST(NULL AS BOOLEAN), CAST(NULL AS BOOLEAN),
           CAST(NULL AS VARCHAR(64)), CAST(NULL AS INTEGER), CAST(NULL AS BIGINT), CAST(NULL AS TIMESTAMP)
    FROM node_activity a
    WHERE a.n_starts = 0 AND a.n_request_records + a.n_batch_lines + a.n_rejection_lines > 0
),
successors AS (
    -- a pod's last period ends where another pod of the node first starts after the pod's last line
    SELECT p.node, p.pod, p.start_seq, min(o.ts_start) AS next_pod_start
    FROM periods p
    JOIN node_activity nl ON nl.node = p.node AND nl.pod = p.pod
    JOIN periods o ON o.node = p.node AND o.pod <> p.pod AND o.ts_start > p.ts_start AND o.ts_start >= nl.last_ts
    WHERE p.next_in_pod IS NULL
    GROUP BY p.node, p.pod, p.start_seq
),
chained AS (
    SELECT p.*, COALESCE(p.next_in_pod, x.next_pod_start) AS next_start
    FROM periods p
    LEFT JOIN successors x ON x.node = p.node AND x.pod = p.pod AND x.start_seq = p.start_seq
)
SELECT p.node, p.pod, p.start_seq, p.start_logged, p.role, p.role_source, p.ts_start, p.ts_ready,
       p.ts_inferred, p.context_len, p.max_total_num_tokens, p.admission_limit, p.context_length_arg,
       p.chunked_prefill_size, p.max_prefill_tokens, p.max_running_requests, p.tp_size, p.dp_size,
       p.model_path, p.kv_dtype, p.kv_cache_tokens, p.kv_pool_warning, p.allow_auto_truncate,
       p.kv_checksum_enabled, p.server_args, p.file_id, p.line_no, p.next_start,
       p.ts_start AS period_start,
       COALESCE(p.next_start, GREATEST(nl.last_ts, p.ts_start)) AS period_end,
       p.next_start IS NULL AS period_open,
       CASE
           WHEN COALESCE(p.role, 'unified') NOT IN ('prefill', 'unified') THEN 'ok'
           WHEN p.context_len IS NULL OR p.max_total_num_tokens IS NULL THEN 'unknown'
           WHEN p.admission_limit < p.context_len - 6 THEN 'exposed'
           ELSE 'ok'
       END AS verdict
FROM chained p
LEFT JOIN node_activity nl ON nl.node = p.node AND nl.pod = p.pod;
