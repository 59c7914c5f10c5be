"""leak_sources: requests whose KV pages may have been read by an affected request."""

from __future__ import annotations

from typing import Any

import pytest
from casebuilder import Fleet, Request, build
from conftest import Synth, fleet, t

import forensics
from forensics.errors import ParameterError

# -- whose data: leak sources ----------------------------------------------------------------------

# x's decode Receive is at 10 h + 1 s; a request's decode Finish comes 21 s after its gateway start
SOURCES: list[tuple[str, list[Any], set[str]]] = [
    ("a finish in the same second as the receive, logged before it, is a source",
     [Request("s", 10, 3_000, sec=-20, tenant="B"), Request("x", 10, 700_000, rejected=True)], {"ray-s"}),
    ("a finish in the same second, logged after the receive line, came later: not a source",
     [Request("x", 10, 700_000, rejected=True), Request("s", 10, 3_000, sec=-20, tenant="B")], set()),
    ("a finish exactly at the look-back's start is a source",
     [Request("s", 10, 3_000, sec=-620, tenant="B"), Request("x", 10, 700_000, rejected=True)], {"ray-s"}),
    ("a finish one second before the look-back is not a source",
     [Request("s", 10, 3_000, sec=-621, tenant="B"), Request("x", 10, 700_000, rejected=True)], set()),
    ("a finish on the other decode node is not a source",
     [Request("s", 10, 3_000, sec=-60, decode="decode-1", tenant="B"), Request("x", 10, 700_000, rejected=True)],
     set()),
    ("an aborted decode is not a source",
     [Request("s", 10, 3_000, sec=-60, decode_finish="abort", status=400, tenant="B"),
      Request("x", 10, 700_000, rejected=True)], set()),
    ("the affected request is not its own source", [Request("x", 10, 700_000, rejected=True)], set()),
]


@pytest.mark.parametrize(("guards", "rows", "expected"), SOURCES, ids=[c[0] for c in SOURCES])
def test_leak_sources(guards: str, rows: list[Any], expected: set[str]) -> None:
    df = forensics.leak_sources(build(Fleet(), *rows)).df()
    assert set(df.source_request_id) == expected


def test_default_look_back_is_ten_minutes() -> None:
    case = build(Fleet(), Request("s", 10, 3_000, sec=-300, tenant="B"), Request("x", 10, 700_000, rejected=True))
    assert list(forensics.leak_sources(case).df().source_request_id) == ["ray-s"]
    assert forensics.leak_sources(case, window_s=60).df().empty



def test_window_and_flags(synth: Synth) -> None:
    fleet(synth)
    synth.pd_request("old", t(10, -700), tokens=100, tenant="A")         # finished too early
    synth.pd_request("src1", t(10, -300), tokens=100, tenant="B")
    synth.pd_request("src2", t(10, -100), tokens=100, tenant="A")        # the recipient's own tenant
    synth.pd_request("other", t(10, -100), tokens=100, tenant="C", decode="decode-1")  # other node
    synth.pd_request("abort", t(10, -50), tokens=100, tenant="D", decode_finish="abort")
    synth.pd_request("leak", t(10), tokens=700_000, rejected=True, tenant="A")
    df = forensics.leak_sources(synth.case).df()
    assert list(df.source_request_id) == ["ray-src1", "ray-src2"]
    assert list(df.same_tenant) == [False, True]
    assert list(df.gap_s) == [280.0, 80.0]  # decode starts 1 s after the gateway, finishes 20 s later
    assert set(df.request_id) == {"ray-leak"}
    narrow = forensics.leak_sources(synth.case, window_s=100).df()
    assert list(narrow.source_request_id) == ["ray-src2"]
    with pytest.raises(ParameterError):
        forensics.leak_sources(synth.case, window_s=0)


def test_sample_sources(sample_case: forensics.Case, sample_truth: dict[str, Any]) -> None:
    df = forensics.leak_sources(sample_case, window_s=sample_truth["source_window_s"]).df()
    got = {(r.request_id, r.source_request_id, bool(r.same_tenant)) for r in df.itertuples()}
    expected = {(leak["request_id"], s["request_id"], s["same_tenant"])
                for leak in sample_truth["leaks"] for s in leak["possible_sources"]}
    assert got == expected
