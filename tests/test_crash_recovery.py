"""Crash safety: an ingest killed with SIGKILL at any moment, then run again, gives exactly the
result of one clean ingest (same rows in every table, same evidence records, same query outputs,
byte for byte), and the re-run says what it rolled back.

The kills are placed with the loaders' fault-injection points (``FORENSICS_CRASH_AT``, see
``forensics.sources.ledger.crash_point``) in every phase: a gateway batch registered, its rows
written, the commit of its last rows; an engine file registered, a segment committed, the commit
of its last rows, the rebuild of ``engine_starts``; and at two moments in wall-clock time.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import evidence_state

import forensics
from forensics.outputs.export import write_output
from forensics.sample import generate

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A small generated incident in the real formats (hourly .gz gateway files, rotated engine logs)."""
    out = tmp_path_factory.mktemp("incident")
    generate(out, requests=2500, seed=11)
    before = evidence_state([out])
    yield out
    # killed loads never touched the sources (sha256, size, mtime of every file)
    assert evidence_state([out]) == before


def _ingest(case: Path, data: Path, crash: str | None = None, kill_after: float | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env.pop("FORENSICS_CRASH_AT", None)
    if crash:
        env["FORENSICS_CRASH_AT"] = crash
    cmd = [sys.executable, "-m", "forensics", "ingest", str(case), "--gateway", str(data / "gateway"),
           "--engine", str(data / "engine"), "--engine-tz", "Asia/Singapore", "--quiet"]
    if kill_after is None:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    time.sleep(kill_after)
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _fingerprint(case_path: Path, work: Path) -> dict[str, str]:
    """sha256 of every table's rows (sorted; the wall-clock column left out) and of the query outputs."""
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, str] = {}
    with forensics.open_case(case_path, read_only=True) as case:
        for table in case.tables():
            if table in ("schema_info",):
                continue
            dest = work / f"{table}.csv"
            cols = "* EXCLUDE (ingested_at)" if table == "evidence_files" else "*"
            case.con.execute(f"COPY (SELECT {cols} FROM \"{table}\" ORDER BY ALL) TO '{dest}' (HEADER)")
            out[table] = hashlib.sha256(dest.read_bytes()).hexdigest()
        for name in ("affected_requests", "pool_audit", "affected_tenants"):
            dest = work / f"{name}.csv"
            rel = getattr(forensics, name)(case)
            write_output(rel, "csv", dest, forensics.parameters_used(case, name))
            out[name] = hashlib.sha256(dest.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def clean(incident: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], float]:
    """The fingerprint of one clean ingest, and how long it took."""
    d = tmp_path_factory.mktemp("clean")
    t0 = time.perf_counter()
    r = _ingest(d / "case.duckdb", incident)
    took = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    fp = _fingerprint(d / "case.duckdb", d / "out")
    with forensics.open_case(d / "case.duckdb", read_only=True) as case:
        assert case.sql("SELECT count(*) FROM evidence_files WHERE status <> 'done'").fetchall() == [(0,)]
        assert forensics.affected_requests(case).aggregate("count(*)").fetchall()[0][0] > 0
    return fp, took


CRASHES = [
    # label, fault-injection point (kind:event:n[:ms])
    ("gateway batch registered, no rows yet", "gateway:begin:1"),
    ("gateway rows written, counts not yet", "gateway:rows:1"),
    ("gateway during the commit of a batch's last rows", "gateway:commit:1:2"),
    ("gateway second batch's rows written", "gateway:rows:2"),
    ("engine file registered, nothing read", "engine:begin:4"),
    ("engine segment committed, file not finished", "engine:segment:3"),
    ("engine during the commit of a file's last rows", "engine:commit:2:2"),
    ("engine files done, engine_starts not rebuilt", "engine:rebuild:1"),
]


@pytest.mark.parametrize(("label", "crash"), CRASHES, ids=[c[0] for c in CRASHES])
def test_killed_ingest_run_again_equals_a_clean_ingest(incident: Path, clean: tuple[dict[str, str], float],
                                                       tmp_path: Path, label: str, crash: str) -> None:
    case = tmp_path / "case.duckdb"
    killed = _ingest(case, incident, crash=crash)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr)
    again = _ingest(case, incident)
    assert again.returncode == 0, again.stderr
    if crash.startswith(("engine:segment", "gateway:rows")):
        # committed rows of a file not done: the re-run says it rolled them back (and read it again)
        assert "interrupted loads rolled back and read again" in again.stdout, again.stdout
    assert _fingerprint(case, tmp_path / "out") == clean[0]


@pytest.mark.parametrize("fraction", [0.3, 0.75])
def test_killed_at_a_moment_in_time_run_again_equals_a_clean_ingest(
        incident: Path, clean: tuple[dict[str, str], float], tmp_path: Path, fraction: float) -> None:
    case = tmp_path / "case.duckdb"
    _ingest(case, incident, kill_after=max(0.5, clean[1] * fraction))
    again = _ingest(case, incident)
    assert again.returncode == 0, again.stderr
    assert _fingerprint(case, tmp_path / "out") == clean[0]
