"""The SQL half of the scanner: rare kinds read by DuckDB over just their lines, and the inserts.

Startup lines (``server_args`` parsed into a JSON object) and JSON request records
(``--log-requests-format json``, ``--export-metrics-to-file``) are few, or already JSON: DuckDB reads
them from an Arrow view ``_engine_stage`` of those lines only (``line_no``, ``byte_offset``, ``ts``,
``ts_inferred``, ``msg``, ...). Nothing is stored from the view but the columns selected.

Example:
    >>> "server_args" in FACTS
    True
"""

from __future__ import annotations

from forensics.sources.engine.redact import LIT, REDACT_GUARD_RE, REDACT_RE, SECRET_RE

__all__ = ["FACTS", "INSERTS", "MACROS", "REQ_JSON", "REQ_METRICS"]

#: Tokeniser for dataclass / dict reprs (server_args=...): ``name=value`` (group 1), ``'name': value``
#: (group 2) or a bare literal (consumed whole); group 3 is the scalar value.
TOKEN_RE = (
    r"(?:([A-Za-z_]\w*)=|'([\w.\-]+)': )("
    + LIT
    + r"""|[^,()\[\]{}'" ][^,()\[\]{}'"]*|)|"""
    + LIT
)

MACROS = r"""
CREATE OR REPLACE TEMP MACRO _eng_unq(x) AS
    CASE WHEN x IS NULL OR x = '' OR x = 'None' THEN NULL
         WHEN length(x) >= 2 AND ((starts_with(x, '''') AND suffix(x, ''''))
                                  OR (starts_with(x, '"') AND suffix(x, '"'))) THEN x[2:-2]
         ELSE trim(x) END;
CREATE OR REPLACE TEMP MACRO _eng_redact(x) AS
    CASE WHEN regexp_matches(x, '__GUARD__')
         THEN regexp_replace(regexp_replace(x, '__REDACT__', '\1<redacted>', 'g'), '__SECRET__', '\1<redacted>', 'g')
         ELSE x END;
CREATE OR REPLACE TEMP MACRO _eng_cap(x) AS CASE WHEN strlen(x) > 1024 THEN left(x, 1024) ELSE x END;
CREATE OR REPLACE TEMP MACRO _eng_int(x) AS try_cast(x AS BIGINT);
CREATE OR REPLACE TEMP MACRO _eng_localts(x, tz) AS
    CASE WHEN x IS NULL THEN NULL
         WHEN regexp_matches(x, '(Z|[+-]\d\d:?\d\d)$') THEN try_cast(x AS TIMESTAMPTZ)::TIMESTAMP
         WHEN tz = 'UTC' THEN try_cast(x AS TIMESTAMP)
         ELSE timezone('UTC', timezone(tz, try_cast(x AS TIMESTAMP))) END;
""".replace("__GUARD__", REDACT_GUARD_RE).replace("__REDACT__", REDACT_RE.replace("'", "''")).replace(
    "__SECRET__", SECRET_RE.replace("'", "''"))

#: Startup facts (kept whole, for engine_starts): server_args parsed by key (secrets redacted),
#: other facts as their redacted text.
FACTS = r"""
SELECT ts, ts_inferred, ranks, fact, line_no, byte_offset,
       CASE WHEN fact = 'server_args' THEN to_json(map(
           list_transform(idx, lambda i: kk[i]),
           list_transform(idx, lambda i: CASE
               WHEN regexp_matches(kk[i], '(^|_)(api_key|token|password|secret)$') AND _eng_unq(v[i]) IS NOT NULL
               THEN '<redacted>' ELSE _eng_unq(v[i]) END)))::VARCHAR END AS args,
       CASE WHEN fact = 'server_args' THEN NULL ELSE _eng_cap(_eng_redact(msg)) END AS text
FROM (
    SELECT *, list_filter(range(1, len(kk) + 1),
                          lambda i: kk[i] IS NOT NULL AND list_position(kk, kk[i]) = i) AS idx
    FROM (
        SELECT *, list_transform(range(1, len(v) + 1), lambda i: coalesce(k1[i], k2[i])) AS kk
        FROM (
            SELECT line_no, byte_offset, ts, ts_inferred, ranks, fact, msg,
                   CASE WHEN fact = 'server_args' THEN regexp_extract_all(msg, '__TOKEN__', 1) ELSE [] END AS k1,
                   CASE WHEN fact = 'server_args' THEN regexp_extract_all(msg, '__TOKEN__', 2) ELSE [] END AS k2,
                   CASE WHEN fact = 'server_args' THEN regexp_extract_all(msg, '__TOKEN__', 3) ELSE [] END AS v
            FROM _engine_stage
        )
    )
)
""".replace("__TOKEN__", TOKEN_RE.replace("'", "''"))

#: JSON request records (``--log-requests-format json``): one parse per line via the list form.
#: A record's own ``timestamp`` is used where the line has no time (zone-less values in the
#: engine zone). ``_valid`` is false for a line that is not valid JSON (rejected).
REQ_JSON = r"""
SELECT coalesce(ts, jts) AS ts,
       CASE WHEN ts IS NULL AND jts IS NOT NULL THEN false ELSE ts_inferred END AS ts_inferred,
       kind, rid, host AS bootstrap_host, try_cast(port AS INTEGER) AS bootstrap_port,
       try_cast(room AS BIGINT) AS bootstrap_room, try_cast(stream AS BOOLEAN) AS stream,
       coalesce(j[7], j[8], j[9], j[10]) AS header_request_id,
       _eng_int(j[11]) AS prompt_tokens, _eng_int(j[12]) AS completion_tokens, _eng_int(j[13]) AS cached_tokens,
       ftype AS finish_type,
       CASE WHEN ftype = 'length' THEN _eng_int(j[15]) END AS finish_length,
       try_cast(j[16] AS INTEGER) AS finish_status_code, _eng_cap(j[17]) AS finish_message,
       j[18] AS e2e_latency, line_no, byte_offset, _valid
FROM (
    SELECT *, j[1] AS rid, j[3] AS host, j[4] AS port, j[5] AS room, j[6] AS stream, j[14] AS ftype,
           _eng_localts(j[19], $tz) AS jts
    FROM (
        SELECT line_no, byte_offset, ts, ts_inferred, json_valid(msg) AS _valid,
               CASE WHEN contains(left(msg, 200), 'request.finished') THEN 'finished' ELSE 'received' END AS kind,
               CASE WHEN json_valid(msg) THEN json_extract_string(msg, ['$.rid', '$.event', '$.obj.bootstrap_host',
                   '$.obj.bootstrap_port', '$.obj.bootstrap_room', '$.obj.stream',
                   '$.headers."x-request-id"', '$.headers."x-correlation-id"', '$.headers."x-trace-id"',
                   '$.headers."request-id"', '$.out.meta_info.prompt_tokens', '$.out.meta_info.completion_tokens',
                   '$.out.meta_info.cached_tokens', '$.out.meta_info.finish_reason.type',
                   '$.out.meta_info.finish_reason.length', '$.out.meta_info.finish_reason.status_code',
                   '$.out.meta_info.finish_reason.message', '$.out.meta_info.e2e_latency',
                   '$.timestamp']) END AS j
        FROM _engine_stage
    )
)
"""

#: ``--export-metrics-to-file`` records; ``request_parameters`` (may hold the prompt) is read for
#: its routing fields only and never stored. No time of their own: the hour in the file name.
REQ_METRICS = r"""
SELECT coalesce(jts, $file_hour) AS ts, jts IS NULL AS ts_inferred, 'metrics' AS kind,
       coalesce(j[1], p[1]) AS rid, p[2] AS bootstrap_host, try_cast(p[3] AS INTEGER) AS bootstrap_port,
       try_cast(p[4] AS BIGINT) AS bootstrap_room, try_cast(p[5] AS BOOLEAN) AS stream,
       _eng_int(coalesce(j[2], j[9])) AS prompt_tokens, _eng_int(coalesce(j[3], j[10])) AS completion_tokens,
       _eng_int(coalesce(j[4], j[11])) AS cached_tokens,
       ftype AS finish_type, CASE WHEN ftype = 'length' THEN _eng_int(j[6]) END AS finish_length,
       try_cast(j[7] AS INTEGER) AS finish_status_code,
       _eng_cap(j[8]) AS finish_message, coalesce(j[12], j[13]) AS e2e_latency, line_no, byte_offset, _valid
FROM (
    SELECT *, coalesce(j[5], CASE WHEN j[14] IS NOT NULL AND NOT starts_with(j[14], '{') THEN j[14] END) AS ftype,
           _eng_localts(j[15], $tz) AS jts,
           CASE WHEN json_valid(j[16]) THEN json_extract_string(j[16], ['$.rid', '$.bootstrap_host',
               '$.bootstrap_port', '$.bootstrap_room', '$.stream'])
                ELSE [NULL, NULL, NULL, NULL, NULL] END AS p
    FROM (
        SELECT line_no, byte_offset, json_valid(msg) AS _valid,
               CASE WHEN json_valid(msg) THEN json_extract_string(msg, ['$.id', '$.prompt_tokens',
                   '$.completion_tokens', '$.cached_tokens', '$.finish_reason.type', '$.finish_reason.length',
                   '$.finish_reason.status_code', '$.finish_reason.message', '$.meta_info.prompt_tokens',
                   '$.meta_info.completion_tokens', '$.meta_info.cached_tokens', '$.e2e_latency',
                   '$.meta_info.e2e_latency', '$.finish_reason', '$.timestamp', '$.request_parameters']) END AS j
        FROM _engine_stage
    )
)
"""

#: How a request is recognised as a health check (rid, room 0, the 2.2.2.2 placeholder host).
HEALTH = ("coalesce(starts_with(rid, 'HEALTH_CHECK'), false) OR coalesce(bootstrap_room = 0, false) "
          "OR coalesce(bootstrap_host = '2.2.2.2', false)")

#: The insert of each table from an Arrow view ``_engine_rows`` (columns by name; node, pod, file_id bound).
INSERTS = {
    "engine_batches": "INSERT INTO engine_batches BY NAME SELECT * REPLACE (TRY_CAST(token_usage AS DOUBLE) AS "
                      "token_usage, TRY_CAST(throughput AS DOUBLE) AS throughput), $node AS node, "
                      "$pod AS pod, $file_id AS file_id FROM _engine_rows",
    "engine_requests": "INSERT INTO engine_requests BY NAME SELECT * REPLACE (TRY_CAST(e2e_latency AS DOUBLE) AS "
                       f"e2e_latency), $node AS node, $pod AS pod, $file_id AS file_id, {HEALTH} AS is_health_check "
                       "FROM _engine_rows",
}
for _t in ("engine_rejections", "engine_events", "engine_http", "router_requests", "engine_other_lines",
           "engine_startup_facts"):
    INSERTS[_t] = f"INSERT INTO {_t} BY NAME SELECT *, $node AS node, $pod AS pod, $file_id AS file_id FROM _engine_rows"
