"""The case database: one DuckDB file holding every loaded row, with provenance.

A case is opened (created if absent) with :func:`open_case`; loaders add evidence to it and
queries read from it. The connection is configured so DuckDB never reaches for the network:
extensions that are not built in fail fast instead of being downloaded.

The case does not know the loaders: it hands them a narrow :class:`LoadTarget` (connection,
clock, memory budget, temporary directory), and the sources stage registers its loaders here
(:func:`register_loader`) so that ``case.ingest_gateway(...)`` reaches them.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import os
import re
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import duckdb

from forensics import __version__
from forensics.errors import CaseError, ParameterError
from forensics.kinds import BACKENDS, Backend, FileKind
from forensics.schema import schema_sql

if TYPE_CHECKING:
    from forensics.sources.summary import IngestSummary

SCHEMA_VERSION = "6"

#: DuckDB memory limit while logs are loaded; bounded so multi-GB inputs stream instead of
#: exhausting RAM (a loader's peak RSS stays under 1 GiB with the default).
DEFAULT_MEMORY_LIMIT = os.environ.get("FORENSICS_MEMORY_LIMIT", "768MB")
#: DuckDB memory limit for everything else (the analysis queries): a 1 M-request chain query's
#: GROUP BY spills to disk under the load budget and took twice as long (measured).
DEFAULT_QUERY_MEMORY_LIMIT = os.environ.get("FORENSICS_QUERY_MEMORY_LIMIT", "2GB")
#: DuckDB memory for reading a full export (``forensics chain``: a row per request, sorted), with one
#: thread: at 1 M requests the sort under the query limit peaked at 1.6-2.1 GiB RSS; under this
#: budget with one thread it spills, 790 MiB (two threads run out of memory even at 640 MB).
EXPORT_MEMORY_LIMIT_BYTES = 512_000_000


def configure_connection(
    con: duckdb.DuckDBPyConnection,
    *,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    temp_directory: str | None = None,
    threads: int | None = None,
) -> None:
    """Apply the toolkit's safety settings to a DuckDB connection.

    Example:
        >>> con = duckdb.connect()
        >>> configure_connection(con)
    """
    # Never download or auto-load extensions: json, parquet and icu are built in; anything else
    # must fail fast with a clear error rather than reach for the network mid-investigation.
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET allow_community_extensions = false")
    con.execute(f"SET memory_limit = '{_safe_setting(memory_limit)}'")
    if temp_directory is not None:
        con.execute(f"SET temp_directory = '{_safe_setting(temp_directory)}'")
    if threads is not None:
        con.execute(f"SET threads = {int(threads)}")
    # All canonical timestamps are UTC; make TIMESTAMPTZ rendering and casts agree.
    con.execute("SET TimeZone = 'UTC'")


_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def memory_limit_bytes(con: duckdb.DuckDBPyConnection) -> int | None:
    """DuckDB's current memory limit in bytes, as it reports it (``'732.4 MiB'``); None if unreadable.

    Example:
        >>> con = duckdb.connect(); _ = con.execute("SET memory_limit = '1.5GiB'")
        >>> memory_limit_bytes(con)
        1610612736
    """
    rows = con.execute("SELECT current_setting('memory_limit')").fetchall()
    m = re.fullmatch(r"([\d.]+) ?(bytes|KiB|MiB|GiB|TiB)", str(rows[0][0]).strip()) if rows else None
    return int(float(m.group(1)) * _UNITS[m.group(2)]) if m else None


def _safe_setting(value: str) -> str:
    # SET does not accept prepared parameters; refuse anything that could break out of the literal.
    if "'" in value or "\n" in value:
        raise CaseError(f"invalid setting value {value!r}", hint="remove quotes and newlines")
    return value


@dataclass(frozen=True)
class LoadTarget:
    """What a loader may touch: the connection, the clock, the load memory budget, a temp directory.

    Loaders never see the :class:`Case`; the evidence ledger (``forensics.sources.ledger``) and
    every loader work through this.

    Example:
        >>> target = open_case(":memory:").target()
        >>> with target.loading(0), target.temp_dir() as d:
        ...     d.is_dir()
        True
    """

    con: duckdb.DuckDBPyConnection
    #: naive UTC wall clock (injectable: golden tests pin it)
    now: Callable[[], dt.datetime]
    #: context manager: run under the load memory budget minus ``reserve_bytes`` held outside DuckDB
    budget: Callable[[int], contextlib.AbstractContextManager[None]]
    #: where temporary copies go (beside the case; None: the system's temporary directory)
    temp_root: Path | None = None

    def loading(self, reserve_bytes: int = 0) -> contextlib.AbstractContextManager[None]:
        """The load memory budget, as :meth:`Case.loading`."""
        return self.budget(reserve_bytes)

    @contextlib.contextmanager
    def temp_dir(self) -> Iterator[Path]:
        """A fresh temporary directory (beside the case when it is a file), removed afterwards."""
        if self.temp_root is not None:
            self.temp_root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.temp_root) as d:
            yield Path(d)


#: A sources-stage loader: ``loader(target, paths, **options) -> IngestSummary``.
Loader = Callable[..., "IngestSummary"]


#: kind ('gateway', 'engine') -> loader; filled by ``forensics.sources`` when it is imported.
_LOADERS: dict[FileKind, Loader] = {}


def register_loader(kind: FileKind, loader: Loader) -> None:
    """Make ``case.ingest_<kind>(...)`` call ``loader(case.target(), ...)`` (the sources stage does this).

    Example:
        >>> sorted(k for k in _LOADERS)
        ['engine', 'gateway']
    """
    _LOADERS[kind] = loader


@dataclass(eq=False)
class _Shared:
    """The one DuckDB connection of this process to a case file, and the cases open on it."""

    con: duckdb.DuckDBPyConnection
    read_only: bool
    #: the resolved path (None: an in-memory case, never shared)
    key: str | None
    handles: weakref.WeakSet[Case] = field(default_factory=weakref.WeakSet)
    #: the fingerprint of derived tables built in memory on this connection (read-only)
    facts_in_memory: str | None = None
    #: an ingest changed the evidence and the derived tables are not rebuilt yet: the next
    #: ``sql()``/``run_query()``/analysis call or the close rebuilds them once, so an investigation
    #: of three ingests builds each fact once instead of after every ingest
    facts_pending: bool = False
    #: results of input queries reused while a reader holds :meth:`Case.reusing` (None: not reusing)
    memo: dict[Any, Any] | None = None
    closed: bool = False


#: resolved case path -> its connection in this process (an entry goes when its last case closes,
#: or when no case on it is left)
_OPEN: weakref.WeakValueDictionary[str, _Shared] = weakref.WeakValueDictionary()


class Case:
    """An open case database.

    Opening a path this process already has open shares that connection: any number of read-only
    and writable cases on one file, except a writable one while the file is open read-only (a
    :class:`~forensics.errors.CaseError`: close the read-only case first). The connection's settings
    (memory limits, threads) are those of the first open; it closes with the last case on it.

    Example:
        >>> case = Case(":memory:")
        >>> case.sql("SELECT count(*) FROM gateway_requests").fetchall()
        [(0,)]
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        memory_limit: str = DEFAULT_MEMORY_LIMIT,
        query_memory_limit: str = DEFAULT_QUERY_MEMORY_LIMIT,
        threads: int | None = None,
        now: dt.datetime | None = None,
    ) -> None:
        self.path = str(path)
        self.read_only = read_only
        #: DuckDB memory limit while loading (see :meth:`loading`)
        self.memory_limit = _safe_setting(memory_limit)
        #: DuckDB memory limit at all other times (the connection's setting between loads)
        self.query_memory_limit = _safe_setting(query_memory_limit)
        #: injectable clock for evidence_files.ingested_at (golden tests pin it)
        self.now = now
        self._closed = False
        temp_dir: str | None = None
        key: str | None = None
        if self.path != ":memory:":
            p = Path(self.path)
            key = str(p.resolve())
            if read_only and not p.exists():
                raise CaseError(
                    f"case database {self.path} does not exist",
                    hint="create it with 'forensics ingest CASE.duckdb --gateway ... --engine ...'",
                )
            if not read_only:
                p.parent.mkdir(parents=True, exist_ok=True)
            temp_dir = str(p.with_name(p.name + ".tmp"))
        shared = _OPEN.get(key) if key is not None else None
        if shared is not None and not shared.closed:
            # open in this process already: this case shares that connection (and its settings)
            if shared.read_only and not read_only:
                raise CaseError(
                    f"case {self.path} is already open read-only in this process: it cannot also be opened writable",
                    hint="close the read-only case first (case.close(), or leave its with-block), "
                    "or open this one read-only too",
                )
        else:
            try:
                con = duckdb.connect(self.path, read_only=read_only)
            except duckdb.IOException as exc:
                raise CaseError(
                    f"cannot open case database {self.path}: {exc}",
                    hint="is another process using it? close it or open read-only",
                ) from exc
            except duckdb.ConnectionException as exc:
                raise CaseError(
                    f"cannot open case database {self.path}: this process holds another connection to it "
                    f"that was not opened with open_case ({exc})",
                    hint="open the case once with forensics.open_case and pass that case around",
                ) from exc
            configure_connection(con, memory_limit=query_memory_limit, temp_directory=temp_dir, threads=threads)
            shared = _Shared(con, read_only, key)
            if key is not None:
                _OPEN[key] = shared
        #: the one connection of this process to the case file (shared by every Case opened on it)
        self._shared = shared
        shared.handles.add(self)
        self.con = shared.con
        if not read_only:
            self._ensure_schema()

    # -- schema ---------------------------------------------------------------------------------

    def _ensure_schema(self) -> None:
        found = self._schema_version()
        if found is not None and found != SCHEMA_VERSION:
            raise CaseError(
                f"case database {self.path} has schema version {found}; this toolkit writes version "
                f"{SCHEMA_VERSION}",
                hint="ingest into a new case file (sources are never modified, so nothing is lost)",
            )
        try:
            self.con.execute(schema_sql())
        except duckdb.Error as exc:
            raise CaseError(
                f"cannot create the schema in {self.path}: {exc}",
                hint="use a new case file, or one created by this toolkit version",
            ) from exc
        self.con.execute(
            "INSERT INTO schema_info VALUES ('schema_version', $v) ON CONFLICT (key) DO NOTHING",
            {"v": SCHEMA_VERSION},
        )
        self.con.execute(
            "INSERT INTO schema_info VALUES ('created_by', $v) ON CONFLICT (key) DO NOTHING",
            {"v": f"forensics {__version__}"},
        )

    def _schema_version(self) -> str | None:
        """The schema version recorded in an existing case, or None for an empty database."""
        has = self.con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_info'"
        ).fetchone()
        if not has or not has[0]:
            return None
        row = self.con.execute("SELECT value FROM schema_info WHERE key = 'schema_version'").fetchone()
        return str(row[0]) if row else None

    # -- plumbing -------------------------------------------------------------------------------

    def utcnow(self) -> dt.datetime:
        """Return the injected clock or the current UTC time (naive, UTC)."""
        if self.now is not None:
            return self.now
        return dt.datetime.now(dt.UTC).replace(tzinfo=None)

    def sql(self, query: str, params: dict[str, Any] | Sequence[Any] | None = None) -> duckdb.DuckDBPyRelation:
        """Run SQL on the case and return a DuckDB relation (``.df()``, ``.to_arrow_table()``, ``.fetchall()``).

        Example:
            >>> Case(":memory:").sql("SELECT 1 AS x").fetchall()
            [(1,)]
        """
        self._check_open()
        self._settle()
        if params is None:
            return self.con.sql(query)
        return self.con.sql(query, params=params)

    def run_query(self, name: str, params: dict[str, Any]) -> duckdb.DuckDBPyRelation:
        """Run ``queries/<name>.sql`` with exactly its parameters (see :func:`forensics.sqlfiles.run_query`).

        The analysis functions run their queries through this method and :meth:`sql`, never
        through ``con``: a case on another engine (``open_case(..., backend="spark")``) answers
        the same calls.

        Example:
            >>> Case(":memory:").run_query("pool_audit", {"node": None}).fetchall()
            []
        """
        from forensics.sqlfiles import run_query

        self._check_open()
        self._settle()
        return run_query(self.con, name, params, self._shared.memo)

    @contextlib.contextmanager
    def reusing(self) -> Iterator[None]:
        """Inside, each input query's result (the affected set, leak sources, ...) is computed once.

        For a reader of an unchanging case that asks many questions of the same affected set: the
        report runs ``affected_requests`` once instead of five times. An ingest inside starts the
        reuse over; SQL that writes evidence through :meth:`sql` inside must not be mixed with it.

        Example:
            >>> from forensics.sample import sample_case
            >>> import forensics
            >>> case = sample_case()
            >>> with case.reusing():
            ...     a = forensics.affected_tenants(case).fetchall()
            ...     b = forensics.affected_tenants(case).fetchall()
            >>> a == b
            True
        """
        shared: _Shared | None = getattr(self, "_shared", None)
        if shared is None or shared.memo is not None:  # another engine's case; or nested: the outer scope reuses
            yield
            return
        shared.memo = {}
        try:
            yield
        finally:
            shared.memo = None

    def tables(self) -> list[str]:
        """Names of the case's tables and views (the derived ones up to date), sorted."""
        self._settle()
        rows = self.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY 1"
        ).fetchall()
        return [r[0] for r in rows]

    def has_rows(self, table: str) -> bool:
        """True when ``table`` exists and has at least one row."""
        if table not in self.tables():
            return False
        row = self.con.execute(f'SELECT EXISTS (SELECT 1 FROM "{table}")').fetchone()
        return bool(row and row[0])

    def close(self) -> None:
        """Close the case (the file stays); a writable case first brings its derived tables up to date.

        The connection closes with the last case of this process open on the file.
        """
        if self._closed:
            return
        try:
            if not self.read_only:
                self.refresh()
        finally:
            self._release()

    def _release(self) -> None:
        self._closed = True
        shared: _Shared | None = getattr(self, "_shared", None)
        if shared is None:  # pragma: no cover - a subclass with its own connection
            self.con.close()
            return
        shared.handles.discard(self)
        if not shared.handles and not shared.closed:
            shared.closed = True
            if shared.key is not None and _OPEN.get(shared.key) is shared:
                del _OPEN[shared.key]
            shared.con.close()

    def _check_open(self) -> None:
        if self._closed:
            raise CaseError(f"case {self.path} is closed", hint="open it again with forensics.open_case")

    @property
    def _facts_in_memory(self) -> str | None:
        """The fingerprint of derived tables built in memory (a read-only case whose own are stale)."""
        shared: _Shared | None = getattr(self, "_shared", None)
        return shared.facts_in_memory if shared is not None else None

    @_facts_in_memory.setter
    def _facts_in_memory(self, value: str | None) -> None:
        self._shared.facts_in_memory = value

    def __enter__(self) -> Case:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            # an interrupted load: the next ingest (which resumes it) rebuilds the derived tables
            self._release()
            return
        self.close()

    def __repr__(self) -> str:
        return f"Case({self.path!r})"

    # -- loaders (the sources stage does the work) -------------------------------------------------

    @contextlib.contextmanager
    def loading(self, reserve_bytes: int = 0) -> Iterator[None]:
        """Run a load under the load memory budget, minus what the loader holds outside DuckDB.

        The limit goes back to ``query_memory_limit`` afterwards, also after an error.

        Example:
            >>> case = open_case(":memory:", memory_limit="512MiB")
            >>> with case.loading(reserve_bytes=64 << 20):
            ...     case.sql("SELECT current_setting('memory_limit')").fetchall()
            [('448.0 MiB',)]
        """
        with self._memory_limit(self.memory_limit):
            if reserve_bytes:
                budget = memory_limit_bytes(self.con)
                if budget is not None and budget >= 2 * reserve_bytes:
                    self.con.execute(f"SET memory_limit = '{budget - reserve_bytes}b'")
            yield

    @contextlib.contextmanager
    def capped(self, limit_bytes: int) -> Iterator[None]:
        """Run queries under at most ``limit_bytes`` of DuckDB memory (a lower query limit stays).

        The limit goes back to ``query_memory_limit`` afterwards, also after an error. Lowering it
        also evicts what DuckDB caches above it, so what runs inside starts small too.

        Example:
            >>> case = open_case(":memory:", query_memory_limit="2GiB")
            >>> with case.capped(640_000_000):
            ...     case.sql("SELECT current_setting('memory_limit')").fetchall()
            [('610.3 MiB',)]
            >>> case.sql("SELECT current_setting('memory_limit')").fetchall()
            [('2.0 GiB',)]
        """
        current = memory_limit_bytes(self.con)
        if current is not None and current <= limit_bytes:
            yield
            return
        with self._memory_limit(f"{int(limit_bytes)}b"):
            yield

    @contextlib.contextmanager
    def _memory_limit(self, limit: str) -> Iterator[None]:
        # the one place a budget is set and given back: loads and capped queries alike end on the
        # query limit, whatever raised inside
        try:
            self.con.execute(f"SET memory_limit = '{limit}'")
            yield
        finally:
            self.con.execute(f"SET memory_limit = '{self.query_memory_limit}'")

    @contextlib.contextmanager
    def exporting(self) -> Iterator[None]:
        """Read a full export's result under a small budget: :data:`EXPORT_MEMORY_LIMIT_BYTES` (a
        lower limit stays) and one DuckDB thread, so its sort spills to disk instead of holding
        millions of rows in memory. Both settings are back afterwards, also after an error.

        Example:
            >>> case = open_case(":memory:")
            >>> with case.exporting():
            ...     case.sql("SELECT current_setting('threads')").fetchall()
            [(1,)]
        """
        with self.capped(EXPORT_MEMORY_LIMIT_BYTES), self.single_threaded():
            yield

    @contextlib.contextmanager
    def single_threaded(self) -> Iterator[None]:
        """Run DuckDB on one thread while the block runs (each thread holds its own share of a sort
        or join's memory), then on as many as before, also after an error.

        Example:
            >>> case = open_case(":memory:")
            >>> with case.single_threaded():
            ...     case.sql("SELECT current_setting('threads')").fetchall()
            [(1,)]
        """
        row = self.con.execute("SELECT current_setting('threads')").fetchone()
        threads = int(row[0]) if row else 1
        self.con.execute("SET threads = 1")
        try:
            yield
        finally:
            self.con.execute(f"SET threads = {threads}")

    def check_output(self, out: str | os.PathLike[str]) -> Path:
        """Refuse to write ``out`` over this case or any of its evidence files (see :func:`check_output`)."""
        paths = [str(r[0]) for r in self.con.execute("SELECT DISTINCT path FROM evidence_files").fetchall()]
        return check_output(out, case_path=self.path, evidence=paths)

    def target(self) -> LoadTarget:
        """The narrow view of this case that loaders write through.

        Example:
            >>> open_case(":memory:").target().temp_root is None
            True
        """
        temp = None if self.path == ":memory:" else Path(self.path).with_name(Path(self.path).name + ".tmp")
        return LoadTarget(con=self.con, now=self.utcnow, budget=self.loading, temp_root=temp)

    def _loader(self, kind: FileKind) -> Loader:
        if self.read_only:
            raise CaseError(f"case {self.path} is open read-only", hint="open it with read_only=False to ingest")
        try:
            return _LOADERS[kind]
        except KeyError:  # pragma: no cover - forensics/__init__ imports the sources stage
            raise CaseError(f"no {kind} loader is registered", hint="import forensics first") from None

    def ingest_gateway(
        self,
        paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
        *,
        format: str = "auto",
        tz: str = "UTC",
        quiet: bool = True,
        **options: Any,
    ) -> IngestSummary:
        """Load gateway logs (files, directories or globs) into ``gateway_requests``.

        Example:
            >>> from forensics.sample import sample_dir
            >>> case = open_case(":memory:")
            >>> _ = case.ingest_gateway(sample_dir() / "gateway" / "litellm", format="litellm")
            >>> case.sql("SELECT layer, count(*) FROM gateway_requests GROUP BY layer").fetchall()
            [('proxy', 1299)]
        """
        summary = self._loader("gateway")(self.target(), paths, format=format, tz=tz, quiet=quiet, **options)
        self._record_unread("gateway", summary)
        self._changed()
        return summary

    def ingest_engine(
        self,
        paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
        *,
        tz: str = "UTC",
        quiet: bool = True,
        **options: Any,
    ) -> IngestSummary:
        """Load SGLang engine and router logs into the engine tables.

        Example:
            >>> from forensics.sample import sample_dir
            >>> case = open_case(":memory:")
            >>> _ = case.ingest_engine([f"prefill-0={sample_dir() / 'engine' / 'prefill-0'}"], tz="Asia/Singapore")
            >>> case.sql("SELECT node, count(*) FROM engine_starts GROUP BY node").fetchall()
            [('prefill-0', 3)]
        """
        summary = self._loader("engine")(self.target(), paths, tz=tz, quiet=quiet, **options)
        self._record_unread("engine", summary)
        self._changed()
        return summary

    def _record_unread(self, kind: FileKind, summary: IngestSummary) -> None:
        """Keep in the case the paths an ingest could not read (``--skip-unreadable``), so every later
        reader (the report) knows the answer rests on partial evidence; a path read later is removed."""
        unread = [(str(Path(f.path).resolve()), f.node, f.not_read) for f in summary.files if f.not_read]
        known = self.con.execute("SELECT count(*) FROM unread_paths WHERE kind = $k", {"k": kind}).fetchall()[0][0]
        if not unread and not known:
            return  # the usual case: nothing to record, nothing to clear (no path resolved)
        read = [str(Path(f.path).resolve()) for f in summary.files if not f.not_read]
        self.con.execute("BEGIN TRANSACTION")
        try:
            if read:
                # a file read now, or a directory whose files are read now, is no longer unread
                self.con.execute(
                    "DELETE FROM unread_paths WHERE kind = $k AND EXISTS (SELECT 1 FROM unnest($r) AS t(p) "
                    "WHERE t.p = path OR starts_with(t.p, path || '/'))", {"k": kind, "r": read})
            for path, node, reason in unread:
                self.con.execute(
                    "INSERT OR REPLACE INTO unread_paths VALUES ($p, $k, $n, $r, $at)",
                    {"p": path, "k": kind, "n": node, "r": reason, "at": self.utcnow()})
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise

    def refresh(self, *, force: bool = False) -> bool:
        """Rebuild the derived tables (``forensics.facts``) if the evidence changed; True if rebuilt.

        An ingest leaves it pending: the next :meth:`sql`, :meth:`run_query` or analysis call runs
        it, and so does closing a writable case, so several ingests build each fact once. Call it
        after editing evidence rows in place with SQL (row counts alone do not show such an edit).

        Example:
            >>> Case(":memory:").refresh()
            True
        """
        from forensics.facts import refresh

        built = refresh(self, force=force)
        self._shared.facts_pending = False
        return built

    def ensure_facts(self) -> None:
        """Bring the derived tables up to date before a query reads them (see :func:`forensics.facts.ensure`).

        A read-only case whose tables do not match its evidence gets them built in memory.

        Example:
            >>> Case(":memory:").ensure_facts()
        """
        from forensics.facts import ensure

        self._check_open()
        if self.read_only and not self._shared.read_only:
            # a read-only case sharing a connection this process opened writable: the derived
            # tables are brought up to date in the file, as the writer's next ingest or close would
            # (never as in-memory tables, which would hide the file's from the writer)
            writer = copy.copy(self)
            writer.read_only = False
            ensure(writer)
        else:
            ensure(self)
        self._shared.facts_pending = False

    def _changed(self) -> None:
        """The evidence changed: the derived tables are pending and no earlier result is reused."""
        self._shared.facts_pending = True
        if self._shared.memo is not None:
            self._shared.memo.clear()

    def _settle(self) -> None:
        """Build the derived tables an ingest of this process left pending, before SQL reads them."""
        if self._shared.facts_pending:
            self.ensure_facts()


def replace_case(path: str | os.PathLike[str]) -> None:
    """Delete a case database (and its write-ahead log) to start afresh; refused while it is in use.

    Holds the database's lock while deleting, so a case another process is writing is never
    deleted under it, and refuses a file that is not a DuckDB database (never an evidence file).

    Example:
        >>> import tempfile; p = Path(tempfile.mkdtemp()) / "c.duckdb"; open_case(p).close()
        >>> replace_case(p); p.exists()
        False
    """
    p = Path(path)
    wal = p.with_name(p.name + ".wal")
    shared = _OPEN.get(str(p.resolve()))
    if shared is not None and not shared.closed:
        raise CaseError(f"case {p} is open in this process: not replaced",
                        hint="close it first (case.close(), or leave its with-block)")
    if not p.exists():
        wal.unlink(missing_ok=True)
        return
    try:
        con = duckdb.connect(str(p), read_only=True)
    except duckdb.Error as exc:
        text = str(exc)
        if "lock" in text.lower():
            raise CaseError(f"case {p} is in use by another process: not replaced",
                            hint="wait for it to finish, or use another case file") from exc
        raise CaseError(f"{p} is not a case database this toolkit can open: not replaced",
                        hint="check the path; only a DuckDB case file is ever deleted") from exc
    try:
        # with the lock held: a process that opens the path from now on gets a new, empty file
        p.unlink()
        wal.unlink(missing_ok=True)
    finally:
        con.close()


def check_output(
    out: str | os.PathLike[str],
    *,
    case_path: str | os.PathLike[str] | None = None,
    evidence: Iterable[str | os.PathLike[str]] = (),
    directory: bool = False,
) -> Path:
    """Refuse an output path that would overwrite evidence or the case, or that cannot be written.

    ``evidence``: files (and directories) that are evidence; an output may not be one of them, nor
    (for a ``directory`` of outputs) lie inside an evidence directory. Checked before any work is
    done, so an unwritable destination fails in one line at once, not after the ingest.

    Example:
        >>> check_output("/nonexistent-dir/out.csv")
        Traceback (most recent call last):
        ...
        forensics.errors.ParameterError: cannot write /nonexistent-dir/out.csv: directory /nonexistent-dir does not exist (create it first, or choose another path)
    """
    p = Path(out)
    target = p.resolve()
    protected: list[Path] = []
    if case_path is not None and str(case_path) != ":memory:":
        c = Path(case_path).resolve()
        protected += [c, c.with_name(c.name + ".wal")]
    protected += [Path(e).resolve() for e in evidence]
    for q in protected:
        if target == q or (p.exists() and q.exists() and os.path.samefile(p, q)):
            what = "the case database" if case_path is not None and q in protected[:2] else "an evidence file"
            raise ParameterError(f"refusing to write {p}: it is {what}",
                                 hint="choose another output path; evidence and the case are never overwritten")
        if directory and q.is_dir() and (target == q or q in target.parents):
            raise ParameterError(f"refusing to write outputs into {p}: it is inside the evidence directory {q}",
                                 hint="choose an output directory outside the evidence")
    if directory:
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ParameterError(f"cannot create the output directory {p}: {exc.strerror or exc}",
                                 hint="choose another --out directory") from exc
        if not os.access(p, os.W_OK):
            raise ParameterError(f"cannot write into {p}: permission denied", hint="choose another --out directory")
        return p
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ParameterError(f"cannot write {p}: directory {parent} does not exist",
                             hint="create it first, or choose another path")
    if (p.exists() and not os.access(p, os.W_OK)) or not os.access(parent, os.W_OK):
        raise ParameterError(f"cannot write {p}: permission denied", hint="choose another path")
    if p.is_dir():
        raise ParameterError(f"cannot write {p}: it is a directory", hint="give a file name")
    return p


def open_case(
    path: str | os.PathLike[str],
    *,
    read_only: bool = False,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    query_memory_limit: str = DEFAULT_QUERY_MEMORY_LIMIT,
    threads: int | None = None,
    now: dt.datetime | None = None,
    backend: Backend = "duckdb",
    spark_master: str | None = None,
) -> Case:
    """Open (or create) a case database; ``backend="spark"`` opens a Parquet case on Spark.

    Example:
        >>> case = open_case(":memory:")
        >>> "evidence_files" in case.tables()
        True
        >>> open_case("case/", backend="sqlite")
        Traceback (most recent call last):
        ...
        forensics.errors.CaseError: unknown backend 'sqlite' (use duckdb or spark)
    """
    if backend not in BACKENDS:
        raise CaseError(f"unknown backend {backend!r}", hint=f"use {' or '.join(BACKENDS)}")
    if backend == "spark":
        # the Spark backend's public entry point; pyspark is imported only on this path
        from forensics.spark import open_case as open_spark_case

        return open_spark_case(path, master=spark_master, now=now)
    return Case(path, read_only=read_only, memory_limit=memory_limit, query_memory_limit=query_memory_limit,
                threads=threads, now=now)


def as_case(case: Case | str | os.PathLike[str]) -> Case:
    """Accept a :class:`Case` or a path (opened read-only) for the query functions.

    Example:
        >>> as_case(open_case(":memory:")).path
        ':memory:'
    """
    if isinstance(case, Case):
        return case
    return open_case(case, read_only=True)
