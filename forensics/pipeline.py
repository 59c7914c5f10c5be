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
from forensics.case import Case, check_output, open_case, replace_case
from forensics.kinds import Backend
from forensics.outputs import charts
from forensics.outputs.export import for_output, write_output
from forensics.outputs.notifications import write_packets
from forensics.outputs.report import report_budget, report_data, write_report
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
    "notifications",
    "evidence_gaps",
    "probing_tenants",
)


@dataclass
class Investigation:
    """What :func:`investigate` produced: the ingest summary, counts and the files written."""

    case_path: Path
    out_dir: Path
    ingest: IngestSummary
    outputs: dict[str, Path] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    #: the answer in a few lines (the impact report's summary)
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


CHARTS = ("affected_tenants_chart", "affected_timeline_chart", "exposure_windows_chart")


def output_names() -> list[str]:
    """The files :func:`investigate` writes into its output directory (checked before any work).

    Example:
        >>> "impact_report.html" in output_names()
        True
    """
    return ["ingest_summary.csv", *(f"{n}.csv" for n in TABLE_OUTPUTS),
            *(f"{n}.csv.params.json" for n in TABLE_OUTPUTS), "impact_report.html", "impact_report.md",
            "impact_report.json", *(f"{c}.html" for c in CHARTS), "parameters.json"]


def _evidence_files(paths: Sequence[str]) -> list[str]:
    """The evidence paths given, and every file inside the directories given."""
    out: list[str] = []
    for p in paths:
        q = Path(p)
        out.append(str(q))
        if q.is_dir():
            out.extend(str(f) for f in q.rglob("*") if f.is_file())
    return out


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
    skip_unreadable: bool = False,
    now: dt.datetime | None = None,
    backend: Backend = "duckdb",
    spark_master: str | None = None,
) -> Investigation:
    """Ingest gateway and engine logs, run every query, write tables, charts, report and lists.

    ``backend="spark"``: ``case_path`` is a Parquet case directory, written by the Spark ingest
    (the files parsed on the executors) and queried by Spark SQL; the outputs are the same.

    Example:
        >>> import tempfile
        >>> from forensics.sample import sample_dir
        >>> out = tempfile.mkdtemp()
        >>> inv = investigate(f"{out}/case.duckdb", out_dir=out, gateway=[sample_dir() / "gateway"],
        ...                   engine=[sample_dir() / "engine"], engine_tz="Asia/Singapore")
        >>> inv.counts["affected_requests"], inv.outputs["impact_report_md"].name
        (35, 'impact_report.md')
    """
    case_path = Path(case_path)
    out = Path(out_dir)
    # every output is checked before the ingest: an unwritable --out, or one that would overwrite
    # evidence or the case, fails at once in one line
    evidence = [str(p).split("=", 1)[-1] if "=" in str(p) and not Path(p).exists() else str(p)
                for p in (*gateway, *engine)]
    check_output(out, evidence=evidence, directory=True)
    check_output(case_path, evidence=_evidence_files(evidence))  # the case may not be an evidence file
    for name in output_names():
        check_output(out / name, case_path=case_path, evidence=_evidence_files(evidence))
    if backend == "spark":
        from forensics.spark import ingest as spark_ingest

        summary = spark_ingest(case_path, gateway=list(gateway), engine=list(engine), gateway_format=gateway_format,
                               gateway_tz=gateway_tz, engine_tz=engine_tz, node_map=node_map, master=spark_master,
                               replace=replace, now=now).summary
    else:
        if replace:
            replace_case(case_path)
        summary = IngestSummary()
        with open_case(case_path, now=now) as case:
            for name in output_names():
                case.check_output(out / name)
            if gateway:
                summary.extend(case.ingest_gateway(list(gateway), format=gateway_format, tz=gateway_tz,
                                                   quiet=quiet, skip_unreadable=skip_unreadable))
            if engine:
                summary.extend(case.ingest_engine(list(engine), tz=engine_tz, quiet=quiet, node_map=node_map,
                                                  skip_unreadable=skip_unreadable))
    result = Investigation(case_path=case_path, out_dir=out, ingest=summary)
    summary_path = out / "ingest_summary.csv"
    write_output(
        summary.to_frame().drop(columns=["path"]).assign(file=[os.path.relpath(f.path) for f in summary.files]),
        "csv", summary_path,
    )
    result.outputs["ingest_summary"] = summary_path

    with open_case(case_path, read_only=True, backend=backend, spark_master=spark_master) as case:
        outputs, counts, headline = write_outputs(case, out, now=now)
    result.outputs.update(outputs)
    result.counts.update(counts)
    result.headline = headline
    return result


def write_outputs(
    case: Case, out: Path, *, now: dt.datetime | None = None, charts_html: bool = True
) -> tuple[dict[str, Path], dict[str, int], list[str]]:
    """Every output of an investigation from an open case: CSVs, notification list and packets,
    the report (HTML, Markdown, JSON), chart files and ``parameters.json``.

    Returns the files written (by name), the row count of each table and the report's answers.

    Example:
        >>> import tempfile
        >>> from forensics.sample import sample_case
        >>> files, counts, answers = write_outputs(sample_case(), Path(tempfile.mkdtemp()), charts_html=False)
        >>> counts["affected_requests"], files["affected_requests"].name
        (35, 'affected_requests.csv')
    """
    out.mkdir(parents=True, exist_ok=True)
    # every output under the report's budget, the affected set and its sources computed once for
    # the CSVs, the report, the packets and the charts alike
    with report_budget(case):
        return _write_outputs(case, out, now=now, charts_html=charts_html)


def _write_outputs(
    case: Case, out: Path, *, now: dt.datetime | None, charts_html: bool
) -> tuple[dict[str, Path], dict[str, int], list[str]]:
    outputs: dict[str, Path] = {}
    counts: dict[str, int] = {}
    params: dict[str, object] = {}
    for name in TABLE_OUTPUTS:
        # the columns the query file declares: what forensics <command> --format csv writes too
        rel = for_output(name, getattr(analysis, name)(case), "csv")
        path = out / f"{name}.csv"
        used = analysis.parameters_used(case, name)
        counts[name] = write_output(rel, "csv", path, used)  # the rows written: no second run to count
        params[name] = used
        outputs[name] = path
    packets_dir = out / "notification_packets"
    counts["notification_packets"] = len(write_packets(case, packets_dir))
    outputs["notification_packets"] = packets_dir
    data = report_data(case, now=now)
    written = write_report(data, out / "impact_report.html", markdown=out / "impact_report.md",
                           json_path=out / "impact_report.json")
    for path in written:
        outputs[path.name.replace(".", "_")] = path
    headline = [f"{a.question}: {a.text}" for a in data.answers]
    for chart_name, make in (
        ("affected_tenants_chart", charts.affected_tenants_chart),
        ("affected_timeline_chart", charts.affected_timeline_chart),
        ("exposure_windows_chart", charts.exposure_windows_chart),
    ):
        if charts_html:
            chart_path = out / f"{chart_name}.html"
            charts.save_chart(make(case), chart_path)
            outputs[chart_name] = chart_path
    # the sidecars written next to each CSV say the same; one file for the whole run too
    (out / "parameters.json").write_text(json.dumps(params, indent=2, sort_keys=True, default=str) + "\n")
    outputs["parameters"] = out / "parameters.json"
    return outputs, counts, headline
