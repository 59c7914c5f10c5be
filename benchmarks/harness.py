"""Command line, data sets, scheduling and statistics of the benchmark suite.

Every measured step runs in a fresh Python process (:mod:`benchmarks.steps`), so one step's
memory does not inflate the next one's peak RSS and no cache survives between runs except the
operating system's page cache (all runs are warm-cache runs; the first run of a scale reads the
freshly generated files, which are also in the page cache).

Example:
    python -m benchmarks                          # 100k and 1m, 3 runs, benchmarks/RESULTS.md
    python -m benchmarks --scale 100k --runs 1    # quick look
    python -m benchmarks --with-10m               # adds the 10 M-request incident
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.layout import (
    Manifest,
    build_manifest,
    generator_version,
    load_manifest,
    save_manifest,
)
from benchmarks.steps import RESULT_MARKER

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
DEFAULT_SCALES = ("100k", "1m")
DEFAULT_SEED = 20260909
STEP_GROUPS = ("gateway", "engine", "e2e", "analysis", "outputs", "investigate", "pandas")
#: the steps of the ``engine`` group; each may also be named alone in ``--scale N:GROUPS`` (at
#: 10 M requests the six engine loads are over an hour of CPU: ``10m:toolkit_engine`` runs one)
ENGINE_STEPS = ("toolkit_engine", "toolkit_engine_cri", "toolkit_engine_plain", "toolkit_engine_gz",
                "bare_engine", "scan_engine")

_SCALE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")


def parse_scale(text: str) -> tuple[str, int]:
    """Parse ``100k``, ``1m``, ``2.5m`` or ``2000`` into ``(label, requests)``.

    Example:
        >>> parse_scale("1m"), parse_scale("2000"), parse_scale("2.5M")
        (('1m', 1000000), ('2000', 2000), ('2.5m', 2500000))
    """
    text = text.split(":", 1)[0]
    m = _SCALE_RE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"bad scale {text!r} (use e.g. 100k, 1m, 10m or 2000)")
    number, unit = float(m.group(1)), m.group(2).lower()
    requests = round(number * {"": 1, "k": 1_000, "m": 1_000_000}[unit])
    if requests < 100:
        raise argparse.ArgumentTypeError(f"scale {text!r} is too small (at least 100 requests)")
    label = f"{m.group(1)}{unit}"
    return label, requests


@dataclass
class Options:
    """Resolved options of one suite run."""

    scales: list[tuple[str, int]]
    runs: int
    pandas_runs: int
    investigate_runs: int
    out: Path
    data_dir: Path
    work_dir: Path
    seed: int
    groups: tuple[str, ...]
    regenerate: bool = False
    timeout_s: float = 7200.0
    #: kill a step's process once its resident set passes this many bytes (None: no cap)
    rss_cap: int | None = None
    note: str = ""
    notes_file: Path | None = None
    json_out: Path | None = None
    keep_work: bool = False
    quiet: bool = False
    profile: bool = False
    snapshot: bool = False
    #: source tree the steps import (None: this checkout)
    src: Path | None = None
    #: step groups per scale label (``--scale 6m:gateway``); scales not listed run ``groups``
    scale_groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: the analysis functions measured one per process (``--each``; None: every one found);
    #: ``analysis:all`` runs every function found either way
    each: tuple[str, ...] | None = None

    def groups_for(self, label: str) -> tuple[str, ...]:
        """The step groups to run at one scale."""
        return self.scale_groups.get(label, self.groups)


@dataclass
class Suite:
    """Everything measured in one suite run (input of the report)."""

    options: Options
    started: dt.datetime
    finished: dt.datetime | None = None
    machine: dict[str, Any] = field(default_factory=dict)
    manifests: dict[str, Manifest] = field(default_factory=dict)
    results: list[dict[str, Any]] = field(default_factory=list)
    analysis_functions: list[str] = field(default_factory=list)
    output_functions: list[str] = field(default_factory=list)
    correctness: dict[str, dict[str, Any]] = field(default_factory=dict)
    load_before: tuple[float, float, float] | None = None
    load_after: tuple[float, float, float] | None = None


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m benchmarks`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=(
            "Benchmark the forensics toolkit against bare DuckDB loads and a plain pandas "
            "analysis on generated incidents; writes a Markdown report."
        ),
        epilog="Example: python -m benchmarks --scale 100k --scale 1m --runs 3 --out benchmarks/RESULTS.md",
    )
    p.add_argument("--scale", action="append", default=None, metavar="N[:GROUPS]",
                   help="incident size in requests: 100k, 1m, 10m, 2000 ... (repeatable or "
                        "comma-separated; default: 100k and 1m). N:GROUPS limits that scale to "
                        "some step groups (or single engine steps such as toolkit_engine), joined by "
                        "'+', e.g. 6m:gateway, 1m:engine+e2e or 10m:toolkit_engine+gateway")
    p.add_argument("--with-10m", action="store_true", help="also run the 10 M-request incident")
    p.add_argument("--runs", type=int, default=3, help="measured runs per step (default 3; median reported)")
    p.add_argument("--pandas-runs", type=int, default=None,
                   help="runs of the pandas reference (default: --runs)")
    p.add_argument("--investigate-runs", type=int, default=1,
                   help="runs of the whole 'forensics investigate' pipeline (default 1: it repeats "
                        "the ingest and every query, which are measured on their own)")
    p.add_argument("--out", type=Path, default=PACKAGE_DIR / "RESULTS.md", help="report path")
    p.add_argument("--json", dest="json_out", type=Path, default=None,
                   help="also write the raw measurements as JSON (default: <data-dir>/last-results.json)")
    p.add_argument("--data-dir", type=Path, default=PACKAGE_DIR / ".data",
                   help="where generated incidents are cached (default benchmarks/.data)")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="scratch space for case databases (default <data-dir>/work)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="generator seed")
    p.add_argument("--steps", default=",".join(STEP_GROUPS),
                   help=f"comma-separated step groups to run, of {', '.join(STEP_GROUPS)} (default: all)")
    p.add_argument("--each", default=None, metavar="FUNCS",
                   help="comma-separated analysis functions to measure one per process (default: every "
                        "function found); 'all' (every function in one process) runs either way")
    p.add_argument("--regenerate", action="store_true", help="regenerate the data sets even if cached")
    p.add_argument("--timeout", type=float, default=7200.0, help="per-step timeout in seconds")
    p.add_argument("--rss-cap", type=float, default=None, metavar="GIB",
                   help="kill a step whose resident set passes GIB GiB and record it as failed (protects "
                        "a shared machine at 10 M requests; default: no cap)")
    p.add_argument("--note", default="", help="free text for the report (e.g. 'machine shared with other jobs')")
    p.add_argument("--notes-file", type=Path, default=None,
                   help="Markdown file inserted into the report as the 'Analysis' section")
    p.add_argument("--keep-work", action="store_true", help="keep the scratch case databases")
    p.add_argument("--profile", action="store_true",
                   help="after the measured runs, one extra profiled run of each toolkit step (SQL "
                        "statement times, Python hot spots, DuckDB operators) for the report")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--snapshot", action="store_true",
                   help="measure a frozen copy of the committed tree (git archive HEAD into the work "
                        "dir), so commits landing during a long run do not change the code between runs")
    p.add_argument("--from-json", type=Path, action="append", default=None, metavar="FILE",
                   help="measure nothing: re-render the report from the raw JSON of earlier runs "
                        "(repeatable: the runs are merged, e.g. 100k+1m and a separate 6m:gateway; "
                        "or to add --notes-file after reading the figures)")
    return p


def resolve_options(args: argparse.Namespace) -> Options:
    """Turn parsed arguments into :class:`Options`."""
    raw = args.scale or list(DEFAULT_SCALES)
    scales: list[tuple[str, int]] = []
    scale_groups: dict[str, tuple[str, ...]] = {}
    for item in raw:
        for part in str(item).split(","):
            if part.strip():
                scale = parse_scale(part)
                scales.append(scale)
                if ":" in part:
                    sub = tuple(g.strip() for g in part.split(":", 1)[1].split("+") if g.strip())
                    bad = [g for g in sub if g not in STEP_GROUPS + ENGINE_STEPS]
                    if bad:
                        raise SystemExit(f"unknown step group(s) {bad} in --scale {part}")
                    scale_groups[scale[0]] = sub
    if args.with_10m:
        scales.append(parse_scale("10m"))
    by_size: dict[int, tuple[str, int]] = {}
    for s in scales:
        by_size.setdefault(s[1], s)
    scales = [by_size[n] for n in sorted(by_size)]
    groups = tuple(g.strip() for g in args.steps.split(",") if g.strip())
    unknown = [g for g in groups if g not in STEP_GROUPS]
    if unknown:
        raise SystemExit(f"unknown step group(s) {unknown}; choose from {', '.join(STEP_GROUPS)}")
    if args.runs < 1:
        raise SystemExit("--runs must be at least 1")
    data_dir = args.data_dir.resolve()
    return Options(
        scales=scales,
        runs=args.runs,
        pandas_runs=args.pandas_runs if args.pandas_runs is not None else args.runs,
        investigate_runs=args.investigate_runs,
        out=args.out.resolve(),
        data_dir=data_dir,
        work_dir=(args.work_dir or data_dir / "work").resolve(),
        seed=args.seed,
        groups=groups,
        each=tuple(f.strip() for f in args.each.split(",") if f.strip()) if args.each is not None else None,
        regenerate=args.regenerate,
        timeout_s=args.timeout,
        rss_cap=round(args.rss_cap * 2**30) if args.rss_cap else None,
        note=args.note,
        notes_file=args.notes_file,
        json_out=(args.json_out or data_dir / "last-results.json").resolve(),
        keep_work=args.keep_work,
        quiet=args.quiet,
        profile=args.profile,
        snapshot=args.snapshot,
        scale_groups=scale_groups,
    )


# -- child processes ----------------------------------------------------------------------------


def _log(opts: Options, msg: str) -> None:
    if not opts.quiet:
        stamp = dt.datetime.now().strftime("%H:%M:%S")
        print(f"[bench {stamp}] {msg}", file=sys.stderr, flush=True)


def _rss_of(pid: int) -> int:
    """Current resident set of a process in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_child(
    spec: dict[str, Any], timeout_s: float, src: Path | None = None, rss_cap: int | None = None
) -> dict[str, Any]:
    """Run one step in a fresh interpreter and return its result record.

    ``src`` is the source tree the child imports ``forensics`` and ``benchmarks`` from (default:
    this checkout; with ``--snapshot`` a frozen copy of the commit being measured). ``rss_cap``
    (bytes, ``--rss-cap``): the child is killed once its resident set passes it, so a step that
    grows with the incident (a 10 M-row result materialised in Python) fails alone instead of
    driving a shared machine out of memory.
    """
    src = src or REPO_ROOT
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH", "")]))
    env.setdefault("PYTHONHASHSEED", "0")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.steps", json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(src),
    )
    failed = ""
    while True:
        try:
            stdout, stderr = proc.communicate(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            rss = _rss_of(proc.pid)
            if rss_cap and rss > rss_cap:
                failed = (f"killed by the harness: resident set {rss / 2**20:,.0f} MiB passed "
                          f"--rss-cap {rss_cap / 2**20:,.0f} MiB after {time.perf_counter() - t0:.0f} s")
            elif time.perf_counter() - t0 > timeout_s:
                failed = f"timed out after {timeout_s:.0f} s"
            if failed:
                proc.kill()
                proc.communicate()
                return {"step": spec["step"], "params": spec.get("params", {}), "ok": False,
                        "error": failed, "process_s": time.perf_counter() - t0}
    process_s = time.perf_counter() - t0
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            rec: dict[str, Any] = json.loads(line[len(RESULT_MARKER):])
            rec["process_s"] = process_s
            return rec
    tail = (stderr or stdout or "").strip().splitlines()[-5:]
    return {"step": spec["step"], "params": spec.get("params", {}), "ok": False,
            "error": f"child exited {proc.returncode} without a result: {' | '.join(tail)}",
            "process_s": process_s}


# -- data sets ----------------------------------------------------------------------------------


def ensure_data(opts: Options, label: str, requests: int) -> tuple[Path, Manifest]:
    """Return the cached data set of this scale, generating it (in a child) if missing."""
    target = opts.data_dir / label
    manifest = load_manifest(target) if target.is_dir() else None
    stale = manifest is not None and (
        manifest.requests != requests
        or manifest.seed != opts.seed
        or manifest.generator_version != generator_version()
    )
    if manifest is not None and not stale and not opts.regenerate:
        _log(opts, f"{label}: using cached data set {target}")
        return target, manifest
    if target.exists():
        shutil.rmtree(target)
    partial = opts.data_dir / f".{label}.partial"
    if partial.exists():
        shutil.rmtree(partial)
    partial.parent.mkdir(parents=True, exist_ok=True)
    _log(opts, f"{label}: generating {requests:,} requests (seed {opts.seed}) into {target}")
    rec = run_child(
        {"step": "generate", "data_dir": str(partial), "work_dir": str(opts.work_dir),
         "params": {"out": str(partial), "requests": requests, "seed": opts.seed}},
        opts.timeout_s,
        opts.src,
    )
    if not rec.get("ok"):
        raise SystemExit(f"generating the {label} data set failed: {rec.get('error')}\n{rec.get('traceback', '')}")
    os.replace(partial, target)
    manifest = build_manifest(target, label, requests, opts.seed)
    manifest.generate_s = rec.get("wall_s")
    manifest.generate_peak_rss = rec.get("peak_rss")
    save_manifest(target, manifest)
    _log(opts, f"{label}: generated in {rec.get('wall_s', 0):.1f} s")
    return target, manifest


# -- the schedule -------------------------------------------------------------------------------


def _clean_work(work: Path, keep: Path) -> None:
    """Delete the scratch databases of finished steps (all but the analysis case)."""
    for p in work.iterdir():
        if p.name.startswith(keep.name):
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def _record(suite: Suite, label: str, key: str, run: int, rec: dict[str, Any]) -> None:
    rec["scale"] = label
    rec["key"] = key
    rec["run"] = run
    suite.results.append(rec)
    opts = suite.options
    if rec.get("ok"):
        _log(opts, f"{label} run {run} {key}: {rec['wall_s']:.2f} s, "
                   f"peak RSS {rec['peak_rss'] / 2**20:.0f} MiB")
    else:
        _log(opts, f"{label} run {run} {key}: FAILED {rec.get('error')}")
    save_partial(suite)


def save_partial(suite: Suite) -> None:
    """Write the raw JSON measured so far (``finished`` null), replacing the file atomically.

    A long run (10 M requests: hours) that is stopped, times out or dies keeps every step it
    finished; ``--from-json`` renders a report from the file.
    """
    path = suite.options.json_out
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(report.suite_json(suite), indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)


def run_scale(suite: Suite, label: str, requests: int) -> None:
    """Measure every selected step of one scale, ``runs`` times, interleaved run by run."""
    opts = suite.options
    data_dir, manifest = ensure_data(opts, label, requests)
    suite.manifests[label] = manifest
    work = opts.work_dir / label
    work.mkdir(parents=True, exist_ok=True)
    base = {"data_dir": str(data_dir), "work_dir": str(work)}
    case_path = work / "case-e2e.duckdb"
    analysis = suite.analysis_functions
    groups = opts.groups_for(label)

    def spec(step: str, **params: Any) -> dict[str, Any]:
        return {"step": step, **base, "params": params}

    def child(sp: dict[str, Any]) -> dict[str, Any]:
        rec = run_child(sp, opts.timeout_s, opts.src, opts.rss_cap)
        if not opts.keep_work:
            _clean_work(work, keep=case_path)
        return rec

    built = False  # the case for the analysis steps was built successfully (when e2e is not run)
    for run in range(1, opts.runs + 1):
        if "gateway" in groups:
            for g in manifest.gateway:
                for step in ("toolkit_gateway", "bare_gateway"):
                    rec = child(spec(step, group=g.name, raw_bytes=g.raw_bytes))
                    _record(suite, label, f"{step}:{g.name}", run, rec)
        for step in ENGINE_STEPS:
            if "engine" in groups or step in groups:
                rec = child(spec(step, group="engine", raw_bytes=manifest.engine.raw_bytes))
                _record(suite, label, step, run, rec)
        case_ok = built
        if "e2e" in groups:
            rec = child(spec("toolkit_e2e", case=str(case_path)))
            _record(suite, label, "toolkit_e2e", run, rec)
            case_ok = bool(rec.get("ok"))
        elif ("analysis" in groups or "outputs" in groups) and run == 1:
            # the analysis steps need a loaded case: build it once, unmeasured
            rec = child(spec("toolkit_e2e", case=str(case_path)))
            if not rec.get("ok"):
                _record(suite, label, "toolkit_e2e", run, rec)
            case_ok = built = bool(rec.get("ok"))
        if "analysis" in groups and analysis and case_ok:
            passed = []
            for name in analysis:
                if opts.each is not None and name not in opts.each:
                    passed.append(name)  # not measured alone: 'all' still runs it
                    continue
                rec = child(spec("analysis", case=str(case_path), functions=[name], requests=requests))
                _record(suite, label, f"analysis:{name}", run, rec)
                if rec.get("ok"):
                    passed.append(name)
            if passed:
                rec = child(spec("analysis", case=str(case_path), functions=passed, requests=requests))
                _record(suite, label, "analysis:all", run, rec)
        if "outputs" in groups and case_ok:
            for name in suite.output_functions:
                rec = child(spec("outputs", case=str(case_path), output=name, requests=requests))
                _record(suite, label, f"outputs:{name}", run, rec)
        if "investigate" in groups and run <= opts.investigate_runs:
            raw = sum(g.raw_bytes for g in manifest.gateway) + manifest.engine.raw_bytes
            rec = child(spec("investigate", raw_bytes=raw))
            _record(suite, label, "investigate", run, rec)
        if "pandas" in groups and run <= opts.pandas_runs:
            rec = child(spec("pandas_e2e"))
            _record(suite, label, "pandas_e2e", run, rec)
    if opts.profile:
        profile_scale(suite, label, manifest, spec, analysis if (built or case_ok) else [], groups)
    suite.correctness[label] = report.correctness(suite.results, label, data_dir)
    if not opts.keep_work:
        shutil.rmtree(work, ignore_errors=True)


def profile_scale(
    suite: Suite,
    label: str,
    manifest: Manifest,
    spec: Any,
    analysis: list[str],
    groups: tuple[str, ...],
) -> None:
    """One extra, profiled run of each toolkit step (recorded as ``profile:<key>``, run 0)."""
    opts = suite.options
    todo: list[tuple[str, dict[str, Any]]] = []
    if "gateway" in groups:
        todo += [(f"toolkit_gateway:{g.name}", spec("toolkit_gateway", group=g.name, raw_bytes=g.raw_bytes))
                 for g in manifest.gateway]
    if "engine" in groups or "toolkit_engine" in groups:
        todo.append(("toolkit_engine", spec("toolkit_engine", group="engine", raw_bytes=manifest.engine.raw_bytes)))
    case = spec("analysis")["work_dir"] + "/case-e2e.duckdb"
    if "analysis" in groups and Path(case).exists():
        todo += [(f"analysis:{n}", spec("analysis", case=case, functions=[n], requests=manifest.requests))
                 for n in analysis]
    for key, sp in todo:
        sp["profile"] = True
        _record(suite, label, f"profile:{key}", 0, run_child(sp, opts.timeout_s, opts.src, opts.rss_cap))


def load_suite(path: Path, opts: Options) -> Suite:
    """Rebuild a measured :class:`Suite` from its raw JSON (``--from-json``) to re-render the report.

    The measurement options (scales, runs, step groups) come from the file; ``opts`` supplies the
    rendering ones (``--out``, ``--note``, ``--notes-file``).
    """
    from benchmarks.layout import Manifest

    data = json.loads(path.read_text(encoding="utf-8"))
    o = data["options"]
    opts.scales = [(str(a), int(b)) for a, b in o["scales"]]
    opts.runs = int(o["runs"])
    opts.pandas_runs = int(o["pandas_runs"])
    opts.investigate_runs = int(o.get("investigate_runs", 1))
    opts.groups = tuple(o["groups"])
    opts.scale_groups = {k: tuple(v) for k, v in (o.get("scale_groups") or {}).items()}
    opts.profile = bool(o.get("profile"))
    opts.snapshot = bool(o.get("snapshot"))
    if not opts.note:
        opts.note = str(o.get("note") or "")
    suite = Suite(options=opts, started=dt.datetime.fromisoformat(data["started"]))
    suite.finished = dt.datetime.fromisoformat(data["finished"]) if data.get("finished") else None
    suite.machine = data["machine"]
    suite.manifests = {k: Manifest.from_json(v) for k, v in data["manifests"].items()}
    suite.results = data["results"]
    suite.analysis_functions = list(data.get("analysis_functions") or [])
    suite.output_functions = list(data.get("output_functions") or [])
    lb, la = data.get("load_before"), data.get("load_after")
    suite.load_before = (float(lb[0]), float(lb[1]), float(lb[2])) if lb else None
    suite.load_after = (float(la[0]), float(la[1]), float(la[2])) if la else None
    as_sets = ("found", "extra", "toolkit_tenants", "pandas_tenants", "truth_tenants")
    for scale, c in (data.get("correctness") or {}).items():
        fixed: dict[str, Any] = {}
        for k, v in c.items():
            if isinstance(v, dict):
                v = {kk: (set(vv) if kk in as_sets else vv) for kk, vv in v.items()}
            elif k in as_sets and isinstance(v, list):
                v = set(v)
            fixed[k] = v
        suite.correctness[scale] = fixed
    return suite


def merge_suite(into: Suite, other: Suite) -> None:
    """Add another run's scales and measurements to ``into`` (same machine, separate invocation)."""
    o, n = into.options, other.options
    have = {label for label, _ in o.scales}
    for label, requests in n.scales:
        if label not in have:
            o.scales.append((label, requests))
        o.scale_groups[label] = n.groups_for(label)
    o.scales.sort(key=lambda s: s[1])
    into.results += other.results
    into.manifests.update(other.manifests)
    for scale, c in other.correctness.items():
        into.correctness.setdefault(scale, c)
    for name in other.analysis_functions:
        if name not in into.analysis_functions:
            into.analysis_functions.append(name)
    for name in other.output_functions:
        if name not in into.output_functions:
            into.output_functions.append(name)
    if other.finished and (into.finished is None or other.finished > into.finished):
        into.finished = other.finished
        into.load_after = other.load_after
    into.started = min(into.started, other.started)


def make_snapshot(opts: Options) -> tuple[Path, str]:
    """Extract the committed tree (``git archive HEAD``) into the work dir; return it and the commit."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=str(REPO_ROOT), check=True).stdout.strip()
    dest = opts.work_dir / f"src-{commit}"
    if not (dest / "forensics" / "__init__.py").is_file():
        tmp = opts.work_dir / f".src-{commit}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], capture_output=True,
                                 cwd=str(REPO_ROOT), check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    return dest, commit


def discover(opts: Options) -> tuple[list[str], list[str], str]:
    """Ask a child (importing the measured tree) which analysis functions and outputs exist."""
    rec = run_child({"step": "discover", "data_dir": "", "work_dir": str(opts.work_dir), "params": {}},
                    opts.timeout_s, opts.src)
    extra = rec.get("extra") or {}
    if not rec.get("ok"):
        _log(opts, f"discovery failed: {rec.get('error')}")
    return list(extra.get("analysis") or []), list(extra.get("outputs") or []), str(extra.get("forensics", ""))


def main(argv: list[str] | None = None) -> int:
    """Run the suite; write the report; return the exit status (1 if any step failed)."""
    args = build_parser().parse_args(argv)
    opts = resolve_options(args)
    if args.from_json:
        suite = load_suite(args.from_json[0], opts)
        for extra in args.from_json[1:]:
            merge_suite(suite, load_suite(extra, resolve_options(build_parser().parse_args([]))))
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(report.render(suite), encoding="utf-8")
        _log(opts, f"re-rendered {opts.out} from {', '.join(map(str, args.from_json))}")
        return 0
    suite = Suite(options=opts, started=dt.datetime.now(dt.UTC))
    suite.machine = report.machine_info()
    suite.load_before = report.loadavg()
    if opts.snapshot:
        opts.work_dir.mkdir(parents=True, exist_ok=True)
        opts.src, commit = make_snapshot(opts)
        suite.machine.update(commit=commit, dirty_files=0, snapshot=True)
        _log(opts, f"measuring a frozen copy of commit {commit} in {opts.src}")
    suite.analysis_functions, suite.output_functions, where = discover(opts)
    unknown_each = sorted(set(opts.each or ()) - set(suite.analysis_functions))
    if unknown_each:
        raise SystemExit(f"unknown analysis function(s) {unknown_each} in --each; found: "
                         f"{', '.join(suite.analysis_functions) or 'none'}")
    _log(opts, f"the steps import forensics from {where}")
    plan = ", ".join(f"{s} ({'+'.join(opts.groups_for(s))})" for s, _ in opts.scales)
    _log(opts, f"scales {plan}; {opts.runs} run(s); "
               f"analysis functions found: {', '.join(suite.analysis_functions) or 'none'}; "
               f"outputs found: {', '.join(suite.output_functions) or 'none'}")
    for label, requests in opts.scales:
        run_scale(suite, label, requests)
    suite.finished = dt.datetime.now(dt.UTC)
    suite.load_after = report.loadavg()
    text = report.render(suite)
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(text, encoding="utf-8")
    if opts.json_out is not None:
        opts.json_out.parent.mkdir(parents=True, exist_ok=True)
        opts.json_out.write_text(json.dumps(report.suite_json(suite), indent=1, default=str), encoding="utf-8")
    _log(opts, f"wrote {opts.out}" + (f" and {opts.json_out}" if opts.json_out else ""))
    return 0 if all(r.get("ok") for r in suite.results) else 1
