"""The impact report: the numbers a disclosure needs, each traceable to a query and to evidence.

:func:`report_data` runs the queries once and computes every headline number from the tables it
shows; the three renderings are built from that one object, so they cannot disagree:
:func:`render_markdown` (``impact_report.md``), :func:`render_html` (``impact_report.html``: one
self-contained file, charts inline as SVG, no network at view time, printable) and
:func:`render_json` (the machine-readable summary). Deterministic for a given case (no wall clock
unless ``now`` is given); no prompt or response text is ever quoted.

Unknown is never "no": a node start whose pool or context the logs do not show makes "Exposed?"
``unknown (...)`` unless another start is known to be exposed, and "Is it over?" ``unknown (...)``.

Example:
    >>> from forensics.outputs.report_html import render_html
    >>> from forensics.sample import sample_case
    >>> data = report_data(sample_case())
    >>> data.numbers["n_confirmed"], render_html(data).startswith("<!DOCTYPE html>")
    (32, True)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from forensics import __version__, analysis
from forensics.case import Case, as_case
from forensics.errors import CaseError
from forensics.kinds import ANSWER_VERDICTS, AnswerVerdict, member
from forensics.outputs.escape import md_text
from forensics.outputs.export import frame_for_output, rows_for_output
from forensics.outputs.scope import partial_evidence
from forensics.sqlfiles import load_query

#: A tenant sending this many over-limit prompts within one hour is listed as possible probing
#: (queries/probing_tenants.sql: forensics.probing_tenants, forensics probing).
PROBE_THRESHOLD = analysis.DEFAULT_PROBE_THRESHOLD

#: Rows shown per table in the Markdown report (the HTML report shows up to HTML_MAX_ROWS); the
#: CSV outputs always hold every row, and the report says how many it left out.
MARKDOWN_MAX_ROWS = 200
HTML_MAX_ROWS = 5000

#: DuckDB memory limit (bytes) while the report runs its queries: the case's query limit is lowered
#: to it, never raised. Every result the report reads is small (the affected set, tenants, sources,
#: checks), but under the 2 GB query limit the table blocks DuckDB caches stay resident from one
#: query to the next: on a 1 M-request case the report peaked at 1.1-1.2 GiB RSS (540 MiB of
#: cached blocks), more the larger the incident; under this budget 0.93-0.95 GiB, the same CPU and
#: the same report. Not lower: the leak-sources and probing queries hash every request.
REPORT_MEMORY_LIMIT_BYTES = 640_000_000


# -- the data ---------------------------------------------------------------------------------


@dataclass
class Answer:
    """One row of the summary: a question, its answer word, the sentence, the command behind it."""

    key: str
    question: str
    #: ``yes`` / ``no`` / ``unknown`` for the judgement questions, else None
    verdict: AnswerVerdict | None
    text: str
    command: str | None = None
    #: the part of ``text`` a reader must see first (bold in Markdown and HTML)
    strong: str | None = None


@dataclass
class Section:
    """A table of the report: its id, heading, the rows shown and how many rows the result has."""

    key: str
    title: str
    frame: pd.DataFrame
    columns: list[str]
    note: str = ""
    #: columns holding evidence references or hashes (long tokens: may break anywhere in print)
    long_columns: tuple[str, ...] = ()


@dataclass
class ReportData:
    """Everything the three renderings show, computed once from the case."""

    title: str
    case_name: str
    toolkit_version: str
    generated_at: str | None
    parameters: dict[str, Any]
    numbers: dict[str, Any]
    answers: list[Answer]
    sections: dict[str, Section]
    #: frames the charts are drawn from (the same rows as the sections)
    chart_frames: dict[str, pd.DataFrame] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def section(self, key: str) -> Section:
        return self.sections[key]


def _safe(func: Any, c: Case, **kw: Any) -> pd.DataFrame | None:
    """A query's frame, or None when the case lacks what it needs (no engine startup lines)."""
    try:
        frame: pd.DataFrame = func(c, **kw).df()
    except CaseError:
        return None
    return frame


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})


AUDIT_COLUMNS = ["node", "start_seq", "role", "period_start", "period_end", "context_len",
                 "max_total_num_tokens", "admission_limit", "verdict", "evidence"]
WINDOW_COLUMNS = ["node", "window_start", "window_end", "admission_limit", "context_len",
                  "max_total_num_tokens", "n_rejections"]
AFFECTED_COLUMNS = ["request_id", "tenant_id", "ts", "prompt_tokens", "status", "prefill_node",
                    "decode_node", "admission_limit", "confidence", "evidence"]
TENANT_COLUMNS = ["tenant_id", "n_requests", "n_confirmed", "n_suspected", "first_ts", "last_ts"]
SOURCE_COLUMNS = ["tenant_id", "n_source_requests", "n_recipient_responses", "first_ts", "last_ts"]
POSTFIX_COLUMNS = ["check", "node", "result", "n", "detail"]
PROBE_COLUMNS = list(load_query("probing_tenants").columns)
KIND_COLUMNS = ["kind", "files", "lines_read", "rows_loaded", "rows_rejected", "rows_duplicate",
                "incomplete_files"]
COVERAGE_COLUMNS = ["node", "files", "lines_read", "rows_loaded", "rows_rejected", "starts",
                    "starts_exposed", "starts_ok", "starts_unknown", "first_start", "last_line"]
COVERAGE_FILE_COLUMNS = ["node", "file_id", "path", "format", "wrapper", "tz", "lines_read", "lines_joined",
                         "lines_recognised", "lines_foreign", "lines_unknown", "share_recognised", "first_ts",
                         "last_ts", "n_starts", "with_pool", "with_context", "node_verdict", "complete",
                         "lines_by_kind"]
GAP_COLUMNS = ["problem", "partial", "file_id", "path", "kind", "node", "n_lines", "detail"]
FILE_COLUMNS = ["file_id", "path", "kind", "format", "node", "sha256", "size", "lines_read",
                "rows_loaded", "rows_rejected", "rows_duplicate", "complete", "warning"]


def _source_tenants(cross: pd.DataFrame) -> pd.DataFrame:
    if cross.empty:
        return _empty(SOURCE_COLUMNS)
    return (cross.groupby("source_tenant_id")
            .agg(n_source_requests=("source_request_id", "nunique"),
                 n_recipient_responses=("request_id", "nunique"),
                 first_ts=("source_finished_ts", "min"), last_ts=("source_finished_ts", "max"))
            .reset_index().rename(columns={"source_tenant_id": "tenant_id"})
            .sort_values(["n_source_requests", "tenant_id"], ascending=[False, True])
            .reset_index(drop=True))


def _coverage(c: Case, audit: pd.DataFrame) -> pd.DataFrame:
    """Per engine node: what was read, how many starts, how many of them could be judged."""
    files = c.sql(
        "SELECT node, count(*) AS files, sum(lines_read) AS lines_read, sum(rows_loaded) AS rows_loaded, "
        "sum(rows_rejected) AS rows_rejected FROM evidence_files WHERE kind = 'engine' AND node IS NOT NULL "
        "GROUP BY node"
    ).df()
    last = c.sql("SELECT node, last_ts AS last_line FROM node_last_seen").df()
    out = files.merge(last, on="node", how="left")
    if len(audit):
        rows = []
        for node, grp in audit.groupby("node"):
            n_unknown = int((grp["verdict"] == "unknown").sum())
            n_exposed = int((grp["verdict"] == "exposed").sum())
            rows.append({"node": node, "starts": len(grp), "starts_exposed": n_exposed,
                         "starts_ok": len(grp) - n_exposed - n_unknown, "starts_unknown": n_unknown,
                         "first_start": grp["ts_start"].min()})
        out = out.merge(pd.DataFrame(rows), on="node", how="outer")
    for col in ("starts", "starts_exposed", "starts_ok", "starts_unknown"):
        out[col] = out[col].fillna(0).astype("int64") if col in out else 0
    if "first_start" not in out:
        out["first_start"] = pd.NaT
    for col in ("files", "lines_read", "rows_loaded", "rows_rejected"):
        out[col] = out[col].fillna(0).astype("int64")
    result: pd.DataFrame = out[COVERAGE_COLUMNS].sort_values("node").reset_index(drop=True)
    return result


@contextlib.contextmanager
def report_budget(c: Case) -> Iterator[None]:
    """Run the report's queries under :data:`REPORT_MEMORY_LIMIT_BYTES` (a lower case limit stays).

    The case's query limit is back afterwards, also after an error. The derived tables are brought
    up to date first, under the case's own budgets (a refresh sets the limit back when it ends).
    Inside, the results other queries read as input are computed once (:meth:`Case.reusing`).

    Example:
        >>> import forensics
        >>> case = forensics.open_case(":memory:", query_memory_limit="2GiB")
        >>> with report_budget(case):
        ...     case.sql("SELECT current_setting('memory_limit')").fetchall()
        [('610.3 MiB',)]
        >>> case.sql("SELECT current_setting('memory_limit')").fetchall()
        [('2.0 GiB',)]
    """
    c.ensure_facts()
    # the report asks many questions of one affected set: each input query's result is computed once
    with c.capped(REPORT_MEMORY_LIMIT_BYTES), c.reusing():
        yield


def report_data(
    case: Case | str | os.PathLike[str],
    *,
    now: dt.datetime | None = None,
    title: str | None = None,
    probe_threshold: int = PROBE_THRESHOLD,
    limit_tokens: int | None = None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    window_s: int = analysis.DEFAULT_WINDOW_S,
) -> ReportData:
    """Run the queries once and compute the report's numbers from the tables it shows.

    ``limit_tokens`` / ``start`` / ``end`` are the same overrides as ``forensics affected`` (a
    gateway-only case has no engine startup lines to derive them from).

    Example:
        >>> from forensics.sample import sample_case
        >>> report_data(sample_case()).numbers["n_suspected"]
        3
    """
    c = as_case(case)
    with report_budget(c):
        return _report_data(c, now=now, title=title, probe_threshold=probe_threshold, limit_tokens=limit_tokens,
                            start=start, end=end, window_s=window_s)


def _report_data(
    c: Case,
    *,
    now: dt.datetime | None,
    title: str | None,
    probe_threshold: int,
    limit_tokens: int | None,
    start: dt.datetime | None,
    end: dt.datetime | None,
    window_s: int,
) -> ReportData:
    window: dict[str, Any] = {"limit_tokens": limit_tokens, "start": start, "end": end}
    affected = analysis.affected_requests(c, **window).df()  # raises the clear error if underivable
    tenants = analysis.affected_tenants(c, **window).df()
    sources = analysis.leak_sources(c, **window, window_s=window_s).df()
    windows = analysis.exposure_windows(c, **window).df()
    audit = _safe(analysis.pool_audit, c)
    postfix = _safe(analysis.post_fix_check, c)
    hidden = analysis.hidden_errors(c, start=start, end=end).df()
    probes = analysis.probing_tenants(c, threshold=probe_threshold, limit_tokens=limit_tokens).df()
    kinds = c.sql(
        "SELECT kind, count(*) AS files, sum(lines_read) AS lines_read, sum(rows_loaded) AS rows_loaded, "
        "sum(rows_rejected) AS rows_rejected, sum(rows_duplicate) AS rows_duplicate, "
        "count(CASE WHEN complete THEN NULL ELSE 1 END) AS incomplete_files "
        "FROM evidence_files GROUP BY kind ORDER BY kind"
    ).df()
    files = c.sql(
        "SELECT e.file_id, COALESCE(p.rel, e.path) AS path, e.kind, e.format, e.node, e.sha256, e.size, "
        "e.lines_read, e.rows_loaded, e.rows_rejected, e.rows_duplicate, e.complete, e.warning "
        "FROM evidence_files e LEFT JOIN evidence_paths p ON p.file_id = e.file_id ORDER BY e.file_id"
    ).df()
    gaps = analysis.evidence_gaps(c).df()
    partial = partial_evidence(gaps)
    engine_evidence = audit is not None
    audit = audit if audit is not None else _empty([*AUDIT_COLUMNS, "ts_start"])
    postfix = postfix if postfix is not None else _empty(POSTFIX_COLUMNS)
    coverage = _coverage(c, audit)

    exposed = audit[audit["verdict"] == "exposed"]
    # the headline answers and the unknown starts: queries/impact_summary.sql
    summary = {str(r["question"]): r for r in analysis.impact_summary(c).df().to_dict("records")}
    unknown_list = summary["exposed"]["unknown_starts"]
    unknown = str(unknown_list).split(", ") if isinstance(unknown_list, str) and unknown_list else []
    node_windows = windows[windows["scope"] == "node"].reset_index(drop=True)
    fleet = windows[windows["scope"] == "fleet"]
    cross = sources[~sources["same_tenant"].astype(bool)] if len(sources) else sources
    source_tenants = _source_tenants(cross)
    failing = postfix[postfix["result"] == "fail"]
    unknown_checks = postfix[postfix["result"] == "unknown"]
    limits = sorted({int(v) for v in exposed["admission_limit"].dropna()})
    recipients = tenants[tenants["tenant_id"].notna()]
    notify = analysis.notifications(c, **window, window_s=window_s).df()

    numbers: dict[str, Any] = {
        "exposed": "",
        "n_exposed_nodes": int(exposed["node"].nunique()),
        "n_exposed_starts": len(exposed),
        "n_unknown_starts": len(unknown),
        "n_node_starts": len(audit),
        "admission_limits": limits,
        "window_start": None,
        "window_end": None,
        "window_open": None,
        "n_affected": len(affected),
        "n_confirmed": int((affected["confidence"] == "confirmed").sum()),
        "n_suspected": int((affected["confidence"] == "suspected").sum()),
        "n_recipient_tenants": len(recipients),
        "n_affected_tenant_unknown": int(tenants.loc[tenants["tenant_id"].isna(), "n_requests"].sum()),
        "n_source_tenants": len(source_tenants),
        "n_source_requests": int(cross["source_request_id"].nunique()) if len(cross) else 0,
        "n_tenants_to_notify": len(notify),
        "n_hidden_errors": len(hidden),
        "over": "",
        "n_failing_checks": len(failing),
        "n_probing_tenants": len(probes),
        "files_read": int(kinds["files"].sum()) if len(kinds) else 0,
        "lines_read": int(kinds["lines_read"].fillna(0).sum()) if len(kinds) else 0,
        "rows_rejected": int(kinds["rows_rejected"].fillna(0).sum()) if len(kinds) else 0,
        "incomplete_files": int(kinds["incomplete_files"].sum()) if len(kinds) else 0,
        "evidence_partial": partial is not None,
        "n_evidence_gaps": int(gaps["partial"].astype(bool).sum()) if len(gaps) else 0,
        "n_unfinished_files": int((gaps["problem"] == "unfinished").sum()),
        "n_unread_paths": int((gaps["problem"] == "not_read").sum()),
        "n_grown_files": int((gaps["problem"] == "grown").sum()),
    }
    if len(fleet):
        f0 = fleet.iloc[0]
        numbers["window_start"] = _iso(f0["window_start"])
        numbers["window_end"] = _iso(f0["window_end"])
        numbers["window_open"] = bool(f0.get("window_open")) if pd.notna(f0.get("window_open")) else None

    answers: list[Answer] = []
    warnings: list[str] = [partial] if partial else []
    notes = gaps[~gaps["partial"].astype(bool)] if len(gaps) else gaps
    note_counts = notes.groupby("problem").size() if len(notes) else pd.Series(dtype="int64")
    note_words = {"rejected_lines": "file(s) with rejected lines", "grown": "file(s) read as a newer version",
                  "warning": "file(s) with a warning"}
    noted = "; ".join(f"{int(note_counts[k])} {w}" for k, w in note_words.items() if k in note_counts)
    n_rejected = numbers["rows_rejected"]
    if partial:
        evidence_text = "no: " + partial.removeprefix("PARTIAL EVIDENCE: ")
    else:
        evidence_text = f"yes: every one of the {numbers['files_read']} file(s) was read whole"
    if noted:
        evidence_text += f" ({noted}; {n_rejected} line(s) rejected in all, kept with their reason)" if n_rejected \
            else f" ({noted})"
    answers.append(Answer("evidence", "Evidence read whole?", "no" if partial else "yes", evidence_text,
                          "forensics gaps"))
    unknown_text = (f"{len(unknown)} node start(s) without pool / context in the logs: "
                    f"{', '.join(unknown[:10])}{' ...' if len(unknown) > 10 else ''}")
    exposed_verdict: AnswerVerdict
    if not engine_evidence:
        exposed_verdict = "unknown"
        exposed_text = ("unknown (no engine startup lines in the case: no node's pool or context is known; "
                        "the answers below rest on the given limit and window)")
        warnings.append("no engine startup lines in the case: pool and context of every node unknown")
    else:
        exposed_verdict = member(summary["exposed"]["answer"], ANSWER_VERDICTS, "impact_summary answer")
        exposed_text = str(summary["exposed"]["detail"])
    if partial and exposed_verdict == "no":
        exposed_verdict = "unknown"
        exposed_text = (f"unknown (no start read ran exposed: {exposed_text.removeprefix('no: ')}; but the "
                        "evidence is partial: see Evidence gaps)")
    if unknown:
        warnings.append(unknown_text)
    numbers["exposed"] = exposed_verdict
    answers.append(Answer("exposed", "Exposed?", exposed_verdict, exposed_text, "forensics audit"))

    if len(fleet) and numbers["window_start"] is not None:
        f0 = fleet.iloc[0]
        src = str(f0.get("source") or "")
        window_text = (f"{_human(f0['window_start'])} to {_human(f0['window_end'])}"
                       + (" (still open at the end of the logs)" if numbers["window_open"] else "")
                       + (" (given on the command line)" if src == "given" else ""))
    else:
        window_text = "none found in the logs" if engine_evidence else "unknown (no engine startup lines)"
    answers.append(Answer("window", "Exposure window", None, window_text, "forensics windows"))

    if limits:
        lim = ", ".join(f"{v:,}" for v in limits)
        ctx = ", ".join(f"{int(v):,}" for v in sorted(set(exposed["context_len"].dropna())))
        pool = ", ".join(f"{int(v):,}" for v in sorted(set(exposed["max_total_num_tokens"].dropna())))
        threshold = (f"prompts of {lim} tokens or more (engine admission limit; context length {ctx}, "
                     f"KV pool {pool})")
    elif limit_tokens is not None:
        threshold = f"prompts of {limit_tokens:,} tokens or more (given with --limit-tokens)"
    else:
        threshold = "none: no exposed node start"
    strong = threshold.split(" (")[0].removeprefix("prompts of ") if threshold.startswith("prompts of") else None
    answers.append(Answer("threshold", "Threshold", None, threshold, None, strong))

    at_least = "at least " if partial else ""
    affected_text = f"{at_least}{numbers['n_confirmed']} confirmed"
    if numbers["n_suspected"]:
        affected_text += f", {numbers['n_suspected']} suspected (no engine evidence)"
    affected_text += ": HTTP 2xx with another request's KV data where 400 was due"
    answers.append(Answer("affected", "Affected responses", None, affected_text, "forensics affected",
                          f"{numbers['n_confirmed']} confirmed"))
    recipients_text = f"{at_least}{numbers['n_recipient_tenants']}"
    if numbers["n_affected_tenant_unknown"]:
        recipients_text += (f" (and {numbers['n_affected_tenant_unknown']} affected response(s) whose tenant "
                            "could not be read)")
    answers.append(Answer("recipients", "Tenants that received others' data", None, recipients_text,
                          "forensics tenants", str(numbers["n_recipient_tenants"])))
    answers.append(Answer(
        "sources", "Tenants whose data may have been exposed", None,
        f"{at_least}{numbers['n_source_tenants']} ({numbers['n_source_requests']} source requests on the same decode "
        f"node within {window_s} s before an affected response)", "forensics sources"))
    answers.append(Answer("notify", "Tenants to notify", None,
                          f"{at_least}{numbers['n_tenants_to_notify']} (recipients and possible sources)",
                          "forensics notifications"))
    answers.append(Answer("hidden", "Errors hidden behind 2xx", None,
                          f"{numbers['n_hidden_errors']} (reported separately)", "forensics hidden"))
    over_verdict: AnswerVerdict
    if not engine_evidence and not len(failing):
        over_verdict = "unknown"
        over_text = "unknown (no engine startup lines: no node's configuration is known)"
    elif summary["over"]["answer"] == "yes" and len(unknown_checks):
        over_verdict = "unknown"
        over_text = f"unknown ({len(unknown_checks)} post-fix check(s) could not be decided)"
    elif summary["over"]["answer"] == "yes" and partial:
        over_verdict = "unknown"
        over_text = "unknown (every post-fix check read passes, but the evidence is partial: see Evidence gaps)"
    else:
        over_verdict = member(summary["over"]["answer"], ANSWER_VERDICTS, "impact_summary answer")
        over_text = str(summary["over"]["detail"])
    numbers["over"] = over_verdict
    answers.append(Answer("over", "Is it over?", over_verdict, over_text, "forensics postfix"))
    abuse = (f"possible: {len(probes)} tenant(s) probing (see below)" if len(probes) else "no")
    answers.append(Answer("abuse", "Abuse evident?", None,
                          f"{abuse} (heuristic: >= {probe_threshold} over-limit prompts from one tenant "
                          "within an hour)", "forensics probing"))

    def sec(key: str, heading: str, frame: pd.DataFrame, columns: list[str], note: str = "",
            long: tuple[str, ...] = ()) -> Section:
        for col in columns:
            if col not in frame:
                frame = frame.assign(**{col: None})
        return Section(key, heading, frame[columns].reset_index(drop=True), columns, note, long)

    sections = {
        s.key: s for s in (
            sec("windows", "Nodes that ran exposed", node_windows, WINDOW_COLUMNS),
            sec("audit", "Pool audit of every node start", audit, AUDIT_COLUMNS, long=("evidence",)),
            sec("affected", "Affected responses and their evidence", affected, AFFECTED_COLUMNS,
                "Evidence: file:line of the gateway record, the rejection line and the prefill and decode "
                "request lines (paths relative to the evidence root).", long=("evidence",)),
            sec("tenants", "Affected tenants (recipients)", tenants, TENANT_COLUMNS),
            sec("sources", "Tenants whose data may have been exposed (sources)", source_tenants, SOURCE_COLUMNS,
                "A source request finished on the same decode node shortly before an affected response "
                "started; each source request belongs to one tenant, so n_source_requests adds up."),
            sec("postfix", "Is it over?", postfix, POSTFIX_COLUMNS),
            sec("abuse", "Possible abuse", probes, PROBE_COLUMNS),
            sec("coverage", "Coverage: what the engine logs show per node", coverage, COVERAGE_COLUMNS,
                "A start whose pool or context length is not in the logs is 'unknown': it is never counted "
                "as safe."),
            sec("coverage_files", "Coverage per file: lines by kind", analysis.coverage(c).df(),
                COVERAGE_FILE_COLUMNS,
                "Every engine and router file (forensics coverage): lines recognised, foreign and of no known "
                "kind, the share recognised, the time span of its lines, the node starts it holds and how many "
                "show their pool and context, the collection wrapper stripped, the zone applied to zone-less "
                "times and the lines of each kind.", long=("path", "lines_by_kind")),
            sec("gaps", "Evidence gaps: what the case lacks or flags", gaps, GAP_COLUMNS,
                "partial = true (an unfinished ingest, a file not read whole, a path not read): the answers "
                "rest on partial evidence. The other rows are recorded and shown but do not make it partial "
                "(forensics gaps).", long=("path", "detail")),
            sec("evidence", "Evidence read", kinds, KIND_COLUMNS,
                "Counts reconcile per file: lines read = loaded + rejected + duplicate (evidence_files). "
                "Rejected lines are kept with their reason in rejected_lines."),
            sec("files", "Sources: every file read, with its sha256", files, FILE_COLUMNS,
                long=("path", "sha256", "warning")),
        )
    }
    params = analysis.parameters_used(c, "leak_sources", **window, window_s=window_s)
    params["probe_threshold"] = probe_threshold
    # the case by its file name: the report reads the same wherever the case was opened from
    params["case"] = os.path.basename(c.path)
    return ReportData(
        title=title or "Impact report",
        case_name=os.path.basename(c.path),
        toolkit_version=__version__,
        generated_at=now.strftime("%Y-%m-%d %H:%M UTC") if now else None,
        parameters=params,
        numbers=numbers,
        answers=answers,
        sections=sections,
        chart_frames={"affected": affected, "tenants": tenants, "audit": audit},
        warnings=warnings,
    )


def _iso(value: Any) -> str | None:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    return pd.Timestamp(value).strftime("%Y-%m-%dT%H:%M:%SZ")


def _human(value: Any) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "open"
    return pd.Timestamp(value).strftime("%Y-%m-%d %H:%M:%S UTC")


# -- Markdown ---------------------------------------------------------------------------------


def _md_table(section: Section, max_rows: int) -> str:
    if section.frame.empty:
        return "_(none)_\n"
    names, rows = rows_for_output(section.frame.head(max_rows))
    lines = ["| " + " | ".join(md_text(c) for c in names) + " |", "|" + "---|" * len(names)]
    from forensics.outputs.export import text_value

    for row in rows:
        lines.append("| " + " | ".join(md_text(text_value(v)) for v in row) + " |")
    if len(section.frame) > max_rows:
        lines.append(f"\n_{len(section.frame) - max_rows} more rows: see the CSV outputs._")
    return "\n".join(lines) + "\n"


def render_markdown(data: ReportData, *, max_rows: int = MARKDOWN_MAX_ROWS) -> str:
    """The report as Markdown (GitHub-flavoured tables; every data value escaped, never altered).

    Example:
        >>> from forensics.sample import sample_case
        >>> render_markdown(report_data(sample_case())).splitlines()[0]
        '# Impact report'
    """
    lines: list[str] = [f"# {md_text(data.title)}\n"]
    stamp = f" on {data.generated_at}" if data.generated_at else ""
    lines.append(f"Produced by forensics {data.toolkit_version}{stamp} from the case `{md_text(data.case_name)}`. "
                 "Every number below comes from a query in `queries/` and can be reproduced with the "
                 "`forensics` command named next to it. No prompt or response text is quoted.\n")
    for w in data.warnings:
        lines.append(f"> **Warning:** {md_text(w)}\n")
    lines.append("## Summary\n")
    lines.append("| question | answer |\n|---|---|")
    for a in data.answers:
        q = a.question + (f" (`{a.command}`)" if a.command else "")
        text = md_text(a.text)
        if a.verdict in ("yes", "no", "unknown") and text.startswith(a.verdict):
            text = f"**{a.verdict}**" + text[len(a.verdict):]
        elif a.strong and md_text(a.strong) in text:
            text = text.replace(md_text(a.strong), f"**{md_text(a.strong)}**", 1)
        lines.append(f"| {q} | {text} |")
    lines.append("")
    for key in ("windows", "audit", "tenants", "sources", "affected", "postfix", "abuse", "coverage",
                "coverage_files", "gaps", "evidence", "files"):
        s = data.sections[key]
        lines.append(f"## {s.title}\n")
        if s.note:
            lines.append(md_text(s.note) + "\n")
        lines.append(_md_table(s, max_rows))
    lines.append("## Parameters\n")
    lines.append("```json\n" + json.dumps(data.parameters, indent=2, sort_keys=True, default=str)
                 .replace("```", "` ` `") + "\n```\n")
    return "\n".join(lines)


# -- JSON -------------------------------------------------------------------------------------


def summary_dict(data: ReportData) -> dict[str, Any]:
    """The machine-readable summary: headline numbers, answers, parameters and the tables' rows.

    Example:
        >>> from forensics.sample import sample_case
        >>> summary_dict(report_data(sample_case()))["numbers"]["n_confirmed"]
        32
    """
    tables = {}
    for key, s in data.sections.items():
        names, rows = rows_for_output(s.frame)
        tables[key] = [dict(zip(names, r, strict=True)) for r in rows]
    return {
        "title": data.title,
        "case": data.case_name,
        "toolkit_version": data.toolkit_version,
        "generated_at": data.generated_at,
        "numbers": data.numbers,
        "answers": {a.key: {"question": a.question, "verdict": a.verdict, "text": a.text, "command": a.command}
                    for a in data.answers},
        "warnings": data.warnings,
        "parameters": data.parameters,
        "tables": tables,
    }


def render_json(data: ReportData) -> str:
    """:func:`summary_dict` as indented JSON text."""
    return json.dumps(summary_dict(data), indent=2, ensure_ascii=False, default=str) + "\n"


# -- faces ------------------------------------------------------------------------------------


def impact_report(
    case: Case | str | os.PathLike[str],
    *,
    now: dt.datetime | None = None,
    title: str | None = None,
    probe_threshold: int = PROBE_THRESHOLD,
    limit_tokens: int | None = None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
) -> str:
    """The impact report of a case as Markdown: window, threshold, responses, tenants, evidence.

    Example:
        >>> from forensics.sample import sample_case
        >>> text = impact_report(sample_case())
        >>> text.splitlines()[0], "**32 confirmed**, 3 suspected" in text
        ('# Impact report', True)
    """
    return render_markdown(report_data(case, now=now, title=title, probe_threshold=probe_threshold,
                                       limit_tokens=limit_tokens, start=start, end=end))


def write_report(
    data: ReportData,
    html: str | os.PathLike[str] | None = None,
    *,
    markdown: str | os.PathLike[str] | None = None,
    json_path: str | os.PathLike[str] | None = None,
) -> list[Path]:
    """Write the report's renderings that were asked for; returns the paths written.

    Example:
        >>> import tempfile
        >>> from forensics.sample import sample_case
        >>> out = Path(tempfile.mkdtemp())
        >>> [p.name for p in write_report(report_data(sample_case()), out / "report.html", markdown=out / "report.md")]
        ['report.html', 'report.md']
    """
    from forensics.outputs.report_html import render_html

    written = []
    for path, render in ((html, render_html), (markdown, render_markdown), (json_path, render_json)):
        if path is not None:
            Path(path).write_text(render(data), encoding="utf-8")
            written.append(Path(path))
    return written


def render_html(data: ReportData) -> str:
    """The report as one self-contained HTML page (see :mod:`forensics.outputs.report_html`)."""
    from forensics.outputs.report_html import render_html as _render

    return _render(data)


__all__ = [
    "PROBE_THRESHOLD",
    "ReportData",
    "frame_for_output",
    "impact_report",
    "render_html",
    "render_json",
    "render_markdown",
    "report_budget",
    "report_data",
    "summary_dict",
    "write_report",
]
