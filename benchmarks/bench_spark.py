"""Benchmark of the Spark path beside DuckDB: the same incident ingested and queried by both.

Generates an incident (``forensics.sample.generate``, ``--requests``, default 100 k), then measures
on this machine, each phase timed (wall) with the CPU seconds of the whole process tree (driver,
JVM, Python workers):

* ``spark:startup``   the fixed cost: starting the JVM and a ``local[N]`` session, first query;
* ``duckdb:ingest``   the local loaders into a DuckDB case (``forensics ingest CASE.duckdb``);
* ``spark:ingest``    the Spark ingest of the same files into a Parquet case (the same loaders on
                      the executors, then the whole-case passes);
* ``duckdb:queries``  every analysis function on the DuckDB case;
* ``spark:open``      opening the Parquet case on Spark (tables and views registered);
* ``spark:queries``   every analysis function on the Spark case;

and checks that both give the same affected list. From the per-core rates it derives when a
cluster of N cores finishes sooner than this machine (``docs/scale-out.md``).

Example:
    .venv/bin/python -m benchmarks.bench_spark --requests 100000 --dir /tmp/bench-spark
    .venv/bin/python -m benchmarks.bench_spark --requests 100000 --out benchmarks/SPARK_RESULTS.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENGINE_TZ = "Asia/Singapore"
CLUSTER_CORES = (8, 32, 128, 512)


def _tree_cpu_s(root: int) -> float:
    """utime + stime of ``root`` and every live descendant (the JVM and its Python workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        parents[pid] = int(fields[1])
        times[pid] = (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
    total = 0.0
    for pid, t in times.items():
        p = pid
        while p not in (0, 1) and p != root:
            p = parents.get(p, 0)
        if p == root:
            total += t
    return total


def _measure(name: str, func: Callable[[], Any], results: list[dict[str, Any]]) -> Any:
    cpu0 = _tree_cpu_s(os.getpid())
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    out = func()
    wall = time.perf_counter() - t0
    cpu = _tree_cpu_s(os.getpid()) - cpu0
    results.append({"phase": name, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                    "load": round((load0 + os.getloadavg()[0]) / 2, 2)})
    print(f"{name:<16} {wall:8.2f} s wall {cpu:8.2f} s CPU  load {results[-1]['load']}", flush=True)
    return out


def _queries() -> list[str]:
    from forensics.cli import ANALYSIS_COMMANDS

    return list(ANALYSIS_COMMANDS.values())


def _run_all(case: Any) -> dict[str, int]:
    import forensics.analysis as analysis

    return {n: len(getattr(analysis, n)(case).fetchall()) for n in _queries()}


def run(requests: int, work: Path, master: str) -> dict[str, Any]:
    """Generate, ingest and query one incident on both engines; the figures as a dict."""
    import forensics
    from forensics.sample import generate

    data = work / "data"
    if not (data / "truth.json").exists():
        generate(data, requests=requests)
    lines = sum(1 for p in (data / "engine").rglob("*") if p.is_file() for _ in _open_lines(p))
    now = dt.datetime(2026, 10, 1)
    results: list[dict[str, Any]] = []
    duck = work / "case.duckdb"
    duck.unlink(missing_ok=True)

    def duck_ingest() -> int:
        with forensics.open_case(duck, now=now) as case:
            n = case.ingest_gateway([str(data / "gateway")]).lines_read
            return n + case.ingest_engine([str(data / "engine")], tz=ENGINE_TZ).lines_read

    read = _measure("duckdb:ingest", duck_ingest, results)
    with forensics.open_case(duck, read_only=True) as case:
        local_rows = _measure("duckdb:queries", lambda: _run_all(case), results)
        local_affected = sorted(map(str, forensics.affected_requests(case).fetchall()))

    from forensics.spark import ingest, session

    spark = _measure("spark:startup", lambda: session(master).sql("SELECT 1").collect() and session(master),
                     results)
    pq = work / "case_parquet"
    shutil.rmtree(pq, ignore_errors=True)
    done = _measure("spark:ingest", lambda: ingest(pq, gateway=[str(data / "gateway")],
                                                   engine=[str(data / "engine")], engine_tz=ENGINE_TZ,
                                                   spark=spark, now=now), results)
    case = _measure("spark:open", lambda: forensics.open_case(pq, backend="spark"), results)
    spark_rows = _measure("spark:queries", lambda: _run_all(case), results)
    spark_affected = sorted(map(str, forensics.affected_requests(case).fetchall()))
    cores = spark.sparkContext.defaultParallelism
    return {
        "requests": requests, "master": master, "cores": cores, "lines_read": read,
        "engine_lines": lines, "spark_lines_read": done.summary.lines_read,
        "phases": results, "rows_duckdb": local_rows, "rows_spark": spark_rows,
        "same_affected": local_affected == spark_affected, "n_affected": len(local_affected),
        "machine": {"cpus": os.cpu_count()},
        "timings": done.timings,
    }


def _open_lines(path: Path) -> Any:
    from forensics.sources.files import open_decompressed

    with open_decompressed(path) as f:
        yield from f


def break_even(fig: dict[str, Any]) -> list[dict[str, Any]]:
    """When N cores of Spark finish before this machine's DuckDB, from the measured CPU per line.

    CPU seconds, not wall: they do not depend on what else the machine runs. DuckDB on this
    machine's C cores: ``t_d(x) = x c_d / C`` (c_d: CPU-s per line, ingest + every query; it
    assumes DuckDB keeps every core busy, which favours DuckDB). Spark on N cores:
    ``t_s(x) = F + x c_s / N`` (c_s the same for Spark, F the fixed wall cost: start-up + opening
    the case). Spark wins for ``x > F / (c_d / C - c_s / N)``, never while ``c_s / N >= c_d / C``.
    """
    ph = {p["phase"]: p for p in fig["phases"]}
    lines = fig["lines_read"]
    c_d = (ph["duckdb:ingest"]["cpu_s"] + ph["duckdb:queries"]["cpu_s"]) / lines
    c_s = (ph["spark:ingest"]["cpu_s"] + ph["spark:queries"]["cpu_s"]) / lines
    cores = fig["machine"]["cpus"] or fig["cores"]
    fixed = ph["spark:startup"]["wall_s"] + ph["spark:open"]["wall_s"]
    rows = []
    for n in CLUSTER_CORES:
        gain = c_d / cores - c_s / n
        rows.append({"cores": n, "break_even_lines": None if gain <= 0 else int(fixed / gain),
                     "lines_per_s_cluster": int(n / c_s)})
    return rows


def render(fig: dict[str, Any]) -> str:
    ph = {p["phase"]: p for p in fig["phases"]}
    lines = fig["lines_read"]
    out = [
        f"# Spark path beside DuckDB: {fig['requests']:,} requests, {fig['master']}",
        "",
        "Generated by `python -m benchmarks.bench_spark` (part of `make bench`). One run; wall seconds and",
        "CPU seconds of the whole process tree (driver, JVM, Python workers); load = the machine's",
        "1-minute load average during the phase.",
        "",
        f"{lines:,} lines and records read ({fig['engine_lines']:,} engine lines); the Spark ingest read "
        f"{fig['spark_lines_read']:,}. Same affected list on both engines: **{fig['same_affected']}** "
        f"({fig['n_affected']} rows).",
        "",
        "| phase | wall s | CPU s | load |",
        "|---|---|---|---|",
    ]
    out += [f"| {p['phase']} | {p['wall_s']} | {p['cpu_s']} | {p['load']} |" for p in fig["phases"]]
    fixed = ph["spark:startup"]["wall_s"] + ph["spark:open"]["wall_s"]
    ing_s = ph["spark:ingest"]["wall_s"]
    out += [
        "",
        f"Fixed cost of the Spark path: **{fixed:.1f} s** (session start-up {ph['spark:startup']['wall_s']} s, "
        f"opening the case {ph['spark:open']['wall_s']} s), paid once per process.",
        f"Spark ingest: {lines / ing_s:,.0f} lines/s wall on {fig['cores']} cores; per core (CPU): "
        f"**{ph['spark:ingest']['cpu_s'] / lines * 1e6:.1f} CPU-µs per line** = "
        f"{lines / ph['spark:ingest']['cpu_s']:,.0f} lines per CPU-second; DuckDB ingest "
        f"{ph['duckdb:ingest']['cpu_s'] / lines * 1e6:.1f} CPU-µs per line "
        f"({lines / ph['duckdb:ingest']['wall_s']:,.0f} lines/s wall). Ingest + every query: Spark "
        f"{(ph['spark:ingest']['cpu_s'] + ph['spark:queries']['cpu_s']) / lines * 1e6:.1f}, DuckDB "
        f"{(ph['duckdb:ingest']['cpu_s'] + ph['duckdb:queries']['cpu_s']) / lines * 1e6:.1f} CPU-µs per line.",
        "",
        "When a cluster of N cores finishes first (ingest + every query; CPU per line as measured "
        "here, DuckDB on all this machine's cores, the fixed cost above):",
        "",
        "| cores | Spark lines/s | Spark is faster above |",
        "|---|---|---|",
    ]
    for r in break_even(fig):
        be = "never (per-core rate too low)" if r["break_even_lines"] is None else f"{r['break_even_lines']:,} lines"
        out.append(f"| {r['cores']} | {r['lines_per_s_cluster']:,} | {be} |")
    out += ["", "Ingest phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in fig["timings"].items()), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--dir", type=Path, default=Path("/tmp/forensics-bench-spark"))
    p.add_argument("--master", default="local[2]")
    p.add_argument("--out", type=Path, default=None, help="Write the Markdown result here.")
    p.add_argument("--json", type=Path, default=None, help="Write the raw figures here.")
    args = p.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    fig = run(args.requests, args.dir, args.master)
    fig["break_even"] = break_even(fig)
    text = render(fig)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(fig, indent=2, default=str))
    return 0 if fig["same_affected"] else 1


if __name__ == "__main__":
    sys.exit(main())
