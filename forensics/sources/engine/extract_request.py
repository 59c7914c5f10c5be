"""Extractor of ``Receive:`` / ``Finish:`` request records (the bulk of an engine log's bytes).

The record is a Python ``repr`` of a dataclass and a dict (``obj=GenerateReqInput(...)``,
``out={...}``) that quotes the prompt and the output. Fields are read **by key, never by
position**, with one tokeniser: at each position it tries, in this order, a kept dataclass field
``name=value`` (``rid``, ``bootstrap_host``, ``bootstrap_port``, ``bootstrap_room``, ``stream``,
``headers``; at a word boundary), a kept dict key ``'name': value`` (``id``, ``prompt_tokens``,
``completion_tokens``, ``cached_tokens``, ``e2e_latency``, ``type``, ``length``, ``status_code``,
``message``), or a string literal, which it consumes whole: text inside a literal (a prompt that
says ``rid='x'``) can never be read as a field, and is never copied anywhere. Dataclass fields
take their first occurrence, dict keys their last (the ``out`` dict comes last, its
``meta_info`` innermost). A value is a literal, a ``{...}`` dict of literals (``headers``), a bare
token up to the next ``,()[]{}`` or quote, or empty: the grammar of the previous SQL loader's
tokeniser regex, run here as compiled code.

Of the ``headers`` dict only ``header_request_id`` is kept: the value of the first of
``x-request-id``, ``x-correlation-id``, ``x-trace-id``, ``request-id`` (names compared in lower case;
none when a name repeats after lower-casing). The whole dict is not stored: no question reads it,
and the line's byte offset re-reads it from the file on demand.

One compiled pass per block (:func:`scan_requests`) walks each record once: the tokeniser's raw
spans, the value rules (quotes, ``None``, the finish fields by ``type``, the header id) and the
integer parsing of :mod:`.spans` run on the record while it is in cache; what leaves is the
columns' spans and integers, gathered into Arrow by the scanner.

Example:
    >>> import numpy as np
    >>> line = b"Finish: obj=X(text='rid=\\\\'no\\\\'', rid='r1'), out={'meta_info': {'id': 'r1', 'prompt_tokens': 5}}"
    >>> buf = np.frombuffer(line, dtype=np.uint8)
    >>> r = scan_requests(buf, np.array([8]), np.array([len(line)]), finished=True)
    >>> buf[r.starts[C_RID, 0]:r.ends[C_RID, 0]].tobytes(), int(r.ints[INT_COLS.index(C_PT), 0])
    (b'r1', 5)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numba
import numpy as np
import pyarrow as pa

from forensics.sources.bytescan import SPECIAL, bitmap, next_set
from forensics.sources.engine.spans import parse_int

# Field slots of the span array: dataclass fields (first occurrence), then dict keys (last).
F_RID, F_HOST, F_PORT, F_ROOM, F_STREAM, F_HEADERS = range(6)
F_ID, F_PT, F_CT, F_CACHED, F_LAT, F_TYPE, F_LEN, F_STATUS, F_MSG = range(6, 15)
N_FIELDS = 15

_A_NAMES = (b"rid", b"bootstrap_host", b"bootstrap_port", b"bootstrap_room", b"stream", b"headers")
_B_NAMES = (b"id", b"prompt_tokens", b"completion_tokens", b"cached_tokens", b"e2e_latency", b"type",
            b"length", b"status_code", b"message")


def _table(names: tuple[bytes, ...]) -> tuple[np.ndarray, np.ndarray]:
    data = b"".join(names)
    offs = np.zeros(len(names) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in names], out=offs[1:])
    return np.frombuffer(data, dtype=np.uint8).copy(), offs


_A_DATA, _A_OFFS = _table(_A_NAMES)
_B_DATA, _B_OFFS = _table(_B_NAMES)


def specials(buf: np.ndarray) -> np.ndarray:
    """Bitmap of the bytes the tokeniser stops at (the quotes, the backslash, ``=``): between them
    nothing can start or end a field, so it jumps from one to the next (:func:`.bytescan.next_set`).

    Example:
        >>> bm = specials(np.frombuffer(b"ab='c'", dtype=np.uint8))
        >>> [i for i in range(6) if int(bm[0]) >> i & 1]
        [2, 3, 5]
    """
    return bitmap(buf, SPECIAL)


@numba.njit(cache=True, nogil=True)
def lit_end(buf: np.ndarray, bm: np.ndarray, i: int, e: int) -> int:
    """End (exclusive) of the Python string literal opening at ``i``, or -1 if it never closes."""
    q = buf[i]
    j = i + 1
    while True:
        j = next_set(bm, j, e)
        if j >= e:
            return -1
        c = buf[j]
        if c == q:
            return j + 1
        if c == 92:
            j += 2
            continue
        j += 1


@numba.njit(cache=True, nogil=True, inline="always")
def _bare_stop(c: int) -> bool:
    # , ( ) [ ] { } ' "
    return c == 44 or c == 40 or c == 41 or c == 91 or c == 93 or c == 123 or c == 125 or c == 39 or c == 34


@numba.njit(cache=True, nogil=True)
def _value_end(buf: np.ndarray, bm: np.ndarray, j: int, e: int, allow_dict: bool) -> int:
    """End of a field value starting at ``j`` (literal | dict of literals | bare token | empty)."""
    if j >= e:
        return j
    c = buf[j]
    if c == 39 or c == 34:
        k = lit_end(buf, bm, j, e)
        if k > 0:
            return k
    if allow_dict and c == 123:
        k = j + 1
        while k < e:
            d = buf[k]
            if d == 125:
                return k + 1
            if d == 123:
                break
            if d == 39 or d == 34:
                m = lit_end(buf, bm, k, e)
                if m < 0:
                    break
                k = m
                continue
            k += 1
    if _bare_stop(c) or c == 32:
        return j
    k = j + 1
    while k < e and not _bare_stop(buf[k]):
        k += 1
    return k


#: Word characters (identifier bytes: ASCII letters, digits, ``_``), as a byte table.
_WORD = np.zeros(256, dtype=np.uint8)
_WORD[np.frombuffer(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_", dtype=np.uint8)] = 1


@numba.njit(cache=True, nogil=True)
def _scan_one(buf: np.ndarray, bm: np.ndarray, s: int, e: int, out: np.ndarray, li: int,
              a_data: np.ndarray, a_offs: np.ndarray, b_data: np.ndarray, b_offs: np.ndarray,
              word: np.ndarray) -> None:
    # The tokeniser, stepping from one '=' or quote to the next (the bytes between are never a
    # field's start) on the block's bitmap of special bytes (``specials``): at '=' the identifier
    # before it (back to a non-word byte: every resume point follows one) is a kept dataclass
    # field's name or not; at a quote the literal is consumed whole, and if it is followed by
    # ': ' it may be a kept dict key. A key is a literal whose text is exactly the name (no kept
    # name holds a quote or a backslash, none is a prefix of another), so this finds the same
    # fields as trying every name at every quote. A backslash outside a literal is an ordinary byte.
    for f in range(N_FIELDS):
        out[li, f, 0] = -1
        out[li, f, 1] = -1
    p = s
    while True:
        p = next_set(bm, p, e)
        if p >= e:
            return
        c = buf[p]
        if c == 92:
            p += 1
            continue
        if c == 61:
            # name=value (a kept dataclass field; the first occurrence wins)
            n = _field_before(buf, s, p, a_data, a_offs, word)
            if n >= 0:
                v0 = p + 1
                v1 = _value_end(buf, bm, v0, e, True)
                if out[li, n, 0] < 0:
                    out[li, n, 0] = v0
                    out[li, n, 1] = v1
                p = v1 if v1 > v0 else v0
                continue
            p += 1
            continue
        k = lit_end(buf, bm, p, e)
        if k < 0:
            p += 1  # a quote that never closes is one character
            continue
        if c == 39 and k + 2 <= e and buf[k] == 58 and buf[k + 1] == 32:
            # 'name': value (a kept dict key; the last occurrence wins)
            n = exact_name(buf, p + 1, k - 1, b_data, b_offs)
            if n >= 0:
                v0 = k + 2
                v1 = _value_end(buf, bm, v0, e, False)
                out[li, 6 + n, 0] = v0
                out[li, 6 + n, 1] = v1
                p = v1 if v1 > v0 else v0
                continue
        p = k  # any other string literal is consumed whole


@numba.njit(cache=True, nogil=True, inline="always")
def _field_before(buf: np.ndarray, s: int, p: int, data: np.ndarray, offs: np.ndarray, word: np.ndarray) -> int:
    """Index of the kept name that is the whole identifier ending at ``p`` (the ``=``), -1 if none.

    The identifier is the run of word bytes before ``p``, back to ``s``. Each kept name is compared
    from its last byte backwards, then the byte before it must not be a word byte: no walk back
    over the identifier, which most ``=`` of a record (the fields not kept) never need.
    """
    for k in range(offs.shape[0] - 1):
        a = offs[k]
        ln = offs[k + 1] - a
        i = p - ln
        if i < s:
            continue
        same = True
        for j in range(ln - 1, -1, -1):
            if buf[i + j] != data[a + j]:
                same = False
                break
        if same and (i == s or word[buf[i - 1]] == 0):
            return k
    return -1


@numba.njit(cache=True, nogil=True)
def exact_name(buf: np.ndarray, s: int, e: int, data: np.ndarray, offs: np.ndarray) -> int:
    """Index of the name in the table equal to buf[s:e], -1 if none."""
    n = e - s
    for k in range(offs.shape[0] - 1):
        a = offs[k]
        if offs[k + 1] - a != n:
            continue
        same = True
        for j in range(n):
            if buf[s + j] != data[a + j]:
                same = False
                break
        if same:
            return k
    return -1


# -- from raw spans to the columns of engine_requests ----------------------------------------------

_HEADER_IDS = (b"x-request-id", b"x-correlation-id", b"x-trace-id", b"request-id")
_H_DATA, _H_OFFS = _table(_HEADER_IDS)


@numba.njit(cache=True, nogil=True)
def unquote(buf: np.ndarray, s: int, e: int) -> tuple[int, int]:
    """The value of a raw token: NULL (-1) for absent, empty or ``None``; a quoted literal without its
    quotes (escapes kept as written); anything else trimmed of spaces."""
    if s < 0 or e == s:
        return -1, -1
    if e - s == 4 and buf[s] == 78 and buf[s + 1] == 111 and buf[s + 2] == 110 and buf[s + 3] == 101:
        return -1, -1
    q = buf[s]
    if e - s >= 2 and (q == 39 or q == 34) and buf[e - 1] == q:
        return s + 1, e - 1
    while s < e and buf[s] == 32:
        s += 1
    while e > s and buf[e - 1] == 32:
        e -= 1
    return s, e


@numba.njit(cache=True, nogil=True)
def cap_end(buf: np.ndarray, s: int, e: int, limit: int) -> int:
    """End of buf[s:e] capped to ``limit`` characters when it is longer than ``limit`` bytes."""
    if e - s <= limit:
        return e
    chars = 0
    i = s
    while i < e:
        if (buf[i] & 0xC0) != 0x80:
            if chars == limit:
                return i
            chars += 1
        i += 1
    return e


@numba.njit(cache=True, nogil=True)
def _same_lower(buf: np.ndarray, s: int, e: int, data: np.ndarray, a: int, b: int) -> bool:
    if e - s != b - a:
        return False
    for k in range(e - s):
        c = buf[s + k]
        if 65 <= c <= 90:
            c += 32
        if c != data[a + k]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _header_id(buf: np.ndarray, bm: np.ndarray, hs: int, he: int, pairs: np.ndarray, h_data: np.ndarray,
               h_offs: np.ndarray) -> tuple[int, int]:
    """(start, end) of the request-id header's value in the headers dict buf[hs:he], -1 where
    absent (no such header, no pairs, or a name repeated after lower-casing)."""
    n = 0
    p = hs
    while p < he and n < pairs.shape[0]:
        c = buf[p]
        if c == 123 or c == 44:
            q = p + 1
            if q < he and buf[q] == 32:
                q += 1
            if q < he and (buf[q] == 39 or buf[q] == 34):
                quote = buf[q]
                k = q + 1
                while k < he and buf[k] != quote:
                    k += 1
                if k < he and k > q + 1 and k + 3 <= he and buf[k + 1] == 58 and buf[k + 2] == 32 \
                        and (buf[k + 3] == 39 or buf[k + 3] == 34):
                    v1 = lit_end(buf, bm, k + 3, he)
                    if v1 > 0:
                        pairs[n, 0] = q + 1
                        pairs[n, 1] = k
                        pairs[n, 2] = k + 4
                        pairs[n, 3] = v1 - 1
                        n += 1
                        p = v1
                        continue
        p += 1
    if n == 0:
        return -1, -1
    for a in range(n):
        for b in range(a):
            la = pairs[a, 1] - pairs[a, 0]
            if la == pairs[b, 1] - pairs[b, 0]:
                same = True
                for k in range(la):
                    x = buf[pairs[a, 0] + k]
                    y = buf[pairs[b, 0] + k]
                    if 65 <= x <= 90:
                        x += 32
                    if 65 <= y <= 90:
                        y += 32
                    if x != y:
                        same = False
                        break
                if same:
                    return -1, -1
    ids = -1
    ide = -1
    for h in range(h_offs.shape[0] - 1):
        for a in range(n):
            if _same_lower(buf, pairs[a, 0], pairs[a, 1], h_data, h_offs[h], h_offs[h + 1]):
                ids = pairs[a, 2]
                ide = pairs[a, 3]
                break
        if ids >= 0:
            break
    return ids, ide


#: Columns of :func:`scan_requests`: a span of the record (start, end; start < 0 for NULL) each.
C_RID, C_HOST, C_PORT, C_ROOM, C_HEADER_ID, C_PT, C_CT, C_CACHED, C_FTYPE, C_FLEN, C_FSTATUS, C_FMSG, C_E2E = range(13)
N_COLS = 13
#: The integer columns, in the order of the ``ints`` / ``states`` rows of :class:`Requests`.
INT_COLS = (C_PORT, C_ROOM, C_PT, C_CT, C_CACHED, C_FLEN, C_FSTATUS)
_INT_COLS = np.array(INT_COLS, dtype=np.int64)


@numba.njit(cache=True, nogil=True)
def _records(buf: np.ndarray, bm: np.ndarray, s: np.ndarray, e: np.ndarray, finished: bool, starts: np.ndarray,
             ends: np.ndarray, ints: np.ndarray, states: np.ndarray, stream: np.ndarray,
             a_data: np.ndarray, a_offs: np.ndarray, b_data: np.ndarray, b_offs: np.ndarray,
             h_data: np.ndarray, h_offs: np.ndarray, int_cols: np.ndarray, text_cols: np.ndarray,
             text: np.ndarray, text_offs: np.ndarray, word: np.ndarray) -> None:
    # one record at a time: the tokeniser's raw spans, then the columns and integers from them
    # while the record is still in cache (no per-block array of raw spans, no second pass); the
    # text columns' bytes are copied out here too (a gather after the walk missed the cache once
    # per value: 50-180 ns each, measured)
    sp = np.empty((1, N_FIELDS, 2), dtype=np.int64)
    pairs = np.empty((256, 4), dtype=np.int64)
    cap = text.shape[0] // max(text_cols.shape[0], 1)
    for k in range(text_cols.shape[0]):
        text_offs[k, 0] = 0
    for li in range(s.shape[0]):
        _scan_one(buf, bm, s[li], e[li], sp, 0, a_data, a_offs, b_data, b_offs, word)
        rs, re_ = unquote(buf, sp[0, F_RID, 0], sp[0, F_RID, 1])
        if rs < 0:
            rs, re_ = unquote(buf, sp[0, F_ID, 0], sp[0, F_ID, 1])
        starts[C_RID, li], ends[C_RID, li] = rs, re_
        starts[C_HOST, li], ends[C_HOST, li] = unquote(buf, sp[0, F_HOST, 0], sp[0, F_HOST, 1])
        starts[C_PORT, li], ends[C_PORT, li] = unquote(buf, sp[0, F_PORT, 0], sp[0, F_PORT, 1])
        starts[C_ROOM, li], ends[C_ROOM, li] = unquote(buf, sp[0, F_ROOM, 0], sp[0, F_ROOM, 1])
        ss, se = unquote(buf, sp[0, F_STREAM, 0], sp[0, F_STREAM, 1])
        st = -1
        if ss >= 0 and se - ss == 4 and (buf[ss] | 32) == 116 and (buf[ss + 1] | 32) == 114 \
                and (buf[ss + 2] | 32) == 117 and (buf[ss + 3] | 32) == 101:
            st = 1
        elif ss >= 0 and se - ss == 5 and (buf[ss] | 32) == 102 and (buf[ss + 1] | 32) == 97 \
                and (buf[ss + 2] | 32) == 108 and (buf[ss + 3] | 32) == 115 and (buf[ss + 4] | 32) == 101:
            st = 0
        stream[li] = st
        hs = sp[0, F_HEADERS, 0]
        if hs >= 0:
            starts[C_HEADER_ID, li], ends[C_HEADER_ID, li] = _header_id(buf, bm, hs, sp[0, F_HEADERS, 1], pairs,
                                                                        h_data, h_offs)
        else:
            starts[C_HEADER_ID, li], ends[C_HEADER_ID, li] = -1, -1
        starts[C_PT, li], ends[C_PT, li] = unquote(buf, sp[0, F_PT, 0], sp[0, F_PT, 1])
        starts[C_CT, li], ends[C_CT, li] = unquote(buf, sp[0, F_CT, 0], sp[0, F_CT, 1])
        starts[C_CACHED, li], ends[C_CACHED, li] = unquote(buf, sp[0, F_CACHED, 0], sp[0, F_CACHED, 1])
        ts, te = -1, -1
        if finished:
            ts, te = unquote(buf, sp[0, F_TYPE, 0], sp[0, F_TYPE, 1])
        starts[C_FTYPE, li], ends[C_FTYPE, li] = ts, te
        is_len = te - ts == 6 and buf[ts] == 108 and buf[ts + 1] == 101 and buf[ts + 2] == 110 \
            and buf[ts + 3] == 103 and buf[ts + 4] == 116 and buf[ts + 5] == 104
        is_abort = te - ts == 5 and buf[ts] == 97 and buf[ts + 1] == 98 and buf[ts + 2] == 111 \
            and buf[ts + 3] == 114 and buf[ts + 4] == 116
        starts[C_FLEN, li], ends[C_FLEN, li] = unquote(buf, sp[0, F_LEN, 0], sp[0, F_LEN, 1]) if is_len else (-1, -1)
        starts[C_FSTATUS, li], ends[C_FSTATUS, li] = \
            unquote(buf, sp[0, F_STATUS, 0], sp[0, F_STATUS, 1]) if is_abort else (-1, -1)
        ms, me = unquote(buf, sp[0, F_MSG, 0], sp[0, F_MSG, 1]) if is_abort else (-1, -1)
        if ms >= 0:
            me = cap_end(buf, ms, me, 1024)
        starts[C_FMSG, li], ends[C_FMSG, li] = ms, me
        starts[C_E2E, li], ends[C_E2E, li] = unquote(buf, sp[0, F_LAT, 0], sp[0, F_LAT, 1])
        for k in range(int_cols.shape[0]):
            c = int_cols[k]
            ints[k, li], states[k, li] = parse_int(buf, starts[c, li], ends[c, li])
        for k in range(text_cols.shape[0]):
            c = text_cols[k]
            o = text_offs[k, li]
            a = starts[c, li]
            if a >= 0:
                b = ends[c, li]
                base = k * cap + o
                for j in range(b - a):
                    text[base + j] = buf[a + j]
                o += b - a
            text_offs[k, li + 1] = o


@dataclass(frozen=True)
class Requests:
    """The columns of a block's request records, as spans of its buffer and parsed integers."""

    #: ``[column, record]`` start and end of each of the ``C_*`` columns (start < 0: NULL)
    starts: np.ndarray
    ends: np.ndarray
    #: ``[k, record]`` value and :mod:`.spans` state (INT_NULL, INT_OK, INT_ODD) of ``INT_COLS[k]``
    ints: np.ndarray
    states: np.ndarray
    #: ``stream``: 1 true, 0 false, -1 absent or neither
    stream: np.ndarray
    #: the ``TEXT_COLS`` as Arrow strings (NULL where the span is), copied out by the walk
    texts: dict[int, pa.Array] = field(default_factory=dict)


_SCRATCH = threading.local()

#: The columns :func:`scan_requests` also copies out as text (``Requests.texts``).
TEXT_COLS = (C_RID, C_HOST, C_HEADER_ID, C_FTYPE, C_FMSG, C_E2E)
_TEXT_COLS = np.array(TEXT_COLS, dtype=np.int64)


def _strings(n: int, offs: np.ndarray, data: np.ndarray, valid: np.ndarray) -> pa.Array:
    # the used bytes are copied out: the scratch row is the next block's (and a column keeping a
    # record-sized buffer alive reached 874 MiB peak RSS a node, against ~700, measured)
    used = int(offs[n])
    mask = None if valid.all() else pa.array(valid).buffers()[1]
    body = pa.py_buffer(data[:used].copy())
    if used < (1 << 31) - 1:
        return pa.StringArray.from_buffers(n, pa.py_buffer(offs.astype(np.int32)), body, mask)
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offs.copy()), body, mask)


def scan_requests(buf: np.ndarray, s: np.ndarray, e: np.ndarray, *, finished: bool,
                  bm: np.ndarray | None = None) -> Requests:
    """The ``engine_requests`` columns of the records buf[s:e] (``Receive`` or, ``finished``,
    ``Finish``), in one compiled pass: tokeniser, value rules, integer parsing and the text
    columns' bytes per record. ``bm``: ``specials(buf)``, if the caller has it already."""
    n = int(s.shape[0])
    out = Requests(starts=np.empty((N_COLS, n), dtype=np.int64), ends=np.empty((N_COLS, n), dtype=np.int64),
                   ints=np.empty((len(INT_COLS), n), dtype=np.int64),
                   states=np.empty((len(INT_COLS), n), dtype=np.int8), stream=np.empty(n, dtype=np.int8))
    s = s.astype(np.int64, copy=False)
    e = e.astype(np.int64, copy=False)
    # a value lies inside its record: a column's bytes never exceed the records'. The scratch is
    # the thread's, kept between blocks: fresh pages for every block cost as much as the copying
    # (measured); only the rows' written starts are ever touched (a few MiB a thread)
    cap = int((e - s).sum()) if n else 0
    text = getattr(_SCRATCH, "text", None)
    if text is None or text.shape[0] < len(TEXT_COLS) * cap:
        text = _SCRATCH.text = np.empty(len(TEXT_COLS) * max(cap, 1 << 20), dtype=np.uint8)
    cap = text.shape[0] // len(TEXT_COLS)
    offs = np.zeros((len(TEXT_COLS), n + 1), dtype=np.int64)
    if n:
        if bm is None:
            bm = specials(buf)
        _records(buf, bm, s, e, finished, out.starts, out.ends, out.ints, out.states, out.stream, _A_DATA, _A_OFFS,
                 _B_DATA, _B_OFFS, _H_DATA, _H_OFFS, _INT_COLS, _TEXT_COLS, text, offs, _WORD)
    for k, c in enumerate(TEXT_COLS):
        out.texts[c] = _strings(n, offs[k], text[k * cap : (k + 1) * cap], out.starts[c] >= 0)
    return out
