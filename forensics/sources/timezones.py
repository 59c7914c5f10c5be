"""Time zones: the one validator of zone names, and local-to-UTC conversion that never guesses.

Engine logs print local wall-clock times without a zone; gateways may too. Turning them into UTC
needs the zone (``--engine-tz``) and care where the zone changes its offset inside the window:

* a **spring gap**: local times that never existed (Europe/Berlin 2026-03-29 02:00-03:00) are
  flagged ``GAP``;
* an **autumn hour that repeats** (Europe/Berlin 2026-10-25: 02:00-03:00 local happens twice,
  from 00:00 to 02:00 UTC) is resolved by the collector's UTC time when a wrapper gave one, else by
  the order of the lines (the clock going back marks the second pass); what neither resolves is
  flagged ``AMBIGUOUS`` and its time left unknown, never guessed.

Where a collector gave UTC beside the engine's local time, :func:`estimate_offset` measures the
offset a file's engine clock actually ran at, :func:`offset_warning` compares it with the zone
assumed, and :func:`auto_offsets` (``--engine-tz auto``) derives it per line.

Example:
    >>> check_tz("asia/singapore"), check_tz("utc"), check_tz("+0800")
    ('Asia/Singapore', 'UTC', 'UTC+08:00')
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from dataclasses import dataclass

import numpy as np

from forensics.errors import ParameterError

#: ``to_utc`` flags, one per value.
OK, GAP, AMBIGUOUS, BY_COLLECTOR, BY_ORDER = 0, 1, 2, 3, 4
FLAG_NAMES = {OK: "ok", GAP: "nonexistent local time (spring gap)",
              AMBIGUOUS: "repeated local time not resolved", BY_COLLECTOR: "repeated hour: collector time",
              BY_ORDER: "repeated hour: line order"}

#: Value of an unknown time (same as ``lines.NO_TIME``).
NO_TIME = np.iinfo(np.int64).min

_US = 1_000_000
_HOUR_US = 3600 * _US
#: Offsets are rounded to this step when measured from a collector (every zone in use today is a
#: multiple of 15 minutes).
STEP_S = 900

_FIXED = re.compile(r"^(?:UTC|GMT)?\s*([+-])(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)
_HINT = "use an IANA name such as UTC, Europe/Berlin or Asia/Singapore, or a fixed offset such as +08:00"


@functools.lru_cache(maxsize=1)
def _zone_names() -> dict[str, str]:
    return {name.lower(): name for name in zoneinfo.available_timezones()}


@functools.lru_cache(maxsize=1)
def _icu_names() -> frozenset[str]:
    import duckdb

    con = duckdb.connect()
    try:
        return frozenset(str(r[0]).lower() for r in con.execute("SELECT name FROM pg_timezone_names()").fetchall())
    finally:
        con.close()


def fixed_offset_s(tz: str) -> int | None:
    """Seconds east of UTC of a fixed-offset zone name (``UTC+08:00``, ``+0530``), else None.

    Example:
        >>> fixed_offset_s("UTC-03:30"), fixed_offset_s("UTC"), fixed_offset_s("Asia/Singapore")
        (-12600, 0, None)
    """
    if tz.upper() in ("UTC", "Z", "GMT", "ETC/UTC", "ETC/GMT", "ZULU", "UCT", "UNIVERSAL"):
        return 0
    m = _FIXED.match(tz.strip())
    if not m:
        return None
    h, mins = int(m.group(2)), int(m.group(3) or 0)
    if h > 14 or mins >= 60:
        return None
    return (1 if m.group(1) == "+" else -1) * (h * 3600 + mins * 60)


def format_offset(seconds: int) -> str:
    """``+08:00`` for 28800.

    Example:
        >>> format_offset(-12600), format_offset(0)
        ('-03:30', '+00:00')
    """
    sign = "-" if seconds < 0 else "+"
    s = abs(int(seconds))
    return f"{sign}{s // 3600:02d}:{s % 3600 // 60:02d}"


def check_tz(tz: str) -> str:
    """The canonical name of a zone, or a one-line error: the only zone validator of the toolkit.

    Accepts IANA names in any case (``asia/singapore`` -> ``Asia/Singapore``), ``UTC``, and fixed
    offsets (``+08:00``, ``-0530``, ``UTC+8`` -> ``UTC+08:00``, a name DuckDB's ICU also reads).
    Abbreviations that are not zone names (``SGT``, ``PST``) are refused: many are ambiguous.

    Example:
        >>> check_tz("Mars/Olympus")
        Traceback (most recent call last):
        ...
        forensics.errors.ParameterError: unknown time zone 'Mars/Olympus' (use an IANA name such as UTC, Europe/Berlin or Asia/Singapore, or a fixed offset such as +08:00)
    """
    if not isinstance(tz, str) or not tz.strip() or "'" in tz or "\\" in tz:
        raise ParameterError(f"invalid time zone {tz!r}", hint=_HINT)
    name = tz.strip()
    off = fixed_offset_s(name)
    if off == 0:
        return "UTC"
    if off is not None:
        return "UTC" + format_offset(off)
    canon = _zone_names().get(name.lower())
    if canon is None or canon.lower() not in _icu_names():
        raise ParameterError(f"unknown time zone {tz!r}", hint=_HINT)
    return canon


# -- local -> UTC -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Converted:
    """Result of :func:`to_utc`: UTC microseconds (``NO_TIME`` where unknown) and a flag per value."""

    utc_us: np.ndarray
    flags: np.ndarray

    def count(self, flag: int) -> int:
        """How many values carry ``flag``."""
        return int(np.count_nonzero(self.flags == flag))


def _offsets_at(tz: str, utc_us: np.ndarray) -> np.ndarray:
    """The zone's UTC offset (seconds) at each UTC instant, vectorised through pandas."""
    import pandas as pd

    off = fixed_offset_s(tz)
    if off is not None:
        return np.full(utc_us.shape, off, dtype=np.int64)
    idx = pd.DatetimeIndex(utc_us.astype("datetime64[us]"), tz="UTC").tz_convert(tz)
    local = idx.tz_localize(None).asi8  # wall-clock in the unit of the index
    unit = {"ns": 1_000, "us": 1, "ms": 1e-3, "s": 1e-6}[idx.unit]
    return np.asarray(np.round((local / unit - utc_us) / _US), dtype=np.int64)


def to_utc(
    local_us: np.ndarray, tz: str, *, collector_us: np.ndarray | None = None,
) -> Converted:
    """Naive local microseconds (in file order) to UTC in zone ``tz``, DST gaps and repeats flagged.

    ``local_us`` uses ``NO_TIME`` for missing values. In the repeated autumn hour a value is placed
    by ``collector_us`` (the candidate within 30 minutes of the collector's UTC time), else by the
    order of the values: after the local clock went back by 30 minutes or more inside that hour,
    values are the second pass. Anything still open is ``AMBIGUOUS`` with time ``NO_TIME``.

    Example:
        >>> import datetime as dt
        >>> us = lambda *a: int(dt.datetime(*a, tzinfo=dt.UTC).timestamp()) * 1_000_000
        >>> loc = np.array([us(2026, 10, 25, 2, 30), us(2026, 10, 25, 2, 50), us(2026, 10, 25, 2, 10),
        ...                 us(2026, 3, 29, 2, 30), us(2026, 7, 1, 12, 0)])
        >>> r = to_utc(loc, "Europe/Berlin")
        >>> [dt.datetime.fromtimestamp(v / 1e6, dt.UTC).strftime("%m-%d %H:%M") for v in r.utc_us[[0, 1, 2, 4]]]
        ['10-25 00:30', '10-25 00:50', '10-25 01:10', '07-01 10:00']
        >>> r.flags.tolist(), bool(r.utc_us[3] == NO_TIME)
        ([4, 4, 4, 1, 0], True)
    """
    local_us = np.asarray(local_us, dtype=np.int64)
    n = int(local_us.shape[0])
    flags = np.zeros(n, dtype=np.int8)
    known = local_us != NO_TIME
    off = fixed_offset_s(tz)
    if off is not None or n == 0:
        out = np.where(known, local_us - (off or 0) * _US, NO_TIME)
        return Converted(out, flags)
    # Two candidates per value: local minus the offset in force one day before and after, each
    # checked by converting back. A value both candidates reproduce is ambiguous; a value neither
    # reproduces is in a gap. Exact for every zone whose offsets change at most once a day.
    lo = np.where(known, local_us, 0)
    o_before = _offsets_at(tz, lo - 86_400 * _US)
    o_after = _offsets_at(tz, lo + 86_400 * _US)
    c1 = lo - o_before * _US  # the earlier reading's candidate: the offset before the change
    c2 = lo - o_after * _US
    ok1 = _offsets_at(tz, c1) == o_before
    ok2 = _offsets_at(tz, c2) == o_after
    same = o_before == o_after
    utc = np.where(ok1, c1, c2)
    amb = known & ~same & ok1 & ok2
    gap = known & ~ok1 & ~ok2
    # also a plain day where the single candidate fails (cannot happen with a sane zone) is a gap
    flags[gap] = GAP
    utc = np.where(gap | ~known, NO_TIME, utc)
    if amb.any():
        # candidates: first pass = the earlier UTC instant (the larger offset applies)
        first = np.minimum(c1, c2)
        second = np.maximum(c1, c2)
        res = np.full(n, NO_TIME, dtype=np.int64)
        flag = np.full(n, AMBIGUOUS, dtype=np.int8)
        if collector_us is not None:
            col = np.asarray(collector_us, dtype=np.int64)
            have = amb & (col != NO_TIME)
            d1, d2 = np.abs(first - col), np.abs(second - col)
            pick1 = have & (d1 <= 1800 * _US) & (d1 < d2)
            pick2 = have & (d2 <= 1800 * _US) & (d2 < d1)
            res = np.where(pick1, first, np.where(pick2, second, res))
            flag = np.where(pick1 | pick2, BY_COLLECTOR, flag).astype(np.int8)
        open_ = amb & (flag == AMBIGUOUS)
        if open_.any():
            _by_order(local_us, open_, first, second, res, flag)
        utc = np.where(amb, res, utc)
        flags[amb] = flag[amb]
    return Converted(np.asarray(utc, dtype=np.int64), flags)


def _by_order(local_us: np.ndarray, open_: np.ndarray, first: np.ndarray, second: np.ndarray,
              res: np.ndarray, flag: np.ndarray) -> None:
    """Resolve repeated-hour values by the line order (in place): the clock going back = second pass."""
    idx = np.flatnonzero(open_)
    # one group per transition: the repeated hours of different days never mix
    day = first[idx] // (86_400 * _US)
    for d in np.unique(day):
        g = idx[day == d]
        t = local_us[g]
        runmax = np.maximum.accumulate(t)
        back = np.flatnonzero(t <= runmax - 1800 * _US)  # back by 30 minutes or more
        if not back.size:
            continue  # no second pass seen: cannot tell which pass these are
        k = int(back[0])
        res[g[:k]] = first[g[:k]]
        res[g[k:]] = second[g[k:]]
        flag[g] = BY_ORDER


def has_transition(tz: str, lo_us: int, hi_us: int) -> bool:
    """True when zone ``tz`` changes its UTC offset within a day of ``[lo_us, hi_us]`` (any instants).

    Example:
        >>> import datetime as dt
        >>> at = lambda *a: int(dt.datetime(*a, tzinfo=dt.UTC).timestamp()) * 1_000_000
        >>> has_transition("Europe/Berlin", at(2026, 10, 24), at(2026, 10, 26)), has_transition("Asia/Singapore", at(2026, 1, 1), at(2026, 12, 1))
        (True, False)
    """
    if fixed_offset_s(tz) is not None:
        return False
    step = 6 * _HOUR_US
    lo = int(lo_us) - 86_400 * _US
    hi = int(hi_us) + 86_400 * _US
    points = np.arange(lo, hi + step, step, dtype=np.int64)
    offs = _offsets_at(tz, points)
    return bool((offs != offs[0]).any())


# -- measuring a file's offset from its collector times -------------------------------------------


@dataclass(frozen=True)
class OffsetEstimate:
    """The offset (seconds east of UTC) a file's engine clock ran at, measured against a collector.

    Example:
        >>> e = estimate_offset(np.array([28800, 28801]) * 1_000_000, np.array([0, 1]) * 1_000_000)
        >>> e.offset_s, e.share, e.label
        (28800, 1.0, '+08:00')
    """

    offset_s: int | None
    #: share of the compared lines that showed this offset
    share: float
    #: lines compared
    n: int
    #: every offset seen, with its line count, most frequent first
    seen: tuple[tuple[int, int], ...] = ()

    @property
    def label(self) -> str:
        """``+08:00``, or ``unknown``."""
        return "unknown" if self.offset_s is None else format_offset(self.offset_s)

    def describe(self) -> str:
        """One line: the offsets seen and their shares."""
        if not self.n:
            return "no line with both an engine time and a collector time"
        return ", ".join(f"{format_offset(o)} ({c} lines)" for o, c in self.seen)


def line_offsets(local_us: np.ndarray, collector_us: np.ndarray) -> np.ndarray:
    """Per line: local minus collector time, rounded to 15 minutes (seconds); 0 where unknown.

    Example:
        >>> line_offsets(np.array([7200_400_000]), np.array([0])).tolist()
        [7200]
    """
    d = (np.asarray(local_us, dtype=np.int64) - np.asarray(collector_us, dtype=np.int64)) / (STEP_S * _US)
    return np.asarray(np.round(d), dtype=np.int64) * STEP_S


def estimate_offset(local_us: np.ndarray, collector_us: np.ndarray) -> OffsetEstimate:
    """Measure the offset from lines that have both times (``NO_TIME`` elsewhere).

    Example:
        >>> estimate_offset(np.array([], dtype=np.int64), np.array([], dtype=np.int64)).label
        'unknown'
    """
    local_us = np.asarray(local_us, dtype=np.int64)
    collector_us = np.asarray(collector_us, dtype=np.int64)
    both = (local_us != NO_TIME) & (collector_us != NO_TIME)
    if not both.any():
        return OffsetEstimate(None, 0.0, 0)
    o = line_offsets(local_us[both], collector_us[both])
    vals, counts = np.unique(o, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    seen = tuple((int(vals[i]), int(counts[i])) for i in order)
    n = int(both.sum())
    return OffsetEstimate(seen[0][0], seen[0][1] / n, n, seen)


def assumed_offsets(tz: str, utc_us: np.ndarray) -> np.ndarray:
    """The offset (seconds) zone ``tz`` has at each UTC instant.

    Example:
        >>> assumed_offsets("Asia/Singapore", np.array([0])).tolist()
        [27000]
    """
    return _offsets_at(tz, np.asarray(utc_us, dtype=np.int64))


def offset_warning(
    file: str, tz: str, local_us: np.ndarray, collector_us: np.ndarray, *, tolerance_s: int = 60,
) -> str | None:
    """A warning when the engine clock of ``file`` disagrees with zone ``tz`` by more than a minute.

    Compares, line by line, the engine's local time minus the collector's UTC time with the offset
    ``tz`` has at that instant; warns when most compared lines disagree. The message names the file,
    the offset found and the offset assumed.

    Example:
        >>> h, t = 3600 * 1_000_000, 1_787_800_200_000_000  # 2026-08-27 03:10 UTC
        >>> print(offset_warning("p0.log", "UTC", np.array([t + 8 * h]), np.array([t])))
        p0.log: engine timestamps run at +08:00 from the collector's UTC times (1 lines compared), but --engine-tz UTC assumes +00:00; the engine times of this file are off by 8.0 h (use --engine-tz auto or the right zone)
        >>> offset_warning("p0.log", "Asia/Singapore", np.array([t + 8 * h]), np.array([t])) is None
        True
    """
    local_us = np.asarray(local_us, dtype=np.int64)
    collector_us = np.asarray(collector_us, dtype=np.int64)
    both = (local_us != NO_TIME) & (collector_us != NO_TIME)
    if not both.any():
        return None
    loc, col = local_us[both], collector_us[both]
    found = line_offsets(loc, col)
    assumed = assumed_offsets(tz, col)
    bad = np.abs(found - assumed) > tolerance_s
    if bad.mean() <= 0.5:
        return None
    est = estimate_offset(loc, col)
    vals, counts = np.unique(assumed[bad], return_counts=True)
    assumed_s = int(vals[np.argmax(counts)])
    diff_h = ((est.offset_s or 0) - assumed_s) / 3600
    return (f"{file}: engine timestamps run at {est.label} from the collector's UTC times "
            f"({est.n} lines compared), but --engine-tz {tz} assumes {format_offset(assumed_s)}; "
            f"the engine times of this file are off by {diff_h:.1f} h (use --engine-tz auto or the right zone)")


def auto_offsets(local_us: np.ndarray, collector_us: np.ndarray, *, chunk: int = 1000) -> tuple[np.ndarray, OffsetEstimate]:
    """``--engine-tz auto``: the offset (seconds) to apply to each line, from the collector times.

    Lines in file order. Each run of ``chunk`` lines takes its most frequent measured offset (a
    line whose collector time lagged, say a buffered stdout line, cannot move it); where two
    neighbouring runs differ, or a run holds lines of two offsets one DST step apart (a DST change
    inside the file), lines take their own measured offset when it is one of them, and the other
    lines of that run the offset of the line before them. Elsewhere lines without a collector time
    take their run's offset, or the file's. Returns the offsets and the file's estimate (unknown when nothing was comparable).

    Example:
        >>> h = 3600 * 1_000_000
        >>> offs, est = auto_offsets(np.array([8 * h, 8 * h + 5, NO_TIME]), np.array([0, 5, NO_TIME]))
        >>> offs.tolist(), est.label
        ([28800, 28800, 28800], '+08:00')
    """
    local_us = np.asarray(local_us, dtype=np.int64)
    collector_us = np.asarray(collector_us, dtype=np.int64)
    n = int(local_us.shape[0])
    est = estimate_offset(local_us, collector_us)
    out = np.full(n, est.offset_s or 0, dtype=np.int64)
    if est.offset_s is None or n == 0:
        return out, est
    both = (local_us != NO_TIME) & (collector_us != NO_TIME)
    per = np.where(both, line_offsets(np.where(both, local_us, 0), np.where(both, collector_us, 0)), 0)
    n_chunks = (n + chunk - 1) // chunk
    modes = np.full(n_chunks, est.offset_s, dtype=np.int64)
    for c in range(n_chunks):
        sl = slice(c * chunk, min(n, (c + 1) * chunk))
        v = per[sl][both[sl]]
        if v.size:
            vals, counts = np.unique(v, return_counts=True)
            modes[c] = vals[np.argmax(counts)]
    out = np.repeat(modes, chunk)[:n]
    # offsets the file really runs at: seen on at least 2 lines and 1 % of the comparable ones (a
    # lagging line's odd offset is not one of them)
    vals, counts = np.unique(per[both], return_counts=True)
    real = {int(v) for v, k in zip(vals.tolist(), counts.tolist(), strict=True)
            if k >= max(2, 0.01 * int(both.sum()))}
    for c in range(n_chunks):
        neighbours = {int(modes[c])}
        if c > 0:
            neighbours.add(int(modes[c - 1]))
        if c + 1 < n_chunks:
            neighbours.add(int(modes[c + 1]))
        sl = slice(c * chunk, min(n, (c + 1) * chunk))
        # a change inside the run itself (a small file is one run): its own real offsets count too
        # when they are one DST step (30 or 60 minutes) from the run's
        here, k = np.unique(per[sl][both[sl]], return_counts=True)
        neighbours |= {int(o) for o, m in zip(here.tolist(), k.tolist(), strict=True)
                       if o in real and m >= 2 and abs(int(o) - int(modes[c])) in (1800, 3600)}
        if len(neighbours) > 1:
            mine = per[sl]
            take = both[sl] & np.isin(mine, list(neighbours))
            if take.any():
                # the other lines (a lagging one, one without collector time) take the offset of the
                # nearest line before them that showed one (after them at the run's start)
                pos = np.where(take, np.arange(take.size), -1)
                np.maximum.accumulate(pos, out=pos)
                first = int(np.flatnonzero(take)[0])
                pos[pos < 0] = first
                out[sl] = mine[pos]
    return out, est
