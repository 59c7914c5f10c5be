-- The case database schema: the canonical tables every loader writes and every query reads.
-- All timestamps are TIMESTAMP (no zone) holding UTC. Every row keeps file_id + line_no, which
-- point into evidence_files (path, sha256) and the 1-based physical line of the decompressed text
-- (for CSV/JSON-array/Parquet sources: the 1-based record number, header excluded).
-- Written as IF NOT EXISTS so opening an existing case is idempotent; a schema_version table
-- records which toolkit version created it.

CREATE TABLE IF NOT EXISTS schema_info (
    key   VARCHAR PRIMARY KEY,   -- 'schema_version', 'created_by'
    value VARCHAR
);

-- One row per source file read into the case (also files skipped as already ingested are NOT
-- added again: idempotency is by sha256). A row is 'loading' while its rows are written and
-- 'done' in the same transaction as its last rows: an interrupted load is rolled back by the
-- next ingest. A grown file (its first prior_size bytes are a known file's) is a new row that
-- reads only the new lines (from first_line) and links the earlier version.
CREATE TABLE IF NOT EXISTS evidence_files (
    file_id          INTEGER PRIMARY KEY,  -- referenced by every loaded row
    path             VARCHAR NOT NULL,     -- absolute path when ingested
    sha256           VARCHAR NOT NULL,     -- of the file's bytes as stored (compressed if compressed)
    size             BIGINT  NOT NULL,     -- bytes on disk
    kind             VARCHAR NOT NULL,     -- 'gateway' | 'engine'
    format           VARCHAR,              -- preset (cloudflare-http, litellm, ...), 'mapping:<file>', 'sglang', 'smg-router'
    layer            VARCHAR,              -- gateway layer: edge, proxy, router, ...; 'engine' for engine logs
    node             VARCHAR,              -- engine node name (engine files only)
    compression      VARCHAR,              -- 'none' | 'gzip' | 'zstd' (by magic bytes)
    tz               VARCHAR,              -- zone applied to zone-less timestamps of this file
    lines_read       BIGINT,               -- physical lines (text) or records (CSV/JSON array/Parquet) read
    rows_loaded      BIGINT,               -- rows written to canonical tables (duplicates excluded)
    rows_rejected    BIGINT,               -- lines kept in rejected_lines
    rows_duplicate   BIGINT,               -- records flagged as delivery-retry duplicates
    complete         BOOLEAN,              -- false when the file was truncated/corrupt and only a prefix was read
    warning          VARCHAR,              -- human-readable warning (e.g. truncated gzip), NULL if none
    ingested_at      TIMESTAMP,            -- UTC wall clock of ingestion (injectable for tests)
    toolkit_version  VARCHAR,              -- forensics.__version__
    options          VARCHAR,              -- JSON text: options used (format, tz, mapping, node, ...)
    wrapper          VARCHAR,              -- engine files: collection wrapper stripped ('plain', 'cri', 'docker-json', 'journald-json', ...)
    lines_joined     BIGINT,               -- engine files: partial lines joined into the line they continue (CRI P chunks, Docker split records)
    lines_framing    BIGINT,               -- engine files: wrapper lines holding no log line (JSON document brackets, blank lines between records)
    status           VARCHAR NOT NULL DEFAULT 'done',  -- 'loading' while its rows are written, 'done' once they all are
    first_line       BIGINT DEFAULT 1,     -- first physical line read from this file (> 1 when it extends prior_file_id)
    start_offset     BIGINT DEFAULT 0,     -- decompressed byte offset of first_line
    end_offset       BIGINT,               -- decompressed byte just after the last line end read: where a grown version resumes (NULL: JSON array, Parquet)
    end_line         BIGINT,               -- the physical line that ends at end_offset (the last line read whole)
    open_tail        BOOLEAN,              -- the last line read had no line end yet (a grown version reads it again, whole)
    head_sha256      VARCHAR,              -- sha256 of the first min(size, 4096) bytes: which known files a grown one may extend
    prior_file_id    INTEGER,              -- the earlier version this file extends (NULL if none)
    prior_sha256     VARCHAR,              -- that version's sha256 (= the sha256 of this file's first prior_size bytes)
    prior_size       BIGINT                -- that version's size in bytes
);

-- Paths an ingest could not read (--skip-unreadable): the answer rests on partial evidence while
-- any is here. One row per path and kind (the latest ingest's reason); removed when a later ingest
-- reads that path (or, for a directory, a file under it).
CREATE TABLE IF NOT EXISTS unread_paths (
    path         VARCHAR NOT NULL,    -- absolute path given or found (a file or a directory)
    kind         VARCHAR NOT NULL,    -- 'gateway' | 'engine'
    node         VARCHAR,             -- engine files: the node it would have been
    reason       VARCHAR NOT NULL,    -- e.g. 'permission denied'
    ingested_at  TIMESTAMP NOT NULL,  -- when that ingest ran (UTC)
    PRIMARY KEY (path, kind)
);

-- Derived tables an ingest must rebuild (e.g. engine_starts of a node whose files changed): marked
-- in the transaction of the file's rows, cleared in the rebuild's, so a crash in between is repaired.
CREATE TABLE IF NOT EXISTS pending_rebuilds (
    what  VARCHAR NOT NULL,   -- the derived table, e.g. 'engine_starts'
    key   VARCHAR NOT NULL,   -- what to rebuild it for, e.g. the node
    PRIMARY KEY (what, key)
);

-- Lines or records that could not be parsed, with the reason; nothing read is ever dropped.
CREATE TABLE IF NOT EXISTS rejected_lines (
    file_id     INTEGER NOT NULL,  -- evidence_files.file_id
    line_no     BIGINT  NOT NULL,  -- 1-based line (or record) number
    reason      VARCHAR NOT NULL,  -- why it was rejected (e.g. 'invalid JSON', 'missing field status')
    raw         BLOB,              -- the raw bytes, capped at 4 KiB
    raw_length  BIGINT             -- the original length in bytes before capping
);

-- Canonical gateway request records, one per record of any front door (edge, proxy, router...).
-- Duplicates (same layer, request_id, ts_start, ts_end: delivery retries) are kept, flagged.
-- request_id, header_request_id and ts_raw are stored uncompressed: nearly unique per row, they
-- barely compress, and compressing them was a third of the storage cost of a large load.
CREATE TABLE IF NOT EXISTS gateway_requests (
    request_id         VARCHAR USING COMPRESSION uncompressed,    -- the layer's primary id (RayID, AI Gateway id, nginx request_id, LiteLLM request_id, ...)
    header_request_id  VARCHAR USING COMPRESSION uncompressed,    -- a second id carried in a header (x-request-id) when distinct
    tenant_id          VARCHAR,    -- customer / account / team, per the preset's rule
    model              VARCHAR,    -- model name as logged
    ts_start           TIMESTAMP,  -- request start, UTC
    ts_end             TIMESTAMP,  -- request end, UTC (NULL if unknown)
    ts_raw             VARCHAR USING COMPRESSION uncompressed,    -- the raw start value as logged
    ts_precision       VARCHAR,    -- 's' | 'ms' | 'us' | 'ns': resolution of the source value
    ts_zone_assumed    VARCHAR,    -- zone used for a zone-less value (NULL when the value carried a zone or was epoch)
    method             VARCHAR,    -- HTTP method
    path               VARCHAR,    -- request path (no query string secrets are added)
    status             INTEGER,    -- HTTP status returned to the client
    prompt_tokens      BIGINT,     -- input tokens as reported by this layer (NULL if not reported)
    completion_tokens  BIGINT,     -- output tokens as reported by this layer
    tokens_source      VARCHAR,    -- 'gateway' (reported by this layer), 'estimated', or NULL
    request_bytes      BIGINT,     -- request size in bytes when logged
    response_bytes     BIGINT,     -- response size in bytes when logged
    streamed           BOOLEAN,    -- response was streamed (SSE), NULL if unknown
    in_band_error      VARCHAR,    -- error message found inside a 2xx body/SSE stream, NULL if none/unknown
    upstream           VARCHAR,    -- upstream/origin that served it (IP, host, api_base, ...)
    layer              VARCHAR,    -- 'edge', 'proxy', 'router', ... (from the preset or --layer)
    source_format      VARCHAR,    -- preset or mapping that produced the row
    is_duplicate       BOOLEAN NOT NULL DEFAULT false,  -- a delivery-retry copy of an earlier row
    file_id            INTEGER NOT NULL,
    line_no            BIGINT  NOT NULL
);

-- One row per engine start (a startup sequence in the logs): the configuration in force from
-- this start until the node's next start.
CREATE TABLE IF NOT EXISTS engine_starts (
    node                  VARCHAR NOT NULL,
    pod                   VARCHAR NOT NULL,  -- the process (Kubernetes pod, host/unit); = node when the logs name none
    start_seq             INTEGER NOT NULL,  -- 1, 2, ... per node in time order
    ts_start              TIMESTAMP,         -- first line of the startup sequence, UTC
    ts_ready              TIMESTAMP,         -- 'The server is fired up and ready to roll!', UTC
    ts_inferred           BOOLEAN,           -- ts_start was inferred (no timestamp on the line)
    role                  VARCHAR,           -- 'prefill' | 'decode' | 'unified'
    role_source           VARCHAR,           -- 'server_args' | 'batch_lines' | 'default'
    context_len           BIGINT,            -- effective context length (the context_len= line)
    max_total_num_tokens  BIGINT,            -- KV pool size in tokens
    admission_limit       BIGINT,            -- min(context_len - 1, max_total_num_tokens - 1) - 5: prompts >= this are rejected by the scheduler
    context_length_arg    BIGINT,            -- --context-length as given in server_args (often NULL)
    chunked_prefill_size  BIGINT,
    max_prefill_tokens    BIGINT,
    max_running_requests  BIGINT,
    tp_size               INTEGER,
    dp_size               INTEGER,
    model_path            VARCHAR,
    kv_dtype              VARCHAR,           -- from 'KV Cache is allocated. dtype: ...' or server_args kv_cache_dtype
    kv_cache_tokens       BIGINT,            -- '#tokens' of the KV Cache line (rank 0 / first seen)
    kv_pool_warning       BOOLEAN,           -- 0.5.23+ 'KV pool holds N tokens, fewer than --context-length' seen
    allow_auto_truncate   BOOLEAN,
    kv_checksum_enabled   BOOLEAN,           -- --disaggregation-enable-kv-checksum / --kv-canary in server_args
    server_args           VARCHAR,           -- JSON text of the parsed server arguments
    file_id               INTEGER,           -- where the max_total_num_tokens line is (else the first startup line)
    line_no               BIGINT
);

-- Scheduler batch lines ('Prefill batch.' / 'Decode batch,' ...): load over time.
CREATE TABLE IF NOT EXISTS engine_batches (
    node          VARCHAR NOT NULL,
    pod           VARCHAR NOT NULL,  -- the process (Kubernetes pod, host/unit); = node when the logs name none
    ts            TIMESTAMP,
    ts_inferred   BOOLEAN,
    ranks         VARCHAR,     -- rank tags sorted canonically, e.g. 'DP0 TP0' (NULL if none)
    kind          VARCHAR,     -- 'prefill' | 'decode'
    iter          BIGINT,      -- [iter] when printed
    new_seq       BIGINT,      -- #new-seq
    new_token     BIGINT,      -- #new-token
    cached_token  BIGINT,      -- #cached-token
    num_token     BIGINT,      -- #token (decode)
    running_req   BIGINT,      -- #running-req
    queue_req     BIGINT,      -- #queue-req
    token_usage   DOUBLE,      -- 'token usage' (fraction of this node's pool)
    throughput    DOUBLE,      -- input or gen throughput (token/s)
    file_id       INTEGER NOT NULL,
    line_no       BIGINT NOT NULL,
    fields_raw    VARCHAR,     -- the batch message as printed ('Decode batch, #running-req: 3, ...'); its
                               -- key: value pairs as a MAP are the `fields` column of engine_batch_fields
    byte_offset   BIGINT       -- byte offset of the line in the decompressed file (re-read it on demand)
);

-- engine_batches with `fields`: every key: value pair of the batch line as printed (MAP, text
-- values), built from fields_raw when read (storing the MAP cost more than the rest of the load).
CREATE OR REPLACE VIEW engine_batch_fields AS
SELECT node, ts, ts_inferred, ranks, kind, iter, new_seq, new_token, cached_token, num_token, running_req,
       queue_req, token_usage, throughput,
       CASE WHEN ok THEN json_transform('{"' || replace(replace(body, ', ', '", "'), ': ', '": "') || '"}',
                                        '"MAP(VARCHAR, VARCHAR)"')
            WHEN len(list_distinct(k)) = len(k) THEN map(k, v)
            ELSE map(list_filter(k, lambda x, i: list_position(k, x) = i),
                     list_filter(v, lambda x, i: list_position(k, k[i]) = i)) END AS fields,
       file_id, line_no, fields_raw
FROM (
    SELECT *,
           CASE WHEN NOT ok THEN list_transform(regexp_extract_all(fields_raw,
               '(?:^\w+ batch(?: \[\d+\])?[.,] ?|, )([^:,]+): ([^,]*)', 1), lambda x: trim(x)) END AS k,
           CASE WHEN NOT ok THEN list_transform(regexp_extract_all(fields_raw,
               '(?:^\w+ batch(?: \[\d+\])?[.,] ?|, )([^:,]+): ([^,]*)', 2), lambda x: trim(x)) END AS v
    FROM (
        SELECT *, NOT contains(body, '"') AND NOT contains(body, '\') AND body <> ''
                  AND len(string_split(body, ', ')) = len(string_split(body, ': ')) - 1 AS ok
        FROM (SELECT *, rtrim(trim(substr(fields_raw, strpos(fields_raw, ' #') + 1)), ',') AS body
              FROM engine_batches)
    )
);

-- Request records: Receive/Finish text or JSON lines, metrics-file records, ReqTimeStats lines.
-- Prompt and output text are NEVER stored.
CREATE TABLE IF NOT EXISTS engine_requests (
    node                VARCHAR NOT NULL,
    pod                 VARCHAR NOT NULL,  -- the process (Kubernetes pod, host/unit); = node when the logs name none
    ts                  TIMESTAMP,
    ts_inferred         BOOLEAN,
    kind                VARCHAR,   -- 'received' | 'finished' | 'metrics' | 'time_stats'
    rid                 VARCHAR,   -- engine request id (per node unless the client sent one)
    bootstrap_host      VARCHAR,
    bootstrap_port      INTEGER,
    bootstrap_room      BIGINT,    -- joins prefill to decode (with bootstrap_host)
    stream              BOOLEAN,
    header_request_id   VARCHAR,   -- x-request-id (or x-correlation-id, x-trace-id, request-id) header if logged
    headers             VARCHAR,   -- JSON text of the logged headers
    prompt_tokens       BIGINT,    -- meta_info prompt_tokens / metrics prompt_tokens
    completion_tokens   BIGINT,
    cached_tokens       BIGINT,
    finish_type         VARCHAR,   -- 'stop' | 'length' | 'abort' | ...
    finish_length       BIGINT,    -- finish_reason length (0 for the placeholder path)
    finish_status_code  INTEGER,   -- finish_reason status_code (aborts)
    finish_message      VARCHAR,   -- finish_reason message (engine text, not prompt)
    e2e_latency         DOUBLE,    -- seconds
    input_len           BIGINT,    -- time stats input_len
    output_len          BIGINT,    -- time stats output_len
    stats_type          VARCHAR,   -- time stats type: 'prefill' | 'decode' | ...
    is_health_check     BOOLEAN,   -- HEALTH_CHECK_ rid, room 0 or host 2.2.2.2
    file_id             INTEGER NOT NULL,
    line_no             BIGINT NOT NULL,
    byte_offset   BIGINT       -- byte offset of the line in the decompressed file (re-read it on demand)
);

-- Rejections and length warnings.
CREATE TABLE IF NOT EXISTS engine_rejections (
    node          VARCHAR NOT NULL,
    pod           VARCHAR NOT NULL,  -- the process (Kubernetes pod, host/unit); = node when the logs name none
    ts            TIMESTAMP,
    ts_inferred   BOOLEAN,
    ranks         VARCHAR,
    kind          VARCHAR,   -- 'input_length' (scheduler, placeholder path) | 'auto_truncate' | 'pd_capacity' | 'context_length'
    rid           VARCHAR,
    input_tokens  BIGINT,
    limit_tokens  BIGINT,
    message       VARCHAR,   -- the line's message (engine text, capped at 1 KiB)
    file_id       INTEGER NOT NULL,
    line_no       BIGINT NOT NULL,
    byte_offset   BIGINT       -- byte offset of the line in the decompressed file (re-read it on demand)
);

-- Transfer and integrity events (KV transfer failures, timeouts, checksum/corruption, router PD errors).
CREATE TABLE IF NOT EXISTS engine_events (
    node            VARCHAR NOT NULL,
    pod             VARCHAR NOT NULL,  -- the process (Kubernetes pod, host/unit); = node when the logs name none
    ts              TIMESTAMP,
    ts_inferred     BOOLEAN,
    ranks           VARCHAR,
    kind            VARCHAR,   -- prefill_transfer_failed | decode_transfer_failed | kvpoll_timeout | bootstrap_failed |
                               -- transfer_backend_error | kv_checksum_mismatch | context_corruption | kv_verified | router_pd_error
    rid             VARCHAR,
    bootstrap_room  BIGINT,
    status          INTEGER,   -- HTTP status when the event carries one (router PD errors)
    message         VARCHAR,   -- capped at 1 KiB
    file_id         INTEGER NOT NULL,
    line_no         BIGINT NOT NULL,
    byte_offset   BIGINT       -- byte offset of the line in the decompressed file (re-read it on demand)
);

-- Uvicorn access lines inside the engine (no request id is logged there).
CREATE TABLE IF NOT EXISTS engine_http (
    node          VARCHAR NOT NULL,
    pod           VARCHAR NOT NULL,  -- the process (Kubernetes pod, host/unit); = node when the logs name none
    ts            TIMESTAMP,
    ts_inferred   BOOLEAN,
    client        VARCHAR,   -- ip:port
    method        VARCHAR,
    path          VARCHAR,
    http_version  VARCHAR,
    status        INTEGER,
    file_id       INTEGER NOT NULL,
    line_no       BIGINT NOT NULL,
    byte_offset   BIGINT       -- byte offset of the line in the decompressed file (re-read it on demand)
);

-- smg / sglang_router_rs request lines.
CREATE TABLE IF NOT EXISTS router_requests (
    node         VARCHAR NOT NULL,
    pod          VARCHAR NOT NULL,  -- the process (Kubernetes pod, host/unit); = node when the logs name none
    ts           TIMESTAMP,   -- routers log UTC
    level        VARCHAR,     -- INFO | WARN | ERROR | DEBUG
    request_id   VARCHAR,
    method       VARCHAR,
    uri          VARCHAR,
    status       INTEGER,
    latency_us   BIGINT,      -- microseconds
    target       VARCHAR,     -- e.g. smg::response
    message      VARCHAR,
    file_id      INTEGER NOT NULL,
    line_no      BIGINT NOT NULL,
    byte_offset  BIGINT,      -- byte offset of the line in the decompressed file (re-read it on demand)
    ts_inferred  BOOLEAN      -- the line's own time was cut off: ts is the line before's
);

-- One row per startup line of an engine (the input of engine_starts).
CREATE TABLE IF NOT EXISTS engine_startup_facts (
    node         VARCHAR NOT NULL,  -- the logical node
    pod          VARCHAR NOT NULL,  -- the process (Kubernetes pod, host/unit); = node when the logs name none
    ts           TIMESTAMP,
    ts_inferred  BOOLEAN,
    ranks        VARCHAR,
    fact         VARCHAR,   -- server_args | kv_cache | max_total | ready | bootstrap | pool_warning | other
    file_id      INTEGER NOT NULL,
    line_no      BIGINT NOT NULL,
    args         VARCHAR,   -- server_args: JSON object of the parsed arguments (secrets redacted)
    text         VARCHAR,   -- other facts: the message (redacted, capped at 1 KiB)
    byte_offset  BIGINT     -- byte offset of the line in the decompressed file
);

-- Per engine file, its lines by kind (the line-kind catalogue's names): what was read and
-- recognised, for coverage. family: 'engine' (SGLang's own lines), 'router', 'foreign' (another
-- library sharing the log), 'noise' (blank lines, progress bars), 'unknown' (unrecognised).
CREATE TABLE IF NOT EXISTS engine_line_kinds (
    file_id     INTEGER NOT NULL,  -- the engine file (evidence_files)
    node        VARCHAR NOT NULL,  -- the logical node the lines went to
    pod         VARCHAR NOT NULL,  -- the process (as on every engine table)
    kind        VARCHAR NOT NULL,  -- the catalogue's kind name (docs/engine.md), 'unrecognised' included
    family      VARCHAR NOT NULL,  -- engine | router | foreign | noise | unknown
    n_lines     BIGINT NOT NULL,   -- lines of this kind (joined partial lines count once)
    first_line  BIGINT,      -- the first line of this kind
    first_ts    TIMESTAMP,   -- time span of the lines of this kind that have a time (UTC)
    last_ts     TIMESTAMP,   -- (UTC)
    last_line   BIGINT       -- the file's last line read when it is of this kind (else NULL): a grown
                             -- version that reads an open last line again uncounts it here
);

-- Every other engine/router line, by kind, so nothing read is lost (text capped at 1 KiB).
CREATE TABLE IF NOT EXISTS engine_other_lines (
    node              VARCHAR NOT NULL,
    pod               VARCHAR NOT NULL,  -- the process (Kubernetes pod, host/unit); = node when the logs name none
    ts                TIMESTAMP,
    ts_inferred       BOOLEAN,
    kind              VARCHAR,   -- 'startup' | 'traceback' | 'health' | 'noise' | 'unrecognised' | ...
    attached_to_line  BIGINT,    -- for traceback continuation lines: the line they belong to
    text              VARCHAR,
    file_id           INTEGER NOT NULL,
    line_no           BIGINT NOT NULL,
    byte_offset   BIGINT       -- byte offset of the line in the decompressed file (re-read it on demand)
);

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

-- Per engine node, its first and last line of any kind and the lines loaded per kind: a derived
-- table, rebuilt from the engine tables with the other derived tables (queries/facts/
-- node_activity.sql; declared here so that the views below exist on a new case).
CREATE TABLE IF NOT EXISTS node_activity (
    node               VARCHAR,
    first_ts           TIMESTAMP,   -- the node's first line of any kind, UTC
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
-- HTTP lines, other lines, start-ups): where an open (last) start period of the node ends.
CREATE OR REPLACE VIEW node_last_seen AS
SELECT node, last_ts FROM node_activity;

-- One row per engine start with the configuration it ran and the period it was in force: the one
-- place the admission limit and the start periods are defined (every query and the parameters
-- recorded with every output read them here).
-- admission_limit: SGLang's max_req_input_len = min(context_len - 1, max_total_num_tokens - 1) - 5
-- (NULL when the logs show only one of the two); the scheduler rejects prompts of admission_limit
-- tokens or more. period_start is the start's ts_start; period_end the node's next start
-- (next_start), or for its last start the node's last line of any kind (period_open). A time t is
-- inside the period when period_start <= t and (t < period_end, or t <= period_end while
-- period_open). verdict: 'exposed' a prefill-capable start (role prefill or unified; an unknown
-- role counts as capable) with admission_limit below context_len - 6, i.e. a pool smaller than
-- the context: prompts the front end accepts take the placeholder path; 'unknown' a
-- prefill-capable start whose context length or pool the logs do not show; else 'ok' (a decode
-- start never takes the placeholder path).
-- A node with engine lines (request, batch or rejection lines: an SGLang server, not a router) but
-- no start logged at all (its startup lines were not collected) gets one period of its own:
-- start_seq 0, start_logged false, from its first to its last line, role unknown, verdict
-- 'unknown' (unknown is never "no"); its rejection lines still count in pool_audit.
CREATE OR REPLACE VIEW start_periods AS
WITH
periods AS (
    SELECT s.node, s.start_seq, true AS start_logged, s.role, s.role_source, s.ts_start, s.ts_ready,
           s.ts_inferred, s.context_len, s.max_total_num_tokens,
           CASE WHEN s.context_len IS NOT NULL AND s.max_total_num_tokens IS NOT NULL
                THEN LEAST(s.context_len - 1, s.max_total_num_tokens - 1) - 5 END AS admission_limit,
           s.context_length_arg, s.chunked_prefill_size, s.max_prefill_tokens, s.max_running_requests,
           s.tp_size, s.dp_size, s.model_path, s.kv_dtype, s.kv_cache_tokens, s.kv_pool_warning,
           s.allow_auto_truncate, s.kv_checksum_enabled, s.server_args, s.file_id, s.line_no,
           LEAD(s.ts_start) OVER (PARTITION BY s.node ORDER BY s.ts_start, s.start_seq) AS next_start
    FROM engine_starts s
    UNION ALL
    SELECT a.node, 0, false, CAST(NULL AS VARCHAR), 'none', a.first_ts, CAST(NULL AS TIMESTAMP),
           CAST(NULL AS BOOLEAN), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT),
           CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT),
           CAST(NULL AS INTEGER), CAST(NULL AS INTEGER), CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR),
           CAST(NULL AS BIGINT), CAST(NULL AS BOOLEAN), CAST(NULL AS BOOLEAN), CAST(NULL AS BOOLEAN),
           CAST(NULL AS VARCHAR), CAST(NULL AS INTEGER), CAST(NULL AS BIGINT), CAST(NULL AS TIMESTAMP)
    FROM node_activity a
    WHERE a.n_starts = 0 AND a.n_request_records + a.n_batch_lines + a.n_rejection_lines > 0
)
SELECT p.*,
       p.ts_start AS period_start,
       COALESCE(p.next_start, GREATEST(nl.last_ts, p.ts_start)) AS period_end,
       p.next_start IS NULL AS period_open,
       CASE
           WHEN COALESCE(p.role, 'unified') NOT IN ('prefill', 'unified') THEN 'ok'
           WHEN p.context_len IS NULL OR p.max_total_num_tokens IS NULL THEN 'unknown'
           WHEN p.admission_limit < p.context_len - 6 THEN 'exposed'
           ELSE 'ok'
       END AS verdict
FROM periods p
LEFT JOIN node_last_seen nl ON nl.node = p.node;
