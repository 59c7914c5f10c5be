"""Sniffing: what a gateway file looks like (container, sample records) and which preset wrote it.

Example:
    >>> Sniff("ndjson", "none", [{"RayID": "a"}], {"RayID"}, []).container
    'ndjson'
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from forensics.errors import FormatDetectionError, InputError, MissingFieldError
from forensics.sources.files import compression_of, head_bytes
from forensics.sources.gateway.presets import PRESETS
from forensics.sources.gateway.readers import csv_options, duck_compression, lit
from forensics.sources.gateway.spec import Spec

#: Rows sampled per file for detection and the required-field check.
SAMPLE_RECORDS = 200


_SAMPLE_BYTES = 256 * 1024


@dataclass
class Sniff:
    """What a file looks like: container kind, compression and a few sample records.

    Example:
        >>> Sniff("ndjson", "gzip", [{"RayID": "a"}], {"RayID"}, []).container
        'ndjson'
    """

    container: str  # ndjson | csv | json-array | json-doc | parquet | text | empty
    compression: str
    records: list[dict[str, Any]]
    keys: set[str]
    text_lines: list[str]
    delim: str = ","
    #: CSV: the header's column names as DuckDB names them (empty: let read_csv find them)
    columns: tuple[str, ...] = ()


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
                f"SELECT to_json(p) FROM read_parquet({lit(str(path))}) p LIMIT {SAMPLE_RECORDS}"
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
    if not stripped and len(head) < _SAMPLE_BYTES:
        # nothing but blank lines (or nothing at all): recorded with its lines, nothing to detect
        return Sniff("empty", comp, [], set(), [])
    if stripped.startswith("["):
        recs = _sample_json_array(path, comp)
        return Sniff("json-array", comp, recs, _keys(recs), [])
    if stripped.startswith("{"):
        first = next((ln for ln in lines if ln.strip()), "")
        try:
            obj = json.loads(first)
            ndjson = isinstance(obj, dict)
        except (ValueError, RecursionError):  # RecursionError: JSON nested beyond Python's limit
            ndjson = False
        if ndjson:
            recs = []
            for ln in lines:
                if len(recs) >= SAMPLE_RECORDS:
                    break
                with contextlib.suppress(ValueError, RecursionError):
                    o = json.loads(ln)
                    if isinstance(o, dict):
                        recs.append(o)
            return Sniff("ndjson", comp, recs, _keys(recs), [])
        recs = _sample_json_doc(path, comp)
        return Sniff("json-doc", comp, recs, _keys(recs), [])
    first_line = next((ln for ln in lines if ln.strip()), "")
    delim = _csv_delimiter(first_line)
    if delim is not None:
        columns = _csv_columns(lines[0], delim) if lines and lines[0] == first_line else ()
        recs = _sample_csv(path, comp, delim, columns)
        return Sniff("csv", comp, recs, _keys(recs), [], delim, columns)
    return Sniff("text", comp, [], set(), lines[:SAMPLE_RECORDS])


def shape_key(path: Path, compression: str) -> tuple[Any, ...] | None:
    """What makes two files read alike: compression, container and the first record's keys.

    Files of one format (the hourly files of a Logpush bucket) share it, so one full sniff (200
    sample records, detection, the required-field check) serves them all. None when the first
    line is not an NDJSON object or a CSV header (then every file is sniffed).

    Example:
        >>> import tempfile; d = Path(tempfile.mkdtemp()); p = d / "a.ndjson"
        >>> _ = p.write_text('{"RayID": "x", "b": 1}\\n')
        >>> shape_key(p, "none")
        ('none', 'ndjson', ('RayID', 'b'))
    """
    head = head_bytes(path, 16384)
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    nl = head.find(b"\n")
    if nl < 0:
        return None
    first = head[:nl].strip()
    if first.startswith(b"{"):
        obj = _loads(first.decode("utf-8", errors="replace"))
        return (compression, "ndjson", tuple(obj)) if isinstance(obj, dict) else None
    text = first.decode("utf-8", errors="replace")
    delim = _csv_delimiter(text)
    return (compression, "csv", text) if delim is not None else None


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


def _sample_json_array(path: Path, comp: str) -> list[dict[str, Any]]:
    con = duckdb.connect()
    try:
        rows = con.execute(
            f"SELECT json FROM read_json_objects({lit(str(path))}, format='array', "
            f"compression={lit(duck_compression(comp))}) LIMIT {SAMPLE_RECORDS}"
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
            f"SELECT json FROM read_json_objects({lit(str(path))}, format='unstructured', "
            f"compression={lit(duck_compression(comp))}) LIMIT 3"
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


def _csv_columns(header: str, delim: str) -> tuple[str, ...]:
    """The column names read_csv gives a CSV header line (duplicates ``a_1``, blanks ``column2``).

    Read from the header alone, so that no later row (a record cut by a live export, odd
    quoting) can make DuckDB's sniffer refuse the file; empty when the header cannot be read.

    Example:
        >>> _csv_columns('a,a,,"x,y"', ",")
        ('a', 'a_1', 'column2', 'x,y')
    """
    import tempfile

    con = duckdb.connect()
    try:
        with tempfile.TemporaryDirectory(prefix="forensics-csv-") as d:
            p = Path(d) / "header.csv"
            p.write_text(header + "\n", encoding="utf-8")
            rows = con.execute(f"DESCRIBE SELECT * FROM read_csv({lit(str(p))}, {csv_options(delim)})").fetchall()
    except duckdb.Error:
        return ()
    finally:
        con.close()
    return tuple(str(r[0]) for r in rows)


def _sample_csv(path: Path, comp: str, delim: str, columns: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    con = duckdb.connect()
    try:
        rows = con.execute(
            f"SELECT to_json(c) FROM read_csv({lit(str(path))}, {csv_options(delim, columns)}, "
            f"ignore_errors=true, compression={lit(duck_compression(comp))}) c LIMIT {SAMPLE_RECORDS}"
        ).fetchall()
    except duckdb.Error:
        return []
    finally:
        con.close()
    return [o for o in (_loads(r[0]) for r in rows) if isinstance(o, dict)]


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: a record nested beyond Python's limit
        return None


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
    #: bytes on disk when planned
    size: int = 0


def is_otlp(plan: FilePlan) -> bool:
    return plan.spec.container == "otlp" or (
        plan.sniff.container in ("ndjson", "json-doc") and "resourceSpans" in plan.sniff.keys)


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
            where_key = (f"{Path(plan.spec.source).name} [columns].{col}" if plan.spec.source != "preset"
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
