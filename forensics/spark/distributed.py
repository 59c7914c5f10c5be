"""The Spark ingest: the toolkit's own loaders, run in parallel on the executors, into a Parquet case.

Nothing is parsed twice or differently: each Spark task runs the local loaders
(``Case.ingest_gateway`` / ``Case.ingest_engine``, the same calls as ``forensics ingest
CASE.duckdb``) on a few evidence files into a DuckDB case of its own; its tables come back as Arrow
batches. Engine files go to the tasks as the collection stage resolved them on the driver
(:class:`~forensics.sources.collect.layout.EngineSource`: node, Kubernetes pod, container,
namespace, reading order), so a task's rows are those of a local ingest of the whole tree.

How a task gets a file's bytes:

* a **local path** (the driver's file system; on a cluster, one the executors share at the same
  path) is opened by the task itself and streamed by the loader: no size limit, no copy;
* a **URI** (``s3a://``, ``gs://``, ``abfs://``, ``hdfs://``, ``file://``: whatever the session's
  Hadoop file systems read) comes through Spark's ``binaryFile`` source, written to the task's
  local disk under its own name. ``binaryFile`` holds a file as one value: a file of 2 GiB or more
  is refused before any task runs, naming it (copy it to a shared path, or split it at line ends).

The SGLang request tokeniser is never translated to a JVM regex (Java's backtracking engine
overflows its stack on a prompt of a few thousand characters).

The passes that need the whole case then run once over it, on Spark:

* **file ids and repeated files**: ids follow the order of a local ingest (gateway files, then
  engine files, each in the loaders' own order); a file whose bytes (sha256) were already read
  earlier in the same ingest is skipped, as locally, and gets no id;
* **gateway duplicates**: the delivery-retry rule of the gateway loader (same layer, request_id,
  ts_start, ts_end; the first by file and line stays the original) over all gateway rows; the
  files' ``rows_loaded`` / ``rows_duplicate`` follow;
* **engine starts**: ``engine_starts`` rebuilt per node by the engine loader's own
  ``rebuild_starts`` from the node's startup facts and batch lines of every file.

Line numbers and sha256 are those of the local loaders on the same bytes.

Example (needs a Java runtime: not run as a doctest; tests/test_spark.py makes the same calls)::

    ingest("case_parquet/", gateway=["s3a://evidence/gateway/"],
           engine=["s3a://evidence/sglang/"], engine_tz="Asia/Singapore")
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import os
import pickle
import posixpath
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from forensics.case import Case
from forensics.errors import CaseError, ForensicsError, InputError, ParameterError
from forensics.sources.summary import IngestSummary
from forensics.spark.case import is_remote, local_path
from forensics.spark.parquet_case import MANIFEST, Manifest, TablePart, case_tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: the envelope every parse task returns: one row per Arrow batch of one table (IPC stream bytes)
_ENVELOPE = "table STRING, rows BIGINT, batch BINARY"
_SUMMARY = "_summary"
_ERROR = "_error"

#: rows per Arrow batch handed back by a parse task
_ROWS_PER_BATCH = 128 * 1024

#: the largest file Spark's binaryFile source reads (one Java byte array: Int.MaxValue bytes)
BINARY_FILE_MAX_BYTES = 2**31 - 1

#: bytes of local files one parse task takes at most (more tasks than cores keep them all busy)
_TASK_BYTES = 256 << 20


@dataclass(frozen=True)
class PlannedFile:
    """One evidence file of a Spark ingest.

    ``order`` is its place in a local ingest (1-based; gateway files first); ``uri`` is what Spark
    reads; ``recorded`` is the path ``evidence_files`` records (a local file's resolved path, as the
    local loaders record it, or the URI).
    """

    order: int
    uri: str
    recorded: str
    kind: str
    node: str | None = None
    #: an engine file as the collection stage resolved it (pod, container, namespace, order)
    source: Any = None
    #: bytes (from the listing), None when unknown
    size: int | None = None
    #: a local path the task opens itself (else the bytes come through binaryFile)
    in_place: bool = False

    @property
    def name(self) -> str:
        return posixpath.basename(self.recorded.rstrip("/")) or f"file{self.order}"


@dataclass
class IngestOptions:
    """What every parse task needs besides the bytes (pickled to the executors)."""

    gateway_format: str = "auto"
    gateway_tz: str = "UTC"
    gateway_options: dict[str, Any] = field(default_factory=dict)
    engine_tz: str = "UTC"
    now: dt.datetime | None = None
    #: the text of a --node-map TOML file (shipped: the executors may not see the driver's file)
    node_map_text: str | None = None


# -- resolving the inputs ---------------------------------------------------------------------


def _hadoop(spark: SparkSession) -> tuple[Any, Any]:
    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    return jvm, conf


def _remote_listing(spark: SparkSession, uri: str) -> tuple[str, list[str], dict[str, int]]:
    """List a remote file, directory (recursive) or glob: ``(root URI, paths relative to it, sizes)``."""
    jvm, conf = _hadoop(spark)
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(conf)
    if any(ch in uri for ch in "*?["):
        matches = fs.globStatus(path) or []
        root = uri[: uri.rfind("/", 0, min(i for i in (uri.find(c) for c in "*?[") if i >= 0)) + 1]
        files: list[tuple[str, int]] = []
        for st in matches:
            if st.isFile():
                files.append((str(st.getPath().toString()), int(st.getLen())))
            else:
                it = fs.listFiles(st.getPath(), True)
                while it.hasNext():
                    f = it.next()
                    files.append((str(f.getPath().toString()), int(f.getLen())))
        found = [_relative(root, f) for f, _ in files]
        return root, found, {r: n for r, (_, n) in zip(found, files, strict=True)}
    if not fs.exists(path):
        raise InputError(f"{uri}: no such file or directory", hint="check the path and the session's credentials")
    status = fs.getFileStatus(path)
    if status.isFile():
        full = str(status.getPath().toString())
        root = full[: full.rfind("/") + 1]
        return root, [full[len(root):]], {full[len(root):]: int(status.getLen())}
    root = str(status.getPath().toString()).rstrip("/") + "/"
    rels: list[str] = []
    sizes: dict[str, int] = {}
    it = fs.listFiles(path, True)
    while it.hasNext():
        f = it.next()
        rels.append(_relative(root, str(f.getPath().toString())))
        sizes[rels[-1]] = int(f.getLen())
    return root, rels, sizes


def _relative(root: str, full: str) -> str:
    if full.startswith(root):
        return full[len(root):]
    # the file system may qualify the URI differently (s3a://b/x vs s3a://b/x/): match on the path
    tail = root.split("://", 1)[-1]
    i = full.find(tail)
    return full[i + len(tail):] if i >= 0 else posixpath.basename(full)


def _split_node(item: str) -> tuple[str | None, str]:
    """``NODE=PATH`` -> (NODE, PATH); a URI's own ``=`` (``s3a://b/date=1/``) is not a node name."""
    if "=" in item:
        node, rest = item.split("=", 1)
        if node and not any(c in node for c in "/:\\"):
            return node.strip(), rest
    return None, item


def plan_files(spark: SparkSession | None, gateway: Sequence[str], engine: Sequence[str],
               scratch: Path, node_map: str | os.PathLike[str] | None = None) -> list[PlannedFile]:
    """The files of an ingest in the order a local ingest reads them, with their nodes.

    Local paths go through the loaders' own resolution (``expand_paths``, ``resolve_sources``).
    A URI (``s3a://``, ``hdfs://``, ``file://``...) is listed through Spark's file systems and mirrored as empty files under
    ``scratch`` with the same names, so the same resolution (hidden files, rotation order, node
    per sub-directory, ``NODE=``) applies to it unchanged.

    Example:
        >>> from forensics.sample import sample_dir
        >>> files = plan_files(None, [], [f"prefill-0={sample_dir() / 'engine' / 'prefill-0'}"], Path("/tmp"))
        >>> [(f.kind, f.node, f.name) for f in files]
        [('engine', 'prefill-0', 'sglang.log.1.gz'), ('engine', 'prefill-0', 'sglang.log')]
    """
    from forensics.sources.collect.layout import resolve_sources

    expand_paths = _gateway_files()

    mirrors: dict[str, str] = {}  # placeholder resolved path -> remote URI
    sizes: dict[str, int] = {}  # remote URI -> bytes

    def mirror(uri: str) -> str:
        if spark is None:
            raise ParameterError(f"{uri}: a remote path needs a Spark session")
        root, rels, listed = _remote_listing(spark, uri)
        if not rels:
            raise InputError(f"{uri}: no files found", hint="check the path")
        base = scratch / f"r{len(mirrors)}"
        for rel in rels:
            p = base / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.touch()
            mirrors[str(p.resolve())] = root + rel
            sizes[root + rel] = listed[rel]
        if uri.rstrip("/").endswith(rels[0]) and len(rels) == 1:  # a single file
            return str(base / rels[0])
        return str(base)

    out: list[PlannedFile] = []
    if gateway:
        items = [mirror(g) if _through_hadoop(g) else g for g in gateway]
        for p in expand_paths(items):
            resolved = str(p.resolve())
            uri = mirrors.get(resolved)
            out.append(PlannedFile(len(out) + 1, uri or _file_uri(resolved), uri or resolved, "gateway",
                                   size=sizes[uri] if uri else p.stat().st_size, in_place=uri is None))
    if engine:
        items = []
        for e in engine:
            node, raw = _split_node(e)
            path = mirror(raw) if _through_hadoop(raw) else raw
            items.append(f"{node}={path}" if node else path)
        for src in (resolve_sources(items, node_map=node_map) if node_map is not None else resolve_sources(items)):
            resolved = str(src.path.resolve())
            uri = mirrors.get(resolved)
            out.append(PlannedFile(len(out) + 1, uri or _file_uri(resolved), uri or resolved, "engine", src.node,
                                   source=src, size=sizes[uri] if uri else src.path.stat().st_size,
                                   in_place=uri is None))
    return out


def refuse_oversized(files: Sequence[PlannedFile], limit: int | None = None) -> None:
    """A file read through binaryFile (a URI) of ``limit`` bytes or more is an error naming it.

    Spark's binaryFile source holds a file as one Java byte array: it cannot read such a file;
    nothing is ever truncated. A local path has no such limit (the task opens it).

    Example:
        >>> refuse_oversized([PlannedFile(1, "s3a://b/big.log", "s3a://b/big.log", "engine", size=3 << 30)])
        Traceback (most recent call last):
        ...
        forensics.errors.InputError: s3a://b/big.log: 3,221,225,472 bytes: Spark's binaryFile source reads files below 2 GiB only (copy the file to a path every executor sees and pass that path, or split it at line ends)
    """
    limit = BINARY_FILE_MAX_BYTES if limit is None else limit
    for f in files:
        if not f.in_place and f.size is not None and f.size >= limit:
            raise InputError(
                f"{f.recorded}: {f.size:,} bytes: Spark's binaryFile source reads files below 2 GiB only",
                hint="copy the file to a path every executor sees and pass that path, or split it at line ends")


def _through_hadoop(path: str) -> bool:
    """Listed and read through Spark's Hadoop file systems: any URI (``file://`` too: on a
    cluster a local path of the driver means nothing to the executors), recorded as the URI."""
    return is_remote(path) or path.startswith("file:")


def _gateway_files() -> Any:
    """The loaders' own expansion of gateway paths (files, directories, globs) into files, in order."""
    import importlib

    files = importlib.import_module("forensics.sources.files")
    for name in ("expand_paths", "walk_files"):
        if hasattr(files, name):
            return getattr(files, name)
    raise ImportError("forensics.sources.files has no path expansion")


def _file_uri(path: str) -> str:
    return Path(path).as_uri()


def _key(uri: str) -> str:
    """A path as Spark's binaryFile reports it and as planned compare equal (``file:/x`` ~ ``file:///x``)."""
    text = re.sub(r"^file:/+", "/", uri)
    from urllib.parse import unquote

    return unquote(text)


# -- the parse tasks (run on the executors) ------------------------------------------------------


class EvidenceCase(Case):
    """A task's DuckDB case: the loaders' evidence tables only, never the derived tables.

    A local case builds the facts (``forensics.facts``) after an ingest, at its next query or its
    close; a task's case is read for its evidence tables and thrown away, and the Spark case builds its facts from the whole case.
    Building them in every task cost the Spark ingest of the bundled sample 190 CPU-seconds
    instead of 69 (measured on a loaded machine).

    Example:
        >>> from forensics.sample import sample_dir
        >>> case = EvidenceCase(":memory:")
        >>> _ = case.ingest_gateway(sample_dir() / "gateway" / "litellm", format="litellm")
        >>> case.has_rows("gateway_requests"), "request_chains" in case.tables()
        (True, False)
    """

    def refresh(self, *, force: bool = False) -> bool:
        """Nothing: the facts are the Spark case's to build."""
        return False

    def ensure_facts(self) -> None:
        """Nothing: the facts are the Spark case's to build (a query of a task reads evidence only)."""



def _envelope(table: str, batch: pa.RecordBatch | pa.Table | None, payload: bytes | None = None) -> pa.RecordBatch:
    if payload is None:
        sink = io.BytesIO()
        assert batch is not None
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write(batch)
        payload = sink.getvalue()
    rows = batch.num_rows if batch is not None else 0
    return pa.RecordBatch.from_arrays([pa.array([table]), pa.array([rows], pa.int64()),
                                       pa.array([payload], pa.binary())], names=["table", "rows", "batch"])


def parse_files(files: list[tuple[PlannedFile, Path]], opts: IngestOptions, workdir: Path) -> Iterator[pa.RecordBatch]:
    """Run the local loaders on files already on this machine; yield the case's tables as envelopes.

    Every ``file_id`` column holds the file's ``order`` (its place in the whole ingest), every
    ``evidence_files.path`` the path recorded for it.
    """
    by_local = {str(p.resolve()): pf for pf, p in files} | {str(p): pf for pf, p in files}
    case = EvidenceCase(workdir / "case.duckdb", now=opts.now)
    try:
        ordered = sorted(files, key=lambda x: x[0].order)
        gateway = [str(p) for pf, p in ordered if pf.kind == "gateway"]
        # the driver's resolution, with the path the bytes are at here
        engine: list[Any] = [f"{pf.node}={p}" if pf.source is None else dataclasses.replace(pf.source, path=p)
                             for pf, p in ordered if pf.kind == "engine"]
        summary = IngestSummary()
        try:
            if gateway:
                summary.extend(case.ingest_gateway(gateway, format=opts.gateway_format, tz=opts.gateway_tz,
                                                   **opts.gateway_options))
            if engine:
                extra: dict[str, Any] = {}
                if opts.node_map_text is not None:
                    (workdir / "node_map.toml").write_text(opts.node_map_text, encoding="utf-8")
                    extra["node_map"] = workdir / "node_map.toml"
                summary.extend(case.ingest_engine(engine, tz=opts.engine_tz, **extra))
        except ForensicsError as exc:
            text = str(exc)
            for local, pf in by_local.items():
                text = text.replace(local, pf.recorded)
            for pf, p in files:
                text = text.replace(str(p), pf.recorded)
            yield _envelope(_ERROR, None, pickle.dumps((type(exc).__name__, text)))
            return
        ids = dict(case.con.execute("SELECT path, file_id FROM evidence_files").fetchall())
        order = {int(fid): by_local[path].order for path, fid in ids.items()}
        recorded = {path: by_local[path].recorded for path in ids}
        for fs in summary.files:
            if fs.skipped is not None:
                fs.skipped = re.sub(r"file_id (\d+)", lambda m: f"file_id {order.get(int(m.group(1)), m.group(1))}",
                                    fs.skipped)
            found = by_local.get(str(Path(fs.path).resolve()))
            if found is not None:
                fs.path = found.recorded
            if fs.file_id is not None:
                fs.file_id = order.get(int(fs.file_id), fs.file_id)
        yield _envelope(_SUMMARY, None, pickle.dumps(summary))
        for table in case_tables(case):
            reader = case.con.sql(f'SELECT * FROM "{table}"').to_arrow_reader(_ROWS_PER_BATCH)
            sent = False
            for rb in reader:
                sent = True
                yield _envelope(table, _remap(table, rb, order, recorded))
            if not sent:  # the schema travels even when the table is empty
                yield _envelope(table, pa.RecordBatch.from_pylist([], schema=reader.schema))
    finally:
        case.close()


def _remap(table: str, rb: pa.RecordBatch, order: dict[int, int], recorded: dict[str, str]) -> pa.RecordBatch:
    cols = []
    for name, col in zip(rb.schema.names, rb.columns, strict=True):
        if name == "file_id" or name.endswith("_file_id"):
            values = [None if v is None else order.get(int(v), v) for v in col.to_pylist()]
            col = pa.array(values, type=col.type)
        elif table == "evidence_files" and name == "path":
            col = pa.array([None if v is None else recorded.get(v, v) for v in col.to_pylist()], type=col.type)
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=rb.schema)


def _open_partition(groups: list[list[PlannedFile]], opts: IngestOptions) -> Any:
    """The ``mapInArrow`` function over group numbers: each task opens its group's local files."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for gid in b.column("id").to_pylist():
                files = [(pf, pf.source.path if pf.source is not None else Path(pf.recorded))
                         for pf in groups[int(gid)]]
                scratch = tempfile.mkdtemp(prefix="forensics-spark-")
                try:
                    yield from parse_files(files, opts, Path(scratch))
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)

    return run


def task_groups(files: Sequence[PlannedFile], tasks: int, task_bytes: int = _TASK_BYTES) -> list[list[PlannedFile]]:
    """Files into parse tasks: at least ``tasks`` groups (when there are files enough), none much
    over ``task_bytes`` unless one file is; largest files first, each to the lightest group.

    Example:
        >>> fs = [PlannedFile(i, "", "", "engine", size=n) for i, n in enumerate([5, 1, 4, 2], 1)]
        >>> [[f.order for f in g] for g in task_groups(fs, 2)]
        [[1, 2], [3, 4]]
    """
    if not files:
        return []
    total = sum(f.size or 0 for f in files)
    n = max(1, min(len(files), max(tasks, -(-total // task_bytes))))
    groups: list[list[PlannedFile]] = [[] for _ in range(n)]
    load = [0] * n
    for f in sorted(files, key=lambda f: (-(f.size or 0), f.order)):
        i = min(range(n), key=lambda k: (load[k], k))
        groups[i].append(f)
        load[i] += f.size or 0
    return [sorted(g, key=lambda f: f.order) for g in groups if g]


def _parse_partition(plan: dict[str, PlannedFile], opts: IngestOptions) -> Any:
    """The ``mapInArrow`` function: bytes of some files in, envelopes of their case tables out."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        scratch = tempfile.mkdtemp(prefix="forensics-spark-")
        try:
            files: list[tuple[PlannedFile, Path]] = []
            for b in batches:
                paths = b.column("path").to_pylist()
                for i, path in enumerate(paths):
                    pf = plan[_key(path)]
                    target = Path(scratch) / str(pf.order) / pf.name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(b.column("content")[i].as_py())
                    files.append((pf, target))
            if files:
                yield from parse_files(files, opts, Path(scratch))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    return run


# -- the whole ingest ------------------------------------------------------------------------------


@dataclass
class SparkIngest:
    """What :func:`ingest` did: the summary (as a local ingest's) and the manifest written."""

    summary: IngestSummary
    manifest: Manifest
    case_dir: str
    timings: dict[str, float] = field(default_factory=dict)


def ingest(
    case_dir: str | os.PathLike[str],
    *,
    gateway: Sequence[str] = (),
    engine: Sequence[str] = (),
    gateway_format: str = "auto",
    gateway_tz: str = "UTC",
    engine_tz: str = "UTC",
    node_map: str | os.PathLike[str] | None = None,
    master: str | None = None,
    spark: SparkSession | None = None,
    replace: bool = False,
    now: dt.datetime | None = None,
    **gateway_options: Any,
) -> SparkIngest:
    """Load gateway and engine logs into a new Parquet case, parsing on the Spark executors.

    ``case_dir`` must not hold a case yet (``replace=True`` writes a new one over it). Paths may
    be local or anything the session's Hadoop file systems read (``s3a://``, ``gs://``, ...).
    """
    from forensics.spark.session import session

    if not gateway and not engine:
        raise ParameterError("nothing to ingest", hint="pass --gateway PATH and/or --engine PATH")
    t0 = time.perf_counter()
    target = local_path(os.fspath(case_dir))
    spark = spark or session(master)
    store = _Store(spark, target)
    if store.exists(MANIFEST) and not replace:
        raise CaseError("the Parquet case already exists", where=target,
                        hint="ingest into a new directory, or pass --replace to write a new case over it")
    opts = IngestOptions(gateway_format, gateway_tz, dict(gateway_options), engine_tz,
                         now or dt.datetime.now(dt.UTC).replace(tzinfo=None),
                         Path(node_map).read_text(encoding="utf-8") if node_map is not None else None)
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="forensics-plan-") as scratch:
        files = plan_files(spark, list(gateway), list(engine), Path(scratch), node_map)
    timings["plan"] = time.perf_counter() - t0
    envelopes = _parse(spark, files, opts)
    try:
        timings["parse"] = time.perf_counter() - t0 - timings["plan"]
        summary, schemas = _collect_summary(envelopes)
        manifest = _write_case(spark, store, envelopes, files, schemas, summary, opts)
    finally:
        envelopes.unpersist()
    summary.elapsed_s = time.perf_counter() - t0
    timings["total"] = summary.elapsed_s
    manifest.history.append({"write": "ingest", "backend": "spark", "master": spark.sparkContext.master,
                             "gateway": list(gateway), "engine": list(engine), "gateway_format": gateway_format,
                             "gateway_tz": gateway_tz, "engine_tz": engine_tz})
    store.write_manifest(manifest)
    return SparkIngest(summary, manifest, target, timings)


def _parse(spark: SparkSession, files: list[PlannedFile], opts: IngestOptions) -> DataFrame:
    from pyspark import StorageLevel

    refuse_oversized(files)
    local = [f for f in files if f.in_place]
    remote = [f for f in files if not f.in_place]
    parts: list[DataFrame] = []
    # one file (or one group number) per Arrow batch into the parse tasks
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1")
    try:
        if local:
            groups = task_groups(local, 2 * spark.sparkContext.defaultParallelism)
            ids = spark.range(0, len(groups), numPartitions=len(groups))
            parts.append(ids.mapInArrow(_open_partition(groups, opts), _ENVELOPE))
        if remote:
            plan = {_key(f.uri): f for f in remote}
            raw = spark.read.format("binaryFile").load([f.uri for f in remote])
            parts.append(raw.select("path", "content").mapInArrow(_parse_partition(plan, opts), _ENVELOPE))
        parsed = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
        parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
        parsed.count()  # run the parse once; every table below reads the persisted envelopes
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    return parsed


def _decode_rows(rows: Iterable[Any]) -> Iterator[pa.RecordBatch]:
    for r in rows:
        with pa.ipc.open_stream(r["batch"]) as reader:
            yield from reader


def _collect_summary(envelopes: DataFrame) -> tuple[IngestSummary, dict[str, pa.Schema]]:
    """Errors, the tasks' summaries and each table's schema (one small batch per table)."""
    from pyspark.sql import functions as F

    errors = envelopes.filter(F.col("table") == _ERROR).collect()
    if errors:
        name, text = pickle.loads(errors[0]["batch"])
        import forensics.errors as errs

        cls = getattr(errs, name, ForensicsError)
        raise (cls if isinstance(cls, type) and issubclass(cls, ForensicsError) else ForensicsError)(text)
    summary = IngestSummary()
    for r in envelopes.filter(F.col("table") == _SUMMARY).collect():
        part: IngestSummary = pickle.loads(r["batch"])
        summary.files.extend(part.files)
        for k, v in part.notes.items():
            _merge_note(summary.notes, k, v)
    firsts = envelopes.filter(~F.col("table").isin(_ERROR, _SUMMARY)).groupBy("table").agg(
        F.first("batch").alias("batch")).collect()
    schemas = {}
    for r in firsts:
        with pa.ipc.open_stream(r["batch"]) as reader:
            schemas[str(r["table"])] = reader.schema
    return summary, schemas


def _merge_note(notes: dict[str, Any], key: str, value: Any) -> None:
    if key not in notes:
        notes[key] = value
    elif isinstance(value, dict) and isinstance(notes[key], dict):
        for k, v in value.items():
            notes[key][k] = notes[key].get(k, 0) + v if isinstance(v, int) else v
        notes[key] = dict(sorted(notes[key].items(), key=lambda kv: -kv[1] if isinstance(kv[1], int) else 0))
    elif isinstance(value, list) and isinstance(notes[key], list):
        notes[key] = (notes[key] + value)[:5]
    elif isinstance(value, int) and isinstance(notes[key], int):
        notes[key] += value


class _Store:
    """Where the case goes: a local directory or a Hadoop file system URI."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        self.remote = is_remote(root)

    def uri(self, rel: str) -> str:
        return f"{self.root}/{rel}" if self.remote else Path(self.root, rel).as_uri()

    def exists(self, rel: str) -> bool:
        if not self.remote:
            return Path(self.root, rel).exists()
        jvm, conf = _hadoop(self.spark)
        p = jvm.org.apache.hadoop.fs.Path(f"{self.root}/{rel}")
        return bool(p.getFileSystem(conf).exists(p))

    def write_manifest(self, manifest: Manifest) -> None:
        if not self.remote:
            from forensics.spark.parquet_case import write_manifest_local

            Path(self.root).mkdir(parents=True, exist_ok=True)
            write_manifest_local(Path(self.root), manifest)
            return
        jvm, conf = _hadoop(self.spark)
        p = jvm.org.apache.hadoop.fs.Path(f"{self.root}/{MANIFEST}")
        out = p.getFileSystem(conf).create(p, True)  # one PUT on object stores: atomic
        try:
            out.write(bytearray(manifest.to_json().encode("utf-8")))
        finally:
            out.close()


def _write_case(spark: SparkSession, store: _Store, envelopes: DataFrame, files: list[PlannedFile],
                schemas: dict[str, pa.Schema], summary: IngestSummary, opts: IngestOptions) -> Manifest:
    """Decode each table, run the whole-case passes, write the Parquet tables; the manifest to write."""
    from pyspark.sql import functions as F

    from forensics.spark.passes import (
        final_file_ids,
        flag_gateway_duplicates,
        rebuild_engine_starts,
    )

    part = f"ingest-{dt.datetime.now(dt.UTC).strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    evidence = _table(spark, envelopes, "evidence_files", schemas)
    id_map, skipped = final_file_ids(evidence.toArrow(), files)
    for fs in summary.files:
        if fs.file_id is not None and int(fs.file_id) in skipped:
            first = skipped[int(fs.file_id)]
            fs.skipped, fs.file_id = f"same bytes as file_id {first} of this ingest", None
            fs.lines_read = fs.rows_loaded = fs.rows_rejected = fs.rows_duplicate = 0
        elif fs.file_id is not None:
            fs.file_id = id_map.get(int(fs.file_id))
    order = {f.recorded: f.order for f in files}
    summary.files.sort(key=lambda f: order.get(f.path, 0))
    tables: dict[str, DataFrame] = {}
    for name in schemas:
        tables[name] = _remap_ids(_table(spark, envelopes, name, schemas), id_map)
    if "schema_info" in tables:
        tables["schema_info"] = tables["schema_info"].dropDuplicates(["key"])
    gw = tables.get("gateway_requests")
    if gw is not None:
        tables["gateway_requests"], dup_counts = flag_gateway_duplicates(gw)
    else:
        dup_counts = {}
    if "engine_startup_facts" in tables and "engine_starts" in tables:
        tables["engine_starts"] = rebuild_engine_starts(spark, tables["engine_startup_facts"],
                                                        tables.get("engine_batches"), schemas["engine_starts"], opts)
    ev = tables["evidence_files"]
    if dup_counts:
        fix = spark.createDataFrame(
            [(int(k), int(v[0]), int(v[1])) for k, v in dup_counts.items()],
            "fid INT, dup_local BIGINT, dup_global BIGINT")
        ev = (ev.join(fix, ev.file_id == fix.fid, "left")
              .withColumn("rows_loaded", F.col("rows_loaded") + F.coalesce(F.col("dup_local"), F.lit(0))
                          - F.coalesce(F.col("dup_global"), F.lit(0)))
              .withColumn("rows_duplicate", F.coalesce(F.col("dup_global"), F.col("rows_duplicate")))
              .select(*tables["evidence_files"].columns))
        for fs in summary.files:
            if fs.file_id is not None and int(fs.file_id) in dup_counts:
                local, glob = dup_counts[int(fs.file_id)]
                fs.rows_loaded += local - glob
                fs.rows_duplicate = glob
    tables["evidence_files"] = ev
    # row counts from the tasks' batches (one small job); recounted where files were dropped or
    # rows replaced by a whole-case pass
    counts = {str(r["table"]): int(r["n"]) for r in envelopes.groupBy("table").agg(F.sum("rows").alias("n")).collect()}
    for rebuilt in ("engine_starts", "schema_info"):
        counts.pop(rebuilt, None)
    if skipped:  # rows of repeated files were dropped: count what is written
        counts = {}
    manifest = Manifest()
    for name, df in sorted(tables.items()):
        # in file and line order within each part file (no global sort: a shuffle per table)
        keys = [c for c in ("file_id", "line_no", "node", "start_seq", "key") if c in df.columns]
        (df.sortWithinPartitions(*keys) if keys else df).write.mode("overwrite").parquet(store.uri(f"{name}/{part}"))
        manifest.tables[name] = TablePart([part], counts.get(name, 0) if name in counts else
                                          int(spark.read.parquet(store.uri(f"{name}/{part}")).count()))
    return manifest


def _table(spark: SparkSession, envelopes: DataFrame, name: str, schemas: dict[str, pa.Schema]) -> DataFrame:
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = schemas[name]

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for payload in b.column("batch").to_pylist():
                with pa.ipc.open_stream(payload) as reader:
                    for rb in reader:
                        yield rb.cast(schema) if rb.schema != schema else rb

    spark_schema = from_arrow_schema(schema)
    return envelopes.filter(F.col("table") == name).select("batch").mapInArrow(decode, spark_schema)


def _remap_ids(df: DataFrame, id_map: dict[int, int]) -> DataFrame:
    """Provisional ids (a file's place in the ingest) to final ids; rows of skipped files dropped."""
    from pyspark.sql import functions as F

    cols = [c for c in df.columns if c == "file_id" or c.endswith("_file_id")]
    if not cols:
        return df
    mapping = F.create_map(*[x for k, v in sorted(id_map.items()) for x in (F.lit(k), F.lit(v))])
    out = df
    if "file_id" in cols:
        out = out.filter(F.col("file_id").isNull() | F.col("file_id").isin(list(id_map)))
    for c in cols:
        out = out.withColumn(c, F.when(F.col(c).isNull(), None).otherwise(
            mapping[F.col(c)].cast(df.schema[c].dataType)))
    return out

