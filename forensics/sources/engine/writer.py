"""The engine writer: a file's typed rows into the case, segment by segment, in one transaction.

The loader (:mod:`.loader`) scans a file's blocks into Arrow tables per node and pod; the writer
inserts them (the SQL of :data:`.sql.INSERTS`) and commits at the file's end. While logs load the
checkpoint threshold is raised and Python's cycle collector paused (both measured below).

Example:
    >>> import duckdb
    >>> w = Writer(duckdb.connect(), file_id=1)
    >>> w.write(), w.open_bytes
    (0, None)
"""

from __future__ import annotations

import contextlib
import gc
from collections import Counter
from collections.abc import Iterator

import duckdb
import pyarrow as pa

from forensics.sources.engine.scan import Scanned
from forensics.sources.engine.sql import INSERTS
from forensics.sources.ledger import crash_point

#: Arrow bytes inserted per transaction at most (a file's rows are committed at its end, or at this
#: size: ~3 GB of log text).
TRANSACTION_BYTES = 1 << 30

#: DuckDB's WAL checkpoint threshold while engine logs load (its default of 16 MB checkpointed
#: after nearly every segment, recompressing the tables' last row groups each time).
CHECKPOINT_THRESHOLD = "256MB"


@contextlib.contextmanager
def checkpoint_threshold(con: duckdb.DuckDBPyConnection, value: str) -> Iterator[None]:
    """DuckDB's checkpoint threshold set to ``value`` while the block runs, restored after."""
    row = con.execute("SELECT current_setting('checkpoint_threshold')").fetchone()
    before = str(row[0]) if row else "16.0 MiB"
    con.execute(f"SET checkpoint_threshold = '{value}'")
    try:
        yield
    finally:
        # a second Ctrl-C can leave this generator to be finalised after the case closed its
        # connection: nothing is left to restore then, and a traceback after 'interrupted:' is noise
        with contextlib.suppress(duckdb.ConnectionException):
            con.execute(f"SET checkpoint_threshold = '{before}'")


@contextlib.contextmanager
def cycle_collector_paused() -> Iterator[None]:
    """Python's cycle collector off while the blocks stream through, back on (and run) after.

    The loader makes no reference cycles of its own, but it allocates many small containers (the
    arguments of every compiled call, Arrow wrappers): the collector's generation-0 passes over
    them cost a measured ~2 % of an engine ingest's CPU. Memory is bounded by the segments, not
    by the collector.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class Writer:
    """Collects a segment's Arrow tables (per node and pod) and inserts them.

    A file's segments go into one transaction, committed at the file's end (or every
    :data:`TRANSACTION_BYTES`): a commit per segment cost ~35 % more insert CPU (each commit
    appends partial row groups through the WAL and rewrites every table's last row group at the
    next checkpoint), and it bought nothing: a file not finished is rolled back and read again
    whole by the next ingest anyway. DuckDB writes a transaction's full row groups to the case
    file as they fill, so what it holds of an open transaction stays bounded (the segments' Arrow
    tables are read through a replacement scan, not a registered view: see :meth:`write`).
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, file_id: int) -> None:
        self.con = con
        self.file_id = file_id
        self.parts: dict[tuple[str, str, str], list[pa.Table]] = {}
        self.rows: Counter[str] = Counter()
        #: Arrow bytes inserted in the open transaction (None: none open)
        self.open_bytes: int | None = None

    def add(self, scanned: Scanned, node: str, pod: str) -> None:
        for table, t in scanned.tables.items():
            if t.num_rows:
                self.parts.setdefault((node, pod, table), []).append(t)

    def write(self) -> int:
        """Insert the rows collected, inside the caller's transaction; the Arrow bytes inserted."""
        con = self.con
        n = 0
        for (node, pod, table), parts in self.parts.items():
            t = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
            # read by DuckDB's replacement scan of this local name: a view registered (and dropped)
            # inside the open transaction kept every segment's Arrow table alive until the commit
            # (measured: RSS grew by the bytes inserted)
            _engine_rows = t
            con.execute(INSERTS[table], {"node": node, "pod": pod, "file_id": self.file_id})
            del _engine_rows
            n += t.nbytes
            if table != "engine_startup_facts":
                self.rows[table] += t.num_rows
        self.parts.clear()
        return n

    def segment(self) -> None:
        """One segment of a file not yet done: its rows into the file's open transaction."""
        if not self.parts:
            return
        con = self.con
        if self.open_bytes is None:
            con.execute("BEGIN TRANSACTION")
            self.open_bytes = 0
        try:
            self.open_bytes += self.write()
        except BaseException:
            self.abort()
            raise
        crash_point("engine", "segment")
        if self.open_bytes >= TRANSACTION_BYTES:
            self.commit()

    def commit(self) -> None:
        """The rows inserted so far (the file's last segment with them) committed."""
        self.segment()
        if self.open_bytes is None:
            return
        try:
            self.con.execute("COMMIT")
        except BaseException:
            self.abort()
            raise
        self.open_bytes = None

    def abort(self) -> None:
        """The open transaction (if any) rolled back."""
        if self.open_bytes is not None:
            self.open_bytes = None
            with contextlib.suppress(duckdb.Error):
                self.con.execute("ROLLBACK")
