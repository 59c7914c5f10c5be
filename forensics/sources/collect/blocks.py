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
    if comp == "none":
        with open(path, "rb") as fh:
            fh.seek(skip)
            status.decompressed = skip
            while block := fh.read(block_bytes):
                status.decompressed += len(block)
                yield block
        return
    pieces = _threaded(_decoded, path, comp, status) if threaded else _decoded(path, comp, status)
    yield from _rebound(pieces, block_bytes, skip, status)


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


