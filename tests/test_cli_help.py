"""Each analysis command's option help is its query's ``-- param`` line (one place documents a parameter)."""

from __future__ import annotations

import re

import click
import pytest

from forensics.cli import ANALYSIS_COMMANDS, CHART_COMMANDS, CUSTOM_COMMANDS, cli
from forensics.sqlfiles import load_query


@pytest.mark.parametrize("command", sorted(set(ANALYSIS_COMMANDS) - CUSTOM_COMMANDS))
def test_option_help_is_the_query_param_line(command: str) -> None:
    q = load_query(ANALYSIS_COMMANDS[command])
    cmd = cli.commands[command]
    helps = {p.name: p.help or "" for p in cmd.params if isinstance(p, click.Option)}
    for param in q.params:
        first_words = " ".join(re.sub(r"\$(\w+)", r"--\1", param.description).split()[:3]).lower()
        assert helps[param.name].lower().startswith(first_words), (command, param.name, helps[param.name])


def _param_lines(query: str) -> dict[str, str]:
    """Each parameter's ``-- param`` text of a query and of the queries it reads as inputs."""
    q = load_query(query)
    lines = {p.name: p.description for p in q.params}
    for inp in q.inputs:
        lines = {**_param_lines(inp), **lines}
    return lines


WINDOW_FACES = [("report", ("report",), "leak_sources"), ("notifications", ("notifications",), "leak_sources")] + [
    (f"chart {name}", ("chart", name), query) for name, (_, query, _) in sorted(CHART_COMMANDS.items())]


@pytest.mark.parametrize(("what", "path", "query"), WINDOW_FACES, ids=[w[0] for w in WINDOW_FACES])
def test_report_lists_and_charts_take_the_help_of_the_queries_they_run(what: str, path: tuple[str, ...],
                                                                      query: str) -> None:
    cmd: click.Command = cli
    for part in path:
        assert isinstance(cmd, click.Group)
        cmd = cmd.commands[part]
    lines = _param_lines(query)
    options = [p for p in cmd.params if isinstance(p, click.Option) and p.name in lines]
    assert options, what
    for opt in options:
        first_words = " ".join(re.sub(r"\$(\w+)", r"--\1", lines[str(opt.name)]).split()[:3]).lower()
        assert (opt.help or "").lower().startswith(first_words), (what, opt.name, opt.help)
