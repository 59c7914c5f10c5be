"""Benchmark of the engine-log loader against SGLang's own polars log parser.

Generates a mixed SGLang log of ``--lines`` lines (decode/prefill batch lines, access lines,
request records, rejections, transfer failures, tracebacks, startup lines), then measures in
separate child processes (so peak RSS is the loader's alone):

* ``forensics`` ingest of the whole mixed file: lines/s, MB/s, peak RSS;
* ``forensics`` ingest of a file of the decode-batch lines only;
* SGLang's ``debug_utils/log_parser.py`` approach (polars ``str.extract_groups``) on the same
  decode-batch file, and on the mixed file, for the ratio.

Example:
    .venv/bin/python -m benchmarks.bench_engine_ingest --lines 5000000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: SGLang's decode-batch pattern, as in python/sglang/srt/debug_utils/log_parser.py (reference).
POLARS_PATTERN_DECODE = (
    r"(\(SGLangEngine pid=(?P<pid>\d+)(?:,\s*ip=(?P<ip>[\d\.]+))?\))?\s+"
    r"\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})"
    r"(?:\s+DP(?P<dp>\d+))?"
    r"(?:\s+TP(?P<tp>\d+))?"
    r"(?:\s+PP(?P<pp>\d+))?"
    r"\]\s+"
    r"Decode batch( \[\d+\])?,\s+"
    r"#running-req:\s*(?P<running_req>\d+),\s+"
    r"#token:\s*(?P<token>\d+),\s+"
    r"token usage:\s*(?P<token_usage>[0-9.]+),\s+"
    r".*?"
    r"gen throughput \(token/s\):\s*(?P<throughput>[0-9.]+),\s+"
    r"#queue-req:\s*(?P<queue>\d+),"
)


def polars_parse(lines: str) -> Any:
    """SGLang's ``log_parser.parse``: one DataFrame row per line, ``extract_groups``, filter, cast."""
    import polars as pl

    df = pl.DataFrame(dict(line=lines.splitlines()))
    df = df.with_columns(info=pl.col("line").str.extract_groups(POLARS_PATTERN_DECODE))
    df = df.unnest("info")
    df = df.filter(pl.col("throughput").is_not_null())
    # The reference casts every group to Int64; usage and throughput are decimals, so they are
    # cast to Float64 here (casting "0.67" to Int64 raises in polars).
    df = df.with_columns(
        pl.col("ts").str.strptime(pl.Datetime, "%Y-%m-%d %H:%M:%S"),
        *[
            pl.col(c).cast(pl.Float64 if c in ("token_usage", "throughput") else pl.Int64)
            for c in ["pid", "dp", "tp", "pp", "running_req", "token", "token_usage", "throughput", "queue"]
            if c in df.columns
        ],
    )
    return df


def generate(path: Path, n_lines: int, seed: int = 7) -> dict[str, int]:
    """Write a mixed SGLang log of ``n_lines`` lines; return counts by line shape."""
    rnd = random.Random(seed)
    counts: dict[str, int] = {}
    base = 1_787_900_000  # 2026-08-28 local
    startup = [
        "server_args=ServerArgs(model_path='/models/glm-5.3', context_length=None, tp_size=8, "
        "disaggregation_mode='decode', kv_cache_dtype='auto', allow_auto_truncate=False)",
        "KV Cache is allocated. #tokens: 2040000, K size: 20.81 GB, V size: 20.81 GB",
        "max_total_num_tokens=2040000, chunked_prefill_size=16384, max_prefill_tokens=16384, "
        "max_running_requests=64, context_len=1048576, available_gpu_mem=9.87 GB",
        "The server is fired up and ready to roll!",
    ]
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        buf: list[str] = []
        for i, s in enumerate(startup):
            buf.append(f"[2026-08-28 00:00:0{i}{' TP0' if i in (1, 2) else ''}] {s}\n")
        counts["startup"] = len(startup)
        n = len(startup)
        while n < n_lines:
            t = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(base + n // 50))
            r = rnd.random()
            if r < 0.70:
                kind = "decode"
                # The shape SGLang's own parser matches (Ray actor prefix, DP/TP tags, '[iter]',
                # trailing separator), so the polars reference parses every decode line.
                line = (f"(SGLangEngine pid={30000 + n % 8}, ip=10.0.0.{n % 4}) [{t} DP{n % 4} TP{n % 4}] "
                        f"Decode batch [{n}], #running-req: {n % 64}, "
                        f"#token: {n % 900000}, token usage: 0.{n % 90:02d}, cuda graph: True, "
                        f"gen throughput (token/s): {n % 5000}.{n % 97:02d}, #queue-req: {n % 7}, \n")
            elif r < 0.85:
                kind = "prefill"
                line = (f"[{t} TP0] Prefill batch, #new-seq: 1, #new-token: {n % 16384}, #cached-token: 0, "
                        f"token usage: 0.{n % 90:02d}, #running-req: 3, #queue-req: 0, #pending-token: 0, "
                        f"#prealloc-req: 0, #inflight-req: 1, cuda graph: False, input throughput (token/s): 812.21\n")
            elif r < 0.93:
                kind = "http"
                line = f'[{t}] INFO:     10.0.3.{n % 250}:{40000 + n % 9999} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
            elif r < 0.965:
                kind = "receive"
                line = (f"[{t}] Receive: obj=GenerateReqInput(rid='{n:032x}', text='{'lorem ipsum ' * 20}', "
                        f"stream=True, bootstrap_host='10.0.2.11', bootstrap_port=8998, "
                        f"bootstrap_room={rnd.getrandbits(63)}), headers={{'x-request-id': 'req_{n:x}'}}\n")
            elif r < 0.995:
                kind = "finish"
                line = (f"[{t}] Finish: obj=GenerateReqInput(rid='{n:032x}', stream=True, "
                        f"bootstrap_room={rnd.getrandbits(63)}), out={{'meta_info': {{'id': '{n:032x}', "
                        f"'finish_reason': {{'type': 'stop', 'matched': 151329}}, 'prompt_tokens': {n % 90000}, "
                        f"'completion_tokens': {n % 900}, 'cached_tokens': 0, 'e2e_latency': 1.5}}}}\n")
            elif r < 0.997:
                kind = "rejection"
                line = (f"[{t} TP0] Input length ({700000 + n % 9999} tokens) exceeds the maximum allowed length "
                        f"(681274 tokens). Use a shorter input or enable --allow-auto-truncate., self.rid='{n:032x}'\n")
            elif r < 0.998:
                kind = "transfer"
                line = (f"[{t} TP1] Decode transfer failed for request rank=1 decode_req.req.rid='{n:032x}' "
                        f"decode_req.req.bootstrap_room={rnd.getrandbits(63)} with exception KVTransferError\n")
            else:
                kind = "traceback"
                line = 'Traceback (most recent call last):\n  File "scheduler.py", line 1, in run\nValueError: x\n'
            counts[kind] = counts.get(kind, 0) + line.count("\n")
            n += line.count("\n")
            buf.append(line)
            if len(buf) >= 100_000:
                fh.write("".join(buf))
                buf.clear()
        fh.write("".join(buf))
    return counts


def _child_ingest(path: str) -> dict[str, Any]:
    from forensics.case import open_case

    with tempfile.TemporaryDirectory() as d:
        case = open_case(Path(d) / "bench.duckdb")
        t0 = time.perf_counter()
        s = case.ingest_engine([f"bench={path}"], tz="Asia/Singapore")
        case.refresh()  # the derived tables, as `forensics ingest` builds them at its close
        el = time.perf_counter() - t0
        case.close()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": el, "lines": s.lines_read, "loaded": s.rows_loaded, "peak_rss_mb": rss}


def _child_polars(path: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    text = Path(path).read_text(encoding="utf-8")
    df = polars_parse(text)
    el = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": el, "lines": text.count("\n"), "rows": df.height, "peak_rss_mb": rss}


def _run_child(mode: str, path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_engine_ingest", "--child", mode, str(path)],
        check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run_benchmark(n_lines: int = 5_000_000, workdir: Path | None = None) -> dict[str, Any]:
    """Generate the logs, run every measurement, return the figures as a dict.

    Example:
        >>> figures = run_benchmark(20_000)   # doctest: +SKIP
        >>> figures["mixed"]["lines_per_s"] > 0  # doctest: +SKIP
        True
    """
    work = workdir or Path(tempfile.mkdtemp(prefix="bench-engine-"))
    work.mkdir(parents=True, exist_ok=True)
    mixed = work / f"mixed-{n_lines}.log"
    counts = generate(mixed, n_lines) if not mixed.exists() else {}
    decode = work / f"decode-only-{n_lines}.log"
    if not decode.exists():
        with open(mixed, encoding="utf-8") as src, open(decode, "w", encoding="utf-8") as dst:
            for line in src:
                if "Decode batch" in line:
                    dst.write(line)
    size_mixed, size_decode = mixed.stat().st_size, decode.stat().st_size
    figures: dict[str, Any] = {"n_lines": n_lines, "shapes": counts, "cpus": os.cpu_count()}
    for label, path, size in (("mixed", mixed, size_mixed), ("decode_only", decode, size_decode)):
        # The machine may be shared: the 1-minute load average before each run goes with its figure.
        load = os.getloadavg()[0]
        r = _run_child("ingest", path)
        figures[label] = {**r, "mb": size / 1e6, "lines_per_s": r["lines"] / r["seconds"],
                          "mb_per_s": size / 1e6 / r["seconds"], "load_before": load}
        load = os.getloadavg()[0]
        p = _run_child("polars", path)
        figures[f"polars_{label}"] = {**p, "lines_per_s": p["lines"] / p["seconds"],
                                      "mb_per_s": size / 1e6 / p["seconds"], "load_before": load}
    figures["ratio_vs_polars_decode_only"] = (
        figures["decode_only"]["lines_per_s"] / figures["polars_decode_only"]["lines_per_s"])
    figures["ratio_vs_polars_mixed"] = figures["mixed"]["lines_per_s"] / figures["polars_mixed"]["lines_per_s"]
    return figures


def main(argv: list[str] | None = None) -> None:
    """Command line: run the benchmark and print the figures as JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=5_000_000)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        mode, path = args.child
        print(json.dumps(_child_ingest(path) if mode == "ingest" else _child_polars(path)))
        return
    print(json.dumps(run_benchmark(args.lines, args.workdir), indent=2))


if __name__ == "__main__":
    main()
