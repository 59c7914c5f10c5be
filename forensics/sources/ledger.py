"""The evidence ledger: which source files the case holds, how far each was read, and the rule that
makes every ingest crash-safe.

Both loaders register their files here and follow one rule: a file's ``evidence_files`` row is
inserted with ``status = 'loading'``, its rows are written (in one transaction, or segment by
segment), and its final counts are written with ``status = 'done'`` **in the same transaction as
its last rows**. An ingest that dies (``kill -9``, OOM, power loss, Ctrl-C) leaves only 'loading'
rows behind; the next ingest of that kind rolls them back (:meth:`Ledger.recover`: every row of
those files, in every evidence table) and reads the files again, and its summary says so.

**Growth.** A live log or an appended export comes back bigger. A file whose first bytes are the
bytes of a file already in the case (the sha256 of that prefix equals the known file's sha256) is
a newer version of it: only its new lines are loaded, their line numbers continuing, and its
evidence row links the earlier version (``prior_file_id``, ``prior_sha256``, ``prior_size``).
When the earlier version ended inside a line (no line end yet), that line is read again, whole,
from the new version, and the earlier version's rows of it are superseded.

Example:
    >>> from forensics.case import open_case
    >>> led = Ledger(open_case(":memory:").target(), "gateway")
    >>> led.recover(), led.decide("ab" * 32, 10, {})
    ([], Decision(skip=None, prior=None, first_line=1, start_offset=0))
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from forensics import __version__
from forensics.case import LoadTarget
from forensics.errors import CaseError, InputError
from forensics.kinds import FileKind
from forensics.sources.files import Snapshot

#: Bytes of a file's start whose sha256 (``head_sha256``) narrows the known files it may extend.
HEAD_BYTES = 4096

#: Tables rebuilt from the evidence (never rolled back row by row: marked stale and rebuilt).
DERIVED_TABLES = frozenset({"engine_starts"})


#: Fault injection for the crash tests: ``FORENSICS_CRASH_AT=<kind>:<event>:<n>[:<ms>]`` kills the
#: process (SIGKILL, as the OOM killer or a power cut would) at the n-th ``event`` of a loader of
#: that kind, or ``ms`` milliseconds after it (so the kill lands inside the statement that follows,
#: e.g. the COMMIT). Events: 'begin' (a file registered), 'rows' (a file's rows written, before its
#: counts), 'commit' (just before the COMMIT of a file's last rows), 'segment' (a segment committed),
#: 'rebuild' (before a derived table is rebuilt). ``FORENSICS_CRASH_SIGNAL=INT`` sends SIGINT instead
#: (a Ctrl-C that lands at a known point, so the interrupt test never races the ingest).
CRASH_ENV = "FORENSICS_CRASH_AT"
CRASH_SIGNAL_ENV = "FORENSICS_CRASH_SIGNAL"
_crash_counts: dict[tuple[str, str], int] = {}


def crash_point(kind: str, event: str) -> None:
    """Die here if the crash test asked for it (see :data:`CRASH_ENV`); a no-op otherwise."""
    spec = os.environ.get(CRASH_ENV)
    if not spec:
        return
    parts = spec.split(":")
    if len(parts) < 3 or (parts[0], parts[1]) != (kind, event):
        return
    n = _crash_counts.get((kind, event), 0) + 1
    _crash_counts[(kind, event)] = n
    if n != int(parts[2]):
        return
    delay = int(parts[3]) / 1000 if len(parts) > 3 else 0.0
    sig = signal.SIGINT if os.environ.get(CRASH_SIGNAL_ENV, "KILL").upper() == "INT" else signal.SIGKILL

    def die() -> None:
        if delay:
            time.sleep(delay)
        os.kill(os.getpid(), sig)

    if delay:
        threading.Thread(target=die, daemon=True).start()
    else:
        die()


@dataclass(frozen=True)
class Known:
    """A file the case holds completely (``status = 'done'``) that a grown file may extend."""

    file_id: int
    sha256: str
    size: int
    head_sha256: str | None
    first_line: int
    lines_read: int
    end_offset: int
    open_tail: bool
    #: the physical line whose end is ``end_offset`` (the last line read whole)
    end_line: int
    #: where it was read from, and as what (a grown version is the same source: see :meth:`Ledger.decide`)
    path: str = ""
    layer: str | None = None
    node: str | None = None

    def same_source(self, path: str, layer: str | None, node: str | None) -> bool:
        """True when a file at ``path`` (read as ``layer`` / ``node``) can be a newer version of this one.

        The same path; or the same file name read as the same layer and node (a live log collected
        again into another folder). Another file that merely starts with the same bytes (a retry
        log repeating the edge's first record, another layer's export) is not a grown version.

        Example:
            >>> k = Known(1, "s", 10, None, 1, 2, 10, False, 2, "/a/sglang.log", "engine", "decode-0")
            >>> k.same_source("/b/sglang.log", "engine", "decode-0"), k.same_source("/a/retry.log", "engine", "decode-0")
            (True, False)
        """
        if path == self.path:
            return True
        return Path(path).name == Path(self.path).name and layer == self.layer and node == self.node

    @property
    def next_line(self) -> int:
        """The number of the first line a newer version reads (its last line again if it was open)."""
        return self.end_line + 1


@dataclass(frozen=True)
class Decision:
    """What to do with a file: skip it (same bytes in the case), or load it from a line on.

    Example:
        >>> Decision(skip=3).skip
        3
    """

    skip: int | None = None
    #: the earlier version this file extends (its sha256 is this file's prefix's), if any
    prior: Known | None = None
    #: first physical line to load (1 for a new file)
    first_line: int = 1
    #: decompressed byte offset of ``first_line``
    start_offset: int = 0


@dataclass
class FileLoad:
    """A file being loaded: its evidence id and where its reading starts."""

    file_id: int
    path: Path
    sha256: str
    size: int
    compression: str
    decision: Decision = field(default_factory=Decision)

    @property
    def first_line(self) -> int:
        return self.decision.first_line

    @property
    def start_offset(self) -> int:
        return self.decision.start_offset


@dataclass(frozen=True)
class Recovered:
    """An interrupted load the ledger rolled back."""

    file_id: int
    path: str
    node: str | None

    def note(self) -> str:
        return f"{self.path}: an interrupted load was rolled back; read again"


class Ledger:
    """The evidence registry of one loader kind ('gateway' or 'engine') on a case.

    ``counted`` are the tables whose rows count as loaded for this kind (for superseding a line).
    """

    def __init__(self, target: LoadTarget, kind: FileKind, counted: Sequence[str] = ()) -> None:
        self.target = target
        self.con = target.con
        self.kind = kind
        self.counted = tuple(counted)
        self._known: list[Known] | None = None
        self._done: dict[str, int] | None = None
        self._sizes: set[int] | None = None

    # -- transactions ------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN ... COMMIT; ROLLBACK on any exception (KeyboardInterrupt too), then re-raise."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    # -- recovery ------------------------------------------------------------------------------

    def evidence_tables(self) -> list[str]:
        """Every table holding rows of source files (a ``file_id`` column), derived tables excepted."""
        rows = self.con.execute(
            "SELECT DISTINCT table_name FROM information_schema.columns WHERE table_schema = 'main' "
            "AND column_name = 'file_id' AND table_name IN (SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'main' AND table_type = 'BASE TABLE') ORDER BY 1"
        ).fetchall()
        return [str(r[0]) for r in rows if r[0] not in DERIVED_TABLES and r[0] != "evidence_files"]

    def recover(self) -> list[Recovered]:
        """Roll back this kind's interrupted loads (``status = 'loading'``); what was rolled back.

        Every row of those files goes, in every evidence table, with their evidence rows, in one
        transaction: the files are then read again like new ones.
        """
        rows = self.con.execute(
            "SELECT file_id, path, node FROM evidence_files WHERE kind = $k AND status = 'loading' ORDER BY file_id",
            {"k": self.kind},
        ).fetchall()
        if not rows:
            return []
        ids = [int(r[0]) for r in rows]
        with self.transaction():
            self._delete_files(ids)
        self._known = self._done = self._sizes = None
        return [Recovered(int(f), str(p), None if n is None else str(n)) for f, p, n in rows]

    def _delete_files(self, ids: list[int]) -> None:
        for table in [*self.evidence_tables(), "evidence_files"]:
            self.con.execute(f'DELETE FROM "{table}" WHERE list_contains($ids, file_id)', {"ids": ids})

    def discard(self, file_ids: Sequence[int]) -> None:
        """Remove files still being loaded (their rows and evidence rows), inside the caller's transaction."""
        if file_ids:
            self._delete_files([int(i) for i in file_ids])

    # -- known files and growth ------------------------------------------------------------------

    def _load_known(self) -> None:
        rows = self.con.execute(
            "SELECT file_id, sha256, size, head_sha256, first_line, lines_read, end_offset, open_tail, end_line, "
            "path, layer, node FROM evidence_files WHERE kind = $k AND status = 'done' ORDER BY file_id",
            {"k": self.kind},
        ).fetchall()
        self._done = {}
        self._known = []
        for fid, sha, size, head, first, lines, end, open_tail, end_line, path, layer, node in rows:
            self._done.setdefault(str(sha), int(fid))
            if end is not None and end_line is not None:
                self._known.append(Known(int(fid), str(sha), int(size), head, int(first or 1), int(lines or 0),
                                         int(end), bool(open_tail), int(end_line), str(path), layer, node))

    def done_file(self, sha256: str) -> int | None:
        """The file_id of a completely loaded file with these bytes, if any."""
        if self._done is None:
            self._load_known()
        assert self._done is not None
        return self._done.get(sha256)

    def has_known(self) -> bool:
        """True when this kind has files a grown one could extend (worth hashing a head for)."""
        if self._known is None:
            self._load_known()
        return bool(self._known)

    def has_size(self, size: int) -> bool:
        """True when a completely loaded file of this kind has this size (so it may be the same bytes)."""
        if self._sizes is None:
            self._sizes = {int(r[0]) for r in self.con.execute(
                "SELECT DISTINCT size FROM evidence_files WHERE kind = $k AND status = 'done'",
                {"k": self.kind}).fetchall()}
        return size in self._sizes

    def prefix_sizes(self, size: int, head_sha256: str | None) -> list[int]:
        """Sizes at which to hash a file's prefix: the known files it may extend.

        Only smaller files whose first 4 KiB hash the same (or that are smaller than that) can
        be its prefix, so a folder of unrelated hourly files costs no extra hashing.
        """
        if self._known is None:
            self._load_known()
        assert self._known is not None
        return sorted({k.size for k in self._known if 0 < k.size < size
                       and (k.size <= HEAD_BYTES or k.head_sha256 == head_sha256)})

    def decide(self, sha256: str, size: int, prefixes: dict[int, str], *, path: str | None = None,
               layer: str | None = None, node: str | None = None) -> Decision:
        """Skip (same bytes done), extend a known file (its bytes are this file's prefix), or load whole.

        Only a file of the same source (:meth:`Known.same_source`: ``path`` and ``layer`` / ``node``
        given) extends a known one; without ``path`` a file is never taken as a grown version.
        """
        existing = self.done_file(sha256)
        if existing is not None:
            return Decision(skip=existing)
        assert self._known is not None
        if path is None:
            return Decision()
        matches = [k for k in self._known if k.size < size and prefixes.get(k.size) == k.sha256
                   and k.same_source(path, layer, node)]
        if not matches:
            return Decision()
        prior = max(matches, key=lambda k: (k.size, -k.file_id))
        return Decision(prior=prior, first_line=prior.next_line, start_offset=prior.end_offset)

    # -- registration ------------------------------------------------------------------------------

    def begin(
        self,
        snap: Snapshot,
        sha256: str,
        decision: Decision,
        *,
        format: str | None,
        layer: str | None = None,
        node: str | None = None,
        tz: str | None = None,
        options: dict[str, Any] | None = None,
        head_sha256: str | None = None,
        file_id: int | None = None,
    ) -> FileLoad:
        """Insert the file's evidence row (``status = 'loading'``) and return its load handle."""
        return self.begin_many([(snap, sha256, decision, dict(format=format, layer=layer, node=node, tz=tz,
                                                              options=options, head_sha256=head_sha256))],
                               first_id=file_id)[0]

    def begin_many(self, files: Sequence[tuple[Snapshot, str, Decision, dict[str, Any]]],
                   first_id: int | None = None) -> list[FileLoad]:
        """:meth:`begin` for many files in one statement (small files: per-file statements cost more)."""
        if not files:
            return []
        if first_id is None:
            first_id = int(self.con.execute(
                "SELECT coalesce(max(file_id), 0) + 1 FROM evidence_files").fetchall()[0][0])
        at = self.target.now()
        rows = []
        loads = []
        for k, (snap, sha, d, meta) in enumerate(files):
            fid = first_id + k
            comp = snap.compression
            prior = d.prior
            rows.append((
                fid, snap.resolved or str(snap.path.resolve()), sha, snap.size, self.kind, meta.get("format"), meta.get("layer"),
                meta.get("node"), comp, meta.get("tz"), at, __version__,
                json.dumps(meta.get("options") or {}, sort_keys=True, default=str), d.first_line, d.start_offset,
                meta.get("head_sha256"), None if prior is None else prior.file_id,
                None if prior is None else prior.sha256, None if prior is None else prior.size,
            ))
            loads.append(FileLoad(fid, snap.path, sha, snap.size, comp, d))
        names = ("file_id", "path", "sha256", "size", "kind", "format", "layer", "node", "compression", "tz",
                 "ingested_at", "toolkit_version", "options", "first_line", "start_offset", "head_sha256",
                 "prior_file_id", "prior_sha256", "prior_size")
        types = (pa.int32(), pa.string(), pa.string(), pa.int64(), pa.string(), pa.string(), pa.string(),
                 pa.string(), pa.string(), pa.string(), pa.timestamp("us"), pa.string(), pa.string(), pa.int64(),
                 pa.int64(), pa.string(), pa.int32(), pa.string(), pa.int64())
        # one statement for every row (an INSERT per file cost more than reading a small file)
        table = pa.table({n: pa.array([r[i] for r in rows], type=t) for i, (n, t) in enumerate(zip(names, types,
                                                                                                   strict=True))})
        self.con.complete()  # register() refuses while an earlier result is still open
        self.con.register("_ledger_new", table)
        try:
            self.con.execute(
                f"""
                INSERT INTO evidence_files ({', '.join(names)}, lines_read, rows_loaded, rows_rejected,
                    rows_duplicate, complete, warning, status)
                SELECT {', '.join(names)}, 0, 0, 0, 0, NULL, NULL, 'loading' FROM _ledger_new
                """
            )
        finally:
            self.con.unregister("_ledger_new")
        crash_point(self.kind, "begin")
        return loads

    def finish(
        self,
        load: FileLoad,
        *,
        lines_read: int,
        rows_loaded: int,
        rows_rejected: int,
        rows_duplicate: int = 0,
        complete: bool = True,
        warning: str | None = None,
        end_offset: int | None = None,
        end_line: int | None = None,
        open_tail: bool = False,
        format: str | None = None,
        layer: str | None = None,
    ) -> None:
        """Write the final counts and ``status = 'done'``: call it in the transaction of the last rows.

        ``end_offset`` (decompressed byte just after the last line end read) and ``end_line`` (the
        physical line it ends) make the file a possible prior of a grown version; None for record
        containers (JSON arrays, Parquet).
        """
        self.finish_many([load], [dict(lines_read=lines_read, rows_loaded=rows_loaded, rows_rejected=rows_rejected,
                                       rows_duplicate=rows_duplicate, complete=complete, warning=warning,
                                       end_offset=end_offset, end_line=end_line, open_tail=open_tail,
                                       format=format, layer=layer)])

    def finish_many(self, loads: Sequence[FileLoad], counts: Sequence[dict[str, Any]]) -> None:
        """:meth:`finish` for many files in one statement."""
        crash_point(self.kind, "rows")
        rows = []
        for load, c in zip(loads, counts, strict=True):
            warning = c.get("warning")
            prior = load.decision.prior
            if prior is not None and prior.open_tail:
                self._supersede_last_line(prior, load)
            rows.append((load.file_id, c["lines_read"], c["rows_loaded"], c["rows_rejected"],
                         c.get("rows_duplicate", 0), c.get("complete", True), warning, c.get("end_offset"),
                         c.get("end_line"), c.get("open_tail", False), c.get("format"), c.get("layer")))
        names = ("fid", "lr", "rl", "rr", "rd", "c", "w", "eo", "el", "ot", "f", "ly")
        types = (pa.int32(), pa.int64(), pa.int64(), pa.int64(), pa.int64(), pa.bool_(), pa.string(), pa.int64(),
                 pa.int64(), pa.bool_(), pa.string(), pa.string())
        table = pa.table({n: pa.array([r[i] for r in rows], type=t) for i, (n, t) in enumerate(zip(names, types,
                                                                                                   strict=True))})
        self.con.complete()
        self.con.register("_ledger_done", table)
        try:
            self.con.execute(
                """
                UPDATE evidence_files e SET lines_read = v.lr, rows_loaded = v.rl, rows_rejected = v.rr,
                    rows_duplicate = v.rd, complete = v.c, warning = v.w, end_offset = v.eo, end_line = v.el,
                    open_tail = v.ot, format = coalesce(v.f, e.format), layer = coalesce(v.ly, e.layer),
                    status = 'done'
                FROM _ledger_done v WHERE e.file_id = v.fid
                """
            )
        finally:
            self.con.unregister("_ledger_done")
        self._known = self._done = self._sizes = None
        crash_point(self.kind, "commit")

    def _supersede_last_line(self, prior: Known, load: FileLoad) -> None:
        """The prior version's last line was open (no line end): the new version read it whole."""
        line = prior.end_line + 1
        rejected = loaded = duplicate = 0
        for table in self.evidence_tables():
            if not self._has_column(table, "line_no"):
                continue
            where = "file_id = $f AND line_no = $l"
            p = {"f": prior.file_id, "l": line}
            if table == "rejected_lines":
                rejected += int(self.con.execute(f"SELECT count(*) FROM {table} WHERE {where}", p).fetchall()[0][0])
            elif table in self.counted:
                dup = "is_duplicate" if self._has_column(table, "is_duplicate") else "false"
                n, d = self.con.execute(f"SELECT count(*), count(*) FILTER (WHERE {dup}) FROM {table} WHERE {where}",
                                        p).fetchall()[0]
                loaded += int(n) - int(d)
                duplicate += int(d)
            self.con.execute(f'DELETE FROM "{table}" WHERE {where}', p)
        note = (f"its last line ({line}) had no line end when read: superseded by file_id {load.file_id}, "
                f"a grown version of this file, which read it whole")
        self.con.execute(
            """UPDATE evidence_files SET lines_read = lines_read - 1, rows_loaded = rows_loaded - $lo,
                   rows_rejected = rows_rejected - $re, rows_duplicate = rows_duplicate - $du, open_tail = false,
                   warning = CASE WHEN warning IS NULL THEN $n ELSE warning || '; ' || $n END
               WHERE file_id = $f""",
            {"lo": loaded, "re": rejected, "du": duplicate, "n": note, "f": prior.file_id},
        )

    def _has_column(self, table: str, column: str) -> bool:
        return bool(self.con.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'main' AND table_name = $t "
            "AND column_name = $c", {"t": table, "c": column}).fetchall()[0][0])

    # -- derived tables ------------------------------------------------------------------------------

    def mark_stale(self, what: str, key: str) -> None:
        """Note (in the caller's transaction) that ``what`` must be rebuilt for ``key`` (e.g. a node)."""
        self.con.execute("INSERT INTO pending_rebuilds VALUES ($w, $k) ON CONFLICT DO NOTHING",
                         {"w": what, "k": key})

    def stale(self, what: str) -> set[str]:
        """Keys whose ``what`` awaits a rebuild (also those an interrupted ingest left)."""
        rows = self.con.execute("SELECT key FROM pending_rebuilds WHERE what = $w", {"w": what}).fetchall()
        return {str(r[0]) for r in rows}

    def clear_stale(self, what: str, keys: Sequence[str]) -> None:
        """Drop the marks (in the transaction of the rebuild)."""
        self.con.execute("DELETE FROM pending_rebuilds WHERE what = $w AND list_contains($k, key)",
                         {"w": what, "k": list(keys)})


@contextlib.contextmanager
def database_errors(where: str | None = None) -> Iterator[None]:
    """Turn DuckDB errors escaping a loader into the toolkit's own (one line, with the file).

    Example:
        >>> with database_errors("a.log"):
        ...     duckdb.sql("SELECT * FROM read_csv('/nonexistent/x.csv')")
        Traceback (most recent call last):
        ...
        forensics.errors.InputError: a.log: cannot be loaded: IO Error: No files found that match the pattern "/nonexistent/x.csv" (check the file; nothing of it was kept)
    """
    try:
        yield
    except duckdb.Error as exc:
        if _interrupted(exc):
            # Ctrl-C inside a query: what fails after it (an aborted transaction) is not the cause
            raise KeyboardInterrupt from None
        raise _own_error(exc, where) from exc


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is a Ctrl-C, or an error that followed one (its context chain holds one).

    Example:
        >>> _interrupted(duckdb.InterruptException("INTERRUPT Error: Interrupted!"))
        True
        >>> _interrupted(duckdb.IOException("IO Error: No files found"))
        False
    """
    seen: BaseException | None = exc
    for _ in range(16):
        if seen is None:
            return False
        if isinstance(seen, KeyboardInterrupt | duckdb.InterruptException) or (
                isinstance(seen, RuntimeError) and "query interrupted" in str(seen).lower()):
            return True
        seen = seen.__context__
    return False


def _own_error(exc: duckdb.Error, where: str | None) -> CaseError | InputError:
    """The toolkit's error for a DuckDB one: a lock is the case in use, anything else the file."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, duckdb.IOException) and "lock" in text.lower():
        return CaseError(f"the case database is in use: {text}",
                         hint="wait for the other process, or use another case file")
    return InputError(f"cannot be loaded: {text}", where=where, hint="check the file; nothing of it was kept")
