"""Blocks prepared ahead on other threads, finished in file order, give the rows of one serial scan.

``Scanner.prepare`` (repairs, prefixes, kinds, the bulk kinds' columns) holds no state across
blocks, so the loader runs it for the next blocks on other threads while ``Scanner.finish`` takes
the blocks in file order with what they carry: the date reached by time-only lines, the last
timed line, a router error waiting for its wrapped second line, the zone samples. Each case below
puts such a carry across a block cut; finishing the blocks in the reverse order must change the
result, or the case would not guard the order.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import pytest

from forensics.case import open_case
from forensics.sources.engine import loader
from forensics.sources.engine.scan import Scanned, Scanner
from forensics.sources.engine.sql import MACROS
from forensics.sources.lines import LineBatch

FIX = Path(__file__).resolve().parent / "fixtures"

_DECODE = b"Decode batch. #running-req: 1, #token: 97, token usage: 0.00, gen throughput (token/s): 20.50, #queue-req: 0, "
_FINISH = (b"Finish: obj=GenerateReqInput(rid='r1', stream=True, bootstrap_room=7), out={'meta_info': {'id': 'r1', "
           b"'prompt_tokens': 5, 'completion_tokens': 2, 'e2e_latency': 1.5}}")

# (name, tz, blocks): each block is one LineBatch, in file order
CARRIES: list[tuple[str, str, list[bytes]]] = [
    ("the date reached by time-only lines", "UTC", [
        b'[2025-01-14 23:59:59] INFO:     127.0.0.1:51234 - "POST /generate HTTP/1.1" 200 OK\n',
        b"[00:00:03 TP0] " + _DECODE + b"\n",
        b"[08:05:51 TP0] " + _DECODE + b"\n"]),
    ("the last timed line, for lines without a time", "UTC", [
        b"[2026-01-01 10:00:00 TP0] " + _DECODE + b"\n",
        b"Traceback (most recent call last):\n" + _FINISH + b"\n",
        b"[2026-01-01 10:00:05 TP0] " + _DECODE + b"\nValueError: x\n"]),
    ("a router error waiting for its wrapped line", "UTC", [
        b"2025-08-31 07:32:08 ERROR sglang_router_rs::routers::http::pd_router: src/routers/http/pd_router.rs:1319: "
        b"Decode server returned error status request_id=\"r9\" bootstrap_room=12\n",
        b"status=503 body: overloaded\n"]),
    ("the zone samples and the times in a zone", "Asia/Singapore", [
        b"1772323800000\t[2026-03-01 08:10:00 TP0] " + _DECODE + b"\n",
        b"1772323860000\t[2026-03-01 08:11:00 TP0] " + _FINISH + b"\n",
        b"1772323920000\t[2026-03-01 08:12:00 TP0] " + _DECODE + b"\n"]),
]


def _scanner(tz: str) -> Scanner:
    con = duckdb.connect()
    con.execute(MACROS)
    sc = Scanner(con, tz=tz)
    sc.prep_con = con.cursor()
    return sc


def _batches(blocks: list[bytes]) -> list[LineBatch]:
    out, line, off = [], 1, 0
    for b in blocks:
        out.append(LineBatch.from_bytes(b, first_line=line, first_offset=off))
        line, off = out[-1].next_line, out[-1].next_offset
    return out


def _seen(outs: list[Scanned], sc: Scanner) -> dict[str, Any]:
    """Every row of every block by table (in line order), and what the scanner carried to the end."""
    rows: dict[str, list[Any]] = {}
    for o in [*outs, sc.flush()]:
        for t, tb in o.tables.items():
            rows.setdefault(t, []).extend(tb.to_pylist())
    for v in rows.values():
        v.sort(key=lambda r: (r["line_no"], str(r)))
    pairs = [(a.tolist(), b.tolist()) for a, b in sc.tz_pairs]
    return {"rows": rows, "pairs": sorted(pairs), "days": (sc.days.day, sc.days.last_tod),
            "carry": (sc.carry.line_no, sc.carry.ts)}


def _serial(tz: str, blocks: list[bytes]) -> dict[str, Any]:
    sc = _scanner(tz)
    return _seen([sc.scan(b) for b in _batches(blocks)], sc)


def _prepared_ahead(tz: str, blocks: list[bytes], order: slice = slice(None)) -> dict[str, Any]:
    """Every block prepared first, on two threads, then finished in ``order``."""
    sc = _scanner(tz)
    with ThreadPoolExecutor(max_workers=2) as pool:
        preps = list(pool.map(sc.prepare, _batches(blocks)))
    return _seen([sc.finish(p) for p in preps[order]], sc)


@pytest.mark.parametrize(("name", "tz", "blocks"), CARRIES, ids=[c[0] for c in CARRIES])
def test_blocks_prepared_ahead_and_finished_in_order_give_the_serial_rows(name: str, tz: str,
                                                                           blocks: list[bytes]) -> None:
    assert _prepared_ahead(tz, blocks) == _serial(tz, blocks)


@pytest.mark.parametrize(("name", "tz", "blocks"), CARRIES, ids=[c[0] for c in CARRIES])
def test_blocks_finished_out_of_order_give_other_rows(name: str, tz: str, blocks: list[bytes]) -> None:
    """The guard of the test above: each case's carry does cross a block cut."""
    assert _prepared_ahead(tz, blocks, slice(None, None, -1)) != _serial(tz, blocks)


def _digest(paths: list[str], tz: str, **kw: Any) -> dict[str, list[str]]:
    case = open_case(":memory:")
    case.ingest_engine(paths, tz=tz, **kw)
    tables = ("engine_batches", "engine_requests", "engine_rejections", "engine_events", "engine_http",
              "router_requests", "engine_other_lines", "engine_startup_facts", "engine_starts", "rejected_lines",
              "engine_line_kinds")
    return {t: sorted(map(str, case.sql(f"SELECT * EXCLUDE (file_id) FROM {t}").fetchall())) for t in tables}


@pytest.mark.parametrize(
    ("paths", "tz"),
    [
        ([f"n={FIX / 'engine_shapes' / 'dateless.log'}"], "UTC"),
        ([f"n={FIX / 'engine' / 'router'}"], "UTC"),
        ([f"n={FIX / 'engine' / 'v0_5_6'}"], "Asia/Singapore"),
        ([f"n={FIX / 'engine' / 'v0_5_11'}"], "auto"),
    ],
    ids=["dateless", "router", "v0_5_6", "v0_5_11-auto"],
)
def test_the_loader_with_blocks_prepared_ahead_gives_the_rows_of_one_thread(
        paths: list[str], tz: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of ~100 bytes (a line or two each): every carry crosses a cut, three blocks in flight."""
    monkeypatch.setattr(loader, "PREPARE_WORKERS", 0)
    serial = _digest(paths, tz, chunk_bytes=100)
    monkeypatch.setattr(loader, "PREPARE_WORKERS", 2)
    assert _digest(paths, tz, chunk_bytes=100) == serial
