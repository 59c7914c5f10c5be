"""The Python API: every analysis function returns a Relation whose ``.arrow()`` is a whole table;
a case path already open in this process shares that connection (read-only and writable alike,
except a writable open of a file open read-only: a clear error)."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import forensics
from forensics import analysis
from forensics.case import open_case, replace_case
from forensics.errors import CaseError
from forensics.relation import Relation
from forensics.sqlfiles import query_names

#: the analysis functions: every name of forensics.__all__ that is a query of queries/
FUNCTIONS = sorted(set(forensics.__all__) & set(query_names()))


def test_every_query_is_an_exported_function() -> None:
    assert query_names() == FUNCTIONS


@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_function_returns_a_relation_whose_arrow_is_a_table(sample_case: forensics.Case, name: str) -> None:
    rel = getattr(forensics, name)(sample_case)
    assert type(rel) is Relation
    table = rel.arrow()
    assert isinstance(table, pa.Table)
    assert table.column_names == rel.columns
    # regression: .arrow() was a RecordBatchReader; left unread it made the next query on the case
    # raise "connection has an open result"
    assert forensics.impact_summary(sample_case).fetchall()
    assert table.num_rows == len(rel.fetchall())
    # what it returns is wrapped again, so .arrow() stays a table after a sort or a filter
    assert type(rel.order(f'"{rel.columns[0]}"')) is Relation
    assert isinstance(rel.limit(1).arrow(), pa.Table)


def test_a_big_result_left_unread_does_not_block_the_case(sample_case: forensics.Case) -> None:
    chain = forensics.request_chain(sample_case)
    table = chain.arrow()                      # more rows than one Arrow batch of DuckDB's stream
    assert table.num_rows > 2048
    assert forensics.pool_audit(sample_case).limit(1).fetchall()
    assert pa.table(chain).num_rows == table.num_rows   # the Arrow stream protocol reads it whole too


def test_the_stream_is_still_there_by_name() -> None:
    con = duckdb.connect()
    reader = Relation(con.sql("SELECT range AS i FROM range(100000)")).to_arrow_reader(1000)
    assert isinstance(reader, pa.RecordBatchReader)
    assert sum(b.num_rows for b in reader) == 100000       # read to the end: the connection is free
    assert con.sql("SELECT 1").fetchall() == [(1,)]


# -- one connection per case file in a process --------------------------------------------------


@pytest.fixture
def case_file(tmp_path: Path) -> Path:
    p = tmp_path / "c.duckdb"
    open_case(p).close()
    return p


@pytest.mark.parametrize(
    ("first_read_only", "second_read_only", "shared"),
    [
        (False, False, True),    # two writable cases on one file: one connection
        (False, True, True),     # a read-only case on a file open writable: it reads through it
        (True, True, True),
        (True, False, False),    # writable while open read-only: a clear error
    ],
)
def test_opening_an_open_case_shares_its_connection(
    case_file: Path, first_read_only: bool, second_read_only: bool, shared: bool
) -> None:
    with open_case(case_file, read_only=first_read_only) as first:
        if not shared:
            with pytest.raises(CaseError, match="already open read-only in this process"):
                open_case(case_file, read_only=second_read_only)
            return
        second = open_case(case_file, read_only=second_read_only)
        assert second.con is first.con
        assert second.read_only is second_read_only
        second.close()
        # closing one leaves the other open
        assert first.sql("SELECT count(*) FROM evidence_files").fetchall() == [(0,)]
    # the last one closed the connection: the file opens with either mode again
    with open_case(case_file, read_only=not first_read_only) as again:
        assert again.con is not first.con


def test_a_read_only_case_on_a_writable_connection_refuses_to_ingest(case_file: Path) -> None:
    with (open_case(case_file), open_case(case_file, read_only=True) as reader,
          pytest.raises(CaseError, match="read-only")):
        reader.ingest_gateway([str(case_file)])


def test_the_same_file_by_another_path_is_the_same_case(case_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(case_file.parent)
    with open_case(case_file) as absolute, open_case(os.path.relpath(case_file)) as relative:
        assert relative.con is absolute.con


def test_a_query_by_path_uses_the_open_case(case_file: Path) -> None:
    """Regression: a query given the path of a case open writable raised DuckDB's 'different configuration'."""
    with open_case(case_file) as case:
        assert forensics.evidence_gaps(case_file).fetchall() == []
        assert forensics.evidence_gaps(str(case_file)).relation is not None
        case.sql("SELECT 1").fetchall()


def test_a_read_only_query_on_a_writable_connection_refreshes_the_file(case_file: Path) -> None:
    """Stale derived tables are rebuilt in the file (as the writer would), not as in-memory copies
    that would hide the file's tables from the writer."""
    from forensics import facts

    with open_case(case_file) as case:
        case.sql("UPDATE schema_info SET value = 'stale' WHERE key = 'facts_built_from'")
        assert not facts.is_fresh(case)
        forensics.request_chain(str(case_file)).fetchall()
        assert facts.is_fresh(case)
        assert case.sql("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchall() == [(0,)]


def test_a_closed_case_says_so(case_file: Path) -> None:
    case = open_case(case_file)
    case.close()
    with pytest.raises(CaseError, match="is closed"):
        case.sql("SELECT 1")
    with pytest.raises(CaseError, match="is closed"):
        analysis.evidence_gaps(case)


def test_a_case_open_in_this_process_is_not_replaced(case_file: Path) -> None:
    with open_case(case_file, read_only=True), pytest.raises(CaseError, match="open in this process"):
        replace_case(case_file)
    replace_case(case_file)
    assert not case_file.exists()


def test_a_connection_opened_behind_the_toolkit_is_a_clear_error(case_file: Path) -> None:
    raw = duckdb.connect(str(case_file), read_only=True)
    try:
        with pytest.raises(CaseError, match="not opened with open_case"):
            open_case(case_file)
    finally:
        raw.close()
