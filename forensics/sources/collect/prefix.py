"""Wrappers that put a text prefix before each line: CRI, ``kubectl logs``, journald short, syslog.

All are stripped with array operations over the whole batch: the collector's timestamp is parsed
from a fixed window of bytes per line (:mod:`.timestamps`); the variable fields after it (host,
identifier, RFC 5424 header) are matched by one anchored RE2 pattern over a zero-copy Arrow view
of the lines. No Python runs per line except for rare shapes (extended CRI tags, ``kubectl``
lines longer than a CRI chunk).

Example:
    >>> from forensics.sources.lines import LineBatch
    >>> phys = LineBatch.from_bytes(b"2026-08-27T03:10:00.1Z stdout P abc\\n2026-08-27T03:10:00.2Z stdout F def\\n")
    >>> out, used = Cri(Path("0.log"), {}).strip(phys, final=True)
    >>> out.line(0), out.line_no.tolist(), out.n_phys.tolist(), used
    (b'abcdef', [1], [2], 2)
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from forensics.sources.collect.timestamps import bsd_to_us, parse_bsd, parse_rfc3339, window
from forensics.sources.collect.wrappers import Wrapper, assemble, join_groups
from forensics.sources.lines import NO_TIME, STREAM_STDERR, STREAM_STDOUT, STREAM_UNKNOWN, LineBatch

_STDOUT = np.frombuffer(b"stdout", dtype=np.uint8)
_STDERR = np.frombuffer(b"stderr", dtype=np.uint8)


def _empty(phys: LineBatch, w: Wrapper) -> tuple[LineBatch, int]:
    z = np.zeros(0, dtype=np.int64)
    return assemble(phys, w, first=z, starts=z, ends=z, used=phys.phys_lines), phys.phys_lines


def tails(phys: LineBatch, pos: np.ndarray) -> pa.LargeBinaryArray:
    """A zero-copy Arrow view of each line from ``pos`` on (a view may run into the next line).

    For anchored patterns that cannot cross a newline: each element starts at ``pos[i]`` and
    runs to ``pos[i + 1]``; the pattern only looks at its start.
    """
    n = len(phys)
    bounds = np.empty(n + 1, dtype=np.int64)
    bounds[:n] = pos
    bounds[n] = phys.buf.size
    bounds[1:] = np.maximum.accumulate(bounds[1:])
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(bounds), pa.py_buffer(phys.buf)])


class Cri(Wrapper):
    """containerd / CRI-O container logs: ``<RFC3339Nano> stdout|stderr F|P <text>``.

    ``P`` (partial) chunks are joined with the rest of their line (the next ``F`` of the same
    stream: both streams interleave in one file); the logical line keeps the first chunk's line
    number, offset and time, and ``n_phys`` says how many physical lines it spans.
    """

    name = "cri"
    source = ("containerd `pkg/cri/io/logger.go` (redirectLogs: RFC3339Nano timestamp, stream, "
              "`P`/`F` tag, lines over `max_container_log_line_size` 16 KiB split into `P` chunks); "
              "kubelet `pkg/kubelet/kuberuntime/logs/logs.go` (parseCRILog, tags split on `:`); "
              "CRI-O writes the same shape with a numeric offset (`+02:00`)")

    def strip(self, phys: LineBatch, *, final: bool) -> tuple[LineBatch, int]:
        n = len(phys)
        if n == 0:
            return _empty(phys, self)
        buf, s, e = phys.buf, phys.starts, phys.ends
        p = parse_rfc3339(buf, s, date_sep_t_only=True)
        te = p.end
        w = window(buf, te, 10)
        is_out = (w[:, 1:7] == _STDOUT).all(axis=1)
        is_err = (w[:, 1:7] == _STDERR).all(axis=1)
        tag = w[:, 8]
        is_p = tag == ord("P")
        ok = (p.ok & p.zoned & (w[:, 0] == 32) & (is_out | is_err) & (w[:, 7] == 32)
              & (is_p | (tag == ord("F"))) & (te + 9 <= e))
        end9 = te + 9
        plain_tag = ok & ((end9 == e) | (w[:, 9] == 32))
        text_start = np.minimum(te + 10, e)
        ext = ok & ~plain_tag & (w[:, 9] == ord(":"))
        if ext.any():
            # extended tags (`F:x`), forward compatible as kubelet reads them: text after the next space
            for i in np.flatnonzero(ext).tolist():
                sp = phys.line(i).find(b" ", int(end9[i] - s[i]))
                text_start[i] = e[i] if sp < 0 else s[i] + sp + 1
        ok &= plain_tag | ext
        stream = np.where(is_out, STREAM_STDOUT, STREAM_STDERR).astype(np.int8)
        bad = np.flatnonzero(~ok)
        reason = "not a CRI log record (<RFC3339 time> stdout|stderr F|P <text>)"
        valid = np.flatnonzero(ok)
        if not is_p[valid].any():
            return assemble(phys, self, first=valid, starts=text_start[valid], ends=e[valid], used=n,
                            collector_us=p.us[valid], stream=stream[valid], rejected_idx=bad,
                            reasons=reason), n
        return self._join(phys, valid, is_p, stream, text_start, p.us, bad, reason, final)

    def _join(self, phys: LineBatch, valid: np.ndarray, is_p: np.ndarray, stream: np.ndarray,
              text_start: np.ndarray, us: np.ndarray, bad: np.ndarray, reason: str,
              final: bool) -> tuple[LineBatch, int]:
        n = len(phys)
        # key of each valid record: the physical index of the first chunk of its logical line
        key = np.empty(valid.size, dtype=np.int64)
        open_first: list[int] = []
        for code in (STREAM_STDOUT, STREAM_STDERR):
            sel = np.flatnonzero(stream[valid] == code)
            if not sel.size:
                continue
            part = is_p[valid[sel]]
            starts_group = np.r_[True, ~part[:-1]]
            firsts = valid[sel[starts_group]]
            gno = np.cumsum(starts_group) - 1
            key[sel] = firsts[gno]
            if part[-1]:
                open_first.append(int(firsts[-1]))
        used = n
        if open_first and not final:
            used = min(open_first)
            # a line that started before the cut but ends after it waits too
            while True:
                late = key[(valid >= used) & (key < used)]
                if not late.size:
                    break
                used = int(late.min())
        take = key < used if used < n else np.ones(valid.size, dtype=bool)
        mem = valid[take]
        mkey = key[take]
        order = np.lexsort((mem, mkey))
        mem, mkey = mem[order], mkey[order]
        new_buf, g_start, g_end = join_groups(phys.buf, text_start[mem], phys.ends[mem], mkey)
        first_of = np.r_[True, mkey[1:] != mkey[:-1]] if mkey.size else np.zeros(0, dtype=bool)
        firsts = mem[first_of]
        sizes = np.diff(np.r_[np.flatnonzero(first_of), mkey.size])
        return assemble(phys, self, first=firsts, starts=g_start, ends=g_end, used=used, buf=new_buf,
                        n_phys=sizes, collector_us=us[firsts], stream=stream[firsts],
                        rejected_idx=bad[bad < used], reasons=reason), used


_KTS = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d) ")


class Kubectl(Wrapper):
    """``kubectl logs --timestamps`` (``<RFC3339Nano> <text>``), with or without ``--prefix``.

    ``--prefix`` puts ``[pod/<pod>/<container>] `` first: the pod goes into the batch (also
    without ``--timestamps``: then the lines have no collector time). A line the
    runtime split (CRI ``P`` chunks) arrives with the next chunk's timestamp inside it, every
    chunk length (16 KiB by default): those embedded timestamps are removed.
    """

    name = "kubectl"
    source = ("kubelet `pkg/kubelet/kuberuntime/logs/logs.go` (timestamps written as RFC3339NanoFixed, "
              "partial lines written without newline); kubectl `logs --timestamps --prefix` "
              "(`[pod/NAME/CONTAINER] ` before each line)")

    def strip(self, phys: LineBatch, *, final: bool) -> tuple[LineBatch, int]:
        n = len(phys)
        if n == 0:
            return _empty(phys, self)
        buf, s, e = phys.buf, phys.starts, phys.ends
        has_prefix = (window(buf, s, 5) == np.frombuffer(b"[pod/", dtype=np.uint8)).all(axis=1)
        ts_pos = s.copy()
        pods: pa.Array | None = None
        if has_prefix.any():
            view = tails(phys, s)
            m = pc.extract_regex(view, r"^(?P<all>\[pod/(?P<pod>[^/\]\s]+)/(?P<c>[^\]\s]+)\] )")
            valid_m = m.is_valid().to_numpy(zero_copy_only=False)
            plen = pc.binary_length(pc.struct_field(m, [0])).fill_null(0).to_numpy(zero_copy_only=False)
            ts_pos = s + np.where(valid_m, plen, 0)
            pod_arr = pc.struct_field(m, [1]).cast(pa.large_string())
            pods = pod_arr
            has_prefix &= valid_m
        p = parse_rfc3339(buf, ts_pos, date_sep_t_only=True)
        sp = window(buf, p.end, 1)[:, 0] == 32
        timed = p.ok & p.zoned & ((sp & (p.end < e)) | (p.end == e))
        # `--prefix` without `--timestamps`: the text follows the prefix, no collector time
        untimed = has_prefix & ~timed
        ok = timed | untimed
        text_start = np.where(timed, np.minimum(p.end + 1, e), ts_pos)
        us = np.where(timed, p.us, NO_TIME)
        bad = np.flatnonzero(~ok)
        valid = np.flatnonzero(ok)
        starts, ends = text_start[valid], e[valid]
        new_buf = None
        long = np.flatnonzero(ends - starts > 16384)
        if long.size:
            new_buf, starts, ends = self._unsplit(phys.buf, starts, ends, long)
        return assemble(phys, self, first=valid, starts=starts, ends=ends, used=n, buf=new_buf,
                        collector_us=us[valid], pod=None if pods is None else pods.take(pa.array(valid)),
                        rejected_idx=bad, reasons="not a `kubectl logs --timestamps` line"), n

    @staticmethod
    def _unsplit(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 long: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        extra: list[bytes] = []
        base = int(buf.size)
        starts, ends = starts.copy(), ends.copy()
        for i in long.tolist():
            text = buf[starts[i]:ends[i]].tobytes()
            joined = _unsplit_one(text)
            if joined is None:
                continue
            starts[i] = base
            ends[i] = base + len(joined)
            base += len(joined)
            extra.append(joined)
        if not extra:
            return buf, starts, ends
        return np.concatenate([buf, np.frombuffer(b"".join(extra), dtype=np.uint8)]), starts, ends


def _unsplit_one(text: bytes) -> bytes | None:
    """One ``kubectl --timestamps`` line without the timestamps the runtime's chunks left inside it.

    The chunk size ``L`` is the first embedded timestamp's position (at least 4 KiB: containerd's
    buffer); it is taken only if the chunks are consistent: another timestamp after each ``L``
    bytes of text, or the text ending there. Else the line is left as it is (a timestamp that is
    only the line's own text is never removed).

    Example:
        >>> t = b"a" * 5000 + b"2026-08-27T03:10:00.000000001Z " + b"b" * 10
        >>> _unsplit_one(t) == b"a" * 5000 + b"b" * 10
        True
    """
    for m in _KTS.finditer(text, 4096):
        step = m.start()
        out, pos, fine = [text[:step]], step, True
        while True:
            mm = _KTS.match(text, pos)
            if mm is None:
                fine = False
                break
            nxt = mm.end() + step
            out.append(text[mm.end():nxt])
            if nxt >= len(text):
                break
            pos = nxt
        if fine:
            return b"".join(out)
    return None


#: ``<host> <identifier>[<pid>]: `` after a syslog-style timestamp (journalctl short*, rsyslog files).
_HOST_IDENT = r"^(?P<all> (?P<host>[^\s]+) (?P<ident>[^\s\[:]+)(?:\[(?P<pid>\d+)\])?: ?)"


def _host_ident(phys: LineBatch, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, pa.Array, pa.Array]:
    """Match `` host ident[pid]: `` at ``pos``: (ok, end, host, ident)."""
    m = pc.extract_regex(tails(phys, pos), _HOST_IDENT)
    ok = m.is_valid().to_numpy(zero_copy_only=False)
    plen = pc.binary_length(pc.struct_field(m, [0])).fill_null(0).to_numpy(zero_copy_only=False)
    host = pc.struct_field(m, [1]).cast(pa.large_string())
    ident = pc.struct_field(m, [2]).cast(pa.large_string())
    return ok, pos + plen, host, ident


def _pods(host: pa.Array, ident: pa.Array, valid: np.ndarray) -> tuple[pa.Array, pa.Array]:
    sel = pa.array(valid)
    h = host.take(sel)
    return pc.binary_join_element_wise(h, ident.take(sel), pa.scalar("/", pa.large_string())), h


class JournalIso(Wrapper):
    """``journalctl -o short-iso`` / ``short-iso-precise`` and rsyslog's ``RSYSLOG_FileFormat``.

    Also with an RFC 3164 ``<PRI>`` in front (rsyslog ``RSYSLOG_ForwardFormat`` on the wire).

    ``2026-08-27T03:10:00+0000 host ident[pid]: text``: the time carries its offset (exact UTC);
    the pod is ``host/ident`` and the node the host. ``-- Boot ... --`` / ``-- No entries --``
    marker lines of journalctl are set aside as rejected with that reason; lines without the
    prefix are continuation lines of a multi-line message and are passed on as they are.
    """

    name = "journal-iso"
    source = ("systemd `journalctl(1)` output modes short-iso / short-iso-precise; rsyslog "
              "`RSYSLOG_FileFormat` template (RFC 3339 time, host, tag)")

    def strip(self, phys: LineBatch, *, final: bool) -> tuple[LineBatch, int]:
        n = len(phys)
        if n == 0:
            return _empty(phys, self)
        pri_ok, after_pri = _pri(phys)
        p = parse_rfc3339(phys.buf, np.where(pri_ok, after_pri, phys.starts), date_sep_t_only=True)
        ok, text_start, host, ident = _host_ident(phys, p.end)
        ok &= p.ok & p.zoned
        return _syslog_out(phys, self, ok, text_start, p.us, host, ident)


def _syslog_out(phys: LineBatch, w: Wrapper, ok: np.ndarray, text_start: np.ndarray, us: np.ndarray,
                host: pa.Array, ident: pa.Array) -> tuple[LineBatch, int]:
    n = len(phys)
    marker = ~ok & (window(phys.buf, phys.starts, 3) == np.frombuffer(b"-- ", dtype=np.uint8)).all(axis=1)
    keep = np.flatnonzero(~marker)
    col = np.where(ok, us, NO_TIME)[keep]
    starts = np.where(ok, text_start, phys.starts)[keep]
    pod, node = _pods(pc.if_else(pa.array(ok), host, pa.scalar(None, pa.large_string())),
                      ident, keep)
    b = assemble(phys, w, first=keep, starts=np.minimum(starts, phys.ends[keep]), ends=phys.ends[keep],
                 used=n, collector_us=col, pod=pod, rejected_idx=np.flatnonzero(marker),
                 reasons="journalctl marker line (not a log entry)")
    return replace(b, node=node.dictionary_encode()), n


class SyslogBsd(Wrapper):
    """``journalctl -o short`` (the default) and RFC 3164-style syslog files (``Aug 27 03:10:00 host tag: text``).

    With an RFC 3164 ``<PRI>`` in front too (as forwarded on the wire). The time has **no year and
    no zone**: the zone is the engine's (``--engine-tz``: the host's local time), the year is taken
    from the engine line's own timestamp when it starts with one, else from the file's
    modification time (a month after it means the year before); collector times are then not exact
    (``collector_exact`` false) and cannot check the engine's zone.
    """

    name = "syslog-bsd"
    collector_exact = False
    source = ("RFC 3164 section 4.1.2 (TIMESTAMP `Mmm dd hh:mm:ss`, local time, no year); "
              "systemd `journalctl(1)` output mode short; rsyslog `RSYSLOG_TraditionalFileFormat`")

    def __init__(self, path: Path, context: dict[str, object]) -> None:
        super().__init__(path, context)
        self._year_note = False

    def strip(self, phys: LineBatch, *, final: bool) -> tuple[LineBatch, int]:
        n = len(phys)
        if n == 0:
            return _empty(phys, self)
        buf, s = phys.buf, phys.starts
        pri_ok, after_pri = _pri(phys)
        pos = np.where(pri_ok, after_pri, s)
        month, day_s, end, ok = parse_bsd(buf, pos)
        ok2, text_start, host, ident = _host_ident(phys, end)
        ok &= ok2
        year = self._years(phys, text_start, month)
        local = bsd_to_us(month, day_s, year)
        tz = str(self.context.get("tz") or "UTC")
        from forensics.sources.timezones import to_utc

        conv = to_utc(np.where(ok, local, NO_TIME), tz)
        return _syslog_out(phys, self, ok, text_start, conv.utc_us, host, ident)

    def _years(self, phys: LineBatch, text_start: np.ndarray, month: np.ndarray) -> np.ndarray:
        given = self.context.get("year")
        if given is not None:
            return np.full(month.shape, int(str(given)), dtype=np.int64)
        # the engine line's own `[YYYY-MM-DD` gives the year (December/January straddle handled)
        w = window(phys.buf, text_start, 8)
        d = w.astype(np.int64) - 48
        has = (w[:, 0] == ord("[")) & ((d[:, 1:5] >= 0) & (d[:, 1:5] <= 9)).all(axis=1) & (w[:, 5] == ord("-"))
        inner_y = d[:, 1] * 1000 + d[:, 2] * 100 + d[:, 3] * 10 + d[:, 4]
        inner_m = d[:, 6] * 10 + d[:, 7]
        y_line = inner_y - ((month == 12) & (inner_m == 1)) + ((month == 1) & (inner_m == 12))
        mtime = dt.datetime.fromtimestamp(self.path.stat().st_mtime, dt.UTC) if self.path.exists() else dt.datetime.now(dt.UTC)
        y_file = np.where(month > mtime.month, mtime.year - 1, mtime.year)
        if not self._year_note:
            self._year_note = True
            self.warnings.append(
                "syslog times have no year: taken from each engine line's own date, else from the "
                f"file's modification time ({mtime:%Y-%m-%d}); collector times are inferred")
        return np.where(has, y_line, y_file).astype(np.int64)


def _pri(phys: LineBatch) -> tuple[np.ndarray, np.ndarray]:
    """``<PRI>`` at each line start: (present, position after it)."""
    w = window(phys.buf, phys.starts, 5)
    d = w.astype(np.int64) - 48
    dig = (d >= 0) & (d <= 9)
    lt = w[:, 0] == ord("<")
    n1 = lt & dig[:, 1] & (w[:, 2] == ord(">"))
    n2 = lt & dig[:, 1] & dig[:, 2] & (w[:, 3] == ord(">"))
    n3 = lt & dig[:, 1] & dig[:, 2] & dig[:, 3] & (w[:, 4] == ord(">"))
    length = np.where(n1, 3, np.where(n2, 4, np.where(n3, 5, 0)))
    return length > 0, phys.starts + length


#: RFC 5424 header after ``<PRI>1 ``: TIMESTAMP HOSTNAME APP-NAME PROCID MSGID STRUCTURED-DATA.
_R5424 = (r"^(?P<all>(?P<ts>\S+) (?P<host>\S+) (?P<app>\S+) (?P<procid>\S+) (?P<msgid>\S+) "
          r"(?P<sd>-|(?:\[(?:[^\]\\\n]|\\.)*\])+)(?: |$)(?:\xEF\xBB\xBF)?)")


class Syslog5424(Wrapper):
    """RFC 5424 syslog: ``<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD MSG`` (rsyslog / syslog-ng forwarding).

    The time is RFC 3339 with its offset (exact UTC; ``-`` means none); pod ``host/app``, node the host.
    """

    name = "syslog-5424"
    source = "RFC 5424 section 6 (HEADER, STRUCTURED-DATA, MSG; TIMESTAMP per section 6.2.3, optional BOM)"

    def strip(self, phys: LineBatch, *, final: bool) -> tuple[LineBatch, int]:
        n = len(phys)
        if n == 0:
            return _empty(phys, self)
        pri_ok, after = _pri(phys)
        ver = (window(phys.buf, after, 2) == np.frombuffer(b"1 ", dtype=np.uint8)).all(axis=1)
        pos = after + 2
        m = pc.extract_regex(tails(phys, pos), _R5424)
        ok = pri_ok & ver & m.is_valid().to_numpy(zero_copy_only=False)
        plen = pc.binary_length(pc.struct_field(m, [0])).fill_null(0).to_numpy(zero_copy_only=False)
        text_start = np.minimum(pos + plen, phys.ends)
        p = parse_rfc3339(phys.buf, pos, date_sep_t_only=True)
        us = np.where(p.ok & p.zoned, p.us, NO_TIME)
        host = pc.struct_field(m, [2]).cast(pa.large_string())
        app = pc.struct_field(m, [3]).cast(pa.large_string())
        valid = np.flatnonzero(ok)
        pod, node = _pods(host, app, valid)
        b = assemble(phys, self, first=valid, starts=text_start[valid], ends=phys.ends[valid], used=n,
                     collector_us=us[valid], pod=pod, rejected_idx=np.flatnonzero(~ok),
                     reasons="not an RFC 5424 syslog message")
        return replace(b, node=node.dictionary_encode()), n


__all__ = ["STREAM_UNKNOWN", "Cri", "JournalIso", "Kubectl", "Syslog5424", "SyslogBsd"]
