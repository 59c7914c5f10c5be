"""Load gateway request logs of any front door into ``gateway_requests``, with provenance.

One pipeline serves every preset and every TOML mapping (:mod:`forensics.sources.gateway_presets`):

1. *sniff* each file (container: NDJSON, CSV, JSON array / document, Parquet, text) and, with
   ``format="auto"``, detect the preset from a sample of its records;
2. *load* it with one ``INSERT ... SELECT`` over DuckDB's own readers: the file is read as lines
   (``read_csv`` with one column, so every physical line keeps its number) or records, each record's
   fields are pulled out with one ``json_extract_string`` call, and the canonical columns are
   computed in SQL. No Python loop touches a row;
3. move the lines that failed into ``rejected_lines``, flag delivery-retry duplicates, write the
   counts (``lines_read == rows_loaded + rows_rejected + rows_duplicate``) into ``evidence_files``.

Each file is one transaction: a file either lands whole (with its counts) or not at all.

Example:
    >>> import forensics
    >>> case = forensics.open_case(":memory:")
    >>> summary = case.ingest_gateway("logs/cloudflare/", format="auto")   # doctest: +SKIP
    >>> print(summary.render())                                            # doctest: +SKIP
"""

from __future__ import annotations

import bisect
import contextlib
import csv
import io
import json
import os
import re
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

import duckdb

from forensics.errors import (
    FormatDetectionError,
    InputError,
    MissingFieldError,
    ParameterError,
)
from forensics.sources.files import (
    RAW_CAP,
    FileRecord,
    compression_of,
    count_newlines,
    decompressing,
    expand_paths,
    finish_file,
    gunzip_block,
    head_bytes,
    open_decompressed,
    progress_bar,
    register_file,
    sha256_file,
    store_rejected,
)
from forensics.sources.gateway_presets import (
    COLUMN_KIND,
    PRESETS,
    Col,
    Spec,
    json_path,
    load_mapping,
    meta_tenant,
)
from forensics.sources.summary import FileSummary, IngestSummary

if TYPE_CHECKING:
    from forensics.case import Case

#: Options ``ingest_gateway`` accepts besides format/tz/quiet.
KNOWN_OPTIONS = {
    "layer": "override the layer written to every row (edge, proxy, router, ...)",
    "tenant_field": "read the tenant from this field (top-level key or $-path) instead of the preset's rule",
    "tenant_header": "cloudflare-http: read the tenant from RequestHeaders.<NAME> instead of the path",
    "tenant_key": "cloudflare-ai-gateway: the key inside metadata that holds the tenant",
    "tenant_attribute": "otel: the span or resource attribute that holds the tenant",
}

#: Memory the gateway loader's process holds beside DuckDB's budget while loading (the Python
#: runtime, the hashing thread's blocks, DuckDB's allocations outside its buffer pool): kept out
#: of the load budget so the process stays under it (measured on 5 M rows: 925 -> ~770 MiB peak).
LOAD_RESERVE_BYTES = 160 << 20

#: Rows sampled per file for detection and the required-field check.
SAMPLE_RECORDS = 200

_SAMPLE_BYTES = 256 * 1024

#: Small line-oriented files of one spec are loaded together (planning costs more than reading them).
BATCH_FILE_BYTES = 8 * 1024 * 1024
BATCH_MAX_FILES = 64
BATCH_MAX_BYTES = 64 * 1024 * 1024


def _lit(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


# -- SQL helpers ----------------------------------------------------------------------------------

_MACROS = r"""
CREATE OR REPLACE TEMP MACRO gw_str(x) AS CASE WHEN x = '' OR x = '-' THEN NULL ELSE x END;
CREATE OR REPLACE TEMP MACRO gw_int(x) AS coalesce(TRY_CAST(x AS BIGINT), TRY_CAST(TRY_CAST(x AS DOUBLE) AS BIGINT));
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


def _install_macros(con: duckdb.DuckDBPyConnection) -> None:
    for stmt in _MACROS.split(";"):
        if stmt.strip():
            con.execute(stmt)


def ts_sql(x: str, tz: str, unit: str | None = None, fmt: str | None = None, n: str | None = None) -> str:
    """SQL turning the text ``x`` (epoch number in any unit, or RFC 3339) into a UTC TIMESTAMP.

    Integers and numeric strings: unit from ``unit`` or by magnitude (s < 1e11 <= ms < 1e14 <= us
    < 1e17 <= ns). Strings with a zone or offset are converted to UTC; zone-less ones are read in
    ``tz``. ``fmt`` is a strptime format for anything else. ``n``, when given, is SQL of ``x`` as
    an integer (NULL unless ``x`` is one, without a '.': see :func:`int_sql`), computed once per row
    by the caller and shared with :func:`precision_sql` and :func:`zoneless_sql`.

    Example:
        >>> import duckdb; con = duckdb.connect(); _install_macros(con)
        >>> con.sql("SELECT " + ts_sql("'1788357791482000000'", "UTC")).fetchall()[0][0]
        datetime.datetime(2026, 9, 2, 14, 3, 11, 482000)
    """
    if fmt is not None:
        parsed = f"try_strptime({x}, {_lit(fmt)})"
        if "%z" in fmt or "%Z" in fmt:
            return f"CAST({parsed} AS TIMESTAMP)"
        return _local(parsed, tz)
    is_int = f"{n} IS NOT NULL" if n else f"NOT contains({x}, '.') AND TRY_CAST({x} AS BIGINT) IS NOT NULL"
    n = n or f"TRY_CAST({x} AS BIGINT)"
    # integer arithmetic only: this runs on every row, and decimal scaling costs several times more
    scale = {"ns": f"{n} // 1000", "us": n, "ms": f"{n} * 1000", "s": f"{n} * 1000000"}
    int_us = scale[unit] if unit else (
        f"CASE WHEN abs({n}) >= 100000000000000000 THEN {scale['ns']} "
        f"WHEN abs({n}) >= 100000000000000 THEN {scale['us']} "
        f"WHEN abs({n}) >= 100000000000 THEN {scale['ms']} ELSE {scale['s']} END"
    )
    dec_unit = _lit(unit) if unit else f"gw_unit(TRY_CAST({x} AS DECIMAL(38,9)))"
    return (
        f"CASE WHEN {x} IS NULL THEN NULL "
        f"WHEN {is_int} THEN make_timestamp({int_us}) "
        f"WHEN TRY_CAST({x} AS DECIMAL(38,9)) IS NOT NULL THEN "
        f"make_timestamp(CAST(TRY_CAST({x} AS DECIMAL(38,9)) * gw_us_factor({dec_unit}) AS BIGINT)) "
        f"WHEN gw_has_zone({x}) THEN CAST(TRY_CAST({x} AS TIMESTAMPTZ) AS TIMESTAMP) "
        f"ELSE {_local(f'TRY_CAST({x} AS TIMESTAMP)', tz)} END"
    )


def _local(naive: str, tz: str) -> str:
    # The session zone is UTC (Case sets it), so TIMESTAMPTZ -> TIMESTAMP yields UTC wall time.
    if tz == "UTC":
        return naive
    return f"CAST(timezone({_lit(tz)}, {naive}) AS TIMESTAMP)"


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
        >>> import duckdb; con = duckdb.connect(); _install_macros(con)
        >>> con.sql("SELECT " + precision_sql("'2026-09-02T04:51:59.123Z'")).fetchall()[0][0]
        'ms'
    """
    if fmt is not None:
        return "'us'" if "%f" in fmt else "'s'"
    is_int = f"{n} IS NOT NULL" if n else f"NOT contains({x}, '.') AND TRY_CAST({x} AS BIGINT) IS NOT NULL"
    base = _lit(unit) if unit else f"gw_unit({n or f'TRY_CAST({x} AS BIGINT)'})"  # (a cheap integer CASE)
    dec_base = _lit(unit) if unit else f"gw_unit(TRY_CAST({x} AS DECIMAL(38,9)))"
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
        >>> import duckdb; con = duckdb.connect(); _install_macros(con)
        >>> con.sql("SELECT " + zoneless_sql("'2026-09-02 12:00:00'")).fetchall()[0][0]
        True
    """
    test = f"({x} IS NOT NULL AND TRY_CAST({x} AS DECIMAL(38,9)) IS NULL AND NOT gw_has_zone({x}))"
    if n is None:
        return test
    return f"(CASE WHEN {n} IS NOT NULL THEN false ELSE {test} END)"


# -- containers -----------------------------------------------------------------------------------


@dataclass
class Sniff:
    """What a file looks like: container kind, compression and a few sample records.

    Example:
        >>> Sniff("ndjson", "gzip", [{"RayID": "a"}], {"RayID"}, []).container
        'ndjson'
    """

    container: str  # ndjson | csv | json-array | json-doc | parquet | text
    compression: str
    records: list[dict[str, Any]]
    keys: set[str]
    text_lines: list[str]
    delim: str = ","


def _duck_compression(comp: str) -> str:
    return {"gzip": "gzip", "zstd": "zstd"}.get(comp, "none")


def _lines_reader(path: str, comp: str, rejects: str | None) -> str:
    # One VARCHAR column per physical line: no quoting, a delimiter that never splits, '\n' only
    # (a stray '\r' stays inside the line). Blank lines come back as NULL rows, so row_number()
    # is the physical line number, except for lines the reader itself rejects (invalid UTF-8,
    # over-long): those are listed in the rejects table and the numbers fixed afterwards.
    extra = ""
    if rejects:
        extra = (f", ignore_errors=true, store_rejects=true, rejects_table={_lit(rejects)}, "
                 f"rejects_scan={_lit(rejects + '_scan')}")
    return (
        f"read_csv({_lit(path)}, columns={{'line': 'VARCHAR'}}, header=false, delim='\\x01', "
        f"quote='', escape='', auto_detect=false, strict_mode=false, new_line='\\n', "
        f"max_line_size=8388608, buffer_size=33554432, compression={_lit(_duck_compression(comp))}{extra})"
    )


def sniff(path: Path) -> Sniff:
    """Look at the start of a file: its container and up to ``SAMPLE_RECORDS`` sample records.

    Example:
        >>> import tempfile; d = Path(tempfile.mkdtemp()); p = d / "a.ndjson"
        >>> _ = p.write_text('{"RayID": "x"}\\n')
        >>> sniff(p).container, sorted(sniff(p).keys)
        ('ndjson', ['RayID'])
    """
    comp = compression_of(path)
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic == b"PAR1":
        con = duckdb.connect()
        try:
            rows = con.execute(
                f"SELECT to_json(p) FROM read_parquet({_lit(str(path))}) p LIMIT {SAMPLE_RECORDS}"
            ).fetchall()
        except duckdb.Error as exc:
            raise InputError(f"cannot read Parquet file: {exc}", where=str(path)) from exc
        finally:
            con.close()
        recs = [json.loads(r[0]) for r in rows]
        return Sniff("parquet", "none", recs, _keys(recs), [])
    head = head_bytes(path, _SAMPLE_BYTES)
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    text = head.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    lines = text.splitlines()
    if len(head) == _SAMPLE_BYTES and lines:
        lines = lines[:-1]  # the last one may be cut by the sample size
    if stripped.startswith("["):
        recs = _sample_json_array(path, comp)
        return Sniff("json-array", comp, recs, _keys(recs), [])
    if stripped.startswith("{"):
        first = next((ln for ln in lines if ln.strip()), "")
        try:
            obj = json.loads(first)
            ndjson = isinstance(obj, dict)
        except ValueError:
            ndjson = False
        if ndjson:
            recs = []
            for ln in lines:
                if len(recs) >= SAMPLE_RECORDS:
                    break
                with contextlib.suppress(ValueError):
                    o = json.loads(ln)
                    if isinstance(o, dict):
                        recs.append(o)
            return Sniff("ndjson", comp, recs, _keys(recs), [])
        recs = _sample_json_doc(path, comp)
        return Sniff("json-doc", comp, recs, _keys(recs), [])
    first_line = next((ln for ln in lines if ln.strip()), "")
    delim = _csv_delimiter(first_line)
    if delim is not None:
        recs = _sample_csv(path, comp, delim)
        return Sniff("csv", comp, recs, _keys(recs), [], delim)
    return Sniff("text", comp, [], set(), lines[:SAMPLE_RECORDS])


def _keys(recs: list[dict[str, Any]]) -> set[str]:
    keys: set[str] = set()
    for r in recs:
        keys.update(r)
    return keys


def _csv_delimiter(line: str) -> str | None:
    """The delimiter of a CSV header line (None when the line is not one)."""
    for delim in (",", "\t", ";", "|"):
        cells = [c.strip().strip('"') for c in line.split(delim)]
        if len(cells) >= 3 and all(re.fullmatch(r"[A-Za-z_][\w.:\-]*", c) for c in cells):
            return delim
    return None


def _csv_options(delim: str) -> str:
    # The dialect is fixed from the header rather than sniffed: DuckDB's sniffer gives up on small
    # exports that contain a broken row, which is exactly when it is needed.
    return f"delim={_lit(delim)}, quote='\"', escape='\"', header=true, all_varchar=true, strict_mode=false"


def _sample_json_array(path: Path, comp: str) -> list[dict[str, Any]]:
    con = duckdb.connect()
    try:
        rows = con.execute(
            f"SELECT json FROM read_json_objects({_lit(str(path))}, format='array', "
            f"compression={_lit(_duck_compression(comp))}) LIMIT {SAMPLE_RECORDS}"
        ).fetchall()
    except duckdb.Error:
        return []
    finally:
        con.close()
    return [o for o in (_loads(r[0]) for r in rows) if isinstance(o, dict)]


def _sample_json_doc(path: Path, comp: str) -> list[dict[str, Any]]:
    con = duckdb.connect()
    try:
        rows = con.execute(
            f"SELECT json FROM read_json_objects({_lit(str(path))}, format='unstructured', "
            f"compression={_lit(_duck_compression(comp))}) LIMIT 3"
        ).fetchall()
    except duckdb.Error:
        return []
    finally:
        con.close()
    out: list[dict[str, Any]] = []
    for r in rows:
        doc = _loads(r[0])
        if isinstance(doc, dict) and isinstance(doc.get("result"), list):
            out.extend(o for o in doc["result"][:SAMPLE_RECORDS] if isinstance(o, dict))
        elif isinstance(doc, dict):
            out.append(doc)
    return out


def _sample_csv(path: Path, comp: str, delim: str) -> list[dict[str, Any]]:
    con = duckdb.connect()
    try:
        rows = con.execute(
            f"SELECT to_json(c) FROM read_csv({_lit(str(path))}, {_csv_options(delim)}, "
            f"ignore_errors=true, compression={_lit(_duck_compression(comp))}) c LIMIT {SAMPLE_RECORDS}"
        ).fetchall()
    except duckdb.Error:
        return []
    finally:
        con.close()
    return [o for o in (_loads(r[0]) for r in rows) if isinstance(o, dict)]


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


# -- detection ------------------------------------------------------------------------------------

_SMG_HINTS = re.compile(r"http_request\{|Starting router on|sglang_router_rs|smg::")


def detect(sn: Sniff, path: Path) -> tuple[Spec, str]:
    """Pick the preset whose signature the sampled records carry; explain the choice.

    Example:
        >>> s = Sniff("ndjson", "none", [{"RayID": "a", "EdgeStartTimestamp": 1}], {"RayID", "EdgeStartTimestamp"}, [])
        >>> detect(s, Path("x.log"))[1]
        'auto-detected cloudflare-http (RayID, EdgeStartTimestamp)'
    """
    names = ", ".join(PRESETS)
    if sn.container == "text":
        if any(_SMG_HINTS.search(ln) for ln in sn.text_lines):
            return PRESETS["smg-router"], "auto-detected smg-router (http_request{...} router lines)"
        raise FormatDetectionError(
            "cannot tell which gateway wrote this text file", where=str(path),
            hint=f"pass --gateway-format with one of: {names}, or a mapping .toml with line_regex",
        )
    if "resourceSpans" in sn.keys:
        return PRESETS["otel"], "auto-detected otel (resourceSpans)"
    if not sn.records:
        raise FormatDetectionError(
            f"no parseable records at the start of this {sn.container} file", where=str(path),
            hint=f"check the file, or pass --gateway-format with one of: {names}",
        )
    matches: list[tuple[Spec, list[str]]] = []
    for spec in PRESETS.values():
        if not spec.signature:
            continue
        hit: list[str] = []
        for group in spec.signature:
            found = next((k for k in group if k in sn.keys), None)
            if found is None:
                break
            hit.append(found)
        else:
            matches.append((spec, hit))
    if len(matches) == 1:
        spec, hit = matches[0]
        return spec, f"auto-detected {spec.name} ({', '.join(hit)})"
    sample_keys = ", ".join(sorted(sn.keys)[:12])
    if not matches:
        raise FormatDetectionError(
            f"no preset matches this {sn.container} file (keys: {sample_keys})", where=str(path),
            hint=f"pass --gateway-format with one of: {names}, or a mapping .toml",
        )
    raise FormatDetectionError(
        f"ambiguous format: matches {', '.join(s.name for s, _ in matches)} (keys: {sample_keys})",
        where=str(path), hint=f"pass --gateway-format with one of: {names}",
    )


# -- resolving format and options -----------------------------------------------------------------


def resolve_spec(format: str) -> Spec | None:
    """The preset or mapping named by ``format`` (None for 'auto').

    Example:
        >>> resolve_spec("litellm").layer
        'proxy'
        >>> resolve_spec("nope")
        Traceback (most recent call last):
        ...
        forensics.errors.ParameterError: unknown gateway format 'nope' (use auto, cloudflare-http, cloudflare-ai-gateway, nginx-json, envoy, litellm, otel, smg-router, or a mapping .toml file)
    """
    if format == "auto":
        return None
    if format in PRESETS:
        return PRESETS[format]
    if format.endswith(".toml") or Path(format).is_file():
        return load_mapping(format)
    raise ParameterError(
        f"unknown gateway format {format!r}",
        hint=f"use auto, {', '.join(PRESETS)}, or a mapping .toml file",
    )


def apply_options(spec: Spec, options: dict[str, Any]) -> Spec:
    """Return ``spec`` with the tenant/layer options applied.

    Example:
        >>> apply_options(PRESETS["litellm"], {"tenant_field": "end_user"}).columns["tenant_id"].fields
        ('end_user',)
    """
    cols = dict(spec.columns)
    if options.get("tenant_field"):
        cols["tenant_id"] = Col(fields=(str(options["tenant_field"]),))
    if options.get("tenant_header"):
        name = str(options["tenant_header"])
        cols["tenant_id"] = Col(fields=(f"$.RequestHeaders.{json_path(name)[2:]}",),
                                extra_fields=("RequestHeaders",),
                                sql=f"coalesce({{v}}, gw_json_get({{f:RequestHeaders}}, {_lit(json_path(name))}))")
    if options.get("tenant_key"):
        cols["tenant_id"] = meta_tenant(spec.columns.get("tenant_id", Col()).fields or ("metadata",),
                                        (str(options["tenant_key"]),))
    if options.get("tenant_attribute"):
        a = json_path(str(options["tenant_attribute"]))[2:]
        cols["tenant_id"] = Col(fields=(f"$.attributes.{a}", f"$.resource.{a}"))
    layer = str(options["layer"]) if options.get("layer") else spec.layer
    return replace(spec, columns=cols, layer=layer)


def check_tz(con: duckdb.DuckDBPyConnection, tz: str) -> None:
    """Fail early, and clearly, on an unknown zone name.

    Example:
        >>> check_tz(duckdb.connect(), "Mars/Olympus")
        Traceback (most recent call last):
        ...
        forensics.errors.ParameterError: unknown time zone 'Mars/Olympus' (use an IANA name such as UTC, Europe/Berlin or Asia/Singapore)
    """
    row = con.execute(
        "SELECT count(*) FROM pg_timezone_names() WHERE name = $tz OR abbrev = $tz", {"tz": tz}
    ).fetchall()[0]
    if not row or not row[0] or "'" in tz:
        raise ParameterError(f"unknown time zone {tz!r}",
                             hint="use an IANA name such as UTC, Europe/Berlin or Asia/Singapore")


# -- the SQL of one file ----------------------------------------------------------------------------


@dataclass
class FilePlan:
    """How one file is read: its path, spec (preset or mapping), sniffed container, detection note.

    Example:
        >>> FilePlan(Path("a.log"), PRESETS["envoy"], Sniff("ndjson", "none", [], set(), []), None).spec.layer
        'edge'
    """

    path: Path
    spec: Spec
    sniff: Sniff
    detected: str | None


def _is_otlp(plan: FilePlan) -> bool:
    return plan.spec.container == "otlp" or (
        plan.sniff.container in ("ndjson", "json-doc") and "resourceSpans" in plan.sniff.keys)


def _source_sql(plan: FilePlan, read_path: str, comp: str, rejects: str, positional: bool = False) -> str:
    """SQL of the record source ``(rn, line)``.

    ``line`` is JSON text for JSON-like containers and the raw line for text. For CSV and line
    readers, reader-level rejects land in the table ``rejects``. With ``positional`` (one row per
    record, in order: everything but OTLP), ``rn`` is a placeholder 0 and the caller numbers the
    rows by their position once inserted (:func:`_number_by_position`): ``row_number() OVER ()``
    runs the whole INSERT on one thread. CSV records are numbered from 2 (the header is line 1).
    """
    c = plan.sniff.container
    rn = "0::BIGINT" if positional and not _is_otlp(plan) else "row_number() OVER ()"
    if c == "csv" and not positional:
        rn += " + 1"  # the header is line 1: records start at line 2 (see _csv_physical_lines)
    if _is_otlp(plan):
        if c == "ndjson":
            docs = f"SELECT row_number() OVER () AS rn, line FROM {_lines_reader(read_path, comp, rejects)}"
            number = "rn"
        else:
            docs = (f"SELECT 1 AS rn, json AS line FROM read_json_objects({_lit(read_path)}, "
                    f"format='unstructured', compression={_lit(_duck_compression(comp))})")
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
        return f"SELECT {rn} AS rn, line FROM {_lines_reader(read_path, comp, rejects)}"
    if c == "text":
        return f"SELECT {rn} AS rn, line FROM {_lines_reader(read_path, comp, rejects)}"
    if c == "csv":
        return (
            f"SELECT {rn} AS rn, to_json(c) AS line FROM read_csv({_lit(read_path)}, "
            f"{_csv_options(plan.sniff.delim)}, ignore_errors=true, store_rejects=true, "
            f"rejects_table={_lit(rejects)}, rejects_scan={_lit(rejects + '_scan')}, "
            f"compression={_lit(_duck_compression(comp))}) c"
        )
    if c == "parquet":
        return f"SELECT {rn} AS rn, to_json(p) AS line FROM read_parquet({_lit(read_path)}) p"
    if c == "json-array":
        return (
            f"SELECT {rn} AS rn, json AS line FROM read_json_objects({_lit(read_path)}, "
            f"format='array', compression={_lit(_duck_compression(comp))})"
        )
    # a single JSON document: a REST envelope {"result": [...]} or one record
    return (
        f"SELECT {rn} AS rn, rec AS line FROM (SELECT unnest(CASE WHEN "
        f"json_type(json, '$.result') = 'ARRAY' THEN json_extract(json, '$.result[*]') ELSE [json] END) AS rec "
        f"FROM read_json_objects({_lit(read_path)}, format='unstructured', "
        f"compression={_lit(_duck_compression(comp))}))"
    )


def _top_level(field_name: str) -> tuple[str, str | None]:
    """Split a field into its top-level key and the JSON path inside it (None for the key itself).

    Example:
        >>> _top_level('$.RequestHeaders."x-request-id"')
        ('RequestHeaders', '$."x-request-id"')
        >>> _top_level("gen_ai.usage.input_tokens")
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


def fast_path_ok(plan: FilePlan) -> bool:
    """True when DuckDB's own NDJSON reader can parse this file (see :func:`_read_json_source`).

    Gzip qualifies: DuckDB decompresses on one thread while the others parse, and the line count
    that proves its numbering comes from ISA-L beside it (see :func:`scan_file`); measured on 5 M
    rows, 18.4 s through the line reader, 13.2 s this way (bare read_json: 8.9 s).

    Example:
        >>> fast_path_ok(FilePlan(Path("a"), PRESETS["cloudflare-http"], Sniff("ndjson", "none", [], set(), []), None))
        True
    """
    if plan.sniff.container != "ndjson" or plan.spec.container == "otlp" or plan.spec.line_regex:
        return False
    if plan.sniff.compression not in ("none", "gzip"):
        # zstd: the line reader (DuckDB's zstd reading of multi-frame files is not proven here)
        return False
    keys = [_top_level(f)[0] for f in plan.spec.all_fields()]
    # DuckDB column names are case-insensitive: Metadata and metadata cannot both be columns
    return len({k.lower() for k in set(keys)}) == len(set(keys))


def _read_json_source(plan: FilePlan, paths: list[str], comp: str, file_ids: list[int],
                      positional: bool = False) -> str:
    """SQL of ``(fid, rn, line, f)`` parsed by ``read_json`` (the parser a bare load uses).

    Every physical line becomes a row (unparseable ones all NULL) except blank lines, which the
    reader skips: the caller checks each file's row count against its line count. Several files
    (of one spec and compression) are read by one scan, in parallel, ``file_ids`` in their order.
    """
    fields = plan.spec.all_fields()
    keys = list(dict.fromkeys(_top_level(f)[0] for f in fields))
    cols = "{" + ", ".join(f"{_lit(k)}: 'VARCHAR'" for k in keys) + "}"

    def ref(field_name: str) -> str:
        key, sub = _top_level(field_name)
        ident = '"' + key.replace('"', '""') + '"'
        # a nested object arrives as JSON text (or as a plain string, which try() turns to NULL)
        return ident if sub is None else f"try(json_extract_string({ident}, {_lit(sub)}))"

    f = ", ".join(f"{ref(x)} AS f{i}" for i, x in enumerate(fields, start=1))
    fid = (str(int(file_ids[0])) if len(file_ids) == 1
           else f"[{', '.join(str(int(i)) for i in file_ids)}][CAST(file_index AS BIGINT) + 1]")
    return (
        f"SELECT {fid} AS fid, {'0::BIGINT' if positional else 'row_number() OVER ()'} AS rn, "
        f"NULL::VARCHAR AS line, true AS parsed, {f} "
        f"FROM read_json([{', '.join(_lit(p) for p in paths)}], format='newline_delimited', "
        f"ignore_errors=true, columns={cols}, compression={_lit(_duck_compression(comp))})"
    )


@dataclass
class Scan:
    """One pass over a file's bytes: sha256, physical line count, seek points (see :func:`scan_file`).

    Blank lines are not looked for: ``read_json`` skips them, so a file that has any shows fewer
    rows than lines, and is then re-read line by line.
    """

    sha: str = ""
    lines: int = 0
    #: (byte offset, lines before it) every few MB of a plain file, to fetch a line without a full read
    marks: list[tuple[int, int]] | None = None
    #: the decompressed stream ended early (truncated or corrupt): ``lines`` counts the readable part
    damaged: bool = False


class _HashingReader(io.RawIOBase):
    """A read-only file that hashes every byte read through it (the compressed bytes, for sha256)."""

    def __init__(self, raw: IO[bytes], h: Any) -> None:
        self.raw, self.h = raw, h

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        n = self.raw.readinto(buf)  # type: ignore[attr-defined]
        if n:
            self.h.update(memoryview(buf)[:n])
        return int(n or 0)


def scan_file(path: Path) -> Scan:
    """Hash the file and count its decompressed lines in one pass (runs beside the load).

    Gzip is inflated with ISA-L (``isal``): ~3 GB/s of output against ~0.5 GB/s for zlib, which
    is what makes counting the lines of a large .gz beside its load affordable.

    Example:
        >>> import tempfile; p = Path(tempfile.mkdtemp()) / "a"; _ = p.write_bytes(b"a\\n\\nb")
        >>> scan_file(p).lines
        3
    """
    import hashlib

    import zstandard

    h = hashlib.sha256()
    comp = compression_of(path)
    out = Scan(marks=[] if comp == "none" else None)
    last = b""
    total = 0

    def feed(data: bytes) -> None:
        nonlocal last, total
        if not data:
            return
        if out.marks is not None:
            out.marks.append((total, out.lines))
        total += len(data)
        out.lines += count_newlines(data)
        last = data

    with open(path, "rb") as fh:
        if comp == "none":
            while block := fh.read(1 << 22):
                h.update(block)
                feed(block)
        else:
            try:
                with decompressing(cast(IO[bytes], _HashingReader(fh, h)), comp) as z:
                    while data := z.read(1 << 22):
                        feed(data)
            except (OSError, EOFError, zlib.error, zstandard.ZstdError):
                out.damaged = True  # the loader reports the damage
            while block := fh.read(1 << 22):  # hash what the decompressor did not read
                h.update(block)
    if total and not last.endswith(b"\n"):
        out.lines += 1
    out.sha = h.hexdigest()
    return out


def _value_sql(col: Col, idx: dict[str, int]) -> str:
    """SQL of a column's text before its ``sql`` step: first non-empty field, regex, map, default."""
    parts = [f"g{idx[f]}" for f in col.fields]
    v = parts[0] if len(parts) == 1 else f"coalesce({', '.join(parts)})"
    if col.regex is not None:
        v = f"nullif(regexp_extract({v}, {_lit(col.regex)}, {col.group}), '')"
    if col.values:
        whens = " ".join(f"WHEN {_lit(k)} THEN {_lit(val)}" for k, val in col.values.items())
        v = f"(CASE {v} {whens} ELSE {v} END)"
    if col.default is not None:
        v = f"coalesce({v}, {_lit(col.default)})"
    return v


def _post_sql(col: Col, idx: dict[str, int], vref: str) -> str:
    """Apply a preset's ``sql`` step to the column ``vref``."""
    if col.sql is None:
        return vref
    return re.sub(r"\{f:([^}]+)\}", lambda m: f"g{idx[m.group(1)]}", col.sql).replace("{v}", vref)


def _typed(kind: str, v: str, custom: bool) -> str:
    if custom or kind == "str":
        return v
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


def _records_sql(plan: FilePlan, src: str, tz: str, parsed: bool = False) -> str:
    """SQL of the parsed records: rn, line, keep, raw_start, raw_end, dur_us and c_<column>s.

    ``f`` (all fields of a record, one JSON parse per line) is referenced only by plain column
    expressions here, so DuckDB evaluates it once per row.
    """
    spec = plan.spec
    fields = spec.all_fields()
    idx = {f: i + 1 for i, f in enumerate(fields)}
    paths = "[" + ", ".join(_lit(json_path(f)) for f in fields) + "]"
    if plan.sniff.container == "text" or spec.line_regex is not None:
        pattern = spec.line_regex or ""
        py = re.compile(pattern)
        names = {i: n for n, i in py.groupindex.items()}
        group_names = [names.get(i, f"_g{i}") for i in range(1, py.groups + 1)]
        rec = (f"CASE WHEN regexp_matches(line, {_lit(pattern)}) THEN "
               f"CAST(to_json(regexp_extract(line, {_lit(pattern)}, "
               f"[{', '.join(_lit(n) for n in group_names)}])) AS VARCHAR) END")
    else:
        rec = "line"
    cols = spec.columns
    dur = cols.get("duration")
    dur_unit = dur.unit if dur and dur.unit else "ms"
    # Layered so that every field is cleaned once and every value computed once: DuckDB does not
    # share a sub-expression repeated inside CASE branches, and on millions of rows that matters.
    pre = "".join(f",\n            {_value_sql(col, idx)} AS v_{n}" for n, col in cols.items())
    typed = "".join(
        f",\n        {_typed(COLUMN_KIND[n], _post_sql(col, idx, 'v_' + n), col.sql is not None)} AS c_{n}"
        for n, col in cols.items() if n not in ("ts_start", "ts_end", "duration")
    )
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
    return f"""
    SELECT fid, rn, line, parsed, keep,
        {'v_ts_start' if 'ts_start' in cols else 'NULL::VARCHAR'} AS raw_start,
        {'v_ts_end' if 'ts_end' in cols else 'NULL::VARCHAR'} AS raw_end,
        CAST(TRY_CAST({'v_duration' if 'duration' in cols else 'NULL::VARCHAR'} AS DOUBLE) * gw_us_factor({_lit(dur_unit)}) AS BIGINT) AS dur_us{typed}
    FROM (
        SELECT *, coalesce({keep}, false) AS keep{pre}
        FROM (SELECT fid, rn, line, parsed, {clean} FROM ({inner}))
    )"""


def build_insert_sql(
    plan: FilePlan, *, read_path: str, comp: str, rejects: str, file_id: int, tz: str, source: str | None = None,
    parsed: bool = False,
) -> str:
    """The one ``INSERT ... SELECT`` that loads a file (good rows and rejected lines alike).

    Example:
        >>> plan = FilePlan(Path("a.ndjson"), PRESETS["envoy"], Sniff("ndjson", "none", [], set(), []), None)
        >>> build_insert_sql(plan, read_path="a.ndjson", comp="none", rejects="r", file_id=1, tz="UTC").split()[:3]
        ['INSERT', 'INTO', 'gateway_requests']

    A line that cannot be loaded is written with ``ts_start = NULL`` (every loaded row has one)
    and the raw line in ``in_band_error``; before the file's transaction commits it is moved to
    ``rejected_lines`` with its reason (:func:`reasons_sql`). This keeps the load to a single pass
    over the (possibly compressed) source. ``source``, when given, is SQL of ``(fid, rn, line)``
    rows (several files at once, or repaired lines), or with ``parsed`` of ``(fid, rn, line, f)``.
    """
    spec = plan.spec
    tz = spec.tz or tz
    src = source or f"SELECT {int(file_id)} AS fid, rn, line FROM ({_source_sql(plan, read_path, comp, rejects)})"
    cols = spec.columns
    start, end = cols.get("ts_start"), cols.get("ts_end")

    # each raw value is cast to an integer once (n_start, n_end), not once per use: epoch numbers
    # are the common case, and every cast runs on millions of rows
    def ts_of(x: str, col: Col | None, n: str) -> str:
        return ts_sql(x, tz, col.unit if col else None, col.format if col else None, n)

    def out(n: str) -> str:
        return f"c_{n}" if n in cols else "NULL"

    prec = (f"CASE WHEN raw_start IS NOT NULL THEN "
            f"{precision_sql('raw_start', start.unit if start else None, start.format if start else None, 'n_start')} "
            f"ELSE {precision_sql('raw_end', end.unit if end else None, end.format if end else None, 'n_end')} END")
    fmt = (start.format if start else None) or (end.format if end else None) or ""
    n_raw = "CASE WHEN raw_start IS NOT NULL THEN n_start ELSE n_end END"
    zone_assumed = (f"CASE WHEN {zoneless_sql('coalesce(raw_start, raw_end)', n_raw)} "
                    f"{'AND false' if '%z' in fmt.lower() else ''} THEN {_lit(tz)} END")
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
    CASE WHEN ts_start IS NULL THEN coalesce(line, '') ELSE {out('in_band_error')} END,
    {out('upstream')}, {_lit(spec.layer)}, {_lit(spec.name)}, false, fid, rn
FROM (
    SELECT *,
        -- only an end and no duration logged: the start is taken as the end (ts_raw shows which)
        CASE WHEN keep THEN coalesce(t_s, t_e - to_microseconds(dur_us), t_e) END AS ts_start,
        CASE WHEN keep THEN coalesce(t_e, t_s + to_microseconds(dur_us)) END AS ts_end
    FROM (
        SELECT *, {ts_of('raw_start', start, 'n_start')} AS t_s, {ts_of('raw_end', end, 'n_end')} AS t_e
        FROM (SELECT *, {int_sql('raw_start')} AS n_start, {int_sql('raw_end')} AS n_end
              FROM ({_records_sql(plan, src, tz, parsed)}))
    )
)
"""


def reasons_sql(plan: FilePlan, *, file_ids: list[int], tz: str) -> str:
    """SELECT (fid, rn, reason, raw) for the rejected lines of files still in gateway_requests.

    Example:
        >>> plan = FilePlan(Path("a.ndjson"), PRESETS["envoy"], Sniff("ndjson", "none", [], set(), []), None)
        >>> "invalid JSON" in reasons_sql(plan, file_ids=[1], tz="UTC")
        True
    """
    spec = plan.spec
    text = plan.sniff.container == "text" or spec.line_regex is not None
    if text:
        parse_fail = ("'not a router request line'" if spec.name == "smg-router"
                      else _lit(f"line does not match line_regex of {spec.name}"))
    else:
        parse_fail = "CASE WHEN json_valid(line) THEN 'not a JSON object' ELSE 'invalid JSON' END"
    ts_fields = ", ".join(dict.fromkeys(
        [*(spec.columns["ts_start"].fields if "ts_start" in spec.columns else ()),
         *(spec.columns["ts_end"].fields if "ts_end" in spec.columns else ())]))
    ids = ", ".join(str(int(i)) for i in file_ids)
    src = (f"SELECT file_id AS fid, line_no AS rn, in_band_error AS line FROM gateway_requests "
           f"WHERE file_id IN ({ids}) AND ts_start IS NULL")
    return f"""
SELECT fid, rn, CASE WHEN line IS NULL OR trim(line) = '' THEN 'empty line'
    WHEN NOT parsed OR (json_valid(line) AND NOT {'true' if text else "json_type(line) = 'OBJECT'"}) THEN {parse_fail}
    WHEN NOT keep THEN {_lit(spec.keep_reason or 'filtered out')}
    WHEN raw_start IS NULL AND raw_end IS NULL THEN {_lit('missing timestamp (' + ts_fields + ')')}
    ELSE 'unparseable timestamp: ' || left(coalesce(raw_start, raw_end), 100) END AS reason,
    encode(coalesce(line, '')) AS raw
FROM ({_records_sql(plan, src, tz)})
"""


# -- loading one file -------------------------------------------------------------------------------


@dataclass
class _Counts:
    lines: int = 0
    rejected: int = 0
    duplicate: int = 0
    warning: str | None = None


@dataclass
class _Item:
    """One file of a load: its plan, evidence id and the path actually read."""

    plan: FilePlan
    file_id: int
    read_path: str
    comp: str
    #: the physical line count of the file read (CSV: tells whether records span lines), when
    #: already known (counted beside the load); else counted when needed
    lines: Callable[[], int] | None = None
    #: the file's :class:`Scan` (sha256, line count, seek points), for the read_json path; a
    #: callable because it may still be running beside the load
    scan: Callable[[], Scan] | None = None

    @property
    def rejects(self) -> str:
        return f"gw_rejects_{self.file_id}"

    def get_scan(self) -> Scan:
        assert self.scan is not None, "the read_json path needs the file's scan"
        return self.scan()


def _commit_point(con: duckdb.DuckDBPyConnection) -> None:
    """Commit the bulk INSERT before the few UPDATE/DELETEs that finish a file.

    Deleting or updating rows of a large insert inside its own transaction makes DuckDB rewrite
    the freshly written row groups at commit (seconds per million rows); once committed they take
    cheap delete/update markers. The file's evidence row stays ``complete = NULL`` until it is
    finished, so an interrupted ingest is recognised and undone (:func:`_undo_unfinished`).
    """
    con.execute("COMMIT")
    con.execute("BEGIN TRANSACTION")


def _positional_ok(con: duckdb.DuckDBPyConnection) -> bool:
    """True when an INSERT stores rows in source order (DuckDB's ``preserve_insertion_order``)."""
    row = con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0]
    return bool(row[0])


def _number_by_position(con: duckdb.DuckDBPyConnection, file_ids: list[int], first: int = 1) -> bool:
    """Set ``line_no`` of these files' freshly committed rows from their position; False if unsure.

    ``row_number() OVER ()`` in the INSERT would number the rows as they are read, but it runs the
    whole statement on one thread. With insertion order preserved, an INSERT appends the rows in
    source order (the files of a batch one after the other), so the k-th row of a file sits at
    ``rowid = lo + k - 1``: the same numbers, set by one cheap UPDATE after the commit point
    (before it, DuckDB would rewrite the new row groups at commit). Each file's rows must be one
    contiguous block; otherwise (never seen) False, and the caller reloads with ``row_number()``.
    ``first`` is the number of a file's first row: 2 for CSV, whose header is line 1.
    """
    ids = ", ".join(str(int(i)) for i in file_ids)
    spans = con.execute(
        f"SELECT file_id, min(rowid), max(rowid), count(*) FROM gateway_requests "
        f"WHERE file_id IN ({ids}) GROUP BY file_id"
    ).fetchall()
    if any(int(hi) - int(lo) + 1 != int(n) for _, lo, hi, n in spans):
        return False
    if spans:
        con.execute(
            f"UPDATE gateway_requests g SET line_no = g.rowid - s.lo + {int(first)} "
            f"FROM (SELECT file_id, min(rowid) AS lo FROM gateway_requests WHERE file_id IN ({ids}) "
            f"GROUP BY file_id) s WHERE g.file_id = s.file_id"
        )
    return True


def _undo_unfinished(case: Case) -> list[str]:
    """Remove the rows of gateway files whose ingest did not finish; return their paths."""
    con = case.con
    rows = con.execute(
        "SELECT file_id, path FROM evidence_files WHERE kind = 'gateway' AND complete IS NULL"
    ).fetchall()
    if not rows:
        return []
    ids = ", ".join(str(int(r[0])) for r in rows)
    for table in ("gateway_requests", "rejected_lines", "evidence_files"):
        con.execute(f"DELETE FROM {table} WHERE file_id IN ({ids})")
    return [str(r[1]) for r in rows]


def _load_files(case: Case, items: list[_Item], tz: str) -> dict[int, _Counts]:
    """Load files that share one spec with a single INSERT; return the counts per file_id.

    Planning the statement costs tens of milliseconds, which dominates for the many small hourly
    files of a Logpush bucket: they are loaded together, each with its own file_id and numbering.
    """
    con = case.con
    plan = items[0].plan
    ids = [it.file_id for it in items]
    if all(it.scan is not None for it in items):
        # read_json over all the files at once: parallel across files (a UNION ALL of line
        # readers ran them one after the other: 227 hourly .gz files, 6.8 s against 2.7 s bare)
        fast = _load_fast(case, items, tz)
        if fast is not None:
            return fast
        con.execute(f"DELETE FROM gateway_requests WHERE file_id IN ({', '.join(str(i) for i in ids)})")
    _drop_rejects(con, items)
    # rows numbered by their position once inserted: row_number() would run the INSERT on one thread
    positional = not _is_otlp(plan) and _positional_ok(con)

    def insert(positional: bool) -> None:
        source = " UNION ALL ".join(
            f"SELECT {it.file_id} AS fid, rn, line FROM "
            f"({_source_sql(it.plan, it.read_path, it.comp, it.rejects, positional)})"
            for it in items
        )
        con.execute(build_insert_sql(plan, read_path=items[0].read_path, comp=items[0].comp,
                                     rejects=items[0].rejects, file_id=items[0].file_id, tz=tz, source=source))

    insert(positional)
    _commit_point(con)
    is_csv = plan.sniff.container == "csv"
    if positional and not _number_by_position(con, ids, first=2 if is_csv else 1):
        con.execute(f"DELETE FROM gateway_requests WHERE file_id IN ({', '.join(str(i) for i in ids)})")
        _drop_rejects(con, items)
        insert(False)
        _commit_point(con)
    direct_n: dict[int, int] = {}
    found = _reader_rejects_many(con, items)
    for it in items:
        if found.get(it.file_id):
            direct_n[it.file_id] = _reader_level_rejects(case, it, tz, found[it.file_id])
    warnings = {it.file_id: _csv_physical_lines(con, it, [ln for ln, _, _, _ in found.get(it.file_id, [])])
                for it in items if is_csv}
    counts = _finish_load(case, items, direct_n, tz)
    for fid, warning in warnings.items():
        counts[fid].warning = warning
    return counts


def _finish_load(case: Case, items: list[_Item], direct_n: dict[int, int], tz: str) -> dict[int, _Counts]:
    """Count, move rejected lines out with their reasons, flag duplicates; counts per file_id."""
    con = case.con
    plan = items[0].plan
    ids = [it.file_id for it in items]
    id_list = ", ".join(str(i) for i in ids)
    got = con.execute(
        f"SELECT file_id, count(*), count(*) FILTER (WHERE ts_start IS NULL) FROM gateway_requests "
        f"WHERE file_id IN ({id_list}) GROUP BY file_id"
    ).fetchall()
    counts = {i: _Counts(lines=direct_n.get(i, 0), rejected=direct_n.get(i, 0)) for i in ids}
    for fid, n, rej in got:
        counts[int(fid)].lines += int(n)
        counts[int(fid)].rejected += int(rej)
    if any(int(rej) for _, _, rej in got):
        con.execute(
            f"""INSERT INTO rejected_lines
                SELECT fid, rn, reason, raw[1:{RAW_CAP}], octet_length(raw)
                FROM ({reasons_sql(plan, file_ids=ids, tz=tz)}) ORDER BY fid, rn"""
        )
        con.execute(f"DELETE FROM gateway_requests WHERE file_id IN ({id_list}) AND ts_start IS NULL")
    for fid, n in _flag_duplicates(con, ids).items():
        counts[fid].duplicate = n
    _drop_rejects(con, items)
    return counts


def _load_fast(case: Case, items: list[_Item], tz: str) -> dict[int, _Counts] | None:
    """Load NDJSON files through one ``read_json``; None when their rows do not match their lines.

    ``read_json`` skips blank lines, so its row number is the physical line number only when a
    file has none: each file's row count is checked against :func:`scan_file`'s line count
    (``_Item.scan``, computed beside the load). Lines it could not parse come back as all-NULL
    rows, are rejected, and get their raw bytes (and reasons) from the source file afterwards.
    None also when the rows cannot be numbered by position: the caller drops them and reloads
    through the line reader.
    """
    con = case.con
    plan = items[0].plan
    positional = _positional_ok(con)
    ids = [it.file_id for it in items]
    id_list = ", ".join(str(i) for i in ids)
    source = _read_json_source(plan, [it.read_path for it in items], items[0].comp, ids, positional)
    con.execute(build_insert_sql(plan, read_path=items[0].read_path, comp=items[0].comp, rejects=items[0].rejects,
                                 file_id=ids[0], tz=tz, parsed=True, source=source))
    scans = {it.file_id: it.get_scan() for it in items}
    got = dict(con.execute(f"SELECT file_id, count(*) FROM gateway_requests WHERE file_id IN ({id_list}) "
                           f"GROUP BY file_id").fetchall())
    if any(int(got.get(i, 0)) != sc.lines or sc.damaged for i, sc in scans.items()):
        return None  # a blank line shifted the numbering; a damaged stream is salvaged by the line path
    _commit_point(con)
    if positional and not _number_by_position(con, ids):
        return None
    bad = con.execute(f"SELECT file_id, line_no FROM gateway_requests WHERE file_id IN ({id_list}) "
                      f"AND ts_start IS NULL ORDER BY file_id, line_no").fetchall()
    if bad:
        by_file: dict[int, set[int]] = {}
        for fid, ln in bad:
            by_file.setdefault(int(fid), set()).add(int(ln))
        text: list[tuple[int, int, str]] = []
        repair: list[tuple[int, int, str]] = []
        for it in items:
            wanted = by_file.get(it.file_id)
            if not wanted:
                continue
            raws = _raw_lines(Path(it.read_path), it.comp, wanted, scans[it.file_id].marks)
            for ln in sorted(wanted):
                raw = raws.get(ln, b"")
                try:
                    text.append((it.file_id, ln, raw.decode("utf-8")))
                except UnicodeDecodeError:
                    repair.append((it.file_id, ln, raw.decode("utf-8", errors="replace")))
        con.execute("CREATE OR REPLACE TEMP TABLE gw_rawtext (fid INTEGER, rn BIGINT, line VARCHAR)")
        if text:
            con.executemany("INSERT INTO gw_rawtext VALUES (?, ?, ?)", text)
            con.execute("UPDATE gateway_requests g SET in_band_error = r.line FROM gw_rawtext r "
                        "WHERE g.file_id = r.fid AND g.line_no = r.rn AND g.ts_start IS NULL")
        if repair:
            # non-UTF-8 bytes (say in a user-agent): parse the line with U+FFFD in their place
            con.execute("DELETE FROM gw_rawtext")
            con.executemany("INSERT INTO gw_rawtext VALUES (?, ?, ?)", repair)
            con.execute("DELETE FROM gateway_requests g WHERE g.ts_start IS NULL AND EXISTS "
                        "(SELECT 1 FROM gw_rawtext r WHERE r.fid = g.file_id AND r.rn = g.line_no)")
            con.execute(build_insert_sql(plan, read_path=items[0].read_path, comp=items[0].comp,
                                         rejects=items[0].rejects, file_id=ids[0], tz=tz,
                                         source="SELECT fid, rn, line FROM gw_rawtext"))
        con.execute("DROP TABLE gw_rawtext")
    return _finish_load(case, items, {}, tz)


def _drop_rejects(con: duckdb.DuckDBPyConnection, items: list[_Item]) -> None:
    """Drop the reader-rejects tables of these files (one call for a whole batch)."""
    con.execute(";".join(f"DROP TABLE IF EXISTS {it.rejects}; DROP TABLE IF EXISTS {it.rejects}_scan"
                         for it in items))


def _reader_rejects_many(con: duckdb.DuckDBPyConnection,
                         items: list[_Item]) -> dict[int, list[tuple[int, str, str, str]]]:
    """:func:`_reader_rejects` of every file of a batch, in two statements (not two per file)."""
    names = ", ".join(_lit(it.rejects) for it in items)
    present = {r[0] for r in con.execute(
        f"SELECT table_name FROM duckdb_tables() WHERE table_name IN ({names})").fetchall()}
    mine = [it for it in items if it.rejects in present]
    if not mine:
        return {}
    counts = con.execute(" UNION ALL ".join(
        f"SELECT {it.file_id}, count(*) FROM {it.rejects}" for it in mine)).fetchall()
    have = {int(f) for f, n in counts if n}
    return {it.file_id: _reader_rejects(con, it.rejects) for it in mine if it.file_id in have}


def _reader_level_rejects(case: Case, it: _Item, tz: str,
                          reader_rejects: list[tuple[int, str, str, str]] | None = None) -> int:
    """Handle the lines DuckDB's reader itself refused; return how many were rejected outright.

    Invalid UTF-8 lines are re-read from the source and parsed with U+FFFD in place of the bad
    bytes (a stray byte in a user-agent does not make a record unreadable); over-long lines and
    CSV rows with the wrong field count are rejected with their raw bytes.
    """
    con = case.con
    plan = it.plan
    if reader_rejects is None:
        reader_rejects = _reader_rejects(con, it.rejects)
    if not reader_rejects:
        return 0
    _fix_line_numbers(con, it.file_id, [ln for ln, _, _, _ in reader_rejects])
    lines_kind = plan.sniff.container in ("ndjson", "text") and plan.spec.container != "otlp"
    raws = _raw_lines(Path(it.read_path), it.comp, {ln for ln, _, _, _ in reader_rejects}) if lines_kind else {}
    repair: list[tuple[int, str]] = []
    direct: list[tuple[int, str, bytes]] = []
    for ln, etype, reason, fallback in reader_rejects:
        if etype == "INVALID ENCODING" and ln in raws:
            repair.append((ln, raws[ln].decode("utf-8", errors="replace")))
        else:
            direct.append((ln, reason, raws.get(ln) or fallback.encode()))
    if repair:
        con.execute("CREATE OR REPLACE TEMP TABLE gw_fixlines (rn BIGINT, line VARCHAR)")
        con.executemany("INSERT INTO gw_fixlines VALUES (?, ?)", repair)
        con.execute(build_insert_sql(plan, read_path=it.read_path, comp=it.comp, rejects=it.rejects,
                                     file_id=it.file_id, tz=tz,
                                     source=f"SELECT {it.file_id} AS fid, rn, line FROM gw_fixlines"))
        con.execute("DROP TABLE gw_fixlines")
    if direct:
        store_rejected(case, it.file_id, direct)
    return len(direct)


def _load_file(case: Case, plan: FilePlan, file_id: int, tz: str, read_path: str, comp: str,
               lines: Callable[[], int] | None = None) -> _Counts:
    return _load_files(case, [_Item(plan, file_id, read_path, comp, lines)], tz)[file_id]


def _reader_rejects(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[int, str, str, str]]:
    # Inside a transaction any failed statement aborts it: look the table up, never try-and-catch.
    # ``line`` counts what the reader split the file into: physical lines for the line reader; for
    # read_csv the header, each record and each blank line (a record with a quoted newline is one),
    # the physical line unless an earlier record spans lines (see _csv_physical_lines).
    row = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = $t", {"t": table}).fetchall()[0]
    if not row or not row[0]:
        return []
    rows = con.execute(
        f"SELECT line, any_value(error_type)::VARCHAR, any_value(csv_line), any_value(error_message) "
        f"FROM {table} GROUP BY line ORDER BY line"
    ).fetchall()
    out = []
    for line, etype, csv_line, message in rows:
        reason = {
            "INVALID ENCODING": "invalid UTF-8 (raw bytes kept)",
            "LINE SIZE OVER MAXIMUM": "line longer than 8 MiB",
            "TOO MANY COLUMNS": "CSV row has too many fields",
            "MISSING COLUMNS": "CSV row has too few fields",
            "UNQUOTED VALUE": "CSV quoting error",
        }.get(str(etype), f"unreadable line ({etype}: {message})")
        out.append((int(line), str(etype), reason, (csv_line or "").lstrip("\n")))
    return out


def _fix_line_numbers(con: duckdb.DuckDBPyConnection, file_id: int, rejected: list[int]) -> None:
    # Rows after a reader-rejected line were numbered without it: shift each row by the number of
    # rejected lines before it. Good row k sits at k + #{i : r_i - i + 1 <= k} (r_i sorted). The
    # same holds when the numbers start at 2 (CSV: the header is line 1 and r_i counts it).
    rejected = sorted(rejected)
    keys = [(r - i, i + 1) for i, r in enumerate(rejected)]  # (r_i - i + 1 with 1-based i, i)
    con.execute("CREATE OR REPLACE TEMP TABLE gw_shift (k BIGINT, n BIGINT)")
    con.executemany("INSERT INTO gw_shift VALUES (?, ?)", keys)
    con.execute(
        """
        UPDATE gateway_requests g SET line_no = g.line_no + s.n
        FROM (SELECT g2.rowid AS rid, max(s.n) AS n FROM gateway_requests g2
              JOIN gw_shift s ON g2.line_no >= s.k WHERE g2.file_id = $f GROUP BY g2.rowid) s
        WHERE g.rowid = s.rid
        """,
        {"f": file_id},
    )
    con.execute("DROP TABLE gw_shift")


def _csv_physical_lines(con: duckdb.DuckDBPyConnection, it: _Item, reader_rejects: list[int]) -> str | None:
    """Make a CSV file's line numbers the physical line each record starts on; a warning if unsure.

    Rows were numbered from 2 by position and reader rejects by read_csv's count (header 1, then
    records and blank lines), which is the physical line while no record spans lines and no
    line is blank: then the file has exactly ``1 + records`` physical lines, and nothing is done.
    Otherwise (a quoted field with a newline, blank lines) the file is split into records once
    more by Python's ``csv`` module to find where each starts, and the numbers are replaced: the
    k-th row read (in line order) gets the start of the k-th record read_csv did not reject.
    When that split disagrees with read_csv's (odd quoting), numbers stay record-based and the
    warning says so.
    """
    good = int(con.execute("SELECT count(*) FROM gateway_requests WHERE file_id = $f",
                           {"f": it.file_id}).fetchall()[0][0])
    physical = it.lines() if it.lines is not None else _count_lines(Path(it.read_path))
    if physical == 1 + good + len(reader_rejects):
        return None
    approximate = ("line numbers are approximate: records span several lines or blank lines were "
                   "skipped, and the file could not be split into records to place them")
    try:
        starts, records = _csv_units(Path(it.read_path), it.plan.sniff.delim)
    except (csv.Error, OSError, EOFError, zlib.error, ValueError):
        return approximate
    rejected = set(reader_rejects)
    kept = [u for u in records if u not in rejected]
    if len(kept) != good or len(records) - len(kept) != len(rejected):
        return approximate
    import pyarrow as pa

    # (kind, key, line): 'g' = the key-th row read, 'r' = read_csv's count of a rejected record
    keys = list(range(1, good + 1)) + sorted(rejected)
    kinds = ["g"] * good + ["r"] * len(rejected)
    where = [starts[u - 1] for u in kept] + [starts[u - 1] for u in sorted(rejected)]
    con.register("gw_csvmap_src", pa.table({"kind": kinds, "k": keys, "phys": where}))
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE gw_csvmap AS SELECT * FROM gw_csvmap_src")
    finally:
        con.unregister("gw_csvmap_src")
    con.execute(
        """
        UPDATE gateway_requests g SET line_no = m.phys
        FROM (SELECT rowid AS rid, row_number() OVER (ORDER BY line_no, rowid) AS k
              FROM gateway_requests WHERE file_id = $f) o
        JOIN gw_csvmap m ON m.kind = 'g' AND m.k = o.k
        WHERE g.rowid = o.rid
        """,
        {"f": it.file_id},
    )
    if rejected:
        con.execute("UPDATE rejected_lines r SET line_no = m.phys FROM gw_csvmap m "
                    "WHERE r.file_id = $f AND m.kind = 'r' AND r.line_no = m.k", {"f": it.file_id})
    con.execute("DROP TABLE gw_csvmap")
    return None


def _count_lines(path: Path) -> int:
    """Physical lines of a (possibly compressed) file: newlines, plus an unterminated last line."""
    n = 0
    last = b""
    with open_decompressed(path) as fh:
        while block := fh.read(1 << 22):
            n += count_newlines(block)
            last = block
    return n + (1 if last and not last.endswith(b"\n") else 0)


def _csv_units(path: Path, delim: str) -> tuple[list[int], list[int]]:
    """What read_csv counts in a CSV file (header, records, blank lines) and where each starts.

    Returns the physical start line of every unit (unit u at index u - 1) and the units that are
    records. Only for files whose records span lines: a Python pass over the whole file.
    """
    starts: list[int] = []
    records: list[int] = []
    old = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)  # a prompt can exceed the 128 KiB default
    try:
        with open_decompressed(path) as raw:
            # latin-1 maps every byte to one character: quotes and newlines are found whatever the
            # encoding (UTF-8 never uses ASCII bytes inside a multi-byte character). Lines end at
            # '\n' only, as everywhere else (a stray '\r' does not start a line)
            text = io.TextIOWrapper(raw, encoding="latin-1", newline="\n")
            reader = csv.reader(text, delimiter=delim, quotechar='"', doublequote=True, strict=False)
            before = 0
            for row in reader:
                starts.append(before + 1)
                if row and len(starts) > 1:
                    records.append(len(starts))
                before = reader.line_num
    finally:
        csv.field_size_limit(old)
    return starts, records


def _raw_lines(path: Path, comp: str, wanted: set[int],
               marks: list[tuple[int, int]] | None = None) -> dict[int, bytes]:
    """The original bytes of a few physical lines (readers show them lossily, or not at all).

    With ``marks`` (seek points of a plain file, from :func:`scan_file`) only the blocks holding
    the wanted lines are read; otherwise the file is streamed (decompressed) up to the last wanted
    line: one pass, only for files with lines to show.
    """
    out: dict[int, bytes] = {}
    if not wanted:
        return out
    if marks and comp == "none":
        firsts = [lines_before for _, lines_before in marks]
        with open(path, "rb") as fh:
            for n in sorted(wanted):
                # the last block that starts no later than line n can start
                offset, before = marks[max(0, bisect.bisect_right(firsts, n - 2) - 1)]
                ln = 0
                if offset:
                    fh.seek(offset - 1)
                    if fh.read(1) == b"\n":
                        ln = before  # the block starts a line: the next one read is before + 1
                    else:
                        fh.readline()  # skip the rest of line before + 1
                        ln = before + 1
                else:
                    fh.seek(0)
                for raw in fh:
                    ln += 1
                    if ln == n:
                        out[n] = raw.rstrip(b"\r\n")
                        break
        return out
    want = sorted(wanted)
    ln = 1  # the number of the line that `carry` starts
    carry = b""
    try:
        # whole blocks skipped on their newline count: a Python loop over 2.5 M lines to reach
        # one took 1.3 s, this 0.4 s
        with open_decompressed(path) as fh:
            while ln <= want[-1] and (block := fh.read(1 << 22)):
                nl = count_newlines(block)
                if nl == 0:
                    carry += block
                    continue
                i = bisect.bisect_left(want, ln)
                if i < len(want) and want[i] < ln + nl:  # a wanted line ends in this block
                    parts = (carry + block).split(b"\n")
                    for k, part in enumerate(parts[:-1]):
                        if ln + k in wanted:
                            out[ln + k] = part.rstrip(b"\r")
                    carry = parts[-1]
                else:
                    carry = block[block.rfind(b"\n") + 1:]
                ln += nl
    except (OSError, EOFError, zlib.error):
        return out
    if carry and ln in wanted:  # an unterminated last line
        out[ln] = carry.rstrip(b"\r")
    return out


def _flag_duplicates(con: duckdb.DuckDBPyConnection, file_ids: list[int]) -> dict[int, int]:
    """Flag delivery-retry copies (same layer, request_id, ts_start, ts_end) among these files' rows.

    The first occurrence in the case (lowest file_id, then line) stays the original; files are
    loaded in order, so a copy in a later file or later line is the one flagged.
    """
    ids = ", ".join(str(int(i)) for i in file_ids)
    # the first files of a case have no earlier rows to repeat: then the copies within these files
    # are all there is to find (and the second pass and the UNION cost a third: 0.6 -> 0.4 s at 5 M)
    others = con.execute(
        f"SELECT EXISTS (SELECT 1 FROM gateway_requests WHERE file_id NOT IN ({ids}))").fetchall()[0][0]
    across = f"""
        UNION
        SELECT h FROM mine WHERE h IN (
            SELECT hash(layer, request_id, ts_start, ts_end) FROM gateway_requests
            WHERE file_id NOT IN ({ids}) AND request_id IS NOT NULL)""" if others else ""
    # A 64-bit hash narrows the candidates cheaply; the exact comparison is done on those only.
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE gw_dupcand AS
        WITH mine AS (
            SELECT hash(layer, request_id, ts_start, ts_end) AS h FROM gateway_requests
            WHERE file_id IN ({ids}) AND request_id IS NOT NULL
        )
        SELECT h FROM mine GROUP BY h HAVING count(*) > 1{across}
        """
    )
    if not con.execute("SELECT count(*) FROM gw_dupcand").fetchall()[0][0]:
        con.execute("DROP TABLE gw_dupcand")
        return {}
    con.execute(
        f"""
        UPDATE gateway_requests SET is_duplicate = true WHERE rowid IN (
            SELECT rid FROM (
                SELECT rowid AS rid, file_id,
                       row_number() OVER (PARTITION BY layer, request_id, ts_start, ts_end
                                          ORDER BY file_id, line_no, rowid) AS k
                FROM gateway_requests
                WHERE request_id IS NOT NULL AND hash(layer, request_id, ts_start, ts_end) IN (SELECT h FROM gw_dupcand)
            ) WHERE k > 1 AND file_id IN ({ids}))
        """
    )
    rows = con.execute(
        f"SELECT file_id, count(*) FROM gateway_requests WHERE file_id IN ({ids}) AND is_duplicate GROUP BY file_id"
    ).fetchall()
    con.execute("DROP TABLE gw_dupcand")
    return {int(f): int(n) for f, n in rows}


# -- required fields ----------------------------------------------------------------------------------


def check_required(plan: FilePlan) -> None:
    """Raise MissingFieldError when a field the spec needs is absent from every sampled record.

    Example:
        >>> sn = Sniff("ndjson", "none", [{"a": 1}], {"a"}, [])
        >>> check_required(FilePlan(Path("x.log"), PRESETS["envoy"], sn, None))
        Traceback (most recent call last):
        ...
        forensics.errors.MissingFieldError: x.log: field start_time not found in the first 1 records (needed by preset envoy, column ts_start) (choose the right --gateway-format, or write a mapping file that names the field for ts_start (see docs/gateway.md))
    """
    sn = plan.sniff
    if plan.spec.container == "otlp" or sn.container == "text" or not sn.records:
        return
    for req in plan.spec.required:
        alternatives = req.split("|")
        if not any(_has_field(r, a) for r in sn.records for a in alternatives):
            col = next((n for n, c in plan.spec.columns.items() if set(alternatives) & set(c.fields)), "ts_start")
            where_key = (f"{plan.spec.fix_key}.{col}" if plan.spec.source != "preset"
                         else f"preset {plan.spec.name}, column {col}")
            raise MissingFieldError(
                f"field {' or '.join(alternatives)} not found in the first {len(sn.records)} records "
                f"(needed by {where_key})",
                where=str(plan.path),
                hint="choose the right --gateway-format, or write a mapping file that names the field "
                     f"for {col} (see docs/gateway.md)",
            )


def _has_field(rec: dict[str, Any], name: str) -> bool:
    if not name.startswith("$"):
        v = rec.get(name)
        return v is not None and v != "" and v != "-"
    cur: Any = rec
    for part in re.findall(r'"((?:[^"\\]|\\.)*)"|([^.\[\]"]+)', name[2:]):
        key = part[0] or part[1]
        if not isinstance(cur, dict) or key not in cur:
            return False
        cur = cur[key]
    return cur is not None and cur != ""


# -- truncated compressed files -----------------------------------------------------------------------


def salvage_to_file(path: Path, dest: Path) -> tuple[int, bytes]:
    """Decompress the readable prefix of a truncated gzip/zstd file into ``dest`` (whole lines).

    Returns ``(lines_written, partial_tail)``: the bytes of a line cut by the break.

    Example:
        >>> import gzip, tempfile; d = Path(tempfile.mkdtemp()); p = d / "t.gz"
        >>> _ = p.write_bytes(gzip.compress(bytes(range(256)) * 400 + b"\\n" * 10)[:-20])
        >>> salvage_to_file(p, d / "out")[0] > 0
        True
    """
    comp = compression_of(path)
    n_lines = 0
    tail = b""
    with open(dest, "wb") as out:
        def emit(block: bytes) -> None:
            nonlocal tail, n_lines
            data = tail + block
            cut = data.rfind(b"\n")
            if cut < 0:
                tail = data
                return
            out.write(data[: cut + 1])
            n_lines += data.count(b"\n", 0, cut + 1)
            tail = data[cut + 1:]

        if comp == "gzip":
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            with open(path, "rb") as fh:
                try:
                    while block := fh.read(1 << 20):
                        d, data = gunzip_block(d, block)
                        emit(data)
                except zlib.error:
                    pass
        elif comp == "zstd":
            import zstandard

            with open(path, "rb") as raw:
                reader = zstandard.ZstdDecompressor().stream_reader(raw)
                try:
                    while block := reader.read(1 << 20):
                        emit(block)
                except zstandard.ZstdError:
                    pass
    return n_lines, tail


def _is_truncation(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(s in text for s in ("gzip", "zstd", "end of", "truncat", "decompress", "unexpected end"))


# -- the entry point -------------------------------------------------------------------------------


def ingest_gateway(
    case: Case,
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    format: str = "auto",
    tz: str = "UTC",
    quiet: bool = True,
    **options: Any,
) -> IngestSummary:
    """Load gateway logs (files, directories, globs) into ``gateway_requests``.

    ``format`` is ``auto`` (detect per file), a preset name or a TOML mapping path; ``tz`` is the
    zone of zone-less timestamps. Options: see :data:`KNOWN_OPTIONS`.

    Example:
        >>> import forensics
        >>> case = forensics.open_case(":memory:")
        >>> s = case.ingest_gateway("sample_data/gateway/litellm", format="litellm")  # doctest: +SKIP
        >>> s.files[0].reconciles                                                    # doctest: +SKIP
        True
    """
    t0 = time.perf_counter()
    bad = set(options) - set(KNOWN_OPTIONS)
    if bad:
        raise ParameterError(f"unknown gateway option(s) {sorted(bad)}",
                             hint=f"known: {', '.join(KNOWN_OPTIONS)}")
    check_tz(case.con, tz)
    fixed = resolve_spec(format)
    if fixed is not None and fixed.tz:
        check_tz(case.con, fixed.tz)
    files = expand_paths(paths)
    # Detect every file first: a wrong format fails before any time is spent loading.
    plans: list[FilePlan] = []
    for p in files:
        sn = sniff(p)
        if fixed is None:
            spec, detected = detect(sn, p)
        else:
            spec, detected = fixed, None
            if spec.container == "text" and sn.container != "text" and spec.line_regex:
                sn = Sniff("text", sn.compression, [], set(), sn.text_lines)
        if spec.line_regex is not None and sn.container != "text":
            sn = Sniff("text", sn.compression, [], set(), [])
        if spec.line_regex is None and sn.container == "text":
            raise InputError(
                f"{spec.name} reads JSON, CSV or Parquet records, but this file is plain text",
                where=str(p), hint="pick the right --gateway-format, or a mapping .toml with line_regex",
            )
        plan = FilePlan(p, apply_options(spec, options), sn, detected)
        check_required(plan)
        plans.append(plan)
    _install_macros(case.con)
    summary = IngestSummary()
    undone = _undo_unfinished(case)
    if undone:
        summary.notes["gateway: undone interrupted ingests (read again)"] = ", ".join(undone)
    total_bytes = sum(p.stat().st_size for p in files)
    with progress_bar(quiet, total_bytes, "gateway") as bar:
        for batch in _batches(plans):
            if bar is not None:
                bar.update(bar.task_ids[0], file=batch[0].path.name)
            done = (_ingest_batch(case, batch, tz, options) if len(batch) > 1
                    else [_ingest_one(case, batch[0], tz, options, bar)])
            summary.files.extend(done)
            if bar is not None:
                bar.advance(bar.task_ids[0], sum(f.size for f in done))
    summary.elapsed_s = time.perf_counter() - t0
    return summary


def _batchable(plan: FilePlan) -> bool:
    return (plan.sniff.container in ("ndjson", "text") and plan.spec.container != "otlp"
            and plan.path.stat().st_size < BATCH_FILE_BYTES)


def _batches(plans: list[FilePlan]) -> Iterator[list[FilePlan]]:
    """Group consecutive small line-oriented files of one spec (loaded by one statement)."""
    batch: list[FilePlan] = []
    size = 0
    for plan in plans:
        fits = (batch and _batchable(plan) and plan.spec == batch[0].spec
                and plan.sniff.container == batch[0].sniff.container
                and len(batch) < BATCH_MAX_FILES and size + plan.path.stat().st_size <= BATCH_MAX_BYTES)
        if batch and not fits:
            yield batch
            batch, size = [], 0
        batch.append(plan)
        size += plan.path.stat().st_size
        if not _batchable(plan):
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _opts(plan: FilePlan, tz: str, options: dict[str, Any]) -> dict[str, Any]:
    spec = plan.spec
    opts = {"format": spec.name, "tz": spec.tz or tz, "container": plan.sniff.container, **options}
    if spec.source != "preset":
        opts["mapping"] = str(Path(spec.source).resolve())
    return opts


def _register(case: Case, plan: FilePlan, tz: str, options: dict[str, Any], sha: str,
              file_id: int | None = None) -> FileRecord:
    """Add the file's evidence row, marked unfinished (``complete = NULL``) until its counts land."""
    rec = register_file(case, plan.path, kind="gateway", format=plan.spec.name, layer=plan.spec.layer,
                        tz=plan.spec.tz or tz, options=_opts(plan, tz, options), sha256=sha, complete=None,
                        file_id=file_id)
    assert not isinstance(rec, int)  # the sha is new (or pending): never an existing file
    return rec


def _existing_file_id(con: duckdb.DuckDBPyConnection, sha: str) -> int | None:
    rows = con.execute(
        "SELECT file_id FROM evidence_files WHERE sha256 = $s ORDER BY file_id LIMIT 1", {"s": sha}
    ).fetchall()
    return int(rows[0][0]) if rows else None


def _known(scan: Scan) -> Callable[[], Scan]:
    return lambda: scan


def _ingest_batch(case: Case, plans: list[FilePlan], tz: str, options: dict[str, Any]) -> list[FileSummary]:
    """Load several small files in one transaction and one INSERT; fall back to one by one."""
    con = case.con
    summaries: list[FileSummary] = []
    todo: list[tuple[FilePlan, FileSummary, str]] = []
    seen: dict[str, str] = {}
    # NDJSON of one compression is read by one read_json, which needs every file's line count:
    # the pass that hashes a file counts its lines too (small files: no thread to hide it in)
    fast = all(fast_path_ok(p) for p in plans) and len({p.sniff.compression for p in plans}) == 1
    scans: dict[str, Scan] = {}
    if fast:
        from concurrent.futures import ThreadPoolExecutor

        # hashing, inflating and counting release the GIL: two files at a time (measured 0.8 -> 0.5 s
        # for 227 hourly files)
        with ThreadPoolExecutor(max_workers=2) as pool:
            scans = dict(zip((str(p.path) for p in plans), pool.map(scan_file, [p.path for p in plans]), strict=True))
    shas = [scans[str(p.path)].sha if fast else sha256_file(p.path) for p in plans]
    # one look-up for the whole batch (per-file statements cost more than reading small files)
    known = {str(s): int(f) for s, f in con.execute(
        "SELECT sha256, min(file_id) FROM evidence_files WHERE list_contains($s, sha256) GROUP BY sha256",
        {"s": shas}).fetchall()}
    for plan, sha in zip(plans, shas, strict=True):
        fs = FileSummary(path=str(plan.path), kind="gateway", format=plan.spec.name, layer=plan.spec.layer,
                         size=plan.path.stat().st_size, detected=plan.detected)
        summaries.append(fs)
        existing = known.get(sha)
        if existing is not None:
            fs.file_id = existing
            fs.skipped = f"already in case as file_id {existing} (same sha256)"
        elif sha in seen:
            fs.skipped = f"same bytes as {seen[sha]} (same sha256)"
        else:
            seen[sha] = str(plan.path)
            todo.append((plan, fs, sha))
    if not todo:
        return summaries
    con.execute("BEGIN TRANSACTION")
    try:
        items = []
        row = con.execute("SELECT coalesce(max(file_id), 0) + 1 FROM evidence_files").fetchall()[0]
        next_id = int(row[0])
        for plan, fs, sha in todo:
            rec = _register(case, plan, tz, options, sha, file_id=next_id)
            next_id += 1
            fs.file_id = rec.file_id
            sc = scans.get(str(plan.path))
            items.append(_Item(plan, rec.file_id, str(plan.path), compression_of(plan.path),
                               scan=None if sc is None else _known(sc)))
        counts = _load_files(case, items, tz)
        finished = []
        for _plan, fs, _sha in todo:
            assert fs.file_id is not None
            c = counts[fs.file_id]
            fs.lines_read, fs.rows_rejected, fs.rows_duplicate = c.lines, c.rejected, c.duplicate
            fs.rows_loaded = c.lines - c.rejected - c.duplicate
            finished.append(f"({fs.file_id}, {c.lines}, {fs.rows_loaded}, {c.rejected}, {c.duplicate})")
        # the counts of the whole batch in one statement (what finish_file writes, file by file)
        con.execute(
            f"UPDATE evidence_files e SET lines_read = v.lr, rows_loaded = v.rl, rows_rejected = v.rr, "
            f"rows_duplicate = v.rd, complete = true, warning = NULL "
            f"FROM (VALUES {', '.join(finished)}) v(fid, lr, rl, rr, rd) WHERE e.file_id = v.fid"
        )
        con.execute("COMMIT")
    except duckdb.Error:
        # e.g. a truncated .gz in the batch: redo these files one by one, where each failure is
        # handled (salvaged, reported) on its own
        con.execute("ROLLBACK")
        _undo_unfinished(case)
        redone = {str(p.path): _ingest_one(case, p, tz, options, None) for p, _, _ in todo}
        return [redone.get(fs.path, fs) for fs in summaries]
    return summaries


def _ingest_one(case: Case, plan: FilePlan, tz: str, options: dict[str, Any], bar: Any) -> FileSummary:
    path = plan.path
    spec = plan.spec
    size = path.stat().st_size
    fs = FileSummary(path=str(path), kind="gateway", format=spec.name, layer=spec.layer, size=size,
                     detected=plan.detected)
    con = case.con
    # Hashing a multi-GB file costs as much as parsing it; a file can only repeat one already in
    # the case if the sizes match, so otherwise the hash runs alongside the load.
    same_size = con.execute(
        "SELECT count(*) FROM evidence_files WHERE size = $s", {"s": size}
    ).fetchall()[0]
    fast = fast_path_ok(plan)
    # CSV: the physical line count tells whether records span lines (see _csv_physical_lines)
    count_lines = fast or plan.sniff.container == "csv"
    digest: dict[str, Any] = {}

    def run_scan() -> None:
        if count_lines:
            sc = scan_file(path)
            digest["scan"], digest["sha"] = sc, sc.sha
        else:
            digest["sha"] = sha256_file(path)

    hasher: threading.Thread | None = None
    if same_size and same_size[0]:
        run_scan()
        existing = _existing_file_id(con, digest["sha"])
        if existing is not None:
            fs.file_id = existing
            fs.skipped = f"already in case as file_id {existing} (same sha256)"
            return fs
    else:
        hasher = threading.Thread(target=run_scan, daemon=True)
        hasher.start()

    def get_scan() -> Scan:
        if hasher is not None:
            hasher.join()
        scan: Scan = digest["scan"]
        return scan

    comp = compression_of(path)
    warning: str | None = None
    complete = True
    con.execute("BEGIN TRANSACTION")
    try:
        rec = _register(case, plan, tz, options, "pending:" + str(path))
        file_id = rec.file_id
        fs.file_id = file_id
        try:
            with _progress_poller(con, bar, size):
                fast_counts: _Counts | None = None
                if fast:
                    # whatever read_json refuses (a truncated stream, a huge object) the line
                    # reader below reads or reports precisely
                    with contextlib.suppress(duckdb.Error):
                        got = _load_fast(case, [_Item(plan, file_id, str(path), comp, scan=get_scan)], tz)
                        fast_counts = None if got is None else got[file_id]
                if fast_counts is None:
                    if fast:
                        # refused, or blank lines shifted read_json's numbering: redo line by line
                        # (rows committed at the commit point go too)
                        con.execute("ROLLBACK")
                        _undo_unfinished(case)
                        con.execute("BEGIN TRANSACTION")
                        rec = _register(case, plan, tz, options, "pending:" + str(path))
                        file_id = fs.file_id = rec.file_id
                    counts = _load_file(case, plan, file_id, tz, str(path), comp,
                                        (lambda: get_scan().lines) if count_lines else None)
                else:
                    counts = fast_counts
        except duckdb.Error as exc:
            if comp == "none" or not _is_truncation(exc):
                if plan.sniff.container in ("json-array", "json-doc", "parquet"):
                    raise InputError(f"cannot read {plan.sniff.container} file: {_first_line(exc)}",
                                     where=str(path), hint="check that the file is complete and valid") from exc
                raise
            con.execute("ROLLBACK")
            con.execute("BEGIN TRANSACTION")
            rec = _register(case, plan, tz, options, "pending:" + str(path))
            file_id = rec.file_id
            fs.file_id = file_id
            counts, warning = _load_salvaged(case, plan, file_id, tz)
            complete = False
        if counts.warning:
            warning = f"{warning}; {counts.warning}" if warning else counts.warning
        if hasher is not None:
            hasher.join()
        con.execute("UPDATE evidence_files SET sha256 = $s WHERE file_id = $f",
                    {"s": digest["sha"], "f": file_id})
        loaded = counts.lines - counts.rejected - counts.duplicate
        finish_file(case, file_id, lines_read=counts.lines, rows_loaded=loaded,
                    rows_rejected=counts.rejected, rows_duplicate=counts.duplicate,
                    complete=complete, warning=warning)
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        with contextlib.suppress(duckdb.Error):
            _undo_unfinished(case)  # rows committed before the failure must not stay
        if hasher is not None:
            hasher.join()
        raise
    fs.lines_read, fs.rows_rejected, fs.rows_duplicate = counts.lines, counts.rejected, counts.duplicate
    fs.rows_loaded = loaded
    fs.complete = complete
    if warning:
        fs.warnings.append(warning)
    return fs


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _load_salvaged(case: Case, plan: FilePlan, file_id: int, tz: str) -> tuple[_Counts, str]:
    tmp_root = None if case.path == ":memory:" else Path(case.path).with_name(Path(case.path).name + ".tmp")
    if tmp_root is not None:
        tmp_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tmp_root) as d:
        dest = Path(d) / "salvaged.txt"
        n_lines, tail = salvage_to_file(plan.path, dest)
        counts = _load_file(case, plan, file_id, tz, str(dest), "none", lambda: n_lines)
    if tail:
        case.con.execute("INSERT INTO rejected_lines VALUES (?, ?, ?, ?, ?)",
                         [file_id, n_lines + 1, "line cut by the end of the truncated compressed stream",
                          tail[:RAW_CAP], len(tail)])
        counts.lines += 1
        counts.rejected += 1
    warning = (f"truncated {compression_of(plan.path)} stream: kept the {n_lines} complete lines before "
               f"the break; the rest of the file is unreadable")
    return counts, warning


@contextlib.contextmanager
def _progress_poller(con: duckdb.DuckDBPyConnection, bar: Any, size: int) -> Iterator[None]:
    """Move the progress bar inside a long file using DuckDB's own query progress."""
    if bar is None:
        yield
        return
    task = bar.task_ids[0]
    start = bar.tasks[0].completed
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(0.5):
            try:
                pct = con.query_progress()
            except Exception:  # progress is cosmetic: never let it break a load
                return
            if pct >= 0:
                bar.update(task, completed=start + size * min(pct, 100.0) / 100.0)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        bar.update(task, completed=start)


__all__ = [
    "KNOWN_OPTIONS",
    "PRESETS",
    "FilePlan",
    "Sniff",
    "apply_options",
    "build_insert_sql",
    "check_tz",
    "detect",
    "ingest_gateway",
    "resolve_spec",
    "salvage_to_file",
    "scan_file",
    "sniff",
    "ts_sql",
]
