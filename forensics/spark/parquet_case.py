"""The Parquet case: the case database's tables as Parquet directories, for Spark (and any engine).

Layout of a case directory (local, or in object storage when written by the Spark ingest)::

    CASE_DIR/case.json                    the manifest: schema version, tables, their parts, row counts
    CASE_DIR/<table>/<part>/*.parquet     one directory per table, one sub-directory per write

The manifest is written last: a table part that it does not list (an interrupted write) is never
read, so an interrupted ingest leaves the case as it was. Every table of the DuckDB case is there
with the same columns and types (``evidence_files`` included); views are not stored, the reader
creates them from the toolkit's own definitions.

This module needs only DuckDB and the standard library: ``forensics export parquet`` works without
Spark installed.

Example:
    >>> from forensics.case import open_case
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "case"
    >>> manifest = export_parquet(open_case(":memory:"), out)
    >>> manifest.tables["gateway_requests"].rows, (out / "case.json").is_file()
    (0, True)
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from forensics import __version__
from forensics.case import SCHEMA_VERSION, Case, as_case
from forensics.errors import CaseError, ParameterError
from forensics.schema import schema_sql

MANIFEST = "case.json"
FORMAT = "forensics-parquet-case"
FORMAT_VERSION = 1

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class TablePart:
    """One table of a Parquet case: its part directories (relative to the table's) and rows."""

    parts: list[str] = field(default_factory=list)
    rows: int = 0


@dataclass
class Manifest:
    """``case.json``: what a Parquet case holds.

    Example:
        >>> m = Manifest(tables={"t": TablePart(["p1"], 3)})
        >>> Manifest.from_json(m.to_json()).tables["t"].rows
        3
    """

    tables: dict[str, TablePart] = field(default_factory=dict)
    schema_version: str = SCHEMA_VERSION
    created_by: str = f"forensics {__version__}"
    #: free-form provenance of each write (command, inputs, options), appended per write
    history: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> str:
        body = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "schema_version": self.schema_version,
            "created_by": self.created_by,
            "tables": {k: {"parts": v.parts, "rows": v.rows} for k, v in sorted(self.tables.items())},
            "history": self.history,
        }
        return json.dumps(body, indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = MANIFEST) -> Manifest:
        try:
            body = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CaseError(f"the case manifest is not JSON: {exc}", where=where) from exc
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise CaseError("not a forensics Parquet case manifest", where=where,
                            hint="a Parquet case is written by 'forensics export parquet' or "
                                 "'forensics ingest CASE_DIR --backend spark'")
        if int(body.get("format_version", 0)) > FORMAT_VERSION:
            raise CaseError(f"Parquet case format {body.get('format_version')} is newer than this toolkit "
                            f"reads ({FORMAT_VERSION})", where=where, hint="upgrade forensics")
        if str(body.get("schema_version")) != SCHEMA_VERSION:
            raise CaseError(f"case schema version {body.get('schema_version')}; this toolkit reads "
                            f"{SCHEMA_VERSION}", where=where, hint="re-ingest the evidence into a new case")
        tables = {}
        for name, t in dict(body.get("tables", {})).items():
            if not _NAME.match(name):
                raise CaseError(f"invalid table name {name!r} in the manifest", where=where)
            tables[name] = TablePart([str(p) for p in t.get("parts", [])], int(t.get("rows", 0)))
        return cls(tables=tables, schema_version=str(body["schema_version"]),
                   created_by=str(body.get("created_by", "")), history=list(body.get("history", [])))


def case_tables(case: Case) -> list[str]:
    """The base tables of a DuckDB case, sorted: views and derived tables (``forensics.facts``) excluded.

    The derived tables are not evidence: every engine builds its own from these (``SparkCase``).
    """
    from forensics.facts import FACTS

    rows = case.con.execute(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'main' AND table_type = 'BASE TABLE' ORDER BY 1"
    ).fetchall()
    return [str(r[0]) for r in rows if str(r[0]) not in FACTS]


def case_views(case: Case) -> list[tuple[str, str]]:
    """The views a DuckDB case defines, ``(name, CREATE VIEW statement)``, in creation order.

    The statement is the source text (``schema.sql``) where the view is defined there: DuckDB's
    own rendering (``duckdb_views().sql``) rewrites lambdas and quoting into forms no other parser
    reads; it is the fallback for a view defined elsewhere.

    Example:
        >>> from forensics.case import open_case
        >>> "start_periods" in [name for name, _ in case_views(open_case(":memory:"))]
        True
    """
    rows = case.con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' "
        "ORDER BY view_oid"
    ).fetchall()
    source: dict[str, str] = {}
    for st in duckdb.extract_statements(schema_sql()):
        m = _CREATE_VIEW.match(_strip_leading_comments(st.query))
        if m:
            source[m.group(1)] = _strip_leading_comments(st.query)
    return [(str(n), source.get(str(n), str(s))) for n, s in rows]


_CREATE_VIEW = re.compile(r"(?is)^CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\w*\s+)?VIEW\s+(\w+)\s+AS\b")


def _strip_leading_comments(sql: str) -> str:
    return re.sub(r"^(?:\s*--[^\n]*\n|\s+)*", "", sql)


def write_manifest_local(case_dir: Path, manifest: Manifest) -> None:
    """Write ``case.json`` atomically (a reader sees the old or the new manifest, never half)."""
    tmp = case_dir / f".{MANIFEST}.tmp"
    tmp.write_text(manifest.to_json(), encoding="utf-8")
    os.replace(tmp, case_dir / MANIFEST)


def read_manifest(case_dir: str | os.PathLike[str], read_text: Callable[[str], str] | None = None) -> Manifest:
    """Read the manifest of a Parquet case (``read_text`` reads a remote path; local by default).

    Example:
        >>> read_manifest("/no/such/case")
        Traceback (most recent call last):
        ...
        forensics.errors.CaseError: /no/such/case: not a Parquet case: case.json not found (write one with 'forensics export parquet CASE.duckdb CASE_DIR' or 'forensics ingest CASE_DIR --backend spark ...')
    """
    where = os.fspath(case_dir)
    path = where.rstrip("/") + "/" + MANIFEST
    try:
        text = read_text(path) if read_text is not None else Path(path).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise CaseError(
            "not a Parquet case: case.json not found", where=where,
            hint="write one with 'forensics export parquet CASE.duckdb CASE_DIR' or "
                 "'forensics ingest CASE_DIR --backend spark ...'",
        ) from exc
    return Manifest.from_json(text, where=path)


def export_parquet(
    case: Case | str | os.PathLike[str], case_dir: str | os.PathLike[str], *, replace: bool = False
) -> Manifest:
    """Write every table of a DuckDB case as a Parquet case (``forensics export parquet``).

    Refuses a non-empty ``case_dir`` unless ``replace`` (which deletes only what a previous export
    wrote there: the manifest and the table directories it lists).

    Example:
        >>> from forensics.case import open_case
        >>> export_parquet(open_case(":memory:"), "/tmp")                    # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        forensics.errors.CaseError: /tmp: ... is not empty (... --replace ...)
    """
    out = Path(case_dir)
    c = as_case(case)
    if out.exists() and not out.is_dir():
        raise ParameterError(f"{out} is a file; a Parquet case is a directory", hint="pick a new directory")
    if out.is_dir() and any(out.iterdir()):
        if not replace or not (out / MANIFEST).is_file():
            raise CaseError(
                "the target directory is not empty" if not replace else
                "the target directory is not empty and holds no Parquet case to replace",
                where=str(out), hint="pick a new directory, or pass --replace to overwrite a Parquet case",
            )
        old = read_manifest(out)
        import shutil

        for name in old.tables:
            shutil.rmtree(out / name, ignore_errors=True)
        (out / MANIFEST).unlink()
    out.mkdir(parents=True, exist_ok=True)
    manifest = Manifest()
    part = "export-0001"
    for table in case_tables(c):
        target = out / table / part
        target.mkdir(parents=True, exist_ok=True)
        file = str(target / "data.parquet").replace("'", "''")
        # the table's own column order and types; row order as stored (file_id, line_no for loaders)
        c.con.execute(f"COPY \"{table}\" TO '{file}' (FORMAT parquet, COMPRESSION zstd)")
        rows = int(c.con.execute(f'SELECT count(*) FROM "{table}"').fetchall()[0][0])
        manifest.tables[table] = TablePart([part], rows)
    manifest.history.append({"write": "export", "from": c.path, "part": part})
    write_manifest_local(out, manifest)
    return manifest

