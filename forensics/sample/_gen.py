"""Streaming generator of one SGLang prefill/decode incident (see ``generate``).

Requests are produced in gateway-start order; every log line they cause goes
into a small time-ordered heap and is written once no earlier line can follow.
Only rolling state is kept (in-flight lines, recent decode finishes per decode
node, counters), so memory stays bounded at any request count.

Example:
    >>> import tempfile
    >>> truth = Generator(tempfile.mkdtemp(), requests=300, seed=1).run()
    >>> truth["admission_limit"]
    681274
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import itertools
import json
import math
import random
import shutil
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.sample import _formats as F
from forensics.sample._world import (
    BOOTSTRAP_PORT,
    CF_DIR,
    CF_MODEL,
    CF_STRING_TS,
    CONTEXT_NEW,
    DECODE,
    ENGINE_LOG_GAP,
    ENGINE_LOG_GAP_NODES,
    ENGINE_TZ,
    FAKE_BOOTSTRAP_HOST,
    GATEWAY_TZ,
    LITELLM_PATH,
    MAX_REQUEST_S,
    NODES,
    POOL_EXPOSED,
    PREFILL,
    PRIVATE,
    ROLLING_QUIET,
    ROTATION,
    SOURCE_WINDOW_S,
    STARTS,
    STYLE_NAMES,
    T_BEGIN,
    T_END,
    T_ROUTER_START,
    T_TRAFFIC,
    Start,
    admission_limit,
    config_at,
    diurnal,
    engine_log_lost,
    fleet_limit_at,
    ms,
    serving,
    starts_of,
)
from forensics.sample._writers import FileWriter, RotatingSink

GENERATOR_VERSION = "1.1.0"
LIMIT = admission_limit(CONTEXT_NEW, POOL_EXPOSED)  # 681274
LONG_MIN = 400_000  # "long prompt" for trap bookkeeping

SOURCE_RULE = (
    "possible_sources of a leak = every gateway-visible request whose decode 'Finish:' was logged on the "
    "SAME decode node at a time t_f (UTC, second resolution) with t_r - 600 s <= t_f <= t_r, where t_r is the "
    "leak's decode 'Receive:' time (UTC, second resolution); the leak itself is excluded; requests of the "
    "leak's own tenant are kept and flagged same_tenant=true; health checks (no gateway record) and "
    "requests whose decode aborted (front-end 400, transfer failure) are not sources"
)

_WORDS = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do", "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "ut", "enim", "ad", "minim", "veniam", "quis", "nostrud", "exercitation", "ullamco", "laboris", "nisi", "aliquip", "ex", "ea", "commodo", "consequat", "synthetic", "filler", "text", "sample", "token", "block", "alpha", "beta", "gamma", "delta"]

_ABORT_XFER_P = "Decode instance could be dead, remote mooncake session {ip}:{port} is not alive"
_ABORT_XFER_D = "Failed to get kvcache from prefill instance, it might be dead"


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


class Generator:
    """Generate the sample incident into ``out_dir`` (see module docstring)."""

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

    # ------------------------------------------------------------ schedule

    def _buckets(self) -> tuple[list[int], list[float]]:
        starts = list(range(T_TRAFFIC, T_END, 60_000))
        cum = list(itertools.accumulate(diurnal(s + 30_000) for s in starts))
        return starts, cum

    def normal_arrivals(self, n: int) -> Iterator[tuple[int, int, int, Any]]:
        """Yield exactly ``n`` diurnal arrival times in order."""
        starts, cum = self._buckets()
        total = cum[-1]
        r = random.Random(f"arrivals:{self.seed}")
        prev = 0
        k = 0
        for i, s in enumerate(starts):
            upto = int(cum[i] * n / total) if i + 1 < len(starts) else n
            cnt = upto - prev
            prev = upto
            for off in sorted(r.randrange(60_000) for _ in range(cnt)):
                k += 1
                yield (s + off, 2, k, None)

    def long_arrivals(self, n: int) -> Iterator[tuple[int, int, int, Any]]:
        """Yield ``n`` long-prompt arrival times (diurnal, avoiding the rolling restart)."""
        starts, cum = self._buckets()
        r = random.Random(f"long:{self.seed}")
        times: list[int] = []
        while len(times) < n:
            u = r.random() * cum[-1]
            i = bisect.bisect_right(cum, u)
            t = starts[min(i, len(starts) - 1)] + r.randrange(60_000)
            if ROLLING_QUIET[0] <= t < ROLLING_QUIET[1] or PRIVATE[0] <= t < PRIVATE[1]:
                continue
            # no random long request half in the engine log gap: the scripted ones are its story
            if ENGINE_LOG_GAP[0] - (MAX_REQUEST_S + 60) * 1000 <= t < ENGINE_LOG_GAP[1] + 60_000:
                continue
            if any(st.t_first - 60_000 <= t < st.t_ready + 60_000 for st in STARTS):
                continue
            times.append(t)
        times.sort()
        for k, t in enumerate(times):
            yield (t, 1, k, None)

    def scripted(self) -> list[Spec]:
        """Return the scripted trap requests."""
        K = self.by_key
        S = Spec
        lst = [
            S(ms(2026, 9, 2, 3, 14, 7), K["L0"], 600000, 900, False, "prefill-0", "decode-0", note="old ctx 400"),
            S(ms(2026, 9, 2, 9, 30, 41), K["P0"], 500000, 700, False, "prefill-1", "decode-1", note="old ok"),
            S(ms(2026, 9, 4, 5, 20, 12), K["L1"], 702133, 812, False, "prefill-2", "decode-0", note="good node"),
            S(ms(2026, 9, 6, 11, 0, 3), K["P1"], 850000, 640, False, "prefill-2", "decode-1", note="good node"),
            S(ms(2026, 9, 5, 2, 0, 30), K["L2"], LIMIT - 1, 530, False, "prefill-0", "decode-1", note="limit-1"),
            S(ms(2026, 9, 5, 3, 0, 10), K["L3"], LIMIT, 1024, False, "prefill-1", "decode-0", note="limit"),
            S(ms(2026, 9, 5, 4, 10, 55), K["L4"], LIMIT + 1, 388, False, "prefill-0", "decode-1", note="limit+1"),
            S(ms(2026, 9, 6, 6, 0, 20), K["L5"], 681279, 2048, True, "prefill-1", "decode-1", note="681279"),
            S(ms(2026, 9, 6, 7, 30, 44), K["L6"], 681280, 733, True, "prefill-0", "decode-0", note="681280"),
            S(ms(2026, 9, 7, 2, 0, 9), K["P0"], 681281, 455, False, "prefill-0", "decode-0", note="681281"),
            # prefill-1's second exposed configuration (limit 777786): over the fleet limit but
            # under this node's own limit is admitted in full; at its limit the placeholder path
            S(ms(2026, 9, 7, 8, 30, 12), K["L5"], 777785, 600, False, "prefill-1", "decode-0", note="node limit-1"),
            S(ms(2026, 9, 7, 9, 0, 40), K["L6"], 777786, 512, False, "prefill-1", "decode-1", note="node limit"),
            # in the engine log gap: gateway records only (the proxy logs token counts)
            S(ms(2026, 9, 7, 4, 12, 31), K["P2"], 700000, 512, False, "prefill-0", "decode-1", note="gap leak"),
            S(ms(2026, 9, 7, 4, 31, 8), K["P0"], LIMIT, 300, True, "prefill-0", "decode-0", note="gap at limit"),
            S(ms(2026, 9, 7, 4, 47, 50), K["P1"], 750000, 420, False, "prefill-2", "decode-1", note="gap good node"),
            S(ms(2026, 9, 7, 4, 55, 2), K["P0"], LIMIT - 1, 256, False, "prefill-1", "decode-0", note="gap under limit"),
            # the client first hit http://: the edge answered 308, the retry over https leaked
            S(ms(2026, 9, 5, 9, 41, 3), K["L7"], 712345, 380, False, "prefill-0", "decode-0", note="redirect", redirect=True),
            S(ms(2026, 9, 4, 8, 0, 0), K["L7"], 1100000, 500, False, "prefill-0", "decode-1", note="over ctx"),
            S(ms(2026, 9, 7, 10, 0, 17), K["P1"], 1048576, 500, False, "prefill-2", "decode-0", note="= ctx"),
            S(ms(2026, 9, 8, 1, 0, 31), K["L0"], 1500000, 500, True, "prefill-1", "decode-1", note="over ctx"),
            S(ms(2026, 9, 4, 12, 0, 5), K["E5"], 3200, 300, False, "prefill-2", "decode-1", "xfer500"),
            S(ms(2026, 9, 6, 13, 0, 40), K["L1"], 750000, 600, False, "prefill-0", "decode-0", "xfer500", True),
            S(ms(2026, 9, 7, 16, 20, 12), K["P2"], 5400, 420, True, "prefill-1", "decode-0", "xfer_stream200"),
            S(ms(2026, 9, 8, 9, 12, 33), K["R"], 802133, 256, False, "prefill-1", "decode-1", note="researcher"),
            S(ms(2026, 9, 8, 9, 40, 2), K["R"], 702500, 256, True, "prefill-0", "decode-0", note="researcher"),
            S(ms(2026, 9, 9, 13, 5, 27), K["O"], 702133, 256, False, "prefill-0", "decode-1", note="repro"),
            S(ms(2026, 9, 9, 15, 30, 10), K["O"], 702133, 256, False, "prefill-0", "decode-0", note="fix test"),
            S(ms(2026, 9, 9, 16, 10, 45), K["O"], 900000, 256, False, "prefill-1", "decode-1", note="fix test"),
            S(ms(2026, 9, 9, 21, 0, 3), K["L2"], 760000, 610, False, "prefill-0", "decode-0", note="after fix"),
            S(ms(2026, 9, 10, 3, 30, 19), K["P0"], 820000, 700, True, "prefill-1", "decode-1", note="after fix"),
        ]
        for s in lst:
            s.long = (s.n or 0) >= LONG_MIN
        lst.sort(key=lambda s: s.t0)
        return lst

    def probes(self, node: str, gid: int) -> Iterator[tuple[int, int, int, Any]]:
        """Yield router health probes of one node (every 600 s)."""
        t = T_BEGIN + 240_000 + gid * 97_000
        k = 0
        while t < T_END:
            yield (t, 10 + gid, k, ("probe", node))
            t += 600_000
            k += 1

    def noise(self, node: str, gid: int) -> Iterator[tuple[int, int, int, Any]]:
        """Yield background noise events of one node."""
        r = random.Random(f"noise:{self.seed}:{node}")
        t = T_BEGIN + r.randint(3600_000, 4 * 3600_000)
        k = 0
        while t < T_END:
            yield (t, 20 + gid, k, ("noise", node))
            t += r.randint(2 * 3600_000, 6 * 3600_000)
            k += 1

    def one_offs(self) -> Iterator[tuple[int, int, int, Any]]:
        """Yield the special one-off engine events (tracebacks, invalid HTTP, latin-1 bytes)."""
        ev = [
            (ms(2026, 9, 2, 17, 3, 12), "invalid_http", "prefill-0"),
            (ms(2026, 9, 2, 17, 3, 13), "invalid_http", "prefill-0"),
            (ms(2026, 9, 4, 7, 12, 40), "asgi_traceback", "decode-1"),
            (ms(2026, 9, 6, 10, 11, 12), "glog_latin1", "decode-0"),
            (ms(2026, 9, 9, 21, 5, 33), "thread_traceback", "prefill-2"),
            (ms(2026, 9, 9, 22, 48, 1), "invalid_http", "prefill-2"),
        ]
        ev.sort()
        for k, (t, what, node) in enumerate(ev):
            yield (t, 30, k, (what, node))

    # ------------------------------------------------------------ startup

    def startup(self, st: Start, idx: int) -> None:
        """Queue the full startup sequence of one start (and the shutdown of the previous)."""
        node = NODES[st.node]
        r = random.Random(f"startup:{self.seed}:{st.node}:{idx}")
        t = st.t_first
        sts = starts_of(st.node)
        i = sts.index(st)
        if i > 0:
            td = st.t_first - 30_000
            pid = 4000 + r.randint(0, 90000)
            for j, msg in enumerate(
                [
                    "INFO:     Shutting down",
                    "INFO:     Waiting for application shutdown.",
                    "INFO:     Application shutdown complete.",
                    f"INFO:     Finished server process [{pid}]",
                ]
            ):
                self.eng(st.node, td + j * 200, msg)
        self.eng(st.node, t, F.server_args_line(st, node.role, node.port), mark=f"start:{st.node}:{i}")
        self.eng(st.node, t + 2100, "Using default HuggingFace chat template with detected content format: string")
        ranks = list(range(8))

        def all_ranks(tt: int, msg: str) -> None:
            r.shuffle(ranks)
            for rk in ranks:
                self.eng(st.node, tt + r.randint(0, 900), msg, f"TP{rk}")

        all_ranks(t + 6000, "Init torch distributed begin.")
        all_ranks(t + 9000, "Init torch distributed ends. mem usage=0.71 GB")
        all_ranks(t + 10000, f"Load weight begin. avail mem={st.gpu_mem_gb:.2f} GB")
        tw = t + (st.ready_after_s - 60) * 1000
        after_w = st.gpu_mem_gb - 46.59
        all_ranks(tw, f"Load weight end. type=Glm5MoeForCausalLM, dtype=torch.bfloat16, avail mem={after_w:.2f} GB, mem usage=46.59 GB.")
        gb = st.pool * st.kv_bytes_per_token / (1 << 30)
        avail_after = after_w - 2 * gb
        all_ranks(tw + 2000, F.kv_line(st))
        all_ranks(tw + 3000, f"Memory pool end. avail mem={avail_after:.2f} GB")
        if node.role == "decode":
            all_ranks(tw + 4000, f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail_after:.2f} GB")
            all_ranks(tw + 26000, f"Capture cuda graph end. Time elapsed: 21.87 s. mem usage=1.08 GB. avail mem={avail_after - 1.08:.2f} GB.")
        tm = tw + 30000
        self.eng(st.node, tm, F.max_tokens_line(st, node.role, avail_after - (1.08 if node.role == "decode" else 0)), "TP0")
        if node.role == "prefill":
            self.eng(st.node, tm + 400, f"CommonKVBootstrapServer started successfully on 0.0.0.0:{BOOTSTRAP_PORT}")
        pid = 4000 + r.randint(0, 90000)
        for j, msg in enumerate(
            [
                f"INFO:     Started server process [{pid}]",
                "INFO:     Waiting for application startup.",
                "INFO:     Application startup complete.",
                f"INFO:     Uvicorn running on http://0.0.0.0:{node.port} (Press CTRL+C to quit)",
            ]
        ):
            self.eng(st.node, tm + 1000 + j * 10, msg)
        self.emit(tm + 2000, st.node, [(F.engine_prefix(tm + 2000) + f'INFO:     127.0.0.1:{r.randint(40000, 60999)} - "GET /get_model_info HTTP/1.1" 200 OK', "rec", None)])
        tr = st.t_ready
        if node.role == "prefill":
            self.eng(st.node, tr - 1500, F.prefill_batch(st.style, 6, 0, 0.0, 0, 0, 3.91), "TP0")
        else:
            self.eng(st.node, tr - 1500, F.decode_batch(1, 7, 0.0, 0.0, 0.52), "TP0")
        self.emit(tr - 100, st.node, [(F.engine_prefix(tr - 100) + f'INFO:     127.0.0.1:{r.randint(40000, 60999)} - "POST /generate HTTP/1.1" 200 OK', "rec", None)])
        self.eng(st.node, tr, "The server is fired up and ready to roll!", mark=f"ready:{st.node}:{i}")

    # ------------------------------------------------------------ output

    def flush(self, upto: int) -> None:
        """Write all queued output with time <= ``upto``."""
        heap = self.heap
        if upto > self.flushed:
            self.flushed = upto
        while heap and heap[0][0] <= upto:
            t, _, sink, payload = heapq.heappop(heap)
            if sink == "cf":
                self.cf_write(t, payload)
                continue
            if engine_log_lost(sink, t):
                self.lost_lines[sink] += len(payload)
                continue
            w = self.sinks[sink].writer_for(t)
            for text, kind, mark in payload:
                data = text if isinstance(text, bytes) else text.encode("utf-8")
                ln = w.write_line(data, kind)
                if mark is not None:
                    self.marks[mark] = (w.rel, ln)
                    if mark.startswith("nonutf8:"):
                        self.traps["non_utf8_lines"].append({"file": w.rel, "line": ln})

    def cf_write(self, t: int, payload: dict[str, Any]) -> None:
        """Write one Cloudflare record (hourly Logpush files, redelivery, truncation)."""
        hour = t // 3600_000
        if hour != self.cf_hour:
            self.cf_open(hour)
        w = self.cf_writer
        assert w is not None
        line: bytes = payload["line"]
        mark: str | None = payload["mark"]
        if payload.get("truncate"):
            ln = w.write_line(line[: len(line) * 2 // 5], "malformed")
            self.traps["malformed_lines"].append(
                {"file": w.rel, "line": ln, "reason": "truncated JSON line (record cut mid-write); the complete record was re-delivered at the start of the next hourly file"}
            )
            self.cf_pending.append((line, "rec", mark))
        else:
            ln = w.write_line(line, "rec")
            if mark is not None:
                self.marks[mark] = (w.rel, ln)
            if payload.get("nonutf8"):
                self.traps["non_utf8_lines"].append({"file": w.rel, "line": ln})
        if payload.get("dup"):
            self.cf_pending.append((line, "dup", payload["id"]))

    def cf_open(self, hour: int) -> None:
        """Close the current hourly file and open the one of ``hour``."""
        if self.cf_writer is not None:
            self.counts[self.cf_writer.rel] = self.cf_writer.close()
        a = hour * 3600
        b = a + 3600
        day = time.strftime("%Y%m%d", time.gmtime(a))
        sa = time.strftime("%Y%m%dT%H%M%S", time.gmtime(a))
        sb = time.strftime("%Y%m%dT%H%M%S", time.gmtime(b))
        h8 = hashlib.sha256(f"logpush:{self.seed}:{hour}".encode()).hexdigest()[:8]
        self.cf_writer = FileWriter(self.out, f"{CF_DIR}/{day}/{sa}Z_{sb}Z_{h8}.log.gz")
        self.cf_hour = hour
        pend, self.cf_pending = self.cf_pending, []
        for line, kind, mark in pend:
            ln = self.cf_writer.write_line(line, kind)
            if kind == "dup":
                self.traps["duplicate_records"].append({"file": self.cf_writer.rel, "line": ln, "request_id": mark})
            elif mark is not None:
                self.marks[mark] = (self.cf_writer.rel, ln)

    def ll_write(self, line: str, mark: str | None) -> None:
        """Write one LiteLLM CSV row (handles the delayed duplicate)."""
        assert self.ll is not None
        ln = self.ll.write_line(line.encode("utf-8"), "rec")
        if mark is not None:
            self.marks[mark] = (self.ll.rel, ln)
        keep = []
        for wait, pline, pmark in self.ll_pending:
            if wait <= 1:
                ln2 = self.ll.write_line(pline.encode("utf-8"), "dup")
                self.traps["duplicate_records"].append({"file": self.ll.rel, "line": ln2, "request_id": pmark})
            else:
                keep.append((wait - 1, pline, pmark))
        self.ll_pending = keep

    # ------------------------------------------------------------ probes & noise

    def do_probe(self, t: int, node: str) -> None:
        """Router health probe: access line, plus a HEALTH_CHECK_ generation when idle."""
        st = serving(node, t)
        if st is None:
            return
        port = self.U(30000, 60999)
        ns = self.state[node]
        if ns.last_recv < t - 600_000:
            role = NODES[node].role
            rid = f"HEALTH_CHECK_{t / 1000:.6f}"
            sp = "{'max_new_tokens': 1, 'temperature': 0.0}"
            obj = F.gen_obj_repr(st.style, rid, "None", "[0]", sp, False, FAKE_BOOTSTRAP_HOST, None, 0)
            t1 = t + self.U(2, 9)
            if not engine_log_lost(node, t1):
                self.health_checks += 1  # those logged
            self.reqlog(node, t1, f"Receive: obj={obj}")
            if role == "prefill":
                self.eng(node, t1 + 12, F.prefill_batch(st.style, 1, 0, 0.0, 0, 0, round(self.rng.uniform(0.05, 0.4), 2)), "TP0")
                fin = "{'type': 'length', 'length': 0}"
            else:
                fin = "{'type': 'length', 'length': 1}"
            t2 = t1 + self.U(40, 120)
            out = F.out_repr(rid, "", fin, 1, 1, 0, (t2 - t1) / 1000)
            self.reqlog(node, t2, f"Finish: obj={obj}, out={out}")
            self.emit(t2 + 1, node, [(F.access_line(t2 + 1, port, "GET", "/health", 200), "rec", None)])
        else:
            self.emit(t + 3, node, [(F.access_line(t + 3, port, "GET", "/health", 200), "rec", None)])

    def do_noise(self, t: int, node: str) -> None:
        """Write one benign background line."""
        if serving(node, t) is None:
            return
        role = NODES[node].role
        choice = self.rng.randrange(4)
        port = self.U(30000, 60999)
        if choice == 0:
            self.eng(node, t, f'INFO:     10.0.9.4:{port} - "GET /metrics HTTP/1.1" 200 OK')
        elif choice == 1:
            self.eng(node, t, f'INFO:     10.0.3.7:{port} - "GET /get_server_info HTTP/1.1" 200 OK')
        elif choice == 2 and role == "decode":
            old = self.rng.choice([0.55, 0.6, 0.65])
            self.eng(node, t, f"KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: {old:.4f} -> 0.8500", "TP0")
        else:
            self.eng(node, t, "WARNING:  Invalid HTTP request received.")

    def do_one_off(self, t: int, what: str, node: str) -> None:
        """Write a special one-off event."""
        if what == "invalid_http":
            self.eng(node, t, "WARNING:  Invalid HTTP request received.")
        elif what == "asgi_traceback":
            lines: list[tuple[str | bytes, str, str | None]] = [
                (F.engine_prefix(t) + "ERROR:    Exception in ASGI application", "rec", None),
                ("Traceback (most recent call last):", "cont", None),
                ('  File "/usr/local/lib/python3.12/dist-packages/uvicorn/protocols/http/httptools_impl.py", line 409, in run_asgi', "cont", None),
                ("    result = await app(  # type: ignore[func-returns-value]", "cont", None),
                ('  File "/usr/local/lib/python3.12/dist-packages/starlette/middleware/base.py", line 177, in __call__', "cont", None),
                ("    raise app_exc", "cont", None),
                ('  File "/sgl-workspace/sglang/python/sglang/srt/entrypoints/http_server.py", line 1042, in openai_v1_chat_completions', "cont", None),
                ("    return await raw_request.app.state.openai_serving_chat.handle_request(", "cont", None),
                ('  File "/usr/local/lib/python3.12/dist-packages/starlette/requests.py", line 243, in body', "cont", None),
                ("    raise ClientDisconnect()", "cont", None),
                ("starlette.requests.ClientDisconnect", "cont", None),
            ]
            self.emit(t, node, lines)
        elif what == "thread_traceback":
            lines = [
                ("Exception in thread Thread-12 (transfer_worker):", "cont", None),
                ("Traceback (most recent call last):", "cont", None),
                ('  File "/usr/lib/python3.12/threading.py", line 1075, in _bootstrap_inner', "cont", None),
                ("    self.run()", "cont", None),
                ('  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/mooncake/conn.py", line 612, in transfer_worker', "cont", None),
                ("    self.engine.register(buffer_path)", "cont", None),
                (b"OSError: [Errno 5] Input/output error: '/dev/shm/mooncake_caf\xe9_segment_3'", "cont", f"nonutf8:{node}:{t}"),
            ]
            self.emit(t, node, lines)
        elif what == "glog_latin1":
            line = b"E0906 18:11:12.215444 3114642 transfer_engine.cpp:412] Failed to open segment /dev/shm/caf\xe9-kv-7: No such file or directory"
            self.emit(t, node, [(line, "cont", f"nonutf8:{node}:{t}")])

    # ------------------------------------------------------------ requests

    def choose(self, role_nodes: list[str], t: int, forced: str | None) -> tuple[str, Start]:
        """Pick a serving node (router policy ~ uniform)."""
        if forced is not None:
            st = serving(forced, t)
            assert st is not None, (forced, t)
            return forced, st
        avail = [(n, s) for n in role_nodes if (s := serving(n, t)) is not None]
        assert avail, t
        return avail[self.rng.randrange(len(avail))]

    def text_repr(self, n_tokens: int, head: str, tail: str) -> str:
        """Return the level-2 (truncated) repr of a prompt or output text."""
        if n_tokens <= 120:
            return repr(head + self.filler() + tail)
        return f"{head + self.filler()!r} ... {self.filler() + tail!r}"

    def request(self, spec: Spec) -> None:
        """Generate every log line of one client request."""
        rng = self.rng
        t0 = spec.t0
        self.req_counter += 1
        tenant = spec.tenant or (self.pick_long() if spec.long else self.pick_customer())
        if spec.n is not None:
            n = spec.n
        elif spec.long:
            u = rng.random()
            if u < 0.35:
                n = rng.randint(200_000, 523_000)
            elif u < 0.50:
                n = rng.randint(524_400, 680_900)
            elif u < 0.90:
                n = rng.randint(LIMIT, 1_040_000)
            else:
                n = rng.randint(1_100_000, 1_400_000)
        else:
            n = max(16, min(180_000, int(rng.lognormvariate(math.log(2500), 1.2))))
        max_new = rng.choice([1024, 2048, 2048, 4096, 8192])
        m = spec.m if spec.m is not None else max(1, min(max_new, int(rng.lognormvariate(math.log(320), 0.9))))
        stream = spec.stream if spec.stream is not None else (rng.random() < (0.3 if spec.long else 0.35))
        layer = tenant.layer
        pnode, P = self.choose(PREFILL, t0, spec.prefill)
        dnode, D = self.choose(DECODE, t0, spec.decode)
        if n >= P.context_len or n >= D.context_len:
            kind = "400"
        elif spec.override:
            kind = spec.override
        elif n >= P.limit:
            assert P.exposed, (pnode, n)
            kind = "leak"
        else:
            assert n < D.limit
            kind = "ok"
            if spec.prefill is None and rng.random() < 0.0003:
                kind = "xfer500"
        status = {"400": 400, "xfer500": 500}.get(kind, 200)
        self.n_by_layer[layer] += 1
        self.n_by_status[str(status)] = self.n_by_status.get(str(status), 0) + 1

        # ids
        room = rng.getrandbits(63)
        prid = self.uuid4hex()
        drid = self.uuid4hex()
        xid = self.ulid(t0) if layer == "edge" else None
        router_id = xid if xid is not None else self.smg_id()
        if layer == "edge":
            gw_id = self.hexid(64)
        elif status == 200:
            gw_id = drid
        else:
            gw_id = self.uuid4()
        host = NODES[pnode].ip
        durl = f"http://{NODES[dnode].ip}:{NODES[dnode].port}"

        # timeline
        rs = t0 + (self.U(15, 60) if layer == "edge" else self.U(4, 15))
        pr = rs + self.U(2, 9)
        dr = rs + self.U(2, 9)
        tok = 4 + n // 450
        sp = F._sp_repr(max_new, 0.7 if rng.random() < 0.6 else 1.0)
        head = "[gMASK]<sop><|system|>\n" if rng.random() < 0.5 else "[gMASK]<sop><|user|>\n"
        ptext = self.text_repr(n // 4, head, "<|assistant|>")
        headers = f", headers={{'x-request-id': {xid!r}}}" if xid else ""
        pobj = F.gen_obj_repr(P.style, prid, ptext, "None", sp, stream, host, BOOTSTRAP_PORT, room)
        dobj = F.gen_obj_repr(D.style, drid, ptext, "None", sp, stream, host, BOOTSTRAP_PORT, room)
        self.reqlog(pnode, pr, f"Receive: obj={pobj}{headers}")
        self.reqlog(dnode, dr, f"Receive: obj={dobj}{headers}")
        self.state[pnode].last_recv = pr
        self.state[dnode].last_recv = dr
        self.emit(rs, "router", [(F.router_started(rs, router_id), "rec", None)])
        pport = self.U(30000, 60999)
        dport = self.U(30000, 60999)
        cached = 0
        first = d_fin = 0
        mark_rej = f"rej:{gw_id}"

        if kind == "400":
            p4 = pr + tok
            d4 = dr + tok
            self.emit(p4, pnode, [(F.access_line(p4, pport, "POST", "/v1/chat/completions", 400), "rec", None)])
            self.emit(d4, dnode, [(F.access_line(d4, dport, "POST", "/v1/chat/completions", 400), "rec", None)])
            re_ = max(p4, d4) + self.U(1, 4)
            self.emit(re_, "router", [(F.router_decode_error(re_, router_id, durl, 400), "rec", None)])
            re_ += 1
            first = re_
        else:
            pq = pr + tok + self.U(0, 150)
            if kind == "leak" or n >= P.limit:
                # scheduler rejection -> 1-token placeholder -> processing goes on
                msg = (
                    f"Input length ({n} tokens) exceeds the maximum allowed length ({P.limit} tokens). "
                    f"Use a shorter input or enable --allow-auto-truncate., self.rid={prid!r}"
                )
                self.eng(pnode, pq, msg, "TP0", mark=mark_rej)
                tb = pq + self.U(3, 20)
                self.eng(pnode, tb, F.prefill_batch(P.style, 1, 0, 0.0, 0, 1, round(rng.uniform(0.1, 0.6), 2)), "TP0")
                pdone = tb + self.U(15, 40)
                p_prompt = 1
            else:
                if not spec.long and rng.random() < 0.5:
                    cached = min(n - 1, int(n * rng.uniform(0.1, 0.8)) // 64 * 64)
                todo = n - cached
                tb = pq
                done = cached
                while todo > 0:
                    ch = min(todo, 32768)
                    dur = 25 + ch * 1000 // 42000
                    thr = ch / (dur / 1000)
                    usage = (done + ch) / P.pool
                    self.eng(pnode, tb, F.prefill_batch(P.style, ch, cached if done == cached else 0, usage, self.U(0, 2), self.U(0, 3), thr), "TP0")
                    done += ch
                    todo -= ch
                    tb += dur
                pdone = tb
                p_prompt = n
            xfer = 15 + (p_prompt // 2500)
            p_fin = pdone + xfer
            dfirst = max(p_fin, dr + tok) + self.U(10, 60)
            if kind in ("xfer500", "xfer_stream200"):
                tf = pdone + self.U(2000, 8000)
                mp = f"Prefill transfer failed for request rank={{r}} req.rid={prid!r} req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): " + _ABORT_XFER_P.format(ip=NODES[dnode].ip, port=15000 + room % 1000)
                lines = [(F.engine_prefix(tf, f"TP{r_}") + mp.format(r=r_), "rec", None) for r_ in range(8)]
                self.emit(tf, pnode, lines)
                pmsg = mp.format(r=0)
                fin = f"{{'type': 'abort', 'message': {pmsg!r}, 'status_code': 500, 'err_type': None}}"
                out = F.out_repr(prid, "", fin, p_prompt, 0, 0, (tf - pr) / 1000)
                self.reqlog(pnode, tf + 2, f"Finish: obj={pobj}{headers}, out={out}")
                self.emit(tf + 3, pnode, [(F.access_line(tf + 3, pport, "POST", "/v1/chat/completions", 500), "rec", None)])
                td = tf + self.U(5, 60)
                md = f"Decode transfer failed for request rank={{r}} decode_req.req.rid={drid!r} decode_req.req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): {_ABORT_XFER_D}"
                self.emit(td, dnode, [(F.engine_prefix(td, f"TP{r_}") + md.format(r=r_), "rec", None) for r_ in range(8)])
                dmsg = md.format(r=0)
                if kind == "xfer_stream200":
                    self.emit(td + 1, dnode, [(F.access_line(td + 1, dport, "POST", "/v1/chat/completions", 200), "rec", None)])
                fin = f"{{'type': 'abort', 'message': {dmsg!r}, 'status_code': 500, 'err_type': None}}"
                out = F.out_repr(drid, "", fin, n, 0, 0, (td - dr) / 1000)
                self.reqlog(dnode, td + 2, f"Finish: obj={dobj}{headers}, out={out}")
                if kind == "xfer500":
                    self.emit(td + 3, dnode, [(F.access_line(td + 3, dport, "POST", "/v1/chat/completions", 500), "rec", None)])
                    re_ = td + self.U(4, 9)
                    if spec.wrap_router:
                        full = F.router_decode_error(re_, router_id, durl, 500)
                        cut = full.index(" status=500")
                        self.emit(re_, "router", [(full[:cut], "rec", None), (full[cut:], "cont", None)])
                    else:
                        self.emit(re_, "router", [(F.router_decode_error(re_, router_id, durl, 500), "rec", None)])
                    re_ += 1
                else:
                    re_ = td + self.U(4, 9)
                first = td + 1
                self.state[dnode].active.append((td, n))
            else:
                # prefill finishes (200), KV (real or 1-token placeholder) goes to decode
                fin = "{'type': 'length', 'length': 0}"
                out = F.out_repr(prid, self.rng.choice(["The", "Sure", "I", "##"]), fin, p_prompt, 1, cached, (p_fin - pr) / 1000)
                self.reqlog(pnode, p_fin, f"Finish: obj={pobj}{headers}, out={out}")
                self.emit(p_fin + 1, pnode, [(F.access_line(p_fin + 1, pport, "POST", "/v1/chat/completions", 200), "rec", None)])
                first = dfirst
                speed = rng.uniform(22, 48)
                d_fin = first + int(m / speed * 1000)
                if d_fin - t0 > MAX_REQUEST_S * 1000 - 5000:
                    d_fin = t0 + MAX_REQUEST_S * 1000 - 5000
                ns = self.state[dnode]
                run, toks = ns.load(first)
                ns.active.append((d_fin, n + m))
                tbl = min(d_fin - 1, first + self.U(100, 2500))
                self.eng(dnode, tbl, F.decode_batch(run + 1, toks + n, (toks + n) / D.pool, (n / D.pool) if kind == "leak" else 0.0, (run + 1) * speed), "TP0")
                freason = f"{{'type': 'length', 'length': {m}}}" if m >= max_new else "{'type': 'stop', 'matched': 151336}"
                otext = self.text_repr(m // 4, "", "")
                out = F.out_repr(drid, "", freason, n, m, cached, (d_fin - dr) / 1000).replace("'text': ''", f"'text': {otext}", 1)
                self.reqlog(dnode, d_fin, f"Finish: obj={dobj}{headers}, out={out}")
                ta = first if stream else d_fin + 1
                self.emit(ta, dnode, [(F.access_line(ta, dport, "POST", "/v1/chat/completions", 200), "rec", None)])
                re_ = d_fin + self.U(1, 6)
        latency_us = (re_ - rs) * 1000 + self.U(0, 999)
        self.emit(re_, "router", [(F.router_finished(re_, router_id, status, latency_us), "rec", None)])
        ge = re_ + self.U(3, 25)
        ttfb = (first - t0 + self.U(2, 20)) if stream else (ge - t0)

        # a request of which no engine line was kept, whose gateway record alone puts it over the
        # limit in force (the smallest of the exposed nodes): the toolkit must call it suspected
        fleet_limit = fleet_limit_at(t0)
        lost = all(engine_log_lost(nd, tt) for nd in (pnode, dnode) for tt in (pr, dr, re_))
        if lost and status == 200 and layer == "proxy" and fleet_limit is not None and n >= fleet_limit:
            self.suspected[gw_id] = {
                "layer": layer, "request_id": gw_id, "tenant_id": tenant.tid, "tenant_label": tenant.label,
                "ts_utc": F.iso_z(t0), "prompt_tokens": n, "status": status, "streamed": stream,
                "admission_limit": fleet_limit, "leaked_in_fact": kind == "leak",
                "prefill_node_in_fact": pnode, "decode_node_in_fact": dnode,
            }

        # gateway record
        gmark = f"gw:{gw_id}" if kind == "leak" or gw_id in self.suspected else None
        if spec.redirect and layer == "edge":
            self.cf_redirect(tenant, xid or "", t0, n)
        if layer == "edge":
            self.cf_record(tenant, gw_id, xid or "", t0, ge, status, stream, n, m, ttfb, re_ - rs, gmark, kind)
        else:
            self.ll_record(tenant, gw_id, t0, ge, first, status, stream, n, m, kind, router_id)

        # possible sources registry (decode finished normally => KV pages stayed resident)
        dq = self.recent[dnode]
        while dq and dq[0][0] < t0 - (SOURCE_WINDOW_S + MAX_REQUEST_S + 60) * 1000:
            dq.popleft()
        sources = None
        if kind == "leak":
            tr = dr // 1000
            sources = [
                {"request_id": e[2], "tenant_id": e[3], "layer": e[4], "decode_finish_utc": F.iso_z(e[1] * 1000), "same_tenant": e[3] == tenant.tid}
                for e in dq
                if tr - SOURCE_WINDOW_S <= e[1] <= tr
            ]
            sources.sort(key=lambda s: (s["decode_finish_utc"], s["request_id"]))
        if kind in ("ok", "leak") and not engine_log_lost(dnode, d_fin):
            dq.append((t0, d_fin // 1000, gw_id, tenant.tid, layer))

        # truth bookkeeping
        tid = gw_id
        if kind == "leak":
            self.leaks[tid] = {
                "layer": layer,
                "request_id": gw_id,
                "header_request_id": xid,
                "router_request_id": router_id,
                "tenant_id": tenant.tid,
                "tenant_label": tenant.label,
                "ts_utc": F.iso_z(t0),
                "prompt_tokens": n,
                "completion_tokens": m,
                "status": 200,
                "streamed": stream,
                "prefill_node": pnode,
                "decode_node": dnode,
                "bootstrap_room": room,
                "bootstrap_host": host,
                "prefill_rid": prid,
                "decode_rid": drid,
                "decode_receive_utc": F.iso_z(dr // 1000 * 1000),
                "possible_sources": sources,
                "admission_limit": P.limit,
            }
            if n - P.limit < 8 and gw_id not in self.suspected:
                self.traps["near_limit_leaks"].append(gw_id)
            if stream and gw_id not in self.suspected:
                self.traps["streamed_leaks"].append(gw_id)
        if n == LIMIT - 1:
            self.traps["at_limit_minus_one"].append(gw_id)
        if kind == "400" and n >= CONTEXT_NEW:
            self.traps["over_context_400"].append(gw_id)
        if kind == "xfer500":
            self.traps["transfer_failure_500"].append(gw_id)
        if kind == "xfer_stream200":
            self.traps["stream_error_200"].append(gw_id)
        if kind == "ok" and n >= LIMIT and pnode == "prefill-2" and gw_id not in self.suspected:
            self.traps["good_node_long"].append(gw_id)
        if kind == "ok" and n >= LIMIT and pnode in ("prefill-0", "prefill-1") and not P.exposed:
            self.traps["after_fix_long_ok"].append(gw_id)
        if kind == "ok" and P.exposed and fleet_limit is not None and fleet_limit <= n < P.limit and not lost:
            self.traps["under_node_limit_exposed"].append(gw_id)
        if n >= LONG_MIN and pnode in ("prefill-0", "prefill-1") and P.context_len < CONTEXT_NEW:
            self.traps["before_misconfig_long"].append(gw_id)

    def _flag(self, name: str, frac: float, cond: bool) -> bool:
        """True once, for the first request meeting ``cond`` after ``frac`` of the requests."""
        if name in self.flags or not cond or self.req_counter < int(self.requests * frac):
            return False
        self.flags[name] = self.req_counter
        return True

    def cf_record(
        self, tenant: Tenant, ray: str, xid: str, t0: int, ge: int, status: int, stream: bool,
        n: int, m: int, ttfb: int, origin_ms: int, mark: str | None, kind: str,
    ) -> None:  # fmt: skip
        """Queue one Cloudflare ``http_requests`` record at its end time."""
        rng = self.rng
        start_ns = t0 * 1_000_000 + rng.randrange(1000) * 1000
        end_ns = ge * 1_000_000 + rng.randrange(1000) * 1000
        body = (180 + 4 * m + 40 * (m // 8)) if (status == 200 and stream) else (420 + 4 * m if status == 200 else 160)
        headers: dict[str, str] = {"x-request-id": xid}
        normal_ok = kind == "ok" and n < LONG_MIN
        nonutf8 = self._flag("cf_nonutf8", 0.6, normal_ok)
        if nonutf8:
            headers["user-agent"] = "caf\u00e9-client/1.4"
        rec: dict[str, Any] = {
            **self._cf_client(tenant, n),
            "EdgeColoCode": rng.choice(["SIN", "SIN", "HKG", "NRT", "FRA", "IAD"]),
            "EdgeEndTimestamp": end_ns,
            "EdgeResponseBodyBytes": body,
            "EdgeResponseBytes": body + 412,
            "EdgeResponseContentType": "text/event-stream" if (stream and status == 200) else "application/json",
            "EdgeResponseStatus": status,
            "EdgeStartTimestamp": start_ns,
            "EdgeTimeToFirstByteMs": ttfb,
            "OriginIP": "198.51.100.20",
            "OriginResponseDurationMs": origin_ms,
            "OriginResponseStatus": status,
            "ParentRayID": "00",
            "RayID": ray,
            "RequestHeaders": headers,
            "WorkerSubrequest": False,
            "ZoneName": "example.net",
        }
        if CF_STRING_TS[0] <= ge < CF_STRING_TS[1]:
            rec["EdgeStartTimestamp"] = str(start_ns)
            rec["EdgeEndTimestamp"] = str(end_ns)
        line = json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        if nonutf8:
            line = line.replace("caf\u00e9".encode(), b"caf\xe9")
        payload: dict[str, Any] = {"line": line, "mark": mark, "id": ray, "nonutf8": nonutf8}
        plain_ok = normal_ok and not nonutf8
        if self._flag("cf_dup_leak", 0.0, kind == "leak") or self._flag("cf_dup_1", 0.33, plain_ok) or self._flag("cf_dup_2", 0.66, plain_ok):
            payload["dup"] = True
        elif self._flag("cf_trunc", 0.5, plain_ok):
            payload["truncate"] = True
        self.emit(ge, "cf", payload)

    def _cf_client(self, tenant: Tenant, n: int) -> dict[str, Any]:
        """The client side of a Cloudflare record: who asked, for what, with how many bytes."""
        path = f"/client/v4/accounts/{tenant.tid}/ai/run/{CF_MODEL}"
        return {
            "ClientIP": self.rng.choice(tenant.ips),
            "ClientRequestBytes": 4 * n + 600,
            "ClientRequestHost": "api.example.net",
            "ClientRequestMethod": "POST",
            "ClientRequestPath": path,
            "ClientRequestURI": path,
        }

    def cf_redirect(self, tenant: Tenant, xid: str, t0: int, n: int) -> None:
        """Queue the edge's 308 to a client that first came over http (no origin was reached)."""
        rng = self.rng
        ray = self.hexid(64)
        start_ns = (t0 - 180) * 1_000_000 + rng.randrange(1000) * 1000
        end_ns = (t0 - 178) * 1_000_000 + rng.randrange(1000) * 1000
        rec: dict[str, Any] = {
            **self._cf_client(tenant, n),
            "EdgeColoCode": "SIN",
            "EdgeEndTimestamp": end_ns,
            "EdgeResponseBodyBytes": 167,
            "EdgeResponseBytes": 167 + 380,
            "EdgeResponseContentType": "text/html",
            "EdgeResponseStatus": 308,
            "EdgeStartTimestamp": start_ns,
            "EdgeTimeToFirstByteMs": 2,
            "OriginIP": "",
            "OriginResponseDurationMs": 0,
            "OriginResponseStatus": 0,
            "ParentRayID": "00",
            "RayID": ray,
            "RequestHeaders": {"x-request-id": xid},
            "WorkerSubrequest": False,
            "ZoneName": "example.net",
        }
        line = json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        self.traps["redirect_3xx"].append(ray)
        self.n_redirects += 1
        self.emit(t0, "cf", {"line": line, "mark": f"redirect:{ray}", "id": ray, "nonutf8": False})

    def ll_record(
        self, tenant: Tenant, rid: str, t0: int, ge: int, first: int, status: int, stream: bool,
        n: int, m: int, kind: str, router_id: str,
    ) -> None:  # fmt: skip
        """Write one LiteLLM_SpendLogs row (written in startTime order)."""
        ok = status == 200
        pt, ct = (n, m) if ok else (0, 0)
        if kind == "xfer_stream200":
            pt, ct = n, 0
        meta: dict[str, Any] = {
            "user_api_key": tenant.api_key,
            "user_api_key_alias": f"{tenant.label}-prod",
            "user_api_key_team_id": tenant.tid,
            "user_api_key_org_id": tenant.org,
            "user_api_key_user_id": tenant.user,
            "user_api_key_team_alias": tenant.label,
            "requester_ip_address": tenant.ips[0],
            "applied_guardrails": [],
            "usage_object": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct},
            "model_map_information": {"model_map_key": "glm-5.3", "model_map_value": None},
        }
        if not ok:
            if status == 400:
                msg = f"litellm.BadRequestError: OpenAIException - The input ({n} tokens) is longer than the model's context length ({CONTEXT_NEW} tokens)."
                cls = "BadRequestError"
            else:
                msg = "litellm.InternalServerError: OpenAIException - Decode transfer failed for request"
                cls = "InternalServerError"
            meta["error_information"] = {"error_code": str(status), "error_class": cls, "llm_provider": "openai", "traceback": "", "error_message": msg}
        spend = round(pt * 0.6e-6 + ct * 2.2e-6, 9) if ok else 0.0
        end_user = self.rng.choice(tenant.end_users) if tenant.end_users else ""
        row = [
            rid, "acompletion", tenant.api_key, spend, pt + ct, pt, ct,
            F.pg_ts(t0), F.pg_ts(ge), (F.pg_ts(first + 3) if stream else F.pg_ts(ge)) if ok else None,
            "glm-5.3", "9c1f6e0d2b7a4e58a3f1c2d4b6e8f0a1c3e5d7f9b1a3c5e7d9f1b3a5c7e9d1f3", "glm-5.3", "openai",
            "http://10.0.3.7:8000/v1", tenant.user, F.jsonb(meta), "False", "Cache OFF", "[]", tenant.tid, end_user,
            tenant.ips[0], "{}", "{}", self.uuid4(), "success" if ok else "failure", tenant.org, None, "{}",
            ge - t0, None,
        ]  # fmt: skip
        line = F.pg_csv_row(row)
        mark = f"gw:{rid}" if kind == "leak" or rid in self.suspected else None
        if self._flag("ll_malformed", 0.7, kind == "ok" and n < LONG_MIN):
            cut = F.pg_csv_row(row[:17])
            assert self.ll is not None
            ln = self.ll.write_line(cut.encode(), "malformed")
            self.traps["malformed_lines"].append({"file": self.ll.rel, "line": ln, "reason": "CSV row has 17 fields, expected 32 (interrupted export, row re-exported on the next line)"})
        self.ll_write(line, mark)
        if self._flag("ll_dup", 0.25, kind == "ok"):
            self.ll_pending.append((3, line, rid))

    # ------------------------------------------------------------ run

    def _clean(self) -> None:
        for sub in ("engine", "gateway"):
            p = self.out / sub
            if p.is_dir():
                shutil.rmtree(p)
        for name in ("truth.json", "README.md"):
            f = self.out / name
            if f.exists():
                f.unlink()

    def run(self) -> dict[str, Any]:
        """Generate all files and return the truth dict (also written to truth.json)."""
        self.out.mkdir(parents=True, exist_ok=True)
        self._clean()
        self.sinks = {name: RotatingSink(self.out, parts, self.counts) for name, parts in ROTATION.items()}
        self.ll = FileWriter(self.out, LITELLM_PATH)
        self.ll.write_line(",".join(F.LITELLM_COLUMNS).encode(), "header")

        for i, st in enumerate(STARTS):
            self.startup(st, i)
        purls = [f"http://{NODES[p].ip}:{NODES[p].port}" for p in PREFILL]
        durls = [f"http://{NODES[d].ip}:{NODES[d].port}" for d in DECODE]
        self.emit(T_ROUTER_START, "router", [(line, "rec", None) for line in F.router_startup(T_ROUTER_START, purls, durls)])

        scripted = self.scripted()
        n_long = min(250, max(20, round(self.requests * 0.017)))
        n_normal = self.requests - len(scripted) - n_long
        self.n_long = n_long
        gens: list[Iterator[tuple[int, int, int, Any]]] = [
            self.normal_arrivals(n_normal),
            self.long_arrivals(n_long),
            iter([(s.t0, 0, k, s) for k, s in enumerate(scripted)]),
            self.one_offs(),
        ]
        for gid, node in enumerate(NODES):
            gens.append(self.probes(node, gid))
            gens.append(self.noise(node, gid))
        for t, gid, _k, payload in heapq.merge(*gens):
            self.flush(t)
            if gid == 0:
                self.request(payload)
            elif gid == 1:
                self.request(Spec(t, long=True))
            elif gid == 2:
                self.request(Spec(t))
            elif payload[0] == "probe":
                self.do_probe(t, payload[1])
            elif payload[0] == "noise":
                self.do_noise(t, payload[1])
            else:
                self.do_one_off(t, payload[0], payload[1])
        self.flush(1 << 62)
        for s in self.sinks.values():
            s.close()
        if self.cf_pending:
            self.cf_open(self.cf_hour + 1)
        if self.cf_writer is not None:
            self.counts[self.cf_writer.rel] = self.cf_writer.close()
        for _w, pline, pmark in self.ll_pending:
            ln = self.ll.write_line(pline.encode(), "dup")
            self.traps["duplicate_records"].append({"file": self.ll.rel, "line": ln, "request_id": pmark})
        self.counts[self.ll.rel] = self.ll.close()
        truth = self.truth()
        with open(self.out / "truth.json", "w", encoding="utf-8") as fh:
            json.dump(truth, fh, sort_keys=True, indent=1, ensure_ascii=False)
            fh.write("\n")
        (self.out / "README.md").write_text(readme(truth), encoding="utf-8")
        return truth

    def truth(self) -> dict[str, Any]:
        """Assemble the truth dict."""
        nodes: dict[str, Any] = {}
        windows = []
        for name, node in NODES.items():
            sts = starts_of(name)
            lst = []
            for i, st in enumerate(sts):
                f, ln = self.marks[f"start:{name}:{i}"]
                lst.append(
                    {
                        "ts_utc": F.iso_z(st.t_first),
                        "ts_ready_utc": F.iso_z(st.t_ready),
                        "context_len": st.context_len,
                        "max_total_num_tokens": st.pool,
                        "admission_limit": st.limit,
                        "exposed": st.exposed,
                        "file": f,
                        "line": ln,
                        "release_style": STYLE_NAMES[st.style],
                    }
                )
                if st.exposed:
                    nxt = sts[i + 1] if i + 1 < len(sts) else None
                    windows.append(
                        {
                            "node": name,
                            "start_utc": F.iso_z(st.t_first),
                            "end_utc": F.iso_z(nxt.t_first) if nxt else None,
                            "admission_limit": st.limit,
                            "context_len": st.context_len,
                            "max_total_num_tokens": st.pool,
                        }
                    )
            nodes[name] = {"role": node.role, "ip": node.ip, "port": node.port, "starts": lst}
        nodes["router"] = {"role": "router", "ip": "10.0.3.7", "port": 8000, "starts": []}
        windows.sort(key=lambda w: (w["start_utc"], w["node"]))
        # a leak whose engine lines were all lost is not confirmed: it is among the suspected
        leaks = sorted((x for x in self.leaks.values() if x["request_id"] not in self.suspected),
                       key=lambda x: (x["ts_utc"], x["request_id"]))
        for lk in leaks:
            lk["gateway_file"], lk["gateway_line"] = self.marks[f"gw:{lk['request_id']}"]
            lk["rejection_file"], lk["rejection_line"] = self.marks[f"rej:{lk['request_id']}"]
        suspected = sorted(self.suspected.values(), key=lambda x: (x["ts_utc"], x["request_id"]))
        for sp in suspected:
            sp["gateway_file"], sp["gateway_line"] = self.marks[f"gw:{sp['request_id']}"]
        affected: dict[str, dict[str, int]] = {}
        for conf, rows in (("confirmed", leaks), ("suspected", suspected)):
            for lk in rows:
                a = affected.setdefault(lk["tenant_id"], {"confirmed": 0, "suspected": 0})
                a[conf] += 1
        traps = dict(self.traps)
        traps["redirect_3xx"] = [
            {"request_id": ray, "status": 308, "file": self.marks[f"redirect:{ray}"][0],
             "line": self.marks[f"redirect:{ray}"][1]}
            for ray in self.traps["redirect_3xx"]
        ]
        traps["health_checks"] = self.health_checks
        for k in ("duplicate_records", "malformed_lines", "non_utf8_lines"):
            traps[k] = sorted(traps[k], key=lambda d: (d["file"], d["line"]))
        counts: dict[str, Any] = {
            "files": dict(sorted(self.counts.items())),
            "requests_total": self.requests,
            "requests_by_layer": dict(self.n_by_layer),
            "requests_by_status": dict(sorted(self.n_by_status.items())),
            "long_prompt_requests_random": self.n_long,
            "leaks": len(leaks),
            "suspected": len(suspected),
            "affected_tenants": len(affected),
            "health_checks": self.health_checks,
            "gateway_redirect_records": self.n_redirects,
            "engine_lines_lost": dict(sorted(self.lost_lines.items())),
        }
        tenants = {
            t.tid: {"layer": t.layer, "label": t.label, "role": t.role, **({"organization_id": t.org} if t.org else {})}
            for t in self.tenants
        }
        return {
            "generator": {"name": "forensics.sample", "version": GENERATOR_VERSION, "seed": self.seed, "requests": self.requests},
            "engine_tz": ENGINE_TZ,
            "gateway_tz": GATEWAY_TZ,
            "router_tz": "UTC",
            "model": CF_MODEL,
            "context_len": CONTEXT_NEW,
            "admission_limit": LIMIT,
            "admission_limits": sorted({st.limit for st in STARTS if st.exposed}),
            "admission_formula": "min(context_len - 1, max_total_num_tokens - 1) - 5; rejected when input_tokens >= limit",
            "nodes": nodes,
            "exposure_windows": windows,
            "fleet_window": {
                "start_utc": min(str(w["start_utc"]) for w in windows),
                "end_utc": max(str(w["end_utc"]) for w in windows if w["end_utc"]),
            },
            "source_rule": SOURCE_RULE,
            "source_window_s": SOURCE_WINDOW_S,
            "leaks": leaks,
            "suspected": suspected,
            "suspected_rule": (
                "suspected = a 2xx gateway record with no engine record of its own, whose gateway prompt "
                "token count is >= the smallest admission limit of the nodes exposed at its time, inside "
                "the fleet window; leaked_in_fact says what the generator knows and the logs do not; "
                "possible sources of a suspected response cannot be derived (its decode node is unknown)"
            ),
            "engine_log_gap": {
                "start_utc": F.iso_z(ENGINE_LOG_GAP[0]),
                "end_utc": F.iso_z(ENGINE_LOG_GAP[1]),
                "nodes": list(ENGINE_LOG_GAP_NODES),
                "why": "log-collection outage: no engine line of this span was kept; gateway and router logs are complete",
            },
            "affected_tenants": dict(sorted(affected.items())),
            "tenants": dict(sorted(tenants.items())),
            "traps": traps,
            "counts": counts,
            "counts_doc": (
                "lines = physical lines of the decompressed text; records = log entries (engine/router: lines that "
                "start an entry, i.e. not traceback/wrapped continuation lines; gateway: parseable records incl. "
                "duplicates; CSV: data rows with the right field count, header excluded); malformed = unparseable "
                "lines/rows; duplicates = re-delivered copies; bytes = size on disk; bytes_uncompressed = text size"
            ),
            "timeline_utc": {
                "traffic_start": F.iso_z(T_TRAFFIC),
                "logs_end": F.iso_z(T_END),
                "rolling_restart": "2026-09-03T02:10Z..03:14Z (decode-0, decode-1, prefill-2, prefill-0, prefill-1)",
                "prefill_1_retuned": "2026-09-06T08:05Z (--mem-fraction-static 0.82 -> 0.86: pool 777792, still exposed, limit 777786)",
                "engine_log_gap": f"{F.iso_z(ENGINE_LOG_GAP[0])}..{F.iso_z(ENGINE_LOG_GAP[1])} (all engine nodes)",
                "researcher_report": "2026-09-08T09:12Z (leak reproduced by tenant acct-38-researcher)",
                "operator_reproduction": "2026-09-09T13:05Z",
                "model_private": [F.iso_z(PRIVATE[0]), F.iso_z(PRIVATE[1])],
                "fix_restarts": "prefill-0 2026-09-09T14:41:00Z, prefill-1 2026-09-09T14:47:30Z (all fixed by 14:52)",
            },
            "abuse_evident": False,
            "notes": (
                "Request-log text is short synthetic filler (level-2 truncation shape, shortened halves); "
                "decode-0 emulates 0.5.8-0.5.11 request-log lines without a timestamp prefix; prefill-1 after "
                "the fix emulates 0.5.23 shapes."
            ),
        }


def _uuid(r: random.Random) -> str:
    h = f"{r.getrandbits(128):032x}"
    h = h[:12] + "4" + h[13:16] + "89ab"[int(h[16], 16) % 4] + h[17:]
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def readme(truth: dict[str, Any]) -> str:
    """Return the deterministic README.md written next to truth.json.

    Example:
        >>> readme({"generator": {"seed": 1, "requests": 2, "version": "x"}, "counts": {"leaks": 0,
        ...     "suspected": 0, "affected_tenants": 0, "requests_by_layer": {}}, "exposure_windows": [],
        ...     "admission_limits": [1], "context_len": 2, "engine_log_gap": {"start_utc": "a",
        ...     "end_utc": "b"}}).splitlines()[0]
        '# Sample incident (generated)'
    """
    g = truth["generator"]
    c = truth["counts"]
    gap = truth["engine_log_gap"]
    wins = "\n".join(
        f"- {w['node']}: {w['start_utc']} .. {w['end_utc']} (pool {w.get('max_total_num_tokens')}, "
        f"admission limit {w['admission_limit']})"
        for w in truth["exposure_windows"]
    )
    return f"""# Sample incident (generated)

Synthetic logs of one SGLang prefill/decode incident, produced by
`python -m forensics.sample --out sample_data --requests {g["requests"]} --seed {g["seed"]}`
(generator {g["version"]}). Do not edit by hand: the tests regenerate it bit for bit.
All request text is synthetic filler; no real data.

- `engine/<node>/sglang.log` (+ rotated `sglang.log.N.gz`): SGLang engine logs, local time
  Asia/Singapore (UTC+8, no zone in the lines); `engine/router/smg.log*`: smg router, UTC.
- `gateway/cloudflare-http/<YYYYMMDD>/<start>Z_<end>Z_<8hex>.log.gz`: Cloudflare Logpush
  `http_requests` NDJSON, UTC epoch nanoseconds.
- `gateway/litellm/LiteLLM_SpendLogs.csv`: Postgres CSV export of LiteLLM_SpendLogs (UTC, no zone).
- `truth.json`: the expected answers (leaks with file:line evidence, windows, traps, counts).

Context length {truth["context_len"]}; admission limits of the exposed configurations
{", ".join(str(v) for v in truth["admission_limits"])} (the fleet's is the smallest).
Exposure windows:
{wins}

Engine log gap (no engine line kept, gateway and router complete): {gap["start_utc"]} .. {gap["end_utc"]}.

{c["leaks"]} confirmed leaked responses, {c["suspected"]} suspected (gateway evidence only),
{c["affected_tenants"]} affected tenants, requests by front door: {json.dumps(c["requests_by_layer"], sort_keys=True)}.
"""
