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
import json
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

from forensics.errors import ParameterError
from forensics.sources import engine_sql as q
from forensics.sources.collect import ReadResult, read_lines
from forensics.sources.collect.layout import EngineSource, NodeRule, resolve_sources
from forensics.sources.files import (
    finish_file,
    progress_bar,
    register_file,
    sha256_file,
    store_rejected,
)
from forensics.sources.lines import NO_TIME, LineBatch
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
    from forensics.case import Case

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
) -> None:
    """Stream a file's logical lines to DuckDB as the Arrow view ``_eng_raw``.

    The collection stage (:func:`forensics.sources.collect.read_lines`) reads the file (plain,
    gzip, zstd; any collection wrapper, detected from the content) and hands over logical lines
    with their physical line numbers. Every ``segment_bytes`` of text (and at the end)
    ``on_segment(node)`` processes the staged lines (registered as ``_eng_raw``), then they are
    released: memory stays bounded whatever the file size. Lines whose wrapper named their pod
    (a shipper export) are processed per logical node (``node`` given); others with ``None``.
    Lines the collection stage set aside (a wrapper line it could not read, a line cut by a
    truncated stream) go to ``state.rejected`` with their reason.
    """
    con = case.con
    staged = 0
    seq = 0
    tables: list[pa.Table] = []
    per_node: dict[str | None, int] = {}
    reader = read_lines(path, block_bytes=chunk_bytes,
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

    for b in reader:
        if not b.collector_exact:
            # zone-less collector times (RFC 3164 syslog) were converted with --engine-tz itself:
            # they fill lines without a time but cannot check (or derive) the engine's zone
            state.collector_inexact = True
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
    if res.status.problem:
        state.warnings.append(res.status.problem)
    state.warnings.extend(res.warnings)


# -- the per-file pipeline -----------------------------------------------------------------------


def _setup(case: Case, tz: str) -> None:
    con = case.con
    con.execute(q.FACTS_DDL)
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
    m = re.search(rb"""(text|input_ids|output_ids|prompt|messages|content|request_parameters)['"]?\s*[:=]""", raw)
    if m:
        return raw[: m.end()] + b" <redacted: rest of line>"
    return raw


def _loaded_count(case: Case, file_id: int) -> int:
    total = 0
    for t in _TABLES:
        row = case.con.execute(f"SELECT count(*) FROM {t} WHERE file_id = $f", {"f": file_id}).fetchone()
        total += int(row[0]) if row else 0
    return total


# -- engine_starts -------------------------------------------------------------------------------


def _truthy(value: Any) -> bool | None:
    if value is None:
        return None
    return str(value).strip().lower() in {"true", "1", "yes"}


def _as_int(value: Any) -> int | None:
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None


def rebuild_starts(case: Case, nodes: Iterable[str]) -> int:
    """Recompute ``engine_starts`` for ``nodes`` from all their startup facts; return the row count.

    A start begins at a ``server_args`` line, or at any startup line seen after the node was
    ready, or at a second ``max_total_num_tokens`` line of the same rank (a restart without
    server_args in the logs).

    Example:
        >>> from forensics.case import open_case
        >>> case = open_case(":memory:"); case.con.execute(q.FACTS_DDL) and None
        >>> rebuild_starts(case, [])
        0
    """
    con = case.con
    total = 0
    for node in sorted(set(nodes)):
        con.execute("DELETE FROM engine_starts WHERE node = $n", {"n": node})
        facts = con.execute(
            """SELECT ts, ts_inferred, ranks, fact, file_id, line_no, args, text FROM engine_startup_facts
               WHERE node = $n ORDER BY ts NULLS LAST, file_id, line_no""",
            {"n": node},
        ).fetchall()
        starts: list[dict[str, Any]] = []
        cur: dict[str, Any] | None = None
        for ts, inferred, ranks, fact, file_id, line_no, args, text in facts:
            new = cur is None or (
                (fact == "server_args" and cur["n_facts"] > 0)
                or (cur["ready"] is not None and fact not in ("ready", "bootstrap", "pool_warning"))
                or (fact == "max_total" and ranks in cur["max_total_ranks"])
            )
            if new:
                cur = {"ts_start": ts, "ts_inferred": inferred, "ready": None, "n_facts": 0, "args": None,
                       "max_total": None, "max_total_ranks": set(), "kv": None, "kv_label_only": None,
                       "pool_warning": False, "first_loc": (file_id, line_no)}
                starts.append(cur)
            assert cur is not None
            cur["n_facts"] += 1
            if fact == "server_args" and args:
                cur["args"] = {k: v for k, v in json.loads(args).items() if k != "server_args"}
            elif fact == "max_total":
                cur["max_total_ranks"].add(ranks)
                if cur["max_total"] is None:
                    kv = dict(re.findall(r"(\w+)=([\w.]+)", text or ""))
                    cur["max_total"] = (kv, file_id, line_no)
            elif fact == "kv_cache":
                m = re.search(r"#tokens: (\d+)", text or "")
                d = re.search(r"dtype: ([\w.]+)", text or "")
                labelled = not (text or "").startswith("KV Cache is allocated")
                info = (int(m.group(1)) if m else None, d.group(1) if d else None)
                if not labelled and cur["kv"] is None:
                    cur["kv"] = info
                elif labelled and cur["kv_label_only"] is None:
                    cur["kv_label_only"] = info
            elif fact == "ready" and cur["ready"] is None:
                cur["ready"] = ts
            elif fact == "pool_warning":
                cur["pool_warning"] = True
        rows = []
        for seq, s in enumerate(starts, start=1):
            args = s["args"] or {}
            kvl, fid, lno = s["max_total"] or ({}, *s["first_loc"])
            ctx = _as_int(kvl.get("context_len"))
            pool = _as_int(kvl.get("max_total_num_tokens"))
            limit = min(ctx - 1, pool - 1) - 5 if ctx is not None and pool is not None else None
            kvc = s["kv"] or s["kv_label_only"] or (None, None)
            mode = args.get("disaggregation_mode")
            role = role_source = None
            if mode is not None:
                role, role_source = ({"prefill": "prefill", "decode": "decode"}.get(str(mode), "unified"),
                                     "server_args")
            rows.append({
                "node": node, "seq": seq, "ts_start": s["ts_start"], "ts_ready": s["ready"],
                "ts_inferred": bool(s["ts_inferred"]), "role": role, "role_source": role_source,
                "ctx": ctx, "pool": pool, "limit": limit, "ctx_arg": _as_int(args.get("context_length")),
                "chunked": _as_int(kvl.get("chunked_prefill_size") or args.get("chunked_prefill_size")),
                "max_prefill": _as_int(kvl.get("max_prefill_tokens") or args.get("max_prefill_tokens")),
                "max_running": _as_int(kvl.get("max_running_requests") or args.get("max_running_requests")),
                "tp": _as_int(args.get("tp_size")), "dp": _as_int(args.get("dp_size")),
                "model": args.get("model_path"),
                "kv_dtype": kvc[1] or (args.get("kv_cache_dtype") if args.get("kv_cache_dtype") != "auto" else None)
                or args.get("kv_cache_dtype"),
                "kv_tokens": kvc[0], "pool_warning": s["pool_warning"],
                "auto_trunc": _truthy(args.get("allow_auto_truncate")),
                "checksum": (_truthy(args.get("disaggregation_enable_kv_checksum")) or _truthy(args.get("kv_canary")))
                if ("disaggregation_enable_kv_checksum" in args or "kv_canary" in args) else (False if args else None),
                "args": json.dumps(args, sort_keys=True) if args else None, "fid": fid, "lno": lno,
            })
        for r in rows:
            con.execute(
                """INSERT INTO engine_starts VALUES ($node, $seq, $ts_start, $ts_ready, $ts_inferred, $role,
                   $role_source, $ctx, $pool, $limit, $ctx_arg, $chunked, $max_prefill, $max_running, $tp, $dp,
                   $model, $kv_dtype, $kv_tokens, $pool_warning, $auto_trunc, $checksum, $args, $fid, $lno)""",
                r,
            )
        total += len(rows)
        _infer_roles(case, node)
    return total


def _infer_roles(case: Case, node: str) -> None:
    """Role from the batch lines of each start when server_args did not say it."""
    case.con.execute(
        """
        UPDATE engine_starts SET role = x.role, role_source = x.src
        FROM (
            SELECT s.start_seq,
                   CASE WHEN bool_or(b.kind = 'prefill' AND (contains(b.fields_raw, ' #inflight-req: ')
                                     OR contains(b.fields_raw, ' #bootstrap-req: ')
                                     OR contains(b.fields_raw, ' #unbootstrapped-req: ')
                                     OR contains(b.fields_raw, ' #transferring-req: '))) THEN 'prefill'
                        WHEN bool_or(b.kind = 'decode' AND (contains(b.fields_raw, ' #transfer-req: ')
                                     OR contains(b.fields_raw, ' pre-allocated usage: ')
                                     OR contains(b.fields_raw, ' #prealloc-req: '))) THEN 'decode'
                        ELSE 'unified' END AS role,
                   CASE WHEN count(b.kind) > 0 THEN 'batch_lines' ELSE 'default' END AS src
            FROM (SELECT * FROM (SELECT start_seq, ts_start, role,
                                        lead(ts_start) OVER (ORDER BY start_seq) AS ts_next
                                 FROM engine_starts WHERE node = $n)
                  WHERE role IS NULL) s  -- only starts whose role server_args did not give
            LEFT JOIN engine_batches b ON b.node = $n AND (s.ts_start IS NULL OR b.ts >= s.ts_start)
                 AND (s.ts_next IS NULL OR b.ts < s.ts_next)
            GROUP BY s.start_seq
        ) x
        WHERE engine_starts.node = $n AND engine_starts.start_seq = x.start_seq AND engine_starts.role IS NULL
        """,
        {"n": node},
    )


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
    **options: Any,
) -> IngestSummary:
    """Load SGLang engine/router logs (``[NODE=]PATH`` items) and rebuild ``engine_starts``.

    Files may be plain or collected (CRI, Docker, journald, syslog, shipper exports: detected per
    file, :mod:`forensics.sources.collect`). ``tz`` is the zone of the engines' local times, or
    ``auto`` (each file's offset from its collector's UTC times). ``node_map`` is a TOML file of
    ``"regex" = "node"`` pairs grouping pods into logical nodes (default rule:
    :func:`forensics.sources.collect.layout.default_node`).

    Example:
        >>> from forensics.case import open_case
        >>> case = open_case(":memory:")
        >>> ingest_engine(case, ["decode-0=tests/fixtures/engine/v0_5_6/decode.log"]).files[0].node  # doctest: +SKIP
        'decode-0'
    """
    if options:
        raise ParameterError(f"unknown engine option(s): {', '.join(sorted(options))}",
                             hint="engine ingest takes paths, tz, node_map and quiet")
    t0 = time.perf_counter()
    # auto: each file's offset from its collection wrapper's UTC times (timezones.auto_offsets)
    tz = "auto" if tz.strip().lower() == "auto" else check_tz(tz)
    rule = NodeRule.load(node_map)
    layout_warnings: list[str] = []
    sources = resolve_sources(paths, node_map=rule, warnings=layout_warnings)
    _setup(case, tz)
    summary = IngestSummary()
    if layout_warnings:
        summary.notes["engine layout warnings"] = layout_warnings
    kinds: dict[str, int] = {}
    samples: list[str] = []
    touched: set[str] = set()
    total_bytes = sum(s.path.stat().st_size for s in sources)
    # The Arrow segment, the block being split and its sliced copy live in Python, outside
    # DuckDB's accounting: DuckDB's limit is lowered by them while the loader runs (without it the
    # process peaked 5 % over 1 GiB at 10 M lines: DuckDB filled its pool while a segment was staged).
    # Files are hashed ahead of the loader in a thread: hashlib releases the GIL, so the next
    # file's sha256 (needed first, for the idempotency check) is computed while DuckDB works.
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        with case.loading(reserve_bytes=3 * segment_bytes), progress_bar(quiet, total_bytes, "engine") as bar:
            digests = [pool.submit(sha256_file, s.path) for s in sources]
            for src, digest in zip(sources, digests, strict=True):
                if bar is not None:
                    bar.update(bar.task_ids[0], file=src.path.name)
                fs = _ingest_one(case, src, digest.result(), tz, kinds, samples, chunk_bytes, segment_bytes,
                                 touched, rule)
                summary.files.append(fs)
                if bar is not None:
                    bar.update(bar.task_ids[0], advance=src.path.stat().st_size)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    starts = rebuild_starts(case, touched)
    case.con.execute("DROP TABLE IF EXISTS _eng_cls")
    summary.elapsed_s = time.perf_counter() - t0
    summary.notes["engine line kinds"] = dict(sorted(kinds.items(), key=lambda kv: -kv[1]))
    summary.notes["engine unrecognised sample"] = samples
    summary.notes["engine starts"] = starts
    return summary


def _ingest_one(
    case: Case, src: EngineSource, digest: str, tz: str, kinds: dict[str, int], samples: list[str],
    chunk_bytes: int, segment_bytes: int, nodes_seen: set[str], rule: NodeRule,
) -> FileSummary:
    fmt = "sglang-request-metrics" if src.kind == "metrics" else "sglang"
    reg = register_file(
        case, src.path, kind="engine", format=fmt, layer="engine", node=src.node, tz=tz,
        options={"node": src.node, "tz": tz, "format": fmt,
                 **({"pod": src.pod} if src.pod else {}), **({"container": src.container} if src.container else {}),
                 **({"namespace": src.namespace} if src.namespace else {})}, sha256=digest,
    )
    fs = FileSummary(path=str(src.path), kind="engine", format=fmt, layer="engine", node=src.node,
                     size=src.path.stat().st_size)
    if isinstance(reg, int):
        fs.file_id = reg
        fs.skipped = f"already in case as file_id {reg}"
        return fs
    fs.file_id = reg.file_id
    state = _ReadState()
    file_id = reg.file_id
    stage_lines(case, src.path, state,
                on_segment=lambda node: _process_segment(case, src, file_id, tz, state, node),
                chunk_bytes=chunk_bytes, segment_bytes=segment_bytes, tz=tz,
                node_rule=None if src.fixed_node else rule)
    counts = state.counts
    rejected = state.rejected
    n_rej = store_rejected(case, reg.file_id, rejected)
    loaded = _loaded_count(case, reg.file_id)
    # Router files are told apart by their lines, not their names.
    if counts.get("router_request", 0) + counts.get("router", 0) + counts.get("router_pd_error", 0) > sum(
        v for k, v in counts.items() if not k.startswith("router")
    ):
        fs.format = "smg-router"
    read = state.read
    assert read is not None
    warnings = list(state.warnings)
    if state.bad_utf8_count:
        warnings.append(
            f"{state.bad_utf8_count} line(s) had invalid UTF-8 bytes, kept with U+FFFD "
            f"(first at line {state.bad_utf8_lines[0]})"
        )
    zone_warnings, tz_recorded = _zone_warnings(src, tz, state)
    warnings.extend(zone_warnings)
    # physical lines = logical lines loaded + joined partial lines + wrapper framing + rejected
    accounted = loaded + n_rej + read.joined + read.framing
    if accounted != state.lines:
        warnings.append(f"count mismatch: {state.lines} lines read, {loaded} loaded, {n_rej} rejected, "
                        f"{read.joined} joined, {read.framing} framing")
    fs.lines_read, fs.rows_loaded, fs.rows_rejected = state.lines, loaded, n_rej
    fs.lines_joined, fs.lines_framing = read.joined, read.framing
    fs.complete, fs.warnings = state.complete, warnings
    fs.detected = read.detected
    finish_file(case, reg.file_id, lines_read=state.lines, rows_loaded=loaded, rows_rejected=n_rej,
                rows_duplicate=0, complete=state.complete, warning="; ".join(warnings) or None,
                format=fs.format)
    case.con.execute(
        "UPDATE evidence_files SET wrapper = $w, lines_joined = $j, lines_framing = $f, tz = $tz WHERE file_id = $id",
        {"w": read.wrapper, "j": read.joined, "f": read.framing, "tz": tz_recorded, "id": reg.file_id})
    nodes_seen.update(state.nodes)
    for k, v in counts.items():
        kinds[k] = kinds.get(k, 0) + v
    if len(samples) < 5:
        for ln, text in case.con.execute(
            "SELECT line_no, left(text, 200) FROM engine_other_lines WHERE file_id = $f AND kind = 'unrecognised' "
            "ORDER BY line_no LIMIT $k", {"f": reg.file_id, "k": 5 - len(samples)}
        ).fetchall():
            samples.append(f"{src.path.name}:{ln}: {text}")
    return fs
