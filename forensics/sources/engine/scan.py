"""The scanner: one block of lines in, typed Arrow tables (one per target table) out.

For a :class:`~forensics.sources.lines.LineBatch` it runs the compiled stages (prefix, kind, the
bulk extractors) and the rare kinds' extraction (catalogue regexes, or SQL for startup lines and
JSON records over just those lines), and returns for each target table an Arrow table whose
columns are the table's, minus ``node`` and ``file_id`` (constant, added by the insert). No raw
text is kept except what a table stores by design (batch messages, other lines' redacted text);
prompt and output text never leave the scanner.

A block is scanned in two steps: :meth:`Scanner.prepare` needs the block alone (so blocks may be
prepared on several threads at once), :meth:`Scanner.finish` takes the blocks in file order with
what they carry from one to the next (dates, the last timed line, a router error's wrapped line).

Example:
    >>> import duckdb
    >>> from forensics.sources.lines import LineBatch
    >>> sc = Scanner(duckdb.connect(), tz="UTC")
    >>> out = sc.scan(LineBatch.from_bytes(b"[2026-09-02 04:51:17 TP0] Decode batch, #running-req: 3\\n"))
    >>> out.tables["engine_batches"].column("running_req").to_pylist(), dict(out.counts)
    ([3], {'batch': 1})
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from forensics.sources.engine import extract_batch as xb
from forensics.sources.engine import extract_http as xh
from forensics.sources.engine import extract_request as xr
from forensics.sources.engine.catalogue import Catalogue, Kind, catalogue
from forensics.sources.engine.classify import classify
from forensics.sources.engine.prefix import LEVELS, NO_TS, P_ENGINE, P_NONE, P_ROUTER, scan_prefixes
from forensics.sources.engine.read import Repairs, repair
from forensics.sources.engine.redact import cap_text, redact_text
from forensics.sources.engine.spans import INT_OK, int_array, parse_ints, to_strings
from forensics.sources.engine.timeinfer import (
    Carry,
    DayCarry,
    LocalToUtc,
    date_time_only,
    infer_times,
)
from forensics.sources.lines import LineBatch, read_only

_TS = pa.timestamp("us")

#: Pairs of (engine local time, collector UTC time) kept per file for the zone check.
_TZ_SAMPLES = 20_000

#: Un-prefixed kinds that are SGLang's own records (0.5.8-0.5.11 request logs, JSON request logs).
_REQUEST_KINDS = frozenset({"req_received", "req_finished", "req_json", "req_metrics", "req_openai"})


@dataclass
class Scanned:
    """What one block gave: Arrow tables by target table, line counts by kind, rejected lines."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    rejected: list[tuple[int, str, bytes]] = field(default_factory=list)
    #: (line_no, text) of the first unrecognised lines
    unrecognised: list[tuple[int, str]] = field(default_factory=list)
    #: per kind: (first line, earliest ts, latest ts) of its lines in the block (NO_TS: none timed)
    spans: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    #: lines with an engine or router prefix, and request records (what makes a file engine evidence)
    sglang_lines: int = 0
    #: (line_no, kind) of the block's last line
    last_kind: tuple[int, str] | None = None


def canonical_ranks(raw: str) -> str:
    """Rank tags as an unordered set, written in one canonical order (DP PP ATTN_CP MOE_DP TP EP).

    Example:
        >>> canonical_ranks("DP3 TP3 EP3 PP1")
        'DP3 PP1 TP3 EP3'
    """
    order = ("DP", "PP", "ATTN_CP", "MOE_DP", "TP", "EP")
    tags = raw.split()
    parsed = [re.fullmatch(r"(DP|PP|ATTN_CP|MOE_DP|TP|EP)(\d+)", t) for t in tags]
    if not all(parsed):
        return raw.strip()
    return " ".join(sorted(tags, key=lambda t: order.index(re.fullmatch(r"([A-Z_]+?)\d+", t).group(1))))  # type: ignore[union-attr]


#: engine_batches.kind by ``is_prefill`` (0, 1)
_BATCH_KINDS = pa.array(["decode", "prefill"], type=pa.string())


def _repeat(value: str, n: int) -> pa.Array:
    """A string column of one value (built by Arrow: a numpy string array took ~15x longer)."""
    return pa.repeat(pa.scalar(value, type=pa.string()), n)


def _read_only(batch: LineBatch) -> LineBatch:
    """The batch with a read-only view of its buffer (no copy).

    Blocks come writable (a plain file read into a bytearray, a repaired block) or read-only (a
    decompressed member's bytes); numba compiles each compiled stage once per flavour, so the
    first run on a machine compiled every kernel twice. The scanner never writes into the buffer.
    """
    return batch if not batch.buf.flags.writeable else dataclasses.replace(batch, buf=read_only(batch.buf))


def _ts_array(us: np.ndarray) -> pa.Array:
    return pa.array(us, type=pa.int64(), mask=us == NO_TS).cast(_TS)


def _opt_int(v: str | None) -> int | None:
    if v is None or v == "":
        return None
    try:
        x = int(v)
    except ValueError:
        return None
    return x if -(2**63) <= x < 2**63 else None


class Scanner:
    """Scans the blocks of one file in order (it carries the last prefixed line across blocks)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, *, tz: str, metrics: bool = False,
                 cat: Catalogue | None = None, to_utc: LocalToUtc | None = None) -> None:
        self.con = con
        #: the connection of :meth:`prepare`'s casts (its own cursor when blocks are prepared on
        #: other threads: a DuckDB connection serves one thread at a time)
        self.prep_con = con
        self.tz = tz
        self.metrics = metrics
        self.cat = cat or catalogue()
        self.carry = Carry()
        self.days = DayCarry()
        self.to_utc = to_utc or LocalToUtc(tz)
        #: (engine local time, collector UTC time) samples for the zone check (zones.py)
        self.tz_pairs: list[tuple[np.ndarray, np.ndarray]] = []
        #: lines with an engine local time (a router log has none: UTC by itself)
        self.local_lines = 0
        #: lines the repairs touched (invalid UTF-8)
        self.repairs = Repairs()
        self._ranks_cache: dict[str, str] = {}
        self._pd_pending: dict[str, Any] | None = None
        names = self.cat.names
        self._idx = {n: i for i, n in enumerate(names)}
        self._unrec = self._idx.get("unrecognised", -1)

    # -- per block -------------------------------------------------------------------------------

    def scan(self, batch: LineBatch, *, exact_collector: bool = True) -> Scanned:
        """Scan one block (lines in file order); ``exact_collector``: its collector times are UTC
        instants that may check the engine's zone (not zone-less syslog times)."""
        return self.finish(self.prepare(batch, exact_collector=exact_collector))

    def prepare(self, batch: LineBatch, *, exact_collector: bool = True) -> Prepared:
        """The part of :meth:`scan` that depends on the block alone: repairs, prefixes, kinds and
        the bulk kinds' columns (all but their times). It reads no state the blocks carry, so the
        blocks of a file may be prepared on several threads at once (the compiled stages release
        the GIL); :meth:`finish` must then take them in file order."""
        n = len(batch)
        prep = Prepared(batch=batch, exact_collector=exact_collector)
        if n == 0:
            return prep
        batch = prep.batch = repair(batch, prep.repairs)  # invalid UTF-8 -> U+FFFD, ANSI codes removed (counted)
        batch = prep.batch = _read_only(batch)
        pfx = prep.pfx = scan_prefixes(batch)
        if self.metrics:
            kinds = np.where(batch.ends == batch.starts, self._idx["blank"], self._idx["req_metrics"])
            kinds = kinds.astype(np.int32)
            pkind = np.full(n, P_NONE, dtype=np.int8)
            pfx_msg = batch.starts
        else:
            kinds = classify(batch, pfx, self.cat)
            pkind = pfx.kind
            pfx_msg = pfx.msg_start
        prep.kinds, prep.pkind, prep.msg = kinds, pkind, pfx_msg
        uniq, cnt = np.unique(kinds, return_counts=True)
        prep.uniq, prep.cnt = uniq.tolist(), cnt.tolist()
        prep.by_kind = {int(k): np.flatnonzero(kinds == k) for k in prep.uniq} if len(uniq) > 1 else \
            {int(uniq[0]): np.arange(n)}
        ctx = _Ctx(batch, batch.buf, pfx_msg, pkind, pfx, None, None, None, kinds)
        for k, rows in prep.by_kind.items():
            kind = self.cat.kinds[k]
            body = self._body(kind, rows, ctx)
            if body is not None:
                prep.bodies[k] = body
        return prep

    def finish(self, prep: Prepared) -> Scanned:
        """The rest of :meth:`scan`, in file order: what the blocks carry (the date reached by
        time-only lines, the zone samples, the last timed line, a router error waiting for its
        continuation), the times, the rare kinds and the tables."""
        out = Scanned()
        batch = prep.batch
        n = len(batch)
        if n == 0:
            return out
        exact_collector = prep.exact_collector
        self.repairs.bad_utf8_count += prep.repairs.bad_utf8_count
        self.repairs.bad_utf8_lines.extend(prep.repairs.bad_utf8_lines[: 5 - len(self.repairs.bad_utf8_lines)])
        buf = batch.buf
        pfx = prep.pfx
        kinds, pkind, pfx_msg = prep.kinds, prep.pkind, prep.msg
        eng = pkind == P_ENGINE
        collector = pfx.collector_us if batch.collector_us is None else np.where(
            pfx.collector_us != NO_TS, pfx.collector_us, batch.collector_us)
        ts_local = np.where(eng, pfx.ts_us, NO_TS)
        tod = eng & pfx.time_only
        if tod.any():
            # old releases printed a time of day only: its date is inferred, never invented
            ts_local = date_time_only(ts_local, tod, eng & ~pfx.time_only & (ts_local != NO_TS), collector,
                                      self.to_utc, self.days)
        local = ts_local != NO_TS
        n_local = int(np.count_nonzero(local))
        self.local_lines += n_local
        have = sum(int(p[0].size) for p in self.tz_pairs)
        if exact_collector and n_local and have < _TZ_SAMPLES:
            both = np.flatnonzero(local & ~tod & (collector != NO_TS))[: _TZ_SAMPLES - have]
            if both.size:
                self.tz_pairs.append((ts_local[both], collector[both]))
        ts_utc = self.to_utc(ts_local, collector if exact_collector else None)
        ts_utc = np.where(pkind == P_ROUTER, pfx.ts_us, ts_utc)
        ts, inferred, attached = infer_times(pkind, batch.line_no, ts_utc, collector, self.carry)
        if tod.any():
            inferred = inferred | (tod & (ts != NO_TS))
        # router PD error waiting for this block's first line
        if self._pd_pending is not None:
            self._finish_pd(out, batch, pfx_msg, kinds, pkind, 0)
        out.sglang_lines = int(np.count_nonzero(pkind != P_NONE))
        names = self.cat.names
        for k, c in zip(prep.uniq, prep.cnt, strict=True):
            out.counts[names[k] if k >= 0 else "unrecognised"] += c
        k_last = int(kinds[-1])
        out.last_kind = (int(batch.line_no[-1]), names[k_last] if k_last >= 0 else "unrecognised")
        ctx = _Ctx(batch, buf, pfx_msg, pkind, pfx, ts, inferred, attached, kinds)
        by_kind = prep.by_kind
        parts: dict[str, list[pa.Table]] = {}
        startup: list[tuple[np.ndarray, Kind]] = []
        for k, rows in by_kind.items():
            kind = self.cat.kinds[k]
            t = ts[rows]
            t = t[t != NO_TS]
            out.spans[kind.name] = (int(batch.line_no[rows[0]]), int(t.min()) if t.size else NO_TS,
                                    int(t.max()) if t.size else NO_TS)
            if kind.name in _REQUEST_KINDS:
                out.sglang_lines += int(np.count_nonzero(pkind[rows] == P_NONE))
            if kind.extractor == "startup":
                startup.append((rows, kind))  # one SQL pass for every startup kind of the block
            body = prep.bodies.get(k)
            extracted = self._extract(kind, rows, ctx, out) if body is None else \
                [(body[0], body[2]({**self._common(ctx, rows), **body[1]}, rows.shape[0]))]
            for table, t in extracted:
                parts.setdefault(table, []).append(t)
        if startup:
            parts.setdefault("engine_startup_facts", []).append(self._facts(ctx, startup))
        for table, ts_list in parts.items():
            if table in out.tables:
                ts_list.insert(0, out.tables[table])
            out.tables[table] = pa.concat_tables(ts_list, promote_options="permissive") if len(ts_list) > 1 else ts_list[0]
        if self._unrec >= 0 and self._unrec in by_kind:
            for i in by_kind[self._unrec][:5].tolist():
                out.unrecognised.append((int(batch.line_no[i]), batch.line(i).decode("utf-8", "replace")[:200]))
        return out

    # -- helpers ---------------------------------------------------------------------------------

    def _ranks(self, ctx: _Ctx, rows: np.ndarray) -> pa.Array:
        p = ctx.pfx
        s = p.rank_s[rows] + 1  # drop the space before the first tag
        e = p.rank_e[rows]
        has = e > s
        s = np.where(has, s, -1)
        arr = to_strings(ctx.buf, s, e)
        bad = has & ~p.rank_canon[rows]
        if bad.any():
            vals = arr.to_pylist()
            for i in np.flatnonzero(bad).tolist():
                raw = vals[i]
                if raw not in self._ranks_cache:
                    self._ranks_cache[raw] = canonical_ranks(raw)
                vals[i] = self._ranks_cache[raw]
            arr = pa.array(vals, type=pa.string())
        return arr

    def _common(self, ctx: _Ctx, rows: np.ndarray, *, inferred: bool = True) -> dict[str, pa.Array]:
        cols: dict[str, pa.Array] = {"ts": _ts_array(ctx.ts[rows])}
        if inferred:
            cols["ts_inferred"] = pa.array(ctx.inferred[rows])
        return cols

    def _tail(self, ctx: _Ctx, rows: np.ndarray) -> dict[str, pa.Array]:
        return {"line_no": pa.array(ctx.batch.line_no[rows]), "byte_offset": pa.array(ctx.batch.offset[rows])}

    def _msgs(self, ctx: _Ctx, rows: np.ndarray) -> list[str]:
        return [ctx.buf[ctx.msg[i] : ctx.batch.ends[i]].tobytes().decode("utf-8") for i in rows.tolist()]

    def _body(self, kind: Kind, rows: np.ndarray, ctx: _Ctx) -> _Body | None:
        """A bulk kind's columns but its times (table, columns, assembly), None for the other kinds."""
        ex = kind.extractor
        if ex == "batch":
            return "engine_batches", self._batches(ctx, rows), _plain_table
        if ex == "http":
            return "engine_http", self._http(ctx, rows), _plain_table
        if ex == "request_repr":
            return "engine_requests", self._requests(ctx, rows, kind.stored_kind == "finished"), _request_table
        if ex == "router_request":
            return "router_requests", self._router(ctx, rows), _plain_table
        return None

    def _extract(self, kind: Kind, rows: np.ndarray, ctx: _Ctx, out: Scanned) -> list[tuple[str, pa.Table]]:
        ex = kind.extractor
        if ex == "router_pd_error":
            return self._router_pd(ctx, rows, out)
        if ex == "request_json":
            return self._json_records(ctx, rows, out, metrics=False)
        if ex == "request_metrics":
            return self._json_records(ctx, rows, out, metrics=True)
        if ex == "startup":
            return [("engine_other_lines", self._other(ctx, rows, kind))]
        if kind.table == "engine_other_lines":
            return [("engine_other_lines", self._other(ctx, rows, kind))]
        return [(kind.table, self._fields(ctx, rows, kind))]

    # -- bulk kinds (compiled extractors) ----------------------------------------------------------

    def _batches(self, ctx: _Ctx, rows: np.ndarray) -> dict[str, pa.Array]:
        buf = ctx.buf
        s = ctx.msg[rows]
        e = ctx.batch.ends[rows]
        r = xb.scan_batches(buf, s, e)
        cols: dict[str, pa.Array] = {}
        cols["ranks"] = self._ranks(ctx, rows)
        cols["kind"] = _BATCH_KINDS.take(pa.array(r.is_prefill.view(np.int8)))
        cols["iter"] = pa.array(r.iter_val, mask=r.iter_state != INT_OK)
        for k, (name, slot) in enumerate(zip(("new_seq", "new_token", "cached_token", "num_token", "running_req",
                                              "queue_req"), xb.INT_KEYS, strict=True)):
            cols[name] = int_array(self.prep_con, buf, r.spans[:, slot, 0], r.spans[:, slot, 1], r.ints[k], r.states[k])
        for name, first, second in (("token_usage", xb.K_USAGE, xb.K_FULL_USAGE),
                                    ("throughput", xb.K_IN_TPUT, xb.K_GEN_TPUT)):
            use1 = r.spans[:, first, 0] >= 0
            a = np.where(use1, r.spans[:, first, 0], r.spans[:, second, 0])
            b = np.where(use1, r.spans[:, first, 1], r.spans[:, second, 1])
            cols[name] = to_strings(buf, a, b)  # cast by DuckDB (TRY_CAST ... AS DOUBLE)
        cols.update(self._tail(ctx, rows))
        cols["fields_raw"] = to_strings(buf, s, e)
        return cols

    def _http(self, ctx: _Ctx, rows: np.ndarray) -> dict[str, pa.Array]:
        buf = ctx.buf
        sp = xh.scan_http(buf, ctx.msg[rows], ctx.batch.ends[rows])
        cols: dict[str, pa.Array] = {}
        for name, f in (("client", 0), ("method", 1), ("path", 2), ("http_version", 3)):
            cols[name] = to_strings(buf, sp[:, f, 0], sp[:, f, 1])
        v, st = parse_ints(buf, sp[:, 4, 0], sp[:, 4, 1])
        cols["status"] = int_array(self.prep_con, buf, sp[:, 4, 0], sp[:, 4, 1], v, st, pa.int32())
        cols.update(self._tail(ctx, rows))
        return cols

    def _requests(self, ctx: _Ctx, rows: np.ndarray, finished: bool) -> dict[str, pa.Array]:
        buf = ctx.buf
        if ctx.specials is None:  # one bitmap for the block's Receive and Finish records
            ctx.specials = xr.specials(buf)
        r = xr.scan_requests(buf, ctx.msg[rows], ctx.batch.ends[rows], finished=finished, bm=ctx.specials)
        cols: dict[str, pa.Array] = {}
        cols["kind"] = _repeat("finished" if finished else "received", rows.shape[0])
        for name, c in (("rid", xr.C_RID), ("bootstrap_host", xr.C_HOST), ("header_request_id", xr.C_HEADER_ID),
                        ("finish_type", xr.C_FTYPE), ("finish_message", xr.C_FMSG),
                        ("e2e_latency", xr.C_E2E)):  # e2e_latency: cast by DuckDB
            cols[name] = r.texts[c]
        for k, (name, c) in enumerate(zip(_REQUEST_INTS, xr.INT_COLS, strict=True)):
            cols[name] = int_array(self.prep_con, buf, r.starts[c], r.ends[c], r.ints[k], r.states[k],
                                   _REQUEST_TYPES[name])
        cols["stream"] = pa.array(r.stream == 1, mask=r.stream < 0)
        cols.update(self._tail(ctx, rows))
        return cols

    def _router(self, ctx: _Ctx, rows: np.ndarray) -> dict[str, pa.Array]:
        buf = ctx.buf
        sp, lat, lat_ok = xh.scan_router(buf, ctx.msg[rows], ctx.batch.ends[rows])
        cols: dict[str, pa.Array] = {}
        lv = ctx.pfx.level[rows]
        cols["level"] = pa.array([LEVELS[x - 1] if x > 0 else None for x in lv.tolist()], type=pa.string())
        cols["request_id"] = to_strings(buf, sp[:, xh.R_REQUEST_ID, 0], sp[:, xh.R_REQUEST_ID, 1])
        cols["method"] = to_strings(buf, sp[:, xh.R_METHOD, 0], sp[:, xh.R_METHOD, 1])
        cols["uri"] = to_strings(buf, sp[:, xh.R_URI, 0], sp[:, xh.R_URI, 1])
        v, st = parse_ints(buf, sp[:, xh.R_STATUS, 0], sp[:, xh.R_STATUS, 1])
        cols["status"] = int_array(self.prep_con, buf, sp[:, xh.R_STATUS, 0], sp[:, xh.R_STATUS, 1], v, st,
                                   pa.int32())
        cols["latency_us"] = pa.array(lat, mask=~lat_ok)
        cols["target"] = to_strings(buf, sp[:, xh.R_TARGET, 0], sp[:, xh.R_TARGET, 1])
        cols["message"] = cap_text(to_strings(buf, sp[:, xh.R_MESSAGE, 0], sp[:, xh.R_MESSAGE, 1]))
        cols.update(self._tail(ctx, rows))
        return cols

    # -- rare kinds ---------------------------------------------------------------------------------

    def _fields(self, ctx: _Ctx, rows: np.ndarray, kind: Kind) -> pa.Table:
        """Columns of a rare kind from the catalogue's field rules (Python ``re``, ASCII)."""
        msgs = self._msgs(ctx, rows)
        if kind.head:
            head = re.compile(kind.head, re.ASCII)
            hay = [(m.group(1) if (m := head.search(x)) else "") for x in msgs]
        else:
            hay = msgs
        cols = self._common(ctx, rows)
        table = kind.table
        if table in ("engine_rejections", "engine_events"):
            cols["ranks"] = self._ranks(ctx, rows)
        if kind.stored_kind is not None:
            cols["kind"] = _repeat(kind.stored_kind, len(msgs))
        for f in kind.fields:
            if f.source == "message":
                cols[f.name] = cap_text(pa.array(msgs, type=pa.string()))
                continue
            vals: list[Any] = []
            pats = [re.compile(p, re.ASCII) for p in f.regex]
            for x in hay:
                v: str | None = None
                for p in pats:
                    m = p.search(x)
                    if m and m.group(1):
                        v = m.group(1)
                        break
                if v is not None and f.strip:
                    v = v.strip(f.strip)
                vals.append(v or None)
            if f.type == "BIGINT":
                cols[f.name] = pa.array([_opt_int(v) for v in vals], type=pa.int64())
            elif f.type == "INTEGER":
                cols[f.name] = pa.array([x if (x := _opt_int(v)) is not None and -(2**31) <= x < 2**31 else None
                                         for v in vals], type=pa.int32())
            else:
                cols[f.name] = pa.array(vals, type=pa.string())
        cols.update(self._tail(ctx, rows))
        if table == "engine_requests":
            return _request_table(cols, len(msgs))
        if table == "engine_events":
            cols.setdefault("status", pa.nulls(len(msgs), pa.int32()))
        return pa.table(cols)

    def _other(self, ctx: _Ctx, rows: np.ndarray, kind: Kind) -> pa.Table:
        buf = ctx.buf
        b = ctx.batch
        cols = self._common(ctx, rows)
        cols["kind"] = _repeat(kind.stored_kind or kind.name, rows.shape[0])
        att = ctx.attached[rows]
        cols["attached_to_line"] = pa.array(att, mask=att < 0)
        pre = to_strings(buf, b.starts[rows], ctx.msg[rows])
        msg = to_strings(buf, ctx.msg[rows], b.ends[rows])
        if kind.name == "req_openai":
            head = pc.extract_regex(msg, r"^(?P<h>[^{(]*)").field("h")
            text = pc.binary_join_element_wise(pre, head, pa.scalar("<redacted>"), "")
        else:
            text = pc.binary_join_element_wise(pre, redact_text(pc.utf8_slice_codeunits(msg, 0, 4096)), "")
        cols["text"] = cap_text(text)
        cols.update(self._tail(ctx, rows))
        return pa.table(cols)

    def _facts(self, ctx: _Ctx, groups: list[tuple[np.ndarray, Kind]]) -> pa.Table:
        """Startup facts of every startup kind of the block, in one SQL pass over just those lines."""
        from forensics.sources.engine.sql import FACTS

        rows = np.concatenate([r for r, _ in groups])
        facts = [k.fact for r, k in groups for _ in range(r.shape[0])]
        stage = pa.table({
            "line_no": pa.array(ctx.batch.line_no[rows]), "byte_offset": pa.array(ctx.batch.offset[rows]),
            "ts": _ts_array(ctx.ts[rows]), "ts_inferred": pa.array(ctx.inferred[rows]),
            "ranks": self._ranks(ctx, rows), "fact": pa.array(facts, type=pa.string()),
            "msg": to_strings(ctx.buf, ctx.msg[rows], ctx.batch.ends[rows]),
        })
        return self._sql(FACTS, stage)

    def _sql(self, sql: str, stage: pa.Table, params: dict[str, Any] | None = None) -> pa.Table:
        """Run one of the rare kinds' SQL extractions over just those lines (an Arrow view)."""
        self.con.register("_engine_stage", stage)
        try:
            return self.con.sql(sql, params=params or {}).to_arrow_table()
        finally:
            self.con.unregister("_engine_stage")

    def _json_records(self, ctx: _Ctx, rows: np.ndarray, out: Scanned, *, metrics: bool) -> list[tuple[str, pa.Table]]:
        from forensics.sources.engine.sql import REQ_JSON, REQ_METRICS
        from forensics.sources.redact import redact_raw

        stage = pa.table({
            "line_no": pa.array(ctx.batch.line_no[rows]), "byte_offset": pa.array(ctx.batch.offset[rows]),
            "ts": _ts_array(ctx.ts[rows]), "ts_inferred": pa.array(ctx.inferred[rows]),
            "msg": to_strings(ctx.buf, ctx.msg[rows], ctx.batch.ends[rows]),
        })
        params = {"tz": self.tz, "file_hour": self.file_hour} if metrics else {"tz": self.tz}
        t = self._sql(REQ_METRICS if metrics else REQ_JSON, stage, params)
        valid = t.column("_valid").to_numpy(zero_copy_only=False)
        bad = np.flatnonzero(~valid)
        for i in bad.tolist():
            raw = ctx.batch.line(int(rows[i]))
            out.rejected.append((int(ctx.batch.line_no[rows[i]]), "invalid JSON request record", redact_raw(raw)))
        t = t.filter(pa.array(valid)).drop_columns(["_valid"])
        return [("engine_requests", t)]

    file_hour: Any = None

    def _router_pd(self, ctx: _Ctx, rows: np.ndarray, out: Scanned) -> list[tuple[str, pa.Table]]:
        """Router PD errors; a message wrapped onto the next (unprefixed) line is joined to it."""
        b = ctx.batch
        recs = []
        n = len(b)
        for i in rows.tolist():
            rec = {"i": i, "msg": b.buf[ctx.msg[i] : b.ends[i]].tobytes().decode("utf-8"),
                   "ts": int(ctx.ts[i]), "inferred": bool(ctx.inferred[i]), "line_no": int(b.line_no[i]),
                   "byte_offset": int(b.offset[i])}
            if i + 1 < n:
                rec["next"] = self._continuation(ctx.buf, ctx.msg, ctx.pkind, ctx.kinds, b, i + 1)
                recs.append(rec)
            else:
                self._pd_pending = rec
        if not recs:
            return []
        return [("engine_events", _pd_table(recs))]

    def _continuation(self, buf: np.ndarray, msg: np.ndarray, pkind: np.ndarray, kinds: np.ndarray,
                      b: LineBatch, j: int) -> str | None:
        if pkind[j] != P_NONE:
            return None
        name = self.cat.names[int(kinds[j])] if kinds[j] >= 0 else "unrecognised"
        if name not in ("unrecognised", "traceback", "blank"):
            return None
        text = buf[msg[j] : b.ends[j]].tobytes().decode("utf-8")
        return text or None

    def _finish_pd(self, out: Scanned, b: LineBatch, msg: np.ndarray, kinds: np.ndarray, pkind: np.ndarray,
                   j: int) -> None:
        rec = self._pd_pending
        assert rec is not None
        self._pd_pending = None
        rec["next"] = self._continuation(b.buf, msg, pkind, kinds, b, j) if len(b) else None
        t = _pd_table([rec])
        out.tables["engine_events"] = pa.concat_tables([out.tables["engine_events"], t], promote_options="permissive") \
            if "engine_events" in out.tables else t

    def flush(self) -> Scanned:
        """What is still held at the end of the file (a router error on the last line)."""
        out = Scanned()
        if self._pd_pending is not None:
            rec = self._pd_pending
            self._pd_pending = None
            rec["next"] = None
            out.tables["engine_events"] = _pd_table([rec])
        return out


@dataclass
class _Ctx:
    batch: LineBatch
    buf: np.ndarray
    msg: np.ndarray
    pkind: np.ndarray
    pfx: Any
    #: the times (None while a block is prepared: only :meth:`Scanner.finish` has them)
    ts: Any
    inferred: Any
    attached: Any
    kinds: np.ndarray
    #: ``extract_request.specials`` of the buffer, made by the first request kind that needs it
    specials: Any = None


#: A bulk kind's prepared part: its table, its columns but the times, and how they are assembled.
_Body = tuple[str, dict[str, pa.Array], Callable[[dict[str, pa.Array], int], pa.Table]]


def _plain_table(cols: dict[str, pa.Array], n: int) -> pa.Table:
    return pa.table(cols)


@dataclass
class Prepared:
    """A block after :meth:`Scanner.prepare`: what its lines are, before what the blocks carry."""

    batch: LineBatch
    exact_collector: bool = True
    repairs: Repairs = field(default_factory=Repairs)
    pfx: Any = None
    kinds: Any = None
    pkind: Any = None
    msg: Any = None
    uniq: list[int] = field(default_factory=list)
    cnt: list[int] = field(default_factory=list)
    by_kind: dict[int, np.ndarray] = field(default_factory=dict)
    #: the bulk kinds' columns (by kind index)
    bodies: dict[int, _Body] = field(default_factory=dict)


_REQUEST_COLS = ("ts", "ts_inferred", "kind", "rid", "bootstrap_host", "bootstrap_port", "bootstrap_room", "stream",
                 "header_request_id", "prompt_tokens", "completion_tokens", "cached_tokens", "finish_type",
                 "finish_length", "finish_status_code", "finish_message", "e2e_latency", "input_len", "output_len",
                 "stats_type", "line_no", "byte_offset")
_REQUEST_TYPES = {"bootstrap_port": pa.int32(), "bootstrap_room": pa.int64(), "stream": pa.bool_(),
                  "prompt_tokens": pa.int64(), "completion_tokens": pa.int64(), "cached_tokens": pa.int64(),
                  "finish_length": pa.int64(), "finish_status_code": pa.int32(), "input_len": pa.int64(),
                  "output_len": pa.int64(), "ts": _TS, "ts_inferred": pa.bool_(), "line_no": pa.int64(),
                  "byte_offset": pa.int64()}


#: engine_requests' integer columns, in the order of ``extract_request.INT_COLS``
_REQUEST_INTS = ("bootstrap_port", "bootstrap_room", "prompt_tokens", "completion_tokens", "cached_tokens",
                 "finish_length", "finish_status_code")


def _request_table(cols: dict[str, pa.Array], n: int) -> pa.Table:
    """engine_requests columns in table order (missing ones NULL); e2e_latency stays text."""
    out = {}
    for c in _REQUEST_COLS:
        out[c] = cols[c] if c in cols else pa.nulls(n, _REQUEST_TYPES.get(c, pa.string()))
    return pa.table(out)


_PD_RID = re.compile(r'request_id=("[^"]*"|\S+)', re.ASCII)
_PD_ROOM = re.compile(r"bootstrap_room[=: ]+(\d+)", re.ASCII)
_PD_STATUS = re.compile(r"\bstatus[=: ]+(\d{3})\b", re.ASCII)


def _pd_table(recs: list[dict[str, Any]]) -> pa.Table:
    rid, room, status, message = [], [], [], []
    for r in recs:
        m = _PD_RID.search(r["msg"])
        rid.append((m.group(1).strip('"') or None) if m else None)
        m = _PD_ROOM.search(r["msg"])
        room.append(_opt_int(m.group(1)) if m else None)
        both = r["msg"] + " " + (r["next"] or "")
        m = _PD_STATUS.search(both)
        status.append(_opt_int(m.group(1)) if m else None)
        message.append(r["msg"] + (" " + r["next"] if r["next"] is not None else ""))
    n = len(recs)
    ts = np.array([r["ts"] for r in recs], dtype=np.int64)
    return pa.table({
        "ts": _ts_array(ts), "ts_inferred": pa.array([r["inferred"] for r in recs], type=pa.bool_()),
        "ranks": pa.nulls(n, pa.string()),
        "kind": pa.array(["router_pd_error"] * n), "rid": pa.array(rid, type=pa.string()),
        "bootstrap_room": pa.array(room, type=pa.int64()), "status": pa.array(status, type=pa.int32()),
        "message": cap_text(pa.array(message, type=pa.string())),
        "line_no": pa.array([r["line_no"] for r in recs], type=pa.int64()),
        "byte_offset": pa.array([r["byte_offset"] for r in recs], type=pa.int64()),
    })


@dataclass(frozen=True)
class Probe:
    """What the scanner makes of one line: its kind, the table it lands in and the row's values."""

    kind: str
    table: str | None
    row: dict[str, Any]


def probe(line: str, *, tz: str = "UTC") -> Probe:
    """Scan one line on its own and show the row it gives (the catalogue's samples are checked so).

    Example:
        >>> p = probe('[2025-09-01 08:01:06] INFO:     10.0.3.7:41698 - "POST /generate HTTP/1.1" 200 OK')
        >>> p.kind, p.table, p.row["status"], p.row["path"]
        ('http', 'engine_http', 200, '/generate')
    """
    from forensics.sources.engine.sql import MACROS

    con = duckdb.connect()
    con.execute(MACROS)
    sc = Scanner(con, tz=tz)
    out = sc.scan(LineBatch.from_bytes(line.encode("utf-8")))
    out.tables.update({k: pa.concat_tables([out.tables[k], v]) if k in out.tables else v
                       for k, v in sc.flush().tables.items()})
    (kind,) = out.counts
    rows = {t: tb.to_pylist()[0] for t, tb in out.tables.items() if tb.num_rows}
    table: str | None = "engine_startup_facts" if "engine_startup_facts" in rows else next(iter(rows), None)
    row = dict(rows.get(table, {})) if table else {}
    for c in ("token_usage", "throughput", "e2e_latency"):
        if isinstance(row.get(c), str):
            row[c] = con.execute("SELECT TRY_CAST($v AS DOUBLE)", {"v": row[c]}).fetchone()[0]  # type: ignore[index]
    return Probe(kind=kind, table=table, row=row)
