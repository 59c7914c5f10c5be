"""CLI output: tables fitted to the terminal (one NULL, one timestamp format), JSON Lines, the
--tenant filter, filters naming what is not in the case, chart files that need no network,
report renderings, and the coverage warning that unknown is never "no"."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Synth, fleet, t

import forensics

TENANT = "cbe7ab577e70736167c4274c659856b4"


def run(*args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True, env=env)


def invoke(*args: str, columns: int) -> str:
    """The command in this process (click's runner) at a terminal width: tables only, no files."""
    from click.testing import CliRunner

    from forensics.cli import cli

    res = CliRunner(env={"COLUMNS": str(columns)}).invoke(cli, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.mark.parametrize("columns", [60, 80, 120, 200])
@pytest.mark.parametrize("command", ["affected", "audit", "tenants", "sources", "notifications"])
def test_table_fits_the_terminal(sample_case_path: Path, command: str, columns: int) -> None:
    out = invoke(command, str(sample_case_path), columns=columns)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert "NaN" not in out and "<NA>" not in out and "NaT" not in out
    stamps = re.findall(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}\S*", out)
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{6})?Z", s) for s in stamps), stamps[:5]


def test_table_shows_null_one_way_and_names_hidden_columns(sample_case_path: Path) -> None:
    res = run("affected", str(sample_case_path), columns=100)
    assert "NULL" in res.stdout  # header_request_id of the LiteLLM records
    assert "more column(s) not shown at width 100" in res.stdout


def test_jsonl_is_one_object_per_row(sample_case_path: Path) -> None:
    res = run("affected", str(sample_case_path), "--format", "jsonl")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(rows) == len(forensics.affected_requests(sample_case_path).df())
    assert all(isinstance(r["prompt_tokens"], int) for r in rows)


@pytest.mark.parametrize("command, column", [("affected", "tenant_id"), ("tenants", "tenant_id"),
                                             ("notifications", "tenant_id"), ("sources", None)])
def test_tenant_filter(sample_case_path: Path, command: str, column: str | None) -> None:
    res = run(command, str(sample_case_path), "--tenant", TENANT, "--format", "jsonl")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert rows
    if column:
        assert {r[column] for r in rows} == {TENANT}
    else:
        assert all(TENANT in (r["tenant_id"], r["source_tenant_id"]) for r in rows)


@pytest.mark.parametrize(
    "args, message",
    [
        (["affected", "--node", "prefill-9"], "--node prefill-9 is not in the case (nodes in the case: decode-0"),
        (["chain", "--request-id", "nope"], "--request-id nope is not in the case"),
        (["tenants", "--tenant", "nobody"], "--tenant nobody is not in the case"),
        (["notifications", "--tenant", "nobody"], "--tenant nobody is not in the case"),
    ],
)
def test_unknown_filters_say_they_are_not_in_the_case(sample_case_path: Path, args: list[str], message: str) -> None:
    res = run(args[0], str(sample_case_path), *args[1:])
    assert res.returncode == 2
    assert res.stderr.startswith(f"error: {message}") and len(res.stderr.strip().splitlines()) == 1, res.stderr


@pytest.mark.parametrize("fmt, magic", [("svg", b"<svg"), ("png", b"\x89PNG"), ("json", b"{"),
                                        ("html", b"<!DOCTYPE html>")])
@pytest.mark.parametrize("name", ["affected_tenants_chart", "affected_timeline_chart", "exposure_windows_chart"])
def test_chart_files_need_no_network(sample_case: forensics.Case, tmp_path: Path, name: str, fmt: str,
                                     magic: bytes) -> None:
    from forensics.outputs import charts

    out = charts.save_chart(getattr(charts, name)(sample_case), tmp_path / f"chart.{fmt}")
    data = out.read_bytes()
    assert data.startswith(magic)
    if fmt in ("html", "svg"):
        text = data.decode()
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), "loads something from the network"
        assert "cdn.jsdelivr" not in text


@pytest.mark.parametrize("name, fmt", [("affected-timeline", "svg"), ("exposure-windows", "png")])
def test_chart_command(sample_case_path: Path, tmp_path: Path, name: str, fmt: str) -> None:
    out = tmp_path / "chart.out"
    res = run("chart", name, str(sample_case_path), "-o", str(out), "--format", fmt)
    assert res.returncode == 0, res.stderr
    assert out.read_bytes()[:4] in (b"<svg", b"\x89PNG")


def test_report_renderings_from_one_command(sample_case_path: Path, tmp_path: Path) -> None:
    html, md, js = tmp_path / "r.html", tmp_path / "r.md", tmp_path / "r.json"
    res = run("report", str(sample_case_path), "-o", str(html), "--markdown", str(md), "--json", str(js),
              "--title", "Incident <42>")
    assert res.returncode == 0, res.stderr
    summary = json.loads(js.read_text())
    assert summary["title"] == "Incident <42>"
    assert "<title>Incident &lt;42&gt;</title>" in html.read_text()
    assert md.read_text().startswith("# Incident \\<42\\>")
    assert f"**{summary['numbers']['n_confirmed']} confirmed**" in md.read_text()
    stdout = run("report", str(sample_case_path))
    assert stdout.stdout == md.read_text().replace("# Incident \\<42\\>", "# Impact report", 1)


# -- unknown is never "no" -----------------------------------------------------------------------


def _unknown_pool_case(tmp_path: Path) -> Path:
    s = Synth()
    fleet(s)
    s.start("prefill-9", t(0), role="prefill", ctx=1_048_576, pool=None)  # pool not in the logs
    s.other("prefill-9", t(300))
    path = tmp_path / "unknown.duckdb"
    s.case.con.execute(f"ATTACH '{path}' AS out")
    s.case.con.execute("COPY FROM DATABASE memory TO out")
    s.case.con.execute("DETACH out")
    return path


@pytest.mark.parametrize("command", ["affected", "tenants", "notifications"])
def test_unknown_node_start_warns_and_is_recorded(tmp_path: Path, command: str) -> None:
    case = _unknown_pool_case(tmp_path)
    out = tmp_path / "o.csv"
    res = run(command, str(case), "--format", "csv", "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert "warning: 1 node start(s) in scope without pool / context in the logs" in res.stderr
    assert "prefill-9 #1 (no pool)" in res.stderr
    params = json.loads((tmp_path / "o.csv.params.json").read_text())
    assert params["coverage"]["unknown_node_starts"] == ["prefill-9 #1 (no pool)"]


def test_report_never_says_no_or_over_from_missing_evidence(tmp_path: Path) -> None:
    """Regression (#11): a start without pool / context made the report say "Exposed? no"."""
    case = _unknown_pool_case(tmp_path)
    js = tmp_path / "r.json"
    res = run("report", str(case), "--json", str(js))
    assert res.returncode == 0, res.stderr
    answers = json.loads(js.read_text())["answers"]
    # prefill-0 is exposed in this fleet: "yes", and the unknown start is named beside it
    assert answers["exposed"]["verdict"] == "yes" and "prefill-9 #1" in answers["exposed"]["text"]
    assert answers["over"]["verdict"] == "unknown" and answers["over"]["text"].startswith("unknown (")


def test_report_with_only_an_unknown_start_says_unknown(synth: Synth) -> None:
    from forensics.outputs.report import report_data

    synth.start("prefill-0", t(0), role="prefill", ctx=None, pool=None)
    synth.other("prefill-0", t(300))
    data = report_data(synth.case)
    answers = {a.key: a for a in data.answers}
    assert answers["exposed"].verdict == "unknown"
    assert answers["exposed"].text.startswith("unknown (1 node start(s) without pool / context in the logs")
    assert answers["over"].verdict == "unknown"


def test_gateway_only_case_gets_a_report_that_says_unknown(tmp_path: Path) -> None:
    """The first hours of an incident: gateway logs only, limit and window given by hand."""
    s = Synth()
    s.gw("g1", t(10), tenant="acme", prompt_tokens=700_000)
    case = tmp_path / "gw.duckdb"
    s.case.con.execute(f"ATTACH '{case}' AS out")
    s.case.con.execute("COPY FROM DATABASE memory TO out")
    s.case.con.execute("DETACH out")
    js, html = tmp_path / "r.json", tmp_path / "r.html"
    res = run("report", str(case), "-o", str(html), "--json", str(js))
    assert res.returncode == 2 and "--limit-tokens" in res.stderr
    res = run("report", str(case), "-o", str(html), "--json", str(js), "--limit-tokens", "681274",
              "--start", "2026-09-01T00:00:00Z", "--end", "2026-09-02T00:00:00Z")
    assert res.returncode == 0, res.stderr
    assert "warning: no engine startup lines in the case" in res.stderr
    summary = json.loads(js.read_text())
    assert summary["numbers"]["n_suspected"] == 1 and summary["numbers"]["n_recipient_tenants"] == 1
    assert summary["answers"]["exposed"]["verdict"] == "unknown"
    assert summary["answers"]["over"]["verdict"] == "unknown"
    assert "given with --limit-tokens" in summary["answers"]["threshold"]["text"]
    assert 'data-verdict="unknown"' in html.read_text()
