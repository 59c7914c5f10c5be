"""The impact report: the numbers a disclosure needs, each traceable to a query.

The report is Markdown, deterministic for a given case (no wall clock unless ``now`` is given),
and never quotes prompt or response text: it is built from the query results only.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import pandas as pd

from forensics import __version__, analysis
from forensics.case import Case, as_case
from forensics.outputs.export import frame_for_output

#: A tenant sending this many over-limit prompts within one hour is listed as possible probing.
PROBE_THRESHOLD = 5


def _table(df: pd.DataFrame, columns: list[str], max_rows: int = 50) -> str:
    """A GitHub-flavoured Markdown table (no extra dependency), capped at ``max_rows``."""
    if df.empty:
        return "_(none)_\n"
    shown = frame_for_output(df[columns].head(max_rows))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in shown.itertuples(index=False):
        cells = ["" if (v is None or (isinstance(v, float) and pd.isna(v))) else str(v) for v in row]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    if len(df) > max_rows:
        lines.append(f"\n_{len(df) - max_rows} more rows: see the CSV outputs._")
    return "\n".join(lines) + "\n"


def _fmt_int(value: Any) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{int(value):,}"


def _iso(value: Any) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "n/a"
    return pd.Timestamp(value).strftime("%Y-%m-%d %H:%M:%S UTC")


def probing_tenants(case: Case | str | os.PathLike[str], threshold: int = PROBE_THRESHOLD) -> pd.DataFrame:
    """Tenants that sent ``threshold`` or more over-limit prompts within one hour (possible probing).

    Over-limit means at or above the admission limit in force for the request's prefill start
    (request_chain's ``rejected_limit_tokens``) or the fleet limit otherwise, by the best token
    count known for the request (decode, rejection line, gateway).

    Example:
        >>> probing_tenants("case.duckdb")          # doctest: +SKIP
    """
    c = as_case(case)
    windows = analysis.exposure_windows(c).df()
    fleet = windows[windows["scope"] == "fleet"]
    if fleet.empty or pd.isna(fleet["admission_limit"].iloc[0]):
        return pd.DataFrame(columns=["tenant_id", "n_over_limit", "max_in_one_hour", "first_ts", "last_ts"])
    limit = int(fleet["admission_limit"].iloc[0])
    chain = analysis.request_chain(c)
    over = chain.filter(
        f"coalesce(decode_tokens, rejected_input_tokens, gateway_tokens) >= {limit} AND tenant_id IS NOT NULL"
    ).project("tenant_id, ts").df()
    rows = []
    for tenant, grp in over.groupby("tenant_id"):
        ts = grp["ts"].sort_values().reset_index(drop=True)
        # sliding one-hour window over sorted times: the densest hour
        j = 0
        best = 0
        for i in range(len(ts)):
            while ts[i] - ts[j] > pd.Timedelta(hours=1):
                j += 1
            best = max(best, i - j + 1)
        rows.append({"tenant_id": tenant, "n_over_limit": len(ts), "max_in_one_hour": best,
                     "first_ts": ts.iloc[0], "last_ts": ts.iloc[-1]})
    df = pd.DataFrame(rows, columns=["tenant_id", "n_over_limit", "max_in_one_hour", "first_ts", "last_ts"])
    df = df[df["max_in_one_hour"] >= threshold]
    return df.sort_values(["max_in_one_hour", "tenant_id"], ascending=[False, True]).reset_index(drop=True)


def impact_report(
    case: Case | str | os.PathLike[str],
    *,
    now: dt.datetime | None = None,
    title: str | None = None,
    probe_threshold: int = PROBE_THRESHOLD,
) -> str:
    """The impact report of a case as Markdown: window, threshold, responses, tenants, evidence.

    Example:
        >>> text = impact_report("case.duckdb")                 # doctest: +SKIP
        >>> open("impact_report.md", "w").write(text)            # doctest: +SKIP
    """
    c = as_case(case)
    audit = analysis.pool_audit(c).df()
    windows = analysis.exposure_windows(c).df()
    affected = analysis.affected_requests(c).df()
    tenants = analysis.affected_tenants(c).df()
    sources = analysis.leak_sources(c).df()
    postfix = analysis.post_fix_check(c).df()
    hidden = analysis.hidden_errors(c).df()
    files = c.sql(
        "SELECT kind, count(*) AS files, sum(lines_read) AS lines_read, sum(rows_loaded) AS rows_loaded, "
        "sum(rows_rejected) AS rows_rejected, sum(rows_duplicate) AS rows_duplicate, "
        "sum(CASE WHEN complete THEN 0 ELSE 1 END) AS incomplete_files "
        "FROM evidence_files GROUP BY kind ORDER BY kind"
    ).df()
    probes = probing_tenants(c, probe_threshold)

    exposed = audit[audit["verdict"] == "exposed"]
    node_windows = windows[windows["scope"] == "node"]
    fleet = windows[windows["scope"] == "fleet"]
    n_conf = int((affected["confidence"] == "confirmed").sum()) if len(affected) else 0
    n_susp = int((affected["confidence"] == "suspected").sum()) if len(affected) else 0
    cross = sources[~sources["same_tenant"].astype(bool)] if len(sources) else sources
    source_tenants = sorted(set(cross["source_tenant_id"].dropna())) if len(cross) else []
    failing = postfix[postfix["result"] == "fail"]
    limits = sorted({int(v) for v in exposed["admission_limit"].dropna()})

    lines: list[str] = []
    lines.append(f"# {title or 'Impact report'}\n")
    stamp = f" on {now.strftime('%Y-%m-%d %H:%M UTC')}" if now else ""
    lines.append(f"Produced by forensics {__version__}{stamp} from the case `{os.path.basename(c.path)}`. "
                 "Every number below comes from a query in `queries/` and can be reproduced with the "
                 "`forensics` command named next to it. No prompt or response text is quoted.\n")

    lines.append("## Summary\n")
    lines.append("| question | answer |\n|---|---|")
    lines.append(f"| Exposed? (`forensics audit`) | {'**yes**' if len(exposed) else 'no'}: "
                 f"{exposed['node'].nunique()} node(s) ran with a KV pool smaller than the context length |")
    if len(fleet):
        f0 = fleet.iloc[0]
        lines.append(f"| Exposure window (`forensics windows`) | {_iso(f0['window_start'])} to {_iso(f0['window_end'])}"
                     f"{' (still open at the end of the logs)' if bool(f0.get('window_open')) else ''} |")
    else:
        lines.append("| Exposure window (`forensics windows`) | none found in the logs |")
    if limits:
        lim = ", ".join(f"{v:,}" for v in limits)
        ctx = ", ".join(f"{int(v):,}" for v in sorted(set(exposed["context_len"].dropna())))
        pool = ", ".join(f"{int(v):,}" for v in sorted(set(exposed["max_total_num_tokens"].dropna())))
        lines.append(f"| Threshold | prompts of **{lim} tokens or more** (engine admission limit; "
                     f"context length {ctx}, KV pool {pool}) |")
    lines.append(f"| Affected responses (`forensics affected`) | **{n_conf} confirmed**"
                 f"{f', {n_susp} suspected (no engine evidence)' if n_susp else ''}: HTTP 2xx with another "
                 "request's KV data where 400 was due |")
    lines.append(f"| Tenants that received others' data (`forensics tenants`) | **{len(tenants)}** |")
    lines.append(f"| Tenants whose data may have been exposed (`forensics sources`) | {len(source_tenants)} "
                 f"({len(cross)} source requests, same decode node within the look-back window) |")
    lines.append(f"| Errors hidden behind 2xx (`forensics hidden`) | {len(hidden)} (reported separately) |")
    lines.append(f"| Is it over? (`forensics postfix`) | "
                 f"{'**no**: ' + str(len(failing)) + ' failing check(s)' if len(failing) else 'yes: every post-fix check passes'} |")
    lines.append(f"| Abuse evident? | {'possible: ' + str(len(probes)) + ' tenant(s) probing (see below)' if len(probes) else 'no'}"
                 f" (heuristic: >= {probe_threshold} over-limit prompts from one tenant within an hour) |")
    lines.append("")

    lines.append("## Nodes that ran exposed\n")
    lines.append(_table(node_windows, ["node", "window_start", "window_end", "admission_limit",
                                       "context_len", "max_total_num_tokens", "n_rejections"]))
    lines.append("## Pool audit of every node start\n")
    lines.append(_table(audit, ["node", "start_seq", "role", "period_start", "period_end", "context_len",
                                "max_total_num_tokens", "admission_limit", "verdict", "evidence"]))
    lines.append("## Affected tenants (recipients)\n")
    lines.append(_table(tenants, ["tenant_id", "n_requests", "n_confirmed", "n_suspected", "first_ts", "last_ts"]))
    lines.append("## Tenants whose data may have been exposed (sources)\n")
    if len(cross):
        src = (cross.groupby("source_tenant_id")
               .agg(n_source_requests=("source_request_id", "nunique"),
                    n_recipient_responses=("request_id", "nunique"),
                    first_ts=("source_finished_ts", "min"), last_ts=("source_finished_ts", "max"))
               .reset_index().rename(columns={"source_tenant_id": "tenant_id"})
               .sort_values(["n_source_requests", "tenant_id"], ascending=[False, True]))
        lines.append(_table(src, ["tenant_id", "n_source_requests", "n_recipient_responses", "first_ts", "last_ts"]))
    else:
        lines.append("_(none)_\n")
    lines.append("## Is it over?\n")
    lines.append(_table(postfix, ["check", "node", "result", "n", "detail"]))
    lines.append("## Possible abuse\n")
    lines.append(_table(probes, ["tenant_id", "n_over_limit", "max_in_one_hour", "first_ts", "last_ts"]))
    lines.append("## Evidence read\n")
    lines.append(_table(files, ["kind", "files", "lines_read", "rows_loaded", "rows_rejected",
                                "rows_duplicate", "incomplete_files"]))
    lines.append("Counts reconcile per file: lines read = loaded + rejected + duplicate (`evidence_files`). "
                 "Rejected lines are kept with their reason in `rejected_lines`.\n")
    return "\n".join(lines)
