"""Write a query result as a terminal table, CSV, JSON, JSON Lines or Parquet, with its parameters.

One rendering of values for every text format: timestamps in UTC ISO 8601 with ``Z`` (fractional
seconds in a column only where one of its values has them), integers as integers, NULL as an empty
CSV cell, ``null`` in JSON and ``NULL`` in a terminal table. CSV keeps its column contract (no
comment lines): the parameters go to a ``<file>.params.json`` sidecar when writing to a file
(also for JSON Lines); JSON embeds them; Parquet keeps the column types and stores them as file
metadata. Every CSV cell is neutralised against formula injection and every CR/LF is quoted
(:mod:`forensics.outputs.escape`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, TypeAlias, TypeVar

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from forensics.errors import ParameterError
from forensics.kinds import TABLE_FORMATS, TableFormat
from forensics.outputs.escape import csv_cell, csv_field
from forensics.relation import AnyRelation, Relation

FORMATS = TABLE_FORMATS

_T = TypeVar("_T")

#: what the writers accept: a relation (an analysis result or DuckDB's own), a DataFrame or an Arrow table
Tabular: TypeAlias = Relation | duckdb.DuckDBPyRelation | pd.DataFrame | pa.Table


def _jsonable(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def to_arrow(rel: Tabular) -> pa.Table:
    """Materialise a relation, DataFrame or Arrow table as an Arrow table (types kept).

    Example:
        >>> to_arrow(duckdb.sql("SELECT 1 AS x")).column_names
        ['x']
    """
    if isinstance(rel, pa.Table):
        return rel
    if isinstance(rel, pd.DataFrame):
        return pa.Table.from_pandas(rel, preserve_index=False)
    return rel.to_arrow_table()


def for_output(query: str, rel: AnyRelation, fmt: str) -> AnyRelation:
    """A query's result as every face writes it: the columns its file declares, rows in its order.

    ``--format csv`` (and ``forensics investigate``'s ``<query>.csv``) gets the ``-- columns:``
    contract, in order; the other formats get the ``-- more columns:`` after it. A query whose file
    declares an ``-- order:`` (a full export that leaves its rows unordered) is sorted by it.

    Example:
        >>> from forensics.sample import sample_case
        >>> import forensics
        >>> rel = forensics.affected_tenants(sample_case())
        >>> for_output("affected_tenants", rel, "csv").columns[-2:], for_output("affected_tenants", rel, "json").columns[-1]
        (['first_ts', 'last_ts'], 'request_ids')
    """
    from forensics.sqlfiles import load_query

    q = load_query(query)
    if q.order:
        rel = rel.order(q.order)
    names = q.columns if fmt == "csv" else q.result_columns
    if names:  # every query file declares them (a test checks it against the result)
        rel = rel.select(*(f'"{name}"' for name in names))
    return rel


def iso_utc(value: dt.datetime, *, fraction: bool) -> str:
    """A timestamp as UTC ISO 8601 with ``Z`` (naive timestamps are UTC: the case stores UTC).

    Example:
        >>> iso_utc(dt.datetime(2026, 9, 2, 4, 51, 17, 250000), fraction=True)
        '2026-09-02T04:51:17.250000Z'
        >>> iso_utc(dt.datetime(2026, 9, 2, 4, 51, 17), fraction=False)
        '2026-09-02T04:51:17Z'
    """
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if fraction else "%Y-%m-%dT%H:%M:%SZ")


def column_choice(col: pa.Array | pa.ChunkedArray) -> bool | None:
    """The column-wide part of a column's text form, from its values (``None``: the column has none).

    A timestamp column gets fractional seconds on every value where one of its values has them
    (True); a float column whose values are all whole numbers (a count through pandas) prints them
    as integers (True). The choice is the column's, not a value's, so a streamed export combines
    its batches' choices with :func:`combine_choices` and renders every batch the same way.

    Example:
        >>> column_choice(pa.array([1.0, None, 3.0])), column_choice(pa.array([1.5]))
        (True, False)
    """
    if pa.types.is_timestamp(col.type):
        # the microseconds a datetime keeps (a nanosecond part alone prints no fraction)
        micros = pc.add(pc.multiply(pc.millisecond(col), 1000), pc.microsecond(col))
        return bool(pc.any(pc.not_equal(micros, 0)).as_py())  # all NULL: no fraction
    if pa.types.is_floating(col.type):
        whole = pc.and_(pc.is_finite(col), pc.equal(pc.floor(col), col))
        return pc.all(whole).as_py() is not False  # all NULL (or no rows): whole, as all([]) is
    return None


def combine_choices(a: bool | None, b: bool | None, col_type: pa.DataType) -> bool | None:
    """The choice of two batches of one column: a fraction anywhere, whole numbers everywhere.

    Example:
        >>> combine_choices(True, False, pa.float64()), combine_choices(True, False, pa.timestamp("us"))
        (False, True)
    """
    if a is None or b is None:
        return a if b is None else b
    return (a or b) if pa.types.is_timestamp(col_type) else (a and b)


def _python_column(col: pa.Array | pa.ChunkedArray, choice: bool | None = None) -> list[Any]:
    """A column's values as Python values: datetimes as ISO strings, exact numbers as int/float.

    ``choice`` is :func:`column_choice` of the whole column (computed here when not given).
    """
    if choice is None:
        choice = column_choice(col)
    values = col.to_pylist()
    if pa.types.is_date(col.type):
        return [None if v is None else v.isoformat() for v in values]
    if pa.types.is_timestamp(col.type):
        return [None if v is None else iso_utc(v, fraction=bool(choice)) for v in values]
    if pa.types.is_floating(col.type):
        if choice:
            return [None if v is None else int(v) for v in values]
        return [None if v is None or v != v else v for v in values]
    return [
        int(v) if isinstance(v, decimal.Decimal) and v == v.to_integral_value()
        else float(v) if isinstance(v, decimal.Decimal) else v
        for v in values
    ]


def rows_for_output(rel: Tabular) -> tuple[list[str], list[list[Any]]]:
    """Column names and rows of plain Python values (what every text format renders).

    Example:
        >>> rows_for_output(duckdb.sql("SELECT TIMESTAMP '2026-09-02 04:51:17' AS ts, 2 AS n"))
        (['ts', 'n'], [['2026-09-02T04:51:17Z', 2]])
    """
    table = to_arrow(rel)
    columns = [_python_column(table.column(i)) for i in range(table.num_columns)]
    return list(table.column_names), [list(r) for r in zip(*columns, strict=True)] if columns else []


def frame_for_output(rel: Tabular) -> pd.DataFrame:
    """A result as a DataFrame of output values (UTC ISO 8601 timestamps, integers kept, None).

    Example:
        >>> frame_for_output(duckdb.sql("SELECT TIMESTAMP '2026-09-02 04:51:17' AS ts")).ts[0]
        '2026-09-02T04:51:17Z'
    """
    names, rows = rows_for_output(rel)
    return pd.DataFrame(rows, columns=names, dtype=object)


def text_value(value: Any) -> str:
    """One cell as text: NULL empty, booleans ``true``/``false``, lists space-separated.

    Example:
        >>> [text_value(v) for v in (None, True, 3, 2.5, ["a", "b"])]
        ['', 'true', '3', '2.5', 'a b']
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return " ".join(text_value(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, default=_jsonable, sort_keys=True)
    return str(value)


def csv_text(names: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """RFC 4180 CSV (LF line ends) with every text cell neutralised against formula injection.

    Numbers are written as numbers (a negative count stays ``-3``); text cells that begin with
    ``=``, ``+``, ``-``, ``@``, tab or CR get a leading ``'``; any CR or LF is inside quotes.

    Example:
        >>> csv_text(["tenant_id", "n"], [["=HYPERLINK(1)", -3], ["a\\rb", 1]])
        'tenant_id,n\\n\\'=HYPERLINK(1),-3\\n"a\\rb",1\\n'
    """
    lines = [",".join(csv_field(csv_cell(str(n))) for n in names)]
    lines.extend(",".join(_cell(v) for v in row) for row in rows)
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    """One output value (of :func:`_python_column`) as its CSV cell: numbers as numbers, the rest as
    neutralised, quoted-when-needed text."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return csv_field(csv_cell(text_value(value)))
    return str(value)


#: What can make :func:`csv_cell` change a text cell: its first character (FORMULA_START, or a
#: ``'`` that may be doubled).
_CELL_START_RE = r"^[=+@\t\r'-]"
#: What makes :func:`csv_field` quote a cell.
_QUOTED_RE = r'[,"\r\n]'


def csv_column(col: pa.Array, choice: bool | None = None) -> pa.Array:
    """A column's CSV cells (a string array without NULLs), cell for cell what :func:`csv_text` writes.

    Computed by Arrow a column at a time: a Python value per cell cost ~30 CPU-s for a million-row
    chain export. Text is checked column-wide and only the cells :func:`csv_cell` may change (a
    first character of ``FORMULA_START`` or ``'``) go through it; columns of few distinct values
    that Python formats its own way (floats, dates, decimals) render each distinct value once,
    and any other type every value, with the same code as :func:`csv_text`. ``choice`` is the
    whole column's :func:`column_choice`.

    Example:
        >>> csv_column(pa.array(["=1+1", "a,b", None, "ok"])).to_pylist()
        ["'=1+1", '"a,b"', '', 'ok']
    """
    return _column_text(col, choice, text=_text_cells, null="", value=_cell, stamps=lambda _col, cells: cells)


def _column_text(col: pa.Array, choice: bool | None, *, text: Callable[[pa.Array], pa.Array], null: str,
                 value: Callable[[Any], str], stamps: Callable[[pa.Array, pa.Array], pa.Array]) -> pa.Array:
    """A column as one format's text (:func:`csv_column`, :func:`json_column`): ``text`` renders a
    string column, ``value`` one output value (:func:`_python_column`), ``stamps`` a timestamp
    column from its ISO cells; NULL is ``null``."""
    if choice is None:
        choice = column_choice(col)
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        # (a batch's text fits 32-bit offsets: the cells of a line are joined as one type)
        return text(col.cast(pa.string()))
    if pa.types.is_integer(t):
        return pc.fill_null(pc.cast(col, pa.string()), null)
    if pa.types.is_boolean(t):
        return pc.fill_null(pc.if_else(col, "true", "false"), null)
    if pa.types.is_timestamp(t) and t.unit != "ns":
        cells = _timestamp_cells(col, bool(choice))
        if cells is not None:
            return stamps(col, cells)
    if pa.types.is_floating(t) or pa.types.is_date(t) or pa.types.is_decimal(t):
        enc = pc.dictionary_encode(col)
        values = pa.array([value(v) for v in _python_column(enc.dictionary, choice)], type=pa.string())
        return pc.fill_null(values.take(enc.indices), null)
    return pa.array([value(v) for v in _python_column(col, choice)], type=pa.string())


def _any(mask: pa.Array) -> bool:
    return bool(pc.any(mask).as_py())


def _text_cells(col: pa.Array) -> pa.Array:
    # one regular expression a check: each character tested on its own took ~6x longer
    starts = pc.fill_null(pc.match_substring_regex(col, _CELL_START_RE), False)
    if _any(starts):  # rare: a formula-like cell, a leading quote (csv_cell decides, as in csv_text)
        fixed = [csv_cell(v) for v in col.filter(starts).to_pylist()]
        col = pc.replace_with_mask(col, starts, pa.array(fixed, type=col.type))
    quoted = pc.fill_null(pc.match_substring_regex(col, _QUOTED_RE), False)
    if _any(quoted):
        inner = pc.replace_substring(col, '"', '""') if _any(pc.match_substring(col, '"')) else col
        wrapped = pc.binary_join_element_wise('"', inner, '"', "")
        col = pc.if_else(quoted, wrapped, col)
    return pc.fill_null(col, "")


def _timestamp_cells(col: pa.Array, fraction: bool) -> pa.Array | None:
    """ISO 8601 UTC cells (:func:`iso_utc`); None where Arrow's text would differ from Python's (a
    year before 1000: glibc does not pad it)."""
    us = col.cast(pa.timestamp("us"))  # a zone's timestamps keep their UTC instant
    if _any(pc.fill_null(pc.less(pc.year(us), 1000), False)):
        return None
    # Arrow's text of a microsecond timestamp is 'YYYY-MM-DD HH:MM:SS.ffffff', always: ~15x
    # faster than its strftime, ~5x than numpy's
    text = pc.cast(us, pa.string())
    if not fraction:
        text = pc.utf8_slice_codeunits(text, 0, 19)
    text = pc.utf8_replace_slice(text, 10, 11, "T")
    return pc.fill_null(pc.binary_join_element_wise(text, "Z", ""), "")


def csv_rows(batch: pa.RecordBatch, choices: Sequence[bool | None] | None = None) -> str:
    """A batch's CSV lines (no header), each ended by LF: what :func:`csv_text` writes for its rows.

    Example:
        >>> csv_rows(pa.record_batch({"t": ["=x", "ok"], "n": [-3, None]}))
        "'=x,-3\\nok,\\n"
    """
    n = batch.num_columns
    if batch.num_rows == 0:
        return ""
    if n == 0:
        return "\n" * int(batch.num_rows)
    cols = [csv_column(batch.column(i), None if choices is None else choices[i]) for i in range(n)]
    lines = pc.binary_join_element_wise(*cols, ",") if n > 1 else cols[0]
    return _joined(pc.binary_join_element_wise(lines, "", "\n"))


#: rows per batch of a streamed export: small enough that a batch's Python values stay a few MB
BATCH_ROWS = 20_000


class _Spool:
    """A result read once into an Arrow IPC file on disk, with each column's :func:`column_choice`.

    A million-row export is never held in memory: the batches go to disk as they come (the case's
    connection is free again as soon as they are read), then are rendered one at a time.
    """

    def __init__(self, rel: Tabular, directory: Path | None, batch_rows: int) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="forensics-export-", dir=directory)
        self.path = Path(self._dir.name) / "result.arrow"
        try:
            reader = record_batches(rel, batch_rows)
            self.schema = reader.schema
            self.choices: list[bool | None] = [None] * len(self.schema)
            self.num_rows = 0
            with pa.OSFile(str(self.path), "wb") as sink, pa.ipc.new_file(sink, self.schema) as writer:
                for batch in reader:
                    for i, col in enumerate(batch.columns):
                        self.choices[i] = combine_choices(self.choices[i], column_choice(col), col.type)
                    writer.write_batch(batch)
                    self.num_rows += batch.num_rows
        except BaseException:
            self._dir.cleanup()
            raise

    def batches(self) -> Iterator[pa.RecordBatch]:
        # read, not memory-mapped: a mapped file's pages count in the process's RSS as it is read
        with pa.OSFile(str(self.path)) as source:
            file = pa.ipc.open_file(source)
            for i in range(file.num_record_batches):
                yield file.get_batch(i)

    def rows(self) -> Iterator[list[list[Any]]]:
        """Each batch as rows of output values (every batch rendered with the column's choice)."""
        for batch in self.batches():
            columns = [_python_column(batch.column(i), self.choices[i]) for i in range(batch.num_columns)]
            yield [list(r) for r in zip(*columns, strict=True)] if columns else []

    def close(self) -> None:
        self._dir.cleanup()


def record_batches(rel: Tabular, batch_rows: int = BATCH_ROWS) -> pa.RecordBatchReader:
    """A result as a stream of Arrow record batches of at most ``batch_rows`` rows (never read whole).

    Example:
        >>> [b.num_rows for b in record_batches(duckdb.sql("SELECT * FROM range(5)"), 2)]
        [2, 2, 1]
    """
    if isinstance(rel, Relation):
        rel = rel.relation
    if isinstance(rel, duckdb.DuckDBPyRelation):
        return rel.to_arrow_reader(batch_rows)
    table = to_arrow(rel)
    return pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=batch_rows))


def json_column(col: pa.Array, choice: bool | None = None) -> pa.Array:
    """A column's JSON values as text (``null`` for NULL), value for value what ``json.dumps`` writes
    for the output values (:func:`_python_column`, ``ensure_ascii=False``).

    Computed by Arrow a column at a time, as :func:`csv_column`: text is escaped column-wide (the
    rare cell with a control character goes through ``json.dumps``); floats, dates and decimals
    render each distinct value once; any other type every value, with ``json.dumps`` itself.

    Example:
        >>> json_column(pa.array(['say "hi"', None, "a\\\\b"])).to_pylist()
        ['"say \\\\"hi\\\\""', 'null', '"a\\\\\\\\b"']
    """
    return _column_text(col, choice, text=_json_text, null="null", value=_json, stamps=_json_stamps)


def _json_text(col: pa.Array) -> pa.Array:
    control = pc.fill_null(pc.match_substring_regex(col, r"[\x00-\x1f]"), False)
    text = pc.replace_substring(pc.replace_substring(col, "\\", "\\\\"), '"', '\\"')
    text = pc.binary_join_element_wise('"', text, '"', "")
    if _any(control):  # rare: json.dumps's own escapes (\n, \t, \u0001, ...)
        fixed = [_json(v) for v in col.filter(control).to_pylist()]
        text = pc.replace_with_mask(text, control, pa.array(fixed, type=pa.string()))
    return pc.fill_null(text, "null")


def _json_stamps(col: pa.Array, cells: pa.Array) -> pa.Array:
    return pc.if_else(col.is_null(), "null", pc.binary_join_element_wise('"', cells, '"', ""))


def _json(value: Any) -> str:
    return json.dumps(value, default=_jsonable, ensure_ascii=False)


def _nested(schema: pa.Schema) -> bool:
    return any(pa.types.is_nested(f.type) for f in schema)


def _json_records(batch: pa.RecordBatch, choices: Sequence[bool | None], sep: str, end: str) -> pa.Array:
    """Each row as a JSON object: ``{`` + ``"name": value`` joined by ``sep`` + ``end``."""
    parts = [pc.binary_join_element_wise(_json(name) + ": ", json_column(batch.column(i), choices[i]), "")
             for i, name in enumerate(batch.schema.names)]
    body = pc.binary_join_element_wise(*parts, sep) if len(parts) > 1 else parts[0]
    return pc.binary_join_element_wise("{", body, end, "")


def _fast_json(names: Sequence[str], spool: _Spool, *, document: bool) -> bool:
    # every column by Arrow: unique names (a dict keeps one of a repeated name), and for the
    # indented document no nested values (json.dumps indents inside them)
    return bool(names) and len(set(names)) == len(names) and not (document and _nested(spool.schema))


def _joined(lines: pa.Array) -> str:
    data = lines.buffers()[2]
    if data is None:
        return ""
    offs = np.frombuffer(lines.buffers()[1], dtype=np.int32)
    lo, hi = int(offs[lines.offset]), int(offs[lines.offset + len(lines)])
    text: str = data.to_pybytes()[lo:hi].decode("utf-8")
    return text


def _json_lines(names: Sequence[str], spool: _Spool) -> Iterator[str]:
    if not _fast_json(names, spool, document=False):
        for rows in spool.rows():
            for r in rows:
                yield json.dumps(dict(zip(names, r, strict=True)), default=_jsonable, ensure_ascii=False) + "\n"
        return
    for batch in spool.batches():
        if batch.num_rows:
            yield _joined(_json_records(batch, spool.choices, ", ", "}\n"))


def _json_document(names: Sequence[str], spool: _Spool, params: dict[str, Any]) -> Iterator[str]:
    # the text json.dumps(..., indent=2) gives for {"parameters": ..., "rows": [...]}, one row at a time
    head = json.dumps(params, default=_jsonable, indent=2, ensure_ascii=False).replace("\n", "\n  ")
    yield '{\n  "parameters": ' + head + ',\n  "rows": ['
    first = True
    if _fast_json(names, spool, document=True):
        for batch in spool.batches():
            if not batch.num_rows:
                continue
            # a flat record indented: '{\n  "k": v,\n  ...\n}', each line 4 deeper in the list
            records = _json_records(batch, spool.choices, ",\n      ", "\n    }")
            records = pc.utf8_replace_slice(records, 0, 1, "{\n      ")
            yield ("\n    " if first else ",\n    ") + _joined(pc.binary_join_element_wise(records, "", ",\n    "))[:-6]
            first = False
    else:
        for rows in spool.rows():
            for r in rows:
                record = json.dumps(dict(zip(names, r, strict=True)), default=_jsonable, indent=2,
                                    ensure_ascii=False).replace("\n", "\n    ")
                yield ("\n    " if first else ",\n    ") + record
                first = False
    yield ("]" if first else "\n  ]") + "\n}\n"


def _csv_lines(names: Sequence[str], spool: _Spool) -> Iterator[str]:
    yield csv_text(names, [])
    for batch in spool.batches():
        yield csv_rows(batch, spool.choices)


@contextlib.contextmanager
def _written_whole(out: Path) -> Iterator[Path]:
    """A path to write ``out``'s content to: a file beside it, renamed onto it when the block ends
    without an error, so an interrupted export leaves the previous file and never a short one
    that looks whole. A symbolic link, FIFO or device is written in place (through the link)."""
    if out.is_symlink() or (out.exists() and not out.is_file()):
        yield out
        return
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
    os.close(fd)
    partial = Path(name)
    try:
        yield partial
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(partial, 0o666 & ~mask)  # a new file's mode, not mkstemp's 0600
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)


#: What a result is read under (``Case.exporting``): a zero-argument context manager factory.
Budget: TypeAlias = Callable[[], contextlib.AbstractContextManager[Any]]


def _under(budget: Budget | None, read: Callable[[], _T]) -> _T:
    """``read()`` under ``budget``; once more without it when DuckDB runs out of memory inside (a plan
    that cannot spill under the small budget is read as any query is: never a failed export)."""
    if budget is None:
        return read()
    try:
        with budget():
            return read()
    except duckdb.OutOfMemoryException:
        return read()


def _write_text(fmt: TableFormat, rel: Tabular, params: dict[str, Any], stream: IO[str],
                spool_dir: Path | None, batch_rows: int, budget: Budget | None = None) -> int:
    spool = _under(budget, lambda: _Spool(rel, spool_dir, batch_rows))
    try:
        names = list(spool.schema.names)
        if fmt == "csv":
            pieces: Iterable[str] = _csv_lines(names, spool)
        elif fmt == "json":
            pieces = _json_document(names, spool, params)
        else:
            pieces = _json_lines(names, spool)
        for piece in pieces:
            stream.write(piece)
        return spool.num_rows
    finally:
        spool.close()


def write_output(
    rel: Tabular,
    fmt: TableFormat,
    out: str | Path | None,
    parameters: dict[str, Any] | None = None,
    *,
    stream: IO[str] | None = None,
    title: str | None = None,
    batch_rows: int = BATCH_ROWS,
    budget: Budget | None = None,
) -> int:
    """Render ``rel`` in ``fmt`` to ``out`` (a path) or to ``stream`` (default stdout); the result's row count.

    CSV, JSON, JSON Lines and Parquet are streamed: the result is read once, in batches of
    ``batch_rows``, so memory stays bounded whatever the number of rows; a file appears whole or
    not at all. A terminal table shows the first rows only (the count is of all of them).
    ``budget`` (``case.exporting`` for a full export) is what the result is read under; where
    DuckDB runs out of memory inside it, the result is read again without it.

    Example:
        >>> rows = write_output(duckdb.sql("SELECT 1 AS x UNION ALL SELECT 2"), "csv", None)
        x
        1
        2
        >>> rows
        2
    """
    if fmt not in FORMATS:
        raise ParameterError(f"unknown output format {fmt!r}", hint=f"use one of {', '.join(FORMATS)}")
    params = parameters or {}
    if fmt == "parquet":
        if out is None:
            raise ParameterError("--format parquet needs -o FILE", hint="parquet is binary")
        target = Path(out)
        return _under(budget, lambda: _write_parquet(rel, target, params, batch_rows))
    if fmt == "table":
        return _write_table(rel, out, stream or sys.stdout, title)
    if out is None:
        stream = stream or sys.stdout
        rows = _write_text(fmt, rel, params, stream, None, batch_rows, budget)
        stream.flush()
        return rows
    out = Path(out)
    with _written_whole(out) as path, path.open("w", encoding="utf-8", newline="") as fh:
        rows = _write_text(fmt, rel, params, fh, out.parent, batch_rows, budget)
    if fmt in ("csv", "jsonl") and params:
        Path(str(out) + ".params.json").write_text(
            json.dumps(params, default=_jsonable, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
    return rows


def _write_parquet(rel: Tabular, out: Path, params: dict[str, Any], batch_rows: int) -> int:
    import pyarrow.parquet as pq

    reader = record_batches(rel, batch_rows)
    meta = dict(reader.schema.metadata or {})
    meta[b"forensics.parameters"] = json.dumps(params, default=_jsonable, sort_keys=True).encode()
    rows = 0
    with _written_whole(out) as path, pq.ParquetWriter(str(path), reader.schema.with_metadata(meta)) as writer:
        for batch in reader:
            writer.write_batch(batch)
            rows += batch.num_rows
    return rows


def _write_table(rel: Tabular, out: str | Path | None, stream: IO[str], title: str | None) -> int:
    from forensics.outputs.terminal import MAX_TABLE_ROWS, render_table

    # a terminal shows the first rows only: never materialise a million-row export for it
    if isinstance(rel, Relation | duckdb.DuckDBPyRelation):
        total = int(rel.aggregate("count(*)").fetchall()[0][0])
        rel = rel.limit(MAX_TABLE_ROWS)
    else:
        total = len(rel)
        rel = rel.slice(0, MAX_TABLE_ROWS) if isinstance(rel, pa.Table) else rel.head(MAX_TABLE_ROWS)
    names, rows = rows_for_output(rel)
    text = render_table(names, rows, title=title, width=None if out is None else 200, total=total)
    if out is None:
        stream.write(text)
        stream.flush()
    else:
        Path(out).write_text(text, encoding="utf-8")
    return total
