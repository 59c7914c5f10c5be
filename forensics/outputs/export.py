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

import datetime as dt
import decimal
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any, TypeAlias

import duckdb
import pandas as pd
import pyarrow as pa

from forensics.errors import ParameterError
from forensics.kinds import TABLE_FORMATS, TableFormat
from forensics.outputs.escape import csv_cell, csv_field
from forensics.relation import AnyRelation, Relation

FORMATS = TABLE_FORMATS

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


def _python_column(col: pa.ChunkedArray) -> list[Any]:
    """A column's values as Python values: datetimes as ISO strings, exact numbers as int/float."""
    values = col.to_pylist()
    if pa.types.is_timestamp(col.type) or pa.types.is_date(col.type):
        stamps = [v for v in values if isinstance(v, dt.datetime)]
        if pa.types.is_date(col.type) and not stamps:
            return [None if v is None else v.isoformat() for v in values]
        fraction = any(v.microsecond for v in stamps)
        return [None if v is None else iso_utc(v, fraction=fraction) for v in values]
    if pa.types.is_floating(col.type):
        # a float column of whole numbers (a count through pandas) prints as integers
        if all(v is None or (v == v and float(v).is_integer()) for v in values):
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
    for row in rows:
        cells = []
        for v in row:
            if isinstance(v, bool) or not isinstance(v, int | float):
                cells.append(csv_field(csv_cell(text_value(v))))
            else:
                cells.append(str(v))
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


def write_output(
    rel: Tabular,
    fmt: TableFormat,
    out: str | Path | None,
    parameters: dict[str, Any] | None = None,
    *,
    stream: IO[str] | None = None,
    title: str | None = None,
) -> None:
    """Render ``rel`` in ``fmt`` to ``out`` (a path) or to ``stream`` (default stdout).

    Example:
        >>> write_output(duckdb.sql("SELECT 1 AS x"), "csv", None)
        x
        1
    """
    if fmt not in FORMATS:
        raise ParameterError(f"unknown output format {fmt!r}", hint=f"use one of {', '.join(FORMATS)}")
    stream = stream or sys.stdout
    params = parameters or {}
    if fmt == "parquet":
        if out is None:
            raise ParameterError("--format parquet needs -o FILE", hint="parquet is binary")
        import pyarrow.parquet as pq

        table = to_arrow(rel)
        meta = dict(table.schema.metadata or {})
        meta[b"forensics.parameters"] = json.dumps(params, default=_jsonable, sort_keys=True).encode()
        pq.write_table(table.replace_schema_metadata(meta), str(out))
        return
    total: int | None = None
    if fmt == "table":
        from forensics.outputs.terminal import MAX_TABLE_ROWS

        # a terminal shows the first rows only: never materialise a million-row export for it
        if isinstance(rel, Relation | duckdb.DuckDBPyRelation):
            total = int(rel.aggregate("count(*)").fetchall()[0][0])
            rel = rel.limit(MAX_TABLE_ROWS)
        else:
            total = len(rel)
            rel = rel.slice(0, MAX_TABLE_ROWS) if isinstance(rel, pa.Table) else rel.head(MAX_TABLE_ROWS)
    names, rows = rows_for_output(rel)
    if fmt == "csv":
        text = csv_text(names, rows)
    elif fmt == "json":
        records = [dict(zip(names, r, strict=True)) for r in rows]
        text = json.dumps({"parameters": params, "rows": records}, default=_jsonable, indent=2,
                          ensure_ascii=False) + "\n"
    elif fmt == "jsonl":
        text = "".join(
            json.dumps(dict(zip(names, r, strict=True)), default=_jsonable, ensure_ascii=False) + "\n"
            for r in rows
        )
    else:
        from forensics.outputs.terminal import render_table

        text = render_table(names, rows, title=title, width=None if out is None else 200, total=total)
    if out is None:
        stream.write(text)
        stream.flush()
    else:
        Path(out).write_text(text, encoding="utf-8")
        if fmt in ("csv", "jsonl") and params:
            Path(str(out) + ".params.json").write_text(
                json.dumps(params, default=_jsonable, indent=2, sort_keys=True) + "\n", encoding="utf-8"
            )
