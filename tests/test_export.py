"""write_output streams CSV, JSON, JSON Lines and Parquet in batches, with the text of a whole read.

A full ``forensics chain`` export is a row per request (10 M rows at 10 M requests): it used to be
read whole into Arrow, then Python rows, then one string (2.5 GiB at 1 M requests). The column-wide
choices (fractional seconds, whole floats as integers) are the whole column's, whatever batch a
value falls in.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from forensics.outputs import export
from forensics.outputs.export import csv_text, rows_for_output, write_output
from forensics.relation import Relation

# the last row alone has fractional seconds, a fractional float, a NaN: a batch-local choice would
# print the first rows differently from a whole read
MIXED = """
SELECT * FROM (VALUES
    (1, TIMESTAMP '2026-09-02 04:51:17', 3.0, DATE '2026-09-02', 'plain', ['a', 'b'], 1.50::DECIMAL(9, 2)),
    (2, NULL, NULL, NULL, '=HYPERLINK("x")', [], 2.00::DECIMAL(9, 2)),
    (3, TIMESTAMP '2026-09-02 04:51:18', 5.0, DATE '2026-09-03', 'two
lines', NULL, NULL),
    (4, TIMESTAMP '2026-09-02 04:51:19.250', 2.5, NULL, '-3', ['c'], 7.25::DECIMAL(9, 2)),
    (5, TIMESTAMP '2026-09-02 04:51:20', 'NaN'::DOUBLE, NULL, 'ünïcode', NULL, NULL)
) AS t(n, ts, f, d, s, ids, dec)
ORDER BY n
"""


def _whole(fmt: str, rel: Any, params: dict[str, Any]) -> str:
    """The rendering of a result read whole (the writer before it streamed)."""
    names, rows = rows_for_output(rel)
    if fmt == "csv":
        return csv_text(names, rows)
    records = [dict(zip(names, r, strict=True)) for r in rows]
    if fmt == "json":
        return json.dumps({"parameters": params, "rows": records}, default=str, indent=2,
                          ensure_ascii=False) + "\n"
    return "".join(json.dumps(r, default=str, ensure_ascii=False) + "\n" for r in records)


@pytest.mark.parametrize("fmt", ["csv", "json", "jsonl"])
@pytest.mark.parametrize("batch_rows", [1, 2, 4, 1000])
@pytest.mark.parametrize("sql", [MIXED, MIXED.replace("ORDER BY n", "WHERE n < 0")], ids=["rows", "empty"])
def test_streamed_text_equals_the_whole_read(fmt: str, batch_rows: int, sql: str, tmp_path: Path) -> None:
    con = duckdb.connect()
    params = {"node": "prefill-0", "since": None}
    out = tmp_path / f"out.{fmt}"
    write_output(Relation(con.sql(sql)), fmt, out, params, batch_rows=batch_rows)  # type: ignore[arg-type]
    assert out.read_text(encoding="utf-8") == _whole(fmt, con.sql(sql), params)


def test_fraction_found_in_the_last_batch_reaches_the_first_rows(tmp_path: Path) -> None:
    out = tmp_path / "ts.csv"
    write_output(duckdb.sql(MIXED).select("n, ts"), "csv", out, batch_rows=1)
    assert out.read_text().splitlines()[1] == "1,2026-09-02T04:51:17.000000Z"


def test_an_export_is_never_read_whole(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def whole(*_: Any, **__: Any) -> pa.Table:
        raise AssertionError("the result was materialised whole")

    monkeypatch.setattr(Relation, "arrow", whole)
    monkeypatch.setattr(Relation, "to_arrow_table", whole)
    con = duckdb.connect()
    rel = Relation(con.sql("SELECT range AS n, 'req-' || range AS rid FROM range(50000)"))
    for fmt in ("csv", "json", "jsonl", "parquet"):
        write_output(rel, fmt, tmp_path / f"big.{fmt}", batch_rows=5000)  # type: ignore[arg-type]
    assert len((tmp_path / "big.csv").read_text().splitlines()) == 50001
    assert pq.read_table(tmp_path / "big.parquet").num_rows == 50000


def test_python_memory_of_an_export_is_one_batch_not_the_result(tmp_path: Path) -> None:
    con = duckdb.connect()
    sql = "SELECT range AS n, 'req-' || range AS rid, range * 1.5 AS x FROM range(200000)"
    peaks = {}
    for batch_rows in (200_000, 2_000):
        tracemalloc.start()
        write_output(duckdb.sql(sql, connection=con), "csv", tmp_path / f"b{batch_rows}.csv",
                     batch_rows=batch_rows)
        peaks[batch_rows] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert (tmp_path / "b2000.csv").read_bytes() == (tmp_path / "b200000.csv").read_bytes()
    assert peaks[2_000] * 10 < peaks[200_000], peaks


def test_an_interrupted_export_leaves_the_old_file_and_no_partial(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    out = tmp_path / "chain.csv"
    out.write_text("the previous export\n")
    calls = {"n": 0}
    real = export._python_column

    def second_batch_interrupted(col: Any, choice: Any = None) -> list[Any]:
        calls["n"] += 1
        if calls["n"] > 2:  # two columns: the second batch
            raise KeyboardInterrupt
        return real(col, choice)

    monkeypatch.setattr(export, "_python_column", second_batch_interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_output(duckdb.sql("SELECT range AS n, range AS m FROM range(10)"), "csv", out, batch_rows=5)
    assert out.read_text() == "the previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.csv"]


def test_a_symlinked_output_is_written_through_the_link(tmp_path: Path) -> None:
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    write_output(duckdb.sql("SELECT 1 AS x"), "csv", link)
    assert link.is_symlink() and target.read_text() == "x\n1\n"


def test_parquet_keeps_types_rows_and_parameters(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    write_output(duckdb.sql(MIXED), "parquet", out, {"node": "decode-1"}, batch_rows=2)
    table = pq.read_table(out)
    assert table.num_rows == 5 and pa.types.is_timestamp(table.schema.field("ts").type)
    assert json.loads(table.schema.metadata[b"forensics.parameters"]) == {"node": "decode-1"}
    expected = duckdb.sql(MIXED).to_arrow_table()
    def plain(schema: pa.Schema) -> list[pa.DataType]:
        return [f.type for f in schema if not pa.types.is_list(f.type)]

    assert table.column_names == expected.column_names and plain(table.schema) == plain(expected.schema)
    # NaN equals nothing: compare the rows as text (Parquet names a list's child "element")
    assert str(table.to_pylist()) == str(expected.to_pylist())


@pytest.mark.parametrize(
    ("values", "kind", "choice"),
    [
        ([1.0, None, 3.0], pa.float64(), True),
        ([1.0, 2.5], pa.float64(), False),
        ([1.0, float("nan")], pa.float64(), False),
        ([1.0, float("inf")], pa.float64(), False),
        ([None], pa.float64(), True),
        ([0, 1_000_000], pa.timestamp("us"), False),
        ([0, 1_000_001], pa.timestamp("us"), True),
        ([0, 1], pa.timestamp("ns"), False),  # a nanosecond part: a datetime keeps no such digit
        ([None], pa.timestamp("us"), False),
        ([1, 2], pa.int64(), None),
    ],
)
def test_column_choice(values: list[Any], kind: pa.DataType, choice: bool | None) -> None:
    assert export.column_choice(pa.array(values, type=kind)) is choice
