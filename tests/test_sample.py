"""Tests of the seeded sample-incident generator (forensics.sample)."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from forensics.sample import DEFAULT_REQUESTS, DEFAULT_SEED, generate
from forensics.sample._world import admission_limit

REPO = Path(__file__).resolve().parent.parent
COMMITTED = REPO / "sample_data"
SMALL = 400


def _files(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _lines(path: Path) -> list[bytes]:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.GzipFile(fileobj=io.BytesIO(data)).read()
    out = data.split(b"\n")
    if out and out[-1] == b"":
        out.pop()
    return out


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    d = tmp_path_factory.mktemp("small_a")
    return d, generate(d, requests=SMALL, seed=123)


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    d = tmp_path_factory.mktemp("default")
    return d, generate(d)


@pytest.fixture(scope="module", params=["small", "default"])
def sample(request: pytest.FixtureRequest) -> tuple[Path, dict[str, Any]]:
    return request.getfixturevalue("small" if request.param == "small" else "regenerated")


def test_deterministic(small: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    d1, t1 = small
    t2 = generate(tmp_path, requests=SMALL, seed=123)
    assert _files(d1) == _files(tmp_path)
    assert t1 == t2


def test_seed_changes_output(small: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    generate(tmp_path, requests=SMALL, seed=124)
    assert _files(small[0]) != _files(tmp_path)


def test_truth_json_matches_return(small: tuple[Path, dict[str, Any]]) -> None:
    d, truth = small
    text = (d / "truth.json").read_text(encoding="utf-8")
    assert json.loads(text) == truth
    assert text == json.dumps(truth, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def test_committed_sample_is_reproducible(regenerated: tuple[Path, dict[str, Any]]) -> None:
    assert (COMMITTED / "truth.json").exists(), "sample_data/ is missing: forensics sample --out sample_data"
    d, truth = regenerated
    assert truth["generator"]["requests"] == DEFAULT_REQUESTS
    assert truth["generator"]["seed"] == DEFAULT_SEED
    assert _files(COMMITTED) == _files(d)


def test_committed_sample_size() -> None:
    assert (COMMITTED / "truth.json").exists(), "sample_data/ is missing: forensics sample --out sample_data"
    total = sum(p.stat().st_size for p in COMMITTED.rglob("*") if p.is_file())
    assert total <= 15 * 1024 * 1024


@pytest.mark.parametrize(
    ("context_len", "pool", "limit"),
    [
        (1048576, 681280, 681274),  # the incident
        (524288, 681280, 524282),  # old config: context bound, not exposed
        (1048576, 2043840, 1048570),  # after the fix
        (1048576, 2039808, 1048570),  # prefill-2
    ],
)
def test_admission_limit(context_len: int, pool: int, limit: int) -> None:
    assert admission_limit(context_len, pool) == limit


def test_limits_and_windows(sample: tuple[Path, dict[str, Any]]) -> None:
    _, truth = sample
    assert truth["admission_limit"] == min(1048576 - 1, 681280 - 1) - 5 == 681274
    assert truth["engine_tz"] == "Asia/Singapore" and truth["gateway_tz"] == "UTC"
    exposed = []
    for name, node in truth["nodes"].items():
        for st in node["starts"]:
            # SGLang's max_req_input_len, worked out by hand for every configuration of the sample
            assert st["admission_limit"] == {
                (524288, 681280): 524282, (524288, 2621440): 524282, (524288, 2039808): 524282,
                (1048576, 681280): 681274, (1048576, 777792): 777786, (1048576, 2621440): 1048570,
                (1048576, 2039808): 1048570, (1048576, 2043840): 1048570,
            }[(st["context_len"], st["max_total_num_tokens"])]
            assert st["exposed"] == (st["max_total_num_tokens"] < st["context_len"])
            if st["exposed"]:
                exposed.append((name, st["ts_utc"]))
    assert sorted(exposed) == sorted((w["node"], w["start_utc"]) for w in truth["exposure_windows"])
    assert {w["node"] for w in truth["exposure_windows"]} == {"prefill-0", "prefill-1"}
    # two exposed configurations: prefill-1 was re-tuned into a second, still exposed, pool
    assert truth["admission_limits"] == [681274, 777786]
    assert [w["admission_limit"] for w in truth["exposure_windows"] if w["node"] == "prefill-1"] == [681274, 777786]
    fw = truth["fleet_window"]
    assert fw["start_utc"] == min(w["start_utc"] for w in truth["exposure_windows"])
    assert fw["end_utc"] == max(w["end_utc"] for w in truth["exposure_windows"])


def test_start_lines(sample: tuple[Path, dict[str, Any]]) -> None:
    d, truth = sample
    cache: dict[str, list[bytes]] = {}
    for node in truth["nodes"].values():
        for st in node["starts"]:
            lines = cache.setdefault(st["file"], _lines(d / st["file"]))
            line = lines[st["line"] - 1].decode()
            assert "server_args=" in line
            assert f"context_length{'=' if 'ServerArgs' in line else chr(39) + ': '}{st['context_len']}" in line
            tail = b"\n".join(lines[st["line"] - 1 : st["line"] + 200]).decode()
            assert f"max_total_num_tokens={st['max_total_num_tokens']}," in tail
            assert f"context_len={st['context_len']}," in tail
            assert tail.count(f"#tokens: {st['max_total_num_tokens']},") == 8  # one per TP rank


def test_leaks_have_evidence(sample: tuple[Path, dict[str, Any]]) -> None:
    d, truth = sample
    leaks = truth["leaks"]
    assert leaks, "the sample must contain leaks"
    cache: dict[str, list[bytes]] = {}

    def lines(rel: str) -> list[bytes]:
        if rel not in cache:
            cache[rel] = _lines(d / rel)
        return cache[rel]

    node_text: dict[str, bytes] = {}
    for name in truth["nodes"]:
        parts = sorted((d / "engine" / name).glob("*"))
        node_text[name] = b"\n".join(b"\n".join(_lines(p)) for p in parts)

    for lk in leaks:
        rej = lines(lk["rejection_file"])[lk["rejection_line"] - 1].decode()
        assert lk["rejection_file"].startswith(f"engine/{lk['prefill_node']}/")
        assert f"exceeds the maximum allowed length ({lk['admission_limit']} tokens)" in rej
        assert f"Input length ({lk['prompt_tokens']} tokens)" in rej
        assert f"self.rid='{lk['prefill_rid']}'" in rej
        assert lk["prompt_tokens"] >= lk["admission_limit"] >= truth["admission_limit"]
        gw = lines(lk["gateway_file"])[lk["gateway_line"] - 1].decode()
        if lk["layer"] == "edge":
            rec = json.loads(gw)
            assert rec["RayID"] == lk["request_id"]
            assert rec["EdgeResponseStatus"] == 200
            assert rec["RequestHeaders"]["x-request-id"] == lk["header_request_id"]
            assert lk["tenant_id"] in rec["ClientRequestPath"]
            assert (rec["EdgeResponseContentType"] == "text/event-stream") == lk["streamed"]
        else:
            header = lines(lk["gateway_file"])[0].decode().split(",")
            row = dict(zip(header, next(csv.reader([gw])), strict=True))
            assert row["request_id"] == lk["request_id"] == lk["decode_rid"]
            assert row["status"] == "success"
            assert int(row["prompt_tokens"]) == lk["prompt_tokens"]
            assert row["team_id"] == lk["tenant_id"]
        room = f"bootstrap_room={lk['bootstrap_room']},".encode()
        assert room in node_text[lk["prefill_node"]]
        assert room in node_text[lk["decode_node"]]
        assert f"'prompt_tokens': {lk['prompt_tokens']}," .encode() in node_text[lk["decode_node"]]
        assert f"'id': '{lk['prefill_rid']}', 'finish_reason': {{'type': 'length', 'length': 0}}, 'prompt_tokens': 1,".encode() in node_text[lk["prefill_node"]]
        for src in lk["possible_sources"]:
            assert src["request_id"] != lk["request_id"]
            assert src["same_tenant"] == (src["tenant_id"] == lk["tenant_id"])
            assert src["decode_finish_utc"] <= lk["decode_receive_utc"]
    assert [lk["ts_utc"] for lk in leaks] == sorted(lk["ts_utc"] for lk in leaks)
    counts: dict[str, dict[str, int]] = {}
    for kind, rows in (("confirmed", leaks), ("suspected", truth["suspected"])):
        for lk in rows:
            counts.setdefault(lk["tenant_id"], {"confirmed": 0, "suspected": 0})[kind] += 1
    assert counts == truth["affected_tenants"]


def test_traps(sample: tuple[Path, dict[str, Any]]) -> None:
    _, truth = sample
    traps = truth["traps"]
    leak_ids = {lk["request_id"] for lk in truth["leaks"]}
    not_leaks = [
        "good_node_long",
        "at_limit_minus_one",
        "over_context_400",
        "transfer_failure_500",
        "stream_error_200",
        "after_fix_long_ok",
        "before_misconfig_long",
    ]
    for key in not_leaks:
        assert traps[key], key
        assert not leak_ids & set(traps[key]), key
    assert set(traps["near_limit_leaks"]) <= leak_ids
    # 681274, 681275, 681279, 681280, 681281 under the first limit; 777786 at the second
    assert len(traps["near_limit_leaks"]) == 6
    assert traps["under_node_limit_exposed"] and not leak_ids & set(traps["under_node_limit_exposed"])
    assert [r["status"] for r in traps["redirect_3xx"]] == [308]
    assert not leak_ids & {r["request_id"] for r in traps["redirect_3xx"]}
    assert set(traps["streamed_leaks"]) <= leak_ids and traps["streamed_leaks"]
    streamed = {lk["request_id"] for lk in truth["leaks"] if lk["streamed"]}
    assert streamed == set(traps["streamed_leaks"])
    assert traps["health_checks"] > 0
    assert len(traps["duplicate_records"]) >= 4
    assert len(traps["malformed_lines"]) >= 2
    assert len(traps["non_utf8_lines"]) >= 3


@pytest.mark.parametrize(
    ("prompt_tokens", "leaked"),
    [(681273, False), (681274, True), (681275, True), (681279, True), (681280, True), (681281, True),
     (777785, False), (777786, True)],
)
def test_near_limit_table(small: tuple[Path, dict[str, Any]], prompt_tokens: int, leaked: bool) -> None:
    _, truth = small
    sizes = {lk["prompt_tokens"] for lk in truth["leaks"]}
    assert (prompt_tokens in sizes) == leaked


def test_anomaly_lines_point_at_real_lines(sample: tuple[Path, dict[str, Any]]) -> None:
    d, truth = sample
    traps = truth["traps"]
    for item in traps["non_utf8_lines"]:
        raw = _lines(d / item["file"])[item["line"] - 1]
        with pytest.raises(UnicodeDecodeError):
            raw.decode("utf-8")
    for item in traps["malformed_lines"]:
        raw = _lines(d / item["file"])[item["line"] - 1].decode()
        if item["file"].endswith(".csv"):
            assert len(next(csv.reader([raw]))) != 32
        else:
            with pytest.raises(json.JSONDecodeError):
                json.loads(raw)
    for item in traps["duplicate_records"]:
        raw = _lines(d / item["file"])[item["line"] - 1].decode("utf-8", "replace")
        assert item["request_id"] in raw


def test_counts_match_files(sample: tuple[Path, dict[str, Any]]) -> None:
    d, truth = sample
    files = truth["counts"]["files"]
    on_disk = {k for k in _files(d) if k not in ("truth.json", "README.md")}
    assert set(files) == on_disk
    for rel, c in files.items():
        path = d / rel
        lines = _lines(path)
        assert c["lines"] == len(lines), rel
        assert c["bytes"] == path.stat().st_size, rel
        if rel.startswith("gateway/cloudflare-http/"):
            good = 0
            for raw in lines:
                try:
                    json.loads(raw.decode("utf-8", "replace"))
                    good += 1
                except json.JSONDecodeError:
                    pass
            assert c["records"] == good and c["malformed"] == len(lines) - good, rel
        elif rel.endswith(".csv"):
            rows = list(csv.reader(io.StringIO(b"\n".join(lines).decode())))
            assert c["records"] == sum(1 for r in rows[1:] if len(r) == 32)
            assert c["malformed"] == sum(1 for r in rows[1:] if len(r) != 32)
    total = truth["counts"]["requests_total"]
    assert sum(truth["counts"]["requests_by_layer"].values()) == total
    assert sum(truth["counts"]["requests_by_status"].values()) == total
    gw_records = sum(c["records"] - c["duplicates"] for r, c in files.items() if r.startswith("gateway/"))
    # every client request has one record, plus the edge's redirects the client followed
    assert gw_records == total + truth["counts"]["gateway_redirect_records"]


def _parts(d: Path, node: str) -> list[Path]:
    """Rotation parts of one node, oldest first (sglang.log.2.gz, .1.gz, then current)."""

    def age(p: Path) -> int:
        bits = p.name.split(".")
        return int(bits[2]) if len(bits) > 2 and bits[2].isdigit() else 0

    return sorted((d / "engine" / node).iterdir(), key=age, reverse=True)


def test_engine_and_router_logs_are_time_ordered(sample: tuple[Path, dict[str, Any]]) -> None:
    d, truth = sample
    for node in truth["nodes"]:
        last = ""
        for part in _parts(d, node):
            for raw in _lines(part):
                if node == "router" and raw.startswith(b"20"):
                    ts = raw[:19].decode()
                elif raw.startswith(b"[20"):
                    ts = raw[1:20].decode()
                else:
                    continue
                assert ts >= last, (part, ts, last)
                last = ts


@pytest.mark.parametrize(
    ("rel", "needle", "present"),
    [
        # decode-0 emulates 0.5.8-0.5.11: request-log lines carry no timestamp prefix
        ("engine/decode-0/sglang.log", b"\nReceive: obj=GenerateReqInput(", True),
        ("engine/decode-1/sglang.log", b"\nReceive: obj=GenerateReqInput(", False),
        # prefill-1 switches to 0.5.23 shapes mid-file after the fix restart
        ("engine/prefill-1/sglang.log", b"] Prefill batch. #new-seq", True),
        ("engine/prefill-1/sglang.log", b"] Prefill batch, #new-seq", True),
        ("engine/prefill-1/sglang.log", b"] server_args={'model_path'", True),
        ("engine/prefill-1/sglang.log", b"KV Cache is allocated. dtype: ", True),
        ("engine/prefill-0/sglang.log", b"] Prefill batch, #new-seq", False),
        ("engine/prefill-0/sglang.log.1.gz", b"HEALTH_CHECK_", True),
        ("engine/prefill-0/sglang.log.1.gz", b"bootstrap_host='2.2.2.2', bootstrap_port=None, bootstrap_room=0,", True),
        ("engine/router/smg.log.1.gz", b"\n status=500 Internal Server Error", True),
    ],
)
def test_format_traps(
    regenerated: tuple[Path, dict[str, Any]], rel: str, needle: bytes, present: bool
) -> None:
    d, _ = regenerated
    text = b"\n" + b"\n".join(_lines(d / rel))
    assert (needle in text) == present


def test_rejects_tiny_scale(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="requests"):
        generate(tmp_path, requests=50)


def test_suspected_requests_have_gateway_evidence_only(sample: tuple[Path, dict[str, Any]]) -> None:
    """The gateway-only requests: a 2xx record over the fleet limit, and no engine line of theirs."""
    d, truth = sample
    gap = truth["engine_log_gap"]
    assert truth["suspected"], "the sample must contain gateway-only (suspected) requests"
    engine = b"\n".join(b"\n".join(_lines(p)) for node in gap["nodes"] for p in _parts(d, node))
    for sus in truth["suspected"]:
        assert gap["start_utc"] <= sus["ts_utc"] < gap["end_utc"]
        assert sus["prompt_tokens"] >= sus["admission_limit"] == truth["admission_limit"]
        header = _lines(d / sus["gateway_file"])[0].decode().split(",")
        raw = _lines(d / sus["gateway_file"])[sus["gateway_line"] - 1].decode()
        row = dict(zip(header, next(csv.reader([raw])), strict=True))
        assert (row["request_id"], row["status"], int(row["prompt_tokens"])) == (
            sus["request_id"], "success", sus["prompt_tokens"])
        assert sus["request_id"].encode() not in engine
    assert {s["leaked_in_fact"] for s in truth["suspected"]} == {True, False}


def test_engine_log_gap(sample: tuple[Path, dict[str, Any]]) -> None:
    """No engine line inside the gap; the router kept logging through it."""
    d, truth = sample
    gap = truth["engine_log_gap"]
    # engine lines are local time (UTC+8), router lines UTC
    a = str(int(gap["start_utc"][11:13]) + 8).zfill(2)
    local = gap["start_utc"][:11].replace("T", " ") + a
    for node in truth["nodes"]:
        text = b"\n".join(b"\n".join(_lines(p)) for p in _parts(d, node))
        if node in gap["nodes"]:
            assert f"[{local}:3".encode() not in text, node
        else:
            assert gap["start_utc"][:13].replace("T", " ").encode() + b":3" in text, node
