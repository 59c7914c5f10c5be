"""Fields of fixed-key JSON records read by one compiled pass, without a JSON parser (Loki, shipper, Datadog, journald).

A :class:`~.record_formats.RecordFormat` names the paths of a record's text, time, pod, host and
stream; :class:`FieldSpec` turns them into a key tree (a trie of object keys), and
:func:`scan_fields` walks each record once: it checks the record is strict JSON (RFC 8259: the
grammar, escapes, UTF-8, no control characters), follows only the keys of the tree and records
where each wanted string is. The text is unescaped in the same pass when it holds escapes;
every other value is checked and skipped.

The pass only answers where its answer cannot differ from the general JSON path
(:meth:`.records.RecordWrapper._parse`); a record is left to that path (``ok`` false) when it
holds anything else: a wanted value that is not a plain string (a number, an object, an
array of bytes, null text), an empty string where the first non-empty value is asked for, an
escape in a key of a followed object or in a value other than the text, a key given twice, a
lone surrogate, invalid UTF-8, JSON that is not strict, nesting over 64 levels.

Example:
    >>> from forensics.sources.collect.record_formats import FORMATS
    >>> spec = FieldSpec.of(FORMATS["loki-jsonl"])
    >>> rec = b'{"labels":{"pod":"p-0","stream":"stderr"},"line":"a \\\\"q\\\\"","timestamp":"2026-08-27T03:10:00Z"}'
    >>> got = scan_fields(spec, np.frombuffer(rec, dtype=np.uint8), np.array([0]), np.array([len(rec)]))
    >>> bool(got.ok[0]), got.text(0), got.value(0, POD), int(got.stream[0])
    (True, b'a "q"', b'p-0', 2)
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from forensics.sources.collect.kernels import _hex4, escape_byte, put_utf8
from forensics.sources.collect.record_formats import RecordFormat, split_path
from forensics.sources.lines import read_only

#: the fields, as columns of :attr:`Scanned.start` / :attr:`Scanned.end`
MSG, TIME, POD, HOST, STREAM, UNIT, TAG = range(7)
N_FIELDS = 7
#: what a key-tree node's value must be
_K_OBJECT, _K_STRING, _K_TAGS, _K_DIGITS = 0, 1, 2, 3
_MAX_DEPTH = 64


@dataclass(frozen=True)
class FieldSpec:
    """A format's wanted paths as a key tree, in arrays the compiled pass reads.

    Node 0 is the record; a node has a slot (a wanted value) or children (an object to follow)
    or both (``host`` a string in one record, ``host.name`` in another: followed when an object,
    the string taken when a string). Each field lists its slots in priority order.
    """

    key_start: np.ndarray
    key_end: np.ndarray
    keys: np.ndarray
    first_child: np.ndarray
    next_sibling: np.ndarray
    slot: np.ndarray
    kind: np.ndarray
    field_ptr: np.ndarray
    field_slots: np.ndarray
    tag_prefix: np.ndarray
    #: the time is µs since the epoch written as a string of digits (journald)
    digits_time: bool

    @classmethod
    def of(cls, fmt: RecordFormat) -> FieldSpec:
        """The spec of a record format (one-per-line or document records alike)."""
        names: list[bytes] = [b""]
        parent: list[int] = [-1]
        slot: list[int] = [-1]
        kind: list[int] = [_K_OBJECT]
        fields: list[list[int]] = [[] for _ in range(N_FIELDS)]
        n_slots = 0

        def node(path: list[str]) -> int:
            at = 0
            for part in path:
                key = part.encode()
                nxt = next((i for i in range(len(names)) if parent[i] == at and names[i] == key), -1)
                if nxt < 0:
                    names.append(key)
                    parent.append(at)
                    slot.append(-1)
                    kind.append(_K_OBJECT)
                    nxt = len(names) - 1
                at = nxt
            return at

        digits = fmt.time_unit == "epoch_us"
        groups = [(MSG, fmt.message, _K_STRING), (TIME, fmt.time, _K_DIGITS if digits else _K_STRING),
                  (POD, fmt.pod, _K_STRING), (HOST, fmt.host, _K_STRING), (STREAM, fmt.stream, _K_STRING),
                  (UNIT, fmt.host_unit, _K_STRING)]
        if fmt.pod_tag:
            groups.append((TAG, (fmt.pod_tag[0],), _K_TAGS))
        for field, paths, k in groups:
            for p in paths:
                at = node(split_path(p))
                if slot[at] < 0:
                    slot[at] = n_slots
                    kind[at] = k
                    n_slots += 1
                fields[field].append(slot[at])
        n = len(names)
        first_child = np.full(n, -1, dtype=np.int64)
        next_sibling = np.full(n, -1, dtype=np.int64)
        for i in range(n - 1, 0, -1):
            next_sibling[i] = first_child[parent[i]]
            first_child[parent[i]] = i
        bounds = np.cumsum([0] + [len(k) for k in names])
        return cls(
            key_start=bounds[:-1].astype(np.int64), key_end=bounds[1:].astype(np.int64),
            keys=np.frombuffer(b"".join(names) or b"\0", dtype=np.uint8).copy(),
            first_child=first_child, next_sibling=next_sibling,
            slot=np.array(slot, dtype=np.int64), kind=np.array(kind, dtype=np.int8),
            field_ptr=np.cumsum([0] + [len(f) for f in fields]).astype(np.int64),
            field_slots=np.array([s for f in fields for s in f] or [0], dtype=np.int64),
            tag_prefix=np.frombuffer((fmt.pod_tag[1] if fmt.pod_tag else "").encode(), dtype=np.uint8).copy(),
            digits_time=digits,
        )

    @property
    def n_slots(self) -> int:
        return int(self.slot.max()) + 1 if self.slot.size else 0


@dataclass(frozen=True)
class Scanned:
    """Per record: readable by the pass (``ok``) and where each field's value is (-1: null).

    Text spans point into ``data`` (the batch's bytes, then the unescaped texts); the other
    fields into the batch's bytes (they hold no escape). ``us`` is the digits time (journald).
    """

    ok: np.ndarray
    data: np.ndarray
    start: np.ndarray
    end: np.ndarray
    us: np.ndarray
    stream: np.ndarray
    #: the text holds a newline before its last byte (several lines)
    inner_nl: np.ndarray

    def text(self, r: int) -> bytes:
        return self.data[int(self.start[r, MSG]) : int(self.end[r, MSG])].tobytes()

    def value(self, r: int, field: int) -> bytes | None:
        s = int(self.start[r, field])
        return None if s < 0 else self.data[s : int(self.end[r, field])].tobytes()


def scan_fields(spec: FieldSpec, buf: np.ndarray, r_start: np.ndarray, r_end: np.ndarray) -> Scanned:
    """Read the wanted fields of the records ``buf[r_start[i]:r_end[i]]`` in one compiled pass."""
    buf = read_only(buf)  # one compiled flavour (lines.read_only)
    off = (-buf.ctypes.data) % 8 if buf.size else 0
    words = buf[off : off + max(buf.size - off, 0) // 8 * 8].view(np.uint64)
    ok, start, end, us, stream, inner_nl, extra = _scan(
        buf, words, off, r_start.astype(np.int64), r_end.astype(np.int64), spec.key_start, spec.key_end, spec.keys,
        spec.first_child, spec.next_sibling, spec.slot, spec.kind, spec.field_ptr, spec.field_slots,
        max(spec.n_slots, 1), spec.tag_prefix, spec.digits_time)
    data = np.concatenate([buf, extra]) if extra.size else buf
    return Scanned(ok=ok, data=data, start=start, end=end, us=us, stream=stream, inner_nl=inner_nl)


# -- the compiled pass ------------------------------------------------------------------------------

@numba.njit(cache=True, nogil=True, inline="always")
def _ws(buf: np.ndarray, i: int, e: int) -> int:
    while i < e:
        c = buf[i]
        if c != 32 and c != 10 and c != 13 and c != 9:
            break
        i += 1
    return i


@numba.njit(cache=True, nogil=True, inline="always")
def _cont(buf: np.ndarray, i: int, e: int, lo: int, hi: int) -> bool:
    return i < e and lo <= buf[i] <= hi


@numba.njit(cache=True, nogil=True, inline="always")
def _utf8(buf: np.ndarray, i: int, e: int) -> int:
    """Length of the well-formed UTF-8 sequence at ``i`` (Unicode table 3-7), or 0."""
    c = buf[i]
    if 0xC2 <= c <= 0xDF:
        return 2 if _cont(buf, i + 1, e, 0x80, 0xBF) else 0
    if 0xE0 <= c <= 0xEF:
        lo = 0xA0 if c == 0xE0 else 0x80
        hi = 0x9F if c == 0xED else 0xBF
        return 3 if _cont(buf, i + 1, e, lo, hi) and _cont(buf, i + 2, e, 0x80, 0xBF) else 0
    if 0xF0 <= c <= 0xF4:
        lo = 0x90 if c == 0xF0 else 0x80
        hi = 0x8F if c == 0xF4 else 0xBF
        if _cont(buf, i + 1, e, lo, hi) and _cont(buf, i + 2, e, 0x80, 0xBF) and _cont(buf, i + 3, e, 0x80, 0xBF):
            return 4
    return 0


_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_QUOTES = np.uint64(0x2222222222222222)
_SLASHES = np.uint64(0x5C5C5C5C5C5C5C5C)
_SPACES = np.uint64(0x2020202020202020)


@numba.njit(cache=True, nogil=True, inline="always")
def _plain_word(w: np.uint64) -> bool:
    """No byte of the 8 is a quote, a backslash, a control character or non-ASCII (a few false alarms).

    Zero bytes of ``w ^ pattern`` found by ``(x - 0x01..) & ~x & 0x80..``; bytes below 0x20 by
    ``w - 0x20..``; a borrow can only flag a byte above a true hit, so nothing is missed.
    """
    x = w ^ _QUOTES
    y = w ^ _SLASHES
    t = ((x - _ONES) & ~x) | ((y - _ONES) & ~y) | (w - _SPACES) | w
    return (t & _HIGH) == 0  # type: ignore[no-any-return]


@numba.njit(cache=True, nogil=True, inline="always")
def _skip_plain(words: np.ndarray, off: int, wend: int, j: int, e: int) -> int:
    """From ``j`` (aligned), skip whole words of plain string bytes, 8 at a time."""
    if j < off:
        return j
    lim = min(e, wend)
    while j + 8 <= lim and _plain_word(words[(j - off) >> 3]):
        j += 8
    return j


@numba.njit(cache=True, nogil=True, inline="always")
def _string(buf: np.ndarray, words: np.ndarray, off: int, wend: int, i: int, e: int) -> tuple[int, int]:
    """The closing quote of the strict JSON string opening at ``i`` (or -1), and its first escape (or -1)."""
    j = i + 1
    esc = -1
    while j < e:
        if ((j - off) & 7) == 0:
            j = _skip_plain(words, off, wend, j, e)
            if j >= e:
                break
        c = buf[j]
        if c == 34:
            return j, esc
        if c == 92:
            if esc < 0:
                esc = j
            if j + 1 >= e:
                return -1, esc
            d = buf[j + 1]
            if d == 117:
                cp = _hex4(buf, j + 2, e)
                if cp < 0 or 0xDC00 <= cp <= 0xDFFF:
                    return -1, esc
                if 0xD800 <= cp <= 0xDBFF:
                    # a lone surrogate is read differently by Python's json and pyarrow: not here
                    if j + 12 > e or buf[j + 6] != 92 or buf[j + 7] != 117:
                        return -1, esc
                    low = _hex4(buf, j + 8, e)
                    if not (0xDC00 <= low <= 0xDFFF):
                        return -1, esc
                    j += 12
                else:
                    j += 6
            elif d == 34 or d == 92 or d == 47 or d == 98 or d == 102 or d == 110 or d == 114 or d == 116:
                j += 2
            else:
                return -1, esc
        elif c < 32:
            return -1, esc
        elif c < 128:
            j += 1
        else:
            n = _utf8(buf, j, e)
            if n == 0:
                return -1, esc
            j += n
    return -1, esc


@numba.njit(cache=True, nogil=True, inline="always")
def _number(buf: np.ndarray, i: int, e: int) -> int:
    """The end of the strict JSON number at ``i``, or -1."""
    if i < e and buf[i] == 45:
        i += 1
    if i >= e:
        return -1
    if buf[i] == 48:
        i += 1
    elif 49 <= buf[i] <= 57:
        while i < e and 48 <= buf[i] <= 57:
            i += 1
    else:
        return -1
    if i < e and buf[i] == 46:
        i += 1
        if not (i < e and 48 <= buf[i] <= 57):
            return -1
        while i < e and 48 <= buf[i] <= 57:
            i += 1
    if i < e and (buf[i] == 101 or buf[i] == 69):
        i += 1
        if i < e and (buf[i] == 43 or buf[i] == 45):
            i += 1
        if not (i < e and 48 <= buf[i] <= 57):
            return -1
        while i < e and 48 <= buf[i] <= 57:
            i += 1
    return i


@numba.njit(cache=True, nogil=True, inline="always")
def _literal(buf: np.ndarray, i: int, e: int, a: int, b: int, c: int, d: int) -> bool:
    return i + 4 <= e and buf[i] == a and buf[i + 1] == b and buf[i + 2] == c and buf[i + 3] == d


@numba.njit(cache=True, nogil=True, inline="always")
def _child(buf: np.ndarray, ks: int, ke: int, node: int, key_start: np.ndarray, key_end: np.ndarray,
           keys: np.ndarray, first_child: np.ndarray, next_sibling: np.ndarray) -> int:
    c = first_child[node]
    while c >= 0:
        a, b = key_start[c], key_end[c]
        if b - a == ke - ks:
            same = True
            for k in range(b - a):
                if keys[a + k] != buf[ks + k]:
                    same = False
                    break
            if same:
                return c  # type: ignore[no-any-return]
        c = next_sibling[c]
    return -1


# parser states
_OBJ_FIRST, _OBJ_NEXT, _ARR_FIRST, _ARR_NEXT, _AFTER = 0, 1, 2, 3, 4


@numba.njit(cache=True, nogil=True, inline="always")
def _record(buf: np.ndarray, words: np.ndarray, off: int, wend: int, s: int, e: int, key_start: np.ndarray, key_end: np.ndarray, keys: np.ndarray,
            first_child: np.ndarray, next_sibling: np.ndarray, slot: np.ndarray, kind: np.ndarray,
            sl_s: np.ndarray, sl_e: np.ndarray, sl_esc: np.ndarray, seen: np.ndarray, st_obj: np.ndarray,
            st_node: np.ndarray, tag_prefix: np.ndarray, tag: np.ndarray) -> bool:
    """Walk one record; wanted strings into ``sl_s``/``sl_e``/``sl_esc`` (-1: absent), pod tag into ``tag``."""
    i = _ws(buf, s, e)
    if i >= e or buf[i] != 123:
        return False
    depth = 1
    st_obj[0] = True
    st_node[0] = 0
    i += 1
    state = _OBJ_FIRST
    n_pre = tag_prefix.size
    while True:
        i = _ws(buf, i, e)
        if state == _AFTER:
            if depth == 0:
                return i == e
            if i >= e:
                return False
            c = buf[i]
            if c == 44:
                state = _OBJ_NEXT if st_obj[depth - 1] else _ARR_NEXT
                i += 1
            elif (c == 125 and st_obj[depth - 1]) or (c == 93 and not st_obj[depth - 1]):
                depth -= 1
                i += 1
            else:
                return False
            continue
        if i >= e:
            return False
        c = buf[i]
        vnode = -1  # the key-tree node of the value (-1: not followed)
        vtag = False  # an element of the followed tag list
        if state in (_OBJ_FIRST, _OBJ_NEXT):
            if c == 125 and state == _OBJ_FIRST:
                depth -= 1
                i += 1
                state = _AFTER
                continue
            if c != 34:
                return False
            q, esc = _string(buf, words, off, wend, i, e)
            if q < 0:
                return False
            node = st_node[depth - 1]
            if node >= 0:
                if esc >= 0:
                    return False  # the key may spell a wanted one
                vnode = _child(buf, i + 1, q, node, key_start, key_end, keys, first_child, next_sibling)
                if vnode >= 0:
                    if seen[vnode]:
                        return False  # a key given twice: Python keeps the last, pyarrow refuses
                    seen[vnode] = True
            i = _ws(buf, q + 1, e)
            if i >= e or buf[i] != 58:
                return False
            i = _ws(buf, i + 1, e)
            if i >= e:
                return False
            c = buf[i]
        else:
            if c == 93 and state == _ARR_FIRST:
                depth -= 1
                i += 1
                state = _AFTER
                continue
            vtag = st_node[depth - 1] >= 0
        state = _AFTER
        if c == 34:
            q, esc = _string(buf, words, off, wend, i, e)
            if q < 0:
                return False
            if vnode >= 0:
                sl = slot[vnode]
                if sl < 0 or kind[vnode] == _K_TAGS:
                    return False
                sl_s[sl] = i + 1
                sl_e[sl] = q
                sl_esc[sl] = esc
            elif vtag and tag[0] < 0:
                if esc >= 0:
                    return False
                if q - (i + 1) >= n_pre:
                    hit = True
                    for k in range(n_pre):
                        if buf[i + 1 + k] != tag_prefix[k]:
                            hit = False
                            break
                    if hit:
                        tag[0] = i + 1 + n_pre
                        tag[1] = q
            i = q + 1
        elif c == 123 or c == 91:
            if depth >= _MAX_DEPTH or vtag:
                return False
            if c == 123:
                if vnode >= 0 and first_child[vnode] < 0:
                    return False  # an object where a string is wanted
                st_obj[depth] = True
                st_node[depth] = vnode
                state = _OBJ_FIRST
            else:
                if vnode >= 0 and kind[vnode] != _K_TAGS:
                    return False
                st_obj[depth] = False
                st_node[depth] = vnode
                state = _ARR_FIRST
            depth += 1
            i += 1
        elif c == 110:
            if not _literal(buf, i, e, 110, 117, 108, 108) or vtag:
                return False
            i += 4  # null: a wanted value absent
        elif c == 116 or c == 102:
            if vnode >= 0 or vtag:
                return False
            if c == 116:
                if not _literal(buf, i, e, 116, 114, 117, 101):
                    return False
                i += 4
            else:
                if not (_literal(buf, i, e, 102, 97, 108, 115) and i + 4 < e and buf[i + 4] == 101):
                    return False
                i += 5
        else:
            if vnode >= 0 or vtag:
                return False
            i = _number(buf, i, e)
            if i < 0:
                return False


@numba.njit(cache=True, nogil=True, inline="always")
def _next_slash(buf: np.ndarray, words: np.ndarray, off: int, wend: int, j: int, e: int) -> int:
    """The next backslash at or after ``j`` before ``e`` (or ``e``), aligned words 8 bytes at a time."""
    while j < e:
        if j >= off and ((j - off) & 7) == 0:
            lim = min(e, wend)
            while j + 8 <= lim:
                x = words[(j - off) >> 3] ^ _SLASHES
                if ((x - _ONES) & ~x & _HIGH) != 0:
                    break
                j += 8
            if j >= e:
                break
        if buf[j] == 92:
            return j
        j += 1
    return e


@numba.njit(cache=True, nogil=True, inline="always")
def _copy(src: np.ndarray, i: int, n: int, dst: np.ndarray, o: int) -> None:
    a = src[i : i + n]
    b = dst[o : o + n]
    for k in range(n):
        b[k] = a[k]


@numba.njit(cache=True, nogil=True)
def _unescape(buf: np.ndarray, words: np.ndarray, off: int, wend: int, esc: int, vs: int, ve: int,
              out: np.ndarray, o: int) -> tuple[int, bool]:
    """Unescape the (checked) JSON string ``buf[vs:ve]`` whose first escape is at ``esc`` into ``out``.

    Returns the end in ``out`` and whether a newline is written before the last byte (the text
    then holds several lines: its last newline is the line end, cut later).
    """
    nl_at = -1
    inner = False
    i = vs
    j = esc
    while True:
        # the run up to the next backslash is copied as it is (an element loop over two views
        # compiles to a memcpy; a slice assignment or indexing the whole arrays does not)
        _copy(buf, i, j - i, out, o)
        o += j - i
        i = j
        if i >= ve:
            break
        e = buf[i + 1]
        step = 2
        if e == 117:  # u: checked by _string, surrogate pairs complete
            cp = _hex4(buf, i + 2, ve)
            step = 6
            if 0xD800 <= cp <= 0xDBFF:
                cp = 0x10000 + ((cp - 0xD800) << 10) + (_hex4(buf, i + 8, ve) - 0xDC00)
                step = 12
            o = put_utf8(out, o, cp)
            if cp == 10:
                inner = inner or nl_at >= 0
                nl_at = o - 1
        else:  # checked by _string: one of n t r b f " \ /
            if e == 110:
                inner = inner or nl_at >= 0
                nl_at = o
            out[o] = escape_byte(e)
            o += 1
        i += step
        j = _next_slash(buf, words, off, wend, i, ve)
    return o, inner or (nl_at >= 0 and nl_at != o - 1)


@numba.njit(cache=True, nogil=True)
def _scan(buf: np.ndarray, words: np.ndarray, off: int, r_start: np.ndarray, r_end: np.ndarray, key_start: np.ndarray, key_end: np.ndarray,
          keys: np.ndarray, first_child: np.ndarray, next_sibling: np.ndarray, slot: np.ndarray, kind: np.ndarray,
          field_ptr: np.ndarray, field_slots: np.ndarray, n_slots: int, tag_prefix: np.ndarray,
          digits_time: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                      np.ndarray]:
    n = r_start.size
    ok = np.zeros(n, dtype=np.bool_)
    start = np.full((n, N_FIELDS), -1, dtype=np.int64)
    end = np.full((n, N_FIELDS), -1, dtype=np.int64)
    us = np.zeros(n, dtype=np.int64)
    stream = np.zeros(n, dtype=np.int8)
    extra = np.empty(buf.size, dtype=np.uint8)  # unescaped texts are never longer than their records
    inner_nl = np.zeros(n, dtype=np.bool_)
    o = 0
    base = buf.size
    wend = off + words.size * 8
    sl_s = np.empty(n_slots, dtype=np.int64)
    sl_e = np.empty(n_slots, dtype=np.int64)
    sl_esc = np.zeros(n_slots, dtype=np.int64)
    seen = np.zeros(first_child.size, dtype=np.bool_)
    st_obj = np.zeros(_MAX_DEPTH, dtype=np.bool_)
    st_node = np.zeros(_MAX_DEPTH, dtype=np.int64)
    tag = np.empty(2, dtype=np.int64)
    for r in range(n):
        sl_s[:] = -1
        seen[:] = False
        tag[0] = -1
        if not _record(buf, words, off, wend, r_start[r], r_end[r], key_start, key_end, keys, first_child, next_sibling, slot, kind,
                       sl_s, sl_e, sl_esc, seen, st_obj, st_node, tag_prefix, tag):
            continue
        good = True
        for f in range(N_FIELDS):
            if f == TAG:
                if tag[0] >= 0:
                    start[r, f] = tag[0]
                    end[r, f] = tag[1]
                continue
            for k in range(field_ptr[f], field_ptr[f + 1]):
                sl = field_slots[k]
                if sl_s[sl] < 0:
                    continue
                # the first non-empty value wins; an empty one only when no other has a value
                esc = sl_esc[sl]
                if sl_e[sl] == sl_s[sl] or (esc >= 0 and f != MSG):
                    good = False
                start[r, f] = sl_s[sl]
                end[r, f] = sl_e[sl]
                if f == MSG and esc >= 0 and esc == sl_e[sl] - 2 and buf[esc + 1] == 110:
                    # the only escape is a final newline: the text stays in place without it (the
                    # byte before cannot be a newline or CR, so the line's end is not cut again)
                    end[r, f] = esc
                elif f == MSG and esc >= 0:
                    o2, nl_inside = _unescape(buf, words, off, wend, esc, sl_s[sl], sl_e[sl], extra, o)
                    start[r, f] = base + o
                    end[r, f] = base + o2
                    inner_nl[r] = nl_inside
                    o = o2
                break
        if not good or start[r, MSG] < 0:
            continue  # no text (journald's null MESSAGE): the general path says why
        ts, te = start[r, TIME], end[r, TIME]
        if digits_time and ts >= 0:
            if te - ts > 18:
                continue
            v = np.int64(0)
            for k in range(ts, te):
                d = np.int64(buf[k]) - 48
                if d < 0 or d > 9:
                    good = False
                    break
                v = v * 10 + d
            if not good:
                continue
            us[r] = v
        ss, se = start[r, STREAM], end[r, STREAM]
        if ss >= 0 and se - ss == 6 and buf[ss] == 115 and buf[ss + 1] == 116 and buf[ss + 2] == 100:
            if buf[ss + 3] == 111 and buf[ss + 4] == 117 and buf[ss + 5] == 116:
                stream[r] = 1
            elif buf[ss + 3] == 101 and buf[ss + 4] == 114 and buf[ss + 5] == 114:
                stream[r] = 2
        ok[r] = True
    return ok, start, end, us, stream, inner_nl, extra[:o]


@numba.njit(cache=True, nogil=True)
def _gather(data: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = start.size
    off = np.zeros(n + 1, dtype=np.int64)
    for r in range(n):
        off[r + 1] = off[r] + (end[r] - start[r] if start[r] >= 0 else 0)
    out = np.empty(off[n], dtype=np.uint8)
    for r in range(n):
        if start[r] >= 0:
            _copy(data, start[r], end[r] - start[r], out, off[r])
    return off, out


def gather_strings(data: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The spans as Arrow large-string parts: ``(offsets, bytes, valid)`` (start -1: null)."""
    off, out = _gather(read_only(data), start.astype(np.int64), end.astype(np.int64))
    return off, out, start >= 0
