"""The generator's shared state: tenants, ids, the output queue and its helpers.

``GeneratorState`` holds everything the engine events, the gateway records and
the truth read and write; ``Generator`` (``_gen``) combines them. One random
stream (``rng``) is drawn from in a fixed order, which is what keeps the
sample bit for bit the same.

Example:
    >>> import tempfile
    >>> g = GeneratorState(tempfile.mkdtemp(), requests=300, seed=1)
    >>> len(g.tenants), g.uuid4()[14]
    (46, '4')
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import itertools
import random
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.sample import _formats as F
from forensics.sample._world import (
    CONTEXT_NEW,
    DECODE,
    ENGINE_LOG_GAP_NODES,
    NODES,
    POOL_EXPOSED,
    admission_limit,
    config_at,
)
from forensics.sample._writers import FileWriter, RotatingSink

LIMIT = admission_limit(CONTEXT_NEW, POOL_EXPOSED)  # 681274
LONG_MIN = 400_000  # "long prompt" for trap bookkeeping

_WORDS = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do", "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "ut", "enim", "ad", "minim", "veniam", "quis", "nostrud", "exercitation", "ullamco", "laboris", "nisi", "aliquip", "ex", "ea", "commodo", "consequat", "synthetic", "filler", "text", "sample", "token", "block", "alpha", "beta", "gamma", "delta"]



@dataclass
class Tenant:
    """One customer of the platform."""

    tid: str
    layer: str  # 'edge' (Cloudflare) | 'proxy' (LiteLLM)
    label: str
    role: str = "customer"
    ips: list[str] = field(default_factory=list)
    org: str | None = None
    api_key: str = ""
    user: str = ""
    end_users: list[str] = field(default_factory=list)


@dataclass
class NodeState:
    """Small rolling state of one engine node."""

    last_recv: int = -(10**15)
    active: list[tuple[int, int]] = field(default_factory=list)  # (end_ms, tokens)

    def load(self, t: int) -> tuple[int, int]:
        """Return (#running, #tokens) at ``t`` and drop finished entries."""
        if len(self.active) > 64:
            self.active = [a for a in self.active if a[0] > t]
        run = 0
        tok = 0
        for end, n in self.active:
            if end > t:
                run += 1
                tok += n
        return run, tok


@dataclass
class Spec:
    """What to generate for one client request."""

    t0: int
    tenant: Tenant | None = None
    n: int | None = None
    m: int | None = None
    stream: bool | None = None
    prefill: str | None = None
    decode: str | None = None
    override: str | None = None  # 'xfer500' | 'xfer_stream200'
    wrap_router: bool = False
    note: str = ""
    long: bool = False
    redirect: bool = False  # the client first hit the edge over http: a 308 record precedes the request



class GeneratorState:
    """The state of one generation run and the helpers every part of it uses."""

    def __init__(self, out_dir: str | Path, requests: int, seed: int) -> None:
        if requests < 200:
            raise ValueError("requests must be >= 200 (the scripted traps alone need ~25)")
        self.out = Path(out_dir)
        self.requests = requests
        self.seed = seed
        self.rng = random.Random(f"forensics.sample:{seed}")
        self.counts: dict[str, dict[str, Any]] = {}
        self.heap: list[tuple[int, int, str, Any]] = []
        self.flushed = 0
        self.seq = itertools.count()
        self.marks: dict[str, tuple[str, int]] = {}
        self.state = {n: NodeState() for n in NODES}
        self.recent: dict[str, deque[tuple[int, int, str, str, str]]] = {d: deque() for d in DECODE}
        self.leaks: dict[str, dict[str, Any]] = {}
        self.traps: dict[str, Any] = {
            k: []
            for k in (
                "good_node_long",
                "at_limit_minus_one",
                "near_limit_leaks",
                "over_context_400",
                "transfer_failure_500",
                "stream_error_200",
                "after_fix_long_ok",
                "before_misconfig_long",
                "streamed_leaks",
                "duplicate_records",
                "malformed_lines",
                "non_utf8_lines",
                "redirect_3xx",
                "under_node_limit_exposed",
            )
        }
        self.suspected: dict[str, dict[str, Any]] = {}
        self.lost_lines: dict[str, int] = {n: 0 for n in ENGINE_LOG_GAP_NODES}
        self.health_checks = 0
        self.n_redirects = 0
        self.n_by_layer = {"edge": 0, "proxy": 0}
        self.n_by_status: dict[str, int] = {}
        self.req_counter = 0
        self.n_long = 0  # random long-prompt requests, set by run()
        self.fillers = [self._mk_filler(i) for i in range(97)]
        self._make_tenants()
        self.flags: dict[str, int] = {}
        self.ll_pending: list[tuple[int, str, str]] = []  # (rows_to_wait, line, mark)
        self.sinks: dict[str, RotatingSink] = {}
        self.cf_writer: FileWriter | None = None
        self.cf_hour = -1
        self.cf_pending: list[tuple[bytes, str, str | None]] = []
        self.ll: FileWriter | None = None

    # ------------------------------------------------------------ helpers

    def _mk_filler(self, i: int) -> str:
        r = random.Random(f"filler:{i}")
        return " ".join(r.choice(_WORDS) for _ in range(r.randint(6, 16)))

    def hexid(self, bits: int = 128) -> str:
        """Return a random lowercase hex id of ``bits`` bits."""
        return f"{self.rng.getrandbits(bits):0{bits // 4}x}"

    def uuid4hex(self) -> str:
        """Return a uuid4-shaped 32-hex id (SGLang rid)."""
        v = self.rng.getrandbits(128)
        v &= ~(0xF000 << 64)
        v |= 0x4000 << 64
        v &= ~(0xC000 << 48)
        v |= 0x8000 << 48
        return f"{v:032x}"

    def uuid4(self) -> str:
        """Return a dashed uuid4 string."""
        h = self.uuid4hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def ulid(self, t: int) -> str:
        """Return a ULID-like x-request-id (``req_`` + 26 Crockford chars)."""
        alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
        v = (t << 80) | self.rng.getrandbits(80)
        chars = []
        for _ in range(26):
            chars.append(alphabet[v & 31])
            v >>= 5
        return "req_" + "".join(reversed(chars))

    def smg_id(self) -> str:
        """Return an smg-generated request id."""
        a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
        return "chatcmpl-" + "".join(a[self.rng.randrange(62)] for _ in range(24))

    def U(self, a: int, b: int) -> int:
        """Uniform integer in [a, b]."""
        return self.rng.randint(a, b)

    def filler(self) -> str:
        """Return a short synthetic filler sentence (never real data)."""
        return self.fillers[self.rng.randrange(len(self.fillers))]

    def emit(self, t: int, sink: str, payload: Any) -> None:
        """Queue output for ``sink`` at UTC ms ``t`` (never earlier than what was written)."""
        if t < self.flushed:
            raise RuntimeError(f"event at {t} queued after output reached {self.flushed}")
        heapq.heappush(self.heap, (t, next(self.seq), sink, payload))

    def eng(self, node: str, t: int, msg: str, tag: str = "", kind: str = "rec", mark: str | None = None) -> None:
        """Queue one prefixed engine line."""
        self.emit(t, node, [(F.engine_prefix(t, tag) + msg, kind, mark)])

    def reqlog(self, node: str, t: int, msg: str, mark: str | None = None) -> None:
        """Queue a request-log line, unprefixed on 0.5.8-0.5.11-style starts."""
        st = config_at(node, t)
        if st is not None and st.style == "C":
            self.emit(t, node, [(msg, "rec", mark)])
        else:
            self.emit(t, node, [(F.engine_prefix(t) + msg, "rec", mark)])

    # ------------------------------------------------------------ tenants

    def _make_tenants(self) -> None:
        r = random.Random(f"tenants:{self.seed}")
        edge: list[Tenant] = []
        for i in range(40):
            ips = []
            for _ in range(r.randint(1, 3)):
                net = r.choice(["203.0.113", "198.51.100", "192.0.2"])
                ips.append(f"{net}.{r.randint(1, 254)}")
            if i % 7 == 3:
                ips.append(f"2001:db8:{r.randint(1, 0xFFFF):x}::{r.randint(1, 0xFFFF):x}")
            edge.append(Tenant(f"{r.getrandbits(128):032x}", "edge", f"acct-{i:02d}", ips=ips))
        edge[38].role = "researcher"
        edge[38].label = "acct-38-researcher"
        edge[39].role = "operator"
        edge[39].label = "acct-39-operator"
        orgs = [str(_uuid(r)), str(_uuid(r))]
        proxy: list[Tenant] = []
        for i, alias in enumerate(["ent-atlas", "ent-boreal", "ent-cobalt", "ent-dune", "ent-ember", "ent-fjord"]):
            t = Tenant(_uuid(r), "proxy", alias, org=orgs[i % 2])
            t.api_key = hashlib.sha256(f"sk-{alias}-{self.seed}".encode()).hexdigest()
            t.user = f"svc-{alias[4:]}"
            t.end_users = [f"eu-{r.getrandbits(32):08x}" for _ in range(r.randint(0, 4))]
            t.ips = [f"10.1.{r.randint(0, 9)}.{r.randint(2, 250)}"]
            proxy.append(t)
        self.tenants = edge + proxy
        customers = edge[:38] + proxy
        order = list(range(len(customers)))
        r.shuffle(order)
        # Zipf-skewed traffic; the 6 enterprise teams behind LiteLLM get ~13 % of it
        weights = [0.0] * len(customers)
        for rank, idx in enumerate(order):
            weights[idx] = 1.0 / (rank + 1) ** 1.1
        self.customers = customers
        self.cum_w = list(itertools.accumulate(weights))
        self.long_edge = [edge[i] for i in (1, 4, 7, 10, 13, 17, 22, 29)]
        self.long_proxy = [proxy[0], proxy[3]]
        self.long_pool = self.long_edge + self.long_proxy
        self.long_cum = list(itertools.accumulate([3, 2, 2, 1.5, 1.5, 1, 1, 1, 2, 1.5]))
        self.by_key = {f"L{i}": t for i, t in enumerate(self.long_edge)}
        self.by_key.update({"P0": proxy[0], "P1": proxy[3], "P2": proxy[1], "R": edge[38], "O": edge[39]})
        self.by_key["E5"] = edge[5]

    def pick_customer(self) -> Tenant:
        """Zipf-weighted customer."""
        u = self.rng.random() * self.cum_w[-1]
        return self.customers[bisect.bisect_right(self.cum_w, u)]

    def pick_long(self) -> Tenant:
        """Weighted long-context customer."""
        u = self.rng.random() * self.long_cum[-1]
        return self.long_pool[bisect.bisect_right(self.long_cum, u)]

    def _flag(self, name: str, frac: float, cond: bool) -> bool:
        """True once, for the first request meeting ``cond`` after ``frac`` of the requests."""
        if name in self.flags or not cond or self.req_counter < int(self.requests * frac):
            return False
        self.flags[name] = self.req_counter
        return True


def _uuid(r: random.Random) -> str:
    h = f"{r.getrandbits(128):032x}"
    h = h[:12] + "4" + h[13:16] + "89ab"[int(h[16], 16) % 4] + h[17:]
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

