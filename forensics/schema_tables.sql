-- The case database schema: the canonical tables every loader writes and every query reads.
-- In three files, joined in this order by forensics.case.schema_sql(): schema_tables.sql
-- (provenance and the gateway records), schema_engine.sql (the engine and router tables) and
-- schema.sql (the views, and the derived tables they read).
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
