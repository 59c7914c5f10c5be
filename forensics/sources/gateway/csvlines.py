"""CSV physical lines: a record's ``line_no`` is the line it starts on (the header is line 1)."""

from __future__ import annotations

import csv
import io
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from forensics.sources.files import open_decompressed
from forensics.sources.gateway.numbering import count_lines

if TYPE_CHECKING:
    from forensics.sources.gateway.load import Item


def csv_physical_lines(con: duckdb.DuckDBPyConnection, it: Item, reader_rejects: list[int]) -> str | None:
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
    physical = it.lines() if it.lines is not None else count_lines(Path(it.read_path))
    if physical == 1 + good + len(reader_rejects):
        return None
    approximate = ("line numbers are approximate: records span several lines or blank lines were "
                   "skipped, and the file could not be split into records to place them")
    try:
        starts, records = csv_units(Path(it.read_path), it.plan.sniff.delim)
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
    con.register("gateway_csv_line_map_source", pa.table({"kind": kinds, "k": keys, "phys": where}))
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE gateway_csv_line_map AS SELECT * FROM gateway_csv_line_map_source")
    finally:
        con.unregister("gateway_csv_line_map_source")
    con.execute(
        """
        UPDATE gateway_requests g SET line_no = m.phys
        FROM (SELECT rowid AS rid, row_number() OVER (ORDER BY line_no, rowid) AS k
              FROM gateway_requests WHERE file_id = $f) o
        JOIN gateway_csv_line_map m ON m.kind = 'g' AND m.k = o.k
        WHERE g.rowid = o.rid
        """,
        {"f": it.file_id},
    )
    if rejected:
        con.execute("UPDATE rejected_lines r SET line_no = m.phys FROM gateway_csv_line_map m "
                    "WHERE r.file_id = $f AND m.kind = 'r' AND r.line_no = m.k", {"f": it.file_id})
    con.execute("DROP TABLE gateway_csv_line_map")
    return None


def csv_units(path: Path, delim: str) -> tuple[list[int], list[int]]:
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
