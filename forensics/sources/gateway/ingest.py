"""The gateway loader's entry point: expand paths, plan every file, load them in batches.

Every file goes through the evidence ledger (:mod:`forensics.sources.ledger`): registered as
'loading', its rows written, its counts and 'done' committed with its last rows. Small files of
one format are loaded together (one ``read_json`` over the list); a big file is hashed and counted
in a thread beside its load. A grown file loads only its new lines, a damaged stream its readable
part, a file that moved while read exactly the bytes of its snapshot (:mod:`.copies`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import duckdb

from forensics.case import LoadTarget
from forensics.errors import InputError, ParameterError
from forensics.sources.files import (
    Snapshot,
    compression_of,
    progress_bar,
    store_rejected,
    walk_files,
)
from forensics.sources.gateway import fastpath
from forensics.sources.gateway.copies import Copy, head_line, make_copy, sha256_head
from forensics.sources.gateway.duplicates import flag_duplicates
from forensics.sources.gateway.fastpath import fast_path_ok
from forensics.sources.gateway.joined import Joined, keep_only, scan_joined
from forensics.sources.gateway.load import Counts, Item, load_files
from forensics.sources.gateway.numbering import raw_lines
from forensics.sources.gateway.presets import apply_options, resolve_spec
from forensics.sources.gateway.readers import refused_quoted_newline
from forensics.sources.gateway.scan import MAX_DEPTH, MAX_LINE_BYTES, Scan, scan_file
from forensics.sources.gateway.sniffing import (
    FilePlan,
    Sniff,
    check_required,
    detect,
    shape_key,
    sniff,
)
from forensics.sources.gateway.spec import Spec
from forensics.sources.gateway.sql import install_macros
from forensics.sources.ledger import Decision, FileLoad, Ledger, database_errors
from forensics.sources.summary import FileSummary, IngestSummary
from forensics.sources.timezones import check_tz

#: Options ``ingest_gateway`` accepts besides format/tz/quiet/skip_unreadable.
KNOWN_OPTIONS = {
    "layer": "override the layer written to every row (edge, proxy, router, ...)",
    "tenant_field": "read the tenant from this field (top-level key or $-path) instead of the preset's rule",
    "tenant_header": "cloudflare-http: read the tenant from RequestHeaders.<NAME> instead of the path",
    "tenant_key": "cloudflare-ai-gateway: the key inside metadata that holds the tenant",
    "tenant_attribute": "otel: the span or resource attribute that holds the tenant",
}

#: Memory the gateway loader's process holds beside DuckDB's budget while loading (the Python
#: runtime, the hashing thread's blocks, DuckDB's allocations outside its buffer pool): kept out
#: of the load budget so the process stays under it (measured on 5 M rows: 925 -> ~770 MiB peak).
LOAD_RESERVE_BYTES = 160 << 20

#: Small line-oriented files of one spec are loaded together (planning costs more than reading them).
BATCH_FILE_BYTES = 8 * 1024 * 1024
BATCH_MAX_FILES = 4096
BATCH_MAX_BYTES = 1024 * 1024 * 1024

#: Evidence tables whose rows count as loaded gateway records.
_COUNTED = ("gateway_requests",)

#: The spec of an empty file read with format auto: nothing to detect, nothing to load.
EMPTY_SPEC = Spec(name="empty", layer="", columns={})


@dataclass
class _Job:
    """One file to load: its plan, snapshot, scan (maybe still running) and what the ledger decided."""

    plan: FilePlan
    snap: Snapshot
    summary: FileSummary
    scan: Callable[[], Scan]
    decision: Decision = field(default_factory=Decision)
    load: FileLoad | None = None
    #: set when the file is read from a private copy instead of itself
    copy: Copy | None = None
    #: the scan ran before the load (else it runs beside it, in a thread)
    scan_known: bool = False
    warnings: list[str] = field(default_factory=list)


def ingest_gateway(
    target: LoadTarget,
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    format: str = "auto",
    tz: str = "UTC",
    quiet: bool = True,
    skip_unreadable: bool = False,
    **options: Any,
) -> IngestSummary:
    """Load gateway logs (files, directories, globs) into ``gateway_requests``.

    ``format`` is ``auto`` (detect per file), a preset name or a TOML mapping path; ``tz`` is the
    zone of zone-less timestamps; ``skip_unreadable`` lists unreadable paths as not read instead
    of stopping. Options: see :data:`KNOWN_OPTIONS`.

    Example:
        >>> import forensics
        >>> case = forensics.open_case(":memory:")
        >>> from forensics.sample import sample_dir
        >>> s = case.ingest_gateway(sample_dir() / "gateway" / "litellm", format="litellm", quiet=True)
        >>> s.files[0].reconciles
        True
    """
    t0 = time.perf_counter()
    bad = set(options) - set(KNOWN_OPTIONS)
    if bad:
        raise ParameterError(f"unknown gateway option(s) {sorted(bad)}",
                             hint=f"known: {', '.join(KNOWN_OPTIONS)}")
    con = target.con
    tz = check_tz(tz)  # the toolkit's one zone validator (forensics.sources.timezones)
    fixed = resolve_spec(format)
    if fixed is not None and fixed.tz:
        check_tz(fixed.tz)
    files, unreadable = walk_files(paths, skip_unreadable=skip_unreadable)
    # Detect every file first: a wrong format fails before any time is spent loading. Files that
    # read alike (same compression, container, first record's keys) share one sniff.
    memo: dict[tuple[Any, ...], FilePlan] = {}
    plans: list[FilePlan] = []
    for p in files:
        with database_errors(str(p)):  # sniffing reads with DuckDB too: its errors leave as the toolkit's
            plans.append(_plan(p, fixed, options, memo))
    summary = IngestSummary()
    with target.loading(LOAD_RESERVE_BYTES), database_errors():
        install_macros(con)
        led = Ledger(target, "gateway", counted=_COUNTED)
        recovered = led.recover()
        if recovered:
            summary.notes["gateway: interrupted loads rolled back and read again"] = ", ".join(
                r.path for r in recovered)
        total_bytes = sum(p.size for p in plans)
        with progress_bar(quiet, total_bytes, "gateway") as bar:
            for batch in _batches(plans):
                if bar is not None:
                    bar.update(bar.task_ids[0], file=batch[0].path.name)
                done = (_ingest_batch(led, batch, tz, options) if len(batch) > 1
                        else [_ingest_one(led, batch[0], tz, options, bar)])
                summary.files.extend(done)
                if bar is not None:
                    bar.advance(bar.task_ids[0], sum(f.size for f in done))
    for u in unreadable:
        summary.files.append(FileSummary(path=str(u.path), kind="gateway", not_read=u.reason))
    summary.elapsed_s = time.perf_counter() - t0
    return summary


def _plan(path: Path, fixed: Any, options: dict[str, Any],
          memo: dict[tuple[Any, ...], FilePlan] | None = None) -> FilePlan:
    """Sniff one file and pick its spec (``fixed``, else detected); empty files get no spec check."""
    size = path.stat().st_size
    key = shape_key(path, compression_of(path)) if memo is not None and size else None
    if key is not None and memo is not None and key in memo:
        seen = memo[key]
        return FilePlan(path, seen.spec, seen.sniff, seen.detected, size)
    plan = _plan_one(path, fixed, options, size)
    if key is not None and memo is not None:
        memo[key] = plan
    return plan


def _plan_one(path: Path, fixed: Any, options: dict[str, Any], size: int) -> FilePlan:
    sn = sniff(path)
    if sn.container == "empty":
        spec = fixed if fixed is not None else EMPTY_SPEC
        return FilePlan(path, spec, sn, None, size)
    if fixed is None:
        spec, detected = detect(sn, path)
    else:
        spec, detected = fixed, None
        if spec.container == "text" and sn.container != "text" and spec.line_regex:
            sn = Sniff("text", sn.compression, [], set(), sn.text_lines)
    if spec.line_regex is not None and sn.container != "text":
        sn = Sniff("text", sn.compression, [], set(), [])
    if spec.line_regex is None and sn.container == "text":
        raise InputError(
            f"{spec.name} reads JSON, CSV or Parquet records, but this file is plain text",
            where=str(path), hint="pick the right --gateway-format, or a mapping .toml with line_regex",
        )
    plan = FilePlan(path, apply_options(spec, options), sn, detected, size)
    check_required(plan)
    return plan


def _batchable(plan: FilePlan) -> bool:
    return (plan.sniff.container in ("ndjson", "text") and plan.spec.container != "otlp"
            and plan.size < BATCH_FILE_BYTES)


def _batches(plans: list[FilePlan]) -> Iterator[list[FilePlan]]:
    """Group consecutive small line-oriented files of one spec (loaded by one statement)."""
    batch: list[FilePlan] = []
    size = 0
    for plan in plans:
        fits = (batch and _batchable(plan) and plan.spec == batch[0].spec
                and plan.sniff.container == batch[0].sniff.container
                and len(batch) < BATCH_MAX_FILES and size + plan.size <= BATCH_MAX_BYTES)
        if batch and not fits:
            yield batch
            batch, size = [], 0
        batch.append(plan)
        size += plan.size
        if not _batchable(plan):
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _opts(plan: FilePlan, tz: str, options: dict[str, Any]) -> dict[str, Any]:
    spec = plan.spec
    opts = {"format": spec.name, "tz": spec.tz or tz, "container": plan.sniff.container, **options}
    if spec.source != "preset":
        opts["mapping"] = str(Path(spec.source).resolve())
    return opts


def _meta(job: _Job, tz: str, options: dict[str, Any]) -> dict[str, Any]:
    spec = job.plan.spec
    empty = job.plan.sniff.container == "empty" and spec is EMPTY_SPEC
    return {"format": None if empty else spec.name, "layer": None if empty else spec.layer,
            "tz": spec.tz or tz, "options": _opts(job.plan, tz, options), "head_sha256": job.scan().head}


def _known(scan: Scan) -> Callable[[], Scan]:
    return lambda: scan


def _lines_of(scan: Scan) -> Callable[[], int]:
    return lambda: scan.lines


def _summary(plan: FilePlan, size: int) -> FileSummary:
    empty = plan.spec is EMPTY_SPEC
    return FileSummary(path=str(plan.path), kind="gateway", format="" if empty else plan.spec.name,
                       layer=None if empty else plan.spec.layer, size=size, detected=plan.detected)


def _decide(led: Ledger, job: _Job, seen: dict[str, str]) -> bool:
    """Set the job's decision from its (finished) scan; False when the file is skipped."""
    sc = job.scan()
    job.decision = led.decide(sc.sha, job.snap.size, sc.prefixes,
                              path=job.snap.resolved or str(job.snap.path.resolve()), layer=job.plan.spec.layer)
    fs = job.summary
    if job.decision.skip is not None:
        fs.file_id = job.decision.skip
        fs.skipped = f"already in case as file_id {job.decision.skip} (same sha256)"
        return False
    if sc.sha in seen:
        fs.skipped = f"same bytes as {seen[sc.sha]} (same sha256)"
        return False
    seen[sc.sha] = str(job.plan.path)
    return True


def _needs_copy(job: _Job) -> bool:
    """The file cannot be handed to DuckDB as it is (grown, damaged stream, over-long lines)."""
    sc = job.scan()
    return job.decision.prior is not None or sc.damaged or sc.longest > MAX_LINE_BYTES


def _ingest_batch(led: Ledger, plans: list[FilePlan], tz: str, options: dict[str, Any]) -> list[FileSummary]:
    """Load several small files in one transaction and one INSERT; odd ones one by one."""
    snaps = [Snapshot.take(p.path) for p in plans]
    cuts = [led.prefix_sizes(s.size, sha256_head(s)) if led.has_known() else [] for s in snaps]
    # a file that may be one already in the case (its size is known) is not decoded into the
    # joined files before its sha256 says so: then it is mostly skipped
    join = [fast_path_ok(p) and not c and not led.has_size(s.size) for p, s, c in zip(plans, snaps, cuts, strict=True)]
    with contextlib.ExitStack() as stack:
        joined: list[Joined] = []
        if any(join):
            scans, joined = scan_joined(snaps, cuts, join, stack.enter_context(led.target.temp_dir()))
        else:
            # hashing, inflating and counting release the GIL: two files at a time (measured 0.8 -> 0.5 s
            # for 227 hourly files)
            with ThreadPoolExecutor(max_workers=2) as pool:
                scans = list(pool.map(lambda a: scan_file(a[0], a[1]), zip(snaps, cuts, strict=True)))
        jobs = [_Job(p, s, _summary(p, s.size), _known(sc), scan_known=True)
                for p, s, sc in zip(plans, snaps, scans, strict=True)]
        seen: dict[str, str] = {}
        todo = [j for j in jobs if _decide(led, j, seen)]
        alone = [j for j in todo if _needs_copy(j) or j.plan.sniff.container == "empty"]
        together = [j for j in todo if j not in alone]
        if len(together) == 1:
            alone, together = alone + together, []
        if together:
            alone.extend(_load_together(led, jobs, together, joined, tz, options))
    for j in alone:
        moved = j.snap.changed()
        if moved:
            j.copy = None
            j.warnings.append(f"{moved}: its first {j.snap.size} bytes were read (a private copy); "
                              f"the rest is read by the next ingest")
        _load_alone(led, j, tz, options, force_copy=bool(moved))
    return [j.summary for j in jobs]


def _load_together(led: Ledger, jobs: list[_Job], together: list[_Job], joined: list[Joined], tz: str,
                   options: dict[str, Any]) -> list[_Job]:
    """Load the files of a batch in one transaction; return those to read one by one instead."""
    fast = all(fast_path_ok(j.plan) for j in together) and len({j.plan.sniff.compression for j in together}) == 1
    try:
        with led.transaction():
            loads = led.begin_many([(j.snap, j.scan().sha, j.decision, _meta(j, tz, options)) for j in together])
            for j, fl in zip(together, loads, strict=True):
                j.load = fl
                j.summary.file_id = fl.file_id
            items = [Item(j.plan, fl.file_id, str(j.plan.path), fl.compression,
                          scan=j.scan if fast else None, lines=_lines_of(j.scan()))
                     for j, fl in zip(together, loads, strict=True)]
            position = {id(j): k for k, j in enumerate(jobs)}
            # in the joined files only what is read together, every line a row (no blank line) read
            # as in a file of its own (no byte-order mark, which read_json drops only at a file's start)
            wanted = {position[id(j)]: fl.file_id for j, fl in zip(together, loads, strict=True)
                      if fast and not j.scan().maybe_blank and not j.scan().bom}
            counts = _load_batch(led.con, items, tz, keep_only(joined, wanted))
            if any(j.snap.changed() for j in together):
                raise _Moved(together)
            _finish(led, together, counts)
    except _Moved:
        # one of them moved while read: each is read again on its own (a moved one from a copy)
        _discard(led, together)
        return together
    except duckdb.InterruptException:
        raise KeyboardInterrupt from None
    except duckdb.Error:
        # e.g. a file that fails inside the batch: redo these files one by one, where each
        # failure is handled (salvaged, reported) on its own
        _discard(led, together)
        return together
    return []


class _Moved(Exception):
    """The files must be read again from private copies (they moved, or their scan says so)."""

    def __init__(self, jobs: list[_Job], why: str | None = None) -> None:
        super().__init__("files moved while read")
        self.jobs = jobs
        self.why = why


def _discard(led: Ledger, jobs: list[_Job]) -> None:
    """Drop what a failed attempt left of these files (rows committed at a commit point included)."""
    ids = [j.load.file_id for j in jobs if j.load is not None]
    with led.transaction():
        led.discard(ids)
    for j in jobs:
        j.load = None
        j.summary.file_id = None


def _load_batch(con: duckdb.DuckDBPyConnection, items: list[Item], tz: str,
                joined: list[Joined] | None = None) -> dict[int, Counts]:
    """Load a batch of small files of one spec: those in ``joined`` from it, the others as they are.

    NDJSON with known scans goes through one ``read_json``; files read_json cannot number (a blank
    line) go through the line reader, the others stay.
    """
    if joined:
        in_joined = {p.file_id for j in joined for p in j.parts}
        got = fastpath.load_joined(con, [it for it in items if it.file_id in in_joined], joined, tz)
        if got is None:  # their rows (under the joined files' first ids) go; read as they are below
            con.execute("DELETE FROM gateway_requests WHERE list_contains($ids, file_id)", {"ids": sorted(in_joined)})
        else:
            items = [it for it in items if it.file_id not in in_joined]
            if not items:
                return got
            rest = _load_listed(con, items, tz)
            return _flag_again(con, {**got, **rest})
    return _load_listed(con, items, tz)


def _load_listed(con: duckdb.DuckDBPyConnection, items: list[Item], tz: str) -> dict[int, Counts]:
    """Load files of one spec as they are: one ``read_json`` over their list, else the line reader."""
    counts: dict[int, Counts] = {}
    if all(it.scan is not None for it in items):
        # read_json over all the files at once: parallel across files (a UNION ALL of line
        # readers ran them one after the other: 227 hourly .gz files, 6.8 s against 2.7 s bare)
        left: list[int] = []
        fast = fastpath.load_fast(con, items, tz, leftover=left)
        if fast is not None and not left:
            return fast
        if fast is None:
            ids = ", ".join(str(int(it.file_id)) for it in items)
            con.execute(f"DELETE FROM gateway_requests WHERE file_id IN ({ids})")
        else:
            counts = fast
            items = [it for it in items if it.file_id in left]
        items = [Item(it.plan, it.file_id, it.read_path, it.comp, lines=it.lines) for it in items]
    if not counts:
        return load_files(con, items, tz)
    counts.update(load_files(con, items, tz))
    return _flag_again(con, counts)


def _flag_again(con: duckdb.DuckDBPyConnection, counts: dict[int, Counts]) -> dict[int, Counts]:
    """The parts of a batch were flagged apart: flag the batch's delivery-retry copies again, as one."""
    con.execute("UPDATE gateway_requests SET is_duplicate = false WHERE list_contains($ids, file_id) "
                "AND is_duplicate", {"ids": list(counts)})
    flags = flag_duplicates(con, list(counts))
    for fid, c in counts.items():
        c.duplicate = flags.get(fid, 0)
    return counts


def _reject_deep(con: duckdb.DuckDBPyConnection, job: _Job, c: Counts) -> None:
    """Reject the lines whose JSON nests deeper than MAX_DEPTH (DuckDB reads them; others would not)."""
    assert job.load is not None
    first = job.decision.first_line
    lines = sorted(n for n in job.scan().deep if n >= first)
    if not lines or job.plan.sniff.container != "ndjson":
        return
    fid = job.load.file_id
    if job.copy is not None:
        shift = first - 1 - job.copy.header_lines
        raws = raw_lines(job.copy.path, "none", {n - shift for n in lines})
        raws = {n + shift: r for n, r in raws.items()}
    else:
        raws = raw_lines(job.plan.path, compression_of(job.plan.path), set(lines), job.scan().marks)
    con.execute("DELETE FROM gateway_requests WHERE file_id = $f AND list_contains($l, line_no)", {"f": fid, "l": lines})
    con.execute("DELETE FROM rejected_lines WHERE file_id = $f AND list_contains($l, line_no)", {"f": fid, "l": lines})
    store_rejected(con, fid, [(n, f"JSON nested {MAX_DEPTH} or more levels deep: not parsed", raws.get(n, b""))
                              for n in lines])
    c.rejected, c.duplicate = (int(v) for v in con.execute(
        "SELECT (SELECT count(*) FROM rejected_lines WHERE file_id = $f), "
        "(SELECT count(*) FROM gateway_requests WHERE file_id = $f AND is_duplicate)", {"f": fid}).fetchall()[0])


def _finish(led: Ledger, jobs: list[_Job], counts: dict[int, Counts]) -> None:
    """Write the files' counts and 'done' (inside the transaction of their last rows)."""
    rows = []
    for j in jobs:
        assert j.load is not None
        c = counts[j.load.file_id]
        _reject_deep(led.con, j, c)
        sc = j.scan()
        warnings = [*j.warnings, *([c.warning] if c.warning else [])]
        report = j.copy.report if j.copy is not None else sc.report
        complete = report.complete
        if report.warning():
            warnings.insert(0, str(report.warning()))
        end_offset, end_line, open_tail = _end_of(j)
        fs = j.summary
        fs.lines_read, fs.rows_rejected, fs.rows_duplicate = c.lines, c.rejected, c.duplicate
        fs.rows_loaded = c.lines - c.rejected - c.duplicate
        fs.complete = complete
        fs.warnings = warnings
        fs.file_id = j.load.file_id
        if j.decision.prior is not None:
            fs.warnings.append(f"grew since file_id {j.decision.prior.file_id} was read: loaded lines "
                               f"{j.decision.first_line} on")
        rows.append(dict(lines_read=c.lines, rows_loaded=fs.rows_loaded, rows_rejected=c.rejected,
                         rows_duplicate=c.duplicate, complete=complete, warning="; ".join(warnings) or None,
                         end_offset=end_offset, end_line=end_line, open_tail=open_tail))
    led.finish_many([j.load for j in jobs if j.load is not None], rows)


def _end_of(job: _Job) -> tuple[int | None, int | None, bool]:
    """Where a later, grown version of this file resumes: byte, line, open last line (None: records)."""
    if job.plan.sniff.container not in ("ndjson", "text", "csv", "empty"):
        return None, None, False
    if job.copy is not None:
        c = job.copy
        ended = c.lines - (1 if c.open_tail else 0)
        return c.end_offset, job.decision.first_line - 1 + ended, c.cut is not None or c.open_tail
    sc = job.scan()
    return sc.end_offset, sc.lines - (1 if sc.open_tail else 0), sc.open_tail


def _ingest_one(led: Ledger, plan: FilePlan, tz: str, options: dict[str, Any], bar: Any) -> FileSummary:
    """Load one file; a big new file is hashed and counted in a thread beside its load."""
    snap = Snapshot.take(plan.path)
    job = _Job(plan, snap, _summary(plan, snap.size), lambda: Scan())
    cuts = led.prefix_sizes(snap.size, sha256_head(snap)) if led.has_known() else []
    # Hashing a multi-GB file costs as much as parsing it; a file can only repeat (or extend) one
    # already in the case if the sizes allow it, so otherwise the hash runs alongside the load.
    if cuts or led.has_size(snap.size) or plan.sniff.container == "empty":
        job.scan, job.scan_known = _known(scan_file(snap, cuts)), True
        if _decide(led, job, {}):
            _load_alone(led, job, tz, options, bar)
        return job.summary
    result: dict[str, Scan] = {}
    hasher = threading.Thread(target=lambda: result.setdefault("scan", scan_file(snap)), daemon=True)
    hasher.start()

    def get_scan() -> Scan:
        hasher.join()
        if "scan" not in result:  # the thread failed (the file vanished): fail here, on this thread
            result["scan"] = scan_file(snap)
        return result["scan"]

    job.scan = get_scan
    try:
        _load_alone(led, job, tz, options, bar)
    finally:
        hasher.join()
    return job.summary


def _read_error(job: _Job, exc: duckdb.Error) -> InputError:
    """The error for a file DuckDB could not load: its memory budget, or the file itself."""
    kind = job.plan.sniff.container
    if isinstance(exc, duckdb.OutOfMemoryException):
        # the limit, not the file: a message that blamed the file would send the responder to
        # re-collect evidence that is fine
        return InputError(
            f"ran out of memory loading this {kind} file under the load's memory limit: {_first_line(exc)}",
            where=str(job.plan.path),
            hint="the file may well be valid: raise FORENSICS_MEMORY_LIMIT (e.g. FORENSICS_MEMORY_LIMIT=4GB) "
                 "and run the ingest again; nothing of it was kept")
    return InputError(f"cannot read {kind} file: {_first_line(exc)}", where=str(job.plan.path),
                      hint="check that the file is complete and valid; nothing of it was kept")


def _load_alone(led: Ledger, job: _Job, tz: str, options: dict[str, Any], bar: Any = None,
                force_copy: bool = False) -> None:
    """Load one file in its own transaction; from a private copy when it cannot be read as it is.

    The file itself is handed to DuckDB unless its scan (run first, or beside the load) shows it
    cannot be: grown, a damaged compressed stream, over-long lines, or moved while read. Then the
    rows go and the file is read again from a private copy of exactly its snapshot's bytes.
    """
    if job.plan.sniff.container == "empty":
        _load_empty(led, job, tz, options)
        return
    if not force_copy and not (job.scan_known and _needs_copy(job)):
        try:
            with led.transaction():
                counts = _load_direct(led, job, tz, options, bar)
                moved = job.snap.changed()
                if moved or _needs_copy(job):
                    raise _Moved([job], moved)
                _finish(led, [job], {counts[0]: counts[1]})
            return
        except _Moved as m:
            _discard(led, [job])
            if m.why:
                job.warnings.append(f"{m.why}: its first {job.snap.size} bytes were read (a private copy); "
                                    f"the rest is read by the next ingest")
        except duckdb.InterruptException:
            raise KeyboardInterrupt from None
        except duckdb.Error as exc:
            _discard(led, [job])
            if compression_of(job.plan.path) == "none" or isinstance(exc, duckdb.OutOfMemoryException):
                raise _read_error(job, exc) from exc
            # a compressed stream DuckDB refused: read its decodable part from a copy
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                _discard(led, [job])
            raise
    with led.target.temp_dir() as d:
        job.copy = make_copy(job.snap, d / "source", start_offset=job.decision.start_offset, header=_header(job))
        try:
            with led.transaction():
                fid, counts_ = _load_copy(led, job, tz, options)
                _finish(led, [job], {fid: counts_})
        except duckdb.Error as exc:
            with contextlib.suppress(duckdb.Error):
                _discard(led, [job])
            raise _read_error(job, exc) from exc
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                _discard(led, [job])
            raise


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _begin(led: Ledger, job: _Job, tz: str, options: dict[str, Any], sha: str | None = None) -> FileLoad:
    """Register the job's file ('loading'); ``sha`` None while the scan still runs (set at the end)."""
    spec = job.plan.spec
    fl = led.begin(job.snap, sha or "pending:" + str(job.plan.path), job.decision, format=spec.name,
                   layer=spec.layer, tz=spec.tz or tz, options=_opts(job.plan, tz, options))
    job.load = fl
    job.summary.file_id = fl.file_id
    return fl


def _load_direct(led: Ledger, job: _Job, tz: str, options: dict[str, Any], bar: Any) -> tuple[int, Counts]:
    """Load the file itself (the scan may still run beside it); its sha256 is written once known."""
    con = led.con
    plan = job.plan
    path = plan.path
    comp = compression_of(path)
    fl = _begin(led, job, tz, options)
    counts: Counts | None = None
    with _progress_poller(con, bar, job.snap.size):
        if fast_path_ok(plan):
            try:
                got = fastpath.load_fast(con, [Item(plan, fl.file_id, str(path), comp, scan=job.scan)], tz)
                counts = None if got is None else got[fl.file_id]
            except duckdb.InterruptException:
                raise KeyboardInterrupt from None
            except duckdb.Error:
                # whatever read_json refuses (a huge object) the line reader below reads or reports
                con.execute("ROLLBACK")
                con.execute("BEGIN TRANSACTION")
            if counts is None:
                # refused, or blank lines shifted read_json's numbering: redo line by line (rows
                # committed at the commit point go too)
                led.discard([fl.file_id])
                fl = _begin(led, job, tz, options)
        if counts is None:
            fl, counts = _load_records(led, job, tz, options, fl, lambda f: Item(
                plan, f.file_id, str(path), comp, lines=lambda: job.scan().lines))
    sc = job.scan()
    con.execute("UPDATE evidence_files SET sha256 = $s, head_sha256 = $h WHERE file_id = $f",
                {"s": sc.sha, "h": sc.head, "f": fl.file_id})
    return fl.file_id, counts


def _load_records(led: Ledger, job: _Job, tz: str, options: dict[str, Any], fl: FileLoad,
                  item: Callable[[FileLoad], Item], sha: str | None = None) -> tuple[FileLoad, Counts]:
    """:func:`load_files` of one file; a CSV file the parallel reader refused is read on one thread.

    DuckDB's parallel CSV reader refuses a record with a quoted newline (see
    :func:`~forensics.sources.gateway.readers.csv_records`); the failed statement aborts the
    transaction, so the file is registered again and read by the single-threaded reader, which
    takes more memory (in proportion to the file) but accepts it.
    """
    try:
        return fl, load_files(led.con, [item(fl)], tz)[fl.file_id]
    except duckdb.Error as exc:  # (a plain duckdb.Error, not an InvalidInputException)
        if job.plan.sniff.container != "csv" or not refused_quoted_newline(exc):
            raise
    led.con.execute("ROLLBACK")
    led.con.execute("BEGIN TRANSACTION")
    led.discard([fl.file_id])
    fl = _begin(led, job, tz, options, sha=sha)
    return fl, load_files(led.con, [replace(item(fl), one_thread=True)], tz)[fl.file_id]


def _header(job: _Job) -> bytes | None:
    """The CSV header line, written before a grown file's new records."""
    if job.plan.sniff.container == "csv" and job.decision.start_offset > 0:
        return head_line(job.snap)
    return None


def _load_copy(led: Ledger, job: _Job, tz: str, options: dict[str, Any]) -> tuple[int, Counts]:
    """Load the file from its private copy (``job.copy``), numbered as the original's lines."""
    con = led.con
    copy = job.copy
    assert copy is not None
    plan = job.plan
    sc = job.scan()
    if job.snap.changed() or not sc.sha or sc.sha != copy.sha:
        # the bytes actually read are the copy's (the file moved since it was scanned)
        sc = Scan(sha=copy.sha, lines=sc.lines, report=copy.report, head=sc.head)
        job.scan = _known(sc)
    physical = copy.lines + copy.header_lines
    fast = fast_path_ok(plan) and not copy.blank and not copy.header_lines
    counts: Counts | None = None
    fl = _begin(led, job, tz, options, sha=sc.sha)
    if fast:
        item = Item(plan, fl.file_id, str(copy.path), "none", scan=_known(Scan(sha=sc.sha, lines=physical)))
        got = fastpath.load_fast(con, [item], tz)
        counts = None if got is None else got[fl.file_id]
        if counts is None:
            led.discard([fl.file_id])
            fl = _begin(led, job, tz, options, sha=sc.sha)
    if counts is None:
        fl, counts = _load_records(led, job, tz, options, fl,
                                   lambda f: Item(plan, f.file_id, str(copy.path), "none", lines=lambda: physical),
                                   sha=sc.sha)
    con.execute("UPDATE evidence_files SET head_sha256 = $h WHERE file_id = $f", {"h": sc.head, "f": fl.file_id})
    shift = job.decision.first_line - 1 - copy.header_lines
    if shift:
        for table in ("gateway_requests", "rejected_lines"):
            con.execute(f"UPDATE {table} SET line_no = line_no + $s WHERE file_id = $f", {"s": shift, "f": fl.file_id})
    for ln, length, first in copy.overlong:
        line = ln + job.decision.first_line - 1
        con.execute("DELETE FROM gateway_requests WHERE file_id = $f AND line_no = $l", {"f": fl.file_id, "l": line})
        con.execute("DELETE FROM rejected_lines WHERE file_id = $f AND line_no = $l", {"f": fl.file_id, "l": line})
        store_rejected(con, fl.file_id, [(line, f"line of {length} bytes, longer than the {MAX_LINE_BYTES >> 20} MiB "
                                                f"a record may have: not parsed (its first bytes kept)", first)])
    if copy.overlong:
        counts.rejected = int(con.execute("SELECT count(*) FROM rejected_lines WHERE file_id = $f",
                                          {"f": fl.file_id}).fetchall()[0][0])
    if copy.cut is not None:
        store_rejected(con, fl.file_id, [(job.decision.first_line + copy.lines,
                                          "line cut by the end of the damaged compressed stream", copy.cut)])
        counts.lines += 1
        counts.rejected += 1
    return fl.file_id, counts


def _load_empty(led: Ledger, job: _Job, tz: str, options: dict[str, Any]) -> None:
    """An empty (or blank-only) file: recorded with its lines, each rejected as an empty line."""
    sc = job.scan()
    with led.transaction():
        fl = led.begin(job.snap, sc.sha, job.decision, **_meta(job, tz, options))
        job.load = fl
        store_rejected(led.con, fl.file_id, [(n, "empty line", b"") for n in range(1, sc.lines + 1)])
        job.warnings.append("empty file: no records" if sc.lines == 0 else "blank file: no records")
        _finish(led, [job], {fl.file_id: Counts(lines=sc.lines, rejected=sc.lines)})


@contextlib.contextmanager
def _progress_poller(con: duckdb.DuckDBPyConnection, bar: Any, size: int) -> Iterator[None]:
    """Move the progress bar inside a long file using DuckDB's own query progress."""
    if bar is None:
        yield
        return
    task = bar.task_ids[0]
    start = bar.tasks[0].completed
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(0.5):
            try:
                pct = con.query_progress()
            except Exception:  # progress is cosmetic: never let it break a load
                return
            if pct >= 0:
                bar.update(task, completed=start + size * min(pct, 100.0) / 100.0)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        bar.update(task, completed=start)

