"""The ``forensics`` command: thin faces over library calls.

Each command parses its arguments, calls one library function and renders the result. Errors of
the :class:`~forensics.errors.ForensicsError` family become one line on stderr and exit code 2.
"""

from __future__ import annotations

import datetime as dt
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from forensics import __version__
from forensics.errors import ForensicsError, ParameterError
from forensics.kinds import (
    BACKENDS,
    CHART_FORMATS,
    TABLE_FORMATS,
    Backend,
    ChartFormat,
    TableFormat,
)


class _Group(click.Group):
    """Turn toolkit errors into a one-line message and a non-zero exit, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ForensicsError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)
        except (KeyboardInterrupt, RuntimeError) as exc:
            # DuckDB turns Ctrl-C inside a query into RuntimeError('Query interrupted')
            if isinstance(exc, RuntimeError) and "interrupted" not in str(exc).lower():
                raise
            # the open transaction was rolled back; files finished before stay, and the next run
            # of the same command rolls back anything half-done and reads it again
            click.echo("interrupted: files loaded completely are kept; run the same command again to "
                       "finish (nothing is read twice)", err=True)
            ctx.exit(130)


def _guard(case: Any, *outputs: Path | None) -> None:
    """Refuse outputs that would overwrite the case or one of its evidence files (before any work)."""
    for out in outputs:
        if out is not None:
            case.check_output(out)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="forensics")
def cli() -> None:
    """Which requests, and which customers, did an LLM-serving failure expose?

    \b
    Example:
      forensics sample --out sample_data
      forensics ingest case.duckdb --gateway sample_data/gateway --engine sample_data/engine --engine-tz Asia/Singapore
      forensics affected case.duckdb --format csv -o affected.csv
    """


# -- backends -----------------------------------------------------------------------------------


def _backend_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--backend duckdb|spark`` and ``--spark-master URL``: where a case lives and what queries it."""
    func = click.option("--spark-master", "spark_master", default=None, metavar="URL",
                        help="Spark master for --backend spark (local[4], spark://host:7077, yarn, k8s://...); "
                             "default: the running session, FORENSICS_SPARK_MASTER, else local[*].")(func)
    return click.option("--backend", type=click.Choice(BACKENDS), default="duckdb", show_default=True,
                        help="duckdb: CASE is a DuckDB file; spark: CASE is a Parquet case directory "
                             "(local or s3a://, gs://, abfs://, hdfs://) queried by Spark.")(func)


def _open(case_path: Path | str, backend: Backend, spark_master: str | None) -> Any:
    from forensics.case import open_case

    return open_case(case_path, read_only=True, backend=backend, spark_master=spark_master)


# -- sample -------------------------------------------------------------------------------------


@cli.command()
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write the sample incident into.")
@click.option("--requests", type=int, default=None, help="Number of requests (default: the bundled sample's size).")
@click.option("--seed", type=int, default=None, help="Random seed (default: the bundled sample's seed).")
def sample(out: Path, requests: int | None, seed: int | None) -> None:
    """Generate the sample incident (logs in real formats plus truth.json).

    \b
    Example:
      forensics sample --out sample_data
      forensics sample --out /tmp/big --requests 1000000
    """
    from forensics.sample import generate

    kwargs: dict[str, Any] = {}
    if requests is not None:
        kwargs["requests"] = requests
    if seed is not None:
        kwargs["seed"] = seed
    truth = generate(out, **kwargs)
    leaks = truth.get("leaks", [])
    click.echo(
        f"wrote sample incident to {out}: {truth.get('counts', {}).get('requests_total', '?')} requests, "
        f"{len(leaks)} leaked responses (ground truth in {out / 'truth.json'})"
    )


# -- ingest -------------------------------------------------------------------------------------


@cli.command()
@click.argument("case_path", metavar="CASE.duckdb", type=click.Path(path_type=str))
@click.option("--gateway", "gateway", multiple=True, metavar="PATH",
              help="Gateway log file, directory (recursive) or glob; repeatable.")
@click.option("--gateway-format", default="auto", show_default=True, metavar="NAME",
              help="Preset name, a mapping .toml file, or 'auto' to detect from content.")
@click.option("--gateway-tz", default="UTC", show_default=True, metavar="TZ",
              help="Zone of zone-less gateway timestamps (e.g. Europe/Berlin).")
@click.option("--engine", "engine", multiple=True, metavar="[NODE=]PATH",
              help="SGLang engine/router log file or directory; NODE=PATH names the node; repeatable.")
@click.option("--engine-tz", default="UTC", show_default=True, metavar="TZ|auto",
              help="Zone of the engine's zone-less local timestamps (e.g. Asia/Singapore); "
                   "auto: each file's offset from its collector's UTC times (CRI, journald, ...).")
@click.option("--node-map", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              metavar="FILE", help='TOML [nodes] table of "regex" = "node": pods to logical nodes.')
@click.option("--skip-unreadable", is_flag=True,
              help="List unreadable files and directories as not read instead of stopping.")
@click.option("--quiet", is_flag=True, help="No progress bar; print only the summary.")
@click.option("--replace", is_flag=True, help="--backend spark: write a new Parquet case over an existing one.")
@_backend_options
def ingest(
    case_path: str,
    gateway: tuple[str, ...],
    gateway_format: str,
    gateway_tz: str,
    engine: tuple[str, ...],
    engine_tz: str,
    node_map: Path | None,
    skip_unreadable: bool,
    quiet: bool,
    replace: bool,
    backend: Backend,
    spark_master: str | None,
) -> None:
    """Load gateway and/or engine logs into a case database (created if absent).

    With --backend spark, CASE is a new Parquet case directory and the files are parsed in
    parallel on the Spark executors by the same loaders (paths may be s3a://, gs://, hdfs://...).

    \b
    Example:
      forensics ingest case.duckdb --gateway logs/cloudflare/ --gateway-format cloudflare-http
      forensics ingest case.duckdb --engine prefill-0=logs/p0/ --engine logs/decode/ --engine-tz Asia/Singapore
      forensics ingest case.duckdb --engine node7/var/log/pods/ --engine-tz auto --node-map nodes.toml
      forensics ingest s3a://ir/case1 --backend spark --spark-master yarn --gateway s3a://logs/gw/ --engine s3a://logs/sglang/
    """
    from forensics.case import open_case
    from forensics.sources.summary import IngestSummary

    if not gateway and not engine:
        raise ParameterError("nothing to ingest", hint="pass --gateway PATH and/or --engine PATH")
    if backend == "spark":
        from forensics.spark import ingest as spark_ingest

        done = spark_ingest(case_path, gateway=list(gateway), engine=list(engine), gateway_format=gateway_format,
                            gateway_tz=gateway_tz, engine_tz=engine_tz, node_map=node_map, master=spark_master,
                            replace=replace)
        click.echo(done.summary.render())
        for warning in done.summary.warnings:
            click.echo(f"warning: {warning}", err=True)
        return
    summary = IngestSummary()
    with open_case(case_path) as case:
        if gateway:
            summary.extend(case.ingest_gateway(list(gateway), format=gateway_format, tz=gateway_tz, quiet=quiet,
                                               skip_unreadable=skip_unreadable))
        if engine:
            summary.extend(case.ingest_engine(list(engine), tz=engine_tz, quiet=quiet, node_map=node_map,
                                              skip_unreadable=skip_unreadable))
    click.echo(summary.render())
    for warning in summary.warnings:
        click.echo(f"warning: {warning}", err=True)


@cli.command()
@click.argument("name", required=False)
def preset(name: str | None) -> None:
    """Print a gateway preset as a TOML mapping file (no NAME: list the presets).

    A mapping for a gateway the presets do not know starts as a copy of the closest preset.

    \b
    Example:
      forensics preset
      forensics preset envoy > my-gateway.toml
      forensics ingest case.duckdb --gateway logs/ --gateway-format my-gateway.toml
    """
    from forensics.sources.gateway.presets import PRESETS, preset_toml

    if name is None:
        for spec in PRESETS.values():
            click.echo(f"{spec.name:<24} {spec.layer:<11} {spec.description}")
        return
    click.echo(preset_toml(name), nl=False)


@cli.command()
@click.argument("case_path", metavar="CASE.duckdb", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Rebuild even if they match the evidence.")
def refresh(case_path: Path, force: bool) -> None:
    """Rebuild the case's derived tables (request legs, chains, matches) from its evidence.

    Every ingest ends with it; run it on a case an interrupted ingest or another toolkit version
    left behind, or after editing evidence rows by hand.

    \b
    Example:
      forensics refresh case.duckdb
    """
    from forensics.case import open_case

    with open_case(case_path) as case:
        built = case.refresh(force=force)
    click.echo(f"{case_path}: derived tables {'rebuilt' if built else 'already match the evidence'}")


@cli.command()
def warm() -> None:
    """Compile the log scanners now, so the first ingest on this machine does not wait for it.

    The scanners are compiled on first use and cached on disk (about a minute of CPU once per
    machine and toolkit version; milliseconds to load afterwards). Run it after installing, or
    before timing an ingest. It reads only the bundled sample, into a throw-away case.

    \b
    Example:
      forensics warm
    """
    from forensics.sources.warm import warm_kernels

    click.echo(str(warm_kernels()))


# -- investigate (the scripted pipeline) ------------------------------------------------------------


@cli.command()
@click.argument("case_path", metavar="CASE.duckdb", type=click.Path(path_type=Path))
@click.option("--gateway", "gateway", multiple=True, metavar="PATH", help="Gateway logs; repeatable.")
@click.option("--gateway-format", default="auto", show_default=True, metavar="NAME", help="Preset, mapping .toml or auto.")
@click.option("--gateway-tz", default="UTC", show_default=True, metavar="TZ", help="Zone of zone-less gateway times.")
@click.option("--engine", "engine", multiple=True, metavar="[NODE=]PATH", help="Engine/router logs; repeatable.")
@click.option("--engine-tz", default="UTC", show_default=True, metavar="TZ|auto",
              help="Zone of the engines' local times; auto: from each file's collector times.")
@click.option("--node-map", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              metavar="FILE", help='TOML [nodes] table of "regex" = "node": pods to logical nodes.')
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory for the CSVs, charts, impact report and notification list.")
@click.option("--replace", is_flag=True, help="Start from an empty case (delete CASE.duckdb first).")
@click.option("--skip-unreadable", is_flag=True,
              help="List unreadable files and directories as not read instead of stopping.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@_backend_options
def investigate(
    case_path: Path, gateway: tuple[str, ...], gateway_format: str, gateway_tz: str,
    engine: tuple[str, ...], engine_tz: str, node_map: Path | None, out_dir: Path, replace: bool,
    skip_unreadable: bool, quiet: bool, backend: Backend, spark_master: str | None,
) -> None:
    """Ingest, run every query, write tables, charts, impact report and notification list.

    \b
    Example:
      forensics investigate out/case.duckdb --gateway sample_data/gateway \\
          --engine sample_data/engine --engine-tz Asia/Singapore --out out --replace
    """
    from forensics.pipeline import investigate as run

    if not gateway and not engine:
        raise ParameterError("nothing to investigate", hint="pass --gateway PATH and/or --engine PATH")
    result = run(case_path, out_dir=out_dir, gateway=gateway, engine=engine, gateway_format=gateway_format,
                 gateway_tz=gateway_tz, engine_tz=engine_tz, node_map=node_map, replace=replace, quiet=quiet,
                 skip_unreadable=skip_unreadable, backend=backend, spark_master=spark_master)
    click.echo(result.render())


# -- shared options -----------------------------------------------------------------------------

def _parse_time(value: str | None, option: str) -> dt.datetime | None:
    if value is None:
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ParameterError(f"{option}: {value!r} is not an ISO 8601 time",
                             hint="e.g. 2026-09-02T04:00:00Z") from exc
    if t.tzinfo is not None:
        t = t.astimezone(dt.UTC).replace(tzinfo=None)
    return t


def _query_param_help(query: str | None, param: str) -> str | None:
    """The ``-- param $name TYPE: ...`` line of the query (or of one of its inputs), as option help."""
    if query is None:
        return None
    from forensics.sqlfiles import load_query

    q = load_query(query)
    for p in q.params:
        if p.name == param:
            # the SQL's words for the command line: $end -> --end, NULL -> not given
            text = re.sub(r"\$(\w+)", lambda m: "--" + m.group(1).replace("_", "-"), p.description)
            text = text.replace("(NULL:", "(not given:")
            return text[:1].upper() + text[1:]
    for inp in q.inputs:
        found = _query_param_help(inp, param)
        if found:
            return found
    return None


#: click's name and type of each query parameter that is a command-line option
_PARAM_TYPES: dict[str, Any] = {"limit_tokens": int, "start": str, "end": str, "node": str, "window_s": int,
                                "threshold": int, "request_id": str}


def _param_option(param: str, default: Any, query: str, *,
                  taken: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The click option of one query parameter; its help is the query file's ``-- param`` line (one text).

    ``taken=False``: an option the command shows but its query does not take (giving it is an error).
    """
    own = _query_param_help(query, param)
    if own is None and not taken:
        own = f"Not taken by this command (queries/{query}.sql has no ${param}): giving it is an error."
    if own is None or param not in _PARAM_TYPES:
        raise AssertionError(f"queries/{query}.sql (or its inputs) declares no '-- param ${param}' line "
                             "to be the help of its command-line option")
    return click.option("--" + param.replace("_", "-"), param, type=_PARAM_TYPES[param], default=default,
                        show_default=default is not None, help=own)


def _tenant_option() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option("--tenant", "tenant", multiple=True, metavar="ID",
                        help="Only rows of this tenant (as the gateway logged it); repeatable.")


def _window_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--limit-tokens/--start/--end/--node/--window-s, as forensics affected and sources take them.

    Their help is the ``-- param`` lines of the queries the report and the notification list run
    (leak_sources and its input affected_requests).
    """
    from forensics.analysis import DEFAULT_WINDOW_S  # the one default of the look-back

    for param, default in reversed((("limit_tokens", None), ("start", None), ("end", None), ("node", None),
                                    ("window_s", DEFAULT_WINDOW_S))):
        func = _param_option(param, default, "leak_sources")(func)
    return func


def _window_kwargs(limit_tokens: int | None, start: str | None, end: str | None) -> dict[str, Any]:
    return {"limit_tokens": limit_tokens, "start": _parse_time(start, "--start"), "end": _parse_time(end, "--end")}


def _warn(message: str | None) -> None:
    if message:
        click.echo(f"warning: {message}", err=True)


def _wrote(out: Path | None) -> None:
    if out is not None:
        click.echo(f"wrote {out}", err=True)


# -- report and lists ---------------------------------------------------------------------------


@cli.command()
@click.argument("case_path", metavar="CASE.duckdb", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report to FILE: HTML (self-contained, offline, printable), or Markdown / "
                   "JSON for a .md / .json name.")
@click.option("--markdown", "markdown", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the Markdown report to FILE.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the machine-readable summary (headline numbers, answers, tables) to FILE.")
@click.option("--title", default=None, help="Report title.")
@_window_options
@_backend_options
def report(case_path: Path, out: Path | None, markdown: Path | None, json_path: Path | None, title: str | None,
           limit_tokens: int | None, start: str | None, end: str | None, node: str | None, window_s: int,
           backend: Backend, spark_master: str | None) -> None:
    """The impact report: summary, charts, windows, tenants, pool audit, coverage, evidence.

    Without -o, --markdown or --json the Markdown report goes to stdout. A gateway-only case
    (no engine logs yet) needs --limit-tokens, --start and --end, as forensics affected does.

    \b
    Example:
      forensics report case.duckdb -o impact_report.html --markdown impact_report.md --json impact_report.json
      forensics report gateway-only.duckdb -o report.html --limit-tokens 681274 \\
          --start 2026-09-03T00:00:00Z --end 2026-09-09T15:00:00Z
    """
    from forensics.outputs.report import render_markdown, report_data, write_report

    if node is not None:
        raise ParameterError("forensics report does not take --node", hint="the report covers the whole fleet")
    html = out
    if out is not None and out.suffix.lower() in (".md", ".markdown"):
        html, markdown = None, markdown or out
    elif out is not None and out.suffix.lower() == ".json":
        html, json_path = None, json_path or out
    with _open(case_path, backend, spark_master) as case:
        _guard(case, html, markdown, json_path)
        data = report_data(case, title=title, window_s=window_s, **_window_kwargs(limit_tokens, start, end))
    for w in data.warnings:
        _warn(w)
    if html is None and markdown is None and json_path is None:
        click.echo(render_markdown(data), nl=False)
        return
    for path in write_report(data, html, markdown=markdown, json_path=json_path):
        _wrote(path)


@cli.command()
@click.argument("case_path", metavar="CASE.duckdb", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(TABLE_FORMATS), default=None,
              help="Output format (default: csv for -o FILE.csv, else table).")
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE.")
@click.option("--directory", "directory", type=click.Path(dir_okay=False, path_type=Path),
              help="Customer directory export (CSV: tenant id, company, contact e-mail, account owner) to join; "
                   "tenants it does not list are kept and flagged (in_directory = false).")
@click.option("--packets", "packets", type=click.Path(file_okay=False, path_type=Path),
              help="Also write one folder per tenant to DIR: summary.md and requests.csv (its own ids only).")
@_tenant_option()
@_window_options
@_backend_options
def notifications(case_path: Path, fmt: TableFormat | None, out: Path | None, directory: Path | None,
                  packets: Path | None, tenant: tuple[str, ...], limit_tokens: int | None, start: str | None,
                  end: str | None, node: str | None, window_s: int, backend: Backend, spark_master: str | None) -> None:
    """The customer notification list: one row per tenant to notify, the notice and the request ids.

    notice_type is received-other-data (recipients, listed first), data-possibly-exposed (possible
    sources) or both. A gateway-only case needs --limit-tokens, --start and --end.

    \b
    Example:
      forensics notifications case.duckdb -o notify.csv --directory customers.csv --packets packets/
      forensics notifications case.duckdb --tenant 2c65b0aa72769b98bd0f37e397606ad7
    """
    from forensics import analysis
    from forensics.outputs.export import for_output, write_output
    from forensics.outputs.notifications import for_tenants, with_directory, write_packets
    from forensics.outputs.scope import check_scope, coverage_note

    kwargs = {**_window_kwargs(limit_tokens, start, end), "node": node, "window_s": window_s}
    fmt = fmt or ("csv" if out is not None and out.suffix.lower() == ".csv" else "table")
    with _open(case_path, backend, spark_master) as case:
        _guard(case, out)
        check_scope(case, node=node, tenants=tenant)
        rel = for_output("notifications", for_tenants(analysis.notifications(case, **kwargs), list(tenant)), fmt)
        if directory is not None:
            rel = with_directory(rel, directory)
        params = analysis.parameters_used(case, "notifications", **kwargs)
        params["tenant"] = list(tenant)
        params["directory"] = str(directory) if directory else None
        note = coverage_note(case, node=node)
        params["coverage"] = note
        _warn(note["warning"])
        write_output(rel, fmt, out, params)
        _wrote(out)
        if packets is not None:
            written = write_packets(case, packets, directory=directory, tenants=list(tenant), **kwargs)
            click.echo(f"wrote {len(written)} notification packet(s) to {packets}", err=True)


# -- charts -------------------------------------------------------------------------------------

#: forensics chart NAME -> (function in forensics.outputs.charts, the query it draws)
CHART_COMMANDS: dict[str, tuple[str, str, str]] = {
    "affected-tenants": ("affected_tenants_chart", "affected_tenants",
                         "Bar chart: affected responses per recipient tenant, confirmed and suspected."),
    "affected-timeline": ("affected_timeline_chart", "affected_requests",
                          "Timeline: each affected response at its prompt size, with the admission limit."),
    "exposure-windows": ("exposure_windows_chart", "pool_audit",
                         "Gantt chart: each node start's period, coloured by the pool audit verdict."),
}


@cli.group()
def chart() -> None:
    """Charts as files that open offline: HTML (JavaScript inline), SVG, PNG or Vega-Lite JSON.

    \b
    Example:
      forensics chart affected-timeline case.duckdb -o timeline.svg
      forensics chart exposure-windows case.duckdb -o windows.png
    """


def _chart_command(name: str, func_name: str, query: str, summary: str) -> None:
    from forensics import analysis

    sig = inspect.signature(getattr(analysis, query))
    accepted = [p for p in sig.parameters if p != "case"]

    def run(case_path: Path, out: Path, fmt: ChartFormat | None, backend: Backend, spark_master: str | None,
            **given: Any) -> None:
        from forensics.outputs import charts
        from forensics.outputs.scope import check_scope

        for key in ("start", "end"):
            if key in given:
                given[key] = _parse_time(given[key], f"--{key}")
        with _open(case_path, backend, spark_master) as case:
            _guard(case, out)
            check_scope(case, node=given.get("node"))
            made = getattr(charts, func_name)(case, **given)
            charts.save_chart(made, out, fmt)
        _wrote(out)

    run.__doc__ = (f"{summary}\n\nDraws queries/{query}.sql (Python: forensics.charts.{func_name}).\n\n"
                   f"\b\nExample:\n  forensics chart {name} case.duckdb -o {name}.html\n"
                   f"  forensics chart {name} case.duckdb -o {name}.png")
    decorators: list[Callable[[Callable[..., Any]], Any]] = [
        chart.command(name=name),
        click.argument("case_path", metavar="CASE.duckdb", type=click.Path(path_type=Path)),
        click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
                     help="Write the chart to FILE (format from its suffix unless --format)."),
        click.option("--format", "fmt", type=click.Choice(CHART_FORMATS), default=None,
                     help="html (self-contained, JavaScript inline), svg, png or json (Vega-Lite spec)."),
    ]
    decorators += [_param_option(p, None, query) for p in accepted]
    decorators.append(_backend_options)
    decorated: Any = run
    for deco in reversed(decorators):
        decorated = deco(decorated)


for _name, (_func, _query, _summary) in CHART_COMMANDS.items():
    _chart_command(_name, _func, _query, _summary)


# -- export -------------------------------------------------------------------------------------


@cli.group()
def export() -> None:
    """Export the case to other investigation tools, or as a Parquet case for Spark.

    \b
    Example:
      forensics export timesketch case.duckdb -o timeline.jsonl
      forensics export parquet case.duckdb case_parquet/
    """


@export.command(name="parquet")
@click.argument("case_path", metavar="CASE.duckdb", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("case_dir", metavar="CASE_DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--replace", is_flag=True, help="Overwrite a Parquet case already in CASE_DIR.")
def export_parquet_command(case_path: Path, case_dir: Path, replace: bool) -> None:
    """Write every table of a DuckDB case as a Parquet case (open it with --backend spark).

    Copy CASE_DIR to object storage (s3, gs, abfs, hdfs) for a cluster; the manifest case.json
    lists the tables, their parts and row counts.

    \b
    Example:
      forensics export parquet case.duckdb case_parquet/
      forensics affected case_parquet/ --backend spark --format csv -o affected.csv
    """
    from forensics.case import open_case
    from forensics.spark import export_parquet

    with open_case(case_path, read_only=True) as case:
        manifest = export_parquet(case, case_dir, replace=replace)
    rows = sum(t.rows for t in manifest.tables.values())
    click.echo(f"wrote {case_dir}: {len(manifest.tables)} tables, {rows} rows")


@export.command(name="timesketch")
@click.argument("case_path", metavar="CASE.duckdb", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Write the Timesketch JSONL timeline to FILE (import it as it is).")
@_tenant_option()
@click.option("--limit-tokens", "limit_tokens", type=int, default=None,
              help="Override the admission limit derived from the logs (tokens).")
@click.option("--start", "start", default=None, help="Only from this UTC time (ISO 8601).")
@click.option("--end", "end", default=None, help="Only before this UTC time (ISO 8601).")
@click.option("--node", "node", default=None, help="Only requests of this engine node.")
@_backend_options
def export_timesketch(case_path: Path, out: Path, tenant: tuple[str, ...], limit_tokens: int | None,
                      start: str | None, end: str | None, node: str | None, backend: Backend,
                      spark_master: str | None) -> None:
    """A Timesketch timeline (JSONL): every record of the affected requests' evidence, node starts.

    One event per gateway, router and engine record (message, datetime, timestamp, timestamp_desc,
    data_type, node, tenant_id, request_id, evidence file:line), in Timesketch's JSONL import format.

    \b
    Example:
      forensics export timesketch case.duckdb -o timeline.jsonl
      timesketch_importer --sketch_id 1 --timeline_name incident timeline.jsonl
    """
    from forensics import analysis
    from forensics.outputs.notifications import for_tenants
    from forensics.outputs.scope import check_scope
    from forensics.outputs.timesketch import write_timesketch

    with _open(case_path, backend, spark_master) as case:
        _guard(case, out)
        check_scope(case, node=node, tenants=tenant)
        rel = analysis.timeline(case, node=node, **_window_kwargs(limit_tokens, start, end))
        if tenant:
            rel = for_tenants(rel, list(tenant))
        written = write_timesketch(rel, out)
    if written.skipped:
        _warn(f"{written.skipped} record(s) without a timestamp could not be placed on the timeline and were "
              "left out (see forensics timeline for them)")
    click.echo(f"wrote {written.events} event(s) to {out}", err=True)


# -- analysis -----------------------------------------------------------------------------------

#: CLI command -> function name in forensics.analysis (and queries/<name>.sql)
ANALYSIS_COMMANDS: dict[str, str] = {
    "audit": "pool_audit",
    "windows": "exposure_windows",
    "chain": "request_chain",
    "ambiguous": "ambiguous_matches",
    "affected": "affected_requests",
    "tenants": "affected_tenants",
    "sources": "leak_sources",
    "mismatch": "token_mismatch",
    "hidden": "hidden_errors",
    "postfix": "post_fix_check",
    "summary": "impact_summary",
    "coverage": "coverage",
    "notifications": "notifications",
    "notification-requests": "notification_requests",
    "timeline": "timeline",
    "gaps": "evidence_gaps",
    "probing": "probing_tenants",
}

#: commands defined above with options of their own (the loop below makes the others)
CUSTOM_COMMANDS = frozenset({"notifications"})

#: Commands with a --tenant filter -> the columns it matches (sources: recipient or source).
TENANT_FILTERS: dict[str, tuple[str, ...]] = {
    "affected": ("tenant_id",),
    "tenants": ("tenant_id",),
    "sources": ("tenant_id", "source_tenant_id"),
    "notification-requests": ("tenant_id",),
    "timeline": ("tenant_id",),
}

#: Commands whose answer rests on the node starts being judged: they warn (stderr) and record in
#: their parameters any node start in scope whose pool or context the logs do not show.
COVERAGE_WARNED = frozenset({"affected", "tenants", "sources", "notification-requests", "timeline"})

#: Options every analysis command shows (an error names the ones a command does not take).
_COMMON_PARAMS = ("limit_tokens", "start", "end", "node")


def _analysis_command(command: str, func_name: str) -> None:
    from forensics import analysis

    func: Callable[..., Any] = getattr(analysis, func_name)
    sig = inspect.signature(func)
    accepted = [name for name in sig.parameters if name != "case"]
    shown = list(_COMMON_PARAMS) + [name for name in accepted if name not in _COMMON_PARAMS]

    def run(case_path: Path, fmt: TableFormat, out: Path | None, show_sql: bool, backend: Backend, spark_master: str | None,
            **given: Any) -> None:
        from forensics.outputs.export import for_output, write_output
        from forensics.outputs.notifications import for_tenants
        from forensics.outputs.scope import check_scope, coverage_note
        from forensics.sqlfiles import load_query

        tenants = list(given.pop("tenant", ()) or ())
        for key in ("start", "end"):
            if key in given:
                given[key] = _parse_time(given[key], f"--{key}")
        for key, value in given.items():
            if value is not None and key not in accepted:
                raise ParameterError(f"forensics {command} does not take --{key.replace('_', '-')}",
                                     hint=f"see forensics {command} --help")
        kwargs = {k: v for k, v in given.items() if k in accepted}
        if show_sql:
            q = load_query(func_name)
            for name in (*q.inputs, func_name):  # inputs first: it reads them
                click.echo(load_query(name).sql, err=True)
        with _open(case_path, backend, spark_master) as case:
            _guard(case, out)
            check_scope(case, node=kwargs.get("node"), request_id=kwargs.get("request_id"), tenants=tenants)
            rel = func(case, **kwargs)
            if tenants:
                rel = for_tenants(rel, tenants, *TENANT_FILTERS[command])
            # the columns (and order) the query file declares: the same contract as investigate's CSVs
            rel = for_output(func_name, rel, fmt)
            params = analysis.parameters_used(case, func_name, **kwargs)
            if command in TENANT_FILTERS:
                params["tenant"] = tenants
            if command in COVERAGE_WARNED:
                note = coverage_note(case, node=kwargs.get("node"))
                params["coverage"] = note
                _warn(note["warning"])
            # a full export (its file declares an -- order:, a row per request) is read under the
            # export budget, so its sort spills instead of holding every row
            budget = getattr(case, "exporting", None) if load_query(func_name).order else None
            write_output(rel, fmt, out, params, budget=budget)
        _wrote(out)

    doc = (func.__doc__ or "").strip()
    summary_line = doc.splitlines()[0] if doc else func_name
    extra = " ".join(f"--{p.replace('_', '-')} ..." for p in accepted if p not in _COMMON_PARAMS)
    takes = [*("--" + p.replace("_", "-") for p in accepted), *(["--tenant"] if command in TENANT_FILTERS else [])]
    run.__doc__ = (
        f"{summary_line}\n\n"
        f"Runs queries/{func_name}.sql (Python: forensics.{func_name}). Takes: "
        f"{', '.join(takes) or 'no filters'}.\n\n"
        f"\b\nExample:\n  forensics {command} case.duckdb\n"
        f"  forensics {command} case.duckdb --format csv -o {func_name}.csv"
        + (f"\n  forensics {command} case.duckdb {extra}" if extra else "")
    )
    decorators: list[Callable[[Callable[..., Any]], Any]] = [
        cli.command(name=command),
        click.argument("case_path", metavar="CASE.duckdb", type=click.Path(path_type=Path)),
        click.option("--format", "fmt", type=click.Choice(TABLE_FORMATS), default="table", show_default=True,
                     help="Output format: a table fitted to the terminal, csv, json, jsonl or parquet."),
        click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path),
                     help="Write to FILE instead of stdout."),
    ]
    for name in shown:
        param = sig.parameters.get(name)
        default = None if param is None or param.default is inspect.Parameter.empty else param.default
        decorators.append(_param_option(name, default, func_name, taken=name in accepted))
    if command in TENANT_FILTERS:
        decorators.append(_tenant_option())
    decorators.append(click.option("--show-sql", is_flag=True, help="Print the SQL run (to stderr)."))
    decorators.append(_backend_options)
    decorated: Any = run
    for deco in reversed(decorators):
        decorated = deco(decorated)


for _command, _func in ANALYSIS_COMMANDS.items():
    if _command not in CUSTOM_COMMANDS:
        _analysis_command(_command, _func)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``forensics`` console script."""
    cli.main(args=argv, prog_name="forensics")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
