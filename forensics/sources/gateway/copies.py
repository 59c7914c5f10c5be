"""Private plain copies of exactly what is read, when the source itself cannot be handed to DuckDB.

DuckDB's readers take a path and read all of it. A copy is made instead (in the case's temporary
directory, one pass, hashed as it is read) when that would not be the evidence:

* a **grown** file: only its new part (from the prior version's end), with the CSV header first;
* a **damaged** compressed stream: the decodable part, whole lines only (the cut last line is
  returned, to be rejected with its reason);
* a file that **moved while it was read**: exactly the snapshot's bytes;
* **over-long lines** (beyond what the readers take): set aside with their length and first
  bytes, an empty JSON object in their place, so every other line keeps its number.

Example:
    >>> import gzip, tempfile
    >>> from forensics.sources.files import Snapshot
    >>> d = Path(tempfile.mkdtemp()); p = d / "t.gz"
    >>> _ = p.write_bytes(gzip.compress(b"one\\ntwo\\nthr")[:-8])
    >>> c = make_copy(Snapshot.take(p), d / "copy")
    >>> (d / "copy").read_bytes(), c.lines, c.cut
    (b'one\\ntwo\\n', 2, b'thr')
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

from forensics.sources.compressed import StreamReport, decoded_blocks, zstd_layout
from forensics.sources.files import PrefixHasher, Snapshot
from forensics.sources.gateway.scan import MAX_LINE_BYTES, _HashingReader

#: What stands in a copy for a line too long to read (every reader parses it as an empty record).
PLACEHOLDER = b"{}"


@dataclass
class Copy:
    """What :func:`make_copy` wrote."""

    path: Path
    #: physical lines of the source copied (the header excluded); the cut line excluded
    lines: int = 0
    #: the last line of a stream that broke off mid-line (not in the copy), else None
    cut: bytes | None = None
    #: over-long lines set aside: (line number within the copied part, 1-based; length; first bytes)
    overlong: list[tuple[int, int, bytes]] = field(default_factory=list)
    #: what decoding found
    report: StreamReport = field(default_factory=lambda: StreamReport("none"))
    #: sha256 of the snapshot's bytes, read in the same pass
    sha: str = ""
    #: lines written before the copied part (the CSV header of a grown file)
    header_lines: int = 0
    #: decompressed offset in the source just after the last line end copied
    end_offset: int = 0
    #: the copy holds a blank line (read_json skips those: then the line reader is used)
    blank: bool = False
    #: the copy's last line has no line end (copied as is: the stream was complete)
    open_tail: bool = False


def make_copy(
    snap: Snapshot,
    dest: Path,
    *,
    start_offset: int = 0,
    header: bytes | None = None,
    max_line: int = MAX_LINE_BYTES,
) -> Copy:
    """Copy the decoded text of ``snap`` from ``start_offset`` into the plain file ``dest``.

    ``header`` (a CSV header line, with its line end) is written first. Lines longer than
    ``max_line`` become :data:`PLACEHOLDER` and are listed in ``overlong``. When the stream broke
    off (truncated or corrupt), the partial last line is left out and returned as ``cut``.
    """
    comp = snap.compression
    report = StreamReport(comp)
    out = Copy(dest, report=report, header_lines=1 if header else 0)
    h = PrefixHasher()
    writer = _LineWriter(max_line, out)
    with snap.open() as fh, open(dest, "wb") as sink:
        writer.sink = sink
        if header:
            sink.write(header if header.endswith(b"\n") else header + b"\n")
        layout = zstd_layout(fh) if comp == "zstd" else None
        hashing = cast(IO[bytes], _HashingReader(fh, h))
        skip = start_offset
        for block in decoded_blocks(hashing, comp, report, block=1 << 22, zstd_layout=layout):
            if skip:
                if len(block) <= skip:
                    skip -= len(block)
                    continue
                block, skip = block[skip:], 0
            writer.feed(block)
        while data := fh.read(1 << 22):  # hash what the decoder did not read
            h.update(data)
        broke_off = report.truncated or report.error is not None
        writer.close(keep_tail=not broke_off)
    out.sha = h.hexdigest()
    out.end_offset = start_offset + writer.ended
    return out


class _LineWriter:
    """Writes whole lines to the copy, over-long ones replaced, counting as it goes."""

    def __init__(self, max_line: int, out: Copy) -> None:
        self.max_line = max_line
        self.out = out
        self.sink: IO[bytes] | None = None
        self.pending = bytearray()  # the current line, not yet ended (up to max_line + 1 bytes)
        self.pending_len = 0  # its full length (may exceed what is kept)
        self.ended = 0  # decoded bytes up to and including the last line end
        self.total = 0

    def _emit_line(self, content: bytes, length: int) -> None:
        assert self.sink is not None
        self.out.lines += 1
        if length > self.max_line:
            self.out.overlong.append((self.out.lines, length, bytes(content[:4096])))
            self.sink.write(PLACEHOLDER + b"\n")
        else:
            if not content.strip(b"\r"):
                self.out.blank = True
            self.sink.write(content + b"\n")

    def feed(self, block: bytes) -> None:
        assert self.sink is not None
        start = 0
        self.total += len(block)
        while True:
            nl = block.find(b"\n", start)
            if nl < 0:
                rest = block[start:]
                self.pending_len += len(rest)
                if len(self.pending) <= self.max_line:
                    self.pending += rest[: self.max_line + 1 - len(self.pending)]
                break
            piece = block[start:nl]
            if self.pending_len:
                length = self.pending_len + len(piece)
                if len(self.pending) <= self.max_line:
                    self.pending += piece[: self.max_line + 1 - len(self.pending)]
                self._emit_line(bytes(self.pending), length)
                self.pending.clear()
                self.pending_len = 0
                start = nl + 1
                continue
            # fast path: write every short line up to the last line end of the block in one go
            last = block.rfind(b"\n")
            chunk = block[start:last]
            if len(chunk) <= self.max_line or max(map(len, chunk.split(b"\n"))) <= self.max_line:
                n = chunk.count(b"\n") + 1
                if b"\n\n" in b"\n" + chunk + b"\n" or b"\n\r\n" in b"\n" + chunk + b"\n":
                    self.out.blank = True
                self.sink.write(chunk + b"\n")
                self.out.lines += n
                start = last + 1
                continue
            self._emit_line(piece, len(piece))
            start = nl + 1
        self.ended = self.total - self.pending_len

    def close(self, keep_tail: bool) -> None:
        if not self.pending_len:
            return
        if keep_tail:
            self._emit_line(bytes(self.pending), self.pending_len)
            self.out.open_tail = True
        else:
            self.out.cut = bytes(self.pending[:4096]) if self.pending_len > 4096 else bytes(self.pending)


def salvage_to_file(path: Path, dest: Path) -> tuple[int, bytes]:
    """Decode the readable part of a truncated or corrupt gzip/zstd file into ``dest`` (whole lines).

    Returns ``(lines_written, partial_tail)``: the bytes of a line cut by the break.

    Example:
        >>> import gzip, tempfile; d = Path(tempfile.mkdtemp()); p = d / "t.gz"
        >>> _ = p.write_bytes(gzip.compress(bytes(range(256)) * 400 + b"\\n" * 10)[:-20])
        >>> salvage_to_file(p, d / "out")[0] > 0
        True
    """
    c = make_copy(Snapshot.take(path), dest)
    return c.lines, c.cut or b""


def head_line(snap: Snapshot) -> bytes:
    """The first line of a file's decoded text, line end included (a CSV header)."""
    with snap.open() as fh:
        comp = snap.compression
        layout = zstd_layout(fh) if comp == "zstd" else None
        data = b""
        for block in decoded_blocks(fh, comp, StreamReport(comp), block=1 << 16, zstd_layout=layout):
            data += block
            if b"\n" in data or len(data) > MAX_LINE_BYTES:
                break
    nl = data.find(b"\n")
    return data[: nl + 1] if nl >= 0 else data + b"\n"


def sha256_head(snap: Snapshot, n: int = 4096) -> str:
    """sha256 of the first ``n`` bytes (the ``head_sha256`` of the evidence record)."""
    with snap.open() as fh:
        return hashlib.sha256(fh.read(n)).hexdigest()
