"""Load SGLang engine and router (sgl-router / smg) logs of any release into the case database.

Lines are streamed from plain, gzip or zstd files into DuckDB in large chunks (no per-line
Python), then classified and extracted there (:mod:`forensics.sources.engine_sql`). Every
physical line lands in exactly one table: a typed table (``engine_batches``, ``engine_requests``,
``engine_rejections``, ``engine_events``, ``engine_http``, ``router_requests``),
``engine_other_lines`` (by kind), or ``rejected_lines``. ``engine_starts`` is then rebuilt for
every node touched, one row per node start.

Prompt and output text are never stored: request records keep their metadata only, and every
text column is passed through a redaction of ``text=``/``input_ids=``/``'text':`` values.

Example:
    >>> from forensics.case import open_case
    >>> case = open_case(":memory:")
    >>> case.ingest_engine(["prefill-0=logs/p0/"], tz="Asia/Singapore")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from forensics.errors import InputError, ParameterError
from forensics.sources import engine_sql as q
from forensics.sources.collect import ReadResult, read_lines
from forensics.sources.collect.layout import EngineSource, NodeRule, resolve_sources
from forensics.sources.engine_starts import rebuild_starts
from forensics.sources.files import (
    Fingerprint,
    Snapshot,
    Unreadable,
    fingerprint,
    progress_bar,
    store_rejected,
)
from forensics.sources.ledger import Decision, FileLoad, Ledger, crash_point, database_errors
from forensics.sources.lines import NO_TIME, LineBatch
from forensics.sources.redact import redact_raw
from forensics.sources.summary import FileSummary, IngestSummary
from forensics.sources.timezones import (
    AMBIGUOUS,
    BY_COLLECTOR,
    BY_ORDER,
    GAP,
    OK,
    OffsetEstimate,
    auto_offsets,
    check_tz,
    fixed_offset_s,
    format_offset,
    has_transition,
    offset_warning,
    to_utc,
)

if TYPE_CHECKING:
    # loaders see the case only through its load target (connection, clock, budget, temp dir)
    from forensics.case import LoadTarget as Case

#: Bytes handed to DuckDB per insert (aligned to line ends); bounds the loader's own memory.
CHUNK_BYTES = 16 << 20
#: Text processed per pipeline pass: the staged lines and their classification stay in memory
#: (no spilling) and memory is bounded for any file size.
SEGMENT_BYTES = 64 << 20

_METRICS = re.compile(r"sglang-request-metrics-(?P<d>\d{8})_(?P<h>\d{2})")

#: Typed tables an engine line can land in (for the per-file count).
_TABLES = (
    "engine_batches",
    "engine_requests",
    "engine_rejections",
    "engine_events",
    "engine_http",
    "router_requests",
    "engine_other_lines",
)


# -- reading ---------------------------------------------------------------------------------------


@dataclass
class _ReadState:
    lines: int = 0
    complete: bool = True
    warnings: list[str] = field(default_factory=list)
    bad_utf8_lines: list[int] = field(default_factory=list)
    bad_utf8_count: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    rejected: list[tuple[int, str, bytes]] = field(default_factory=list)
    #: per node: the last prefixed line (line_no, seq, ts) of the previous segment
    carry: dict[str, tuple[int, int, dt.datetime | None]] = field(default_factory=dict)
    #: the collection stage's totals (wrapper, joined and framing lines)
    read: ReadResult | None = None
    #: nodes this file's lines went to (a shipper export names the pod per line)
    nodes: set[str] = field(default_factory=set)
    #: (engine local time, collector UTC time) samples for the zone check, microseconds
    tz_pairs: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    #: --engine-tz auto: the offsets applied, and lines whose time could not be placed
    auto: list[OffsetEstimate] = field(default_factory=list)
    dst_flags: dict[int, int] = field(default_factory=dict)
    #: segments that had engine local times at all (a router log has none: UTC by itself)
    local_lines: int = 0
    #: decoded offset just after the last line end read, and that line (a grown version resumes there)
    end_offset: int = 0
    end_line: int = 0
    #: the last line read had no line end (a cut line, or a file still being written)
    open_tail: bool = False
    #: the wrapper's times are zone-less local times converted with --engine-tz (syslog-bsd)
    collector_inexact: bool = False


def _batch_table(b: LineBatch, seq0: int, state: _ReadState) -> pa.Table:
    """One batch of logical lines as the Arrow table the SQL stage reads (``_eng_raw``)."""
    bad: list[int] = []
    text = b.text(invalid=bad)
    if bad:
        state.bad_utf8_count += len(bad)
        state.bad_utf8_lines.extend(int(b.line_no[i]) for i in bad[: max(0, 5 - len(state.bad_utf8_lines))])
    n = len(b)
    if b.collector_us is not None:
        us = b.collector_us
        wrapper_ts = pa.array(us, mask=us == NO_TIME, type=pa.int64()).cast(pa.timestamp("us"))
    else:
        wrapper_ts = pa.nulls(n, pa.timestamp("us"))
    node = b.node.cast(pa.string()) if b.node is not None else pa.nulls(n, pa.string())
    return pa.table({
        "line_no": pa.array(b.line_no), "seq": pa.array(np.arange(seq0, seq0 + n, dtype=np.int64)),
        "wrapper_ts": wrapper_ts, "line": text, "node": node,
    })


def stage_lines(
    case: Case,
    path: Path,
    state: _ReadState,
    on_segment: Callable[[str | None], None],
    chunk_bytes: int = CHUNK_BYTES,
    segment_bytes: int = SEGMENT_BYTES,
    tz: str = "UTC",
    node_rule: NodeRule | None = None,
    *,
    start_offset: int = 0,
    first_line: int = 1,
) -> None:
    """Stream a file's logical lines to DuckDB as the Arrow view ``_eng_raw``.

    The collection stage (:func:`forensics.sources.collect.read_lines`) reads the file (plain,
    gzip, zstd; any collection wrapper, detected from the content) and hands over logical lines
    with their physical line numbers. Every ``segment_bytes`` of text (and at the end)
    ``on_segment(node)`` processes the staged lines (registered as ``_eng_raw``), then they are
    released: memory stays bounded whatever the file size. Lines whose wrapper named their pod
    (a shipper export) are processed per logical node (``node`` given); others with ``None``.
    Lines the collection stage set aside (a wrapper line it could not read, a line cut by a
    truncated stream) go to ``state.rejected`` with their reason. ``start_offset`` /
    ``first_line``: where a grown file's new part starts (the evidence ledger's decision).
    """
    con = case.con
    staged = 0
    seq = 0
    tables: list[pa.Table] = []
    per_node: dict[str | None, int] = {}
    reader = read_lines(path, block_bytes=chunk_bytes, start_offset=start_offset, start_line=first_line,
                        context={"tz": "UTC" if tz == "auto" else tz, "node_rule": node_rule,
                                 "fixed_node": node_rule is None})

    def run(tbl: pa.Table, node: str | None) -> None:
        # DuckDB scans the Arrow chunks in place (no copy into a staging table). register()
        # refuses while an earlier result is still open (a fetchone()): complete() it first.
        con.complete()
        con.register("_eng_raw", tbl)
        try:
            on_segment(node)
        finally:
            con.complete()
            con.unregister("_eng_raw")

    def segment() -> None:
        nonlocal staged
        tbl = pa.concat_tables(tables)
        tables.clear()  # the registration holds the only reference: freed once the stage has read it
        nodes = tbl.column("node")
        tbl = tbl.drop_columns(["node"])
        if nodes.null_count == len(nodes):
            run(tbl, None)
        else:
            for value in pc.unique(nodes).to_pylist():
                mask = pc.is_null(nodes) if value is None else pc.fill_null(pc.equal(nodes, value), False)
                sub = tbl.filter(mask)
                # each node's lines get their own dense index: "the line before" means of that node
                k = per_node.get(value, 0)
                per_node[value] = k + sub.num_rows
                sub = sub.set_column(sub.schema.get_field_index("seq"), "seq",
                                     pa.array(np.arange(k, k + sub.num_rows, dtype=np.int64)))
                run(sub, value)
        staged = 0

    last: LineBatch | None = None
    for b in reader:
        if not b.collector_exact:
            # zone-less collector times (RFC 3164 syslog) were converted with --engine-tz itself:
            # they fill lines without a time but cannot check (or derive) the engine's zone
            state.collector_inexact = True
        if b.phys_lines or b.rejected:
            last = b
        if b.rejected:
            state.rejected.extend((ln, reason, _redact_raw(raw)) for ln, reason, raw in b.rejected)
        if len(b):
            tables.append(_batch_table(b, seq, state))
            seq += len(b)
            staged += int((b.ends - b.starts).sum()) + len(b)
        if staged >= segment_bytes:
            segment()
    if tables:
        segment()
    res = reader.result
    state.read = res
    state.lines = res.lines
    state.complete = res.complete
    # where a grown version of this file resumes: after the last line end (an open last line, cut
    # or still being written, is read again whole by that version)
    state.end_offset, state.end_line = res.next_offset, res.next_line - 1
    if last is not None:
        cut = [raw for _, reason, raw in last.rejected if reason.startswith("line cut off")]
        if cut and not len(last):
            state.open_tail, state.end_offset = True, res.next_offset - len(cut[-1])
        elif len(last) and last.buf.size and int(last.buf[-1]) != 10:
            state.open_tail, state.end_offset = True, int(last.offset[-1])
        if state.open_tail:
            state.end_line -= 1
    if res.status.problem:
        state.warnings.append(res.status.problem)
    state.warnings.extend(res.warnings)


# -- the per-file pipeline -----------------------------------------------------------------------


def _setup(case: Case, tz: str) -> None:
    con = case.con
    con.execute(q.MACROS)
    if tz.upper() == "UTC" or tz == "auto":
        # auto: local times are first read as UTC, then shifted per line by the offset the
        # collector's times show (_auto_zone)
        con.execute("CREATE OR REPLACE TEMP MACRO _eng_tz(t) AS t")
    else:
        con.execute(f"CREATE OR REPLACE TEMP MACRO _eng_tz(t) AS timezone('UTC', timezone('{tz}', t))")


def _file_hour(src: EngineSource, tz: str) -> dt.datetime | None:
    """The hour a request-metrics file covers (from its name), in UTC; None if not in the name."""
    m = _METRICS.search(src.path.name)
    if not m:
        return None
    local = dt.datetime.strptime(m.group("d") + m.group("h"), "%Y%m%d%H")
    off = fixed_offset_s(tz) if tz != "auto" else 0
    if off is not None:
        return local - dt.timedelta(seconds=off)
    from zoneinfo import ZoneInfo

    return local.replace(tzinfo=ZoneInfo(tz)).astimezone(dt.UTC).replace(tzinfo=None)


def _process_segment(case: Case, src: EngineSource, file_id: int, tz: str, state: _ReadState,
                     node: str | None = None) -> None:
    """Classify and load the staged lines of one segment; add to the file's counts and rejects.

    One transaction per segment: one commit (WAL write, checkpoint) instead of one per statement,
    and the segment's temp tables are released at its end (memory stays bounded).
    """
    con = case.con
    if node is not None:
        src = replace(src, node=node)  # a line whose wrapper named its pod belongs to that pod's node
    state.nodes.add(src.node)
    con.execute("BEGIN TRANSACTION")
    try:
        _segment_statements(case, src, file_id, tz, state)
        con.execute("COMMIT")
        crash_point("engine", "segment")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise


#: Line classes with a table of their own; everything else goes to engine_other_lines.
_TYPED = frozenset({"batch", "http", "req_received", "req_finished", "req_json", "req_metrics", "time_stats",
                    "router_request", "router_pd_error"})

#: Each insert of a segment with the line classes it reads (the WHERE clause of its SQL).
_STATEMENTS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    (q.BATCHES, lambda c: c == "batch"),
    (q.HTTP, lambda c: c == "http"),
    (q.REQ_TEXT, lambda c: c in ("req_received", "req_finished")),
    (q.TIME_STATS, lambda c: c == "time_stats"),
    (q.REJECTIONS, lambda c: c.startswith("rej_")),
    (q.EVENTS, lambda c: c.startswith("ev_")),
    (q.ROUTER_REQUESTS, lambda c: c == "router_request"),
    (q.ROUTER_EVENTS, lambda c: c == "router_pd_error"),
    (q.FACTS, lambda c: c.startswith("st_")),
    (q.OTHER, lambda c: c not in _TYPED and not c.startswith(("rej_", "ev_"))),
    (q.REQ_JSON, lambda c: c == "req_json"),
    (q.REQ_METRICS, lambda c: c == "req_metrics"),
)


def _segment_statements(case: Case, src: EngineSource, file_id: int, tz: str, state: _ReadState) -> None:
    con = case.con
    con.execute(q.STAGE)
    con.unregister("_eng_raw")  # the lines are in _eng_cls now: release the segment's Arrow text
    if src.kind == "metrics":
        con.execute("UPDATE _eng_cls SET cls = CASE WHEN msg = '' THEN 'blank' ELSE 'req_metrics' END")
    _canonical_ranks(case)
    _zone_pass(case, tz, state)
    row = con.execute("SELECT count(*) FROM _eng_cls WHERE ets = '' AND rts = ''").fetchone()
    carry = state.carry.get(src.node)
    if row and row[0]:
        if carry is not None:
            # The last prefixed line of the previous segment, so continuation lines at the start
            # of this one still find the line (and time) they follow.
            con.execute(
                "INSERT INTO _eng_cls (line_no, seq, pre, msg, ets, ems, rts, rlevel, cls, ranks, ts, collector_ts, "
                "ts_inferred, attached_to_line) VALUES ($l, $s, '', '', 'carry', '', '', '', '__carry__', NULL, $t, "
                "NULL, false, NULL)",
                {"l": carry[0], "s": carry[1], "t": carry[2]},
            )
        con.execute(q.INFER)
        con.execute("DELETE FROM _eng_cls WHERE cls = '__carry__'")
    present: dict[str, int] = {
        str(k): int(v) for k, v in con.execute("SELECT cls, count(*) FROM _eng_cls GROUP BY cls").fetchall()
    }
    for k, v in present.items():
        state.counts[k] = state.counts.get(k, 0) + v
    params: dict[str, Any] = {"node": src.node, "file_id": file_id}
    for sql, wanted in _STATEMENTS:
        # A statement whose line classes are absent from the segment is skipped: binding one
        # compiles its regexes (~80 ms for the request tokeniser), paid per segment otherwise.
        if any(wanted(k) for k in present):
            con.execute(sql, {**params, "file_hour": _file_hour(src, tz)} if sql is q.REQ_METRICS else params)
    if "req_json" in present or "req_metrics" in present:
        state.rejected.extend(
            (int(ln), str(reason), _redact_raw(str(raw).encode("utf-8")))
            for ln, reason, raw in con.execute(q.REJECTS).fetchall()
        )
    last = con.execute(
        "SELECT line_no, seq, ts FROM _eng_cls WHERE ets <> '' OR rts <> '' ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    if last:
        state.carry[src.node] = (int(last[0]), int(last[1]), last[2])


#: Engine-time samples per file for the zone check (spread over the file's segments).
_TZ_SAMPLES = 20_000


def _zone_pass(case: Case, tz: str, state: _ReadState) -> None:
    """Check and correct the engine's local times against the collector's UTC times.

    * Every segment gives (engine local time, collector UTC time) samples for the per-file check
      (``timezones.offset_warning``, at the end of the file).
    * ``--engine-tz auto``: each line's offset is taken from the collector (``auto_offsets``).
    * A zone that changes its offset inside the segment: the spring gap and the repeated autumn
      hour are redone by ``timezones.to_utc`` (collector time, then line order; what neither
      resolves gets no time).
    """
    con = case.con
    row = con.execute(
        "SELECT count(*) FILTER (WHERE collector_ts IS NOT NULL), min(ets), max(ets) FROM _eng_cls WHERE ets <> ''"
    ).fetchall()[0]
    with_collector, lo, hi = int(row[0] or 0), row[1], row[2]
    if lo is None:
        return
    state.local_lines += 1
    if state.collector_inexact:
        with_collector = 0
    local_sql = ("epoch_us(try_cast(CASE WHEN ems <> '' THEN ets || '.' || ems ELSE ets END AS TIMESTAMP))")
    have = sum(int(p[0].size) for p in state.tz_pairs)
    if with_collector and have < _TZ_SAMPLES and tz != "auto":
        t = con.sql(
            f"SELECT {local_sql} AS loc, epoch_us(collector_ts) AS col FROM _eng_cls "
            f"WHERE ets <> '' AND collector_ts IS NOT NULL LIMIT {_TZ_SAMPLES - have}").to_arrow_table()
        state.tz_pairs.append((_us(t.column("loc")), _us(t.column("col"))))
    dst = False
    if tz != "auto" and fixed_offset_s(tz) is None:
        lo_us = _us(pa.array([dt.datetime.fromisoformat(str(lo))], pa.timestamp("us")))[0]
        hi_us = _us(pa.array([dt.datetime.fromisoformat(str(hi))], pa.timestamp("us")))[0]
        dst = has_transition(tz, int(lo_us), int(hi_us))
    if tz != "auto" and not dst:
        return
    t = con.sql(
        f"SELECT seq, {local_sql} AS loc, epoch_us(collector_ts) AS col FROM _eng_cls WHERE ets <> '' ORDER BY seq"
    ).to_arrow_table()
    seq, loc, col = _us(t.column("seq")), _us(t.column("loc")), _us(t.column("col"))
    if state.collector_inexact:
        col = np.full_like(col, NO_TIME)
    if tz == "auto":
        offs, est = auto_offsets(loc, col)
        if est.offset_s is None and state.auto and state.auto[-1].offset_s is not None:
            offs[:] = int(state.auto[-1].offset_s)
        state.auto.append(est)
        new = np.where(loc == NO_TIME, NO_TIME, loc - offs * 1_000_000)
        if with_collector and have < _TZ_SAMPLES:
            both = col != NO_TIME
            state.tz_pairs.append((loc[both][: _TZ_SAMPLES - have], col[both][: _TZ_SAMPLES - have]))
        change = np.flatnonzero(offs != 0)
    else:
        conv = to_utc(loc, tz, collector_us=col)
        for flag in (GAP, AMBIGUOUS, BY_COLLECTOR, BY_ORDER):
            k = conv.count(flag)
            if k:
                state.dst_flags[flag] = state.dst_flags.get(flag, 0) + k
        new = conv.utc_us
        change = np.flatnonzero(conv.flags != OK)
    if not change.size:
        return
    vals = new[change]
    fix = pa.table({"seq": pa.array(seq[change]),
                    "ts": pa.array(vals, mask=vals == NO_TIME, type=pa.int64()).cast(pa.timestamp("us"))})
    con.register("_eng_tzfix", fix)
    try:
        con.execute("UPDATE _eng_cls SET ts = x.ts FROM _eng_tzfix x WHERE _eng_cls.seq = x.seq")
    finally:
        con.unregister("_eng_tzfix")


def _us(col: Any) -> np.ndarray:
    """An Arrow integer/timestamp column as int64 microseconds, NO_TIME for nulls."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_timestamp(arr.type):
        arr = arr.cast(pa.timestamp("us")).cast(pa.int64())
    return np.asarray(arr.fill_null(NO_TIME).to_numpy(zero_copy_only=False), dtype=np.int64)


def _zone_warnings(src: EngineSource, tz: str, state: _ReadState) -> tuple[list[str], str]:
    """The file's zone findings: warnings, and the zone to record (``auto:+08:00`` for auto)."""
    out: list[str] = []
    name = src.path.name
    if state.tz_pairs:
        loc = np.concatenate([p[0] for p in state.tz_pairs])
        col = np.concatenate([p[1] for p in state.tz_pairs])
    else:
        loc = col = np.zeros(0, dtype=np.int64)
    recorded = tz
    if tz == "auto":
        found = [e for e in state.auto if e.offset_s is not None]
        if not state.local_lines:
            recorded = "auto:none"  # no zone-less local time in this file (router logs are UTC)
        elif not found:
            out.append(f"{name}: --engine-tz auto found no collector time beside the engine's times; "
                       "its local times were read as UTC: their zone is unknown (pass --engine-tz ZONE)")
            recorded = "auto:unknown"
        else:
            seen: dict[int, int] = {}
            for e in found:
                for o, c in e.seen:
                    seen[o] = seen.get(o, 0) + c
            main = sorted(seen.items(), key=lambda kv: -kv[1])
            labels = [format_offset(o) for o, c in main if c >= max(1, 0.01 * sum(seen.values()))]
            recorded = "auto:" + "/".join(labels)
    elif loc.size:
        w = offset_warning(name, tz, loc, col)
        if w:
            out.append(w)
    gap, amb = state.dst_flags.get(GAP, 0), state.dst_flags.get(AMBIGUOUS, 0)
    if gap:
        out.append(f"{gap} line(s) carry local times that do not exist in {tz} (spring DST gap): "
                   "their time is unknown (NULL)")
    if amb:
        out.append(f"{amb} line(s) fall in the repeated autumn hour of {tz} and neither a collector "
                   "time nor the line order places them: their time is unknown (NULL)")
    resolved = state.dst_flags.get(BY_COLLECTOR, 0) + state.dst_flags.get(BY_ORDER, 0)
    if resolved:
        out.append(f"{resolved} line(s) in the repeated autumn hour of {tz} were placed by the "
                   "collector's time or the line order")
    return out, recorded


#: Canonical order of rank tags (the newest releases' order).
_RANK_ORDER = ("DP", "PP", "ATTN_CP", "MOE_DP", "TP", "EP")
_RANK_TAG = re.compile(r"^(DP|PP|ATTN_CP|MOE_DP|TP|EP)(\d+)$")


def canonical_ranks(raw: str) -> str:
    """Rank tags as an unordered set, written in one canonical order.

    Example:
        >>> canonical_ranks("DP3 TP3 EP3 PP1")
        'DP3 PP1 TP3 EP3'
    """
    tags = raw.split()
    parsed = [_RANK_TAG.match(t) for t in tags]
    if not all(parsed):
        return raw.strip()
    return " ".join(sorted(tags, key=lambda t: _RANK_ORDER.index(_RANK_TAG.match(t).group(1))))  # type: ignore[union-attr]


def _canonical_ranks(case: Case) -> None:
    # Few distinct rank strings per file: sort them in Python, rewrite only those out of order.
    fixes = {}
    for (raw,) in case.con.execute("SELECT DISTINCT ranks FROM _eng_cls WHERE ranks IS NOT NULL").fetchall():
        canon = canonical_ranks(raw)
        if canon != raw:
            fixes[raw] = canon
    if fixes:
        case.con.execute(
            "UPDATE _eng_cls SET ranks = map_extract_value(MAP($k, $v), ranks) WHERE list_contains($k, ranks)",
            {"k": list(fixes), "v": list(fixes.values())},
        )


def _redact_raw(raw: bytes) -> bytes:
    """Rejected raw bytes of request-log lines lose everything from the first text-like key on."""
    return redact_raw(raw)


def _loaded_count(case: Case, file_id: int) -> int:
    total = 0
    for t in _TABLES:
        row = case.con.execute(f"SELECT count(*) FROM {t} WHERE file_id = $f", {"f": file_id}).fetchone()
        total += int(row[0]) if row else 0
    return total


# -- entry point ---------------------------------------------------------------------------------


def ingest_engine(
    case: Case,
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    tz: str = "UTC",
    quiet: bool = True,
    chunk_bytes: int = CHUNK_BYTES,
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
    into logical nodes (default rule: :func:`forensics.sources.collect.layout.default_node`).
    Every file goes through the evidence ledger: an interrupted earlier load is rolled back and
    read again, a grown file loads only its new lines, and ``engine_starts`` is rebuilt for every
    node whose files changed (also when an earlier ingest died before its rebuild).

    Example:
        >>> from forensics.case import open_case
        >>> case = open_case(":memory:")
        >>> ingest_engine(case.target(), ["decode-0=tests/fixtures/engine/v0_5_6/decode.log"]).files[0].node  # doctest: +SKIP
        'decode-0'
    """
    if options:
        raise ParameterError(f"unknown engine option(s): {', '.join(sorted(options))}",
                             hint="engine ingest takes paths, tz, node_map, skip_unreadable and quiet")
    t0 = time.perf_counter()
    # auto: each file's offset from its collection wrapper's UTC times (timezones.auto_offsets)
    tz = "auto" if tz.strip().lower() == "auto" else check_tz(tz)
    rule = NodeRule.load(node_map)
    layout_warnings: list[str] = []
    unread: list[Unreadable] = []
    sources = resolve_sources(paths, node_map=rule, warnings=layout_warnings, skip_unreadable=skip_unreadable,
                              unread=unread)
    _setup(case, tz)
    summary = IngestSummary()
    summary.files.extend(FileSummary(path=str(u.path), kind="engine", not_read=u.reason) for u in unread)
    if layout_warnings:
        summary.notes["engine layout warnings"] = layout_warnings
    kinds: dict[str, int] = {}
    samples: list[str] = []
    led = Ledger(case, "engine", counted=_TABLES)
    # The Arrow segment, the block being split and its sliced copy live in Python, outside
    # DuckDB's accounting: DuckDB's limit is lowered by them while the loader runs (without it the
    # process peaked 5 % over 1 GiB at 10 M lines: DuckDB filled its pool while a segment was staged).
    # Files are hashed ahead of the loader in a thread: hashlib releases the GIL, so the next
    # file's sha256 (needed first, for the idempotency and growth checks) is computed while DuckDB works.
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        with case.loading(reserve_bytes=3 * segment_bytes), database_errors(), \
                progress_bar(quiet, sum(s.path.stat().st_size for s in sources), "engine") as bar:
            recovered = led.recover()
            if recovered:
                summary.notes["engine: interrupted loads rolled back and read again"] = ", ".join(
                    r.path for r in recovered)
                with led.transaction():
                    for r in recovered:
                        if r.node is not None:
                            led.mark_stale("engine_starts", r.node)
            snaps: list[Snapshot | None] = []
            for src in sources:
                try:
                    snaps.append(Snapshot.take(src.path))
                except InputError:
                    if not skip_unreadable:
                        raise
                    snaps.append(None)
            cuts = {id(sn): led.prefix_sizes(sn.size, _head_sha(sn)) if led.has_known() else []
                    for sn in snaps if sn is not None}
            digests = [None if sn is None else pool.submit(fingerprint, sn, cuts[id(sn)]) for sn in snaps]
            for src, snap, fut in zip(sources, snaps, digests, strict=True):
                if snap is None or fut is None:
                    summary.files.append(FileSummary(path=str(src.path), kind="engine", node=src.node,
                                                     not_read="permission denied"))
                    continue
                if bar is not None:
                    bar.update(bar.task_ids[0], file=src.path.name)
                fs = _ingest_one(led, src, snap, fut.result(), tz, kinds, samples, chunk_bytes, segment_bytes, rule)
                summary.files.append(fs)
                if bar is not None:
                    bar.update(bar.task_ids[0], advance=snap.size)
            # every node whose files changed (now, or in an ingest that died before this point)
            stale = sorted(led.stale("engine_starts"))
            crash_point("engine", "rebuild")
            with led.transaction():
                starts = rebuild_starts(case, stale)
                led.clear_stale("engine_starts", stale)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    case.con.execute("DROP TABLE IF EXISTS _eng_cls")
    summary.elapsed_s = time.perf_counter() - t0
    summary.notes["engine line kinds"] = dict(sorted(kinds.items(), key=lambda kv: -kv[1]))
    summary.notes["engine unrecognised sample"] = samples
    summary.notes["engine starts"] = starts
    return summary


def _head_sha(snap: Snapshot) -> str:
    import hashlib

    with snap.open() as fh:
        return hashlib.sha256(fh.read(4096)).hexdigest()


def _carry_from(case: Case, file_id: int) -> tuple[int | None, dt.datetime | None]:
    """The last line with its own time in an earlier version of a file (for lines without one)."""
    parts = " UNION ALL ".join(
        f"SELECT line_no, ts FROM {t} WHERE file_id = $f AND ts IS NOT NULL"
        + ("" if t == "router_requests" else " AND NOT coalesce(ts_inferred, false)")
        for t in _TABLES)
    row = case.con.execute(f"SELECT line_no, ts FROM ({parts}) ORDER BY line_no DESC LIMIT 1",
                           {"f": file_id}).fetchall()
    return (int(row[0][0]), row[0][1]) if row else (None, None)


def _ingest_one(
    led: Ledger, src: EngineSource, snap: Snapshot, fp: Fingerprint, tz: str, kinds: dict[str, int],
    samples: list[str], chunk_bytes: int, segment_bytes: int, rule: NodeRule,
) -> FileSummary:
    case = led.target
    fmt = "sglang-request-metrics" if src.kind == "metrics" else "sglang"
    fs = FileSummary(path=str(src.path), kind="engine", format=fmt, layer="engine", node=src.node, size=snap.size)
    decision: Decision = led.decide(fp.sha256, snap.size, fp.prefixes)
    if decision.skip is not None:
        fs.file_id = decision.skip
        fs.skipped = f"already in case as file_id {decision.skip}"
        return fs
    options = {"node": src.node, "tz": tz, "format": fmt,
               **({"pod": src.pod} if src.pod else {}), **({"container": src.container} if src.container else {}),
               **({"namespace": src.namespace} if src.namespace else {})}
    with led.transaction():
        reg: FileLoad = led.begin(snap, fp.sha256, decision, format=fmt, layer="engine", node=src.node, tz=tz,
                                  options=options, head_sha256=fp.head_sha256)
    fs.file_id = file_id = reg.file_id
    try:
        state, moved = _read_file(led, src, snap, file_id, decision, tz, chunk_bytes, segment_bytes, rule)
    except BaseException:
        # segments already committed go with the file's evidence row (else the next ingest does it)
        with contextlib.suppress(duckdb.Error), led.transaction():
            led.discard([file_id])
        raise
    counts = state.counts
    # Router files are told apart by their lines, not their names.
    if counts.get("router_request", 0) + counts.get("router", 0) + counts.get("router_pd_error", 0) > sum(
        v for k, v in counts.items() if not k.startswith("router")
    ):
        fs.format = "smg-router"
    read = state.read
    assert read is not None
    warnings = list(state.warnings)
    if moved:
        warnings.append(f"{moved}: its first {snap.size} bytes were read; the rest is read by the next ingest")
    if decision.prior is not None:
        warnings.append(f"grew since file_id {decision.prior.file_id} was read: loaded lines {decision.first_line} on")
    if state.bad_utf8_count:
        warnings.append(
            f"{state.bad_utf8_count} line(s) had invalid UTF-8 bytes, kept with U+FFFD "
            f"(first at line {state.bad_utf8_lines[0]})"
        )
    zone_warnings, tz_recorded = _zone_warnings(src, tz, state)
    warnings.extend(zone_warnings)
    try:
        with led.transaction():  # the file is done in the transaction that writes its last rows
            n_rej = store_rejected(case.con, file_id, state.rejected)
            loaded = _loaded_count(case, file_id)
            # physical lines = logical lines loaded + joined partial lines + wrapper framing + rejected
            accounted = loaded + n_rej + read.joined + read.framing
            if accounted != state.lines:
                warnings.append(f"count mismatch: {state.lines} lines read, {loaded} loaded, {n_rej} rejected, "
                                f"{read.joined} joined, {read.framing} framing")
            led.finish(reg, lines_read=state.lines, rows_loaded=loaded, rows_rejected=n_rej, rows_duplicate=0,
                       complete=state.complete, warning="; ".join(warnings) or None, end_offset=state.end_offset,
                       end_line=state.end_line, open_tail=state.open_tail, format=fs.format)
            case.con.execute(
                "UPDATE evidence_files SET wrapper = $w, lines_joined = $j, lines_framing = $f, tz = $tz "
                "WHERE file_id = $id",
                {"w": read.wrapper, "j": read.joined, "f": read.framing, "tz": tz_recorded, "id": file_id})
            for node in state.nodes or {src.node}:
                led.mark_stale("engine_starts", node)
    except BaseException:
        with contextlib.suppress(duckdb.Error), led.transaction():
            led.discard([file_id])
        raise
    fs.lines_read, fs.rows_loaded, fs.rows_rejected = state.lines, loaded, n_rej
    fs.lines_joined, fs.lines_framing = read.joined, read.framing
    fs.complete, fs.warnings = state.complete, warnings
    fs.detected = read.detected
    for k, v in counts.items():
        kinds[k] = kinds.get(k, 0) + v
    if len(samples) < 5:
        for ln, text in case.con.execute(
            "SELECT line_no, left(text, 200) FROM engine_other_lines WHERE file_id = $f AND kind = 'unrecognised' "
            "ORDER BY line_no LIMIT $k", {"f": file_id, "k": 5 - len(samples)}
        ).fetchall():
            samples.append(f"{src.path.name}:{ln}: {text}")
    return fs


def _read_file(led: Ledger, src: EngineSource, snap: Snapshot, file_id: int, decision: Decision, tz: str,
               chunk_bytes: int, segment_bytes: int, rule: NodeRule) -> tuple[_ReadState, str | None]:
    """Stage and load the file's lines; from a private copy of its snapshot if it moved while read.

    The collection stage reads the path itself: a file that grew or changed meanwhile is read
    again from a copy of exactly the bytes hashed at open (its rows so far give way first).
    """
    case = led.target

    def once(path: Path) -> _ReadState:
        state = _ReadState()
        if decision.prior is not None:
            line, ts = _carry_from(case, decision.prior.file_id)
            if line is not None:
                state.carry[src.node] = (line, -1, ts)
        stage_lines(case, path, state, on_segment=lambda node: _process_segment(case, src, file_id, tz, state, node),
                    chunk_bytes=chunk_bytes, segment_bytes=segment_bytes, tz=tz,
                    node_rule=None if src.fixed_node else rule,
                    start_offset=decision.start_offset, first_line=decision.first_line)
        return state

    state = once(src.path)
    moved = snap.changed()
    if moved is None:
        return state, None
    with led.transaction():
        for table in led.evidence_tables():
            case.con.execute(f'DELETE FROM "{table}" WHERE file_id = $f', {"f": file_id})
    import hashlib

    with case.temp_dir() as d:
        copy = d / src.path.name
        h = hashlib.sha256()
        with snap.open() as fh, open(copy, "wb") as out:
            while block := fh.read(1 << 20):
                h.update(block)
                out.write(block)
        state = once(copy)
    if h.hexdigest() != snap_sha(case, file_id):
        # not only appended to: the bytes loaded (the copy's) are the evidence recorded
        case.con.execute("UPDATE evidence_files SET sha256 = $s WHERE file_id = $f", {"s": h.hexdigest(), "f": file_id})
        moved = f"{moved}; its first {snap.size} bytes changed too (the sha256 recorded is of the bytes loaded)"
    return state, moved


def snap_sha(case: Case, file_id: int) -> str:
    return str(case.con.execute("SELECT sha256 FROM evidence_files WHERE file_id = $f", {"f": file_id}).fetchall()[0][0])
