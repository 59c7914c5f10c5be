"""Every notebook runs headless, top to bottom, on the bundled sample (outputs never committed)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _parameterise(nb: nbformat.NotebookNode, case_path: Path) -> None:
    """Point the notebook's `parameters` cell at a temporary case (papermill-style injection)."""
    for cell in nb.cells:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            cell.source += f"\nCASE = {json.dumps(str(case_path))}\n"
            return
    raise AssertionError("notebook has no cell tagged 'parameters'")


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_headless(path: Path, tmp_path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    _parameterise(nb, tmp_path / "case.duckdb")
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{path.name} carries outputs"


def test_there_are_notebooks() -> None:
    assert len(NOTEBOOKS) >= 2
