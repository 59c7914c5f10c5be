"""Wrappers whose records are JSON: Docker json-file, journald, Loki, Elasticsearch, CloudWatch, GCP, Datadog.

Each format is declared as data (:class:`RecordFormat`): where the line's text is, where its
time is and in which unit, where the pod, host and stream are, and where the records live
(one per line, or the elements of an array in a document). One implementation reads them all:
records located (a line each, or :class:`~.jsondoc.DocScanner` for documents), their fields
parsed by pyarrow's JSON reader in one call per batch with an explicit schema of just those
fields; a batch pyarrow refuses (a type that changes, a broken record) is split in halves until
the bad records are found, and only those go through Python's ``json`` (a broken one is
rejected with the parser's message).

Example:
    >>> phys = LineBatch.from_bytes(b'{"log":"a\\\\n","stream":"stderr","time":"2026-08-27T03:10:00Z"}\\n')
    >>> out, used = RecordWrapper.for_format("docker-json", Path("x-json.log"), {}).strip(phys, final=True)
    >>> out.line(0), int(out.collector_us[0]), out.stream.tolist()
    (b'a', 1787800200000000, [2])
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from forensics.sources.collect.arrow_fields import (
    binary_parts,
    first_value,
    get_path,
    json_lines,
    pod_of_stream,
    retype,
    stream_codes,
    tag_value,
    with_list,
)
from forensics.sources.collect.fieldscan import (
    HOST,
    MSG,
    POD,
    TAG,
    TIME,
    UNIT,
    FieldSpec,
    gather_strings,
    scan_fields,
)
from forensics.sources.collect.jsondoc import DocScanner
from forensics.sources.collect.record_formats import FORMATS, RecordFormat, schema_of, split_path
from forensics.sources.collect.timestamps import parse_rfc3339
from forensics.sources.collect.wrappers import Wrapper, assemble
from forensics.sources.lines import NO_TIME, LineBatch


class RecordWrapper(Wrapper):
    """A JSON record wrapper driven by a :class:`RecordFormat`."""

    name: ClassVar[str] = "json"
    #: read the records a compiled pass can read exactly with it (False: every record by the
    #: JSON reader; the tests compare the two)
    fast_fields: ClassVar[bool] = True

    def __init__(self, path: Path, context: dict[str, object], fmt: RecordFormat) -> None:
        super().__init__(path, context)
        self.fmt = fmt
        self.scanner = DocScanner(fmt.array_path) if fmt.array_path is not None else None
        self._typed: dict[str, pa.DataType] = {}
        self._spec: FieldSpec | None = None
        self._fallback_note = False
        self._inner_checked = False
        self._inner_join_note = False
        self.inner: Wrapper | None = None

    @classmethod
    def for_format(cls, name: str, path: Path, context: dict[str, object]) -> RecordWrapper:
        """The wrapper of format ``name`` (a key of :data:`FORMATS`)."""
        fmt = FORMATS[name]
        sub = type(f"RecordWrapper_{name}", (cls,), {"name": name, "source": fmt.source})
        return sub(path, context, fmt)  # type: ignore[no-any-return]

    # -- locating records -------------------------------------------------------------------------

    def strip(self, phys: LineBatch, *, final: bool) -> tuple[LineBatch, int]:
        n = len(phys)
        if n == 0:
            z = np.zeros(0, dtype=np.int64)
            return assemble(phys, self, first=z, starts=z, ends=z, used=phys.phys_lines), phys.phys_lines
        out, used = self._lines(phys, final) if self.scanner is None else self._document(phys, final)
        if not self._inner_checked and len(out):
            self._find_inner(out)
        if self.inner is None or not len(out):
            return out, used
        # a document's scanner has moved on: its records cannot be handed back (inner partial
        # lines are joined within the batch only)
        res, done = self._unwrap_inner(out, final or self.scanner is not None)
        if done == len(out):
            return res, used
        # an inner line continues in the next batch: hand back from the record it starts in
        cut = int(out.line_no[done]) - int(phys.line_no[0])
        if cut <= 0:
            z = np.zeros(0, dtype=np.int64)
            return assemble(_slice_lines(phys, 0), self, first=z, starts=z, ends=z, used=0), 0
        head = _slice_lines(phys, cut)
        out2, _ = self._lines(head, True)
        res2, _ = self._unwrap_inner(out2, True)
        return replace(res2, next_line=int(phys.line_no[cut]), next_offset=int(phys.offset[cut])), cut

    # -- a wrapper inside the record (a shipper that kept the runtime's line as it was) ---------------

    def _find_inner(self, out: LineBatch) -> None:
        """A second wrapper in the records' text: Fluent Bit without the CRI parser keeps raw CRI
        lines in ``log``; Container Insights puts Fluent Bit's JSON record in a CloudWatch message."""
        from forensics.sources.collect.detect import detect_wrapper, make_wrapper

        self._inner_checked = True
        k = min(len(out), 200)
        head = b"\n".join(out.line(i) for i in range(k)) + b"\n"
        found = detect_wrapper(head)
        if found.name in ("cri", "docker-json", "shipper-ndjson", "kubectl") and found.name != self.fmt.name:
            self.inner = make_wrapper(found.name, self.path, self.context)
            self.warnings.append(f"the {self.fmt.name} records hold {found.name} lines ({found.note}): unwrapped too")

    def _unwrap_inner(self, out: LineBatch, final: bool) -> tuple[LineBatch, int]:
        """Strip the inner wrapper; line numbers, offsets and physical-line counts stay the outer ones.

        Returns the batch and how many of ``out``'s lines it covers (fewer when an inner partial
        line continues past them and ``final`` is false).
        """
        assert self.inner is not None
        n = len(out)
        pos = np.arange(n, dtype=np.int64)
        inner_in = replace(out, line_no=pos, offset=pos, phys_lines=n, n_phys=None, rejected=(), framing=0,
                           sub=None, next_line=n, next_offset=n)
        res, done = self.inner.strip(inner_in, final=final)
        if done < n:
            return res, done
        outer_n = np.ones(n, dtype=np.int64) if out.n_phys is None else out.n_phys.astype(np.int64)
        joined_inner = res.n_phys is not None and bool((res.n_phys > 1).any())
        if joined_inner and bool((outer_n > 1).any()):
            if not self._inner_join_note:
                self._inner_join_note = True
                self.warnings.append(f"{self.inner.name} partial lines inside multi-line {self.fmt.name} records "
                                     "were not joined (left as they are)")
            return out, n
        p = res.line_no.astype(np.int64)
        n_phys = outer_n[p] if res.n_phys is None else (res.n_phys.astype(np.int64) if joined_inner else outer_n[p])
        coll = out.collector_us[p] if out.collector_us is not None else None
        if res.collector_us is not None:
            coll = res.collector_us if coll is None else np.where(res.collector_us != NO_TIME, res.collector_us, coll)
        pod = out.pod.take(pa.array(p)) if out.pod is not None else None
        if res.pod is not None:
            inner_pod = res.pod.cast(pa.string())
            pod = inner_pod if pod is None else pc.coalesce(inner_pod, pod.cast(pa.string()))
        node = out.node.take(pa.array(p)) if out.node is not None and res.pod is None else None
        stream = res.stream if res.stream is not None else (out.stream[p] if out.stream is not None else None)
        rej = tuple((int(out.line_no[ln]), why, raw) for ln, why, raw in res.rejected)
        # the other physical lines of an outer record the inner wrapper rejected are its framing
        rej_pos = np.array([ln for ln, _, _ in res.rejected], dtype=np.int64)
        extra_framing = int((outer_n[rej_pos] - 1).sum()) if rej_pos.size else 0
        return replace(
            res, line_no=out.line_no[p], offset=out.offset[p], n_phys=n_phys.astype(np.int32),
            collector_us=coll, stream=stream, pod=None if pod is None else pod.dictionary_encode(),
            node=None if node is None else node, sub=None if out.sub is None else out.sub[p],
            rejected=out.rejected + rej, framing=out.framing + extra_framing, phys_lines=out.phys_lines,
            wrapper=f"{self.fmt.name}+{self.inner.name}", collector_exact=out.collector_exact,
            next_line=out.next_line, next_offset=out.next_offset,
        ), n

    def _lines(self, phys: LineBatch, final: bool) -> tuple[LineBatch, int]:
        s, e = phys.starts, phys.ends
        blank = (e == s) | _blank(phys)
        rec = np.flatnonzero(~blank)
        return self._emit(phys, rec, s[rec], e[rec], rec, rec, phys.phys_lines, final,
                          framing_lines=np.flatnonzero(blank))

    def _document(self, phys: LineBatch, final: bool) -> tuple[LineBatch, int]:
        assert self.scanner is not None
        found = self.scanner.scan(phys.buf, phys.starts, final=final)
        used = found.used
        bad_lines = np.zeros(0, dtype=np.int64)
        if found.bad_from is not None:
            bad_lines = np.arange(found.bad_from, phys.phys_lines, dtype=np.int64)
        covered = np.zeros(phys.phys_lines, dtype=bool)
        if found.first_line.size:
            edge = np.zeros(phys.phys_lines + 1, dtype=np.int64)
            np.add.at(edge, found.first_line, 1)
            np.add.at(edge, found.last_line + 1, -1)
            covered = np.cumsum(edge[:-1]) > 0
        framing = np.flatnonzero(~covered[:used])
        framing = np.setdiff1d(framing, bad_lines, assume_unique=True)
        return self._emit(phys, found.first_line, found.starts, found.ends, found.first_line, found.last_line,
                          used, final, framing_lines=framing, bad_lines=bad_lines[bad_lines < used])

    # -- fields -----------------------------------------------------------------------------------

    def _emit(self, phys: LineBatch, rec_line: np.ndarray, r_start: np.ndarray, r_end: np.ndarray,
              first_line: np.ndarray, last_line: np.ndarray, used: int, final: bool, *,
              framing_lines: np.ndarray, bad_lines: np.ndarray | None = None) -> tuple[LineBatch, int]:
        fmt = self.fmt
        f = self._fields(phys, r_start, r_end)
        bad_rec, reasons, no_msg, idx = f.bad_rec, f.reasons, f.no_msg, f.idx
        times, stream, pod, host = f.times, f.stream, f.pod, f.host
        # logical lines: strip the trailing newline; split text holding several lines
        data, starts, ends = f.data, f.starts, f.ends
        nl_end = (ends > starts) & (data[np.maximum(ends - 1, 0)] == 10) if data.size else np.zeros(len(starts), bool)
        ends = ends - nl_end
        if f.nl is not None:
            nl_end = nl_end | f.nl
        cr_end = (ends > starts) & (data[np.maximum(ends - 1, 0)] == 13) if data.size else np.zeros(len(starts), bool)
        ends = ends - cr_end
        n_rec = int(idx.size)
        rec_of = np.arange(n_rec, dtype=np.int64)
        n_phys_rec = (last_line[idx] - first_line[idx] + 1).astype(np.int64)
        # lines shared with the previous record count once, for the earlier one
        if n_rec > 1:
            prev_last = np.r_[-1, last_line[idx][:-1]]
            shared = first_line[idx] <= prev_last
            n_phys_rec = n_phys_rec - shared
        join_order = None
        if fmt.join_partial and n_rec:
            grp, keep_open = self._partial_groups(nl_end, stream, final)
            if keep_open is not None:
                # the last records of a stream continue in the next batch: hand them back
                cut_line = int(rec_line[idx][keep_open])
                return self._emit_cut(phys, cut_line, final)
            if bool((grp != np.arange(n_rec)).any()):
                # members of one line together (streams interleave), lines by their first record
                join_order = np.lexsort((np.arange(n_rec), grp))
                rec_of = grp[join_order]
                starts, ends = starts[join_order], ends[join_order]
        # moby splits Docker records at newlines: only other records can hold several lines
        may_split = n_rec and not fmt.join_partial and (f.inner_nl is None or bool(f.inner_nl.any()))
        split = _split_inner(data, starts, ends, rec_of) if may_split else None
        sub = None
        if split is not None:
            starts, ends, rec_of, sub = split
        new_buf = data
        if join_order is not None:
            from forensics.sources.collect.wrappers import join_groups

            new_buf, starts, ends = join_groups(data, starts, ends, rec_of)
            pos = np.flatnonzero(np.r_[True, rec_of[1:] != rec_of[:-1]])
            firsts = rec_of[pos]  # a line's key is its first record
            sizes = np.add.reduceat(n_phys_rec[join_order], pos)
            first_phys = rec_line[idx][firsts]
            coll, strm, pods, hosts = times[firsts], stream[firsts], pod.take(pa.array(firsts)), host.take(pa.array(firsts))
            n_phys_out = sizes
        elif sub is not None:
            first_phys = rec_line[idx][rec_of]
            coll, strm = times[rec_of], stream[rec_of]
            pods, hosts = pod.take(pa.array(rec_of)), host.take(pa.array(rec_of))
            n_phys_out = np.where(sub == 0, n_phys_rec[rec_of], 0)
        else:
            first_phys = rec_line[idx]
            coll, strm, pods, hosts = times, stream, pod, host
            n_phys_out = n_phys_rec
        rej_lines = [int(rec_line[i]) for i in bad_rec.tolist()] + [int(rec_line[i]) for i in no_msg.tolist()]
        missing = ("journald left MESSAGE out (null: over journalctl's field size limit; export with "
                   "`journalctl --all -o json`)" if fmt.bytes_message
                   else f"{fmt.name} record without a text field ({', '.join(fmt.message)})")
        rej_why = list(reasons) + [missing] * int(no_msg.size)
        if bad_lines is not None and bad_lines.size:
            rej_lines += bad_lines.tolist()
            rej_why += ["not valid JSON (an unterminated string)"] * int(bad_lines.size)
        order = np.argsort(np.array(rej_lines, dtype=np.int64), kind="stable") if rej_lines else np.zeros(0, np.int64)
        rej_idx = np.array(rej_lines, dtype=np.int64)[order]
        rej_reasons = [rej_why[i] for i in order.tolist()]
        # lines of rejected multi-line records beyond their first are framing of that record
        extra_framing = _lines_of(first_line, last_line, np.r_[bad_rec, no_msg].astype(np.int64))
        has_pod = pods.null_count < len(pods)
        out = assemble(
            phys, self, first=first_phys, starts=starts, ends=ends, used=used, buf=new_buf,
            n_phys=n_phys_out, collector_us=coll, stream=strm if fmt.stream or fmt.join_partial else None,
            pod=pods if has_pod else None, rejected_idx=rej_idx, reasons=rej_reasons,
        )
        if fmt.host_unit and hosts.null_count < len(hosts):
            out = replace(out, pod=pods.dictionary_encode(), node=hosts.dictionary_encode())
        elif not has_pod and hosts.null_count < len(hosts):
            out = replace(out, pod=hosts.dictionary_encode(), node=hosts.dictionary_encode())
        framing = int(np.setdiff1d(np.r_[framing_lines, extra_framing], rej_idx).size)
        if sub is not None:
            out = replace(out, sub=sub)
        return replace(out, framing=framing), used

    def _fields(self, phys: LineBatch, r_start: np.ndarray, r_end: np.ndarray) -> _Fields:
        """Text, time, stream, pod and host of every readable record; the others with their reason.

        Records the compiled passes can read exactly (Docker's fixed shape, or the format's key
        tree: :mod:`.fieldscan`) are read by them; the rest by the JSON reader (:meth:`_parse`).
        """
        n = int(r_start.size)
        fast = self._fast(phys.buf, r_start, r_end) if n and self.fast_fields else None
        slow = np.arange(n, dtype=np.int64) if fast is None else np.flatnonzero(~fast.ok)
        if fast is not None and not slow.size:
            idx = np.arange(n, dtype=np.int64)
            nulls = pa.nulls(n, pa.large_string())
            return _Fields(np.zeros(0, np.int64), [], np.zeros(0, np.int64), idx, fast.data, fast.starts, fast.ends,
                           fast.us, fast.stream, nulls if fast.pod is None else fast.pod,
                           nulls if fast.host is None else fast.host, fast.nl, fast.inner_nl)
        whole = self.scanner is None and fast is None
        cols, bad_sub, reasons = self._parse(phys.buf, r_start[slow], r_end[slow], whole_batch=whole)
        bad_rec = slow[bad_sub]
        good = np.zeros(n, dtype=bool)
        good[slow] = True
        good[bad_rec] = False
        msg = cols["message"]
        # A record without text (or of another shape) is not a line of the program: rejected.
        has_msg_slow = msg.is_valid().to_numpy(zero_copy_only=False) if len(msg) else np.zeros(0, bool)
        has_msg = np.zeros(n, dtype=bool)
        has_msg[slow] = has_msg_slow
        no_msg = np.flatnonzero(good & ~has_msg)
        good &= has_msg
        take = pa.array(np.flatnonzero(good[slow]))
        s_idx = np.flatnonzero(good)
        text = msg.take(take).cast(pa.large_binary())
        s_data, s_off = binary_parts(text)
        s_times = self._times(cols["time"].take(take))
        s_stream = stream_codes(cols["stream"].take(take))
        pod = cols["pod"].take(take)
        host = cols["host"].take(take)
        if fast is None:
            return _Fields(bad_rec, reasons, no_msg, s_idx, s_data, s_off[:-1].copy(), s_off[1:].copy(),
                           s_times, s_stream, pod, host)
        # both: one buffer, records in order (the fast ones point into the batch's own bytes)
        base = int(fast.data.size)
        data = np.concatenate([fast.data, s_data])
        f_idx = np.flatnonzero(fast.ok)
        idx = np.sort(np.r_[f_idx, s_idx])
        pos_f = np.searchsorted(idx, f_idx)
        pos_s = np.searchsorted(idx, s_idx)
        m = idx.size
        starts = np.empty(m, dtype=np.int64)
        ends = np.empty(m, dtype=np.int64)
        us = np.empty(m, dtype=np.int64)
        strm = np.empty(m, dtype=np.int8)
        starts[pos_f], ends[pos_f] = fast.starts[f_idx], fast.ends[f_idx]
        starts[pos_s], ends[pos_s] = s_off[:-1] + base, s_off[1:] + base
        us[pos_f], us[pos_s] = fast.us[f_idx], s_times
        strm[pos_f], strm[pos_s] = fast.stream[f_idx], s_stream
        nl = np.zeros(m, dtype=bool)
        if fast.nl is not None:
            nl[pos_f] = fast.nl[f_idx]
        # pod and host: the fast records' values, then the others', put in record order
        inv = np.empty(m, dtype=np.int64)
        inv[pos_f] = np.arange(f_idx.size)
        inv[pos_s] = f_idx.size + np.arange(s_idx.size)
        order = pa.array(inv)

        def merged(f_col: pa.Array | None, s_col: pa.Array) -> pa.Array:
            head = pa.nulls(f_idx.size, pa.large_string()) if f_col is None else f_col.take(pa.array(f_idx))
            return pa.concat_arrays([head.cast(pa.large_string()), s_col.cast(pa.large_string())]).take(order)

        inner = None
        if fast.inner_nl is not None:
            inner = np.ones(m, dtype=bool)
            inner[pos_f] = fast.inner_nl[f_idx]
        return _Fields(bad_rec, reasons, no_msg, idx, data, starts, ends, us, strm, merged(fast.pod, pod),
                       merged(fast.host, host), nl, inner)

    def _fast(self, buf: np.ndarray, r_start: np.ndarray, r_end: np.ndarray) -> _Fast | None:
        """The records a compiled pass reads exactly (``ok``), or None when the format has none."""
        if self.fmt.name == "docker-json":
            return _docker_fast(buf, r_start, r_end)
        if self.fmt.time_unit not in ("rfc3339", "epoch_us"):
            return None  # epoch numbers (CloudWatch): the JSON reader
        if self._spec is None:
            self._spec = FieldSpec.of(self.fmt)
        return _spec_fast(self.fmt, self._spec, buf, r_start, r_end)

    def _emit_cut(self, phys: LineBatch, cut_line: int, final: bool) -> tuple[LineBatch, int]:
        head = _slice_lines(phys, cut_line)
        if cut_line == 0:
            z = np.zeros(0, dtype=np.int64)
            return assemble(head, self, first=z, starts=z, ends=z, used=0), 0
        out, _ = self.strip(head, final=True)
        return replace(out, next_line=int(phys.line_no[cut_line]), next_offset=int(phys.offset[cut_line])), cut_line

    def _partial_groups(self, nl_end: np.ndarray, stream: np.ndarray, final: bool) -> tuple[np.ndarray, int | None]:
        """Docker json-file: records without a final newline continue in the next record of their stream."""
        n = int(nl_end.size)
        grp = np.arange(n, dtype=np.int64)
        open_first: list[int] = []
        for code in np.unique(stream).tolist():
            sel = np.flatnonzero(stream == code)
            part = ~nl_end[sel]
            starts_group = np.r_[True, ~part[:-1]]
            firsts = sel[starts_group]
            grp[sel] = firsts[np.cumsum(starts_group) - 1]
            if part[-1] and not final:
                open_first.append(int(firsts[-1]))
        if open_first:
            cut = min(open_first)
            while True:
                late = grp[(np.arange(n) >= cut) & (grp < cut)]
                if not late.size:
                    break
                cut = int(late.min())
            return grp, cut
        return grp, None

    def _parse(self, buf: np.ndarray, r_start: np.ndarray, r_end: np.ndarray,
               whole_batch: bool = False) -> tuple[dict[str, pa.Array], np.ndarray, list[str]]:
        """The fields of every record: message, time, pod, host, stream (Arrow arrays, null if absent).

        ``whole_batch``: the records are every non-blank line of ``buf`` (NDJSON), which the JSON
        reader then reads in place.
        """
        n = int(r_start.size)
        bad: list[int] = []
        reasons: list[str] = []
        pieces: list[tuple[int, dict[str, pa.Array]]] = []

        def run(lo: int, hi: int) -> None:
            if lo >= hi:
                return
            got = self._arrow(buf, r_start[lo:hi], r_end[lo:hi], whole=(lo, hi) == (0, n) and whole_batch)
            if got is not None:
                pieces.append((lo, got))
                return
            if hi - lo > 16:
                mid = (lo + hi) // 2
                run(lo, mid)
                run(mid, hi)
                return
            if not self._fallback_note:
                self._fallback_note = True
            rows: list[dict[str, Any] | None] = []
            for i in range(lo, hi):
                raw = buf[int(r_start[i]) : int(r_end[i])].tobytes()
                try:
                    rec = json.loads(raw)
                except ValueError as exc:
                    bad.append(i)
                    reasons.append(f"invalid JSON in a {self.fmt.name} record ({exc})")
                    rows.append(None)
                    continue
                if not isinstance(rec, dict):
                    bad.append(i)
                    reasons.append(f"a {self.fmt.name} record must be a JSON object")
                    rows.append(None)
                    continue
                rows.append(rec)
            pieces.append((lo, self._python(rows)))

        run(0, n)
        pieces.sort(key=lambda x: x[0])
        cols: dict[str, pa.Array] = {}
        for k in ("message", "time", "pod", "host", "stream"):
            arrs = [p[k] for _, p in pieces]
            typ = pa.large_string() if k != "time" else None
            if not arrs:
                cols[k] = pa.array([], type=typ or pa.large_string())
                continue
            if typ is not None:
                arrs = [a.cast(typ) for a in arrs]
            else:
                arrs = [a.cast(pa.large_string()) for a in arrs]
            cols[k] = pa.concat_arrays(arrs)
        order = np.argsort(np.array(bad, dtype=np.int64), kind="stable") if bad else np.zeros(0, np.int64)
        return cols, np.array(bad, dtype=np.int64)[order], [reasons[i] for i in order.tolist()]

    def _arrow(self, buf: np.ndarray, r_start: np.ndarray, r_end: np.ndarray,
               whole: bool = False) -> dict[str, pa.Array] | None:
        fmt = self.fmt
        body = json_lines(buf, r_start, r_end, whole=whole and self.scanner is None)
        paths = list(fmt.message + fmt.time + fmt.pod + fmt.host + fmt.stream + fmt.host_unit)
        if fmt.pod_tag:
            paths.append(fmt.pod_tag[0])
        schema = schema_of(paths)
        if fmt.pod_tag:
            schema = with_list(schema, fmt.pod_tag[0])
        if fmt.time_unit != "rfc3339":
            schema = retype(schema, fmt.time, self._typed.get("time", pa.int64()))
        if fmt.bytes_message:
            schema = retype(schema, fmt.message, pa.string())
        try:
            tbl = pj.read_json(
                pa.BufferReader(body),
                read_options=pj.ReadOptions(block_size=max(1 << 20, body.size + 1), use_threads=False),
                parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore",
                                              newlines_in_values=False),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            if fmt.time_unit != "rfc3339" and "time" not in self._typed:
                # epoch numbers written as strings (journald): try that type once
                self._typed["time"] = pa.string()
                return self._arrow(buf, r_start, r_end, whole)
            return None
        if tbl.num_rows != int(r_start.size):
            return None
        return self._columns(tbl)

    def _columns(self, tbl: pa.Table) -> dict[str, pa.Array]:
        fmt = self.fmt
        msg = first_value(tbl, fmt.message)
        pod = first_value(tbl, fmt.pod) if fmt.pod else pa.nulls(tbl.num_rows, pa.large_string())
        if fmt.pod_tag:
            pod = tag_value(get_path(tbl, fmt.pod_tag[0]), fmt.pod_tag[1])
        if fmt.name.startswith("cloudwatch"):
            pod = pod_of_stream(pod)
        host = first_value(tbl, fmt.host) if fmt.host else pa.nulls(tbl.num_rows, pa.large_string())
        if fmt.host_unit:
            unit = first_value(tbl, fmt.host_unit)
            pod = pc.binary_join_element_wise(host.cast(pa.large_string()), unit.cast(pa.large_string()),
                                              pa.scalar("/", pa.large_string()))
        stream = first_value(tbl, fmt.stream) if fmt.stream else pa.nulls(tbl.num_rows, pa.large_string())
        return {"message": msg, "time": first_value(tbl, fmt.time), "pod": pod, "host": host, "stream": stream}

    def _python(self, rows: list[dict[str, Any] | None]) -> dict[str, pa.Array]:
        fmt = self.fmt

        def get(rec: dict[str, Any] | None, paths: tuple[str, ...]) -> Any:
            if rec is None:
                return None
            for p in paths:
                v: Any = rec
                for part in split_path(p):
                    v = v.get(part) if isinstance(v, dict) else None
                if v is not None and v != "":
                    return v
            return None

        def text(v: Any) -> str | None:
            if v is None:
                return None
            if isinstance(v, list) and fmt.bytes_message and all(isinstance(x, int) for x in v):
                return bytes(x & 0xFF for x in v).decode("utf-8", "replace")
            if isinstance(v, str):
                return v
            return json.dumps(v, separators=(",", ":"))

        msg = [text(get(r, fmt.message)) for r in rows]
        tim = [None if (v := get(r, fmt.time)) is None else str(v) for r in rows]
        if fmt.pod_tag:
            pod = []
            for r in rows:
                tags = get(r, (fmt.pod_tag[0],))
                pod.append(next((t[len(fmt.pod_tag[1]):] for t in tags or [] if isinstance(t, str)
                                 and t.startswith(fmt.pod_tag[1])), None))
        else:
            pod = [text(get(r, fmt.pod)) for r in rows]
        host = [text(get(r, fmt.host)) for r in rows]
        if fmt.host_unit:
            unit = [text(get(r, fmt.host_unit)) for r in rows]
            pod = [None if h is None or u is None else f"{h}/{u}" for h, u in zip(host, unit, strict=True)]
        pod_arr = _texts(pod)
        if fmt.name.startswith("cloudwatch"):
            pod_arr = pod_of_stream(pod_arr)
        return {
            "message": _texts(msg),
            "time": _texts(tim),
            "pod": pod_arr,
            "host": _texts(host),
            "stream": _texts([text(get(r, fmt.stream)) for r in rows]),
        }

    def _times(self, t: pa.Array) -> np.ndarray:
        unit = self.fmt.time_unit
        n = len(t)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        if unit == "rfc3339":
            data, off = binary_parts(t.cast(pa.large_binary()))
            valid = t.is_valid().to_numpy(zero_copy_only=False)
            p = parse_rfc3339(data, off[:-1])
            ok = valid & p.ok & p.zoned & (p.end == off[1:])
            return np.where(ok, p.us, NO_TIME)
        text = pa.types.is_string(t.type) or pa.types.is_large_string(t.type)
        if text:
            # a value that is not a plain number ("17878002e3" for µs, 22 digits, words) is no time
            # (unknown), never an error that stops the whole file's ingest
            pattern = r"^[0-9]{1,18}$" if unit == "epoch_us" else r"^-?[0-9]{1,19}(\.[0-9]*)?([eE][-+]?[0-9]{1,2})?$"
            t = pc.if_else(pc.match_substring_regex(t, pattern), t, pa.scalar(None, t.type))
        num = pc.cast(t, pa.float64(), safe=False) if text else pc.cast(t, pa.float64())
        vals = num.to_numpy(zero_copy_only=False)
        scale = {"epoch_ms": 1_000, "epoch_us": 1, "epoch_s": 1_000_000}[unit]
        if unit == "epoch_us" and pa.types.is_large_string(t.type):
            # µs since the epoch do not fit a double exactly: parse the digits as integers
            ints = pc.cast(t, pa.int64(), safe=False).fill_null(NO_TIME).to_numpy(zero_copy_only=False)
            return np.asarray(ints, dtype=np.int64)
        us = np.nan_to_num(vals, nan=0.0, posinf=0.0, neginf=0.0) * scale
        # beyond int64 microseconds (an exponent of 99) is no time either, not a wrapped number
        known = np.isfinite(vals) & (np.abs(us) < 9.2e18)
        return np.where(known, np.round(np.where(known, us, 0.0)), NO_TIME).astype(np.int64)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _texts(values: list[str | None]) -> pa.Array:
    """Python strings as an Arrow column; a lone surrogate (JSON's ``"\\ud800"``, which Python keeps and
    UTF-8 cannot hold) becomes U+FFFD, as an invalid byte of a plain log line does."""
    try:
        return pa.array(values, type=pa.large_string())
    except UnicodeEncodeError:
        return pa.array([None if v is None else _SURROGATE.sub("\ufffd", v) for v in values],
                        type=pa.large_string())


@dataclass(frozen=True)
class _Fields:
    """Per readable record (``idx``, in record order): text span in ``data``, time, stream, pod, host."""

    bad_rec: np.ndarray
    reasons: list[str]
    no_msg: np.ndarray
    idx: np.ndarray
    data: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    times: np.ndarray
    stream: np.ndarray
    pod: pa.Array
    host: pa.Array
    #: the text ended with a newline already left out of its span (Docker fast path)
    nl: np.ndarray | None = None
    #: which texts may hold several lines (None: any may)
    inner_nl: np.ndarray | None = None


@dataclass(frozen=True)
class _Fast:
    """Docker records read without a JSON parser: which ones, and their fields (spans into ``data``)."""

    ok: np.ndarray
    data: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    us: np.ndarray
    stream: np.ndarray
    #: the text had its final newline (already left out of the span); None: not tracked
    nl: np.ndarray | None
    #: per record (valid where ``ok``): pod and host; None: the format has none
    pod: pa.Array | None = None
    host: pa.Array | None = None
    #: the text may hold several lines (None: any may)
    inner_nl: np.ndarray | None = None


def _docker_fast(buf: np.ndarray, r_start: np.ndarray, r_end: np.ndarray) -> _Fast:
    """Docker json-file records as moby writes them, read without a JSON parser.

    moby's writer (``jsonlogbytes.go``) always writes ``{"log":"...","stream":"...","time":"..."}``
    in that order; such records are read from fixed positions (the time found from the end) by one
    compiled pass (:func:`.kernels.docker_records`), their text unescaped in the same pass (most
    lines have no escape but the final ``\\n`` and stay in place). Other records (``attrs``, an
    empty ``log``, a lone surrogate, anything odd) are left to the JSON reader (``ok`` false).
    """
    from forensics.sources.collect.kernels import docker_records
    from forensics.sources.collect.timestamps import parse_rfc3339

    ok, starts, ends, ts, stream, nl, extra = docker_records(buf, r_start, r_end)
    p = parse_rfc3339(buf, ts, date_sep_t_only=True)
    ok &= p.ok & p.zoned & (p.end == r_end.astype(np.int64) - 2)
    data = np.concatenate([buf, extra]) if extra.size else buf
    return _Fast(ok=ok, data=data, starts=starts, ends=ends, us=p.us, stream=stream, nl=nl)


def _spec_fast(fmt: RecordFormat, spec: FieldSpec, buf: np.ndarray, r_start: np.ndarray, r_end: np.ndarray) -> _Fast:
    """Records of a fixed-key format read by :func:`.fieldscan.scan_fields`, as the JSON path reads them.

    The time is parsed as :meth:`RecordWrapper._times` parses it (the whole value a zoned RFC
    3339 time, or the digits of µs); pod and host are built as :meth:`RecordWrapper._columns`
    builds them (the pod tag, host/unit, the pod in a CloudWatch stream name).
    """
    sc = scan_fields(spec, buf, r_start, r_end)
    ok = sc.ok
    start = np.where(ok[:, None], sc.start, -1)
    ts, te = start[:, TIME], sc.end[:, TIME]
    if spec.digits_time:
        us = np.where(ts >= 0, sc.us, NO_TIME)
    else:
        p = parse_rfc3339(buf, np.maximum(ts, 0))
        us = np.where((ts >= 0) & p.ok & p.zoned & (p.end == te), p.us, NO_TIME)

    def strings(field: int) -> pa.Array:
        off, data, valid = gather_strings(buf, start[:, field], sc.end[:, field])
        mask = pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.LargeStringArray.from_buffers(len(valid), pa.py_buffer(off), pa.py_buffer(data), mask,
                                                int(len(valid) - valid.sum()))

    host = strings(HOST) if fmt.host else None
    pod = strings(TAG) if fmt.pod_tag else strings(POD) if fmt.pod else None
    if fmt.host_unit:
        pod = pc.binary_join_element_wise(strings(HOST), strings(UNIT), pa.scalar("/", pa.large_string()))
    if pod is not None and fmt.name.startswith("cloudwatch"):
        pod = pod_of_stream(pod)
    return _Fast(ok=ok, data=sc.data, starts=start[:, MSG].copy(), ends=sc.end[:, MSG].copy(), us=us,
                 stream=sc.stream, nl=None, pod=pod, host=host, inner_nl=sc.inner_nl)



def _blank(phys: LineBatch) -> np.ndarray:
    """Lines holding only spaces/tabs (short ones checked exactly; the JSON reader skips them)."""
    from forensics.sources.collect.timestamps import window

    w = window(phys.buf, phys.starts, 8)
    lengths = phys.ends - phys.starts
    space = (w == 32) | (w == 9)
    within = np.arange(8)[None, :] < lengths[:, None]
    return np.asarray((lengths <= 8) & (space | ~within).all(axis=1))



def _split_inner(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 rec_of: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Split texts holding newlines into one logical line each: (starts, ends, record, sub-index).

    None when no text holds a newline (the common case).
    """
    nl = np.flatnonzero(data == 10)
    if not nl.size:
        return None
    # newlines inside each text (the trailing one was already cut off by `ends`)
    lo = np.searchsorted(nl, starts)
    hi = np.searchsorted(nl, ends)
    if not bool((hi > lo).any()):
        return None
    count = hi - lo + 1
    n_out = int(count.sum())
    owner = np.repeat(np.arange(starts.size), count)
    first_of = np.r_[0, np.cumsum(count)[:-1]]
    sub = np.arange(n_out) - np.repeat(first_of, count)
    # piece k of text t: from (start or nl+1) to (nl or end)
    s_out = np.where(sub == 0, starts[owner], 0)
    e_out = np.where(sub == count[owner] - 1, ends[owner], 0)
    inner_idx = lo[owner] + sub  # index into nl of the newline ending this piece (if not last)
    has_end_nl = sub < count[owner] - 1
    e_out = np.where(has_end_nl, nl[np.minimum(inner_idx, max(nl.size - 1, 0))] if nl.size else 0, e_out)
    has_start_nl = sub > 0
    s_out = np.where(has_start_nl, nl[np.minimum(inner_idx - 1, max(nl.size - 1, 0))] + 1 if nl.size else 0, s_out)
    # drop a '\r' before an inner newline
    cr = has_end_nl & (e_out > s_out) & (data[np.maximum(e_out - 1, 0)] == 13)
    e_out = e_out - cr
    return s_out.astype(np.int64), e_out.astype(np.int64), rec_of[owner], sub.astype(np.int32)


def _lines_of(first_line: np.ndarray, last_line: np.ndarray, recs: np.ndarray) -> np.ndarray:
    """Lines of the given (rejected) records after their first line."""
    out: list[int] = []
    for r in recs.tolist():
        out.extend(range(int(first_line[r]) + 1, int(last_line[r]) + 1))
    return np.array(out, dtype=np.int64)


def _slice_lines(phys: LineBatch, n: int) -> LineBatch:
    """The first ``n`` physical lines of a batch (same buffer)."""
    return replace(
        phys, starts=phys.starts[:n], ends=phys.ends[:n], line_no=phys.line_no[:n], offset=phys.offset[:n],
        phys_lines=n, next_line=int(phys.line_no[n]) if n < len(phys) else phys.next_line,
        next_offset=int(phys.offset[n]) if n < len(phys) else phys.next_offset,
    )

