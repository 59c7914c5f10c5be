"""Shared fixtures: synthetic cases written straight into the schema, and the ingested sample.

The synthetic builder inserts rows into the canonical tables the loaders fill, so the queries can
be tested on exact, tiny situations (one table of cases per test, via ``pytest.mark.parametrize``).
The sample case is ingested once per session (it is the slow part of the suite).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import itertools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

import forensics
from forensics.__main__ import skip_iri_grammars
from forensics.case import Case
from forensics.sources.engine.sql import HEALTH

# the test processes are the toolkit's own, like the console script's (forensics.__main__)
skip_iri_grammars()

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data"
GOLDEN = ROOT / "tests" / "golden"

CTX = 1_048_576
POOL_BAD = 681_280
POOL_GOOD = 2_043_840
LIMIT_BAD = 681_274  # min(CTX - 1, POOL_BAD - 1) - 5
T0 = dt.datetime(2026, 9, 1, 0, 0, 0)


def t(hours: float = 0, seconds: float = 0) -> dt.datetime:
    """UTC time ``hours`` + ``seconds`` after the synthetic epoch T0."""
    return T0 + dt.timedelta(hours=hours, seconds=seconds)


class Synth:
    """Build a tiny case by inserting canonical rows directly (no loaders involved).

    Example:
        >>> s = Synth()
        >>> s.start("prefill-0", t(0), role="prefill", pool=POOL_BAD)
        >>> room = s.pd_request("r1", t(1), tokens=700_000, rejected=True)
    """

    def __init__(self) -> None:
        self.case: Case = forensics.open_case(":memory:")
        self._files: dict[str, int] = {}
        self._lines: dict[int, itertools.count[int]] = {}
        self._seq: dict[str, int] = {}
        self._room = itertools.count(1000)

    # -- plumbing -----------------------------------------------------------------------------

    def file(self, path: str, kind: str = "engine", node: str | None = None, layer: str | None = None) -> int:
        if path not in self._files:
            fid = len(self._files) + 1
            self._files[path] = fid
            self._lines[fid] = itertools.count(1)
            self.insert(
                "evidence_files", file_id=fid, path=f"/evidence/case/{path}", sha256=f"{fid:064x}",
                size=1, kind=kind, layer=layer or ("engine" if kind == "engine" else None), node=node,
            )
        return self._files[path]

    def insert(self, table: str, **cols: Any) -> None:
        if "node" in cols and "pod" not in cols and (table.startswith("engine_") or table == "router_requests"):
            cols["pod"] = cols["node"]  # one process per node unless a test says otherwise
        names = ", ".join(cols)
        marks = ", ".join("?" for _ in cols)
        self.case.con.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", list(cols.values()))

    def _where(self, node: str) -> dict[str, Any]:
        fid = self.file(f"engine/{node}/sglang.log", "engine", node)
        return {"file_id": fid, "line_no": next(self._lines[fid])}

    # -- engine rows --------------------------------------------------------------------------

    def start(self, node: str, ts: dt.datetime, *, role: str = "prefill", ctx: int = CTX,
              pool: int = POOL_BAD, **kw: Any) -> None:
        seq = self._seq.get(node, 0) + 1
        self._seq[node] = seq
        self.insert("engine_starts", node=node, start_seq=seq, ts_start=ts,
                    ts_ready=ts + dt.timedelta(minutes=4), role=role, context_len=ctx,
                    max_total_num_tokens=pool, **kw, **self._where(node))

    def req(self, node: str, kind: str, rid: str, ts: dt.datetime, **kw: Any) -> None:
        # the loader flags health checks; so do we, with its rule (one definition: engine.sql.HEALTH)
        if "is_health_check" not in kw:
            kw["is_health_check"] = self.case.con.execute(
                f"SELECT {HEALTH} FROM (SELECT $rid AS rid, CAST($room AS BIGINT) AS bootstrap_room, "
                "CAST($host AS VARCHAR) AS bootstrap_host)",
                {"rid": rid, "room": kw.get("bootstrap_room"), "host": kw.get("bootstrap_host")},
            ).fetchall()[0][0]
        self.insert("engine_requests", node=node, kind=kind, rid=rid, ts=ts, **kw, **self._where(node))

    def rejection(self, node: str, rid: str | None, ts: dt.datetime, tokens: int,
                  limit: int = LIMIT_BAD, kind: str = "input_length") -> None:
        self.insert("engine_rejections", node=node, ts=ts, kind=kind, rid=rid, input_tokens=tokens,
                    limit_tokens=limit, message="Input length exceeds", **self._where(node))

    def event(self, node: str, kind: str, ts: dt.datetime, room: int | None, **kw: Any) -> None:
        self.insert("engine_events", node=node, kind=kind, ts=ts, bootstrap_room=room, **kw,
                    **self._where(node))

    def other(self, node: str, ts: dt.datetime, kind: str = "noise", **kw: Any) -> None:
        self.insert("engine_other_lines", node=node, ts=ts, kind=kind, text="x", **kw, **self._where(node))

    # -- gateway rows -------------------------------------------------------------------------

    def gw(self, request_id: str, ts: dt.datetime, *, layer: str = "edge", status: int = 200,
           tenant: str = "t1", **kw: Any) -> None:
        fid = self.file(f"gateway/{layer}.ndjson", "gateway", layer=layer)
        self.insert("gateway_requests", request_id=request_id, tenant_id=tenant, ts_start=ts,
                    ts_end=ts + dt.timedelta(seconds=30), status=status, layer=layer,
                    file_id=fid, line_no=next(self._lines[fid]), **kw)

    # -- a whole PD request -------------------------------------------------------------------

    def pd_request(
        self,
        xid: str,
        ts: dt.datetime,
        *,
        tokens: int,
        prefill: str = "prefill-0",
        decode: str = "decode-0",
        rejected: bool = False,
        placeholder: bool | None = None,
        status: int | None = 200,
        tenant: str = "t1",
        layer: str = "edge",
        gateway_tokens: int | None = None,
        decode_finish: str = "length",
        engine: bool = True,
        prefill_logged: bool = True,
        header: bool = True,
        room: int | None = None,
        host: str = "10.0.2.11",
        **gw_kw: Any,
    ) -> int:
        """One request through gateway, prefill and decode; returns its bootstrap_room.

        ``rejected`` writes the scheduler rejection line; ``placeholder`` (default: = rejected)
        makes the prefill report 1 prompt token. ``status=None`` writes no gateway record.
        """
        room = room if room is not None else next(self._room)
        placeholder = rejected if placeholder is None else placeholder
        hdr = xid if header else None
        if status is not None:
            self.gw(f"ray-{xid}", ts, layer=layer, status=status, tenant=tenant,
                    header_request_id=xid, prompt_tokens=gateway_tokens, **gw_kw)
        if not engine:
            return room
        te = ts + dt.timedelta(seconds=1)
        common = {"bootstrap_host": host, "bootstrap_room": room, "header_request_id": hdr}
        if prefill_logged:
            self.req(prefill, "received", f"p-{xid}", te, **common)
            if rejected:
                self.rejection(prefill, f"p-{xid}", te + dt.timedelta(seconds=1), tokens)
            self.req(prefill, "finished", f"p-{xid}", te + dt.timedelta(seconds=2),
                     prompt_tokens=1 if placeholder else tokens, finish_type="length",
                     finish_length=0 if placeholder else 16, **common)
        self.req(decode, "received", f"d-{xid}", te, **common)
        self.req(decode, "finished", f"d-{xid}", te + dt.timedelta(seconds=20),
                 prompt_tokens=tokens, completion_tokens=16, finish_type=decode_finish, **common)
        return room


def fleet(s: Synth, *, bad: tuple[str, ...] = ("prefill-0",), fixed_at: float | None = 200.0) -> None:
    """A standard fleet: prefill-0 (exposed, fixed at ``fixed_at`` hours), prefill-1 (good), decode-0/1."""
    for node in ("prefill-0", "prefill-1"):
        s.start(node, t(0), role="prefill", pool=POOL_BAD if node in bad else POOL_GOOD)
        if node in bad and fixed_at is not None:
            s.start(node, t(fixed_at), role="prefill", pool=POOL_GOOD)
    for node in ("decode-0", "decode-1"):
        s.start(node, t(0), role="decode", pool=2_621_440)
    for node in ("prefill-0", "prefill-1", "decode-0", "decode-1"):
        s.other(node, t(300))  # the last log line: the period end of the last start


@pytest.fixture
def synth() -> Synth:
    return Synth()


# -- the bundled sample, ingested once per session ----------------------------------------------


@pytest.fixture(scope="session")
def sample_truth() -> dict[str, Any]:
    path = SAMPLE / "truth.json"
    assert path.is_file(), "sample_data/truth.json is missing: regenerate with forensics sample --out sample_data"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def shared_dir(factory: pytest.TempPathFactory) -> Path:
    """A directory of this run that every pytest-xdist worker sees (the run's base temp).

    Serial runs: the session's base temp. Build shared things in it with :func:`build_once`.
    """
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """``shared_dir/name``, built by ``build(dir)`` once per run however many workers ask for it.

    The first worker to ask builds it under a file lock while the others wait, then all of them
    use it read-only (never write into it: make a copy). A build that failed is tried again by
    the next asker, so each one reports the failure.

    Example (a session fixture others can reuse)::

        @pytest.fixture(scope="session")
        def big_thing(tmp_path_factory):
            return build_once(tmp_path_factory, "big-thing", lambda d: make_it(d / "x"))
    """
    root = shared_dir(factory) / "shared"
    root.mkdir(exist_ok=True)
    target, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            build(target)
            done.touch()
    return target


def _ingest_sample(out: Path) -> None:
    path = out / "case.duckdb"
    prebuilt = os.environ.get("FORENSICS_TEST_SAMPLE_CASE")
    if prebuilt:
        shutil.copyfile(prebuilt, path)
        forensics.open_case(path).close()
        return
    with forensics.open_case(path, now=dt.datetime(2026, 10, 1)) as case:
        case.ingest_gateway(SAMPLE / "gateway")
        case.ingest_engine(SAMPLE / "engine", tz="Asia/Singapore")


def _sample_path(factory: pytest.TempPathFactory) -> Path:
    return build_once(factory, "sample-case", _ingest_sample) / "case.duckdb"


def pytest_sessionstart(session: pytest.Session) -> None:
    # The docstring examples call forensics.sample.sample_case(), which would ingest the sample
    # again in every process: they open the suite's shared copy instead (same files, same clock).
    import forensics.sample

    factory: pytest.TempPathFactory = session.config._tmp_path_factory  # type: ignore[attr-defined]
    forensics.sample._sample_case_path = lambda: _sample_path(factory)  # type: ignore[assignment]


@pytest.fixture(scope="session")
def sample_case_path(tmp_path_factory: pytest.TempPathFactory, sample_truth: dict[str, Any]) -> Path:
    """Path of a case database with the whole sample (gateway + engine) ingested, read-only.

    Ingested once per run, shared by every xdist worker and by the docstring examples
    (``forensics.sample.sample_case()``); copy it before writing. ``FORENSICS_TEST_SAMPLE_CASE``
    names an already ingested copy to start from (the mutation run sets it for mutants that leave
    the loaders alone); opening it read-write re-creates the views of the current ``schema.sql``,
    so a mutated view is still what the tests read.
    """
    return _sample_path(tmp_path_factory)


def _investigate_sample(out: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "forensics", "investigate", str(out / "case.duckdb"),
         "--gateway", str(SAMPLE / "gateway"), "--engine", str(SAMPLE / "engine"),
         "--engine-tz", "Asia/Singapore", "--out", str(out), "--replace", "--quiet"],
        capture_output=True, text=True,
    )
    assert res.returncode == 0, res.stderr


@pytest.fixture(scope="session")
def sample_investigation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory ``forensics investigate`` wrote for the bundled sample (what ``make demo``
    runs, through the real entry point): its case, CSVs, report, charts and packets. Run once per
    run and shared by every worker: read it, never write into it."""
    return build_once(tmp_path_factory, "investigation", _investigate_sample)


@pytest.fixture(scope="session")
def sample_case(sample_case_path: Path) -> Iterator[Case]:
    """The ingested sample, opened read-only once for the whole session."""
    case = forensics.open_case(sample_case_path, read_only=True)
    yield case
    case.close()


# -- sources never modified ---------------------------------------------------------------------------

#: The evidence every test reads: the bundled sample and the fixtures.
EVIDENCE_ROOTS = (SAMPLE, ROOT / "tests" / "fixtures")


def evidence_state(roots: Iterable[Path], *, digest: bool = True) -> dict[str, tuple[str, int, int]]:
    """(sha256 or '', size, mtime_ns) of every file under ``roots``: what "unchanged" means."""
    out: dict[str, tuple[str, int, int]] = {}
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for p in files:
            st = p.stat()
            sha = hashlib.sha256(p.read_bytes()).hexdigest() if digest else ""
            out[str(p)] = (sha, st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="session")
def _evidence_at_start() -> Iterator[dict[str, tuple[str, int, int]]]:
    before = evidence_state(EVIDENCE_ROOTS)
    yield before
    # the whole session: contents too (a rewrite that kept size and mtime)
    assert evidence_state(EVIDENCE_ROOTS) == before, "a test modified the bundled sample or a fixture"


@pytest.fixture(scope="module", autouse=True)
def _sources_unchanged(_evidence_at_start: dict[str, tuple[str, int, int]]) -> Iterator[None]:
    """Sources are never modified: after every test module, size and mtime of every sample and
    fixture file are as they were (sha256 at the end of the session)."""
    yield
    now = evidence_state(EVIDENCE_ROOTS, digest=False)
    changed = sorted(k for k, v in _evidence_at_start.items() if now.get(k, ("", -1, -1))[1:] != v[1:])
    assert not changed and set(now) == set(_evidence_at_start), f"sources modified: {changed[:5]}"


# -- golden files -----------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden", action="store_true", default=False,
        help="rewrite tests/golden/* from the current code instead of comparing (make golden)",
    )


GoldenCheck = Callable[[str, str], None]


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> GoldenCheck:
    """Compare a text with ``tests/golden/<name>``; a missing golden file is a failure.

    Only ``make golden`` (``pytest --update-golden -m golden``) rewrites them, and a test that
    rewrote its file is reported as skipped, never as passed.
    """
    update = bool(request.config.getoption("--update-golden"))

    def check(name: str, text: str) -> None:
        path = GOLDEN / name
        if update:
            path.write_text(text, encoding="utf-8")
            pytest.skip(f"tests/golden/{name} rewritten: review the diff and explain it in the commit")
        assert path.is_file(), f"tests/golden/{name} is missing: run make golden, review and commit it"
        assert text == path.read_text(encoding="utf-8"), (
            f"output differs from tests/golden/{name}; if the change is intended, run make golden "
            "and explain the difference in the commit"
        )

    return check
