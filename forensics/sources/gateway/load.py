"""Loading files through the line or record readers, and finishing a load: counts, rejects, duplicates.

Each file of a batch keeps its own ``file_id`` and numbering; the lines the readers themselves
refused (invalid UTF-8, over-long lines, CSV rows of the wrong width) are handled here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from forensics.sources.files import store_rejected
from forensics.sources.gateway.csvlines import csv_physical_lines
from forensics.sources.gateway.duplicates import flag_duplicates
from forensics.sources.gateway.numbering import (
    fix_line_numbers,
    number_by_position,
    positional_ok,
    raw_lines,
)
from forensics.sources.gateway.readers import CSV_TOO_FEW, CSV_TOO_MANY, lit
from forensics.sources.gateway.sniffing import FilePlan, is_otlp
from forensics.sources.gateway.sql import build_insert_sql, source_sql, unstash_sql
from forensics.sources.redact import redact_csv_row

if TYPE_CHECKING:
    from forensics.sources.gateway.scan import Scan


@dataclass
class Counts:
    lines: int = 0
    rejected: int = 0
    duplicate: int = 0
    warning: str | None = None


@dataclass
class Item:
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
    #: read a CSV file's records on one thread: the parallel reader refused it for a quoted
    #: newline (:func:`forensics.sources.gateway.readers.csv_records`)
    one_thread: bool = False

    @property
    def rejects(self) -> str:
        return f"gw_rejects_{self.file_id}"

    def get_scan(self) -> Scan:
        assert self.scan is not None, "the read_json path needs the file's scan"
        return self.scan()


def commit_point(con: duckdb.DuckDBPyConnection) -> None:
    """Commit the bulk INSERT before the few UPDATE/DELETEs that finish a file.

    Deleting or updating rows of a large insert inside its own transaction makes DuckDB rewrite
    the freshly written row groups at commit (seconds per million rows); once committed they take
    cheap delete/update markers. The file's evidence row stays ``status = 'loading'`` until it is
    finished, so an interrupted ingest is recognised and rolled back (``Ledger.recover``).
    """
    con.execute("COMMIT")
    con.execute("BEGIN TRANSACTION")


def load_files(con: duckdb.DuckDBPyConnection, items: list[Item], tz: str) -> dict[int, Counts]:
    """Load files that share one spec with a single INSERT; return the counts per file_id.

    Planning the statement costs tens of milliseconds, which dominates for the many small hourly
    files of a Logpush bucket: they are loaded together, each with its own file_id and numbering.
    """
    plan = items[0].plan
    ids = [it.file_id for it in items]
    drop_rejects(con, items)
    # rows numbered by their position once inserted: row_number() would run the INSERT on one thread
    positional = not is_otlp(plan) and positional_ok(con)

    def insert(positional: bool) -> None:
        source = " UNION ALL ".join(
            f"SELECT {it.file_id} AS fid, rn, line FROM "
            f"({source_sql(it.plan, it.read_path, it.comp, it.rejects, positional, parallel=not it.one_thread)})"
            for it in items
        )
        con.execute(build_insert_sql(plan, read_path=items[0].read_path, comp=items[0].comp,
                                     rejects=items[0].rejects, file_id=items[0].file_id, tz=tz, source=source))

    insert(positional)
    commit_point(con)
    is_csv = plan.sniff.container == "csv"
    if positional and not number_by_position(con, ids, first=2 if is_csv else 1):
        con.execute(f"DELETE FROM gateway_requests WHERE file_id IN ({', '.join(str(i) for i in ids)})")
        drop_rejects(con, items)
        insert(False)
        commit_point(con)
    direct_n: dict[int, int] = {}
    found = _reader_rejects_many(con, items)
    for it in items:
        if found.get(it.file_id):
            direct_n[it.file_id] = _reader_level_rejects(con, it, tz, found[it.file_id])
    warnings = {it.file_id: csv_physical_lines(con, it, [ln for ln, _, _, _ in found.get(it.file_id, [])])
                for it in items if is_csv}
    counts = finish_load(con, items, direct_n, tz)
    for fid, warning in warnings.items():
        counts[fid].warning = warning
    for it in items:
        if is_csv and plan.sniff.columns:
            _csv_width_raws(con, it, exact=warnings.get(it.file_id) is None)
    return counts


def _csv_width_raws(con: duckdb.DuckDBPyConnection, it: Item, exact: bool) -> None:
    """Give the CSV records rejected for their width (:func:`csv_records`) their raw bytes.

    Read from the file at the record's line once the lines are numbered (the first physical line
    of a record that spans several), redacted like every rejected CSV row. When the numbers are
    only approximate the raw bytes are left out (NULL) rather than taken from the wrong line.
    """
    markers = [CSV_TOO_MANY.encode(), CSV_TOO_FEW.encode()]
    rows = con.execute("SELECT line_no, reason FROM rejected_lines WHERE file_id = $f AND list_contains($m, raw) "
                       "ORDER BY line_no", {"f": it.file_id, "m": markers}).fetchall()
    if not rows:
        return
    con.execute("DELETE FROM rejected_lines WHERE file_id = $f AND list_contains($m, raw)",
                {"f": it.file_id, "m": markers})
    if not exact:
        con.executemany("INSERT INTO rejected_lines VALUES (?, ?, NULL, NULL, NULL)",
                        [(it.file_id, int(ln), f"{reason} (its raw bytes not kept: line numbers approximate)")
                         for ln, reason in rows])
        return
    raws = raw_lines(Path(it.read_path), it.comp, {int(ln) for ln, _ in rows})
    header, delim = list(it.plan.sniff.columns), it.plan.sniff.delim
    store_rejected(con, it.file_id, [(int(ln), str(reason), redact_csv_row(raws.get(int(ln), b""), header, delim))
                                     for ln, reason in rows])


def finish_load(con: duckdb.DuckDBPyConnection, items: list[Item], direct_n: dict[int, int], tz: str) -> dict[int, Counts]:
    """Count, move rejected lines out with their reasons, flag duplicates; counts per file_id."""
    ids = [it.file_id for it in items]
    id_list = ", ".join(str(i) for i in ids)
    got = con.execute(
        f"SELECT file_id, count(*), count(*) FILTER (WHERE ts_start IS NULL) FROM gateway_requests "
        f"WHERE file_id IN ({id_list}) GROUP BY file_id"
    ).fetchall()
    counts = {i: Counts(lines=direct_n.get(i, 0), rejected=direct_n.get(i, 0)) for i in ids}
    for fid, n, rej in got:
        counts[int(fid)].lines += int(n)
        counts[int(fid)].rejected += int(rej)
    if any(int(rej) for _, _, rej in got):
        con.execute(f"INSERT INTO rejected_lines {unstash_sql(ids)}")
        con.execute(f"DELETE FROM gateway_requests WHERE file_id IN ({id_list}) AND ts_start IS NULL")
    for fid, n in flag_duplicates(con, ids).items():
        counts[fid].duplicate = n
    drop_rejects(con, items)
    return counts


def drop_rejects(con: duckdb.DuckDBPyConnection, items: list[Item]) -> None:
    """Drop the reader-rejects tables of these files that exist (one lookup for a whole batch).

    Only the line and CSV readers make them; two ``DROP TABLE IF EXISTS`` per file of a batch of
    644 hourly files read by ``read_json`` cost 0.22 s of statements that found nothing.
    """
    names = {n for it in items for n in (it.rejects, it.rejects + "_scan")}
    found = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE starts_with(table_name, 'gw_rejects_')").fetchall()
             if r[0] in names]
    if found:
        con.execute(";".join(f"DROP TABLE IF EXISTS {n}" for n in found))


def _reader_rejects_many(con: duckdb.DuckDBPyConnection,
                         items: list[Item]) -> dict[int, list[tuple[int, str, str, str]]]:
    """:func:`_reader_rejects` of every file of a batch, in two statements (not two per file)."""
    names = ", ".join(lit(it.rejects) for it in items)
    present = {r[0] for r in con.execute(
        f"SELECT table_name FROM duckdb_tables() WHERE table_name IN ({names})").fetchall()}
    mine = [it for it in items if it.rejects in present]
    if not mine:
        return {}
    counts = con.execute(" UNION ALL ".join(
        f"SELECT {it.file_id}, count(*) FROM {it.rejects}" for it in mine)).fetchall()
    have = {int(f) for f, n in counts if n}
    return {it.file_id: _reader_rejects(con, it.rejects) for it in mine if it.file_id in have}


def _reader_level_rejects(con: duckdb.DuckDBPyConnection, it: Item, tz: str,
                          reader_rejects: list[tuple[int, str, str, str]] | None = None) -> int:
    """Handle the lines DuckDB's reader itself refused; return how many were rejected outright.

    Invalid UTF-8 lines are re-read from the source and parsed with U+FFFD in place of the bad
    bytes (a stray byte in a user-agent does not make a record unreadable); over-long lines and
    CSV rows with the wrong field count are rejected with their raw bytes.
    """
    plan = it.plan
    if reader_rejects is None:
        reader_rejects = _reader_rejects(con, it.rejects)
    if not reader_rejects:
        return 0
    fix_line_numbers(con, it.file_id, [ln for ln, _, _, _ in reader_rejects])
    lines_kind = plan.sniff.container in ("ndjson", "text") and plan.spec.container != "otlp"
    raws = raw_lines(Path(it.read_path), it.comp, {ln for ln, _, _, _ in reader_rejects}) if lines_kind else {}
    repair: list[tuple[int, str]] = []
    direct: list[tuple[int, str, bytes]] = []
    for ln, etype, reason, fallback in reader_rejects:
        if etype == "INVALID ENCODING" and ln in raws:
            repair.append((ln, raws[ln].decode("utf-8", errors="replace")))
        else:
            direct.append((ln, reason, raws.get(ln) or fallback.encode()))
    if repair:
        con.execute("CREATE OR REPLACE TEMP TABLE gateway_repaired_lines (rn BIGINT, line VARCHAR)")
        con.executemany("INSERT INTO gateway_repaired_lines VALUES (?, ?)", repair)
        con.execute(build_insert_sql(plan, read_path=it.read_path, comp=it.comp, rejects=it.rejects,
                                     file_id=it.file_id, tz=tz,
                                     source=f"SELECT {it.file_id} AS fid, rn, line FROM gateway_repaired_lines"))
        con.execute("DROP TABLE gateway_repaired_lines")
    if direct:
        if plan.sniff.container == "csv" and plan.sniff.records:
            # a malformed CSV row: cut at its first text column (the header names it; the row has no keys)
            header = list(plan.sniff.records[0])
            direct = [(ln, reason, redact_csv_row(raw, header, plan.sniff.delim)) for ln, reason, raw in direct]
        store_rejected(con, it.file_id, direct)
    return len(direct)


def load_file(con: duckdb.DuckDBPyConnection, plan: FilePlan, file_id: int, tz: str, read_path: str, comp: str,
               lines: Callable[[], int] | None = None) -> Counts:
    return load_files(con, [Item(plan, file_id, read_path, comp, lines)], tz)[file_id]


def _reader_rejects(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[int, str, str, str]]:
    # Inside a transaction any failed statement aborts it: look the table up, never try-and-catch.
    # ``line`` counts what the reader split the file into: physical lines for the line reader; for
    # read_csv the header, each record and each blank line (a record with a quoted newline is one),
    # the physical line unless an earlier record spans lines (see csv_physical_lines).
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
