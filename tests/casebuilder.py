"""Build a tiny case from a table of rows: how a test states one situation of an incident.

A case is a list of rows, each a small dataclass naming one fact of the logs; ``build`` writes them
into a fresh in-memory case (straight into the canonical tables, no loader involved) and
``answer`` reads back what a responder relies on: which requests, and how sure.

Example:
    >>> case = build(
    ...     Fleet(),                                                   # prefill-0 exposed until 200 h
    ...     Request("x1", at=10, tokens=LIMIT, rejected=True),          # the placeholder path: a leak
    ...     Gateway("g1", at=11, tokens=LIMIT, layer="proxy"),          # gateway-only, at the limit
    ...     Gateway("g2", at=12, tokens=LIMIT - 1, layer="proxy"),      # under it
    ... )
    >>> answer(case)
    {'ray-x1': 'confirmed', 'g1': 'suspected'}

Times are hours after the synthetic epoch (``at=10.5``), or a ``datetime``; ``sec`` adds seconds.
The ``Fleet`` row is the usual deployment: ``prefill-0`` exposed (pool 681,280, limit 681,274) from
0 h until its fixing restart at 200 h, ``prefill-1`` healthy, ``decode-0``/``decode-1``, and every
node's last log line at 300 h. Nodes, pools, roles and times are all parameters.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from conftest import CTX, LIMIT_BAD, POOL_BAD, POOL_GOOD, Synth, t

import forensics
from forensics.case import Case

LIMIT = LIMIT_BAD
__all__ = ["CTX", "LIMIT", "POOL_BAD", "POOL_GOOD", "EngineLine", "Event", "Fleet", "Gateway", "LastLine",
           "Rejection", "Request", "Start", "answer", "build", "limit_of", "recipients", "when"]


def limit_of(pool: int, ctx: int = CTX) -> int:
    """SGLang's admission limit for a pool and context length (prompts >= it are rejected).

    Example:
        >>> limit_of(900_000)
        899994
    """
    return min(ctx - 1, pool - 1) - 5


def when(at: float | dt.datetime, sec: float = 0) -> dt.datetime:
    """The UTC time of a row: ``at`` hours after the epoch (or a datetime), plus ``sec`` seconds."""
    base = at if isinstance(at, dt.datetime) else t(at)
    return base + dt.timedelta(seconds=sec)


@dataclass
class Start:
    """A node (re)start with its configuration (the admission limit is derived from it, as SGLang does)."""

    node: str
    at: float | dt.datetime
    pool: int | None = POOL_BAD
    ctx: int | None = CTX
    role: str | None = "prefill"
    sec: float = 0
    pod: str | None = None  # the process of the node (None: the node itself)

    def write(self, s: Synth) -> None:
        seq = s._seq.get(self.node, 0) + 1
        s._seq[self.node] = seq
        ts = when(self.at, self.sec)
        s.insert("engine_starts", node=self.node, start_seq=seq, ts_start=ts,
                 ts_ready=ts + dt.timedelta(minutes=4), role=self.role, context_len=self.ctx,
                 max_total_num_tokens=self.pool, pod=self.pod or self.node,
                 **s._where(self.node))


@dataclass
class LastLine:
    """Any later line of a node (the end of its last start's period)."""

    node: str
    at: float | dt.datetime
    sec: float = 0
    pod: str | None = None  # the process of the node (None: the node itself)

    def write(self, s: Synth) -> None:
        s.other(self.node, when(self.at, self.sec), pod=self.pod or self.node)


@dataclass
class Fleet:
    """The usual deployment (see the module docstring); ``exposed`` maps node -> pool."""

    exposed: dict[str, int] = field(default_factory=lambda: {"prefill-0": POOL_BAD})
    healthy: tuple[str, ...] = ("prefill-1",)
    decode: tuple[str, ...] = ("decode-0", "decode-1")
    fixed_at: float | None = 200.0  # None: never fixed (the period stays open)
    last_line_at: float | None = 300.0
    role: str = "prefill"

    def write(self, s: Synth) -> None:
        for node, pool in self.exposed.items():
            Start(node, 0, pool=pool, role=self.role).write(s)
            if self.fixed_at is not None:
                Start(node, self.fixed_at, pool=POOL_GOOD, role=self.role).write(s)
        for node in self.healthy:
            Start(node, 0, pool=POOL_GOOD, role=self.role).write(s)
        for node in self.decode:
            Start(node, 0, pool=2_621_440, role="decode").write(s)
        if self.last_line_at is not None:
            for node in [*self.exposed, *self.healthy, *self.decode]:
                LastLine(node, self.last_line_at).write(s)


@dataclass
class Request:
    """One request through gateway, prefill and decode (see ``Synth.pd_request`` for the options).

    Its gateway id is ``ray-<xid>`` and its engine legs log ``x-request-id: <xid>``.
    """

    xid: str
    at: float | dt.datetime
    tokens: int
    sec: float = 0
    host: str = "10.0.2.11"
    opts: dict[str, Any] = field(default_factory=dict)

    def __init__(self, xid: str, at: float | dt.datetime, tokens: int, *, sec: float = 0,
                 host: str = "10.0.2.11", **opts: Any) -> None:
        self.xid, self.at, self.tokens, self.sec, self.host, self.opts = xid, at, tokens, sec, host, opts

    def write(self, s: Synth) -> None:
        s.pd_request(self.xid, when(self.at, self.sec), tokens=self.tokens, host=self.host, **self.opts)


@dataclass
class Gateway:
    """A gateway record only (no engine line of its own)."""

    request_id: str
    at: float | dt.datetime
    tokens: int | None = None
    status: int = 200
    tenant: str = "t1"
    layer: str = "edge"
    sec: float = 0
    opts: dict[str, Any] = field(default_factory=dict)

    def __init__(self, request_id: str, at: float | dt.datetime, tokens: int | None = None, *,
                 status: int = 200, tenant: str = "t1", layer: str = "edge", sec: float = 0,
                 **opts: Any) -> None:
        self.request_id, self.at, self.tokens, self.status = request_id, at, tokens, status
        self.tenant, self.layer, self.sec, self.opts = tenant, layer, sec, opts

    def write(self, s: Synth) -> None:
        s.gw(self.request_id, when(self.at, self.sec), layer=self.layer, status=self.status,
             tenant=self.tenant, prompt_tokens=self.tokens, **self.opts)


@dataclass
class EngineLine:
    """One engine request record (``kind`` received / finished / metrics / time_stats)."""

    node: str
    kind: str
    rid: str
    at: float | dt.datetime
    sec: float = 0
    cols: dict[str, Any] = field(default_factory=dict)

    def __init__(self, node: str, kind: str, rid: str, at: float | dt.datetime, *, sec: float = 0,
                 **cols: Any) -> None:
        self.node, self.kind, self.rid, self.at, self.sec, self.cols = node, kind, rid, at, sec, cols

    def write(self, s: Synth) -> None:
        s.req(self.node, self.kind, self.rid, when(self.at, self.sec), **self.cols)


@dataclass
class Rejection:
    """A scheduler input-length rejection line (the placeholder path)."""

    node: str
    rid: str | None
    at: float | dt.datetime
    tokens: int
    limit: int = LIMIT
    sec: float = 0

    def write(self, s: Synth) -> None:
        s.rejection(self.node, self.rid, when(self.at, self.sec), self.tokens, self.limit)


@dataclass
class Event:
    """A transfer / integrity event (e.g. ``prefill_transfer_failed``) for a bootstrap room."""

    node: str
    kind: str
    at: float | dt.datetime
    room: int | None
    sec: float = 0

    def write(self, s: Synth) -> None:
        s.event(self.node, self.kind, when(self.at, self.sec), self.room)


def build(*rows: Any) -> Case:
    """A fresh in-memory case holding exactly ``rows`` (written in the order given)."""
    s = Synth()
    for row in rows:
        row.write(s)
    return s.case


def answer(case: Case, **params: Any) -> dict[str, str]:
    """What ``affected_requests`` says: request id (else x-request-id, else decode rid) -> confidence."""
    df = forensics.affected_requests(case, **params).df()
    out: dict[str, str] = {}
    for r in df.itertuples():
        key = next((str(v) for v in (r.request_id, r.header_request_id, r.decode_rid) if isinstance(v, str)), "?")
        assert key not in out, f"{key} is affected twice"
        out[key] = str(r.confidence)
    return out


def recipients(case: Case) -> dict[str, tuple[int, int]]:
    """What ``affected_tenants`` says: tenant -> (confirmed, suspected)."""
    df = forensics.affected_tenants(case).df()
    return {str(r.tenant_id): (int(r.n_confirmed), int(r.n_suspected)) for r in df.itertuples()}
