"""The impact report: golden on the sample, the disclosure numbers equal the truth, no prompt text."""

from __future__ import annotations

import re
from typing import Any

import pytest
from casebuilder import LIMIT, POOL_GOOD, Fleet, Gateway, LastLine, Request, Start, build, limit_of
from conftest import GoldenCheck

from forensics.case import Case
from forensics.outputs.report import impact_report, report_data


def _suspected_only() -> Any:
    return build(Fleet(), Gateway("g", 10, 700_000, layer="proxy", tenant="S"))


def test_report_headline_with_suspected_only() -> None:
    rows = _summary(impact_report(_suspected_only()))
    assert rows["Affected responses"].startswith("**0 confirmed**, 1 suspected (no engine evidence)")
    assert rows["Tenants that received others' data"] == "**1**"


def test_report_headline_counts_confirmed_and_suspected_apart() -> None:
    case = build(Fleet(), Request("x", 10, 700_000, rejected=True), Gateway("g", 11, 700_000, layer="proxy"),
                 Gateway("h", 12, 800_000, layer="proxy"))
    rows = _summary(impact_report(case))
    assert rows["Affected responses"].startswith("**1 confirmed**, 2 suspected (no engine evidence)")


def test_report_counts_exposed_nodes_not_starts() -> None:
    case = build(Start("p", 0), Start("p", 10, pool=900_000), Start("p", 20, pool=POOL_GOOD), LastLine("p", 30))
    rows = _summary(impact_report(case))
    assert rows["Exposed?"].startswith("**yes**: 1 node(s)")
    assert rows["Threshold"].startswith(f"prompts of **{LIMIT:,}, {limit_of(900_000):,} tokens or more**")


@pytest.mark.parametrize(("fixed_at", "still_open"), [(None, True), (200.0, False)])
def test_report_says_when_the_window_is_still_open(fixed_at: float | None, still_open: bool) -> None:
    rows = _summary(impact_report(build(Fleet(fixed_at=fixed_at))))
    assert ("still open at the end of the logs" in rows["Exposure window"]) is still_open


def test_report_is_not_over_while_a_long_prompt_gets_a_200_after_the_fix() -> None:
    case = build(Fleet(), Request("x", 250, 700_000, rejected=True))  # placeholder again after the "fix"
    rows = _summary(impact_report(case))
    assert rows["Is it over?"].startswith("**no**")


@pytest.mark.parametrize(("requests", "n_failing"), [((), 0), ((Request("x", 250, 700_000, rejected=True),), 1)])
def test_report_numbers_count_the_failing_post_fix_checks(requests: tuple[Request, ...], n_failing: int) -> None:
    """The JSON summary's ``n_failing_checks`` is the number of post-fix checks that fail."""
    data = report_data(build(Fleet(), *requests))
    results = data.section("postfix").frame["result"].tolist()
    assert results.count("fail") == data.numbers["n_failing_checks"] == n_failing
    assert data.numbers["over"] == ("no" if n_failing else "yes")


def test_report_sources_are_other_tenants_only() -> None:
    """A source of the recipient's own tenant is not another tenant's exposed data."""
    same = build(Fleet(), Request("s", 10, 3_000, sec=-60, tenant="A"), Request("x", 10, 700_000, rejected=True,
                                                                                tenant="A"))
    assert _summary(impact_report(same))["Tenants whose data may have been exposed"].startswith("0 (0 source requests")
    other = build(Fleet(), Request("s", 10, 3_000, sec=-60, tenant="B"), Request("x", 10, 700_000, rejected=True,
                                                                                 tenant="A"))
    assert _summary(impact_report(other))["Tenants whose data may have been exposed"].startswith("1 (1 source requests")


def _limit(case: Case) -> str:
    return str(case.sql("SELECT current_setting('memory_limit')").fetchall()[0][0])


@pytest.mark.parametrize(
    ("query_limit", "during", "fails"),
    [
        ("2GiB", "610.3 MiB", False),  # lowered: cached table blocks do not pile up from query to query
        ("2GiB", "610.3 MiB", True),  # and back after an error
        ("256MiB", "256.0 MiB", False),  # a lower limit of the case stays
    ],
)
def test_report_queries_run_under_the_report_budget_and_the_case_limit_comes_back(
    monkeypatch: pytest.MonkeyPatch, query_limit: str, during: str, fails: bool
) -> None:
    """A 1 M-request report peaked at 1.1-1.2 GiB under the 2 GB query limit (benchmarks/RESULTS.md)."""
    from forensics import analysis
    from forensics.errors import CaseError

    case = build(Fleet(), Request("x", 10, 700_000, rejected=True))
    case.query_memory_limit = query_limit
    case.con.execute(f"SET memory_limit = '{query_limit}'")
    after = _limit(case)
    seen: list[str] = []
    real = analysis.affected_requests

    def spy(c: Case, **kw: Any) -> Any:
        seen.append(_limit(c))
        if fails:
            raise CaseError("the case lacks what the report needs")
        return real(c, **kw)

    monkeypatch.setattr(analysis, "affected_requests", spy)
    if fails:
        with pytest.raises(CaseError):
            report_data(case)
    else:
        assert report_data(case).numbers["n_confirmed"] == 1
    assert seen and set(seen) == {during}
    assert _limit(case) == after


@pytest.mark.golden
def test_impact_report_matches_golden(sample_case: Case, golden: GoldenCheck) -> None:
    golden("impact_report.md", impact_report(sample_case))


def _summary(text: str) -> dict[str, str]:
    """The Summary table of a report: question (without the command) -> answer."""
    rows = {}
    part = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("question", "---"):
            rows[re.sub(r" \(`.*`\)", "", cells[0])] = cells[1]
    return rows


def test_impact_report_states_the_truths_numbers(sample_case: Case, sample_truth: dict[str, Any]) -> None:
    rows = _summary(impact_report(sample_case))
    n_conf, n_susp = len(sample_truth["leaks"]), len(sample_truth["suspected"])
    assert rows["Affected responses"].startswith(f"**{n_conf} confirmed**, {n_susp} suspected (no engine evidence)")
    assert rows["Tenants that received others' data"] == f"**{len(sample_truth['affected_tenants'])}**"
    limits = ", ".join(f"{v:,}" for v in sample_truth["admission_limits"])
    assert rows["Threshold"].startswith(f"prompts of **{limits} tokens or more**")
    nodes = {w["node"] for w in sample_truth["exposure_windows"]}
    assert rows["Exposed?"].startswith(f"**yes**: {len(nodes)} node(s)")
    win = sample_truth["fleet_window"]
    assert rows["Exposure window"] == (
        f"{win['start_utc'][:19].replace('T', ' ')} UTC to {win['end_utc'][:19].replace('T', ' ')} UTC")
    sources = {s["tenant_id"] for leak in sample_truth["leaks"] for s in leak["possible_sources"]
               if not s["same_tenant"]}
    assert rows["Tenants whose data may have been exposed"].startswith(f"{len(sources)} (")
    assert rows["Abuse evident?"].startswith("no" if not sample_truth["abuse_evident"] else "possible")


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


@pytest.mark.parametrize("threshold, flags_someone", [(1, True), (10_000, False)])
def test_abuse_heuristic_threshold(sample_case: Case, threshold: int, flags_someone: bool) -> None:
    """The report's heuristic is forensics.probing_tenants (tests/test_probing_tenants.py)."""
    from forensics.outputs.report import report_data

    data = report_data(sample_case, probe_threshold=threshold)
    assert (data.numbers["n_probing_tenants"] > 0) is flags_someone


def _without_svg(page: str) -> str:
    return re.sub(r"<svg\b.*?</svg>", "<svg/>", page, flags=re.S)


@pytest.mark.golden
def test_json_summary_matches_golden(sample_case: Case, golden: GoldenCheck) -> None:
    from forensics.outputs.report import render_json, report_data

    golden("impact_report.json", render_json(report_data(sample_case)))


@pytest.mark.golden
def test_html_report_matches_golden(sample_case: Case, golden: GoldenCheck) -> None:
    from forensics.outputs.report import report_data
    from forensics.outputs.report_html import render_html

    # the charts' SVG is checked in the browser test; the rest of the page is golden
    golden("impact_report.html", _without_svg(render_html(report_data(sample_case))))


def test_html_report_is_deterministic_and_self_contained(sample_case: Case) -> None:
    from forensics.outputs.report import report_data
    from forensics.outputs.report_html import render_html

    first, second = render_html(report_data(sample_case)), render_html(report_data(sample_case))
    assert first == second  # charts included: no clock, no random ids
    assert first.count("<svg") == 3
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", first)
    assert "@page" in first and "@media print" in first
