"""affected_requests: synthetic situations (one table), the bundled sample against truth.json,
gateway-only and engine-only cases, the CSV contract and its golden file."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import CTX, LIMIT_BAD, GoldenCheck, Synth, fleet, t

import forensics
from forensics.errors import CaseError

CONTRACT = ["request_id", "header_request_id", "tenant_id", "ts", "prompt_tokens", "status",
            "prefill_node", "decode_node", "admission_limit", "confidence", "reasons", "evidence"]

# prefill-0 is exposed from t(0) until its fixing restart at t(200); prefill-1 is healthy.
CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("rejected on exposed node, 200", {"tokens": 700_000, "rejected": True}, "confirmed"),
    ("streamed leak", {"tokens": 700_000, "rejected": True, "streamed": True}, "confirmed"),
    ("exactly at the limit", {"tokens": LIMIT_BAD, "rejected": True}, "confirmed"),
    ("placeholder tokens, no rejection line", {"tokens": 800_000, "placeholder": True}, "confirmed"),
    ("limit minus one", {"tokens": LIMIT_BAD - 1}, None),
    ("good node, long prompt", {"tokens": 900_000, "prefill": "prefill-1"}, None),
    ("front-end 400 over context", {"tokens": CTX + 10, "status": 400}, None),
    ("transfer failure 500", {"tokens": 700_000, "rejected": True, "status": 500}, None),
    ("in-band error behind 200", {"tokens": 700_000, "rejected": True, "in_band_error": "Input length"}, None),
    ("after the fix", {"tokens": 700_000, "at": 250.0}, None),
    ("short prompt", {"tokens": 5_000}, None),
    ("no engine record, over limit (proxy tokens)",
     {"tokens": 700_000, "engine": False, "gateway_tokens": 700_000, "layer": "proxy"}, "suspected"),
    ("no engine record, under limit", {"tokens": 5_000, "engine": False, "gateway_tokens": 5_000}, None),
    ("no engine record, after the window",
     {"tokens": 700_000, "engine": False, "gateway_tokens": 700_000, "at": 250.0}, None),
    ("no engine record, no token count", {"tokens": 700_000, "engine": False}, None),
    ("no engine record, over limit, 400",
     {"tokens": 700_000, "engine": False, "gateway_tokens": 700_000, "status": 400}, None),
    ("decode only (prefill log missing), over limit", {"tokens": 700_000, "prefill_logged": False}, "suspected"),
    ("no x-request-id logged: time + tokens match",
     {"tokens": 700_000, "rejected": True, "header": False, "gateway_tokens": 700_000}, "confirmed"),
]


@pytest.mark.parametrize(("name", "kwargs", "expected"), CASES, ids=[c[0] for c in CASES])
def test_classification(synth: Synth, name: str, kwargs: dict[str, Any], expected: str | None) -> None:
    fleet(synth)
    kwargs = dict(kwargs)
    at = kwargs.pop("at", 10.0)
    synth.pd_request("x1", t(at), **kwargs)
    synth.pd_request("bystander", t(at, 120), tokens=3_000)  # an ordinary request nearby
    df = forensics.affected_requests(synth.case).df()
    if expected is None:
        assert df.empty, df.to_dict("records")
        return
    assert len(df) == 1
    row = df.iloc[0]
    assert row.confidence == expected
    assert row.request_id == "ray-x1"
    assert row.tenant_id == "t1"
    assert row.admission_limit == LIMIT_BAD
    if expected == "confirmed":
        assert row.prefill_node == "prefill-0" and row.decode_node == "decode-0"
        assert row.prompt_tokens == kwargs["tokens"]
        assert "exposed_period" in row.reasons
        assert "prefill=engine/prefill-0/sglang.log:" in row.evidence
    else:
        assert row.reasons.split(";")[0] in {"no_engine_record", "no_prefill_record"}


def test_columns_and_order(synth: Synth) -> None:
    fleet(synth)
    synth.pd_request("late", t(30), tokens=700_000, rejected=True)
    synth.pd_request("sus", t(5), tokens=700_000, engine=False, gateway_tokens=700_000)
    synth.pd_request("early", t(20), tokens=700_000, rejected=True)
    df = forensics.affected_requests(synth.case).df()
    # the CSV contract's columns first; the relation also names the decode leg (leak_sources reads it)
    # and whether the tenant rests on an ambiguous match
    assert list(df.columns) == [*CONTRACT, "decode_rid", "decode_start_ts", "decode_received_file_id",
                                "decode_received_line_no", *EVIDENCE_REFS, "ambiguous_match"]
    # confirmed first (by time), then suspected: never interleaved
    assert list(df.request_id) == ["ray-early", "ray-late", "ray-sus"]
    assert list(df.confidence) == ["confirmed", "confirmed", "suspected"]


EVIDENCE_REFS = [f"{leg}_{part}" for leg in ("gateway", "rejection", "prefill_received", "prefill_finished",
                                              "decode_finished") for part in ("file_id", "line_no")]


def test_evidence_ref_columns_name_the_same_lines_as_evidence(synth: Synth) -> None:
    """The (file_id, line_no) columns are the lines the evidence string cites (timeline joins them)."""
    fleet(synth)
    synth.pd_request("x1", t(10), tokens=700_000, rejected=True)
    row = forensics.affected_requests(synth.case).df().iloc[0]
    paths = dict(synth.case.sql("SELECT file_id, rel FROM evidence_paths").fetchall())
    ref = {k: f"{paths[int(row[f'{k}_file_id'])]}:{int(row[f'{k}_line_no'])}"
           for k in ("gateway", "rejection", "prefill_received", "prefill_finished", "decode_received",
                     "decode_finished")}
    assert row["evidence"] == (
        f"gateway={ref['gateway']}; rejection={ref['rejection']}; "
        f"prefill={ref['prefill_received']},{ref['prefill_finished']}; "
        f"decode={ref['decode_received']},{ref['decode_finished']}"
    )


def test_rejection_line_evidence(synth: Synth) -> None:
    fleet(synth)
    synth.pd_request("x1", t(10), tokens=700_000, rejected=True)
    ev = forensics.affected_requests(synth.case).df().evidence[0]
    parts = dict(p.split("=", 1) for p in ev.split("; "))
    assert set(parts) == {"gateway", "rejection", "prefill", "decode"}
    assert parts["gateway"] == "gateway/edge.ndjson:1"
    assert parts["rejection"].startswith("engine/prefill-0/sglang.log:")
    assert len(parts["decode"].split(",")) == 2  # received and finished lines


def test_health_checks_are_never_requests(synth: Synth) -> None:
    fleet(synth)
    hc = {"bootstrap_host": "2.2.2.2", "bootstrap_room": 0, "is_health_check": True}
    synth.req("prefill-0", "received", "HEALTH_CHECK_1", t(10), **hc)
    synth.req("prefill-0", "finished", "HEALTH_CHECK_1", t(10), prompt_tokens=1, **hc)
    synth.req("decode-0", "finished", "HEALTH_CHECK_1", t(10), prompt_tokens=700_000, **hc)
    assert forensics.affected_requests(synth.case).df().empty


def test_duplicates_and_outer_layer(synth: Synth) -> None:
    fleet(synth)
    synth.pd_request("x1", t(10), tokens=700_000, rejected=True)
    # a delivery-retry copy of the edge record, and the same request logged by an inner router layer
    synth.gw("ray-x1", t(10), header_request_id="x1", is_duplicate=True)
    synth.gw("x1", t(10, 0.2), layer="router")
    df = forensics.affected_requests(synth.case).df()
    assert list(df.request_id) == ["ray-x1"]


def test_engine_only_request_has_no_gateway_id(synth: Synth) -> None:
    fleet(synth)
    synth.pd_request("x1", t(10), tokens=700_000, rejected=True, status=None)
    df = forensics.affected_requests(synth.case).df()
    assert len(df) == 1
    row = df.iloc[0]
    assert row.confidence == "confirmed" and row.request_id is None and row.header_request_id == "x1"
    assert "no_gateway_record_decode_ok" in row.reasons


def test_limit_override_and_filters(synth: Synth) -> None:
    fleet(synth)
    synth.pd_request("sus", t(10), tokens=600_000, engine=False, gateway_tokens=600_000)
    synth.pd_request("conf", t(20), tokens=700_000, rejected=True, decode="decode-1")
    assert list(forensics.affected_requests(synth.case).df().request_id) == ["ray-conf"]
    df = forensics.affected_requests(synth.case, limit_tokens=500_000).df()
    assert list(df.request_id) == ["ray-conf", "ray-sus"]
    assert set(df.admission_limit) == {500_000}
    assert list(forensics.affected_requests(synth.case, node="decode-1").df().request_id) == ["ray-conf"]
    assert forensics.affected_requests(synth.case, start=t(15), end=t(16)).df().empty


def test_gateway_only_case_needs_parameters(synth: Synth) -> None:
    synth.pd_request("x1", t(10), tokens=700_000, engine=False, gateway_tokens=700_000)
    with pytest.raises(CaseError, match="--limit-tokens --start --end"):
        forensics.affected_requests(synth.case)
    df = forensics.affected_requests(synth.case, limit_tokens=LIMIT_BAD, start=t(0), end=t(100)).df()
    assert list(df.confidence) == ["suspected"]
    assert "in_given_window" in df.reasons[0]


# -- the bundled sample ---------------------------------------------------------------------------


def _truth_ids(truth: dict[str, Any], kind: str = "leaks") -> set[str]:
    return {leak["request_id"] for leak in truth[kind]}


@pytest.mark.parametrize(("confidence", "truth_key"), [("confirmed", "leaks"), ("suspected", "suspected")])
def test_sample_precision_recall(sample_case: forensics.Case, sample_truth: dict[str, Any],
                                 confidence: str, truth_key: str) -> None:
    df = forensics.affected_requests(sample_case).df()
    assert df.request_id.is_unique  # one row per request
    got = set(df[df.confidence == confidence].request_id)
    expected = _truth_ids(sample_truth, truth_key)
    assert expected, truth_key
    assert got == expected, (got - expected, expected - got)
    assert set(df.confidence) == {"confirmed", "suspected"}


def test_sample_rows_match_truth(sample_case: forensics.Case, sample_truth: dict[str, Any]) -> None:
    df = forensics.affected_requests(sample_case).df().set_index("request_id")
    for leak in sample_truth["leaks"]:
        row = df.loc[leak["request_id"]]
        assert row.tenant_id == leak["tenant_id"]
        assert row.header_request_id == (leak["header_request_id"] or None) or (
            leak["header_request_id"] is None and row.header_request_id != row.header_request_id)
        assert row.prompt_tokens == leak["prompt_tokens"]
        assert (row.prefill_node, row.decode_node) == (leak["prefill_node"], leak["decode_node"])
        assert row.status == leak["status"]
        # the limit of the exposed start the request ran under (the sample has two)
        assert row.admission_limit == leak["admission_limit"]
        assert f"rejection={leak['rejection_file']}:{leak['rejection_line']}" in row.evidence
        # every source, CSV included, is referenced by the physical line a responder opens
        assert f"gateway={leak['gateway_file']}:{leak['gateway_line']}" in row.evidence
    assert {leak["admission_limit"] for leak in sample_truth["leaks"]} == set(sample_truth["admission_limits"])


def test_sample_suspected_rows_match_truth(sample_case: forensics.Case, sample_truth: dict[str, Any]) -> None:
    """Gateway-only requests (their engine lines were lost) are suspected, with the fleet limit."""
    df = forensics.affected_requests(sample_case).df().set_index("request_id")
    for sus in sample_truth["suspected"]:
        row = df.loc[sus["request_id"]]
        assert (row.confidence, row.tenant_id, row.prompt_tokens, row.status) == (
            "suspected", sus["tenant_id"], sus["prompt_tokens"], sus["status"])
        assert row.admission_limit == sus["admission_limit"] == sample_truth["admission_limit"]
        assert pd.isna(row.prefill_node) and pd.isna(row.decode_node)
        assert row.reasons.startswith("no_engine_record;over_limit_gateway_tokens;in_fleet_window")
        # the gateway line first, and no empty engine parts ('prefill=', 'decode=') after it
        assert row.evidence.split("; ")[0] == f"gateway={sus['gateway_file']}:{sus['gateway_line']}"
        assert not any(p.endswith("=") for p in row.evidence.split("; "))
        assert "rejection=" not in row.evidence
    # one of them is exactly at the limit: >= is the rule
    assert sample_truth["admission_limit"] in {s["prompt_tokens"] for s in sample_truth["suspected"]}


def _trap_ids(items: list[Any]) -> set[str]:
    return {i if isinstance(i, str) else i["request_id"] for i in items if isinstance(i, str) or "request_id" in i}


def test_sample_no_trap_flagged(sample_case: forensics.Case, sample_truth: dict[str, Any]) -> None:
    df = forensics.affected_requests(sample_case).df()
    got = set(df.request_id)
    flagged = _truth_ids(sample_truth) | _truth_ids(sample_truth, "suspected")
    evidence = " ".join(df.evidence)
    checked = 0
    for name, items in sample_truth["traps"].items():
        if name == "health_checks":
            continue
        assert isinstance(items, list), name
        # some traps are leaks on purpose (streamed, near the limit, duplicated records)
        assert not (_trap_ids(items) - flagged) & got, name
        for item in items:
            if isinstance(item, dict) and "file" in item and "line" in item and "request_id" not in item:
                # a malformed or undecodable line is never the evidence of an affected request
                assert f"{item['file']}:{item['line']};" not in evidence + ";", (name, item)
        checked += 1
    assert checked == len(sample_truth["traps"]) - 1


def test_sample_health_checks_never_affected(sample_case: forensics.Case, sample_truth: dict[str, Any]) -> None:
    """Every logged health check is loaded as one, and none is ever an affected request."""
    n = sample_case.con.sql(
        "SELECT count(DISTINCT node || rid) FROM engine_requests WHERE is_health_check AND kind = 'received'"
    ).fetchall()[0][0]
    assert n == sample_truth["traps"]["health_checks"] > 0
    df = forensics.affected_requests(sample_case).df()
    assert not df.decode_rid.dropna().str.startswith("HEALTH_CHECK_").any()


@pytest.fixture(scope="session")
def sample_partial_case(sample_case_path: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Copies of the ingested sample with only the gateway, or only the engine, rows kept."""
    out = {}
    for keep in ("gateway", "engine"):
        path = tmp_path_factory.mktemp(f"only-{keep}") / "case.duckdb"
        path.write_bytes(sample_case_path.read_bytes())
        with forensics.open_case(path) as case:
            drop = ["gateway_requests"] if keep == "engine" else [
                "engine_starts", "engine_batches", "engine_requests", "engine_rejections",
                "engine_events", "engine_http", "router_requests", "engine_other_lines"]
            for table in drop:
                case.con.execute(f"DELETE FROM {table}")
            case.con.execute("DELETE FROM evidence_files WHERE kind <> $k", {"k": keep})
        out[keep] = path
    return out


def test_sample_gateway_only(sample_partial_case: dict[str, Path], sample_truth: dict[str, Any]) -> None:
    path = sample_partial_case["gateway"]
    with pytest.raises(CaseError):
        forensics.affected_requests(path)
    win = sample_truth["fleet_window"]
    start = dt.datetime.fromisoformat(win["start_utc"].replace("Z", ""))
    end = dt.datetime.fromisoformat(win["end_utc"].replace("Z", ""))
    df = forensics.affected_requests(path, limit_tokens=sample_truth["admission_limit"],
                                     start=start, end=end).df()
    assert set(df.confidence) == {"suspected"}
    assert all(r.startswith("no_engine_record;over_limit_gateway_tokens") for r in df.reasons)
    # only the proxy layer logs token counts: its leaks are all among the suspects
    proxy_leaks = {x["request_id"] for x in sample_truth["leaks"] if x["layer"] == "proxy"}
    assert proxy_leaks <= set(df.request_id)
    assert (df.prompt_tokens >= sample_truth["admission_limit"]).all()


def test_sample_engine_only(sample_partial_case: dict[str, Path], sample_truth: dict[str, Any]) -> None:
    path = sample_partial_case["engine"]
    audit = forensics.pool_audit(path).df()
    assert set(audit[audit.verdict == "exposed"].node) == {w["node"] for w in sample_truth["exposure_windows"]}
    df = forensics.affected_requests(path).df()
    assert set(df.confidence) == {"confirmed"}
    assert df.request_id.isna().all()
    rooms = {leak["decode_rid"] for leak in sample_truth["leaks"]}
    assert len(df) == len(rooms)
    evidence = " ".join(df.evidence)
    for leak in sample_truth["leaks"]:
        # only engine files were ingested: names are relative to their common directory
        rel = leak["rejection_file"].removeprefix("engine/")
        assert f"rejection={rel}:{leak['rejection_line']}" in evidence


# -- CLI and golden file ----------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True,
                          check=False)


@pytest.mark.golden
def test_cli_csv_golden(sample_case_path: Path, tmp_path: Path, golden: GoldenCheck,
                        sample_truth: dict[str, Any]) -> None:
    out = tmp_path / "affected.csv"
    res = _cli("affected", str(sample_case_path), "--format", "csv", "-o", str(out))
    assert res.returncode == 0, res.stderr
    text = out.read_text(encoding="utf-8")
    assert text.splitlines()[0] == ",".join(CONTRACT)
    assert len(text.splitlines()) == 1 + len(sample_truth["leaks"]) + len(sample_truth["suspected"])
    golden("affected.csv", text)
    params = json.loads((tmp_path / "affected.csv.params.json").read_text(encoding="utf-8"))
    windows = sorted((w["node"], w["admission_limit"]) for w in sample_truth["exposure_windows"])
    assert sorted((w["node"], w["admission_limit"]) for w in params["derived"]["exposure_windows"]) == windows
    assert params["effective"]["admission_limit"] == sample_truth["admission_limit"]


def test_cli_gateway_only_error(sample_partial_case: dict[str, Path]) -> None:
    res = _cli("affected", str(sample_partial_case["gateway"]))
    assert res.returncode == 2
    assert "pass --limit-tokens --start --end" in res.stderr
    assert "Traceback" not in res.stderr
