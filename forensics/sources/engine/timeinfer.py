"""Times of the lines: engine local time to UTC, and the time of lines that carry none.

* Engine timestamps are the node's local wall time; ``--engine-tz`` (any IANA zone, or ``auto``)
  says which; :mod:`forensics.sources.timezones` converts them (DST gaps and repeats flagged).
* Router lines are UTC by themselves; collector columns are UTC.
* A line with no engine/router prefix takes its collector time, else the time of the nearest
  earlier prefixed line of the file (``ts_inferred``), and points at that line
  (``attached_to_line``): tracebacks, wrapped lines, un-prefixed request logs.

Example:
    >>> us = np.array([1_788_000_000_000_000, NO_TS])
    >>> (local_to_utc("Asia/Singapore", us) - us).tolist()[0] // 3_600_000_000
    -8
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numba
import numpy as np

from forensics.sources.engine.prefix import NO_TS, P_NONE
from forensics.sources.timezones import (
    AMBIGUOUS,
    BY_COLLECTOR,
    BY_ORDER,
    GAP,
    OffsetEstimate,
    auto_offsets,
    fixed_offset_s,
    has_transition,
    to_utc,
)

_MINUTE = 60_000_000
_HOUR = 60 * _MINUTE


class LocalToUtc:
    """Engine local wall times (µs) of one zone to UTC, by the rules of :mod:`forensics.sources.timezones`.

    A block whose times hold no offset change (nearly all) is shifted by one offset; a block
    across a DST change goes through ``timezones.to_utc`` line by line: the spring gap and the
    repeated autumn hour are placed by the collector's time or the line order, or left unknown
    (NO_TS), and counted in ``flags``. ``auto`` takes each line's offset from its collector time
    (``timezones.auto_offsets``), the estimates kept in ``auto``.
    """

    def __init__(self, tz: str) -> None:
        self.tz = tz
        self.fixed = 0 if tz == "auto" else fixed_offset_s(tz)
        self.flags: Counter[int] = Counter()
        self.auto: list[OffsetEstimate] = []

    def __call__(self, us: np.ndarray, collector: np.ndarray | None = None) -> np.ndarray:
        valid = us != NO_TS
        if us.size == 0 or not valid.any():
            return us
        if self.tz == "auto":
            col = collector if collector is not None else np.full(us.shape, NO_TS, dtype=np.int64)
            offs, est = auto_offsets(us, col)
            if est.offset_s is None and self.auto and self.auto[-1].offset_s is not None:
                offs[:] = int(self.auto[-1].offset_s)
            self.auto.append(est)
            return np.where(valid, us - offs * 1_000_000, NO_TS)
        if self.fixed is not None:
            return np.where(valid, us - self.fixed * 1_000_000, NO_TS)
        v = us[valid]
        lo, hi = int(v.min()), int(v.max())
        if not has_transition(self.tz, lo, hi):
            first = to_utc(np.array([lo], dtype=np.int64), self.tz).utc_us[0]
            return np.where(valid, us - (lo - first), NO_TS)
        conv = to_utc(us, self.tz, collector_us=collector)
        for flag in (GAP, AMBIGUOUS, BY_COLLECTOR, BY_ORDER):
            k = conv.count(flag)
            if k:
                self.flags[flag] += k
        return conv.utc_us


def local_to_utc(tz: str, us: np.ndarray) -> np.ndarray:
    """Local wall times (µs, NO_TS for none) in zone ``tz`` as UTC µs (see :class:`LocalToUtc`)."""
    return LocalToUtc(tz)(us)


@dataclass
class Carry:
    """The last prefixed line of the file so far (for lines that follow it across blocks)."""

    line_no: int = -1
    ts: int = NO_TS


@numba.njit(cache=True, nogil=True)
def _infer(pkind: np.ndarray, line_no: np.ndarray, ts: np.ndarray, coll: np.ndarray, out_ts: np.ndarray,
           inferred: np.ndarray, attached: np.ndarray, last_line: int, last_ts: int) -> tuple[int, int]:
    for i in range(pkind.shape[0]):
        if pkind[i] != P_NONE:
            out_ts[i] = ts[i]
            inferred[i] = False
            attached[i] = -1
            last_line = line_no[i]
            last_ts = ts[i]
        else:
            t = coll[i] if coll[i] != NO_TS else last_ts
            out_ts[i] = t
            inferred[i] = t != NO_TS
            attached[i] = last_line
    return last_line, last_ts


def infer_times(pkind: np.ndarray, line_no: np.ndarray, ts_utc: np.ndarray, collector: np.ndarray,
                carry: Carry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ts, ts_inferred, attached_to_line) of every line; ``carry`` continues across blocks.

    Example:
        >>> k = np.array([1, 0, 0], dtype=np.int8); c = Carry()
        >>> ts, inf, att = infer_times(k, np.array([1, 2, 3]), np.array([5, NO_TS, NO_TS]), np.full(3, NO_TS), c)
        >>> ts.tolist(), inf.tolist(), att.tolist(), c.line_no
        ([5, 5, 5], [False, True, True], [-1, 1, 1], 1)
    """
    n = pkind.shape[0]
    out_ts = np.empty(n, dtype=np.int64)
    inferred = np.empty(n, dtype=np.bool_)
    attached = np.empty(n, dtype=np.int64)
    if n:
        carry.line_no, carry.ts = _infer(pkind, line_no, ts_utc, collector, out_ts, inferred, attached,
                                         carry.line_no, carry.ts)
    return out_ts, inferred, attached


_DAY = 24 * _HOUR


@numba.njit(cache=True, nogil=True)
def _chain_days(is_tod: np.ndarray, anchor: np.ndarray, us: np.ndarray, out: np.ndarray, day: int,
                last_tod: int) -> tuple[int, int]:
    """Dates for time-of-day-only lines from the dated lines around them (sequential, file order).

    ``anchor``: local wall time of a line whose date is known (a dated bracket, or a time-of-day
    line resolved by its collector time), NO_TS otherwise. A time of day more than 12 h earlier
    than the previous one is on the next day. Lines before the first anchor are dated backwards
    from it (a time of day more than 12 h later than the next one is on the day before).
    """
    half = 12 * 3_600_000_000
    dd = 24 * 3_600_000_000
    n = is_tod.shape[0]
    first = -1
    for i in range(n):
        if anchor[i] != NO_TS:
            day = anchor[i] // dd
            last_tod = anchor[i] - day * dd
            if first < 0:
                first = i
            out[i] = anchor[i]
        elif is_tod[i] and us[i] != NO_TS:
            if day == NO_TS:
                out[i] = NO_TS
                continue
            if us[i] < last_tod - half:
                day += 1
            out[i] = day * dd + us[i]
            last_tod = us[i]
        else:
            out[i] = NO_TS
    # backwards from the first anchor (when nothing before this block gave a date)
    if first > 0:
        bday = anchor[first] // dd
        nxt = anchor[first] - bday * dd
        for i in range(first - 1, -1, -1):
            if is_tod[i] and us[i] != NO_TS and out[i] == NO_TS:
                if us[i] > nxt + half:
                    bday -= 1
                out[i] = bday * dd + us[i]
                nxt = us[i]
    return day, last_tod


@dataclass
class DayCarry:
    """The local date reached so far in a file (for time-of-day-only lines across blocks)."""

    day: int = NO_TS
    last_tod: int = 0
    #: a date from the file name (days since the epoch), the last resort
    file_day: int | None = None
    unresolved: int = 0


def date_time_only(us: np.ndarray, is_tod: np.ndarray, dated: np.ndarray, collector: np.ndarray,
                   to_utc: LocalToUtc, carry: DayCarry) -> np.ndarray:
    """Local wall times (µs) for every line: dated lines as they are, time-of-day-only lines dated.

    The date comes from the line's collector time (the candidate day whose UTC time is nearest to
    it), else from the dated lines around it, else from the file name; else the time stays
    unknown (NO_TS, counted in ``carry.unresolved``): a date is never invented.

    Example:
        >>> conv = LocalToUtc("UTC")
        >>> day = 20_000 * 86_400_000_000
        >>> us = np.array([day + 3_600_000_000, 82_800_000_000, 600_000_000])
        >>> out = date_time_only(us, np.array([False, True, True]), np.array([True, False, False]),
        ...                      np.full(3, NO_TS), conv, DayCarry())
        >>> ((out - day) // 3_600_000_000).tolist()
        [1, 23, 24]
    """
    anchor = np.where(dated, us, NO_TS)
    coll = is_tod & (collector != NO_TS) & (us != NO_TS)
    if coll.any():
        idx = np.flatnonzero(coll)
        base = collector[idx] // _DAY
        best = np.full(idx.size, NO_TS, dtype=np.int64)
        gap = np.full(idx.size, np.iinfo(np.int64).max, dtype=np.int64)
        for d in (-1, 0, 1):
            local = (base + d) * _DAY + us[idx]
            dist = np.abs(to_utc(local) - collector[idx])
            better = dist < gap
            best = np.where(better, local, best)
            gap = np.where(better, dist, gap)
        anchor[idx] = best
    if carry.day == NO_TS and carry.file_day is not None and not (anchor != NO_TS).any():
        carry.day = carry.file_day
    out = np.empty(us.shape[0], dtype=np.int64)
    if us.shape[0]:
        carry.day, carry.last_tod = _chain_days(is_tod, anchor, us, out, carry.day, carry.last_tod)
    res = np.where(is_tod, out, us)
    carry.unresolved += int(np.count_nonzero(is_tod & (res == NO_TS) & (us != NO_TS)))
    return res
