"""pool_audit: verdicts per start (one table of situations), periods, and the sample's nodes."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import CTX, Synth, t

import forensics
from forensics.errors import CaseError

VERDICTS: list[tuple[str, str, int | None, int | None, str, int]] = [
    # name, role, context_len, pool, verdict, admission_limit
    ("incident prefill", "prefill", CTX, 681_280, "exposed", 681_274),
    ("fixed prefill (pool ~2x context)", "prefill", CTX, 2_043_840, "ok", CTX - 6),
    ("pool == context: margin only", "prefill", CTX, CTX, "ok", CTX - 6),
    ("pool one short of context", "prefill", CTX, CTX - 1, "exposed", CTX - 7),
    ("unified node, small pool", "unified", CTX, 681_280, "exposed", 681_274),
    ("decode node, small pool", "decode", CTX, 681_280, "ok", 681_274),
    ("old context below the pool", "prefill", 524_288, 681_280, "ok", 524_282),
    ("startup line missing", "prefill", None, None, "unknown", -1),
]


@pytest.mark.parametrize(("name", "role", "ctx", "pool", "verdict", "limit"), VERDICTS,
                         ids=[v[0] for v in VERDICTS])
def test_verdict(synth: Synth, name: str, role: str, ctx: int | None, pool: int | None,
                 verdict: str, limit: int) -> None:
    synth.start("n0", t(0), role=role, ctx=ctx, pool=pool)  # type: ignore[arg-type]
    row = forensics.pool_audit(synth.case).df().iloc[0]
    assert row.verdict == verdict
    if limit >= 0:
        assert row.admission_limit == limit
        assert row.rejected_band_tokens == ctx - limit  # type: ignore[operator]


def test_periods_and_margin_rejections(synth: Synth) -> None:
    synth.start("p0", t(0), role="prefill", pool=681_280)
    synth.start("p0", t(10), role="prefill", pool=2_043_840)
    synth.start("p1", t(0), role="prefill", pool=2_043_840)
    synth.rejection("p1", "r1", t(5), CTX - 3, limit=CTX - 6)  # inside the 6-token margin
    synth.other("p0", t(20))
    df = forensics.pool_audit(synth.case).df()
    p0 = df[df.node == "p0"]
    assert list(p0.verdict) == ["exposed", "ok"]
    assert list(p0.period_end) == [t(10), t(20)]
    assert list(p0.period_open) == [False, True]
    p1 = df[df.node == "p1"].iloc[0]
    assert p1.n_scheduler_rejections == 1 and "1 scheduler rejection" in p1.notes
    assert list(forensics.pool_audit(synth.case, node="p1").df().node) == ["p1"]
    assert p0.evidence.iloc[0] == "p0/sglang.log:1"  # relative to the common directory


def test_no_engine_logs(synth: Synth) -> None:
    with pytest.raises(CaseError, match="ingest the SGLang engine logs"):
        forensics.pool_audit(synth.case)


def test_sample_nodes(sample_case: forensics.Case, sample_truth: dict[str, Any]) -> None:
    df = forensics.pool_audit(sample_case).df()
    got = {(r.node, r.ts_start.isoformat(), r.verdict == "exposed", r.admission_limit)
           for r in df.itertuples()}
    expected = {(node, s["ts_utc"].replace("Z", "").replace(".000", ""), s["exposed"], s["admission_limit"])
                for node, info in sample_truth["nodes"].items() for s in info["starts"]}
    assert got == expected
