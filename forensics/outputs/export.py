"""Write a query result as a table, CSV, JSON or Parquet, with the parameters that produced it.

CSV keeps its column contract (no comment lines): the parameters go to a ``<file>.params.json``
sidecar when writing to a file. JSON embeds them; Parquet stores them as file metadata.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, Any

import duckdb
import pandas as pd

from forensics.errors import ParameterError

FORMATS = ("table", "csv", "json", "parquet")


def _jsonable(value: Any) -> Any:
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def frame_for_output(rel: duckdb.DuckDBPyRelation | pd.DataFrame) -> pd.DataFrame:
    """Materialise a relation as a DataFrame with UTC ISO-8601 timestamps ('...Z').

    Example:
        >>> frame_for_output(duckdb.sql("SELECT TIMESTAMP '2026-09-02 04:51:17' AS ts")).ts[0]
        '2026-09-02T04:51:17Z'
    """
    df = rel if isinstance(rel, pd.DataFrame) else rel.df()
    df = df.copy()
    for col in df.columns:
        if pd.api.types.is_datetime64_any_dtype(df[col]):
            s = df[col]
            if getattr(s.dt, "tz", None) is not None:
                s = s.dt.tz_convert("UTC").dt.tz_localize(None)
            has_frac = bool(((s.dt.microsecond != 0) | (s.dt.nanosecond != 0)).any())
            fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if has_frac else "%Y-%m-%dT%H:%M:%SZ"
            df[col] = s.dt.strftime(fmt).where(s.notna(), None)
    return df


def write_output(
    rel: duckdb.DuckDBPyRelation | pd.DataFrame,
    fmt: str,
    out: str | Path | None,
    parameters: dict[str, Any] | None = None,
    *,
    stream: IO[str] | None = None,
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
    df = frame_for_output(rel)
    if fmt == "parquet":
        if out is None:
            raise ParameterError("--format parquet needs -o FILE", hint="parquet is binary")
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(df, preserve_index=False)
        meta = dict(table.schema.metadata or {})
        meta[b"forensics.parameters"] = json.dumps(params, default=_jsonable, sort_keys=True).encode()
        pq.write_table(table.replace_schema_metadata(meta), str(out))
        return
    if fmt == "csv":
        text = df.to_csv(index=False, lineterminator="\n")
    elif fmt == "json":
        records = json.loads(df.to_json(orient="records", date_format="iso"))
        text = json.dumps({"parameters": params, "rows": records}, default=_jsonable, indent=2, sort_keys=False) + "\n"
    else:
        with pd.option_context("display.max_rows", 500, "display.max_columns", 50, "display.width", 200,
                               "display.max_colwidth", 60):
            text = (df.to_string(index=False) if len(df) else "(no rows)") + "\n"
    if out is None:
        stream.write(text)
    else:
        Path(out).write_text(text, encoding="utf-8")
        if fmt == "csv" and params:
            Path(str(out) + ".params.json").write_text(
                json.dumps(params, default=_jsonable, indent=2, sort_keys=True) + "\n", encoding="utf-8"
            )
