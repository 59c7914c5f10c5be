"""The derived tables (forensics.facts, queries/facts/): one definition of each shared fact, kept in
step with the evidence they are built from."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import ROOT, Synth, fleet, t

import forensics
from forensics import facts
from forensics.errors import CaseError, QueryError

FACT_FILES = sorted(p.stem for p in (ROOT / "queries" / "facts").glob("*.sql"))


def test_every_fact_file_is_built_in_order() -> None:
    assert sorted(facts.FACTS) == FACT_FILES
    built: set[str] = set()
    for name in facts.FACTS:
        sql = facts.fact_sql(name)
        assert sql.splitlines()[0].startswith(f"-- {name}: ")
        reads = re.search(r"^-- reads: (.+)$", sql, flags=re.M)
        assert reads, f"{name}: no '-- reads:' line"
        for dep in (d.strip() for d in reads.group(1).split(",")):
            if dep in facts.FACTS:
                assert dep in built, f"{name} reads {dep}, built after it"
        assert facts.stored_as(name) in ("table", "view")
        built.add(name)


def test_facts_follow_the_evidence(synth: Synth) -> None:
    fleet(synth)
    synth.pd_request("a", t(10), tokens=700_000, rejected=True)
    assert len(forensics.affected_requests(synth.case).df()) == 1
    # rows added after a query: the next query sees them (the derived tables are rebuilt)
    synth.pd_request("b", t(20), tokens=700_000, rejected=True)
    assert len(forensics.affected_requests(synth.case).df()) == 2
    assert facts.is_fresh(synth.case)
    assert not synth.case.refresh()
    assert synth.case.refresh(force=True)


def test_health_checks_are_what_the_loader_flagged(synth: Synth) -> None:
    """request_legs trusts engine_requests.is_health_check: the one place the flag is read."""
    fleet(synth)
    synth.req("prefill-0", "received", "ordinary-rid", t(1), bootstrap_room=77, is_health_check=True)
    synth.req("prefill-0", "received", "p-real", t(2), bootstrap_room=78, bootstrap_host="10.0.0.1")
    # a row nobody flagged (NULL: a case written by another tool) is a request, whatever its rid:
    # the rule is the loader's alone, and an unknown flag never hides a request
    synth.req("prefill-0", "received", "HEALTH_CHECK_unflagged", t(3), bootstrap_room=79, is_health_check=None)
    facts.refresh(synth.case)
    legs = {r[0] for r in synth.case.sql("SELECT rid FROM request_legs").fetchall()}
    assert legs == {"p-real", "HEALTH_CHECK_unflagged"}


def _stale_copy(sample_case_path: Path, tmp_path: Path) -> Path:
    path = tmp_path / "case.duckdb"
    shutil.copyfile(sample_case_path, path)
    with forensics.open_case(path) as case:
        case.con.execute("DELETE FROM gateway_requests WHERE line_no = 2")
        # left stale on purpose: close without the refresh a writable case does
        case.con.close()
        case._closed = True
    return path


def test_a_read_only_case_with_stale_facts_is_answered_from_facts_built_in_memory(
    sample_case_path: Path, tmp_path: Path
) -> None:
    path = _stale_copy(sample_case_path, tmp_path)
    with forensics.open_case(path, read_only=True) as case:
        assert not facts.is_fresh(case)
        rows = forensics.affected_requests(case).df()
        assert len(rows) > 0 and facts.is_fresh(case)
        with pytest.raises(CaseError, match="read-only"):
            case.refresh(force=True)
    # nothing was written: the file's own tables are still stale until a writable refresh
    res = subprocess.run([sys.executable, "-m", "forensics", "refresh", str(path)],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert "rebuilt" in res.stdout
    with forensics.open_case(path, read_only=True) as case:
        assert facts.is_fresh(case)
        assert forensics.affected_requests(case).df().equals(rows)
    res = subprocess.run([sys.executable, "-m", "forensics", "refresh", str(path)],
                         capture_output=True, text=True, check=False)
    assert "already match the evidence" in res.stdout


def test_closing_a_writable_case_brings_the_facts_up_to_date(sample_case_path: Path, tmp_path: Path) -> None:
    path = tmp_path / "case.duckdb"
    shutil.copyfile(sample_case_path, path)
    with forensics.open_case(path) as case:
        case.con.execute("DELETE FROM engine_requests WHERE kind = 'metrics'")
    with forensics.open_case(path, read_only=True) as case:
        assert facts.is_fresh(case)


def test_a_fact_that_changed_kind_is_replaced(synth: Synth) -> None:
    facts.refresh(synth.case)
    synth.case.con.execute("DROP VIEW requests")
    synth.case.con.execute("CREATE TABLE requests AS SELECT 1 AS x")
    assert not facts.is_fresh(synth.case)
    assert facts.refresh(synth.case)
    kind = synth.case.sql(
        "SELECT table_type FROM information_schema.tables WHERE table_name = 'requests'").fetchall()
    assert kind == [("VIEW",)]


def test_a_failed_refresh_leaves_the_case_marked_stale_and_the_next_one_builds(
        synth: Synth, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fact is committed on its own: a failure names the fact and leaves the marker removed."""
    fleet(synth)
    assert facts.refresh(synth.case)
    real = facts.fact_sql

    def broken(name: str) -> str:
        return real(name) + (" WHERE no_such_column = 1" if name == "request_chains" else "")

    monkeypatch.setattr(facts, "fact_sql", broken)
    with pytest.raises(QueryError, match="request_chains"):
        facts.refresh(synth.case, force=True)
    monkeypatch.undo()
    assert not facts.is_fresh(synth.case)
    assert facts.refresh(synth.case) and facts.is_fresh(synth.case)


class _InterruptedIn:
    """The case's connection, where building one fact is interrupted as by Ctrl-C (DuckDB has then
    rolled the transaction back itself)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, fact: str) -> None:
        self._con, self._fact = con, fact

    def execute(self, query: str, *args: object) -> duckdb.DuckDBPyConnection:
        if query.startswith(f"CREATE OR REPLACE TABLE {self._fact} AS"):
            self._con.execute("ROLLBACK")
            raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")
        return self._con.execute(query, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._con, name)


def test_an_interrupted_refresh_is_an_interrupt_not_a_failed_fact(synth: Synth) -> None:
    """Ctrl-C while a fact is built: KeyboardInterrupt (not "cannot rollback", a QueryError); case stale."""
    fleet(synth)
    assert facts.refresh(synth.case)
    real = synth.case.con
    synth.case.con = _InterruptedIn(real, "request_chains")  # type: ignore[assignment]
    try:
        with pytest.raises(KeyboardInterrupt):
            facts.refresh(synth.case, force=True)
    finally:
        synth.case.con = real
    assert not facts.is_fresh(synth.case)
    assert facts.refresh(synth.case) and facts.is_fresh(synth.case)


def test_the_facts_are_built_under_the_load_budget(synth: Synth, monkeypatch: pytest.MonkeyPatch) -> None:
    """The refresh is a load: under the load memory budget (not the queries' larger limit), then back."""
    case = synth.case
    with case.loading(facts.REFRESH_RESERVE_BYTES):
        budget = case.sql("SELECT current_setting('memory_limit')").fetchall()[0][0]
    after = case.sql("SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert budget != after
    real = facts.fact_sql
    monkeypatch.setattr(facts, "fact_sql", lambda name: (  # the same table, with the setting it was built under
        f"SELECT *, current_setting('memory_limit') AS m FROM (\n{real(name)}\n)" if name == "request_keys"
        else real(name)))
    fleet(synth)
    synth.pd_request("x1", t(10), tokens=1000)
    assert facts.refresh(case, force=True)
    assert case.sql("SELECT DISTINCT m FROM request_keys").fetchall() == [(budget,)]
    assert case.sql("SELECT current_setting('memory_limit')").fetchall()[0][0] == after
