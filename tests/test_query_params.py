"""Every query file: declared params == $names used in the SQL; the Python function's keywords ==
its declared params and those of its inputs (``-- input: <query>``, recursively).

leak_sources and affected_tenants read the result of affected_requests (no copied blocks).
The parameter-free blocks (evidence paths, node last-seen times, start periods) are views of
``forensics/schema.sql``.
"""

from __future__ import annotations

import inspect
import re

import pytest

import forensics
from forensics import analysis
from forensics.cli import ANALYSIS_COMMANDS
from forensics.errors import QueryError
from forensics.sqlfiles import load_query, query_names, run_query

NAMES = query_names()


def test_every_query_has_a_function_and_a_command() -> None:
    assert set(NAMES) == set(ANALYSIS_COMMANDS.values())
    for name in NAMES:
        assert callable(getattr(analysis, name))
        assert getattr(forensics, name) is getattr(analysis, name)


def _all_params(name: str) -> set[str]:
    q = load_query(name)
    out = set(q.param_names)
    for inp in q.inputs:
        out |= _all_params(inp)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_declared_equals_used_and_keywords_cover_inputs(name: str) -> None:
    q = load_query(name)
    declared = set(q.param_names)
    assert declared == q.used_params(), f"{name}: declared vs used"
    assert all(inp in NAMES for inp in q.inputs), f"{name}: unknown input"
    for inp in q.inputs:
        assert re.search(rf"\b{inp}_result\b", q.sql), f"{name}: input {inp} not read"
    sig = inspect.signature(getattr(analysis, name))
    keywords = {p.name for p in sig.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert keywords == _all_params(name), f"{name}: function keywords vs params of it and its inputs"
    assert set(q.all_param_names()) == _all_params(name)
    assert next(iter(sig.parameters)) == "case"


def test_affected_tenants_reads_affected_requests() -> None:
    q = load_query("affected_tenants")
    assert q.inputs == ("affected_requests",)
    assert q.param_names == []


def test_run_query_keeps_the_strict_parameter_check() -> None:
    import duckdb

    con = duckdb.connect()
    with pytest.raises(QueryError, match="declares parameters"):
        run_query(con, "affected_tenants", {})
    with pytest.raises(QueryError, match="declares parameters"):
        run_query(con, "affected_tenants", {"limit_tokens": None, "start": None, "end": None,
                                            "node": None, "window_s": 600})


@pytest.mark.parametrize("name", NAMES)
def test_header_purpose_and_descriptions(name: str) -> None:
    q = load_query(name)
    first = q.sql.splitlines()[0]
    assert first.startswith(f"-- {name}: "), first
    assert all(p.description for p in q.params)


@pytest.mark.parametrize("name", ["affected_tenants", "leak_sources"])
def test_queries_on_the_affected_set_read_it_instead_of_copying_it(name: str) -> None:
    """Regression: leak_sources carried a ~385-line copy of affected_requests' core."""
    q = load_query(name)
    assert q.inputs == ("affected_requests",)
    assert not re.search(r"^(exposed|legs|chains|classified) AS \(", q.sql, flags=re.M)


@pytest.mark.parametrize("view", ["evidence_paths", "node_last_seen", "start_periods"])
def test_shared_views_are_used_not_copied(view: str) -> None:
    from forensics.schema import schema_sql

    assert f"CREATE OR REPLACE VIEW {view} AS" in schema_sql()
    for name in NAMES:
        sql = load_query(name).sql
        for old in ("ev_bounds", "ev_common", "node_last", "judged"):
            assert not re.search(rf"^{old}(?: \([^)]*\))? AS \(", sql, flags=re.M), (name, old)
