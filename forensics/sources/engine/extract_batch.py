"""Extractor of scheduler batch lines (``Prefill batch. #new-seq: 1, ...`` / ``Decode batch, ...``).

The message is stored as printed (``fields_raw``; the view ``engine_batch_fields`` gives every pair
as a MAP) and the typed columns come from the pairs of the keys in :data:`KEYS`:

* the *body* starts at the first ``#`` key (``" #"``), trailing spaces then commas removed;
* a body of plain pairs (``k: v`` joined by ``, ``, no quote, backslash or control character,
  one ``": "`` per pair) is split directly, the first of a repeated key wins;
* any other body is read pair by pair as ``, key: value`` after the ``X batch[ [iter]][.,]``
  header (keys and values trimmed; the first of a repeated key wins).

``iter`` is the ``[iter]`` of ``Decode batch [4521],`` (``SGLANG_LOG_FORWARD_ITERS``).

Example:
    >>> import numpy as np
    >>> line = b"Decode batch [7], #running-req: 3, #token: 40, gen throughput (token/s): 9.5, "
    >>> buf = np.frombuffer(line, dtype=np.uint8)
    >>> r = scan_batches(buf, np.array([0]), np.array([len(line)]))
    >>> int(r.is_prefill[0]), int(r.iter_val[0]), buf[r.spans[0, K_RUNNING, 0]:r.spans[0, K_RUNNING, 1]].tobytes()
    (0, 7, b'3')
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from forensics.sources.engine.extract_request import exact_name
from forensics.sources.engine.spans import INT_NULL, parse_int

#: The batch keys behind the typed columns of ``engine_batches`` (slots of ``spans``).
KEYS = ("#new-seq", "#new-token", "#cached-token", "#token", "#running-req", "#queue-req", "token usage",
        "full token usage", "input throughput (token/s)", "gen throughput (token/s)")
K_NEW_SEQ, K_NEW_TOKEN, K_CACHED, K_TOKEN, K_RUNNING, K_QUEUE, K_USAGE, K_FULL_USAGE, K_IN_TPUT, K_GEN_TPUT = \
    range(10)

#: The integer keys (the ``ints`` / ``states`` rows of :class:`Batches`), parsed in the same pass.
INT_KEYS = (K_NEW_SEQ, K_NEW_TOKEN, K_CACHED, K_TOKEN, K_RUNNING, K_QUEUE)

_KDATA = np.frombuffer("".join(KEYS).encode(), dtype=np.uint8).copy()
_KOFFS = np.zeros(len(KEYS) + 1, dtype=np.int64)
np.cumsum([len(k) for k in KEYS], out=_KOFFS[1:])


@dataclass(frozen=True)
class Batches:
    """Per-line results of :func:`scan_batches`."""

    is_prefill: np.ndarray  # bool
    iter_val: np.ndarray  # int64
    iter_state: np.ndarray  # int8 (spans.INT_*)
    spans: np.ndarray  # int64 [line, key, start|end] raw value spans, -1 when absent
    ints: np.ndarray  # int64 [k, line] value of INT_KEYS[k]
    states: np.ndarray  # int8 [k, line] its spans.INT_* state


@numba.njit(cache=True, nogil=True)
def _put(out: np.ndarray, li: int, slot: int, s: int, e: int) -> None:
    if slot >= 0 and out[li, slot, 0] < 0:
        out[li, slot, 0] = s
        out[li, slot, 1] = e


@numba.njit(cache=True, nogil=True)
def _plain_pairs(buf: np.ndarray, bs: int, be: int, out: np.ndarray, li: int, kdata: np.ndarray,
                 koffs: np.ndarray) -> bool:
    """Split a body of plain ``k: v, k: v`` pairs; False (nothing written) if it is not one."""
    if be <= bs:
        return False
    for i in range(bs, be):
        c = buf[i]
        if c == 34 or c == 92 or c < 32:
            return False
    # every ', '-separated piece must hold exactly one ': '
    p = bs
    while True:
        q = p
        while q < be and not (buf[q] == 44 and q + 1 < be and buf[q + 1] == 32):
            q += 1
        colons = 0
        k = p
        while k + 1 < q:
            if buf[k] == 58 and buf[k + 1] == 32:
                colons += 1
                k += 2
            else:
                k += 1
        if colons != 1:
            return False
        if q >= be:
            break
        p = q + 2
    p = bs
    while True:
        q = p
        while q < be and not (buf[q] == 44 and q + 1 < be and buf[q + 1] == 32):
            q += 1
        c = p
        while not (buf[c] == 58 and buf[c + 1] == 32):
            c += 1
        _put(out, li, exact_name(buf, p, c, kdata, koffs), c + 2, q)
        if q >= be:
            break
        p = q + 2
    return True


@numba.njit(cache=True, nogil=True)
def _pairs_regex(buf: np.ndarray, s: int, e: int, out: np.ndarray, li: int, kdata: np.ndarray,
                 koffs: np.ndarray) -> None:
    """``(?:^\\w+ batch(?: \\[\\d+\\])?[.,] ?|, )([^:,]+): ([^,]*)`` over the message, all matches."""
    p = s
    while p < e:
        k0 = -1
        if p == s:
            # the header, at the start only
            j = p
            while j < e and ((48 <= buf[j] <= 57) or (65 <= buf[j] <= 90) or (97 <= buf[j] <= 122) or buf[j] == 95):
                j += 1
            if j > p and j + 6 <= e and buf[j] == 32 and buf[j + 1] == 98 and buf[j + 2] == 97 \
                    and buf[j + 3] == 116 and buf[j + 4] == 99 and buf[j + 5] == 104:
                j += 6
                if j + 2 < e and buf[j] == 32 and buf[j + 1] == 91:
                    d = j + 2
                    while d < e and 48 <= buf[d] <= 57:
                        d += 1
                    if d > j + 2 and d < e and buf[d] == 93:
                        j = d + 1
                if j < e and (buf[j] == 46 or buf[j] == 44):
                    j += 1
                    if j < e and buf[j] == 32:
                        j += 1
                    k0 = j
        if k0 < 0 and p + 1 < e and buf[p] == 44 and buf[p + 1] == 32:
            k0 = p + 2
        if k0 >= 0:
            k1 = k0
            while k1 < e and buf[k1] != 58 and buf[k1] != 44:
                k1 += 1
            if k1 > k0 and k1 + 1 < e and buf[k1] == 58 and buf[k1 + 1] == 32:
                v0 = k1 + 2
                v1 = v0
                while v1 < e and buf[v1] != 44:
                    v1 += 1
                # keys and values trimmed of spaces
                a, b = k0, k1
                while a < b and buf[a] == 32:
                    a += 1
                while b > a and buf[b - 1] == 32:
                    b -= 1
                x, y = v0, v1
                while x < y and buf[x] == 32:
                    x += 1
                while y > x and buf[y - 1] == 32:
                    y -= 1
                _put(out, li, exact_name(buf, a, b, kdata, koffs), x, y)
                p = v1
                continue
        p += 1


@numba.njit(cache=True, nogil=True)
def _scan(buf: np.ndarray, s: np.ndarray, e: np.ndarray, prefill: np.ndarray, itv: np.ndarray,
          its: np.ndarray, out: np.ndarray, ints: np.ndarray, states: np.ndarray, kdata: np.ndarray,
          koffs: np.ndarray) -> None:
    for li in range(s.shape[0]):
        ms = s[li]
        me = e[li]
        for k in range(koffs.shape[0] - 1):
            out[li, k, 0] = -1
            out[li, k, 1] = -1
        prefill[li] = me - ms >= 7 and buf[ms] == 80 and buf[ms + 1] == 114 and buf[ms + 2] == 101 \
            and buf[ms + 3] == 102 and buf[ms + 4] == 105 and buf[ms + 5] == 108 and buf[ms + 6] == 108
        # [iter]: ' [' right after 'Prefill batch' (13) or 'Decode batch' (12)
        itv[li] = 0
        its[li] = INT_NULL
        at = -1
        if me - ms >= 15 and buf[ms + 13] == 32 and buf[ms + 14] == 91:
            at = 13
        elif me - ms >= 14 and buf[ms + 12] == 32 and buf[ms + 13] == 91:
            at = 12
        if at > 0:
            # ^\w+ batch \[(\d+)\] within the first 40 characters
            j = ms
            while j < me and ((48 <= buf[j] <= 57) or (65 <= buf[j] <= 90) or (97 <= buf[j] <= 122) or buf[j] == 95):
                j += 1
            lim = min(me, ms + 40)
            if j + 8 <= lim and buf[j] == 32 and buf[j + 1] == 98 and buf[j + 2] == 97 and buf[j + 3] == 116 \
                    and buf[j + 4] == 99 and buf[j + 5] == 104 and buf[j + 6] == 32 and buf[j + 7] == 91:
                d0 = j + 8
                d = d0
                while d < lim and 48 <= buf[d] <= 57:
                    d += 1
                if d > d0 and d < lim and buf[d] == 93:
                    itv[li], its[li] = parse_int(buf, d0, d)
        # the body: from the first ' #' on, trailing spaces then commas removed
        bs = ms
        for i in range(ms, me - 1):
            if buf[i] == 32 and buf[i + 1] == 35:
                bs = i + 1
                break
        be = me
        if be > bs and (buf[be - 1] == 32 or buf[be - 1] == 44):
            while be > bs and buf[be - 1] == 32:
                be -= 1
            while be > bs and buf[be - 1] == 44:
                be -= 1
        if not _plain_pairs(buf, bs, be, out, li, kdata, koffs):
            _pairs_regex(buf, ms, me, out, li, kdata, koffs)
        # the integer keys (the first slots) while the line is in cache: no second pass per key
        for k in range(ints.shape[0]):
            ints[k, li], states[k, li] = parse_int(buf, out[li, k, 0], out[li, k, 1])


def scan_batches(buf: np.ndarray, s: np.ndarray, e: np.ndarray) -> Batches:
    """Typed fields of the batch messages buf[s:e] (see the module docstring)."""
    n = s.shape[0]
    prefill = np.empty(n, dtype=np.bool_)
    itv = np.empty(n, dtype=np.int64)
    its = np.empty(n, dtype=np.int8)
    out = np.empty((n, len(KEYS), 2), dtype=np.int64)
    ints = np.empty((len(INT_KEYS), n), dtype=np.int64)
    states = np.empty((len(INT_KEYS), n), dtype=np.int8)
    if n:
        _scan(buf, s.astype(np.int64, copy=False), e.astype(np.int64, copy=False), prefill, itv, its, out, ints,
              states, _KDATA, _KOFFS)
    return Batches(is_prefill=prefill, iter_val=itv, iter_state=its, spans=out, ints=ints, states=states)
