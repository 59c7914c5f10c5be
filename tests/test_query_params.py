"""Every query file: declared params == $names used in the SQL == the Python function's keywords.

Also: the CTE blocks shared between query files (file-name helper, node periods, the affected-request
body) stay identical copies, since each file must stand alone to travel to another SQL engine.
"""

from __future__ import annotations

import inspect
import re

import pytest

import forensics
from forensics import analysis
from forensics.cli import ANALYSIS_COMMANDS
from forensics.sqlfiles import load_query, query_names

NAMES = query_names()


def test_every_query_has_a_function_and_a_command() -> None:
    assert set(NAMES) == set(ANALYSIS_COMMANDS.values())
    for name in NAMES:
        assert callable(getattr(analysis, name))
        assert getattr(forensics, name) is getattr(analysis, name)


@pytest.mark.parametrize("name", NAMES)
def test_declared_equals_used_equals_keywords(name: str) -> None:
    q = load_query(name)
    declared = set(q.param_names)
    assert declared == q.used_params(), f"{name}: declared vs used"
    sig = inspect.signature(getattr(analysis, name))
    keywords = {p.name for p in sig.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert declared == keywords, f"{name}: declared vs function keywords"
    assert next(iter(sig.parameters)) == "case"


@pytest.mark.parametrize("name", NAMES)
def test_header_purpose_and_descriptions(name: str) -> None:
    q = load_query(name)
    first = q.sql.splitlines()[0]
    assert first.startswith(f"-- {name}: "), first
    assert all(p.description for p in q.params)


def _cte(sql: str, name: str) -> str:
    """The text of CTE ``name`` (from its 'name AS (' line to the next top-level CTE)."""
    m = re.search(rf"^{name}(?: \([^)]*\))? AS \(\n.*?^\)", sql, flags=re.S | re.M)
    assert m, name
    return m.group(0)


SHARED = {
    "ev_common": ["pool_audit", "request_chain", "affected_requests", "affected_tenants",
                  "leak_sources", "hidden_errors"],
    "judged": ["pool_audit", "exposure_windows", "affected_requests", "affected_tenants",
               "leak_sources", "post_fix_check"],
    "node_last": ["pool_audit", "exposure_windows", "affected_requests", "affected_tenants",
                  "leak_sources", "post_fix_check"],
    "legs": ["affected_requests", "affected_tenants", "leak_sources"],
    "classified": ["affected_requests", "affected_tenants", "leak_sources"],
    "cand_keys": ["affected_requests", "affected_tenants", "leak_sources"],
}


@pytest.mark.parametrize("cte", sorted(SHARED))
def test_shared_blocks_are_identical(cte: str) -> None:
    texts = {name: _cte(load_query(name).sql, cte) for name in SHARED[cte]}
    first = next(iter(texts.values()))
    assert all(t == first for t in texts.values()), f"CTE {cte} differs between {sorted(texts)}"
