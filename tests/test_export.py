"""write_output streams CSV, JSON, JSON Lines and Parquet in batches, with the text of a whole read.

A full ``forensics chain`` export is a row per request (10 M rows at 10 M requests): it used to be
read whole into Arrow, then Python rows, then one string (2.5 GiB at 1 M requests). The column-wide
choices (fractional seconds, whole floats as integers) are the whole column's, whatever batch a
value falls in.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import tracemalloc
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from forensics.outputs import export
from forensics.outputs.escape import FORMULA_START, csv_field
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
    real = export.csv_column

    def second_batch_interrupted(col: Any, choice: Any = None) -> Any:
        calls["n"] += 1
        if calls["n"] > 2:  # two columns: the second batch
            raise KeyboardInterrupt
        return real(col, choice)

    monkeypatch.setattr(export, "csv_column", second_batch_interrupted)
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


_TS = dt.datetime(2026, 9, 2, 4, 51, 17)
_SGT = dt.timezone(dt.timedelta(hours=8))


_COLUMN_CASES = [
        (["plain", None, "", "=HYPERLINK(\"x\")", "+1", "-3", "-3.5e2", "-x", "@SUM(A1)", "\tt", "\rr", "'=x", "''",
          "'", "'a", "a,b", 'say "hi"', "two\nlines", "cr\ronly", "ünïcode", "-١٢", "=", "é,\"\n"], pa.string()),
        (["=a", "b,c", None], pa.large_string()),
        ([None, None], pa.string()),
        ([1, -3, None, 2**63 - 1, -(2**63)], pa.int64()),
        ([1, None, 255], pa.uint8()),
        ([True, False, None], pa.bool_()),
        ([1.0, 3.0, None, -0.0], pa.float64()),
        ([0.5, 0.95, None, float("nan"), float("inf"), -0.0, 0.0, 1e-05, 1e16, 123456789012345.6], pa.float64()),
        ([0.5, 0.25], pa.float32()),
        ([_TS, None, _TS + dt.timedelta(microseconds=250_000)], pa.timestamp("us")),
        ([_TS, None, _TS + dt.timedelta(seconds=1)], pa.timestamp("us")),
        ([_TS, _TS + dt.timedelta(milliseconds=5)], pa.timestamp("ms")),
        ([_TS, None], pa.timestamp("s")),
        ([_TS.replace(tzinfo=_SGT), None], pa.timestamp("us", tz="Asia/Singapore")),
        ([dt.datetime(5, 1, 1, 1, 2, 3), _TS], pa.timestamp("us")),  # glibc writes year 5 unpadded
        ([0, 1, 1_500], pa.timestamp("ns")),
        ([dt.date(2026, 9, 2), None], pa.date32()),
        ([decimal.Decimal("1.50"), decimal.Decimal("2.00"), None], pa.decimal128(9, 2)),
        ([["a", "b"], [], None, ["=x"]], pa.list_(pa.string())),
        ([{"k": 1}, None], pa.struct([("k", pa.int64())])),
    ]


@pytest.mark.parametrize(("values", "kind"), _COLUMN_CASES)
def test_csv_columns_are_cell_for_cell_the_python_rendering(values: list[Any], kind: pa.DataType) -> None:
    # the vectorised cells of a streamed export against csv_text over Python values, its definition
    col = pa.array(values, type=kind)
    batch = pa.record_batch({"c": col, "n": pa.array(range(len(values)))})
    names, rows = rows_for_output(pa.Table.from_batches([batch]))
    assert export.csv_rows(batch) == csv_text(names, rows)[len("c,n\n"):]


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
@pytest.mark.parametrize(("values", "kind"), _COLUMN_CASES)
def test_json_values_are_value_for_value_json_dumps(values: list[Any], kind: pa.DataType, fmt: str,
                                                    tmp_path: Path) -> None:
    table = pa.table({"c": pa.array(values, type=kind), "n": pa.array(range(len(values))),
                      "ctl": pa.array(["a\x01b\tc\n" if i % 2 else "\\ \"q\" é" for i in range(len(values))])})
    out = tmp_path / f"out.{fmt}"
    write_output(table, fmt, out, {"p": 1}, batch_rows=3)
    assert out.read_text(encoding="utf-8") == _whole(fmt, table, {"p": 1})


def test_csv_rows_of_a_sliced_batch_are_its_own_rows() -> None:
    batch = pa.record_batch({"s": ["a", "=b", "c,d", "e"], "n": [1, 2, 3, 4]}).slice(1, 2)
    assert export.csv_rows(batch) == "'=b,2\n\"c,d\",3\n"


def test_the_cells_csv_cell_may_change_are_found_by_their_first_character() -> None:
    # the column-wide check must flag exactly the cells csv_cell looks at: any first character of
    # FORMULA_START, or a quote (doubled before one of them)
    chars = [chr(i) for i in range(1, 128)] + ["é", "١"]
    found = pc.match_substring_regex(pa.array([c + "x" for c in chars]), export._CELL_START_RE).to_pylist()
    assert [c for c, f in zip(chars, found, strict=True) if f] == sorted([*FORMULA_START, "'"])
    quoted = pc.match_substring_regex(pa.array([f"a{c}b" for c in chars]), export._QUOTED_RE).to_pylist()
    assert [c for c, f in zip(chars, quoted, strict=True) if f] == [c for c in chars if csv_field(c) != c]


def test_a_full_export_is_read_under_the_budget_it_is_given(tmp_path: Path) -> None:
    # one thread and the export budget while the result is read (its sort spills), both back after
    import forensics

    case = forensics.open_case(":memory:")
    before = case.sql("SELECT current_setting('threads'), current_setting('memory_limit')").fetchall()
    out = tmp_path / "settings.csv"
    rel = case.sql("SELECT current_setting('threads') AS threads, current_setting('memory_limit') AS mem")
    write_output(rel, "csv", out, budget=case.exporting)
    assert out.read_text() == "threads,mem\n1,488.2 MiB\n"
    assert case.sql("SELECT current_setting('threads'), current_setting('memory_limit')").fetchall() == before


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_an_export_that_runs_out_of_memory_under_its_budget_is_read_again_without_it(fmt: str,
                                                                                    tmp_path: Path) -> None:
    con = duckdb.connect()
    entered = []

    @contextlib.contextmanager
    def tiny() -> Any:
        entered.append(True)
        con.execute("SET memory_limit = '1MB'")
        try:
            yield
        finally:
            con.execute("RESET memory_limit")

    sql = "SELECT range AS n, repeat('x', 200) AS pad FROM range(50000) ORDER BY n DESC"
    with pytest.raises(duckdb.OutOfMemoryException), tiny():
        con.sql(sql).fetchall()  # the budget is too small for this result
    out = tmp_path / f"big.{fmt}"
    assert write_output(con.sql(sql), fmt, out, budget=tiny) == 50000
    assert len(entered) == 2
    if fmt == "parquet":
        assert pq.read_table(out).num_rows == 50000
    else:
        assert len(out.read_text().splitlines()) == 50000 + (fmt == "csv")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".params.json")) == [out.name]


def test_the_chain_command_reads_its_result_under_the_export_budget(sample_case_path: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # a full export (its file declares an -- order:) is read under Case.exporting; other commands are not
    from click.testing import CliRunner

    from forensics.case import Case
    from forensics.cli import cli

    used: list[str] = []
    real = Case.exporting

    def spy(self: Case) -> Any:
        used.append("exporting")
        return real(self)

    monkeypatch.setattr(Case, "exporting", spy)
    for command in ("chain", "affected"):
        out = tmp_path / f"{command}.csv"
        res = CliRunner().invoke(cli, [command, str(sample_case_path), "--format", "csv", "-o", str(out)])
        assert res.exit_code == 0, res.output
    assert used == ["exporting"]
