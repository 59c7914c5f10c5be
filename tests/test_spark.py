"""The Spark backend gives the DuckDB answers: every query, every view, the ingest and the outputs.

One Spark session (``local[2]``) and one Parquet case serve the whole run: the Spark ingest of the
bundled sample, whose tables are first proven equal to the DuckDB case's (every row and column);
every query and view then runs on both. New query files and views are picked up automatically.
The export (``forensics export parquet``) is checked table by table through DuckDB.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest

import forensics
from forensics.case import Case
from forensics.cli import main
from forensics.facts import FACTS
from forensics.spark.parquet_case import case_views, export_parquet, read_manifest
from forensics.sqlfiles import load_query, queries_dir, query_names

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data"
NOW = dt.datetime(2026, 10, 1)  # the sample case fixture's injected clock

if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    if os.environ.get("CI"):
        raise RuntimeError("CI needs a Java runtime for the Spark tests (.ci/run installs one)")
    pytest.skip("no Java runtime: the Spark backend cannot start (apt-get install default-jre-headless)",
                allow_module_level=True)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from forensics.spark.session import session, stop

    s = session("local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    yield s
    stop()


@pytest.fixture(autouse=True)
def _jvm_alive() -> Iterator[None]:
    """A JVM that died fails every later test with its cause in one line (not 40 py4j tracebacks)."""
    from forensics.spark.session import jvm_gone

    gone = jvm_gone()
    if gone is not None:
        pytest.fail(f"{gone}; it died before this test", pytrace=False)
    yield
    gone = jvm_gone()
    if gone is not None:
        pytest.fail(f"{gone}; it died during this test", pytrace=False)


@pytest.fixture(scope="session")
def ingested_dir(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from forensics.spark import ingest

    out = tmp_path_factory.mktemp("spark") / "ingested"
    ingest(out, gateway=[str(SAMPLE / "gateway")], engine=[str(SAMPLE / "engine")],
           engine_tz="Asia/Singapore", spark=spark, now=NOW)
    return out


@pytest.fixture(scope="session")
def ingested(ingested_dir: Path) -> Iterator[Case]:
    case = forensics.open_case(ingested_dir, backend="spark")
    yield case
    case.close()


# -- comparing results ----------------------------------------------------------------------------


def _norm(value: Any) -> Any:
    """One form for a value whatever engine produced it (floats to 12 digits, maps as sorted pairs)."""
    if value is None:
        return None
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float):
        return None if math.isnan(value) else float(f"{value:.12g}")
    if isinstance(value, dict):
        return tuple(sorted((str(k), _norm(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_norm(v) for v in value)
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        return _norm(value.item())
    return value


def _rows(rel: duckdb.DuckDBPyRelation) -> tuple[list[str], list[tuple[Any, ...]]]:
    rows = [tuple(_norm(v) for v in r) for r in rel.fetchall()]
    return list(rel.columns), sorted(rows, key=lambda r: [(v is None, type(v).__name__, str(v)) for v in r])


def _same(local: duckdb.DuckDBPyRelation, spark: duckdb.DuckDBPyRelation) -> None:
    cols_l, rows_l = _rows(local)
    cols_s, rows_s = _rows(spark)
    assert cols_s == cols_l
    assert len(rows_s) == len(rows_l)
    for a, b in zip(rows_l, rows_s, strict=True):
        assert b == a, {c: (x, y) for c, x, y in zip(cols_l, a, b, strict=True) if x != y}


def _params(name: str, given: bool) -> dict[str, Any]:
    """Every declared parameter: all NULL (derived from the logs), or a value for each."""
    values = {"limit_tokens": 681_274, "start": dt.datetime(2026, 9, 2), "end": dt.datetime(2026, 9, 9, 15),
              "node": "prefill-0", "window_s": 600, "request_id": None}
    out = {p: (values.get(p) if given else None) for p in load_query(name).all_param_names()}
    if "window_s" in out:
        out["window_s"] = 600
    if "threshold" in out:  # probing_tenants: 1 flags the sample's tenants (its default 5, none)
        out["threshold"] = 1
    return out


# -- the local session's JVM -------------------------------------------------------------------------


def test_local_jvm_code_cache_is_not_the_c1_only_48_mb(spark: Any) -> None:
    """Regression: C1-only HotSpot reserves 48 MB of code cache; the suite's queries filled it and killed the JVM."""
    bean = spark._jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        spark._jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    reserved = int(bean.getVMOption("ReservedCodeCacheSize").getValue())
    assert reserved >= 240 * 1024 * 1024, reserved


# -- the DuckDB path stays free of Spark -------------------------------------------------------------


def test_duckdb_path_never_imports_pyspark_or_sqlglot(sample_case_path: Path, tmp_path: Path) -> None:
    code = f"""
import sys, forensics
from forensics.spark import export_parquet
case = forensics.open_case({str(sample_case_path)!r}, read_only=True)
forensics.affected_requests(case).fetchall(); forensics.notifications(case)
export_parquet(case, {str(tmp_path / 'pq')!r})
bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'sqlglot', 'py4j'))
assert not bad, bad
print('ok')
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# -- every query and view, both engines ----------------------------------------------------------------


@pytest.mark.parametrize("given", [False, True], ids=["derived", "given"])
@pytest.mark.parametrize("name", query_names())
def test_every_query_gives_the_same_rows_on_spark(name: str, given: bool, sample_case: Case, ingested: Case) -> None:
    params = _params(name, given)
    _same(sample_case.run_query(name, params), ingested.run_query(name, params))


@pytest.mark.parametrize("view", [name for name, _ in case_views(forensics.open_case(":memory:"))])
def test_every_view_gives_the_same_rows_on_spark(view: str, sample_case: Case, ingested: Case) -> None:
    _same(sample_case.sql(f"SELECT * FROM {view}"), ingested.sql(f"SELECT * FROM {view}"))


@pytest.mark.parametrize("fact", FACTS)
def test_every_derived_table_gives_the_same_rows_on_spark(fact: str, sample_case: Case, ingested: Case) -> None:
    """The facts (queries/facts/) are built by each engine from its own tables: the same rows."""
    _same(sample_case.sql(f"SELECT * FROM {fact}"), ingested.sql(f"SELECT * FROM {fact}"))


def test_every_spark_override_belongs_to_a_query() -> None:
    names = set(query_names())
    overrides = [p.name for p in queries_dir().iterdir() if p.name.endswith(".spark.sql")]
    assert all(o[: -len(".spark.sql")] in names for o in overrides), overrides


def test_every_view_override_belongs_to_a_view() -> None:
    from forensics.spark.case import view_overrides

    views = {name for name, _ in case_views(forensics.open_case(":memory:"))}
    assert set(view_overrides()) <= views


def _same_tables(duckdb_case: Path, case_dir: Path) -> None:
    """Every base table of the DuckDB case equals the Parquet case's, row for row (through DuckDB)."""
    manifest = read_manifest(case_dir)
    con = duckdb.connect(str(duckdb_case), read_only=True)
    # the derived tables (forensics.facts) are not evidence: each engine builds its own
    local = {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'").fetchall()} - set(FACTS)
    assert set(manifest.tables) == local
    for table, info in manifest.tables.items():
        files = [str(case_dir / table / p / "*.parquet") for p in info.parts]
        pq = f"read_parquet({files!r})"
        n = con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
        if table == "schema_info":
            # the marker of the derived tables is derived state too (see FACTS above): each case
            # writes its own; every other schema_info row is compared, the manifest's count is the file's
            n = con.execute(f"SELECT count(*) FROM {pq}").fetchall()[0][0]
            table = "(SELECT * FROM schema_info WHERE key <> 'facts_built_from')"
            pq = f"(SELECT * FROM {pq} WHERE key <> 'facts_built_from')"
        assert info.rows == n, table
        for a, b in ((table, pq), (pq, table)):
            extra = con.execute(f"SELECT * FROM (SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b}) LIMIT 3").fetchall()
            assert extra == [], (table, a, extra)
    con.close()


def test_export_parquet_keeps_every_table_and_row(sample_case_path: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as done:
        main(["export", "parquet", str(sample_case_path), str(tmp_path / "case")])
    assert done.value.code in (0, None)
    _same_tables(sample_case_path, tmp_path / "case")


def test_export_refuses_a_directory_that_holds_something_else(sample_case_path: Path, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with forensics.open_case(sample_case_path, read_only=True) as case, pytest.raises(forensics.ForensicsError):
        export_parquet(case, tmp_path, replace=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"


# -- the Spark ingest ----------------------------------------------------------------------------------


def test_spark_ingest_gives_the_tables_of_the_local_ingest(sample_case_path: Path, ingested_dir: Path) -> None:
    """Every table, every column, every row (file ids, paths, sha256, line numbers included)."""
    _same_tables(sample_case_path, ingested_dir)


def test_inputs_given_as_uris_are_listed_and_read_through_hadoop(spark: Any, sample_case_path: Path,
                                                                 ingested_dir: Path, tmp_path: Path) -> None:
    """The path of s3a://, gs://, abfs://, hdfs:// inputs (Hadoop listing, binaryFile), here with file://."""
    from forensics.spark import ingest

    src = SAMPLE / "engine" / "prefill-1"
    done = ingest(tmp_path / "case", engine=[f"prefill-1={src.as_uri()}/"], engine_tz="Asia/Singapore",
                  spark=spark, now=NOW)
    paths = sorted(f.path for f in done.summary.files)
    assert paths and all(p.startswith("file:") and "/prefill-1/" in p for p in paths)
    con = duckdb.connect(str(sample_case_path), read_only=True)
    m = read_manifest(tmp_path / "case")

    def pq(table: str) -> str:
        files = [str(tmp_path / "case" / table / p / "*.parquet") for p in m.tables[table].parts]
        return f"read_parquet({files!r})"

    # the same rows as the local ingest's for that node (ids differ: one node, not the whole sample)
    local = con.execute(
        "SELECT e.line_no, e.kind, e.rid, e.bootstrap_room, e.prompt_tokens, f.sha256 FROM engine_requests e "
        "JOIN evidence_files f USING (file_id) WHERE e.node = 'prefill-1' ORDER BY ALL").fetchall()
    spark_rows = con.execute(
        f"SELECT e.line_no, e.kind, e.rid, e.bootstrap_room, e.prompt_tokens, f.sha256 FROM {pq('engine_requests')} e "
        f"JOIN {pq('evidence_files')} f USING (file_id) ORDER BY ALL").fetchall()
    assert spark_rows == local and len(local) > 100
    starts = con.execute(f"SELECT * EXCLUDE (file_id) FROM {pq('engine_starts')} ORDER BY start_seq").fetchall()
    assert starts == con.execute("SELECT * EXCLUDE (file_id) FROM engine_starts WHERE node = 'prefill-1' "
                                 "ORDER BY start_seq").fetchall()


def test_spark_ingest_keeps_the_pods_of_a_kubelet_layout(spark: Any, tmp_path: Path) -> None:
    """Files of /var/log/pods (CRI-wrapped, rotated): the tasks read them with the pod, container
    and namespace the collection stage found on the driver; every table equals the local ingest's."""
    from forensics.sample.wrap import wrap_tree
    from forensics.spark import ingest

    src = tmp_path / "plain"
    shutil.copytree(SAMPLE / "engine" / "prefill-1", src / "prefill-1")
    wrap_tree(src, tmp_path / "k8s", "cri", tz="Asia/Singapore")
    pods = str(tmp_path / "k8s" / "var" / "log" / "pods")
    local = tmp_path / "local.duckdb"
    with forensics.open_case(local, now=NOW) as case:
        case.ingest_engine([pods], tz="Asia/Singapore")
        options = [r[0] for r in case.con.execute("SELECT options FROM evidence_files").fetchall()]
    assert len(options) >= 2 and all('"pod"' in str(o) and '"container"' in str(o) for o in options)
    ingest(tmp_path / "case", engine=[pods], engine_tz="Asia/Singapore", spark=spark, now=NOW)
    _same_tables(local, tmp_path / "case")


def test_a_uri_file_binaryfile_cannot_hold_is_refused_naming_it(spark: Any, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """binaryFile holds a file as one Java array (< 2 GiB): a bigger one is an error before any task,
    never a truncated read (here with the limit lowered); a local path has no such limit."""
    import forensics.spark.distributed as distributed
    from forensics.spark import ingest

    src = SAMPLE / "engine" / "prefill-1" / "sglang.log"
    monkeypatch.setattr(distributed, "BINARY_FILE_MAX_BYTES", src.stat().st_size)
    with pytest.raises(forensics.ForensicsError, match=r"sglang\.log: [\d,]+ bytes: .*below 2 GiB") as err:
        ingest(tmp_path / "case", engine=[f"prefill-1={src.as_uri()}"], spark=spark, now=NOW)
    assert "file:" in str(err.value)
    assert not (tmp_path / "case" / "case.json").exists()


@pytest.mark.parametrize("func", ["affected_requests", "affected_tenants", "leak_sources", "pool_audit",
                                  "probing_tenants"])
def test_spark_ingest_answers_as_the_local_case(func: str, sample_case: Case, ingested: Case) -> None:
    _same(getattr(forensics, func)(sample_case), getattr(forensics, func)(ingested))


def test_notification_list_from_the_spark_path(sample_case: Case, ingested: Case) -> None:
    """Row for row in the list's own order (recipients first), every column."""
    local, spark = forensics.notifications(sample_case).df(), forensics.notifications(ingested).df()
    assert spark.to_dict("records") == local.to_dict("records")
    assert len(local) > 0


def _report(case: Case) -> str:
    name = Path(case.path).name
    text = forensics.impact_report(case, now=NOW).replace(f"`{name}`", "`CASE`").replace(
        f'"case": "{name}"', '"case": "CASE"')
    # DuckDB's SUM of a BIGINT is a HUGEINT, which pandas turns into a float ("4.0"); Spark's is a
    # BIGINT ("4"): the same number, printed two ways (the report's integer formatting is #15's)
    return re.sub(r"(?<=[| ])(\d+)\.0(?= \|)", r"\1", text)


def test_impact_report_from_the_spark_path(sample_case: Case, ingested: Case) -> None:
    """The same report, but for the name of the case it was made from."""
    spark, local = _report(ingested), _report(sample_case)
    assert spark == local
    assert "`CASE`" in local


# -- the faces -----------------------------------------------------------------------------------------


def test_cli_affected_csv_on_spark_equals_duckdb(spark: Any, sample_case_path: Path, ingested_dir: Path,
                                                 tmp_path: Path) -> None:
    for backend, path in (("duckdb", sample_case_path), ("spark", ingested_dir)):
        with pytest.raises(SystemExit) as done:
            main(["affected", str(path), "--backend", backend, "--format", "csv", "-o", str(tmp_path / f"{backend}.csv")])
        assert done.value.code in (0, None)
    assert (tmp_path / "spark.csv").read_text() == (tmp_path / "duckdb.csv").read_text()
    spark_params = json.loads((tmp_path / "spark.csv.params.json").read_text())
    local_params = json.loads((tmp_path / "duckdb.csv.params.json").read_text())
    assert spark_params == local_params | {"case": spark_params["case"]}


def test_a_parquet_case_opened_twice_shares_its_tables_and_results(ingested: Case, ingested_dir: Path) -> None:
    """A second open of the same case (a CLI call, a re-run notebook cell) reuses the tables and the
    derived tables already computed; closing it leaves the first one working, cached as it was."""
    again = forensics.open_case(ingested_dir, backend="spark")
    try:
        assert again.spark is ingested.spark  # type: ignore[attr-defined]
        assert again.sql("SELECT count(*) FROM requests").fetchall() == ingested.sql(
            "SELECT count(*) FROM requests").fetchall()
    finally:
        again.close()
    assert ingested.is_kept("requests")  # type: ignore[attr-defined]
    assert ingested.sql("SELECT count(*) AS n FROM gateway_requests").fetchall()[0][0] > 0


def test_a_parquet_case_opens_and_answers_without_adaptive_execution(spark: Any, sample_case: Case,
                                                                    ingested_dir: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: with ``spark.sql.adaptive.enabled=false`` opening a case failed building
    request_keys (``UNRESOLVED_COLUMN m.chain_id``) while the derived tables were cached views: each
    view carried the plans of the facts it read, chain_matches' chain_id was request_chains' own
    attribute (the same expression id), and the join of the two could not tell them apart. Kept as
    checkpoints, each derived table is a relation of its own; the answers do not depend on AQE."""
    case_dir = tmp_path / "case"
    shutil.copytree(ingested_dir, case_dir)  # not the shared open case: this one is built here
    new_session = type(spark).newSession

    def without_aqe(self: Any) -> Any:
        s = new_session(self)
        s.conf.set("spark.sql.adaptive.enabled", "false")
        return s

    monkeypatch.setattr(type(spark), "newSession", without_aqe)
    case = forensics.open_case(case_dir, backend="spark")
    try:
        assert case.spark.conf.get("spark.sql.adaptive.enabled") == "false"  # type: ignore[attr-defined]
        for fact in ("request_keys", "requests"):
            _same(sample_case.sql(f"SELECT * FROM {fact}"), case.sql(f"SELECT * FROM {fact}"))
        _same(forensics.affected_requests(sample_case), forensics.affected_requests(case))
    finally:
        case.close()


def test_outputs_never_go_over_the_parquet_case_or_its_evidence(ingested: Case, ingested_dir: Path,
                                                                 tmp_path: Path) -> None:
    """What the CLI checks before writing (``-o``), on a Parquet case: its directory and its evidence."""
    for bad in (ingested_dir / "affected.csv", SAMPLE / "engine" / "prefill-0" / "sglang.log"):
        with pytest.raises(forensics.ForensicsError, match="refusing to write"):
            ingested.check_output(bad)
    assert ingested.check_output(tmp_path / "affected.csv") == tmp_path / "affected.csv"


def test_a_parquet_case_that_is_not_one_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["affected", str(tmp_path), "--backend", "spark"])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "case.json not found" in err and "\n" not in err
