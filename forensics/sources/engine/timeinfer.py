"""Times of the lines: engine local time to UTC, and the time of lines that carry none.

* Engine timestamps are the node's local wall time; ``--engine-tz`` (any IANA zone) says which.
  The offset of each distinct local minute is taken from DuckDB's ICU conversion
  (``timezone('UTC', timezone(tz, t))``, DST-correct) and applied to every line of that minute.
* Router lines are UTC by themselves; collector columns are UTC.
* A line with no engine/router prefix takes its collector time, else the time of the nearest
  earlier prefixed line of the file (``ts_inferred``), and points at that line
  (``attached_to_line``): tracebacks, wrapped lines, un-prefixed request logs.

Example:
    >>> import duckdb
    >>> us = np.array([1_788_000_000_000_000, NO_TS])
    >>> (local_to_utc(duckdb.connect(), "Asia/Singapore", us) - us).tolist()[0] // 3_600_000_000
    -8
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numba
import numpy as np
import pyarrow as pa

from forensics.sources.engine.prefix import NO_TS, P_NONE

_MINUTE = 60_000_000
_HOUR = 60 * _MINUTE


class LocalToUtc:
    """Local wall times (µs) of one zone to UTC, with the offsets of the hours seen so far cached.

    The offset of an hour is DuckDB's for its first and its last minute; when they differ (a DST
    change inside that hour) every minute of it is looked up.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, tz: str) -> None:
        self.con = con
        self.tz = tz
        self.hours: dict[int, int | np.ndarray] = {}

    def _utc_of(self, minute_starts: np.ndarray) -> np.ndarray:
        tbl = pa.table({"t": pa.array(minute_starts, type=pa.timestamp("us"))})
        self.con.register("_eng_minutes", tbl)
        try:
            res = self.con.execute("SELECT epoch_us(timezone('UTC', timezone($tz, t))) FROM _eng_minutes",
                                   {"tz": self.tz}).fetchnumpy()
        finally:
            self.con.unregister("_eng_minutes")
        return np.asarray(next(iter(res.values())), dtype=np.int64)

    def __call__(self, us: np.ndarray) -> np.ndarray:
        if self.tz == "UTC" or us.size == 0:
            return us
        valid = us != NO_TS
        if not valid.any():
            return us
        v = us[valid]
        hours = v // _HOUR
        lo, hi = int(hours.min()), int(hours.max())
        if hi - lo < 4096:
            # lines come in time order: the hours of a block are a short range (no sort needed)
            present = np.zeros(hi - lo + 1, dtype=np.bool_)
            present[hours - lo] = True
            keys = np.flatnonzero(present).astype(np.int64) + lo
            pos = np.cumsum(present) - 1
            idx = pos[hours - lo]
        else:
            keys, idx = np.unique(hours, return_inverse=True)
        missing = [int(h) for h in keys.tolist() if int(h) not in self.hours]
        if missing:
            # fetch the two days around the first miss too: one query serves many blocks
            around = range(missing[0] - 24, missing[0] + 49)
            missing = sorted(set(missing) | {h for h in around if h not in self.hours})
            m = np.array(missing, dtype=np.int64) * _HOUR
            both = np.concatenate([m, m + 59 * _MINUTE])
            conv = self._utc_of(both) - both
            first, last = conv[: m.size], conv[m.size :]
            for h, a, b in zip(missing, first.tolist(), last.tolist(), strict=True):
                if a == b:
                    self.hours[h] = a
                else:
                    starts = h * _HOUR + np.arange(60, dtype=np.int64) * _MINUTE
                    self.hours[h] = self._utc_of(starts) - starts
        offs = np.empty(keys.shape[0], dtype=np.int64)
        mixed = []
        for k, h in enumerate(keys.tolist()):
            o = self.hours[int(h)]
            if isinstance(o, np.ndarray):
                mixed.append(k)
                offs[k] = 0
            else:
                offs[k] = o
        add = offs[idx]
        for k in mixed:
            sel = idx == k
            per_min = self.hours[int(keys[k])]
            assert isinstance(per_min, np.ndarray)
            add[sel] = per_min[(v[sel] % _HOUR) // _MINUTE]
        out = us.copy()
        out[valid] = v + add
        return out


def local_to_utc(con: duckdb.DuckDBPyConnection, tz: str, us: np.ndarray) -> np.ndarray:
    """Local wall times (µs, NO_TS for none) in zone ``tz`` as UTC µs (see :class:`LocalToUtc`)."""
    return LocalToUtc(con, tz)(us)


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
        >>> import duckdb
        >>> conv = LocalToUtc(duckdb.connect(), "UTC")
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
