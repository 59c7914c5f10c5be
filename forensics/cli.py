"""The ``forensics`` command: thin faces over library calls.

Each command parses its arguments, calls one library function and renders the result. Errors of
the :class:`~forensics.errors.ForensicsError` family become one line on stderr and exit code 2.
"""

from __future__ import annotations

import datetime as dt
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from forensics import __version__
from forensics.errors import ForensicsError, ParameterError


class _Group(click.Group):
    """Turn toolkit errors into a one-line message and a non-zero exit, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ForensicsError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)


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
@click.argument("case_path", metavar="CASE.duckdb", type=click.Path(dir_okay=False, path_type=Path))
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
@click.option("--quiet", is_flag=True, help="No progress bar; print only the summary.")
def ingest(
    case_path: Path,
    gateway: tuple[str, ...],
    gateway_format: str,
    gateway_tz: str,
    engine: tuple[str, ...],
    engine_tz: str,
    node_map: Path | None,
    quiet: bool,
) -> None:
    """Load gateway and/or engine logs into a case database (created if absent).

    \b
    Example:
      forensics ingest case.duckdb --gateway logs/cloudflare/ --gateway-format cloudflare-http
      forensics ingest case.duckdb --engine prefill-0=logs/p0/ --engine logs/decode/ --engine-tz Asia/Singapore
      forensics ingest case.duckdb --engine node7/var/log/pods/ --engine-tz auto --node-map nodes.toml
    """
    from forensics.case import open_case
    from forensics.sources.summary import IngestSummary

    if not gateway and not engine:
        raise ParameterError("nothing to ingest", hint="pass --gateway PATH and/or --engine PATH")
    summary = IngestSummary()
    with open_case(case_path) as case:
        if gateway:
            summary.extend(case.ingest_gateway(list(gateway), format=gateway_format, tz=gateway_tz, quiet=quiet))
        if engine:
            summary.extend(case.ingest_engine(list(engine), tz=engine_tz, quiet=quiet, node_map=node_map))
    click.echo(summary.render())
    for warning in summary.warnings:
        click.echo(f"warning: {warning}", err=True)


# -- investigate (the scripted pipeline) ------------------------------------------------------------


@cli.command()
@click.argument("case_path", metavar="CASE.duckdb", type=click.Path(dir_okay=False, path_type=Path))
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
@click.option("--quiet", is_flag=True, help="No progress bar.")
def investigate(
    case_path: Path, gateway: tuple[str, ...], gateway_format: str, gateway_tz: str,
    engine: tuple[str, ...], engine_tz: str, node_map: Path | None, out_dir: Path, replace: bool, quiet: bool,
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
                 gateway_tz=gateway_tz, engine_tz=engine_tz, node_map=node_map, replace=replace, quiet=quiet)
    click.echo(result.render())


@cli.command()
@click.argument("case_path", metavar="CASE.duckdb", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE.")
@click.option("--title", default=None, help="Report title.")
def report(case_path: Path, out: Path | None, title: str | None) -> None:
    """The impact report (Markdown): window, threshold, responses, tenants, evidence.

    \b
    Example:
      forensics report case.duckdb -o impact_report.md
    """
    from forensics.case import open_case
    from forensics.outputs.report import impact_report

    with open_case(case_path, read_only=True) as case:
        text = impact_report(case, title=title)
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        click.echo(f"wrote {out}", err=True)


@cli.command()
@click.argument("case_path", metavar="CASE.duckdb", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "parquet"]), default="table",
              show_default=True, help="Output format.")
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE.")
@click.option("--window-s", type=int, default=600, show_default=True,
              help="Look-back (seconds) for tenants whose data may have been exposed.")
def notifications(case_path: Path, fmt: str, out: Path | None, window_s: int) -> None:
    """The customer notification list: one row per tenant to notify, and why.

    \b
    Example:
      forensics notifications case.duckdb --format csv -o notifications.csv
    """
    from forensics.case import open_case
    from forensics.outputs.export import write_output
    from forensics.outputs.notifications import notifications as build

    with open_case(case_path, read_only=True) as case:
        write_output(build(case, window_s=window_s), fmt, out, {"window_s": window_s})


# -- analysis -----------------------------------------------------------------------------------

#: CLI command -> function name in forensics.analysis (and queries/<name>.sql)
ANALYSIS_COMMANDS: dict[str, str] = {
    "audit": "pool_audit",
    "windows": "exposure_windows",
    "chain": "request_chain",
    "affected": "affected_requests",
    "tenants": "affected_tenants",
    "sources": "leak_sources",
    "mismatch": "token_mismatch",
    "hidden": "hidden_errors",
    "postfix": "post_fix_check",
}

#: CSV column contracts (issue 5): ``--format csv`` writes exactly these columns, in this order.
#: The relation (Python, table, JSON, Parquet) keeps its extra columns (``request_ids``).
CSV_COLUMNS: dict[str, tuple[str, ...]] = {
    "affected": ("request_id", "header_request_id", "tenant_id", "ts", "prompt_tokens", "status",
                 "prefill_node", "decode_node", "admission_limit", "confidence", "reasons", "evidence"),
    "tenants": ("tenant_id", "n_requests", "n_confirmed", "n_suspected", "first_ts", "last_ts"),
}

#: Output order of the commands whose query returns rows in no particular order (request_chain is a
#: full export of millions of rows: the query leaves sorting to the caller, the command sorts).
CLI_ORDER: dict[str, str] = {
    "chain": "ts, request_id, evidence, bootstrap_room, prefill_rid, decode_rid",
}

#: Options every analysis command shows (an error names the ones a command does not take).
_COMMON_PARAMS = ("limit_tokens", "start", "end", "node")


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


def _param_option(param: str, default: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The click option of one query parameter (by name; the query file documents its meaning)."""
    if param == "limit_tokens":
        return click.option("--limit-tokens", "limit_tokens", type=int, default=None,
                            help="Override the admission limit derived from the logs (tokens).")
    if param == "start":
        return click.option("--start", "start", default=None,
                            help="Only from this UTC time (ISO 8601); with --end, the exposure window to use.")
    if param == "end":
        return click.option("--end", "end", default=None, help="Only before this UTC time (ISO 8601).")
    if param == "node":
        return click.option("--node", "node", default=None, help="Only this engine node.")
    if param == "window_s":
        return click.option("--window-s", "window_s", type=int, default=default, show_default=True,
                            help="Look-back before the affected decode start, in seconds.")
    if param == "request_id":
        return click.option("--request-id", "request_id", default=None,
                            help="Only this request (gateway id, x-request-id or engine rid).")
    raise AssertionError(f"no CLI option defined for query parameter {param!r}")


def _analysis_command(command: str, func_name: str) -> None:
    from forensics import analysis

    func: Callable[..., Any] = getattr(analysis, func_name)
    sig = inspect.signature(func)
    accepted = [name for name in sig.parameters if name != "case"]
    shown = list(_COMMON_PARAMS) + [name for name in accepted if name not in _COMMON_PARAMS]

    def run(case_path: Path, fmt: str, out: Path | None, show_sql: bool, **given: Any) -> None:
        from forensics.case import open_case
        from forensics.outputs.export import write_output
        from forensics.sqlfiles import load_query

        for key in ("start", "end"):
            if key in given:
                given[key] = _parse_time(given[key], f"--{key}")
        for key, value in given.items():
            if value is not None and key not in accepted:
                raise ParameterError(f"forensics {command} does not take --{key.replace('_', '-')}",
                                     hint=f"see forensics {command} --help")
        kwargs = {k: v for k, v in given.items() if k in accepted}
        if show_sql:
            for name in (*load_query(func_name).inputs, func_name):  # inputs first: it reads them
                click.echo(load_query(name).sql, err=True)
        with open_case(case_path, read_only=True) as case:
            rel = func(case, **kwargs)
            if command in CLI_ORDER:
                rel = rel.order(CLI_ORDER[command])
            if fmt == "csv" and command in CSV_COLUMNS:
                rel = rel.select(*(f'"{col}"' for col in CSV_COLUMNS[command]))
            params = analysis.parameters_used(case, func_name, **kwargs)
            write_output(rel, fmt, out, params)
        if out is not None:
            click.echo(f"wrote {out}", err=True)

    doc = (func.__doc__ or "").strip()
    summary_line = doc.splitlines()[0] if doc else func_name
    extra = " ".join(f"--{p.replace('_', '-')} ..." for p in accepted if p not in _COMMON_PARAMS)
    run.__doc__ = (
        f"{summary_line}\n\n"
        f"Runs queries/{func_name}.sql (Python: forensics.{func_name}). Takes: "
        f"{', '.join('--' + p.replace('_', '-') for p in accepted) or 'no filters'}.\n\n"
        f"\b\nExample:\n  forensics {command} case.duckdb\n"
        f"  forensics {command} case.duckdb --format csv -o {func_name}.csv"
        + (f"\n  forensics {command} case.duckdb {extra}" if extra else "")
    )
    decorators: list[Callable[[Callable[..., Any]], Any]] = [
        cli.command(name=command),
        click.argument("case_path", metavar="CASE.duckdb", type=click.Path(dir_okay=False, path_type=Path)),
        click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "parquet"]),
                     default="table", show_default=True, help="Output format."),
        click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path),
                     help="Write to FILE instead of stdout."),
    ]
    for name in shown:
        param = sig.parameters.get(name)
        default = None if param is None or param.default is inspect.Parameter.empty else param.default
        decorators.append(_param_option(name, default))
    decorators.append(click.option("--show-sql", is_flag=True, help="Print the SQL run (to stderr)."))
    decorated: Any = run
    for deco in reversed(decorators):
        decorated = deco(decorated)


for _command, _func in ANALYSIS_COMMANDS.items():
    _analysis_command(_command, _func)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``forensics`` console script."""
    cli.main(args=argv, prog_name="forensics")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
