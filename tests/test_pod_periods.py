"""Start periods per (node, pod): each pod is its own start series; the pods of one node follow each other in time.

A pod is a process: a restart with a new configuration is usually a new pod of the same logical
node (``glm53-prefill-0-7d9f8`` then ``glm53-prefill-0-k2x1q``), and a Deployment's replicas are
pods of one node running at once. One pod's fixed configuration must never end another pod's
still-exposed period that runs beside it; a new pod that starts after the old one's last line
replaced it. Checked through start_periods (pool_audit), exposure_windows, post_fix_check and
affected_requests on synthetic cases (rows straight into the tables, no loader).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from conftest import CTX, LIMIT_BAD, POOL_BAD, POOL_GOOD, Synth, t

import forensics

NODE = "prefill-0"
LEAK = 700_000  # over the exposed limit (681,274); a healthy pod runs it in full or rejects it as margin


def _start(s: Synth, pod: str, at: float, pool: int) -> None:
    seq = s._seq.get(NODE, 0) + 1
    s._seq[NODE] = seq
    s.insert("engine_starts", node=NODE, pod=pod, start_seq=seq, ts_start=t(at), ts_ready=t(at, 240),
             role="prefill", context_len=CTX, max_total_num_tokens=pool, **s._where(NODE))


def _last_line(s: Synth, pod: str, at: float) -> None:
    s.insert("engine_other_lines", node=NODE, pod=pod, ts=t(at), kind="noise", text="x", **s._where(NODE))


def _rejected_request(s: Synth, pod: str, at: float, xid: str) -> None:
    """A request whose prefill leg ran on ``pod`` and took the placeholder path (answered 200)."""
    room = next(s._room)
    s.gw(f"ray-{xid}", t(at), header_request_id=xid, tenant=f"tenant-{xid}")
    common: dict[str, Any] = {"bootstrap_host": "10.0.2.11", "bootstrap_room": room, "header_request_id": xid}
    s.insert("engine_requests", node=NODE, pod=pod, kind="received", rid=f"p-{xid}", ts=t(at, 1),
             is_health_check=False, **common, **s._where(NODE))
    s.insert("engine_rejections", node=NODE, pod=pod, ts=t(at, 2), kind="input_length", rid=f"p-{xid}",
             input_tokens=LEAK, limit_tokens=LIMIT_BAD, message="Input length exceeds", **s._where(NODE))
    s.insert("engine_requests", node=NODE, pod=pod, kind="finished", rid=f"p-{xid}", ts=t(at, 3), prompt_tokens=1,
             finish_type="length", finish_length=0, is_health_check=False, **common, **s._where(NODE))
    s.req("decode-0", "received", f"d-{xid}", t(at, 1), **common)
    s.req("decode-0", "finished", f"d-{xid}", t(at, 21), prompt_tokens=LEAK, completion_tokens=16,
          finish_type="length", **common)


def _case(pods: list[tuple[str, float | None, int | None, float | None]], requests: list[tuple[str, float, str]]) -> Synth:
    """``pods``: (pod, start hour or None for no startup line, pool, its last line's hour or None)."""
    s = Synth()
    s.start("decode-0", t(0), role="decode", pool=2_621_440)
    s.other("decode-0", t(300))
    for pod, at, pool, last in pods:
        if at is not None and pool is not None:
            _start(s, pod, at, pool)
        if last is not None:
            _last_line(s, pod, last)
    for pod, at, xid in requests:
        _rejected_request(s, pod, at, xid)
    return s


Period = tuple[str, str, dt.datetime, dt.datetime, bool]  # pod, verdict, start, end, open
Window = tuple[dt.datetime, dt.datetime, bool]

Fix = tuple[dt.datetime, str]  # when the node was fixed, the placeholder_after_fix result

CASES: list[tuple[str, list[Any], list[Any], list[Period], list[Window], list[str], Fix | None, dict[str, str]]] = [
    # (what, pods, requests, periods, node windows, node_config results, fixed, affected)
    ("sequential restart: the fixed config in a new pod ends the old pod's exposure",
     [("pf-7d9f8", 0, POOL_BAD, 100), ("pf-k2x1q", 101, POOL_GOOD, 300)], [("pf-7d9f8", 50, "a")],
     [("pf-7d9f8", "exposed", t(0), t(101), False), ("pf-k2x1q", "ok", t(101), t(300), True)],
     [(t(0), t(101), False)], ["pass"], (t(101), "pass"), {"ray-a": "confirmed"}),
    ("sequential restart with the same exposed config: one window, still open",
     [("pf-7d9f8", 0, POOL_BAD, 100), ("pf-k2x1q", 101, POOL_BAD, 300)], [("pf-k2x1q", 150, "a")],
     [("pf-7d9f8", "exposed", t(0), t(101), False), ("pf-k2x1q", "exposed", t(101), t(300), True)],
     [(t(0), t(300), True)], ["fail"], None, {"ray-a": "confirmed"}),
    ("concurrent replicas, one fixed: the other stays exposed, its leak is confirmed, the fixed one's is not",
     [("pf-aaaaa", 0, POOL_BAD, 300), ("pf-bbbbb", 50, POOL_GOOD, 300)],
     [("pf-aaaaa", 100, "a"), ("pf-bbbbb", 100.5, "b")],
     [("pf-aaaaa", "exposed", t(0), t(300), True), ("pf-bbbbb", "ok", t(50), t(300), True)],
     [(t(0), t(300), True)], ["fail", "pass"], None, {"ray-a": "confirmed"}),
    ("rolling update: the new pod started before the old one's last line: the old one is not taken as stopped",
     [("pf-aaaaa", 0, POOL_BAD, 100), ("pf-bbbbb", 99, POOL_GOOD, 300)], [],
     [("pf-aaaaa", "exposed", t(0), t(100), True), ("pf-bbbbb", "ok", t(99), t(300), True)],
     [(t(0), t(100), True)], ["fail", "pass"], None, {}),
    ("a container restart inside one pod: the pod's own next start ends its period",
     [("pf-aaaaa", 0, POOL_BAD, None), ("pf-aaaaa", 101, POOL_GOOD, 300)], [("pf-aaaaa", 50, "a")],
     [("pf-aaaaa", "exposed", t(0), t(101), False), ("pf-aaaaa", "ok", t(101), t(300), True)],
     [(t(0), t(101), False)], ["pass"], (t(101), "pass"), {"ray-a": "confirmed"}),
    # its placeholder-path 200 after the old pod's end: not over (the unknown period is not judged
    # exposed, so the request is not counted as affected here: pool_audit and post_fix_check say it)
    ("a new pod whose startup lines are missing: its own unknown period, and it replaced the old one",
     [("pf-aaaaa", 0, POOL_BAD, 100), ("pf-ccccc", None, None, None)], [("pf-ccccc", 200, "c")],
     [("pf-aaaaa", "exposed", t(0), t(200, 1), False), ("pf-ccccc", "unknown", t(200, 1), t(200, 3), True)],
     [(t(0), t(200, 1), False)], ["warn"], (t(200, 1), "fail"), {}),
]


@pytest.mark.parametrize(("what", "pods", "requests", "periods", "windows", "config", "fixed", "affected"),
                         CASES, ids=[c[0] for c in CASES])
def test_pods_of_one_node(what: str, pods: list[Any], requests: list[Any], periods: list[Period],
                          windows: list[Window], config: list[str], fixed: Fix | None,
                          affected: dict[str, str]) -> None:
    case = _case(pods, requests).case
    audit = forensics.pool_audit(case, node=NODE).df()
    got = [(r.pod, r.verdict, r.period_start.to_pydatetime(), r.period_end.to_pydatetime(), bool(r.period_open))
           for r in audit.itertuples()]
    assert sorted(got) == sorted(periods), what
    w = forensics.exposure_windows(case, node=NODE).df()
    w = w[w.scope == "node"]
    assert [(r.window_start.to_pydatetime(), r.window_end.to_pydatetime(), bool(r.window_open))
            for r in w.itertuples()] == windows, what
    post = forensics.post_fix_check(case, node=NODE).df()
    assert post[post.check == "node_config"].result.tolist() == config, what
    fix = post[post.check == "placeholder_after_fix"]
    assert len(fix) == (0 if fixed is None else 1), what
    if fixed is not None:
        assert f"after the fix at {fixed[0]}" in fix.detail.iloc[0] and fix.result.iloc[0] == fixed[1], what
    got_affected = forensics.affected_requests(case).df()
    assert dict(zip(got_affected.request_id, got_affected.confidence, strict=True)) == affected, what


def test_the_rejections_count_in_their_own_pods_period() -> None:
    """Concurrent replicas: the healthy pod's margin rejection is not the exposed pod's, nor a leak."""
    case = _case([("pf-aaaaa", 0, POOL_BAD, 300), ("pf-bbbbb", 50, POOL_GOOD, 300)],
                 [("pf-aaaaa", 100, "a"), ("pf-bbbbb", 100.5, "b")]).case
    audit = forensics.pool_audit(case, node=NODE).df().set_index("pod")
    assert audit.n_scheduler_rejections.to_dict() == {"pf-aaaaa": 1, "pf-bbbbb": 1}
    w = forensics.exposure_windows(case, node=NODE).df()
    assert w[w.scope == "node"].n_rejections.tolist() == [1]
    post = forensics.post_fix_check(case, node=NODE).df()
    assert post[post.check == "margin_rejections"][["result", "n"]].values.tolist() == [["warn", 1]]
    config = post[post.check == "node_config"].detail.tolist()
    assert "of pod pf-aaaaa" in config[0] and "STILL EXPOSED" in config[0]
    # a replica started later: the detail says what would make this pod's period end
    assert "a newer pod of the node started at 2026-09-03 02:00:00" in config[0]
    assert "newer pod" not in config[1]
