"""Benchmark of the gateway loader against a bare DuckDB ``read_json`` of the same file.

Generates a Cloudflare Logpush ``http_requests``-like NDJSON file of ``--rows`` records (unix-nano
timestamps, some as strings, nested ``RequestHeaders``, a few re-delivered duplicates and one
malformed line), plain and gzip-compressed, then measures in separate child processes (so each
peak RSS is that run's alone), in the same run and on the same files:

* bare DuckDB: ``CREATE TABLE t AS SELECT * FROM read_json(path)`` into a DuckDB file, with the
  same memory limit and temp directory as a case;
* ``forensics``: ``open_case(db).ingest_gateway(path, format="cloudflare-http")``.

Figures: rows/s, MB/s (bytes on disk), peak RSS, and the ratio of forensics' throughput to the
bare load's (target >= 0.8, peak RSS <= 1 GiB).

Example:
    .venv/bin/python -m benchmarks.bench_gateway_ingest --rows 5000000 --workdir /tmp/gwbench
    .venv/bin/python -m benchmarks.bench_gateway_ingest --rows 20000 --json
    .venv/bin/python -m benchmarks.bench_gateway_ingest --variants hourly:644   # 644 small hourly .gz files
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GENERATOR_VERSION = "1"


def generate(path: Path, rows: int, *, gzip: bool = False) -> dict[str, Any]:
    """Write ``rows`` Cloudflare-like NDJSON records (plus 1 malformed line) to ``path``.

    Every 997th record is re-delivered (a duplicate line after it); every 17th has its
    timestamps as numeric strings. Returns the expected counts.

    Example:
        >>> import tempfile; p = Path(tempfile.mkdtemp()) / "cf.ndjson"
        >>> generate(p, 100)["lines"]
        102
    """
    import duckdb

    con = duckdb.connect()
    dup_every = 997
    record = """json_object(
        'RayID', printf('%016x', hash(i) >> 1),
        'EdgeStartTimestamp', CASE WHEN i % 17 = 0 THEN to_json((1788357791482000000 + i * 1000000)::VARCHAR)
                                   ELSE to_json(1788357791482000000 + i * 1000000) END,
        'EdgeEndTimestamp', 1788357791482000000 + i * 1000000 + 5123000000 + (i % 1000) * 1000000,
        'ClientRequestHost', 'api.example.net',
        'ClientRequestPath', '/client/v4/accounts/' || printf('%032x', (i % 5000) * 2654435761) || '/ai/run/@cf/zai-org/glm-5.3',
        'ClientRequestURI', '/client/v4/accounts/' || printf('%032x', (i % 5000) * 2654435761) || '/ai/run/@cf/zai-org/glm-5.3',
        'ClientRequestMethod', 'POST',
        'ClientRequestBytes', 1000 + (hash(i) % 3000000)::BIGINT,
        'ClientIP', '203.0.113.' || (i % 250)::VARCHAR,
        'EdgeResponseStatus', CASE WHEN i % 50 = 0 THEN 400 ELSE 200 END,
        'OriginResponseStatus', 200,
        'EdgeResponseBytes', (hash(i + 1) % 50000)::BIGINT,
        'EdgeResponseContentType', CASE WHEN i % 3 = 0 THEN 'application/json' ELSE 'text/event-stream' END,
        'EdgeTimeToFirstByteMs', i % 900,
        'OriginIP', '198.51.100.' || (i % 16)::VARCHAR,
        'EdgeColoCode', 'SIN',
        'ZoneName', 'example.net',
        'RequestHeaders', json_object('x-request-id', 'req_' || printf('%024x', hash(i * 7)))
    )"""
    comp = "gzip" if gzip else "none"
    # Row r (1-based line) is record i = r - 1 - (number of duplicates before it); the malformed
    # line sits in the middle. Built in SQL so 5 M rows take seconds, not minutes.
    con.execute(
        f"""
        COPY (
            SELECT line FROM (
                SELECT i AS k, 0 AS sub, {record}::VARCHAR AS line FROM range({rows}) r(i)
                UNION ALL
                SELECT i AS k, 1 AS sub, {record}::VARCHAR AS line FROM range({rows}) r(i) WHERE i % {dup_every} = 5
                UNION ALL
                SELECT {rows // 2} AS k, 2 AS sub, '{{"RayID":"broken","EdgeStartTimestamp":17883' AS line
            ) ORDER BY k, sub
        ) TO '{path}' (FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\\x01', COMPRESSION '{comp}')
        """
    )
    con.close()
    dups = len(range(5, rows, dup_every))
    return {"records": rows, "duplicates": dups, "malformed": 1, "lines": rows + dups + 1}


def generate_hourly(folder: Path, files: int, per_file: int = 230) -> dict[str, Any]:
    """Split ``files * per_file`` generated records into hourly Logpush-style ``.gz`` files.

    Cloudflare Logpush writes one small file every few minutes or hours: thousands per incident.
    Names follow Logpush (``YYYYMMDD/<start>_<end>_<hash>.log.gz``). Returns the expected counts.

    Example:
        >>> import tempfile; d = Path(tempfile.mkdtemp())
        >>> generate_hourly(d / "h", 3, 10)["files"]
        3
    """
    import datetime as dt
    import gzip as gz

    folder.mkdir(parents=True, exist_ok=True)
    single = folder.parent / f"{folder.name}.ndjson"
    expected = generate(single, files * per_file)
    lines = single.read_bytes().splitlines(keepends=True)
    single.unlink()
    t0 = dt.datetime(2026, 9, 1)
    step = -(-len(lines) // files)
    for k in range(files):
        start = t0 + dt.timedelta(hours=k)
        name = (f"{start:%Y%m%d}/{start:%Y%m%dT%H%M%SZ}_{start + dt.timedelta(hours=1):%Y%m%dT%H%M%SZ}_"
                f"{k:08x}.log.gz")
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(gz.compress(b"".join(lines[k * step:(k + 1) * step]), compresslevel=6, mtime=0))
    return {**expected, "files": files}


def _child(mode: str, path: str, db: str) -> dict[str, Any]:
    """Run one measured load in this (child) process; return seconds, CPU seconds, rows, peak RSS."""
    import forensics  # imported before the clock starts, for both modes alike

    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru0.ru_utime + ru0.ru_stime
    t0 = time.perf_counter()
    if mode == "bare":
        import duckdb

        from forensics.case import configure_connection

        con = duckdb.connect(db)
        configure_connection(con, temp_directory=db + ".tmp")
        src = (f"[{', '.join(repr(str(f)) for f in sorted(Path(path).rglob('*.gz')))}]" if Path(path).is_dir()
               else f"'{path}'")
        con.execute(f"CREATE TABLE t AS SELECT * FROM read_json({src}, format='newline_delimited', "
                    f"ignore_errors=true)")
        con.execute("CHECKPOINT")
        row = con.execute("SELECT count(*) FROM t").fetchone()
        rows = int(row[0]) if row else 0
        con.close()
        extra: dict[str, Any] = {}
    else:
        case = forensics.open_case(db)
        summary = case.ingest_gateway(path, format="cloudflare-http", quiet=True)
        case.con.execute("CHECKPOINT")
        rows = summary.lines_read
        extra = {"loaded": summary.rows_loaded, "rejected": summary.rows_rejected,
                 "duplicate": summary.rows_duplicate, "reconciles": all(f.reconciles for f in summary.files),
                 "files": len(summary.files)}
        case.close()
    seconds = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"mode": mode, "seconds": seconds, "cpu_seconds": ru.ru_utime + ru.ru_stime - cpu0,
            "rows": rows, "peak_rss_mib": _peak_rss_mib(), **extra}


def _peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM: unlike ru_maxrss it does not inherit the parent's peak)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _measure(mode: str, path: Path, workdir: Path) -> dict[str, Any]:
    db = workdir / f"{mode}-{path.name}.duckdb"
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    shutil.rmtree(str(db) + ".tmp", ignore_errors=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_gateway_ingest", "--child", mode, str(path), str(db)],
        check=True, capture_output=True, text=True, env=env,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size
    result["file_bytes"] = size
    result["rows_per_s"] = result["rows"] / result["seconds"]
    result["mb_per_s"] = size / 1e6 / result["seconds"]
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    shutil.rmtree(str(db) + ".tmp", ignore_errors=True)
    return result


def run_benchmark(rows: int = 5_000_000, workdir: str | Path | None = None,
                  variants: tuple[str, ...] = ("plain", "gz"), repeat: int = 1,
                  progress: bool = False) -> dict[str, Any]:
    """Generate (or reuse) the inputs, run bare DuckDB and forensics on each; return the figures.

    Runs alternate bare/forensics ``repeat`` times, in the same run on the same files; each side's
    figures are the medians of its runs (seconds, CPU seconds, peak RSS), with the load average
    before and after beside them.

    Example:
        >>> figs = run_benchmark(rows=2000, variants=("plain",))   # doctest: +SKIP
        >>> figs["plain"]["ratio_rows_per_s"] > 0                    # doctest: +SKIP
        True
    """
    wd = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="gwbench-"))
    wd.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"rows": rows, "generator_version": GENERATOR_VERSION}
    for variant in variants:
        hourly = variant.startswith("hourly")
        files = int(variant.split(":")[1]) if hourly and ":" in variant else 644
        name = f"cloudflare-{files}-hourly" if hourly else f"cloudflare-{rows}.ndjson" + (".gz" if variant == "gz" else "")
        path = wd / name
        meta = wd / (name + ".json")
        if not (path.exists() and meta.exists()
                and json.loads(meta.read_text()).get("generator_version") == GENERATOR_VERSION):
            t = time.perf_counter()
            shutil.rmtree(path, ignore_errors=True) if hourly else None
            expected = generate_hourly(path, files) if hourly else generate(path, rows, gzip=variant == "gz")
            expected["generator_version"] = GENERATOR_VERSION
            expected["generate_seconds"] = time.perf_counter() - t
            meta.write_text(json.dumps(expected))
        expected = json.loads(meta.read_text())
        runs: dict[str, list[dict[str, Any]]] = {"bare": [], "forensics": []}
        load_before = os.getloadavg()
        for _ in range(repeat):
            for mode in ("bare", "forensics"):
                runs[mode].append(_measure(mode, path, wd))
        load_after = os.getloadavg()
        bare, ours = (_median_run(runs[m]) for m in ("bare", "forensics"))
        figures[variant] = entry = {
            "file": str(path),
            "file_bytes": bare["file_bytes"],
            "expected": expected,
            "bare": bare,
            "forensics": ours,
            "ratio_rows_per_s": ours["rows_per_s"] / bare["rows_per_s"],
            "ratio_mb_per_s": ours["mb_per_s"] / bare["mb_per_s"],
            "ratio_peak_rss": ours["peak_rss_mib"] / bare["peak_rss_mib"],
            # CPU time is what a busy, shared machine cannot distort: the same work, whatever the load
            "ratio_cpu": bare["cpu_seconds"] / ours["cpu_seconds"],
            "runs": repeat,
            "loadavg_before": list(load_before),
            "loadavg_after": list(load_after),
            "counts_ok": ours.get("reconciles", False) and ours["rows"] == expected["lines"]
            and ours.get("duplicate") == expected["duplicates"] and ours.get("rejected") == expected["malformed"],
        }
        if progress:
            _print({"rows": rows, variant: entry})
    return figures


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run by wall time, with the medians of CPU seconds and peak RSS (and every run's seconds)."""
    import statistics

    mid = sorted(runs, key=lambda r: r["seconds"])[(len(runs) - 1) // 2]
    out = dict(mid)
    for key in ("seconds", "cpu_seconds", "peak_rss_mib"):
        out[key] = statistics.median(r[key] for r in runs)
    out["rows_per_s"] = out["rows"] / out["seconds"]
    out["mb_per_s"] = out["file_bytes"] / 1e6 / out["seconds"]
    out["all_seconds"] = [r["seconds"] for r in runs]
    return out


def _print(figs: dict[str, Any]) -> None:
    for variant in figs:
        if not isinstance(figs[variant], dict) or "bare" not in figs[variant]:
            continue
        v = figs[variant]
        print(f"\n[{variant}] {v['file']} ({v['file_bytes'] / 1e6:,.0f} MB on disk)")
        for mode in ("bare", "forensics"):
            r = v[mode]
            print(f"  {mode:<10} {r['seconds']:8.2f} s  {r['rows_per_s']:>12,.0f} rows/s  "
                  f"{r['mb_per_s']:8.1f} MB/s  CPU {r['cpu_seconds']:7.2f} s  peak RSS {r['peak_rss_mib']:7.0f} MiB")
        print(f"  ratio forensics/bare: rows/s {v['ratio_rows_per_s']:.2f}, MB/s {v['ratio_mb_per_s']:.2f}, "
              f"CPU-time {v['ratio_cpu']:.2f}, peak RSS {v['ratio_peak_rss']:.2f}; counts reconcile: {v['counts_ok']}")
        print(f"  medians of {v['runs']} run(s) each, alternating; load average before "
              f"{' '.join(f'{x:.2f}' for x in v['loadavg_before'])}, after "
              f"{' '.join(f'{x:.2f}' for x in v['loadavg_after'])}")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--workdir", default=None, help="where inputs are generated (and reused)")
    ap.add_argument("--variants", default="plain,gz")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "PATH", "DB"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(*args.child)))
        return 0
    figs = run_benchmark(args.rows, args.workdir, tuple(args.variants.split(",")), args.repeat,
                         progress=not args.json)
    if args.json:
        print(json.dumps(figs, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
