"""token_mismatch: placeholder, prefill-vs-decode and gateway-vs-engine disagreements."""

from __future__ import annotations

from typing import Any

from conftest import Synth, fleet, t

import forensics


def test_kinds(synth: Synth) -> None:
    fleet(synth)
    synth.pd_request("ok", t(1), tokens=100, gateway_tokens=100, layer="proxy")
    synth.pd_request("ph", t(2), tokens=700_000, rejected=True)
    synth.pd_request("gw", t(3), tokens=100, gateway_tokens=120, layer="proxy")
    df = forensics.token_mismatch(synth.case).df()
    assert list(zip(df.request_id, df.mismatch, strict=True)) == [
        ("ray-ph", "placeholder"), ("ray-gw", "gateway_vs_engine")]
    assert df.gateway_minus_engine.iloc[1] == 20
    assert df.decode_minus_prefill.iloc[0] == 699_999


def test_sample_placeholders(sample_case: forensics.Case, sample_truth: dict[str, Any]) -> None:
    df = forensics.token_mismatch(sample_case).df()
    placeholders = set(df[df.mismatch.str.contains("placeholder")].request_id)
    assert {leak["request_id"] for leak in sample_truth["leaks"]} <= placeholders
