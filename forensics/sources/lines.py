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


def read_only(buf: np.ndarray) -> np.ndarray:
    """``buf`` itself if it is read-only, else a read-only view of it (no copy).

    The compiled stages take buffers of either flavour (a plain file's block is a bytearray, a
    decompressed member is ``bytes``, a repaired or unescaped block a new array), and numba
    compiles a kernel once per flavour: every kernel's entry hands on a read-only view, so a
    machine compiles each kernel once, not once per the first file of each kind.

    Example:
        >>> a = np.zeros(3, dtype=np.uint8)
        >>> read_only(a).flags.writeable, a.flags.writeable
        (False, True)
    """
    if not buf.flags.writeable:
        return buf
    view = buf.view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True)
class LineBatch:
    """A batch of logical lines of one file, collection wrapper removed.

    Invariants: every array has one entry per logical line, in file order; ``line_no`` is the
    1-based physical line of the file on disk (after decompression) where the logical line starts;
    ``offset`` is that physical line's byte offset in the decompressed stream, so the raw line can
    be read again from the file on demand; ``phys_lines`` counts every physical line the batch
    covers (joined partial lines and the lines in ``rejected`` included), so the loader can prove
    ``read = logical lines + joined + rejected + framing`` (``joined`` = ``sum(n_phys) - len``;
    negative when several records of a JSON document share one physical line).

    Batches of one file follow each other without gap or overlap: the next batch starts at
    physical line ``next_line`` and decompressed byte ``next_offset`` (what a resumed load
    passes back to ``collect.read_lines``). A logical line is never split across batches.

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
    #: per-line pod / process the wrapper named (Kubernetes pod, ``host/unit`` of a journal,
    #: a shipper record's ``kubernetes.pod_name``, a CloudWatch log stream), Arrow
    #: dictionary<string>; None when the wrapper names none (the file's pod applies)
    pod: pa.Array | None = None
    #: per-line logical node derived from ``pod`` by the node rule (``collect.nodes``), same
    #: type; None when ``pod`` is None (the file's node applies)
    node: pa.Array | None = None
    #: physical lines the collection stage could not use: ``(line_no, reason, raw bytes)``;
    #: raw bytes as read (the loader redacts prompt text before storing them)
    rejected: tuple[tuple[int, str, bytes], ...] = field(default_factory=tuple)
    #: the collection wrapper stripped (``plain``, ``cri``, ``docker-json``, ...)
    wrapper: str = "plain"
    #: False when ``collector_us`` was derived from a zone-less local time (RFC 3164 syslog,
    #: ``journalctl -o short``): then it cannot check the engine's zone
    collector_exact: bool = True
    #: int32, index of the line within its record when a record's text held several lines
    #: (a shipper's multi-line message: they share ``line_no``/``offset``); None means all 0
    sub: np.ndarray | None = None
    #: physical lines that are only the wrapper's framing (a JSON document's brackets and
    #: metadata around its records, blank lines between records): no logical line of their own
    framing: int = 0
    #: physical line number just after this batch (the next batch's first line)
    next_line: int = 0
    #: decompressed byte offset just after this batch's last physical line
    next_offset: int = 0

    @property
    def joined(self) -> int:
        """Physical lines merged into an earlier one (partial-line chunks after the first).

        Example:
            >>> LineBatch.from_bytes(b"a\\n").joined
            0
        """
        return 0 if self.n_phys is None else int(self.n_phys.sum()) - len(self)

    def __len__(self) -> int:
        return int(self.starts.shape[0])

    def line(self, i: int) -> bytes:
        """The text of logical line ``i`` (0-based within the batch)."""
        return self.buf[int(self.starts[i]) : int(self.ends[i])].tobytes()

    def text(self, invalid: list[int] | None = None) -> pa.LargeStringArray:
        """Every line as an Arrow string array (invalid UTF-8 replaced by U+FFFD).

        ``invalid``, when given, receives the (0-based) indices of the lines that had invalid bytes.

        Example:
            >>> bad: list[int] = []
            >>> LineBatch.from_bytes(b"a\\n\\xffb\\n").text(bad).to_pylist(), bad
            (['a', '\\ufffdb'], [1])
        """
        n = len(self)
        if n == 0:
            return pa.array([], type=pa.large_string())
        starts, ends = self.starts, self.ends
        order = None
        if n > 1 and not bool(np.all(starts[1:] >= ends[:-1])):
            # joined or unescaped lines live after the batch's own bytes: gather in buffer order,
            # then put the strings back in line order (one take)
            order = np.argsort(starts, kind="stable")
            starts, ends = starts[order], ends[order]
        lengths = ends - starts
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if n == 1 or bool(np.all(starts[1:] >= ends[:-1])):
            # Spans in order without overlap: one byte mask over the buffer keeps the texts and
            # drops terminators and wrapper prefixes; 1 byte of scratch per byte (an index per
            # byte would be 8).
            data = self.buf[span_mask(int(self.buf.size), starts, ends)]
        else:
            idx = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
            data = self.buf[idx] if idx.size else np.zeros(0, dtype=np.uint8)
        raw = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )
        if order is not None:
            inverse = np.empty(n, dtype=np.int64)
            inverse[order] = np.arange(n, dtype=np.int64)
            raw = raw.take(pa.array(inverse))
        try:
            return raw.cast(pa.large_string())
        except pa.ArrowInvalid:
            pass
        out: list[str] = []
        for i in range(n):
            b = self.line(i)
            try:
                out.append(b.decode("utf-8"))
            except UnicodeDecodeError:
                out.append(b.decode("utf-8", "replace"))
                if invalid is not None:
                    invalid.append(i)
        return pa.array(out, type=pa.large_string())

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, *, first_line: int = 1,
                   first_offset: int = 0) -> LineBatch:
        """Plain text: one logical line per physical line (``\\n``, ``\\r\\n``; a last line without one).

        ``data`` should hold whole lines; a final line without a terminator is kept as a line.

        Example:
            >>> LineBatch.from_bytes(b"").phys_lines
            0
        """
        from forensics.sources.bytescan import newlines  # bytescan uses read_only, defined here

        buf = np.frombuffer(data, dtype=np.uint8)
        nl = newlines(buf)
        ends = nl
        if buf.size and (nl.size == 0 or nl[-1] != buf.size - 1):
            ends = np.append(nl, buf.size)
        starts = np.empty_like(ends)
        if ends.size:
            starts[0] = 0
            starts[1:] = nl[: ends.size - 1] + 1
        # Drop a '\r' just before the '\n' (CRLF files), and at the end of an unterminated last line.
        cr = ends > starts
        if cr.any():
            cr &= buf[np.maximum(ends - 1, 0)] == 13
            ends = ends - cr.astype(np.int64)
        n = int(ends.size)
        return cls(
            buf=buf,
            starts=starts,
            ends=ends,
            line_no=np.arange(first_line, first_line + n, dtype=np.int64),
            offset=starts + first_offset,
            phys_lines=n,
            next_line=first_line + n,
            next_offset=first_offset + int(buf.size),
        )


def span_mask(size: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A boolean mask of ``size`` bytes, true inside the spans (sorted, not overlapping).

    Built as alternating runs (gap, span, gap, ...) by one ``np.repeat``: cheaper than a
    cumulative sum over every byte.

    Example:
        >>> span_mask(6, np.array([1, 4]), np.array([3, 5])).astype(int).tolist()
        [0, 1, 1, 0, 1, 0]
    """
    n = int(starts.shape[0])
    runs = np.empty(2 * n + 1, dtype=np.int64)
    runs[0] = starts[0] if n else size
    if n:
        runs[1:-1:2] = ends - starts
        runs[2:-1:2] = starts[1:] - ends[:-1]
        runs[-1] = size - ends[-1]
    values = np.zeros(2 * n + 1, dtype=np.bool_)
    values[1::2] = True
    return np.repeat(values, runs)
