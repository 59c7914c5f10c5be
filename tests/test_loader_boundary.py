"""The loaders' boundary with the case: what the design of the evidence ledger promises.

- ``forensics/case.py`` never imports a loader (the sources stage registers itself with the case);
- a DuckDB error inside a loader, wherever it starts (planning, the ledger, a load), leaves it as
  one of the toolkit's own errors, never as a raw ``duckdb.Error``;
- every base table of a case is created by the schema files, never by a loader's own DDL.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

import forensics
from forensics.errors import CaseError, ForensicsError, InputError

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "forensics"
FIX = Path(__file__).resolve().parent / "fixtures"


def _runtime_imports(path: Path) -> set[str]:
    """Modules a file imports when it runs (``if TYPE_CHECKING:`` blocks and function bodies aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return out


def test_case_module_never_imports_a_loader() -> None:
    imported = _runtime_imports(PKG / "case.py")
    assert not {m for m in imported if m.startswith("forensics.sources")}, imported


def _fail(exc: duckdb.Error) -> Callable[..., Any]:
    def raise_it(*a: Any, **k: Any) -> Any:
        raise exc
    return raise_it


LOCKED = duckdb.IOException('Could not set lock on file "c.duckdb": Conflicting lock is held')
BROKEN = duckdb.InternalException("INTERNAL Error: something inside DuckDB broke")

BOUNDARY = [
    # label, loader, what raises, the error, the toolkit's error expected
    ("gateway: the ledger's recovery, a lock", "gateway", "forensics.sources.ledger.Ledger.recover", LOCKED, CaseError),
    ("gateway: the ledger's recovery, internal", "gateway", "forensics.sources.ledger.Ledger.recover", BROKEN,
     InputError),
    ("gateway: planning (sniffing a file)", "gateway", "forensics.sources.gateway.ingest._plan", BROKEN, InputError),
    ("gateway: a file's load", "gateway", "forensics.sources.gateway.ingest._ingest_one", BROKEN, InputError),
    ("engine: the ledger's recovery, a lock", "engine", "forensics.sources.ledger.Ledger.recover", LOCKED, CaseError),
    ("engine: the ledger's recovery, internal", "engine", "forensics.sources.ledger.Ledger.recover", BROKEN,
     InputError),
]


@pytest.mark.parametrize(("label", "loader", "target", "exc", "expected"), BOUNDARY, ids=[b[0] for b in BOUNDARY])
def test_duckdb_errors_leave_a_loader_as_the_toolkits_own(monkeypatch: pytest.MonkeyPatch, label: str, loader: str,
                                                          target: str, exc: duckdb.Error,
                                                          expected: type[ForensicsError]) -> None:
    monkeypatch.setattr(target, _fail(exc))
    case = forensics.open_case(":memory:")
    with pytest.raises(expected) as got:
        if loader == "gateway":
            case.ingest_gateway(FIX / "gateway" / "envoy_new.ndjson", format="envoy")
        else:
            case.ingest_engine([FIX / "engine" / "v0_5_23" / "decode-9.log"], tz="UTC")
    assert not isinstance(got.value, duckdb.Error)
    assert "\n" not in str(got.value)
    if "planning" in label:
        assert "envoy_new.ndjson" in str(got.value)  # the file it happened on


_DDL = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?\"?(\w+)", re.I)


def test_every_base_table_is_created_by_the_schema_files_only() -> None:
    case = forensics.open_case(":memory:")
    tables = {r[0] for r in case.sql("SELECT table_name FROM duckdb_tables() WHERE NOT temporary").fetchall()}
    schema = "\n".join(p.read_text(encoding="utf-8") for p in sorted(PKG.glob("schema*.sql"))
                       if not p.name.endswith(".spark.sql"))
    assert tables <= set(_DDL.findall(schema)) | {"schema_info"}, tables - set(_DDL.findall(schema))
    # engine_startup_facts among them (its DDL once lived in the engine loader)
    assert "engine_startup_facts" in _DDL.findall(schema)
    for path in sorted(PKG.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        made = {t for t in _DDL.findall(text) if t in tables}
        # the schema's module may quote its DDL in a docstring; no code creates a base table of its own
        assert not made or path.relative_to(PKG).as_posix() == "schema.py", (path, made)


def _after(first: BaseException, then: duckdb.Error) -> duckdb.Error:
    """``then`` raised while handling ``first`` (its context), as a finally-block after a failure."""
    try:
        try:
            raise first
        finally:
            raise then
    except duckdb.Error as exc:
        return exc


def aborted() -> duckdb.Error:
    return duckdb.TransactionException("TransactionContext Error: Current transaction is aborted (please ROLLBACK)")

CTRL_C = [
    # label, what reaches the boundary, KeyboardInterrupt expected (else the toolkit's error)
    ("DuckDB's interrupt", duckdb.InterruptException("INTERRUPT Error: Interrupted!"), True),
    ("aborted transaction after 'Query interrupted'", _after(RuntimeError("Query interrupted"), aborted()), True),
    ("aborted transaction after a Ctrl-C in Python", _after(KeyboardInterrupt(), aborted()), True),
    ("aborted transaction after a real error", _after(ValueError("bad value"), aborted()), False),
    ("a file DuckDB cannot read", duckdb.IOException("IO Error: No files found"), False),
]


@pytest.mark.parametrize(("label", "exc", "interrupt"), CTRL_C, ids=[c[0] for c in CTRL_C])
def test_ctrl_c_inside_a_query_stays_a_ctrl_c_at_the_boundary(label: str, exc: duckdb.Error, interrupt: bool) -> None:
    # a Ctrl-C in the engine loader's INSERT surfaced as "cannot be loaded: ... transaction is aborted"
    # (exit 2, "nothing of it was kept") instead of the CLI's one-line "interrupted:" (exit 130)
    from forensics.sources.ledger import database_errors

    with pytest.raises(KeyboardInterrupt if interrupt else InputError), database_errors("a.log"):
        raise exc


class _AbortedAfterInterrupt:
    """A connection whose INSERT is interrupted, after which every statement fails (aborted)."""

    def register(self, name: str, table: Any) -> None:
        pass

    def execute(self, *a: Any) -> None:
        raise RuntimeError("Query interrupted")

    def unregister(self, name: str) -> None:
        raise aborted()


def test_the_engine_writer_lets_an_interrupt_through() -> None:
    import pyarrow as pa

    from forensics.sources.engine.writer import Writer

    w = Writer(_AbortedAfterInterrupt(), file_id=1)  # type: ignore[arg-type]
    w.parts[("n", "p", "engine_batches")] = [pa.table({"x": [1]})]
    with pytest.raises(RuntimeError, match="Query interrupted"):
        w.write()


def test_the_engine_readers_never_hang_a_stopped_load(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C while the engine loader's reader threads had filled its queue: the reader that had
    # just finished blocked on put() of its end marker, the loader joined it, and the process
    # hung for ever (seen at about 1 in 10 timed SIGINTs of the sample ingest)
    import threading
    import time

    from forensics.sources.engine import loader

    class Job:
        writer = None

        def scanned(self) -> Any:
            # one more block than the queue holds once the consumer took the first
            return iter([("n", "p", None)] * (2 * loader.FILES_IN_FLIGHT + 1))

    def interrupted(*a: Any) -> None:
        time.sleep(0.3)  # the reader fills the queue meanwhile, then waits to put its end
        raise KeyboardInterrupt

    monkeypatch.setattr(loader, "_absorb", interrupted)
    got: list[BaseException] = []

    def consume() -> None:
        try:
            list(loader._run([Job()], segment_bytes=1 << 30))  # type: ignore[list-item]
        except BaseException as exc:  # the interrupt is what is expected
            got.append(exc)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    t.join(timeout=20)
    assert not t.is_alive(), "the loader hung after an interrupt"
    assert got and isinstance(got[0], KeyboardInterrupt)


def test_the_checkpoint_threshold_of_a_closed_connection_is_not_restored_and_raises_nothing() -> None:
    # a second Ctrl-C finalised the loader's checkpoint_threshold() after Case.__exit__ had closed
    # the connection: 'Exception ignored in: <generator ...> ConnectionException' after 'interrupted:'
    import duckdb

    from forensics.sources.engine.writer import checkpoint_threshold

    con = duckdb.connect()
    with checkpoint_threshold(con, "256MB"):
        con.close()
