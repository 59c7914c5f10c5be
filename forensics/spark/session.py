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
import signal
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


#: JVM flags of a local session (driver = executor): C1 only, the parallel (throughput) collector,
#: and a code cache as large as a full tiered JVM's (240 MB): with C1 only HotSpot reserves 48 MB for compiled code,
#: which Spark's generated code for a few hundred queries fills; the JVM then died ("Out of space in
#: CodeCache for method handle intrinsic", seen in make test). Reserved address space, not memory.
LOCAL_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseParallelGC -XX:ReservedCodeCacheSize=256m"


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
#: the driver memory the toolkit asked for (local sessions), for the message when the JVM dies
_DRIVER_MEMORY: str | None = None

#: Spark's exit code for a java.lang.OutOfMemoryError (``SparkExitCode.OOM``)
SPARK_EXIT_OOM = 52


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
        # one JVM is driver and executor: keep its heap for the data. A broadcast hash relation
        # takes at least one memory page, and the pages default to 1/16 of the execution memory
        # per core (16 MiB in a 2g driver): with broadcast joins, 0.5-0.8 GB of them piled up
        # within minutes of the sample's queries (full GCs back to back, then an
        # OutOfMemoryError). With 1 MiB pages broadcast joins stay on (far cheaper plans than
        # sort-merge joins for small tables). The status store's history is kept short too.
        settings.setdefault("spark.buffer.pageSize", "1m")
        for key in ("spark.sql.ui.retainedExecutions", "spark.ui.retainedJobs", "spark.ui.retainedStages"):
            settings.setdefault(key, "50")
        settings.setdefault("spark.ui.retainedTasks", "1000")
        settings.setdefault("spark.driver.memory", os.environ.get("FORENSICS_SPARK_DRIVER_MEMORY", "2g"))
        # a short-lived JVM on a few cores: measured on the sample's queries, the JIT's optimising
        # compiler (C2) and G1's concurrent threads took most of the JVM's CPU (each query is new
        # generated code, run briefly on small data); C1 only and the throughput collector: 0.7x
        settings.setdefault("spark.driver.extraJavaOptions", LOCAL_JAVA_OPTIONS)
    global _DRIVER_MEMORY
    _DRIVER_MEMORY = settings.get("spark.driver.memory")
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


def jvm_gone() -> str | None:
    """None while the session's JVM runs (or none was started here); else what ended it, one sentence.

    In local mode the driver JVM is the whole of Spark: once it is gone every call fails with a
    py4j error ("Answer from Java side is empty", "Connection refused") that names no cause. The
    exit status does.
    """
    proc = getattr(getattr(_SESSION.sparkContext, "_gateway", None), "proc", None) if _SESSION else None
    if proc is None:  # no session, or one this process did not launch (spark-submit, a notebook's)
        return None
    code = proc.poll()
    return None if code is None else describe_exit(int(proc.pid), code, _DRIVER_MEMORY)


def describe_exit(pid: int, code: int, driver_memory: str | None = None) -> str:
    """What an exit status of the Spark JVM means, and what to do about it.

    Example:
        >>> print(describe_exit(4242, 52, "2g"))  # doctest: +ELLIPSIS
        the Spark JVM (pid 4242) exited with code 52: Spark stops it on java.lang.OutOfMemoryError; give ...
        >>> print(describe_exit(4242, -9))
        the Spark JVM (pid 4242) was killed by SIGKILL: the kernel's out-of-memory killer (see dmesg) or a 'kill -9' from outside
    """
    head = f"the Spark JVM (pid {pid})"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        why = {"SIGKILL": "the kernel's out-of-memory killer (see dmesg) or a 'kill -9' from outside",
               "SIGTERM": "a 'kill' or 'pkill' from outside this process"}.get(name, "a signal from outside")
        return f"{head} was killed by {name}: {why}"
    if code == SPARK_EXIT_OOM:
        heap = f" ({driver_memory} now)" if driver_memory else ""
        return (f"{head} exited with code 52: Spark stops it on java.lang.OutOfMemoryError; give the driver "
                f"more memory{heap}: FORENSICS_SPARK_DRIVER_MEMORY=4g or spark.driver.memory")
    if code == 0:
        return f"{head} exited with code 0: it stops when its standard input (a pipe from this process) closes"
    return (f"{head} exited with code {code}: a crash of the JVM itself writes hs_err_pid{pid}.log in "
            "its working directory")


def check_alive() -> None:
    """Raise :class:`SparkUnavailableError` naming the cause when the session's JVM is gone."""
    gone = jvm_gone()
    if gone is not None:
        raise SparkUnavailableError(gone, hint="start a new process: its JVM is lost with every cached table")


def stop() -> None:
    """Stop the process's Spark session (the next :func:`session` starts a new one)."""
    global _SESSION
    if _SESSION is not None:
        _SESSION.stop()
        _SESSION = None
