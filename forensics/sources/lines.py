"""Logical lines of one source file, as the collection stage hands them to the line scanners.

The collection stage (plain files, or a collector's wrapper such as CRI, Docker json-file,
journald or a shipper export) turns a file's bytes into :class:`LineBatch` objects: the inner
text of every logical line, with the physical line number and byte offset it started at, and what
the wrapper said about it (collector time, stream, pod). Scanners read only these arrays, so a
wrapped log goes through the same scanner as a plain one.

The text stays in one ``uint8`` buffer addressed by ``starts``/``ends``: for a plain file that
buffer is the decompressed block itself (no copy per line); a wrapper that only strips a prefix
moves ``starts``; one that joins or unescapes lines writes a new buffer.

Example:
    >>> b = LineBatch.from_bytes(b"alpha\\r\\nbeta\\n\\ngamma")
    >>> len(b), b.line(1), b.line_no.tolist(), b.offset.tolist(), b.phys_lines
    (4, b'beta', [1, 2, 3, 4], [0, 7, 12, 13], 4)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

#: ``collector_us`` value of a line whose wrapper gave no time (or that has no wrapper).
NO_TIME = np.iinfo(np.int64).min

#: ``stream`` codes.
STREAM_UNKNOWN, STREAM_STDOUT, STREAM_STDERR = 0, 1, 2


@dataclass(frozen=True)
class LineBatch:
    """A batch of logical lines of one file, collection wrapper removed.

    Invariants: every array has one entry per logical line, in file order; ``line_no`` is the
    1-based physical line of the file on disk (after decompression) where the logical line starts;
    ``offset`` is that physical line's byte offset in the decompressed stream, so the raw line can
    be read again from the file on demand; ``phys_lines`` counts every physical line the batch
    covers (joined partial lines and the lines in ``rejected`` included), so the loader can prove
    ``read = loaded + rejected``.

    Example:
        >>> LineBatch.from_bytes(b"one\\ntwo\\n", first_line=10, first_offset=100).offset.tolist()
        [100, 104]
    """

    #: uint8, the text of the lines back to back (terminators excluded between starts/ends)
    buf: np.ndarray
    #: int64, start of each line's text in ``buf``
    starts: np.ndarray
    #: int64, end (exclusive) of each line's text in ``buf``
    ends: np.ndarray
    #: int64, physical line number (1-based) of the line's first physical line
    line_no: np.ndarray
    #: int64, byte offset of that physical line in the decompressed stream
    offset: np.ndarray
    #: physical lines this batch covers (logical lines, joined parts and rejected lines)
    phys_lines: int
    #: int32, physical lines joined into each logical line; None means 1 for every line
    n_phys: np.ndarray | None = None
    #: int64, collector time in microseconds since the epoch (UTC); ``NO_TIME`` where absent
    collector_us: np.ndarray | None = None
    #: int8, ``STREAM_*`` code per line; None when the wrapper has no stream
    stream: np.ndarray | None = None
    #: per-line label the wrapper gave (pod, host/unit, log stream), Arrow dictionary<string>
    label: pa.Array | None = None
    #: physical lines the collection stage could not use: ``(line_no, reason, raw bytes)``
    rejected: tuple[tuple[int, str, bytes], ...] = field(default_factory=tuple)

    def __len__(self) -> int:
        return int(self.starts.shape[0])

    def line(self, i: int) -> bytes:
        """The text of logical line ``i`` (0-based within the batch)."""
        return self.buf[int(self.starts[i]) : int(self.ends[i])].tobytes()

    def text(self) -> pa.LargeStringArray:
        """Every line as an Arrow string array (invalid UTF-8 replaced by U+FFFD).

        Example:
            >>> LineBatch.from_bytes(b"a\\n\\xffb\\n").text().to_pylist()
            ['a', '\\ufffdb']
        """
        n = len(self)
        if n == 0:
            return pa.array([], type=pa.large_string())
        contiguous = bool(np.all(self.starts[1:] >= self.ends[:-1])) if n > 1 else True
        if contiguous:
            # Gather only the line texts (drops terminators and any wrapper prefix) in one copy.
            lengths = self.ends - self.starts
            offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            idx = np.repeat(self.starts - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
            data = self.buf[idx] if idx.size else np.zeros(0, dtype=np.uint8)
            raw = pa.LargeBinaryArray.from_buffers(
                pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
            )
            try:
                return raw.cast(pa.large_string())
            except pa.ArrowInvalid:
                pass
        return pa.array(
            [self.line(i).decode("utf-8", "replace") for i in range(n)], type=pa.large_string()
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, first_line: int = 1, first_offset: int = 0) -> LineBatch:
        """Plain text: one logical line per physical line (``\\n``, ``\\r\\n``; a last line without one).

        ``data`` should hold whole lines; a final line without a terminator is kept as a line.

        Example:
            >>> LineBatch.from_bytes(b"").phys_lines
            0
        """
        buf = np.frombuffer(data, dtype=np.uint8)
        nl = np.flatnonzero(buf == 10).astype(np.int64)
        ends = nl
        if buf.size and (nl.size == 0 or nl[-1] != buf.size - 1):
            ends = np.append(nl, buf.size)
        starts = np.empty_like(ends)
        if ends.size:
            starts[0] = 0
            starts[1:] = nl[: ends.size - 1] + 1
        # Drop a '\r' just before the '\n' (CRLF files).
        cr = (ends > starts) & (ends < buf.size)
        if cr.any():
            cr &= buf[np.minimum(np.maximum(ends - 1, 0), max(buf.size - 1, 0))] == 13
            ends = ends - cr.astype(np.int64)
        n = int(ends.size)
        return cls(
            buf=buf,
            starts=starts,
            ends=ends,
            line_no=np.arange(first_line, first_line + n, dtype=np.int64),
            offset=starts + first_offset,
            phys_lines=n,
        )
