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


def test_a_command_that_draws_charts_never_builds_the_iri_grammars(tmp_path: Path) -> None:
    # jsonschema (under altair) imports rfc3987_syntax when installed: ~35 Lark parsers built at
    # import, 7-9 s of every investigate/report/chart process here (jsonschema#1428)
    not_a_case = tmp_path / "notes.duckdb"
    not_a_case.write_text("notes\n")
    (tmp_path / "evidence").mkdir()
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "forensics", "investigate", str(not_a_case),
                          "--gateway", str(tmp_path / "evidence"), "--out", str(tmp_path / "o"), "--replace"],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "not a case database" in res.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert "altair" in imported and "jsonschema" in imported
    assert "rfc3987_syntax.syntax_helpers" not in imported  # the module that builds them
