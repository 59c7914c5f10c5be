"""Vectorised parsing of the timestamps collectors write (RFC 3339 / ISO 8601, epoch numbers).

Every function works on a whole batch at once: ``buf`` is the batch's ``uint8`` buffer and
``pos`` the byte position where each line's timestamp starts. RFC 3339 is parsed by one compiled
loop (:func:`.kernels.rfc3339`); the others gather a fixed window of bytes per line into a matrix
and read every field with array arithmetic: no Python loop per line.

Example:
    >>> import numpy as np
    >>> buf = np.frombuffer(b"2026-08-27T03:10:00.123456789Z x", dtype=np.uint8)
    >>> r = parse_rfc3339(buf, np.array([0]))
    >>> int(r.us[0]), int(r.end[0]), bool(r.zoned[0])
    (1787800200123456, 30, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_ZERO = 48
#: Microseconds per unit.
_US_PER_S = 1_000_000


def window(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """``(len(pos), width)`` bytes of ``buf`` from each position; bytes outside the buffer read as 0.

    Rows are copied from a strided view of the buffer (one contiguous row per position), which
    is several times cheaper than an index per byte; positions within ``width`` bytes of either
    end take the careful path.

    Example:
        >>> window(np.frombuffer(b"abc", dtype=np.uint8), np.array([1, -1]), 3).tolist()
        [[98, 99, 0], [0, 97, 98]]
    """
    pos = pos.astype(np.int64, copy=False)
    n = int(pos.shape[0])
    size = int(buf.shape[0])
    if n == 0:
        return np.zeros((0, width), dtype=np.uint8)
    safe = (pos >= 0) & (pos <= size - width)
    if size >= width and bool(safe.all()):
        out: np.ndarray = np.lib.stride_tricks.sliding_window_view(buf, width)[pos]
        return out
    out = np.zeros((n, width), dtype=np.uint8)
    if size >= width and safe.any():
        out[safe] = np.lib.stride_tricks.sliding_window_view(buf, width)[pos[safe]]
    rest = np.flatnonzero(~safe)
    if rest.size and size:
        idx = pos[rest, None] + np.arange(width, dtype=np.int64)[None, :]
        inside = (idx >= 0) & (idx < size)
        vals = buf[np.clip(idx, 0, size - 1)]
        vals[~inside] = 0
        out[rest] = vals
    return out


def days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's algorithm), vectorised.

    Example:
        >>> days_from_civil(np.array([1970, 2000]), np.array([1, 3]), np.array([1, 1])).tolist()
        [0, 11017]
    """
    y = y.astype(np.int64) - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    mp = (m.astype(np.int64) + 9) % 12
    doy = (153 * mp + 2) // 5 + d.astype(np.int64) - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return np.asarray(era * 146097 + doe - 719468, dtype=np.int64)


@dataclass(frozen=True)
class Parsed:
    """Result of a vectorised timestamp parse, one entry per input position.

    ``us`` is microseconds since the epoch: UTC where ``zoned`` (the offset applied), else the
    wall-clock value as written (a naive local time). ``end`` is the position just after the
    timestamp; ``ok`` says whether a timestamp was found there at all.
    """

    us: np.ndarray
    end: np.ndarray
    ok: np.ndarray
    zoned: np.ndarray
    #: offset found in the text, in seconds east of UTC (0 where none or ``Z``)
    offset_s: np.ndarray


def _two(d: np.ndarray, i: int) -> np.ndarray:
    return np.asarray(d[:, i] * 10 + d[:, i + 1], dtype=np.int32)


def parse_rfc3339(buf: np.ndarray, pos: np.ndarray, *, date_sep_t_only: bool = False) -> Parsed:
    """Parse ``YYYY-MM-DD[T ]HH:MM:SS[.fraction][Z|±HH:MM|±HHMM]`` at each position.

    Up to 9 fraction digits (nanoseconds) are read; the value is kept to the microsecond
    (truncated). ``date_sep_t_only`` refuses a space between date and time (CRI, kubectl).

    Example:
        >>> buf = np.frombuffer(b"2026-10-25T02:30:00+02:00|2026-10-25 02:30:00.5|x", dtype=np.uint8)
        >>> r = parse_rfc3339(buf, np.array([0, 26, 48]))
        >>> r.ok.tolist(), r.zoned.tolist(), r.offset_s.tolist(), r.end.tolist()
        ([True, True, False], [True, False, False], [7200, 0, 0], [25, 47, 48])
    """
    from forensics.sources.collect.kernels import rfc3339

    us, end, ok, zoned, offset_s = rfc3339(buf, pos, date_sep_t_only)
    return Parsed(us=us, end=end, ok=ok, zoned=zoned, offset_s=offset_s)


_MONTHS = {m: i + 1 for i, m in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"])}
_MONTH_KEY = np.zeros(1 << 15, dtype=np.int8)
for _name, _num in _MONTHS.items():
    _b = _name.encode()
    _MONTH_KEY[((_b[0] & 31) << 10) | ((_b[1] & 31) << 5) | (_b[2] & 31)] = _num


def parse_bsd(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Parse RFC 3164 / ``journalctl -o short`` times ``Mmm dd HH:MM:SS`` (no year, no zone).

    Returns ``(month, seconds into the year without the month/day part's year, end, ok)``: the
    caller supplies the year (see :func:`bsd_to_us`). ``dd`` may be space-padded (``Aug  7``).

    Example:
        >>> buf = np.frombuffer(b"Aug  7 03:10:05 host", dtype=np.uint8)
        >>> m, day_s, end, ok = parse_bsd(buf, np.array([0]))
        >>> int(m[0]), int(day_s[0]), int(end[0]), bool(ok[0])
        (8, 616205, 15, True)
    """
    w = window(buf, pos.astype(np.int64), 15)
    key = ((w[:, 0].astype(np.int64) & 31) << 10) | ((w[:, 1].astype(np.int64) & 31) << 5) | (w[:, 2] & 31)
    month = _MONTH_KEY[key].astype(np.int64)
    d = w.astype(np.int16) - _ZERO
    dig = (d >= 0) & (d <= 9)
    day_hi = np.where(w[:, 4] == ord(" "), 0, d[:, 4])
    ok = (
        (month > 0) & (w[:, 3] == ord(" ")) & (dig[:, 4] | (w[:, 4] == ord(" "))) & dig[:, 5]
        & (w[:, 6] == ord(" ")) & dig[:, [7, 8, 10, 11, 13, 14]].all(axis=1)
        & (w[:, 9] == ord(":")) & (w[:, 12] == ord(":"))
    )
    day = day_hi.astype(np.int64) * 10 + d[:, 5]
    hh, mi, ss = _two(d, 7), _two(d, 10), _two(d, 13)
    ok &= (day >= 1) & (day <= 31) & (hh <= 23) & (mi <= 59) & (ss <= 60)
    secs = (day * 24 + hh) * 3600 + mi * 60 + np.minimum(ss, 59)
    return month, np.where(ok, secs, 0), pos + 15, ok


def bsd_to_us(month: np.ndarray, day_s: np.ndarray, year: np.ndarray) -> np.ndarray:
    """Naive local microseconds of a BSD time (:func:`parse_bsd`) in the given year(s).

    Example:
        >>> int(bsd_to_us(np.array([1]), np.array([86400]), np.array([1970]))[0])
        0
    """
    days = days_from_civil(year.astype(np.int64), np.clip(month, 1, 12), np.ones_like(month))
    return np.asarray((days * 86400 + day_s - 86400) * _US_PER_S, dtype=np.int64)


def parse_uint(buf: np.ndarray, pos: np.ndarray, max_digits: int = 19) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An unsigned decimal integer at each position: ``(value, end, ok)``.

    Example:
        >>> v, e, ok = parse_uint(np.frombuffer(b"1787800200123 x", dtype=np.uint8), np.array([0, 14]))
        >>> v.tolist(), e.tolist(), ok.tolist()
        ([1787800200123, 0], [13, 14], [True, False])
    """
    w = window(buf, pos.astype(np.int64), max_digits)
    d = w.astype(np.int64) - _ZERO
    run = np.cumprod((d >= 0) & (d <= 9), axis=1).astype(bool)
    nd = run.sum(axis=1)
    val = np.zeros(int(pos.shape[0]), dtype=np.int64)
    for k in range(max_digits):
        active = run[:, k]
        val = np.where(active, val * 10 + d[:, k], val)
    return val, pos + nd, nd > 0
