"""The request-record tokeniser finds the same fields as its definition, on random records.

``extract_request._scan_one`` steps from one ``=`` or quote to the next instead of looking at every
byte; the reference below is the definition it replaced, written out in Python: at each position
try a kept dataclass field ``name=value`` (at a word boundary), then a kept dict key
``'name': value`` (the longest kept name the text starts with), then a literal consumed whole.
Random records built from the pieces that matter (kept and near-miss names, quotes, escapes,
literals that look like fields, dicts, unclosed quotes) must give the same spans.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from forensics.sources.engine import extract_request as xr
from forensics.sources.lines import read_only

_A = (b"rid", b"bootstrap_host", b"bootstrap_port", b"bootstrap_room", b"stream", b"headers")
_B = (b"id", b"prompt_tokens", b"completion_tokens", b"cached_tokens", b"e2e_latency", b"type", b"length",
      b"status_code", b"message")
_STOPS = b",()[]{}'\""


def _word(c: int) -> bool:
    return chr(c).isascii() and (chr(c).isalnum() or c == 95)


def _lit_end(b: bytes, i: int, e: int) -> int:
    q, j = b[i], i + 1
    while j < e:
        if b[j] == q:
            return j + 1
        j += 2 if b[j] == 92 else 1
    return -1


def _value_end(b: bytes, j: int, e: int, allow_dict: bool) -> int:
    if j >= e:
        return j
    c = b[j]
    if c in (39, 34) and (k := _lit_end(b, j, e)) > 0:
        return k
    if allow_dict and c == 123:
        k = j + 1
        while k < e:
            if b[k] == 125:
                return k + 1
            if b[k] == 123:
                break
            if b[k] in (39, 34):
                m = _lit_end(b, k, e)
                if m < 0:
                    break
                k = m
                continue
            k += 1
    if c in _STOPS or c == 32:
        return j
    k = j + 1
    while k < e and b[k] not in _STOPS:
        k += 1
    return k


def reference(b: bytes) -> list[tuple[int, int]]:
    """The spans of the 15 fields, by the definition (the loop the compiled tokeniser replaced)."""
    out = [(-1, -1)] * xr.N_FIELDS
    p, e = 0, len(b)
    while p < e:
        c = b[p]
        if c == 39:
            names = [n for n in range(len(_B)) if b.startswith(_B[n], p + 1)]
            if names:
                n = max(names, key=lambda x: len(_B[x]))
                k = p + 1 + len(_B[n])
                if b[k:k + 3] == b"': ":
                    v0 = k + 3
                    v1 = _value_end(b, v0, e, False)
                    out[6 + n] = (v0, v1)
                    p = max(v1, v0)
                    continue
        if c in (39, 34):
            k = _lit_end(b, p, e)
            p = k if k > 0 else p + 1
            continue
        if _word(c):
            r = p + 1
            while r < e and _word(b[r]):
                r += 1
            if r < e and b[r] == 61 and b[p:r] in _A:
                n = _A.index(b[p:r])
                v0 = r + 1
                v1 = _value_end(b, v0, e, True)
                if out[n][0] < 0:
                    out[n] = (v0, v1)
                p = max(v1, v0)
                continue
            p = r
            continue
        p += 1
    return out


def _compiled(b: bytes, at: int = 0) -> list[tuple[int, int]]:
    """The compiled tokeniser's spans (relative to the record) of ``b`` placed at byte ``at`` of a
    block whose other bytes are specials (quotes, ``=``): the bitmap's word edges fall anywhere in
    the record and nothing may be read past its end."""
    pad = b"'=\"" * (at // 3 + 1)
    block = pad[:at] + b + pad[: 130]
    buf = read_only(np.frombuffer(block, dtype=np.uint8).copy())
    out = np.empty((1, xr.N_FIELDS, 2), dtype=np.int64)
    xr._scan_one(buf, xr.specials(buf), at, at + len(b), out, 0, xr._A_DATA, xr._A_OFFS, xr._B_DATA, xr._B_OFFS,
                 xr._WORD)
    return [(int(out[0, f, 0]) - at if out[0, f, 0] >= 0 else -1, int(out[0, f, 1]) - at if out[0, f, 1] >= 0 else -1)
            for f in range(xr.N_FIELDS)]


_PIECES = [
    *(n.decode() + "=" for n in _A), *(f"'{n.decode()}': " for n in _B), "xrid=", "rid2=", "srid=", "_rid=",
    "ridx=", "text=", "input_ids=None", "=", "==", " =", "'", '"', "\\", "\\'", ": ", "': ", "'id'", "'ids': ",
    "'i': ", "'id':", "'id' : ", '"id": ', "{", "}", "(", ")", "[", "]", ",", ", ", " ", "None", "True", "42",
    "-7", "r1", "é", "ü=", "'a,b'", "'rid=\\'fake\\''", "\"x'y\"", "{'x-request-id': 'h1'}", "obj=X(",
    "out={'meta_info': {", "'abc", "rid='r9'", "bootstrap_room=12345", "stream=False",
]


@pytest.mark.parametrize("seed", range(8))
def test_the_tokeniser_finds_the_fields_its_definition_finds(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(400):
        record = "".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 40))).encode("utf-8")
        assert _compiled(record, rng.randrange(200)) == reference(record), record


@pytest.mark.parametrize(
    "record",
    [
        b"",
        b"rid='r1'",
        b"xrid='no', rid='yes'",
        b"text='rid=\\'fake\\'', rid='real'",
        b"'id': 'k', 'id': 'last'",
        b"'ids': 'no', 'id' : 'no', 'id': 'yes'",
        b"headers={'x-request-id': 'h'}, rid=r",
        b"'unclosed rid='r'",
        b"rid=a b c, bootstrap_room=7)",
        b"text='" + b"x" * 70 + b"', rid='after a literal longer than a bitmap word'",
        b"text='" + b"y" * 200 + b"\\'" + b"z" * 64 + b"', rid='r'",
        b"rid='unclosed at the end of the record",
    ],
)
@pytest.mark.parametrize("at", [0, 1, 63, 64, 127])
def test_the_tokeniser_on_the_shapes_that_matter(record: bytes, at: int) -> None:
    assert _compiled(record, at) == reference(record)
