"""The derived tables (forensics.facts, queries/facts/): one definition of each shared fact, kept in
step with the evidence they are built from."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import ROOT, SAMPLE, Synth, fleet, t

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
    """Each fact is committed with its marker on its own: a failure names the fact and leaves it and
    the facts after it stale; the next refresh builds those."""
    fleet(synth)
    assert facts.refresh(synth.case)
    synth.pd_request("late", t(30), tokens=1000)  # new engine rows: request_chains is due
    real = facts.fact_sql

    def broken(name: str) -> str:
        return real(name) + (" WHERE no_such_column = 1" if name == "request_chains" else "")

    monkeypatch.setattr(facts, "fact_sql", broken)
    with pytest.raises(QueryError, match="request_chains"):
        facts.refresh(synth.case)
    monkeypatch.undo()
    assert "request_chains" in facts.stale(synth.case)
    assert "request_legs" not in facts.stale(synth.case)  # built before the failure, kept
    assert facts.refresh(synth.case) and facts.is_fresh(synth.case)


class _InterruptedIn:
    """The case's connection, where building one fact is interrupted as by Ctrl-C (DuckDB has then
    rolled the transaction back itself)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, fact: str) -> None:
        self._con, self._fact = con, fact

    def execute(self, query: str, *args: object) -> duckdb.DuckDBPyConnection:
        if query.startswith(f"CREATE OR REPLACE TABLE {self._fact} "):  # AS ..., or (columns) then INSERT
            self._con.execute("ROLLBACK")
            raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")
        return self._con.execute(query, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._con, name)


def test_an_interrupted_refresh_is_an_interrupt_not_a_failed_fact(synth: Synth) -> None:
    """Ctrl-C while a fact is built: KeyboardInterrupt (not "cannot rollback", a QueryError); case stale."""
    fleet(synth)
    assert facts.refresh(synth.case)
    synth.pd_request("late", t(30), tokens=1000)
    real = synth.case.con
    synth.case.con = _InterruptedIn(real, "request_chains")  # type: ignore[assignment]
    try:
        with pytest.raises(KeyboardInterrupt):
            facts.refresh(synth.case)
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


# -- only the facts whose evidence changed are rebuilt ------------------------------------------------


def _table_refs(con: duckdb.DuckDBPyConnection, select: str) -> set[str]:
    """The tables and views one SELECT reads, by DuckDB's own parser (its CTEs left out)."""
    tree = json.loads(con.execute("SELECT json_serialize_sql($s)", {"s": select}).fetchall()[0][0])
    assert not tree["error"], tree
    tables: set[str] = set()
    ctes: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE":
                tables.add(node["table_name"])
            if isinstance(node.get("cte_map"), dict):
                ctes.update(e["key"] for e in node["cte_map"]["map"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(tree)
    return tables - ctes


@pytest.mark.parametrize("name", facts.FACTS)
def test_a_facts_reads_header_lists_every_table_its_sql_reads(name: str) -> None:
    """The header decides what a fact is rebuilt after: a table read but not listed would leave it stale."""
    con = duckdb.connect()
    assert _table_refs(con, facts.fact_sql(name)) == set(facts.fact_reads(name))


def test_every_schema_view_is_listed_with_the_tables_it_reads() -> None:
    case = forensics.open_case(":memory:")
    views = case.sql("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND NOT temporary").fetchall()
    found = {v: _table_refs(case.con, re.sub(r"^CREATE VIEW \S+ AS\s*", "", sql, flags=re.I))
             for v, sql in views if v not in facts.FACTS}
    assert found == {v: set(reads) for v, reads in facts.VIEW_READS.items()}


def _oids(case: forensics.Case) -> dict[str, int]:
    """Each fact's catalog id: a new one each time it is rebuilt (CREATE OR REPLACE)."""
    rows = case.sql("SELECT table_name, table_oid FROM duckdb_tables() "
                    "UNION ALL SELECT view_name, view_oid FROM duckdb_views()").fetchall()
    return {n: o for n, o in rows if n in facts.FACTS}


def _rows(case: forensics.Case) -> dict[str, list[tuple[object, ...]]]:
    return {name: case.sql(f"SELECT * FROM {name} ORDER BY ALL").fetchall() for name in facts.FACTS}


ENGINE = SAMPLE / "engine"
GATEWAY = SAMPLE / "gateway"
#: What a gateway ingest leaves as it is: the facts derived from no table it writes.
ENGINE_ONLY = {"node_activity", "request_legs", "rejections_by_rid", "transfer_failures", "request_chains"}
#: What a router log leaves too: it adds no request records, start-ups or rejection lines.
NO_LEGS = {"gateway_top", "request_legs", "rejections_by_rid"}
#: Ingests one after the other: (kind, paths, the facts it must leave as they are).
STEPS: dict[str, list[tuple[str, list[Path], set[str]]]] = {
    "gateway, engine, gateway, router": [
        ("gateway", [GATEWAY / "litellm"], set()),
        ("engine", [ENGINE / "prefill-0", ENGINE / "decode-0"], {"gateway_top"}),
        ("gateway", [GATEWAY / "cloudflare-http"], ENGINE_ONLY),
        ("engine", [ENGINE / "router"], NO_LEGS),
    ],
    "engine, gateway, router, gateway": [
        ("engine", [ENGINE / "prefill-1", ENGINE / "decode-1"], set()),
        ("gateway", [GATEWAY / "cloudflare-http"], ENGINE_ONLY),
        ("engine", [ENGINE / "router"], NO_LEGS),
        ("gateway", [GATEWAY / "litellm"], ENGINE_ONLY),
    ],
}


def _ingest(case: forensics.Case, kind: str, paths: list[Path]) -> None:
    if kind == "gateway":
        case.ingest_gateway(paths)
    else:
        case.ingest_engine([f"{p.name}={p}" for p in paths], tz="Asia/Singapore")


@pytest.mark.parametrize("steps", list(STEPS), ids=list(STEPS))
def test_each_ingest_rebuilds_only_the_facts_its_tables_feed_and_they_equal_a_full_rebuild(steps: str) -> None:
    """A gateway ingest leaves the engine-only facts as they are (not rebuilt: same catalog ids), an
    engine ingest gateway_top (the first ingest builds all); after every ingest each fact equals a
    forced full refresh, row for row."""
    case = forensics.open_case(":memory:", now=dt.datetime(2026, 10, 1))
    for i, (kind, paths, kept) in enumerate(STEPS[steps]):
        before = _oids(case)
        _ingest(case, kind, paths)
        after = _oids(case)
        rebuilt = {n for n in facts.FACTS if before.get(n) != after[n]}
        assert rebuilt == set(facts.FACTS) - kept, (i, kind)
        incremental = _rows(case)
        assert facts.refresh(case, force=True)
        assert _rows(case) == incremental, (i, kind)
    assert len(incremental["request_keys"]) > 0 and len(incremental["chain_matches"]) > 0


def test_an_interrupted_refresh_resumes_to_the_result_of_a_full_rebuild() -> None:
    """Ctrl-C in the middle of the refresh the first query after an ingest runs: the facts built
    before it stay, the next refresh builds the rest (only those), and every fact equals a forced
    full rebuild."""
    case = forensics.open_case(":memory:", now=dt.datetime(2026, 10, 1))
    _ingest(case, "engine", [ENGINE / "prefill-0", ENGINE / "decode-0"])
    _ingest(case, "gateway", [GATEWAY / "litellm"])
    real = case.con
    case.con = _InterruptedIn(real, "match_candidates")  # type: ignore[assignment]
    try:
        with pytest.raises(KeyboardInterrupt):
            case.sql("SELECT count(*) FROM requests")
    finally:
        case.con = real
    assert facts.stale(case) == ["match_candidates", "chain_matches", "request_keys", "requests"]
    assert facts.refresh(case)
    resumed = _rows(case)
    assert facts.refresh(case, force=True)
    assert _rows(case) == resumed
    assert len(resumed["match_candidates"]) > 0


def _count_builds(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often each fact is built from now on (``facts._create`` wrapped)."""
    built: dict[str, int] = {}
    create = facts._create

    def counting(con: duckdb.DuckDBPyConnection, name: str, **kw: bool) -> None:
        built[name] = built.get(name, 0) + 1
        create(con, name, **kw)

    monkeypatch.setattr(facts, "_create", counting)
    return built


@pytest.mark.parametrize("first_reader", ["sql", "run_query", "tables", "analysis", "close"])
def test_ingests_in_a_row_build_each_fact_once_before_the_first_reader(
        first_reader: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Three ingests build no fact; the first reader (``sql``, ``run_query``, ``tables``, an
    analysis function) or the close builds each fact exactly once, and what it reads is as fresh as a full rebuild."""
    built = _count_builds(monkeypatch)
    case = forensics.open_case(tmp_path / "case.duckdb", now=dt.datetime(2026, 10, 1))
    _ingest(case, "gateway", [GATEWAY / "litellm"])
    _ingest(case, "gateway", [GATEWAY / "cloudflare-http"])
    _ingest(case, "engine", [ENGINE / "prefill-0", ENGINE / "decode-0"])
    assert built == {}
    if first_reader == "sql":
        n = case.sql("SELECT count(*) FROM request_chains").fetchall()[0][0]
        assert n > 0
    elif first_reader == "run_query":
        case.run_query("pool_audit", {"node": None}).fetchall()
    elif first_reader == "tables":
        assert "request_chains" in case.tables()
    elif first_reader == "analysis":
        forensics.affected_requests(case).fetchall()
    case.close()
    assert built == {name: 1 for name in facts.FACTS}
    with forensics.open_case(tmp_path / "case.duckdb", read_only=True) as reopened:
        assert facts.is_fresh(reopened)


def test_a_read_only_case_builds_in_memory_only_its_stale_facts(sample_case_path: Path, tmp_path: Path) -> None:
    """Gateway rows removed: the facts derived from no gateway table (the engine-only ones and
    chain_evidence) are read from the file, the rest built in memory (temporary), and every fact
    equals the file's own after a writable refresh."""
    path = _stale_copy(sample_case_path, tmp_path)
    with forensics.open_case(path, read_only=True) as case:
        assert facts.stale(case) == [n for n in facts.FACTS if n not in ENGINE_ONLY | {"chain_evidence"}]
        facts.ensure(case)
        assert facts.is_fresh(case)
        temporary = {r[0] for r in case.sql("SELECT table_name FROM duckdb_tables() WHERE temporary "
                                            "UNION ALL SELECT view_name FROM duckdb_views() WHERE temporary AND NOT internal").fetchall()}
        assert temporary == set(facts.FACTS) - ENGINE_ONLY - {"chain_evidence"}
        in_memory = _rows(case)
    with forensics.open_case(path) as case:
        assert facts.refresh(case)
        assert _rows(case) == in_memory


#: fact -> (its '-- uncompressed:' ids, a string column of it left to the compression DuckDB picks)
UNCOMPRESSED: dict[str, tuple[list[str], str]] = {
    "gateway_top": (["request_id", "header_request_id"], "tenant_id"),
    "request_legs": (["rid", "header_request_id"], "node"),
    "request_chains": (["header_request_id", "prefill_rid", "decode_rid"], "prefill_node"),
}


@pytest.mark.parametrize("name", list(UNCOMPRESSED))
def test_the_ids_of_a_fact_are_stored_uncompressed(name: str, tmp_path: Path) -> None:
    """Its '-- uncompressed:' header: the table is declared with those columns uncompressed, the rows as its SELECT's."""
    ids, other = UNCOMPRESSED[name]
    assert facts.uncompressed(name) == ids
    with forensics.open_case(tmp_path / "case.duckdb", now=dt.datetime(2026, 10, 1)) as case:
        _ingest(case, "gateway", [GATEWAY / "litellm"])
        _ingest(case, "engine", [ENGINE / "prefill-0", ENGINE / "decode-0"])
        case.refresh()  # built before the checkpoint: storage_info shows a table's checkpointed segments
        case.con.execute("CHECKPOINT")
        stored = dict(case.sql(f"SELECT column_name, min(compression) FROM pragma_storage_info('{name}') "
                               "WHERE segment_type = 'VARCHAR' GROUP BY ALL").fetchall())
        assert [stored[c] for c in ids] == ["Uncompressed"] * len(ids)
        assert stored[other] != "Uncompressed"
        select = case.sql(f"SELECT * FROM ({facts.fact_sql(name)}) ORDER BY ALL").fetchall()
        assert case.sql(f"SELECT * FROM {name} ORDER BY ALL").fetchall() == select


def test_an_uncompressed_column_the_select_lacks_is_named(synth: Synth, monkeypatch: pytest.MonkeyPatch) -> None:
    real = facts.fact_sql
    monkeypatch.setattr(facts, "fact_sql", lambda name: (
        real(name).replace("-- uncompressed: request_id,", "-- uncompressed: no_such_id,") if name == "gateway_top"
        else real(name)))
    with pytest.raises(QueryError, match="no_such_id, not a column"):
        facts.refresh(synth.case, force=True)


def test_a_fact_that_runs_out_of_memory_under_the_load_budget_is_built_under_the_query_limit(
        sample_case_path: Path, tmp_path: Path) -> None:
    # at 1 M requests request_chains of an engine-only case ran out of memory under the load budget
    # once in four runs, and the ingest's refresh failed; here the budget is made too small for
    # request_legs and node_activity on the sample (they fail under 32 MB without the retry)
    path = tmp_path / "case.duckdb"
    shutil.copyfile(sample_case_path, path)
    with forensics.open_case(path) as case:
        expected = {f: case.con.execute(f"SELECT * FROM {f} ORDER BY ALL").fetchall() for f in ("request_legs",
                                                                                              "node_activity")}
        query_limit = case.con.execute("SELECT current_setting('memory_limit')").fetchall()
        case.memory_limit = "24MB"
        assert case.refresh(force=True)
        assert case.con.execute("SELECT current_setting('memory_limit')").fetchall() == query_limit
        for fact, rows in expected.items():
            assert case.con.execute(f"SELECT * FROM {fact} ORDER BY ALL").fetchall() == rows
        assert not facts._stale(case.con, facts._keys(case.con))


@pytest.mark.parametrize(
    ("fails", "attempts"),
    [
        # (which attempts run out of memory, the settings each attempt of request_chains ran under)
        (set(), [("budget", "threads")]),
        ({1}, [("budget", "threads"), ("budget", "1")]),
        ({1, 2}, [("budget", "threads"), ("budget", "1"), ("query", "threads")]),
    ],
    ids=["fits", "one-thread-fits", "only-the-query-limit-fits"],
)
def test_a_fact_out_of_memory_is_built_on_one_thread_under_the_budget_before_the_query_limit(
        sample_case_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: set[int],
        attempts: list[tuple[str, str]]) -> None:
    # at 1 M requests request_chains ran out of memory under the load budget one run in two, and
    # the query limit's retry peaked at 1.7 GiB; one thread under the same budget fits (696 MiB)
    path = tmp_path / "case.duckdb"
    shutil.copyfile(sample_case_path, path)
    with forensics.open_case(path) as case:
        expected = case.con.execute("SELECT * FROM request_chains ORDER BY ALL").fetchall()
        case.con.execute("SET threads = 2")  # (a one-core machine's default would read as one thread)
        threads = case.con.execute("SELECT current_setting('threads')").fetchone()
        query_limit = case.con.execute("SELECT current_setting('memory_limit')").fetchone()
        seen: list[tuple[str, str]] = []
        real = facts._build

        def build(con: Any, name: str, *args: Any) -> None:
            if name == "request_chains":
                limit, n = con.execute("SELECT current_setting('memory_limit'), current_setting('threads')").fetchone()
                seen.append(("query" if (limit,) == query_limit else "budget",
                             "threads" if (n,) == threads else str(n)))
                if len(seen) in fails:
                    raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block")
            real(con, name, *args)

        monkeypatch.setattr(facts, "_build", build)
        assert case.refresh(force=True)
        assert seen == attempts
        assert case.con.execute("SELECT * FROM request_chains ORDER BY ALL").fetchall() == expected
        assert case.con.execute("SELECT current_setting('threads')").fetchone() == threads
        assert case.con.execute("SELECT current_setting('memory_limit')").fetchone() == query_limit
