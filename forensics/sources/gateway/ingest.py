"""The gateway loader's entry point: expand paths, plan every file, load them in batches.

Each batch is one transaction: a file either lands whole (with its counts) or not at all.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from forensics.errors import InputError, ParameterError
from forensics.sources.files import (
    FileRecord,
    compression_of,
    expand_paths,
    finish_file,
    progress_bar,
    register_file,
    sha256_file,
)
from forensics.sources.gateway import fastpath
from forensics.sources.gateway.fastpath import Scan, fast_path_ok, scan_file
from forensics.sources.gateway.load import Counts, Item, load_file, load_files
from forensics.sources.gateway.presets import apply_options, resolve_spec
from forensics.sources.gateway.salvage import is_truncation, load_salvaged
from forensics.sources.gateway.sniffing import FilePlan, Sniff, check_required, detect, sniff
from forensics.sources.gateway.sql import install_macros
from forensics.sources.summary import FileSummary, IngestSummary
from forensics.sources.timezones import check_tz

if TYPE_CHECKING:
    from forensics.case import Case


#: Options ``ingest_gateway`` accepts besides format/tz/quiet.
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


BATCH_MAX_FILES = 64


BATCH_MAX_BYTES = 64 * 1024 * 1024


def undo_unfinished(case: Case) -> list[str]:
    """Remove the rows of gateway files whose ingest did not finish; return their paths."""
    con = case.con
    rows = con.execute(
        "SELECT file_id, path FROM evidence_files WHERE kind = 'gateway' AND complete IS NULL"
    ).fetchall()
    if not rows:
        return []
    ids = ", ".join(str(int(r[0])) for r in rows)
    for table in ("gateway_requests", "rejected_lines", "evidence_files"):
        con.execute(f"DELETE FROM {table} WHERE file_id IN ({ids})")
    return [str(r[1]) for r in rows]


def ingest_gateway(
    case: Case,
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    format: str = "auto",
    tz: str = "UTC",
    quiet: bool = True,
    **options: Any,
) -> IngestSummary:
    """Load gateway logs (files, directories, globs) into ``gateway_requests``.

    ``format`` is ``auto`` (detect per file), a preset name or a TOML mapping path; ``tz`` is the
    zone of zone-less timestamps. Options: see :data:`KNOWN_OPTIONS`.

    Example:
        >>> import forensics
        >>> case = forensics.open_case(":memory:")
        >>> s = case.ingest_gateway("sample_data/gateway/litellm", format="litellm")  # doctest: +SKIP
        >>> s.files[0].reconciles                                                    # doctest: +SKIP
        True
    """
    t0 = time.perf_counter()
    bad = set(options) - set(KNOWN_OPTIONS)
    if bad:
        raise ParameterError(f"unknown gateway option(s) {sorted(bad)}",
                             hint=f"known: {', '.join(KNOWN_OPTIONS)}")
    tz = check_tz(tz)  # the toolkit's one zone validator (forensics.sources.timezones)
    fixed = resolve_spec(format)
    if fixed is not None and fixed.tz:
        check_tz(fixed.tz)
    files = expand_paths(paths)
    # Detect every file first: a wrong format fails before any time is spent loading.
    plans: list[FilePlan] = []
    for p in files:
        sn = sniff(p)
        if fixed is None:
            spec, detected = detect(sn, p)
        else:
            spec, detected = fixed, None
            if spec.container == "text" and sn.container != "text" and spec.line_regex:
                sn = Sniff("text", sn.compression, [], set(), sn.text_lines)
        if spec.line_regex is not None and sn.container != "text":
            sn = Sniff("text", sn.compression, [], set(), [])
        if spec.line_regex is None and sn.container == "text":
            raise InputError(
                f"{spec.name} reads JSON, CSV or Parquet records, but this file is plain text",
                where=str(p), hint="pick the right --gateway-format, or a mapping .toml with line_regex",
            )
        plan = FilePlan(p, apply_options(spec, options), sn, detected)
        check_required(plan)
        plans.append(plan)
    install_macros(case.con)
    summary = IngestSummary()
    undone = undo_unfinished(case)
    if undone:
        summary.notes["gateway: undone interrupted ingests (read again)"] = ", ".join(undone)
    total_bytes = sum(p.stat().st_size for p in files)
    with progress_bar(quiet, total_bytes, "gateway") as bar:
        for batch in _batches(plans):
            if bar is not None:
                bar.update(bar.task_ids[0], file=batch[0].path.name)
            done = (_ingest_batch(case, batch, tz, options) if len(batch) > 1
                    else [_ingest_one(case, batch[0], tz, options, bar)])
            summary.files.extend(done)
            if bar is not None:
                bar.advance(bar.task_ids[0], sum(f.size for f in done))
    summary.elapsed_s = time.perf_counter() - t0
    return summary


def _batchable(plan: FilePlan) -> bool:
    return (plan.sniff.container in ("ndjson", "text") and plan.spec.container != "otlp"
            and plan.path.stat().st_size < BATCH_FILE_BYTES)


def _batches(plans: list[FilePlan]) -> Iterator[list[FilePlan]]:
    """Group consecutive small line-oriented files of one spec (loaded by one statement)."""
    batch: list[FilePlan] = []
    size = 0
    for plan in plans:
        fits = (batch and _batchable(plan) and plan.spec == batch[0].spec
                and plan.sniff.container == batch[0].sniff.container
                and len(batch) < BATCH_MAX_FILES and size + plan.path.stat().st_size <= BATCH_MAX_BYTES)
        if batch and not fits:
            yield batch
            batch, size = [], 0
        batch.append(plan)
        size += plan.path.stat().st_size
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


def _register(case: Case, plan: FilePlan, tz: str, options: dict[str, Any], sha: str,
              file_id: int | None = None) -> FileRecord:
    """Add the file's evidence row, marked unfinished (``complete = NULL``) until its counts land."""
    rec = register_file(case, plan.path, kind="gateway", format=plan.spec.name, layer=plan.spec.layer,
                        tz=plan.spec.tz or tz, options=_opts(plan, tz, options), sha256=sha, complete=None,
                        file_id=file_id)
    assert not isinstance(rec, int)  # the sha is new (or pending): never an existing file
    return rec


def _existing_file_id(con: duckdb.DuckDBPyConnection, sha: str) -> int | None:
    rows = con.execute(
        "SELECT file_id FROM evidence_files WHERE sha256 = $s ORDER BY file_id LIMIT 1", {"s": sha}
    ).fetchall()
    return int(rows[0][0]) if rows else None


def _known(scan: Scan) -> Callable[[], Scan]:
    return lambda: scan


def _ingest_batch(case: Case, plans: list[FilePlan], tz: str, options: dict[str, Any]) -> list[FileSummary]:
    """Load several small files in one transaction and one INSERT; fall back to one by one."""
    con = case.con
    summaries: list[FileSummary] = []
    todo: list[tuple[FilePlan, FileSummary, str]] = []
    seen: dict[str, str] = {}
    # NDJSON of one compression is read by one read_json, which needs every file's line count:
    # the pass that hashes a file counts its lines too (small files: no thread to hide it in)
    fast = all(fast_path_ok(p) for p in plans) and len({p.sniff.compression for p in plans}) == 1
    scans: dict[str, Scan] = {}
    if fast:
        from concurrent.futures import ThreadPoolExecutor

        # hashing, inflating and counting release the GIL: two files at a time (measured 0.8 -> 0.5 s
        # for 227 hourly files)
        with ThreadPoolExecutor(max_workers=2) as pool:
            scans = dict(zip((str(p.path) for p in plans), pool.map(scan_file, [p.path for p in plans]), strict=True))
    shas = [scans[str(p.path)].sha if fast else sha256_file(p.path) for p in plans]
    # one look-up for the whole batch (per-file statements cost more than reading small files)
    known = {str(s): int(f) for s, f in con.execute(
        "SELECT sha256, min(file_id) FROM evidence_files WHERE list_contains($s, sha256) GROUP BY sha256",
        {"s": shas}).fetchall()}
    for plan, sha in zip(plans, shas, strict=True):
        fs = FileSummary(path=str(plan.path), kind="gateway", format=plan.spec.name, layer=plan.spec.layer,
                         size=plan.path.stat().st_size, detected=plan.detected)
        summaries.append(fs)
        existing = known.get(sha)
        if existing is not None:
            fs.file_id = existing
            fs.skipped = f"already in case as file_id {existing} (same sha256)"
        elif sha in seen:
            fs.skipped = f"same bytes as {seen[sha]} (same sha256)"
        else:
            seen[sha] = str(plan.path)
            todo.append((plan, fs, sha))
    if not todo:
        return summaries
    con.execute("BEGIN TRANSACTION")
    try:
        items = []
        row = con.execute("SELECT coalesce(max(file_id), 0) + 1 FROM evidence_files").fetchall()[0]
        next_id = int(row[0])
        for plan, fs, sha in todo:
            rec = _register(case, plan, tz, options, sha, file_id=next_id)
            next_id += 1
            fs.file_id = rec.file_id
            sc = scans.get(str(plan.path))
            items.append(Item(plan, rec.file_id, str(plan.path), compression_of(plan.path),
                               scan=None if sc is None else _known(sc)))
        counts = _load_batch(case, items, tz)
        finished = []
        for _plan, fs, _sha in todo:
            assert fs.file_id is not None
            c = counts[fs.file_id]
            fs.lines_read, fs.rows_rejected, fs.rows_duplicate = c.lines, c.rejected, c.duplicate
            fs.rows_loaded = c.lines - c.rejected - c.duplicate
            finished.append(f"({fs.file_id}, {c.lines}, {fs.rows_loaded}, {c.rejected}, {c.duplicate})")
        # the counts of the whole batch in one statement (what finish_file writes, file by file)
        con.execute(
            f"UPDATE evidence_files e SET lines_read = v.lr, rows_loaded = v.rl, rows_rejected = v.rr, "
            f"rows_duplicate = v.rd, complete = true, warning = NULL "
            f"FROM (VALUES {', '.join(finished)}) v(fid, lr, rl, rr, rd) WHERE e.file_id = v.fid"
        )
        con.execute("COMMIT")
    except duckdb.Error:
        # e.g. a truncated .gz in the batch: redo these files one by one, where each failure is
        # handled (salvaged, reported) on its own
        con.execute("ROLLBACK")
        undo_unfinished(case)
        redone = {str(p.path): _ingest_one(case, p, tz, options, None) for p, _, _ in todo}
        return [redone.get(fs.path, fs) for fs in summaries]
    return summaries


def _load_batch(case: Case, items: list[Item], tz: str) -> dict[int, Counts]:
    """Load a batch of small files of one spec; NDJSON with known scans through one ``read_json``."""
    if all(it.scan is not None for it in items):
        # read_json over all the files at once: parallel across files (a UNION ALL of line
        # readers ran them one after the other: 227 hourly .gz files, 6.8 s against 2.7 s bare)
        fast = fastpath.load_fast(case, items, tz)
        if fast is not None:
            return fast
        ids = ", ".join(str(int(it.file_id)) for it in items)
        case.con.execute(f"DELETE FROM gateway_requests WHERE file_id IN ({ids})")
    return load_files(case, items, tz)


def _ingest_one(case: Case, plan: FilePlan, tz: str, options: dict[str, Any], bar: Any) -> FileSummary:
    path = plan.path
    spec = plan.spec
    size = path.stat().st_size
    fs = FileSummary(path=str(path), kind="gateway", format=spec.name, layer=spec.layer, size=size,
                     detected=plan.detected)
    con = case.con
    # Hashing a multi-GB file costs as much as parsing it; a file can only repeat one already in
    # the case if the sizes match, so otherwise the hash runs alongside the load.
    same_size = con.execute(
        "SELECT count(*) FROM evidence_files WHERE size = $s", {"s": size}
    ).fetchall()[0]
    fast = fast_path_ok(plan)
    # CSV: the physical line count tells whether records span lines (see csv_physical_lines)
    count_lines = fast or plan.sniff.container == "csv"
    digest: dict[str, Any] = {}

    def run_scan() -> None:
        if count_lines:
            sc = scan_file(path)
            digest["scan"], digest["sha"] = sc, sc.sha
        else:
            digest["sha"] = sha256_file(path)

    hasher: threading.Thread | None = None
    if same_size and same_size[0]:
        run_scan()
        existing = _existing_file_id(con, digest["sha"])
        if existing is not None:
            fs.file_id = existing
            fs.skipped = f"already in case as file_id {existing} (same sha256)"
            return fs
    else:
        hasher = threading.Thread(target=run_scan, daemon=True)
        hasher.start()

    def get_scan() -> Scan:
        if hasher is not None:
            hasher.join()
        scan: Scan = digest["scan"]
        return scan

    comp = compression_of(path)
    warning: str | None = None
    complete = True
    con.execute("BEGIN TRANSACTION")
    try:
        rec = _register(case, plan, tz, options, "pending:" + str(path))
        file_id = rec.file_id
        fs.file_id = file_id
        try:
            with _progress_poller(con, bar, size):
                fast_counts: Counts | None = None
                if fast:
                    # whatever read_json refuses (a truncated stream, a huge object) the line
                    # reader below reads or reports precisely
                    with contextlib.suppress(duckdb.Error):
                        got = fastpath.load_fast(case, [Item(plan, file_id, str(path), comp, scan=get_scan)], tz)
                        fast_counts = None if got is None else got[file_id]
                if fast_counts is None:
                    if fast:
                        # refused, or blank lines shifted read_json's numbering: redo line by line
                        # (rows committed at the commit point go too)
                        con.execute("ROLLBACK")
                        undo_unfinished(case)
                        con.execute("BEGIN TRANSACTION")
                        rec = _register(case, plan, tz, options, "pending:" + str(path))
                        file_id = fs.file_id = rec.file_id
                    counts = load_file(case, plan, file_id, tz, str(path), comp,
                                        (lambda: get_scan().lines) if count_lines else None)
                else:
                    counts = fast_counts
        except duckdb.Error as exc:
            if comp == "none" or not is_truncation(exc):
                if plan.sniff.container in ("json-array", "json-doc", "parquet"):
                    raise InputError(f"cannot read {plan.sniff.container} file: {first_line(exc)}",
                                     where=str(path), hint="check that the file is complete and valid") from exc
                raise
            con.execute("ROLLBACK")
            con.execute("BEGIN TRANSACTION")
            rec = _register(case, plan, tz, options, "pending:" + str(path))
            file_id = rec.file_id
            fs.file_id = file_id
            counts, warning = load_salvaged(case, plan, file_id, tz)
            complete = False
        if counts.warning:
            warning = f"{warning}; {counts.warning}" if warning else counts.warning
        if hasher is not None:
            hasher.join()
        con.execute("UPDATE evidence_files SET sha256 = $s WHERE file_id = $f",
                    {"s": digest["sha"], "f": file_id})
        loaded = counts.lines - counts.rejected - counts.duplicate
        finish_file(case, file_id, lines_read=counts.lines, rows_loaded=loaded,
                    rows_rejected=counts.rejected, rows_duplicate=counts.duplicate,
                    complete=complete, warning=warning)
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        with contextlib.suppress(duckdb.Error):
            undo_unfinished(case)  # rows committed before the failure must not stay
        if hasher is not None:
            hasher.join()
        raise
    fs.lines_read, fs.rows_rejected, fs.rows_duplicate = counts.lines, counts.rejected, counts.duplicate
    fs.rows_loaded = loaded
    fs.complete = complete
    if warning:
        fs.warnings.append(warning)
    return fs


def first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


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
