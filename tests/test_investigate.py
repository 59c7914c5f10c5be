"""The scripted pipeline end to end through the real entry point (what `make demo` runs)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

EXPECTED_OUTPUTS = [
    "affected_requests.csv", "affected_tenants.csv", "exposure_windows.csv", "hidden_errors.csv",
    "impact_report.md", "ingest_summary.csv", "leak_sources.csv", "notifications.csv",
    "parameters.json", "pool_audit.csv", "post_fix_check.csv", "token_mismatch.csv",
    "affected_tenants_chart.html", "affected_timeline_chart.html", "exposure_windows_chart.html",
    "impact_report.html", "impact_report.json", "evidence_gaps.csv", "probing_tenants.csv",
]


@pytest.fixture(scope="module")
def investigated(sample_investigation: Path) -> Path:
    return sample_investigation


def _truth_rows(truth: dict[str, Any], key: str) -> int:
    """How many data rows an output must have on the sample, from truth.json alone."""
    if key == "affected":
        return len(truth["leaks"]) + len(truth["suspected"])
    if key == "tenants":
        return len(truth["affected_tenants"])
    if key == "windows":  # one per node window and the fleet row
        return len(truth["exposure_windows"]) + 1
    if key == "starts":
        return sum(len(n["starts"]) for n in truth["nodes"].values())
    if key == "sources":  # suspected responses have no known decode node: no sources
        return sum(len(leak["possible_sources"]) for leak in truth["leaks"])
    if key == "notify":  # recipients and cross-tenant sources
        return len(set(truth["affected_tenants"]) | {
            s["tenant_id"] for leak in truth["leaks"] for s in leak["possible_sources"] if not s["same_tenant"]})
    if key == "files":
        return len(truth["counts"]["files"])
    raise KeyError(key)


# each CSV: its key column and the number of rows truth.json implies (None: at least one row)
CSV_ROWS = [
    ("affected_requests.csv", "request_id", "affected"),
    ("affected_tenants.csv", "tenant_id", "tenants"),
    ("exposure_windows.csv", "scope", "windows"),
    ("pool_audit.csv", "node", "starts"),
    ("leak_sources.csv", "source_request_id", "sources"),
    ("notifications.csv", "tenant_id", "notify"),
    ("hidden_errors.csv", "request_id", None),
    ("token_mismatch.csv", "mismatch", None),
    ("post_fix_check.csv", "check", None),
    ("evidence_gaps.csv", "problem", None),  # the sample: rejected lines, a file with a warning
    ("ingest_summary.csv", "file", "files"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "column", "rows"), CSV_ROWS, ids=[c[0] for c in CSV_ROWS])
def test_investigate_csv_has_its_rows(investigated: Path, sample_truth: dict[str, Any], name: str,
                                      column: str, rows: str | None) -> None:
    """Not just a file: a header with the key column and the rows the sample's truth implies."""
    with open(investigated / name, newline="", encoding="utf-8") as fh:
        data = list(csv.DictReader(fh))
    assert data, f"{name} has no data rows"
    assert all(r[column] not in ("", None) for r in data), column
    if rows is not None:
        assert len(data) == _truth_rows(sample_truth, rows), name


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in EXPECTED_OUTPUTS if not n.endswith(".csv")])
def test_investigate_writes(investigated: Path, name: str) -> None:
    text = (investigated / name).read_text(encoding="utf-8")
    if name == "impact_report.html":  # charts rendered offline to inline SVG, no script
        assert "<html" in text.lower() and text.count("<svg") == 3 and "<script>" not in text, name
    elif name.endswith(".html"):  # the Vega JavaScript inline, never from a CDN
        assert "<html" in text.lower() and "vega" in text.lower() and "cdn.jsdelivr" not in text, name
    elif name.endswith(".json"):
        assert json.loads(text), name
    else:
        assert text.startswith("# "), name


@pytest.mark.slow
def test_investigate_affected_equals_truth(investigated: Path, sample_truth: dict[str, Any]) -> None:
    with open(investigated / "affected_requests.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    got = {(r["request_id"], r["confidence"]) for r in rows}
    assert got == {(leak["request_id"], "confirmed") for leak in sample_truth["leaks"]} | {
        (s["request_id"], "suspected") for s in sample_truth["suspected"]}


@pytest.mark.slow
def test_investigate_report_equals_golden(investigated: Path) -> None:
    golden = Path(__file__).parent / "golden" / "impact_report.md"
    assert golden.is_file(), "tests/golden/impact_report.md is missing: run make golden"
    text = (investigated / "impact_report.md").read_text(encoding="utf-8")
    # the case file name differs between the two runs; everything else is identical
    assert text.replace("`case.duckdb`", "`CASE`") == golden.read_text(encoding="utf-8").replace(
        "`case.duckdb`", "`CASE`"
    )


@pytest.mark.slow
def test_investigate_writes_a_packet_per_tenant_to_notify(investigated: Path) -> None:
    with open(investigated / "notifications.csv", newline="") as fh:
        n = len(list(csv.DictReader(fh)))
    folders = sorted((investigated / "notification_packets").iterdir())
    assert len(folders) == n
    assert all((f / "summary.md").is_file() and (f / "requests.csv").is_file() for f in folders)
