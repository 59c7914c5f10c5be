"""Line shapes of real deployments (issue #11 §3): one fixture per shape, built from posted lines.

See tests/fixtures/engine_shapes/README.md for where each line comes from.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from forensics.case import Case, open_case

FIX = Path(__file__).resolve().parent / "fixtures" / "engine_shapes"


def load(*names: str, tz: str = "UTC") -> Case:
    case = open_case(":memory:")
    case.ingest_engine([f"n={FIX / n}" for n in names], tz=tz)
    return case


def kinds(case: Case) -> list[tuple[int, str]]:
    """(line_no, kind) of every line, from the table it landed in."""
    return case.sql("""
        SELECT line_no, kind FROM (
            SELECT line_no, 'batch:' || kind AS kind FROM engine_batches
            UNION ALL SELECT line_no, 'http' FROM engine_http
            UNION ALL SELECT line_no, 'rejection:' || kind FROM engine_rejections
            UNION ALL SELECT line_no, 'event:' || kind FROM engine_events
            UNION ALL SELECT line_no, 'router' FROM router_requests
            UNION ALL SELECT line_no, kind FROM engine_other_lines)
        ORDER BY line_no""").fetchall()


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("foreign.log", [(1, "engine"), (2, "foreign_glog"), (3, "foreign_glog"), (4, "foreign_glog"),
                         (5, "foreign_glog"), (6, "foreign_glog"), (7, "engine"), (8, "foreign_nccl"),
                         (9, "foreign_nccl"), (10, "foreign_lmcache"), (11, "batch:prefill"),
                         (12, "foreign_lmcache"), (13, "foreign_aiter"), (14, "foreign_ray")]),
        ("custom_format.log", [(1, "batch:prefill"), (2, "batch:decode"), (3, "http"),
                               (4, "rejection:input_length")]),
        ("relogged.log", [(1, "batch:prefill"), (2, "rejection:input_length"), (3, "unrecognised")]),
        ("router_nested.log", [(1, "router"), (2, "router"), (3, "router"), (4, "event:router_pd_error"),
                               (5, "router")]),
        ("uvicorn_status_lost.log", [(1, "http"), (2, "http")]),
    ],
)
def test_every_line_lands_as_its_kind(fixture: str, expected: list[tuple[int, str]]) -> None:
    assert kinds(load(fixture)) == expected


def test_foreign_lines_are_never_engine_facts() -> None:
    """A Mooncake glog error or an NCCL warning is the library's line: no event, no rejection."""
    case = load("foreign.log")
    assert case.sql("SELECT count(*) FROM engine_events").fetchall() == [(0,)]
    fams = dict(case.sql("SELECT kind, count(*) FROM engine_other_lines WHERE kind LIKE 'foreign_%' "
                         "GROUP BY kind").fetchall())
    assert fams == {"foreign_glog": 5, "foreign_nccl": 2, "foreign_lmcache": 2, "foreign_aiter": 1, "foreign_ray": 1}


def test_kv_cache_dtype_line_is_the_starts_kv_dtype() -> None:
    case = load("kv_dtype.log")
    assert case.sql("SELECT kv_dtype, kv_cache_tokens, context_len FROM engine_starts").fetchall() == [
        ("torch.float8_e4m3fn", 3262823, 202752)]


def test_custom_format_fields() -> None:
    case = load("custom_format.log")
    assert case.sql("SELECT new_token, token_usage FROM engine_batches WHERE kind = 'prefill'").fetchall() == [
        (812, 0.01)]
    assert case.sql("SELECT client, method, path, status FROM engine_http").fetchall() == [
        ("10.0.3.7:41698", "POST", "/v1/chat/completions", 200)]
    assert case.sql("SELECT input_tokens, limit_tokens FROM engine_rejections").fetchall() == [(702133, 681274)]


def test_relogged_lines_keep_sglangs_time() -> None:
    case = load("relogged.log")
    assert case.sql("SELECT ts, ranks FROM engine_rejections").fetchall() == [(dt.datetime(2026, 5, 11, 14, 2, 10),
                                                                               "TP0")]


@pytest.mark.parametrize(
    ("line_no", "request_id", "status", "latency_us", "ts_inferred"),
    [
        (1, "gnt-7", 502, 3_500_000, False),
        (2, "r-2", 400, 850, False),
        (3, "r-3", 200, 12_000, False),
        (5, "r-4", 200, 2, False),  # 1500 ns, rounded half up
    ],
)
def test_router_nested_spans_and_latency_units(line_no: int, request_id: str, status: int, latency_us: int,
                                               ts_inferred: bool) -> None:
    case = load("router_nested.log")
    assert case.sql("SELECT request_id, status, latency_us, ts_inferred FROM router_requests WHERE line_no = $l",
                    {"l": line_no}).fetchall() == [(request_id, status, latency_us, ts_inferred)]


def test_router_line_with_cut_off_time_takes_the_time_before_flagged() -> None:
    case = load("router_nested.log")
    assert case.sql("SELECT ts, ts_inferred, status FROM engine_events").fetchall() == [
        (dt.datetime(2026, 9, 2, 4, 52, 3), True, 503)]


def test_uvicorn_line_whose_status_was_lost_is_kept_with_status_null() -> None:
    case = load("uvicorn_status_lost.log")
    assert case.sql("SELECT line_no, path, http_version, status FROM engine_http ORDER BY line_no").fetchall() == [
        (1, "/generate", "HTTP/1.1", 200), (2, "/generate", "HTTP/1.1", None)]


# -- the old date-less prefix -----------------------------------------------------------------------


def test_dateless_lines_take_the_date_of_the_dated_line_beside_them_flagged_inferred() -> None:
    case = load("dateless.log")
    rows = case.sql("SELECT line_no, ts, ts_inferred FROM engine_batches ORDER BY line_no").fetchall()
    assert rows == [
        (1, dt.datetime(2025, 1, 14, 23, 59, 58), True),  # before the dated line: dated backwards
        (3, dt.datetime(2025, 1, 15, 0, 0, 3), True),  # past midnight: the next day
        (4, dt.datetime(2025, 1, 15, 8, 5, 51), True),
    ]


def test_dateless_lines_take_the_collector_date(tmp_path: Path) -> None:
    f = tmp_path / "p.log"
    # the collector says 2026-03-01T00:10Z; the engine runs in Asia/Singapore (08:10 local)
    f.write_text("1772323800000\t[08:10:00 TP0] Decode batch. #running-req: 1, #token: 9, #queue-req: 0\n")
    case = open_case(":memory:")
    case.ingest_engine([f"n={f}"], tz="Asia/Singapore")
    assert case.sql("SELECT ts, ts_inferred FROM engine_batches").fetchall() == [
        (dt.datetime(2026, 3, 1, 0, 10), True)]


@pytest.mark.parametrize(
    ("name", "ts", "warned"),
    [
        ("sglang-2026-05-11.log", dt.datetime(2026, 5, 11, 8, 5, 51), False),  # the date in the file name
        ("sglang.log", None, True),  # no date anywhere: NULL, loudly, never invented
    ],
)
def test_dateless_lines_without_a_dated_neighbour(tmp_path: Path, name: str, ts: Any, warned: bool) -> None:
    f = tmp_path / name
    f.write_text("[08:05:51 TP0] Prefill batch. #new-seq: 1, #new-token: 8, #queue-req: 0\n")
    case = open_case(":memory:")
    s = case.ingest_engine([f"n={f}"], tz="UTC")
    assert case.sql("SELECT ts FROM engine_batches").fetchall() == [(ts,)]
    assert any("time of day without a date" in w for w in s.files[0].warnings) == warned


# -- files that are not engine logs, and coverage counts (issue #11 §6) -------------------------------


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"request_id,status,error\nr1,400,\"Input length (702133 tokens) exceeds the maximum allowed length "
         b"(681274 tokens).\"\n", "gateway CSV quoting a rejection"),
        (bytes(range(256)) * 64, "binary"),
        (b"lorem ipsum dolor\nsit amet\n", "random text"),
    ],
)
def test_a_file_that_is_not_an_engine_log_is_refused(tmp_path: Path, content: bytes, why: str) -> None:
    from forensics.errors import InputError

    f = tmp_path / "x.log"
    f.write_bytes(content)
    case = open_case(":memory:")
    with pytest.raises(InputError, match="not an SGLang engine or router log"):
        case.ingest_engine([f"n={f}"], tz="UTC")
    # nothing of it is evidence: no rejection, no request, no start, no evidence row
    for t in ("engine_rejections", "engine_requests", "engine_starts", "engine_other_lines", "evidence_files"):
        assert case.sql(f"SELECT count(*) FROM {t}").fetchall() == [(0,)], (why, t)


def test_a_mostly_unrecognised_file_warns_loudly_naming_a_sample_line(tmp_path: Path) -> None:
    f = tmp_path / "p.log"
    f.write_text("[2026-09-02 04:51:17 TP0] Decode batch, #running-req: 3\n" + "garbage line\n" * 3)
    s = open_case(":memory:").ingest_engine([f"n={f}"], tz="UTC")
    (w,) = [w for w in s.files[0].warnings if "MOSTLY UNRECOGNISED" in w]
    assert "3 of 4 lines of p.log" in w and "line 2: 'garbage line'" in w


def test_lines_by_kind_are_stored_per_file() -> None:
    case = load("foreign.log")
    rows = case.sql("SELECT kind, family, n_lines, first_line FROM engine_line_kinds ORDER BY kind").fetchall()
    assert ("foreign_glog", "foreign", 5, 2) in rows
    assert ("batch", "engine", 1, 11) in rows
    assert sum(r[2] for r in rows) == 14


# -- colour codes (a router or engine started on a terminal) ------------------------------------------

_ANSI_ROUTER = (b"\x1b[2m2026-09-02 04:52:03\x1b[0m \x1b[32m INFO\x1b[0m \x1b[1mhttp_request\x1b[0m\x1b[1m{\x1b[0m"
                b"method=POST uri=/v1/chat/completions request_id=\"r-3\" status_code=200 latency=12ms"
                b"\x1b[1m}\x1b[0m\x1b[2m:\x1b[0m smg::response: finished processing request\n")


def test_colour_codes_are_removed_before_the_router_grammar_on_both_paths(tmp_path: Path) -> None:
    """tracing-subscriber colours its fields on a TTY: the loader and parse_router_lines read through them."""
    from forensics.sources.engine import parse_router_lines

    f = tmp_path / "router.log"
    f.write_bytes(_ANSI_ROUTER)
    case = open_case(":memory:")
    case.ingest_engine([f"r={f}"], tz="UTC")
    assert case.sql("SELECT request_id, status, latency_us, byte_offset FROM router_requests").fetchall() == [
        ("r-3", 200, 12_000, 0)]
    t = parse_router_lines(_ANSI_ROUTER)
    assert t.select(["is_request", "request_id", "status", "latency_us"]).to_pylist() == [
        {"is_request": True, "request_id": "r-3", "status": 200, "latency_us": 12_000}]


def test_a_router_log_is_recognised_as_one_whatever_its_first_lines_are(tmp_path: Path) -> None:
    """The file's kind comes from all its lines: leading banner or panic text does not make it an engine log."""
    f = tmp_path / "first.log"
    f.write_bytes(b"thread 'main' panicked at src/main.rs:12:5:\nnote: run with `RUST_BACKTRACE=1`\n\n"
                  + (FIX / "router_nested.log").read_bytes())
    case = open_case(":memory:")
    s = case.ingest_engine([f"router={f}"], tz="UTC")
    assert s.files[0].format == "smg-router"
    assert case.sql("SELECT format FROM evidence_files").fetchall() == [("smg-router",)]
    assert case.sql("SELECT count(*) FROM router_requests").fetchall() == [(4,)]
