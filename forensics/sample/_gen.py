"""Streaming generator of one SGLang prefill/decode incident (see ``generate``).

Requests are produced in gateway-start order; every log line they cause goes
into a small time-ordered heap and is written once no earlier line can follow.
Only rolling state is kept (in-flight lines, recent decode finishes per decode
node, counters), so memory stays bounded at any request count.

Example:
    >>> import tempfile
    >>> truth = Generator(tempfile.mkdtemp(), requests=300, seed=1).run()
    >>> truth["admission_limit"]
    681274
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import json
import math
import random
import shutil
from collections.abc import Iterator
from typing import Any

from forensics.sample import _formats as F
from forensics.sample._engine_events import EngineEvents
from forensics.sample._gateway_records import GatewayRecords
from forensics.sample._state import LIMIT, LONG_MIN, Spec
from forensics.sample._truth import GENERATOR_VERSION, Truth, readme
from forensics.sample._world import (
    BOOTSTRAP_PORT,
    CONTEXT_NEW,
    DECODE,
    ENGINE_LOG_GAP,
    LITELLM_PATH,
    MAX_REQUEST_S,
    NODES,
    PREFILL,
    PRIVATE,
    ROLLING_QUIET,
    ROTATION,
    SOURCE_WINDOW_S,
    STARTS,
    T_END,
    T_ROUTER_START,
    T_TRAFFIC,
    Start,
    diurnal,
    engine_log_lost,
    fleet_limit_at,
    ms,
    serving,
)
from forensics.sample._writers import FileWriter, RotatingSink

__all__ = ["GENERATOR_VERSION", "Generator"]

_ABORT_XFER_P = "Decode instance could be dead, remote mooncake session {ip}:{port} is not alive"
_ABORT_XFER_D = "Failed to get kvcache from prefill instance, it might be dead"


class Generator(EngineEvents, GatewayRecords, Truth):
    """Generate the sample incident into ``out_dir`` (see module docstring)."""

    # ------------------------------------------------------------ schedule

    def _buckets(self) -> tuple[list[int], list[float]]:
        starts = list(range(T_TRAFFIC, T_END, 60_000))
        cum = list(itertools.accumulate(diurnal(s + 30_000) for s in starts))
        return starts, cum

    def normal_arrivals(self, n: int) -> Iterator[tuple[int, int, int, Any]]:
        """Yield exactly ``n`` diurnal arrival times in order."""
        starts, cum = self._buckets()
        total = cum[-1]
        r = random.Random(f"arrivals:{self.seed}")
        prev = 0
        k = 0
        for i, s in enumerate(starts):
            upto = int(cum[i] * n / total) if i + 1 < len(starts) else n
            cnt = upto - prev
            prev = upto
            for off in sorted(r.randrange(60_000) for _ in range(cnt)):
                k += 1
                yield (s + off, 2, k, None)

    def long_arrivals(self, n: int) -> Iterator[tuple[int, int, int, Any]]:
        """Yield ``n`` long-prompt arrival times (diurnal, avoiding the rolling restart)."""
        starts, cum = self._buckets()
        r = random.Random(f"long:{self.seed}")
        times: list[int] = []
        while len(times) < n:
            u = r.random() * cum[-1]
            i = bisect.bisect_right(cum, u)
            t = starts[min(i, len(starts) - 1)] + r.randrange(60_000)
            if ROLLING_QUIET[0] <= t < ROLLING_QUIET[1] or PRIVATE[0] <= t < PRIVATE[1]:
                continue
            # no random long request half in the engine log gap: the scripted ones are its story
            if ENGINE_LOG_GAP[0] - (MAX_REQUEST_S + 60) * 1000 <= t < ENGINE_LOG_GAP[1] + 60_000:
                continue
            if any(st.t_first - 60_000 <= t < st.t_ready + 60_000 for st in STARTS):
                continue
            times.append(t)
        times.sort()
        for k, t in enumerate(times):
            yield (t, 1, k, None)

    def scripted(self) -> list[Spec]:
        """Return the scripted trap requests."""
        K = self.by_key
        S = Spec
        lst = [
            S(ms(2026, 9, 2, 3, 14, 7), K["L0"], 600000, 900, False, "prefill-0", "decode-0", note="old ctx 400"),
            S(ms(2026, 9, 2, 9, 30, 41), K["P0"], 500000, 700, False, "prefill-1", "decode-1", note="old ok"),
            S(ms(2026, 9, 4, 5, 20, 12), K["L1"], 702133, 812, False, "prefill-2", "decode-0", note="good node"),
            S(ms(2026, 9, 6, 11, 0, 3), K["P1"], 850000, 640, False, "prefill-2", "decode-1", note="good node"),
            S(ms(2026, 9, 5, 2, 0, 30), K["L2"], LIMIT - 1, 530, False, "prefill-0", "decode-1", note="limit-1"),
            S(ms(2026, 9, 5, 3, 0, 10), K["L3"], LIMIT, 1024, False, "prefill-1", "decode-0", note="limit"),
            S(ms(2026, 9, 5, 4, 10, 55), K["L4"], LIMIT + 1, 388, False, "prefill-0", "decode-1", note="limit+1"),
            S(ms(2026, 9, 6, 6, 0, 20), K["L5"], 681279, 2048, True, "prefill-1", "decode-1", note="681279"),
            S(ms(2026, 9, 6, 7, 30, 44), K["L6"], 681280, 733, True, "prefill-0", "decode-0", note="681280"),
            S(ms(2026, 9, 7, 2, 0, 9), K["P0"], 681281, 455, False, "prefill-0", "decode-0", note="681281"),
            # prefill-1's second exposed configuration (limit 777786): over the fleet limit but
            # under this node's own limit is admitted in full; at its limit the placeholder path
            S(ms(2026, 9, 7, 8, 30, 12), K["L5"], 777785, 600, False, "prefill-1", "decode-0", note="node limit-1"),
            S(ms(2026, 9, 7, 9, 0, 40), K["L6"], 777786, 512, False, "prefill-1", "decode-1", note="node limit"),
            # in the engine log gap: gateway records only (the proxy logs token counts)
            S(ms(2026, 9, 7, 4, 12, 31), K["P2"], 700000, 512, False, "prefill-0", "decode-1", note="gap leak"),
            S(ms(2026, 9, 7, 4, 31, 8), K["P0"], LIMIT, 300, True, "prefill-0", "decode-0", note="gap at limit"),
            S(ms(2026, 9, 7, 4, 47, 50), K["P1"], 750000, 420, False, "prefill-2", "decode-1", note="gap good node"),
            S(ms(2026, 9, 7, 4, 55, 2), K["P0"], LIMIT - 1, 256, False, "prefill-1", "decode-0", note="gap under limit"),
            # the client first hit http://: the edge answered 308, the retry over https leaked
            S(ms(2026, 9, 5, 9, 41, 3), K["L7"], 712345, 380, False, "prefill-0", "decode-0", note="redirect", redirect=True),
            S(ms(2026, 9, 4, 8, 0, 0), K["L7"], 1100000, 500, False, "prefill-0", "decode-1", note="over ctx"),
            S(ms(2026, 9, 7, 10, 0, 17), K["P1"], 1048576, 500, False, "prefill-2", "decode-0", note="= ctx"),
            S(ms(2026, 9, 8, 1, 0, 31), K["L0"], 1500000, 500, True, "prefill-1", "decode-1", note="over ctx"),
            S(ms(2026, 9, 4, 12, 0, 5), K["E5"], 3200, 300, False, "prefill-2", "decode-1", "xfer500"),
            S(ms(2026, 9, 6, 13, 0, 40), K["L1"], 750000, 600, False, "prefill-0", "decode-0", "xfer500", True),
            S(ms(2026, 9, 7, 16, 20, 12), K["P2"], 5400, 420, True, "prefill-1", "decode-0", "xfer_stream200"),
            S(ms(2026, 9, 8, 9, 12, 33), K["R"], 802133, 256, False, "prefill-1", "decode-1", note="researcher"),
            S(ms(2026, 9, 8, 9, 40, 2), K["R"], 702500, 256, True, "prefill-0", "decode-0", note="researcher"),
            S(ms(2026, 9, 9, 13, 5, 27), K["O"], 702133, 256, False, "prefill-0", "decode-1", note="repro"),
            S(ms(2026, 9, 9, 15, 30, 10), K["O"], 702133, 256, False, "prefill-0", "decode-0", note="fix test"),
            S(ms(2026, 9, 9, 16, 10, 45), K["O"], 900000, 256, False, "prefill-1", "decode-1", note="fix test"),
            S(ms(2026, 9, 9, 21, 0, 3), K["L2"], 760000, 610, False, "prefill-0", "decode-0", note="after fix"),
            S(ms(2026, 9, 10, 3, 30, 19), K["P0"], 820000, 700, True, "prefill-1", "decode-1", note="after fix"),
        ]
        for s in lst:
            s.long = (s.n or 0) >= LONG_MIN
        lst.sort(key=lambda s: s.t0)
        return lst

    # ------------------------------------------------------------ output

    def flush(self, upto: int) -> None:
        """Write all queued output with time <= ``upto``."""
        heap = self.heap
        if upto > self.flushed:
            self.flushed = upto
        while heap and heap[0][0] <= upto:
            t, _, sink, payload = heapq.heappop(heap)
            if sink == "cf":
                self.cf_write(t, payload)
                continue
            if engine_log_lost(sink, t):
                self.lost_lines[sink] += len(payload)
                continue
            w = self.sinks[sink].writer_for(t)
            for text, kind, mark in payload:
                data = text if isinstance(text, bytes) else text.encode("utf-8")
                ln = w.write_line(data, kind)
                if mark is not None:
                    self.marks[mark] = (w.rel, ln)
                    if mark.startswith("nonutf8:"):
                        self.traps["non_utf8_lines"].append({"file": w.rel, "line": ln})

    # ------------------------------------------------------------ requests

    def choose(self, role_nodes: list[str], t: int, forced: str | None) -> tuple[str, Start]:
        """Pick a serving node (router policy ~ uniform)."""
        if forced is not None:
            st = serving(forced, t)
            assert st is not None, (forced, t)
            return forced, st
        avail = [(n, s) for n in role_nodes if (s := serving(n, t)) is not None]
        assert avail, t
        return avail[self.rng.randrange(len(avail))]

    def text_repr(self, n_tokens: int, head: str, tail: str) -> str:
        """Return the level-2 (truncated) repr of a prompt or output text."""
        if n_tokens <= 120:
            return repr(head + self.filler() + tail)
        return f"{head + self.filler()!r} ... {self.filler() + tail!r}"

    def request(self, spec: Spec) -> None:
        """Generate every log line of one client request."""
        rng = self.rng
        t0 = spec.t0
        self.req_counter += 1
        tenant = spec.tenant or (self.pick_long() if spec.long else self.pick_customer())
        if spec.n is not None:
            n = spec.n
        elif spec.long:
            u = rng.random()
            if u < 0.35:
                n = rng.randint(200_000, 523_000)
            elif u < 0.50:
                n = rng.randint(524_400, 680_900)
            elif u < 0.90:
                n = rng.randint(LIMIT, 1_040_000)
            else:
                n = rng.randint(1_100_000, 1_400_000)
        else:
            n = max(16, min(180_000, int(rng.lognormvariate(math.log(2500), 1.2))))
        max_new = rng.choice([1024, 2048, 2048, 4096, 8192])
        m = spec.m if spec.m is not None else max(1, min(max_new, int(rng.lognormvariate(math.log(320), 0.9))))
        stream = spec.stream if spec.stream is not None else (rng.random() < (0.3 if spec.long else 0.35))
        layer = tenant.layer
        pnode, P = self.choose(PREFILL, t0, spec.prefill)
        dnode, D = self.choose(DECODE, t0, spec.decode)
        if n >= P.context_len or n >= D.context_len:
            kind = "400"
        elif spec.override:
            kind = spec.override
        elif n >= P.limit:
            assert P.exposed, (pnode, n)
            kind = "leak"
        else:
            assert n < D.limit
            kind = "ok"
            if spec.prefill is None and rng.random() < 0.0003:
                kind = "xfer500"
        status = {"400": 400, "xfer500": 500}.get(kind, 200)
        self.n_by_layer[layer] += 1
        self.n_by_status[str(status)] = self.n_by_status.get(str(status), 0) + 1

        # ids
        room = rng.getrandbits(63)
        prid = self.uuid4hex()
        drid = self.uuid4hex()
        xid = self.ulid(t0) if layer == "edge" else None
        router_id = xid if xid is not None else self.smg_id()
        if layer == "edge":
            gw_id = self.hexid(64)
        elif status == 200:
            gw_id = drid
        else:
            gw_id = self.uuid4()
        host = NODES[pnode].ip
        durl = f"http://{NODES[dnode].ip}:{NODES[dnode].port}"

        # timeline
        rs = t0 + (self.U(15, 60) if layer == "edge" else self.U(4, 15))
        pr = rs + self.U(2, 9)
        dr = rs + self.U(2, 9)
        tok = 4 + n // 450
        sp = F._sp_repr(max_new, 0.7 if rng.random() < 0.6 else 1.0)
        head = "[gMASK]<sop><|system|>\n" if rng.random() < 0.5 else "[gMASK]<sop><|user|>\n"
        ptext = self.text_repr(n // 4, head, "<|assistant|>")
        headers = f", headers={{'x-request-id': {xid!r}}}" if xid else ""
        pobj = F.gen_obj_repr(P.style, prid, ptext, "None", sp, stream, host, BOOTSTRAP_PORT, room)
        dobj = F.gen_obj_repr(D.style, drid, ptext, "None", sp, stream, host, BOOTSTRAP_PORT, room)
        self.reqlog(pnode, pr, f"Receive: obj={pobj}{headers}")
        self.reqlog(dnode, dr, f"Receive: obj={dobj}{headers}")
        self.state[pnode].last_recv = pr
        self.state[dnode].last_recv = dr
        self.emit(rs, "router", [(F.router_started(rs, router_id), "rec", None)])
        pport = self.U(30000, 60999)
        dport = self.U(30000, 60999)
        cached = 0
        first = d_fin = 0
        mark_rej = f"rej:{gw_id}"

        if kind == "400":
            p4 = pr + tok
            d4 = dr + tok
            self.emit(p4, pnode, [(F.access_line(p4, pport, "POST", "/v1/chat/completions", 400), "rec", None)])
            self.emit(d4, dnode, [(F.access_line(d4, dport, "POST", "/v1/chat/completions", 400), "rec", None)])
            re_ = max(p4, d4) + self.U(1, 4)
            self.emit(re_, "router", [(F.router_decode_error(re_, router_id, durl, 400), "rec", None)])
            re_ += 1
            first = re_
        else:
            pq = pr + tok + self.U(0, 150)
            if kind == "leak" or n >= P.limit:
                # scheduler rejection -> 1-token placeholder -> processing goes on
                msg = (
                    f"Input length ({n} tokens) exceeds the maximum allowed length ({P.limit} tokens). "
                    f"Use a shorter input or enable --allow-auto-truncate., self.rid={prid!r}"
                )
                self.eng(pnode, pq, msg, "TP0", mark=mark_rej)
                tb = pq + self.U(3, 20)
                self.eng(pnode, tb, F.prefill_batch(P.style, 1, 0, 0.0, 0, 1, round(rng.uniform(0.1, 0.6), 2)), "TP0")
                pdone = tb + self.U(15, 40)
                p_prompt = 1
            else:
                if not spec.long and rng.random() < 0.5:
                    cached = min(n - 1, int(n * rng.uniform(0.1, 0.8)) // 64 * 64)
                todo = n - cached
                tb = pq
                done = cached
                while todo > 0:
                    ch = min(todo, 32768)
                    dur = 25 + ch * 1000 // 42000
                    thr = ch / (dur / 1000)
                    usage = (done + ch) / P.pool
                    self.eng(pnode, tb, F.prefill_batch(P.style, ch, cached if done == cached else 0, usage, self.U(0, 2), self.U(0, 3), thr), "TP0")
                    done += ch
                    todo -= ch
                    tb += dur
                pdone = tb
                p_prompt = n
            xfer = 15 + (p_prompt // 2500)
            p_fin = pdone + xfer
            dfirst = max(p_fin, dr + tok) + self.U(10, 60)
            if kind in ("xfer500", "xfer_stream200"):
                tf = pdone + self.U(2000, 8000)
                mp = f"Prefill transfer failed for request rank={{r}} req.rid={prid!r} req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): " + _ABORT_XFER_P.format(ip=NODES[dnode].ip, port=15000 + room % 1000)
                lines = [(F.engine_prefix(tf, f"TP{r_}") + mp.format(r=r_), "rec", None) for r_ in range(8)]
                self.emit(tf, pnode, lines)
                pmsg = mp.format(r=0)
                fin = f"{{'type': 'abort', 'message': {pmsg!r}, 'status_code': 500, 'err_type': None}}"
                out = F.out_repr(prid, "", fin, p_prompt, 0, 0, (tf - pr) / 1000)
                self.reqlog(pnode, tf + 2, f"Finish: obj={pobj}{headers}, out={out}")
                self.emit(tf + 3, pnode, [(F.access_line(tf + 3, pport, "POST", "/v1/chat/completions", 500), "rec", None)])
                td = tf + self.U(5, 60)
                md = f"Decode transfer failed for request rank={{r}} decode_req.req.rid={drid!r} decode_req.req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): {_ABORT_XFER_D}"
                self.emit(td, dnode, [(F.engine_prefix(td, f"TP{r_}") + md.format(r=r_), "rec", None) for r_ in range(8)])
                dmsg = md.format(r=0)
                if kind == "xfer_stream200":
                    self.emit(td + 1, dnode, [(F.access_line(td + 1, dport, "POST", "/v1/chat/completions", 200), "rec", None)])
                fin = f"{{'type': 'abort', 'message': {dmsg!r}, 'status_code': 500, 'err_type': None}}"
                out = F.out_repr(drid, "", fin, n, 0, 0, (td - dr) / 1000)
                self.reqlog(dnode, td + 2, f"Finish: obj={dobj}{headers}, out={out}")
                if kind == "xfer500":
                    self.emit(td + 3, dnode, [(F.access_line(td + 3, dport, "POST", "/v1/chat/completions", 500), "rec", None)])
                    re_ = td + self.U(4, 9)
                    if spec.wrap_router:
                        full = F.router_decode_error(re_, router_id, durl, 500)
                        cut = full.index(" status=500")
                        self.emit(re_, "router", [(full[:cut], "rec", None), (full[cut:], "cont", None)])
                    else:
                        self.emit(re_, "router", [(F.router_decode_error(re_, router_id, durl, 500), "rec", None)])
                    re_ += 1
                else:
                    re_ = td + self.U(4, 9)
                first = td + 1
                self.state[dnode].active.append((td, n))
            else:
                # prefill finishes (200), KV (real or 1-token placeholder) goes to decode
                fin = "{'type': 'length', 'length': 0}"
                out = F.out_repr(prid, self.rng.choice(["The", "Sure", "I", "##"]), fin, p_prompt, 1, cached, (p_fin - pr) / 1000)
                self.reqlog(pnode, p_fin, f"Finish: obj={pobj}{headers}, out={out}")
                self.emit(p_fin + 1, pnode, [(F.access_line(p_fin + 1, pport, "POST", "/v1/chat/completions", 200), "rec", None)])
                first = dfirst
                speed = rng.uniform(22, 48)
                d_fin = first + int(m / speed * 1000)
                if d_fin - t0 > MAX_REQUEST_S * 1000 - 5000:
                    d_fin = t0 + MAX_REQUEST_S * 1000 - 5000
                ns = self.state[dnode]
                run, toks = ns.load(first)
                ns.active.append((d_fin, n + m))
                tbl = min(d_fin - 1, first + self.U(100, 2500))
                self.eng(dnode, tbl, F.decode_batch(run + 1, toks + n, (toks + n) / D.pool, (n / D.pool) if kind == "leak" else 0.0, (run + 1) * speed), "TP0")
                freason = f"{{'type': 'length', 'length': {m}}}" if m >= max_new else "{'type': 'stop', 'matched': 151336}"
                otext = self.text_repr(m // 4, "", "")
                out = F.out_repr(drid, "", freason, n, m, cached, (d_fin - dr) / 1000).replace("'text': ''", f"'text': {otext}", 1)
                self.reqlog(dnode, d_fin, f"Finish: obj={dobj}{headers}, out={out}")
                ta = first if stream else d_fin + 1
                self.emit(ta, dnode, [(F.access_line(ta, dport, "POST", "/v1/chat/completions", 200), "rec", None)])
                re_ = d_fin + self.U(1, 6)
        latency_us = (re_ - rs) * 1000 + self.U(0, 999)
        self.emit(re_, "router", [(F.router_finished(re_, router_id, status, latency_us), "rec", None)])
        ge = re_ + self.U(3, 25)
        ttfb = (first - t0 + self.U(2, 20)) if stream else (ge - t0)

        # a request of which no engine line was kept, whose gateway record alone puts it over the
        # limit in force (the smallest of the exposed nodes): the toolkit must call it suspected
        fleet_limit = fleet_limit_at(t0)
        lost = all(engine_log_lost(nd, tt) for nd in (pnode, dnode) for tt in (pr, dr, re_))
        if lost and status == 200 and layer == "proxy" and fleet_limit is not None and n >= fleet_limit:
            self.suspected[gw_id] = {
                "layer": layer, "request_id": gw_id, "tenant_id": tenant.tid, "tenant_label": tenant.label,
                "ts_utc": F.iso_z(t0), "prompt_tokens": n, "status": status, "streamed": stream,
                "admission_limit": fleet_limit, "leaked_in_fact": kind == "leak",
                "prefill_node_in_fact": pnode, "decode_node_in_fact": dnode,
            }

        # gateway record
        gmark = f"gw:{gw_id}" if kind == "leak" or gw_id in self.suspected else None
        if spec.redirect and layer == "edge":
            self.cf_redirect(tenant, xid or "", t0, n)
        if layer == "edge":
            self.cf_record(tenant, gw_id, xid or "", t0, ge, status, stream, n, m, ttfb, re_ - rs, gmark, kind)
        else:
            self.ll_record(tenant, gw_id, t0, ge, first, status, stream, n, m, kind, router_id)

        # possible sources registry (decode finished normally => KV pages stayed resident)
        dq = self.recent[dnode]
        while dq and dq[0][0] < t0 - (SOURCE_WINDOW_S + MAX_REQUEST_S + 60) * 1000:
            dq.popleft()
        sources = None
        if kind == "leak":
            tr = dr // 1000
            sources = [
                {"request_id": e[2], "tenant_id": e[3], "layer": e[4], "decode_finish_utc": F.iso_z(e[1] * 1000), "same_tenant": e[3] == tenant.tid}
                for e in dq
                if tr - SOURCE_WINDOW_S <= e[1] <= tr
            ]
            sources.sort(key=lambda s: (s["decode_finish_utc"], s["request_id"]))
        if kind in ("ok", "leak") and not engine_log_lost(dnode, d_fin):
            dq.append((t0, d_fin // 1000, gw_id, tenant.tid, layer))

        # truth bookkeeping
        tid = gw_id
        if kind == "leak":
            self.leaks[tid] = {
                "layer": layer,
                "request_id": gw_id,
                "header_request_id": xid,
                "router_request_id": router_id,
                "tenant_id": tenant.tid,
                "tenant_label": tenant.label,
                "ts_utc": F.iso_z(t0),
                "prompt_tokens": n,
                "completion_tokens": m,
                "status": 200,
                "streamed": stream,
                "prefill_node": pnode,
                "decode_node": dnode,
                "bootstrap_room": room,
                "bootstrap_host": host,
                "prefill_rid": prid,
                "decode_rid": drid,
                "decode_receive_utc": F.iso_z(dr // 1000 * 1000),
                "possible_sources": sources,
                "admission_limit": P.limit,
            }
            if n - P.limit < 8 and gw_id not in self.suspected:
                self.traps["near_limit_leaks"].append(gw_id)
            if stream and gw_id not in self.suspected:
                self.traps["streamed_leaks"].append(gw_id)
        if n == LIMIT - 1:
            self.traps["at_limit_minus_one"].append(gw_id)
        if kind == "400" and n >= CONTEXT_NEW:
            self.traps["over_context_400"].append(gw_id)
        if kind == "xfer500":
            self.traps["transfer_failure_500"].append(gw_id)
        if kind == "xfer_stream200":
            self.traps["stream_error_200"].append(gw_id)
        if kind == "ok" and n >= LIMIT and pnode == "prefill-2" and gw_id not in self.suspected:
            self.traps["good_node_long"].append(gw_id)
        if kind == "ok" and n >= LIMIT and pnode in ("prefill-0", "prefill-1") and not P.exposed:
            self.traps["after_fix_long_ok"].append(gw_id)
        if kind == "ok" and P.exposed and fleet_limit is not None and fleet_limit <= n < P.limit and not lost:
            self.traps["under_node_limit_exposed"].append(gw_id)
        if n >= LONG_MIN and pnode in ("prefill-0", "prefill-1") and P.context_len < CONTEXT_NEW:
            self.traps["before_misconfig_long"].append(gw_id)

    # ------------------------------------------------------------ run

    def _clean(self) -> None:
        for sub in ("engine", "gateway"):
            p = self.out / sub
            if p.is_dir():
                shutil.rmtree(p)
        for name in ("truth.json", "README.md"):
            f = self.out / name
            if f.exists():
                f.unlink()

    def run(self) -> dict[str, Any]:
        """Generate all files and return the truth dict (also written to truth.json)."""
        self.out.mkdir(parents=True, exist_ok=True)
        self._clean()
        self.sinks = {name: RotatingSink(self.out, parts, self.counts) for name, parts in ROTATION.items()}
        self.ll = FileWriter(self.out, LITELLM_PATH)
        self.ll.write_line(",".join(F.LITELLM_COLUMNS).encode(), "header")

        for i, st in enumerate(STARTS):
            self.startup(st, i)
        purls = [f"http://{NODES[p].ip}:{NODES[p].port}" for p in PREFILL]
        durls = [f"http://{NODES[d].ip}:{NODES[d].port}" for d in DECODE]
        self.emit(T_ROUTER_START, "router", [(line, "rec", None) for line in F.router_startup(T_ROUTER_START, purls, durls)])

        scripted = self.scripted()
        n_long = min(250, max(20, round(self.requests * 0.017)))
        n_normal = self.requests - len(scripted) - n_long
        self.n_long = n_long
        gens: list[Iterator[tuple[int, int, int, Any]]] = [
            self.normal_arrivals(n_normal),
            self.long_arrivals(n_long),
            iter([(s.t0, 0, k, s) for k, s in enumerate(scripted)]),
            self.one_offs(),
        ]
        for gid, node in enumerate(NODES):
            gens.append(self.probes(node, gid))
            gens.append(self.noise(node, gid))
        for t, gid, _k, payload in heapq.merge(*gens):
            self.flush(t)
            if gid == 0:
                self.request(payload)
            elif gid == 1:
                self.request(Spec(t, long=True))
            elif gid == 2:
                self.request(Spec(t))
            elif payload[0] == "probe":
                self.do_probe(t, payload[1])
            elif payload[0] == "noise":
                self.do_noise(t, payload[1])
            else:
                self.do_one_off(t, payload[0], payload[1])
        self.flush(1 << 62)
        for s in self.sinks.values():
            s.close()
        if self.cf_pending:
            self.cf_open(self.cf_hour + 1)
        if self.cf_writer is not None:
            self.counts[self.cf_writer.rel] = self.cf_writer.close()
        for _w, pline, pmark in self.ll_pending:
            ln = self.ll.write_line(pline.encode(), "dup")
            self.traps["duplicate_records"].append({"file": self.ll.rel, "line": ln, "request_id": pmark})
        self.counts[self.ll.rel] = self.ll.close()
        truth = self.truth()
        with open(self.out / "truth.json", "w", encoding="utf-8") as fh:
            json.dump(truth, fh, sort_keys=True, indent=1, ensure_ascii=False)
            fh.write("\n")
        (self.out / "README.md").write_text(readme(truth), encoding="utf-8")
        return truth

