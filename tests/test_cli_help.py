"""Each analysis command's option help is its query's ``-- param`` line (one place documents a parameter)."""

from __future__ import annotations

import re

import click
import pytest

from forensics.cli import ANALYSIS_COMMANDS, CUSTOM_COMMANDS, cli
from forensics.sqlfiles import load_query


@pytest.mark.parametrize("command", sorted(set(ANALYSIS_COMMANDS) - CUSTOM_COMMANDS))
def test_option_help_is_the_query_param_line(command: str) -> None:
    q = load_query(ANALYSIS_COMMANDS[command])
    cmd = cli.commands[command]
    helps = {p.name: p.help or "" for p in cmd.params if isinstance(p, click.Option)}
    for param in q.params:
        first_words = " ".join(re.sub(r"\$(\w+)", r"--\1", param.description).split()[:3]).lower()
        assert helps[param.name].lower().startswith(first_words), (command, param.name, helps[param.name])
