"""A file's decompressed bytes in bounded blocks, through the one decoder (:mod:`forensics.sources.compressed`).

Compression is recognised by magic bytes, never by name. Decoding is
:func:`forensics.sources.compressed.decoded_blocks` (every gzip member via ISA-L and every zstd
frame; a stream that breaks off gives its readable part; bytes after the last complete member are
counted, not read), so the collection stage and the gateway loaders follow the same rules about
damaged streams. This module adds what line reading needs on top: a background thread that
overlaps decompression (ISA-L and zstd release the GIL) with the parsing of the previous block,
regrouping into blocks of ``block_bytes``, a resume offset in the decompressed stream, and
:class:`StreamStatus`, the decoder's report as the collection stage words it.

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

from forensics.sources.compressed import StreamReport, decoded_blocks
from forensics.sources.files import compression_of

#: Decompressed bytes per block handed to the line splitter.
BLOCK_BYTES = 8 << 20
#: Decoded bytes per piece the decoder hands over (regrouped into blocks here; the decoder itself
#: decodes in small steps, so damage loses little).
_PIECE = 1 << 20


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


class BlockStream:
    """A file's decompressed bytes as blocks of about ``block_bytes``, each one opening with the
    bytes its reader carries over from the block before (the line that block's end cut).

    Each byte is copied once on its way into a block: a plain file is read straight into the
    block's buffer (``readinto``), a compressed one's decoded pieces are joined into it with the
    carried bytes in front. Joining the carry to a block, then slicing the whole lines off it,
    copied every byte twice more (three times for a gzip file, whose pieces were also regrouped):
    most of a reading thread's page faults (measured). ``skip`` is an offset in the decompressed
    stream (a resumed load): a plain file is seeked, a compressed one is inflated and the first
    ``skip`` bytes dropped. Every block is a new object: it stays valid while anything holds it.

    Example:
        >>> import tempfile; f = tempfile.NamedTemporaryFile(delete=False); _ = f.write(b"abcdef"); f.close()
        >>> bs = BlockStream(Path(f.name), StreamStatus(), block_bytes=4, skip=1)
        >>> bytes(bs.take()), bytes(bs.take(b"de")), bs.take(b"")
        (b'bcde', b'def', None)
    """

    def __init__(self, path: Path, status: StreamStatus, *, block_bytes: int = BLOCK_BYTES, skip: int = 0,
                 threaded: bool = True) -> None:
        self.status = status
        self.block_bytes = max(int(block_bytes), 1)
        comp = compression_of(path)
        status.compression = comp
        self._fh: Any = None
        self._pieces: Iterator[bytes] | None = None
        self._skip = 0
        if comp == "none":
            self._fh = open(path, "rb")  # noqa: SIM115 - closed by close() or at the end of the stream
            self._fh.seek(skip)
            status.decompressed = skip
        else:
            self._pieces = _threaded(_decoded, path, comp, status) if threaded else _decoded(path, comp, status)
            self._skip = skip
        self._spare: memoryview | None = None  # decoded bytes past the last block's end

    def take(self, carry: bytes | bytearray = b"") -> bytes | bytearray | None:
        """The next block, ``carry`` in front of it; None at the end of the stream (``carry`` then
        stays the caller's)."""
        if self._fh is not None:
            return self._read(carry)
        if self._pieces is None and self._spare is None:
            return None
        return self._join(carry)

    def _read(self, carry: bytes | bytearray) -> bytearray | None:
        fh = self._fh
        k = len(carry)
        buf = bytearray(k + self.block_bytes)
        got = 0
        with memoryview(buf) as view:
            view[:k] = carry
            while got < self.block_bytes:
                with view[k + got :] as free:
                    n = fh.readinto(free)
                if not n:
                    break
                got += n
        self.status.decompressed += got
        if got == 0:
            self.close()
            return None
        if got < self.block_bytes:
            del buf[k + got :]
        return buf

    def _join(self, carry: bytes | bytearray) -> bytes | None:
        parts: list[bytes | bytearray | memoryview] = [carry] if len(carry) else []
        have = 0
        while have < self.block_bytes:
            if self._spare is not None:
                piece, self._spare = self._spare, None
            else:
                raw = next(self._pieces, None) if self._pieces is not None else None
                if raw is None:
                    self._pieces = None
                    break
                self.status.decompressed += len(raw)
                piece = memoryview(raw)
                if self._skip:
                    if len(piece) <= self._skip:
                        self._skip -= len(piece)
                        continue
                    piece = piece[self._skip :]
                    self._skip = 0
            need = self.block_bytes - have
            if len(piece) > need:  # views: the piece's bytes are copied once, into the block
                piece, self._spare = piece[:need], piece[need:]
            parts.append(piece)
            have += len(piece)
        if have == 0:
            return None
        return b"".join(parts)

    def close(self) -> None:
        """Stop reading (the file is closed, a decoding thread stopped)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        pieces, self._pieces = self._pieces, None
        if pieces is not None and hasattr(pieces, "close"):
            pieces.close()


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
    stream = BlockStream(path, status, block_bytes=block_bytes, skip=skip, threaded=threaded)
    try:
        while (block := stream.take()) is not None:
            yield bytes(block)
    finally:
        stream.close()


def _decoded(path: Path, comp: str, status: StreamStatus) -> Iterator[bytes]:
    """The one decoder's pieces of ``path``; its report goes into ``status`` when it ends."""
    report = StreamReport(comp)
    with open(path, "rb") as fh:
        try:
            yield from decoded_blocks(fh, comp, report, block=_PIECE)
        finally:
            _apply(report, status, fh)


def _apply(report: StreamReport, status: StreamStatus, fh: Any) -> None:
    """Word the decoder's report as the collection stage's :class:`StreamStatus`.

    Only a stream that broke off or a member that could not be decoded cuts the last line
    (``truncated``); trailing bytes after complete members do not.
    """
    status.members = report.members
    status.complete = report.complete
    status.truncated = report.truncated or report.error is not None
    warning = report.warning()
    if report.trailing and report.undecoded_at is not None:
        status.trailing_bytes = report.trailing_bytes
        status.trailing_offset = report.undecoded_at
        fh.seek(report.undecoded_at)
        zeros = True
        while zeros and (chunk := fh.read(1 << 20)):
            zeros = not chunk.strip(b"\0")
        status.trailing_zeros = zeros
        if zeros and warning:
            warning += " (they are all zero bytes: padding)"
    elif report.error is not None and warning:
        low = report.error.lower()
        if "checksum" in low or "crc" in low or "length" in low:
            warning += "; the lines read from that member may be altered"
    if warning:
        status.problem = warning if status.problem is None else f"{status.problem}; {warning}"


_END = object()


def _threaded(
    produce: Callable[[Path, str, StreamStatus], Iterator[bytes]], path: Path, comp: str, status: StreamStatus,
) -> Iterator[bytes]:
    """Run a piece producer in a thread; hand its pieces over through a short queue."""
    q: queue.Queue[Any] = queue.Queue(maxsize=16)
    stop = threading.Event()

    def work() -> None:
        try:
            for piece in produce(path, comp, status):
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


