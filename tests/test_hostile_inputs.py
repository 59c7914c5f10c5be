"""Hostile inputs: every case a hostile tester tried, generated at test time, as a table.

For every case the evidence reconciles: each file's ``lines_read`` equals an independent count of
its physical lines (made here from the bytes written, not by the toolkit's reader), and
``loaded + rejected + duplicate = lines_read``, with the rows in the tables to match; or the case
gives the documented one-line error. Then what the case is about is checked (flags, reasons,
line numbers).
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import zstandard
from conftest import evidence_state

import forensics
from forensics.errors import ForensicsError

T0 = 1788357791482000000


def cf(i: int, **over: Any) -> bytes:
    """One Cloudflare http_requests record (a line, no line end)."""
    rec = {"RayID": f"ray{i:06d}", "EdgeStartTimestamp": T0 + i * 1_000_000_000,
           "EdgeEndTimestamp": T0 + i * 1_000_000_000 + 5_000_000, "EdgeResponseStatus": 200,
           "ClientRequestPath": f"/client/v4/accounts/t{i % 7}/ai/run/@cf/m", "ClientRequestBytes": 100 + i}
    rec.update(over)
    return json.dumps(rec).encode()


def body(n: int, start: int = 0) -> bytes:
    return b"".join(cf(i) + b"\n" for i in range(start, start + n))


def physical_lines(text: bytes) -> int:
    """An independent count of the physical lines of decompressed text."""
    return text.count(b"\n") + (1 if text and not text.endswith(b"\n") else 0)


def zlib_readable(data: bytes) -> bytes:
    """What gzip -dc gives for concatenated members, the last one possibly cut (zlib, not the toolkit)."""
    out = b""
    while data:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += d.decompress(data)
        except zlib.error:
            break
        if not d.eof:
            break
        data = d.unused_data
        if data[:2] != b"\x1f\x8b":
            break
    return out


@dataclass
class Hostile:
    """One case: files to write, how to ingest them, what must come out."""

    label: str
    #: writes the files under the directory given; returns what to ingest
    build: Callable[[Path], list[Path]]
    #: per file name: its independent physical line count (decompressed)
    lines: dict[str, int]
    format: str = "cloudflare-http"
    #: per file name: expected (loaded, rejected, duplicate); None: any that reconciles
    counts: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    complete: dict[str, bool] = field(default_factory=dict)
    #: per file name: substrings its warning must contain
    warning: dict[str, str] = field(default_factory=dict)
    #: (file name, line_no, substring of the reason) of rejected lines
    reasons: list[tuple[str, int, str]] = field(default_factory=list)
    #: (file name, line numbers of loaded rows): exact numbering
    loaded_lines: dict[str, list[int]] = field(default_factory=dict)


def _w(d: Path, name: str, data: bytes) -> Path:
    p = d / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


GZ = gzip.compress(body(40))
ZST = zstandard.ZstdCompressor().compress(body(3000))
ZST_CUT = ZST[: len(ZST) * 2 // 3]
ZST_READABLE = b""
try:
    _r = zstandard.ZstdDecompressor().decompressobj()
    ZST_READABLE = _r.decompress(ZST_CUT)
except zstandard.ZstdError:  # pragma: no cover - decompressobj gives the decodable prefix
    pass
PARTIAL = GZ[: len(GZ) // 2]
PARTIAL_TEXT = zlib_readable(GZ + PARTIAL)
HUGE = cf(3, pad="x" * (33 << 20))
WRONG = [
    cf(0, EdgeResponseStatus=99999999999), cf(1, EdgeResponseStatus="abc"), cf(2, EdgeResponseStatus=200.7),
    cf(3, EdgeStartTimestamp="yesterday"), cf(4, EdgeStartTimestamp=True), cf(5, EdgeStartTimestamp="NaN"),
    cf(6, EdgeStartTimestamp=12345678901234567890123456), cf(7), cf(8, EdgeResponseStatus=200.0),
]
DEEP = cf(1)[:-1] + b', "deep": ' + b"[" * 5000 + b"]" * 5000 + b"}"

CASES = [
    Hostile("gzip + zero padding after the last member",
            lambda d: [_w(d, "pad.ndjson.gz", GZ + b"\0" * 512)], {"pad.ndjson.gz": 40},
            counts={"pad.ndjson.gz": (40, 0, 0)}, complete={"pad.ndjson.gz": False},
            warning={"pad.ndjson.gz": "512 bytes after the last complete gzip member"}),
    Hostile("gzip + garbage after the last member",
            lambda d: [_w(d, "junk.ndjson.gz", GZ + b"not gzip at all")], {"junk.ndjson.gz": 40},
            counts={"junk.ndjson.gz": (40, 0, 0)}, complete={"junk.ndjson.gz": False},
            warning={"junk.ndjson.gz": "15 bytes after the last complete gzip member"}),
    Hostile("gzip + a partial copy of itself appended",
            lambda d: [_w(d, "copy.ndjson.gz", GZ + PARTIAL)], {"copy.ndjson.gz": physical_lines(PARTIAL_TEXT)},
            complete={"copy.ndjson.gz": False}, warning={"copy.ndjson.gz": "truncated gzip"},
            reasons=[("copy.ndjson.gz", physical_lines(PARTIAL_TEXT), "cut by the end")]),
    Hostile("truncated zstd",
            lambda d: [_w(d, "cut.ndjson.zst", ZST_CUT)], {"cut.ndjson.zst": physical_lines(ZST_READABLE)},
            complete={"cut.ndjson.zst": False}, warning={"cut.ndjson.zst": "truncated zstd"},
            reasons=[("cut.ndjson.zst", physical_lines(ZST_READABLE), "cut by the end")]),
    Hostile("an NDJSON line over 32 MiB",
            lambda d: [_w(d, "huge.ndjson", body(3) + HUGE + b"\n" + body(3, 4))], {"huge.ndjson": 7},
            counts={"huge.ndjson": (6, 1, 0)}, reasons=[("huge.ndjson", 4, "longer than the 8 MiB")],
            loaded_lines={"huge.ndjson": [1, 2, 3, 5, 6, 7]}),
    Hostile("an empty file in a directory",
            lambda d: [_w(d, "dir/a.ndjson", body(5)).parent, _w(d, "dir/b-empty.ndjson", b""),
                       _w(d, "dir/c.ndjson", body(4, 5))][:1],
            {"a.ndjson": 5, "b-empty.ndjson": 0, "c.ndjson": 4}, format="auto",
            counts={"a.ndjson": (5, 0, 0), "b-empty.ndjson": (0, 0, 0), "c.ndjson": (4, 0, 0)}),
    Hostile("wrong value types: never coerced, each line rejected naming the field",
            lambda d: [_w(d, "types.ndjson", b"\n".join(WRONG) + b"\n")], {"types.ndjson": 9},
            counts={"types.ndjson": (2, 7, 0)},
            reasons=[("types.ndjson", 1, "invalid status (EdgeResponseStatus): 99999999999"),
                     ("types.ndjson", 2, "invalid status (EdgeResponseStatus): abc"),
                     ("types.ndjson", 3, "invalid status (EdgeResponseStatus): 200.7"),
                     ("types.ndjson", 4, "unparseable timestamp in ts_start (EdgeStartTimestamp): yesterday"),
                     ("types.ndjson", 5, "unparseable timestamp in ts_start (EdgeStartTimestamp): true"),
                     ("types.ndjson", 6, "unparseable timestamp in ts_start (EdgeStartTimestamp): NaN"),
                     ("types.ndjson", 7, "in ts_start (EdgeStartTimestamp): 12345678901234567890123456")],
            loaded_lines={"types.ndjson": [8, 9]}),
    Hostile("JSON nested 5,000 deep",
            lambda d: [_w(d, "deep.ndjson", cf(0) + b"\n" + DEEP + b"\n" + cf(2) + b"\n")], {"deep.ndjson": 3},
            counts={"deep.ndjson": (2, 1, 0)}, reasons=[("deep.ndjson", 2, "nested 1000 or more levels deep")]),
    Hostile("a Logpush hourly file holding one record (a quiet hour), auto-detected",
            lambda d: [_w(d, "20260902/20260902T000000Z_20260902T010000Z_ab.log.gz", gzip.compress(cf(0) + b"\n")).parent,
                       _w(d, "20260902/20260902T010000Z_20260902T020000Z_cd.log.gz", gzip.compress(cf(1)))][:1],
            {"20260902T000000Z_20260902T010000Z_ab.log.gz": 1, "20260902T010000Z_20260902T020000Z_cd.log.gz": 1},
            format="auto", counts={"20260902T000000Z_20260902T010000Z_ab.log.gz": (1, 0, 0),
                                   "20260902T010000Z_20260902T020000Z_cd.log.gz": (1, 0, 0)}),
    Hostile("CRLF line ends and no final line end",
            lambda d: [_w(d, "crlf.ndjson", body(3).replace(b"\n", b"\r\n") + cf(9))], {"crlf.ndjson": 4},
            counts={"crlf.ndjson": (4, 0, 0)}),
]


def _check_reconciles(case: forensics.Case) -> None:
    rows = case.sql("SELECT file_id, lines_read, rows_loaded, rows_rejected, rows_duplicate, status "
                    "FROM evidence_files").fetchall()
    for fid, read, loaded, rejected, dup, status in rows:
        assert status == "done"
        assert read == loaded + rejected + dup, fid
        n, d = case.sql("SELECT count(*), count(*) FILTER (WHERE is_duplicate) FROM gateway_requests "
                        "WHERE file_id = $f", {"f": fid}).fetchall()[0]
        r = case.sql("SELECT count(*) FROM rejected_lines WHERE file_id = $f", {"f": fid}).fetchall()[0][0]
        assert (n - d, d, r) == (loaded, dup, rejected), fid


@pytest.mark.parametrize("h", CASES, ids=[c.label for c in CASES])
def test_hostile_gateway_inputs_reconcile(tmp_path: Path, h: Hostile) -> None:
    paths = h.build(tmp_path / "in")
    before = evidence_state([tmp_path / "in"])
    case = forensics.open_case(tmp_path / "case.duckdb")
    s = case.ingest_gateway(paths, format=h.format)
    assert evidence_state([tmp_path / "in"]) == before  # sources are never modified (sha256, size, mtime)
    by_name = {Path(f.path).name: f for f in s.files}
    assert set(by_name) == set(h.lines)
    for name, n in h.lines.items():
        f = by_name[name]
        assert f.lines_read == n, (name, f)
        assert f.reconciles, f
        if name in h.counts:
            assert (f.rows_loaded, f.rows_rejected, f.rows_duplicate) == h.counts[name], (name, f)
        if name in h.complete:
            assert f.complete is h.complete[name], f
        if name in h.warning:
            assert any(h.warning[name] in w for w in f.warnings), (name, f.warnings)
    _check_reconciles(case)
    ids = {Path(p).name: fid for fid, p in case.sql("SELECT file_id, path FROM evidence_files").fetchall()}
    for name, line, reason in h.reasons:
        got = case.sql("SELECT reason FROM rejected_lines WHERE file_id = $f AND line_no = $l",
                       {"f": ids[name], "l": line}).fetchall()
        assert got and reason in got[0][0], (name, line, got)
    for name, lines in h.loaded_lines.items():
        got = [r[0] for r in case.sql("SELECT line_no FROM gateway_requests WHERE file_id = $f ORDER BY 1",
                                      {"f": ids[name]}).fetchall()]
        assert got == lines


def test_symlinked_directories_are_followed_once_with_the_resolved_path(tmp_path: Path) -> None:
    real = tmp_path / "real"
    _w(real, "a/h1.ndjson", body(3))
    (real / "a" / "loop").symlink_to(real, target_is_directory=True)  # a loop back to the top
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    case = forensics.open_case(":memory:")
    s = case.ingest_gateway(tmp_path / "link", format="cloudflare-http")
    assert [f.lines_read for f in s.files] == [3]
    assert case.sql("SELECT path FROM evidence_files").fetchall() == [(str((real / "a" / "h1.ndjson").resolve()),)]


def pretend_unreadable(monkeypatch: pytest.MonkeyPatch, bad: Path) -> None:
    """Make ``bad`` (a file or a directory) unreadable to the loaders: the tests may run as root."""
    import os

    real_access, real_walk = os.access, os.walk

    def access(p: Any, mode: int, **kw: Any) -> bool:
        return False if Path(p) == bad else real_access(p, mode, **kw)

    def walk(top: Any, **kw: Any) -> Any:
        for entry in real_walk(top, **kw):
            if Path(entry[0]) == bad:
                kw["onerror"](PermissionError(13, "Permission denied", str(bad)))
                continue
            yield entry

    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(os, "walk", walk)


UNREADABLE_CASES = [
    ("a file", "file"),
    ("a directory", "dir"),
]


@pytest.mark.parametrize(("label", "what"), UNREADABLE_CASES, ids=[c[0] for c in UNREADABLE_CASES])
def test_unreadable_paths_are_one_line_errors_or_listed_as_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, label: str, what: str) -> None:
    d = tmp_path / "logs"
    _w(d, "ok.ndjson", body(2))
    bad = _w(d, "sub/locked.ndjson", body(2, 2)) if what == "file" else (d / "sub")
    if what == "dir":
        _w(d, "sub/inner.ndjson", body(2, 2))
    pretend_unreadable(monkeypatch, bad)
    case = forensics.open_case(":memory:")
    with pytest.raises(ForensicsError, match=f"cannot read {bad}: permission denied"):
        case.ingest_gateway(d, format="cloudflare-http")
    s = case.ingest_gateway(d, format="cloudflare-http", skip_unreadable=True)
    assert [(Path(f.path).name, f.not_read) for f in s.files if f.not_read] == [(bad.name, "permission denied")]
    assert "NOT READ" in s.render()
    assert sum(f.rows_loaded for f in s.files) == 2
    # the case remembers it (a later report must say the answer rests on partial evidence) ...
    assert case.sql("SELECT path, kind, reason FROM unread_paths").fetchall() == [
        (str(bad.resolve()), "gateway", "permission denied")]
    # ... until an ingest reads it
    monkeypatch.undo()
    case.ingest_gateway(d, format="cloudflare-http")
    assert case.sql("SELECT count(*) FROM unread_paths").fetchall() == [(0,)]
    assert case.sql("SELECT sum(rows_loaded) FROM evidence_files").fetchall() == [(4,)]


# -- growth -------------------------------------------------------------------------------------


GROWTH_CASES = [
    # label, first version, appended bytes, compression, lines of v1, lines of v2 as read
    ("NDJSON gained lines", body(10), body(5, 10), "none", 10, 15),
    ("gzip gained a member", body(10), body(5, 10), "gzip", 10, 15),
    ("NDJSON cut mid-line, then completed", body(10) + cf(10)[:30], cf(10)[30:] + b"\n" + body(4, 11), "none",
     11, 15),
]


@pytest.mark.parametrize(("label", "v1", "more", "comp", "n1", "n2"), GROWTH_CASES, ids=[c[0] for c in GROWTH_CASES])
def test_a_grown_gateway_file_loads_only_its_new_lines(tmp_path: Path, label: str, v1: bytes, more: bytes,
                                                        comp: str, n1: int, n2: int) -> None:
    p = tmp_path / ("live.ndjson.gz" if comp == "gzip" else "live.ndjson")
    p.write_bytes(gzip.compress(v1) if comp == "gzip" else v1)
    case = forensics.open_case(tmp_path / "case.duckdb")
    first = case.ingest_gateway(p, format="cloudflare-http").files[0]
    assert first.lines_read == n1
    size1 = p.stat().st_size
    import hashlib

    sha1 = hashlib.sha256(p.read_bytes()).hexdigest()
    with open(p, "ab") as fh:
        fh.write(gzip.compress(more) if comp == "gzip" else more)
    second = case.ingest_gateway(p, format="cloudflare-http").files[0]
    assert second.skipped is None and any("grew since file_id 1" in w for w in second.warnings)
    # every record once, numbered by its physical line in the grown file
    got = case.sql("SELECT line_no, request_id FROM gateway_requests ORDER BY line_no").fetchall()
    assert got == [(i + 1, f"ray{i:06d}") for i in range(15)]
    prior = case.sql("SELECT prior_file_id, prior_sha256, prior_size, first_line FROM evidence_files "
                     "WHERE file_id = 2").fetchall()[0]
    assert prior[:3] == (1, sha1, size1)
    _check_reconciles(case)
    assert sum(r[0] for r in case.sql("SELECT lines_read FROM evidence_files").fetchall()) == n2
    third = case.ingest_gateway(p, format="cloudflare-http").files[0]
    assert third.skipped is not None


def test_another_file_starting_with_a_known_files_bytes_is_loaded_whole(tmp_path: Path) -> None:
    # a retry log repeating the edge's first record is not the edge log grown: nothing of it is lost
    edge = _w(tmp_path, "edge/edge.ndjson", body(3))
    other = _w(tmp_path, "retry/retry.ndjson", body(3) + body(2, 3))
    case = forensics.open_case(":memory:")
    case.ingest_gateway(edge, format="cloudflare-http")
    f = case.ingest_gateway(other, format="cloudflare-http").files[0]
    assert (f.lines_read, f.rows_loaded + f.rows_duplicate) == (5, 5) and not any("grew" in w for w in f.warnings)
    assert case.sql("SELECT prior_file_id, first_line FROM evidence_files WHERE file_id = 2").fetchall() == [(None, 1)]
    # the same file name collected again into another folder is the same source: only its new lines
    again = _w(tmp_path, "second-copy/edge.ndjson", body(3) + body(1, 10))
    g = case.ingest_gateway(again, format="cloudflare-http").files[0]
    assert (g.lines_read, g.rows_loaded) == (1, 1) and any("grew since file_id 1" in w for w in g.warnings)
    _check_reconciles(case)


def test_a_grown_csv_export_loads_only_its_new_rows(tmp_path: Path) -> None:
    header = "request_id,team_id,model_group,startTime,endTime,status,prompt_tokens,completion_tokens,spend"
    row = "r{0},team-1,glm,2026-09-02 00:00:0{0},2026-09-02 00:01:0{0},success,10,5,0.1"
    p = tmp_path / "SpendLogs.csv"
    p.write_text("\n".join([header, *(row.format(i) for i in range(3))]) + "\n")
    case = forensics.open_case(":memory:")
    case.ingest_gateway(p, format="litellm")
    with open(p, "a") as fh:
        fh.write("\n".join(row.format(i) for i in range(3, 6)) + "\n")
    s = case.ingest_gateway(p, format="litellm").files[0]
    assert (s.lines_read, s.rows_loaded) == (3, 3)
    got = case.sql("SELECT line_no, request_id FROM gateway_requests ORDER BY 1").fetchall()
    assert got == [(i + 2, f"r{i}") for i in range(6)]


LITELLM_HEADER = "request_id,team_id,model_group,startTime,endTime,status,metadata,prompt_tokens"


def litellm_row(i: int) -> str:
    # a quoted JSON field (doubled quotes) like LiteLLM's metadata; every third one spans two lines
    meta = '{""user_api_key_team_alias"": ""t' + str(i) + '""' + (',\n ""k"": 1}' if i % 3 == 0 else '}')
    return f'r{i},team-{i % 4},glm,2026-09-02 00:00:{i:02d},2026-09-02 00:01:{i:02d},success,"{meta}",{10 + i}'


LIVE_CSV = ("\n".join([LITELLM_HEADER, *(litellm_row(i) for i in range(12))]) + "\n").encode()
_QUOTE = LIVE_CSV.index(b'""t7""')  # inside the quoted field of record r7

LIVE_CSV_CUTS = [
    # label, where the exporter was when the file was read, format, complete records then
    ("inside a quoted field, auto-detected", _QUOTE, "auto", 7),
    ("inside a quoted field, litellm preset", _QUOTE, "litellm", 7),
    ("inside an unquoted field", LIVE_CSV.index(b"r9,") + 2, "auto", 9),
    ("at a record end", LIVE_CSV.index(b"r5,"), "auto", 5),
]


@pytest.mark.parametrize(("label", "cut", "fmt", "complete"), LIVE_CSV_CUTS, ids=[c[0] for c in LIVE_CSV_CUTS])
def test_a_live_csv_export_cut_anywhere_loads_its_records_then_the_rest(
        tmp_path: Path, label: str, cut: int, fmt: str, complete: int) -> None:
    # DuckDB's CSV sniffer refused a whole export whose last record was cut inside quotes (what an
    # exporter still writing leaves); the dialect now comes from the header alone
    p = _w(tmp_path / "in", "SpendLogs.csv", LIVE_CSV[:cut])
    case = forensics.open_case(tmp_path / "case.duckdb")
    first = case.ingest_gateway(p, format=fmt).files[0]
    assert first.rows_loaded == complete and first.reconciles, first
    assert first.rows_rejected == (0 if LIVE_CSV[cut - 1:cut] == b"\n" else 1), first
    _check_reconciles(case)
    with open(p, "ab") as fh:  # the exporter finishes
        fh.write(LIVE_CSV[cut:])
    second = case.ingest_gateway(p, format=fmt).files[0]
    assert any("grew since file_id 1" in w for w in second.warnings), second.warnings
    _check_reconciles(case)
    once = forensics.open_case(tmp_path / "once.duckdb")
    once.ingest_gateway(p, format=fmt)
    rows = "SELECT line_no, request_id, tenant_id, ts_start FROM gateway_requests ORDER BY line_no"
    assert case.sql(rows).fetchall() == once.sql(rows).fetchall()
    assert [r[1] for r in case.sql(rows).fetchall()] == [f"r{i}" for i in range(12)]
    assert case.sql("SELECT count(*) FROM rejected_lines").fetchall() == [(0,)]


def test_a_file_that_grows_while_read_loads_its_snapshot_and_the_rest_next_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from forensics.sources.gateway import ingest

    p = tmp_path / "live.ndjson"
    p.write_bytes(body(20))
    real = ingest.scan_file
    grown = []

    def scan_then_grow(*a: Any, **k: Any) -> Any:
        out = real(*a, **k)
        if not grown:  # the writer appends while the loader works
            grown.append(True)
            with open(p, "ab") as fh:
                fh.write(body(5, 20))
        return out

    monkeypatch.setattr(ingest, "scan_file", scan_then_grow)
    case = forensics.open_case(":memory:")
    f = case.ingest_gateway(p, format="cloudflare-http").files[0]
    assert f.lines_read == 20 and any("grew from" in w and "next ingest" in w for w in f.warnings), f.warnings
    assert case.sql("SELECT count(*) FROM gateway_requests").fetchall() == [(20,)]
    import hashlib

    assert case.sql("SELECT sha256, size FROM evidence_files").fetchall() == [
        (hashlib.sha256(body(20)).hexdigest(), len(body(20)))]
    monkeypatch.setattr(ingest, "scan_file", real)
    g = case.ingest_gateway(p, format="cloudflare-http").files[0]
    assert (g.lines_read, g.rows_loaded) == (5, 5)
    assert case.sql("SELECT count(*), max(line_no) FROM gateway_requests").fetchall() == [(25, 25)]


# -- prompt text never stored ------------------------------------------------------------------------


def test_prompt_text_never_reaches_the_case_from_rejected_lines(tmp_path: Path) -> None:
    marker = "PROMPTMARKER"
    header = "request_id,team_id,model_group,startTime,endTime,status,messages,prompt_tokens"
    csv_rows = [header,
                f'r1,team-1,glm,2026-09-02 00:00:01,2026-09-02 00:01:01,success,"[{{""role"": ""user"", ""content"": ""{marker} a""}}]",10',
                f'r2,team-1,glm,2026-09-02 00:00:02,2026-09-02 00:01:02,success,"{marker} c",10,one too many',
                f'r3,team-1,glm,not-a-time,2026-09-02 00:01:03,success,"{marker} b",10']
    _w(tmp_path / "in", "litellm/SpendLogs.csv", ("\n".join(csv_rows) + "\n").encode())
    cut = cf(1, RequestBody={"messages": [{"content": marker}]})
    _w(tmp_path / "in", "cf/h.ndjson.gz", gzip.compress(cf(0) + b"\n" + cut + b"\n")[:-12])
    _w(tmp_path / "in", "cf2/bad.ndjson", cf(0) + b"\n" + b'{"RayID": "x", "prompt": "' + marker.encode() + b'", \n')
    db = tmp_path / "case.duckdb"
    case = forensics.open_case(db)
    case.ingest_gateway(tmp_path / "in" / "litellm", format="litellm")
    case.ingest_gateway([tmp_path / "in" / "cf", tmp_path / "in" / "cf2"], format="cloudflare-http")
    assert case.sql("SELECT count(*) FROM rejected_lines").fetchall()[0][0] >= 3
    for (table,) in case.sql("SELECT table_name FROM information_schema.tables WHERE table_schema='main'").fetchall():
        text = case.sql(f'SELECT string_agg(CAST(COLUMNS(*) AS VARCHAR), \'|\') FROM "{table}"').fetchall()
        assert marker not in str(text), table
    case.con.execute("CHECKPOINT")
    case.close()
    assert marker.encode() not in db.read_bytes()


# -- engine logs ----------------------------------------------------------------------------------------

ENGINE_FIX = Path(__file__).resolve().parent / "fixtures" / "engine"
ENGINE_TABLES = ("engine_batches", "engine_requests", "engine_rejections", "engine_events", "engine_http",
                 "router_requests", "engine_other_lines")


def _engine_rows(case: forensics.Case) -> list[tuple[Any, ...]]:
    """Every engine row (without file_id: a grown file's rows come from two versions)."""
    out: list[tuple[Any, ...]] = []
    for t in ENGINE_TABLES:
        out += [(t, *r) for r in case.sql(f"SELECT * EXCLUDE (file_id) FROM {t} ORDER BY line_no").fetchall()]
    return sorted(out, key=repr)


def _engine_reconciles(case: forensics.Case) -> None:
    for fid, read, loaded, rejected in case.sql(
            "SELECT file_id, lines_read, rows_loaded, rows_rejected FROM evidence_files").fetchall():
        n = sum(case.sql(f"SELECT count(*) FROM {t} WHERE file_id = $f", {"f": fid}).fetchall()[0][0]
                for t in ENGINE_TABLES)
        r = case.sql("SELECT count(*) FROM rejected_lines WHERE file_id = $f", {"f": fid}).fetchall()[0][0]
        assert (read, loaded, rejected) == (n + r, n, r), fid


@pytest.mark.parametrize("cut", [6, 11], ids=["at a line end", "inside a line"])
def test_a_grown_engine_log_loads_only_its_new_lines(tmp_path: Path, cut: int) -> None:
    lines = (ENGINE_FIX / "v0_5_23" / "decode-9.log").read_bytes().splitlines(keepends=True)
    whole = b"".join(lines)
    offset = len(b"".join(lines[:cut])) - (7 if cut == 11 else 0)  # 7 bytes short: the copy ends mid-line
    logs = tmp_path / "logs"
    log = logs / "decode-9" / "sglang.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(whole[:offset])
    case = forensics.open_case(tmp_path / "grown.duckdb")
    case.ingest_engine([logs], tz="UTC")
    with open(log, "ab") as fh:
        fh.write(whole[offset:])
    s = case.ingest_engine([logs], tz="UTC")
    assert any("grew since file_id 1" in w for w in s.files[0].warnings)
    once = forensics.open_case(tmp_path / "once.duckdb")
    once.ingest_engine([logs], tz="UTC")
    assert _engine_rows(case) == _engine_rows(once)
    assert case.sql("SELECT * EXCLUDE (file_id, line_no) FROM engine_starts").fetchall() == \
        once.sql("SELECT * EXCLUDE (file_id, line_no) FROM engine_starts").fetchall()
    _engine_reconciles(case)
    assert case.sql("SELECT sum(lines_read) FROM evidence_files").fetchall() == [(len(lines),)]


def test_an_engine_log_that_grows_while_read_loads_its_snapshot_and_the_rest_next_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    from forensics.sources.engine import loader as engine

    lines = (ENGINE_FIX / "v0_5_23" / "decode-9.log").read_bytes().splitlines(keepends=True)
    first, rest = b"".join(lines[:8]), b"".join(lines[8:])
    log = tmp_path / "logs" / "decode-9" / "sglang.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(first)
    real = engine.fingerprint
    grown: list[bool] = []

    def hash_then_grow(*a: Any, **k: Any) -> Any:
        out = real(*a, **k)
        if not grown:  # the engine appends while the loader hashes and reads
            grown.append(True)
            with open(log, "ab") as fh:
                fh.write(rest)
        return out

    monkeypatch.setattr(engine, "fingerprint", hash_then_grow)
    case = forensics.open_case(tmp_path / "case.duckdb")
    f = case.ingest_engine([tmp_path / "logs"], tz="UTC").files[0]
    assert f.lines_read == 8 and any("grew from" in w and "next ingest" in w for w in f.warnings), f.warnings
    assert case.sql("SELECT sha256, size FROM evidence_files").fetchall() == [
        (hashlib.sha256(first).hexdigest(), len(first))]
    monkeypatch.setattr(engine, "fingerprint", real)
    g = case.ingest_engine([tmp_path / "logs"], tz="UTC").files[0]
    assert g.lines_read == len(lines) - 8
    once = forensics.open_case(tmp_path / "once.duckdb")
    once.ingest_engine([tmp_path / "logs"], tz="UTC")
    assert _engine_rows(case) == _engine_rows(once)
    _engine_reconciles(case)


def test_symlinked_node_directories_are_followed_once_with_the_resolved_path(tmp_path: Path) -> None:
    real = tmp_path / "mnt" / "decode-9"
    _w(real, "sglang.log", (ENGINE_FIX / "v0_5_23" / "decode-9.log").read_bytes())
    (real / "loop").symlink_to(real.parent, target_is_directory=True)  # a loop back up
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "decode-9").symlink_to(real, target_is_directory=True)  # the node directory is a link
    case = forensics.open_case(":memory:")
    s = case.ingest_engine([logs], tz="UTC")
    assert [(f.node, f.lines_read > 0) for f in s.files] == [("decode-9", True)]
    assert case.sql("SELECT path FROM evidence_files").fetchall() == [(str((real / "sglang.log").resolve()),)]
    _engine_reconciles(case)


@pytest.mark.parametrize(("label", "what"), UNREADABLE_CASES, ids=[c[0] for c in UNREADABLE_CASES])
def test_unreadable_engine_paths_are_one_line_errors_or_listed_as_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, label: str, what: str) -> None:
    text = (ENGINE_FIX / "v0_5_23" / "decode-9.log").read_bytes()
    logs = tmp_path / "logs"
    _w(logs, "decode-9/sglang.log", text)
    bad = _w(logs, "decode-8/sglang.log", text[: len(text) // 2]) if what == "file" else (logs / "decode-8")
    if what == "dir":
        _w(logs, "decode-8/sglang.log", text[: len(text) // 2])
    pretend_unreadable(monkeypatch, bad)
    case = forensics.open_case(":memory:")
    with pytest.raises(ForensicsError, match=f"cannot read {bad}: permission denied"):
        case.ingest_engine([logs], tz="UTC")
    assert case.sql("SELECT count(*) FROM evidence_files").fetchall() == [(0,)]
    s = case.ingest_engine([logs], tz="UTC", skip_unreadable=True)
    assert [(Path(f.path).name, f.not_read) for f in s.files if f.not_read] == [(bad.name, "permission denied")]
    assert "NOT READ" in s.render()
    assert [f.node for f in s.files if not f.not_read] == ["decode-9"]
    assert case.sql("SELECT kind, reason FROM unread_paths").fetchall() == [("engine", "permission denied")]
    _engine_reconciles(case)


ENGINE_DAMAGE = [
    # label, how the file is damaged, complete, warning, cut line rejected
    ("gzip + garbage", lambda b: gzip.compress(b) + b"\x00garbage", False, "after the", False),
    ("gzip + a partial copy", lambda b: gzip.compress(b) + gzip.compress(b)[:40], False, "truncated", True),
    ("truncated zstd", lambda b: zstandard.ZstdCompressor().compress(b * 400)[:-30], False, "truncated", True),
]


@pytest.mark.parametrize(("label", "damage", "complete", "warning", "cut"), ENGINE_DAMAGE,
                         ids=[c[0] for c in ENGINE_DAMAGE])
def test_damaged_compressed_engine_logs(tmp_path: Path, label: str, damage: Callable[[bytes], bytes],
                                        complete: bool, warning: str, cut: bool) -> None:
    text = (ENGINE_FIX / "v0_5_23" / "decode-9.log").read_bytes()
    data = damage(text)
    p = tmp_path / ("decode-9.log.zst" if "zstd" in label else "decode-9.log.gz")
    p.write_bytes(data)
    if "zstd" in label:
        readable = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    else:
        readable = zlib_readable(data)
    case = forensics.open_case(":memory:")
    before = evidence_state([p])
    f = case.ingest_engine([p], tz="UTC").files[0]
    assert evidence_state([p]) == before
    assert f.lines_read == physical_lines(readable) and f.reconciles
    assert f.complete is complete and any(warning in w for w in f.warnings), f.warnings
    reasons = [r[0] for r in case.sql("SELECT reason FROM rejected_lines").fetchall()]
    assert readable  # the damage left something to read
    assert (any(re.search(r"cut( off)? by the end", r) for r in reasons)) is (cut and not readable.endswith(b"\n"))
    _engine_reconciles(case)
