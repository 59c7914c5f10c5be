"""The one decoder of gzip members and zstd frames: nothing decoded is lost when a later part is
damaged, and the damage is reported with where it is (``forensics.sources.compressed``)."""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Callable

import pytest
import zstandard

from forensics.sources.compressed import StreamReport, decoded_blocks

TEXT = b"".join(b"%08d the quick brown fox jumps over the lazy dog %d\n" % (i, i * 7919 % 10007) for i in range(30000))


def flip_middle(data: bytes) -> bytes:
    mid = len(data) // 2
    return data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:]


def flip_crc(data: bytes) -> bytes:
    """gzip: the member's CRC32 (8 bytes from its end) wrong, every deflate block intact."""
    return data[:-8] + bytes([data[-8] ^ 0xFF]) + data[-7:]


def zstd_checksummed(text: bytes) -> bytes:
    return zstandard.ZstdCompressor(write_checksum=True).compress(text)


def good_prefix(damaged: bytes, comp: str) -> bytes:
    """What an independent decoder gives before the damage (zlib / zstandard, in tiny steps)."""
    out = b""
    if comp == "gzip":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        for i in range(0, len(damaged), 512):
            try:
                out += d.decompress(damaged[i:i + 512])
            except zlib.error:
                break
        return out
    z = zstandard.ZstdDecompressor().decompressobj()
    for i in range(0, len(damaged), 512):
        try:
            out += z.decompress(damaged[i:i + 512])
        except zstandard.ZstdError:
            break
    return out


DAMAGE: list[tuple[str, str, Callable[[bytes], bytes]]] = [
    # label, compression, damage
    ("gzip CRC error at the member's end", "gzip", lambda t: flip_crc(gzip.compress(t))),
    ("gzip corrupt byte mid-stream", "gzip", lambda t: flip_middle(gzip.compress(t))),
    ("zstd checksum mismatch (a byte flipped mid-frame)", "zstd", lambda t: flip_middle(zstd_checksummed(t))),
]


@pytest.mark.parametrize(("label", "comp", "damage"), DAMAGE, ids=[d[0] for d in DAMAGE])
@pytest.mark.parametrize("block", [1 << 20, 4 << 20])
def test_damage_keeps_what_was_decoded_before_it_and_says_where(label: str, comp: str,
                                                                 damage: Callable[[bytes], bytes], block: int) -> None:
    data = damage(TEXT)
    report = StreamReport(comp)
    got = b"".join(decoded_blocks(io.BytesIO(data), comp, report, block=block))
    assert not report.complete and report.error is not None
    assert report.undecoded_at is not None and 0 < report.undecoded_at <= len(data)
    assert report.undecoded_bytes == len(data) - report.undecoded_at
    warning = report.warning()
    assert warning is not None and "None" not in warning and str(report.undecoded_at) in warning
    # every byte decoded is given, whatever the caller's block size: at most one small piece is lost
    # (a byte flipped inside deflate data may decode to garbage before zlib notices: the same here)
    good = good_prefix(data, comp)
    assert good.startswith(got) and len(got) > 0
    assert len(got) >= len(good) - (64 << 10) - (256 << 10)


@pytest.mark.parametrize("comp", ["gzip", "zstd"])
def test_blocks_are_regrouped_to_the_size_asked(comp: str) -> None:
    data = gzip.compress(TEXT) if comp == "gzip" else zstandard.ZstdCompressor().compress(TEXT)
    report = StreamReport(comp)
    blocks = list(decoded_blocks(io.BytesIO(data), comp, report, block=256 << 10))
    assert b"".join(blocks) == TEXT and report.complete
    assert all(len(b) >= 256 << 10 for b in blocks[:-1])
