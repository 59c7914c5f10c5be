"""The SQL half of the engine loader: classify staged lines and extract typed rows in DuckDB.

Every statement works on ``_eng_raw(line_no, seq, wrapper_ts, line)`` (an Arrow view) holding one
file's logical lines (``seq``: dense index in the file; ``wrapper_ts``: the collection wrapper's
UTC time, or NULL) (see :mod:`forensics.sources.engine`). Nothing here loops over lines in Python: lines are
classified with cheap prefix/contains tests and fields are pulled with vectorised regexes.

Example:
    >>> "Prefill batch" in CLASSIFY
    True
"""

from __future__ import annotations

# -- regular expressions (RE2 syntax, as DuckDB uses) -------------------------------------------

#: The line prefix, matched against the first 256 characters only (cheap). Every part is
#: optional, in the order real pipelines stack them: log collector columns (epoch ms, ISO UTC),
#: a Ray actor prefix, then either the engine's ``[local time[.ms][ rank tags]] `` or a router's
#: ``UTC-time LEVEL ``. Rank tags are matched as a set of any order (0.5.2 printed DP TP EP PP,
#: later releases DP PP ATTN_CP MOE_DP TP EP).
PREFIX_RE = (
    r"^((?:(\d{10,13})\t)?(?:(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)\t)?"
    r"(?:\(([A-Za-z_]\w*) pid=(\d+)(?:, ip=([0-9A-Fa-f.:]+))?\) ?)?"
    r"(?:\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?((?: [A-Z][A-Z_]*\d+)*)\] ?"
    r"|(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d{1,9})?)Z? +(TRACE|DEBUG|INFO|WARN|ERROR) +)?)"
)
PREFIX_GROUPS = ["pre", "cms", "ciso", "actor", "pid", "ip", "ets", "ems", "ranks", "rts", "rlevel"]

#: A Python string literal as repr() prints it (either quote style, backslash escapes).
LIT = r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\""""

#: Tokeniser for dataclass / dict reprs (Receive:, Finish:, server_args=...). Each match is either
#: ``name=value`` (group 1, dataclass field), ``'name': value`` (group 2, dict key) or a bare string
#: literal, which is consumed whole: text inside a literal (a prompt that says ``rid='x'``) can
#: never be mistaken for a field. Group 3 is the scalar value (a literal or a bare token); nested
#: containers yield an empty value and their members follow as further matches.
TOKEN_RE = (
    r"(?:([A-Za-z_]\w*)=|'([\w.\-]+)': )("
    + LIT
    + r"""|[^,()\[\]{}'" ][^,()\[\]{}'"]*|)|"""
    + LIT
)

#: The request-record tokeniser: only the fields the loader keeps are matched as ``name=value``
#: or ``'name': value``; every other string literal is matched whole so that text inside it (a
#: prompt) is never read as a field. It has no capturing group on purpose: RE2 then finds each
#: match with its DFAs alone, where capture groups made it run its slower submatch engine over
#: every literal, prompts included (2.3x the cost per line, measured). Fields are then taken
#: from the matched tokens with string functions (REQ_TEXT).
REQ_TOKEN_RE = (
    r"\b(?:rid|bootstrap_host|bootstrap_port|bootstrap_room|stream|headers)=(?:"
    + LIT
    + r"""|\{(?:""" + LIT + r"""|[^{}'"])*\}|[^,()\[\]{}'" ][^,()\[\]{}'"]*|)"""
    + r"""|'(?:id|prompt_tokens|completion_tokens|cached_tokens|e2e_latency|type|length|status_code|message)': (?:"""
    + LIT
    + r"""|[^,()\[\]{}'" ][^,()\[\]{}'"]*|)|"""
    + LIT
)

#: key: value pairs of a batch line (after the header), e.g. ``#new-seq: 1`` or ``cuda graph: True``.
BATCH_PAIR_RE = r"(?:^\w+ batch(?: \[\d+\])?[.,] ?|, )([^:,]+): ([^,]*)"
#: The batch keys behind the typed columns of ``engine_batches``.
BATCH_KEYS = ("#new-seq", "#new-token", "#cached-token", "#token", "#running-req", "#queue-req", "token usage",
              "full token usage", "input throughput (token/s)", "gen throughput (token/s)")

#: Prompt/output carriers that must never reach the case database (replaced before storing text).
REDACT_RE = (
    r"""((?:^|[\s,({])(?:text|input_ids|output_ids|input_embeds|prompt|messages|content|request_parameters)=|"""
    r"""['"](?:text|input_ids|output_ids|prompt|messages|content|request_parameters)['"]: ?)"""
    r"""(?:""" + LIT + r"""|['"].*$|\[[^\]]*\]?|[^,)}]*)"""
)
#: Secrets that a server_args line or a header may carry.
SECRET_RE = (
    r"""((?:^|[^\w\-])['"]?(?:api_key|admin_api_key|hf_token|access_token|auth_token|password|secret|"""
    r"""authorization|cookie|x-api-key)['"]?(?:=|: ?))(?:""" + LIT + r"""|[^,)}\s]*)"""
)

#: Every word REDACT_RE or SECRET_RE needs: a capture-free check (one DFA pass) before them.
REDACT_GUARD_RE = (
    r"text|input_ids|output_ids|input_embeds|prompt|messages|content|request_parameters|api_key|api-key|"
    r"hf_token|access_token|auth_token|password|secret|authorization|cookie"
)

# -- SQL ------------------------------------------------------------------------------------------

MACROS = r"""
CREATE OR REPLACE TEMP MACRO _eng_unq(x) AS
    CASE WHEN x IS NULL OR x = '' OR x = 'None' THEN NULL
         WHEN length(x) >= 2 AND ((starts_with(x, '''') AND suffix(x, ''''))
                                  OR (starts_with(x, '"') AND suffix(x, '"'))) THEN x[2:-2]
         ELSE trim(x) END;
-- s: a record's field tokens, each behind chr(1) (REQ_TEXT); the raw value of the first / last
-- token starting with key (a repr never holds a raw control character, so chr(1) cannot occur
-- inside a token).
CREATE OR REPLACE TEMP MACRO _eng_kv_first(s, key) AS
    CASE WHEN contains(s, chr(1) || key) THEN split_part(split_part(s, chr(1) || key, 2), chr(1), 1) END;
CREATE OR REPLACE TEMP MACRO _eng_kv_last(s, key) AS
    CASE WHEN contains(s, chr(1) || key) THEN split_part(split_part(s, chr(1) || key, -1), chr(1), 1) END;
-- Both regexes need one of the guard's words: text without any of them (most) skips them.
CREATE OR REPLACE TEMP MACRO _eng_redact(x) AS
    CASE WHEN regexp_matches(x, '__GUARD__')
         THEN regexp_replace(regexp_replace(x, '__REDACT__', '\1<redacted>', 'g'), '__SECRET__', '\1<redacted>', 'g')
         ELSE x END;
CREATE OR REPLACE TEMP MACRO _eng_cap(x) AS CASE WHEN strlen(x) > 1024 THEN left(x, 1024) ELSE x END;
CREATE OR REPLACE TEMP MACRO _eng_int(x) AS try_cast(x AS BIGINT);
CREATE OR REPLACE TEMP MACRO _eng_health(rid, room, host) AS
    coalesce(starts_with(rid, 'HEALTH_CHECK'), false) OR coalesce(room = 0, false)
    OR coalesce(host = '2.2.2.2', false);
""".replace("__GUARD__", REDACT_GUARD_RE).replace("__REDACT__", REDACT_RE.replace("'", "''")).replace("__SECRET__", SECRET_RE.replace("'", "''"))

#: Ordered classification of a line's message. First match wins; request records come first so
#: that a Finish line quoting a rejection message is still a request record.
CLASSIFY = r"""
CASE
  WHEN rts <> '' THEN CASE
      WHEN contains(msg, 'finished processing request') OR contains(msg, 'request failed with') THEN 'router_request'
      WHEN contains(msg, 'returned error status') OR contains(msg, 'error from decode server')
        OR contains(msg, 'error from prefill server') OR contains(msg, 'Stream error from')
        OR (contains(msg, 'pd_router') AND rlevel IN ('ERROR', 'WARN')) THEN 'router_pd_error'
      WHEN contains(msg, 'Starting router on') THEN 'router_startup'
      ELSE 'router' END
  WHEN starts_with(msg, 'Prefill batch') OR starts_with(msg, 'Decode batch') THEN 'batch'
  WHEN (starts_with(msg, 'INFO:  ') OR starts_with(msg, 'WARNING:  ') OR starts_with(msg, 'ERROR:  ')
        OR starts_with(msg, 'DEBUG:  ')) AND contains(msg, ' HTTP/') AND contains(msg, '" ') THEN 'http'
  WHEN starts_with(msg, 'Receive: ') THEN 'req_received'
  WHEN starts_with(msg, 'Finish: ') THEN 'req_finished'
  WHEN starts_with(msg, 'Receive OpenAI:') THEN 'req_openai'
  WHEN starts_with(msg, '{') AND contains(msg, '"request.received.openai"') THEN 'req_openai'
  WHEN starts_with(msg, '{') AND contains(msg, '"request.') THEN 'req_json'
  WHEN contains(msg, 'ReqTimeStats(') OR contains(msg, 'Req Time Stats(') THEN 'time_stats'
  WHEN contains(msg, 'exceeds the maximum allowed length') THEN 'rej_input_length'
  WHEN contains(msg, 'Truncated. len(req.origin_input_ids)=')
    OR starts_with(msg, 'Request length is longer than the KV cache pool') THEN 'rej_auto_truncate'
  WHEN contains(msg, 'exceeds the maximum number of tokens') THEN 'rej_pd_capacity'
  WHEN contains(msg, 'is longer than the model''s context length')
    OR contains(msg, 'exceeds the model''s maximum context length') THEN 'rej_context_length'
  WHEN contains(msg, 'Prefill transfer failed') THEN 'ev_prefill_transfer_failed'
  WHEN contains(msg, 'Decode transfer failed') THEN 'ev_decode_transfer_failed'
  WHEN contains(msg, 'bootstrap failed') OR contains(msg, 'handshake failed')
    OR contains(msg, 'Bootstrap failed') THEN 'ev_bootstrap_failed'
  WHEN contains(msg, 'timed out') AND contains(msg, 'KVPoll.') THEN 'ev_kvpoll_timeout'
  WHEN contains(msg, 'checksum mismatch') THEN 'ev_kv_checksum_mismatch'
  WHEN contains(msg, 'Context corruption detected') THEN 'ev_context_corruption'
  WHEN (contains(msg, 'checksum') OR contains(msg, 'canary')) AND contains(msg, 'verified') THEN 'ev_kv_verified'
  WHEN (contains(lower(msg), 'mooncake') OR contains(lower(msg), 'nixl') OR contains(msg, 'transfer engine'))
    AND (contains(lower(msg), 'fail') OR contains(lower(msg), 'error')) THEN 'ev_transfer_backend_error'
  WHEN starts_with(msg, 'server_args=') THEN 'st_server_args'
  WHEN contains(msg, 'KV Cache is allocated') THEN 'st_kv_cache'
  WHEN contains(left(msg, 40), 'max_total_num_tokens=') THEN 'st_max_total'
  WHEN contains(msg, 'fired up and ready to roll') THEN 'st_ready'
  WHEN contains(msg, 'BootstrapServer started') OR contains(msg, 'Bootstrap server started') THEN 'st_bootstrap'
  WHEN starts_with(msg, 'KV pool holds ') THEN 'st_pool_warning'
  WHEN starts_with(msg, 'Load weight') OR starts_with(msg, 'Init torch distributed')
    OR starts_with(msg, 'Memory pool end') OR starts_with(msg, 'Capture cuda graph')
    OR starts_with(msg, 'Capture npu graph') OR starts_with(msg, 'Capture cpu graph')
    OR starts_with(msg, 'Mamba Cache is allocated') OR starts_with(msg, 'Attention backend')
    THEN 'st_other'
  WHEN contains(msg, 'disaggregation mode warmup') THEN 'warmup'
  WHEN ets <> '' THEN 'engine'
  WHEN msg = '' THEN 'blank'
  WHEN starts_with(msg, 'Traceback (') OR starts_with(msg, ' ') OR starts_with(msg, chr(9))
    OR starts_with(msg, 'During handling of the above exception')
    OR starts_with(msg, 'The above exception was the direct cause')
    OR starts_with(msg, 'Exception in thread ')
    OR regexp_matches(left(msg, 120), '^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)\b')
    OR regexp_matches(left(msg, 120), '^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+(:|$)')
    THEN 'traceback'
  WHEN regexp_matches(left(msg, 16), '^[IWEF]\d{4} \d\d:\d\d') THEN 'native'
  WHEN contains(msg, 'it/s]') OR contains(msg, 's/it]') OR contains(msg, '%|') THEN 'progress'
  ELSE 'unrecognised'
END
"""

#: The common engine prefix alone: ``[local time[.ms][ rank tags]] ``, optionally behind a Ray
#: actor prefix. Anchored, four groups, on the first 120 characters: RE2 runs it as a DFA, about
#: three times cheaper per line than PREFIX_RE (measured), so PREFIX_RE runs only where it fails
#: (collector columns, router lines, unprefixed lines). Rank tags: any upper-case tag with a
#: number, so a release adding a tag still parses (the canonical order sorts the known ones).
COMMON_PREFIX_RE = (
    r"^((?:\([A-Za-z_]\w* pid=\d+(?:, ip=[0-9A-Fa-f.:]+)?\) ?)?"
    r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?((?: [A-Z][A-Z_]*\d+)*)\] ?)"
)

#: A request record's field tokens: the tokeniser's matches minus the bare literals (a prompt, a
#: dict key), each behind chr(1); a match starting with a quote is a ``'name': value`` field.
REQ_TOKENS = (
    "chr(1) || array_to_string(list_filter(regexp_extract_all(msg, '" + REQ_TOKEN_RE.replace("'", "''") + "'), "
    """lambda x: NOT starts_with(x, '"') AND (NOT starts_with(x, '''') OR contains(left(x, 24), ''': '))), chr(1))"""
)

#: Stage 1: split every line into prefix parts and message, classify, compute UTC time.
#: ``_eng_tz(t)`` (defined per ingest) converts a naive local TIMESTAMP to naive UTC.
#: Each line is matched once with COMMON_PREFIX_RE; only lines it does not match take the full
#: PREFIX_RE (a CASE branch runs on its rows only).
STAGE = r"""
CREATE OR REPLACE TEMP TABLE _eng_cls AS
SELECT line_no, seq, pre,
       -- a request record keeps only its field tokens (no prompt text, far less to store); the
       -- tokeniser runs here, where the Arrow scan is parallel (a segment of 2 KB request
       -- lines is less than one row group of _eng_cls, so a later statement ran on one thread)
       CASE WHEN cls IN ('req_received', 'req_finished') THEN NULL ELSE msg END AS msg,
       ets, ems, rts, rlevel, cls, ranks, ts, collector_ts, ts_inferred, attached_to_line,
       CASE WHEN cls IN ('req_received', 'req_finished') THEN __REQTOKENS__ END AS req_tokens
FROM (
SELECT line_no, seq, pre, msg, ets, ems, rts, rlevel,
       __CLASSIFY__ AS cls,
       nullif(ltrim(ranks_raw), '') AS ranks,
       CASE WHEN ets = '' THEN (CASE WHEN rts <> '' THEN try_cast(replace(rts, 'T', ' ') AS TIMESTAMP) END)
            WHEN ems = '' THEN _eng_tz(try_cast(ets AS TIMESTAMP))
            ELSE _eng_tz(try_cast(ets || '.' || ems AS TIMESTAMP)) END AS ts,
       -- the collection wrapper's time (CRI, journald, ...) first, else collector columns in the line
       CASE WHEN wrapper_ts IS NOT NULL THEN wrapper_ts
            WHEN cms <> '' THEN epoch_ms(cms::BIGINT)
            WHEN ciso <> '' THEN try_cast(ciso AS TIMESTAMPTZ)::TIMESTAMP
       END AS collector_ts,
       false AS ts_inferred,
       CAST(NULL AS BIGINT) AS attached_to_line
FROM (
  SELECT line_no, seq, wrapper_ts, pre, substr(line, length(pre) + 1, 1000000000) AS msg, cms, ciso, ets, ems,
         ranks_raw, rts, rlevel
  FROM (
    SELECT line_no, seq, wrapper_ts, line,
           CASE WHEN fast THEN c.pre ELSE p.pre END AS pre,
           CASE WHEN fast THEN '' ELSE p.cms END AS cms,
           CASE WHEN fast THEN '' ELSE p.ciso END AS ciso,
           CASE WHEN fast THEN c.ets ELSE p.ets END AS ets,
           CASE WHEN fast THEN c.ems ELSE p.ems END AS ems,
           CASE WHEN fast THEN c.ranks ELSE p.ranks END AS ranks_raw,
           CASE WHEN fast THEN '' ELSE p.rts END AS rts,
           CASE WHEN fast THEN '' ELSE p.rlevel END AS rlevel
    FROM (
      SELECT line_no, seq, wrapper_ts, line, c, fast,
             CASE WHEN NOT fast THEN regexp_extract(left(line, 256), '__PREFIX__', __GROUPS__) END AS p
      FROM (
        SELECT line_no, seq, wrapper_ts, line, c, c.pre <> '' AS fast
        FROM (
          SELECT line_no, seq, wrapper_ts, line,
                 regexp_extract(left(line, 120), '__COMMON__', ['pre', 'ets', 'ems', 'ranks']) AS c
          FROM (SELECT line_no, seq, wrapper_ts,
                       CASE WHEN contains(line, chr(27)) THEN regexp_replace(line, '\x1b\[[0-9;?]*[A-Za-z]', '', 'g')
                            ELSE line END AS line
                FROM _eng_raw)
        )
      )
    )
  )
)
)
""".replace("__REQTOKENS__", REQ_TOKENS).replace("__PREFIX__", PREFIX_RE.replace("'", "''")).replace(
    "__GROUPS__", "[" + ", ".join(f"'{g}'" for g in PREFIX_GROUPS) + "]"
).replace("__COMMON__", COMMON_PREFIX_RE.replace("'", "''")).replace("__CLASSIFY__", CLASSIFY)

#: Stage 2 (only when some line lacks a prefix): time from the collector, else the nearest
#: earlier timestamp of the file (inferred); continuation lines point at the line they follow.
INFER = r"""
UPDATE _eng_cls SET ts = coalesce(_eng_cls.ts, x.collector_ts, x.prev_ts),
                    ts_inferred = _eng_cls.ts IS NULL AND coalesce(x.collector_ts, x.prev_ts) IS NOT NULL,
                    attached_to_line = x.prev_line
FROM (
    -- Unprefixed lines are few: group consecutive ones into islands (seq - row_number); the
    -- line before an island is the prefixed line they follow (seq, the logical line's index in
    -- the file, is dense where line numbers are not: joined partial lines, rejected wrapper lines).
    -- An island at the start of a segment follows the previous segment's last prefixed line
    -- (the '__carry__' row).
    SELECT u.seq, u.collector_ts,
           CASE WHEN p.line_no IS NOT NULL THEN p.line_no ELSE k.line_no END AS prev_line,
           CASE WHEN p.line_no IS NOT NULL THEN p.ts ELSE k.ts END AS prev_ts
    FROM (SELECT seq, collector_ts, min(seq) OVER (PARTITION BY grp) AS island
          FROM (SELECT line_no, seq, collector_ts, seq - row_number() OVER (ORDER BY seq) AS grp
                FROM _eng_cls WHERE ets = '' AND rts = '')) u
    LEFT JOIN _eng_cls p ON p.seq = u.island - 1
    LEFT JOIN (SELECT line_no, ts FROM _eng_cls WHERE cls = '__carry__') k ON true
) x
WHERE _eng_cls.seq = x.seq
"""

#: Batch lines. The message is stored as printed (``fields_raw``; the view ``engine_batch_fields``
#: turns its pairs into the ``fields`` MAP when read: building a MAP per row at load time cost more
#: than all the rest). Typed columns: lines whose pairs are plain ``k: v, k: v`` become a JSON object
#: read into a STRUCT of the typed keys only (as the view builds its MAP, but far cheaper); other
#: lines take the view's regex path (keys and values trimmed, the first of a repeated key wins).
BATCHES = r"""
INSERT INTO engine_batches
SELECT $node, ts, ts_inferred, ranks, kind, iter,
       _eng_int(f['#new-seq']), _eng_int(f['#new-token']), _eng_int(f['#cached-token']),
       _eng_int(f['#token']), _eng_int(f['#running-req']), _eng_int(f['#queue-req']),
       try_cast(coalesce(f['token usage'], f['full token usage']) AS DOUBLE),
       try_cast(coalesce(f['input throughput (token/s)'], f['gen throughput (token/s)']) AS DOUBLE),
       $file_id, line_no, msg
FROM (
    SELECT line_no, ts, ts_inferred, ranks, kind, iter, msg,
           CASE WHEN ok THEN json_transform('{"' || replace(replace(body, ', ', '", "'), ': ', '": "') || '"}',
                                            '__STRUCT__')
                ELSE __FROM_MAP__ END AS f
    FROM (
    SELECT *, CASE WHEN NOT ok THEN (CASE WHEN len(list_distinct(k)) = len(k) THEN map(k, v)
                                          ELSE map(list_filter(k, lambda x, i: list_position(k, x) = i),
                                                   list_filter(v, lambda x, i: list_position(k, k[i]) = i)) END)
              END AS m
    FROM (
        SELECT *,
               CASE WHEN NOT ok THEN list_transform(regexp_extract_all(msg, '__PAIR__', 1), lambda x: trim(x)) END AS k,
               CASE WHEN NOT ok THEN list_transform(regexp_extract_all(msg, '__PAIR__', 2), lambda x: trim(x)) END AS v
        FROM (
            SELECT *, NOT contains(body, '"') AND NOT contains(body, '\') AND body <> ''
                      AND len(string_split(body, ', ')) = len(string_split(body, ': ')) - 1 AS ok
            FROM (
                SELECT line_no, ts, ts_inferred, ranks, msg,
                       CASE WHEN starts_with(msg, 'Prefill') THEN 'prefill' ELSE 'decode' END AS kind,
                       CASE WHEN substr(msg, 14, 2) = ' [' OR substr(msg, 13, 2) = ' ['
                            THEN try_cast(regexp_extract(left(msg, 40), '^\w+ batch \[(\d+)\]', 1) AS BIGINT) END AS iter,
                       -- = rtrim(trim(...), ','): the body never starts with a space (trim is slow)
                       CASE WHEN suffix(rb, ' ') OR suffix(rb, ',') THEN regexp_replace(rb, ',* *$', '') ELSE rb END AS body
                FROM (SELECT *, substr(msg, instr(msg, ' #') + 1, 1000000000) AS rb FROM _eng_cls WHERE cls = 'batch')
            )
        )
    )
    )
)
""".replace("__PAIR__", BATCH_PAIR_RE.replace("'", "''")).replace(
    "__STRUCT__", "{" + ", ".join(f'"{k}": "VARCHAR"' for k in BATCH_KEYS) + "}").replace(
    "__FROM_MAP__", "{" + ", ".join(f"'{k}': m['{k}']" for k in BATCH_KEYS) + "}")

HTTP = r"""
INSERT INTO engine_http
SELECT $node, ts, ts_inferred, h.client, h.method, h.path, h.ver, try_cast(h.status AS INTEGER),
       $file_id, line_no
FROM (SELECT line_no, ts, ts_inferred,
             regexp_extract(msg, '^\w+: +(\S+) - "(\S+) (\S+) ([^"\s]+)" (\d{3})',
                            ['client', 'method', 'path', 'ver', 'status']) AS h
      FROM _eng_cls WHERE cls = 'http')
"""

#: Receive:/Finish: text records, fields taken by key through the tokeniser (never by position):
#: the tokens that are fields (not bare literals) are joined behind chr(1) separators, then each
#: field is the first (``name=``, the request object's own) or last (``'name': ``, the innermost
#: meta_info) token of its name. Each layer reads the one below by column: a macro applied to an
#: expression copies the expression into every use (``_eng_unq`` uses its argument six times),
#: which multiplied the string work and took 84 ms just to plan, per segment.
REQ_TEXT = r"""
INSERT INTO engine_requests
SELECT $node, ts, ts_inferred, kind, rid, host, try_cast(port AS INTEGER), try_cast(room AS BIGINT),
       CASE lower(stream) WHEN 'true' THEN true WHEN 'false' THEN false END,
       coalesce(hmap['x-request-id'], hmap['x-correlation-id'], hmap['x-trace-id'], hmap['request-id']),
       _eng_redact(hjson),
       _eng_int(_eng_unq(r_pt)), _eng_int(_eng_unq(r_ct)), _eng_int(_eng_unq(r_cached)),
       ftype,
       CASE WHEN ftype = 'length' THEN _eng_int(_eng_unq(r_len)) END,
       CASE WHEN ftype = 'abort' THEN try_cast(_eng_unq(r_status) AS INTEGER) END,
       CASE WHEN ftype = 'abort' THEN _eng_cap(_eng_unq(r_msg)) END,
       try_cast(_eng_unq(r_lat) AS DOUBLE),
       NULL, NULL, NULL,
       _eng_health(rid, try_cast(room AS BIGINT), host),
       $file_id, line_no
FROM (
SELECT *, to_json(hmap)::VARCHAR AS hjson
FROM (
    SELECT *,
           CASE WHEN hv IS NOT NULL AND len(hp) > 0 AND len(list_distinct(list_transform(hp, lambda x: lower(coalesce(nullif(x.k, ''), x.k_))))) = len(hp)
                THEN map(list_transform(hp, lambda x: lower(coalesce(nullif(x.k, ''), x.k_))), list_transform(hp, lambda x: _eng_unq(x.v))) END AS hmap
    FROM (
        SELECT *,
               CASE WHEN kind = 'finished' THEN _eng_unq(r_type) END AS ftype,
               coalesce(_eng_unq(r_rid), _eng_unq(r_id)) AS rid,
               _eng_unq(r_host) AS host, _eng_unq(r_port) AS port, _eng_unq(r_room) AS room,
               _eng_unq(r_stream) AS stream,
               regexp_extract_all(coalesce(hv, ''),
                   '[{,] ?(?:''([^'']+)''|"([^"]+)"): (__LIT__)', ['k', 'k_', 'v']) AS hp
        FROM (
            SELECT line_no, ts, ts_inferred, kind,
                   _eng_kv_first(s, 'rid=') AS r_rid, _eng_kv_last(s, '''id'': ') AS r_id,
                   _eng_kv_first(s, 'bootstrap_host=') AS r_host, _eng_kv_first(s, 'bootstrap_port=') AS r_port,
                   _eng_kv_first(s, 'bootstrap_room=') AS r_room, _eng_kv_first(s, 'stream=') AS r_stream,
                   _eng_kv_first(s, 'headers=') AS hv,
                   _eng_kv_last(s, '''prompt_tokens'': ') AS r_pt, _eng_kv_last(s, '''completion_tokens'': ') AS r_ct,
                   _eng_kv_last(s, '''cached_tokens'': ') AS r_cached, _eng_kv_last(s, '''type'': ') AS r_type,
                   _eng_kv_last(s, '''length'': ') AS r_len, _eng_kv_last(s, '''status_code'': ') AS r_status,
                   _eng_kv_last(s, '''message'': ') AS r_msg, _eng_kv_last(s, '''e2e_latency'': ') AS r_lat
            FROM (
                SELECT line_no, ts, ts_inferred,
                       CASE cls WHEN 'req_received' THEN 'received' ELSE 'finished' END AS kind,
                       req_tokens AS s
                FROM _eng_cls WHERE cls IN ('req_received', 'req_finished')
            )
        )
    )
)
)
""".replace("__LIT__", LIT.replace("'", "''"))

#: JSON request records (``--log-requests-format json``): one parse per line via the list form.
REQ_JSON = r"""
INSERT INTO engine_requests
SELECT $node, coalesce(ts, jts), CASE WHEN ts IS NULL AND jts IS NOT NULL THEN false ELSE ts_inferred END,
       kind, rid, host, try_cast(port AS INTEGER), try_cast(room AS BIGINT), try_cast(stream AS BOOLEAN),
       coalesce(j[8], j[9], j[10], j[11]),
       CASE WHEN j[7] IS NULL THEN NULL ELSE _eng_redact(j[7]) END,
       _eng_int(j[12]), _eng_int(j[13]), _eng_int(j[14]), ftype,
       CASE WHEN ftype = 'length' THEN _eng_int(j[16]) END,
       try_cast(j[17] AS INTEGER), _eng_cap(j[18]), try_cast(j[19] AS DOUBLE),
       NULL, NULL, NULL, _eng_health(rid, try_cast(room AS BIGINT), host), $file_id, line_no
FROM (
    SELECT *, j[1] AS rid, j[3] AS host, j[4] AS port, j[5] AS room, j[6] AS stream, j[15] AS ftype,
           CASE WHEN j[20] IS NULL THEN NULL
                WHEN regexp_matches(j[20], '(Z|[+-]\d\d:?\d\d)$') THEN try_cast(j[20] AS TIMESTAMPTZ)::TIMESTAMP
                ELSE _eng_tz(try_cast(j[20] AS TIMESTAMP)) END AS jts
    FROM (
        SELECT line_no, ts, ts_inferred,
               CASE WHEN contains(left(msg, 200), 'request.finished') THEN 'finished' ELSE 'received' END AS kind,
               json_extract_string(msg, ['$.rid', '$.event', '$.obj.bootstrap_host', '$.obj.bootstrap_port',
                   '$.obj.bootstrap_room', '$.obj.stream', '$.headers', '$.headers."x-request-id"',
                   '$.headers."x-correlation-id"', '$.headers."x-trace-id"', '$.headers."request-id"',
                   '$.out.meta_info.prompt_tokens', '$.out.meta_info.completion_tokens',
                   '$.out.meta_info.cached_tokens', '$.out.meta_info.finish_reason.type',
                   '$.out.meta_info.finish_reason.length', '$.out.meta_info.finish_reason.status_code',
                   '$.out.meta_info.finish_reason.message', '$.out.meta_info.e2e_latency',
                   '$.timestamp']) AS j
        FROM _eng_cls WHERE cls = 'req_json' AND json_valid(msg)
    )
)
"""

#: ``--export-metrics-to-file`` records; ``request_parameters`` (may hold the prompt) is read
#: for its routing fields only and never stored.
REQ_METRICS = r"""
INSERT INTO engine_requests
SELECT $node, coalesce(jts, $file_hour), jts IS NULL, 'metrics',
       coalesce(j[1], p[1]), p[2], try_cast(p[3] AS INTEGER), try_cast(p[4] AS BIGINT),
       try_cast(p[5] AS BOOLEAN), NULL, NULL,
       _eng_int(coalesce(j[2], j[9])), _eng_int(coalesce(j[3], j[10])), _eng_int(coalesce(j[4], j[11])),
       ftype, CASE WHEN ftype = 'length' THEN _eng_int(j[6]) END, try_cast(j[7] AS INTEGER),
       _eng_cap(j[8]), try_cast(coalesce(j[12], j[13]) AS DOUBLE), NULL, NULL, NULL,
       _eng_health(coalesce(j[1], p[1]), try_cast(p[4] AS BIGINT), p[2]), $file_id, line_no
FROM (
    SELECT *, coalesce(j[5], CASE WHEN j[14] IS NOT NULL AND NOT starts_with(j[14], '{') THEN j[14] END) AS ftype,
           CASE WHEN j[15] IS NULL THEN NULL
                WHEN regexp_matches(j[15], '(Z|[+-]\d\d:?\d\d)$') THEN try_cast(j[15] AS TIMESTAMPTZ)::TIMESTAMP
                ELSE _eng_tz(try_cast(j[15] AS TIMESTAMP)) END AS jts,
           CASE WHEN json_valid(j[16]) THEN json_extract_string(j[16], ['$.rid', '$.bootstrap_host',
               '$.bootstrap_port', '$.bootstrap_room', '$.stream'])
                ELSE [NULL, NULL, NULL, NULL, NULL] END AS p
    FROM (
        SELECT line_no, json_extract_string(msg, ['$.id', '$.prompt_tokens', '$.completion_tokens',
                   '$.cached_tokens', '$.finish_reason.type', '$.finish_reason.length',
                   '$.finish_reason.status_code', '$.finish_reason.message',
                   '$.meta_info.prompt_tokens', '$.meta_info.completion_tokens', '$.meta_info.cached_tokens',
                   '$.e2e_latency', '$.meta_info.e2e_latency', '$.finish_reason', '$.timestamp',
                   '$.request_parameters']) AS j
        FROM _eng_cls WHERE cls = 'req_metrics'
    )
)
"""

TIME_STATS = r"""
INSERT INTO engine_requests
SELECT $node, ts, ts_inferred, 'time_stats', rid, NULL, NULL, room, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       _eng_int(nullif(regexp_extract(head, 'input[_ ]len=(\d+)', 1), '')),
       _eng_int(nullif(regexp_extract(head, 'output[_ ]len=(\d+)', 1), '')),
       nullif(regexp_extract(head, '\btype=(\w+)', 1), ''),
       _eng_health(rid, room, NULL), $file_id, line_no
FROM (
    SELECT *, nullif(trim(regexp_extract(head, '\brid=([^,)\s]+)', 1), '''"'), '') AS rid,
           try_cast(nullif(regexp_extract(head, 'bootstrap_room=(\d+)', 1), '') AS BIGINT) AS room
    FROM (SELECT line_no, ts, ts_inferred, regexp_extract(msg, 'Stats\(([^)]*)\)', 1) AS head
          FROM _eng_cls WHERE cls = 'time_stats')
)
"""

REJECTIONS = r"""
INSERT INTO engine_rejections
SELECT $node, ts, ts_inferred, ranks, kind,
       nullif(trim(rid, '''" '), ''), _eng_int(nullif(inp, '')), _eng_int(nullif(lim, '')),
       _eng_cap(msg), $file_id, line_no
FROM (
    SELECT line_no, ts, ts_inferred, ranks, msg, substr(cls, 5) AS kind,
           CASE cls
             WHEN 'rej_input_length' THEN regexp_extract(msg, 'Input length \((\d+) tokens\)', 1)
             WHEN 'rej_auto_truncate' THEN regexp_extract(msg, 'len\(req\.origin_input_ids\)=(\d+)', 1)
             WHEN 'rej_pd_capacity' THEN regexp_extract(msg, 'maximum number of tokens: (\d+) > ', 1)
             ELSE coalesce(nullif(regexp_extract(msg, 'input \((\d+) tokens\)', 1), ''),
                           regexp_extract(msg, 'You requested a total of (\d+)', 1))
           END AS inp,
           CASE cls
             WHEN 'rej_input_length' THEN regexp_extract(msg, 'maximum allowed length \((\d+) tokens\)', 1)
             WHEN 'rej_auto_truncate' THEN regexp_extract(msg, 'max_req_input_len=(\d+)', 1)
             WHEN 'rej_pd_capacity' THEN regexp_extract(msg, 'maximum number of tokens: \d+ > (\d+)', 1)
             ELSE coalesce(nullif(regexp_extract(msg, 'context length \((\d+) tokens\)', 1), ''),
                           regexp_extract(msg, 'maximum context length of (\d+) tokens', 1))
           END AS lim,
           CASE cls
             WHEN 'rej_pd_capacity' THEN regexp_extract(msg, 'Request (\S+) exceeds', 1)
             ELSE regexp_extract(msg, '\brid=([^,\s]+)', 1)
           END AS rid
    FROM _eng_cls WHERE starts_with(cls, 'rej_')
)
"""

EVENTS = r"""
INSERT INTO engine_events
SELECT $node, c.ts, c.ts_inferred, c.ranks, substr(c.cls, 4),
       nullif(trim(coalesce(nullif(regexp_extract(c.msg, '(?:^|[\s.(])rid=([^\s,)]+)', 1), ''),
                            regexp_extract(c.msg, '\breq=([^\s,)]+)', 1)), '''",'), ''),
       try_cast(coalesce(
           nullif(regexp_extract(c.msg, 'bootstrap_room[=: ]+(\d+)', 1), ''),
           nullif(regexp_extract(c.msg, '^Request (\d+) timed out', 1), '')) AS BIGINT),
       NULL,
       _eng_cap(c.msg), $file_id, c.line_no
FROM _eng_cls c WHERE starts_with(c.cls, 'ev_')
"""

ROUTER_REQUESTS = r"""
INSERT INTO router_requests
SELECT $node, ts, rlevel,
       nullif(trim(regexp_extract(span, '\brequest_id=("[^"]*"|[^\s}]+)', 1), '"'), ''),
       nullif(regexp_extract(span, '\bmethod=([^\s}]+)', 1), ''),
       nullif(regexp_extract(span, '\buri=([^\s}]+)', 1), ''),
       try_cast(nullif(coalesce(nullif(regexp_extract(span, '\bstatus_code=(\d+)', 1), ''),
                                regexp_extract(msg, '\bstatus(?:_code)?[=: ]+(\d{3})\b', 1)), '') AS INTEGER),
       _eng_int(nullif(regexp_extract(span, '\blatency=(\d+)', 1), '')),
       nullif(regexp_extract(rest, '^([\w:]+): ', 1), ''),
       _eng_cap(regexp_replace(rest, '^[\w:]+: (?:[\w/.\-]+:\d+: )?', '')), $file_id, line_no
FROM (
    SELECT line_no, ts, rlevel, msg,
           regexp_extract(msg, '^\w+\{([^}]*)\}', 1) AS span,
           regexp_replace(msg, '^\w+\{[^}]*\}: ', '') AS rest
    FROM _eng_cls WHERE cls = 'router_request'
)
"""

#: Router PD errors; a message wrapped onto the next (unprefixed) line is joined to it.
ROUTER_EVENTS = r"""
INSERT INTO engine_events
SELECT $node, c.ts, false, NULL, 'router_pd_error',
       nullif(trim(regexp_extract(c.msg, 'request_id=("[^"]*"|\S+)', 1), '"'), ''),
       try_cast(nullif(regexp_extract(c.msg, 'bootstrap_room[=: ]+(\d+)', 1), '') AS BIGINT),
       try_cast(nullif(regexp_extract(c.msg || ' ' || coalesce(n.msg, ''), '\bstatus[=: ]+(\d{3})\b', 1), '') AS INTEGER),
       _eng_cap(c.msg || CASE WHEN n.msg IS NOT NULL THEN ' ' || n.msg ELSE '' END), $file_id, c.line_no
FROM _eng_cls c
LEFT JOIN _eng_cls n ON n.seq = c.seq + 1 AND n.ets = '' AND n.rts = ''
    AND n.cls IN ('unrecognised', 'traceback', 'blank') AND n.msg <> ''
WHERE c.cls = 'router_pd_error'
"""

#: Startup facts (kept whole, for engine_starts): the raw key/value text the builder needs.
FACTS = r"""
INSERT INTO engine_startup_facts
SELECT $node, ts, ts_inferred, ranks, substr(cls, 4), $file_id, line_no,
       CASE WHEN cls = 'st_server_args' THEN to_json(map(
           list_transform(idx, lambda i: kk[i]),
           list_transform(idx, lambda i: CASE
               WHEN regexp_matches(kk[i], '(^|_)(api_key|token|password|secret)$') AND _eng_unq(v[i]) IS NOT NULL
               THEN '<redacted>' ELSE _eng_unq(v[i]) END)))::VARCHAR END,
       CASE WHEN cls = 'st_server_args' THEN NULL ELSE _eng_cap(_eng_redact(msg)) END
FROM (
    SELECT *, list_filter(range(1, len(kk) + 1),
                          lambda i: kk[i] IS NOT NULL AND list_position(kk, kk[i]) = i) AS idx
    FROM (
        SELECT *, list_transform(range(1, len(v) + 1), lambda i: coalesce(k1[i], k2[i])) AS kk
        FROM (
            SELECT line_no, ts, ts_inferred, ranks, cls, msg,
                   CASE WHEN cls = 'st_server_args' THEN regexp_extract_all(msg, '__TOKEN__', 1) ELSE [] END AS k1,
                   CASE WHEN cls = 'st_server_args' THEN regexp_extract_all(msg, '__TOKEN__', 2) ELSE [] END AS k2,
                   CASE WHEN cls = 'st_server_args' THEN regexp_extract_all(msg, '__TOKEN__', 3) ELSE [] END AS v
            FROM _eng_cls WHERE starts_with(cls, 'st_')
        )
    )
)
""".replace("__TOKEN__", TOKEN_RE.replace("'", "''"))

#: Everything else, by kind (request-log-like text is redacted, everything capped at 1 KiB).
OTHER = r"""
INSERT INTO engine_other_lines
SELECT $node, ts, ts_inferred,
       CASE WHEN starts_with(cls, 'st_') THEN 'startup'
            WHEN cls IN ('router_startup') THEN 'router'
            WHEN cls = 'req_openai' THEN 'request_openai'
            ELSE cls END,
       attached_to_line,
       CASE WHEN cls = 'req_openai' THEN pre || regexp_extract(msg, '^[^{(]*', 0) || '<redacted>'
            WHEN cls = 'st_server_args' THEN _eng_cap(pre || _eng_redact(left(msg, 4096)))
            ELSE _eng_cap(pre || _eng_redact(left(msg, 4096))) END,
       $file_id, line_no
FROM _eng_cls
WHERE cls NOT IN ('batch', 'http', 'req_received', 'req_finished', 'req_json', 'req_metrics', 'time_stats',
                  'router_request', 'router_pd_error')
  AND NOT starts_with(cls, 'rej_') AND NOT starts_with(cls, 'ev_')
"""

#: Lines that cannot be loaded: JSON request records that do not parse.
REJECTS = r"""
SELECT line_no, 'invalid JSON request record', pre || msg FROM _eng_cls
WHERE (cls = 'req_json' AND NOT json_valid(msg)) OR (cls = 'req_metrics' AND NOT json_valid(msg))
"""

