"""Compiled (numba) passes of the collection wrappers: one loop over a batch's records each.

The array versions of these passes (numpy over whole batches) cost several operations per byte
and a temporary array per step; a compiled loop reads each byte once. Each kernel is a pure
function of the batch's bytes and record spans, compiled on first use and cached on disk.

Example:
    >>> import numpy as np
    >>> rec = b'{"log":"caf\\\\u00e9 \\\\"x\\\\"\\\\n","stream":"stderr","time":"2026-08-27T03:10:00.1Z"}'
    >>> buf = np.frombuffer(rec, dtype=np.uint8)
    >>> ok, starts, ends, ts, stream, nl, extra = docker_records(buf, np.array([0]), np.array([len(rec)]))
    >>> data = np.concatenate([buf, extra])
    >>> bool(ok[0]), data[starts[0]:ends[0]].tobytes().decode(), int(stream[0]), bool(nl[0])
    (True, 'café "x"', 2, True)
"""

from __future__ import annotations

import numba
import numpy as np

from forensics.sources.lines import read_only

_LOG_HEAD = np.frombuffer(b'{"log":"', dtype=np.uint8).copy()
_TIME_KEY = np.frombuffer(b',"time":"', dtype=np.uint8).copy()
_STREAM_OUT = np.frombuffer(b'","stream":"stdout"', dtype=np.uint8).copy()
_STREAM_ERR = np.frombuffer(b'","stream":"stderr"', dtype=np.uint8).copy()


@numba.njit(cache=True, nogil=True, inline="always")
def _matches(buf: np.ndarray, at: int, lit: np.ndarray) -> bool:
    if at < 0 or at + lit.size > buf.size:
        return False
    for k in range(lit.size):  # noqa: SIM110 (a loop numba compiles; no generator)
        if buf[at + k] != lit[k]:
            return False
    return True


@numba.njit(cache=True, nogil=True, inline="always")
def _hex4(buf: np.ndarray, at: int, end: int) -> int:
    """The value of 4 hex digits at ``at`` (before ``end``), or -1."""
    if at + 4 > end:
        return -1
    v = 0
    for k in range(4):
        c = buf[at + k]
        if 48 <= c <= 57:
            d = c - 48
        elif 97 <= c <= 102:
            d = c - 87
        elif 65 <= c <= 70:
            d = c - 55
        else:
            return -1
        v = (v << 4) | d
    return v


@numba.njit(cache=True, nogil=True, inline="always")
def escape_byte(e: int) -> int:
    """The byte a one-letter JSON escape ``\\e`` stands for (``n`` -> LF, ``"`` -> ``"``), or -1
    (``u`` and anything else)."""
    if e == 110:
        return 10
    if e == 116:
        return 9
    if e == 114:
        return 13
    if e == 98:
        return 8
    if e == 102:
        return 12
    if e == 34 or e == 92 or e == 47:
        return e
    return -1


@numba.njit(cache=True, nogil=True, inline="always")
def put_utf8(out: np.ndarray, o: int, cp: int) -> int:
    """Write code point ``cp`` as UTF-8 at ``out[o]``; the next free index (the one encoder of the
    compiled JSON passes)."""
    if cp < 0x80:
        out[o] = cp
        return o + 1
    if cp < 0x800:
        out[o] = 0xC0 | (cp >> 6)
        out[o + 1] = 0x80 | (cp & 0x3F)
        return o + 2
    if cp < 0x10000:
        out[o] = 0xE0 | (cp >> 12)
        out[o + 1] = 0x80 | ((cp >> 6) & 0x3F)
        out[o + 2] = 0x80 | (cp & 0x3F)
        return o + 3
    out[o] = 0xF0 | (cp >> 18)
    out[o + 1] = 0x80 | ((cp >> 12) & 0x3F)
    out[o + 2] = 0x80 | ((cp >> 6) & 0x3F)
    out[o + 3] = 0x80 | (cp & 0x3F)
    return o + 4


@numba.njit(cache=True, nogil=True)
def _unescape_into(buf: np.ndarray, vs: int, ve: int, out: np.ndarray, o: int) -> tuple[int, bool, bool]:
    """JSON-unescape ``buf[vs:ve]`` into ``out`` from ``o``: (new end, ok, ended with ``\\n``).

    A final ``\\n`` escape is not written (the flag says it was there); a lone surrogate or a bad
    escape is not ok (the JSON reader then decides).
    """
    i = vs
    while i < ve:
        # the run up to the next backslash is copied as it is (one slice copy)
        j = i
        while j < ve and buf[j] != 92:
            j += 1
        if j > i:
            # an element loop over two views compiles to a memcpy (a slice assignment does not)
            src = buf[i:j]
            dst = out[o:o + j - i]
            for k in range(j - i):
                dst[k] = src[k]
            o += j - i
            i = j
            if i >= ve:
                break
        if i + 1 >= ve:
            return o, False, False
        e = buf[i + 1]
        if e == 110 and i + 2 == ve:  # \n ends the text: the line end, not text
            return o, True, True
        if e == 117:  # u
            cp = _hex4(buf, i + 2, ve)
            if cp < 0:
                return o, False, False
            step = 6
            if 0xD800 <= cp <= 0xDBFF:
                # a surrogate pair: \\uD83D\\uDE00 -> one code point
                if i + 12 > ve or buf[i + 6] != 92 or buf[i + 7] != 117:
                    return o, False, False
                lo = _hex4(buf, i + 8, ve)
                if not (0xDC00 <= lo <= 0xDFFF):
                    return o, False, False
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                step = 12
            elif 0xDC00 <= cp <= 0xDFFF:
                return o, False, False
            o = put_utf8(out, o, cp)
            i += step
            continue
        b = escape_byte(e)
        if b < 0:
            return o, False, False
        out[o] = b
        o += 1
        i += 2
    return o, True, False


@numba.njit(cache=True, nogil=True)
def _docker_records(buf: np.ndarray, r_start: np.ndarray, r_end: np.ndarray, head: np.ndarray,
                    time_key: np.ndarray, s_out: np.ndarray, s_err: np.ndarray) -> tuple[
                        np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = r_start.size
    ok = np.zeros(n, dtype=np.bool_)
    starts = np.zeros(n, dtype=np.int64)
    ends = np.zeros(n, dtype=np.int64)
    ts = np.zeros(n, dtype=np.int64)
    stream = np.zeros(n, dtype=np.int8)
    nl = np.zeros(n, dtype=np.bool_)
    extra = np.empty(buf.size, dtype=np.uint8)  # unescaped texts are never longer than their records
    o = 0
    base = buf.size
    for r in range(n):
        s, e = r_start[r], r_end[r]
        if e - s < 60 or not _matches(buf, s, head) or buf[e - 2] != 34 or buf[e - 1] != 125:
            continue
        q = -1  # the last quote before the closing `"}`: the time value starts after it
        lo = max(s, e - 42)
        for p in range(e - 3, lo - 1, -1):
            if buf[p] == 34:
                q = p
                break
        if q < 0 or not _matches(buf, q - 8, time_key):
            continue
        k = q - 8  # `,"time":"`
        if _matches(buf, k - 19, s_out):
            stream[r] = 1
        elif _matches(buf, k - 19, s_err):
            stream[r] = 2
        else:
            continue
        vs, ve = s + 8, k - 19
        if ve <= vs:
            continue
        ts[r] = q + 1
        # clean text (no escape but a final `\n`) stays in place
        clean = True
        ends_nl = False
        i = vs
        while i < ve:
            if buf[i] == 92:
                if i + 2 == ve and buf[i + 1] == 110:
                    ends_nl = True
                else:
                    clean = False
                break
            i += 1
        if clean:
            ok[r] = True
            starts[r] = vs
            ends[r] = ve - 2 if ends_nl else ve
            nl[r] = ends_nl
            continue
        o2, good, ended = _unescape_into(buf, vs, ve, extra, o)
        if not good:
            continue
        ok[r] = True
        starts[r] = base + o
        ends[r] = base + o2
        nl[r] = ended
        o = o2
    return ok, starts, ends, ts, stream, nl, extra[:o]


def docker_records(buf: np.ndarray, r_start: np.ndarray, r_end: np.ndarray) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Docker json-file records as moby writes them (``{"log":...,"stream":...,"time":...}``), one pass.

    Returns per record: readable by this pass, text span (into ``buf`` followed by the returned
    ``extra`` bytes, where unescaped texts are written), the time value's position (parsed by the
    caller), stream code (1 stdout, 2 stderr), whether the text ended with ``\\n``; then ``extra``.
    A record of another shape or with a bad escape is not ok (left to the JSON reader).
    """
    return _docker_records(read_only(buf), r_start.astype(np.int64), r_end.astype(np.int64), _LOG_HEAD, _TIME_KEY,
                           _STREAM_OUT, _STREAM_ERR)


# The helpers return np.int64 on every path: a conditional expression mixing Python ints made
# numba's code about ten times slower.
@numba.njit(cache=True, nogil=True, inline="always")
def _at(buf: np.ndarray, i: int) -> int:
    if i >= 0 and i < buf.size:
        return np.int64(buf[i])  # type: ignore[return-value]
    return np.int64(0)  # type: ignore[return-value]


@numba.njit(cache=True, nogil=True, inline="always")
def _digit(buf: np.ndarray, i: int) -> int:
    """The digit at ``i``, or -1."""
    c = _at(buf, i) - 48
    if c < 0 or c > 9:
        return np.int64(-1)  # type: ignore[return-value]
    return c


@numba.njit(cache=True, nogil=True)
def _rfc3339(buf: np.ndarray, pos: np.ndarray, t_only: bool) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = pos.size
    size = buf.size
    us = np.zeros(n, dtype=np.int64)
    end = pos.copy()
    ok = np.zeros(n, dtype=np.bool_)
    zoned = np.zeros(n, dtype=np.bool_)
    offset = np.zeros(n, dtype=np.int64)
    v = np.zeros(19, dtype=np.int64)
    for r in range(n):
        p = pos[r]
        if p < 0 or p + 19 > size:
            continue
        good = True
        for k in range(19):
            c = np.int64(buf[p + k])
            v[k] = c - 48
            if k == 4 or k == 7:
                good &= bool(c == 45)
            elif k == 13 or k == 16:
                good &= bool(c == 58)
            elif k == 10:
                good &= bool((c == 84) | (c == 116) | ((c == 32) & (not t_only)))
            else:
                good &= bool((c >= 48) & (c <= 57))
        if not good:
            continue
        y = v[0] * 1000 + v[1] * 100 + v[2] * 10 + v[3]
        mo = v[5] * 10 + v[6]
        dd = v[8] * 10 + v[9]
        hh = v[11] * 10 + v[12]
        mi = v[14] * 10 + v[15]
        ss = v[17] * 10 + v[18]
        if mo < 1 or mo > 12 or dd < 1 or hh > 23 or mi > 59 or ss > 60:
            continue
        if mo == 2:
            leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
            last = np.int64(29) if leap else np.int64(28)
        elif mo == 4 or mo == 6 or mo == 9 or mo == 11:
            last = np.int64(30)
        else:
            last = np.int64(31)
        if dd > last:
            continue
        z = p + 19
        frac_ns = np.int64(0)
        if z < size and (buf[z] == 46 or buf[z] == 44):  # '.' or ','
            i = z + 1
            nd = 0
            while i < size:
                d = np.int64(buf[i]) - 48
                if d < 0 or d > 9:
                    break
                if nd < 9:
                    frac_ns = frac_ns * 10 + d
                nd += 1
                i += 1
            if nd > 0:
                while nd < 9:
                    frac_ns *= 10
                    nd += 1
                z = i
        off_s = np.int64(0)
        zlen = 0
        has_zone = False
        zc = np.int64(buf[z]) if z < size else np.int64(0)
        if zc == 90 or zc == 122:  # Z
            zlen = 1
            has_zone = True
        elif (zc == 43 or zc == 45) and z + 5 <= size:  # + -
            h1, h2 = _digit(buf, z + 1), _digit(buf, z + 2)
            colon = buf[z + 3] == 58
            m1 = _digit(buf, z + 4) if colon else _digit(buf, z + 3)
            m2 = _digit(buf, z + 5) if colon else _digit(buf, z + 4)
            if h1 >= 0 and h2 >= 0 and m1 >= 0 and m2 >= 0:
                off_s = np.int64((h1 * 10 + h2) * 3600 + (m1 * 10 + m2) * 60)
                if zc == 45:
                    off_s = -off_s
                zlen = 6 if colon else 5
                has_zone = True
        # days since the epoch (H. Hinnant's days_from_civil; y >= 0 here)
        yy = y - 1 if mo <= 2 else y
        era = yy // 400
        yoe = yy - era * 400
        mp = mo - 3 if mo > 2 else mo + 9
        doy = (153 * mp + 2) // 5 + dd - 1
        days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
        secs = (hh * 60 + mi) * 60 + (ss if ss < 60 else np.int64(59))
        us[r] = days * 86_400_000_000 + secs * 1_000_000 + frac_ns // 1000 - off_s * 1_000_000
        end[r] = z + zlen
        ok[r] = True
        zoned[r] = has_zone
        offset[r] = off_s
    return us, end, ok, zoned, offset


def rfc3339(buf: np.ndarray, pos: np.ndarray, t_only: bool = False) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``YYYY-MM-DD[T ]HH:MM:SS[.fraction][Z|±HH:MM|±HHMM]`` at each position, one compiled pass.

    Returns ``(us, end, ok, zoned, offset_s)`` as :func:`.timestamps.parse_rfc3339` documents them.

    Example:
        >>> buf = np.frombuffer(b"2026-08-27T03:10:00.5Z x", dtype=np.uint8)
        >>> us, end, ok, zoned, off = rfc3339(buf, np.array([0, 23]))
        >>> us.tolist(), end.tolist(), ok.tolist()
        ([1787800200500000, 0], [22, 23], [True, False])
    """
    return _rfc3339(read_only(buf), pos.astype(np.int64), t_only)  # one compiled flavour
