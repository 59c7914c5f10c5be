"""Altair charts of an investigation: who was affected, when, and which node ran exposed when.

Each ``*_chart`` function takes a case (or a path) plus the same parameters as the query it draws,
runs that query, and returns an ``alt.Chart``. Nothing here needs the network: :func:`save_chart`
writes HTML with the Vega JavaScript inline (from the ``vl-convert-python`` package, never a CDN),
or SVG / PNG / the Vega-Lite JSON rendered offline; :func:`to_svg` gives the SVG text the HTML
report inlines; :func:`use_offline_renderer` makes notebooks display charts as SVG, which every
viewer shows without loading a script (JupyterLab, nbconvert, a browser with no internet).

Times are drawn on a UTC scale from ISO strings ending in ``Z``, so a chart reads the same on
every machine whatever its local zone.

Example:
    >>> import pandas as pd
    >>> chart = tenants_chart(pd.DataFrame({"tenant_id": ["t1"], "n_requests": [2],
    ...                                     "n_confirmed": [2], "n_suspected": [0]}))
    >>> to_svg(chart).startswith("<svg")
    True
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from forensics import analysis
from forensics.case import Case, as_case
from forensics.errors import ParameterError
from forensics.kinds import CHART_FORMATS, ChartFormat
from forensics.outputs.escape import html_text, json_for_script
from forensics.outputs.export import frame_for_output

#: ``save_chart`` formats, by file suffix.

VERDICT_COLOURS = {"exposed": "#c0392b", "ok": "#27ae60", "unknown": "#7f8c8d"}
CONFIDENCE_COLOURS = {"confirmed": "#c0392b", "suspected": "#f39c12"}


def _frame(rel: Any) -> pd.DataFrame:
    return rel if isinstance(rel, pd.DataFrame) else rel.df()


def _utc(df: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """Timestamps as 'YYYY-MM-DDTHH:MM:SSZ' strings: Vega parses them as UTC, not local time."""
    out = df.copy()
    text = frame_for_output(df[list(columns)]) if len(df) else None
    for col in columns:
        out[col] = [] if text is None else text[col].tolist()
    return out


# -- charts from data (the report builds them from the frames it already holds) ----------------


def tenants_chart(tenants: pd.DataFrame) -> alt.Chart:
    """Bar chart from an ``affected_tenants`` frame: responses per recipient tenant, by confidence.

    Example:
        >>> tenants_chart(pd.DataFrame(columns=["tenant_id", "n_requests", "n_confirmed",
        ...                                     "n_suspected"])).mark
        'bar'
    """
    df = tenants[["tenant_id", "n_requests", "n_confirmed", "n_suspected"]].copy()
    df["tenant_id"] = df["tenant_id"].astype(object).where(df["tenant_id"].notna(), "(tenant unknown)")
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
            x=alt.X("responses:Q", title="affected responses", axis=alt.Axis(tickMinStep=1, format="d")),
            # labelLimit 0: a tenant id is evidence, never cut short with an ellipsis
            y=alt.Y("tenant_id:N", sort=order, title="tenant", axis=alt.Axis(labelLimit=0)),
            color=alt.Color(
                "confidence:N",
                scale=alt.Scale(domain=list(CONFIDENCE_COLOURS), range=list(CONFIDENCE_COLOURS.values())),
            ),
            tooltip=["tenant_id", "confidence", "responses", "n_requests"],
        )
    )
    return chart


def timeline_chart(affected: pd.DataFrame) -> alt.LayerChart:
    """Scatter from an ``affected_requests`` frame: each response at its prompt size, with the limit.

    Example:
        >>> cols = ["ts", "prompt_tokens", "tenant_id", "confidence", "request_id", "prefill_node",
        ...         "decode_node", "admission_limit"]
        >>> len(timeline_chart(pd.DataFrame(columns=cols)).layer)
        2
    """
    df = _utc(affected, "ts")
    points = (
        alt.Chart(df, title="Affected responses: prompt size over time")
        .mark_point(size=60, filled=True)
        .encode(
            x=alt.X("ts:T", title="time (UTC)", scale=alt.Scale(type="utc"), axis=alt.Axis(format="%m-%d %H:%M")),
            y=alt.Y("prompt_tokens:Q", title="prompt tokens", scale=alt.Scale(zero=False)),
            color=alt.Color("tenant_id:N", title="tenant", legend=None),
            shape=alt.Shape("confidence:N", scale=alt.Scale(domain=list(CONFIDENCE_COLOURS))),
            tooltip=["request_id", "tenant_id", alt.Tooltip("ts:T", format="%Y-%m-%d %H:%M:%S", formatType="utc"),
                     "prompt_tokens", "prefill_node", "decode_node", "confidence"],
        )
    )
    limits = df[["admission_limit"]].dropna().drop_duplicates()
    rule = alt.Chart(limits).mark_rule(strokeDash=[4, 4], color="black").encode(
        y="admission_limit:Q", tooltip=["admission_limit"]
    )
    return alt.LayerChart(layer=[points, rule])


def windows_chart(audit: pd.DataFrame) -> alt.Chart:
    """Gantt chart from a ``pool_audit`` frame: each node start's period, coloured by verdict.

    Example:
        >>> cols = ["node", "start_seq", "role", "period_start", "period_end", "context_len",
        ...         "max_total_num_tokens", "admission_limit", "verdict"]
        >>> windows_chart(pd.DataFrame(columns=cols)).mark.type
        'bar'
    """
    df = _utc(audit, "period_start", "period_end")
    chart: alt.Chart = (
        alt.Chart(df, title="Node configurations over time (pool audit verdict)")
        .mark_bar(stroke="white", strokeWidth=1)
        .encode(
            x=alt.X("period_start:T", title="time (UTC)", scale=alt.Scale(type="utc"),
                    axis=alt.Axis(format="%m-%d %H:%M")),
            x2="period_end:T",
            y=alt.Y("node:N", title="node"),
            color=alt.Color(
                "verdict:N", scale=alt.Scale(domain=list(VERDICT_COLOURS), range=list(VERDICT_COLOURS.values()))
            ),
            tooltip=["node", "start_seq", "role", "context_len", "max_total_num_tokens", "admission_limit",
                     "verdict", "period_start", "period_end"],
        )
    )
    return chart


# -- charts from a case -----------------------------------------------------------------------


def affected_tenants_chart(case: Case | str | os.PathLike[str], **params: Any) -> alt.Chart:
    """Bar chart: affected responses per tenant, confirmed and suspected stacked.

    Example:
        >>> from forensics.sample import sample_case
        >>> chart = affected_tenants_chart(sample_case())
        >>> type(chart).__name__
        'Chart'
    """
    return tenants_chart(_frame(analysis.affected_tenants(as_case(case), **params)))


def affected_timeline_chart(case: Case | str | os.PathLike[str], **params: Any) -> alt.LayerChart:
    """Scatter over time: each affected response at its prompt size, with the admission limit.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from forensics.sample import sample_case
        >>> svg = save_chart(affected_timeline_chart(sample_case()), Path(tempfile.mkdtemp()) / "timeline.svg")
        >>> svg.read_text().startswith("<svg")
        True
    """
    return timeline_chart(_frame(analysis.affected_requests(as_case(case), **params)))


def exposure_windows_chart(case: Case | str | os.PathLike[str], **params: Any) -> alt.Chart:
    """Gantt-style chart: each node start's period, coloured by the pool audit verdict.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from forensics.sample import sample_case
        >>> png = save_chart(exposure_windows_chart(sample_case()), Path(tempfile.mkdtemp()) / "windows.png")
        >>> png.read_bytes()[:4]
        b'\\x89PNG'
    """
    return windows_chart(_frame(analysis.pool_audit(as_case(case), **params)))


# -- rendering without a network --------------------------------------------------------------


def to_svg(chart: alt.TopLevelMixin) -> str:
    """The chart rendered to SVG offline (``vl-convert``): what the HTML report inlines.

    Example:
        >>> to_svg(alt.Chart(pd.DataFrame({"x": [1]})).mark_point().encode(x="x:Q"))[:4]
        '<svg'
    """
    import vl_convert as vlc

    svg: str = vlc.vegalite_to_svg(chart.to_dict(), vl_version=_vl_version())
    return svg


def _vl_version() -> str:
    # "v6.4.1" -> "6.4": the Vega-Lite version altair writes, which vl-convert bundles
    major_minor = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return major_minor


@functools.cache
def _javascript_bundle(vl_version: str) -> str:
    """vega, vega-lite and vega-embed as one script, from the vl-convert package (a few seconds once)."""
    import vl_convert as vlc

    # no snippet: the default one assigns vegaEmbed, vegaLite and vega to window (as altair uses it;
    # the package's stub marks the argument required)
    bundle: str = vlc.javascript_bundle(vl_version=vl_version)  # type: ignore[call-arg]
    # a literal "</script" would end the block early; "<\/" means the same inside JS strings
    return re.sub(r"</(script)", r"<\\/\1", bundle, flags=re.I)


def to_html(chart: alt.TopLevelMixin, title: str | None = None) -> str:
    """A self-contained interactive HTML page of the chart: the Vega JavaScript inline, no CDN.

    The spec sits in a ``<script type="application/json">`` block written by
    :func:`~forensics.outputs.escape.json_for_script`: data such as a tenant id
    ``</script><script>alert(1)</script>`` cannot end the block (altair's own template writes the
    spec raw into a script).

    Example:
        >>> page = to_html(alt.Chart(pd.DataFrame({"t": ["</script>"]})).mark_point().encode(x="t:N"))
        >>> page.count("</script>") == page.count("<script")
        True
    """
    spec = chart.to_dict()
    name = title or str(spec.get("title") or "chart")
    return _HTML.format(
        title=html_text(name),
        bundle=_javascript_bundle(_vl_version()),
        spec=json_for_script(spec, sort_keys=True),
    )


_HTML = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data:">
<title>{title}</title>
<style>body {{ font-family: sans-serif; margin: 1em; }} #vis {{ width: 100%; }}</style>
<script>
{bundle}
</script>
</head>
<body>
<div id="vis"></div>
<noscript>This chart needs JavaScript (inline in this file; nothing is loaded from the network).</noscript>
<script type="application/json" id="spec">{spec}</script>
<script>
vegaEmbed("#vis", JSON.parse(document.getElementById("spec").textContent),
          {{renderer: "svg", actions: false}}).catch(function (err) {{
  var p = document.createElement("pre"); p.textContent = "chart error: " + err; document.body.appendChild(p);
}});
</script>
</body>
</html>
"""


def save_chart(chart: alt.TopLevelMixin, path: str | os.PathLike[str], fmt: ChartFormat | None = None) -> Path:
    """Write a chart as self-contained HTML (JavaScript inline), SVG, PNG or Vega-Lite JSON.

    ``fmt`` defaults to the file's suffix. No format loads anything from the network when opened.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from forensics.sample import sample_case
        >>> page = save_chart(affected_tenants_chart(sample_case()), Path(tempfile.mkdtemp()) / "tenants.html")
        >>> text = page.read_text()
        >>> "vega" in text, "cdn.jsdelivr" in text
        (True, False)
    """
    out = Path(path)
    name = (fmt or out.suffix.lstrip(".") or "html").lower()
    if name not in CHART_FORMATS:
        raise ParameterError(f"unknown chart format {name!r}", hint=f"use one of {', '.join(CHART_FORMATS)}")
    if name == "html":
        out.write_text(to_html(chart), encoding="utf-8")
    elif name == "svg":
        out.write_text(to_svg(chart), encoding="utf-8")
    elif name == "png":
        import vl_convert as vlc

        out.write_bytes(vlc.vegalite_to_png(chart.to_dict(), vl_version=_vl_version(), scale=2))
    else:
        chart.save(str(out), format="json")
    return out


def use_offline_renderer() -> None:
    """Display charts in notebooks as SVG rendered offline (no script, no CDN, any viewer).

    Example:
        >>> use_offline_renderer(); alt.renderers.active
        'svg'
    """
    alt.renderers.enable("svg")
