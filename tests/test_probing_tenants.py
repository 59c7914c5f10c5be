"""probing_tenants: tenants sending many over-limit prompts within an hour, each prompt judged
against the limit of the node start that served it (queries/probing_tenants.sql)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import Synth, fleet, t

import forensics
from forensics.cli import cli
from forensics.errors import ParameterError
from forensics.sqlfiles import load_query

LIMIT_GOOD = 1_048_570  # prefill-1, and prefill-0 after its fix at t(200): CTX - 6

#: (what, requests as (hours, tokens, how), expected {tenant: (n_over_limit, max_in_one_hour)}), threshold 3
#: how: "p0" / "p1" a PD request on prefill-0 / prefill-1, "gw" a gateway record with no engine leg
CASES: list[tuple[str, list[tuple[float, int, str]], dict[str, tuple[int, int]]]] = [
    ("three over an exposed start's limit within an hour", [(10, 700_000, "p0"), (10.25, 700_000, "p0"),
                                                            (10.5, 700_000, "p0")], {"A": (3, 3)}),
    ("exactly one hour from first to last is within one hour", [(10, 700_000, "p0"), (10.5, 700_000, "p0"),
                                                               (11, 700_000, "p0")], {"A": (3, 3)}),
    ("spread over more than an hour", [(10, 700_000, "p0"), (11.1, 700_000, "p0"), (12.2, 700_000, "p0")], {}),
    # regression: the pandas version used the fleet limit (681,274), so these counted
    ("over the fleet limit, under their own node's", [(10, 700_000, "p1"), (10.1, 700_000, "p1"),
                                                      (10.2, 700_000, "p1")], {}),
    ("after the node's fixing restart", [(201, 700_000, "p0"), (201.1, 700_000, "p0"), (201.2, 700_000, "p0")], {}),
    ("at a healthy node's own limit (the scheduler margin)", [(10, LIMIT_GOOD, "p1"), (10.1, LIMIT_GOOD, "p1"),
                                                              (10.2, LIMIT_GOOD, "p1")], {"A": (3, 3)}),
    ("below the limit", [(10, 600_000, "p0"), (10.1, 600_000, "p0"), (10.2, 600_000, "p0")], {}),
    ("no engine leg: the smallest limit in force then", [(10, 700_000, "gw"), (10.1, 700_000, "gw"),
                                                         (10.2, 700_000, "gw")], {"A": (3, 3)}),
    ("no engine leg after the fix: every limit in force is the healthy one",
     [(250, 700_000, "gw"), (250.1, 700_000, "gw"), (250.2, 700_000, "gw")], {}),
    ("the count is every over-limit prompt, the hour its densest", [(10, 700_000, "p0"), (10.1, 700_000, "p0"),
                                                                    (10.2, 700_000, "p0"), (30, 700_000, "p0")],
     {"A": (4, 3)}),
]


def _requests(synth: Synth, requests: list[tuple[float, int, str]], tenant: str | None = "A") -> None:
    for i, (hours, tokens, how) in enumerate(requests):
        xid = f"{tenant}-{i}-{hours}"
        if how == "gw":
            synth.pd_request(xid, t(hours), tokens=tokens, engine=False, gateway_tokens=tokens,
                             layer="proxy", tenant=tenant)  # type: ignore[arg-type]
        else:
            exposed = how == "p0" and hours < 200
            synth.pd_request(xid, t(hours), tokens=tokens, prefill="prefill-0" if how == "p0" else "prefill-1",
                             rejected=exposed and tokens >= 681_274, tenant=tenant)  # type: ignore[arg-type]


def _flagged(case: Any, **kw: Any) -> dict[str, tuple[int, int]]:
    rows = forensics.probing_tenants(case, threshold=kw.pop("threshold", 3), **kw).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


@pytest.mark.parametrize(("what", "requests", "expected"), CASES, ids=[c[0] for c in CASES])
def test_over_limit_is_judged_per_start(synth: Synth, what: str, requests: list[tuple[float, int, str]],
                                        expected: dict[str, tuple[int, int]]) -> None:
    fleet(synth)
    _requests(synth, requests)
    assert _flagged(synth.case) == expected


@pytest.mark.parametrize(("limit_tokens", "expected"), [(None, {}), (600_000, {"A": (3, 3)})])
def test_limit_tokens_overrides_every_start(synth: Synth, limit_tokens: int | None,
                                            expected: dict[str, tuple[int, int]]) -> None:
    fleet(synth)
    _requests(synth, [(10, 700_000, "p1"), (10.1, 700_000, "p1"), (10.2, 700_000, "p1")])
    assert _flagged(synth.case, limit_tokens=limit_tokens) == expected


@pytest.mark.parametrize(("limit_tokens", "expected"), [(None, {}), (681_274, {"A": (3, 3)})])
def test_a_gateway_only_case_needs_a_limit(synth: Synth, limit_tokens: int | None,
                                           expected: dict[str, tuple[int, int]]) -> None:
    """Without engine starts no request has a known limit: nothing is judged unless one is given."""
    _requests(synth, [(10, 700_000, "gw"), (10.1, 700_000, "gw"), (10.2, 700_000, "gw")])
    assert _flagged(synth.case, limit_tokens=limit_tokens) == expected


def test_records_without_a_tenant_are_left_out(synth: Synth) -> None:
    fleet(synth)
    _requests(synth, [(10, 700_000, "p0"), (10.1, 700_000, "p0"), (10.2, 700_000, "p0")], tenant=None)
    assert _flagged(synth.case) == {}


def test_rows_come_densest_first_then_by_tenant(synth: Synth) -> None:
    fleet(synth)
    _requests(synth, [(10, 700_000, "p0"), (10.1, 700_000, "p0"), (10.2, 700_000, "p0")], tenant="Z")
    _requests(synth, [(20, 700_000, "p0"), (20.1, 700_000, "p0"), (20.2, 700_000, "p0"), (20.3, 700_000, "p0")],
              tenant="B")
    _requests(synth, [(40, 700_000, "p0"), (40.1, 700_000, "p0"), (40.2, 700_000, "p0")], tenant="C")
    rel = forensics.probing_tenants(synth.case, threshold=3)
    assert rel.columns == list(load_query("probing_tenants").columns)
    assert [r[0] for r in rel.fetchall()] == ["B", "C", "Z"]
    assert rel.fetchall()[0][3:] == (t(20), t(20.3))


@pytest.mark.parametrize("threshold", [0, -1])
def test_a_threshold_below_one_is_refused(synth: Synth, threshold: int) -> None:
    with pytest.raises(ParameterError, match="--threshold"):
        forensics.probing_tenants(synth.case, threshold=threshold)


@pytest.mark.parametrize(("threshold", "flags_someone"), [(None, False), (1, True), (10_000, False)])
def test_sample(sample_case: forensics.Case, sample_truth: dict[str, Any], threshold: int | None,
                flags_someone: bool) -> None:
    """The default threshold is quiet on the sample (no abuse in it); one over-limit prompt flags its tenant."""
    kw = {} if threshold is None else {"threshold": threshold}
    rows = forensics.probing_tenants(sample_case, **kw).fetchall()
    assert bool(rows) is flags_someone
    if threshold is None:
        assert bool(rows) is bool(sample_truth["abuse_evident"])


def test_cli_writes_the_contract(sample_case_path: Path) -> None:
    res = CliRunner().invoke(cli, ["probing", str(sample_case_path), "--threshold", "1", "--format", "csv"])
    assert res.exit_code == 0, res.output
    rows = list(csv.reader(io.StringIO(res.stdout)))
    assert rows[0] == list(load_query("probing_tenants").columns)
    assert len(rows) > 1
    assert all(int(r[2]) >= 1 for r in rows[1:])
