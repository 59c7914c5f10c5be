"""The engine loader: files in, typed tables and evidence records out.

Every file goes through the evidence ledger (:mod:`forensics.sources.ledger`), in three steps:

1. **begin** (:func:`_register`): the file's sha256 (and its prefixes at the sizes of known files)
   decides: skip it (same bytes in the case), load only its new lines (a grown version of a known
   file), or load it whole; its ``evidence_files`` row is written with ``status = 'loading'``;
2. **segments** (:func:`_run`): the collection stage reads it (oldest rotation first), each block
   is scanned (:mod:`.scan`) and the typed Arrow tables are inserted into DuckDB a segment of
   blocks at a time, in one transaction per file;
3. **finish** (:func:`_finish`): its rejected lines, lines by kind, counts (lines read = loaded +
   rejected + joined + framing), ``status = 'done'`` and the nodes whose ``engine_starts`` must be
   rebuilt are written in **one** transaction.

An ingest killed at any point leaves only 'loading' rows, which the next one rolls back and reads
again; ``engine_starts`` is rebuilt (:mod:`.starts`) for every node marked stale, in the
transaction that clears the marks. Reading and decompressing runs in threads while DuckDB inserts
(numba's scanner, ISA-L, hashlib and DuckDB all release the GIL), the next blocks of a file are
prepared (:meth:`.Scanner.prepare`) on other threads while its reading thread finishes the blocks
in file order (:meth:`.Scanner.finish`), and each file's sha256 is computed ahead in another
thread.

Example:
    >>> from forensics.case import open_case
    >>> from forensics.sample import sample_dir
    >>> case = open_case(":memory:")
    >>> s = case.ingest_engine([f"prefill-0={sample_dir() / 'engine' / 'prefill-0'}"], tz="Asia/Singapore")
    >>> all(f.reconciles for f in s.files), case.sql("SELECT DISTINCT status FROM evidence_files").fetchall()
    (True, [('done',)])
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import hashlib
import os
import queue
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from forensics.errors import InputError, ParameterError
from forensics.sources.collect import ReadResult, read_lines
from forensics.sources.collect.layout import METRICS_RE, EngineSource, NodeRule, resolve_sources
from forensics.sources.engine.catalogue import catalogue
from forensics.sources.engine.prefix import NO_TS
from forensics.sources.engine.scan import Prepared, Scanned, Scanner
from forensics.sources.engine.sql import MACROS
from forensics.sources.engine.starts import rebuild_starts
from forensics.sources.engine.timeinfer import Carry, LocalToUtc
from forensics.sources.engine.writer import (
    CHECKPOINT_THRESHOLD,
    Writer,
    checkpoint_threshold,
    cycle_collector_paused,
)
from forensics.sources.engine.zones import zone_findings
from forensics.sources.files import (
    Fingerprint,
    Snapshot,
    Unreadable,
    fingerprint,
    progress_bar,
    store_rejected,
)
from forensics.sources.ledger import (
    HEAD_BYTES,
    Decision,
    FileLoad,
    Ledger,
    crash_point,
    database_errors,
)
from forensics.sources.lines import LineBatch
from forensics.sources.summary import FileSummary, IngestSummary
from forensics.sources.timezones import check_tz

if TYPE_CHECKING:
    # loaders see the case only through its load target (connection, clock, budget, temp dir)
    from forensics.case import LoadTarget as Case

#: Arrow bytes (typed rows) held before they are inserted: bounds the loader's own memory. Typed
#: rows take about a third of the text they come from, so a segment covers ~100 MB of log text.
SEGMENT_BYTES = 32 << 20
#: Files read and scanned at once. One: its reading thread (decompression, scanner) and this
#: thread's inserts still overlap on two cores; a second file in flight doubled what is held
#: outside DuckDB (peak RSS 1,347 MiB at 1 M requests, against 1,176 MiB with one, measured) for
#: no CPU gain.
FILES_IN_FLIGHT = 1
#: What the process holds outside DuckDB whatever the input (the interpreter, numpy, pyarrow,
#: the scanner's compiled code: ~250-300 MiB measured): counted in the reserve, so the load
#: budget (``memory_limit``) bounds the whole process, not DuckDB alone.
INTERPRETER_BYTES = 256 << 20

#: Typed tables an engine line can land in (for the per-file count).
TABLES = ("engine_batches", "engine_requests", "engine_rejections", "engine_events", "engine_http",
          "router_requests", "engine_other_lines")


#: Blocks read per file (decompressed bytes).
BLOCK_BYTES = 16 << 20
#: Threads preparing a file's blocks (:meth:`Scanner.prepare`: repairs, prefixes, kinds, the bulk
#: kinds' columns), which is also how many blocks are prepared ahead of the one being finished
#: (:meth:`Scanner.finish`, in file order, on the file's reading thread); 0 scans on the reading
#: thread alone. One: a node's wall 13.4 -> 12.0 s, the 1 M set's peak RSS 1,019 -> 1,010 MiB.
#: Two gave 10.3 s, but the 1 M set peaked at 1,434-1,524 MiB (growing file after file, cause
#: not found yet), over the 1 GiB budget (measured, load < 2.5).
PREPARE_WORKERS = 1


def _file_hour(src: EngineSource, tz: str) -> dt.datetime | None:
    """The hour a request-metrics file covers (from its name), in UTC; None if not in the name."""
    m = METRICS_RE.search(src.path.name)
    if not m:
        return None
    local = dt.datetime.strptime(m.group("d") + m.group("h"), "%Y%m%d%H")
    us = int((local - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000
    import numpy as np

    utc = LocalToUtc("UTC" if tz == "auto" else tz)(np.array([us], dtype=np.int64))[0]
    return None if utc == NO_TS else dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=int(utc))


def _merge_span(a: tuple[int, int, int] | None, b: tuple[int, int, int]) -> tuple[int, int, int]:
    if a is None:
        return b
    los = [x for x in (a[1], b[1]) if x != NO_TS]
    return (min(a[0], b[0]), min(los) if los else NO_TS, max(a[2], b[2]))


def _refuse_if_not_engine(src: EngineSource, out: Scanned) -> None:
    """A file none of whose first lines is an SGLang or router line is not engine evidence.

    It could only give false facts (a gateway CSV quoting a rejection message would become an
    admission limit), so it is refused before anything of it is stored (the ingest discards the
    evidence rows of every file not yet done).
    """
    lines = sum(out.counts.values())
    nonblank = lines - out.counts.get("blank", 0)
    if nonblank == 0 or out.sglang_lines > 0:
        return
    sample = out.unrecognised[0][1][:120] if out.unrecognised else ""
    where = f" (line {out.unrecognised[0][0]}: {sample!r})" if out.unrecognised else ""
    raise InputError(
        f"{src.path}: not an SGLang engine or router log: none of its first {lines:,} lines has an engine or "
        f"router prefix or is a request record{where}",
        hint="remove it from --engine (gateway logs go to --gateway)",
    )


def _mostly_unrecognised(src: EngineSource, counts: Counter[str], unrec: list[tuple[int, str]]) -> str | None:
    """The loud warning of a file whose lines are mostly not SGLang's or the router's."""
    cat = catalogue()
    fam = {k.name: k.family for k in cat.kinds}
    total = sum(n for k, n in counts.items() if fam.get(k) != "noise")
    bad = sum(n for k, n in counts.items() if fam.get(k) in ("unknown", "foreign"))
    if total == 0 or bad * 2 <= total:
        return None
    sample = f"; first unrecognised line {unrec[0][0]}: {unrec[0][1][:120]!r}" if unrec else ""
    return (f"MOSTLY UNRECOGNISED: {bad:,} of {total:,} lines of {src.path.name} are not SGLang or router lines "
            f"(unrecognised or another library's){sample}; facts from this file may be missing")


_LINE_KIND_TYPES = {"file_id": pa.int32(), "node": pa.string(), "pod": pa.string(), "kind": pa.string(),
                    "family": pa.string(), "n_lines": pa.int64(), "first_line": pa.int64(), "first_ts": pa.int64(),
                    "last_ts": pa.int64(), "last_line": pa.int64()}


def _store_line_kinds(case: Case, file_id: int, counts: Counter[tuple[str, str, str]],
                      spans: dict[tuple[str, str, str], tuple[int, int, int]], last: tuple[int, str] | None) -> None:
    cat = catalogue()
    fam = {k.name: k.family for k in cat.kinds}
    rows = []
    for (node, pod, k), n in sorted(counts.items()):
        ln, lo, hi = spans.get((node, pod, k), (None, NO_TS, NO_TS))
        rows.append((file_id, node, pod, k, fam.get(k, "unknown"), n, ln, lo if lo != NO_TS else None,
                     hi if hi != NO_TS else None, last[0] if last is not None and last[1] == k else None))
    if rows:
        # one statement for the file's kinds: executemany ran one INSERT per kind (~1 ms each, a
        # fixed ~17 ms of every engine file, however small)
        _line_kinds = pa.table({name: pa.array([r[i] for r in rows], type=t)
                                for i, (name, t) in enumerate(_LINE_KIND_TYPES.items())})
        case.con.execute(
            "INSERT INTO engine_line_kinds (file_id, node, pod, kind, family, n_lines, first_line, first_ts, "
            "last_ts, last_line) SELECT file_id, node, pod, kind, family, n_lines, first_line, "
            "make_timestamp(first_ts), make_timestamp(last_ts), last_line FROM _line_kinds")
        del _line_kinds


def _supersede_line_kind(case: Case, prior_file_id: int, line: int) -> None:
    """The prior version's open last line is read again, whole, by its grown version: uncount it."""
    case.con.execute("UPDATE engine_line_kinds SET n_lines = n_lines - 1, last_line = NULL "
                     "WHERE file_id = $f AND last_line = $l", {"f": prior_file_id, "l": line})
    case.con.execute("DELETE FROM engine_line_kinds WHERE file_id = $f AND n_lines = 0", {"f": prior_file_id})


_NAME_DATE = re.compile(r"(?<!\d)(20\d\d)-?(\d\d)-?(\d\d)(?!\d)")


def _file_day(src: EngineSource) -> int | None:
    """Days since the epoch of a date in the file name (``sglang-2026-05-11.log``), if any."""
    m = _NAME_DATE.search(src.path.name)
    if not m:
        return None
    try:
        d = dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None
    return (d - dt.date(1970, 1, 1)).days


def ingest_engine(
    case: Case,
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    tz: str = "UTC",
    quiet: bool = True,
    chunk_bytes: int = BLOCK_BYTES,
    segment_bytes: int = SEGMENT_BYTES,
    node_map: str | os.PathLike[str] | None = None,
    skip_unreadable: bool = False,
    **options: Any,
) -> IngestSummary:
    """Load SGLang engine/router logs (``[NODE=]PATH`` items) and rebuild ``engine_starts``.

    ``case`` is the case's load target (``Case.target()``). Files may be plain or collected (CRI,
    Docker, journald, syslog, shipper exports: detected per file, :mod:`forensics.sources.collect`).
    ``tz`` is the zone of the engines' local times, or ``auto`` (each file's offset from its
    collector's UTC times). ``node_map`` is a TOML file of ``"regex" = "node"`` pairs grouping pods
    into logical nodes. ``skip_unreadable`` lists a file that cannot be opened as not read instead
    of failing. An interrupted earlier load is rolled back and read again, a file already in the
    case is skipped, a grown one loads only its new lines.

    Example:
        >>> from forensics.case import open_case
        >>> from forensics.sample import sample_dir
        >>> s = ingest_engine(open_case(":memory:").target(), [f"d={sample_dir() / 'engine' / 'decode-0'}"])
        >>> s.files[0].node, all(f.reconciles for f in s.files)
        ('d', True)
    """
    if options:
        raise ParameterError(f"unknown engine option(s): {', '.join(sorted(options))}",
                             hint="engine ingest takes paths, tz, node_map, skip_unreadable and quiet")
    t0 = time.perf_counter()
    con = case.con
    # auto: each file's offset from its collection wrapper's UTC times (timezones.auto_offsets)
    tz = "auto" if tz.strip().lower() == "auto" else check_tz(tz)
    rule = NodeRule.load(node_map)
    layout_warnings: list[str] = []
    unread: list[Unreadable] = []
    sources = resolve_sources(paths, node_map=rule, warnings=layout_warnings, skip_unreadable=skip_unreadable,
                              unread=unread)
    con.execute(MACROS)
    summary = IngestSummary()
    summary.files.extend(FileSummary(path=str(u.path), kind="engine", not_read=u.reason) for u in unread)
    if layout_warnings:
        summary.notes["engine layout warnings"] = layout_warnings
    kinds: Counter[str] = Counter()
    samples: list[str] = []
    led = Ledger(case, "engine", counted=TABLES)
    jobs: list[_Job] = []
    # Up to FILES_IN_FLIGHT files are read, decompressed and scanned at once, each in its own
    # thread with its own cursor (the macros of the rare kinds' SQL); this thread does every
    # insert. Files are registered in their reading order, so file ids do not depend on timing.
    # Arrow tables of the segments being filled, the blocks in flight and the interpreter live
    # outside DuckDB's accounting: its limit is lowered by them while the loader runs. The files' sha256 (needed
    # first: skip, growth) are computed ahead in a thread, over exactly the bytes seen at open.
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        with case.loading(reserve_bytes=_reserve(segment_bytes, chunk_bytes)), database_errors(), \
                checkpoint_threshold(con, CHECKPOINT_THRESHOLD), cycle_collector_paused(), \
                progress_bar(quiet, sum(s.path.stat().st_size for s in sources), "engine") as bar:
            recovered = led.recover()
            if recovered:
                summary.notes["engine: interrupted loads rolled back and read again"] = ", ".join(
                    r.path for r in recovered)
                with led.transaction():
                    for r in recovered:
                        if r.node is not None:
                            led.mark_stale("engine_starts", r.node)
            snaps: list[Snapshot | str] = []
            for src in sources:
                try:
                    snaps.append(Snapshot.take(src.path))
                except InputError as exc:
                    if not skip_unreadable:
                        raise
                    cause = exc.__cause__
                    snaps.append(str(getattr(cause, "strerror", None) or cause or "unreadable").lower())
            known = led.has_known()
            digests = [sn if isinstance(sn, str) else
                       pool.submit(fingerprint, sn, led.prefix_sizes(sn.size, _head_sha(sn)) if known else [])
                       for sn in snaps]
            seen: dict[str, int] = {}
            for src, snap, fut in zip(sources, snaps, digests, strict=True):
                if isinstance(snap, str) or isinstance(fut, str):
                    summary.files.append(FileSummary(path=str(src.path), kind="engine", node=src.node,
                                                     not_read=str(fut)))
                    continue
                job = _register(led, src, snap, fut.result(), tz, chunk_bytes, rule, seen)
                summary.files.append(job.fs)
                if job.load is not None:
                    jobs.append(job)
            for job in _run(jobs, segment_bytes):
                moved = job.snap.changed()
                if moved is None:
                    _finish(led, job, kinds, samples)
                else:
                    _finish_from_copy(led, job, moved, segment_bytes, kinds, samples)
                job.done = True
                if bar is not None:
                    bar.update(bar.task_ids[0], advance=job.snap.size, file=job.src.path.name)
            # every node whose files changed (now, or in an ingest that died before this point)
            stale = sorted(led.stale("engine_starts"))
            crash_point("engine", "rebuild")
            with led.transaction():
                starts = rebuild_starts(case, stale)
                led.clear_stale("engine_starts", stale)
    except BaseException:
        # files begun and not done go with their rows (else the next ingest rolls them back)
        unfinished = [j.file_id for j in jobs if not j.done]
        if unfinished:
            with contextlib.suppress(duckdb.Error), led.transaction():
                led.discard(unfinished)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    summary.elapsed_s = time.perf_counter() - t0
    summary.notes["engine line kinds"] = dict(sorted(kinds.items(), key=lambda kv: -kv[1]))
    summary.notes["engine unrecognised sample"] = samples
    summary.notes["engine starts"] = starts
    return summary


def _reserve(segment_bytes: int, chunk_bytes: int) -> int:
    """Bytes the engine load holds outside DuckDB: the segments being filled, the blocks being read
    and scanned (a block, the next one decompressed, the scanner's arrays over it, the blocks
    prepared ahead), the interpreter.

    Example:
        >>> _reserve(32 << 20, 16 << 20) >> 20
        352
    """
    return FILES_IN_FLIGHT * (segment_bytes + (3 + PREPARE_WORKERS) * chunk_bytes) + INTERPRETER_BYTES


def _head_sha(snap: Snapshot) -> str:
    """sha256 of the file's first bytes: which known files it may be a grown version of."""
    with snap.open() as fh:
        return hashlib.sha256(fh.read(HEAD_BYTES)).hexdigest()


@dataclass
class _Job:
    """One file being loaded: what its reading thread produces and this thread accumulates.

    A file's lines go to one (node, pod) unless its wrapper names the pod per line (a shipper
    export): each (node, pod) then has its own scanner (the line before, the date reached).
    """

    case: Case
    src: EngineSource
    fs: FileSummary
    snap: Snapshot
    tz: str = "UTC"
    rule: NodeRule | None = None
    file_id: int = 0
    chunk_bytes: int = BLOCK_BYTES
    #: the ledger's handle (None: skipped)
    load: FileLoad | None = None
    #: where the bytes are read from (a private copy when the file moved while it was read)
    path: Any = None
    done: bool = False
    result: ReadResult | None = None
    scanners: dict[tuple[str, str], Scanner] = field(default_factory=dict)
    writer: Writer | None = None
    counts: Counter[str] = field(default_factory=Counter)
    pod_counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    rejected: list[tuple[int, str, bytes]] = field(default_factory=list)
    unrec: list[tuple[int, str]] = field(default_factory=list)
    spans: dict[tuple[str, str, str], tuple[int, int, int]] = field(default_factory=dict)
    blocks: int = 0
    staged: int = 0
    collector_inexact: bool = False
    #: where a grown version resumes: the decompressed byte after the last line end, that line,
    #: and whether the last line read had no line end (cut, or still being written)
    end_offset: int = 0
    end_line: int = 0
    open_tail: bool = False
    #: (line_no, kind) of the last line read (uncounted in engine_line_kinds if a grown version re-reads it)
    last_kind: tuple[int, str] | None = None
    #: the threads preparing blocks (:func:`_run`'s, for all its files); None: scanned serially
    prepare_pool: ThreadPoolExecutor | None = None

    @property
    def decision(self) -> Decision:
        assert self.load is not None
        return self.load.decision

    def again(self, path: Any) -> _Job:
        """A fresh job for the same evidence row, reading ``path``."""
        return _Job(case=self.case, src=self.src, fs=self.fs, snap=self.snap, tz=self.tz, rule=self.rule,
                    file_id=self.file_id, chunk_bytes=self.chunk_bytes, load=self.load, path=path,
                    writer=Writer(self.case.con, self.file_id))

    def scanner(self, node: str, pod: str) -> Scanner:
        sc = self.scanners.get((node, pod))
        if sc is None:
            cur = self.case.con.cursor()
            cur.execute(MACROS)
            sc = Scanner(cur, tz=self.tz, metrics=self.src.kind == "metrics", to_utc=LocalToUtc(self.tz))
            sc.file_hour = _file_hour(self.src, self.tz)
            sc.days.file_day = _file_day(self.src)
            prior = self.decision.prior
            if prior is not None:
                # a grown file: its first lines may continue the earlier version's last dated line
                sc.carry = _carry_from(cur, prior.file_id, node, pod)
            self.scanners[(node, pod)] = sc
        return sc

    def scanned(self) -> Iterator[tuple[str, str, Scanned]]:
        """Runs in the file's reading thread: read (collection stage), split by pod, scan."""
        src = self.src
        d = self.decision
        reader = read_lines(self.path or src.path, block_bytes=self.chunk_bytes, start_offset=d.start_offset,
                            start_line=d.first_line,
                            context={"tz": "UTC" if self.tz == "auto" else self.tz,
                                     "node_rule": None if src.fixed_node else self.rule,
                                     "fixed_node": src.fixed_node})
        file_pod = src.pod or src.node
        last: LineBatch | None = None
        pool = self.prepare_pool
        workers = PREPARE_WORKERS if pool is not None else 0
        # blocks being prepared, oldest first (finished in this order: file order)
        ahead: collections.deque[tuple[str, str, Scanner, Future[Prepared]]] = collections.deque()

        def finished(node: str, pod: str, sc: Scanner, prep: Prepared) -> tuple[str, str, Scanned]:
            out = sc.finish(prep)
            if out.last_kind is not None and (self.last_kind is None or out.last_kind[0] > self.last_kind[0]):
                self.last_kind = out.last_kind
            return node, pod, out

        try:
            for b in reader:
                if not b.collector_exact:
                    # zone-less collector times (RFC 3164 syslog) were converted with --engine-tz itself:
                    # they fill lines without a time but cannot check (or derive) the engine's zone
                    self.collector_inexact = True
                if b.phys_lines or b.rejected:
                    last = b
                if b.rejected:
                    self.rejected.extend(b.rejected)
                if not len(b):
                    continue
                for node, pod, part in _by_pod(b, src, file_pod):
                    sc = self.scanner(node, pod)
                    exact = not self.collector_inexact
                    if pool is None:
                        yield finished(node, pod, sc, sc.prepare(part, exact_collector=exact))
                        continue
                    if sc.prep_con is sc.con:
                        sc.prep_con = sc.con.cursor()
                    ahead.append((node, pod, sc, pool.submit(sc.prepare, part, exact_collector=exact)))
                    while len(ahead) > workers:
                        node0, pod0, sc0, fut = ahead.popleft()
                        yield finished(node0, pod0, sc0, fut.result())
            while ahead:
                node0, pod0, sc0, fut = ahead.popleft()
                yield finished(node0, pod0, sc0, fut.result())
        finally:
            # a block still being prepared when the file stops (an error, Ctrl-C) is waited for
            for *_, fut in ahead:
                fut.cancel()
            futures.wait([fut for *_, fut in ahead])
            for sc in self.scanners.values():
                if sc.prep_con is not sc.con:
                    sc.prep_con.close()
                    sc.prep_con = sc.con
        res = self.result = reader.result
        self._resume_point(res, last)
        for (node, pod), sc in self.scanners.items():
            yield node, pod, sc.flush()

    def _resume_point(self, res: ReadResult, last: LineBatch | None) -> None:
        """Where a grown version of this file resumes: after the last line end (an open last line,
        cut or still being written, is read again whole by that version)."""
        self.end_offset, self.end_line = res.next_offset, res.next_line - 1
        if last is None:
            return
        cut = [raw for _, reason, raw in last.rejected if reason.startswith("line cut off")]
        if cut and not len(last):
            self.open_tail, self.end_offset = True, res.next_offset - len(cut[-1])
        elif len(last) and last.buf.size and int(last.buf[-1]) != 10:
            self.open_tail, self.end_offset = True, int(last.offset[-1])
        if self.open_tail:
            self.end_line -= 1


def _carry_from(con: duckdb.DuckDBPyConnection, file_id: int, node: str, pod: str) -> Carry:
    """The last line with a time of its own of an earlier version of a file (for lines without one)."""
    parts = " UNION ALL ".join(
        f"SELECT line_no, epoch_us(ts) AS us FROM {t} WHERE file_id = $f AND node = $n AND pod = $p "
        "AND ts IS NOT NULL AND NOT coalesce(ts_inferred, false)" for t in TABLES)
    row = con.execute(f"SELECT line_no, us FROM ({parts}) ORDER BY line_no DESC LIMIT 1",
                      {"f": file_id, "n": node, "p": pod}).fetchall()
    return Carry(line_no=int(row[0][0]), ts=int(row[0][1])) if row else Carry()


def _by_pod(b: LineBatch, src: EngineSource, file_pod: str) -> Iterator[tuple[str, str, LineBatch]]:
    """The batch's lines by (node, pod): the wrapper's per-line pod, else the file's."""
    if b.pod is None and b.node is None:
        yield src.node, file_pod, b
        return
    n = len(b)
    pods = b.pod.cast(pa.string()).to_pylist() if b.pod is not None else [None] * n
    nodes = b.node.cast(pa.string()).to_pylist() if b.node is not None and not src.fixed_node else [None] * n
    keys = [(nd or src.node, pd or (file_pod if nd is None else nd)) for nd, pd in zip(nodes, pods, strict=True)]
    distinct = dict.fromkeys(keys)
    if len(distinct) == 1:
        node, pod = next(iter(distinct))
        yield node, pod, b
        return
    import numpy as np

    arr = np.array([hash(k) for k in keys], dtype=np.int64)
    for key in distinct:
        idx = np.flatnonzero(arr == hash(key))
        yield key[0], key[1], _subset(b, idx)


def _subset(b: LineBatch, idx: Any) -> LineBatch:
    """The lines ``idx`` of a batch (same buffer)."""
    import dataclasses

    def pick(a: Any) -> Any:
        return None if a is None else (a.take(pa.array(idx)) if isinstance(a, pa.Array) else a[idx])

    return dataclasses.replace(
        b, starts=b.starts[idx], ends=b.ends[idx], line_no=b.line_no[idx], offset=b.offset[idx],
        n_phys=pick(b.n_phys), collector_us=pick(b.collector_us), stream=pick(b.stream), pod=pick(b.pod),
        node=pick(b.node), sub=pick(b.sub), rejected=(), framing=0)


def _register(led: Ledger, src: EngineSource, snap: Snapshot, fp: Fingerprint, tz: str, chunk_bytes: int,
              rule: NodeRule, seen: dict[str, int]) -> _Job:
    """Begin: the ledger decides (skip, grown, whole) and the evidence row is written as 'loading'."""
    case = led.target
    fmt = "sglang-request-metrics" if src.kind == "metrics" else "sglang"
    fs = FileSummary(path=str(src.path), kind="engine", format=fmt, layer="engine", node=src.node, size=snap.size)
    job = _Job(case=case, src=src, fs=fs, snap=snap, tz=tz, rule=rule, chunk_bytes=chunk_bytes)
    decision = led.decide(fp.sha256, snap.size, fp.prefixes, path=snap.resolved or str(snap.path.resolve()),
                          layer="engine", node=src.node)
    # the same bytes twice in one ingest (a copy beside the original) are read once
    skip = decision.skip if decision.skip is not None else seen.get(fp.sha256)
    if skip is not None:
        fs.file_id = skip
        fs.skipped = f"already in case as file_id {skip}"
        return job
    options = {"node": src.node, "tz": tz, "format": fmt, **({"pod": src.pod} if src.pod else {}),
               **({"container": src.container} if src.container else {}),
               **({"namespace": src.namespace} if src.namespace else {})}
    with led.transaction():
        job.load = led.begin(snap, fp.sha256, decision, format=fmt, layer="engine", node=src.node, tz=tz,
                             options=options, head_sha256=fp.head_sha256)
    seen[fp.sha256] = job.load.file_id
    fs.file_id = job.file_id = job.load.file_id
    job.writer = Writer(case.con, job.file_id)
    return job


_DONE = object()


def _run(jobs: list[_Job], segment_bytes: int) -> Iterator[_Job]:
    """Load the jobs, FILES_IN_FLIGHT at a time, a transaction per file; yield each, in the jobs'
    order, when all its rows are committed (it is still 'loading' until :func:`_finish`).

    Files are finished in the order of their file ids whatever order their reading ends in: an
    ingest killed at any point leaves done files that are a prefix of its files, so the next one
    gives the files it reads again the same ids (the same rows as one clean ingest).
    """
    q: queue.Queue[tuple[int, Any]] = queue.Queue(maxsize=2 * FILES_IN_FLIGHT)
    stop = threading.Event()
    # one pool of prepare threads for every file of the load (threads are not made per file)
    pool = ThreadPoolExecutor(max_workers=PREPARE_WORKERS, thread_name_prefix="engine-prepare") \
        if PREPARE_WORKERS else None
    for j in jobs:
        j.prepare_pool = pool

    def work(i: int) -> None:
        try:
            for item in jobs[i].scanned():
                while not stop.is_set():
                    try:
                        q.put((i, item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((i, _DONE))
        except BaseException as exc:  # handed to this thread
            q.put((i, exc))

    threads: dict[int, threading.Thread] = {}
    nxt = 0
    read: set[int] = set()
    ready = 0  # the next job to yield

    def start_next() -> None:
        nonlocal nxt
        if nxt < len(jobs):
            t = threading.Thread(target=work, args=(nxt,), daemon=True, name=f"engine-read-{nxt}")
            threads[nxt] = t
            t.start()
            nxt += 1

    try:
        for _ in range(FILES_IN_FLIGHT):
            start_next()
        while threads:
            i, item = q.get()
            job = jobs[i]
            if isinstance(item, BaseException):
                raise item
            if item is _DONE:
                assert job.writer is not None
                job.writer.commit()  # its last segment; _finish then makes it done
                threads.pop(i).join()
                read.add(i)
                start_next()
                while ready in read:
                    yield jobs[ready]
                    ready += 1
                continue
            node, pod, out = item
            _absorb(job, node, pod, out)
            if job.staged >= segment_bytes:
                assert job.writer is not None
                job.writer.segment()
                job.staged = 0
    finally:
        stop.set()
        for j in jobs:  # a file whose rows were being inserted when the load stopped
            if j.writer is not None:
                j.writer.abort()
        for t in threads.values():
            # drain while joining: a reader blocked on put() (its last rows, its end, its error)
            # into a full queue would wait for ever for the consumer that stopped (Ctrl-C hung here)
            while t.is_alive():
                with contextlib.suppress(queue.Empty):
                    q.get(timeout=0.05)
            t.join()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _absorb(job: _Job, node: str, pod: str, out: Scanned) -> None:
    """One scanned block of a job: its counts, and its rows for the next commit."""
    if job.blocks == 0 and job.decision.prior is None:
        # (a grown file's new part may start with lines of any kind: its first version was read)
        _refuse_if_not_engine(job.src, out)
    job.blocks += 1
    for k, (ln, lo, hi) in out.spans.items():
        job.spans[(node, pod, k)] = _merge_span(job.spans.get((node, pod, k)), (ln, lo, hi))
    job.counts.update(out.counts)
    job.pod_counts.update({(node, pod, k): v for k, v in out.counts.items()})
    job.rejected.extend(out.rejected)
    if len(job.unrec) < 5:
        job.unrec.extend(out.unrecognised[: 5 - len(job.unrec)])
    assert job.writer is not None
    job.writer.add(out, node, pod)
    job.staged += sum(t.nbytes for t in out.tables.values())


def _finish(led: Ledger, job: _Job, kinds: Counter[str], samples: list[str], *, moved: str | None = None,
            sha256: str | None = None) -> None:
    """Finish: a read file's rejected lines, lines by kind, counts and ``status = 'done'``, and its
    nodes marked for the ``engine_starts`` rebuild, in one transaction."""
    case = led.target
    src, fs, counts, res, load = job.src, job.fs, job.counts, job.result, job.load
    assert job.writer is not None and res is not None and load is not None
    decision = load.decision
    router = sum(counts[k] for k in counts if catalogue().kind(k).family == "router")
    if router > sum(counts.values()) - router:
        fs.format = "smg-router"
    warnings = []
    if res.status.problem:
        warnings.append(res.status.problem)
    warnings.extend(res.warnings)
    if moved:
        warnings.append(f"{moved}: its first {job.snap.size} bytes were read; the rest is read by the next ingest")
    if decision.prior is not None:
        warnings.append(f"grew since file_id {decision.prior.file_id} was read: loaded lines {decision.first_line} on")
    scanners = list(job.scanners.values())
    bad = sum(sc.repairs.bad_utf8_count for sc in scanners)
    if bad:
        first = min(ln for sc in scanners for ln in sc.repairs.bad_utf8_lines)
        warnings.append(f"{bad} line(s) had invalid UTF-8 bytes, kept with U+FFFD (first at line {first})")
    unresolved = sum(sc.days.unresolved for sc in scanners)
    if unresolved:
        warnings.append(f"{unresolved} line(s) carry a time of day without a date, and no collector "
                        "time, dated line or dated file name gives one: their ts is NULL")
    zone_warnings, tz_recorded = zone_findings(src.path.name, job.tz, scanners, job.collector_inexact)
    warnings.extend(zone_warnings)
    mostly = _mostly_unrecognised(src, counts, job.unrec)
    if mostly:
        warnings.append(mostly)
    n_rej = len(job.rejected)
    with led.transaction():  # the file is done in the transaction of its last evidence rows
        store_rejected(case.con, job.file_id, job.rejected)
        loaded = sum(job.writer.rows.values())
        # physical lines = logical lines loaded + joined partial lines + wrapper framing + rejected
        if loaded + n_rej + res.joined + res.framing != res.lines:
            warnings.append(f"count mismatch: {res.lines} lines read, {loaded} loaded, {n_rej} rejected, "
                            f"{res.joined} joined, {res.framing} framing")
        _store_line_kinds(case, job.file_id, job.pod_counts, job.spans, job.last_kind if job.open_tail else None)
        if decision.prior is not None and decision.prior.open_tail:
            _supersede_line_kind(case, decision.prior.file_id, decision.prior.end_line + 1)
        led.finish(load, lines_read=res.lines, rows_loaded=loaded, rows_rejected=n_rej, rows_duplicate=0,
                   complete=res.complete, warning="; ".join(warnings) or None, end_offset=job.end_offset,
                   end_line=job.end_line, open_tail=job.open_tail, format=fs.format)
        case.con.execute(
            "UPDATE evidence_files SET wrapper = $w, lines_joined = $j, lines_framing = $f, tz = $tz "
            "WHERE file_id = $id",
            {"w": res.wrapper, "j": res.joined, "f": res.framing, "tz": tz_recorded, "id": job.file_id})
        if sha256 is not None and sha256 != load.sha256:
            # not only appended to: the bytes loaded (the copy's) are the evidence recorded
            case.con.execute("UPDATE evidence_files SET sha256 = $s WHERE file_id = $f",
                             {"s": sha256, "f": job.file_id})
        for node in sorted({node for node, _ in job.scanners} or {src.node}):
            led.mark_stale("engine_starts", node)
    fs.lines_read, fs.rows_loaded, fs.rows_rejected = res.lines, loaded, n_rej
    fs.lines_joined, fs.lines_framing = res.joined, res.framing
    fs.complete, fs.warnings = res.complete, warnings
    fs.detected = res.detected
    kinds.update(counts)
    for ln, text in job.unrec:
        if len(samples) < 5:
            samples.append(f"{src.path.name}:{ln}: {text}")


def _finish_from_copy(led: Ledger, job: _Job, moved: str, segment_bytes: int, kinds: Counter[str],
                      samples: list[str]) -> None:
    """The file grew or changed while it was read: its rows so far give way, and it is read again
    from a private copy of exactly the bytes hashed at open (the evidence is the snapshot)."""
    case = led.target
    with led.transaction():
        for table in led.evidence_tables():
            case.con.execute(f'DELETE FROM "{table}" WHERE file_id = $f', {"f": job.file_id})
    with case.temp_dir() as d:
        copy = d / job.src.path.name
        h = hashlib.sha256()
        with job.snap.open() as fh, open(copy, "wb") as out:
            while block := fh.read(1 << 20):
                h.update(block)
                out.write(block)
        for again in _run([job.again(copy)], segment_bytes):
            _finish(led, again, kinds, samples, moved=moved, sha256=h.hexdigest())
