"""One pass over a gateway file's bytes: sha256 (and of known prefixes), lines, stream damage.

The pass runs beside the load (in a thread: hashing and inflating release the GIL). It gives what
the evidence needs (the sha256 of exactly the snapshot's bytes, the prefix hashes that detect a
grown file) and what proves the loaders' numbering (the physical line count, the longest line,
where the last line ends).
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from forensics.sources.compressed import StreamReport, decoded_blocks, zstd_layout
from forensics.sources.files import PrefixHasher, Snapshot

#: Longest line the readers take (DuckDB's line reader and read_json refuse longer ones).
MAX_LINE_BYTES = 8 << 20

#: Bytes of the head whose sha256 narrows the known files a grown file may extend.
HEAD_BYTES = 4096

#: JSON nested this deep is refused (Python's parser and many tools downstream fail on it).
MAX_DEPTH = 1000

#: The bytes ``read_json`` takes for blank (a line of only these is skipped, no row): a line that
#: starts with one of them, or an empty line, may be one (checked against DuckDB: space, tab, CR,
#: VT, FF; two objects on a line are one row, a NULL one).
_WHITE = np.zeros(256, dtype=bool)
_WHITE[[9, 10, 11, 12, 13, 32]] = True


def json_depth(line: bytes) -> int:
    """How deep brackets nest in a JSON text (brackets inside strings do not count).

    Example:
        >>> json_depth(b'{"a": [[1], "]]]"], "b": {}}')
        3
    """
    depth = deepest = 0
    in_str = escaped = False
    for b in line:
        if in_str:
            if escaped:
                escaped = False
            elif b == 0x5C:  # backslash
                escaped = True
            elif b == 0x22:
                in_str = False
        elif b == 0x22:
            in_str = True
        elif b in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif b in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _too_deep(line: bytes) -> bool:
    # only a line with that many opening brackets can nest that deep: the count is cheap, the walk is not
    return line.count(b"[") + line.count(b"{") >= MAX_DEPTH and json_depth(line) >= MAX_DEPTH


@dataclass
class Scan:
    """What one pass over a file found (see :func:`scan_file`).

    ``read_json`` skips blank lines, so a file that has any shows fewer rows than lines and is
    then re-read line by line; ``maybe_blank`` says whether it may have one (a line that is empty
    or starts with white space), for the reader of joined files, which cannot count rows per file.
    """

    sha: str = ""
    #: decompressed physical lines (an unterminated last line counts)
    lines: int = 0
    #: (byte offset, lines before it) every few MB of a plain file, to fetch a line without a full read
    marks: list[tuple[int, int]] | None = None
    #: what decoding found (complete, truncated, trailing bytes); always complete for plain files
    report: StreamReport = field(default_factory=lambda: StreamReport("none"))
    #: sha256 of the prefixes asked for (size -> hex)
    prefixes: dict[int, str] = field(default_factory=dict)
    #: sha256 of the first min(size, 4 KiB) bytes
    head: str = ""
    #: decompressed bytes up to and including the last '\n'
    end_offset: int = 0
    #: the last line has no '\n'
    open_tail: bool = False
    #: bytes of the longest line (terminator excluded)
    longest: int = 0
    #: lines whose JSON nests deeper than :data:`MAX_DEPTH` (rejected, never parsed)
    deep: list[int] = field(default_factory=list)
    #: some line is empty or starts with white space (``read_json`` may skip it: no row)
    maybe_blank: bool = False
    #: the decoded text starts with a UTF-8 byte-order mark (``read_json`` drops it at the start
    #: of a file only: in the middle of a joined file the line would not parse)
    bom: bool = False

    @property
    def damaged(self) -> bool:
        """The decompressed stream is not complete (truncated, corrupt, trailing bytes)."""
        return not self.report.complete


class _HashingReader(io.RawIOBase):
    """A read-only file that hashes every byte read through it (the compressed bytes, for sha256)."""

    def __init__(self, raw: IO[bytes], h: PrefixHasher) -> None:
        self.raw, self.h = raw, h

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buf: Any) -> int:
        n = self.raw.readinto(buf)  # type: ignore[attr-defined]
        if n:
            self.h.update(memoryview(buf)[:n])
        return int(n or 0)

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        if data:
            self.h.update(data)
        return data


class _Lines:
    """Counts lines, the longest line and where the last line end is, block by block."""

    def __init__(self, marks: list[tuple[int, int]] | None) -> None:
        self.lines = 0
        self.total = 0
        self.end_offset = 0
        self.current = 0  # bytes of the line being read (not yet ended)
        self.longest = 0
        self.last = b""
        self.marks = marks
        self.deep: list[int] = []
        self.partial = bytearray()  # the line being read, while it is short enough to look at
        self.maybe_blank = False
        self.bom = False
        self.at_line_start = True

    def feed(self, data: bytes) -> None:
        if not data:
            return
        if self.marks is not None:
            self.marks.append((self.total, self.lines))
        arr = np.frombuffer(data, dtype=np.uint8)
        nl = np.flatnonzero(arr == 10)
        if self.at_line_start and _WHITE[arr[0]]:
            self.maybe_blank = True
        if self.total == 0 and data.startswith(b"\xef\xbb\xbf"):
            self.bom = True
        self.at_line_start = data[-1] == 10
        if nl.size:
            starts = nl[:-1] + 1 if self.at_line_start else nl + 1  # the first byte after each line end
            if not self.maybe_blank and starts.size and _WHITE[arr[starts]].any():
                self.maybe_blank = True
            first = self.current + int(nl[0])
            gaps = np.diff(nl) - 1 if nl.size > 1 else np.zeros(0, dtype=np.int64)
            self.longest = max(self.longest, first, int(gaps.max()) if gaps.size else 0)
            # a line nested MAX_DEPTH deep has at least 2 * MAX_DEPTH bytes: only those are looked at
            if first >= 2 * MAX_DEPTH and _too_deep(bytes(self.partial) + data[: int(nl[0])]):
                self.deep.append(self.lines + 1)
            for k in np.flatnonzero(gaps >= 2 * MAX_DEPTH):
                if _too_deep(data[int(nl[k]) + 1: int(nl[k + 1])]):
                    self.deep.append(self.lines + int(k) + 2)
            self.current = len(data) - int(nl[-1]) - 1
            self.end_offset = self.total + int(nl[-1]) + 1
            self.lines += int(nl.size)
            self.partial = bytearray(data[int(nl[-1]) + 1:]) if self.current <= MAX_LINE_BYTES else bytearray()
        else:
            self.current += len(data)
            if self.current <= MAX_LINE_BYTES:
                self.partial += data
            else:
                self.partial = bytearray()
        self.total += len(data)
        self.last = data[-1:]

    def close(self) -> None:
        if self.total and self.last != b"\n":
            self.lines += 1
            self.longest = max(self.longest, self.current)
            if self.current >= 2 * MAX_DEPTH and _too_deep(bytes(self.partial)):
                self.deep.append(self.lines)


def scan_file(path: Path | Snapshot, cuts: list[int] | tuple[int, ...] = (), *, count: bool = True,
              sink: IO[bytes] | None = None) -> Scan:
    """Hash a file (exactly its snapshot's bytes) and count its decompressed lines in one pass.

    ``sink``, when given, gets the decoded bytes as they are counted (the joined read of small
    files: :mod:`.joined`).

    ``cuts``: prefix sizes to hash too (the known files it may extend). Gzip is inflated with
    ISA-L (~3 GB/s against zlib's 0.5), which makes counting a large .gz beside its load
    affordable. A damaged stream is not an error: ``scan.report`` says what was found.

    Example:
        >>> import tempfile; p = Path(tempfile.mkdtemp()) / "a"; _ = p.write_bytes(b"a\\n\\nbb")
        >>> s = scan_file(p); s.lines, s.end_offset, s.open_tail, s.longest
        (3, 3, True, 2)
    """
    snap = path if isinstance(path, Snapshot) else Snapshot.take(path)
    comp = snap.compression
    h = PrefixHasher(cuts)
    out = Scan(marks=[] if comp == "none" else None, report=StreamReport(comp))
    counter = _Lines(out.marks)
    with snap.open() as fh:
        out.head = hashlib.sha256(fh.read(HEAD_BYTES)).hexdigest()
        fh.seek(0)
        if comp == "none":
            while block := fh.read(1 << 22):
                h.update(block)
                if count:
                    counter.feed(block)
                if sink is not None:
                    sink.write(block)
        else:
            layout = zstd_layout(fh) if comp == "zstd" else None
            hashing = cast(IO[bytes], _HashingReader(fh, h))
            for data in decoded_blocks(hashing, comp, out.report, block=1 << 22, zstd_layout=layout):
                counter.feed(data)
                if sink is not None:
                    sink.write(data)
            while block := fh.read(1 << 22):  # hash what the decoder did not read
                h.update(block)
    counter.close()
    out.sha = h.hexdigest()
    out.prefixes = h.prefixes
    out.lines, out.end_offset, out.longest = counter.lines, counter.end_offset, counter.longest
    out.deep = counter.deep
    out.maybe_blank = counter.maybe_blank
    out.bom = counter.bom
    out.open_tail = counter.total > counter.end_offset
    return out
