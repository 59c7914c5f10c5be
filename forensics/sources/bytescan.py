"""Where a block's bytes of one class lie, found in one vectorised pass: newlines, the tokeniser's
special bytes, escape and non-ASCII bytes.

A block is several MiB. Comparing it with numpy (``buf == 10``) and taking the positions
(``np.flatnonzero``) made a temporary array as large as the block on every block, and its fresh
pages cost more than the comparison (a reading thread's ``LineBatch.from_bytes`` took ~5 s of a
1 M-request ingest, measured). Here a compiled loop LLVM vectorises marks the class into a
thread's scratch of :data:`CHUNK` bytes (it stays in cache), numpy packs the marks into a bitmap,
and the positions are read off the bitmap a 64-bit word at a time.

Example:
    >>> buf = np.frombuffer(b"ab\\ncd\\n\\nx='y'", dtype=np.uint8)
    >>> newlines(buf).tolist()
    [2, 5, 6]
    >>> positions(bitmap(buf, SPECIAL)).tolist(), next_set(bitmap(buf, SPECIAL), 10, 11)
    ([8, 9, 11], 11)
    >>> byte_counts(np.frombuffer(b"\\x1b[0m caf\\xc3\\xa9", dtype=np.uint8))
    (1, 2)
"""

from __future__ import annotations

import threading

import numba
import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from forensics.sources.lines import read_only

#: Bytes marked per step (a thread's scratch; small enough to stay in the core's cache).
CHUNK = 1 << 20

#: Byte classes: which bytes :func:`bitmap` marks.
NEWLINE, SPECIAL = 0, 1

_SCRATCH = threading.local()


@numba.njit(cache=True, nogil=True)
def _mark(buf: np.ndarray, a: int, b: int, cls: int, out: np.ndarray) -> None:
    # flat loops LLVM vectorises (~17 GB/s measured; indexing buf[a + i] instead of a slice of it
    # kept them scalar, 1.3 GB/s); the tail of the last word is zeroed
    src = buf[a:b]
    n = src.shape[0]
    if cls == NEWLINE:
        for i in range(n):
            out[i] = src[i] == 10
    else:
        # the request tokeniser's stops: the quotes, the backslash and '='
        for i in range(n):
            c = src[i]
            out[i] = (c == 39) | (c == 34) | (c == 92) | (c == 61)
    for i in range(n, (n + 63) & ~63):
        out[i] = 0


def bitmap(buf: np.ndarray, cls: int) -> np.ndarray:
    """The bytes of class ``cls`` (:data:`NEWLINE`, :data:`SPECIAL`) as bits: bit ``i & 63`` of word
    ``i >> 6`` is set when ``buf[i]`` is of the class (one word more than the bytes need).

    Example:
        >>> bm = bitmap(np.frombuffer(b"ab='c'", dtype=np.uint8), SPECIAL)
        >>> [i for i in range(6) if int(bm[0]) >> i & 1]
        [2, 3, 5]
    """
    buf = read_only(buf)  # one numba compile per kernel, whatever the block's flavour
    n = int(buf.shape[0])
    words = np.zeros(n // 64 + 1, dtype=np.uint64)
    scratch = getattr(_SCRATCH, "marks", None)
    if scratch is None:
        scratch = _SCRATCH.marks = np.empty(CHUNK, dtype=np.uint8)
    for a in range(0, n, CHUNK):
        b = min(a + CHUNK, n)
        _mark(buf, a, b, cls, scratch)
        used = (b - a + 63) & ~63
        words[a // 64 : a // 64 + used // 64] = np.packbits(scratch[:used], bitorder="little").view(np.uint64)
    return words


@numba.njit(cache=True, nogil=True)
def _positions(words: np.ndarray, out: np.ndarray) -> int:
    k = 0
    for w in range(words.shape[0]):
        m = words[w]
        while m != 0:
            if k < out.shape[0]:
                out[k] = (w << 6) + int(trailing_zeros(m))  # type: ignore[call-arg]
            k += 1
            m &= m - np.uint64(1)
    return k


@numba.njit(cache=True, nogil=True, inline="always")
def next_set(words: np.ndarray, p: int, e: int) -> int:
    """The first position >= ``p`` and < ``e`` whose bit is set in the bitmap ``words``, else ``e``."""
    if p >= e:
        return e
    w = p >> 6
    m = words[w] >> np.uint64(p & 63)
    if m != 0:
        r = p + int(trailing_zeros(m))  # type: ignore[call-arg]
        return r if r < e else e
    w += 1
    last = (e - 1) >> 6
    while w <= last:
        m = words[w]
        if m != 0:
            r = (w << 6) + int(trailing_zeros(m))  # type: ignore[call-arg]
            return r if r < e else e
        w += 1
    return e


def positions(words: np.ndarray, expect: int = 0) -> np.ndarray:
    """The positions of the set bits of a :func:`bitmap`, in order (int64).

    Example:
        >>> positions(bitmap(np.frombuffer(b"a\\nb\\n", dtype=np.uint8), NEWLINE)).tolist()
        [1, 3]
    """
    out = np.empty(max(expect, 64), dtype=np.int64)
    k = _positions(words, out)
    if k > out.shape[0]:
        out = np.empty(k, dtype=np.int64)
        _positions(words, out)
    return out[:k]


def newlines(buf: np.ndarray) -> np.ndarray:
    """Positions of the ``\\n`` bytes of ``buf`` (int64, in order).

    Example:
        >>> newlines(np.frombuffer(b"x\\n\\n", dtype=np.uint8)).tolist()
        [1, 2]
    """
    # a first guess of the count: log lines are rarely shorter than 64 bytes
    return positions(bitmap(buf, NEWLINE), int(buf.shape[0]) // 64)


@numba.njit(cache=True, nogil=True)
def _counts(buf: np.ndarray) -> tuple[int, int]:
    esc = 0
    high = 0
    for i in range(buf.shape[0]):
        c = buf[i]
        esc += c == 27
        high += c >> 7
    return esc, high


def byte_counts(buf: np.ndarray) -> tuple[int, int]:
    """(ESC bytes, bytes >= 0x80) of ``buf``: whether ANSI codes may be there, and whether the
    block is ASCII (valid UTF-8 without checking).

    Example:
        >>> byte_counts(np.frombuffer(b"plain", dtype=np.uint8))
        (0, 0)
    """
    esc, high = _counts(read_only(buf))
    return int(esc), int(high)
