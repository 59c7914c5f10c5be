"""The SQL that loads a gateway file: one ``INSERT ... SELECT`` over DuckDB's own readers.

Every record's fields are pulled out with one ``json_extract_string`` call and the canonical
columns computed in SQL (no Python loop touches a row); a line that cannot be loaded is written
with ``ts_start = NULL`` and moved to ``rejected_lines`` with its reason (:func:`stash_sql`).

Example:
    >>> int_sql("x")
    "CASE WHEN contains(x, '.') THEN NULL ELSE TRY_CAST(x AS BIGINT) END"
"""

from __future__ import annotations

import re

import duckdb

from forensics.errors import InputError
from forensics.sources.gateway.readers import (
    CSV_TOO_FEW,
    CSV_TOO_MANY,
    csv_options,
    csv_records,
    duck_compression,
    lines_reader,
    lit,
)
from forensics.sources.gateway.sniffing import FilePlan, is_otlp
from forensics.sources.gateway.spec import COLUMN_KIND, Col, Spec, json_path
from forensics.sources.redact import REDACT_SQL_MACRO

_MACROS = r"""
CREATE OR REPLACE TEMP MACRO gw_str(x) AS CASE WHEN x = '' OR x = '-' THEN NULL ELSE x END;
CREATE OR REPLACE TEMP MACRO gw_int_of(d) AS CASE WHEN d = floor(d) AND abs(d) < 9.2e18 THEN CAST(d AS BIGINT) END;
CREATE OR REPLACE TEMP MACRO gw_int(x) AS CASE WHEN x IS NULL THEN NULL
    WHEN contains(x, '.') OR contains(x, 'e') OR contains(x, 'E') THEN gw_int_of(TRY_CAST(x AS DOUBLE))
    ELSE TRY_CAST(x AS BIGINT) END;
CREATE OR REPLACE TEMP MACRO gw_json_get(doc, p) AS CASE WHEN json_valid(doc) THEN json_extract_string(doc, p) END;
CREATE OR REPLACE TEMP MACRO gw_unit(n) AS CASE
    WHEN abs(n) >= 100000000000000000 THEN 'ns' WHEN abs(n) >= 100000000000000 THEN 'us'
    WHEN abs(n) >= 100000000000 THEN 'ms' ELSE 's' END;
CREATE OR REPLACE TEMP MACRO gw_us_factor(u) AS CASE u WHEN 'ns' THEN 0.001 WHEN 'us' THEN 1 WHEN 'ms' THEN 1000 ELSE 1000000 END;
CREATE OR REPLACE TEMP MACRO gw_has_zone(x) AS regexp_matches(x, '(?i)(z|[+-]\d\d:?\d\d|[+-]\d\d|utc|gmt)\s*$');
CREATE OR REPLACE TEMP MACRO gw_frac_prec(d) AS CASE WHEN d = 0 THEN 's' WHEN d <= 3 THEN 'ms' WHEN d <= 6 THEN 'us' ELSE 'ns' END;
CREATE OR REPLACE TEMP MACRO gw_attrs(a) AS CASE WHEN a IS NULL THEN NULL ELSE
    '{' || array_to_string(list_transform(CAST(json_extract(a, '$[*]') AS VARCHAR[]), lambda x:
        to_json(json_extract_string(x, '$.key')) || ':' || to_json(coalesce(
            json_extract_string(x, '$.value.stringValue'), json_extract_string(x, '$.value.intValue'),
            json_extract_string(x, '$.value.doubleValue'), json_extract_string(x, '$.value.boolValue'),
            json_extract_string(x, '$.value')))), ',') || '}' END;
"""


def install_macros(con: duckdb.DuckDBPyConnection) -> None:
    for stmt in _MACROS.split(";"):
        if stmt.strip():
            con.execute(stmt)
    con.execute(REDACT_SQL_MACRO)


def ts_sql(x: str, tz: str, unit: str | None = None, fmt: str | None = None, n: str | None = None) -> str:
    """SQL turning the text ``x`` (epoch number in any unit, or RFC 3339) into a UTC TIMESTAMP.

    Integers and numeric strings: unit from ``unit`` or by magnitude (s < 1e11 <= ms < 1e14 <= us
    < 1e17 <= ns). Strings with a zone or offset are converted to UTC; zone-less ones are read in
    ``tz``. ``fmt`` is a strptime format for anything else. ``n``, when given, is SQL of ``x`` as
    an integer (NULL unless ``x`` is one, without a '.': see :func:`int_sql`), computed once per row
    by the caller and shared with :func:`precision_sql` and :func:`zoneless_sql`.

    Example:
        >>> import duckdb; con = duckdb.connect(); install_macros(con)
        >>> con.sql("SELECT " + ts_sql("'1788357791482000000'", "UTC")).fetchall()[0][0]
        datetime.datetime(2026, 9, 2, 14, 3, 11, 482000)
    """
    if fmt is not None:
        parsed = f"try_strptime({x}, {lit(fmt)})"
        if "%z" in fmt or "%Z" in fmt:
            return f"CAST({parsed} AS TIMESTAMP)"
        return _local(parsed, tz)
    is_int = f"{n} IS NOT NULL" if n else f"NOT contains({x}, '.') AND TRY_CAST({x} AS BIGINT) IS NOT NULL"
    n = n or f"TRY_CAST({x} AS BIGINT)"
    # integer arithmetic only: this runs on every row, and decimal scaling costs several times more
    scale = {"ns": f"{n} // 1000", "us": n, "ms": f"{n} * 1000", "s": f"{n} * 1000000"}
    if unit in ("ms", "s"):  # a declared unit: a huge value must not overflow the multiplication
        cap = "9223372036854775" if unit == "ms" else "9223372036854"
        scale[unit] = f"CASE WHEN abs({n}) < {cap} THEN {scale[unit]} END"
    int_us = scale[unit] if unit else (
        f"CASE WHEN abs({n}) >= 100000000000000000 THEN {scale['ns']} "
        f"WHEN abs({n}) >= 100000000000000 THEN {scale['us']} "
        f"WHEN abs({n}) >= 100000000000 THEN {scale['ms']} ELSE {scale['s']} END"
    )
    dec_unit = lit(unit) if unit else f"gw_unit(TRY_CAST({x} AS DECIMAL(38,9)))"
    return (
        f"CASE WHEN {x} IS NULL THEN NULL "
        f"WHEN {is_int} THEN make_timestamp({int_us}) "
        f"WHEN TRY_CAST({x} AS DECIMAL(38,9)) IS NOT NULL THEN CASE WHEN "
        f"abs(TRY_CAST({x} AS DECIMAL(38,9))) < 100000000000000000000 THEN "
        f"make_timestamp(TRY_CAST(TRY_CAST({x} AS DECIMAL(38,9)) * gw_us_factor({dec_unit}) AS BIGINT)) END "
        f"WHEN gw_has_zone({x}) THEN CAST(TRY_CAST({x} AS TIMESTAMPTZ) AS TIMESTAMP) "
        f"ELSE {_local(f'TRY_CAST({x} AS TIMESTAMP)', tz)} END"
    )


def _local(naive: str, tz: str) -> str:
    # The session zone is UTC (Case sets it), so TIMESTAMPTZ -> TIMESTAMP yields UTC wall time.
    if tz == "UTC":
        return naive
    return f"CAST(timezone({lit(tz)}, {naive}) AS TIMESTAMP)"


def int_sql(x: str) -> str:
    """SQL of the text ``x`` as a BIGINT when it is an integer (no '.'), else NULL.

    Example:
        >>> import duckdb
        >>> duckdb.sql("SELECT " + int_sql("'17'") + ", " + int_sql("'1.5'")).fetchall()
        [(17, None)]
    """
    return f"CASE WHEN contains({x}, '.') THEN NULL ELSE TRY_CAST({x} AS BIGINT) END"


def precision_sql(x: str, unit: str | None = None, fmt: str | None = None, n: str | None = None) -> str:
    """SQL for the resolution of a raw time value: 's', 'ms', 'us' or 'ns' (``n``: see :func:`ts_sql`).

    Example:
        >>> import duckdb; con = duckdb.connect(); install_macros(con)
        >>> con.sql("SELECT " + precision_sql("'2026-09-02T04:51:59.123Z'")).fetchall()[0][0]
        'ms'
    """
    if fmt is not None:
        return "'us'" if "%f" in fmt else "'s'"
    is_int = f"{n} IS NOT NULL" if n else f"NOT contains({x}, '.') AND TRY_CAST({x} AS BIGINT) IS NOT NULL"
    base = lit(unit) if unit else f"gw_unit({n or f'TRY_CAST({x} AS BIGINT)'})"  # (a cheap integer CASE)
    dec_base = lit(unit) if unit else f"gw_unit(TRY_CAST({x} AS DECIMAL(38,9)))"
    order = "['s','ms','us','ns']"
    return (
        f"CASE WHEN {x} IS NULL THEN NULL "
        f"WHEN {is_int} THEN {base} "
        f"WHEN TRY_CAST({x} AS DECIMAL(38,9)) IS NOT NULL THEN "
        f"{order}[least(4, list_position({order}, {dec_base}) + "
        f"CAST(ceil(length(split_part({x}, '.', 2)) / 3) AS INTEGER))] "
        f"ELSE gw_frac_prec(length(regexp_extract({x}, ':\\d\\d[.,](\\d+)', 1))) END"
    )


def zoneless_sql(x: str, n: str | None = None) -> str:
    """SQL: true when the raw value is a date-time without zone (so ``tz`` was applied).

    ``n`` (see :func:`ts_sql`) spares the decimal cast and the zone regex for integers.

    Example:
        >>> import duckdb; con = duckdb.connect(); install_macros(con)
        >>> con.sql("SELECT " + zoneless_sql("'2026-09-02 12:00:00'")).fetchall()[0][0]
        True
    """
    test = f"({x} IS NOT NULL AND TRY_CAST({x} AS DECIMAL(38,9)) IS NULL AND NOT gw_has_zone({x}))"
    if n is None:
        return test
    return f"(CASE WHEN {n} IS NOT NULL THEN false ELSE {test} END)"








def source_sql(plan: FilePlan, read_path: str, comp: str, rejects: str, positional: bool = False,
               parallel: bool = True) -> str:
    """SQL of the record source ``(rn, line)``.

    ``line`` is JSON text for JSON-like containers and the raw line for text. For CSV and line
    readers, reader-level rejects land in the table ``rejects``. With ``positional`` (one row per
    record, in order: everything but OTLP), ``rn`` is a placeholder 0 and the caller numbers the
    rows by their position once inserted (:func:`number_by_position`): ``row_number() OVER ()``
    runs the whole INSERT on one thread. CSV records are numbered from 2 (the header is line 1).
    ``parallel`` False reads a CSV file's records on one thread (:func:`csv_records`).
    """
    c = plan.sniff.container
    rn = "0::BIGINT" if positional and not is_otlp(plan) else "row_number() OVER ()"
    if c == "csv" and not positional:
        rn += " + 1"  # the header is line 1: records start at line 2 (see csv_physical_lines)
    if is_otlp(plan):
        if c == "ndjson":
            docs = f"SELECT row_number() OVER () AS rn, line FROM {lines_reader(read_path, comp, rejects)}"
            number = "rn"
        else:
            docs = (f"SELECT 1 AS rn, json AS line FROM read_json_objects({lit(read_path)}, "
                    f"format='unstructured', compression={lit(duck_compression(comp))})")
            number = "row_number() OVER ()"
        src = f"""
        SELECT {number} AS rn, CASE WHEN span IS NULL THEN rawline ELSE json_object(
            'traceId', json_extract_string(span, '$.traceId'), 'spanId', json_extract_string(span, '$.spanId'),
            'name', json_extract_string(span, '$.name'),
            'startTimeUnixNano', json_extract_string(span, '$.startTimeUnixNano'),
            'endTimeUnixNano', json_extract_string(span, '$.endTimeUnixNano'),
            'attributes', json(gw_attrs(json_extract(span, '$.attributes'))),
            'resource', json(gw_attrs(json_extract(rs, '$.resource.attributes'))),
            'genai', contains(coalesce(gw_attrs(json_extract(span, '$.attributes')), ''), '"gen_ai.')
        ) END AS line
        FROM (
            SELECT rn, rawline, rs, unnest(CASE WHEN rs IS NULL OR json_array_length(json_extract(rs, '$.scopeSpans[*].spans[*]')) = 0
                                            THEN [NULL::JSON] ELSE json_extract(rs, '$.scopeSpans[*].spans[*]') END) AS span
            FROM (
                SELECT rn, line AS rawline, unnest(CASE WHEN try(json_array_length(line, '$.resourceSpans')) > 0
                                                   THEN json_extract(line, '$.resourceSpans[*]') ELSE [NULL::JSON] END) AS rs
                FROM ({docs})
            )
        )"""
        return src
    if c == "ndjson":
        return f"SELECT {rn} AS rn, line FROM {lines_reader(read_path, comp, rejects)}"
    if c == "text":
        return f"SELECT {rn} AS rn, line FROM {lines_reader(read_path, comp, rejects)}"
    if c == "csv" and plan.sniff.columns:
        rows = csv_records(read_path, plan.sniff.delim, plan.sniff.columns, comp, rejects, parallel)
        return f"SELECT {rn} AS rn, line FROM ({rows})"
    if c == "csv":
        return (
            f"SELECT {rn} AS rn, to_json(c) AS line FROM read_csv({lit(read_path)}, "
            f"{csv_options(plan.sniff.delim, plan.sniff.columns)}, ignore_errors=true, store_rejects=true, "
            f"rejects_table={lit(rejects)}, rejects_scan={lit(rejects + '_scan')}, "
            f"compression={lit(duck_compression(comp))}) c"
        )
    if c == "parquet":
        return f"SELECT {rn} AS rn, to_json(p) AS line FROM read_parquet({lit(read_path)}) p"
    if c == "json-array":
        return (
            f"SELECT {rn} AS rn, json AS line FROM read_json_objects({lit(read_path)}, "
            f"format='array', compression={lit(duck_compression(comp))})"
        )
    # a single JSON document: a REST envelope {"result": [...]} or one record
    return (
        f"SELECT {rn} AS rn, rec AS line FROM (SELECT unnest(CASE WHEN "
        f"json_type(json, '$.result') = 'ARRAY' THEN json_extract(json, '$.result[*]') ELSE [json] END) AS rec "
        f"FROM read_json_objects({lit(read_path)}, format='unstructured', "
        f"compression={lit(duck_compression(comp))}))"
    )


def top_level(field_name: str) -> tuple[str, str | None]:
    """Split a field into its top-level key and the JSON path inside it (None for the key itself).

    Example:
        >>> top_level('$.RequestHeaders."x-request-id"')
        ('RequestHeaders', '$."x-request-id"')
        >>> top_level("gen_ai.usage.input_tokens")
        ('gen_ai.usage.input_tokens', None)
    """
    if not field_name.startswith("$"):
        return field_name, None
    m = re.match(r'^\$\.(?:"((?:[^"\\]|\\.)*)"|([^.\["]+))(.*)$', field_name)
    if m is None:
        raise InputError(f"unsupported field path {field_name!r}", hint='use $.key or $."key".sub')
    key = m.group(1) if m.group(1) is not None else m.group(2)
    rest = m.group(3)
    return key.replace('\\"', '"'), ("$" + rest if rest else None)


def _value_sql(col: Col, idx: dict[str, int]) -> str:
    """SQL of a column's text before its ``sql`` step: first non-empty field, regex, map, default."""
    parts = [f"g{idx[f]}" for f in col.fields]
    v = parts[0] if len(parts) == 1 else f"coalesce({', '.join(parts)})"
    if col.regex is not None:
        v = f"nullif(regexp_extract({v}, {lit(col.regex)}, {col.group}), '')"
    if col.values:
        whens = " ".join(f"WHEN {lit(k)} THEN {lit(val)}" for k, val in col.values.items())
        v = f"(CASE {v} {whens} ELSE {v} END)"
    if col.default is not None:
        v = f"coalesce({v}, {lit(col.default)})"
    return v


def _post_sql(col: Col, idx: dict[str, int], vref: str) -> str:
    """Apply a preset's ``sql`` step to the column ``vref``."""
    if col.sql is None:
        return vref
    return re.sub(r"\{f:([^}]+)\}", lambda m: f"g{idx[m.group(1)]}", col.sql).replace("{v}", vref)


def _typed(kind: str, v: str, custom: bool, name: str = "") -> str:
    if custom or kind == "str":
        return v
    if kind == "int" and name == "status":  # an INTEGER column: a larger value is invalid, not cut
        return f"CASE WHEN abs(gw_int({v})) < 2147483648 THEN gw_int({v}) END"
    if kind == "int":
        return f"gw_int({v})"
    if kind == "bool":
        return (f"CASE WHEN {v} IS NULL THEN NULL ELSE (lower({v}) LIKE '%event-stream%' "
                f"OR lower({v}) IN ('true', '1', 'yes', 't', 'y')) END")
    raise AssertionError(kind)


CANONICAL_INSERT_COLUMNS = (
    "request_id", "header_request_id", "tenant_id", "model", "ts_start", "ts_end", "ts_raw",
    "ts_precision", "ts_zone_assumed", "method", "path", "status", "prompt_tokens",
    "completion_tokens", "tokens_source", "request_bytes", "response_bytes", "streamed",
    "in_band_error", "upstream", "layer", "source_format", "is_duplicate", "file_id", "line_no",
)


def _checked_columns(spec: Spec) -> list[str]:
    """Columns whose value must be of their type (an integer, a duration) or the record is rejected."""
    checked = [n for n, col in spec.columns.items() if COLUMN_KIND[n] == "int" and col.sql is None]
    return checked + (["duration"] if "duration" in spec.columns else [])


def _records_sql(plan: FilePlan, src: str, tz: str, parsed: bool = False) -> str:
    """SQL of the parsed records: rn, line, keep, raw_start, raw_end, dur_us and c_<column>s.

    ``f`` (all fields of a record, one JSON parse per line) is referenced only by plain column
    expressions here, so DuckDB evaluates it once per row.
    """
    spec = plan.spec
    fields = spec.all_fields()
    idx = {f: i + 1 for i, f in enumerate(fields)}
    paths = "[" + ", ".join(lit(json_path(f)) for f in fields) + "]"
    if plan.sniff.container == "text" or spec.line_regex is not None:
        pattern = spec.line_regex or ""
        py = re.compile(pattern)
        names = {i: n for n, i in py.groupindex.items()}
        group_names = [names.get(i, f"_g{i}") for i in range(1, py.groups + 1)]
        rec = (f"CASE WHEN regexp_matches(line, {lit(pattern)}) THEN "
               f"CAST(to_json(regexp_extract(line, {lit(pattern)}, "
               f"[{', '.join(lit(n) for n in group_names)}])) AS VARCHAR) END")
    else:
        rec = "line"
    cols = spec.columns
    dur = cols.get("duration")
    dur_unit = dur.unit if dur and dur.unit else "ms"
    # Layered so that every field is cleaned once and every value computed once: DuckDB does not
    # share a sub-expression repeated inside CASE branches, and on millions of rows that matters.
    pre = "".join(f",\n            {_value_sql(col, idx)} AS v_{n}" for n, col in cols.items())
    typed = "".join(
        f",\n        {_typed(COLUMN_KIND[n], _post_sql(col, idx, 'v_' + n), col.sql is not None, n)} AS c_{n}"
        for n, col in cols.items() if n not in ("ts_start", "ts_end", "duration")
    )
    # a value that is there but is not of its column's type rejects the record (never coerced):
    # the first such column is named in the reason
    checked = _checked_columns(spec)
    bad = ("coalesce(" + ", ".join(
        f"CASE WHEN nullif(v_{n}, '') IS NOT NULL AND c_{n} IS NULL THEN {lit(n)} END" for n in checked)
        + ", NULL)") if checked else "NULL"
    keep = "true"
    if spec.keep_sql:
        keep = re.sub(r"\{f:([^}]+)\}", lambda m: f"g{idx[m.group(1)]}", spec.keep_sql)
    # one column per field (f1, f2, ...): cheaper to reference than list elements
    unpack = ", ".join(f"f[{i}] AS f{i}" for i in range(1, len(fields) + 1))
    inner = src if parsed else (
        f"SELECT fid, rn, line, f IS NOT NULL AS parsed, {unpack} FROM ("
        f"SELECT fid, rn, line, try(json_extract_string({rec}, {paths})) AS f "
        f"FROM (SELECT fid, rn, CAST(line AS VARCHAR) AS line FROM ({src})))"
    )
    clean = ", ".join(f"gw_str(f{i}) AS g{i}" for i in range(1, len(fields) + 1))
    dur_sql = f"TRY_CAST(TRY_CAST(v_duration AS DOUBLE) * gw_us_factor({lit(dur_unit)}) AS BIGINT)"
    return f"""
    SELECT *, {bad} AS bad FROM (
    SELECT fid, rn, line, parsed, keep,
        {'v_ts_start' if 'ts_start' in cols else 'NULL::VARCHAR'} AS raw_start,
        {'v_ts_end' if 'ts_end' in cols else 'NULL::VARCHAR'} AS raw_end,
        {dur_sql if 'duration' in cols else 'NULL::BIGINT'} AS dur_us{typed}{', v_duration, ' + dur_sql + ' AS c_duration' if 'duration' in cols else ''}{''.join(f', v_{n}' for n in checked if n != 'duration')}
    FROM (
        SELECT *, coalesce({keep}, false) AS keep{pre}
        FROM (SELECT fid, rn, line, parsed, {clean} FROM ({inner}))
    ))"""


def build_insert_sql(
    plan: FilePlan, *, read_path: str, comp: str, rejects: str, file_id: int, tz: str, source: str | None = None,
    parsed: bool = False,
) -> str:
    """The one ``INSERT ... SELECT`` that loads a file (good rows and rejected lines alike).

    Example:
        >>> from pathlib import Path; from forensics.sources.gateway import PRESETS, Sniff
        >>> plan = FilePlan(Path("a.ndjson"), PRESETS["envoy"], Sniff("ndjson", "none", [], set(), []), None)
        >>> build_insert_sql(plan, read_path="a.ndjson", comp="none", rejects="r", file_id=1, tz="UTC").split()[:3]
        ['INSERT', 'INTO', 'gateway_requests']

    A line that cannot be loaded is written with ``ts_start = NULL`` (every loaded row has one)
    and, in ``in_band_error``, its reason and redacted raw bytes (:func:`stash_sql`); before the
    file is finished it is moved to ``rejected_lines`` (:func:`unstash_sql`). This keeps the load to a single pass
    over the (possibly compressed) source. ``source``, when given, is SQL of ``(fid, rn, line)``
    rows (several files at once, or repaired lines), or with ``parsed`` of ``(fid, rn, line, f)``.
    """
    spec = plan.spec
    tz = spec.tz or tz
    src = source or f"SELECT {int(file_id)} AS fid, rn, line FROM ({source_sql(plan, read_path, comp, rejects)})"
    cols = spec.columns
    start, end = cols.get("ts_start"), cols.get("ts_end")

    def out(n: str) -> str:
        return f"c_{n}" if n in cols else "NULL"

    prec = (f"CASE WHEN raw_start IS NOT NULL THEN "
            f"{precision_sql('raw_start', start.unit if start else None, start.format if start else None, 'n_start')} "
            f"ELSE {precision_sql('raw_end', end.unit if end else None, end.format if end else None, 'n_end')} END")
    fmt = (start.format if start else None) or (end.format if end else None) or ""
    n_raw = "CASE WHEN raw_start IS NOT NULL THEN n_start ELSE n_end END"
    zone_assumed = (f"CASE WHEN {zoneless_sql('coalesce(raw_start, raw_end)', n_raw)} "
                    f"{'AND false' if '%z' in fmt.lower() else ''} THEN {lit(tz)} END")
    tokens = "NULL"
    if "prompt_tokens" in cols or "completion_tokens" in cols:
        tokens = (f"CASE WHEN {out('prompt_tokens')} IS NOT NULL OR {out('completion_tokens')} "
                  f"IS NOT NULL THEN 'gateway' END")
    return f"""
INSERT INTO gateway_requests ({', '.join(CANONICAL_INSERT_COLUMNS)})
SELECT {out('request_id')}, {out('header_request_id')}, {out('tenant_id')}, {out('model')},
    ts_start, ts_end, coalesce(raw_start, raw_end), {prec}, {zone_assumed},
    {out('method')}, {out('path')}, CAST({out('status')} AS INTEGER),
    {out('prompt_tokens')}, {out('completion_tokens')}, {tokens},
    {out('request_bytes')}, {out('response_bytes')}, {out('streamed')},
    CASE WHEN ts_start IS NULL THEN {stash_sql(plan)} ELSE {out('in_band_error')} END,
    {out('upstream')}, {lit(spec.layer)}, {lit(spec.name)}, false, fid, rn
FROM (
    SELECT *,
        -- only an end and no duration logged: the start is taken as the end (ts_raw shows which);
        -- a time that is there but unreadable rejects the record (it never falls back to the other)
        CASE WHEN keep AND bad IS NULL AND NOT (raw_start IS NOT NULL AND t_s IS NULL)
                  AND NOT (raw_end IS NOT NULL AND t_e IS NULL)
             THEN coalesce(t_s, t_e - to_microseconds(dur_us), t_e) END AS ts_start,
        CASE WHEN keep THEN coalesce(t_e, t_s + to_microseconds(dur_us)) END AS ts_end
    FROM ({_timed_sql(plan, src, tz, parsed)})
)
"""


def _timed_sql(plan: FilePlan, src: str, tz: str, parsed: bool = False) -> str:
    """:func:`_records_sql` with the times read: ``n_start``/``n_end`` (integers) and ``t_s``/``t_e``."""
    spec = plan.spec
    tz = spec.tz or tz
    start, end = spec.columns.get("ts_start"), spec.columns.get("ts_end")

    # each raw value is cast to an integer once (n_start, n_end), not once per use: epoch numbers
    # are the common case, and every cast runs on millions of rows
    def ts_of(x: str, col: Col | None, n: str) -> str:
        return ts_sql(x, tz, col.unit if col else None, col.format if col else None, n)

    return f"""
        SELECT *, {ts_of('raw_start', start, 'n_start')} AS t_s, {ts_of('raw_end', end, 'n_end')} AS t_e
        FROM (SELECT *, {int_sql('raw_start')} AS n_start, {int_sql('raw_end')} AS n_end
              FROM ({_records_sql(plan, src, tz, parsed)}))"""


def reason_sql(plan: FilePlan) -> str:
    """SQL of why a record is rejected, over the columns of :func:`_timed_sql` (for rows not loaded).

    Example:
        >>> from pathlib import Path; from forensics.sources.gateway import PRESETS, Sniff
        >>> plan = FilePlan(Path("a.ndjson"), PRESETS["envoy"], Sniff("ndjson", "none", [], set(), []), None)
        >>> "invalid JSON" in reason_sql(plan)
        True
    """
    spec = plan.spec
    text = plan.sniff.container == "text" or spec.line_regex is not None
    if text:
        parse_fail = ("'not a router request line'" if spec.name == "smg-router"
                      else lit(f"line does not match line_regex of {spec.name}"))
    else:
        parse_fail = "CASE WHEN json_valid(line) THEN 'not a JSON object' ELSE 'invalid JSON' END"
    ts_fields = ", ".join(dict.fromkeys(
        [*(spec.columns["ts_start"].fields if "ts_start" in spec.columns else ()),
         *(spec.columns["ts_end"].fields if "ts_end" in spec.columns else ())]))

    def named(col: str) -> str:  # 'status (EdgeResponseStatus)': the column and the fields it reads
        fields = spec.columns[col].fields if col in spec.columns else ()
        return f"{col} ({', '.join(fields)})" if fields else col

    invalid = " ".join(f"WHEN bad = {lit(n)} THEN {lit('invalid ' + named(n) + ': ')} || left(v_{n}, 100)"
                       for n in _checked_columns(spec))
    width = ""
    if plan.sniff.container == "csv":
        # the record's fields were not loaded at all: one with fields beyond the header's is never
        # shortened to fit (csv_records), one that stops short is never padded
        width = (f"WHEN line = {lit(CSV_TOO_MANY)} THEN 'CSV row has too many fields' "
                 f"WHEN line = {lit(CSV_TOO_FEW)} THEN 'CSV row has too few fields'\n    ")
    return f"""CASE WHEN line IS NULL OR trim(line) = '' THEN 'empty line'
    {width}    WHEN NOT parsed OR (json_valid(line) AND NOT {'true' if text else "json_type(line) = 'OBJECT'"}) THEN {parse_fail}
    WHEN NOT keep THEN {lit(spec.keep_reason or 'filtered out')}
    WHEN raw_start IS NULL AND raw_end IS NULL THEN {lit('missing timestamp (' + ts_fields + ')')}
    WHEN raw_start IS NOT NULL AND t_s IS NULL THEN {lit('unparseable timestamp in ' + named('ts_start') + ': ')}
        || left(raw_start, 100)
    WHEN raw_end IS NOT NULL AND t_e IS NULL THEN {lit('unparseable timestamp in ' + named('ts_end') + ': ')}
        || left(raw_end, 100)
    {invalid}
    ELSE 'unparseable timestamp: ' || left(coalesce(raw_start, raw_end), 100) END"""


#: A rejected record is written with ``ts_start = NULL`` and, in ``in_band_error``, its reason, its
#: raw length and its raw bytes redacted (:mod:`forensics.sources.redact`), separated by this
#: character: the unredacted line is never written to the case, not even for a moment.
STASH_SEP = "chr(31)"


def stash_sql(plan: FilePlan) -> str:
    """SQL of what a rejected record keeps in ``in_band_error`` until it moves to rejected_lines."""
    return (f"({reason_sql(plan)}) || {STASH_SEP} || octet_length(encode(coalesce(line, ''))) || {STASH_SEP} "
            f"|| gw_redact(coalesce(line, ''))")


def stash_of_lines_sql(plan: FilePlan, src: str, tz: str) -> str:
    """SELECT (fid, rn, stash) for raw lines ``src`` (fid, rn, line): the fast path's rejected lines."""
    return f"SELECT fid, rn, {stash_sql(plan)} AS stash FROM ({_timed_sql(plan, src, tz)})"


def unstash_sql(file_ids: list[int]) -> str:
    """SELECT the rejected_lines rows of these files' rejected records (their stashes split again)."""
    ids = ", ".join(str(int(i)) for i in file_ids)
    return (f"SELECT file_id, line_no, split_part(in_band_error, chr(31), 1), "
            f"encode(substr(in_band_error, strpos(in_band_error, chr(31)) + 1 + strpos(substr(in_band_error, "
            f"strpos(in_band_error, chr(31)) + 1), chr(31))))[1:4096], "
            f"CAST(split_part(in_band_error, chr(31), 2) AS BIGINT) "
            f"FROM gateway_requests WHERE file_id IN ({ids}) AND ts_start IS NULL ORDER BY file_id, line_no")
