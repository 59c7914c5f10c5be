"""The whole investigation in one call: load the evidence, ask every question, write the outputs.

This is the scripted face of the toolkit (``forensics investigate``, ``make demo``); each step is
the same library call a notebook cell makes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from forensics import analysis
from forensics.case import open_case
from forensics.outputs import charts
from forensics.outputs.export import write_output
from forensics.outputs.notifications import notifications
from forensics.outputs.report import impact_report
from forensics.sources.summary import IngestSummary

#: query function -> output file stem (the query's own name: one name everywhere)
TABLE_OUTPUTS = (
    "pool_audit",
    "exposure_windows",
    "affected_requests",
    "affected_tenants",
    "leak_sources",
    "token_mismatch",
    "hidden_errors",
    "post_fix_check",
)


def _headline(report_text: str) -> list[str]:
    """The report's summary table as 'question: answer' lines for the terminal."""
    out = []
    for line in report_text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("question", "---"):
            out.append(f"{cells[0].split(' (')[0]}: {cells[1].replace('**', '')}")
    return out


@dataclass
class Investigation:
    """What :func:`investigate` produced: the ingest summary, counts and the files written."""

    case_path: Path
    out_dir: Path
    ingest: IngestSummary
    outputs: dict[str, Path] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    #: the answer in a few lines (from the impact report's summary table)
    headline: list[str] = field(default_factory=list)

    def render(self) -> str:
        """A short plain-text account for the terminal."""
        totals = [ln for ln in self.ingest.render().splitlines() if ln.startswith("total:")]
        lines = totals + self.headline
        lines.append(
            "findings: " + ", ".join(f"{k} {v}" for k, v in self.counts.items())
        )
        lines.append(f"outputs in {self.out_dir}/:")
        lines += [f"  {p.name}" for p in sorted(self.outputs.values())]
        return "\n".join(lines)


def investigate(
    case_path: str | os.PathLike[str],
    *,
    out_dir: str | os.PathLike[str],
    gateway: Sequence[str] = (),
    engine: Sequence[str] = (),
    gateway_format: str = "auto",
    gateway_tz: str = "UTC",
    engine_tz: str = "UTC",
    node_map: str | os.PathLike[str] | None = None,
    replace: bool = False,
    quiet: bool = True,
    now: dt.datetime | None = None,
) -> Investigation:
    """Ingest gateway and engine logs, run every query, write tables, charts, report and lists.

    Example:
        >>> investigate("out/case.duckdb", out_dir="out", gateway=["sample_data/gateway"],
        ...             engine=["sample_data/engine"], engine_tz="Asia/Singapore")   # doctest: +SKIP
    """
    case_path = Path(case_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if replace:
        for stale in (case_path, case_path.with_name(case_path.name + ".wal")):
            stale.unlink(missing_ok=True)
    summary = IngestSummary()
    with open_case(case_path, now=now) as case:
        if gateway:
            summary.extend(case.ingest_gateway(list(gateway), format=gateway_format, tz=gateway_tz, quiet=quiet))
        if engine:
            summary.extend(case.ingest_engine(list(engine), tz=engine_tz, quiet=quiet, node_map=node_map))
    result = Investigation(case_path=case_path, out_dir=out, ingest=summary)
    summary_path = out / "ingest_summary.csv"
    summary.to_frame().drop(columns=["path"]).assign(
        file=[os.path.relpath(f.path) for f in summary.files]
    ).to_csv(summary_path, index=False)
    result.outputs["ingest_summary"] = summary_path

    with open_case(case_path, read_only=True) as case:
        params: dict[str, object] = {}
        for name in TABLE_OUTPUTS:
            rel = getattr(analysis, name)(case)
            path = out / f"{name}.csv"
            used = analysis.parameters_used(case, name)
            write_output(rel, "csv", path, used)
            params[name] = used
            result.outputs[name] = path
            result.counts[name] = int(rel.aggregate("count(*)").fetchall()[0][0])
        notes = notifications(case)
        notes_path = out / "notifications.csv"
        write_output(notes, "csv", notes_path)
        result.outputs["notifications"] = notes_path
        result.counts["notifications"] = len(notes)
        report_path = out / "impact_report.md"
        report_text = impact_report(case, now=now)
        report_path.write_text(report_text, encoding="utf-8")
        result.headline = _headline(report_text)
        result.outputs["impact_report"] = report_path
        for chart_name, make in (
            ("affected_tenants_chart", charts.affected_tenants_chart),
            ("affected_timeline_chart", charts.affected_timeline_chart),
            ("exposure_windows_chart", charts.exposure_windows_chart),
        ):
            chart_path = out / f"{chart_name}.html"
            make(case).save(str(chart_path))
            result.outputs[chart_name] = chart_path
    # the sidecars written next to each CSV say the same; one file for the whole run too
    (out / "parameters.json").write_text(json.dumps(params, indent=2, sort_keys=True, default=str) + "\n")
    result.outputs["parameters"] = out / "parameters.json"
    return result
