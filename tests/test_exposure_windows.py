"""exposure_windows: merged node windows, the fleet row, given overrides, the sample's windows."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from conftest import Synth, t

import forensics
from forensics.errors import CaseError


def test_merge_and_fleet(synth: Synth) -> None:
    synth.start("p0", t(0), pool=2_043_840)
    synth.start("p0", t(10), pool=681_280)
    synth.start("p0", t(20), pool=681_280)  # restarted into the same misconfiguration: one window
    synth.start("p0", t(30), pool=2_043_840)
    synth.start("p1", t(15), pool=681_280)  # never fixed: open window up to its last line
    synth.other("p1", t(40))
    synth.rejection("p0", "r1", t(25), 700_000)
    df = forensics.exposure_windows(synth.case).df()
    rows = {(r.scope, r.node): r for r in df.itertuples()}
    p0 = rows[("node", "p0")]
    assert (p0.window_start, p0.window_end, p0.n_starts, p0.n_rejections) == (t(10), t(30), 2, 1)
    p1 = rows[("node", "p1")]
    assert (p1.window_end, p1.window_open) == (t(40), True)
    fleet = df[df.scope == "fleet"].iloc[0]
    assert (fleet.window_start, fleet.window_end, fleet.admission_limit, fleet.source) == (
        t(10), t(40), 681_274, "logs")


def test_given_window_for_gateway_only(synth: Synth) -> None:
    with pytest.raises(CaseError, match="--start"):
        forensics.exposure_windows(synth.case)
    df = forensics.exposure_windows(synth.case, start=t(1), end=t(2), limit_tokens=100).df()
    assert len(df) == 1
    row = df.iloc[0]
    assert (row.scope, row.window_start, row.window_end, row.admission_limit, row.source) == (
        "fleet", t(1), t(2), 100, "given")


def test_sample_windows(sample_case: forensics.Case, sample_truth: dict[str, Any]) -> None:
    df = forensics.exposure_windows(sample_case).df()

    def ts(s: str) -> dt.datetime:
        return dt.datetime.fromisoformat(s.replace("Z", ""))

    nodes = df[df.scope == "node"]
    got = {(r.node, r.window_start, r.window_end, r.admission_limit) for r in nodes.itertuples()}
    expected = {(w["node"], ts(w["start_utc"]), ts(w["end_utc"]), w["admission_limit"])
                for w in sample_truth["exposure_windows"]}
    assert got == expected
    fleet = df[df.scope == "fleet"].iloc[0]
    win = sample_truth["fleet_window"]
    assert (fleet.window_start, fleet.window_end) == (ts(win["start_utc"]), ts(win["end_utc"]))
    assert fleet.admission_limit == sample_truth["admission_limit"]
