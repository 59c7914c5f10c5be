"""Compiled helpers shared by the extractors: values as spans of the line buffer, and their types.

An extractor never builds a Python string per line: it records where each value lies in the
batch's buffer (``start``, ``end``; ``start < 0`` means absent) and these helpers turn the spans
into Arrow arrays in one gather, and parse integers the way DuckDB's ``TRY_CAST`` does. Plain
integers (sign and up to 18 digits) are parsed here; anything else DuckDB would still accept
(``1.5``, ``1e3``, ``0x10``, ``5_000``) is marked *odd* and cast by DuckDB itself, so there is one
rule for what a number is.

Example:
    >>> import numpy as np
    >>> buf = np.frombuffer(b"rid='a1', port=8998, n=1.5", dtype=np.uint8)
    >>> to_strings(buf, np.array([5]), np.array([7])).to_pylist()
    ['a1']
    >>> parse_ints(buf, np.array([15, 23]), np.array([19, 26]))
    (array([8998,    0]), array([1, 2], dtype=int8))
"""

from __future__ import annotations

import numba
import numpy as np
import pyarrow as pa

from forensics.sources.lines import read_only

#: ``parse_ints`` states: no value, a value, a text DuckDB must cast.
INT_NULL, INT_OK, INT_ODD = 0, 1, 2


@numba.njit(cache=True, nogil=True)
def _gather(buf: np.ndarray, s: np.ndarray, e: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    n = s.shape[0]
    total = 0
    for i in range(n):
        offsets[i] = total
        if s[i] >= 0:
            total += e[i] - s[i]
    offsets[n] = total
    out = np.empty(total, dtype=np.uint8)
    for i in range(n):
        if s[i] >= 0:
            o = offsets[i]
            out[o : o + e[i] - s[i]] = buf[s[i] : e[i]]
    return out


def _c64(a: np.ndarray) -> np.ndarray:
    """``a`` as contiguous int64 (a copy only if it is a strided column or of another type): one
    compiled flavour of each kernel, not one more for the columns of a 2-D span array."""
    return np.ascontiguousarray(a, dtype=np.int64)


def to_strings(buf: np.ndarray, s: np.ndarray, e: np.ndarray, *, large: bool = False) -> pa.Array:
    """Spans of ``buf`` as an Arrow string array (``s < 0``: NULL). The bytes must be valid UTF-8.

    Example:
        >>> buf = np.frombuffer(b"abc", dtype=np.uint8)
        >>> to_strings(buf, np.array([0, -1, 1]), np.array([2, 0, 3])).to_pylist()
        ['ab', None, 'bc']
    """
    n = int(s.shape[0])
    offsets = np.empty(n + 1, dtype=np.int64)
    data = _gather(read_only(buf), _c64(s), _c64(e), offsets)
    valid = s >= 0
    mask = None if valid.all() else pa.array(valid).buffers()[1]
    if not large and offsets[-1] < (1 << 31) - 1:
        return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data), mask)
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data), mask)


@numba.njit(cache=True, nogil=True)
def parse_int(buf: np.ndarray, s: int, e: int) -> tuple[int, int]:
    """(value, state) of the text buf[s:e]; surrounding spaces are ignored as DuckDB does."""
    if s < 0:
        return 0, INT_NULL
    while s < e and buf[s] == 32:
        s += 1
    while e > s and buf[e - 1] == 32:
        e -= 1
    if s == e:
        return 0, INT_NULL
    neg = False
    i = s
    if buf[i] == 45 or buf[i] == 43:
        neg = buf[i] == 45
        i += 1
    if i == e or e - i > 19:
        return 0, INT_ODD
    v = 0
    for k in range(i, min(e, i + 18)):
        c = buf[k]
        if c < 48 or c > 57:
            return 0, INT_ODD
        v = v * 10 + (c - 48)
    if e - i == 19:
        # the 19th digit: within int64 or NULL (TRY_CAST of a number that does not fit)
        c = buf[e - 1]
        if c < 48 or c > 57:
            return 0, INT_ODD
        d = c - 48
        limit = 922337203685477580
        if v > limit or (v == limit and d > (8 if neg else 7)):
            return 0, INT_NULL
        if neg and v == limit and d == 8:
            return -9223372036854775807 - 1, INT_OK
        v = v * 10 + d
    return (-v if neg else v), INT_OK


@numba.njit(cache=True, nogil=True)
def _parse_ints(buf: np.ndarray, s: np.ndarray, e: np.ndarray, val: np.ndarray, st: np.ndarray) -> None:
    for i in range(s.shape[0]):
        v, k = parse_int(buf, s[i], e[i])
        val[i] = v
        st[i] = k


def parse_ints(buf: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vector form of :func:`parse_int`: (values, states)."""
    val = np.empty(s.shape[0], dtype=np.int64)
    st = np.empty(s.shape[0], dtype=np.int8)
    _parse_ints(read_only(buf), _c64(s), _c64(e), val, st)
    return val, st


_INT64 = pa.int64()


def int_array(con: object, buf: np.ndarray, s: np.ndarray, e: np.ndarray, val: np.ndarray, st: np.ndarray,
              arrow_type: pa.DataType = _INT64) -> pa.Array:
    """Typed Arrow integers from parsed values; odd texts are cast by DuckDB (``TRY_CAST``).

    Example:
        >>> import duckdb
        >>> buf = np.frombuffer(b"7 1e3 x 99999999999", dtype=np.uint8)
        >>> s, e = np.array([0, 2, 6, 8]), np.array([1, 5, 7, 19])
        >>> v, st = parse_ints(buf, s, e)
        >>> int_array(duckdb.connect(), buf, s, e, v, st, pa.int32()).to_pylist()
        [7, 1000, None, None]
    """
    import duckdb

    out = val.copy()
    valid = st == INT_OK
    odd = np.flatnonzero(st == INT_ODD)
    sql_type = {pa.int64(): "BIGINT", pa.int32(): "INTEGER"}[arrow_type]
    if arrow_type == pa.int32():
        big = valid & ((out > 2**31 - 1) | (out < -(2**31)))
        valid &= ~big
        out[big] = 0
    if odd.size:
        texts = to_strings(buf, s[odd], e[odd])
        assert isinstance(con, duckdb.DuckDBPyConnection)
        casted = con.execute(f"SELECT try_cast(x AS {sql_type}) FROM (SELECT unnest($t) AS x)",
                             {"t": texts.to_pylist()}).fetchall()
        for i, (v,) in zip(odd.tolist(), casted, strict=True):
            if v is not None:
                out[i] = v
                valid[i] = True
    return pa.array(out.astype(np.int32) if arrow_type == pa.int32() else out, type=arrow_type,
                    mask=~valid)
