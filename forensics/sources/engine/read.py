r"""The scanner's side of reading: line repairs, and reading a raw line again from its offset.

Files are read by the collection stage (:func:`forensics.sources.collect.read_lines`: plain,
gzip, zstd, any collection wrapper, physical line numbers and byte offsets). Two repairs are made
here per line, never silently: invalid UTF-8 bytes become U+FFFD (counted, first line noted) and
ANSI colour codes are removed; the offsets still point at the bytes on disk.

Example:
    >>> from forensics.sources.lines import LineBatch
    >>> c = Repairs()
    >>> b = repair(LineBatch.from_bytes(b"a\n\x1b[32mb\x1b[0m\ncaf\xe9"), c)
    >>> [b.line(i) for i in range(len(b))], c.bad_utf8_count, c.bad_utf8_lines
    ([b'a', b'b', b'caf\xef\xbf\xbd'], 1, [3])
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from forensics.sources.bytescan import byte_counts
from forensics.sources.collect.blocks import StreamStatus, iter_blocks
from forensics.sources.lines import LineBatch

_ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class Repairs:
    """Lines a file's repairs touched."""

    bad_utf8_count: int = 0
    bad_utf8_lines: list[int] = field(default_factory=list)


def _valid_utf8(data: np.ndarray) -> bool:
    # Arrow's validation is vectorised (far cheaper than bytes.decode on multi-MB blocks)
    arr = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 1, [None, pa.py_buffer(
        np.array([0, data.size], dtype=np.int64)), pa.py_buffer(data)])
    try:
        arr.cast(pa.large_string())
    except pa.ArrowInvalid:
        return False
    return True


def repair(batch: LineBatch, counts: Repairs) -> LineBatch:
    """Lines with invalid UTF-8 or ANSI codes rewritten (into an extension of the buffer)."""
    buf = batch.buf
    esc, high = byte_counts(buf)  # one pass, no temporary as large as the block
    has_esc = esc > 0
    valid = high == 0 or _valid_utf8(buf)  # ASCII is valid UTF-8
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
                counts.bad_utf8_count += 1
                if len(counts.bad_utf8_lines) < 5:
                    counts.bad_utf8_lines.append(int(batch.line_no[i]))
        if has_esc and 27 in fixed:
            fixed = _ANSI.sub(b"", fixed)
        if fixed is not raw:
            starts[i] = base + len(extra)
            extra += fixed
            ends[i] = base + len(extra)
    new = np.concatenate([buf, np.frombuffer(bytes(extra), dtype=np.uint8)]) if extra else buf
    return dataclasses.replace(batch, buf=new, starts=starts, ends=ends)


def read_line_at(path: Path, offset: int, limit: int = 1 << 20) -> bytes:
    """The raw bytes of the line that starts at ``offset`` of the decompressed file (no terminator).

    This is how evidence shows a line the case did not store: every engine row keeps its
    ``byte_offset``. Compressed files are inflated up to that point; for a wrapped file it is the
    physical (wrapped) line.

    Example:
        >>> import tempfile, pathlib, gzip
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.log.gz"; _ = p.write_bytes(gzip.compress(b"one\\r\\ntwo\\n"))
        >>> read_line_at(p, 5)
        b'two'
    """
    data = b""
    for block in iter_blocks(Path(path), StreamStatus(), block_bytes=1 << 20, skip=offset, threaded=False):
        data += block
        if b"\n" in data or len(data) >= limit:
            break
    line = data.split(b"\n", 1)[0]
    return line[:-1] if line.endswith(b"\r") else line
