"""The Markdown report of a suite run (``benchmarks/RESULTS.md``) and its raw JSON.

Every figure is a median over the measured runs with the min–max range beside it; rows/s and MB/s
are computed from the median wall time; peak RSS is the largest over the runs.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import statistics
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.layout import truth_leaks

if TYPE_CHECKING:
    from benchmarks.harness import Suite

GIB = 2**30
MIB = 2**20

#: sections every report has, in order (the smoke test checks them)
SECTIONS = (
    "## Machine",
    "## Data sets",
    "## Targets",
    "## Ingest: toolkit vs bare DuckDB",
    "## Analysis queries and outputs",
    "## End to end: toolkit vs pandas",
    "## Correctness: affected sets",
    "## Cost curve",
    "## Analysis of the figures",
    "## Failures",
    "## How it was measured",
)

TARGETS = {
    "gateway": 0.8,  # toolkit throughput / bare DuckDB throughput
    "engine_lines_per_s": 600_000,
    "analysis_1m_s": 10.0,
    "affected_1m_s": 1.0,
    "pandas_speedup": 15.0,
    "rss_bytes": GIB,
    "rss_gateway_rows": 5_000_000,
    "wrapper_ratio": 1.10,  # a collection-wrapped log costs at most 10 % more than plain (#11, #14)
    "engine_vs_bare": 2.3,  # engine ingest at least 2.3x as fast as a bare CREATE TABLE of the lines (#14)
    "engine_gz_ratio": 1.15,  # the same logs gzip-compressed cost at most 15 % more than plain (#14)
}


# -- machine --------------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total() -> int:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _version(module: str) -> str:
    try:
        mod = __import__(module)
    except ImportError:
        return "not installed"
    return str(getattr(mod, "__version__", "?"))


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def machine_info() -> dict[str, Any]:
    """CPU, cores, RAM, OS and library versions of this machine."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "ram_bytes": _mem_total(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "duckdb": _version("duckdb"),
        "pandas": _version("pandas"),
        "pyarrow": _version("pyarrow"),
        "polars": _version("polars"),
        "forensics": _version("forensics"),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "dirty_files": len([x for x in _git("status", "--porcelain", "--untracked-files=no").splitlines() if x.strip()]),
    }


def loadavg() -> tuple[float, float, float] | None:
    """The 1/5/15-minute load averages, or None where unavailable."""
    try:
        return os.getloadavg()
    except OSError:
        return None


# -- statistics -----------------------------------------------------------------------------------


@dataclass
class Stat:
    """Summary of one step at one scale over its runs."""

    key: str
    n: int
    median: float
    lo: float
    hi: float
    rows: int
    bytes: int
    rows_out: int | None
    peak_rss: int
    cpu_s: float
    records: list[dict[str, Any]]

    @property
    def rows_per_s(self) -> float:
        """Rows read per second at the median time."""
        return self.rows / self.median if self.median > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        """Decompressed MB read per second at the median time."""
        return self.bytes / 1e6 / self.median if self.median > 0 else 0.0

    def time(self) -> str:
        """``median (min–max)`` in seconds."""
        if self.n == 1:
            return f"{_s(self.median)}"
        return f"{_s(self.median)} ({_s(self.lo)}–{_s(self.hi)})"


def _s(x: float) -> str:
    if x >= 100:
        return f"{x:.0f} s"
    if x >= 10:
        return f"{x:.1f} s"
    if x >= 0.1:
        return f"{x:.2f} s"
    return f"{x * 1000:.0f} ms"


def _rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.0f} k"
    return f"{x:.0f}"


def _mib(b: int | float | None) -> str:
    if not b:
        return "—"
    return f"{b / MIB:,.0f} MiB"


def stats(results: Iterable[dict[str, Any]]) -> dict[tuple[str, str], Stat]:
    """Group successful step results by (scale, key) and summarise them."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        if r.get("ok") and not str(r.get("key", "")).startswith("profile:"):
            groups.setdefault((r["scale"], r["key"]), []).append(r)
    out: dict[tuple[str, str], Stat] = {}
    for (scale, key), recs in groups.items():
        times = [float(r["wall_s"]) for r in recs]
        out[(scale, key)] = Stat(
            key=key,
            n=len(recs),
            median=statistics.median(times),
            lo=min(times),
            hi=max(times),
            rows=int(recs[0].get("rows") or 0),
            bytes=int(recs[0].get("bytes") or 0),
            rows_out=recs[0].get("rows_out"),
            peak_rss=max(int(r.get("peak_rss") or 0) for r in recs),
            cpu_s=statistics.median(float(r.get("cpu_s") or 0) for r in recs),
            records=recs,
        )
    return out


# -- affected-set comparison --------------------------------------------------------------------

_ID_KEYS = ("request_id", "header_request_id", "x_request_id", "ray_id", "gateway_request_id",
            "litellm_request_id", "edge_request_id", "cf_ray_id")


def _ids(record: dict[str, Any]) -> set[str]:
    out = set()
    for k, v in record.items():
        if v is None or isinstance(v, dict | list):
            continue
        if k in _ID_KEYS or (k.endswith("request_id") and "tenant" not in k):
            out.add(str(v))
    return out


def compare_to_truth(records: list[dict[str, Any]], leaks: list[dict[str, Any]]) -> dict[str, Any]:
    """Match affected records against truth leaks by any shared request id.

    Returns the number of records, leaks found, leaks missed, records matching no leak, and the
    sets themselves (``found``: indexes of leaks; ``extra``: primary ids of unmatched records).

    Example:
        >>> r = compare_to_truth([{"request_id": "a"}, {"request_id": "z"}],
        ...                      [{"request_id": "a"}, {"request_id": "b"}])
        >>> r["n_found"], r["n_missed"], r["n_extra"]
        (1, 1, 1)
    """
    index: dict[str, int] = {}
    for i, leak in enumerate(leaks):
        for x in _ids(leak):
            index.setdefault(x, i)
    found: set[int] = set()
    extra: set[str] = set()
    for r in records:
        hits = {index[x] for x in _ids(r) if x in index}
        if hits:
            found |= hits
        else:
            extra.add(str(r.get("request_id") or r.get("header_request_id")))
    return {
        "n_records": len(records),
        "n_found": len(found),
        "n_missed": len(leaks) - len(found),
        "n_extra": len(extra),
        "found": found,
        "extra": extra,
    }


def _confirmed(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    if records and "confidence" in records[0]:
        conf = [r for r in records if str(r.get("confidence")) == "confirmed"]
        return conf, len(records) - len(conf)
    return records, 0


def correctness(results: list[dict[str, Any]], scale: str, data_dir: Path | None) -> dict[str, Any]:
    """Compare the toolkit's and the pandas reference's affected sets (first run) with truth."""
    def first(key: str) -> list[dict[str, Any]] | None:
        for r in results:
            if r.get("ok") and r["scale"] == scale and r["key"] == key:
                aff = r.get("extra", {}).get("affected")
                if aff is not None:
                    return list(aff)
        return None

    leaks = truth_leaks(data_dir) if data_dir is not None else []
    tk_all = first("toolkit_e2e")
    pd_recs = first("pandas_e2e")
    out: dict[str, Any] = {"n_truth": len(leaks), "toolkit": None, "pandas": None, "agree": None}
    tk: list[dict[str, Any]] | None = None
    if tk_all is not None:
        tk, n_susp = _confirmed(tk_all)
        out["toolkit"] = compare_to_truth(tk, leaks)
        out["toolkit"]["n_suspected"] = n_susp
        out["toolkit_tenants"] = {str(r.get("tenant_id")) for r in tk}
    if pd_recs is not None:
        out["pandas"] = compare_to_truth(pd_recs, leaks)
        out["pandas_tenants"] = {str(r.get("tenant_id")) for r in pd_recs}
    if tk is not None and pd_recs is not None:
        a, b = out["toolkit"], out["pandas"]
        same_ids = {str(r.get("request_id")) for r in tk} == {str(r.get("request_id")) for r in pd_recs}
        out["agree"] = bool(
            (a["found"] == b["found"] and a["extra"] == b["extra"]) if leaks else same_ids
        ) and out["toolkit_tenants"] == out["pandas_tenants"]
        out["same_request_ids"] = same_ids
    leak_tenants = {str(x.get("tenant_id")) for x in leaks}
    out["truth_tenants"] = leak_tenants
    return out


# -- rendering ------------------------------------------------------------------------------------


def _numeric(cell: str) -> bool:
    c = cell.strip().strip("*")
    return not c or c[0].isdigit() or c[0] in "—-<>≤≥"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    align = ["---"] + [
        "--:" if all(_numeric(r[i]) for r in rows if i < len(r)) and rows else "---"
        for i in range(1, len(header))
    ]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _requests(suite: Suite, scale: str) -> int:
    return next(n for s, n in suite.options.scales if s == scale)


def _verdict(ok: bool | None, miss: str = "") -> str:
    if ok is None:
        return "not measured"
    return "**met**" if ok else f"**missed**{(' (' + miss + ')') if miss else ''}"


def _targets(suite: Suite, st: dict[tuple[str, str], Stat]) -> list[str]:
    rows: list[list[str]] = []
    scales = [s for s, _ in suite.options.scales]
    # 1. gateway ingest vs bare DuckDB
    for scale in scales:
        man = suite.manifests.get(scale)
        for g in man.gateway if man else []:
            tk, bare = st.get((scale, f"toolkit_gateway:{g.name}")), st.get((scale, f"bare_gateway:{g.name}"))
            if tk and bare:
                ratio = bare.median / tk.median
                kind = ".gz NDJSON" if any(f.endswith(".gz") for f in g.files) else "plain"
                rows.append([f"gateway ingest ≥ 0.8× bare DuckDB ({g.name}, {kind}, {scale})",
                             f"{ratio:.2f}×",
                             _verdict(ratio >= TARGETS["gateway"],
                                      f"by {(TARGETS['gateway'] - ratio) / TARGETS['gateway']:.0%}")])
    # 2. engine parse
    for scale in scales:
        eng = st.get((scale, "toolkit_engine"))
        if eng:
            lps = eng.rows_per_s
            rows.append([f"engine parse ≥ 0.6 M lines/s ({scale})", f"{_rate(lps)} lines/s ({eng.mb_per_s:.1f} MB/s)",
                         _verdict(lps >= TARGETS["engine_lines_per_s"],
                                  f"{lps / TARGETS['engine_lines_per_s']:.2f}× of target")])
    for scale in scales:
        eng, bare = st.get((scale, "toolkit_engine")), st.get((scale, "bare_engine"))
        if eng and bare and eng.median:
            ratio = bare.median / eng.median
            rows.append([f"engine ingest ≥ 2.3× a bare DuckDB CREATE TABLE of the lines ({scale})", f"{ratio:.2f}×",
                         _verdict(ratio >= TARGETS["engine_vs_bare"], f"{ratio / TARGETS['engine_vs_bare']:.2f}× of target")])
        plain, gz = st.get((scale, "toolkit_engine_plain")), st.get((scale, "toolkit_engine_gz"))
        if plain and gz and plain.median:
            ratio = gz.median / plain.median
            rows.append([f"engine ingest of .gz logs ≤ 1.15× the same logs plain ({scale})", f"{ratio:.2f}×",
                         _verdict(ratio <= TARGETS["engine_gz_ratio"], f"{ratio - 1:+.0%} over plain")])
    for scale in scales:
        eng, cri = st.get((scale, "toolkit_engine")), st.get((scale, "toolkit_engine_cri"))
        if eng and cri and eng.median:
            ratio = cri.median / eng.median
            rows.append([f"CRI-wrapped engine ingest ≤ 1.10× the same logs plain ({scale})", f"{ratio:.2f}×",
                         _verdict(ratio <= TARGETS["wrapper_ratio"], f"{ratio - 1:+.0%} over plain")])
    eng_scales = [sc for sc in scales if (sc, "toolkit_engine") in st]
    for scale in eng_scales[-1:]:
        eng = st[(scale, "toolkit_engine")]
        if eng:
            rows.append([f"engine ingest peak RSS ≤ 1 GiB, any size (largest: {scale}, {eng.rows:,} lines)",
                         _mib(eng.peak_rss),
                         _verdict(eng.peak_rss <= TARGETS["rss_bytes"], f"{eng.peak_rss / GIB:.2f} GiB")])
    # 3. analysis at 1 M
    at_1m = [s for s, n in suite.options.scales if n == 1_000_000 and (s, "analysis:all") in st]
    measured = [sc for sc in scales if (sc, "analysis:all") in st]
    for scale in at_1m or measured[-1:] or scales[-1:]:
        n = _requests(suite, scale)
        scale_note = "" if n == 1_000_000 else f" — measured at {scale}, not 1 M"
        all_ = st.get((scale, "analysis:all"))
        aff = st.get((scale, "analysis:affected_requests"))
        if all_:
            rows.append([f"all analysis queries < 10 s at 1 M requests{scale_note}", all_.time(),
                         _verdict(all_.median < TARGETS["analysis_1m_s"] if n == 1_000_000 else None,
                                  f"{all_.median / TARGETS['analysis_1m_s']:.1f}× the budget")])
        else:
            rows.append([f"all analysis queries < 10 s at 1 M requests{scale_note}", "—", "not measured"])
        if aff:
            rows.append([f"affected query < 1 s at 1 M requests{scale_note}", aff.time(),
                         _verdict(aff.median < TARGETS["affected_1m_s"] if n == 1_000_000 else None,
                                  f"{aff.median / TARGETS['affected_1m_s']:.1f}× the budget")])
    # 4. pandas speed-up
    for scale in scales:
        tk, pdr = st.get((scale, "toolkit_e2e")), st.get((scale, "pandas_e2e"))
        if tk and pdr:
            sp = pdr.median / tk.median
            rows.append([f"≥ 15× faster than pandas end to end ({scale})", f"{sp:.1f}×",
                         _verdict(sp >= TARGETS["pandas_speedup"],
                                  f"{sp / TARGETS['pandas_speedup']:.0%} of target")])
    # 5. RSS at 5 M gateway rows
    best: tuple[int, int, str] | None = None
    for (scale, key), s in st.items():
        if key.startswith("toolkit_gateway:") and (best is None or s.rows > best[0]):
            best = (s.rows, s.peak_rss, f"{key.split(':', 1)[1]}, {scale}")
    if best is not None:
        rows_n, rss, where = best
        if rows_n >= TARGETS["rss_gateway_rows"]:
            rows.append([f"peak RSS ≤ 1 GiB at ≥ 5 M gateway rows ({where})", _mib(rss),
                         _verdict(rss <= TARGETS["rss_bytes"], f"{rss / GIB:.2f} GiB")])
        else:
            rows.append([f"peak RSS ≤ 1 GiB at 5 M gateway rows (largest measured: {rows_n:,} rows, {where})",
                         _mib(rss), "not measured at 5 M rows (" +
                         ("within 1 GiB at this size" if rss <= GIB else "already over 1 GiB") + ")"])
    else:
        rows.append(["peak RSS ≤ 1 GiB at 5 M gateway rows", "—", "not measured"])
    return _table(["target", "measured (median)", "verdict"], rows)


def render(suite: Suite) -> str:
    """The whole report as Markdown."""
    opts = suite.options
    st = stats(suite.results)
    m = suite.machine
    scales = [s for s, _ in opts.scales]
    out: list[str] = []
    date = suite.started.strftime("%Y-%m-%d %H:%M UTC")
    cmd = "python -m benchmarks " + " ".join(
        [f"--scale {s}" + (":" + "+".join(opts.scale_groups[s]) if s in opts.scale_groups else "")
         for s in scales] + [f"--runs {opts.runs}"]
        + ([f"--pandas-runs {opts.pandas_runs}"] if opts.pandas_runs != opts.runs else [])
        + ([f"--investigate-runs {opts.investigate_runs}"] if opts.investigate_runs != 1 else [])
        + (["--profile"] if opts.profile else [])
        + (["--snapshot"] if getattr(opts, "snapshot", False) else [])
        + ([f"--steps {','.join(opts.groups)}"] if len(opts.groups) < 5 else [])
    )
    out += [
        "# Benchmark results",
        "",
        f"Run on {date} with `{cmd}` (commit `{m.get('commit') or '?'}`"
        + (", a frozen copy (`--snapshot`)" if m.get("snapshot") else "")
        + (f" plus {m['dirty_files']} files modified in the working tree" if m.get("dirty_files") else "")
        + "). "
        f"Times are medians of {opts.runs} run(s) with min–max in brackets; every step ran in a "
        "fresh Python process. Regenerate with `make bench`; see `docs/benchmarks.md` for how to "
        "read this file.",
        "",
    ]
    # machine
    la, lb = suite.load_before, suite.load_after
    out += ["## Machine", ""]
    out += _table(["item", "value"], [
        ["CPU", str(m.get("cpu"))],
        ["cores (logical / usable)", f"{m.get('cores')} / {m.get('cores_usable')}"],
        ["RAM", f"{(m.get('ram_bytes') or 0) / GIB:.1f} GiB"],
        ["OS", str(m.get("os"))],
        ["Python / DuckDB / pandas", f"{m.get('python')} / {m.get('duckdb')} / {m.get('pandas')}"],
        ["pyarrow / polars / forensics", f"{m.get('pyarrow')} / {m.get('polars')} / {m.get('forensics')}"],
        ["load average at start / end (1 min)",
         f"{la[0]:.2f} / {lb[0]:.2f}" if la and lb else "—"],
        ["duration", f"{(suite.finished - suite.started).total_seconds() / 60:.0f} min"
         if suite.finished else "—"],
    ])
    if opts.note:
        out += ["", f"**Note:** {opts.note}"]
    out += [""]
    # data sets
    out += ["## Data sets", "",
            "Generated by `forensics.sample.generate(out, requests=N, seed=...)`, cached in "
            "`benchmarks/.data/<scale>/`. Lines are physical lines of the decompressed files.", ""]
    rows = []
    for scale in scales:
        man = suite.manifests.get(scale)
        if man is None:
            continue
        for g in [*man.gateway, man.engine]:
            rows.append([scale, g.name, f"{len(g.files)}", f"{g.lines:,}", f"{g.disk_bytes / 1e6:,.1f}",
                         f"{g.raw_bytes / 1e6:,.1f}"])
        gen = f"{man.generate_s:.0f} s, {_mib(man.generate_peak_rss)}" if man.generate_s else "cached"
        rows.append([scale, f"**total** ({man.requests:,} requests, {man.n_leaks} leaks in truth; "
                     f"generated: {gen})", "", f"{man.gateway_lines + man.engine.lines:,}",
                     f"{sum(g.disk_bytes for g in man.gateway) / 1e6 + man.engine.disk_bytes / 1e6:,.1f}",
                     f"{sum(g.raw_bytes for g in man.gateway) / 1e6 + man.engine.raw_bytes / 1e6:,.1f}"])
    out += _table(["scale", "source", "files", "lines", "MB on disk", "MB decompressed"], rows)
    out += [""]
    # targets
    out += ["## Targets", "", "From issues #3–#6. Verdicts are computed from the figures below.", ""]
    out += _targets(suite, st)
    out += [""]
    # ingest
    out += ["## Ingest: toolkit vs bare DuckDB", "",
            "Toolkit: `case.ingest_gateway(files, format=<preset>)` / `case.ingest_engine(engine/, "
            "tz='Asia/Singapore')` into a fresh case file (parse, normalise, provenance, rejects, "
            "duplicates). Bare: `CREATE TABLE t AS SELECT * FROM read_json(files)` (`read_csv` for "
            "CSV; engine logs: every line into one VARCHAR column) into a fresh DuckDB file with the "
            "same memory limit: what loading costs with no parsing or checks at all. Engine logs "
            "also get a scan-only figure (every line read, nothing stored). MB/s are of "
            "decompressed input. Ratio = bare time / toolkit time (toolkit throughput as a "
            "fraction of bare DuckDB's).", ""]
    rows = []
    for scale in scales:
        man = suite.manifests.get(scale)
        names = [(f"toolkit_gateway:{g.name}", f"bare_gateway:{g.name}", g.name) for g in (man.gateway if man else [])]
        names.append(("toolkit_engine", "bare_engine", "engine (all nodes + router)"))
        names.append(("toolkit_engine_cri", "bare_engine", "engine, CRI-wrapped (kubelet layout)"))
        names.append(("toolkit_engine_plain", "bare_engine", "engine, every file plain"))
        names.append(("toolkit_engine_gz", "bare_engine", "engine, every file gzip"))
        for tk_key, bare_key, label in names:
            tk, bare = st.get((scale, tk_key)), st.get((scale, bare_key))
            scan = st.get((scale, "scan_engine")) if tk_key == "toolkit_engine" else None
            for who, s in (("toolkit", tk), ("bare DuckDB", bare), ("DuckDB scan only", scan)):
                if s is None:
                    continue
                ratio = f"{bare.median / tk.median:.2f}×" if (who == "toolkit" and tk and bare) else ""
                rows.append([scale, label, who, s.time(), f"{_rate(s.rows)}", f"{_rate(s.rows_per_s)}/s",
                             f"{s.mb_per_s:.1f}", _mib(s.peak_rss), f"{s.cpu_s / s.median:.1f}" if s.median else "",
                             ratio])
    out += _table(["scale", "source", "loader", "wall time", "rows/lines", "rows/s", "MB/s",
                   "peak RSS", "CPU/wall", "toolkit/bare"], rows)
    out += [""]
    # analysis
    out += ["## Analysis queries and outputs", "",
            "Each `forensics.analysis` function on the case built by the end-to-end step, opened "
            "read-only, result fully materialised (Arrow). `all` runs every function in one "
            "process, in the order listed. Outputs (later stages: impact report, notification "
            "list, the three charts rendered to HTML) run on the same case. req/s = requests in "
            "the incident / wall time.", ""]
    if suite.analysis_functions:
        out += [f"Functions found: {', '.join(suite.analysis_functions)}; outputs found: "
                f"{', '.join(suite.output_functions) or 'none'}.", ""]
    else:
        out += ["No `forensics.analysis` functions were available when this ran.", ""]
    rows = []
    for scale in scales:
        n = _requests(suite, scale)
        wanted = [f"analysis:{k}" for k in [*suite.analysis_functions, "all"]]
        wanted += [f"outputs:{k}" for k in suite.output_functions]
        for key in wanted:
            s = st.get((scale, key))
            if s:
                name = key.split(":", 1)[1]
                if key == "analysis:all":
                    n_f = len(s.records[0].get("extra", {}).get("per_function_s") or {})
                    name = f"all ({n_f} functions)"
                elif key.startswith("outputs:"):
                    name = f"output: {name}"
                rows.append([scale, name, s.time(), f"{s.rows_out if s.rows_out is not None else '—'}",
                             f"{_rate(n / s.median)}/s", _mib(s.peak_rss)])
    out += _table(["scale", "query", "wall time", "result rows (outputs: bytes)", "req/s", "peak RSS"], rows)
    out += [""]
    # end to end
    out += ["## End to end: toolkit vs pandas", "",
            "Toolkit: fresh case, ingest every gateway source and the engine logs, run "
            "`affected_requests` (the same question the pandas reference answers). pandas: `benchmarks/pandas_reference.py` from the same raw files "
            "to the same affected set. Ratio = pandas time / toolkit time.", ""]
    rows = []
    for scale in scales:
        tk, pdr = st.get((scale, "toolkit_e2e")), st.get((scale, "pandas_e2e"))
        inv = st.get((scale, "investigate"))
        for who, s in (("toolkit (ingest + affected_requests)", tk), ("pandas reference", pdr),
                       ("toolkit, whole `forensics investigate`", inv)):
            if s is None:
                continue
            ratio = f"{pdr.median / tk.median:.1f}×" if (who == "pandas reference" and tk and pdr) else ""
            per_k = s.median / (_requests(suite, scale) / 1000)
            rows.append([scale, who, s.time(), f"{per_k * 1000:.1f} ms", _mib(s.peak_rss), ratio])
    out += _table(["scale", "implementation", "wall time", "per 1 k requests", "peak RSS", "pandas/toolkit"], rows)
    out += ["", "`forensics investigate` (what `make demo` runs) adds every query, the CSV/JSON "
            "outputs, the impact report, notification list and charts to the same ingest; it is "
            "shown for scale, the ratio is against the like-for-like toolkit row."]
    phase_rows = []
    for scale in scales:
        pdr = st.get((scale, "pandas_e2e"))
        if pdr:
            phases: dict[str, list[float]] = {}
            for r in pdr.records:
                for k, v in (r.get("extra", {}).get("timings") or {}).items():
                    phases.setdefault(k, []).append(float(v))
            phase_rows.append([scale] + [f"{k}: {_s(statistics.median(v))}" for k, v in phases.items()])
    if phase_rows:
        out += ["", "pandas reference, median time per phase:", ""]
        out += ["- " + r[0] + ": " + ", ".join(r[1:]) for r in phase_rows]
    out += [""]
    # correctness
    out += ["## Correctness: affected sets", "",
            "Affected requests found (toolkit: `confidence = 'confirmed'` rows of `affected_requests`; "
            "first run of each), matched to `truth.json` `leaks` by request id.", ""]
    rows = []
    for scale in scales:
        c = suite.correctness.get(scale)
        if not c or (c.get("toolkit") is None and c.get("pandas") is None):
            continue  # e.g. a gateway-only scale
        for who in ("toolkit", "pandas"):
            cmp = c.get(who)
            if cmp is None:
                rows.append([scale, who, str(c["n_truth"]), "—", "—", "—", "—", "not run"])
                continue
            extra_note = f"suspected (separate): {cmp.get('n_suspected', 0)}" if who == "toolkit" else ""
            rows.append([scale, who, str(c["n_truth"]), str(cmp["n_records"]), str(cmp["n_found"]),
                         str(cmp["n_missed"]), str(cmp["n_extra"]), extra_note])
        agree = c.get("agree")
        rows.append([scale, "**toolkit = pandas**", "", "", "", "", "",
                     "yes" if agree else ("—" if agree is None else "**NO**")])
    out += _table(["scale", "who", "truth leaks", "reported", "found", "missed", "extra", "note"], rows)
    out += [""]
    # cost curve
    out += ["## Cost curve", "",
            "Median wall time per 1 k requests at each scale; `growth` = per-1 k cost at the largest "
            "scale / at the smallest (1.00 = perfectly linear; below 1 = fixed costs amortised).", ""]
    keys: list[str] = []
    for r in suite.results:
        if r.get("ok") and r["key"] not in keys and not r["key"].startswith("profile:"):
            keys.append(r["key"])
    rows = []
    for key in keys:
        per = []
        for scale in scales:
            s = st.get((scale, key))
            per.append(s.median / (_requests(suite, scale) / 1000) if s else None)
        vals = [p for p in per if p is not None]
        growth = f"{vals[-1] / vals[0]:.2f}" if len(vals) >= 2 and vals[0] > 0 else "—"
        rows.append([key] + [f"{p * 1000:.2f} ms" if p is not None else "—" for p in per] + [growth])
    out += _table(["step", *scales, "growth"], rows)
    out += [""]
    # analysis notes
    out += ["## Analysis of the figures", ""]
    if opts.notes_file and Path(opts.notes_file).is_file():
        out += [Path(opts.notes_file).read_text(encoding="utf-8").strip(), ""]
    else:
        out += ["(No notes were given for this run: pass `--notes-file FILE`.)", ""]
    out += _profiles(suite)
    # failures
    out += ["## Failures", ""]
    failed = [r for r in suite.results if not r.get("ok")]
    if failed:
        for r in failed:
            err = str(r.get("error", "")).replace("\n", " ")[:400]
            out.append(f"- {r['scale']} run {r['run']} `{r['key']}`: {err}")
    else:
        out.append("None: every step completed.")
    out += [""]
    # method
    out += ["## How it was measured", "",
            "- Each step runs in its own `python -m benchmarks.steps` process. Set-up (imports, "
            "file lists, an empty output database) is not timed; the wall time covers the work only.",
            "- Peak RSS is the process's `VmHWM` (interpreter, libraries and DuckDB's buffers "
            "included), the largest over the runs. DuckDB's memory limit is the toolkit's load budget "
            "(`FORENSICS_MEMORY_LIMIT`, 768 MB) for the toolkit and the bare loads alike; the "
            "analysis queries and outputs run under the query limit (`FORENSICS_QUERY_MEMORY_LIMIT`, 2 GB).",
            "- CPU/wall > 1 means DuckDB used more than one core.",
            "- Files are read warm from the page cache (generated just before, or read by the "
            "previous runs): the figures are CPU-bound, not disk-bound.",
            "- Steps are interleaved run by run (toolkit, bare, ... then run 2), so a slow "
            "period on a shared machine hits both sides of a ratio alike.",
            ""]
    return "\n".join(out)


def _slim(rec: dict[str, Any]) -> dict[str, Any]:
    out = dict(rec)
    extra = dict(out.get("extra") or {})
    if "affected" in extra:
        extra["affected"] = f"{len(extra['affected'])} records (see the correctness section)"
    out["extra"] = extra
    return out


def _profiles(suite: Suite) -> list[str]:
    """The profiled runs (``--profile``): top SQL statements, Python hot spots, DuckDB operators."""
    recs = [r for r in suite.results if r.get("ok") and str(r.get("key", "")).startswith("profile:")]
    if not recs:
        return []
    out = ["### Where the time goes (one extra profiled run per step)", "",
           "cProfile and per-statement timing add overhead; read the shares, not the totals.", ""]
    for r in recs:
        extra = r.get("extra") or {}
        head = f"**{r['scale']} `{r['key'][len('profile:'):]}`** — {_s(float(r['wall_s']))} profiled"
        if extra.get("sql_total_s") is not None:
            sql_s = float(extra["sql_total_s"])
            head += (f"; {_s(sql_s)} ({sql_s / float(r['wall_s']):.0%}) inside DuckDB statements, "
                     "the rest in Python")
        out += [head, ""]
        if extra.get("statements"):
            out += _table(["SQL statement (start)", "calls", "total"],
                          [[f"`{x['sql'].replace('|', '/')}`", str(x["calls"]), _s(float(x["total_s"]))]
                           for x in extra["statements"]])
            out += [""]
        if extra.get("python"):
            out += _table(["Python function (self time, DuckDB calls excluded)", "calls", "self", "cumulative"],
                          [[f"`{x['func'].replace('|', '/')}`", str(x["calls"]), _s(float(x["self_s"])),
                            _s(float(x["cum_s"]))] for x in extra["python"][:6]])
            out += [""]
        if extra.get("operators"):
            out += _table(["DuckDB operator (last query)", "time", "rows", "detail"],
                          [[str(x["op"]), _s(float(x["s"])), f"{x['rows']:,}" if isinstance(x["rows"], int) else "",
                            f"`{x['detail'].replace('|', '/')}`" if x["detail"] else ""]
                           for x in extra["operators"]])
            out += [""]
    return out


def suite_json(suite: Suite) -> dict[str, Any]:
    """The raw measurements, JSON-able."""
    corr = {}
    for scale, c in suite.correctness.items():
        corr[scale] = {
            k: (sorted(v) if isinstance(v, set) else
                ({kk: (sorted(vv) if isinstance(vv, set) else vv) for kk, vv in v.items()}
                 if isinstance(v, dict) else v))
            for k, v in c.items()
        }
    return {
        "started": suite.started.isoformat(),
        "finished": suite.finished.isoformat() if suite.finished else None,
        "machine": suite.machine,
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(suite.options).items()},
        "manifests": {k: v.to_json() for k, v in suite.manifests.items()},
        "analysis_functions": suite.analysis_functions,
        "output_functions": suite.output_functions,
        "load_before": suite.load_before,
        "load_after": suite.load_after,
        "correctness": corr,
        "results": [_slim(r) for r in suite.results],
        "generated_at": dt.datetime.now(dt.UTC).isoformat(),
    }
