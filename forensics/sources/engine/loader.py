"""The engine loader: files in, typed tables and evidence records out.

For each file (oldest rotation first, see :mod:`.sources`): register it as evidence, read it in
blocks (:mod:`.read`), scan each block (:mod:`.scan`) and insert the typed Arrow tables into
DuckDB, one transaction per segment of blocks; then record the file's counts (lines read =
loaded + rejected, lines by kind) and rebuild ``engine_starts`` for the nodes touched
(:mod:`.starts`). Reading and decompressing the next block runs in a thread while DuckDB inserts
the last one (numba's scanner, ISA-L, hashlib and DuckDB all release the GIL), and each file's
sha256 is computed ahead in another thread.

Example:
    >>> from forensics.case import open_case
    >>> from forensics.sample import sample_dir
    >>> case = open_case(":memory:")
    >>> s = case.ingest_engine([f"prefill-0={sample_dir() / 'engine' / 'prefill-0'}"], tz="Asia/Singapore")
    >>> s.files[0].node, all(f.reconciles for f in s.files)
    ('prefill-0', True)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import queue
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from forensics.errors import InputError, ParameterError
from forensics.sources.collect import ReadResult, read_lines
from forensics.sources.collect.layout import METRICS_RE, EngineSource, NodeRule, resolve_sources
from forensics.sources.engine.catalogue import catalogue
from forensics.sources.engine.prefix import NO_TS
from forensics.sources.engine.redact import redact_raw
from forensics.sources.engine.scan import Scanned, Scanner
from forensics.sources.engine.sql import INSERTS, MACROS
from forensics.sources.engine.starts import rebuild_starts
from forensics.sources.engine.timeinfer import LocalToUtc
from forensics.sources.engine.zones import zone_findings
from forensics.sources.files import (
    finish_file,
    progress_bar,
    register_file,
    sha256_file,
    store_rejected,
)
from forensics.sources.lines import LineBatch
from forensics.sources.summary import FileSummary, IngestSummary
from forensics.sources.timezones import check_tz

if TYPE_CHECKING:
    from forensics.case import Case

#: Arrow bytes (typed rows) inserted per transaction: bounds the loader's own memory. Typed rows
#: take about a third of the text they come from, so a segment covers ~200 MB of log text: few
#: commits (each one rewrites every table's last row group: 64 MB of text per commit cost DuckDB
#: twice the CPU of the rows themselves, measured).
SEGMENT_BYTES = 64 << 20
#: Files read and scanned at once (two cores: two scanners and this thread's inserts overlap).
FILES_IN_FLIGHT = 2
#: DuckDB's WAL checkpoint threshold while engine logs load (its default of 16 MB checkpointed
#: after nearly every segment, recompressing the tables' last row groups each time).
CHECKPOINT_THRESHOLD = "256MB"

#: Typed tables an engine line can land in (for the per-file count).
TABLES = ("engine_batches", "engine_requests", "engine_rejections", "engine_events", "engine_http",
          "router_requests", "engine_other_lines")


#: Blocks read per file (decompressed bytes).
BLOCK_BYTES = 16 << 20


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


def _refuse_if_not_engine(case: Case, src: EngineSource, file_id: int, out: Scanned) -> None:
    """A file none of whose first lines is an SGLang or router line is not engine evidence.

    It could only give false facts (a gateway CSV quoting a rejection message would become an
    admission limit), so it is refused before anything of it is stored.
    """
    lines = sum(out.counts.values())
    nonblank = lines - out.counts.get("blank", 0)
    if nonblank == 0 or out.sglang_lines > 0:
        return
    case.con.execute("DELETE FROM evidence_files WHERE file_id = $f", {"f": file_id})
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


def _store_line_kinds(case: Case, file_id: int, counts: Counter[tuple[str, str, str]],
                      spans: dict[tuple[str, str, str], tuple[int, int, int]]) -> None:
    cat = catalogue()
    fam = {k.name: k.family for k in cat.kinds}
    rows = []
    for (node, pod, k), n in sorted(counts.items()):
        ln, lo, hi = spans.get((node, pod, k), (None, NO_TS, NO_TS))
        rows.append((file_id, node, pod, k, fam.get(k, "unknown"), n, ln, lo if lo != NO_TS else None,
                     hi if hi != NO_TS else None))
    if rows:
        case.con.executemany(
            "INSERT INTO engine_line_kinds VALUES (?, ?, ?, ?, ?, ?, ?, make_timestamp(?::BIGINT), "
            "make_timestamp(?::BIGINT))", rows)


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


@contextlib.contextmanager
def _checkpoint_threshold(con: duckdb.DuckDBPyConnection, value: str) -> Iterator[None]:
    """DuckDB's checkpoint threshold set to ``value`` while the block runs, restored after."""
    row = con.execute("SELECT current_setting('checkpoint_threshold')").fetchone()
    before = str(row[0]) if row else "16.0 MiB"
    con.execute(f"SET checkpoint_threshold = '{value}'")
    try:
        yield
    finally:
        con.execute(f"SET checkpoint_threshold = '{before}'")


class _Writer:
    """Collects a segment's Arrow tables (per node and pod) and inserts them in one transaction."""

    def __init__(self, con: duckdb.DuckDBPyConnection, file_id: int) -> None:
        self.con = con
        self.file_id = file_id
        self.parts: dict[tuple[str, str, str], list[pa.Table]] = {}
        self.rows: Counter[str] = Counter()

    def add(self, scanned: Scanned, node: str, pod: str) -> None:
        for table, t in scanned.tables.items():
            if t.num_rows:
                self.parts.setdefault((node, pod, table), []).append(t)

    def commit(self) -> None:
        if not self.parts:
            return
        con = self.con
        con.execute("BEGIN TRANSACTION")
        try:
            for (node, pod, table), parts in self.parts.items():
                t = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
                con.register("_eng_rows", t)
                try:
                    con.execute(INSERTS[table], {"node": node, "pod": pod, "file_id": self.file_id})
                finally:
                    con.unregister("_eng_rows")
                if table != "engine_startup_facts":
                    self.rows[table] += t.num_rows
            con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise
        self.parts.clear()


def ingest_engine(
    case: Case,
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    tz: str = "UTC",
    quiet: bool = True,
    chunk_bytes: int = BLOCK_BYTES,
    segment_bytes: int = SEGMENT_BYTES,
    node_map: str | os.PathLike[str] | None = None,
    **options: Any,
) -> IngestSummary:
    """Load SGLang engine/router logs (``[NODE=]PATH`` items) and rebuild ``engine_starts``.

    Files may be plain or collected (CRI, Docker, journald, syslog, shipper exports: detected per
    file, :mod:`forensics.sources.collect`). ``tz`` is the zone of the engines' local times, or
    ``auto`` (each file's offset from its collector's UTC times). ``node_map`` is a TOML file of
    ``"regex" = "node"`` pairs grouping pods into logical nodes.

    Example:
        >>> from forensics.case import open_case
        >>> s = ingest_engine(open_case(":memory:"), ["decode-0=tests/fixtures/engine/v0_5_6/decode-0.log"])
        >>> s.files[0].node, s.files[0].reconciles
        ('decode-0', True)
    """
    if options:
        raise ParameterError(f"unknown engine option(s): {', '.join(sorted(options))}",
                             hint="engine ingest takes paths, tz, node_map and quiet")
    t0 = time.perf_counter()
    con = case.con
    # auto: each file's offset from its collection wrapper's UTC times (timezones.auto_offsets)
    tz = "auto" if tz.strip().lower() == "auto" else check_tz(tz)
    rule = NodeRule.load(node_map)
    layout_warnings: list[str] = []
    sources = resolve_sources(paths, node_map=rule, warnings=layout_warnings)
    con.execute(MACROS)
    summary = IngestSummary()
    if layout_warnings:
        summary.notes["engine layout warnings"] = layout_warnings
    kinds: Counter[str] = Counter()
    samples: list[str] = []
    touched: set[str] = set()
    total_bytes = sum(s.path.stat().st_size for s in sources)
    # Up to FILES_IN_FLIGHT files are read, decompressed and scanned at once, each in its own
    # thread with its own cursor (the macros of the rare kinds' SQL); this thread does every
    # insert. Files are registered in their reading order, so file ids do not depend on timing.
    # Arrow tables of the segments being filled and the blocks in flight live outside DuckDB's
    # accounting: its limit is lowered by them while the loader runs. The files' sha256 (needed
    # first, for the idempotency check) are computed ahead in a thread.
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        with case.loading(reserve_bytes=FILES_IN_FLIGHT * (segment_bytes + 3 * chunk_bytes)), \
                _checkpoint_threshold(con, CHECKPOINT_THRESHOLD), progress_bar(quiet, total_bytes, "engine") as bar:
            digests = [pool.submit(sha256_file, s.path) for s in sources]
            jobs: list[_Job] = []
            for src, digest in zip(sources, digests, strict=True):
                job = _register(case, src, digest.result(), tz, chunk_bytes, rule)
                summary.files.append(job.fs)
                if job.fs.skipped is None:
                    jobs.append(job)
            for job in _run(jobs, segment_bytes):
                _finish(case, job, kinds, samples)
                touched.update(node for node, _ in job.scanners)
                if bar is not None:
                    bar.update(bar.task_ids[0], advance=job.src.path.stat().st_size, file=job.src.path.name)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    starts = rebuild_starts(case, touched)
    summary.elapsed_s = time.perf_counter() - t0
    summary.notes["engine line kinds"] = dict(sorted(kinds.items(), key=lambda kv: -kv[1]))
    summary.notes["engine unrecognised sample"] = samples
    summary.notes["engine starts"] = starts
    return summary


@dataclass
class _Job:
    """One file being loaded: what its reading thread produces and this thread accumulates.

    A file's lines go to one (node, pod) unless its wrapper names the pod per line (a shipper
    export): each (node, pod) then has its own scanner (the line before, the date reached).
    """

    case: Case
    src: EngineSource
    fs: FileSummary
    tz: str = "UTC"
    rule: NodeRule | None = None
    file_id: int = 0
    chunk_bytes: int = BLOCK_BYTES
    result: ReadResult | None = None
    scanners: dict[tuple[str, str], Scanner] = field(default_factory=dict)
    writer: _Writer | None = None
    counts: Counter[str] = field(default_factory=Counter)
    pod_counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    rejected: list[tuple[int, str, bytes]] = field(default_factory=list)
    unrec: list[tuple[int, str]] = field(default_factory=list)
    spans: dict[tuple[str, str, str], tuple[int, int, int]] = field(default_factory=dict)
    blocks: int = 0
    staged: int = 0
    collector_inexact: bool = False

    def scanner(self, node: str, pod: str) -> Scanner:
        sc = self.scanners.get((node, pod))
        if sc is None:
            cur = self.case.con.cursor()
            cur.execute(MACROS)
            sc = Scanner(cur, tz=self.tz, metrics=self.src.kind == "metrics", to_utc=LocalToUtc(self.tz))
            sc.file_hour = _file_hour(self.src, self.tz)
            sc.days.file_day = _file_day(self.src)
            self.scanners[(node, pod)] = sc
        return sc

    def scanned(self) -> Iterator[tuple[str, str, Scanned]]:
        """Runs in the file's reading thread: read (collection stage), repair, split by pod, scan."""
        src = self.src
        reader = read_lines(src.path, block_bytes=self.chunk_bytes,
                            context={"tz": "UTC" if self.tz == "auto" else self.tz,
                                     "node_rule": None if src.fixed_node else self.rule,
                                     "fixed_node": src.fixed_node})
        file_pod = src.pod or src.node
        for b in reader:
            if not b.collector_exact:
                # zone-less collector times (RFC 3164 syslog) were converted with --engine-tz itself:
                # they fill lines without a time but cannot check (or derive) the engine's zone
                self.collector_inexact = True
            if b.rejected:
                self.rejected.extend((ln, reason, redact_raw(raw)) for ln, reason, raw in b.rejected)
            if not len(b):
                continue
            for node, pod, part in _by_pod(b, src, file_pod):
                yield node, pod, self.scanner(node, pod).scan(part, exact_collector=not self.collector_inexact)
        self.result = reader.result
        for (node, pod), sc in self.scanners.items():
            yield node, pod, sc.flush()


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


def _register(case: Case, src: EngineSource, digest: str, tz: str, chunk_bytes: int, rule: NodeRule) -> _Job:
    fmt = "sglang-request-metrics" if src.kind == "metrics" else "sglang"
    options = {"node": src.node, "tz": tz, "format": fmt, **({"pod": src.pod} if src.pod else {}),
               **({"container": src.container} if src.container else {}),
               **({"namespace": src.namespace} if src.namespace else {})}
    reg = register_file(case, src.path, kind="engine", format=fmt, layer="engine", node=src.node, tz=tz,
                        options=options, sha256=digest)
    fs = FileSummary(path=str(src.path), kind="engine", format=fmt, layer="engine", node=src.node,
                     size=src.path.stat().st_size)
    job = _Job(case=case, src=src, fs=fs, tz=tz, rule=rule, chunk_bytes=chunk_bytes)
    if isinstance(reg, int):
        fs.file_id = reg
        fs.skipped = f"already in case as file_id {reg}"
        return job
    fs.file_id = job.file_id = reg.file_id
    job.writer = _Writer(case.con, reg.file_id)
    return job


_DONE = object()


def _run(jobs: list[_Job], segment_bytes: int) -> Iterator[_Job]:
    """Load the jobs, FILES_IN_FLIGHT at a time; yield each when all its rows are committed."""
    q: queue.Queue[tuple[int, Any]] = queue.Queue(maxsize=2 * FILES_IN_FLIGHT)
    stop = threading.Event()

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
                job.writer.commit()
                threads.pop(i).join()
                yield job
                start_next()
                continue
            node, pod, out = item
            _absorb(job, node, pod, out)
            if job.staged >= segment_bytes:
                assert job.writer is not None
                job.writer.commit()
                job.staged = 0
    finally:
        stop.set()
        for t in threads.values():
            t.join()


def _absorb(job: _Job, node: str, pod: str, out: Scanned) -> None:
    """One scanned block of a job: its counts, and its rows for the next commit."""
    if job.blocks == 0:
        _refuse_if_not_engine(job.case, job.src, job.file_id, out)
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


def _finish(case: Case, job: _Job, kinds: Counter[str], samples: list[str]) -> None:
    """A loaded file's counts, rejected lines, warnings and lines by kind."""
    src, fs, counts, res = job.src, job.fs, job.counts, job.result
    assert job.writer is not None and res is not None
    n_rej = store_rejected(case, job.file_id, job.rejected)
    loaded = sum(job.writer.rows.values())
    router = sum(counts[k] for k in counts if catalogue().kind(k).family == "router")
    if router > sum(counts.values()) - router:
        fs.format = "smg-router"
    warnings = []
    if res.status.problem:
        warnings.append(res.status.problem)
    warnings.extend(res.warnings)
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
    # physical lines = logical lines loaded + joined partial lines + wrapper framing + rejected
    if loaded + n_rej + res.joined + res.framing != res.lines:
        warnings.append(f"count mismatch: {res.lines} lines read, {loaded} loaded, {n_rej} rejected, "
                        f"{res.joined} joined, {res.framing} framing")
    mostly = _mostly_unrecognised(src, counts, job.unrec)
    if mostly:
        warnings.append(mostly)
    _store_line_kinds(case, job.file_id, job.pod_counts, job.spans)
    fs.lines_read, fs.rows_loaded, fs.rows_rejected = res.lines, loaded, n_rej
    fs.lines_joined, fs.lines_framing = res.joined, res.framing
    fs.complete, fs.warnings = res.complete, warnings
    fs.detected = res.detected
    finish_file(case, job.file_id, lines_read=res.lines, rows_loaded=loaded, rows_rejected=n_rej,
                rows_duplicate=0, complete=res.complete, warning="; ".join(warnings) or None, format=fs.format)
    case.con.execute(
        "UPDATE evidence_files SET wrapper = $w, lines_joined = $j, lines_framing = $f, tz = $tz WHERE file_id = $id",
        {"w": res.wrapper, "j": res.joined, "f": res.framing, "tz": tz_recorded, "id": job.file_id})
    kinds.update(counts)
    for ln, text in job.unrec:
        if len(samples) < 5:
            samples.append(f"{src.path.name}:{ln}: {text}")
