"""Stage 1 of the scanner: split every line into its prefix and message, and read the prefix.

One compiled pass over a :class:`~forensics.sources.lines.LineBatch` finds, per line, the parts
that real pipelines stack in front of an SGLang or router message, each optional, in this order:

* collector columns: ``<epoch ms>\\t`` and ``<ISO-8601 UTC>\\t`` (a log shipper's export);
* a Ray actor prefix ``(SchedulerActor pid=123, ip=10.0.0.1) `` (any actor name);
* the engine's ``[YYYY-MM-DD HH:MM:SS[.mmm][ rank tags]] `` (local time, rank tags in any order)
  or a router's ``YYYY-MM-DD[ T]HH:MM:SS[.frac][Z]  LEVEL `` (UTC).

The grammar is the one the previous SQL loader matched with a regex (``^`` anchored, every part
optional and greedy, the bracket within the first 256 bytes); here it is a hand-written
recogniser compiled by numba, so it costs tens of nanoseconds per line.

Example:
    >>> import numpy as np
    >>> from forensics.sources.lines import LineBatch
    >>> b = LineBatch.from_bytes(b"[2026-09-02 04:51:17.615 TP3 DP1] Decode batch, x\\nplain\\n")
    >>> p = scan_prefixes(b)
    >>> p.kind.tolist(), p.msg_start.tolist(), b.buf[p.rank_s[0]:p.rank_e[0]].tobytes()
    ([1, 0], [34, 50], b' TP3 DP1')
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from forensics.sources.lines import LineBatch

#: ``ts_us`` / ``collector_us`` of a line without that time (or whose time is not a valid date).
NO_TS = np.iinfo(np.int64).min

#: ``kind`` codes: no engine/router prefix, engine bracket, router prefix.
P_NONE, P_ENGINE, P_ROUTER = 0, 1, 2

#: Router levels, in the order of ``level`` codes 1..5.
LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR")

#: The bracket (or router time) must end within this many bytes of the line start.
PREFIX_WINDOW = 256

#: Python logging level names (a custom format's ``[INFO]``), longest first where one prefixes another.
_LEVEL_NAMES = (b"DEBUG", b"INFO", b"WARNING", b"WARN", b"ERROR", b"CRITICAL")
_LV_DATA = np.frombuffer(b"".join(_LEVEL_NAMES), dtype=np.uint8).copy()
_LV_OFFS = np.cumsum([0] + [len(x) for x in _LEVEL_NAMES]).astype(np.int64)


@dataclass(frozen=True)
class Prefixes:
    """Per-line results of :func:`scan_prefixes` (arrays of one entry per line of the batch)."""

    #: P_NONE | P_ENGINE | P_ROUTER
    kind: np.ndarray
    #: absolute index in ``buf`` where the message starts (after the prefix)
    msg_start: np.ndarray
    #: engine: local wall time, router: UTC, microseconds since the epoch; NO_TS when absent/invalid
    ts_us: np.ndarray
    #: the rank tags text inside the bracket (``" TP0 EP0"``), as a span of ``buf``
    rank_s: np.ndarray
    rank_e: np.ndarray
    #: rank tags already in canonical order (or none)
    rank_canon: np.ndarray
    #: router level code (1..5 for LEVELS), 0 otherwise
    level: np.ndarray
    #: time of a collector column (epoch ms or ISO) in UTC microseconds, NO_TS when none
    collector_us: np.ndarray
    #: the bracket had a time of day and no date (old releases): ``ts_us`` is the time of day
    time_only: np.ndarray
    #: the SGLang line was re-logged behind a calling program's own logging prefix
    relogged: np.ndarray


@numba.njit(cache=True, nogil=True, inline="always")
def _digit(c: int) -> bool:
    return 48 <= c <= 57


@numba.njit(cache=True, nogil=True, inline="always")
def _upper(c: int) -> bool:
    return 65 <= c <= 90


@numba.njit(cache=True, nogil=True, inline="always")
def _word(c: int) -> bool:
    return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122) or c == 95


@numba.njit(cache=True, nogil=True)
def _num(buf: np.ndarray, i: int, n: int) -> int:
    v = 0
    for k in range(n):
        v = v * 10 + (buf[i + k] - 48)
    return v


@numba.njit(cache=True, nogil=True)
def _digits_at(buf: np.ndarray, i: int, n: int, end: int) -> bool:
    if i + n > end:
        return False
    for k in range(n):  # noqa: SIM110 (compiled: a plain loop)
        if not _digit(buf[i + k]):
            return False
    return True


@numba.njit(cache=True, nogil=True)
def days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    mp = m + (-3 if m > 2 else 9)
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


@numba.njit(cache=True, nogil=True)
def _dim(y: int, m: int) -> int:
    if m == 2:
        leap = (y % 4 == 0 and y % 100 != 0) or y % 400 == 0
        return 29 if leap else 28
    if m in (4, 6, 9, 11):
        return 30
    return 31


@numba.njit(cache=True, nogil=True)
def _date_time(buf: np.ndarray, i: int, sep_t: bool) -> int:
    """``YYYY-MM-DD?HH:MM:SS`` at ``i`` (shape already checked) as epoch µs, NO_TS if not a real time.

    DuckDB's cast rules are kept: ``24:00:00`` is the next midnight, second 60 is invalid.
    """
    y = _num(buf, i, 4)
    mo = _num(buf, i + 5, 2)
    d = _num(buf, i + 8, 2)
    h = _num(buf, i + 11, 2)
    mi = _num(buf, i + 14, 2)
    s = _num(buf, i + 17, 2)
    if mo < 1 or mo > 12 or d < 1 or d > _dim(y, mo) or mi > 59 or s > 59:
        return NO_TS
    if h > 23 and not (h == 24 and mi == 0 and s == 0):
        return NO_TS
    days = days_from_civil(y, mo, d)
    return ((days * 24 + h) * 60 + mi) * 60_000_000 + s * 1_000_000


@numba.njit(cache=True, nogil=True)
def _is_date_time(buf: np.ndarray, i: int, end: int, seps: int) -> bool:
    """``\\d{4}-\\d\\d-\\d\\d<sep>\\d\\d:\\d\\d:\\d\\d`` at ``i``; seps: 0 space, 1 'T', 2 either."""
    if i + 19 > end:
        return False
    if not (_digits_at(buf, i, 4, end) and buf[i + 4] == 45 and _digits_at(buf, i + 5, 2, end)
            and buf[i + 7] == 45 and _digits_at(buf, i + 8, 2, end)):
        return False
    c = buf[i + 10]
    if seps == 0 and c != 32:
        return False
    if seps == 1 and c != 84:
        return False
    if seps == 2 and c != 32 and c != 84:
        return False
    return (_digits_at(buf, i + 11, 2, end) and buf[i + 13] == 58 and _digits_at(buf, i + 14, 2, end)
            and buf[i + 16] == 58 and _digits_at(buf, i + 17, 2, end))


@numba.njit(cache=True, nogil=True)
def _frac(buf: np.ndarray, i: int, end: int, maxd: int) -> tuple[int, int]:
    """Digits of a fraction at ``i`` (up to maxd, at least 1): (microseconds, digits) or (0, 0)."""
    k = 0
    while i + k < end and k < maxd and _digit(buf[i + k]):
        k += 1
    if k == 0:
        return 0, 0
    # a longer run of digits than maxd is not this grammar's fraction
    if i + k < end and _digit(buf[i + k]):
        return 0, -1
    us = 0
    for j in range(min(k, 6)):
        us = us * 10 + (buf[i + j] - 48)
    for _ in range(6 - min(k, 6)):
        us *= 10
    return us, k


@numba.njit(cache=True, nogil=True)
def _iso_collector(buf: np.ndarray, i: int, end: int) -> tuple[int, int]:
    """An ISO-8601 collector column followed by TAB at ``i``: (end index after the tab, µs UTC) or (-1, 0)."""
    if not _is_date_time(buf, i, end, 1):
        return -1, 0
    us = _date_time(buf, i, True)
    j = i + 19
    if j < end and buf[j] == 46:
        f, k = _frac(buf, j + 1, end, 9)
        if k <= 0:
            return -1, 0
        j += 1 + k
        if us != NO_TS:
            us += f
    if j < end and buf[j] == 90:  # Z
        j += 1
    elif j < end and (buf[j] == 43 or buf[j] == 45):
        sign = 1 if buf[j] == 43 else -1
        if not _digits_at(buf, j + 1, 2, end):
            return -1, 0
        hh = _num(buf, j + 1, 2)
        k = j + 3
        if k < end and buf[k] == 58:
            k += 1
        if not _digits_at(buf, k, 2, end):
            return -1, 0
        mm = _num(buf, k, 2)
        j = k + 2
        if us != NO_TS:
            us -= sign * (hh * 60 + mm) * 60_000_000
    if j < end and buf[j] == 9:
        return j + 1, us
    return -1, 0


_RANK_NAMES = ("DP", "PP", "ATTN_CP", "MOE_DP", "TP", "EP")


@numba.njit(cache=True, nogil=True)
def _rank_order(buf: np.ndarray, s: int, e: int) -> int:
    """Canonical position of a known rank tag name buf[s:e] (DP PP ATTN_CP MOE_DP TP EP), -1 if unknown."""
    n = e - s
    if n == 2:
        a, b = buf[s], buf[s + 1]
        if a == 68 and b == 80:
            return 0  # DP
        if a == 80 and b == 80:
            return 1  # PP
        if a == 84 and b == 80:
            return 4  # TP
        if a == 69 and b == 80:
            return 5  # EP
        return -1
    if n == 7:
        # ATTN_CP
        w = (65, 84, 84, 78, 95, 67, 80)
        for k in range(7):
            if buf[s + k] != w[k]:
                return -1
        return 2
    if n == 6:
        w6 = (77, 79, 69, 95, 68, 80)  # MOE_DP
        for k in range(6):
            if buf[s + k] != w6[k]:
                return -1
        return 3
    return -1


@numba.njit(cache=True, nogil=True)
def _bracket(buf: np.ndarray, i: int, win: int) -> tuple[int, int, int, int, bool, bool]:
    """``[YYYY-MM-DD HH:MM:SS[.frac][ TAGS]]`` or ``[HH:MM:SS[.frac][ TAGS]]`` at ``i``.

    Returns (index after ']', µs (local wall time, or time of day), rank span start, end, tags in
    canonical order, time of day only); index -1 when there is no bracket here.
    """
    if not (i < win and buf[i] == 91):
        return -1, NO_TS, 0, 0, True, False
    only_time = False
    if _is_date_time(buf, i + 1, win, 0):
        j = i + 20
        us = _date_time(buf, i + 1, False)
    elif i + 9 <= win and _digits_at(buf, i + 1, 2, win) and buf[i + 3] == 58 and _digits_at(buf, i + 4, 2, win) \
            and buf[i + 6] == 58 and _digits_at(buf, i + 7, 2, win):
        j = i + 9
        h = _num(buf, i + 1, 2)
        mi = _num(buf, i + 4, 2)
        sec = _num(buf, i + 7, 2)
        if mi > 59 or sec > 59 or (h > 23 and not (h == 24 and mi == 0 and sec == 0)):
            us = NO_TS
        else:
            us = ((h * 60 + mi) * 60 + sec) * 1_000_000
        only_time = True
    else:
        return -1, NO_TS, 0, 0, True, False
    if j < win and (buf[j] == 46 or buf[j] == 44):
        f, nd = _frac(buf, j + 1, win, 6)
        if nd > 0:
            if us != NO_TS:
                us += f
            j += 1 + nd
        elif nd < 0:
            return -1, NO_TS, 0, 0, True, False
    r0 = j
    in_order = True
    last = -1
    while j < win and buf[j] == 32:
        # a tag: [A-Z][A-Z_]*\d+
        t = j + 1
        if not (t < win and _upper(buf[t])):
            break
        t += 1
        while t < win and (_upper(buf[t]) or buf[t] == 95):
            t += 1
        name_end = t
        d0 = t
        while t < win and _digit(buf[t]):
            t += 1
        if t == d0:
            break
        order = _rank_order(buf, j + 1, name_end)
        if order < 0 or order < last:
            in_order = False
        last = order
        j = t
    if j < win and buf[j] == 93:
        return j + 1, us, r0, j, in_order, only_time
    return -1, NO_TS, 0, 0, True, False


@numba.njit(cache=True, nogil=True)
def _level_at(buf: np.ndarray, i: int, win: int) -> int:
    """Length of a Python logging level name (DEBUG INFO WARNING WARN ERROR CRITICAL) at ``i``, else 0."""
    for x in range(_LV_OFFS.shape[0] - 1):
        a = _LV_OFFS[x]
        n = int(_LV_OFFS[x + 1] - a)
        if i + n <= win:
            same = True
            for k in range(n):
                if buf[i + k] != _LV_DATA[a + k]:
                    same = False
                    break
            if same:
                return n
    return 0


@numba.njit(cache=True, nogil=True)
def _pyfile_at(buf: np.ndarray, i: int, win: int) -> int:
    """End of ``<name>.py:<line>`` at ``i`` (name of word characters, dots, dashes, slashes), else -1."""
    j = i
    while j < win and (_word(buf[j]) or buf[j] == 46 or buf[j] == 45 or buf[j] == 47):
        j += 1
    if j - i < 4 or buf[j - 3] != 46 or buf[j - 2] != 112 or buf[j - 1] != 121:
        return -1
    if not (j < win and buf[j] == 58):
        return -1
    d = j + 1
    while d < win and _digit(buf[d]):
        d += 1
    return d if d > j + 1 else -1


@numba.njit(cache=True, nogil=True)
def _decoration(buf: np.ndarray, i: int, win: int) -> int:
    """Skip what a custom logging format puts between the time bracket and the message.

    ``[scheduler.py:1188][INFO]: `` (``--log-config``), ``scheduler.py:1188 - `` (embedding
    apps' ``%(filename)s:%(lineno)d - ``), ``INFO scheduler.py:1188: ``. SGLang's own format has
    none of them, so its lines are untouched.
    """
    j = i
    groups = 0
    while j < win and buf[j] == 91:
        e = _pyfile_at(buf, j + 1, win)
        if e < 0:
            n = _level_at(buf, j + 1, win)
            e = j + 1 + n if n else -1
        if e < 0 or not (e < win and buf[e] == 93):
            break
        j = e + 1
        groups += 1
    if groups:
        if j < win and buf[j] == 58:
            j += 1
        if j < win and buf[j] == 32:
            j += 1
        return j
    e = _pyfile_at(buf, i, win)
    if e > 0 and e + 3 <= win and buf[e] == 32 and buf[e + 1] == 45 and buf[e + 2] == 32:
        return e + 3
    n = _level_at(buf, i, win)
    if n and i + n < win and buf[i + n] == 32:
        e = _pyfile_at(buf, i + n + 1, win)
        if e > 0 and e + 2 <= win and buf[e] == 58 and buf[e + 1] == 32:
            return e + 2
    return i


@numba.njit(cache=True, nogil=True)
def _relog_end(buf: np.ndarray, i: int, win: int) -> int:
    """End of a Python logging default prefix ``YYYY-MM-DD HH:MM:SS,mmm - name - LEVEL - `` at ``i``, else -1."""
    if not _is_date_time(buf, i, win, 0):
        return -1
    j = i + 19
    if j + 4 <= win and buf[j] == 44 and _digits_at(buf, j + 1, 3, win):
        j += 4
    if not (j + 3 <= win and buf[j] == 32 and buf[j + 1] == 45 and buf[j + 2] == 32):
        return -1
    j += 3
    n0 = j
    while j < win and buf[j] != 32:
        j += 1
    if j == n0 or not (j + 3 <= win and buf[j + 1] == 45 and buf[j + 2] == 32):
        return -1
    j += 3
    n = _level_at(buf, j, win)
    if n == 0:
        return -1
    j += n
    if not (j + 3 <= win and buf[j] == 32 and buf[j + 1] == 45 and buf[j + 2] == 32):
        return -1
    return j + 3


@numba.njit(cache=True, nogil=True)
def _scan(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, kind: np.ndarray, msg: np.ndarray,
          ts: np.ndarray, rs: np.ndarray, re_: np.ndarray, canon: np.ndarray, level: np.ndarray,
          coll: np.ndarray, tod: np.ndarray, outer: np.ndarray) -> None:
    for li in range(starts.shape[0]):
        s = starts[li]
        end = ends[li]
        win = min(end, s + PREFIX_WINDOW)
        i = s
        kind[li] = P_NONE
        ts[li] = NO_TS
        rs[li] = 0
        re_[li] = 0
        canon[li] = True
        level[li] = 0
        coll[li] = NO_TS
        tod[li] = False
        outer[li] = False
        # collector column: epoch milliseconds, 10 to 13 digits, then TAB
        k = 0
        while i + k < win and k < 14 and _digit(buf[i + k]):
            k += 1
        if 10 <= k <= 13 and i + k < win and buf[i + k] == 9:
            coll[li] = _num(buf, i, k) * 1000
            i += k + 1
        # collector column: ISO time, then TAB
        j, us = _iso_collector(buf, i, win)
        if j > 0:
            if coll[li] == NO_TS:
                coll[li] = us
            i = j
        # Ray actor prefix: (Name pid=N[, ip=ADDR]) and an optional space
        if i < win and buf[i] == 40:
            j = i + 1
            ok = j < win and (_upper(buf[j]) or (97 <= buf[j] <= 122) or buf[j] == 95)
            if ok:
                while j < win and _word(buf[j]):
                    j += 1
                if j + 5 <= win and buf[j] == 32 and buf[j + 1] == 112 and buf[j + 2] == 105 \
                        and buf[j + 3] == 100 and buf[j + 4] == 61:
                    j += 5
                    d0 = j
                    while j < win and _digit(buf[j]):
                        j += 1
                    if j > d0:
                        close = -1
                        if j < win and buf[j] == 41:
                            close = j
                        elif j + 5 <= win and buf[j] == 44 and buf[j + 1] == 32 and buf[j + 2] == 105 \
                                and buf[j + 3] == 112 and buf[j + 4] == 61:
                            m = j + 5
                            a0 = m
                            while m < win and (_digit(buf[m]) or (65 <= buf[m] <= 70) or (97 <= buf[m] <= 102)
                                               or buf[m] == 46 or buf[m] == 58):
                                m += 1
                            if m > a0 and m < win and buf[m] == 41:
                                close = m
                        if close >= 0:
                            i = close + 1
                            if i < win and buf[i] == 32:
                                i += 1
        # a calling program's own logging prefix before SGLang's line ("... - app - INFO - [...")
        k = _relog_end(buf, i, win)
        if k > 0 and _bracket(buf, k, win)[0] > 0:
            i = k
            outer[li] = True
        # engine bracket: [date time[.ms][ tags]] or the old [time[.ms][ tags]] without a date
        done = False
        if i < win and buf[i] == 91:
            j, us, r0, r1, in_order, only_time = _bracket(buf, i, win)
            if j > 0:
                kind[li] = P_ENGINE
                ts[li] = us
                rs[li] = r0
                re_[li] = r1
                canon[li] = in_order
                tod[li] = only_time
                i = j
                if i < win and buf[i] == 32:
                    i += 1
                i = _decoration(buf, i, win)
                done = True
        # router time and level
        if not done and _is_date_time(buf, i, win, 2):
            j = i + 19
            frac_us = 0
            good = True
            if j < win and buf[j] == 46:
                f, nd = _frac(buf, j + 1, win, 9)
                if nd > 0:
                    frac_us = f
                    j += 1 + nd
                else:
                    good = False
            if good and j < win and buf[j] == 90:
                j += 1
            sp = j
            while j < win and buf[j] == 32:
                j += 1
            lv = 0
            if good and j > sp:
                if j + 5 <= win and buf[j] == 84 and buf[j + 1] == 82 and buf[j + 2] == 65 and buf[j + 3] == 67 \
                        and buf[j + 4] == 69:
                    lv, j = 1, j + 5
                elif j + 5 <= win and buf[j] == 68 and buf[j + 1] == 69 and buf[j + 2] == 66 \
                        and buf[j + 3] == 85 and buf[j + 4] == 71:
                    lv, j = 2, j + 5
                elif j + 4 <= win and buf[j] == 73 and buf[j + 1] == 78 and buf[j + 2] == 70 and buf[j + 3] == 79:
                    lv, j = 3, j + 4
                elif j + 4 <= win and buf[j] == 87 and buf[j + 1] == 65 and buf[j + 2] == 82 and buf[j + 3] == 78:
                    lv, j = 4, j + 4
                elif j + 5 <= win and buf[j] == 69 and buf[j + 1] == 82 and buf[j + 2] == 82 \
                        and buf[j + 3] == 79 and buf[j + 4] == 82:
                    lv, j = 5, j + 5
            if lv > 0 and j < win and buf[j] == 32:
                while j < win and buf[j] == 32:
                    j += 1
                us = _date_time(buf, i, True)
                kind[li] = P_ROUTER
                ts[li] = us + frac_us if us != NO_TS else NO_TS
                level[li] = lv
                i = j
        msg[li] = i


def scan_prefixes(batch: LineBatch) -> Prefixes:
    """Read the prefix of every line of ``batch`` (see the module docstring for the grammar).

    Example:
        >>> from forensics.sources.lines import LineBatch
        >>> p = scan_prefixes(LineBatch.from_bytes(b"2026-09-09 12:00:03  INFO http_request{}: x"))
        >>> p.kind.tolist(), LEVELS[p.level[0] - 1], p.msg_start.tolist()
        ([2], 'INFO', [26])
    """
    n = len(batch)
    kind = np.empty(n, dtype=np.int8)
    msg = np.empty(n, dtype=np.int64)
    ts = np.empty(n, dtype=np.int64)
    rs = np.empty(n, dtype=np.int64)
    re_ = np.empty(n, dtype=np.int64)
    canon = np.empty(n, dtype=np.bool_)
    level = np.empty(n, dtype=np.int8)
    coll = np.empty(n, dtype=np.int64)
    tod = np.empty(n, dtype=np.bool_)
    outer = np.empty(n, dtype=np.bool_)
    if n:
        _scan(batch.buf, batch.starts, batch.ends, kind, msg, ts, rs, re_, canon, level, coll, tod, outer)
    return Prefixes(kind=kind, msg_start=msg, ts_us=ts, rank_s=rs, rank_e=re_, rank_canon=canon, level=level,
                    collector_us=coll, time_only=tod, relogged=outer)
