"""post_fix_check: is it over? configs now, placeholder 2xx after the fix, integrity lines."""

from __future__ import annotations

from typing import Any

from conftest import Synth, fleet, t

import forensics


def _results(s: Synth) -> dict[tuple[str, str | None], str]:
    df = forensics.post_fix_check(s.case).df()
    return {(r.check, None if r.node != r.node else r.node): r.result for r in df.itertuples()}


def test_clean_after_fix(synth: Synth) -> None:
    fleet(synth, fixed_at=100.0)
    synth.pd_request("long", t(150), tokens=900_000)
    res = _results(synth)
    assert res[("node_config", "prefill-0")] == "pass"
    assert res[("placeholder_after_fix", "prefill-0")] == "pass"
    assert res[("long_prompts_after_fix", "prefill-0")] == "info"
    assert res[("integrity_events", None)] == "pass"
    assert res[("kv_verification", None)] == "warn"


def test_failures(synth: Synth) -> None:
    fleet(synth, bad=("prefill-0", "prefill-1"), fixed_at=None)
    synth.start("prefill-0", t(100), pool=2_043_840)
    synth.pd_request("after", t(150), tokens=700_000, rejected=True)  # placeholder after the fix
    synth.event("decode-0", "kv_checksum_mismatch", t(151), 5)
    res = _results(synth)
    assert res[("node_config", "prefill-1")] == "fail"  # never fixed
    assert res[("placeholder_after_fix", "prefill-0")] == "fail"
    assert res[("integrity_events", None)] == "fail"


def test_sample(sample_case: forensics.Case, sample_truth: dict[str, Any]) -> None:
    df = forensics.post_fix_check(sample_case).df()
    assert not (df.result == "fail").any(), df[df.result == "fail"]
    long_ok = df[df.check == "long_prompts_after_fix"].n.sum()
    assert long_ok == len(sample_truth["traps"]["after_fix_long_ok"])
