"""The passes of a Spark ingest that need the whole case: file ids, gateway duplicates, engine starts.

Each parse task sees only its own files; these run once over everything they produced.

Example:
    >>> import pyarrow as pa
    >>> ev = pa.table({"file_id": [1, 2, 3], "sha256": ["a", "b", "a"]})
    >>> final_file_ids(ev, [])
    ({1: 1, 2: 2}, {3: 1})
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from forensics.spark.distributed import IngestOptions, PlannedFile


def final_file_ids(evidence: pa.Table, files: Sequence[PlannedFile]) -> tuple[dict[int, int], dict[int, int]]:
    """Final ids in ingest order, a file repeating earlier bytes (sha256) skipped as a local ingest does.

    ``evidence`` has one row per file a task registered (``file_id`` = the file's place in the
    ingest). Returns ``(provisional -> final id, skipped provisional -> final id of the first copy)``.
    """
    rows = sorted(zip(evidence.column("file_id").to_pylist(), evidence.column("sha256").to_pylist(),
                      strict=True))
    first: dict[str, int] = {}
    id_map: dict[int, int] = {}
    skipped: dict[int, int] = {}
    for prov, sha in rows:
        if sha in first:
            skipped[int(prov)] = first[sha]
            continue
        final = len(id_map) + 1
        id_map[int(prov)] = final
        first[sha] = final
    return id_map, skipped


def flag_gateway_duplicates(gw: DataFrame) -> tuple[DataFrame, dict[int, tuple[int, int]]]:
    """The gateway loader's delivery-retry rule over every gateway row of the case.

    Same layer, request_id, ts_start and ts_end: the first row by (file_id, line_no) stays the
    original, every later one is flagged; rows without a request_id are never flagged. Within one
    line (a record logged as several rows) the task's own decision comes first. Returns the
    flagged table and, per file, ``(duplicates flagged by its task, duplicates now)``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("layer", "request_id", "ts_start", "ts_end").orderBy(
        "file_id", "line_no", "is_duplicate")
    flagged = gw.withColumn("_local", F.col("is_duplicate")).withColumn(
        "is_duplicate", F.col("request_id").isNotNull() & (F.row_number().over(w) > 1))
    counts = {
        int(r["file_id"]): (int(r["local"]), int(r["now"]))
        for r in flagged.groupBy("file_id").agg(
            F.sum(F.col("_local").cast("int")).alias("local"),
            F.sum(F.col("is_duplicate").cast("int")).alias("now"),
        ).collect()
        if r["local"] != r["now"]
    }
    return flagged.drop("_local").select(*gw.columns), counts


def _rebuild_starts() -> Any:
    """The engine loader's ``rebuild_starts`` (its own module once the loader is a package)."""
    import importlib

    for module in ("forensics.sources.engine_starts", "forensics.sources.engine"):
        try:
            return importlib.import_module(module).rebuild_starts
        except (ImportError, AttributeError):
            continue
    raise ImportError("the engine loader's rebuild_starts was not found")


def rebuild_engine_starts(spark: SparkSession, facts: DataFrame, batches: DataFrame | None,
                          starts_schema: pa.Schema, opts: IngestOptions) -> DataFrame:
    """``engine_starts`` per node by the engine loader's own ``rebuild_starts``, over all its files.

    Each node's startup facts and batch lines (all files) go to one task, which loads them into a
    DuckDB case and runs the loader's function on it.
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    now = opts.now
    schema = starts_schema

    def per_node(facts_t: pa.Table, batches_t: pa.Table) -> pa.Table:
        from forensics.spark.distributed import EvidenceCase

        rebuild_starts = _rebuild_starts()

        node = (facts_t.column("node")[0].as_py() if facts_t.num_rows
                else batches_t.column("node")[0].as_py() if batches_t.num_rows else None)
        if node is None:
            return schema.empty_table()
        with EvidenceCase(":memory:", now=now) as case:  # no facts: only engine_starts is wanted
            case.con.register("_facts", facts_t)
            case.con.execute("INSERT INTO engine_startup_facts BY NAME SELECT * FROM _facts")  # DDL in schema_engine.sql
            case.con.unregister("_facts")
            if batches_t.num_rows:
                case.con.register("_batches", batches_t)
                case.con.execute("INSERT INTO engine_batches BY NAME SELECT * FROM _batches")
                case.con.unregister("_batches")
            rebuild_starts(case.target() if hasattr(case, "target") else case, [node])
            table = case.con.sql("SELECT * FROM engine_starts ORDER BY start_seq").to_arrow_table()
            return table.cast(schema)

    empty_batches = batches if batches is not None else facts.limit(0).select("node")
    grouped = facts.groupBy("node").cogroup(empty_batches.groupBy("node"))
    return grouped.applyInArrow(per_node, from_arrow_schema(schema))

