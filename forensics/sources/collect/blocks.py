"""A file's decompressed bytes in bounded blocks: plain, gzip (ISA-L) or zstd, every member and frame.

Compression is recognised by magic bytes, never by name. Concatenated gzip members and zstd
frames (rotated or ``cat``-joined logs) are all read. A stream that breaks off (truncated) or is
damaged (corrupt data, checksum mismatch) ends the blocks early: what was decompressed before is
kept and :class:`StreamStatus` says why the file is incomplete. Bytes after the last valid
member that are not another member (padding, garbage, a damaged header) are counted and reported,
never silently dropped.

Compressed files are inflated in a background thread (ISA-L and zstd release the GIL), so
decompression overlaps the parsing of the previous block; at most ``2`` blocks wait in the queue,
so memory stays bounded for any file size.

Example:
    >>> import gzip, tempfile
    >>> f = tempfile.NamedTemporaryFile(delete=False); _ = f.write(gzip.compress(b"a\\n") + b"\\0\\0"); f.close()
    >>> status = StreamStatus()
    >>> b"".join(iter_blocks(Path(f.name), status)), status.compression, status.trailing_bytes
    (b'a\\n', 'gzip', 2)
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forensics.sources.files import GZIP_MAGIC, ZSTD_MAGIC, compression_of

#: Decompressed bytes per block handed to the line splitter.
BLOCK_BYTES = 8 << 20
#: Compressed bytes fed to a decompressor per call (bounds its output together with max_length).
_FEED = 256 << 10


@dataclass
class StreamStatus:
    """What reading a file's byte stream found: compression, completeness, bytes left unread.

    Example:
        >>> StreamStatus().complete
        True
    """

    compression: str = "none"
    #: False when the stream broke off or was damaged, or bytes after it could not be read
    complete: bool = True
    #: the stream broke off or a member was damaged: its last line may be cut (trailing bytes
    #: after complete members do not cut anything)
    truncated: bool = False
    #: why the file is incomplete, or what was found after its end (one sentence), else None
    problem: str | None = None
    #: bytes on disk after the last valid gzip member / zstd frame that could not be read
    trailing_bytes: int = 0
    #: their offset in the file on disk
    trailing_offset: int | None = None
    #: True when every trailing byte is zero (padding)
    trailing_zeros: bool = False
    #: gzip members / zstd frames read
    members: int = 0
    #: decompressed bytes produced (skipped prefix included)
    decompressed: int = 0

    def note(self, problem: str, *, complete: bool, truncated: bool = False) -> None:
        """Record a problem; the first one is kept, later ones are appended."""
        self.problem = problem if self.problem is None else f"{self.problem}; {problem}"
        self.complete = self.complete and complete
        self.truncated = self.truncated or truncated


def iter_blocks(
    path: Path, status: StreamStatus, *, block_bytes: int = BLOCK_BYTES, skip: int = 0,
    threaded: bool = True,
) -> Iterator[bytes]:
    """Decompressed blocks of about ``block_bytes`` (the last may be shorter), from byte ``skip`` on.

    ``skip`` is an offset in the decompressed stream (a resumed load): a plain file is seeked,
    a compressed one is inflated and the first ``skip`` bytes dropped.

    Example:
        >>> import tempfile; f = tempfile.NamedTemporaryFile(delete=False); _ = f.write(b"abcdef"); f.close()
        >>> list(iter_blocks(Path(f.name), StreamStatus(), block_bytes=4, skip=1))
        [b'bcde', b'f']
    """
    comp = compression_of(path)
    status.compression = comp
    size = path.stat().st_size
    if comp == "none":
        with open(path, "rb") as fh:
            fh.seek(skip)
            status.decompressed = skip
            while block := fh.read(block_bytes):
                status.decompressed += len(block)
                yield block
        return
    produce = _gzip_pieces if comp == "gzip" else _zstd_pieces
    pieces = _threaded(produce, path, size, status) if threaded else produce(path, size, status)
    yield from _rebound(pieces, block_bytes, skip, status)


def _rebound(pieces: Iterator[bytes], block_bytes: int, skip: int, status: StreamStatus) -> Iterator[bytes]:
    """Regroup decompressor output into blocks of ``block_bytes``, dropping the first ``skip`` bytes."""
    buf: list[bytes] = []
    have = 0
    to_skip = skip
    for piece in pieces:
        status.decompressed += len(piece)
        if to_skip:
            if len(piece) <= to_skip:
                to_skip -= len(piece)
                continue
            piece = piece[to_skip:]
            to_skip = 0
        buf.append(piece)
        have += len(piece)
        if have >= block_bytes:
            data = b"".join(buf)
            buf.clear()
            while len(data) >= block_bytes:
                yield data[:block_bytes]
                data = data[block_bytes:]
            if data:
                buf.append(data)
            have = len(data)
    if buf:
        yield b"".join(buf)


_END = object()


def _threaded(
    produce: Callable[[Path, int, StreamStatus], Iterator[bytes]], path: Path, size: int, status: StreamStatus,
) -> Iterator[bytes]:
    """Run a piece producer in a thread; hand its pieces over through a short queue."""
    q: queue.Queue[Any] = queue.Queue(maxsize=16)
    stop = threading.Event()

    def work() -> None:
        try:
            for piece in produce(path, size, status):
                while not stop.is_set():
                    try:
                        q.put(piece, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(_END)
        except BaseException as exc:  # handed to the consumer, raised there
            q.put(exc)

    t = threading.Thread(target=work, name=f"inflate:{path.name}", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        # drain so a producer blocked on put() sees the stop flag
        while t.is_alive():
            with contextlib.suppress(queue.Empty):
                q.get(timeout=0.05)
        t.join()


def _trailing(fh: Any, at: int, size: int, status: StreamStatus, what: str) -> None:
    """Count (and characterise) the bytes from ``at`` to the end of the file."""
    n = size - at
    if n <= 0:
        return
    fh.seek(at)
    zeros = True
    while zeros and (chunk := fh.read(1 << 20)):
        zeros = not chunk.strip(b"\0")
    status.trailing_bytes = n
    status.trailing_offset = at
    status.trailing_zeros = zeros
    if zeros:
        status.note(f"{n} zero byte(s) of padding after the end of the {what} at byte {at}", complete=True)
    else:
        status.note(f"{n} byte(s) after the end of the {what} at byte {at} are not a {what} "
                    "and were not read", complete=False)


def _gzip_pieces(path: Path, size: int, status: StreamStatus) -> Iterator[bytes]:
    from isal import isal_zlib

    with open(path, "rb") as fh:
        d = isal_zlib.decompressobj(wbits=31)
        status.members = 1
        consumed = 0  # compressed bytes handed to decompressors so far (file offset)
        pending = b""
        while True:
            if not pending:
                pending = fh.read(_FEED)
                if not pending:
                    break
            data, pending = pending, b""
            start = consumed
            consumed += len(data)
            try:
                out = d.decompress(data, _FEED * 16)
                while True:
                    if out:
                        yield out
                    if d.eof or not d.unconsumed_tail:
                        break
                    out = d.decompress(d.unconsumed_tail, _FEED * 16)
            except Exception as exc:  # isal's IsalError: corrupt data or checksum mismatch
                text = str(exc)
                altered = "checksum" in text.lower() or "crc" in text.lower() or "length" in text.lower()
                status.note(
                    f"gzip member {status.members} is corrupt near compressed byte {start} ({text})"
                    + ("; the lines read from that member may be altered" if altered else
                       "; the readable prefix was kept"), complete=False, truncated=True)
                return
            if d.eof:
                rest = d.unused_data
                consumed -= len(rest)  # now the file offset of `rest`
                if len(rest) < 2:
                    rest += fh.read(_FEED)
                if not rest:
                    return  # clean end
                if rest.startswith(GZIP_MAGIC):
                    d = isal_zlib.decompressobj(wbits=31)
                    status.members += 1
                    pending = rest
                    continue
                _trailing(fh, consumed, size, status, "gzip stream")
                return
        if not d.eof:
            status.note(f"gzip stream is truncated (member {status.members} has no end); "
                        "the readable prefix was kept", complete=False, truncated=True)


_ZSTD_SKIPPABLE = range(0x184D2A50, 0x184D2A60)


def _zstd_pieces(path: Path, size: int, status: StreamStatus) -> Iterator[bytes]:
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    with open(path, "rb") as fh:
        d = dctx.decompressobj()
        status.members = 1
        consumed = 0
        pending = b""
        ended = False
        while True:
            if not pending:
                pending = fh.read(_FEED // 2)
                if not pending:
                    break
            data, pending = pending, b""
            if ended:
                # between frames: another frame, a skippable frame, or the end of the stream
                if len(data) < 8:
                    data += fh.read(8)
                magic = int.from_bytes(data[:4], "little")
                if data.startswith(ZSTD_MAGIC):
                    d = dctx.decompressobj()
                    status.members += 1
                    ended = False
                elif magic in _ZSTD_SKIPPABLE and len(data) >= 8:
                    skip = 8 + int.from_bytes(data[4:8], "little")
                    while len(data) < skip:
                        more = fh.read(skip - len(data))
                        if not more:
                            break
                        data += more
                    consumed += min(skip, len(data))
                    pending = data[skip:]
                    continue
                else:
                    _trailing(fh, consumed, size, status, "zstd stream")
                    return
            start = consumed
            consumed += len(data)
            try:
                out = d.decompress(data)
            except zstandard.ZstdError as exc:
                status.note(f"zstd frame {status.members} is corrupt near compressed byte {start} ({exc}); "
                            "the readable prefix was kept", complete=False, truncated=True)
                return
            if out:
                yield out
            if d.eof:
                ended = True
                pending = d.unused_data
                consumed -= len(pending)
        if not ended:
            status.note(f"zstd stream is truncated (frame {status.members} has no end); "
                        "the readable prefix was kept", complete=False, truncated=True)
