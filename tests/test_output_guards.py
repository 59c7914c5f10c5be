"""The case and the evidence are never overwritten or deleted by an output, and bad destinations
fail in one line before any work is done (through the real entry point).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import forensics

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "gateway"
SAMPLE = ROOT / "sample_data"


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True,
                          cwd=cwd, check=False)


@pytest.fixture
def case_with_evidence(tmp_path: Path) -> tuple[Path, Path]:
    ev = tmp_path / "evidence" / "cf.ndjson"
    ev.parent.mkdir()
    ev.write_bytes((FIX / "cloudflare_http_ns.ndjson").read_bytes())
    db = tmp_path / "case.duckdb"
    with forensics.open_case(db) as case:
        case.ingest_gateway(ev)
    return db, ev


def _state(p: Path) -> tuple[str, int, int]:
    return hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_size, p.stat().st_mtime_ns


OUTPUT_CASES = [
    # label, argument builder (case, evidence, tmp) -> CLI args, message in the one-line error
    ("-o onto an evidence file", lambda db, ev, d: ["affected", str(db), "--format", "csv", "-o", str(ev)],
     "it is an evidence file"),
    ("-o onto the case itself", lambda db, ev, d: ["audit", str(db), "--format", "csv", "-o", str(db)],
     "it is the case database"),
    ("report -o onto an evidence file", lambda db, ev, d: ["report", str(db), "-o", str(ev)], "it is an evidence file"),
    ("-o into a missing directory", lambda db, ev, d: ["audit", str(db), "--format", "csv", "-o",
                                                       str(d / "nope" / "x.csv")], "does not exist"),
    ("investigate --out inside the evidence", lambda db, ev, d: [
        "investigate", str(d / "new.duckdb"), "--gateway", str(ev.parent), "--out", str(ev.parent / "out")],
     "inside the evidence directory"),
    ("investigate onto an evidence file as the case", lambda db, ev, d: [
        "investigate", str(ev), "--gateway", str(ev.parent), "--out", str(d / "out"), "--replace"],
     "it is an evidence file"),
]


@pytest.mark.parametrize(("label", "args", "message"), OUTPUT_CASES, ids=[c[0] for c in OUTPUT_CASES])
def test_outputs_never_overwrite_evidence_or_the_case(case_with_evidence: tuple[Path, Path], tmp_path: Path,
                                                      label: str, args, message: str) -> None:  # type: ignore[no-untyped-def]
    db, ev = case_with_evidence
    before = (_state(db), _state(ev))
    r = run(*args(db, ev, tmp_path))
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert (_state(db), _state(ev)) == before


def test_unwritable_out_fails_before_ingest(tmp_path: Path) -> None:
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o500)
    try:
        if os.access(out, os.W_OK):
            pytest.skip("running as root: a read-only directory is still writable")
        t0 = time.perf_counter()
        r = run("investigate", str(tmp_path / "c.duckdb"), "--gateway", str(FIX / "envoy_new.ndjson"),
                "--out", str(out / "sub"))
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "cannot" in r.stderr
        assert not (tmp_path / "c.duckdb").exists()  # nothing was ingested
        assert time.perf_counter() - t0 < 60
    finally:
        out.chmod(0o700)


def test_replace_refuses_a_case_another_process_is_writing(tmp_path: Path) -> None:
    db = tmp_path / "busy.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, duckdb; c = duckdb.connect(sys.argv[1]); "
         "c.execute('CREATE TABLE t (x INT)'); print('ready', flush=True); sys.stdin.read()", str(db)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        r = run("investigate", str(db), "--gateway", str(FIX / "envoy_new.ndjson"), "--out", str(tmp_path / "o"),
                "--replace")
        assert r.returncode == 2 and "in use" in r.stderr and r.stderr.count("\n") == 1, r.stderr
        assert db.exists()
    finally:
        holder.communicate("")
    # once it is free, a replace starts afresh
    from forensics.case import replace_case

    replace_case(db)
    assert not db.exists()


def test_replace_refuses_a_file_that_is_not_a_case(tmp_path: Path) -> None:
    not_a_case = tmp_path / "notes.duckdb"
    not_a_case.write_text("my notes, not a database\n")
    r = run("investigate", str(not_a_case), "--gateway", str(FIX / "envoy_new.ndjson"), "--out", str(tmp_path / "o"),
            "--replace")
    assert r.returncode == 2 and "not a case database" in r.stderr
    assert not_a_case.read_text() == "my notes, not a database\n"


@pytest.mark.parametrize("where", ["gateway:commit:1", "engine:segment:1", "engine:rebuild:1"])
def test_ctrl_c_stops_with_one_line_and_the_re_run_finishes(tmp_path: Path, where: str,
                                                             sample_case_path: Path) -> None:
    # The Ctrl-C is sent by the process to itself at a known point of the ingest (the crash tests'
    # fault injection with SIGINT): a timed kill from outside raced the ingest and, on a slow
    # machine, landed while Python was still importing (exit -2, CI of 2026-12-02).
    db = tmp_path / "c.duckdb"
    cmd = [sys.executable, "-m", "forensics", "ingest", str(db), "--gateway", str(SAMPLE / "gateway"),
           "--engine", str(SAMPLE / "engine"), "--engine-tz", "Asia/Singapore", "--quiet"]
    env = {**os.environ, "FORENSICS_CRASH_AT": where, "FORENSICS_CRASH_SIGNAL": "INT"}
    # SIGINT's default disposition for the child: a test runner's worker may ignore SIGINT, and an
    # ignored SIGINT is inherited, so Python would never raise KeyboardInterrupt (exit 0 seen once)
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, check=False,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.returncode == 130, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted:") and "Traceback" not in p.stderr, p.stderr
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    assert again.returncode == 0, again.stderr
    with forensics.open_case(db, read_only=True) as case:
        assert case.sql("SELECT count(*) FROM evidence_files WHERE status <> 'done'").fetchall() == [(0,)]
    # nothing lost and nothing read twice: the resumed case holds what a clean ingest holds
    tables = ("gateway_requests", "engine_requests", "engine_rejections", "engine_batches", "rejected_lines")
    counts = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in tables)
    totals = "SELECT sum(lines_read), sum(rows_loaded), sum(rows_rejected) FROM evidence_files"
    with forensics.open_case(db, read_only=True) as a, forensics.open_case(sample_case_path, read_only=True) as b:
        assert a.sql(counts).fetchall() == b.sql(counts).fetchall()
        assert a.sql(totals).fetchall() == b.sql(totals).fetchall()


# A Ctrl-C that lands while the package imports its libraries (1-3 s on a cold machine): raised
# by an import hook at the moment forensics.analysis is imported, so the test never races.
_INTERRUPTED_IMPORT = """
import sys
sys.argv = [{argv0!r}, "ingest"]
class _CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "forensics.analysis":
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, _CtrlC())
import forensics
"""


@pytest.mark.parametrize(
    ("argv0", "one_line"),
    [
        ("/venv/bin/forensics", True),  # the console script
        ("-m", True),  # python -m forensics, while the package is located
        ("/home/me/analyse.py", False),  # a program that imports the library: the interrupt is its own
    ],
)
def test_ctrl_c_while_the_libraries_load(argv0: str, one_line: bool) -> None:
    p = subprocess.run([sys.executable, "-c", _INTERRUPTED_IMPORT.format(argv0=argv0)],
                       capture_output=True, text=True, timeout=120)
    if one_line:
        assert p.returncode == 130
        assert p.stderr == "interrupted: before any work began; nothing was read or written\n"
    else:
        assert p.returncode != 0
        assert "KeyboardInterrupt" in p.stderr


# The console script as pip wrote it, run as its own process; the Ctrl-C is raised by an import hook
# (installed by a sitecustomize on PYTHONPATH) when the named module is looked up, so nothing races.
_CTRL_C_AT_IMPORT = """
import sys
class _CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, _CtrlC())
"""


@pytest.mark.parametrize(
    ("launcher", "module"),
    [
        ("console script", "forensics.cli"),  # after the package, while the CLI and its libraries load
        ("console script", "forensics.analysis"),  # while the package itself loads
        ("python -m", "forensics.cli"),
    ],
)
def test_ctrl_c_while_the_cli_imports_through_the_entry_point(tmp_path: Path, launcher: str, module: str) -> None:
    script = Path(sys.executable).parent / "forensics"
    assert script.exists(), f"{script}: the console script is missing (run make setup)"
    (tmp_path / "sitecustomize.py").write_text(_CTRL_C_AT_IMPORT.format(module=module))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    cmd = [str(script)] if launcher == "console script" else [sys.executable, "-m", "forensics"]
    p = subprocess.run([*cmd, "ingest", str(tmp_path / "c.duckdb"), "--gateway", str(FIX)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert p.returncode == 130, p.stderr
    assert p.stderr == "interrupted: before any work began; nothing was read or written\n"
    assert not (tmp_path / "c.duckdb").exists()


def test_the_console_script_runs_the_cli() -> None:
    p = subprocess.run([str(Path(sys.executable).parent / "forensics"), "--version"], capture_output=True,
                       text=True, timeout=120, check=False)
    assert p.returncode == 0 and p.stdout.startswith("forensics"), p.stderr
