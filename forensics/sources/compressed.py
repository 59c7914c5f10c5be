"""Decoding compressed evidence: every gzip member and zstd frame, and an exact account of the rest.

One decoder for every loader (gateway salvage, engine logs, the collection readers), so each rule
about damaged streams lives in one place:

* **every complete member / frame is decoded**, in order (rotated and ``cat``-joined files hold
  several), and nothing decoded is lost when a later part is damaged;
* a **truncated** last member or frame (a copy taken mid-write, a cut download) gives its
  decodable prefix and the report says ``truncated``; the caller rejects the cut last line;
* **trailing bytes** after the last complete member or frame that are not one (zero padding, a
  partial copy, garbage) are counted, not decoded, and reported with their offset;
* a **corrupt** member or frame stops the decoding there; the bytes from that point are counted.

Output is bounded per block (``block`` bytes of decoded text at most, whatever the compression
ratio), so memory stays bounded for any input.

Example:
    >>> import gzip, io
    >>> report = StreamReport("gzip")
    >>> data = gzip.compress(b"a\\n") + gzip.compress(b"b\\n") + b"\\0" * 7
    >>> b"".join(decoded_blocks(io.BytesIO(data), "gzip", report)), report.trailing_bytes, report.complete
    (b'a\\nb\\n', 7, False)
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, cast

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

#: Compressed bytes fed to a decoder at a time.
_IN_BLOCK = 256 << 10

#: Decoded bytes asked of a decoder at a time (then regrouped into the caller's blocks): a decoder
#: that fails (a CRC or checksum error at a member's end) loses what that one call decoded, so
#: small calls keep all but at most this much of the good text before the damage.
_OUT_PIECE = 64 << 10


@dataclass
class StreamReport:
    """What decoding a stream found: complete or not, and where the undecoded bytes are.

    Example:
        >>> StreamReport("gzip", truncated=True, complete=False).warning()
        'truncated gzip stream (the last member breaks off): its readable part was loaded'
    """

    compression: str
    #: every byte of the file was decoded as complete members / frames
    complete: bool = True
    #: the last member / frame broke off: its decodable prefix was given
    truncated: bool = False
    #: a member / frame could not be decoded (the decoder's message); decoding stopped there
    error: str | None = None
    #: compressed bytes not decoded: after the last complete member / frame, or from the corrupt one
    undecoded_bytes: int = 0
    #: offset in the file of the first undecoded byte (None when everything was decoded)
    undecoded_at: int | None = None
    #: the undecoded bytes are trailing bytes after complete members (padding, a partial copy)
    trailing: bool = False
    #: complete members (gzip) or frames (zstd) decoded
    members: int = 0
    #: decoded bytes given
    decoded: int = 0

    @property
    def trailing_bytes(self) -> int:
        """Bytes after the last complete member / frame that are not one (0 if none)."""
        return self.undecoded_bytes if self.trailing else 0

    def warning(self) -> str | None:
        """One sentence for the evidence record, None for a complete stream."""
        comp = self.compression
        if self.complete:
            return None
        if self.trailing:
            return (f"{self.undecoded_bytes} bytes after the last complete {comp} "
                    f"{'member' if comp == 'gzip' else 'frame'} (from byte {self.undecoded_at}) are not "
                    f"{'gzip' if comp == 'gzip' else 'zstd'} data (padding or a partial copy): counted, "
                    f"not read; every complete {'member' if comp == 'gzip' else 'frame'} was loaded")
        if self.error is not None:
            where = "at" if comp == "gzip" else "before"  # zstd: found where the decoder had read to
            return (f"{comp} stream is corrupt {where} byte {self.undecoded_at} ({self.error}): the "
                    f"{self.undecoded_bytes} bytes from there could not be decoded; the readable part was loaded")
        return (f"truncated {comp} stream (the last {'member' if comp == 'gzip' else 'frame'} breaks "
                f"off): its readable part was loaded")


def decoded_blocks(raw: IO[bytes], comp: str, report: StreamReport, block: int = 1 << 20,
                   zstd_layout: ZstdLayout | None = None) -> Iterator[bytes]:
    """Decode ``raw`` (``comp``: 'gzip', 'zstd' or 'none') into blocks of at most ``block`` bytes.

    Never raises for damaged data: ``report`` says what was found. For zstd the frames are walked
    first to find where valid data ends: ``raw`` must then be seekable, or the caller passes the
    :func:`zstd_layout` it took of the same bytes (when ``raw`` only streams, e.g. through a hasher).

    Example:
        >>> import io
        >>> list(decoded_blocks(io.BytesIO(b"abc"), "none", StreamReport("none"), block=2))
        [b'ab', b'c']
    """
    if comp == "gzip":
        yield from _regroup(_gzip_blocks(raw, report, min(block, _OUT_PIECE)), block)
    elif comp == "zstd":
        yield from _regroup(_zstd_blocks(raw, report, min(block, _OUT_PIECE), zstd_layout), block)
    else:
        while data := raw.read(block):
            report.decoded += len(data)
            yield data


def _regroup(pieces: Iterator[bytes], block: int) -> Iterator[bytes]:
    """Join small decoded pieces into blocks of about ``block`` bytes (the last one shorter)."""
    pending: list[bytes] = []
    n = 0
    for piece in pieces:
        pending.append(piece)
        n += len(piece)
        if n >= block:
            yield pending[0] if len(pending) == 1 else b"".join(pending)
            pending, n = [], 0
    if pending:
        yield b"".join(pending)


def _drain(raw: IO[bytes]) -> int:
    n = 0
    while data := raw.read(_IN_BLOCK):
        n += len(data)
    return n


def _gzip_blocks(raw: IO[bytes], report: StreamReport, block: int) -> Iterator[bytes]:
    from isal import isal_zlib

    buf = b""  # compressed bytes read but not yet consumed by a decoder
    pos = 0  # offset in the file of buf[0]
    at_eof = False

    def fill() -> None:
        nonlocal buf, at_eof
        if not at_eof:
            chunk = raw.read(_IN_BLOCK)
            if chunk:
                buf += chunk
            else:
                at_eof = True

    def stop(trailing: bool, error: str | None = None) -> None:
        report.complete = False
        report.trailing = trailing
        report.error = error
        report.undecoded_at = pos
        report.undecoded_bytes = len(buf) + _drain(raw)

    while True:
        while len(buf) < 2 and not at_eof:
            fill()
        if not buf:
            return  # every member ended where the file ends
        if buf[:2] != GZIP_MAGIC:
            stop(trailing=True)
            return
        d = isal_zlib.decompressobj(16 + zlib.MAX_WBITS)
        while not d.eof:
            if not buf:
                fill()
                if not buf:  # the file ends inside the member
                    report.complete, report.truncated = False, True
                    return
            before = len(buf)
            try:
                out = d.decompress(buf, block)
            except Exception as exc:  # isal's IsalError (or zlib.error): a corrupt member
                stop(trailing=False, error=str(exc) or type(exc).__name__)
                return
            rest = d.unused_data if d.eof else d.unconsumed_tail
            pos += before - len(rest)
            buf = rest
            if out:
                report.decoded += len(out)
                yield out
        report.members += 1


#: zstd skippable frames: magic 0x184D2A50..0x184D2A5F, then a 4-byte size and the data.
_SKIPPABLE_MASK, _SKIPPABLE = 0xFFFFFFF0, 0x184D2A50


def zstd_frames_end(raw: IO[bytes]) -> tuple[int, bool, int]:
    """Walk the frames of a zstd file: (end of the valid data, last frame truncated, frames).

    Only headers are read (blocks are skipped by their sizes), so it is cheap. The end is where a
    non-frame byte starts (trailing bytes) or the end of the file.

    Example:
        >>> import io, zstandard
        >>> data = zstandard.ZstdCompressor().compress(b"x") * 2
        >>> zstd_frames_end(io.BytesIO(data + b"junk")) == (len(data), False, 2)
        True
    """
    raw.seek(0, 2)
    size = raw.tell()
    pos = 0
    frames = 0

    def read_at(offset: int, n: int) -> bytes:
        raw.seek(offset)
        return raw.read(n)

    while pos < size:
        head = read_at(pos, 4)
        if len(head) < 4:
            return pos, False, frames
        magic = struct.unpack("<I", head)[0]
        if magic & _SKIPPABLE_MASK == _SKIPPABLE:
            sz = read_at(pos + 4, 4)
            if len(sz) < 4 or pos + 8 + struct.unpack("<I", sz)[0] > size:
                return pos, True, frames
            pos += 8 + struct.unpack("<I", sz)[0]
            frames += 1
            continue
        if head != ZSTD_MAGIC:
            return pos, False, frames
        fhd_b = read_at(pos + 4, 1)
        if not fhd_b:
            return size, True, frames
        fhd = fhd_b[0]
        single = bool(fhd & 0x20)
        checksum = bool(fhd & 0x04)
        dict_size = (0, 1, 2, 4)[fhd & 0x03]
        fcs_size = (1 if single else 0, 2, 4, 8)[fhd >> 6]
        p = pos + 5 + (0 if single else 1) + dict_size + fcs_size
        while True:
            bh = read_at(p, 3)
            if len(bh) < 3:
                return size, True, frames
            value = bh[0] | (bh[1] << 8) | (bh[2] << 16)
            last, btype, bsize = value & 1, (value >> 1) & 3, value >> 3
            if btype == 3:  # reserved: not a valid block; treat as corrupt data from here
                return pos, False, frames
            p += 3 + (1 if btype == 1 else bsize)
            if p > size:
                return size, True, frames
            if last:
                break
        if checksum:
            p += 4
            if p > size:
                return size, True, frames
        pos = p
        frames += 1
    return pos, False, frames


@dataclass(frozen=True)
class ZstdLayout:
    """Where a zstd file's valid frames end (see :func:`zstd_frames_end`) and its size."""

    end: int
    truncated: bool
    frames: int
    size: int


def zstd_layout(raw: IO[bytes]) -> ZstdLayout:
    """The :class:`ZstdLayout` of a seekable file (its position is left at the start).

    Example:
        >>> import io, zstandard
        >>> zstd_layout(io.BytesIO(zstandard.ZstdCompressor().compress(b"x") + b"!")).frames
        1
    """
    end, truncated, frames = zstd_frames_end(raw)
    raw.seek(0, 2)
    size = raw.tell()
    raw.seek(0)
    return ZstdLayout(end, truncated, frames, size)


class _Bounded:
    """Reads of ``raw`` stop at ``end`` (the decoder must not see trailing bytes)."""

    def __init__(self, raw: IO[bytes], end: int) -> None:
        self.raw, self.left = raw, end

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        data = self.raw.read(self.left if n < 0 else min(n, self.left))
        self.left -= len(data)
        return data


def _zstd_blocks(raw: IO[bytes], report: StreamReport, block: int, layout: ZstdLayout | None) -> Iterator[bytes]:
    import zstandard

    start = 0  # a stream given with its layout is read from its start
    if layout is None:
        start = raw.tell()
        layout = zstd_layout(raw)
        raw.seek(start)
    bounded = _Bounded(raw, layout.end)
    reader = zstandard.ZstdDecompressor().stream_reader(cast(IO[bytes], bounded), read_size=block,
                                                        read_across_frames=True, closefd=False)
    while True:
        try:
            data = reader.read(block)
        except zstandard.ZstdError as exc:
            # the decoder had read the file up to here (in pieces of ``block``): the damage is before
            consumed = start + layout.end - bounded.left
            report.complete = False
            report.error = str(exc)
            report.undecoded_at = consumed
            report.undecoded_bytes = layout.size - consumed
            return
        if not data:
            break
        report.decoded += len(data)
        yield data
    report.members = layout.frames
    if layout.truncated:
        report.complete, report.truncated = False, True
    if layout.end < layout.size:
        report.complete, report.trailing = False, True
        report.undecoded_at, report.undecoded_bytes = layout.end, layout.size - layout.end
