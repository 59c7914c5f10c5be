"""Engine/router log loader: every release shape of the reference, read as tables of cases."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forensics.case import Case, memory_limit_bytes, open_case
from forensics.sources.collect.layout import node_of_file, resolve_sources
from forensics.sources.engine import canonical_ranks
from forensics.sources.lines import LineBatch

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "engine"
SAMPLE = ROOT / "sample_data"

#: Strings placed in prompt/output/secret positions of the fixtures; none may reach the database.
MARKERS = ["PROMPTMARKER", "OUTPUTMARKER", "sk-SECRETKEY"]


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Case, Path]]:
    """All fixtures ingested once (UTC), one node per fixture directory."""
    path = tmp_path_factory.mktemp("engine") / "case.duckdb"
    case = open_case(path)
    case.ingest_engine([FIX], tz="UTC")
    yield case, path
    case.close()


def one(case: Case, sql: str, params: dict[str, Any] | None = None) -> tuple[Any, ...]:
    rows = case.con.execute(sql, params or {}).fetchall()
    assert len(rows) == 1, (sql, rows)
    return tuple(rows[0])


# -- node naming and ordering --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "node"),
    [
        ("sglang.log", "sglang"),
        ("sglang.log.2.gz", "sglang"),
        ("decode-1.log.1.zst", "decode-1"),
        ("prefill-0.txt", "prefill-0"),
        ("sglang-request-metrics-20260828_13.log", "sglang-request-metrics"),
    ],
)
def test_node_of_file(name: str, node: str) -> None:
    assert node_of_file(Path(name)) == node


def test_resolve_sources_subdirs_rotation_and_node_override(tmp_path: Path) -> None:
    for sub in ("prefill-0", "decode-0"):
        (tmp_path / "eng" / sub).mkdir(parents=True)
        for name in ("sglang.log", "sglang.log.1.gz", "sglang.log.2.gz"):
            (tmp_path / "eng" / sub / name).write_bytes(b"")
    lone = tmp_path / "p9.log"
    lone.write_text("x\n")
    srcs = resolve_sources([tmp_path / "eng", f"custom={lone}"])
    got = [(s.node, s.path.name) for s in srcs]
    assert got == [
        ("custom", "p9.log"),
        ("decode-0", "sglang.log.2.gz"), ("decode-0", "sglang.log.1.gz"), ("decode-0", "sglang.log"),
        ("prefill-0", "sglang.log.2.gz"), ("prefill-0", "sglang.log.1.gz"), ("prefill-0", "sglang.log"),
    ]


@pytest.mark.parametrize(
    ("raw", "canon"),
    [
        ("TP0", "TP0"),
        ("DP3 TP3 EP3", "DP3 TP3 EP3"),
        ("DP0 TP0 EP0 PP1", "DP0 PP1 TP0 EP0"),  # 0.5.2 order
        ("TP1 EP1 DP0 PP0", "DP0 PP0 TP1 EP1"),
        ("PP0 ATTN_CP7 TP7", "PP0 ATTN_CP7 TP7"),
        ("MOE_DP1 DP0", "DP0 MOE_DP1"),
    ],
)
def test_rank_tags_are_an_unordered_set(raw: str, canon: str) -> None:
    assert canonical_ranks(raw) == canon


# -- starts per release ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "seq", "role", "role_source", "ctx", "pool", "limit", "tp", "kv_dtype", "kv_tokens", "warn", "checksum"),
    [
        ("v0_4", 1, "unified", "batch_lines", 131072, 480000, 131066, 2, "auto", 480000, False, False),
        ("v0_5_2", 1, "prefill", "server_args", 1048576, 681280, 681274, 8, "torch.float8_e4m3fn", 681280, False, False),
        ("v0_5_6", 1, "decode", "server_args", 1048576, 2621440, 1048570, 4, "torch.bfloat16", 2621440, False, False),
        ("v0_5_11", 1, "prefill", "server_args", 524288, 681280, 524282, 8, None, 681280, False, False),
        ("v0_5_23", 1, "decode", "server_args", 1048576, 600000, 599994, 8, "torch.bfloat16", 600000, True, True),
        ("v0_5_23", 2, "decode", "server_args", 524288, 1200000, 524282, 8, None, None, False, False),
    ],
)
def test_engine_starts_per_release(
    fx: tuple[Case, Path], node: str, seq: int, role: str, role_source: str, ctx: int, pool: int,
    limit: int, tp: int, kv_dtype: str | None, kv_tokens: int | None, warn: bool, checksum: bool,
) -> None:
    case, _ = fx
    got = one(case, """SELECT role, role_source, context_len, max_total_num_tokens, admission_limit, tp_size,
                              kv_dtype, kv_cache_tokens, kv_pool_warning, kv_checksum_enabled
                       FROM start_periods WHERE node = $n AND start_seq = $s""", {"n": node, "s": seq})
    assert got == (role, role_source, ctx, pool, limit, tp, kv_dtype, kv_tokens, warn, checksum)
    assert limit == min(ctx - 1, pool - 1) - 5


def test_one_start_per_node_start_not_per_rank(fx: tuple[Case, Path]) -> None:
    case, _ = fx
    rows = dict(case.sql("SELECT node, count(*) FROM engine_starts GROUP BY node").fetchall())
    assert rows == {"v0_4": 1, "v0_5_2": 1, "v0_5_6": 1, "v0_5_11": 1, "v0_5_23": 2}


def test_start_times_and_server_args(fx: tuple[Case, Path]) -> None:
    case, _ = fx
    ts_start, ts_ready, args = one(
        case, "SELECT ts_start, ts_ready, server_args FROM engine_starts WHERE node = 'v0_5_6'")
    assert ts_start == dt.datetime(2025, 11, 5, 16, 30, 0, 1000)
    assert ts_ready == dt.datetime(2025, 11, 5, 16, 35, 2, 100000)
    assert json.loads(args)["disaggregation_transfer_backend"] == "nixl"
    (args2,) = one(case, "SELECT server_args FROM engine_starts WHERE node = 'v0_5_2'")
    assert json.loads(args2)["api_key"] == "<redacted>"


# -- line kinds -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "line_no", "kind", "iter_", "running", "queue", "usage", "thr", "ranks", "extra_key"),
    [
        ("v0_4", 10, "prefill", None, 0, 0, 0.0, None, "TP0", "#new-token"),
        ("v0_4", 11, "decode", None, 1, 0, 0.0, 20.5, "TP0", "gen throughput (token/s)"),
        ("v0_5_2", 9, "prefill", None, None, 0, 0.0, 6.44, "DP0 PP0 TP0 EP0", "#unbootstrapped-req"),
        ("v0_5_6", 9, "decode", None, 12, 0, 0.73, 402.77, "TP0", "pre-allocated usage"),
        ("v0_5_11", 9, "prefill", None, 0, 0, 0.0, 0.21, "TP0", "#bootstrap-req"),
        ("v0_5_23", 6, "decode", 4521, 3, 0, 0.14, 88.1, "DP0 PP0 TP1 EP1", "mamba usage"),
    ],
)
def test_batch_lines(
    fx: tuple[Case, Path], node: str, line_no: int, kind: str, iter_: int | None, running: int | None,
    queue: int, usage: float, thr: float | None, ranks: str, extra_key: str,
) -> None:
    case, _ = fx
    got = one(case, """SELECT kind, iter, running_req, queue_req, token_usage, throughput, ranks,
                              map_contains(fields, $k)
                       FROM engine_batch_fields WHERE node = $n AND line_no = $l""",
              {"n": node, "l": line_no, "k": extra_key})
    assert got == (kind, iter_, running, queue, usage, thr, ranks, True)


@pytest.mark.parametrize(
    ("node", "line_no", "kind", "rid", "host", "room", "stream", "hdr", "prompt", "ftype", "flen", "status", "health"),
    [
        ("v0_4", 9, "received", "0a4b1c", None, None, True, None, None, None, None, None, False),
        ("v0_4", 12, "finished", "0a4b1c", None, None, True, None, 64, "stop", None, None, False),
        ("v0_5_2", 7, "received", "9f2c4e0a1b7d4c3e8a5f6b2d1c0e9f8a", "10.0.2.11", 4793981895866140836, False,
         "req_01J9ABC", None, None, None, None, False),
        ("v0_5_2", 14, "finished", "9f2c4e0a1b7d4c3e8a5f6b2d1c0e9f8a", "10.0.2.11", 4793981895866140836, False,
         None, 1, "length", 0, None, False),
        ("v0_5_6", 8, "received", "HEALTH_CHECK_1a2b", "2.2.2.2", 0, False, None, None, None, None, None, True),
        ("v0_5_6", 17, "finished", "78fde411d57a4d7791b63963eac74968", "10.0.2.11", 4793981895866140836, True,
         "req_json_1", 702133, "abort", None, 400, False),
        ("v0_5_11", 6, "received", "c0ffee", "10.0.2.11", 123456789, True, None, None, None, None, None, False),
        ("v0_5_11", 8, "finished", "c0ffee", None, 123456789, True, None, 1, "length", 0, None, False),
        ("metrics", 1, "metrics", "m1", "10.0.2.11", 777, False, None, 1, "length", 0, None, False),
        ("metrics", 2, "metrics", "m2", None, None, None, None, 10, "stop", None, None, False),
    ],
)
def test_request_records_by_key(
    fx: tuple[Case, Path], node: str, line_no: int, kind: str, rid: str, host: str | None, room: int | None,
    stream: bool | None, hdr: str | None, prompt: int | None, ftype: str | None, flen: int | None,
    status: int | None, health: bool,
) -> None:
    case, _ = fx
    got = one(case, """SELECT kind, rid, bootstrap_host, bootstrap_room, stream, header_request_id, prompt_tokens,
                              finish_type, finish_length, finish_status_code, is_health_check
                       FROM engine_requests WHERE node = $n AND line_no = $l AND kind <> 'time_stats'""",
              {"n": node, "l": line_no})
    assert got == (kind, rid, host, room, stream, hdr, prompt, ftype, flen, status, health)


@pytest.mark.parametrize(
    ("node", "line_no", "rid", "room", "input_len", "output_len", "stype"),
    [
        ("v0_5_6", 16, "78fde411d57a4d7791b63963eac74968", 4793981895866140836, 702133, 512, "decode"),
        ("v0_5_11", 7, "c0ffee", 123456789, 1, 0, "prefill"),  # 0.5.11 'Req Time Stats(... input len=...)'
    ],
)
def test_time_stats(fx: tuple[Case, Path], node: str, line_no: int, rid: str, room: int, input_len: int,
                    output_len: int, stype: str) -> None:
    case, _ = fx
    got = one(case, """SELECT rid, bootstrap_room, input_len, output_len, stats_type FROM engine_requests
                       WHERE node = $n AND line_no = $l AND kind = 'time_stats'""", {"n": node, "l": line_no})
    assert got == (rid, room, input_len, output_len, stype)


@pytest.mark.parametrize(
    ("node", "line_no", "kind", "rid", "inp", "limit"),
    [
        ("v0_4", 14, "input_length", None, 131100, 131066),
        ("v0_5_2", 8, "input_length", "9f2c4e0a1b7d4c3e8a5f6b2d1c0e9f8a", 702133, 681274),  # '., self.rid=' form
        ("v0_5_2", 13, "pd_capacity", "9f2c4e0a", 702133, 681280),
        ("v0_5_23", 7, "auto_truncate", None, 700000, 599994),
        ("v0_5_23", 10, "context_length", None, 1100000, 1048576),
        ("v0_5_23", 11, "context_length", None, 1100512, 1048576),
    ],
)
def test_rejections(fx: tuple[Case, Path], node: str, line_no: int, kind: str, rid: str | None, inp: int,
                    limit: int) -> None:
    case, _ = fx
    got = one(case, """SELECT kind, rid, input_tokens, limit_tokens FROM engine_rejections
                       WHERE node = $n AND line_no = $l""", {"n": node, "l": line_no})
    assert got == (kind, rid, inp, limit)


@pytest.mark.parametrize(
    ("node", "line_no", "kind", "rid", "room", "status"),
    [
        ("v0_5_2", 10, "prefill_transfer_failed", "9f2c4e0a1b7d4c3e8a5f6b2d1c0e9f8a", 4793981895866140836, None),
        ("v0_5_2", 11, "bootstrap_failed", "60d582b2", 7561186998443553199, None),
        ("v0_5_2", 12, "kvpoll_timeout", None, 4793981895866140836, None),
        ("v0_5_6", 10, "decode_transfer_failed", "78fde411d57a4d7791b63963eac74968", 4793981895866140836, None),
        ("v0_5_23", 8, "kv_checksum_mismatch", "abc123", 42, None),
        ("v0_5_23", 9, "context_corruption", None, 43, None),
        ("router", 5, "router_pd_error", None, None, None),
        ("router", 6, "router_pd_error", None, None, 500),  # status on the wrapped second line
    ],
)
def test_events(fx: tuple[Case, Path], node: str, line_no: int, kind: str, rid: str | None, room: int | None,
                status: int | None) -> None:
    case, _ = fx
    got = one(case, """SELECT kind, rid, bootstrap_room, status FROM engine_events
                       WHERE node = $n AND line_no = $l""", {"n": node, "l": line_no})
    assert got == (kind, rid, room, status)


@pytest.mark.parametrize(
    ("line_no", "level", "rid", "method", "uri", "status", "latency"),
    [
        (2, "INFO", "chatcmpl-Fv8hcEUqESnJs9FNprtMETq1", "POST", "/v1/chat/completions", 200, 41877310),
        (3, "WARN", "req-from-client", "POST", "/v1/completions", 400, 1200),
        (4, "ERROR", "gnt-abcdefghijklmnopqrstuvwx", "POST", "/generate", 502, 999),
    ],
)
def test_router_requests(fx: tuple[Case, Path], line_no: int, level: str, rid: str, method: str, uri: str,
                         status: int, latency: int) -> None:
    case, _ = fx
    got = one(case, """SELECT level, request_id, method, uri, status, latency_us FROM router_requests
                       WHERE line_no = $l""", {"l": line_no})
    assert got == (level, rid, method, uri, status, latency)


@pytest.mark.parametrize(
    ("node", "line_no", "client", "method", "path", "status"),
    [
        ("v0_4", 13, "127.0.0.1:51234", "POST", "/generate", 200),
        ("v0_5_6", 5, "127.0.0.1:32772", "PRI", "%2A", 404),
        ("v0_5_6", 7, "127.0.0.1:32770", "GET", "/health", 200),
    ],
)
def test_uvicorn_access_lines(fx: tuple[Case, Path], node: str, line_no: int, client: str, method: str,
                              path: str, status: int) -> None:
    case, _ = fx
    got = one(case, "SELECT client, method, path, status FROM engine_http WHERE node = $n AND line_no = $l",
              {"n": node, "l": line_no})
    assert got == (client, method, path, status)


@pytest.mark.parametrize(
    ("node", "line_no", "kind", "attached"),
    [
        ("v0_5_6", 11, "traceback", 10),
        ("v0_5_6", 14, "traceback", 10),
        ("router", 7, "traceback", 6),  # wrapped router line, also joined into the event message
        ("v0_5_6", 6, "engine", None),
        ("v0_5_23", 12, "request_openai", None),
        ("v0_5_2", 1, "startup", None),
    ],
)
def test_other_lines_by_kind(fx: tuple[Case, Path], node: str, line_no: int, kind: str, attached: int | None) -> None:
    case, _ = fx
    got = one(case, "SELECT kind, attached_to_line FROM engine_other_lines WHERE node = $n AND line_no = $l",
              {"n": node, "l": line_no})
    assert got == (kind, attached)


# -- time --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "line_no", "table", "ts", "inferred"),
    [
        ("v0_5_6", 3, "engine_other_lines", dt.datetime(2025, 11, 5, 16, 30, 11, 999000), False),  # SGLANG_LOG_MS
        ("v0_5_11", 6, "engine_requests", dt.datetime(2025, 11, 5, 8, 31, 40, 123000), True),  # collector time
        ("v0_5_11", 8, "engine_requests", dt.datetime(2025, 11, 5, 16, 31, 41), True),  # nearest earlier
        ("v0_5_11", 2, "engine_other_lines", dt.datetime(2025, 11, 5, 16, 30, 10), False),  # Ray prefix
        ("router", 2, "router_requests", dt.datetime(2026, 9, 2, 4, 51, 59), None),
    ],
)
def test_timestamps(fx: tuple[Case, Path], node: str, line_no: int, table: str, ts: dt.datetime,
                    inferred: bool | None) -> None:
    case, _ = fx
    col = "NULL" if table == "router_requests" else "ts_inferred"
    got = one(case, f"SELECT ts, {col} FROM {table} WHERE node = $n AND line_no = $l", {"n": node, "l": line_no})
    assert got == (ts, inferred)


@pytest.mark.parametrize(
    ("tz", "local", "utc"),
    [
        ("Asia/Singapore", "2026-09-02 12:51:17", dt.datetime(2026, 9, 2, 4, 51, 17)),  # UTC+8
        ("UTC", "2026-09-02 04:51:17", dt.datetime(2026, 9, 2, 4, 51, 17)),
        ("America/New_York", "2026-09-02 00:51:17", dt.datetime(2026, 9, 2, 4, 51, 17)),  # EDT
    ],
)
def test_engine_tz_lines_up_with_utc_gateway(tmp_path: Path, tz: str, local: str, utc: dt.datetime) -> None:
    log = tmp_path / "p.log"
    log.write_text(f"[{local} TP0] Input length (9 tokens) exceeds the maximum allowed length (5 tokens). x\n")
    case = open_case(":memory:")
    case.ingest_engine([f"prefill-0={log}"], tz=tz)
    assert one(case, "SELECT ts FROM engine_rejections") == (utc,)
    assert one(case, "SELECT tz FROM evidence_files") == (tz,)


# -- evidence rules ------------------------------------------------------------------------------------


def test_counts_reconcile_for_every_file(fx: tuple[Case, Path]) -> None:
    case, _ = fx
    rows = case.sql("SELECT file_id, lines_read, rows_loaded, rows_rejected, rows_duplicate, complete "
                    "FROM evidence_files").fetchall()
    assert len(rows) == 7
    for fid, read, loaded, rejected, dup, complete in rows:
        assert read == loaded + rejected + dup, fid
        assert complete
        n = 0
        for t in ("engine_batches", "engine_requests", "engine_rejections", "engine_events", "engine_http",
                  "router_requests", "engine_other_lines"):
            n += one(case, f"SELECT count(*) FROM {t} WHERE file_id = $f", {"f": fid})[0]
        assert n == loaded


def test_markers_never_reach_the_database(fx: tuple[Case, Path]) -> None:
    case, path = fx
    case.con.execute("CHECKPOINT")
    data = path.read_bytes()
    for marker in MARKERS:
        assert marker.encode() not in data, marker
    for (table,) in case.sql("SELECT table_name FROM information_schema.tables WHERE table_schema='main'").fetchall():
        text = case.sql(f'SELECT string_agg(CAST(COLUMNS(*) AS VARCHAR), \'|\') FROM "{table}"').fetchall()
        for marker in MARKERS:
            assert marker not in str(text), (table, marker)


def test_idempotent_by_sha256(tmp_path: Path) -> None:
    case = open_case(tmp_path / "c.duckdb")
    first = case.ingest_engine([FIX / "v0_5_2"], tz="UTC")
    second = case.ingest_engine([FIX / "v0_5_2"], tz="UTC")
    assert first.files[0].skipped is None and second.files[0].skipped is not None
    assert one(case, "SELECT count(*) FROM evidence_files") == (1,)
    assert one(case, "SELECT count(*) FROM engine_starts") == (1,)
    assert one(case, "SELECT count(*) FROM engine_requests") == (2,)


def test_rotated_files_read_in_time_order(tmp_path: Path) -> None:
    lines = (FIX / "v0_5_23" / "decode-9.log").read_bytes().splitlines(keepends=True)
    node = tmp_path / "decode-9"
    node.mkdir()
    (node / "sglang.log.2.gz").write_bytes(gzip.compress(b"".join(lines[:6])))
    (node / "sglang.log.1.gz").write_bytes(gzip.compress(b"".join(lines[6:12])))
    (node / "sglang.log").write_bytes(b"".join(lines[12:]))
    case = open_case(":memory:")
    s = case.ingest_engine([tmp_path], tz="UTC")
    assert [Path(f.path).name for f in s.files] == ["sglang.log.2.gz", "sglang.log.1.gz", "sglang.log"]
    assert case.sql("SELECT start_seq, admission_limit FROM start_periods ORDER BY 1").fetchall() == [
        (1, 599994), (2, 524282)]
    assert one(case, "SELECT compression FROM evidence_files WHERE path LIKE '%.2.gz'") == ("gzip",)


def test_non_utf8_bytes_keep_the_line(tmp_path: Path) -> None:
    log = tmp_path / "d.log"
    log.write_bytes(b"[2026-09-02 04:51:17] caf\xe9 \xff\xfe odd bytes\n"
                    b"[2026-09-02 04:51:18] INFO:     1.2.3.4:5 - \"GET /health HTTP/1.1\" 200 OK\n")
    case = open_case(":memory:")
    s = case.ingest_engine([log], tz="UTC")
    f = s.files[0]
    assert (f.lines_read, f.rows_loaded, f.rows_rejected) == (2, 2, 0)
    assert any("invalid UTF-8" in w for w in f.warnings)
    (text,) = one(case, "SELECT text FROM engine_other_lines")
    assert "\ufffd" in text and "odd bytes" in text


@pytest.mark.parametrize(
    ("compress", "complete", "loaded", "rejected"),
    [
        (False, True, 3, 0),  # plain file without trailing newline: the last line is kept
        (True, False, 2, 1),  # truncated gzip: readable prefix kept, cut line rejected, file incomplete
    ],
)
def test_truncated_last_line(tmp_path: Path, compress: bool, complete: bool, loaded: int, rejected: int) -> None:
    body = (b"[2026-09-02 04:51:17 TP0] Decode batch, #running-req: 1, #token: 5, token usage: 0.01, "
            b"gen throughput (token/s): 1.0, #queue-req: 0\n" * 2
            + b"[2026-09-02 04:51:19] Receive: obj=GenerateReqInput(rid='r1', text='PROMPTMARKER-cut")
    log = tmp_path / ("s.log.gz" if compress else "s.log")
    if compress:
        import zlib

        co = zlib.compressobj(9, zlib.DEFLATED, 31)
        data = co.compress(body + b" and the rest of the prompt ' )\n" * 50) + co.flush(zlib.Z_SYNC_FLUSH)
        log.write_bytes(data[: len(data) - 40])
    else:
        log.write_bytes(body)
    case = open_case(":memory:")
    s = case.ingest_engine([log], tz="UTC")
    f = s.files[0]
    assert (f.complete, f.rows_loaded, f.rows_rejected) == (complete, loaded, rejected)
    assert f.reconciles
    if not complete:
        assert f.warnings and "truncated" in f.warnings[0]
        (raw,) = one(case, "SELECT raw FROM rejected_lines")
        assert b"PROMPTMARKER" not in raw


@pytest.mark.parametrize("fixture", ["v0_5_6", "v0_5_11", "router"])
def test_tiny_segments_give_the_same_rows(fixture: str) -> None:
    """Files are processed in bounded segments; continuation lines find their line across a cut."""
    tables = ["engine_batches", "engine_requests", "engine_rejections", "engine_events", "engine_http",
              "router_requests", "engine_other_lines"]

    def rows(**kw: int) -> dict[str, list[Any]]:
        case = open_case(":memory:")
        case.ingest_engine([f"n={FIX / fixture}"], tz="UTC", **kw)
        return {t: sorted(map(str, case.sql(f"SELECT * EXCLUDE (file_id) FROM {t}").fetchall())) for t in tables}

    assert rows(chunk_bytes=100, segment_bytes=100) == rows()


@pytest.mark.parametrize(
    ("chunk", "lines"),
    [
        (b"a\nb\n", ["a", "b"]),
        (b"a\nbc", ["a", "bc"]),  # last line without its newline
        (b"\n\n", ["", ""]),
        (b"x", ["x"]),
        ("caf\u00e9 \u2603\n".encode(), ["caf\u00e9 \u2603"]),
        (b"a\r\nb\n", ["a", "b"]),  # CRLF: the general path drops the CR
        (b"a\rb\n", ["a\rb"]),  # a lone CR is content
        (b"caf\xe9\nok\n", ["caf\ufffd", "ok"]),  # invalid UTF-8: U+FFFD, line kept
    ],
)
def test_line_staging_splits_exactly_at_newlines(chunk: bytes, lines: list[str]) -> None:
    """The collection stage's batches give each line without its terminator, numbered from the first."""
    batch = LineBatch.from_bytes(chunk, first_line=7)
    assert batch.text().to_pylist() == lines
    assert batch.line_no.tolist() == list(range(7, 7 + len(lines)))


def test_prompt_with_both_quote_kinds_and_fake_fields_is_never_read(tmp_path: Path) -> None:
    """Regression: the capture-free tokeniser keeps some literals; none may be read as a field."""
    fake = r"""'it\'s "x": rid=\'fake\', bootstrap_room=1, \'prompt_tokens\': 5, \'id\': \'fake\''"""
    log = tmp_path / "p.log"
    log.write_text(
        f"[2026-09-02 04:51:17] Receive: obj=GenerateReqInput(text={fake}, rid='real', bootstrap_room=42)\n"
        f"[2026-09-02 04:51:18] Finish: obj=GenerateReqInput(text={fake}, rid='real', bootstrap_room=42), "
        f"out={{'text': {fake}, 'meta_info': {{'id': 'real', 'finish_reason': {{'type': 'stop'}}, "
        f"'prompt_tokens': 9, 'completion_tokens': 2}}}}\n",
        encoding="utf-8",
    )
    case = open_case(":memory:")
    case.ingest_engine([f"n={log}"], tz="UTC")
    assert case.sql("SELECT kind, rid, bootstrap_room, prompt_tokens, finish_type FROM engine_requests "
                    "ORDER BY line_no").fetchall() == [("received", "real", 42, None, None),
                                                       ("finished", "real", 42, 9, "stop")]


def test_memory_limit_is_restored_after_engine_ingest(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader lowers DuckDB's limit by its own staging while it runs, and only then."""
    from forensics.sources.engine import loader as engine

    case = open_case(":memory:", memory_limit="2GB")
    before = memory_limit_bytes(case.con)
    seen: list[int | None] = []
    real = engine._register

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(memory_limit_bytes(case.con))
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "_register", spy)
    case.ingest_engine([FIX / "v0_4"], tz="UTC")
    assert seen and all(s is not None and before is not None and s < before for s in seen)
    assert memory_limit_bytes(case.con) == before

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("mid-ingest failure")

    monkeypatch.setattr(engine, "_register", boom)
    with pytest.raises(RuntimeError):
        case.ingest_engine([FIX / "v0_5_2"], tz="UTC")
    assert memory_limit_bytes(case.con) == before


def test_unknown_timezone_is_refused() -> None:
    from forensics.errors import ParameterError

    with pytest.raises(ParameterError):
        open_case(":memory:").ingest_engine([FIX / "v0_4"], tz="Mars/Olympus")


def test_summary_notes_counts_and_sample(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("something odd at the start\n[2026-09-02 04:51:17] hello\n")
    s = open_case(":memory:").ingest_engine([log], tz="UTC")
    assert s.notes["engine line kinds"] == {"unrecognised": 1, "engine": 1}
    assert s.notes["engine unrecognised sample"] == ["x.log:1: something odd at the start"]


# -- CLI through the real entry point -------------------------------------------------------------------


def test_cli_subprocess(tmp_path: Path) -> None:
    db = tmp_path / "cli.duckdb"
    out = subprocess.run(
        [sys.executable, "-m", "forensics", "ingest", str(db), "--engine", f"p0={FIX / 'v0_5_2' / 'prefill-0.log'}",
         "--engine", str(FIX / "router"), "--engine-tz", "Asia/Singapore", "--quiet"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "engine line kinds" in out.stdout
    case = open_case(db, read_only=True)
    assert one(case, "SELECT node, admission_limit, ts_start FROM start_periods") == (
        "p0", 681274, dt.datetime(2025, 9, 1, 0, 0, 0))
    assert one(case, "SELECT count(*) FROM router_requests") == (3,)


# -- the bundled sample ------------------------------------------------------------------------------


@pytest.mark.slow
def test_sample_reproduces_truth() -> None:
    truth_path = SAMPLE / "truth.json"
    assert truth_path.exists(), "sample_data/ is missing: forensics sample --out sample_data"
    truth = json.loads(truth_path.read_text())
    case = open_case(":memory:")
    s = case.ingest_engine([SAMPLE / "engine"], tz=truth.get("engine_tz", "Asia/Singapore"))
    for f in s.files:
        key = "engine/" + Path(f.path).relative_to(SAMPLE / "engine").as_posix()
        assert f.lines_read == truth["counts"]["files"][key]["lines"], key
        assert f.reconciles
    for node, info in truth["nodes"].items():
        got = case.sql("""SELECT context_len, max_total_num_tokens, admission_limit, ts_start, ts_ready
                          FROM start_periods WHERE node = $n AND start_logged ORDER BY start_seq""", {"n": node}).fetchall()
        want = [(st["context_len"], st["max_total_num_tokens"], st["admission_limit"],
                 dt.datetime.fromisoformat(st["ts_utc"].replace("Z", "")),
                 dt.datetime.fromisoformat(st["ts_ready_utc"].replace("Z", ""))) for st in info["starts"]]
        assert got == want, node
        if not info.get("starts"):
            continue
        roles = {r for (r,) in case.sql("SELECT DISTINCT role FROM engine_starts WHERE node = $n",
                                        {"n": node}).fetchall()}
        assert roles == {info["role"]}


# -- the evidence ledger in the engine loader -----------------------------------------------------


def test_the_same_bytes_twice_in_one_ingest_are_read_once(tmp_path: Path) -> None:
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "sglang.log").write_bytes((FIX / "v0_5_6" / "decode-0.log").read_bytes())
    s = open_case(":memory:").ingest_engine([f"n={tmp_path / 'a'}", f"n={tmp_path / 'b'}"], tz="UTC")
    assert [f.skipped for f in s.files] == [None, "already in case as file_id 1"]


def test_a_refused_file_leaves_no_evidence_of_any_file_of_the_ingest(tmp_path: Path) -> None:
    """The refusal comes while other files are in flight: none of them stays half loaded."""
    from forensics.errors import InputError

    (tmp_path / "n").mkdir()
    (tmp_path / "n" / "sglang.log").write_bytes((FIX / "v0_5_6" / "decode-0.log").read_bytes())
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "sglang.log").write_bytes(b"lorem ipsum\n" * 10)
    case = open_case(":memory:")
    with pytest.raises(InputError, match="not an SGLang engine or router log"):
        case.ingest_engine([f"n={tmp_path / 'n'}", f"m={tmp_path / 'm'}"], tz="UTC")
    assert one(case, "SELECT count(*) FROM evidence_files") == (0,)
    assert one(case, "SELECT count(*) FROM engine_batches") == (0,)


def test_a_superseded_open_last_line_is_counted_once_by_kind(tmp_path: Path) -> None:
    """engine_line_kinds agrees with evidence_files when a grown version re-reads an open last line."""
    src = (FIX / "v0_5_23" / "decode-9.log").read_bytes()
    log = tmp_path / "decode-9" / "sglang.log"
    log.parent.mkdir()
    cut = src.index(b"\n", len(src) // 2) - 5  # the copy ends 5 bytes before a line end
    log.write_bytes(src[:cut])
    case = open_case(tmp_path / "c.duckdb")
    case.ingest_engine([tmp_path / "decode-9"], tz="UTC")
    log.write_bytes(src)
    case.ingest_engine([tmp_path / "decode-9"], tz="UTC")
    assert case.sql("SELECT file_id, sum(n_lines) FROM engine_line_kinds GROUP BY 1 ORDER BY 1").fetchall() == \
        case.sql("SELECT file_id, lines_read FROM evidence_files ORDER BY 1").fetchall()
    assert one(case, "SELECT sum(lines_read) FROM evidence_files") == (src.count(b"\n"),)
