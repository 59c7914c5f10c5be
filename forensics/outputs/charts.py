"""Altair charts of an investigation: who was affected, when, and how big the prompts were.

Each function takes a case (or a path) plus the same parameters as the query it draws, runs that
query, and returns an ``alt.Chart`` that renders in JupyterLab or saves to HTML/JSON.
"""

from __future__ import annotations

import os
from typing import Any

import altair as alt
import pandas as pd

from forensics import analysis
from forensics.case import Case, as_case


def _frame(rel: Any) -> pd.DataFrame:
    return rel if isinstance(rel, pd.DataFrame) else rel.df()


def affected_tenants_chart(case: Case | str | os.PathLike[str], **params: Any) -> alt.Chart:
    """Bar chart: affected responses per tenant, confirmed and suspected stacked.

    Example:
        >>> chart = affected_tenants_chart("case.duckdb")    # doctest: +SKIP
        >>> chart.save("affected_tenants.html")              # doctest: +SKIP
    """
    df = _frame(analysis.affected_tenants(as_case(case), **params))
    long = df.melt(
        id_vars=["tenant_id", "n_requests"],
        value_vars=["n_confirmed", "n_suspected"],
        var_name="confidence",
        value_name="responses",
    )
    long["confidence"] = long["confidence"].str.removeprefix("n_")
    order = df.sort_values(["n_requests", "tenant_id"], ascending=[False, True])["tenant_id"].tolist()
    chart: alt.Chart = (
        alt.Chart(long, title="Responses that carried another tenant's data, per recipient tenant")
        .mark_bar()
        .encode(
            x=alt.X("responses:Q", title="affected responses"),
            y=alt.Y("tenant_id:N", sort=order, title="tenant"),
            color=alt.Color(
                "confidence:N",
                scale=alt.Scale(domain=["confirmed", "suspected"], range=["#c0392b", "#f39c12"]),
            ),
            tooltip=["tenant_id", "confidence", "responses", "n_requests"],
        )
    )
    return chart


def affected_timeline_chart(case: Case | str | os.PathLike[str], **params: Any) -> alt.LayerChart:
    """Scatter over time: each affected response at its prompt size, with the admission limit.

    Example:
        >>> affected_timeline_chart("case.duckdb").save("timeline.html")   # doctest: +SKIP
    """
    df = _frame(analysis.affected_requests(as_case(case), **params))
    df = df.assign(ts=pd.to_datetime(df["ts"]))
    points = (
        alt.Chart(df, title="Affected responses: prompt size over time")
        .mark_circle(size=60)
        .encode(
            x=alt.X("ts:T", title="time (UTC)"),
            y=alt.Y("prompt_tokens:Q", title="prompt tokens", scale=alt.Scale(zero=False)),
            color=alt.Color("tenant_id:N", title="tenant"),
            shape=alt.Shape("confidence:N"),
            tooltip=["request_id", "tenant_id", "ts:T", "prompt_tokens", "prefill_node", "decode_node", "confidence"],
        )
    )
    limits = df[["admission_limit"]].dropna().drop_duplicates()
    rule = alt.Chart(limits).mark_rule(strokeDash=[4, 4], color="black").encode(
        y="admission_limit:Q", tooltip=["admission_limit"]
    )
    return alt.LayerChart(layer=[points, rule])


def exposure_windows_chart(case: Case | str | os.PathLike[str], **params: Any) -> alt.Chart:
    """Gantt-style chart: each node start's period, coloured by the pool audit verdict.

    Example:
        >>> exposure_windows_chart("case.duckdb").save("windows.html")     # doctest: +SKIP
    """
    df = _frame(analysis.pool_audit(as_case(case), **params))
    chart: alt.Chart = (
        alt.Chart(df, title="Node configurations over time (pool audit verdict)")
        .mark_bar()
        .encode(
            x=alt.X("period_start:T", title="time (UTC)"),
            x2="period_end:T",
            y=alt.Y("node:N", title="node"),
            color=alt.Color(
                "verdict:N", scale=alt.Scale(domain=["exposed", "ok", "unknown"], range=["#c0392b", "#27ae60", "#7f8c8d"])
            ),
            tooltip=["node", "role", "context_len", "max_total_num_tokens", "admission_limit", "verdict",
                     "period_start:T", "period_end:T"],
        )
    )
    return chart
