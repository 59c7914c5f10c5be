"""Reading an engine log file as :class:`~forensics.sources.lines.LineBatch` blocks.

Plain, gzip (every member, inflated with ISA-L) and zstd (every frame) files are read in blocks of
whole lines; the line numbers and byte offsets of the decompressed stream continue from block to
block, so any line can be read again later from its offset (:func:`read_line_at`). A stream that
breaks off keeps what was readable: the cut last line is set aside (rejected with its reason by
the loader) and the file is flagged incomplete.

Two repairs are made per line, never silently: invalid UTF-8 bytes become U+FFFD (counted, first
line noted) and ANSI colour codes are removed; the offsets still point at the bytes on disk.

Example:
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.log"; _ = p.write_bytes(b"a\\n\\x1b[32mb\\x1b[0m\\nc")
    >>> st = ReadState()
    >>> [(int(b.line_no[i]), b.line(i)) for b in read_batches(p, "none", st) for i in range(len(b))]
    [(1, b'a'), (2, b'b'), (3, b'c')]
    >>> read_line_at(p, 2)
    b'\\x1b[32mb\\x1b[0m'
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np
import pyarrow as pa

from forensics.sources.files import compression_of
from forensics.sources.lines import LineBatch

#: Decompressed bytes per block handed to the scanner.
BLOCK_BYTES = 16 << 20

_ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class ReadState:
    """What reading one file found besides its lines."""

    lines: int = 0
    complete: bool = True
    warning: str | None = None
    #: the partial last line of a stream that broke off (rejected by the loader)
    cut_line: bytes | None = None
    cut_line_no: int = 0
    bad_utf8_count: int = 0
    bad_utf8_lines: list[int] = field(default_factory=list)
    bytes_read: int = 0


def _raw_blocks(path: Path, comp: str, state: ReadState, size: int) -> Iterator[bytes]:
    """Decompressed blocks of a file; a truncated/corrupt stream ends early and is noted."""
    if comp == "gzip":
        from isal import igzip_lib, isal_zlib

        d = isal_zlib.decompressobj(16 + zlib.MAX_WBITS)
        with open(path, "rb") as fh:
            try:
                # small compressed reads: logs compress ~15x, a full-size read would inflate to a
                # block far larger than `size` and break the memory bound
                while block := fh.read(max(1, size // 32)):
                    out = d.decompress(block)
                    while d.eof and d.unused_data:
                        rest = d.unused_data
                        d = isal_zlib.decompressobj(16 + zlib.MAX_WBITS)
                        out += d.decompress(rest)
                    if out:
                        yield out
                if not d.eof:
                    state.complete = False
                    state.warning = "gzip stream is truncated; the readable prefix was loaded"
            except (zlib.error, cast("type[Exception]", igzip_lib.IsalError)) as exc:
                state.complete = False
                state.warning = f"gzip stream is corrupt ({exc}); the readable prefix was loaded"
    elif comp == "zstd":
        import zstandard

        with open(path, "rb") as raw:
            reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
            try:
                while block := reader.read(size):
                    yield block
            except zstandard.ZstdError as exc:
                state.complete = False
                state.warning = f"zstd stream is truncated or corrupt ({exc}); the readable prefix was loaded"
    else:
        with open(path, "rb") as fh:
            while block := fh.read(size):
                yield block


def _valid_utf8(data: np.ndarray) -> bool:
    # Arrow's validation is vectorised (far cheaper than bytes.decode on multi-MB blocks)
    arr = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 1, [None, pa.py_buffer(
        np.array([0, data.size], dtype=np.int64)), pa.py_buffer(data)])
    try:
        arr.cast(pa.large_string())
    except pa.ArrowInvalid:
        return False
    return True


def _repair(batch: LineBatch, state: ReadState) -> LineBatch:
    """Lines with invalid UTF-8 or ANSI codes rewritten (into an extension of the buffer)."""
    buf = batch.buf
    has_esc = bool(np.any(buf == 27))
    valid = _valid_utf8(buf)
    if valid and not has_esc:
        return batch
    extra = bytearray()
    base = buf.size
    starts = batch.starts.copy()
    ends = batch.ends.copy()
    for i in range(len(batch)):
        raw = buf[starts[i] : ends[i]].tobytes()
        fixed = raw
        if not valid:
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                fixed = raw.decode("utf-8", "replace").encode("utf-8")
                state.bad_utf8_count += 1
                if len(state.bad_utf8_lines) < 5:
                    state.bad_utf8_lines.append(int(batch.line_no[i]))
        if has_esc and 27 in fixed:
            fixed = _ANSI.sub(b"", fixed)
        if fixed is not raw:
            starts[i] = base + len(extra)
            extra += fixed
            ends[i] = base + len(extra)
    new = np.concatenate([buf, np.frombuffer(bytes(extra), dtype=np.uint8)]) if extra else buf
    return LineBatch(buf=new, starts=starts, ends=ends, line_no=batch.line_no, offset=batch.offset,
                     phys_lines=batch.phys_lines)


def read_batches(path: Path, comp: str, state: ReadState, block_bytes: int = BLOCK_BYTES) -> Iterator[LineBatch]:
    """The file's lines as LineBatch blocks (1-based line numbers, decompressed byte offsets)."""
    pending = b""
    next_line = 1
    offset = 0
    for block in _raw_blocks(path, comp, state, block_bytes):
        data = pending + block if pending else block
        cut = data.rfind(b"\n")
        if cut < 0:
            pending = data
            continue
        pending = data[cut + 1 :]
        whole = data[: cut + 1]
        b = LineBatch.from_bytes(whole, first_line=next_line, first_offset=offset)
        next_line += len(b)
        offset += len(whole)
        state.bytes_read += len(whole)
        yield _repair(b, state)
    if pending:
        if state.complete:
            b = LineBatch.from_bytes(pending, first_line=next_line, first_offset=offset)
            next_line += len(b)
            state.bytes_read += len(pending)
            yield _repair(b, state)
        else:
            state.cut_line = pending
            state.cut_line_no = next_line
            next_line += 1
    state.lines = next_line - 1


def read_line_at(path: Path, offset: int, comp: str | None = None, limit: int = 1 << 20) -> bytes:
    """The raw bytes of the line that starts at ``offset`` of the decompressed file (no terminator).

    This is how evidence shows a line the case did not store: every engine row keeps its
    ``byte_offset``. Compressed files are inflated up to that point.

    Example:
        >>> import tempfile, pathlib, gzip
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.log.gz"; _ = p.write_bytes(gzip.compress(b"one\\r\\ntwo\\n"))
        >>> read_line_at(p, 5)
        b'two'
    """
    comp = comp or compression_of(path)
    if comp == "none":
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(limit)
    else:
        state = ReadState()
        seen = 0
        data = b""
        for block in _raw_blocks(path, comp, state, 1 << 20):
            if seen + len(block) <= offset:
                seen += len(block)
                continue
            data += block[max(0, offset - seen) :]
            seen += len(block)
            if b"\n" in data or len(data) >= limit:
                break
    line = data.split(b"\n", 1)[0]
    return line[:-1] if line.endswith(b"\r") else line
