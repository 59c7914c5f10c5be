-- The case database schema, part 2 of 3: the engine and router tables (one row per start,
-- batch, request record, rejection, event, HTTP line, router line, startup line, line kind and
-- other line). Conventions as in schema_tables.sql.

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
    header_request_id   VARCHAR,   -- x-request-id (or x-correlation-id, x-trace-id, request-id) header if logged;
                                   -- the other headers are not stored (byte_offset re-reads the line)
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
