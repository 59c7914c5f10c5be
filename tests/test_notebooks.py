"""Every notebook runs headless through papermill on the bundled sample (outputs never committed):
its parameters cell takes the injected values, its last cell asserts the key numbers (against the
sample's truth), its charts are SVG that any viewer shows offline, and no table hides columns."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _outputs(nb: nbformat.NotebookNode) -> list[dict[str, object]]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


@pytest.fixture
def kernel_like_the_console_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The notebooks' kernels start as the toolkit's own processes do (``skip_iri_grammars``):
    without it each kernel's first chart import spends ~7 s building jsonschema's IRI grammars.
    An IPython start-up file of a private IPYTHONDIR, which the kernel papermill starts inherits."""
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-forensics.py").write_text("from forensics.__main__ import skip_iri_grammars\nskip_iri_grammars()\n")
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
@pytest.mark.usefixtures("kernel_like_the_console_script")
def test_notebook_runs_through_papermill(path: Path, tmp_path: Path) -> None:
    import papermill

    out = tmp_path / path.name
    papermill.execute_notebook(
        str(path), str(out), kernel_name="python3", cwd=str(path.parent), progress_bar=False,
        parameters={"CASE": str(tmp_path / "case.duckdb"), "OUT": str(tmp_path / "out"),
                    "TRUTH": str(ROOT / "sample_data" / "truth.json")},
    )
    nb = nbformat.read(out, as_version=4)
    outputs = _outputs(nb)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    # papermill put the values after the parameters cell
    injected = next(c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", []))
    assert str(tmp_path / "case.duckdb") in injected.source
    # the last cell checked the key numbers and said so
    last = nb.cells[-1]
    assert last.cell_type == "code" and "assert" in last.source
    text = "".join(str(o.get("text", "")) for o in last.get("outputs", []))
    assert text.startswith("key numbers verified:"), text
    # charts are SVG (no script, no CDN); no wide table was truncated
    chart_cells = [c for c in nb.cells if c.cell_type == "code" and "_chart(" in c.source]
    for cell in chart_cells:
        data = [o.get("data", {}) for o in cell.outputs]
        assert any("image/svg+xml" in d for d in data), cell.source
        assert not any("text/html" in d for d in data), cell.source
    for o in outputs:
        html = str(o.get("data", {}).get("text/html", "")) if isinstance(o.get("data"), dict) else ""
        for head in re.findall(r"<thead>.*?</thead>", html, flags=re.S):
            assert "<th>...</th>" not in head, "a wide table hid columns"
        assert "cdn.jsdelivr" not in html


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{path.name} carries outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_has_a_parameters_cell_and_a_checking_last_cell(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "CASE =" in tagged[0].source and "TRUTH =" in tagged[0].source
    assert nb.cells[-1].cell_type == "code" and "assert " in nb.cells[-1].source
    assert json.loads(json.dumps(nb.metadata))["kernelspec"]["name"] == "python3"


def test_there_are_notebooks_for_each_workflow() -> None:
    assert [p.name for p in NOTEBOOKS] == ["01_investigation.ipynb", "02_fleet_pool_audit.ipynb",
                                           "03_notifications.ipynb"]
