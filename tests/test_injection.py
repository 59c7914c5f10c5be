"""Outputs are safe to open (#13 "Injection"): hostile tenant ids and models of affected records go
through every output, and no spreadsheet formula, script, broken table row or terminal escape comes
out, while the value a reader recovers is unchanged."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import Synth, fleet, t

import forensics
from forensics.outputs import charts
from forensics.outputs.escape import FORMULA_START, csv_cell, csv_uncell, md_text
from forensics.outputs.export import csv_text
from forensics.outputs.report import render_markdown, report_data
from forensics.outputs.report_html import render_html

SCRIPT = "</script><script>alert(1)</script>"
PAYLOADS = [
    SCRIPT,
    '=HYPERLINK("http://evil.example/?x","click")',
    "a|b",
    "\rlead",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "+1+cmd",
    "-2+3",
    "\ttab",
    "line1\nline2",
    "<img src=x onerror=alert(2)>",
    "'=already",
    "**bold** _x_ `code` [l](http://x)",
]


def _case(tmp_path: Path) -> Path:
    s = Synth()
    fleet(s)
    for i, tenant in enumerate(PAYLOADS):
        # every request is a leak (confirmed), and each one's decode finished minutes before the next
        # one's started on the same decode node: every tenant but the last is also a possible source
        s.pd_request(f"x{i}", t(10 + i * 0.05), tokens=700_000, rejected=True, tenant=tenant,
                     model=f"=m{i}|{SCRIPT}")
    # file names and loader warnings come from the evidence too: a file named like a formula whose
    # warning carries a script, a pipe and CR/LF reaches the gaps list, the report's sources table
    hostile_file = s.file(f"gateway/{PAYLOADS[1]}.ndjson", "gateway", layer="edge")
    s.case.con.execute("UPDATE evidence_files SET rows_rejected = 2, warning = ? WHERE file_id = ?",
                       [f"=cmd|{SCRIPT}\r\nnext", hostile_file])
    path = tmp_path / "hostile.duckdb"
    s.case.con.execute(f"ATTACH '{path}' AS out")
    s.case.con.execute("COPY FROM DATABASE memory TO out")
    s.case.con.execute("DETACH out")
    return path


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _case(tmp_path_factory.mktemp("hostile"))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True)


@pytest.mark.parametrize("value", [*PAYLOADS, "plain", "-5", "+1.5e3", "", "''x"])
def test_csv_cell_round_trips_and_never_starts_a_formula(value: str) -> None:
    cell = csv_cell(value)
    assert csv_uncell(cell) == value
    if cell and cell[0] in FORMULA_START:
        assert re.fullmatch(r"[+-][\d.eE+-]+", cell), cell  # only plain numbers may start so


def _assert_safe_csv(text: str, path: str) -> list[dict[str, str]]:
    # a CR or LF never splits a record: every one sits inside a quoted field
    rows = list(csv.reader(text.splitlines(keepends=True)))
    width = len(rows[0])
    assert all(len(r) == width for r in rows), path
    for r in rows:
        for cell in r:
            if cell[:1] in FORMULA_START:
                assert re.fullmatch(r"[+-][\d.eE+-]+", cell), (path, cell)
    with open(path, newline="", encoding="utf-8") as fh:
        return [{k: csv_uncell(v) for k, v in r.items()} for r in csv.DictReader(fh)]


@pytest.mark.parametrize("command", ["affected", "tenants", "sources", "notifications", "notification-requests",
                                     "timeline", "chain", "mismatch", "audit", "gaps"])
def test_every_csv_output_is_neutralised(hostile: Path, tmp_path: Path, command: str) -> None:
    from click.testing import CliRunner

    from forensics.cli import cli

    out = tmp_path / f"{command}.csv"
    res = CliRunner().invoke(cli, [command, str(hostile), "--format", "csv", "-o", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    rows = _assert_safe_csv(out.read_text(encoding="utf-8"), str(out))
    if command in ("affected", "tenants", "notifications"):
        tenants = {r["tenant_id"] for r in rows}
        assert SCRIPT in tenants and '=HYPERLINK("http://evil.example/?x","click")' in tenants
        assert "a|b" in tenants and "\rlead" in tenants  # values unchanged once read back
    if command == "gaps":
        assert {r["detail"] for r in rows} >= {f"=cmd|{SCRIPT}\r\nnext"}
        assert any(r["path"].endswith(f"{PAYLOADS[1]}.ndjson") for r in rows)


def test_investigate_csvs_and_packets_are_neutralised(hostile: Path, tmp_path: Path) -> None:
    from forensics.pipeline import write_outputs

    with forensics.open_case(hostile, read_only=True) as case:
        write_outputs(case, tmp_path, charts_html=False)
    for path in sorted(tmp_path.rglob("*.csv")):
        _assert_safe_csv(path.read_text(encoding="utf-8"), str(path))
    names = {p.name for p in (tmp_path / "notification_packets").iterdir()}
    assert all("/" not in n and not n.startswith(".") for n in names)
    assert any(n.startswith("script__script_alert_1___script-") for n in names)


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        (self.scripts if self._in_script else self.text).append(data)


def test_html_report_escapes_data_and_title(hostile: Path) -> None:
    with forensics.open_case(hostile, read_only=True) as case:
        page = render_html(report_data(case, title=f"Report {SCRIPT}"))
    p = _Collect()
    p.feed(page)
    # the only script block is the JSON summary, and nothing in it ends it early
    assert p.tags.count("script") == 1 and page.count("</script>") == 1
    assert "img" not in p.tags and not any(k.startswith("on") for k, _ in p.attrs)
    summary = json.loads(p.scripts[0])
    assert SCRIPT in {r["tenant_id"] for r in summary["tables"]["tenants"]}
    assert summary["title"] == f"Report {SCRIPT}"
    shown = "".join(p.text)
    assert SCRIPT in shown and "<img src=x onerror=alert(2)>" in shown  # shown as text, escaped in the file
    assert "default-src 'none'" in page  # and the page may run nothing even if escaping failed


def test_chart_html_keeps_data_inside_its_json_block(hostile: Path) -> None:
    with forensics.open_case(hostile, read_only=True) as case:
        page = charts.to_html(charts.affected_tenants_chart(case), title=SCRIPT)
    assert page.count("<script") == page.count("</script>") == 3  # bundle, spec, embed call
    spec = page.split('<script type="application/json" id="spec">', 1)[1].split("</script>", 1)[0]
    values = json.loads(spec)["datasets"]
    assert any(SCRIPT in json.dumps(v) for v in values.values())
    assert "<title>&lt;/script&gt;" in page


def test_markdown_escapes_without_changing_the_value(hostile: Path) -> None:
    from markdown_it import MarkdownIt

    with forensics.open_case(hostile, read_only=True) as case:
        text = render_markdown(report_data(case, title="a|b <b>x</b>"))
    md = MarkdownIt("commonmark").enable("table")
    html = md.render(text)
    p = _Collect()
    p.feed(html)
    assert "script" not in p.tags and "img" not in p.tags
    cells = []
    for table_html in re.findall(r"<table>.*?</table>", html, flags=re.S):
        q = _Collect()
        q.feed(table_html)
        cells.append("".join(q.text))
    joined = "\n".join(cells)
    for value in ("a|b", SCRIPT, "<img src=x onerror=alert(2)>", "**bold** _x_ `code` [l](http://x)",
                  "line1\nline2", "\rlead", f"=cmd|{SCRIPT}\r\nnext"):
        assert value in joined, value
    # every table row of the Markdown keeps its number of cells (no pipe split a cell)
    for block in re.findall(r"((?:^\|.*\|$\n?)+)", text, flags=re.M):
        widths = {len(re.split(r"(?<!\\)\|", ln)) for ln in block.strip().splitlines()}
        assert len(widths) == 1, block[:200]


@pytest.mark.parametrize("value", PAYLOADS)
def test_md_text_renders_to_the_value(value: str) -> None:
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable("table").render(f"| h |\n|---|\n| {md_text(value)} |\n")
    q = _Collect()
    q.feed(html)
    assert "".join(q.text).strip("\n").removeprefix("h\n").strip("\n") == value.strip("\n") or value in "".join(q.text)
    assert q.tags.count("td") == 1


def test_terminal_table_and_jsonl_show_control_characters_as_escapes(hostile: Path) -> None:
    res = run("tenants", str(hostile))
    assert res.returncode == 0, res.stderr
    assert "\r" not in res.stdout and "\\rlead" in res.stdout
    res = run("tenants", str(hostile), "--format", "jsonl")
    tenants = {json.loads(line)["tenant_id"] for line in res.stdout.splitlines()}
    assert SCRIPT in tenants and "\rlead" in tenants


def test_timesketch_export_of_hostile_values_is_valid_jsonl(hostile: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    res = run("export", "timesketch", str(hostile), "-o", str(out))
    assert res.returncode == 0, res.stderr
    lines = out.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""
    events = [json.loads(line) for line in lines[:-1]]
    assert SCRIPT in {e.get("tenant_id") for e in events}


def test_csv_text_quotes_every_cr_and_lf() -> None:
    text = csv_text(["a"], [["x\ry"], ["\n"], ["ok"]])
    assert text == 'a\n"x\ry"\n"\n"\nok\n'
