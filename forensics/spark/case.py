"""A Parquet case opened on Spark: the same queries, run by Spark SQL, answered as DuckDB relations.

:class:`SparkCase` is a :class:`~forensics.case.Case` whose SQL runs on Spark: every analysis
function, chart, report and notification list takes it as it takes a DuckDB case. The tables are
the case's Parquet directories (temp views of a session of its own, so two cases never see each
other's tables); the views the queries read are created from the toolkit's own DuckDB definitions,
translated (:mod:`forensics.spark.translate`). Queries run on the cluster; their result (an
affected list, a tenant table: small) comes back as Arrow and is wrapped in an in-process DuckDB
relation, so ``.df()``, ``.arrow()``, ``.order()`` and the outputs work unchanged. A result too
large for the driver stays distributed with :meth:`SparkCase.spark_query` (a Spark DataFrame).

Example (needs a Java runtime: not run as a doctest; tests/test_spark.py makes the same calls)::

    import forensics
    case = forensics.open_case("case_parquet/", backend="spark")
    forensics.affected_requests(case).df()
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
import sqlglot

from forensics.case import Case, check_output, configure_connection, open_case
from forensics.errors import CaseError, ParameterError, QueryError
from forensics.spark.parquet_case import Manifest, case_views, read_manifest
from forensics.spark.session import check_alive, jvm_gone, session
from forensics.spark.translate import Step, TranslationError, statement_steps
from forensics.sqlfiles import load_query, queries_dir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from forensics.sources.summary import IngestSummary

#: suffix of a query's own Spark form, beside it in queries/ (used instead of the translation)
OVERRIDE_SUFFIX = ".spark.sql"

_PLACEHOLDER = re.compile(r"(?<![\w:]):([A-Za-z_]\w*)")


def spark_override(name: str) -> str | None:
    """The text of ``queries/<name>.spark.sql`` if the query has its own Spark form, else None.

    Example:
        >>> spark_override("pool_audit") is None
        True
    """
    f = queries_dir().joinpath(f"{name}{OVERRIDE_SUFFIX}")
    return f.read_text(encoding="utf-8") if f.is_file() else None


def view_overrides() -> dict[str, str]:
    """The Spark forms of case views (``forensics/schema.spark.sql``): name -> SELECT text.

    Example:
        >>> "engine_batch_fields" in view_overrides()
        True
    """
    from importlib import resources

    f = resources.files("forensics").joinpath("schema.spark.sql")
    if not f.is_file():
        return {}
    out: dict[str, str] = {}
    for tree in sqlglot.parse(f.read_text(encoding="utf-8"), read="spark"):
        if isinstance(tree, sqlglot.exp.Create) and tree.kind == "VIEW" and tree.expression is not None:
            out[tree.this.name] = tree.expression.sql(dialect="spark", comments=False)
    return out


def is_remote(path: str) -> bool:
    """True for a URI Spark reads through a Hadoop file system (``s3a://``, ``gs://``, ``hdfs://``...).

    Example:
        >>> is_remote("s3a://bucket/case"), is_remote("/data/case"), is_remote("file:///data/case")
        (True, False, False)
    """
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", path)
    return m is not None and m.group(1).lower() != "file"


def local_path(path: str) -> str:
    """A local path without its ``file://`` scheme, made absolute (remote URIs unchanged)."""
    if is_remote(path):
        return path
    if path.startswith("file://"):
        path = path[len("file://"):]
    return os.path.abspath(path)


def read_text_uri(spark: SparkSession, uri: str) -> str:
    """Read a small text file through Spark's Hadoop file systems (a remote manifest)."""
    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(conf)
    if not fs.exists(path):
        raise FileNotFoundError(uri)
    stream = fs.open(path)
    try:
        data = jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
    finally:
        stream.close()
    return bytes(data).decode("utf-8")


def run_steps(spark: SparkSession, steps: Sequence[Step], params: dict[str, Any]) -> DataFrame:
    """Run a query's steps: each CTE a temp view (materialised when read twice), then the final one."""
    created: list[str] = []
    try:
        for step in steps:
            df = spark.sql(step.sql, args=_bound(step.sql, params) or None)
            if step.view is None:
                return df
            if step.uses > 1:
                # computed once, lineage cut: later steps read the rows, not the plan again
                df = df.localCheckpoint(eager=True)
            df.createOrReplaceTempView(step.view)
            created.append(step.view)
        raise QueryError("a query without a final SELECT")
    finally:
        # the returned DataFrame holds the analysed plans, not the names
        drop_views(spark, created)


def drop_views(spark: SparkSession, views: Iterable[str]) -> None:
    """Drop temp views, unless the JVM is gone (the error that says so must not be replaced by a py4j one)."""
    if jvm_gone() is None:
        for view in views:
            spark.catalog.dropTempView(view)


def _bound(sql: str, params: dict[str, Any]) -> dict[str, Any]:
    names = set(_PLACEHOLDER.findall(re.sub(r"'(?:[^']|'')*'", "''", sql)))
    missing = names - set(params)
    if missing:
        raise QueryError(f"parameters {sorted(missing)} are used but were not given")
    return {k: _spark_value(v) for k, v in params.items() if k in names}


def _spark_value(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def _view_steps(name: str, create_sql: str) -> list[Step]:
    """The SELECT of a ``CREATE VIEW`` statement as Spark steps."""
    m = re.match(r"(?is)^\s*CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+\S+\s+AS\s+(.*?);?\s*$", create_sql)
    if not m:
        raise TranslationError(f"view {name}: not a CREATE VIEW ... AS SELECT statement")
    return statement_steps(m.group(1), f"v_{name}")


def _heavy(select_sql: str) -> bool:
    """Worth caching: a view that aggregates, joins, windows or recurses (not a plain filter)."""
    text = select_sql.upper()
    return any(word in text for word in (" GROUP BY ", " JOIN ", " OVER ", "RECURSIVE", " UNION "))


@dataclass
class _Opened:
    """A Parquet case open in this process: its Spark session (tables, kept derived tables and views) and results."""

    context: Any
    spark: SparkSession
    views: list[str]
    results: dict[tuple[str, tuple[tuple[str, str], ...]], pa.Table]
    #: the derived tables and heavy views, each computed once (see SparkCase._keep)
    kept: dict[str, DataFrame]
    users: int = 0


#: (path, manifest) -> the open case's shared state; a second open of it (a CLI call in a notebook,
#: a re-run cell) reuses the tables and the derived tables already computed
_OPENED: dict[tuple[str, str], _Opened] = {}


class SparkCase(Case):
    """A Parquet case on Spark, usable wherever a :class:`~forensics.case.Case` is.

    Example:
        >>> SparkCase("/no/such/dir")                                      # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        forensics.errors.CaseError: /no/such/dir: not a Parquet case: case.json not found (...)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        master: str | None = None,
        spark: SparkSession | None = None,
        now: dt.datetime | None = None,
    ) -> None:
        raw = os.fspath(path)
        self.path = local_path(raw)
        self.read_only = True
        self.now = now
        self.memory_limit = self.query_memory_limit = "2GB"
        self._results: dict[tuple[str, tuple[tuple[str, str], ...]], pa.Table] = {}
        self._kept: dict[str, DataFrame] = {}
        if not is_remote(self.path):
            self.manifest: Manifest = read_manifest(self.path)  # before starting a JVM
        # results are small: they live in an in-process DuckDB for the outputs
        self.con = duckdb.connect()
        configure_connection(self.con)
        base = spark or session(master)
        if is_remote(self.path):
            self.manifest = read_manifest(self.path, lambda uri: read_text_uri(base, uri))
        self._key = (self.path, self.manifest.to_json())
        opened = _OPENED.get(self._key)
        if opened is not None and opened.context is base.sparkContext and jvm_gone() is None:
            # the same case (same manifest) already open in this process: its tables, cached
            # derived tables and results are shared, not built again (a Parquet case never changes)
            self.spark: SparkSession = opened.spark
            self._views, self._results, self._kept = opened.views, opened.results, opened.kept
        else:
            #: a session of this case's own: temp views (its tables) are per session
            self.spark = base.newSession()
            self._register()
            opened = _Opened(base.sparkContext, self.spark, self._views, self._results, self._kept)
            _OPENED[self._key] = opened
        opened.users += 1

    # -- tables and views -------------------------------------------------------------------------

    def _table_uris(self, table: str) -> list[str]:
        parts = self.manifest.tables[table].parts
        return [f"{self.path.rstrip('/')}/{table}/{p}" for p in parts]

    def _register(self) -> None:
        from forensics.facts import FACTS

        for table in sorted(set(self.manifest.tables) - set(FACTS)):
            uris = self._table_uris(table)
            if not uris:
                raise CaseError(f"table {table} has no parts in the manifest", where=self.path)
            self.spark.read.parquet(*uris).createOrReplaceTempView(table)
        # facts that read only the case's tables come first: schema views read them (node_activity)
        self._build_facts(early=True)
        with open_case(":memory:") as reference:
            views = case_views(reference)
        self._views = [name for name, _ in views]
        overrides = view_overrides()
        for name, create_sql in views:
            steps = (statement_steps(overrides[name], f"v_{name}", read="spark") if name in overrides
                     else _view_steps(name, create_sql))
            df = run_steps(self.spark, steps, {})
            (self._keep(name, df) if _heavy(create_sql) else df).createOrReplaceTempView(name)
        self._build_facts(early=False)

    def _keep(self, name: str, df: DataFrame) -> DataFrame:
        """``df`` computed once, when first read, and kept; later plans see its rows, not its plan.

        A lazy local checkpoint, not ``CACHE TABLE``: a cached view still hands every query that
        reads it its whole analysed plan (the facts read facts that read views: plans of 9-35 MB
        of text on the sample), which Spark analyses, matches against every cache entry and
        prints for each query; most of the Spark tests' time went there, not into the tasks.
        """
        self._drop_kept(name)
        kept = df.localCheckpoint(eager=False)
        self._kept[name] = kept
        return kept

    def is_kept(self, name: str) -> bool:
        """True while the derived table or view ``name`` is held computed (or to be, on first read)."""
        kept = self._kept.get(name)
        return kept is not None and jvm_gone() is None and bool(
            kept._jdf.queryExecution().analyzed().rdd().getStorageLevel().isValid())

    def _drop_kept(self, name: str) -> None:
        kept = self._kept.pop(name, None)
        if kept is not None and jvm_gone() is None:
            kept._jdf.queryExecution().analyzed().rdd().unpersist(False)

    def _build_facts(self, *, early: bool | None = None) -> None:
        """The derived tables (:data:`forensics.facts.FACTS`, in order) as views of this session.

        Built from the case's own tables, never read from the Parquet case (an export leaves them
        out). Every one is kept (:meth:`_keep`: computed once, when first read), the ones DuckDB
        keeps as views too: a Parquet case never changes, and Spark would compute a view again for
        each query that reads it (``requests`` twice in ``affected_requests`` alone).
        ``early``: only the facts that read nothing but the case's tables (True), only the others
        (False), or all (None).
        """
        from forensics.facts import FACTS, fact_reads, fact_sql

        tables = set(self.manifest.tables) - set(FACTS)
        for name in FACTS:
            if early is not None and early != (set(fact_reads(name)) <= tables):
                continue
            df = run_steps(self.spark, statement_steps(fact_sql(name), f"f_{name}"), {})
            self._keep(name, df).createOrReplaceTempView(name)
        views: list[str] = self.__dict__.setdefault("_views", [])  # in place: shared by every open of the case
        views.extend(n for n in FACTS if n not in views)

    def refresh(self, *, force: bool = False) -> bool:
        """Rebuild the derived tables on Spark when ``force`` (a Parquet case never changes once written)."""
        if force:
            self._results.clear()
            self._build_facts()
        return force

    def ensure_facts(self) -> None:
        """Nothing to do: the derived tables are built when the case is opened."""

    def tables(self) -> list[str]:
        """Names of the case's tables and views, sorted."""
        return sorted({*self.manifest.tables, *self._views})

    def has_rows(self, table: str) -> bool:
        """True when ``table`` exists and has at least one row."""
        if table not in self.tables():
            return False
        return bool(self.spark.table(table).limit(1).count())

    # -- SQL ----------------------------------------------------------------------------------------

    def spark_sql(self, query: str, params: dict[str, Any] | None = None, *, dialect: str = "duckdb") -> DataFrame:
        """Run DuckDB SQL (translated) on the case and keep the result distributed (a Spark DataFrame)."""
        steps = statement_steps(query, "adhoc", read=dialect)
        return run_steps(self.spark, steps, dict(params or {}))

    def sql(self, query: str, params: dict[str, Any] | Sequence[Any] | None = None) -> duckdb.DuckDBPyRelation:
        """Run DuckDB SQL on the case (translated to Spark SQL); the result as a DuckDB relation.

        Example (needs a Java runtime: not run as a doctest; tests/test_spark.py makes the same calls)::

            case.sql("SELECT count(*) AS n FROM gateway_requests").fetchall()   # [(10004,)]
        """
        if params is not None and not isinstance(params, dict):
            raise QueryError("the Spark backend binds parameters by name ($name) only")
        try:
            return self._local(self.spark_sql(query, params))
        except Exception:
            check_alive()
            raise

    def spark_query(self, name: str, params: dict[str, Any]) -> DataFrame:
        """Run ``queries/<name>.sql`` on Spark and keep the result distributed (a Spark DataFrame).

        Its own ``<name>.spark.sql`` is run instead of the translation when it exists. A query with
        its inputs get each input's result (materialised) as ``<input>_result`` for its run.
        """
        q = load_query(name)
        declared = set(q.all_param_names())
        if declared != set(params):
            raise QueryError(
                f"query {name}.sql declares parameters {sorted(declared)} but was called with {sorted(params)}",
                where=q.source,
            )
        override = spark_override(name)
        try:
            steps = (statement_steps(override, name, read="spark") if override is not None
                     else statement_steps(q.sql.strip().rstrip(";"), name))
        except TranslationError as exc:
            raise QueryError(f"query {name}: {exc}", where=q.source) from exc
        own = {k: v for k, v in params.items() if k in set(q.param_names)}
        views: list[str] = []
        try:
            # every input computed before any is registered: an input's own run registers and
            # drops the inputs it reads (notification_requests and notifications share some)
            results = [(inp, self._result(inp, {k: params[k] for k in load_query(inp).all_param_names()}))
                       for inp in q.inputs]
            for inp, src in results:
                views.append(f"{inp}_result")
                self.spark.createDataFrame(src).createOrReplaceTempView(views[-1])
            return run_steps(self.spark, steps, own)
        except Exception as exc:
            if isinstance(exc, QueryError):
                raise
            check_alive()  # a dead JVM is named as such, not as a failed query
            raise QueryError(f"query {name} failed on Spark: {_first_line(exc)}", where=q.source) from exc
        finally:
            drop_views(self.spark, views)

    def run_query(self, name: str, params: dict[str, Any]) -> duckdb.DuckDBPyRelation:
        """Run ``queries/<name>.sql`` on Spark; its result as a DuckDB relation (collected).

        A Parquet case does not change once written: a result is computed once per parameter
        set and kept (the notification list and the report ask for the affected set several times).
        """
        return self.con.from_arrow(self._result(name, params))

    def _result(self, name: str, params: dict[str, Any]) -> pa.Table:
        key = (name, tuple(sorted((k, repr(v)) for k, v in params.items())))
        if key not in self._results:
            self._results[key] = self.spark_query(name, params).toArrow()
        return self._results[key]

    def _local(self, df: DataFrame) -> duckdb.DuckDBPyRelation:
        table = df.toArrow()
        return self.con.from_arrow(table)

    # -- what a Parquet case does not do ----------------------------------------------------------

    def ingest_gateway(self, paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
                       format: str = "auto", tz: str = "UTC", quiet: bool = True, **options: Any) -> IngestSummary:
        raise CaseError("a Parquet case is written by the Spark ingest, not loaded into file by file",
                        where=self.path, hint="use forensics.spark.ingest(CASE_DIR, gateway=..., engine=...) "
                        "or 'forensics ingest CASE_DIR --backend spark'")

    def ingest_engine(self, paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
                      tz: str = "UTC", quiet: bool = True, **options: Any) -> IngestSummary:
        return self.ingest_gateway(paths)

    def check_output(self, out: str | os.PathLike[str]) -> Path:
        """Refuse to write ``out`` inside the Parquet case or over one of its evidence files."""
        if not is_remote(self.path):
            root, target = Path(self.path).resolve(), Path(out).resolve()
            if target == root or root in target.parents:
                raise ParameterError(f"refusing to write {out}: it is inside the Parquet case {self.path}",
                                     hint="choose an output path outside the case directory")
        paths = [str(r[0]) for r in self.sql("SELECT DISTINCT path FROM evidence_files").fetchall()]
        # evidence read through Hadoop is recorded as its URI: a file: one is a local file here
        local = [re.sub(r"^file:/+", "/", p) for p in paths if p.startswith("file:") or not is_remote(p)]
        return check_output(out, evidence=local)

    def close(self) -> None:
        """Release the case's kept derived tables and views and its in-process result store (the session stays).

        While the same case is open elsewhere in the process (shared tables), only this handle closes.
        """
        opened = _OPENED.get(self._key)
        if opened is not None and opened.spark is self.spark:
            opened.users -= 1
            if opened.users > 0:
                self.con.close()
                return
            del _OPENED[self._key]
        for name in list(self._kept):
            self._drop_kept(name)
        self.con.close()

    def __repr__(self) -> str:
        return f"SparkCase({self.path!r})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
