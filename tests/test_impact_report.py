"""The impact report: golden on the sample, the disclosure numbers equal the truth, no prompt text."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from forensics.case import Case
from forensics.outputs.report import impact_report, probing_tenants

GOLDEN = Path(__file__).parent / "golden" / "impact_report.md"


def test_impact_report_matches_golden(sample_case: Case) -> None:
    text = impact_report(sample_case)
    if os.environ.get("FORENSICS_UPDATE_GOLDEN"):
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8"), "set FORENSICS_UPDATE_GOLDEN=1 to accept a change"


def test_impact_report_states_the_truths_numbers(sample_case: Case, sample_truth: dict[str, Any]) -> None:
    text = impact_report(sample_case)
    assert f"**{len(sample_truth['leaks'])} confirmed**" in text
    assert f"**{len(sample_truth['affected_tenants'])}**" in text
    assert f"{sample_truth['admission_limit']:,} tokens or more" in text


@pytest.mark.parametrize(
    "now, expected",
    [(None, "Produced by forensics"), ("2026-10-01T12:00:00", "on 2026-10-01 12:00 UTC")],
)
def test_impact_report_has_no_wall_clock_unless_injected(sample_case: Case, now: str | None, expected: str) -> None:
    import datetime as dt

    text = impact_report(sample_case, now=dt.datetime.fromisoformat(now) if now else None)
    assert expected in text
    if now is None:
        assert not re.search(r"\bon \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", text)


def test_impact_report_never_quotes_prompt_text(sample_case: Case) -> None:
    text = impact_report(sample_case)
    for marker in ("[gMASK]", "<|user|>", "labore", "eiusmod"):
        assert marker not in text


def test_abuse_heuristic_is_quiet_on_the_sample(sample_case: Case, sample_truth: dict[str, Any]) -> None:
    assert probing_tenants(sample_case).empty is (not sample_truth["abuse_evident"])


@pytest.mark.parametrize("threshold, flags_someone", [(1, True), (10_000, False)])
def test_abuse_heuristic_threshold(sample_case: Case, threshold: int, flags_someone: bool) -> None:
    assert (not probing_tenants(sample_case, threshold).empty) is flags_someone
