"""Extractors of uvicorn access lines and sgl-router / smg request lines (compiled).

uvicorn: ``INFO:     10.0.3.7:41698 - "POST /v1/chat/completions HTTP/1.1" 200 OK`` gives
``client``, ``method``, ``path``, ``http_version`` (as printed, ``HTTP/1.1``) and ``status``; a
line whose status was lost (``... HTTP/1.1"`` then nothing) keeps the rest, status NULL.

Router: ``http_request{method=POST uri=... request_id="..." status_code=200 latency=41877310}:
smg::response: src/middleware.rs:359: finished processing request`` gives ``request_id`` (quotes
removed), ``method``, ``uri``, ``status`` (``status_code=`` of the span, else a ``status[=: ]NNN``
of the message), ``latency_us``, ``target`` (``smg::response``) and ``message`` (the text after
the target and the source location).

Example:
    >>> import numpy as np
    >>> line = b'INFO:     10.0.3.7:41698 - "POST /generate HTTP/1.1" 200 OK'
    >>> buf = np.frombuffer(line, dtype=np.uint8)
    >>> sp = scan_http(buf, np.array([0]), np.array([len(line)]))
    >>> [buf[a:b].tobytes() for a, b in sp[0]]
    [b'10.0.3.7:41698', b'POST', b'/generate', b'HTTP/1.1', b'200']
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def _ws(c: int) -> bool:
    return c == 32 or c == 9 or c == 10 or c == 12 or c == 13


@numba.njit(cache=True, nogil=True, inline="always")
def _word(c: int) -> bool:
    return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122) or c == 95


@numba.njit(cache=True, nogil=True)
def _http_one(buf: np.ndarray, s: int, e: int, out: np.ndarray, li: int) -> None:
    for f in range(5):
        out[li, f, 0] = -1
        out[li, f, 1] = -1
    # (\w+: +)?(\S+) - "(\S+) (\S+) ([^"\s]+)"( (\d{3}))?  (the level header is uvicorn's default)
    i = s
    while i < e and _word(buf[i]):
        i += 1
    if i > s and i + 2 <= e and buf[i] == 58 and buf[i + 1] == 32:
        i += 1
        while i < e and buf[i] == 32:
            i += 1
    else:
        i = s
    c0 = i
    while i < e and not _ws(buf[i]):
        i += 1
    c1 = i
    if c1 == c0 or i + 4 > e or buf[i] != 32 or buf[i + 1] != 45 or buf[i + 2] != 32 or buf[i + 3] != 34:
        return
    i += 4
    m0 = i
    while i < e and not _ws(buf[i]):
        i += 1
    m1 = i
    if m1 == m0 or i >= e or buf[i] != 32:
        return
    i += 1
    p0 = i
    while i < e and not _ws(buf[i]):
        i += 1
    p1 = i
    if p1 == p0 or i >= e or buf[i] != 32:
        return
    i += 1
    v0 = i
    while i < e and not _ws(buf[i]) and buf[i] != 34:
        i += 1
    v1 = i
    if v1 == v0 or i >= e or buf[i] != 34:
        return
    out[li, 0, 0], out[li, 0, 1] = c0, c1
    out[li, 1, 0], out[li, 1, 1] = m0, m1
    out[li, 2, 0], out[li, 2, 1] = p0, p1
    out[li, 3, 0], out[li, 3, 1] = v0, v1
    i += 1
    if i + 4 <= e and buf[i] == 32 and 48 <= buf[i + 1] <= 57 and 48 <= buf[i + 2] <= 57 and 48 <= buf[i + 3] <= 57:
        out[li, 4, 0], out[li, 4, 1] = i + 1, i + 4


@numba.njit(cache=True, nogil=True)
def _http_all(buf: np.ndarray, s: np.ndarray, e: np.ndarray, out: np.ndarray) -> None:
    for li in range(s.shape[0]):
        _http_one(buf, s[li], e[li], out, li)


def scan_http(buf: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Spans ``[line, field, start|end]`` of client, method, path, version, status (-1: absent)."""
    out = np.empty((s.shape[0], 5, 2), dtype=np.int64)
    if s.shape[0]:
        _http_all(buf, s.astype(np.int64, copy=False), e.astype(np.int64, copy=False), out)
    return out


# -- router request lines ------------------------------------------------------------------------

R_REQUEST_ID, R_METHOD, R_URI, R_STATUS, R_LATENCY, R_TARGET, R_MESSAGE = range(7)


@numba.njit(cache=True, nogil=True)
def _kv(buf: np.ndarray, s: int, e: int, key: np.ndarray, mode: int) -> tuple[int, int]:
    """First ``\\bkey=value`` in buf[s:e]; mode 0: ``"[^"]*"|[^\\s}]+``, 1: ``[^\\s}]+``, 2: ``\\d+``."""
    n = key.shape[0]
    i = s
    while i + n < e:
        if (i == s or not _word(buf[i - 1])) and buf[i + n] == 61:
            same = True
            for k in range(n):
                if buf[i + k] != key[k]:
                    same = False
                    break
            if same:
                v = i + n + 1
                if mode == 0 and v < e and buf[v] == 34:
                    j = v + 1
                    while j < e and buf[j] != 34:
                        j += 1
                    if j < e:
                        return v, j + 1
                j = v
                if mode == 2:
                    while j < e and 48 <= buf[j] <= 57:
                        j += 1
                else:
                    while j < e and not _ws(buf[j]) and buf[j] != 125:
                        j += 1
                if j > v:
                    return v, j
        i += 1
    return -1, -1


_K_REQUEST_ID = np.frombuffer(b"request_id", dtype=np.uint8).copy()
_K_METHOD = np.frombuffer(b"method", dtype=np.uint8).copy()
_K_URI = np.frombuffer(b"uri", dtype=np.uint8).copy()
_K_STATUS_CODE = np.frombuffer(b"status_code", dtype=np.uint8).copy()
_K_LATENCY = np.frombuffer(b"latency", dtype=np.uint8).copy()


@numba.njit(cache=True, nogil=True)
def _status_in_message(buf: np.ndarray, s: int, e: int) -> tuple[int, int]:
    """``\\bstatus(?:_code)?[=: ]+(\\d{3})\\b`` in buf[s:e]."""
    i = s
    while i + 6 < e:
        if (i == s or not _word(buf[i - 1])) and buf[i] == 115 and buf[i + 1] == 116 and buf[i + 2] == 97 \
                and buf[i + 3] == 116 and buf[i + 4] == 117 and buf[i + 5] == 115:
            for variant in range(2):
                j = i + 6
                if variant == 0:
                    if not (j + 5 <= e and buf[j] == 95 and buf[j + 1] == 99 and buf[j + 2] == 111
                            and buf[j + 3] == 100 and buf[j + 4] == 101):
                        continue
                    j += 5
                k = j
                while k < e and (buf[k] == 61 or buf[k] == 58 or buf[k] == 32):
                    k += 1
                if k > j and k + 3 <= e and 48 <= buf[k] <= 57 and 48 <= buf[k + 1] <= 57 and 48 <= buf[k + 2] <= 57 \
                        and (k + 3 == e or not _word(buf[k + 3])):
                    return k, k + 3
        i += 1
    return -1, -1


@numba.njit(cache=True, nogil=True)
def latency_us(buf: np.ndarray, s: int, e: int) -> tuple[int, bool]:
    """A latency value as microseconds: a bare integer is µs (smg); ``3.5s``, ``12ms``, ``800µs``/``us``,
    ``1500ns`` are converted (rounded half up)."""
    i = s
    mant = 0
    frac = 0
    digits = 0
    while i < e and 48 <= buf[i] <= 57:
        if digits < 15:
            mant = mant * 10 + (buf[i] - 48)
            digits += 1
        else:
            return 0, False
        i += 1
    if digits == 0:
        return 0, False
    if i < e and buf[i] == 46:
        i += 1
        while i < e and 48 <= buf[i] <= 57:
            if digits < 15:
                mant = mant * 10 + (buf[i] - 48)
                digits += 1
                frac += 1
            i += 1
    num_mul = 1
    den = 1
    if i == e or not (_word(buf[i]) or buf[i] >= 128):
        pass  # bare number: microseconds
    elif i + 1 <= e and buf[i] == 115 and (i + 1 == e or not _word(buf[i + 1])):
        num_mul = 1_000_000  # s
    elif i + 2 <= e and buf[i] == 109 and buf[i + 1] == 115:
        num_mul = 1000  # ms
    elif i + 2 <= e and buf[i] == 117 and buf[i + 1] == 115:
        pass  # us
    elif i + 3 <= e and ((buf[i] == 0xC2 and buf[i + 1] == 0xB5) or (buf[i] == 0xCE and buf[i + 1] == 0xBC)) \
            and buf[i + 2] == 115:
        pass  # µs (micro sign or Greek mu)
    elif i + 2 <= e and buf[i] == 110 and buf[i + 1] == 115:
        den = 1000  # ns
    else:
        return 0, False
    for _ in range(frac):
        den *= 10
    return (mant * num_mul + den // 2) // den, True


@numba.njit(cache=True, nogil=True)
def _router_one(buf: np.ndarray, s: int, e: int, out: np.ndarray, lat: np.ndarray, lat_ok: np.ndarray,
                li: int) -> None:
    for f in range(7):
        out[li, f, 0] = -1
        out[li, f, 1] = -1
    lat[li] = 0
    lat_ok[li] = False
    # the spans: name{fields}[:name{fields}...] at the start of the message (or, in a line whose
    # start was cut off, after the first space before one); then ': ' and the target
    spans = np.empty((8, 2), dtype=np.int64)
    n = 0
    rest = s
    q = s
    lim = min(e, s + 512)
    first = -1
    while q < lim:
        if _word(buf[q]) and (q == s or buf[q - 1] == 32):
            r = q
            while r < e and _word(buf[r]):
                r += 1
            if r < e and buf[r] == 123:
                first = q
                break
            q = r
            continue
        if q == s:
            q += 1
            continue
        q += 1
    if first >= 0:
        p = first
        while n < 8:
            r = p
            while r < e and _word(buf[r]):
                r += 1
            if r == p or r >= e or buf[r] != 123:
                break
            j = r + 1
            while j < e and buf[j] != 125:
                j += 1
            if j >= e:
                break
            spans[n, 0] = r + 1
            spans[n, 1] = j
            n += 1
            p = j + 1
            if p < e and buf[p] == 58 and p + 1 < e and _word(buf[p + 1]):
                p += 1
                continue
            if p + 1 < e and buf[p] == 58 and buf[p + 1] == 32:
                rest = p + 2
            break
    # fields: the innermost (last) span that has the key, its first occurrence there
    for x in range(n - 1, -1, -1):
        a, b = _kv(buf, spans[x, 0], spans[x, 1], _K_REQUEST_ID, 0)
        if a >= 0:
            while a < b and buf[a] == 34:
                a += 1
            while b > a and buf[b - 1] == 34:
                b -= 1
            if b > a:
                out[li, R_REQUEST_ID, 0], out[li, R_REQUEST_ID, 1] = a, b
            break
    for x in range(n - 1, -1, -1):
        a, b = _kv(buf, spans[x, 0], spans[x, 1], _K_METHOD, 1)
        if a >= 0:
            out[li, R_METHOD, 0], out[li, R_METHOD, 1] = a, b
            break
    for x in range(n - 1, -1, -1):
        a, b = _kv(buf, spans[x, 0], spans[x, 1], _K_URI, 1)
        if a >= 0:
            out[li, R_URI, 0], out[li, R_URI, 1] = a, b
            break
    for x in range(n - 1, -1, -1):
        a, b = _kv(buf, spans[x, 0], spans[x, 1], _K_STATUS_CODE, 2)
        if a >= 0:
            out[li, R_STATUS, 0], out[li, R_STATUS, 1] = a, b
            break
    if out[li, R_STATUS, 0] < 0:
        out[li, R_STATUS, 0], out[li, R_STATUS, 1] = _status_in_message(buf, s, e)
    for x in range(n - 1, -1, -1):
        a, b = _kv(buf, spans[x, 0], spans[x, 1], _K_LATENCY, 1)
        if a >= 0:
            out[li, R_LATENCY, 0], out[li, R_LATENCY, 1] = a, b
            lat[li], lat_ok[li] = latency_us(buf, a, b)
            break
    # target: ^([\w:]+): at the start of rest; message: rest without '^[\w:]+: (?:[\w/.\-]+:\d+: )?'
    t = rest
    while t < e and (_word(buf[t]) or buf[t] == 58):
        t += 1
    m = rest
    k = t
    while k > rest and not (buf[k - 1] == 58 and k < e and buf[k] == 32):
        k -= 1
    if k > rest + 1:
        out[li, R_TARGET, 0], out[li, R_TARGET, 1] = rest, k - 1
        m = k + 1
        # optional source location 'path:line: '
        p = m
        while p < e and (_word(buf[p]) or buf[p] == 47 or buf[p] == 46 or buf[p] == 45):
            p += 1
        if p > m and p < e and buf[p] == 58:
            d = p + 1
            while d < e and 48 <= buf[d] <= 57:
                d += 1
            if d > p + 1 and d + 2 <= e and buf[d] == 58 and buf[d + 1] == 32:
                m = d + 2
    out[li, R_MESSAGE, 0], out[li, R_MESSAGE, 1] = m, e


@numba.njit(cache=True, nogil=True)
def _router_all(buf: np.ndarray, s: np.ndarray, e: np.ndarray, out: np.ndarray, lat: np.ndarray,
                lat_ok: np.ndarray) -> None:
    for li in range(s.shape[0]):
        _router_one(buf, s[li], e[li], out, lat, lat_ok, li)


def scan_router(buf: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Spans ``[line, field, start|end]`` of the R_* fields of router request messages buf[s:e], and
    the latency in µs (with its validity).

    Example:
        >>> line = b'a{request_id="x"}:http_request{status=502 Bad Gateway latency=3.5s}: smg::response: failed'
        >>> buf = np.frombuffer(line, dtype=np.uint8)
        >>> sp, lat, ok = scan_router(buf, np.array([0]), np.array([len(line)]))
        >>> buf[sp[0, R_STATUS, 0]:sp[0, R_STATUS, 1]].tobytes(), int(lat[0]), bool(ok[0])
        (b'502', 3500000, True)
    """
    out = np.empty((s.shape[0], 7, 2), dtype=np.int64)
    lat = np.empty(s.shape[0], dtype=np.int64)
    ok = np.empty(s.shape[0], dtype=np.bool_)
    if s.shape[0]:
        _router_all(buf, s.astype(np.int64, copy=False), e.astype(np.int64, copy=False), out, lat, ok)
    return out, lat, ok
