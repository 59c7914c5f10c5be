"""The fixed deployment and story of the sample incident (nodes, starts, traps).

Everything here is static: the generator combines it with a seeded random stream.

Example:
    >>> from forensics.sample._world import NODES, admission_limit
    >>> admission_limit(1048576, 681280)
    681274
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass, field

ENGINE_TZ = "Asia/Singapore"
ENGINE_UTC_OFFSET_S = 8 * 3600
GATEWAY_TZ = "UTC"

MODEL_PATH = "/models/glm-5.3"
SERVED_MODEL = "zai-org/glm-5.3"
CF_MODEL = "@cf/zai-org/glm-5.3"
CONTEXT_NEW = 1048576
CONTEXT_OLD = 524288
POOL_EXPOSED = 681280
# prefill-1 after an operator raised --mem-fraction-static from 0.82 to 0.86 (2026-09-06): a bigger
# pool, still smaller than the context length: a second exposed configuration with its own limit
POOL_EXPOSED_2 = 777792
ROUTER_IP = "10.0.3.7"
ROUTER_PORT = 8000
BOOTSTRAP_PORT = 8998
FAKE_BOOTSTRAP_HOST = "2.2.2.2"
SOURCE_WINDOW_S = 600
MAX_REQUEST_S = 900


def ms(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0) -> int:
    """Return the UTC epoch milliseconds of a calendar time.

    Example:
        >>> ms(1970, 1, 1, 0, 0, 1)
        1000
    """
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) * 1000


def admission_limit(context_len: int, pool: int) -> int:
    """Return SGLang's scheduler admission limit (``max_req_input_len``).

    Example:
        >>> admission_limit(524288, 681280)
        524282
    """
    return min(context_len - 1, pool - 1) - 5


@dataclass(frozen=True)
class Node:
    """One engine node of the PD deployment."""

    name: str
    role: str  # 'prefill' | 'decode'
    ip: str
    port: int


NODES: dict[str, Node] = {
    "prefill-0": Node("prefill-0", "prefill", "10.0.2.11", 30000),
    "prefill-1": Node("prefill-1", "prefill", "10.0.2.12", 30000),
    "prefill-2": Node("prefill-2", "prefill", "10.0.2.13", 30000),
    "decode-0": Node("decode-0", "decode", "10.0.2.21", 30001),
    "decode-1": Node("decode-1", "decode", "10.0.2.22", 30001),
}
PREFILL = ["prefill-0", "prefill-1", "prefill-2"]
DECODE = ["decode-0", "decode-1"]

# Release styles emulated (no version line is ever logged by SGLang):
#  A: incident-era 0.5.x before 0.5.8: request-log lines prefixed "[ts] ",
#     "Prefill batch." / "Decode batch." with trailing ", ", server_args=ServerArgs(...)
#  C: 0.5.8-0.5.11: same as A but request-log lines carry NO timestamp prefix
#  B: 0.5.23: server_args={...} dict, "Prefill batch," without trailing sep,
#     "KV Cache is allocated. dtype: ..." and a GenerateReqInput repr starting with rid
STYLE_NAMES = {
    "A": "incident-era 0.5.x (<0.5.8): prefixed request lines, 'Prefill batch.'",
    "C": "0.5.8-0.5.11: request-log lines without timestamp prefix",
    "B": "0.5.23: server_args dict, 'Prefill batch,', KV line with dtype",
}


@dataclass(frozen=True)
class Start:
    """One (re)start of an engine node with its effective configuration."""

    node: str
    t_first: int  # UTC ms of the first startup line (server_args)
    context_len: int
    pool: int
    style: str
    mem_fraction: float
    kv_bytes_per_token: int  # per TP rank, K (and V) each
    kv_dtype: str = "auto"
    ready_after_s: int = 0
    gpu_mem_gb: float = 78.21  # free memory per GPU before weights (H100 80 GB); H200: 137.40
    notes: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def limit(self) -> int:
        """Scheduler admission limit of this start."""
        return admission_limit(self.context_len, self.pool)

    @property
    def exposed(self) -> bool:
        """True when the KV pool is smaller than the context length."""
        return self.pool < self.context_len

    @property
    def t_ready(self) -> int:
        """UTC ms of 'The server is fired up and ready to roll!'."""
        return self.t_first + self.ready_after_s * 1000


T_BEGIN = ms(2026, 9, 1, 0, 0, 0)
T_TRAFFIC = ms(2026, 9, 1, 0, 10, 0)
T_END = ms(2026, 9, 10, 12, 0, 0)
T_ROUTER_START = ms(2026, 9, 1, 0, 4, 30)
ROLLING_QUIET = (ms(2026, 9, 3, 2, 0, 0), ms(2026, 9, 3, 3, 40, 0))
# A log-collection outage: no line of any engine node (prefill or decode) was kept in this span;
# the gateways and the router logged as usual. Requests in it have gateway evidence only.
ENGINE_LOG_GAP = (ms(2026, 9, 7, 4, 0, 0), ms(2026, 9, 7, 5, 10, 0))
ENGINE_LOG_GAP_NODES = ("prefill-0", "prefill-1", "prefill-2", "decode-0", "decode-1")
PRIVATE = (ms(2026, 9, 9, 14, 0, 0), ms(2026, 9, 9, 19, 40, 0))

_A_BYTES = 16384  # bf16 K bytes per token per TP rank
_FP8_BYTES = 8192
_H200 = 137.40

STARTS: list[Start] = [
    # initial start, old config (context 524288): nobody exposed
    Start("decode-0", ms(2026, 9, 1, 0, 0, 3), CONTEXT_OLD, 2621440, "C", 0.85, _A_BYTES, gpu_mem_gb=_H200, ready_after_s=229),
    Start("prefill-0", ms(2026, 9, 1, 0, 0, 5), CONTEXT_OLD, POOL_EXPOSED, "A", 0.82, _A_BYTES, ready_after_s=214),
    Start("decode-1", ms(2026, 9, 1, 0, 0, 7), CONTEXT_OLD, 2621440, "A", 0.85, _A_BYTES, gpu_mem_gb=_H200, ready_after_s=233),
    Start("prefill-1", ms(2026, 9, 1, 0, 0, 9), CONTEXT_OLD, POOL_EXPOSED, "A", 0.82, _A_BYTES, ready_after_s=209),
    Start("prefill-2", ms(2026, 9, 1, 0, 0, 14), CONTEXT_OLD, 2039808, "A", 0.88, _A_BYTES, gpu_mem_gb=_H200, ready_after_s=221),
    # rolling restart into context 1048576 (decode first, then prefill)
    Start("decode-0", ms(2026, 9, 3, 2, 10, 0), CONTEXT_NEW, 2621440, "C", 0.85, _A_BYTES, gpu_mem_gb=_H200, ready_after_s=231),
    Start("decode-1", ms(2026, 9, 3, 2, 25, 0), CONTEXT_NEW, 2621440, "A", 0.85, _A_BYTES, gpu_mem_gb=_H200, ready_after_s=228),
    Start("prefill-2", ms(2026, 9, 3, 2, 40, 0), CONTEXT_NEW, 2039808, "A", 0.88, _A_BYTES, gpu_mem_gb=_H200, ready_after_s=219),
    Start("prefill-0", ms(2026, 9, 3, 2, 55, 0), CONTEXT_NEW, POOL_EXPOSED, "A", 0.82, _A_BYTES, ready_after_s=212),
    Start("prefill-1", ms(2026, 9, 3, 3, 10, 0), CONTEXT_NEW, POOL_EXPOSED, "A", 0.82, _A_BYTES, ready_after_s=216),
    # an operator "tunes" prefill-1 after tickets about garbled long answers: still exposed, new limit
    Start("prefill-1", ms(2026, 9, 6, 8, 5, 0), CONTEXT_NEW, POOL_EXPOSED_2, "A", 0.86, _A_BYTES, ready_after_s=218),
    # the fix: exposed prefill nodes restarted with a ~2.04 M token pool
    Start("prefill-0", ms(2026, 9, 9, 14, 41, 0), CONTEXT_NEW, 2043840, "A", 0.88, _FP8_BYTES, "fp8_e4m3", gpu_mem_gb=_H200, ready_after_s=247),
    Start("prefill-1", ms(2026, 9, 9, 14, 47, 30), CONTEXT_NEW, 2043840, "B", 0.88, _FP8_BYTES, "fp8_e4m3", gpu_mem_gb=_H200, ready_after_s=238),
]
STARTS.sort(key=lambda s: s.t_first)


_BY_NODE: dict[str, list[Start]] = {}
for _s in STARTS:
    _BY_NODE.setdefault(_s.node, []).append(_s)


def starts_of(node: str) -> list[Start]:
    """Return the starts of one node in time order.

    Example:
        >>> len(starts_of("prefill-0"))
        3
    """
    return _BY_NODE.get(node, [])


def serving(node: str, t: int) -> Start | None:
    """Return the start serving ``node`` at UTC ms ``t``, or None while it is down.

    A node stops 30 s before the first line of its next start and serves again
    once that start is ready.

    Example:
        >>> serving("prefill-0", ms(2026, 9, 5)).context_len
        1048576
    """
    sts = starts_of(node)
    for i, st in enumerate(sts):
        nxt = sts[i + 1] if i + 1 < len(sts) else None
        if st.t_ready <= t and (nxt is None or t < nxt.t_first - 30_000):
            return st
    return None


def config_at(node: str, t: int) -> Start | None:
    """Return the latest start of ``node`` whose first line is at or before ``t``."""
    cur = None
    for st in starts_of(node):
        if st.t_first <= t:
            cur = st
    return cur


def fleet_limit_at(t: int) -> int | None:
    """Return the smallest admission limit of the prefill nodes exposed at UTC ms ``t`` (None: none).

    Example:
        >>> fleet_limit_at(ms(2026, 9, 7, 4, 30)), fleet_limit_at(ms(2026, 9, 2))
        (681274, None)
    """
    limits = [st.limit for n in PREFILL if (st := config_at(n, t)) is not None and st.exposed]
    return min(limits) if limits else None


def engine_log_lost(node: str, t: int) -> bool:
    """True when a line of ``node`` at UTC ms ``t`` falls in the engine log gap (never written).

    Example:
        >>> engine_log_lost("decode-0", ms(2026, 9, 7, 4, 30)), engine_log_lost("router", ms(2026, 9, 7, 4, 30))
        (True, False)
    """
    return node in ENGINE_LOG_GAP_NODES and ENGINE_LOG_GAP[0] <= t < ENGINE_LOG_GAP[1]


# Log file rotation: (UTC ms from which the part applies, relative path). The
# first part starts at T_BEGIN. Rotated parts are gzip (.gz), current is plain.
def _loc(y: int, mo: int, d: int, h: int = 0) -> int:
    return ms(y, mo, d, h) - ENGINE_UTC_OFFSET_S * 1000


ROTATION: dict[str, list[tuple[int, str]]] = {
    "prefill-0": [
        (T_BEGIN, "engine/prefill-0/sglang.log.1.gz"),
        (ms(2026, 9, 9, 14, 41, 0), "engine/prefill-0/sglang.log"),
    ],
    "prefill-1": [
        (T_BEGIN, "engine/prefill-1/sglang.log.1.gz"),
        (_loc(2026, 9, 9, 14), "engine/prefill-1/sglang.log"),  # formats change mid-file
    ],
    "prefill-2": [
        (T_BEGIN, "engine/prefill-2/sglang.log.2.gz"),
        (_loc(2026, 9, 5), "engine/prefill-2/sglang.log.1.gz"),
        (_loc(2026, 9, 9, 12), "engine/prefill-2/sglang.log"),
    ],
    "decode-0": [
        (T_BEGIN, "engine/decode-0/sglang.log.1.gz"),
        (_loc(2026, 9, 9, 18), "engine/decode-0/sglang.log"),
    ],
    "decode-1": [
        (T_BEGIN, "engine/decode-1/sglang.log.2.gz"),
        (_loc(2026, 9, 6), "engine/decode-1/sglang.log.1.gz"),
        (_loc(2026, 9, 9, 21), "engine/decode-1/sglang.log"),
    ],
    "router": [
        (T_BEGIN, "engine/router/smg.log.1.gz"),
        (ms(2026, 9, 9, 12, 0, 0), "engine/router/smg.log"),
    ],
}

CF_DIR = "gateway/cloudflare-http"
LITELLM_PATH = "gateway/litellm/LiteLLM_SpendLogs.csv"
# Logpush job re-created with timestamps as numeric strings for these hours
CF_STRING_TS = (ms(2026, 9, 5, 12), ms(2026, 9, 5, 18))


def diurnal(t: int) -> float:
    """Relative request density at UTC ms ``t`` (0 while the model was private).

    Example:
        >>> diurnal(ms(2026, 9, 9, 15)) == 0.0
        True
    """
    if t < T_TRAFFIC or PRIVATE[0] <= t < PRIVATE[1]:
        return 0.0
    import math

    hour = (t // 1000 % 86400) / 3600.0
    # two humps: APAC afternoon (~06 UTC) and Europe/US (~15 UTC)
    d = 0.25 + 0.9 * math.exp(-(((hour - 6.5) / 3.2) ** 2)) + 0.7 * math.exp(-(((hour - 15.0) / 3.5) ** 2))
    d += 0.5 * math.exp(-(((hour - 30.5) / 3.2) ** 2))  # wrap-around of the APAC hump
    dow = (t // 86_400_000 + 4) % 7  # 0 = Sunday (1970-01-01 was a Thursday)
    if dow in (0, 6):
        d *= 0.6
    return d
