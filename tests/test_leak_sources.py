"""leak_sources: requests whose KV pages may have been read by an affected request."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Synth, fleet, t

import forensics
from forensics.errors import ParameterError


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
