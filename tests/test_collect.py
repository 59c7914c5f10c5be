"""The collection stage: plain files, compression, resume points and every collection wrapper.

Fixtures (``tests/fixtures/collect/``, sources in its README) are shaped as each collector writes
them; the tables below say what the scanner must be handed: the engine's own line, the physical
line it starts on, the collector's UTC time, the pod and logical node.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zstandard

from forensics.errors import InputError, ParameterError
from forensics.sources import collect
from forensics.sources.collect import read_lines
from forensics.sources.collect import reader as reader_mod
from forensics.sources.lines import NO_TIME, STREAM_STDERR, STREAM_STDOUT

FIX = Path(__file__).resolve().parent / "fixtures" / "collect"


def rows(path: Path, **kw: Any) -> tuple[list[tuple[Any, ...]], list[tuple[int, str, bytes]], collect.ReadResult]:
    """(line_no, text, collector time, pod, node, n_phys) per logical line; rejected; totals."""
    r = read_lines(path, **kw)
    out: list[tuple[Any, ...]] = []
    rejected: list[tuple[int, str, bytes]] = []
    for b in r:
        for i in range(len(b)):
            us = None if b.collector_us is None else int(b.collector_us[i])
            t = None if us is None or us == NO_TIME else dt.datetime.fromtimestamp(us / 1e6, dt.UTC).strftime(
                "%Y-%m-%dT%H:%M:%S.%f")
            out.append((int(b.line_no[i]), b.line(i).decode("utf-8", "replace"), t,
                        None if b.pod is None else b.pod[i].as_py(), None if b.node is None else b.node[i].as_py(),
                        1 if b.n_phys is None else int(b.n_phys[i])))
        rejected.extend(b.rejected)
    assert r.result.reconciles, r.result
    return out, rejected, r.result


def _w(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# -- plain files ------------------------------------------------------------------------------------

PLAIN = [
    # (bytes on disk, lines handed on, complete)
    (b"a\nb\n", ["a", "b"], True),
    (b"a\r\nb\r\n", ["a", "b"], True),  # CRLF
    (b"a\nlast", ["a", "last"], True),  # a last line without newline is a line
    (b"", [], True),
    (b"\n\n", ["", ""], True),
    (b"x\ry\n", ["x\ry"], True),  # a lone CR is content
    (gzip.compress(b"a\n") + gzip.compress(b"b\nc\n"), ["a", "b", "c"], True),  # every gzip member
    (zstandard.ZstdCompressor().compress(b"a\n") + zstandard.ZstdCompressor().compress(b"b\n"), ["a", "b"], True),
]


@pytest.mark.parametrize("block", [1, 3, 1 << 20])
@pytest.mark.parametrize(("data", "lines", "complete"), PLAIN,  # ids without bytes: gzip headers hold the time
                         ids=["lf", "crlf", "no-final-newline", "empty", "blank-lines", "lone-cr", "gzip-members",
                              "zstd-frames"])
def test_plain_lines_in_any_block_size(tmp_path: Path, data: bytes, lines: list[str], complete: bool,
                                       block: int) -> None:
    got, rej, res = rows(_w(tmp_path / "f", data), block_bytes=block)
    assert [g[1] for g in got] == lines
    assert [g[0] for g in got] == list(range(1, len(lines) + 1))
    assert (res.complete, rej, res.wrapper) == (complete, [], "plain")


def test_offsets_point_at_each_physical_line(tmp_path: Path) -> None:
    data = b"one\r\ntwo\n\nfour"
    offsets = [o for b in read_lines(_w(tmp_path / "f", data)) for o in b.offset.tolist()]
    assert offsets == [0, 5, 9, 10]


def _deflate_truncated(body: bytes, cut: int) -> bytes:
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    data = co.compress(body) + co.flush(zlib.Z_SYNC_FLUSH)
    return data[: len(data) - cut]


def _corrupt_zstd() -> bytes:
    data = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(
        b"".join(b"line %d %d\n" % (i, i * i) for i in range(30000))))
    data[len(data) // 2] ^= 0xFF
    return bytes(data)


DAMAGED = [
    # (name, bytes, complete, problem words, cut-line rejected)
    ("truncated gzip", _deflate_truncated(b"line one\nline two\nline thr", 0), False, "truncated", True),
    # the one decoder's rule: bytes on disk that were not decoded leave the file incomplete, padding too
    ("gzip + zero padding", gzip.compress(b"a\nb\n") + b"\0" * 512, False, "512 bytes after the last complete gzip "
     "member (from byte 24) are not gzip data (padding or a partial copy): counted, not read; every complete member "
     "was loaded (they are all zero bytes: padding)", False),
    ("gzip + garbage", gzip.compress(b"a\nb\n") + b"NOT GZIP", False, "8 bytes after the last complete gzip member",
     False),
    ("zstd + garbage", zstandard.ZstdCompressor().compress(b"a\nb") + b"NOT ZSTD", False,
     "8 bytes after the last complete zstd frame", False),
    ("corrupt zstd", _corrupt_zstd(), False, "zstd stream is corrupt", True),
    ("truncated zstd", zstandard.ZstdCompressor().compress(b"".join(b"line %d %d\n" % (i, i * i) for i in range(30000)))[:-9],
     False, "truncated", True),
]


@pytest.mark.parametrize(("name", "data", "complete", "words", "cut"), DAMAGED, ids=[d[0] for d in DAMAGED])
def test_damaged_streams_keep_the_readable_prefix_and_say_why(tmp_path: Path, name: str, data: bytes,
                                                              complete: bool, words: str, cut: bool) -> None:
    got, rej, res = rows(_w(tmp_path / "f", data))
    assert res.complete is complete
    assert res.status.problem is not None and words in res.status.problem
    if cut:
        assert len(rej) == 1 and "cut off" in rej[0][1] and rej[0][0] == len(got) + 1
    else:
        assert rej == []


def test_trailing_bytes_after_gzip_are_counted(tmp_path: Path) -> None:
    member = gzip.compress(b"a\n")
    res = rows(_w(tmp_path / "f", member + b"xyz"))[2]
    assert (res.status.trailing_bytes, res.status.trailing_offset, res.status.trailing_zeros) == (3, len(member), False)


def test_trailing_garbage_does_not_cut_the_last_line(tmp_path: Path) -> None:
    got, rej, res = rows(_w(tmp_path / "f", gzip.compress(b"a\nlast without newline") + b"GARBAGE"))
    assert [g[1] for g in got] == ["a", "last without newline"] and rej == []
    assert not res.complete and not res.status.truncated and res.status.trailing_bytes == 7


def test_corrupt_gzip_is_incomplete(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(b"".join(b"line %d\n" % i for i in range(20000))))
    data[len(data) // 2] ^= 0xFF
    res = rows(_w(tmp_path / "f", bytes(data)))[2]
    assert not res.complete and "corrupt" in (res.status.problem or "")


@pytest.mark.parametrize("compress", [False, True])
def test_resume_from_a_batch_end_gives_the_rest_exactly(tmp_path: Path, compress: bool) -> None:
    body = b"".join(b"line %d\n" % i for i in range(1000))
    f = _w(tmp_path / "f", gzip.compress(body) if compress else body)
    first = next(iter(read_lines(f, block_bytes=1000)))
    rest = [(n, t) for n, t, *_ in rows(f, start_offset=first.next_offset, start_line=first.next_line)[0]]
    whole = [(n, t) for n, t, *_ in rows(f)[0]]
    assert [(int(n), first.line(i).decode()) for i, n in enumerate(first.line_no)] + rest == whole


def test_resume_point_inside_a_line_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not at the start of a line"):
        list(read_lines(_w(tmp_path / "f", b"abc\ndef\n"), start_offset=2, start_line=1))


def test_over_long_line_is_rejected_not_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader_mod, "MAX_LINE_BYTES", 100)
    got, rej, res = rows(_w(tmp_path / "f", b"ok\n" + b"x" * 500 + b"\nafter\n"), block_bytes=64)
    assert [(g[0], g[1]) for g in got] == [(1, "ok"), (3, "after")]
    assert [(r[0], r[2][:3]) for r in rej] == [(2, b"xxx")] and "longer than" in rej[0][1]
    assert any("line 2 is longer than" in w for w in res.warnings)


# -- wrappers -----------------------------------------------------------------------------------------

T = "2026-08-27T03:10:0"  # most fixture lines are at 2026-08-27 03:10:0x UTC (11:10:0x in +08:00)

WRAPPED: list[tuple[str, str, list[tuple[Any, ...]], dict[str, int]]] = [
    ("cri-containerd.log", "cri", [
        (1, "[2026-08-27 11:10:00 TP0] max_total_num_tokens=681280", T + "0.123456", None, None, 1),
        (2, "Receive: obj=GenerateReqInput(rid='5be1', text='<redacted>', bootstrap_host='10.0.2.11', "
            "bootstrap_port=8998, bootstrap_room=4793981895866140836)", T + "1.500000", None, None, 3),
        (3, "[2026-08-27 11:10:01 TP0] Prefill batch", T + "1.500100", None, None, 1),
        (6, "", T + "2.000000", None, None, 1),
        (7, "[2026-08-27 11:10:03 TP0] Input length (702133 tokens)", T + "3.000000", None, None, 1),
    ], {"lines": 7, "joined": 2}),
    ("cri-o.log", "cri", [
        (1, "[2026-08-27 11:10:00 TP0] The server is fired up", T + "0.148508", None, None, 1),
        (2, "[2026-08-27 11:10:05] INFO:     10.0.3.7:41698", T + "5.000000", None, None, 1),
    ], {"lines": 2}),
    ("docker-json.log", "docker-json", [
        (1, "[2026-08-27 11:10:00 TP0] KV Cache is allocated", T + "0.123456", None, None, 1),
        (2, "Receive: obj=GenerateReqInput(rid='5be1', text='<redacted>', bootstrap_room=42)", T + "1.500000",
         None, None, 2),
        (3, '[2026-08-27 11:10:01] INFO:     10.0.3.7:41698 - "POST /generate HTTP/1.1" 200 OK', T + "1.600000",
         None, None, 1),
    ], {"lines": 4, "joined": 1}),
    ("kubectl-timestamps.log", "kubectl", [
        (1, "[2026-08-27 11:10:00 TP0] Prefill batch", T + "0.123456", None, None, 1),
        (2, "[2026-08-27 11:10:01] INFO:", T + "1.000000", None, None, 1),
    ], {"lines": 2}),
    ("kubectl-prefix.log", "kubectl", [
        (1, "[2026-08-27 11:10:00 TP0] Prefill batch", T + "0.123456", "glm53-prefill-0", "glm53-prefill-0", 1),
        (2, "[2026-08-27 11:10:00 TP0] Decode batch", T + "0.500000", "glm53-decode-6f7b9c8d4-x2k9p",
         "glm53-decode", 1),
    ], {"lines": 2}),
    ("kubectl-prefix-only.log", "kubectl", [
        (1, "[2026-08-27 11:10:00 TP0] Prefill batch", None, "glm53-prefill-0", "glm53-prefill-0", 1),
        (2, "[2026-08-27 11:10:01 TP0] Decode batch", None, "glm53-prefill-1", "glm53-prefill-1", 1),
    ], {"lines": 2}),
    ("journald.json", "journald-json", [
        (1, "[2026-08-27 11:10:00 TP0] max_total_num_tokens=681280", T + "0.123456",
         "gpu-node-7/sglang-prefill.service", "gpu-node-7", 1),
        (2, "[2026-08-27 11:10:01] caf\ufffd", T + "1.000000", "gpu-node-7/sglang-prefill.service", "gpu-node-7", 1),
        (4, "Traceback (most recent call last):", T + "3.000000", "gpu-node-7/sglang-prefill.service", "gpu-node-7", 1),
        (4, '  File "x.py", line 1, in <module>', T + "3.000000", "gpu-node-7/sglang-prefill.service", "gpu-node-7", 0),
    ], {"lines": 4, "rejected": 1}),
    ("journal-short-iso.log", "journal-iso", [
        (2, "[2026-08-27 11:10:00 TP0] The server is fired up", T + "0.000000", "gpu-node-7/python3", "gpu-node-7", 1),
        (3, "[2026-08-27 11:10:01] INFO:", T + "1.250000", "gpu-node-7/python3", "gpu-node-7", 1),
    ], {"lines": 4, "rejected": 2}),
    ("syslog-5424.log", "syslog-5424", [
        (1, "[2026-08-27 11:10:00 TP0] Prefill batch", T + "0.003000", "gpu-node-7/sglang", "gpu-node-7", 1),
        (2, "[2026-08-27 11:10:01] INFO:", T + "1.000000", "gpu-node-7/sglang", "gpu-node-7", 1),
        (3, "[2026-08-27 11:10:02 TP0] Decode batch", None, "gpu-node-7/sglang", "gpu-node-7", 1),
    ], {"lines": 3}),
    ("syslog-bsd.log", "syslog-bsd", [
        (1, "[2026-08-27 11:10:00 TP0] The server is fired up", T + "0.000000", "gpu-node-7/python3", "gpu-node-7", 1),
        (2, "Receive: obj=GenerateReqInput(rid='r1')", "2026-08-07T03:10:01.000000", "gpu-node-7/sglang",
         "gpu-node-7", 1),
    ], {"lines": 2}),
    ("loki.jsonl", "loki-jsonl", [
        (1, "[2026-08-27 11:10:00 TP0] Input length (702133 tokens)", T + "0.123456",
         "glm53-prefill-1-7d9f8c6b5-k2x9p", "glm53-prefill-1", 1),
        (2, "[2026-08-27 11:10:01] INFO:", T + "1.000000", "glm53-prefill-1-7d9f8c6b5-k2x9p", "glm53-prefill-1", 1),
    ], {"lines": 2}),
    ("loki-raw.log", "plain", [  # `logcli query -o raw`: the bare lines, no time, no labels
        (1, "[2026-08-27 11:10:00 TP0] Input length (702133 tokens)", None, None, None, 1),
        (2, "[2026-08-27 11:10:01] INFO:", None, None, None, 1),
    ], {"lines": 2}),
    ("es-search.json", "es-hits", [
        (9, "[2026-08-27 11:10:00 TP0] max_total_num_tokens=681280", T + "0.123000", "glm53-prefill-0",
         "glm53-prefill-0", 13),
        (22, "[2026-08-27 11:10:01 TP0] Prefill batch", T + "1.000000", "glm53-prefill-1", "glm53-prefill-1", 12),
    ], {"lines": 36, "framing": 11}),
    ("shipper-raw-cri.ndjson", "shipper-ndjson+cri", [  # Fluent Bit without the CRI parser
        (1, "[2026-08-27 11:10:00 TP0] Prefill batch", T + "0.123456", "glm53-prefill-0", "glm53-prefill-0", 1),
        (2, "Receive: obj=GenerateReqInput(rid='a', bootstrap_room=7)", T + "1.500000", "glm53-prefill-0",
         "glm53-prefill-0", 2),
    ], {"lines": 3, "joined": 1}),
    ("cloudwatch-container-insights.json", "cloudwatch+shipper-ndjson", [  # EKS Container Insights
        # the inner record's time (the runtime's, to the ns) wins over CloudWatch's milliseconds
        (3, "[2026-08-27 11:10:00 TP0] Decode batch", T + "0.123456", "glm53-decode-6f7b9c8d4-x2k9p",
         "glm53-decode", 7),
    ], {"lines": 11, "framing": 4}),
    ("es-hits.ndjson", "es-hit-lines", [
        (1, "[2026-08-27 11:10:00 TP0] The server is fired up", T + "0.123000", "router-5d8f7b6c9-q4wzt", "router", 1),
    ], {"lines": 1}),
    ("shipper.ndjson", "shipper-ndjson", [
        (1, "[2026-08-27 11:10:00 TP0] Prefill batch", T + "0.123000", "glm53-prefill-0", "glm53-prefill-0", 1),
        (2, "[2026-08-27 11:10:01 TP0] Decode batch", T + "1.000000", "glm53-decode-6f7b9c8d4-x2k9p", "glm53-decode", 1),
        (3, "[2026-08-27 11:10:02] INFO:", T + "2.000000", "glm53-decode-6f7b9c8d4-x2k9p", "glm53-decode", 1),
    ], {"lines": 3}),
    ("cloudwatch-filter.json", "cloudwatch", [
        (3, "[2026-08-27 11:10:00 TP0] Input length (702133 tokens)", T + "0.123000", "glm53-prefill-0",
         "glm53-prefill-0", 7),
        (10, "[2026-08-27 11:10:01 TP0] Prefill batch", T + "1.000000", "glm53-prefill-1", "glm53-prefill-1", 7),
    ], {"lines": 24, "framing": 10}),
    ("cloudwatch-get.json", "cloudwatch", [
        (3, "[2026-08-27 11:10:00 TP0] The server is fired up", T + "0.123000", None, None, 5),
    ], {"lines": 11, "framing": 6}),
    ("gcp-logging.json", "gcp-logging", [
        (2, "[2026-08-27 11:10:00 TP0] KV Cache is allocated", T + "0.123456", "glm53-prefill-0", "glm53-prefill-0", 23),
        (25, "[2026-08-27 11:10:01 TP0] Prefill batch", T + "1.000000", "glm53-prefill-0", "glm53-prefill-0", 8),
    ], {"lines": 33, "framing": 2}),
    ("gcp-logging-sink.ndjson", "gcp-logging-lines", [  # a sink's export to Cloud Storage
        (1, "[2026-08-27 11:10:00 TP0] Input length (702133 tokens)", T + "0.123456", "glm53-prefill-0-7d9f8",
         "glm53-prefill-0", 1),
        (2, "[2026-08-27 11:10:01 TP0] Prefill batch", T + "1.000000", "glm53-prefill-0-7d9f8", "glm53-prefill-0", 1),
    ], {"lines": 2}),
    ("cloudwatch-events.ndjson", "cloudwatch-lines", [  # events one per line (`jq -c '.events[]'`)
        (1, "[2026-08-27 11:10:00 TP0] Input length (702133 tokens)", T + "0.123000", "glm53-prefill-1",
         "glm53-prefill-1", 1),
    ], {"lines": 1}),
    ("datadog-archive.ndjson", "datadog", [
        (1, "[2026-08-27 11:10:00 TP0] Prefill batch", T + "0.123000", "glm53-prefill-0", "glm53-prefill-0", 1),
    ], {"lines": 1}),
    ("datadog-api.json", "datadog-api", [
        (1, "[2026-08-27 11:10:00 TP0] The server is fired up", T + "0.123000", "glm53-prefill-2", "glm53-prefill-2", 1),
    ], {"lines": 2, "framing": 1}),
]


def _check_wrapped(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> None:
    assert len(got) == len(want), got
    for g, w in zip(got, want, strict=True):
        line_no, text, t, pod, node, n_phys = w
        assert (g[0], g[2], g[3], g[4], g[5]) == (line_no, t, pod, node, n_phys), g
        assert g[1].startswith(text), (g[1], text)


@pytest.mark.parametrize(("name", "wrapper", "want", "counts"), WRAPPED, ids=[w[0] for w in WRAPPED])
def test_every_wrapper_hands_on_the_engine_line(name: str, wrapper: str, want: list[tuple[Any, ...]],
                                                counts: dict[str, int]) -> None:
    got, rej, res = rows(FIX / name, context={"tz": "Asia/Singapore"})
    assert res.wrapper == wrapper, res.detected
    _check_wrapped(got, want)
    assert res.lines == counts["lines"]
    assert (len(rej), res.framing) == (counts.get("rejected", 0), counts.get("framing", 0))
    if "joined" in counts:
        assert res.joined == counts["joined"]


@pytest.mark.parametrize(("name", "wrapper", "want", "counts"), WRAPPED, ids=[w[0] for w in WRAPPED])
@pytest.mark.parametrize("comp", ["gzip", "zstd"])
def test_every_wrapper_reads_the_same_compressed_and_in_small_blocks(
        tmp_path: Path, name: str, wrapper: str, want: list[tuple[Any, ...]], counts: dict[str, int], comp: str) -> None:
    raw = (FIX / name).read_bytes()
    data = gzip.compress(raw) if comp == "gzip" else zstandard.ZstdCompressor().compress(raw)
    f = _w(tmp_path / "x.bin", data)  # the name says nothing: detection reads the content
    got, _, res = rows(f, block_bytes=97, context={"tz": "Asia/Singapore"})
    assert res.wrapper == wrapper
    _check_wrapped(got, want)


def test_cri_streams_and_partial_lines_survive_block_cuts(tmp_path: Path) -> None:
    """P chunks of one stream joined across the other stream's lines and across batch boundaries."""
    lines, want = [], []
    for i in range(300):
        a, b = f"stdout-{i}-first-", f"second-{i}"
        lines += [f"2026-08-27T03:10:00.{i:03d}Z stdout P {a}", f"2026-08-27T03:10:00.{i:03d}1Z stderr F err-{i}",
                  f"2026-08-27T03:10:00.{i:03d}2Z stdout F {b}"]
        want += [(3 * i + 1, a + b, 2), (3 * i + 2, f"err-{i}", 1)]
    f = _w(tmp_path / "0.log", ("\n".join(lines) + "\n").encode())
    for block in (50, 333, 1 << 20):
        got, _, res = rows(f, block_bytes=block)
        assert sorted((g[0], g[1], g[5]) for g in got) == want
        assert res.joined == 300


def test_cri_streams_are_coded() -> None:
    b = next(iter(read_lines(FIX / "cri-containerd.log")))
    assert b.stream is not None and b.stream.tolist()[:3] == [STREAM_STDERR, STREAM_STDOUT, STREAM_STDERR]


def test_kubectl_line_split_by_the_runtime_is_put_back_together(tmp_path: Path) -> None:
    text = "[2026-08-27 11:10:00] Receive: obj=GenerateReqInput(rid='r', " + "x" * 40000 + ")"
    chunks = [text[i : i + 16384] for i in range(0, len(text), 16384)]
    line = "".join(f"2026-08-27T03:10:00.{k:09d}Z {c}" for k, c in enumerate(chunks))
    got = rows(_w(tmp_path / "k.log", (line + "\n").encode()))[0]
    assert [g[1] for g in got] == [text]


def test_kubectl_keeps_a_timestamp_that_is_the_lines_own_text(tmp_path: Path) -> None:
    own = "2026-08-27T03:09:59.000000000Z "  # quoted by the program, not a chunk boundary
    text = "[2026-08-27 11:10:00] Receive: obj=GenerateReqInput(" + "x" * 6000 + own + "y" * 20000 + ")"
    chunks = [text[i : i + 16384] for i in range(0, len(text), 16384)]
    line = "".join(f"2026-08-27T03:10:00.{k:09d}Z {c}" for k, c in enumerate(chunks))
    assert [g[1] for g in rows(_w(tmp_path / "k.log", (line + "\n").encode()))[0]] == [text]


def test_wrapper_lines_it_cannot_read_are_rejected_never_handed_on(tmp_path: Path) -> None:
    body = (FIX / "cri-containerd.log").read_bytes() + b"this is not a CRI record\n"
    got, rej, res = rows(_w(tmp_path / "0.log", body))
    assert res.wrapper == "cri" and [r[0] for r in rej] == [8] and "not a CRI log record" in rej[0][1]
    assert all("not a CRI" not in g[1] for g in got)


def test_broken_json_record_is_rejected_with_the_parser_message(tmp_path: Path) -> None:
    good = (FIX / "docker-json.log").read_bytes().splitlines(keepends=True)
    body = good[0] + b'{"log":"oops\n' + good[2]
    got, rej, _ = rows(_w(tmp_path / "d.log", body))
    assert [g[0] for g in got] == [1, 3]
    assert [r[0] for r in rej] == [2] and "invalid JSON" in rej[0][1]


def test_sglang_json_request_logs_are_not_a_wrapper(tmp_path: Path) -> None:
    line = b'{"timestamp": "2026-09-02T04:51:17.123456", "event": "request.received", "rid": "a", "obj": {}}\n'
    assert rows(_w(tmp_path / "r.log", line))[2].wrapper == "plain"


@pytest.mark.parametrize("name", ["cri", "journald-json", "es-hits"])
def test_wrapper_can_be_named(name: str) -> None:
    assert collect.make_wrapper(name, Path("x"), {}).name == name


def test_unknown_wrapper_name_is_refused() -> None:
    with pytest.raises(ParameterError, match="unknown collection wrapper"):
        list(read_lines(FIX / "cri-o.log", wrapper="fluentd-forward"))


def test_fixed_node_keeps_every_line_on_the_file_node() -> None:
    b = next(iter(read_lines(FIX / "kubectl-prefix.log", context={"fixed_node": True})))
    assert b.pod is not None and b.node is None


def test_reader_is_an_iterator_over_io_free_batches() -> None:
    # batches own their buffer: reading them later (after the file is closed) is fine
    batches = list(read_lines(FIX / "docker-json.log"))
    assert io.BytesIO(batches[0].line(0)).read().startswith(b"[2026-08-27")


DOCKER_TEXTS = [
    "[2026-08-27 11:10:00] plain\n",
    '[2026-08-27 11:10:01] INFO:     10.0.3.7:41698 - "POST /generate HTTP/1.1" 200 OK\n',
    "back\\slash and a literal \\n that is no newline\n",
    "tab\there <tag> & amp\n",
    "caf\u00e9 \u2603 snow\n",
    "emoji \U0001F600 needs a surrogate pair\n",
    "partial without newline",
    "\n",
]


@pytest.mark.parametrize("attrs", [False, True])
def test_docker_records_decode_exactly_as_json_does(tmp_path: Path, attrs: bool) -> None:
    """The vectorised Docker reader and its JSON-reader fallback agree with json.loads on every escape."""
    import json

    recs = []
    for i, t in enumerate(DOCKER_TEXTS):
        body = json.dumps(t)
        body = body.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")  # as moby writes
        extra = ',"attrs":{"tag":"x"}' if attrs and i % 2 else ""
        recs.append(f'{{"log":{body},"stream":"stderr"{extra},"time":"2026-08-27T03:10:0{i}.5Z"}}')
    recs.append('{"log":" continued\\n","stream":"stderr","time":"2026-08-27T03:10:09Z"}')
    f = _w(tmp_path / "x-json.log", ("\n".join(recs) + "\n").encode())
    got, rej, _ = rows(f)
    want = [t[:-1] for t in DOCKER_TEXTS[:6]]
    # the partial record continues in the next record of its stream (the "\n" one), as moby splits
    want += ["partial without newline", " continued"]
    assert [g[1] for g in got] == want and rej == []
    assert [g[0] for g in got] == [1, 2, 3, 4, 5, 6, 7, 9] and got[6][5] == 2


# -- the compiled RFC 3339 parse (collect.kernels.rfc3339, behind timestamps.parse_rfc3339) -------

RFC3339 = [
    # text, microseconds since the epoch (UTC; naive values as written), zoned, offset s, consumed
    ("2026-08-27T03:10:00Z", dt.datetime(2026, 8, 27, 3, 10), True, 0, 20),
    ("2026-08-27T03:10:00.123456789Z", dt.datetime(2026, 8, 27, 3, 10, 0, 123456), True, 0, 30),
    ("2026-08-27T03:10:00.5Z", dt.datetime(2026, 8, 27, 3, 10, 0, 500000), True, 0, 22),
    ("2026-08-27t03:10:00,25z", dt.datetime(2026, 8, 27, 3, 10, 0, 250000), True, 0, 23),
    ("2026-08-27T11:10:00.000001+08:00", dt.datetime(2026, 8, 27, 3, 10, 0, 1), True, 28800, 32),
    ("2026-08-26T22:40:00-0430", dt.datetime(2026, 8, 27, 3, 10), True, -16200, 24),
    ("2026-08-27T03:10:00.1234567891234Z", dt.datetime(2026, 8, 27, 3, 10, 0, 123456), True, 0, 34),
    ("2026-08-27 03:10:00 x", dt.datetime(2026, 8, 27, 3, 10), False, 0, 19),
    ("2026-08-27T03:10:00.Z", dt.datetime(2026, 8, 27, 3, 10), False, 0, 19),  # '.' without digits
    ("2024-02-29T00:00:00Z", dt.datetime(2024, 2, 29), True, 0, 20),
    ("1969-12-31T23:59:59Z", dt.datetime(1969, 12, 31, 23, 59, 59), True, 0, 20),
    ("2026-12-31T23:59:60Z", dt.datetime(2026, 12, 31, 23, 59, 59), True, 0, 20),  # a leap second: :59
    ("2026-02-29T00:00:00Z", None, False, 0, 0),  # not a leap year
    ("2026-13-01T00:00:00Z", None, False, 0, 0),
    ("2026-08-27T24:00:00Z", None, False, 0, 0),
    ("2026-08-27X03:10:00Z", None, False, 0, 0),
    ("2026-08-27T03:10", None, False, 0, 0),  # cut by the end of the buffer
]


@pytest.mark.parametrize(("text", "want", "zoned", "offset", "used"), RFC3339, ids=[r[0] for r in RFC3339])
def test_rfc3339_parse(text: str, want: dt.datetime | None, zoned: bool, offset: int, used: int) -> None:
    from forensics.sources.collect.timestamps import parse_rfc3339

    buf = np.frombuffer(text.encode(), dtype=np.uint8)
    p = parse_rfc3339(buf, np.array([0]))
    assert bool(p.ok[0]) is (want is not None)
    if want is not None:
        epoch = dt.datetime(1970, 1, 1)
        assert int(p.us[0]) == (want - epoch) // dt.timedelta(microseconds=1)
        assert (bool(p.zoned[0]), int(p.offset_s[0]), int(p.end[0])) == (zoned, offset, used)
    assert not parse_rfc3339(np.frombuffer(b"2026-08-27 03:10:00Z", dtype=np.uint8), np.array([0]),
                             date_sep_t_only=True).ok[0]
