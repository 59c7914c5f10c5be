"""Arrow columns of parsed JSON records: a dotted path's values, the first of several, tags, streams.

The helpers :mod:`.records` uses on the table pyarrow's JSON reader returns (and on the buffer it
is given): values by dotted path, the first non-empty of candidate paths, schema retyping, the
pod in a tag list or a CloudWatch stream name, stream codes.

Example:
    >>> tbl = pa.table({"a": pa.array([{"b": "x"}, {"b": ""}])})
    >>> first_value(tbl, ("a.b",)).to_pylist()
    ['x', '']
    >>> stream_codes(pa.array(["stdout", "stderr", None])).tolist()
    [1, 2, 0]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from forensics.sources.collect.record_formats import split_path
from forensics.sources.lines import STREAM_STDERR, STREAM_STDOUT, STREAM_UNKNOWN


def json_lines(buf: np.ndarray, r_start: np.ndarray, r_end: np.ndarray, *, whole: bool) -> pa.Buffer:
    """The records as JSON lines for pyarrow's reader (which skips blank lines).

    ``whole``: the records are every non-blank line of ``buf``: the buffer is read in place.
    Otherwise one copy of the buffer where every byte outside a record is a space, newlines inside
    a record (a pretty-printed document) are spaces, and each record ends its line.
    """
    if whole:
        return pa.py_buffer(buf)
    keep = np.zeros(buf.size + 1, dtype=np.int8)
    np.add.at(keep, r_start, 1)
    np.add.at(keep, r_end, -1)
    inside = np.cumsum(keep[:-1], dtype=np.int8).view(np.bool_)
    out = np.where(inside, buf, np.uint8(32))
    out[inside & ((out == 10) | (out == 13))] = 32
    end_in = r_end[r_end < buf.size]
    out[end_in] = 10
    if r_end.size and int(r_end[-1]) >= buf.size:
        out = np.append(out, np.uint8(10))
    return pa.py_buffer(out)



def binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The data bytes and ``len + 1`` offsets of a large_binary array (nulls as empty)."""
    arr = arr.cast(pa.large_binary())
    if arr.null_count:
        arr = pc.fill_null(arr, b"")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, dtype=np.uint8)
    return data, offsets.astype(np.int64)


def get_path(tbl: pa.Table, path: str) -> pa.Array:
    parts = split_path(path)
    if parts[0] not in tbl.column_names:
        return pa.nulls(tbl.num_rows, pa.large_string())
    col: Any = tbl.column(parts[0]).combine_chunks()
    for part in parts[1:]:
        if not pa.types.is_struct(col.type) or col.type.get_field_index(part) < 0:
            return pa.nulls(tbl.num_rows, pa.large_string())
        col = pc.struct_field(col, [col.type.get_field_index(part)])
    return col


def first_value(tbl: pa.Table, paths: tuple[str, ...]) -> pa.Array:
    """The first non-null, non-empty value over the candidate paths, as text.

    An empty string counts only when no other path has a value (an empty message is a blank
    line, not a missing one). Paths that hold an object or a list here are skipped.
    """
    out: pa.Array | None = None
    empty: pa.Array | None = None
    for p in paths:
        col = get_path(tbl, p)
        if pa.types.is_nested(col.type) or col.null_count == len(col):
            continue  # an object or list here, or a path no record of the batch has
        col = col.cast(pa.large_string())
        if empty is None:
            empty = col
        if out is not None and out.null_count == 0:
            break  # every record has a value already
        if pc.any(pc.equal(col, "")).as_py():
            col = pc.if_else(pc.equal(col, ""), pa.scalar(None, pa.large_string()), col)
        out = col if out is None else pc.coalesce(out, col)
    if out is None or empty is None:
        return pa.nulls(tbl.num_rows, pa.large_string())
    return pc.coalesce(out, empty)


def with_list(schema: pa.Schema, path: str) -> pa.Schema:
    return retype(schema, (path,), pa.list_(pa.string()))


def retype(schema: pa.Schema, paths: tuple[str, ...], typ: pa.DataType) -> pa.Schema:
    def fix(t: pa.DataType, parts: list[str]) -> pa.DataType:
        if len(parts) == 0:
            return typ
        if not pa.types.is_struct(t):
            return t
        fields = []
        for i in range(t.num_fields):
            f = t.field(i)
            fields.append(pa.field(f.name, fix(f.type, parts[1:]) if f.name == parts[0] else f.type))
        return pa.struct(fields)

    out = schema
    for p in paths:
        parts = split_path(p)
        i = out.get_field_index(parts[0])
        if i < 0:
            continue
        f = out.field(i)
        out = out.set(i, pa.field(f.name, fix(f.type, parts[1:]) if len(parts) > 1 else typ))
    return out


def tag_value(tags: pa.Array, prefix: str) -> pa.Array:
    """The value of the first ``prefix...`` tag of each record's tag list (null if none)."""
    if not (pa.types.is_list(tags.type) or pa.types.is_large_list(tags.type)):
        return pa.nulls(len(tags), pa.large_string())
    flat = pc.list_flatten(tags)
    parent = pc.list_parent_indices(tags).to_numpy(zero_copy_only=False)
    hit = pc.starts_with(flat, prefix).fill_null(False).to_numpy(zero_copy_only=False)
    out: list[str | None] = [None] * len(tags)
    vals = pc.utf8_slice_codeunits(flat, len(prefix)).to_pylist() if hit.any() else []
    for j in np.flatnonzero(hit).tolist()[::-1]:
        out[int(parent[j])] = vals[j]
    return pa.array(out, type=pa.large_string())


def pod_of_stream(streams: pa.Array) -> pa.Array:
    """The pod in a CloudWatch log stream name written by Fluent Bit / Container Insights.

    ``kube.var.log.containers.<pod>_<ns>_<container>-<id>.log`` and ``<pod>_<ns>_<container>-<id>``
    give ``<pod>``; any other stream name is kept whole (it names the source).
    """
    s = streams.cast(pa.large_string())
    m = pc.extract_regex(
        s, r"^(?:.*containers[./])?(?P<pod>[a-z0-9][a-z0-9.\-]*)_(?P<ns>[a-z0-9\-]+)_(?P<c>[a-z0-9\-]+)-[0-9a-f]{64}(?:\.log)?$")
    pod = pc.struct_field(m, [0])
    return pc.coalesce(pod, s)


def stream_codes(stream: pa.Array) -> np.ndarray:
    if len(stream) == 0:
        return np.zeros(0, dtype=np.int8)
    s = stream.cast(pa.large_string())
    out = np.full(len(s), STREAM_UNKNOWN, dtype=np.int8)
    out[pc.equal(s, "stdout").fill_null(False).to_numpy(zero_copy_only=False)] = STREAM_STDOUT
    out[pc.equal(s, "stderr").fill_null(False).to_numpy(zero_copy_only=False)] = STREAM_STDERR
    return out


