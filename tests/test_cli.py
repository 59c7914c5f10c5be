"""The CLI through its real entry points: help with examples, version, one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics import __version__
from forensics.cli import cli

COMMANDS = sorted(cli.commands)


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forensics", *args], capture_output=True, text=True, cwd=cwd
    )


def test_version_through_python_dash_m() -> None:
    res = run("--version")
    assert res.returncode == 0
    assert __version__ in res.stdout


def test_console_script_is_installed() -> None:
    exe = Path(sys.executable).with_name("forensics")
    res = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    assert res.returncode == 0 and __version__ in res.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command: str) -> None:
    res = CliRunner().invoke(cli, [command, "--help"])
    assert res.exit_code == 0, res.output
    assert "Example" in res.output, f"forensics {command} --help shows no example"


@pytest.mark.parametrize(
    "args, message",
    [
        (["ingest", "{tmp}/c.duckdb"], "nothing to ingest"),
        (["ingest", "{tmp}/c.duckdb", "--gateway", "{tmp}/missing.ndjson"], "no such file or directory"),
        (["audit", "{tmp}/absent.duckdb"], "does not exist"),
    ],
)
def test_user_mistakes_give_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    res = run(*[a.format(tmp=tmp_path) for a in args])
    assert res.returncode == 2, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ") and message in lines[0]
    assert "Traceback" not in res.stderr
