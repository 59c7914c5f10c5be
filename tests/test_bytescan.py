"""The byte-class bitmaps find what numpy finds, at every size and chunk edge."""

from __future__ import annotations

import numpy as np
import pytest

from forensics.sources import bytescan as bs
from forensics.sources.lines import read_only

_CLASSES = {bs.NEWLINE: b"\n", bs.SPECIAL: b"'\"\\="}


def _reference(buf: np.ndarray, cls: int) -> np.ndarray:
    return np.flatnonzero(np.isin(buf, np.frombuffer(_CLASSES[cls], dtype=np.uint8)))


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 127, 4096, bs.CHUNK - 1, bs.CHUNK, bs.CHUNK + 1,
                                  2 * bs.CHUNK + 70])
@pytest.mark.parametrize("cls", [bs.NEWLINE, bs.SPECIAL])
def test_the_bitmap_marks_the_bytes_numpy_finds(size: int, cls: int) -> None:
    rng = np.random.default_rng(size)
    alphabet = np.frombuffer(b"ab\n'\"\\= \r\x1b\xc3\xa9", dtype=np.uint8)
    buf = read_only(rng.choice(alphabet, size).astype(np.uint8))
    words = bs.bitmap(buf, cls)
    assert words.shape[0] == size // 64 + 1
    assert bs.positions(words).tolist() == _reference(buf, cls).tolist()


@pytest.mark.parametrize(("text", "p", "e", "found"), [
    (b"abc", 0, 3, 3),              # none: the end
    (b"a=c", 0, 3, 1),
    (b"a=c", 2, 3, 3),              # past the only one
    (b"=" + b"x" * 200 + b"'", 1, 202, 201),  # across words
    (b"x" * 70 + b"'", 0, 70, 70),  # the one found lies at the end bound: not inside
    (b"'" * 10, 3, 3, 3),           # an empty range
])
def test_next_set_stays_inside_its_range(text: bytes, p: int, e: int, found: int) -> None:
    words = bs.bitmap(np.frombuffer(text, dtype=np.uint8), bs.SPECIAL)
    assert bs.next_set(words, p, e) == found


@pytest.mark.parametrize(("text", "counts"), [
    (b"", (0, 0)),
    (b"plain ascii", (0, 0)),
    (b"\x1b[31mred\x1b[0m", (2, 0)),
    ("café ü".encode(), (0, 4)),
    (b"\xff\xfe", (0, 2)),
])
def test_byte_counts(text: bytes, counts: tuple[int, int]) -> None:
    assert bs.byte_counts(np.frombuffer(text, dtype=np.uint8)) == counts


def test_positions_beyond_the_first_guess_are_all_kept() -> None:
    buf = np.frombuffer(b"\n" * 10_000, dtype=np.uint8)
    assert bs.positions(bs.bitmap(buf, bs.NEWLINE), expect=1).tolist() == list(range(10_000))
