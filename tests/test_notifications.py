"""Customer notification lists: golden CSV on the sample, recipients and sources equal the truth."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import GoldenCheck

from forensics.case import Case
from forensics.outputs.export import write_output
from forensics.outputs.notifications import notifications

GOLDEN = Path(__file__).parent / "golden" / "notifications.csv"


@pytest.mark.golden
def test_notifications_csv_matches_golden(sample_case: Case, tmp_path: Path, golden: GoldenCheck) -> None:
    out = tmp_path / "n.csv"
    write_output(notifications(sample_case), "csv", out)
    golden("notifications.csv", out.read_text(encoding="utf-8"))


def test_recipients_are_exactly_the_truths_affected_tenants(sample_case: Case, sample_truth: dict[str, Any]) -> None:
    df = notifications(sample_case)
    recipients = df[df["notify_as"].str.contains("recipient")]
    got = {r.tenant_id: (r.n_responses_received, r.n_confirmed, r.n_suspected) for r in recipients.itertuples()}
    expected = {t: (c["confirmed"] + c["suspected"], c["confirmed"], c["suspected"])
                for t, c in sample_truth["affected_tenants"].items()}
    assert got == expected
    # a suspected-only recipient is notified as one
    assert any(c["confirmed"] == 0 for c in sample_truth["affected_tenants"].values())


def test_sources_are_exactly_the_truths_cross_tenant_sources(sample_case: Case, sample_truth: dict[str, Any]) -> None:
    expected: dict[str, set[str]] = {}
    for leak in sample_truth["leaks"]:
        for s in leak["possible_sources"]:
            if not s["same_tenant"]:
                expected.setdefault(s["tenant_id"], set()).add(s["request_id"])
    df = notifications(sample_case)
    sources = df[df["notify_as"].str.contains("source")]
    got = {t: set(ids.split()) for t, ids in zip(sources["tenant_id"], sources["exposed_request_ids"], strict=True)}
    assert got == expected


def test_notifications_cli(sample_case_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "n.csv"
    res = subprocess.run(
        [sys.executable, "-m", "forensics", "notifications", str(sample_case_path), "--format", "csv", "-o", str(out)],
        capture_output=True, text=True,
    )
    assert res.returncode == 0, res.stderr
    assert GOLDEN.is_file(), "tests/golden/notifications.csv is missing: run make golden"
    assert out.read_text(encoding="utf-8") == GOLDEN.read_text(encoding="utf-8")
