"""The measured steps, each run in a fresh process: ``python -m benchmarks.steps '<json spec>'``.

A step has an untimed set-up (imports, file lists, a fresh output database) and a timed body.
The child prints one line ``BENCH-RESULT {json}`` with the wall time of the body, the rows and
bytes it read, the CPU time it used, the process's resident set before the body and its peak
(``VmHWM`` of ``/proc/self/status``: the whole process, interpreter and libraries included).

Spec keys: ``step`` (a name of :data:`STEPS`), ``data_dir``, ``work_dir``, ``params`` (dict).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import resource
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.layout import ENGINE_TZ, FileGroup, engine_group, gateway_groups

RESULT_MARKER = "BENCH-RESULT "

#: analysis functions of ``forensics.analysis`` measured when they exist, in pipeline order
ANALYSIS_FUNCTIONS = (
    "pool_audit",
    "exposure_windows",
    "request_chain",
    "affected_requests",
    "affected_tenants",
    "token_mismatch",
    "post_fix_check",
    "leak_sources",
    "hidden_errors",
)

#: later stages measured when they exist: label -> "module:function" (called with the case)
OUTPUT_FUNCTIONS = {
    "impact_report": "forensics.outputs.report:impact_report",
    "notifications": "forensics.outputs.notifications:notifications",
    "charts": "forensics.outputs.charts:affected_tenants_chart,affected_timeline_chart,exposure_windows_chart",
}

#: DuckDB memory limit of the bare loads: the toolkit's default, for a like-for-like comparison
BARE_MEMORY_LIMIT = os.environ.get("FORENSICS_MEMORY_LIMIT", "768MB")


@dataclass
class Outcome:
    """What a timed body did."""

    rows: int = 0  # records or lines read (analysis: requests of the data set)
    bytes: int = 0  # decompressed bytes read (0 when not meaningful)
    rows_out: int | None = None  # rows produced (table rows, result rows)
    extra: dict[str, Any] = field(default_factory=dict)


Body = Callable[[], Outcome]


def _status_kib(key: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def peak_rss_bytes() -> int:
    """Peak resident set of this process (VmHWM; ru_maxrss where /proc is missing)."""
    kib = _status_kib("VmHWM")
    if kib is None:
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * 1024


def rss_bytes() -> int:
    """Current resident set of this process."""
    kib = _status_kib("VmRSS")
    return (kib or 0) * 1024


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _fresh(path: Path) -> Path:
    for p in (path, Path(str(path) + ".wal"), Path(str(path) + ".tmp")):
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _group(spec: dict[str, Any]) -> FileGroup:
    data_dir = Path(spec["data_dir"])
    name = spec["params"]["group"]
    if name == "engine":
        return engine_group(data_dir)
    for g in gateway_groups(data_dir):
        if g.name == name:
            return g
    raise ValueError(f"no gateway source {name!r} under {data_dir / 'gateway'}")


def _materialise(result: Any) -> int:
    """Run a lazy relation to the end; return its row count."""
    if hasattr(result, "fetch_arrow_table"):
        return int(result.fetch_arrow_table().num_rows)
    if hasattr(result, "arrow"):
        out = result.arrow()
        if hasattr(out, "read_all"):
            out = out.read_all()
        return int(out.num_rows)
    if hasattr(result, "__len__"):
        return len(result)
    return 0


# -- profiling (``spec["profile"]``: where the time goes, not part of the medians) --------------


class TimedConnection:
    """A DuckDB connection proxy that times every ``execute``/``executemany``/``sql`` call.

    ``sql()`` returns lazy relations: their time is counted where they are consumed, so this is
    meant for loaders (DDL and INSERT ... SELECT statements), not for analysis queries.
    """

    def __init__(self, con: Any) -> None:
        self._con = con
        self.timings: dict[str, list[float]] = {}

    def _timed(self, name: str, query: Any, *args: Any, **kwargs: Any) -> Any:
        head = " ".join(str(query).split())[:110]
        t0 = time.perf_counter()
        try:
            return getattr(self._con, name)(query, *args, **kwargs)
        finally:
            self.timings.setdefault(head, []).append(time.perf_counter() - t0)

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        """Timed ``execute``."""
        return self._timed("execute", query, *args, **kwargs)

    def executemany(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        """Timed ``executemany``."""
        return self._timed("executemany", query, *args, **kwargs)

    def sql(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        """Timed ``sql`` (building the relation only)."""
        return self._timed("sql", query, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def total(self) -> float:
        """Seconds spent inside all timed calls."""
        return sum(sum(v) for v in self.timings.values())

    def top(self, n: int = 8) -> list[dict[str, Any]]:
        """The ``n`` statements with the largest total time."""
        rows = [{"sql": k, "calls": len(v), "total_s": sum(v)} for k, v in self.timings.items()]
        return sorted(rows, key=lambda r: -float(r["total_s"]))[:n]


def _python_top(prof: Any, n: int = 8) -> list[dict[str, Any]]:
    import pstats

    st = pstats.Stats(prof)
    rows = []
    for (file, line, func), (_cc, ncalls, tottime, cumtime, _callers) in st.stats.items():  # type: ignore[attr-defined]
        if Path(file).name == "steps.py":  # the harness's own frames (the SQL timer holds DuckDB's time)
            continue
        where = f"{Path(file).name}:{line}" if file != "~" else ""
        rows.append({"func": f"{func} {where}".strip(), "calls": ncalls, "self_s": tottime, "cum_s": cumtime})
    return sorted(rows, key=lambda r: -float(r["self_s"]))[:n]


def _duckdb_operators(path: Path, n: int = 6) -> list[dict[str, Any]]:
    """The ``n`` most expensive operators of the last query profiled into ``path``."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return []
    ops: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        info = node.get("extra_info") or {}
        detail = info.get("Conditions") or info.get("Table") or info.get("Function") or info.get("Aggregates") or ""
        ops.append({"op": node.get("name") or node.get("operator_name"),
                    "s": float(node.get("timing") or node.get("operator_timing") or 0.0),
                    "rows": node.get("intermediate_rows") or node.get("operator_cardinality"),
                    "detail": " ".join(str(detail).split())[:100]})
        for child in node.get("children", []):
            walk(child)

    roots = data.get("operator") if isinstance(data.get("operator"), list) else data.get("children", [])
    for root in roots or []:
        walk(root)
    return sorted(ops, key=lambda o: -o["s"])[:n]


def _profiled_case(case: Any, spec: dict[str, Any]) -> TimedConnection | None:
    if not spec.get("profile"):
        return None
    timed = TimedConnection(case.con)
    case.con = timed
    return timed


# -- toolkit --------------------------------------------------------------------------------------


def step_toolkit_gateway(spec: dict[str, Any]) -> Body:
    """Toolkit gateway ingest of one gateway source into a fresh case."""
    from forensics.case import open_case

    group = _group(spec)
    case_path = _fresh(Path(spec["work_dir"]) / f"gw-{group.name}.duckdb")
    case = open_case(case_path)
    timed = _profiled_case(case, spec)

    def body() -> Outcome:
        s = case.ingest_gateway(group.files, format=group.preset, quiet=True)
        case.refresh()  # the derived tables, as `forensics ingest` builds them at its close
        case.con.execute("CHECKPOINT")
        return Outcome(
            rows=s.lines_read,
            bytes=spec["params"].get("raw_bytes", 0),
            rows_out=s.rows_loaded,
            extra={"rejected": s.rows_rejected, "duplicate": s.rows_duplicate,
                   **({"statements": timed.top(), "sql_total_s": timed.total()} if timed else {})},
        )

    return body


def step_toolkit_engine(spec: dict[str, Any]) -> Body:
    """Toolkit engine ingest (every node and the router) into a fresh case."""
    from forensics.case import open_case

    data_dir = Path(spec["data_dir"])
    case_path = _fresh(Path(spec["work_dir"]) / "engine.duckdb")
    case = open_case(case_path)
    timed = _profiled_case(case, spec)

    def body() -> Outcome:
        s = case.ingest_engine([str(data_dir / "engine")], tz=ENGINE_TZ, quiet=True)
        case.refresh()  # the derived tables, as `forensics ingest` builds them at its close
        case.con.execute("CHECKPOINT")
        return Outcome(
            rows=s.lines_read,
            bytes=spec["params"].get("raw_bytes", 0),
            rows_out=s.rows_loaded,
            extra={"rejected": s.rows_rejected,
                   **({"statements": timed.top(), "sql_total_s": timed.total()} if timed else {})},
        )

    return body


def cri_tree(data_dir: Path) -> Path:
    """The data set's engine logs as containerd wrote them on Kubernetes (made once, kept beside it)."""
    from forensics.sample.wrap import wrap_tree

    out = data_dir / "engine-cri"
    done = out / ".complete"
    if not done.exists():
        wrap_tree(data_dir / "engine", out, "cri", tz=ENGINE_TZ)
        done.write_text("ok\n")
    return out


def step_toolkit_engine_cri(spec: dict[str, Any]) -> Body:
    """Toolkit engine ingest of the same logs CRI-wrapped (kubelet layout): what the wrapper costs."""
    from forensics.case import open_case

    data_dir = Path(spec["data_dir"])
    tree = cri_tree(data_dir)  # untimed set-up
    case_path = _fresh(Path(spec["work_dir"]) / "engine-cri.duckdb")
    case = open_case(case_path)
    timed = _profiled_case(case, spec)

    def body() -> Outcome:
        s = case.ingest_engine([str(tree)], tz=ENGINE_TZ, quiet=True)
        case.refresh()  # the derived tables, as `forensics ingest` builds them at its close
        case.con.execute("CHECKPOINT")
        return Outcome(
            rows=s.lines_read,
            bytes=spec["params"].get("raw_bytes", 0),
            rows_out=s.rows_loaded,
            extra={"rejected": s.rows_rejected, "joined": sum(f.lines_joined for f in s.files),
                   **({"statements": timed.top(), "sql_total_s": timed.total()} if timed else {})},
        )

    return body


def recompressed_tree(data_dir: Path, how: str) -> Path:
    """The data set's engine logs all plain (``how="plain"``) or all gzip (``"gz"``), made once and
    kept beside it: the .gz-vs-plain cost of the engine ingest is measured on the same lines."""
    import gzip
    import shutil

    from forensics.sources.files import open_decompressed

    out = data_dir / f"engine-{how}"
    done = out / ".complete"
    if not done.exists():
        src = data_dir / "engine"
        for f in sorted(p for p in src.rglob("*") if p.is_file()):
            rel = f.relative_to(src)
            name = rel.name[:-3] if rel.name.endswith(".gz") else rel.name
            target = out / rel.parent / (name + (".gz" if how == "gz" else ""))
            target.parent.mkdir(parents=True, exist_ok=True)
            with open_decompressed(f) as fin, open(target, "wb") as raw:
                if how == "gz":
                    with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) as fout:
                        shutil.copyfileobj(fin, fout, 1 << 22)
                else:
                    shutil.copyfileobj(fin, raw, 1 << 22)
        done.write_text("ok\n")
    return out


def _engine_tree_step(how: str) -> Any:
    def step(spec: dict[str, Any]) -> Body:
        from forensics.case import open_case

        data_dir = Path(spec["data_dir"])
        tree = recompressed_tree(data_dir, how)  # untimed set-up
        case_path = _fresh(Path(spec["work_dir"]) / f"engine-{how}.duckdb")
        case = open_case(case_path)

        def body() -> Outcome:
            s = case.ingest_engine([str(tree)], tz=ENGINE_TZ, quiet=True)
            case.con.execute("CHECKPOINT")
            return Outcome(rows=s.lines_read, bytes=spec["params"].get("raw_bytes", 0), rows_out=s.rows_loaded,
                           extra={"rejected": s.rows_rejected})

        return body

    step.__doc__ = f"Toolkit engine ingest of the same logs, every file {'gzip' if how == 'gz' else 'plain'}."
    return step


step_toolkit_engine_plain = _engine_tree_step("plain")
step_toolkit_engine_gz = _engine_tree_step("gz")


def _affected_records(rel: Any) -> list[dict[str, Any]]:
    df = rel.df() if hasattr(rel, "df") else rel
    keep = [c for c in ("request_id", "header_request_id", "tenant_id", "confidence") if c in df.columns]
    return [
        {k: (None if v is None or v != v else str(v)) for k, v in row.items()}
        for row in df[keep].to_dict(orient="records")
    ]


def step_toolkit_e2e(spec: dict[str, Any]) -> Body:
    """Toolkit end to end: ingest every gateway source and the engine logs, then the affected set.

    The case is kept (``params.case``) so the analysis steps can query it.
    """
    import forensics
    from forensics.case import open_case

    data_dir = Path(spec["data_dir"])
    case_path = _fresh(Path(spec["params"]["case"]))
    case = open_case(case_path)
    groups = gateway_groups(data_dir)
    analysis = _analysis_module()
    affected = getattr(analysis, "affected_requests", None) or getattr(forensics, "affected_requests", None)

    def body() -> Outcome:
        rows = 0
        stages: list[dict[str, Any]] = []
        for g in groups:
            with _stage(stages, f"gateway:{g.name}") as st:
                st["rows"] = case.ingest_gateway(g.files, format=g.preset, quiet=True).lines_read
            rows += st["rows"]
        with _stage(stages, "engine") as st:
            st["rows"] = case.ingest_engine([str(data_dir / "engine")], tz=ENGINE_TZ, quiet=True).lines_read
        rows += st["rows"]
        records: list[dict[str, Any]] = []
        with _stage(stages, "affected_requests") as st:
            if affected is not None:
                records = _affected_records(affected(case))
            case.con.execute("CHECKPOINT")
            st["rows"] = len(records)
        return Outcome(
            rows=rows,
            rows_out=len(records),
            extra={"affected": records, "has_analysis": affected is not None, "stages": stages},
        )

    return body


@contextlib.contextmanager
def _stage(stages: list[dict[str, Any]], name: str) -> Iterator[dict[str, Any]]:
    """Time one stage of a step (wall, CPU, peak RSS so far, 1-min load) into ``stages``.

    A 10 M-request end-to-end run is too long to repeat per ingest, so its one run says where
    the time went. Example: ``with _stage(stages, "engine") as st: st["rows"] = ...``.
    """
    st: dict[str, Any] = {"stage": name, "load_1m_before": os.getloadavg()[0]}
    cpu0, t0 = _cpu_s(), time.perf_counter()
    yield st
    st.update(wall_s=time.perf_counter() - t0, cpu_s=_cpu_s() - cpu0, peak_rss_after=peak_rss_bytes(),
              load_1m_after=os.getloadavg()[0])
    stages.append(st)


def _analysis_module() -> Any:
    try:
        return importlib.import_module("forensics.analysis")
    except ImportError:
        return None


def available_analysis() -> list[str]:
    """Names of :data:`ANALYSIS_FUNCTIONS` that ``forensics.analysis`` defines today."""
    mod = _analysis_module()
    if mod is None:
        return []
    return [n for n in ANALYSIS_FUNCTIONS if callable(getattr(mod, n, None))]


def _resolve(target: str) -> list[Any]:
    module, names = target.split(":", 1)
    mod = importlib.import_module(module)
    return [getattr(mod, n) for n in names.split(",")]


def available_outputs() -> list[str]:
    """Labels of :data:`OUTPUT_FUNCTIONS` whose functions all exist today."""
    out = []
    for label, target in OUTPUT_FUNCTIONS.items():
        try:
            _resolve(target)
        except (ImportError, AttributeError):
            continue
        out.append(label)
    return out


def step_outputs(spec: dict[str, Any]) -> Body:
    """One later-stage output (impact report, notification list, charts) on the analysis case."""
    from forensics.case import open_case

    label = spec["params"]["output"]
    funcs = _resolve(OUTPUT_FUNCTIONS[label])
    case = open_case(spec["params"]["case"], read_only=True)
    work = Path(spec["work_dir"])
    requests = int(spec["params"].get("requests", 0))

    def body() -> Outcome:
        size = 0
        for i, f in enumerate(funcs):
            result = f(case)
            if hasattr(result, "save"):  # an Altair chart: render it as the pipeline does
                path = work / f"chart-{os.getpid()}-{i}.html"
                result.save(str(path))
                size += path.stat().st_size
                path.unlink()
            elif isinstance(result, str):
                size += len(result)
            else:
                size += _materialise(result)
        return Outcome(rows=requests, rows_out=size)

    return body


def step_investigate(spec: dict[str, Any]) -> Body:
    """The whole pipeline (``forensics investigate``, what ``make demo`` runs) into a fresh case."""
    pipeline = importlib.import_module("forensics.pipeline")
    data_dir = Path(spec["data_dir"])
    work = Path(spec["work_dir"])
    case_path = _fresh(work / "investigate.duckdb")
    out_dir = work / "investigate-out"
    if out_dir.exists():
        shutil.rmtree(out_dir)

    def body() -> Outcome:
        inv = pipeline.investigate(
            case_path, out_dir=out_dir, gateway=[str(data_dir / "gateway")],
            engine=[str(data_dir / "engine")], engine_tz=ENGINE_TZ, replace=True, quiet=True,
        )
        return Outcome(rows=inv.ingest.lines_read, bytes=spec["params"].get("raw_bytes", 0),
                       rows_out=len(inv.outputs), extra={"counts": dict(inv.counts)})

    return body


def step_analysis(spec: dict[str, Any]) -> Body:
    """One analysis function (or ``all`` of them in a row) on the case built by ``toolkit_e2e``."""
    from forensics.case import open_case

    names = spec["params"]["functions"]
    mod = _analysis_module()
    funcs = [(n, getattr(mod, n)) for n in names]
    case = open_case(spec["params"]["case"], read_only=True)
    requests = int(spec["params"].get("requests", 0))
    prof_file = Path(spec["work_dir"]) / f"profile-{os.getpid()}.json"
    if spec.get("profile"):
        case.con.execute("SET enable_profiling = 'json'")
        case.con.execute(f"SET profiling_output = '{prof_file}'")

    def body() -> Outcome:
        out = 0
        per: dict[str, float] = {}
        for n, f in funcs:
            t0 = time.perf_counter()
            out += _materialise(f(case))
            per[n] = time.perf_counter() - t0
        extra: dict[str, Any] = {"per_function_s": per}
        if spec.get("profile"):
            case.con.execute("SET enable_profiling = 'no_output'")
            extra["operators"] = _duckdb_operators(prof_file)
            prof_file.unlink(missing_ok=True)
        return Outcome(rows=requests, rows_out=out, extra=extra)

    return body


# -- bare DuckDB ----------------------------------------------------------------------------------


def _bare_connection(path: Path) -> Any:
    import duckdb

    con = duckdb.connect(str(path))
    con.execute(f"SET memory_limit = '{BARE_MEMORY_LIMIT}'")
    con.execute(f"SET temp_directory = '{path}.tmp'")
    con.execute("SET autoinstall_known_extensions = false")
    return con


def step_bare_gateway(spec: dict[str, Any]) -> Body:
    """``CREATE TABLE t AS SELECT * FROM read_json/read_csv(...)`` of one gateway source.

    ``ignore_errors`` is on so the few deliberately malformed lines do not abort the load (they
    become NULL rows or are skipped: the practical limit of "just load it", not a parse).
    """
    group = _group(spec)
    path = _fresh(Path(spec["work_dir"]) / f"bare-{group.name}.duckdb")
    con = _bare_connection(path)
    if group.reader == "csv":
        sql = "CREATE TABLE t AS SELECT * FROM read_csv($files, ignore_errors = true)"
    else:
        sql = (
            "CREATE TABLE t AS SELECT * FROM read_json($files, format = 'newline_delimited', "
            "ignore_errors = true)"
        )

    def body() -> Outcome:
        con.execute(sql, {"files": group.files})
        con.execute("CHECKPOINT")
        n = con.execute("SELECT count(*) FROM t").fetchone()[0]
        return Outcome(rows=int(n), bytes=spec["params"].get("raw_bytes", 0), rows_out=int(n))

    return body


_LINES = (
    "read_csv($files, columns = {'line': 'VARCHAR'}, delim = chr(0), quote = '', escape = '', "
    "header = false, auto_detect = false, ignore_errors = true, filename = true)"
)


def step_bare_engine(spec: dict[str, Any]) -> Body:
    """Every engine/router line into one VARCHAR column of a DuckDB file (no parsing)."""
    group = _group(spec)
    path = _fresh(Path(spec["work_dir"]) / "bare-engine.duckdb")
    con = _bare_connection(path)

    def body() -> Outcome:
        con.execute(f"CREATE TABLE t AS SELECT * FROM {_LINES}", {"files": group.files})
        con.execute("CHECKPOINT")
        n = con.execute("SELECT count(*) FROM t").fetchone()[0]
        return Outcome(rows=int(n), bytes=spec["params"].get("raw_bytes", 0), rows_out=int(n))

    return body


def step_scan_engine(spec: dict[str, Any]) -> Body:
    """Read every engine/router line with DuckDB and touch its bytes, storing nothing: the read limit."""
    group = _group(spec)
    path = _fresh(Path(spec["work_dir"]) / "scan-engine.duckdb")
    con = _bare_connection(path)

    def body() -> Outcome:
        row = con.execute(f"SELECT count(*), sum(length(line)) FROM {_LINES}", {"files": group.files}).fetchone()
        return Outcome(rows=int(row[0]), bytes=spec["params"].get("raw_bytes", 0), rows_out=0)

    return body


# -- pandas ---------------------------------------------------------------------------------------


def step_pandas_e2e(spec: dict[str, Any]) -> Body:
    """The notebook-style pandas analysis, from the raw files to the affected set."""
    from benchmarks import pandas_reference

    data_dir = Path(spec["data_dir"])

    def body() -> Outcome:
        result = pandas_reference.analyze(data_dir, tz=ENGINE_TZ)
        records = result.affected.to_dict(orient="records")
        return Outcome(
            rows=result.rows_read,
            rows_out=len(records),
            extra={"affected": records, "timings": result.timings},
        )

    return body


# -- generation -----------------------------------------------------------------------------------


def step_generate(spec: dict[str, Any]) -> Body:
    """Generate a data set with ``forensics.sample.generate`` (measured for information)."""
    generate = importlib.import_module("forensics.sample").generate
    out = Path(spec["params"]["out"])
    requests = int(spec["params"]["requests"])
    seed = int(spec["params"]["seed"])

    def body() -> Outcome:
        truth = generate(out, requests=requests, seed=seed)
        return Outcome(rows=requests, rows_out=len(truth.get("leaks", [])))

    return body


def step_discover(spec: dict[str, Any]) -> Body:
    """Which analysis functions and outputs the imported tree has (not a measurement)."""

    def body() -> Outcome:
        import forensics

        return Outcome(extra={"analysis": available_analysis(), "outputs": available_outputs(),
                              "forensics": str(Path(forensics.__file__).parent)})

    return body


STEPS: dict[str, Callable[[dict[str, Any]], Body]] = {
    "discover": step_discover,
    "generate": step_generate,
    "toolkit_gateway": step_toolkit_gateway,
    "bare_gateway": step_bare_gateway,
    "toolkit_engine": step_toolkit_engine,
    "toolkit_engine_plain": step_toolkit_engine_plain,
    "toolkit_engine_gz": step_toolkit_engine_gz,
    "toolkit_engine_cri": step_toolkit_engine_cri,
    "bare_engine": step_bare_engine,
    "scan_engine": step_scan_engine,
    "toolkit_e2e": step_toolkit_e2e,
    "analysis": step_analysis,
    "pandas_e2e": step_pandas_e2e,
    "outputs": step_outputs,
    "investigate": step_investigate,
}


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Set up and time one step in this process; return the result record."""
    result: dict[str, Any] = {"step": spec["step"], "params": spec.get("params", {})}
    try:
        body = STEPS[spec["step"]](spec)
        result["rss_before"] = rss_bytes()
        prof = None
        if spec.get("profile") and spec["step"] != "analysis":
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        result["load_1m_before"] = os.getloadavg()[0]
        cpu0 = _cpu_s()
        t0 = time.perf_counter()
        outcome = body()
        result["wall_s"] = time.perf_counter() - t0
        result["load_1m_after"] = os.getloadavg()[0]
        if prof is not None:
            prof.disable()
            outcome.extra["python"] = _python_top(prof)
        result["cpu_s"] = _cpu_s() - cpu0
        result["peak_rss"] = peak_rss_bytes()
        result.update(rows=outcome.rows, bytes=outcome.bytes, rows_out=outcome.rows_out, extra=outcome.extra)
        result["ok"] = True
    except Exception as exc:  # reported, the suite goes on
        result["ok"] = False
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc(limit=8)
    return result


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child process."""
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(args[0])
    result = run(spec)
    sys.stdout.write(RESULT_MARKER + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    from forensics.__main__ import skip_iri_grammars

    skip_iri_grammars()  # as the console script does: a step's process is the toolkit's own
    sys.exit(main())
