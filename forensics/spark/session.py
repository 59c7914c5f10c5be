"""The Spark session the toolkit runs on: one per process, configured so Spark SQL means what DuckDB does.

* ``spark.sql.session.timeZone = UTC`` and ``spark.sql.timestampType = TIMESTAMP_NTZ``: the case's
  timestamps are zone-less UTC values, as in DuckDB's ``TIMESTAMP``; no local zone ever applies.
* ``spark.sql.ansi.enabled = true`` (Spark 4's default, set for older configs): an overflow or a
  bad cast is an error, never a silent NULL.
* The Python workers run the interpreter of the driver (``sys.executable``) unless the cluster
  says otherwise: the executors parse with the same toolkit version.

The master comes from, in order: the ``master`` argument (``--spark-master``), an already running
session (``spark-submit``, a notebook's ``spark``), ``FORENSICS_SPARK_MASTER``, then ``local[*]``.

Example (needs a Java runtime: not run as a doctest; tests/test_spark.py makes the same calls)::

    spark = session("local[2]")
    spark.sql("SELECT 1 AS x").collect()   # [Row(x=1)]
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING, Any

from forensics.errors import ForensicsError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Settings the toolkit's SQL relies on (checked on a session it did not create).
REQUIRED_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.timestampType": "TIMESTAMP_NTZ",
}

#: Further defaults for a session the toolkit creates (a cluster's own settings win).
DEFAULT_CONF = {
    "spark.sql.ansi.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}


class SparkUnavailableError(ForensicsError):
    """Spark (pyspark, or the Java runtime it needs) is not installed, or the session did not start."""


def _require_pyspark() -> None:
    try:
        import pyspark  # noqa: F401
        import sqlglot  # noqa: F401
    except ImportError as exc:
        raise SparkUnavailableError(
            f"the Spark backend needs pyspark and sqlglot ({exc.name} is not installed)",
            hint="pip install 'forensics[spark]' (and a Java 17+ runtime)",
        ) from exc


_SESSION: SparkSession | None = None


def session(master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """The process's Spark session (created on first use), configured for the toolkit.

    A second call returns the same session; a different ``master`` than the running one is an
    error (Spark runs one context per process).
    """
    global _SESSION
    _require_pyspark()
    from pyspark.sql import SparkSession

    active = _SESSION or SparkSession.getActiveSession()
    if active is not None:
        running = active.sparkContext.master
        if master is not None and master != running:
            raise SparkUnavailableError(
                f"a Spark session on {running} is already running in this process; cannot switch to {master}",
                hint="start a new process (Spark runs one context per process)",
            )
        for key, value in REQUIRED_CONF.items():
            active.conf.set(key, value)
        _SESSION = active
        return active
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SparkUnavailableError(
            "the Spark backend needs a Java runtime (java not found on PATH, JAVA_HOME not set)",
            hint="install a Java 17+ runtime, e.g. apt-get install default-jre-headless",
        )
    chosen = master or os.environ.get("FORENSICS_SPARK_MASTER") or "local[*]"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder: Any = SparkSession.builder.master(chosen).appName("forensics")
    settings = {**DEFAULT_CONF, **REQUIRED_CONF, **(conf or {})}
    if chosen.startswith("local"):
        # small data per core locally: the default 200 shuffle partitions cost more than they split
        settings.setdefault("spark.sql.shuffle.partitions", "8")
        settings.setdefault("spark.ui.enabled", "false")
        settings.setdefault("spark.driver.memory", os.environ.get("FORENSICS_SPARK_DRIVER_MEMORY", "2g"))
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark: SparkSession = builder.getOrCreate()
    except Exception as exc:  # py4j / PySparkRuntimeError: the JVM did not start
        raise SparkUnavailableError(f"the Spark session did not start on {chosen}: {exc}",
                                    hint="check the Java runtime and the master URL") from exc
    spark.sparkContext.setLogLevel(os.environ.get("FORENSICS_SPARK_LOG_LEVEL", "FATAL"))
    _SESSION = spark
    return spark


def stop() -> None:
    """Stop the process's Spark session (the next :func:`session` starts a new one)."""
    global _SESSION
    if _SESSION is not None:
        _SESSION.stop()
        _SESSION = None
