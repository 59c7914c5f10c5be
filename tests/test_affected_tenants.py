"""affected_tenants: per-tenant counts, on synthetic rows and on the sample (golden CSV)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from casebuilder import Fleet, Gateway, build, recipients
from conftest import GoldenCheck, Synth, fleet, t
from test_affected_requests import _cli

import forensics

CONTRACT = ["tenant_id", "n_requests", "n_confirmed", "n_suspected", "first_ts", "last_ts"]


def test_counts(synth: Synth) -> None:
    fleet(synth)
    synth.pd_request("a1", t(10), tokens=700_000, rejected=True, tenant="A")
    synth.pd_request("a2", t(12), tokens=700_000, engine=False, gateway_tokens=700_000, tenant="A")
    synth.pd_request("b1", t(11), tokens=700_000, rejected=True, tenant="B")
    synth.pd_request("c1", t(11), tokens=700_000, prefill="prefill-1", tenant="C")  # not affected
    df = forensics.affected_tenants(synth.case).df()
    assert list(df.columns[:6]) == CONTRACT
    assert df.to_dict("records") == [
        {"tenant_id": "A", "n_requests": 2, "n_confirmed": 1, "n_suspected": 1, "first_ts": t(10),
         "last_ts": t(12), "request_ids": "ray-a1 ray-a2"},
        {"tenant_id": "B", "n_requests": 1, "n_confirmed": 1, "n_suspected": 0, "first_ts": t(11),
         "last_ts": t(11), "request_ids": "ray-b1"},
    ]


def test_suspected_only_tenant_is_a_recipient() -> None:
    assert recipients(build(Fleet(), Gateway("g", 10, 700_000, layer="proxy", tenant="S"))) == {"S": (0, 1)}


def test_sample_tenants(sample_case: forensics.Case, sample_truth: dict[str, Any]) -> None:
    df = forensics.affected_tenants(sample_case).df()
    got = {r.tenant_id: {"confirmed": r.n_confirmed, "suspected": r.n_suspected} for r in df.itertuples()}
    assert got == sample_truth["affected_tenants"]
    assert (df.n_requests == df.n_confirmed + df.n_suspected).all()
    # a tenant whose only affected response is suspected is a recipient all the same
    assert ((df.n_confirmed == 0) & (df.n_suspected > 0)).any()
    for col in ("n_requests", "n_confirmed", "n_suspected"):
        assert str(df[col].dtype) == "int64", (col, df[col].dtype)
    expected_ids = {}
    for kind in ("leaks", "suspected"):
        for leak in sample_truth[kind]:
            expected_ids.setdefault(leak["tenant_id"], set()).add(leak["request_id"])
    assert {r.tenant_id: set(r.request_ids.split()) for r in df.itertuples()} == expected_ids


@pytest.mark.golden
def test_cli_csv_golden(sample_case_path: Path, tmp_path: Path, golden: GoldenCheck) -> None:
    out = tmp_path / "tenants.csv"
    res = _cli("tenants", str(sample_case_path), "--format", "csv", "-o", str(out))
    assert res.returncode == 0, res.stderr
    text = out.read_text(encoding="utf-8")
    # exactly the contract: request_ids stays in the relation, not in the CSV
    assert text.splitlines()[0].split(",") == CONTRACT
    assert ".0," not in text  # counts are integers
    golden("tenants.csv", text)


def test_repeated_calls_keep_their_own_input(synth: Synth) -> None:
    """The input (affected_requests) is bound per call: an earlier relation keeps its parameters,
    and nothing is left on the connection that could change another query's result."""
    fleet(synth)
    synth.pd_request("a1", t(10), tokens=700_000, rejected=True, tenant="A")
    synth.pd_request("b1", t(11), tokens=700_000, rejected=True, tenant="B")
    before = forensics.affected_tenants(synth.case).fetchall()
    early = forensics.affected_tenants(synth.case, start=t(9), end=t(10.5))
    late = forensics.affected_tenants(synth.case, start=t(10.5), end=t(12))
    assert [r[0] for r in early.fetchall()] == ["A"]
    assert [r[0] for r in late.fetchall()] == ["B"]
    assert [r[0] for r in early.fetchall()] == ["A"]
    assert forensics.affected_tenants(synth.case).fetchall() == before
    views = synth.case.con.sql(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal AND view_name LIKE '%result%'"
    ).fetchall()
    assert views == []
