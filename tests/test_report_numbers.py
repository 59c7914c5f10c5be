"""Every number agrees: each summary number of the report is recomputed from the tables of the
same report (HTML, Markdown and JSON renderings) and from the CSV outputs of the same case.

Regression: the summary said "31 tenants (155 source requests)" while its own sources table and
the notification list summed to 147 (155 was the number of recipient/source pairs); counts printed
as floats (``111853.0``) in the evidence table.
"""

from __future__ import annotations

import csv
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from forensics.outputs.escape import csv_uncell


class _Tables(HTMLParser):
    """table[data-table] -> rows of {data-col: text}; [data-metric] -> text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[dict[str, str]]] = {}
        self.metrics: dict[str, str] = {}
        self._table: str | None = None
        self._row: dict[str, str] | None = None
        self._col: str | None = None
        self._metric: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("data-table"):
            self._table = a["data-table"]
            self.tables[self._table] = []
        elif tag == "p" and a.get("data-table") and a.get("data-rows") == "0":
            self.tables[str(a["data-table"])] = []
        elif tag == "tr" and self._table is not None:
            self._row = {}
        elif tag == "td" and self._row is not None:
            self._col, self._text = a.get("data-col"), []
        elif a.get("data-metric"):
            self._metric, self._text = a["data-metric"], []

    def handle_data(self, data: str) -> None:
        self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._row is not None and self._col:
            self._row[self._col] = "".join(self._text)
            self._col = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            if self._row:
                self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "span" and self._metric:
            self.metrics[self._metric] = "".join(self._text)
            self._metric = None


def _md_tables(text: str) -> dict[str, list[dict[str, str]]]:
    """Markdown section title -> rows (cells un-escaped)."""
    out: dict[str, list[dict[str, str]]] = {}
    for part in text.split("\n## ")[1:]:
        title, _, body = part.partition("\n")
        lines = [ln for ln in body.splitlines() if ln.startswith("| ")]
        if len(lines) < 1:
            out[title.strip()] = []
            continue
        split = [[re.sub(r"\\(.)", r"\1", c.strip()).replace("&#10;", "\n").replace("&#13;", "\r")
                  for c in re.split(r"(?<!\\)\|", ln.strip()[1:-1])] for ln in lines]
        head, rows = split[0], split[1:]
        out[title.strip()] = [dict(zip(head, r, strict=True)) for r in rows]
    return out


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return [{k: csv_uncell(v) for k, v in r.items()} for r in csv.DictReader(fh)]


@pytest.fixture(scope="module")
def outputs(sample_investigation: Path) -> Path:
    """What ``forensics investigate`` wrote for the sample: report renderings and CSVs of one case."""
    return sample_investigation


def _num(text: str) -> int:
    assert re.fullmatch(r"-?[\d,]+", text), f"{text!r} is not an integer as printed"
    return int(text.replace(",", ""))


def test_every_summary_number_agrees_with_the_tables_and_csvs(outputs: Path) -> None:
    summary: dict[str, Any] = json.loads((outputs / "impact_report.json").read_text())
    n = summary["numbers"]
    tables = summary["tables"]
    page = _Tables()
    page.feed((outputs / "impact_report.html").read_text())
    md = _md_tables((outputs / "impact_report.md").read_text())
    affected_csv = _csv(outputs / "affected_requests.csv")
    tenants_csv = _csv(outputs / "affected_tenants.csv")
    sources_csv = _csv(outputs / "leak_sources.csv")
    notify_csv = _csv(outputs / "notifications.csv")

    # the same table in the three renderings: same rows, same values
    for key, title in (("tenants", "Affected tenants (recipients)"), ("sources", "Tenants whose data may have been exposed (sources)"),
                       ("affected", "Affected responses and their evidence"), ("audit", "Pool audit of every node start"),
                       ("gaps", "Evidence gaps: what the case lacks or flags"),
                       ("coverage", "Coverage: what the engine logs show per node"),
                       ("coverage_files", "Coverage per file: lines by kind")):
        as_json = [{k: "" if v is None else str(v).lower() if isinstance(v, bool) else str(v) for k, v in r.items()}
                   for r in tables[key]]
        assert page.tables[key] == as_json, key
        assert md[title] == as_json, key

    # affected responses
    conf = [r for r in tables["affected"] if r["confidence"] == "confirmed"]
    susp = [r for r in tables["affected"] if r["confidence"] == "suspected"]
    assert n["n_confirmed"] == len(conf) == sum(r["confidence"] == "confirmed" for r in affected_csv)
    assert n["n_suspected"] == len(susp) == sum(r["confidence"] == "suspected" for r in affected_csv)
    assert n["n_affected"] == len(tables["affected"]) == sum(r["n_requests"] for r in tables["tenants"])
    assert sum(r["n_confirmed"] for r in tables["tenants"]) == n["n_confirmed"]
    # recipients
    recipients = [r for r in tables["tenants"] if r["tenant_id"] is not None]
    received = [r for r in notify_csv if r["notice_type"] in ("received-other-data", "both")]
    assert n["n_recipient_tenants"] == len(recipients) == len([r for r in tenants_csv if r["tenant_id"]]) == len(received)
    # sources: tenants, and distinct source requests (the 155 / 147 bug)
    source_tenants = [r for r in tables["sources"] if r["tenant_id"] is not None]
    exposed = [r for r in notify_csv if r["notice_type"] in ("data-possibly-exposed", "both")]
    assert n["n_source_tenants"] == len(source_tenants) == len(exposed)
    cross_ids = {r["source_request_id"] for r in sources_csv if r["same_tenant"] == "false"}
    listed_ids = [i for r in exposed for i in r["exposed_request_ids"].split()]
    assert n["n_source_requests"] == sum(r["n_source_requests"] for r in tables["sources"]) == len(cross_ids)
    assert len(listed_ids) == len(set(listed_ids)) == n["n_source_requests"]
    assert n["n_tenants_to_notify"] == len(notify_csv)
    assert n["n_hidden_errors"] == len(_csv(outputs / "hidden_errors.csv"))
    # nodes
    assert n["n_exposed_nodes"] == len({r["node"] for r in tables["windows"]})
    assert n["n_unknown_starts"] == sum(r["starts_unknown"] for r in tables["coverage"])
    assert n["n_node_starts"] == sum(r["starts"] for r in tables["coverage"])
    assert n["n_node_starts"] == len(tables["audit"]) == len(_csv(outputs / "pool_audit.csv"))
    # coverage per file (forensics coverage) adds up to the per-node rows and to the evidence read
    per_file = tables["coverage_files"]
    assert sum(r["n_starts"] for r in per_file) == n["n_node_starts"]
    engine_files = [r for r in tables["files"] if r["kind"] == "engine"]
    assert {r["file_id"] for r in per_file} == {r["file_id"] for r in engine_files}
    assert sum(r["lines_read"] for r in per_file) == sum(r["lines_read"] for r in engine_files) == sum(
        r["lines_read"] for r in tables["coverage"])
    # evidence
    assert n["files_read"] == sum(r["files"] for r in tables["evidence"]) == len(tables["files"])
    assert n["lines_read"] == sum(r["lines_read"] for r in tables["evidence"]) == sum(
        r["lines_read"] for r in tables["files"])

    # evidence gaps: partial evidence counted from the same rows as the CSV (forensics gaps)
    gaps_csv = _csv(outputs / "evidence_gaps.csv")
    assert len(tables["gaps"]) == len(gaps_csv) == len(page.tables["gaps"])
    assert n["n_evidence_gaps"] == sum(bool(r["partial"]) for r in tables["gaps"]) == sum(
        r["partial"] == "true" for r in gaps_csv)
    assert n["evidence_partial"] is (n["n_evidence_gaps"] > 0)
    assert n["n_unread_paths"] == sum(r["problem"] == "not_read" for r in gaps_csv)
    assert n["rows_rejected"] == sum(r["n_lines"] for r in tables["gaps"] if r["problem"] == "rejected_lines") \
        == sum(r["rows_rejected"] for r in tables["files"])

    # what the page shows is what the JSON says, printed as integers
    for metric, shown in page.metrics.items():
        assert _num(shown) == n[metric], metric
    # and the Markdown summary sentences carry the same numbers
    text = (outputs / "impact_report.md").read_text()
    assert f"**{n['n_confirmed']} confirmed**" in text
    assert f"{n['n_source_tenants']} ({n['n_source_requests']} source requests" in text
    assert f"| {n['n_tenants_to_notify']} (recipients" in text


def test_integers_print_as_integers(outputs: Path) -> None:
    md = _md_tables((outputs / "impact_report.md").read_text())
    for title in ("Evidence read", "Coverage: what the engine logs show per node", "Pool audit of every node start",
                  "Sources: every file read, with its sha256"):
        for row in md[title]:
            for col, value in row.items():
                assert not re.fullmatch(r"-?\d+\.0", value), (title, col, value)
    for name in ("affected_requests.csv", "affected_tenants.csv", "notifications.csv", "pool_audit.csv"):
        text = (outputs / name).read_text()
        assert not re.search(r"(^|,)-?\d+\.0(,|$)", text, flags=re.M), name
