"""The case database: schema, safety settings, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

import forensics
from forensics.case import SCHEMA_VERSION, open_case
from forensics.errors import CaseError

CANONICAL_TABLES = [
    "engine_batches", "engine_events", "engine_http", "engine_other_lines", "engine_rejections",
    "engine_requests", "engine_starts", "evidence_files", "gateway_requests", "rejected_lines",
    "router_requests",
]


@pytest.mark.parametrize("table", CANONICAL_TABLES)
def test_schema_has_canonical_table(table: str) -> None:
    case = open_case(":memory:")
    assert table in case.tables()


def test_schema_columns_are_documented() -> None:
    # Every column line in the DDL carries a comment or is a provenance/common column.
    from forensics.schema import schema_sql

    common = {"node", "ts", "ts_inferred", "ranks", "file_id", "line_no", "key", "value", "path"}
    undocumented = []
    in_table = False
    for line in schema_sql().splitlines():
        s = line.strip()
        # columns are the lines of CREATE TABLE blocks (a view's SELECT list is not a column list)
        if s.startswith("CREATE TABLE"):
            in_table = True
            continue
        if s.startswith(")"):
            in_table = False
        if not in_table or not s or s.startswith(("--", ")")):
            continue
        name = s.split()[0]
        if "--" not in s and name not in common and not name.isupper():
            undocumented.append(name)
    assert len(undocumented) < 40, undocumented  # typed, self-explaining columns may omit comments


def test_reopening_a_case_is_idempotent(tmp_path: Path) -> None:
    p = tmp_path / "c.duckdb"
    open_case(p).close()
    with open_case(p) as case:
        assert case.sql("SELECT value FROM schema_info WHERE key = 'schema_version'").fetchall() == [(SCHEMA_VERSION,)]


def test_read_only_open_of_a_missing_case_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CaseError, match="does not exist"):
        open_case(tmp_path / "nope.duckdb", read_only=True)


@pytest.mark.parametrize(
    "setting, expected",
    [("autoinstall_known_extensions", False), ("autoload_known_extensions", False)],
)
def test_duckdb_never_reaches_for_extensions(setting: str, expected: bool) -> None:
    case = open_case(":memory:")
    [(value,)] = case.sql(f"SELECT current_setting('{setting}')").fetchall()
    assert value is expected


def test_a_missing_extension_fails_fast_instead_of_downloading() -> None:
    case = open_case(":memory:")
    with pytest.raises(duckdb.Error):
        # spatial is not built in: with autoload off this must fail at once, not download.
        case.sql("SELECT ST_Point(1, 2)").fetchall()


@pytest.mark.parametrize("extension", ["json", "parquet", "icu"])
def test_built_in_extensions_work_offline(extension: str) -> None:
    case = open_case(":memory:")
    # each probe has a known answer: it must run offline and give it
    probes = {
        "json": ("SELECT json_extract('{\"a\": 1}', '$.a')::INT", [(1,)]),
        "parquet": ("SELECT count(*) FROM parquet_metadata('/dev/null') WHERE false", [(0,)]),
        "icu": ("SELECT CAST(timezone('UTC', timezone('Asia/Singapore', TIMESTAMP '2026-09-02 12:00:00')) AS VARCHAR)",
                [("2026-09-02 04:00:00",)]),
    }
    sql, expected = probes[extension]
    assert case.sql(sql).fetchall() == expected


def test_version_is_exposed() -> None:
    assert forensics.__version__.count(".") == 2


def test_docs_schema_md_is_generated_from_schema_sql() -> None:
    from forensics.schema import schema_markdown

    doc = Path(__file__).resolve().parent.parent / "docs" / "schema.md"
    assert doc.read_text(encoding="utf-8") == schema_markdown(), (
        "docs/schema.md is stale: regenerate it with "
        "python -c 'from forensics.schema import schema_markdown as m; open(\"docs/schema.md\", \"w\").write(m())'"
    )


def test_a_case_of_another_schema_version_is_refused_clearly(tmp_path: Path) -> None:
    p = tmp_path / "old.duckdb"
    with open_case(p) as case:
        case.sql("UPDATE schema_info SET value = '0' WHERE key = 'schema_version'")
    with pytest.raises(CaseError, match="schema version 0"):
        open_case(p)


def _limit(case: forensics.Case) -> str:
    return str(case.sql("SELECT current_setting('memory_limit')").fetchall()[0][0])


@pytest.mark.parametrize(
    ("load", "query", "reserve", "during", "after"),
    [
        ("512MiB", "2GiB", 0, "512.0 MiB", "2.0 GiB"),
        ("512MiB", "2GiB", 64 << 20, "448.0 MiB", "2.0 GiB"),
        ("512MiB", "1GiB", 300 << 20, "512.0 MiB", "1.0 GiB"),  # a reserve over half the budget is ignored
    ],
)
def test_loads_run_under_the_load_budget_and_queries_under_the_query_limit(
    load: str, query: str, reserve: int, during: str, after: str
) -> None:
    case = open_case(":memory:", memory_limit=load, query_memory_limit=query)
    assert _limit(case) == after
    with case.loading(reserve_bytes=reserve):
        assert _limit(case) == during
    assert _limit(case) == after
    with pytest.raises(RuntimeError), case.loading():
        raise RuntimeError("a loader failed")
    assert _limit(case) == after


@pytest.mark.parametrize(
    ("query", "cap", "during"),
    [
        ("2GiB", 640_000_000, "610.3 MiB"),  # the report's budget under a larger query limit
        ("256MiB", 640_000_000, "256.0 MiB"),  # a lower case limit stays
    ],
)
def test_capped_queries_run_under_the_lower_limit_and_the_query_limit_comes_back(
    query: str, cap: int, during: str
) -> None:
    case = open_case(":memory:", query_memory_limit=query)
    after = _limit(case)
    with case.capped(cap):
        assert _limit(case) == during
    assert _limit(case) == after
    with pytest.raises(RuntimeError), case.capped(cap):
        raise RuntimeError("a report query failed")
    assert _limit(case) == after


def test_gateway_ingest_runs_under_the_load_budget_less_its_own_reserve(monkeypatch: pytest.MonkeyPatch) -> None:
    from forensics.sources import gateway
    from forensics.sources.gateway import ingest

    seen: list[str] = []
    case = open_case(":memory:", memory_limit="512MiB", query_memory_limit="2GiB")
    real = ingest.install_macros

    def spy(con: Any) -> None:  # runs inside the loader's budget
        seen.append(_limit(case))
        real(con)

    monkeypatch.setattr(ingest, "install_macros", spy)
    case.ingest_gateway(Path(__file__).parent / "fixtures" / "gateway" / "envoy_new.ndjson")
    assert gateway.LOAD_RESERVE_BYTES == 160 << 20
    assert seen == ["352.0 MiB"] and _limit(case) == "2.0 GiB"


def test_the_report_runs_each_input_query_once(sample_case: forensics.Case, monkeypatch: pytest.MonkeyPatch) -> None:
    from forensics import sqlfiles
    from forensics.outputs.report import report_data

    runs: list[str] = []
    real = sqlfiles._run_query

    def spy(con: Any, name: str, params: dict[str, Any], memo: Any) -> Any:
        runs.append(name)
        return real(con, name, params, memo)

    monkeypatch.setattr(sqlfiles, "_run_query", spy)
    report_data(sample_case)
    # without reuse: affected_requests 5 times (itself, and inside tenants, sources, notifications)
    assert {n: runs.count(n) for n in sqlfiles.input_queries()} == dict.fromkeys(sqlfiles.input_queries(), 1)
    runs.clear()
    forensics.affected_tenants(sample_case).fetchall()
    assert runs == ["affected_tenants", "affected_requests"]  # outside the report nothing is kept


def test_an_ingest_inside_a_reusing_scope_is_not_answered_from_before_it() -> None:
    from forensics.sample import sample_dir

    case = open_case(":memory:")
    case.ingest_engine(sample_dir() / "engine", tz="Asia/Singapore")
    with case.reusing():
        before = forensics.affected_tenants(case).fetchall()
        case.ingest_gateway(sample_dir() / "gateway")
        inside = forensics.affected_tenants(case).fetchall()
    assert inside == forensics.affected_tenants(case).fetchall() != before


def test_a_reused_query_that_fails_while_it_runs_is_a_query_error(sample_case_path: Path, tmp_path: Path) -> None:
    # the memo materialises an input query at once, so DuckDB's error surfaces inside run_query:
    # it must be the same QueryError an unmemoised query raises, never a bare duckdb.Error
    import shutil

    from forensics.errors import QueryError

    path = tmp_path / "case.duckdb"
    shutil.copy(sample_case_path, path)
    case = open_case(path)
    case.ensure_facts()
    with case.reusing():
        case.con.execute("SET memory_limit='2MB'")
        with pytest.raises(QueryError, match="query affected_requests failed"):
            forensics.affected_requests(case)
