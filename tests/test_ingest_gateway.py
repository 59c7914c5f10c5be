"""Gateway ingest: every preset on realistic fixtures, mappings, bad inputs, counts, idempotency.

Fixtures are in tests/fixtures/gateway/ (one small file per preset, carrying the quirks of the
reference: numbers as strings, nulls, '-', comma lists, second-only precision, ns integers,
nested header objects, encrypted AI Gateway bodies).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import zstandard
from click.testing import CliRunner

import forensics
from forensics.cli import cli
from forensics.errors import (
    FormatDetectionError,
    InputError,
    MappingError,
    MissingFieldError,
    ParameterError,
)
from forensics.sources.gateway import salvage_to_file

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "gateway"
SAMPLE = ROOT / "sample_data"
T = dt.datetime


@pytest.fixture
def case() -> forensics.Case:
    return forensics.open_case(":memory:", now=T(2026, 10, 27, 12, 0, 0))


def rows(case: forensics.Case, where: str = "true") -> list[dict[str, Any]]:
    df = case.sql(f"SELECT * FROM gateway_requests WHERE {where} ORDER BY file_id, line_no").df()
    return [{k: (None if v is None or v != v else v) for k, v in r.items()} for r in df.to_dict("records")]


# -- every preset: detection and counts ---------------------------------------------------------------

PRESET_FILES = [
    # file, detected preset, lines_read, loaded, rejected, duplicate, layer
    ("cloudflare_http_ns.ndjson", "cloudflare-http", 9, 6, 2, 1, "edge"),
    ("cloudflare_http_rfc3339.ndjson.gz", "cloudflare-http", 4, 4, 0, 0, "edge"),
    ("cloudflare_http_unix.csv", "cloudflare-http", 3, 3, 0, 0, "edge"),
    ("ai_gateway_rest.json", "cloudflare-ai-gateway", 3, 3, 0, 0, "ai-gateway"),
    ("ai_gateway_logpush.ndjson", "cloudflare-ai-gateway", 2, 2, 0, 0, "ai-gateway"),
    ("nginx.ndjson", "nginx-json", 3, 3, 0, 0, "edge"),
    ("envoy_old.ndjson", "envoy", 2, 2, 0, 0, "edge"),
    ("envoy_new.ndjson", "envoy", 2, 2, 0, 0, "edge"),
    ("litellm_spendlogs.csv", "litellm", 4, 2, 1, 1, "proxy"),
    ("litellm_spendlogs.json", "litellm", 2, 2, 0, 0, "proxy"),
    ("otlp_spans.json", "otel", 3, 2, 1, 0, "otel"),
    ("smg_router.log", "smg-router", 7, 4, 3, 0, "router"),
]


@pytest.mark.parametrize(("name", "preset", "read", "loaded", "rejected", "dup", "layer"), PRESET_FILES)
def test_auto_detects_and_counts_reconcile(case: forensics.Case, name: str, preset: str, read: int,
                                           loaded: int, rejected: int, dup: int, layer: str) -> None:
    s = case.ingest_gateway(FIX / name)
    f = s.files[0]
    assert f.format == preset and f.detected and preset in f.detected
    assert (f.lines_read, f.rows_loaded, f.rows_rejected, f.rows_duplicate) == (read, loaded, rejected, dup)
    assert f.reconciles and f.complete
    ev = case.sql("SELECT lines_read, rows_loaded, rows_rejected, rows_duplicate, complete, format, layer, kind "
                  "FROM evidence_files").fetchall()[0]
    assert ev == (read, loaded, rejected, dup, True, preset, layer, "gateway")
    assert case.sql("SELECT count(*) FROM gateway_requests").fetchall()[0] == (loaded + dup,)
    assert case.sql("SELECT count(*) FROM gateway_requests_unique").fetchall()[0] == (loaded,)
    assert case.sql("SELECT count(*) FROM rejected_lines").fetchall()[0] == (rejected,)
    assert case.sql("SELECT count(DISTINCT layer) FROM gateway_requests").fetchall()[0] == (1,)


@pytest.mark.parametrize(("name", "preset"), [(n, p) for n, p, *_ in PRESET_FILES])
def test_explicit_preset_matches_auto(case: forensics.Case, name: str, preset: str) -> None:
    s = case.ingest_gateway(FIX / name, format=preset)
    assert s.files[0].detected is None and s.files[0].format == preset


# -- field derivations per preset (the quirks of the reference) ---------------------------------------

FIELD_CASES = [
    # file, line_no, expected column values
    ("cloudflare_http_ns.ndjson", 1, dict(
        request_id="8bd41f07a2c3e900", header_request_id="req_01J9W0", tenant_id="3f1c0a9e0",
        model="@cf/zai-org/glm-5.3", ts_start=T(2026, 9, 2, 14, 3, 11, 482000), ts_precision="ns",
        ts_raw="1788357791482000000", ts_zone_assumed=None, status=200, request_bytes=2874113,
        streamed=True, upstream="198.51.100.20", prompt_tokens=None, tokens_source=None,
        path="/client/v4/accounts/3f1c0a9e0/ai/run/@cf/zai-org/glm-5.3", method="POST")),
    # ns timestamp given as a string; ClientRequestBytes as a string
    ("cloudflare_http_ns.ndjson", 6, dict(ts_start=T(2026, 9, 2, 14, 6, 11, 482000), request_bytes=2874116,
                                          streamed=False, ts_precision="ns")),
    ("cloudflare_http_rfc3339.ndjson.gz", 1, dict(ts_start=T(2026, 9, 2, 4, 50, 11), ts_end=T(2026, 9, 2, 4, 50, 59),
                                                  ts_precision="s", header_request_id=None, tenant_id="acct42")),
    ("cloudflare_http_unix.csv", 3, dict(ts_start=T(2026, 9, 2, 14, 3, 12), ts_precision="s",
                                         header_request_id="req_csv_1", tenant_id="csvacct")),
    ("ai_gateway_rest.json", 1, dict(request_id="01J9W0AAAA", tenant_id="acme", prompt_tokens=700001,
                                     completion_tokens=1, tokens_source="gateway", status=200, streamed=True,
                                     ts_start=T(2026, 9, 2, 4, 51, 59, 123000),
                                     ts_end=T(2026, 9, 2, 4, 52, 50, 357000), ts_precision="ms",
                                     upstream="workers-ai")),
    ("ai_gateway_rest.json", 2, dict(tenant_id=None, prompt_tokens=None, tokens_source=None, status=400,
                                     ts_end=T(2026, 9, 2, 4, 52, 11, 700000))),
    ("ai_gateway_rest.json", 3, dict(tenant_id="42")),
    # Logpush: encrypted Metadata left alone (no tenant), ms epoch, durationMs from Metrics
    ("ai_gateway_logpush.ndjson", 1, dict(request_id=None, tenant_id=None, ts_precision="ms",
                                          ts_start=T(2026, 9, 2, 14, 3, 11, 482000),
                                          ts_end=T(2026, 9, 2, 14, 3, 12, 716000), status=200, path="ai/run")),
    ("ai_gateway_logpush.ndjson", 2, dict(tenant_id="plain-tenant", status=400)),
    # nginx: msec (end) minus request_time; last of the upstream list; '-' is empty
    ("nginx.ndjson", 1, dict(ts_end=T(2026, 9, 2, 4, 51, 59, 482000), ts_start=T(2026, 9, 2, 4, 51, 8, 47000),
                             upstream="10.0.0.2:8000", status=200, tenant_id="t-nginx-1", streamed=True,
                             path="/v1/chat/completions", request_bytes=2874501, response_bytes=18231)),
    ("nginx.ndjson", 2, dict(ts_end=T(2026, 9, 2, 4, 52, 30), ts_precision="s", upstream=None, tenant_id=None,
                             status=499, streamed=None)),
    ("envoy_old.ndjson", 1, dict(prompt_tokens=700001, completion_tokens=1, model="glm-5.3",
                                 tokens_source="gateway", ts_end=T(2026, 9, 2, 4, 52, 50, 558000))),
    ("envoy_old.ndjson", 2, dict(prompt_tokens=None, tokens_source=None, status=400, upstream=None)),
    ("envoy_new.ndjson", 1, dict(prompt_tokens=512, completion_tokens=64, ts_precision="us",
                                 ts_start=T(2026, 9, 2, 4, 51, 59, 123456))),
    ("envoy_new.ndjson", 2, dict(prompt_tokens=None, tokens_source=None)),
    ("litellm_spendlogs.csv", 2, dict(request_id="r-1", tenant_id="team-a", model="glm-5.3", status=200,
                                      ts_zone_assumed="UTC", ts_precision="us", streamed=True,
                                      upstream="http://10.0.3.7:8000/v1", prompt_tokens=700001)),
    ("litellm_spendlogs.csv", 3, dict(status=None, streamed=False)),
    ("litellm_spendlogs.csv", 5, dict(request_id="r-1", is_duplicate=True)),
    ("otlp_spans.json", 1, dict(request_id="chatcmpl-abc", tenant_id="span-tenant", prompt_tokens=700001,
                                ts_start=T(2026, 9, 2, 14, 3, 11, 482123), ts_precision="ns",
                                header_request_id="5b8efff798038103d269b633813fc60c", upstream="10.0.0.1")),
    ("otlp_spans.json", 2, dict(request_id="eee19b7ec3c1b175", tenant_id="res-tenant",
                                in_band_error="context_length_exceeded", status=400)),
    ("smg_router.log", 2, dict(request_id="chatcmpl-Fv8hcEUqESnJs9FNprtMETq1", status=200,
                               ts_end=T(2026, 9, 2, 4, 51, 59), ts_start=T(2026, 9, 2, 4, 51, 17, 122690),
                               path="/v1/chat/completions", method="POST", ts_precision="s")),
    ("smg_router.log", 7, dict(request_id="cmpl-0123456789abcdefghijklmn")),
]


@pytest.mark.parametrize(("name", "line_no", "expected"), FIELD_CASES)
def test_preset_fields(case: forensics.Case, name: str, line_no: int, expected: dict[str, Any]) -> None:
    case.ingest_gateway(FIX / name)
    got = rows(case, f"line_no = {line_no}")
    assert len(got) >= 1
    row = got[-1] if expected.get("is_duplicate") else got[0]
    for key, value in expected.items():
        assert row[key] == value, f"{name}:{line_no} {key}: {row[key]!r} != {value!r}"


REJECT_CASES = [
    ("cloudflare_http_ns.ndjson", [(4, "invalid JSON"), (5, "empty line")]),
    ("litellm_spendlogs.csv", [(4, "CSV row has too few fields")]),
    ("otlp_spans.json", [(3, "not a GenAI span (no gen_ai.* attribute)")]),
    ("smg_router.log", [(1, "not a router request line"), (5, "not a router request line"),
                        (6, "not a router request line")]),
]


@pytest.mark.parametrize(("name", "expected"), REJECT_CASES)
def test_rejected_lines_keep_raw_and_reason(case: forensics.Case, name: str, expected: list[tuple[int, str]]) -> None:
    case.ingest_gateway(FIX / name)
    got = case.sql("SELECT line_no, reason, raw, raw_length FROM rejected_lines ORDER BY line_no").fetchall()
    assert [(ln, reason) for ln, reason, _, _ in got] == expected
    for _, _, raw, length in got:
        # the raw line, capped at 4 KiB; cut at its first prompt-carrying key if it has one
        assert len(raw) == min(length, 4096) or raw.endswith(b" <redacted: rest of line>")


def test_tenant_options(case: forensics.Case) -> None:
    case.ingest_gateway(FIX / "cloudflare_http_ns.ndjson", tenant_header="x-tenant")
    assert {r["tenant_id"] for r in rows(case)} == {"hdr-tenant-0", "hdr-tenant-1"}
    c2 = forensics.open_case(":memory:")
    c2.ingest_gateway(FIX / "litellm_spendlogs.json", tenant_field="end_user", layer="lb")
    assert [(r["tenant_id"], r["layer"]) for r in rows(c2)] == [("cust-1", "lb"), (None, "lb")]
    c3 = forensics.open_case(":memory:")
    c3.ingest_gateway(FIX / "ai_gateway_rest.json", tenant_key="env")
    assert [r["tenant_id"] for r in rows(c3)] == ["prod", None, None]
    c4 = forensics.open_case(":memory:")
    c4.ingest_gateway(FIX / "otlp_spans.json", tenant_attribute="service.name")
    assert {r["tenant_id"] for r in rows(c4)} == {"chat-api"}


# -- mappings -----------------------------------------------------------------------------------------

MAPPING_CASES = [
    ("kong.ndjson", "kong.toml", 2, dict(request_id="kong-1", tenant_id="blue", model="glm-5.3",
                                         prompt_tokens=700001, tokens_source="gateway", upstream="10.0.0.1:8000",
                                         ts_start=T(2026, 9, 2, 14, 3, 11, 482000),
                                         ts_end=T(2026, 9, 2, 14, 4, 2, 917000), layer="proxy",
                                         source_format="mapping:kong.toml")),
    ("haproxy.log", "haproxy.toml", 2, dict(request_id="hx-1", tenant_id="blue", layer="lb",
                                            ts_start=T(2026, 9, 2, 4, 51, 59, 123000),
                                            ts_zone_assumed="Asia/Singapore", ts_raw="2026-09-02 12:51:59.123")),
]


@pytest.mark.parametrize(("data", "mapping", "loaded", "first"), MAPPING_CASES)
def test_mapping_files(case: forensics.Case, data: str, mapping: str, loaded: int, first: dict[str, Any]) -> None:
    s = case.ingest_gateway(FIX / data, format=str(FIX / mapping))
    f = s.files[0]
    assert f.rows_loaded == loaded and f.reconciles
    row = rows(case)[0]
    for key, value in first.items():
        assert row[key] == value, key
    opts = json.loads(case.sql("SELECT options FROM evidence_files").fetchall()[0][0])
    assert opts["mapping"].endswith(mapping)


BAD_MAPPINGS = [
    ("[columns]\nrequest_id = 'id'\n", "needs ts_start or ts_end"),
    ("[columns]\nts_start = 't'\nbogus = 'x'\n", "unknown canonical columns"),
    ("[columns]\nts_start = { field = 't', unit = 'days' }\n", "unit must be one of"),
    ("[columns]\nts_start = { field = 't', regex = '(' }\n", "invalid regex"),
    ("[gateway]\nline_regex = '\\\\S+'\n[columns]\nts_start = 't'\n", "named groups"),
    ("[columns\n", "not valid TOML"),
    ("[oops]\n[columns]\nts_start = 't'\n", "unknown sections"),
]


@pytest.mark.parametrize(("text", "message"), BAD_MAPPINGS)
def test_bad_mapping_is_a_clear_error(case: forensics.Case, tmp_path: Path, text: str, message: str) -> None:
    m = tmp_path / "bad.toml"
    m.write_text(text)
    with pytest.raises(MappingError, match=message):
        case.ingest_gateway(FIX / "kong.ndjson", format=str(m))


# -- bad inputs ----------------------------------------------------------------------------------------

def _write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


BAD_INPUTS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("unknown-format", {"format": "apache"}, ParameterError, "unknown gateway format 'apache'"),
    ("bad-tz", {"tz": "Mars/Olympus"}, ParameterError, "unknown time zone"),
    ("bad-option", {"tenant": "x"}, ParameterError, "unknown gateway option"),
    ("missing-field", {"format": "cloudflare-http", "file": "litellm_spendlogs.json"}, MissingFieldError,
     "field RayID not found .* preset cloudflare-http"),
    ("mapping-missing-field", {"format": "kong.toml", "file": "nginx.ndjson"}, MissingFieldError,
     r"started_at not found .*kong.toml \[columns\]"),
    ("unknown-json", {"file": "unknown.ndjson"}, FormatDetectionError, "no preset matches .* cloudflare-http"),
    ("unknown-text", {"file": "unknown.txt"}, FormatDetectionError, "cannot tell which gateway"),
    ("ambiguous", {"file": "ambiguous.ndjson"}, FormatDetectionError, "ambiguous format"),
    ("no-such-path", {"file": "nope.log"}, InputError, "no such file"),
    ("bad-json-array", {"file": "broken.json", "format": "litellm"}, InputError, "cannot read json-array"),
    ("json-preset-on-text", {"file": "unknown.txt", "format": "nginx-json"}, InputError, "this file is plain text"),
]


@pytest.mark.parametrize(("label", "kw", "exc", "message"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_inputs(case: forensics.Case, tmp_path: Path, label: str, kw: dict[str, Any],
                    exc: type[Exception], message: str) -> None:
    _write(tmp_path, "unknown.ndjson", '{"a": 1, "b": 2}\n')
    _write(tmp_path, "unknown.txt", "hello world\n")
    _write(tmp_path, "ambiguous.ndjson", json.dumps({
        "RayID": "x", "EdgeStartTimestamp": 1, "request_id": "r", "startTime": "2026-01-01", "spend": 0}) + "\n")
    _write(tmp_path, "broken.json", '[{"request_id": "r", "startTime": "2026-09-02 00:00:00", "spend": 1},\n{"request_')
    kw = dict(kw)
    name = kw.pop("file", "cloudflare_http_ns.ndjson")
    src = tmp_path / name if (tmp_path / name).exists() or name == "nope.log" else FIX / name
    if kw.get("format") == "kong.toml":
        kw["format"] = str(FIX / "kong.toml")
    with pytest.raises(exc, match=message):
        case.ingest_gateway(src, **kw)
    assert case.sql("SELECT count(*) FROM gateway_requests").fetchall()[0] == (0,)


# -- containers, compression, paths ------------------------------------------------------------------

def test_directory_glob_gz_zst_and_parquet(case: forensics.Case, tmp_path: Path) -> None:
    d = tmp_path / "logs" / "sub"
    d.mkdir(parents=True)
    raw = (FIX / "nginx.ndjson").read_bytes()
    (d / "a.log.gz").write_bytes(gzip.compress(raw))
    (d / "b.log.zst").write_bytes(zstandard.ZstdCompressor().compress((FIX / "envoy_new.ndjson").read_bytes()))
    import duckdb

    duckdb.sql(f"COPY (SELECT * FROM read_json('{FIX / 'envoy_old.ndjson'}')) TO '{d / 'c.parquet'}' (FORMAT parquet)")
    s = case.ingest_gateway(tmp_path / "logs")
    assert [(Path(f.path).name, f.format, f.rows_loaded) for f in s.files] == [
        ("a.log.gz", "nginx-json", 3), ("b.log.zst", "envoy", 2), ("c.parquet", "envoy", 2)]
    comp = case.sql("SELECT compression FROM evidence_files ORDER BY file_id").fetchall()
    assert comp == [("gzip",), ("zstd",), ("none",)]
    c2 = forensics.open_case(":memory:")
    s2 = c2.ingest_gateway(str(tmp_path / "logs" / "**" / "*.gz"))
    assert [Path(f.path).name for f in s2.files] == ["a.log.gz"]


def test_idempotent_by_sha256(case: forensics.Case, tmp_path: Path) -> None:
    first = case.ingest_gateway(FIX / "cloudflare_http_ns.ndjson")
    copy = tmp_path / "renamed.log"
    shutil.copy(FIX / "cloudflare_http_ns.ndjson", copy)
    again = case.ingest_gateway([FIX / "cloudflare_http_ns.ndjson", copy])
    assert [f.skipped for f in again.files] == [
        f"already in case as file_id {first.files[0].file_id} (same sha256)"] * 2
    assert again.rows_loaded == 0
    assert case.sql("SELECT count(*) FROM evidence_files").fetchall()[0] == (1,)
    assert case.sql("SELECT count(*) FROM gateway_requests").fetchall()[0] == (7,)
    sha = case.sql("SELECT sha256 FROM evidence_files").fetchall()[0][0]
    import hashlib

    assert sha == hashlib.sha256((FIX / "cloudflare_http_ns.ndjson").read_bytes()).hexdigest()


def test_interrupted_ingest_is_undone_and_read_again(case: forensics.Case) -> None:
    case.ingest_gateway(FIX / "cloudflare_http_ns.ndjson")
    # a crash between the bulk insert and the finishing step leaves the file marked unfinished
    case.sql("UPDATE evidence_files SET status = 'loading'")
    s = case.ingest_gateway(FIX / "cloudflare_http_ns.ndjson")
    assert s.files[0].skipped is None and s.files[0].rows_loaded == 6
    assert "cloudflare_http_ns.ndjson" in " ".join(str(v) for v in s.notes.values())
    assert case.sql("SELECT count(*), count(DISTINCT file_id) FROM gateway_requests").fetchall()[0] == (7, 1)
    assert case.sql("SELECT count(*), bool_and(complete) FROM evidence_files").fetchall()[0] == (1, True)


@pytest.mark.parametrize("calls", ["one ingest", "one ingest per file"])
def test_duplicates_across_files_are_flagged_not_deleted(case: forensics.Case, tmp_path: Path, calls: str) -> None:
    # one ingest: both files in one batch, no earlier rows in the case; one per file: the second
    # file's copies are found against rows already in the case
    lines = (FIX / "cloudflare_http_ns.ndjson").read_text().splitlines()
    a = _write(tmp_path, "a.ndjson", "\n".join(lines[:3]) + "\n")
    b = _write(tmp_path, "b.ndjson", lines[1] + "\n" + lines[2] + "\n" + lines[5] + "\n")
    files = (case.ingest_gateway([a, b]).files if calls == "one ingest"
             else case.ingest_gateway(a).files + case.ingest_gateway(b).files)
    assert [(f.rows_loaded, f.rows_duplicate) for f in files] == [(3, 0), (1, 2)]
    dup = case.sql("SELECT file_id, line_no FROM gateway_requests WHERE is_duplicate ORDER BY 2").fetchall()
    assert dup == [(2, 1), (2, 2)]
    assert case.sql("SELECT count(*) FROM gateway_requests_unique").fetchall()[0] == (4,)


def test_retry_within_the_first_file_of_a_case_is_flagged(case: forensics.Case, tmp_path: Path) -> None:
    lines = (FIX / "cloudflare_http_ns.ndjson").read_text().splitlines()
    a = _write(tmp_path, "a.ndjson", "\n".join([lines[0], lines[1], lines[0], lines[2]]) + "\n")
    f = case.ingest_gateway(a).files[0]
    assert (f.rows_loaded, f.rows_duplicate) == (3, 1)
    assert case.sql("SELECT line_no FROM gateway_requests WHERE is_duplicate").fetchall() == [(3,)]


def test_truncated_gzip_keeps_prefix_and_goes_on(case: forensics.Case, tmp_path: Path) -> None:
    body = "".join(json.dumps({"RayID": f"r{i:05d}", "EdgeStartTimestamp": 1788357791482000000 + i,
                               "EdgeEndTimestamp": 1788357791482000000 + i, "pad": "x" * 200}) + "\n"
                   for i in range(3000))
    data = gzip.compress(body.encode(), compresslevel=1)
    bad = tmp_path / "a-truncated.log.gz"
    bad.write_bytes(data[: len(data) // 2])
    good = tmp_path / "b-good.log.gz"
    good.write_bytes(gzip.compress(body.replace('"r0', '"g0').encode()[:5000].rsplit(b"\n", 1)[0] + b"\n"))
    s = case.ingest_gateway([bad, good], format="cloudflare-http")
    t, g = s.files
    assert not t.complete and t.warnings and "truncated gzip" in t.warnings[0]
    assert 0 < t.rows_loaded < 3000 and t.rows_rejected == 1 and t.reconciles
    assert g.complete and g.rows_loaded > 0
    ev = case.sql("SELECT complete, warning IS NOT NULL FROM evidence_files ORDER BY file_id").fetchall()
    assert ev == [(False, True), (True, False)]
    last = case.sql("SELECT max(line_no) FROM gateway_requests WHERE file_id = 1").fetchall()[0][0]
    cut = case.sql("SELECT line_no, reason FROM rejected_lines").fetchall()[0]
    assert cut[0] == last + 1 and "cut by the end" in cut[1]
    assert "INCOMPLETE" in s.render()


def test_salvage_to_file_whole_lines(tmp_path: Path) -> None:
    p = tmp_path / "x.gz"
    p.write_bytes(gzip.compress(b"".join(b"line %d\n" % i for i in range(10000)))[:-30])
    n, tail = salvage_to_file(p, tmp_path / "out.txt")
    text = (tmp_path / "out.txt").read_bytes()
    assert text.endswith(b"\n") and text.count(b"\n") == n and b"\n" not in tail


TIMESTAMP_CASES = [
    # raw value, tz, expected UTC, precision, zone assumed
    ("1788357791", "UTC", T(2026, 9, 2, 14, 3, 11), "s", None),
    ("1788357791482", "UTC", T(2026, 9, 2, 14, 3, 11, 482000), "ms", None),
    ("1788357791482123", "UTC", T(2026, 9, 2, 14, 3, 11, 482123), "us", None),
    ("1788357791482123456", "UTC", T(2026, 9, 2, 14, 3, 11, 482123), "ns", None),
    ("1788357791.5", "UTC", T(2026, 9, 2, 14, 3, 11, 500000), "ms", None),
    ("2026-09-02T04:51:59Z", "Asia/Singapore", T(2026, 9, 2, 4, 51, 59), "s", None),
    ("2026-09-02T12:51:59+08:00", "UTC", T(2026, 9, 2, 4, 51, 59), "s", None),
    ("2026-09-02T12:51:59.123456789+0800", "UTC", T(2026, 9, 2, 4, 51, 59, 123456), "ns", None),
    ("2026-09-02 12:51:59.25", "Asia/Singapore", T(2026, 9, 2, 4, 51, 59, 250000), "ms", "Asia/Singapore"),
    ("2026-09-02 04:51:59", "UTC", T(2026, 9, 2, 4, 51, 59), "s", "UTC"),
    ("2026-03-29 02:30:00", "Europe/Berlin", T(2026, 3, 29, 1, 30), "s", "Europe/Berlin"),
]


@pytest.mark.parametrize(("raw", "tz", "utc", "precision", "assumed"), TIMESTAMP_CASES)
def test_timestamps_in_every_shape(case: forensics.Case, tmp_path: Path, raw: str, tz: str,
                                   utc: dt.datetime, precision: str, assumed: str | None) -> None:
    p = _write(tmp_path, "t.ndjson", json.dumps({"start_time": raw, "response_code": "200",
                                                  "upstream_host": "-", "x-request-id": "a"}) + "\n")
    case.ingest_gateway(p, format="envoy", tz=tz)
    r = rows(case)[0]
    assert (r["ts_start"], r["ts_precision"], r["ts_zone_assumed"], r["ts_raw"]) == (utc, precision, assumed, raw)
    assert case.sql("SELECT tz FROM evidence_files").fetchall()[0] == (tz,)


def test_unparseable_timestamp_is_rejected_with_reason(case: forensics.Case, tmp_path: Path) -> None:
    p = _write(tmp_path, "t.ndjson", "\n".join(json.dumps(r) for r in [
        {"start_time": "yesterday", "response_code": 200, "upstream_host": "h"},
        {"start_time": None, "response_code": 200, "upstream_host": "h"},
        {"start_time": "2026-09-02T00:00:00Z", "response_code": 200, "upstream_host": "h"}]) + "\n")
    s = case.ingest_gateway(p, format="envoy")
    assert (s.files[0].rows_loaded, s.files[0].rows_rejected) == (1, 2)
    reasons = [r[0] for r in case.sql("SELECT reason FROM rejected_lines ORDER BY line_no").fetchall()]
    assert reasons == ["unparseable timestamp in ts_start (start_time): yesterday", "missing timestamp (start_time)"]


def test_non_utf8_line_is_loaded_and_line_numbers_hold(case: forensics.Case, tmp_path: Path) -> None:
    lines = (FIX / "cloudflare_http_ns.ndjson").read_bytes().splitlines()
    bad = lines[0].replace(b"api.example.net", b"caf\xe9.example.net")
    p = tmp_path / "latin.ndjson"
    p.write_bytes(b"\n".join([lines[1], bad, lines[2], b"", lines[5]]) + b"\n")
    s = case.ingest_gateway(p)
    f = s.files[0]
    assert (f.lines_read, f.rows_loaded, f.rows_rejected) == (5, 4, 1) and f.reconciles
    got = case.sql("SELECT line_no, request_id FROM gateway_requests ORDER BY line_no").fetchall()
    assert got == [(1, "8bd41f07a2c3e901"), (2, "8bd41f07a2c3e900"), (3, "8bd41f07a2c3e902"),
                   (5, "8bd41f07a2c3e903")]


FAST_PATH_CASES = [
    # lines of the file (by index into the ns fixture, or raw bytes), expected (line_no, reason) rejects
    ("plain", [1, b'{"RayID":"cut","EdgeStartTimestamp":17883', 2, b"[1, 2]", 5], [(2, "invalid JSON"), (4, "not a JSON object")]),
    ("non-utf8", [1, "latin", 2], []),
    ("blank-line-falls-back", [1, b"", 2, b"   ", 5], [(2, "empty line"), (4, "empty line")]),
]


@pytest.mark.parametrize(("label", "parts", "rejects"), FAST_PATH_CASES, ids=[c[0] for c in FAST_PATH_CASES])
@pytest.mark.parametrize("compress", ["none", "gzip"])
def test_ndjson_fast_path_numbers_and_raw_bytes(case: forensics.Case, tmp_path: Path, label: str,
                                                parts: list[Any], rejects: list[tuple[int, str]],
                                                compress: str) -> None:
    lines = (FIX / "cloudflare_http_ns.ndjson").read_bytes().splitlines()
    good = [ln for ln in lines if ln.strip().endswith(b"}")]
    body = []
    for part in parts:
        if part == "latin":
            body.append(good[0].replace(b"api.example.net", b"caf\xe9.example.net"))
        elif isinstance(part, int):
            body.append(good[part])
        else:
            body.append(part)
    data = b"\n".join(body) + b"\n"
    p = tmp_path / ("f.ndjson.gz" if compress == "gzip" else "f.ndjson")
    p.write_bytes(gzip.compress(data) if compress == "gzip" else data)
    s = case.ingest_gateway(p, format="cloudflare-http")
    f = s.files[0]
    assert f.lines_read == len(parts) and f.reconciles and f.rows_rejected == len(rejects)
    got = case.sql("SELECT line_no, reason, raw FROM rejected_lines ORDER BY line_no").fetchall()
    assert [(ln, r) for ln, r, _ in got] == rejects
    for ln, _, raw in got:
        assert raw == body[ln - 1]
    loaded = case.sql("SELECT line_no, request_id FROM gateway_requests ORDER BY line_no").fetchall()
    want = [(i + 1, json.loads(b.decode("utf-8", "replace"))["RayID"]) for i, b in enumerate(body)
            if (i + 1) not in {r[0] for r in rejects}]
    assert loaded == want


@pytest.mark.parametrize("shape", ["plain", "gzip", "blank-line"])
def test_line_numbers_of_a_big_file_loaded_in_parallel(tmp_path: Path, shape: str) -> None:
    # Rows are numbered by their position once inserted (the INSERT runs on every thread): on a
    # file of many reader buffers every row must still carry its physical line number.
    import duckdb

    n = 300_000
    p = tmp_path / ("big.ndjson.gz" if shape == "gzip" else "big.ndjson")
    blank = n // 2 if shape == "blank-line" else -1  # an empty line here sends the file to the line reader
    con = duckdb.connect()
    con.execute(f"""
        COPY (SELECT CASE WHEN i = {blank} THEN '' ELSE json_object(
                  'RayID', 'r' || i, 'EdgeStartTimestamp', 1788357791482000000 + i * 1000,
                  'ClientRequestPath', '/client/v4/accounts/' || (i % 97) || '/ai/run/@cf/m' || repeat('x', i % 50))::VARCHAR
              END AS line FROM range(1, {n + 1}) r(i) ORDER BY i)
        TO '{p}' (FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\x01',
                  COMPRESSION '{"gzip" if shape == "gzip" else "none"}')""")
    con.close()
    case = forensics.open_case(tmp_path / "case.duckdb", threads=2)
    f = case.ingest_gateway(p, format="cloudflare-http").files[0]
    assert f.lines_read == n and f.reconciles and f.rows_rejected == (1 if shape == "blank-line" else 0)
    bad = case.sql("SELECT count(*) FROM gateway_requests WHERE request_id <> 'r' || line_no").fetchall()[0][0]
    assert bad == 0
    assert case.sql("SELECT min(line_no), max(line_no), count(DISTINCT line_no) FROM gateway_requests").fetchall() == [
        (1, n, n - (1 if shape == "blank-line" else 0))]
    case.close()


def test_line_numbers_of_batched_small_files(tmp_path: Path) -> None:
    # small files of one format are loaded by one INSERT and numbered by position, file by file
    d = tmp_path / "hourly"
    d.mkdir()
    for k in range(6):
        body = b"".join(json.dumps({"RayID": f"f{k}-{i}", "EdgeStartTimestamp": 1788357791482000000 + i,
                                    "ClientRequestPath": f"/client/v4/accounts/{k}/ai/run/m"}).encode() + b"\n"
                        for i in range(1, 2001 + 97 * k))
        (d / f"h{k}.ndjson.gz").write_bytes(gzip.compress(body) if k % 2 else body)
    case = forensics.open_case(tmp_path / "case.duckdb", threads=2)
    s = case.ingest_gateway(d, format="cloudflare-http")
    assert [f.lines_read for f in s.files] == [2000 + 97 * k for k in range(6)]
    got = case.sql("SELECT count(*) FILTER (WHERE request_id <> 'f' || (e.file_id - 1) || '-' || line_no), count(*) "
                   "FROM gateway_requests JOIN evidence_files e USING (file_id)").fetchall()
    assert got == [(0, sum(2000 + 97 * k for k in range(6)))]
    case.close()


_LITELLM_HEADER = ("request_id,call_type,api_key,spend,total_tokens,prompt_tokens,completion_tokens,startTime,"
                   "endTime,completionStartTime,model,model_group,api_base,user,metadata,team_id,end_user,"
                   "status,organization_id,session_id")


def _litellm_row(rid: str, second: int, metadata: str = "{}") -> str:
    return (f"{rid},acompletion,h,0.1,3,2,1,2026-09-02 12:51:{second:02d},2026-09-02 12:52:00,"
            f"2026-09-02 12:52:00,m,m,http://x,u,{metadata},team-a,c,success,o,s")


# (label, records): a record is (request_id or None for a short row, its text)
CSV_LINE_CASES = [
    ("plain", [("r-1", _litellm_row("r-1", 1)), ("r-2", _litellm_row("r-2", 2)), ("r-3", _litellm_row("r-3", 3))]),
    ("rejected-row", [("r-1", _litellm_row("r-1", 1)), (None, "r-x,acompletion,h"),
                      ("r-3", _litellm_row("r-3", 3))]),
    ("duplicate-row", [("r-1", _litellm_row("r-1", 1)), ("r-2", _litellm_row("r-2", 2)),
                       ("r-1", _litellm_row("r-1", 1))]),
    ("quoted-newline", [("r-1", _litellm_row("r-1", 1)),
                        ("r-2", _litellm_row("r-2", 2, '"{""note"": ""two\nlines\r\nand three""}"')),
                        (None, "r-x,acompletion,h"), ("r-4", _litellm_row("r-4", 4)),
                        ("r-2", _litellm_row("r-2", 2, '"{""note"": ""two\nlines\r\nand three""}"'))]),
    ("blank-line", [("r-1", _litellm_row("r-1", 1)), ("", ""), (None, "r-x,acompletion,h"),
                    ("r-4", _litellm_row("r-4", 4))]),
]


@pytest.mark.parametrize(("label", "records"), CSV_LINE_CASES, ids=[c[0] for c in CSV_LINE_CASES])
@pytest.mark.parametrize("compress", ["none", "gzip"])
@pytest.mark.parametrize("numbering", ["positional", "row_number"])
def test_csv_line_no_is_the_physical_line(tmp_path: Path, label: str, records: list[tuple[str | None, str]],
                                          compress: str, numbering: str) -> None:
    # Evidence points at the line a responder opens in an editor: the header is line 1, a record is
    # numbered by the line it starts on (a quoted field may hold newlines), rejected rows and
    # duplicates alike; by position (the fast path) or by row_number() (preserve_insertion_order off).
    text = _LITELLM_HEADER + "\n"
    want_rows: list[tuple[int, str, bool]] = []
    want_rejects: list[tuple[int, str]] = []
    seen: set[str] = set()
    for rid, rec in records:
        line = text.count("\n") + 1
        text += rec + "\n"
        if rid is None:
            want_rejects.append((line, "CSV row has too few fields"))
        elif rid:
            want_rows.append((line, rid, rid in seen))
            seen.add(rid)
    p = tmp_path / ("SpendLogs.csv.gz" if compress == "gzip" else "SpendLogs.csv")
    p.write_bytes(gzip.compress(text.encode()) if compress == "gzip" else text.encode())
    case = forensics.open_case(":memory:")
    if numbering == "row_number":
        case.con.execute("SET preserve_insertion_order = false")
    f = case.ingest_gateway(p, format="litellm").files[0]
    assert f.reconciles and not f.warnings, f.warnings
    got = case.sql("SELECT line_no, request_id, is_duplicate FROM gateway_requests ORDER BY line_no").fetchall()
    assert got == want_rows
    assert case.sql("SELECT line_no, reason FROM rejected_lines ORDER BY line_no").fetchall() == want_rejects
    physical = text.split("\n")
    for line, rid, _ in want_rows:
        assert physical[line - 1].startswith(rid + ","), (line, rid)
    assert case.sql("SELECT warning FROM evidence_files").fetchall() == [(None,)]


def test_csv_line_no_falls_back_with_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # records spanning lines that the csv-module pass cannot place: record-based numbers, said so
    from forensics.sources.gateway import csvlines

    def refuse(path: Path, delim: str) -> tuple[list[int], list[int]]:
        raise ValueError("cannot split")

    monkeypatch.setattr(csvlines, "csv_units", refuse)
    text = "\n".join([_LITELLM_HEADER, _litellm_row("r-1", 1, '"a\nb"'), _litellm_row("r-2", 2)]) + "\n"
    p = tmp_path / "SpendLogs.csv"
    p.write_text(text)
    case = forensics.open_case(":memory:")
    f = case.ingest_gateway(p, format="litellm").files[0]
    assert f.reconciles and any("line numbers are approximate" in w for w in f.warnings)
    assert "approximate" in case.sql("SELECT warning FROM evidence_files").fetchall()[0][0]
    assert case.sql("SELECT line_no FROM gateway_requests ORDER BY line_no").fetchall() == [(2,), (3,)]


def test_source_files_are_not_modified(case: forensics.Case, tmp_path: Path) -> None:
    p = tmp_path / "ro.ndjson"
    shutil.copy(FIX / "cloudflare_http_ns.ndjson", p)
    p.chmod(0o444)
    before = (p.read_bytes(), p.stat().st_mtime_ns)
    case.ingest_gateway(p)
    assert (p.read_bytes(), p.stat().st_mtime_ns) == before


def test_benchmark_smoke(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from benchmarks.bench_gateway_ingest import run_benchmark

    figs = run_benchmark(rows=300, workdir=tmp_path, variants=("plain",))
    v = figs["plain"]
    assert v["counts_ok"] and v["forensics"]["rows"] == v["expected"]["lines"] == 302
    assert {"ratio_rows_per_s", "ratio_mb_per_s", "ratio_cpu", "ratio_peak_rss"} <= set(v)


def test_summary_frame_and_render(case: forensics.Case) -> None:
    s = case.ingest_gateway([FIX / "nginx.ndjson", FIX / "envoy_new.ndjson"])
    df = s.to_frame()
    assert list(df["format"]) == ["nginx-json", "envoy"]
    text = s.render()
    assert "total: 2 files, 5 read, 5 loaded, 0 rejected, 0 duplicate" in text


# -- CLI -----------------------------------------------------------------------------------------------

def test_cli_subprocess_ingest(tmp_path: Path) -> None:
    db = tmp_path / "case.duckdb"
    out = subprocess.run(
        [sys.executable, "-m", "forensics", "ingest", str(db), "--gateway", str(FIX / "cloudflare_http_ns.ndjson"),
         "--gateway", str(FIX / "litellm_spendlogs.csv"), "--quiet"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "total: 2 files, 13 read, 8 loaded, 3 rejected, 2 duplicate" in out.stdout
    with forensics.open_case(db, read_only=True) as c:
        assert c.sql("SELECT count(*) FROM gateway_requests_unique").fetchall()[0] == (8,)
    again = subprocess.run(
        [sys.executable, "-m", "forensics", "ingest", str(db), "--gateway", str(FIX / "litellm_spendlogs.csv"), "--quiet"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )
    assert again.returncode == 0 and "already in case" in again.stdout


CLI_ERRORS = [
    (["--gateway-format", "nope"], "unknown gateway format"),
    (["--gateway-tz", "Nowhere/Zone"], "unknown time zone"),
    (["--gateway-format", "cloudflare-http", "--gateway", str(FIX / "envoy_old.ndjson")], "field RayID not found"),
]


@pytest.mark.parametrize(("args", "message"), CLI_ERRORS)
def test_cli_errors_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    base = ["ingest", str(tmp_path / "c.duckdb")]
    if "--gateway" not in args:
        args = [*args, "--gateway", str(FIX / "nginx.ndjson")]
    res = CliRunner().invoke(cli, [*base, *args])
    assert res.exit_code == 2
    assert message in res.output and "Traceback" not in res.output


def test_cli_format_and_tz_flow_through(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["ingest", str(tmp_path / "c.duckdb"), "--gateway", str(FIX / "litellm_spendlogs.json"),
                                   "--gateway-format", "litellm", "--gateway-tz", "Asia/Singapore", "--quiet"])
    assert res.exit_code == 0, res.output
    with forensics.open_case(tmp_path / "c.duckdb", read_only=True) as c:
        assert c.sql("SELECT min(ts_start), any_value(ts_zone_assumed) FROM gateway_requests").fetchall()[0] == (
            T(2026, 9, 2, 4, 51, 59, 123456), "Asia/Singapore")


# -- the sample incident reconciles with its truth ----------------------------------------------------

@pytest.mark.skipif(not (SAMPLE / "truth.json").exists() or not (SAMPLE / "gateway").is_dir(),
                    reason="sample_data/ is absent (generate it with: forensics sample --out sample_data)")
def test_sample_data_reconciles_with_truth(tmp_path: Path) -> None:
    truth = json.loads((SAMPLE / "truth.json").read_text())["counts"]["files"]
    case = forensics.open_case(tmp_path / "case.duckdb")
    s = case.ingest_gateway(SAMPLE / "gateway")
    assert len(s.files) == len([k for k in truth if k.startswith("gateway/")])
    for f in s.files:
        t = truth[str(Path(f.path).resolve().relative_to(SAMPLE.resolve()))]
        # lines_read counts records + malformed (a CSV header is not a record)
        assert (f.lines_read, f.rows_rejected, f.rows_duplicate) == (
            t["records"] + t["malformed"], t["malformed"], t["duplicates"]), f.path
        assert f.reconciles and f.complete
    assert {f.format for f in s.files} == {"cloudflare-http", "litellm"}
