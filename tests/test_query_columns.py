"""Every query file declares its output columns (``-- columns:`` the CSV contract, ``-- more
columns:`` the rest), and every face writes them: the query's result, the docstring of its
function, ``forensics <command> --format csv`` and ``forensics investigate``'s CSV."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner

import forensics
from forensics import analysis
from forensics.cli import ANALYSIS_COMMANDS, cli
from forensics.pipeline import TABLE_OUTPUTS
from forensics.sqlfiles import load_query, query_names

NAMES = query_names()
COMMAND = {query: command for command, query in ANALYSIS_COMMANDS.items()}


@pytest.mark.parametrize("name", NAMES)
def test_declared_columns_are_the_columns_returned(sample_case: forensics.Case, name: str) -> None:
    q = load_query(name)
    assert q.columns, f"{name}.sql: no '-- columns:' line in its header"
    assert len(set(q.result_columns)) == len(q.result_columns), f"{name}.sql: a column declared twice"
    rel = getattr(analysis, name)(sample_case)
    assert tuple(rel.columns) == q.result_columns, f"{name}.sql: declared vs returned"


@pytest.mark.parametrize("name", [n for n in NAMES if load_query(n).order])
def test_declared_order_names_columns_of_the_result(name: str) -> None:
    q = load_query(name)
    assert q.order is not None
    assert {term.split()[0] for term in q.order.split(",")} <= set(q.result_columns)


@pytest.mark.parametrize("name", NAMES)
def test_docstring_lists_every_parameter_and_column(name: str) -> None:
    doc = getattr(forensics, name).__doc__ or ""
    q = load_query(name)
    for p in q.all_params():
        assert f"    {p.name}: " in doc, (name, p.name)
    for col in q.result_columns:
        assert f"``{col}``" in doc, (name, col)
    assert doc.index("Columns") < doc.index("Example:"), "the generated section goes before the example"


def _header(path: Path) -> list[str]:
    with path.open(encoding="utf-8", newline="") as fh:
        return next(csv.reader(fh))


@pytest.mark.parametrize("name", TABLE_OUTPUTS)
def test_investigate_and_the_command_write_the_same_csv_columns(
    sample_case_path: Path, sample_investigation: Path, tmp_path: Path, name: str
) -> None:
    """Regression: investigate's affected_requests.csv had 16 columns, forensics affected's 12."""
    out = tmp_path / f"{name}.csv"
    res = CliRunner().invoke(cli, [COMMAND[name], str(sample_case_path), "--format", "csv", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert _header(out) == _header(sample_investigation / f"{name}.csv") == list(load_query(name).columns)
