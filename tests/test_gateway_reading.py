"""How gateway files are read: containers, the hashing scan, every gzip member and zstd frame, raw
lines re-read from compressed files, and the bulk `read_json` paths (one big file, many small ones).

Split from test_ingest_gateway.py (loading and counting); the same fixtures.
"""
from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

import pytest
import zstandard
from conftest import ROOT

import forensics
from forensics.sources.gateway import sniff

FIX = ROOT / "tests" / "fixtures" / "gateway"


@pytest.fixture
def case() -> forensics.Case:
    """A fresh in-memory case (how a file is read needs no clock)."""
    return forensics.open_case(":memory:")


def test_sniff_containers() -> None:
    assert [sniff(FIX / n).container for n in (
        "cloudflare_http_ns.ndjson", "cloudflare_http_unix.csv", "ai_gateway_rest.json",
        "litellm_spendlogs.json", "smg_router.log", "cloudflare_http_rfc3339.ndjson.gz")] == [
        "ndjson", "csv", "json-doc", "json-array", "text", "ndjson"]


def test_scan_file_counts_lines_and_marks(tmp_path: Path) -> None:
    from forensics.sources.gateway import scan_file
    from forensics.sources.gateway.numbering import raw_lines as _raw_lines

    lines = [b"x" * (i % 977) + b"%d" % i for i in range(30000)]
    p = tmp_path / "big.txt"
    p.write_bytes(b"\n".join(lines))  # no final newline
    sc = scan_file(p)
    import hashlib

    assert sc.lines == 30000 and sc.sha == hashlib.sha256(p.read_bytes()).hexdigest() and sc.marks
    want = {1, 2, 777, 15000, 29999, 30000}
    assert _raw_lines(p, "none", want, sc.marks) == {n: lines[n - 1] for n in want}


SCAN_CASES = [
    # label, file bytes, expected (lines, damaged); the sha256 is always that of the bytes on disk
    ("gzip, two members", gzip.compress(b"a\nb\n") + gzip.compress(b"c\n\nd"), (5, False)),
    ("gzip, truncated", gzip.compress(b"".join(b"%06d\n" % i for i in range(50000)))[:-3000], None),
    ("gzip, corrupt body", gzip.compress(b"x\n" * 1000)[:20] + b"\xff" * 64 + gzip.compress(b"x\n" * 1000)[84:], None),
    ("zstd, two frames", zstandard.ZstdCompressor().compress(b"a\nb\n") + zstandard.ZstdCompressor().compress(b"c\n"), (3, False)),
    ("plain, no final newline", b"a\n\nb", (3, False)),
]


@pytest.mark.parametrize(("label", "data", "want"), SCAN_CASES, ids=[c[0] for c in SCAN_CASES])
def test_scan_file_hashes_the_bytes_and_counts_decompressed_lines(tmp_path: Path, label: str, data: bytes,
                                                                  want: tuple[int, bool] | None) -> None:
    import hashlib

    from forensics.sources.gateway import scan_file

    p = tmp_path / "f"
    p.write_bytes(data)
    sc = scan_file(p)
    assert sc.sha == hashlib.sha256(data).hexdigest()
    if want is None:  # damaged: flagged, whatever part was readable counted
        assert sc.damaged
    else:
        assert (sc.lines, sc.damaged) == want


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


DECOMPRESS_CASES = [
    # label, file bytes, what open_decompressed must yield (or the error callers catch)
    ("plain", b"a\nb\n", b"a\nb\n"),
    ("gzip, two members", gzip.compress(b"a\n") + gzip.compress(b"b\n"), b"a\nb\n"),
    ("zstd, two frames", _zstd(b"a\n") + _zstd(b"b\n"), b"a\nb\n"),
    ("gzip, truncated", gzip.compress(b"x" * 5000)[:-10], EOFError),
    ("gzip, invalid deflate block", gzip.compress(bytes(range(256)) * 200)[:10] + b"x" * 24
     + gzip.compress(bytes(range(256)) * 200)[34:], zlib.error),
    ("gzip, bad checksum", gzip.compress(bytes(range(256)) * 200)[:100] + b"\0" * 50
     + gzip.compress(bytes(range(256)) * 200)[150:], OSError),
]


@pytest.mark.parametrize(("label", "data", "want"), DECOMPRESS_CASES, ids=[c[0] for c in DECOMPRESS_CASES])
def test_open_decompressed_reads_every_member_and_raises_what_callers_catch(
        tmp_path: Path, label: str, data: bytes, want: bytes | type[Exception]) -> None:
    from forensics.sources.files import open_decompressed

    p = tmp_path / "f"
    p.write_bytes(data)
    if isinstance(want, bytes):
        with open_decompressed(p) as fh:
            assert fh.read() == want
    else:
        with pytest.raises(want), open_decompressed(p) as fh:
            fh.read()


RAW_LINE_CASES = [
    # label, lines, wanted line numbers, final newline
    ("first, middle, unterminated last", [b"a", b"b", b"c" * 10, b"d"], {1, 3, 4}, False),
    ("crlf and empty lines", [b"a\r", b"", b"c\r", b""], {1, 2, 3}, True),
    ("a line longer than a read block", [b"a", b"L" * (9 << 20), b"c"], {2, 3}, True),
    ("many lines, one wanted far in", [b"%d" % i for i in range(400_000)], {399_999}, True),
]


@pytest.mark.parametrize(("label", "lines", "wanted", "final_nl"), RAW_LINE_CASES, ids=[c[0] for c in RAW_LINE_CASES])
def test_raw_lines_streamed_from_gzip_are_the_file_lines(tmp_path: Path, label: str, lines: list[bytes],
                                                        wanted: set[int], final_nl: bool) -> None:
    from forensics.sources.gateway.numbering import raw_lines as _raw_lines

    p = tmp_path / "f.gz"
    p.write_bytes(gzip.compress(b"\n".join(lines) + (b"\n" if final_nl else b""), compresslevel=1))
    assert _raw_lines(p, "gzip", wanted) == {n: lines[n - 1].rstrip(b"\r") for n in wanted}


def test_gzip_ndjson_is_read_by_read_json_not_the_line_reader(case: forensics.Case, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: a .gz went through the line reader (one thread, JSON parsed per path): 0.56x bare."""
    from forensics.sources.gateway import fastpath

    used: list[list[str]] = []
    real = fastpath.load_fast
    monkeypatch.setattr(fastpath, "load_fast",
                        lambda con, items, *a, **k: used.append([it.comp for it in items]) or real(con, items, *a, **k))
    p = tmp_path / "cf.ndjson.gz"
    p.write_bytes(gzip.compress((FIX / "cloudflare_http_ns.ndjson").read_bytes()))
    f = case.ingest_gateway(p, format="cloudflare-http").files[0]
    assert used == [["gzip"]] and f.reconciles and f.rows_loaded > 0


BATCH_CASES = [
    # label, per-file line lists (indexes into the fixture's good records, or raw bytes), compress,
    # the files (0-based) without a last line end, then which files each reader read: the joined
    # files' read_json, read_json over the files themselves, the line reader (a blank line shifts
    # read_json's numbering: such a file is never joined, and read_json over it is refused)
    ("plain files", [[0, 1], [2], [3, 4, 5]], False, [], [0, 1, 2], [], []),
    ("gz files, one with a bad line", [[0, 1], [2, b'{"RayID": "cut'], [3]], True, [], [0, 1, 2], [], []),
    ("gz files, one with a blank line", [[0], [1, b"", 2], [3]], True, [], [0, 2], [1], [1]),
    ("a line that starts with a space", [[0], [b" " + b"1"], [3]], True, [], [0, 2], [1], []),
    ("files without a last line end", [[0, 1], [2], [3]], True, [0, 1], [0, 1, 2], [], []),
    ("a file that starts with a byte-order mark", [[0], [b"\xef\xbb\xbf1", 2], [3]], True, [], [0, 2], [1], []),
]


@pytest.mark.parametrize(("label", "files", "compress", "open_tail", "joined", "listed", "line_reader"),
                         BATCH_CASES, ids=[c[0] for c in BATCH_CASES])
def test_batch_of_small_ndjson_files_is_read_by_one_read_json(
        case: forensics.Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, label: str,
        files: list[list[Any]], compress: bool, open_tail: list[int], joined: list[int], listed: list[int],
        line_reader: list[int]) -> None:
    """Regression: a batch was a UNION ALL of line readers, run one file after another (0.39x bare),
    then one read_json over the files (DuckDB's cost per file: 0.45x bare on 644 hourly files)."""
    from forensics.sources.gateway import fastpath, ingest

    good = [ln for ln in (FIX / "cloudflare_http_ns.ndjson").read_bytes().splitlines() if ln.strip().endswith(b"}")]
    names = [str(tmp_path / f"h{k}.ndjson{'.gz' if compress else ''}") for k in range(len(files))]
    calls: dict[str, list[list[int]]] = {"joined": [], "listed": [], "line reader": []}

    def spy(name: str, real: Any) -> Any:
        def run(con: Any, items: list[Any], *a: Any, **k: Any) -> Any:
            paths = dict(con.execute("SELECT file_id, path FROM evidence_files").fetchall())
            calls[name].append(sorted(names.index(paths[it.file_id]) for it in items))
            return real(con, items, *a, **k)
        return run

    monkeypatch.setattr(fastpath, "load_joined", spy("joined", fastpath.load_joined))
    monkeypatch.setattr(fastpath, "load_fast", spy("listed", fastpath.load_fast))
    monkeypatch.setattr(ingest, "load_files", spy("line reader", ingest.load_files))
    bodies = []
    for k, parts in enumerate(files):
        body = [good[x] if isinstance(x, int) else x.replace(b"1", good[1]) if x.endswith(b" 1") or x.endswith(
            b"\xbf1") else x for x in parts]
        bodies.append(body)
        data = b"\n".join(body) + (b"" if k in open_tail else b"\n")
        Path(names[k]).write_bytes(gzip.compress(data) if compress else data)
    s = case.ingest_gateway(tmp_path, format="cloudflare-http")
    # one read_json over the joined files for the batch; only odd files are read another way
    assert calls == {"joined": [joined], "listed": [listed] if listed else [],
                     "line reader": [line_reader] if line_reader else []}
    assert all(f.reconciles for f in s.files) and [f.lines_read for f in s.files] == [len(b) for b in bodies]
    assert (case.sql("SELECT count(*) FROM gateway_requests").fetchall()[0][0]
            == sum(1 for b in bodies for ln in b if ln.endswith(b"}")))
    # every row keeps its own file and physical line, whichever path loaded it
    got = case.sql("SELECT e.path, g.line_no, g.request_id FROM gateway_requests g JOIN evidence_files e "
                   "USING (file_id) ORDER BY 1, 2").fetchall()
    want = [(str(tmp_path / f"h{k}.ndjson{'.gz' if compress else ''}"), i + 1, json.loads(ln.removeprefix(b"\xef\xbb\xbf"))["RayID"])
            for k, b in enumerate(bodies) for i, ln in enumerate(b) if ln.endswith(b"}")]
    assert got == want
    rej = case.sql("SELECT line_no, reason, raw FROM rejected_lines ORDER BY file_id, line_no").fetchall()
    assert [(ln, raw) for ln, _, raw in rej] == [(i + 1, ln) for b in bodies for i, ln in enumerate(b)
                                                 if not ln.endswith(b"}")]


def test_joined_files_whose_rows_are_not_their_lines_are_read_as_they_are(
        case: forensics.Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression guard of the joined read: should read_json skip a line the scan did not flag as
    possibly blank, the rows cannot be given their files by line counts; they go, and the files
    are read the way that counts rows per file (same rows, same lines, nothing lost)."""
    from forensics.sources.gateway import joined, scan

    real = scan.scan_file

    def unflagged(*a: Any, **k: Any) -> Any:
        sc = real(*a, **k)
        sc.maybe_blank = False  # as if the scan had missed it
        return sc

    monkeypatch.setattr(joined, "scan_file", unflagged)
    good = [ln for ln in (FIX / "cloudflare_http_ns.ndjson").read_bytes().splitlines() if ln.strip().endswith(b"}")]
    bodies = [[good[0], good[1]], [good[2], b"", good[3]], [good[4]]]
    for k, body in enumerate(bodies):
        (tmp_path / f"h{k}.ndjson.gz").write_bytes(gzip.compress(b"\n".join(body) + b"\n"))
    s = case.ingest_gateway(tmp_path, format="cloudflare-http")
    assert [(f.lines_read, f.rows_loaded, f.rows_rejected, f.reconciles) for f in s.files] == [
        (2, 2, 0, True), (3, 2, 1, True), (1, 1, 0, True)]
    got = case.sql("SELECT e.path, g.line_no, g.request_id FROM gateway_requests g JOIN evidence_files e "
                   "USING (file_id) ORDER BY 1, 2").fetchall()
    assert got == [(str(tmp_path / f"h{k}.ndjson.gz"), i + 1, json.loads(ln)["RayID"])
                   for k, b in enumerate(bodies) for i, ln in enumerate(b) if ln]
    assert case.sql("SELECT file_id, line_no, reason FROM rejected_lines").fetchall() == [(2, 2, "empty line")]


@pytest.mark.parametrize("compressed", [False, True])
def test_out_of_memory_is_blamed_on_the_limit_not_the_file(case: forensics.Case, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, compressed: bool) -> None:
    import duckdb

    from forensics.errors import InputError
    from forensics.sources.gateway import ingest

    src = ROOT / "sample_data" / "gateway" / "litellm" / "LiteLLM_SpendLogs.csv"
    path = tmp_path / ("spend.csv.gz" if compressed else "spend.csv")
    path.write_bytes(gzip.compress(src.read_bytes()) if compressed else src.read_bytes())

    def out_of_memory(*_: Any, **__: Any) -> Any:
        raise duckdb.OutOfMemoryException("Out of Memory Error: failed to allocate data of size 16.0 MiB")

    monkeypatch.setattr(ingest, "_load_direct", out_of_memory)
    monkeypatch.setattr(ingest, "_load_copy", out_of_memory)
    with pytest.raises(InputError) as err:
        case.ingest_gateway(path, format="litellm")
    text = str(err.value)
    assert "ran out of memory" in text and "FORENSICS_MEMORY_LIMIT" in text
    assert "check that the file is complete" not in text
    assert case.sql("SELECT count(*) FROM gateway_requests").fetchall() == [(0,)]
