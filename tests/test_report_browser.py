"""The HTML impact report in a real browser (headless Chromium, network off): the charts drew, no
request left the page, nothing was logged, the numbers shown equal the query results, and it
prints on A4 and Letter. A screenshot of the first page is left in the test's tmp dir.

Chromium is Debian's ``chromium`` (``.ci/run`` installs it when missing); without it the test is
skipped on a developer machine and fails in CI (``CI`` set), so it can never pass unseen.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cdp_browser import chromium, find_chromium

import forensics
from forensics.case import Case
from forensics.outputs.report import report_data
from forensics.outputs.report_html import render_html
from forensics.outputs.scope import unknown_starts

CHROMIUM = find_chromium()

if CHROMIUM is None:
    if os.environ.get("CI"):
        raise RuntimeError("chromium is required in CI for the report browser test (.ci/run installs it)")
    pytestmark = pytest.mark.skip(reason="chromium not installed (apt-get install chromium)")

#: JavaScript run in the page after load: what a reader sees, as data.
PROBE = """
(() => {
  const q = (s, root = document) => Array.from(root.querySelectorAll(s));
  const chart = k => document.querySelector(`figure[data-chart="${k}"] svg`);
  const marks = (k, cls) => chart(k) ? q(`g.${cls}.role-mark > path, g.${cls}.role-mark > rect`, chart(k)).length : -1;
  return {
    charts: q("figure.chart svg").map(s => s.closest("figure").dataset.chart),
    chartSizes: q("figure.chart svg").map(s => { const r = s.getBoundingClientRect(); return [r.width, r.height]; }),
    timelinePoints: marks("timeline", "mark-symbol"),
    windowBars: marks("windows", "mark-rect"),
    tenantBars: marks("tenants", "mark-rect"),
    metrics: Object.fromEntries(q("[data-metric]").map(e => [e.dataset.metric, e.textContent])),
    rows: Object.fromEntries(q("[data-table]").map(e => [e.dataset.table, q("tbody tr", e).length])),
    verdicts: Object.fromEntries(q("tr[data-answer]").map(e => [e.dataset.answer, e.dataset.verdict || null])),
    scripts: q("script").map(s => s.type),
    title: document.title,
  };
})()
"""


@pytest.fixture(scope="module")
def report_file(sample_case: Case, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render_html(report_data(sample_case)), encoding="utf-8")
    return path


@pytest.mark.slow
def test_report_renders_offline_in_chromium(report_file: Path, sample_case: Case, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    url = report_file.resolve().as_uri()
    with chromium(CHROMIUM) as browser:
        browser.open(url)
        seen = browser.evaluate(PROBE)
        shot = browser.screenshot(tmp_path / "report_first_page.png")
        a4 = browser.pdf(tmp_path / "report_a4.pdf", width_in=8.27, height_in=11.69)
        letter = browser.pdf(tmp_path / "report_letter.pdf", width_in=8.5, height_in=11)
        requests, log = browser.requests(), browser.log_entries()

    # no request left the page: the only load is the file itself
    assert requests == [url], requests
    assert not [e for e in log if e.get("level") in ("error", "warning")], log

    # the charts drew: one mark per affected response, per node start, two bars per tenant
    affected = forensics.affected_requests(sample_case).df()
    audit = forensics.pool_audit(sample_case).df()
    tenants = forensics.affected_tenants(sample_case).df()
    assert seen["charts"] == ["timeline", "windows", "tenants"]
    assert all(w > 300 and h > 100 for w, h in seen["chartSizes"]), seen["chartSizes"]
    assert seen["timelinePoints"] == len(affected)
    assert seen["windowBars"] == len(audit)
    assert seen["tenantBars"] == 2 * len(tenants)

    # the numbers shown equal the query results
    sources = forensics.leak_sources(sample_case).df()
    cross = sources[~sources["same_tenant"].astype(bool)]
    expected = {
        "n_confirmed": int((affected["confidence"] == "confirmed").sum()),
        "n_suspected": int((affected["confidence"] == "suspected").sum()),
        "n_recipient_tenants": int(tenants["tenant_id"].notna().sum()),
        "n_source_tenants": int(cross["source_tenant_id"].dropna().nunique()),
        "n_source_requests": int(cross["source_request_id"].nunique()),
        "n_tenants_to_notify": len(forensics.notifications(sample_case).df()),
        "n_exposed_nodes": int(audit.loc[audit["verdict"] == "exposed", "node"].nunique()),
        "n_unknown_starts": len(unknown_starts(audit)),
        "n_evidence_gaps": int(forensics.evidence_gaps(sample_case).df()["partial"].sum()),
    }
    assert {k: int(v.replace(",", "")) for k, v in seen["metrics"].items()} == expected
    assert seen["rows"]["affected"] == len(affected)
    assert seen["rows"]["tenants"] == len(tenants)
    assert seen["rows"]["audit"] == len(audit)
    assert seen["rows"]["files"] == sample_case.sql("SELECT count(*) FROM evidence_files").fetchall()[0][0]
    assert seen["verdicts"]["exposed"] == "yes" and seen["verdicts"]["over"] == "yes"
    assert seen["verdicts"]["evidence"] == "yes"
    assert seen["rows"]["coverage_files"] == len(forensics.coverage(sample_case).df())
    assert seen["scripts"] == ["application/json"]  # data only: the page runs no script

    # a screenshot of the first page for a reviewer, and the page prints
    assert shot.stat().st_size > 20_000
    for pdf in (a4, letter):
        data = pdf.read_bytes()
        assert data.startswith(b"%PDF") and data.count(b"/Type /Page") >= 3
