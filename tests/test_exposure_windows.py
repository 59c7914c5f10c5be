"""exposure_windows: merged node windows, the fleet row, given overrides, the sample's windows."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from casebuilder import (
    LIMIT,
    POOL_BAD,
    POOL_GOOD,
    LastLine,
    Rejection,
    Start,
    build,
    limit_of,
    when,
)
from conftest import Synth, t

import forensics
from forensics.errors import CaseError

POOL_2 = 900_000
LIMIT_2 = limit_of(POOL_2)


# -- the window, per node and for the fleet --------------------------------------------------------


def _windows(*rows: Any) -> list[tuple[str, Any, Any, int, bool]]:
    df = forensics.exposure_windows(build(*rows)).df()
    return [(r.node if isinstance(r.node, str) else "fleet", r.window_start, r.window_end, int(r.admission_limit),
             bool(r.window_open)) for r in df.itertuples()]


WINDOWS: list[tuple[str, list[Any], list[tuple[str, float, float, int, bool]]]] = [
    ("consecutive exposed starts with different limits are two windows",
     [Start("p", 0, pool=POOL_BAD), Start("p", 10, pool=POOL_2), Start("p", 20, pool=POOL_GOOD), LastLine("p", 30)],
     [("p", 0, 10, LIMIT, False), ("p", 10, 20, LIMIT_2, False), ("fleet", 0, 20, LIMIT, False)]),
    ("consecutive exposed starts with the same limit are one window to the last one's end",
     [Start("p", 0, pool=POOL_BAD), Start("p", 10, pool=POOL_BAD), Start("p", 20, pool=POOL_GOOD), LastLine("p", 30)],
     [("p", 0, 20, LIMIT, False), ("fleet", 0, 20, LIMIT, False)]),
    ("exposed, then a lowered context that fits, then exposed again: two windows",
     [Start("p", 0, pool=POOL_BAD), Start("p", 10, pool=POOL_BAD, ctx=POOL_BAD), Start("p", 20, pool=POOL_BAD),
      LastLine("p", 30)],
     [("p", 0, 10, LIMIT, False), ("p", 20, 30, LIMIT, True), ("fleet", 0, 30, LIMIT, True)]),
    ("the fleet's limit is the smallest of its exposed nodes'",
     [Start("a", 0, pool=POOL_2), Start("b", 1, pool=POOL_BAD), Start("a", 20, pool=POOL_GOOD),
      Start("b", 20, pool=POOL_GOOD), LastLine("a", 30), LastLine("b", 30)],
     [("a", 0, 20, LIMIT_2, False), ("b", 1, 20, LIMIT, False), ("fleet", 0, 20, LIMIT, False)]),
    ("a node never fixed leaves the fleet window open",
     [Start("a", 0, pool=POOL_BAD), Start("b", 0, pool=POOL_BAD), Start("b", 20, pool=POOL_GOOD), LastLine("a", 30),
      LastLine("b", 30)],
     [("a", 0, 30, LIMIT, True), ("b", 0, 20, LIMIT, False), ("fleet", 0, 30, LIMIT, True)]),
    ("a start of unknown role with a small pool is exposed (unknown is never 'no')",
     [Start("p", 0, pool=POOL_BAD, role=None), LastLine("p", 30)],
     [("p", 0, 30, LIMIT, True), ("fleet", 0, 30, LIMIT, True)]),
    ("a decode node with a small pool is not the placeholder trigger",
     [Start("d", 0, pool=POOL_BAD, role="decode"), LastLine("d", 30)], []),
    ("two pods of one node, touching exposed periods with different limits: two windows",
     [Start("p", 0, pod="a"), LastLine("p", 10, pod="a"), Start("p", 10, pool=POOL_2, pod="b"),
      LastLine("p", 20, pod="b")],
     [("p", 0, 10, LIMIT, False), ("p", 10, 20, LIMIT_2, True), ("fleet", 0, 20, LIMIT, True)]),
    ("a replica with another limit spanning the gap between two exposed periods does not merge them",
     [Start("p", 0, pod="a"), Start("p", 10, pool=POOL_GOOD, pod="a"), Start("p", 20, pod="a"),
      LastLine("p", 30, pod="a"), Start("p", 5, pool=POOL_2, pod="b"), LastLine("p", 25, pod="b")],
     [("p", 0, 10, LIMIT, False), ("p", 5, 25, LIMIT_2, True), ("p", 20, 30, LIMIT, True),
      ("fleet", 0, 30, LIMIT, True)]),
]


@pytest.mark.parametrize(("guards", "rows", "expected"), WINDOWS, ids=[w[0] for w in WINDOWS])
def test_windows(guards: str, rows: list[Any], expected: list[tuple[str, float, float, int, bool]]) -> None:
    assert _windows(*rows) == [(n, when(a), when(b), lim, op) for n, a, b, lim, op in expected]


def test_rejections_counted_in_their_window_to_the_second() -> None:
    case = build(Start("p", 0), Start("p", 10, pool=POOL_GOOD), LastLine("p", 30),
                 Rejection("p", "a", 0, 700_000), Rejection("p", "b", 10, 700_000, sec=-1),
                 Rejection("p", "c", 10, 700_000))
    w = forensics.exposure_windows(case, node="p").df()
    assert list(w.n_rejections) == [2, 2]  # node row, fleet row: 'c' is in the fixed period
    audit = forensics.pool_audit(case).df()
    assert list(audit.n_scheduler_rejections) == [2, 1]



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
