"""The judgement, case by case: small synthetic incidents, each named after what it guards.

Every case is a table of rows (``casebuilder``) and the answer a responder relies on: which
requests are affected and how sure (confirmed / suspected), which tenants, the limit, the window.
Each row of the table guards one rule whose silent change would change that answer.
"""

from __future__ import annotations

from typing import Any

import pytest
from casebuilder import (
    CTX,
    LIMIT,
    POOL_BAD,
    EngineLine,
    Event,
    Fleet,
    Gateway,
    LastLine,
    Rejection,
    Request,
    Start,
    answer,
    build,
    limit_of,
    recipients,
    when,
)

import forensics

POOL_2 = 900_000
LIMIT_2 = limit_of(POOL_2)  # 899,994
# two exposed configurations in one fleet: prefill-0 (681,274) and prefill-1 (899,994)
TWO_LIMITS = Fleet(exposed={"prefill-0": POOL_BAD, "prefill-1": POOL_2}, healthy=("prefill-2",))


def _incomplete_prefill(xid: str, at: float, tokens: int, prefill: str, room: int) -> list[Any]:
    """A request whose prefill leg logged no token count (Receive only) and whose decode saw ``tokens``."""
    leg = {"bootstrap_host": "10.0.2.11", "bootstrap_room": room, "header_request_id": xid}
    return [
        Gateway(f"ray-{xid}", at, header_request_id=xid),
        EngineLine(prefill, "received", f"p-{xid}", at, sec=1, **leg),
        EngineLine("decode-0", "received", f"d-{xid}", at, sec=1, **leg),
        EngineLine("decode-0", "finished", f"d-{xid}", at, sec=21, prompt_tokens=tokens, finish_type="stop", **leg),
    ]


def _health_check(node: str, at: float, **marks: Any) -> list[Any]:
    """A health-check generation on ``node`` carrying only the given marks, flagged by the loader's rule."""
    cols = {"bootstrap_host": "10.0.2.11", "bootstrap_room": 77, **marks}
    rid = cols.pop("rid", "hc-1")
    return [
        EngineLine(node, "received", rid, at, **cols),
        EngineLine(node, "finished", rid, at, sec=1, prompt_tokens=1, finish_type="length", **cols),
        EngineLine("decode-0", "received", rid, at, **cols),
        EngineLine("decode-0", "finished", rid, at, sec=2, prompt_tokens=700_000, finish_type="length", **cols),
    ]


UNIFIED = [Start("unified-0", 0, pool=POOL_BAD, role="unified"), LastLine("unified-0", 300)]


def _unified_leak_and_health_check() -> list[Any]:
    leg = {"bootstrap_host": None, "bootstrap_room": None}
    return [
        *UNIFIED,
        Gateway("ray-u", 10),  # edge record: no token count, no id the engine logged
        EngineLine("unified-0", "received", "u-1", 10, sec=1, **leg),
        Rejection("unified-0", "u-1", 10, 700_000, sec=2),
        EngineLine("unified-0", "finished", "u-1", 10, sec=20, prompt_tokens=1, finish_type="length", **leg),
        # SGLang's own health check in unified mode: no bootstrap room, no fake host, nearer in time
        EngineLine("unified-0", "received", "HEALTH_CHECK_1725152400.2", 10, sec=0.3, is_health_check=True, **leg),
        EngineLine("unified-0", "finished", "HEALTH_CHECK_1725152400.2", 10, sec=0.4, prompt_tokens=1,
                   finish_type="length", is_health_check=True, **leg),
    ]


F = Fleet()
CASES: list[tuple[str, list[Any], dict[str, str]]] = [
    # -- the limit: >= is the rule, on every path --------------------------------------------------
    ("gateway-only request exactly at the limit is suspected",
     [F, Gateway("g", 10, LIMIT, layer="proxy")], {"g": "suspected"}),
    ("gateway-only request one under the limit is not affected",
     [F, Gateway("g", 10, LIMIT - 1, layer="proxy")], {}),
    ("decode leg exactly at the limit, prefill log missing, no gateway count: suspected",
     [F, Request("x", 10, LIMIT, prefill_logged=False)], {"ray-x": "suspected"}),
    ("rejection exactly at the limit is confirmed",
     [F, Request("x", 10, LIMIT, rejected=True)], {"ray-x": "confirmed"}),
    # -- only exposed periods ---------------------------------------------------------------------
    ("6-token-margin rejection on a healthy node answered 200 is not a leak",
     [F, Request("x", 10, CTX - 3, prefill="prefill-1", rejected=True)], {}),
    ("placeholder on a node after its fix is not a leak",
     [F, Request("x", 250, 700_000, rejected=True)], {}),
    # -- 2xx only ---------------------------------------------------------------------------------
    ("304 on the placeholder path is not a leak", [F, Request("x", 10, 700_000, rejected=True, status=304)], {}),
    ("308 gateway-only record over the limit is not suspected",
     [F, Gateway("g", 10, 700_000, status=308, layer="proxy")], {}),
    ("206 on the placeholder path is a leak", [F, Request("x", 10, 700_000, rejected=True, status=206)],
     {"ray-x": "confirmed"}),
    ("transfer failure behind a 200 is not a leak",
     [F, Request("x", 10, 700_000, rejected=True, room=42), Event("decode-0", "decode_transfer_failed", 10, 42, sec=5)],
     {}),
    ("engine-only placeholder whose decode aborted is not a leak",
     [F, Request("x", 10, 700_000, rejected=True, status=None, decode_finish="abort")], {}),
    # -- several exposed limits in one fleet ------------------------------------------------------
    ("two exposed limits: a gateway-only request over the smaller is suspected",
     [TWO_LIMITS, Gateway("g", 10, 700_000, layer="proxy")], {"g": "suspected"}),
    ("two exposed limits: a placeholder on the bigger-limit node is a leak at its own limit",
     [TWO_LIMITS, Request("x", 10, LIMIT_2, prefill="prefill-1", rejected=True)], {"ray-x": "confirmed"}),
    ("two exposed limits: a full prefill under the bigger node's limit clears the request",
     [TWO_LIMITS, Request("x", 10, 700_000, prefill="prefill-1")], {}),
    ("prefill without token count on the bigger-limit node: judged by that node's limit (under)",
     [TWO_LIMITS, *_incomplete_prefill("x", 10, 700_000, "prefill-1", 51)], {}),
    ("prefill without token count on the bigger-limit node: judged by that node's limit (over)",
     [TWO_LIMITS, *_incomplete_prefill("x", 10, LIMIT_2, "prefill-1", 52)], {"ray-x": "suspected"}),
    # -- period and window bounds, to the second --------------------------------------------------
    ("rejection in the first second of the exposed period is a leak",
     [F, Request("x", 0, 700_000, rejected=True, sec=-2)], {"ray-x": "confirmed"}),
    ("rejection in the second of the fixing restart belongs to the new configuration",
     [F, Request("x", 200, 700_000, rejected=True, sec=-2)], {}),
    ("gateway-only request in the first second of the window is suspected",
     [F, Gateway("g", 0, 700_000, layer="proxy")], {"g": "suspected"}),
    ("gateway-only request in the second of the fixing restart is outside the window",
     [F, Gateway("g", 200, 700_000, layer="proxy")], {}),
    ("gateway-only request one second before the fixing restart is suspected",
     [F, Gateway("g", 200, 700_000, layer="proxy", sec=-1)], {"g": "suspected"}),
    ("open period: gateway-only request at the node's last line is suspected",
     [Fleet(fixed_at=None), Gateway("g", 300, 700_000, layer="proxy")], {"g": "suspected"}),
    ("open period: gateway-only request after the node's last line is not suspected",
     [Fleet(fixed_at=None), Gateway("g", 300, 700_000, layer="proxy", sec=1)], {}),
    ("open period ends at the last line of any kind, not only request lines",
     [Fleet(fixed_at=None, last_line_at=None), LastLine("prefill-0", 300), Gateway("g", 299, 700_000, layer="proxy")],
     {"g": "suspected"}),
    ("period without a later start or line ends at its start: nothing after it is judged",
     [Fleet(fixed_at=None, last_line_at=None), Gateway("g", 1, 700_000, layer="proxy")], {}),
    # -- joining the legs and the gateway record --------------------------------------------------
    ("room reused on another host: each decode leg pairs with its own prefill",
     [F, Request("x", 10, 700_000, rejected=True, room=7, tenant="A"),
      Request("y", 10, 3_000, sec=2, prefill="prefill-1", decode="decode-0", room=7, host="10.0.2.12", tenant="B")],
     {"ray-x": "confirmed"}),
    ("time match: another tenant's record nearer in time but with other tokens never takes the leak",
     [F, Request("x", 10, 700_000, rejected=True, header=False, layer="proxy", gateway_tokens=700_000, tenant="A"),
      Gateway("ray-other", 10, 3_000, sec=1.5, layer="proxy", tenant="B")],
     {"ray-x": "confirmed"}),
    ("time match: a record's chain with matching tokens beats a nearer other record without a count",
     [F, Request("x", 10, 700_000, rejected=True, header=False, layer="proxy", gateway_tokens=700_000, tenant="A"),
      Gateway("ray-other", 10, None, sec=1.5, tenant="B")],
     {"ray-x": "confirmed"}),
    ("time match: a record goes to the chain with matching tokens, not a nearer one without a count",
     [F, Request("x", 10, 700_000, rejected=True, header=False, layer="proxy", gateway_tokens=700_000, tenant="A"),
      EngineLine("decode-1", "received", "d-c", 10, sec=0.3, bootstrap_host="10.0.2.12", bootstrap_room=99)],
     {"ray-x": "confirmed"}),
    ("time match: gateway tokens within 1 % of the engine's still match",
     [F, Request("x", 10, 706_000, rejected=True, header=False, layer="proxy", gateway_tokens=700_000)],
     {"ray-x": "confirmed"}),
    ("two layers' records of one request share no id but match its chain: the outermost layer's reports it",
     [F, Request("x", 10, 700_000, rejected=True, tenant="A"), Gateway("d-x", 10, sec=1, layer="proxy", tenant="B")],
     {"ray-x": "confirmed"}),
    ("two layers logged one gateway-only request with the same id: the outer layer's record is the suspect, "
     "the inner is shadowed",
     [F, Gateway("g", 10, 700_000, header_request_id="x"),
      Gateway("pg", 10, 700_000, sec=0.5, layer="proxy", header_request_id="x")],
     {"g": "suspected"}),
    ("time match: a record 31 s away is not the request's",
     [F, Request("x", 10, 700_000, rejected=True, header=False, status=None), Gateway("ray-far", 10, sec=-30)],
     {"d-x": "confirmed"}),
    ("time match: a record 30 s away can be the request's",
     [F, Request("x", 10, 700_000, rejected=True, header=False, status=None), Gateway("ray-near", 10, sec=-29)],
     {"ray-near": "confirmed"}),
    # -- health checks are never requests ---------------------------------------------------------
    ("unified-mode health check never takes the leak's gateway record",
     _unified_leak_and_health_check(), {"ray-u": "confirmed"}),
    ("health check known by the loader's flag alone", [F, *_health_check("prefill-0", 10, is_health_check=True)], {}),
    # each mark alone, flagged by the loader's rule (engine.sql.HEALTH, applied by Synth as the
    # loader applies it; tests/test_ingest_guards.py reads real lines); request_legs trusts the flag
    ("health check known by its rid alone", [F, *_health_check("prefill-0", 10, rid="HEALTH_CHECK_17")], {}),
    ("health check known by bootstrap room 0 alone", [F, *_health_check("prefill-0", 10, bootstrap_room=0)], {}),
    ("health check known by the fake bootstrap host alone",
     [F, *_health_check("prefill-0", 10, bootstrap_host="2.2.2.2")], {}),
]


@pytest.mark.parametrize(("guards", "rows", "expected"), CASES, ids=[c[0] for c in CASES])
def test_which_requests(guards: str, rows: list[Any], expected: dict[str, str]) -> None:
    assert answer(build(*rows)) == expected


def test_a_given_limit_does_not_make_requests_outside_the_window_suspects() -> None:
    """--limit-tokens alone changes the limit, not the window: after the fix nothing is suspected."""
    case = build(F, Gateway("in", 10, 600_000, layer="proxy"), Gateway("after", 250, 600_000, layer="proxy"))
    assert answer(case, limit_tokens=500_000) == {"in": "suspected"}


def test_the_limit_of_a_suspect_is_the_smallest_exposed_one() -> None:
    df = forensics.affected_requests(build(TWO_LIMITS, Gateway("g", 10, 700_000, layer="proxy"))).df()
    assert list(df.admission_limit) == [LIMIT]


def test_the_leak_keeps_its_tenant_when_a_room_is_reused_across_hosts() -> None:
    case = build(F, Request("x", 10, 700_000, rejected=True, room=7, tenant="A"),
                 Request("y", 10, 3_000, sec=2, prefill="prefill-1", room=7, host="10.0.2.12", tenant="B"))
    assert recipients(case) == {"A": (1, 0)}


def test_the_wrong_tenant_is_never_notified_by_a_time_match() -> None:
    case = build(F, Request("x", 10, 700_000, rejected=True, header=False, layer="proxy", gateway_tokens=700_000,
                            tenant="A"),
                 Gateway("ray-other", 10, 3_000, sec=1.5, layer="proxy", tenant="B"))
    assert set(forensics.notifications(case).df().tenant_id) == {"A"}


# -- filters and parameters ------------------------------------------------------------------------


def test_start_and_end_filters_are_half_open() -> None:
    case = build(F, Request("a", 10, 700_000, rejected=True), Request("b", 20, 700_000, rejected=True))
    assert answer(case, start=when(10), end=when(20)) == {"ray-a": "confirmed"}
    assert answer(case, start=when(10, 1), end=when(20, 1)) == {"ray-b": "confirmed"}


@pytest.mark.parametrize(("node", "expected"), [("prefill-0", {"ray-a", "ray-b"}), ("decode-1", {"ray-b"})])
def test_node_filter_matches_either_leg(node: str, expected: set[str]) -> None:
    case = build(F, Request("a", 10, 700_000, rejected=True), Request("b", 20, 700_000, rejected=True,
                                                                        decode="decode-1"))
    assert set(answer(case, node=node)) == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"limit_tokens": 0}, "positive token count"), ({"start": when(10), "end": when(10)}, "is not after")],
)
def test_parameters_are_checked(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(forensics.errors.ForensicsError, match=message):
        forensics.affected_requests(build(F), **kwargs)


def test_rejection_evidence_is_the_first_rejection_line() -> None:
    case = build(F, Request("x", 10, 700_000, rejected=True), Rejection("prefill-0", "p-x", 10, 700_000, sec=5))
    ev = forensics.affected_requests(case).df().evidence[0]
    rej = dict(p.split("=", 1) for p in ev.split("; "))["rejection"]
    lines = case.con.sql("SELECT line_no FROM engine_rejections WHERE rid = 'p-x' ORDER BY line_no").fetchall()
    assert len(lines) == 2
    assert rej == f"engine/prefill-0/sglang.log:{lines[0][0]}"
