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
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from forensics.errors import InputError, ParameterError
from forensics.sources import engine_sql as q
from forensics.sources.files import (
    finish_file,
    gunzip_block,
    progress_bar,
    register_file,
    sha256_file,
    store_rejected,
)
from forensics.sources.summary import FileSummary, IngestSummary

if TYPE_CHECKING:
    from forensics.case import Case

#: Bytes handed to DuckDB per insert (aligned to line ends); bounds the loader's own memory.
CHUNK_BYTES = 16 << 20
#: Text processed per pipeline pass: the staged lines and their classification stay in memory
#: (no spilling) and memory is bounded for any file size.
SEGMENT_BYTES = 64 << 20

#: Rank of each rotation suffix: ``sglang.log.2.gz`` (oldest) before ``sglang.log.1.gz`` before ``sglang.log``.
_ROTATION = re.compile(r"^(?P<base>.*?)(?:\.(?P<n>\d+))?(?:\.(?:gz|zst|zstd))?$")
_METRICS = re.compile(r"sglang-request-metrics-(?P<d>\d{8})_(?P<h>\d{2})")
_COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")

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


@dataclass
class EngineSource:
    """One file to read, with the node it belongs to.

    Example:
        >>> EngineSource(node="prefill-0", path=Path("sglang.log")).kind
        'log'
    """

    node: str
    path: Path
    kind: str = "log"  # 'log' | 'metrics'
    order: tuple[Any, ...] = field(default_factory=tuple)


# -- path resolution ------------------------------------------------------------------------------


def node_of_file(path: Path) -> str:
    """The node name a lone file stands for: its name without rotation/compression/.log suffixes.

    Example:
        >>> node_of_file(Path("decode-1.log.2.gz"))
        'decode-1'
        >>> node_of_file(Path("sglang-request-metrics-20260828_13.log"))
        'sglang-request-metrics'
    """
    name = path.name
    for suf in _COMPRESSED_SUFFIXES:
        if name.endswith(suf):
            name = name[: -len(suf)]
    name = re.sub(r"\.\d+$", "", name)
    name = re.sub(r"\.(log|txt|out|err|jsonl|json)$", "", name)
    name = re.sub(r"-\d{8}_\d{2}$", "", name)
    return name or path.name


def _rotation_key(path: Path) -> tuple[Any, ...]:
    # Older rotations carry larger numbers; read them first so lines come in time order.
    m = _ROTATION.match(path.name)
    base = m.group("base") if m else path.name
    n = int(m.group("n")) if m and m.group("n") else 0
    return (str(path.parent), base, -n, path.name)


def _files_in(directory: Path) -> list[Path]:
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(directory).parts)
    )


def resolve_sources(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[EngineSource]:
    """Turn ``[NODE=]PATH`` arguments into files with their node, in reading order.

    A directory whose subdirectories hold files gives one node per subdirectory (named after it;
    files directly inside it are nodes by their stem); a file alone is the node of its stem.

    Example:
        >>> resolve_sources([])
        Traceback (most recent call last):
        ...
        forensics.errors.InputError: no engine paths given (pass --engine [NODE=]PATH)
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    items = [os.fspath(p) for p in paths]
    if not items:
        raise InputError("no engine paths given", hint="pass --engine [NODE=]PATH")
    out: list[EngineSource] = []
    for item in items:
        node: str | None = None
        raw = item
        if "=" in item and not Path(item).exists():
            node, raw = item.split("=", 1)
            node = node.strip()
            if not node:
                raise ParameterError(f"empty node name in {item!r}", hint="use NODE=PATH")
        p = Path(raw)
        if p.is_file():
            out.append(EngineSource(node or node_of_file(p), p))
        elif p.is_dir():
            files = _files_in(p)
            if not files:
                raise InputError(f"directory {raw} contains no files", hint="check the path")
            for f in files:
                rel = f.relative_to(p)
                if node is not None:
                    n = node
                elif len(rel.parts) > 1:
                    n = rel.parts[0]
                else:
                    n = node_of_file(f)
                out.append(EngineSource(n, f))
        else:
            raise InputError(f"{raw}: no such file or directory", hint="check the path")
    seen: set[Path] = set()
    unique: list[EngineSource] = []
    for s in out:
        r = s.path.resolve()
        if r in seen:
            continue
        seen.add(r)
        s.kind = "metrics" if _METRICS.search(s.path.name) else "log"
        s.order = (s.node, s.kind != "log", *_rotation_key(s.path))
        unique.append(s)
    unique.sort(key=lambda s: s.order)
    return unique


# -- reading ---------------------------------------------------------------------------------------


@dataclass
class _ReadState:
    lines: int = 0
    complete: bool = True
    warning: str | None = None
    cut_line: bytes | None = None
    bad_utf8_lines: list[int] = field(default_factory=list)
    bad_utf8_count: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    rejected: list[tuple[int, str, bytes]] = field(default_factory=list)
    carry_line: int | None = None
    carry_ts: dt.datetime | None = None


def _blocks(path: Path, comp: str, state: _ReadState, size: int) -> Iterator[bytes]:
    """Decompressed blocks of a file; a truncated/corrupt stream ends early and is noted."""
    if comp == "gzip":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        with open(path, "rb") as fh:
            try:
                # Read compressed input in small pieces: logs compress ~15x, so a full-size
                # compressed read would decompress to a block far larger than `size` and break
                # the memory bound (measured: 2.8 GiB peak on a 1.3 GB-decompressed file).
                while block := fh.read(max(1, size // 32)):
                    d, out = gunzip_block(d, block)
                    if out:
                        yield out
                if not d.eof:
                    state.complete = False
                    state.warning = "gzip stream is truncated; the readable prefix was loaded"
            except zlib.error as exc:
                state.complete = False
                state.warning = f"gzip stream is corrupt ({exc}); the readable prefix was loaded"
    elif comp == "zstd":
        import zstandard

        with open(path, "rb") as raw:
            reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
            try:
                while block := reader.read(size):
                    yield block
            except zstandard.ZstdError as exc:
                state.complete = False
                state.warning = f"zstd stream is truncated or corrupt ({exc}); the readable prefix was loaded"
    else:
        with open(path, "rb") as fh:
            while block := fh.read(size):
                yield block


def _to_arrow(chunk: bytes, first_line: int, state: _ReadState) -> pa.Table:
    """One chunk of whole lines as an Arrow table (line_no, line) without a Python loop per line."""
    if chunk and b"\r" not in chunk:
        # Common case, no copy per line: the chunk itself is the Arrow data buffer, each line's
        # string runs up to and including its '\n', which one vectorised slice then drops. Arrow
        # validates the UTF-8 (else the general path below). 3.5x cheaper than bytes.split().
        whole = chunk if chunk.endswith(b"\n") else chunk + b"\n"
        ends = np.flatnonzero(np.frombuffer(whole, dtype=np.uint8) == 10)
        bounds = np.empty(len(ends) + 1, dtype=np.int64)
        bounds[0] = 0
        bounds[1:] = ends + 1
        raw = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(ends), [None, pa.py_buffer(bounds), pa.py_buffer(whole)]
        )
        try:
            text = pc.binary_slice(raw, 0, -1).cast(pa.large_string())
        except pa.ArrowInvalid:
            pass
        else:
            nos = pa.array(np.arange(first_line, first_line + len(ends), dtype=np.int64))
            return pa.table({"line_no": nos, "line": text})
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError:
        # Keep the line: invalid bytes become U+FFFD; note which lines were touched.
        fixed = chunk.decode("utf-8", "replace").encode("utf-8")
        arr_f = np.frombuffer(fixed, dtype=np.uint8)
        nl_f = np.flatnonzero(arr_f == 10)
        pos = [m.start() for m in re.finditer(b"\xef\xbf\xbd", fixed)]
        bad = np.unique(np.searchsorted(nl_f, np.array(pos, dtype=np.int64)) + first_line)
        state.bad_utf8_count += int(bad.size)
        state.bad_utf8_lines.extend(int(x) for x in bad[: max(0, 5 - len(state.bad_utf8_lines))])
        chunk = fixed
    arr = np.frombuffer(chunk, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)
    starts = np.concatenate(([0], nl + 1)).astype(np.int64)
    if starts[-1] == len(chunk):
        starts = starts[:-1]
    n = len(starts)
    # Drop the line terminators ('\n' and a '\r' just before it) with one vectorised copy, so
    # each Arrow string is exactly the line's content.
    cr = nl[(nl > 0)]
    cr = cr[arr[cr - 1] == 13] - 1
    drop = np.sort(np.concatenate((nl, cr))) if cr.size else nl
    data = np.delete(arr, drop) if drop.size else arr
    offsets = np.concatenate((starts - np.searchsorted(drop, starts), [len(data)])).astype(np.int64)
    lines = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data.tobytes()))
    nos = pa.array(np.arange(first_line, first_line + n, dtype=np.int64))
    return pa.table({"line_no": nos, "line": lines})


def stage_lines(
    case: Case,
    path: Path,
    comp: str,
    state: _ReadState,
    on_segment: Callable[[], None],
    chunk_bytes: int = CHUNK_BYTES,
    segment_bytes: int = SEGMENT_BYTES,
) -> None:
    """Stream a file's physical lines to DuckDB as the Arrow view ``_eng_raw`` (1-based line numbers).

    Every ``segment_bytes`` of text (and at the end) ``on_segment`` is called to process the
    staged lines (registered as ``_eng_raw``), then they are released: memory stays bounded
    whatever the file size. The last line is kept even without a trailing newline, except when a
    compressed stream broke off: that partial line is set aside in ``state.cut_line`` for
    ``rejected_lines``.
    """
    con = case.con
    pending = b""
    next_line = 1
    staged = 0
    tables: list[pa.Table] = []

    def segment() -> None:
        nonlocal staged
        # DuckDB scans the Arrow chunks in place (no copy into a staging table). register()
        # refuses while an earlier result is still open (a fetchone()): complete() it first.
        con.complete()
        con.register("_eng_raw", pa.concat_tables(tables))
        tables.clear()  # the registration holds the only reference: freed once the stage has read it
        try:
            on_segment()
        finally:
            con.complete()
            con.unregister("_eng_raw")
        staged = 0

    def flush(data: bytes) -> None:
        nonlocal next_line, staged
        tbl = _to_arrow(data, next_line, state)
        tables.append(tbl)
        next_line += tbl.num_rows
        staged += len(data)
        if staged >= segment_bytes:
            segment()

    for block in _blocks(path, comp, state, chunk_bytes):
        data = pending + block if pending else block
        cut = data.rfind(b"\n")
        if cut < 0:
            pending = data
            continue
        pending = data[cut + 1 :]
        flush(data[: cut + 1])
    if pending:
        if state.complete:
            flush(pending)
        else:
            state.cut_line = pending
    if staged:
        segment()
    state.lines = next_line - 1 + (1 if state.cut_line is not None else 0)


# -- the per-file pipeline -----------------------------------------------------------------------


def _setup(case: Case, tz: str) -> None:
    con = case.con
    con.execute(q.FACTS_DDL)
    con.execute(q.MACROS)
    if tz.upper() == "UTC":
        con.execute("CREATE OR REPLACE TEMP MACRO _eng_tz(t) AS t")
    else:
        con.execute(f"CREATE OR REPLACE TEMP MACRO _eng_tz(t) AS timezone('UTC', timezone('{tz}', t))")


def _check_tz(case: Case, tz: str) -> str:
    if "'" in tz or not tz:
        raise ParameterError(f"invalid time zone {tz!r}", hint="use an IANA name such as Asia/Singapore")
    if tz.upper() == "UTC":
        return "UTC"
    row = case.con.execute(
        "SELECT name FROM pg_timezone_names() WHERE lower(name) = lower($tz) LIMIT 1", {"tz": tz}
    ).fetchone()
    if not row:
        raise ParameterError(f"unknown time zone {tz!r}", hint="use an IANA name such as Asia/Singapore")
    return str(row[0])


def _file_hour(src: EngineSource, tz: str) -> dt.datetime | None:
    """The hour a request-metrics file covers (from its name), in UTC; None if not in the name."""
    m = _METRICS.search(src.path.name)
    if not m:
        return None
    local = dt.datetime.strptime(m.group("d") + m.group("h"), "%Y%m%d%H")
    if tz == "UTC":
        return local
    from zoneinfo import ZoneInfo

    return local.replace(tzinfo=ZoneInfo(tz)).astimezone(dt.UTC).replace(tzinfo=None)


def _process_segment(case: Case, src: EngineSource, file_id: int, tz: str, state: _ReadState) -> None:
    """Classify and load the staged lines of one segment; add to the file's counts and rejects.

    One transaction per segment: one commit (WAL write, checkpoint) instead of one per statement,
    and the segment's temp tables are released at its end (memory stays bounded).
    """
    con = case.con
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
    row = con.execute("SELECT count(*) FROM _eng_cls WHERE ets = '' AND rts = ''").fetchone()
    if row and row[0]:
        if state.carry_line is not None:
            # The last prefixed line of the previous segment, so continuation lines at the start
            # of this one still find the line (and time) they follow.
            con.execute(
                "INSERT INTO _eng_cls (line_no, pre, msg, ets, rts, rlevel, cls, ranks, ts, collector_ts, "
                "ts_inferred, attached_to_line) VALUES ($l, '', '', 'carry', '', '', '__carry__', NULL, $t, "
                "NULL, false, NULL)",
                {"l": state.carry_line, "t": state.carry_ts},
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
        "SELECT line_no, ts FROM _eng_cls WHERE ets <> '' OR rts <> '' ORDER BY line_no DESC LIMIT 1"
    ).fetchone()
    if last:
        state.carry_line, state.carry_ts = int(last[0]), last[1]


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
    **options: Any,
) -> IngestSummary:
    """Load SGLang engine/router logs (``[NODE=]PATH`` items) and rebuild ``engine_starts``.

    Example:
        >>> from forensics.case import open_case
        >>> case = open_case(":memory:")
        >>> ingest_engine(case, ["decode-0=tests/fixtures/engine/v0_5_6/decode.log"]).files[0].node  # doctest: +SKIP
        'decode-0'
    """
    if options:
        raise ParameterError(f"unknown engine option(s): {', '.join(sorted(options))}",
                             hint="engine ingest takes paths, tz and quiet")
    t0 = time.perf_counter()
    tz = _check_tz(case, tz)
    sources = resolve_sources(paths)
    _setup(case, tz)
    summary = IngestSummary()
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
                fs = _ingest_one(case, src, digest.result(), tz, kinds, samples, chunk_bytes, segment_bytes)
                summary.files.append(fs)
                if fs.skipped is None:
                    touched.add(src.node)
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
    chunk_bytes: int, segment_bytes: int,
) -> FileSummary:
    fmt = "sglang-request-metrics" if src.kind == "metrics" else "sglang"
    reg = register_file(
        case, src.path, kind="engine", format=fmt, layer="engine", node=src.node, tz=tz,
        options={"node": src.node, "tz": tz, "format": fmt}, sha256=digest,
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
    stage_lines(case, src.path, reg.compression, state,
                on_segment=lambda: _process_segment(case, src, file_id, tz, state),
                chunk_bytes=chunk_bytes, segment_bytes=segment_bytes)
    counts = state.counts
    rejected = state.rejected
    if state.cut_line is not None:
        rejected.append((state.lines, "line cut off by the end of a truncated compressed stream",
                         _redact_raw(state.cut_line)))
    n_rej = store_rejected(case, reg.file_id, rejected)
    loaded = _loaded_count(case, reg.file_id)
    # Router files are told apart by their lines, not their names.
    if counts.get("router_request", 0) + counts.get("router", 0) + counts.get("router_pd_error", 0) > sum(
        v for k, v in counts.items() if not k.startswith("router")
    ):
        fs.format = "smg-router"
    warnings = []
    if state.warning:
        warnings.append(state.warning)
    if state.bad_utf8_count:
        warnings.append(
            f"{state.bad_utf8_count} line(s) had invalid UTF-8 bytes, kept with U+FFFD "
            f"(first at line {state.bad_utf8_lines[0]})"
        )
    if loaded + n_rej != state.lines:
        warnings.append(f"count mismatch: {state.lines} lines read, {loaded} loaded, {n_rej} rejected")
    fs.lines_read, fs.rows_loaded, fs.rows_rejected = state.lines, loaded, n_rej
    fs.complete, fs.warnings = state.complete, warnings
    finish_file(case, reg.file_id, lines_read=state.lines, rows_loaded=loaded, rows_rejected=n_rej,
                rows_duplicate=0, complete=state.complete, warning="; ".join(warnings) or None,
                format=fs.format)
    for k, v in counts.items():
        kinds[k] = kinds.get(k, 0) + v
    if len(samples) < 5:
        for ln, text in case.con.execute(
            "SELECT line_no, left(text, 200) FROM engine_other_lines WHERE file_id = $f AND kind = 'unrecognised' "
            "ORDER BY line_no LIMIT $k", {"f": reg.file_id, "k": 5 - len(samples)}
        ).fetchall():
            samples.append(f"{src.path.name}:{ln}: {text}")
    return fs
