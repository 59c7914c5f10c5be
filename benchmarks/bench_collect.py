"""What a collection wrapper costs: the same engine logs read plain and wrapped, by the collection stage.

Generates an incident (``forensics.sample.generate``), writes its engine logs as each wrapper
writes them (``forensics.sample.wrap``), then reads every tree with ``collect.read_lines`` in a
child process per run and reports, per wrapper, wall and CPU seconds, lines/s and the wrapper's
extra CPU per line over plain. The extra is set against the issue's budget: a wrapped log may cost
at most 10 % more than the same log plain; at the engine-ingest target (0.6 M lines/s on two
cores, 3.33 µs of CPU per line) that is 0.33 µs of CPU per line.

``--baseline DIR`` measures a second checkout of the code too (``git archive <commit> | tar -x
-C DIR``), interleaved with this one run by run on the same trees (A B A B: the load changes),
and prints both tables and the change per wrapper.

Example:
    .venv/bin/python -m benchmarks.bench_collect --requests 20000 --runs 3 --wrappers cri,docker-json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: the engine-ingest target of issue #14, per line (two cores busy)
TARGET_LINES_PER_S = 600_000


def read_tree(root: str) -> dict[str, Any]:
    """Read every file under ``root`` with the collection stage; text materialised as Arrow."""
    import resource

    from forensics.sources import collect
    from forensics.sources.warm import warm_kernels

    # compiled passes loaded (from numba's cache) untimed, as in an ingest, where the scanner has
    # loaded numba already
    warm_kernels()
    files = sorted(p for p in Path(root).rglob("*") if p.is_file() and not p.is_symlink())
    t0, c0 = time.perf_counter(), time.process_time()
    lines = logical = nbytes = 0
    for f in files:
        r = collect.read_lines(f, context={"tz": "Asia/Singapore"})
        for b in r:
            # the scanner reads ``buf``/``starts``/``ends`` in place: nothing more to hand off
            nbytes += int((b.ends - b.starts).sum())
        lines += r.result.lines
        logical += r.result.logical
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"files": len(files), "lines": lines, "logical": logical, "text_bytes": nbytes, "wall_s": wall,
            "cpu_s": cpu, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def _child(root: Path, code: Path | None = None) -> dict[str, Any]:
    """Read ``root`` in a child process, with this checkout's code or the one in ``code``."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_collect", "--child", str(root)],
                         capture_output=True, text=True, check=True, cwd=code)
    res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--wrappers", default="cri,docker-json,kubectl,journald-json,loki-jsonl,shipper-ndjson,cloudwatch")
    ap.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "forensics-bench-collect")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a second checkout of the code (git archive), measured interleaved with this one")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(read_tree(args.child)))
        return 0
    from forensics.sample import generate
    from forensics.sample.wrap import wrap_tree

    data = args.work / f"r{args.requests}"
    if not (data / "engine").exists():
        generate(data, requests=args.requests)
    trees = {"plain": data / "engine"}
    for w in args.wrappers.split(","):
        dst = args.work / f"r{args.requests}-{w}"
        if not dst.exists():
            wrap_tree(data / "engine", dst, w, tz="Asia/Singapore")
        trees[w] = dst
    codes: dict[str, Path | None] = {"this": Path(__file__).resolve().parents[1]}
    if args.baseline is not None:
        codes = {"baseline": args.baseline.resolve(), "this": Path(__file__).resolve().parents[1]}
    results: dict[str, dict[str, list[dict[str, Any]]]] = {c: {k: [] for k in trees} for c in codes}
    loads = []
    for _ in range(args.runs):
        for name, root in trees.items():  # interleaved: A/B in one run, the same machine state
            for code, where in codes.items():
                loads.append(os.getloadavg()[0])
                results[code][name].append(_child(root, where))
    print(f"engine logs of {args.requests:,} requests: {results['this']['plain'][0]['lines']:,} lines; "
          f"runs {args.runs}; load average {min(loads):.1f}-{max(loads):.1f}")
    extras = {code: _table(code if len(codes) > 1 else "", res) for code, res in results.items()}
    if len(codes) > 1:
        print(f"{'wrapper':16} {'baseline µs/line':>16} {'this µs/line':>13} {'change':>8}")
        for name in trees:
            if name != "plain":
                a, b = extras["baseline"][name], extras["this"][name]
                print(f"{name:16} {a:>16.3f} {b:>13.3f} {b - a:>+8.3f}")
    return 0


def _table(title: str, results: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """Print one code's table (medians of the runs); the extra µs of CPU per line per wrapper."""
    plain = results["plain"]
    p_cpu = statistics.median(r["cpu_s"] for r in plain)
    p_wall = statistics.median(r["wall_s"] for r in plain)
    budget_us = 0.10 * 2 * 1e6 / TARGET_LINES_PER_S  # 10 % of the CPU per line at the target, two cores
    if title:
        print(f"-- {title}")
    print(f"{'wrapper':16} {'lines':>10} {'wall s':>8} {'CPU s':>8} {'lines/s':>10} {'CPU x plain':>11} "
          f"{'extra µs/line':>13} {'of budget':>10} {'RSS MiB':>8}")
    extras: dict[str, float] = {}
    for name, rs in results.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        cpu = statistics.median(r["cpu_s"] for r in rs)
        lines = rs[0]["lines"]
        extra = (cpu - p_cpu) / max(lines, 1) * 1e6 if name != "plain" else 0.0
        extras[name] = extra
        print(f"{name:16} {lines:>10,} {wall:>8.2f} {cpu:>8.2f} {lines / wall:>10,.0f} {cpu / p_cpu:>11.2f} "
              f"{extra:>13.3f} {extra / budget_us:>10.0%} {max(r['peak_rss_kib'] for r in rs) / 1024:>8.0f}")
    print(f"(plain: {p_wall:.2f} s wall; budget = 10 % of the CPU per line of a 0.6 M lines/s ingest on two "
          f"cores = {budget_us:.2f} µs)")
    return extras


if __name__ == "__main__":
    raise SystemExit(main())
