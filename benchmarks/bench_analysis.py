"""Benchmark of the analysis queries on an ingested incident.

Opens a case database (read-only), runs every query of ``queries/`` through its Python function
with default parameters and fully materialises the result (``to_arrow_table``), ``--runs``
times; reports per query the best and median seconds, the row count, and the total. Targets at
1 M requests: every query together < 10 s, ``affected_requests`` alone < 1 s.

With ``--stream`` each result is read in record batches instead, as the exports and ``forensics
chain`` read it (``forensics.outputs.export.record_batches``): the peak RSS is then the library's
own, not that of a whole result held as Arrow (``request_chain`` at 1 M: a 583 MiB table). The
process's peak RSS is reported either way (run one query per process for a query's own peak).

With ``--generate N`` it first builds the case: ``forensics.sample.generate(DIR, requests=N)``,
then gateway and engine ingest (slow at 1 M: minutes; the figures exclude it).

With ``--refresh`` it measures instead the rebuild of the derived facts (``case.refresh(force=True)``,
what every ingest ends with) on the case opened writable, under the load memory budget: wall and
CPU seconds of the refresh and of each fact, and the process's peak RSS (run it in a fresh
process per measurement: the peak is the process's).

Example:
    .venv/bin/python -m benchmarks.bench_analysis --case /tmp/big/case.duckdb --runs 3
    .venv/bin/python -m benchmarks.bench_analysis --generate 1000000 --dir /tmp/big
    .venv/bin/python -m benchmarks.bench_analysis --case /tmp/big/case.duckdb --refresh
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

TARGET_TOTAL_S = 10.0
TARGET_AFFECTED_S = 1.0


def build_case(directory: Path, requests: int) -> Path:
    """Generate an incident of ``requests`` requests into ``directory`` and ingest it."""
    import forensics
    from forensics.sample import generate

    data = directory / "data"
    if not (data / "truth.json").exists():
        generate(data, requests=requests)
    case_path = directory / "case.duckdb"
    if not case_path.exists():
        with forensics.open_case(case_path) as case:
            case.ingest_gateway(data / "gateway")
            case.ingest_engine(data / "engine", tz="Asia/Singapore")
    return case_path


def measure(
    case_path: str | Path,
    runs: int = 3,
    threads: int | None = None,
    skip: tuple[str, ...] = (),
    memory_limit: str | None = None,
    stream: bool = False,
) -> dict[str, Any]:
    """Run every analysis query ``runs`` times on the case; return the figures.

    ``stream``: read each result in record batches (as an export does) instead of whole.

    Example:
        >>> figures = measure("/tmp/big/case.duckdb", runs=1)     # doctest: +SKIP
        >>> figures["queries"]["affected_requests"]["best_s"] < 1  # doctest: +SKIP
        True
    """
    import forensics
    from forensics import analysis
    from forensics.outputs.export import record_batches
    from forensics.sqlfiles import query_names

    def consume(rel: Any) -> int:
        if stream:
            return sum(batch.num_rows for batch in record_batches(rel))
        return int(rel.to_arrow_table().num_rows)

    kwargs: dict[str, Any] = {"threads": threads}
    if memory_limit is not None:
        kwargs["query_memory_limit"] = memory_limit
    case = forensics.open_case(case_path, read_only=True, **kwargs)
    try:
        sizes = {
            table: case.con.sql(f"SELECT count(*) FROM {table}").fetchall()[0][0]
            for table in ("gateway_requests", "engine_requests", "engine_batches", "engine_starts")
        }
        queries: dict[str, dict[str, Any]] = {}
        for name in query_names():
            if name in skip:
                continue
            func = getattr(analysis, name)
            times: list[float] = []
            cpu: list[float] = []
            rows = 0
            for _ in range(runs):
                t0, c0 = time.perf_counter(), time.process_time()
                try:
                    rows = consume(func(case))
                except Exception as exc:  # an out-of-memory query is a figure too, not a crash
                    queries[name] = {"error": str(exc).splitlines()[0][:200]}
                    break
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            else:
                queries[name] = {"best_s": min(times), "median_s": statistics.median(times),
                                 "cpu_s": statistics.median(cpu), "rows": rows}
    finally:
        case.close()
    ok = [q for q in queries.values() if "error" not in q]
    total_best = sum(q["best_s"] for q in ok)
    total_median = sum(q["median_s"] for q in ok)
    return {
        "case": str(case_path),
        "runs": runs,
        "stream": stream,
        "peak_rss_mib": _peak_rss_bytes() / 2**20,
        "table_rows": sizes,
        "queries": queries,
        "total_best_s": total_best,
        "total_median_s": total_median,
        "targets": {
            "total_s": TARGET_TOTAL_S,
            "affected_s": TARGET_AFFECTED_S,
            "total_met": total_median < TARGET_TOTAL_S and len(ok) == len(queries),
            "affected_met": queries.get("affected_requests", {}).get("median_s", 1e9) < TARGET_AFFECTED_S,
        },
    }


def _peak_rss_bytes() -> int:
    """Peak resident set of this process (VmHWM; ru_maxrss where /proc is missing)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class _FactTimer:
    """``forensics.facts._create`` with the wall and CPU seconds of building each fact noted (all of
    its statements: a table with uncompressed columns is declared, then filled)."""

    def __init__(self, create: Any) -> None:
        self._create = create
        self.times: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def __call__(self, con: Any, name: str, **kwargs: Any) -> None:
        t0, c0 = time.perf_counter(), _cpu_s()
        try:
            self._create(con, name, **kwargs)
        finally:
            self.times[name] = time.perf_counter() - t0
            self.cpu[name] = _cpu_s() - c0


def measure_refresh(case_path: str | Path, threads: int | None = None) -> dict[str, Any]:
    """Rebuild every derived fact of the case once (``refresh(force=True)``); return the figures.

    Example:
        >>> figures = measure_refresh("/tmp/big/case.duckdb")   # doctest: +SKIP
        >>> sorted(figures)                                      # doctest: +SKIP
        ['case', 'cpu_s', 'facts_cpu_s', 'facts_s', 'peak_rss_mib', 'rss_before_mib', 'wall_s']
    """
    import forensics

    case = forensics.open_case(case_path, threads=threads)
    try:
        case.refresh()  # bring the facts up to date first: the measured run is a full rebuild
        from forensics import facts

        timer = _FactTimer(facts._create)
        facts._create = timer  # type: ignore[assignment]
        rss_before = _peak_rss_bytes()
        t0, c0 = time.perf_counter(), _cpu_s()
        try:
            case.refresh(force=True)
        finally:
            facts._create = timer._create
        wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    finally:
        case.close()
    return {"case": str(case_path), "wall_s": wall, "cpu_s": cpu, "facts_s": timer.times, "facts_cpu_s": timer.cpu,
            "rss_before_mib": rss_before / 2**20, "peak_rss_mib": _peak_rss_bytes() / 2**20}


def render_refresh(figures: dict[str, Any]) -> str:
    """The refresh figures as a small text table."""
    lines = [f"case: {figures['case']}",
             f"refresh(force=True): {figures['wall_s']:.2f} s wall, {figures['cpu_s']:.2f} CPU-s, "
             f"peak RSS {figures['peak_rss_mib']:,.0f} MiB (before: {figures['rss_before_mib']:,.0f} MiB)"]
    lines += [f"  {name:<20} {s:>8.3f} s {figures['facts_cpu_s'][name]:>8.3f} CPU-s"
              for name, s in figures["facts_s"].items()]
    return "\n".join(lines)


def render(figures: dict[str, Any]) -> str:
    """The figures as a small text table."""
    lines = [f"case: {figures['case']}  (runs: {figures['runs']}; results "
             f"{'streamed in batches' if figures.get('stream') else 'read whole'}; peak RSS "
             f"{figures.get('peak_rss_mib', 0):,.0f} MiB)",
             "rows: " + ", ".join(f"{k}={v:,}" for k, v in figures["table_rows"].items()),
             f"{'query':<20} {'best s':>8} {'median s':>9} {'cpu s':>8} {'rows':>9}"]
    for name, q in figures["queries"].items():
        if "error" in q:
            lines.append(f"{name:<20} failed: {q['error']}")
            continue
        lines.append(f"{name:<20} {q['best_s']:>8.3f} {q['median_s']:>9.3f} {q['cpu_s']:>8.3f} {q['rows']:>9,}")
    t = figures["targets"]
    lines.append(f"{'all queries':<20} {figures['total_best_s']:>8.3f} {figures['total_median_s']:>9.3f}"
                 f"   target < {t['total_s']} s: {'met' if t['total_met'] else 'MISSED'};"
                 f" affected < {t['affected_s']} s: {'met' if t['affected_met'] else 'MISSED'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line: measure a case (or generate one first) and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--case", type=Path, help="An ingested case database.")
    parser.add_argument("--generate", type=int, metavar="N", help="Generate and ingest N requests first.")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/forensics-bench-analysis"),
                        help="Where --generate writes the incident and the case.")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--skip", action="append", default=[], metavar="QUERY", help="Leave a query out.")
    parser.add_argument("--memory-limit", default=None,
                        help="DuckDB memory limit of the queries (default: the toolkit's query limit).")
    parser.add_argument("--refresh", action="store_true",
                        help="Measure the rebuild of the derived facts instead (the case is opened writable).")
    parser.add_argument("--stream", action="store_true",
                        help="Read each result in record batches (as the exports do) instead of whole.")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args(argv)
    if args.case is None and args.generate is None:
        parser.error("pass --case CASE.duckdb or --generate N")
    case_path = args.case if args.case is not None else build_case(args.dir, args.generate)
    if args.refresh:
        refreshed = measure_refresh(case_path, threads=args.threads)
        print(json.dumps(refreshed, indent=2) if args.json else render_refresh(refreshed))
        return 0
    figures = measure(case_path, runs=args.runs, threads=args.threads, skip=tuple(args.skip),
                      memory_limit=args.memory_limit, stream=args.stream)
    print(json.dumps(figures, indent=2) if args.json else render(figures))
    return 0 if figures["targets"]["total_met"] and figures["targets"]["affected_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
