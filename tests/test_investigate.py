"""The scripted pipeline end to end through the real entry point (what `make demo` runs)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

EXPECTED_OUTPUTS = [
    "affected_requests.csv", "affected_tenants.csv", "exposure_windows.csv", "hidden_errors.csv",
    "impact_report.md", "ingest_summary.csv", "leak_sources.csv", "notifications.csv",
    "parameters.json", "pool_audit.csv", "post_fix_check.csv", "token_mismatch.csv",
    "affected_tenants_chart.html", "affected_timeline_chart.html", "exposure_windows_chart.html",
]


@pytest.fixture(scope="module")
def investigated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    res = subprocess.run(
        [sys.executable, "-m", "forensics", "investigate", str(out / "case.duckdb"),
         "--gateway", str(ROOT / "sample_data" / "gateway"), "--engine", str(ROOT / "sample_data" / "engine"),
         "--engine-tz", "Asia/Singapore", "--out", str(out), "--replace", "--quiet"],
        capture_output=True, text=True,
    )
    assert res.returncode == 0, res.stderr
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPECTED_OUTPUTS)
def test_investigate_writes(investigated: Path, name: str) -> None:
    assert (investigated / name).stat().st_size > 0


@pytest.mark.slow
def test_investigate_affected_equals_truth(investigated: Path, sample_truth: dict[str, Any]) -> None:
    with open(investigated / "affected_requests.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["request_id"] for r in rows} == {leak["request_id"] for leak in sample_truth["leaks"]}


@pytest.mark.slow
def test_investigate_report_equals_golden(investigated: Path) -> None:
    golden = Path(__file__).parent / "golden" / "impact_report.md"
    text = (investigated / "impact_report.md").read_text(encoding="utf-8")
    # the case file name differs between the two runs; everything else is identical
    assert text.replace("`case.duckdb`", "`CASE`") == golden.read_text(encoding="utf-8").replace(
        "`case.duckdb`", "`CASE`"
    )
