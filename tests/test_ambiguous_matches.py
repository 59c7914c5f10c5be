"""ambiguous_matches: gateway records with several equally good engine chains, chains claimed by several records.

A match the evidence cannot decide is never made silently: the rule still picks (the nearest), the
candidates are listed with the reason, and the affected list flags the request (ambiguous_match).
Synthetic cases (tests.casebuilder) with no request header on any engine line, so the records
meet their chains by router line or by time.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Synth, fleet, t

import forensics

LEAK = 700_000  # over the exposed prefill-0's limit (681,274)


def _router(s: Synth, xid: str, start: dt.datetime, seconds: float, status: int = 200) -> None:
    """The router's (smg) line for one request: logged when it finished, with its latency."""
    fid = s.file("engine/router/smg.log", "engine", "router")
    s.insert("router_requests", node="router", ts=start + dt.timedelta(seconds=seconds), level="INFO",
             request_id=xid, method="POST", uri="/v1/chat/completions", status=status,
             latency_us=int(seconds * 1_000_000), target="smg::response", file_id=fid,
             line_no=next(s._lines[fid]))


def _two_requests(s: Synth, gap_s: float, *, engine_gap_s: float | None = None, router: bool = False,
                  gateway_tokens: bool = False) -> None:
    """Two requests ``gap_s`` apart at the gateway, no engine line carrying an id; the first leaks.

    ``engine_gap_s``: how far apart their engine legs started (default: ``gap_s``; the second one
    queued in between when larger). ``router``: the router logged both, with their ids.
    """
    fleet(s)
    base = t(10)
    for i, (xid, tokens) in enumerate((("a", LEAK), ("b", 5_000))):
        engine_at = base + dt.timedelta(seconds=i * (gap_s if engine_gap_s is None else engine_gap_s))
        s.gw(f"ray-{xid}", base + dt.timedelta(seconds=i * gap_s), header_request_id=xid, tenant=f"tenant-{xid}",
             prompt_tokens=tokens if gateway_tokens else None)
        s.pd_request(xid, engine_at, tokens=tokens, rejected=tokens == LEAK, header=False, status=None)
        if router:  # the router's span starts when the engine legs do (1 s after engine_at)
            _router(s, xid, engine_at + dt.timedelta(seconds=1), 30.0)


def _same_id_twice(s: Synth) -> None:
    """Two records of one layer carrying one x-request-id, one engine chain logging it."""
    fleet(s)
    s.pd_request("a", t(10), tokens=LEAK, rejected=True, tenant="tenant-a")
    s.gw("ray-a2", t(10) + dt.timedelta(seconds=0.2), header_request_id="a", tenant="tenant-b")


def _one_chain_two_records(s: Synth) -> None:
    """One engine chain, two gateway records of different requests 0.3 s apart, no ids, no tokens."""
    fleet(s)
    s.pd_request("a", t(10), tokens=LEAK, rejected=True, header=False, tenant="tenant-a")
    s.gw("ray-z", t(10) + dt.timedelta(seconds=0.3), tenant="tenant-z")


CASES: list[tuple[str, Any, dict[str, int], str | None, bool]] = [
    # (what, build, ambiguity -> rows, the leak's tenant, flagged in affected_requests)
    ("two requests 0.5 s apart, time only: each has two equally good chains",
     lambda s: _two_requests(s, 0.5), {"several_chains": 4}, "tenant-b", True),  # the nearest: maybe wrong
    ("the same two, their gateway tokens tell them apart",
     lambda s: _two_requests(s, 0.5, gateway_tokens=True), {}, "tenant-a", False),
    ("the same two, the router logged them (0.5 s apart too): still ambiguous",
     lambda s: _two_requests(s, 0.5, router=True), {"several_chains": 4}, "tenant-a", True),
    ("0.5 s apart at the gateway, 3 s at the engine: time alone gives the leak to the wrong record, flagged",
     lambda s: _two_requests(s, 0.5, engine_gap_s=3.0), {"several_records": 2}, "tenant-b", True),
    ("the same, with the router's lines: the router tier pairs them right",
     lambda s: _two_requests(s, 0.5, engine_gap_s=3.0, router=True), {}, "tenant-a", False),
    ("two requests 5 s apart: not ambiguous",
     lambda s: _two_requests(s, 5.0), {}, "tenant-a", False),
    ("one chain, two records 0.3 s apart: the chain is claimed twice",
     _one_chain_two_records, {"several_records": 2}, "tenant-z", True),
    ("two records of one layer with the chain's x-request-id",
     _same_id_twice, {"several_records": 2}, None, True),
]


@pytest.mark.parametrize(("what", "make", "expected", "tenant", "flagged"), CASES, ids=[c[0] for c in CASES])
def test_ambiguous_matches(what: str, make: Any, expected: dict[str, int], tenant: str | None,
                           flagged: bool) -> None:
    s = Synth()
    make(s)
    df = forensics.ambiguous_matches(s.case).df()
    assert df.groupby("ambiguity").size().to_dict() == expected, what
    if len(df):
        # every ambiguous record or chain shows the rule's pick, and says why it is not certain
        assert df.chosen.any() and df.reason.str.match(r"^(taken|not taken): ").all()
        assert (df.n_equal.gt(1) | df.n_claims.gt(1)).all()
    affected = forensics.affected_requests(s.case).df()
    leaks = affected[affected.decode_rid == "d-a"]
    assert len(leaks) == (2 if tenant is None else 1), what  # the leak is found either way
    if tenant is not None:
        assert leaks.tenant_id.iloc[0] == tenant
    assert leaks.ambiguous_match.map(bool).tolist() == [flagged] * len(leaks)
    assert leaks.reasons.str.contains("ambiguous_match").tolist() == [flagged] * len(leaks)


@pytest.mark.parametrize(("router", "method"), [(True, "router"), (False, "time")])
def test_router_lines_pair_records_without_engine_ids(router: bool, method: str) -> None:
    s = Synth()
    _two_requests(s, 5.0, router=router)
    s.case.ensure_facts()
    got = s.case.sql(
        "SELECT g.tenant_id, m.match_method, c.decode_rid FROM chain_matches m JOIN gateway_top g USING (record_id) "
        "JOIN request_chains c USING (chain_id) ORDER BY 1").fetchall()
    assert got == [("tenant-a", method, "d-a"), ("tenant-b", method, "d-b")]


def test_parameters_filter_the_records_and_nodes() -> None:
    s = Synth()
    _two_requests(s, 0.5)
    assert len(forensics.ambiguous_matches(s.case, node="decode-0").df()) == 4
    assert len(forensics.ambiguous_matches(s.case, node="decode-1").df()) == 0
    assert len(forensics.ambiguous_matches(s.case, start=t(11)).df()) == 0
    assert len(forensics.ambiguous_matches(s.case, end=t(11)).df()) == 4
    with pytest.raises(forensics.ForensicsError, match="is not after"):
        forensics.ambiguous_matches(s.case, start=t(11), end=t(10))


def test_cli_lists_the_ambiguous_matches(tmp_path: Path) -> None:
    path = tmp_path / "c.duckdb"
    s = Synth()
    _two_requests(s, 0.5)
    s.case.con.execute(f"ATTACH '{path}' AS out")
    s.case.con.execute("COPY FROM DATABASE memory TO out")
    s.case.con.execute("DETACH out")
    res = subprocess.run([sys.executable, "-m", "forensics", "ambiguous", str(path), "--format", "csv"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("record_id,request_id,header_request_id,tenant_id,")
    assert len(lines) == 5 and sum("several_chains" in line for line in lines) == 4
