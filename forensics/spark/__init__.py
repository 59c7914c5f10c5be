"""Scale-out: the same ingest and the same queries on Apache Spark, for incidents one machine cannot hold.

* :func:`open_case` opens a Parquet case on Spark; every analysis function, chart, report and
  notification list takes it as it takes a DuckDB case (``forensics.open_case(DIR, backend="spark")``).
* :func:`ingest` parses evidence files in parallel on the executors with the toolkit's own loaders
  and writes a Parquet case (local, ``s3a://``, ``gs://``, ``abfs://``, ``hdfs://``).
* :func:`export_parquet` writes a local DuckDB case as a Parquet case (no Spark needed).
* :mod:`forensics.spark.translate`: the DuckDB SQL of ``queries/`` as Spark SQL.

Needs ``pip install 'forensics[spark]'`` and a Java 17+ runtime; nothing outside this package
imports pyspark or sqlglot.

Example (needs a Java runtime: not run as a doctest; tests/test_spark.py makes the same calls)::

    import forensics
    case = forensics.open_case("case_parquet/", backend="spark", spark_master="local[2]")
    forensics.affected_requests(case).df()
"""

from __future__ import annotations

import datetime as dt
import os
from typing import TYPE_CHECKING, Any

from forensics.spark.parquet_case import Manifest, export_parquet, read_manifest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from forensics.spark.case import SparkCase
    from forensics.spark.distributed import SparkIngest

__all__ = ["Manifest", "export_parquet", "ingest", "open_case", "read_manifest", "session"]


def open_case(path: str | os.PathLike[str], *, master: str | None = None, spark: SparkSession | None = None,
              now: dt.datetime | None = None) -> SparkCase:
    """Open a Parquet case on Spark (the process's session, started on ``master`` if none runs)."""
    from forensics.spark.case import SparkCase

    return SparkCase(path, master=master, spark=spark, now=now)


def ingest(case_dir: str | os.PathLike[str], **kwargs: Any) -> SparkIngest:
    """Parse evidence on the Spark executors into a new Parquet case (see :func:`forensics.spark.distributed.ingest`)."""
    from forensics.spark.distributed import ingest as run

    return run(case_dir, **kwargs)


def session(master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """The process's Spark session, configured for the toolkit (see :mod:`forensics.spark.session`)."""
    from forensics.spark.session import session as get

    return get(master, conf)
