"""The impact report as one self-contained, printable HTML file that needs no network.

Charts are rendered offline to SVG (``vl-convert``) and inlined; the page runs no script at all
(its Content-Security-Policy forbids scripts and every network fetch), so it shows the same in a
browser with no internet, in a mail client's preview and on paper (A4 or Letter: the page CSS
leaves the paper size to the printer). Every value from the logs is HTML-escaped; the summary is
also embedded as JSON (``<script type="application/json" id="forensics-summary">``, written so
no ``</script>`` can occur in it) for tools that read the file.

Numbers carry ``data-metric`` attributes and table cells ``data-col``: the browser test reads them
back and compares them with the query results.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pandas as pd

from forensics.outputs.escape import html_text, json_for_script
from forensics.outputs.export import rows_for_output, text_value

if TYPE_CHECKING:
    from forensics.outputs.report import ReportData, Section

#: Figures shown as cards above the summary, in order: (metric, label).
KEY_FIGURES = (
    ("n_confirmed", "confirmed affected responses"),
    ("n_suspected", "suspected affected responses"),
    ("n_recipient_tenants", "tenants that received others' data"),
    ("n_source_tenants", "tenants whose data may have been exposed"),
    ("n_source_requests", "source requests"),
    ("n_tenants_to_notify", "tenants to notify"),
    ("n_exposed_nodes", "exposed nodes"),
    ("n_unknown_starts", "node starts unknown"),
    ("n_evidence_gaps", "files or paths not read whole"),
)

CSS = """
:root { --bad: #c0392b; --ok: #1e8449; --unknown: #6c7a89; --warn: #b9770e; --ink: #1c2833; --rule: #d5d8dc; }
* { box-sizing: border-box; }
body { font-family: -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: var(--ink);
       margin: 0 auto; max-width: 1100px; padding: 1.5rem; line-height: 1.4; font-size: 14px; }
h1 { font-size: 1.7rem; margin: 0 0 .3rem; }
h2 { font-size: 1.2rem; border-bottom: 2px solid var(--rule); padding-bottom: .2rem; margin-top: 2rem; }
p.meta, p.note, figcaption { color: #566573; font-size: .9em; }
.warning { border-left: 4px solid var(--warn); background: #fef5e7; padding: .5rem .8rem; margin: .6rem 0; }
.figures { display: flex; flex-wrap: wrap; gap: .6rem; margin: 1rem 0; }
.figure { border: 1px solid var(--rule); border-radius: 6px; padding: .5rem .8rem; min-width: 9.5rem; }
.figure .n { display: block; font-size: 1.6rem; font-weight: 700; }
.figure .label { font-size: .8em; color: #566573; }
table { border-collapse: collapse; width: 100%; margin: .4rem 0 1rem; font-size: .85em; }
th, td { border-bottom: 1px solid var(--rule); padding: .25rem .4rem; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
th { background: #f4f6f7; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.long { word-break: break-all; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .9em; }
td.null { color: #aab7b8; }
table.summary td:first-child { width: 17rem; font-weight: 600; }
.verdict { font-weight: 700; padding: 0 .35rem; border-radius: 3px; color: #fff; }
.verdict-yes { background: var(--bad); } .verdict-no { background: var(--ok); }
.verdict-unknown { background: var(--unknown); }
tr[data-answer="over"] .verdict-yes, tr[data-answer="evidence"] .verdict-yes { background: var(--ok); }
tr[data-answer="over"] .verdict-no, tr[data-answer="evidence"] .verdict-no { background: var(--bad); }
.warning.partial { border-left-color: var(--bad); background: #fdedec; font-weight: 600; }
figure.chart { margin: 1rem 0; page-break-inside: avoid; break-inside: avoid; }
figure.chart svg { max-width: 100%; height: auto; }
code { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .9em; }
.more { font-style: italic; color: #566573; }
@page { margin: 14mm 12mm; }
@media print {
  body { max-width: none; padding: 0; font-size: 9pt; }
  h2 { break-after: avoid; page-break-after: avoid; }
  tr, .figure, figure.chart { break-inside: avoid; page-break-inside: avoid; }
  thead { display: table-header-group; }
  section.page { break-before: page; page-break-before: always; }
  .figure .n { font-size: 14pt; }
}
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

_NUMERIC = re.compile(r"^-?\d+(\.\d+)?$")


def _svg(chart: Any) -> str:
    from forensics.outputs.charts import to_svg

    svg = to_svg(chart)
    _check_svg(svg)
    return re.sub(r"^<\?xml[^>]*>\s*", "", svg)


def _check_svg(svg: str) -> None:
    """Refuse SVG that could run or fetch anything (vl-convert escapes data; this makes sure).

    Example:
        >>> _check_svg('<svg xmlns="http://www.w3.org/2000/svg"><text>&lt;script&gt;</text></svg>')
        >>> _check_svg('<svg xmlns="http://www.w3.org/2000/svg"><script>x</script></svg>')
        Traceback (most recent call last):
        ...
        ValueError: chart SVG contains active content: script
    """
    import xml.etree.ElementTree as ET

    for el in ET.fromstring(svg).iter():
        tag = el.tag.rsplit("}", 1)[-1].lower()
        if tag in ("script", "foreignobject", "iframe", "object", "embed"):
            raise ValueError(f"chart SVG contains active content: {tag}")
        for name, value in el.attrib.items():
            local = name.rsplit("}", 1)[-1].lower()
            if local.startswith("on") or (local == "href" and not value.startswith(("#", "data:image/"))):
                raise ValueError(f"chart SVG contains active content: {tag} {local}")


def _charts(data: ReportData) -> list[tuple[str, str, str]]:
    from forensics.outputs import charts

    out = []
    affected = data.chart_frames["affected"]
    tenants = data.chart_frames["tenants"]
    audit = data.chart_frames["audit"]
    if len(affected):
        out.append(("timeline", "Timeline of the affected responses: prompt size over time; the dashed line "
                    "is the admission limit.", _svg(charts.timeline_chart(affected).properties(width=760, height=300))))
    if len(audit):
        out.append(("windows", "Exposure windows per node: each start's period, coloured by the pool "
                    "audit verdict.", _svg(charts.windows_chart(audit).properties(width=760))))
    if len(tenants):
        out.append(("tenants", "Affected responses per recipient tenant.",
                    _svg(charts.tenants_chart(tenants).properties(width=640))))
    return out


def _table(section: Section, max_rows: int) -> str:
    frame = section.frame
    if frame.empty:
        return f'<p class="none" data-table="{html_text(section.key)}" data-rows="0">(none)</p>\n'
    names, rows = rows_for_output(frame.head(max_rows))
    numeric = {
        n for n in names
        if pd.api.types.is_numeric_dtype(frame[n]) and not pd.api.types.is_bool_dtype(frame[n])
    }
    head = "".join(f'<th data-col="{html_text(n)}">{html_text(n)}</th>' for n in names)
    body = []
    for row in rows:
        cells = []
        for n, v in zip(names, row, strict=True):
            cls = ["num"] if n in numeric else []
            if n in section.long_columns:
                cls.append("long")
            if v is None:
                cls.append("null")
            text = "" if v is None else text_value(v)
            cells.append(f'<td data-col="{html_text(n)}"{_cls(cls)}>{html_text(text)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = ""
    if len(frame) > max_rows:
        more = f'<p class="more">{len(frame) - max_rows:,} more rows: see the CSV outputs.</p>\n'
    return (f'<table data-table="{html_text(section.key)}" data-rows="{len(frame)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>\n" + "\n".join(body) + "\n</tbody></table>\n" + more)


def _cls(classes: list[str]) -> str:
    return f' class="{" ".join(classes)}"' if classes else ""


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "n/a" if value is None else ("yes" if value else "no")
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _answer_html(a: Any) -> str:
    text = html_text(a.text)
    if a.verdict in ("yes", "no", "unknown") and a.text.startswith(a.verdict):
        text = f'<span class="verdict verdict-{a.verdict}">{a.verdict}</span>' + text[len(a.verdict):]
    elif a.strong and html_text(a.strong) in text:
        text = text.replace(html_text(a.strong), f"<strong>{html_text(a.strong)}</strong>", 1)
    return text


def render_html(data: ReportData, *, max_rows: int | None = None) -> str:
    """The report as one HTML page: no script, no network, charts inline as SVG, printable.

    Example:
        >>> from forensics.outputs.report import report_data
        >>> from forensics.sample import sample_case
        >>> page = render_html(report_data(sample_case()))
        >>> page.count("<svg") >= 1, "cdn." in page
        (True, False)
    """
    from forensics.outputs.report import HTML_MAX_ROWS, summary_dict

    limit = max_rows if max_rows is not None else HTML_MAX_ROWS
    title = html_text(data.title)
    stamp = f" on {html_text(data.generated_at)}" if data.generated_at else ""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{title}</title>",
        f"<style>{CSS}</style>",
        "</head>",
        "<body>",
        "<header>",
        f"<h1>{title}</h1>",
        f'<p class="meta">Produced by forensics {html_text(data.toolkit_version)}{stamp} from the case '
        f"<code>{html_text(data.case_name)}</code>. Every number comes from a query in <code>queries/</code> "
        "and can be reproduced with the <code>forensics</code> command named next to it. No prompt or "
        "response text is quoted. This file loads nothing from the network.</p>",
        "</header>",
    ]
    for w in data.warnings:
        cls = "warning partial" if w.startswith("PARTIAL EVIDENCE") else "warning"
        parts.append(f'<p class="{cls}" data-warning>Warning: {html_text(w)}</p>')
    parts.append('<section id="summary"><h2>Summary</h2>')
    parts.append('<div class="figures">')
    for metric, label in KEY_FIGURES:
        value = data.numbers.get(metric)
        parts.append(f'<div class="figure"><span class="n" data-metric="{metric}">{html_text(_fmt(value))}</span>'
                     f'<span class="label">{html_text(label)}</span></div>')
    parts.append("</div>")
    parts.append('<table class="summary"><thead><tr><th>question</th><th>answer</th><th>command</th></tr></thead><tbody>')
    for a in data.answers:
        verdict = f' data-verdict="{html_text(a.verdict)}"' if a.verdict else ""
        cmd = f"<code>{html_text(a.command)}</code>" if a.command else ""
        parts.append(f'<tr data-answer="{html_text(a.key)}"{verdict}><td>{html_text(a.question)}</td>'
                     f"<td>{_answer_html(a)}</td><td>{cmd}</td></tr>")
    parts.append("</tbody></table></section>")

    charts = _charts(data)
    if charts:
        parts.append('<section id="charts"><h2>Charts</h2>')
        for key, caption, svg in charts:
            parts.append(f'<figure class="chart" data-chart="{key}">{svg}<figcaption>{html_text(caption)}</figcaption></figure>')
        parts.append("</section>")
    order = ("windows", "tenants", "sources", "affected", "audit", "postfix", "abuse", "coverage", "coverage_files",
             "gaps", "evidence", "files")
    for key in order:
        s = data.sections[key]
        page = ' class="page"' if key in ("affected", "files") else ""
        parts.append(f'<section id="{html_text(key)}"{page}><h2>{html_text(s.title)}</h2>')
        if s.note:
            parts.append(f'<p class="note">{html_text(s.note)}</p>')
        parts.append(_table(s, limit))
        parts.append("</section>")
    import json

    params = json.dumps(data.parameters, indent=2, sort_keys=True, default=str)
    parts.append(f'<section id="parameters"><h2>Parameters</h2><pre><code>{html_text(params)}</code></pre></section>')
    parts.append('<script type="application/json" id="forensics-summary">'
                 + json_for_script(summary_dict(data), default=str, sort_keys=True) + "</script>")
    parts.append("</body>")
    parts.append("</html>")
    return "\n".join(parts) + "\n"
