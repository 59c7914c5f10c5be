"""hidden_errors: 2xx responses carrying an in-band error, a transfer failure or an engine abort."""

from __future__ import annotations

from typing import Any

from conftest import Synth, fleet, t

import forensics


def test_kinds(synth: Synth) -> None:
    fleet(synth)
    synth.pd_request("sse", t(1), tokens=700_000, rejected=True, streamed=True,
                     in_band_error="Input length (700000 tokens) exceeds the maximum allowed length")
    room = synth.pd_request("xfer", t(2), tokens=100, decode_finish="abort")
    synth.event("decode-0", "decode_transfer_failed", t(2, 5), room, message="Decode transfer failed")
    room500 = synth.pd_request("x500", t(3), tokens=100, decode_finish="abort", status=500)
    synth.event("decode-0", "decode_transfer_failed", t(3, 5), room500)
    synth.pd_request("fine", t(4), tokens=100)
    df = forensics.hidden_errors(synth.case).df()
    assert list(zip(df.request_id, df.kinds, strict=True)) == [
        ("ray-sse", "in_band_error"), ("ray-xfer", "transfer_failure;engine_abort")]
    assert df.detail[1] == "Decode transfer failed"
    # never mixed into affected: the in-band error is not an affected response
    assert forensics.affected_requests(synth.case).df().empty


def test_sample_stream_error(sample_case: forensics.Case, sample_truth: dict[str, Any]) -> None:
    df = forensics.hidden_errors(sample_case).df()
    assert set(sample_truth["traps"]["stream_error_200"]) <= set(df.request_id)
    assert not set(df.request_id) & {leak["request_id"] for leak in sample_truth["leaks"]}
