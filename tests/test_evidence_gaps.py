"""Evidence gaps (queries/evidence_gaps.sql, forensics.evidence_gaps, forensics gaps): an answer
that rests on partial evidence says so in the report's summary and never reads as a clean "no".

Synthetic cases: a healthy fleet (the clean answer is "not exposed", "it is over") whose evidence
record is then marked as each ledger state leaves it; and a truncated gzip read by the loader.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Synth, fleet, t

import forensics
from forensics.outputs.report import render_html, render_markdown, report_data
from forensics.outputs.scope import coverage_note

FIX = Path(__file__).parent / "fixtures" / "gateway"

#: label, UPDATE of evidence file 1, problem expected, partial?
GAP_CASES = [
    ("an unfinished ingest", "status = 'loading'", "unfinished", True),
    ("a truncated compressed file", "complete = false, warning = 'gzip stream is truncated (member 1 has no "
     "end); the readable prefix was kept'", "incomplete", True),
    ("trailing bytes after the last member", "complete = false, warning = '37 trailing bytes after the last "
     "complete gzip member were not read'", "incomplete", True),
    ("rejected lines", "rows_rejected = 3", "rejected_lines", False),
    ("a file that grew", "prior_file_id = 9, first_line = 41", "grown", False),
    ("a warning on a file read whole", "warning = 'it grew from 4 to 8 bytes while it was read'", "warning", False),
]


def _healthy(s: Synth, *, exposed: bool = False) -> Synth:
    fleet(s, bad=("prefill-0",) if exposed else ())
    s.pd_request("x1", t(10), tokens=700_000, rejected=exposed, tenant="acme")
    return s


def _answers(data: Any) -> dict[str, Any]:
    return {a.key: a for a in data.answers}


def test_a_clean_case_has_no_partial_gap_and_says_no(synth: Synth) -> None:
    data = report_data(_healthy(synth).case)
    a = _answers(data)
    assert forensics.evidence_gaps(synth.case).df().empty
    assert (a["evidence"].verdict, a["exposed"].verdict, a["over"].verdict) == ("yes", "no", "yes")
    assert data.numbers["evidence_partial"] is False and data.numbers["n_evidence_gaps"] == 0
    assert not [w for w in data.warnings if w.startswith("PARTIAL")]


@pytest.mark.parametrize(("label", "update", "problem", "partial"), GAP_CASES, ids=[c[0] for c in GAP_CASES])
def test_each_gap_is_listed_and_partial_ones_change_the_headline(
        synth: Synth, label: str, update: str, problem: str, partial: bool) -> None:
    _healthy(synth)
    synth.case.con.execute(f"UPDATE evidence_files SET {update} WHERE file_id = 1")
    gaps = forensics.evidence_gaps(synth.case).df()
    assert list(gaps.columns) == ["problem", "partial", "file_id", "path", "kind", "node", "n_lines", "detail"]
    assert gaps[["problem", "partial", "file_id"]].values.tolist() == [[problem, partial, 1]]
    data = report_data(synth.case)
    a = _answers(data)
    assert data.numbers["evidence_partial"] is partial
    assert data.numbers["n_evidence_gaps"] == int(partial)
    assert len(data.section("gaps").frame) == 1
    if partial:
        # never a clean "no" / "it is over" on partial evidence, and the summary says why, first
        assert a["evidence"].verdict == "no"
        assert a["exposed"].verdict == "unknown" and "evidence is partial" in a["exposed"].text
        assert a["over"].verdict == "unknown" and "evidence is partial" in a["over"].text
        assert a["affected"].text.startswith("at least ")
        assert data.warnings[0].startswith("PARTIAL EVIDENCE: 1 ")
        assert data.answers[0].key == "evidence"
        md, html = render_markdown(data), render_html(data)
        assert "> **Warning:** PARTIAL EVIDENCE" in md and "| Evidence read whole? (`forensics gaps`) | **no**" in md
        assert '<p class="warning partial" data-warning>Warning: PARTIAL EVIDENCE' in html
        assert 'data-answer="evidence" data-verdict="no"' in html
        assert coverage_note(synth.case)["warning"].startswith("PARTIAL EVIDENCE")
    else:
        assert (a["evidence"].verdict, a["exposed"].verdict, a["over"].verdict) == ("yes", "no", "yes")
        assert not a["affected"].text.startswith("at least")
        assert coverage_note(synth.case)["warning"] is None


def test_a_path_not_read_makes_the_answers_partial(synth: Synth) -> None:
    _healthy(synth)
    synth.case.con.execute("INSERT INTO unread_paths VALUES ('/evidence/case/engine/prefill-2', 'engine', "
                           "'prefill-2', 'permission denied', TIMESTAMP '2026-09-10 00:00:00')")
    gaps = forensics.evidence_gaps(synth.case).df()
    assert gaps[["problem", "partial", "path", "detail"]].values.tolist() == [
        ["not_read", True, "/evidence/case/engine/prefill-2", "not read: permission denied"]]
    data = report_data(synth.case)
    a = _answers(data)
    assert (a["evidence"].verdict, a["exposed"].verdict, a["over"].verdict) == ("no", "unknown", "unknown")
    assert data.warnings[0].startswith("PARTIAL EVIDENCE: 1 path not read")
    assert data.numbers["n_unread_paths"] == 1


def test_partial_evidence_keeps_a_yes_and_makes_counts_lower_bounds(synth: Synth) -> None:
    _healthy(synth, exposed=True)
    synth.case.con.execute("UPDATE evidence_files SET status = 'loading' WHERE kind = 'gateway'")
    a = _answers(report_data(synth.case))
    assert a["exposed"].verdict == "yes"  # what was read shows it: partial evidence cannot undo that
    assert a["affected"].text.startswith("at least 1 confirmed")
    assert a["recipients"].text.startswith("at least 1") and a["notify"].text.startswith("at least ")


def test_truncated_gzip_read_by_the_loader_makes_the_answers_partial(tmp_path: Path) -> None:
    data = gzip.compress((FIX / "cloudflare_http_ns.ndjson").read_bytes())
    cut = tmp_path / "edge.ndjson.gz"
    cut.write_bytes(data[: len(data) * 2 // 3])
    case = forensics.open_case(tmp_path / "c.duckdb")
    case.ingest_gateway(cut, format="cloudflare-http")
    gaps = forensics.evidence_gaps(case).df()
    assert "incomplete" in set(gaps["problem"]) and bool(gaps["partial"].iloc[0])
    assert "truncated" in gaps["detail"].iloc[0]
    rep = report_data(case, limit_tokens=681_274, start=t(-1000), end=t(1000))
    assert _answers(rep)["evidence"].verdict == "no"
    assert _answers(rep)["over"].verdict == "unknown"
    case.close()


def test_gaps_command_and_report_warn_on_the_command_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from forensics.cli import cli

    s = _healthy(Synth())
    s.case.con.execute("UPDATE evidence_files SET complete = false, warning = 'zstd stream is truncated' "
                       "WHERE file_id = 1")
    path = tmp_path / "c.duckdb"
    s.case.con.execute(f"ATTACH '{path}' AS out")
    s.case.con.execute("COPY FROM DATABASE memory TO out")
    s.case.con.execute("DETACH out")
    runner = CliRunner()
    res = runner.invoke(cli, ["gaps", str(path), "--format", "jsonl"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(r["problem"], r["partial"], r["detail"]) for r in rows] == [
        ("incomplete", True, "zstd stream is truncated")]
    js = tmp_path / "r.json"
    res = runner.invoke(cli, ["report", str(path), "--json", str(js)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "warning: PARTIAL EVIDENCE: 1 file not read whole" in res.stderr
    summary = json.loads(js.read_text())
    assert summary["answers"]["evidence"]["verdict"] == "no"
    assert summary["numbers"]["evidence_partial"] is True
    assert summary["tables"]["gaps"][0]["problem"] == "incomplete"
    res = runner.invoke(cli, ["affected", str(path), "--format", "csv"], catch_exceptions=False)
    assert "warning: PARTIAL EVIDENCE" in res.stderr
