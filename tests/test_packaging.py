"""The wheel carries the query files and the schema, and an installed wheel finds them."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: hatchling is a dev dependency, and CI must not need a second download.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
         "--quiet", "-w", str(out)],
        check=True,
    )
    (whl,) = out.glob("forensics-*.whl")
    return whl


def test_wheel_contains_every_query_file_and_the_schema(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    queries = sorted(p.name for p in (ROOT / "queries").glob("*.sql"))
    assert queries, "queries/ has no .sql files"
    missing = [q for q in queries if f"forensics/queries/{q}" not in names]
    assert not missing
    assert {"forensics/schema_tables.sql", "forensics/schema_engine.sql", "forensics/schema.sql"} <= names
    assert "forensics/py.typed" in names


def test_installed_wheel_finds_its_queries_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
    )
    probe = (
        "import forensics, forensics.sqlfiles as s; "
        "print(forensics.__file__); print(str(s.queries_dir())); print(len(s.query_names()))"
    )
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}
    res = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    file_, qdir, count = res.stdout.strip().splitlines()
    assert file_.startswith(str(target)), "imported the checkout instead of the installed wheel"
    assert qdir.startswith(str(target))
    assert int(count) == len(list((ROOT / "queries").glob("*.sql")))


def test_installed_wheel_carries_the_gateway_presets(wheel: Path, tmp_path: Path) -> None:
    """The presets are TOML package data: an installed wheel loads all seven and prints each one."""
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = sorted(p.name for p in (ROOT / "forensics" / "sources" / "gateway" / "presets").glob("*.toml"))
    assert len(shipped) == 7
    assert all(f"forensics/sources/gateway/presets/{n}" in names for n in shipped)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
    )
    probe = ("import forensics.sources.gateway as g, forensics.sources.gateway.presets as p; "
             "print(g.__file__); print(len(g.PRESETS)); print(p.preset_toml('envoy').splitlines()[0])")
    res = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={"PYTHONPATH": str(target)},
                         capture_output=True, text=True, check=True)
    file_, count, first = res.stdout.strip().splitlines()
    assert file_.startswith(str(target)) and int(count) == 7 and first.startswith("# Preset envoy")
