"""Engine-side events of the sample: startups, router health probes, background noise, one-offs.

Example:
    >>> import tempfile
    >>> g = EngineEvents(tempfile.mkdtemp(), requests=300, seed=1)
    >>> next(g.probes("prefill-0", 0))[1:3]
    (10, 0)
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from forensics.sample import _formats as F
from forensics.sample._state import GeneratorState
from forensics.sample._world import (
    BOOTSTRAP_PORT,
    FAKE_BOOTSTRAP_HOST,
    NODES,
    T_BEGIN,
    T_END,
    Start,
    engine_log_lost,
    ms,
    serving,
    starts_of,
)


class EngineEvents(GeneratorState):
    """Queue the engine lines that no client request causes."""

    def probes(self, node: str, gid: int) -> Iterator[tuple[int, int, int, Any]]:
        """Yield router health probes of one node (every 600 s)."""
        t = T_BEGIN + 240_000 + gid * 97_000
        k = 0
        while t < T_END:
            yield (t, 10 + gid, k, ("probe", node))
            t += 600_000
            k += 1

    def noise(self, node: str, gid: int) -> Iterator[tuple[int, int, int, Any]]:
        """Yield background noise events of one node."""
        r = random.Random(f"noise:{self.seed}:{node}")
        t = T_BEGIN + r.randint(3600_000, 4 * 3600_000)
        k = 0
        while t < T_END:
            yield (t, 20 + gid, k, ("noise", node))
            t += r.randint(2 * 3600_000, 6 * 3600_000)
            k += 1

    def one_offs(self) -> Iterator[tuple[int, int, int, Any]]:
        """Yield the special one-off engine events (tracebacks, invalid HTTP, latin-1 bytes)."""
        ev = [
            (ms(2026, 9, 2, 17, 3, 12), "invalid_http", "prefill-0"),
            (ms(2026, 9, 2, 17, 3, 13), "invalid_http", "prefill-0"),
            (ms(2026, 9, 4, 7, 12, 40), "asgi_traceback", "decode-1"),
            (ms(2026, 9, 6, 10, 11, 12), "glog_latin1", "decode-0"),
            (ms(2026, 9, 9, 21, 5, 33), "thread_traceback", "prefill-2"),
            (ms(2026, 9, 9, 22, 48, 1), "invalid_http", "prefill-2"),
        ]
        ev.sort()
        for k, (t, what, node) in enumerate(ev):
            yield (t, 30, k, (what, node))

    # ------------------------------------------------------------ startup

    def startup(self, st: Start, idx: int) -> None:
        """Queue the full startup sequence of one start (and the shutdown of the previous)."""
        node = NODES[st.node]
        r = random.Random(f"startup:{self.seed}:{st.node}:{idx}")
        t = st.t_first
        sts = starts_of(st.node)
        i = sts.index(st)
        if i > 0:
            td = st.t_first - 30_000
            pid = 4000 + r.randint(0, 90000)
            for j, msg in enumerate(
                [
                    "INFO:     Shutting down",
                    "INFO:     Waiting for application shutdown.",
                    "INFO:     Application shutdown complete.",
                    f"INFO:     Finished server process [{pid}]",
                ]
            ):
                self.eng(st.node, td + j * 200, msg)
        self.eng(st.node, t, F.server_args_line(st, node.role, node.port), mark=f"start:{st.node}:{i}")
        self.eng(st.node, t + 2100, "Using default HuggingFace chat template with detected content format: string")
        ranks = list(range(8))

        def all_ranks(tt: int, msg: str) -> None:
            r.shuffle(ranks)
            for rk in ranks:
                self.eng(st.node, tt + r.randint(0, 900), msg, f"TP{rk}")

        all_ranks(t + 6000, "Init torch distributed begin.")
        all_ranks(t + 9000, "Init torch distributed ends. mem usage=0.71 GB")
        all_ranks(t + 10000, f"Load weight begin. avail mem={st.gpu_mem_gb:.2f} GB")
        tw = t + (st.ready_after_s - 60) * 1000
        after_w = st.gpu_mem_gb - 46.59
        all_ranks(tw, f"Load weight end. type=Glm5MoeForCausalLM, dtype=torch.bfloat16, avail mem={after_w:.2f} GB, mem usage=46.59 GB.")
        gb = st.pool * st.kv_bytes_per_token / (1 << 30)
        avail_after = after_w - 2 * gb
        all_ranks(tw + 2000, F.kv_line(st))
        all_ranks(tw + 3000, f"Memory pool end. avail mem={avail_after:.2f} GB")
        if node.role == "decode":
            all_ranks(tw + 4000, f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail_after:.2f} GB")
            all_ranks(tw + 26000, f"Capture cuda graph end. Time elapsed: 21.87 s. mem usage=1.08 GB. avail mem={avail_after - 1.08:.2f} GB.")
        tm = tw + 30000
        self.eng(st.node, tm, F.max_tokens_line(st, node.role, avail_after - (1.08 if node.role == "decode" else 0)), "TP0")
        if node.role == "prefill":
            self.eng(st.node, tm + 400, f"CommonKVBootstrapServer started successfully on 0.0.0.0:{BOOTSTRAP_PORT}")
        pid = 4000 + r.randint(0, 90000)
        for j, msg in enumerate(
            [
                f"INFO:     Started server process [{pid}]",
                "INFO:     Waiting for application startup.",
                "INFO:     Application startup complete.",
                f"INFO:     Uvicorn running on http://0.0.0.0:{node.port} (Press CTRL+C to quit)",
            ]
        ):
            self.eng(st.node, tm + 1000 + j * 10, msg)
        self.emit(tm + 2000, st.node, [(F.engine_prefix(tm + 2000) + f'INFO:     127.0.0.1:{r.randint(40000, 60999)} - "GET /get_model_info HTTP/1.1" 200 OK', "rec", None)])
        tr = st.t_ready
        if node.role == "prefill":
            self.eng(st.node, tr - 1500, F.prefill_batch(st.style, 6, 0, 0.0, 0, 0, 3.91), "TP0")
        else:
            self.eng(st.node, tr - 1500, F.decode_batch(1, 7, 0.0, 0.0, 0.52), "TP0")
        self.emit(tr - 100, st.node, [(F.engine_prefix(tr - 100) + f'INFO:     127.0.0.1:{r.randint(40000, 60999)} - "POST /generate HTTP/1.1" 200 OK', "rec", None)])
        self.eng(st.node, tr, "The server is fired up and ready to roll!", mark=f"ready:{st.node}:{i}")

    # ------------------------------------------------------------ probes & noise

    def do_probe(self, t: int, node: str) -> None:
        """Router health probe: access line, plus a HEALTH_CHECK_ generation when idle."""
        st = serving(node, t)
        if st is None:
            return
        port = self.U(30000, 60999)
        ns = self.state[node]
        if ns.last_recv < t - 600_000:
            role = NODES[node].role
            rid = f"HEALTH_CHECK_{t / 1000:.6f}"
            sp = "{'max_new_tokens': 1, 'temperature': 0.0}"
            obj = F.gen_obj_repr(st.style, rid, "None", "[0]", sp, False, FAKE_BOOTSTRAP_HOST, None, 0)
            t1 = t + self.U(2, 9)
            if not engine_log_lost(node, t1):
                self.health_checks += 1  # those logged
            self.reqlog(node, t1, f"Receive: obj={obj}")
            if role == "prefill":
                self.eng(node, t1 + 12, F.prefill_batch(st.style, 1, 0, 0.0, 0, 0, round(self.rng.uniform(0.05, 0.4), 2)), "TP0")
                fin = "{'type': 'length', 'length': 0}"
            else:
                fin = "{'type': 'length', 'length': 1}"
            t2 = t1 + self.U(40, 120)
            out = F.out_repr(rid, "", fin, 1, 1, 0, (t2 - t1) / 1000)
            self.reqlog(node, t2, f"Finish: obj={obj}, out={out}")
            self.emit(t2 + 1, node, [(F.access_line(t2 + 1, port, "GET", "/health", 200), "rec", None)])
        else:
            self.emit(t + 3, node, [(F.access_line(t + 3, port, "GET", "/health", 200), "rec", None)])

    def do_noise(self, t: int, node: str) -> None:
        """Write one benign background line."""
        if serving(node, t) is None:
            return
        role = NODES[node].role
        choice = self.rng.randrange(4)
        port = self.U(30000, 60999)
        if choice == 0:
            self.eng(node, t, f'INFO:     10.0.9.4:{port} - "GET /metrics HTTP/1.1" 200 OK')
        elif choice == 1:
            self.eng(node, t, f'INFO:     10.0.3.7:{port} - "GET /get_server_info HTTP/1.1" 200 OK')
        elif choice == 2 and role == "decode":
            old = self.rng.choice([0.55, 0.6, 0.65])
            self.eng(node, t, f"KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: {old:.4f} -> 0.8500", "TP0")
        else:
            self.eng(node, t, "WARNING:  Invalid HTTP request received.")

    def do_one_off(self, t: int, what: str, node: str) -> None:
        """Write a special one-off event."""
        if what == "invalid_http":
            self.eng(node, t, "WARNING:  Invalid HTTP request received.")
        elif what == "asgi_traceback":
            lines: list[tuple[str | bytes, str, str | None]] = [
                (F.engine_prefix(t) + "ERROR:    Exception in ASGI application", "rec", None),
                ("Traceback (most recent call last):", "cont", None),
                ('  File "/usr/local/lib/python3.12/dist-packages/uvicorn/protocols/http/httptools_impl.py", line 409, in run_asgi', "cont", None),
                ("    result = await app(  # type: ignore[func-returns-value]", "cont", None),
                ('  File "/usr/local/lib/python3.12/dist-packages/starlette/middleware/base.py", line 177, in __call__', "cont", None),
                ("    raise app_exc", "cont", None),
                ('  File "/sgl-workspace/sglang/python/sglang/srt/entrypoints/http_server.py", line 1042, in openai_v1_chat_completions', "cont", None),
                ("    return await raw_request.app.state.openai_serving_chat.handle_request(", "cont", None),
                ('  File "/usr/local/lib/python3.12/dist-packages/starlette/requests.py", line 243, in body', "cont", None),
                ("    raise ClientDisconnect()", "cont", None),
                ("starlette.requests.ClientDisconnect", "cont", None),
            ]
            self.emit(t, node, lines)
        elif what == "thread_traceback":
            lines = [
                ("Exception in thread Thread-12 (transfer_worker):", "cont", None),
                ("Traceback (most recent call last):", "cont", None),
                ('  File "/usr/lib/python3.12/threading.py", line 1075, in _bootstrap_inner', "cont", None),
                ("    self.run()", "cont", None),
                ('  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/mooncake/conn.py", line 612, in transfer_worker', "cont", None),
                ("    self.engine.register(buffer_path)", "cont", None),
                (b"OSError: [Errno 5] Input/output error: '/dev/shm/mooncake_caf\xe9_segment_3'", "cont", f"nonutf8:{node}:{t}"),
            ]
            self.emit(t, node, lines)
        elif what == "glog_latin1":
            line = b"E0906 18:11:12.215444 3114642 transfer_engine.cpp:412] Failed to open segment /dev/shm/caf\xe9-kv-7: No such file or directory"
            self.emit(t, node, [(line, "cont", f"nonutf8:{node}:{t}")])

