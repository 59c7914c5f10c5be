"""When the Spark JVM is gone, the toolkit says why in one sentence (no Java runtime needed).

In local mode the driver JVM is all of Spark; once it has died every call fails with a py4j error
that names no cause ("Answer from Java side is empty", "Connection refused"). Its exit status does.
"""

from __future__ import annotations

import importlib
import subprocess
import types
from typing import Any

import pytest

from forensics.spark.session import SparkUnavailableError, check_alive, describe_exit, jvm_gone

# the module (``forensics.spark.session`` the attribute is the package's function of that name)
spark_session = importlib.import_module("forensics.spark.session")


@pytest.mark.parametrize(
    "code, says",
    [
        (52, "OutOfMemoryError; give the driver more memory (2g now): FORENSICS_SPARK_DRIVER_MEMORY"),
        (-9, "killed by SIGKILL: the kernel's out-of-memory killer (see dmesg)"),
        (-15, "killed by SIGTERM: a 'kill' or 'pkill' from outside"),
        (0, "its standard input (a pipe from this process) closes"),
        (134, "hs_err_pid77.log"),
    ],
)
def test_each_exit_status_names_its_cause(code: int, says: str) -> None:
    text = describe_exit(77, code, "2g")
    assert text.startswith("the Spark JVM (pid 77) ") and says in text


def _fake_session(proc: Any) -> Any:
    return types.SimpleNamespace(sparkContext=types.SimpleNamespace(_gateway=types.SimpleNamespace(proc=proc)))


def test_a_dead_jvm_is_an_error_naming_the_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = subprocess.Popen(["sh", "-c", "exit 52"])
    proc.wait()
    monkeypatch.setattr(spark_session, "_SESSION", _fake_session(proc))
    monkeypatch.setattr(spark_session, "_DRIVER_MEMORY", "2g")
    assert jvm_gone() == describe_exit(proc.pid, 52, "2g")
    with pytest.raises(SparkUnavailableError, match=r"code 52: .*OutOfMemoryError"):
        check_alive()


def test_a_running_jvm_or_none_is_not_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_session, "_SESSION", None)
    assert jvm_gone() is None
    proc = subprocess.Popen(["sleep", "30"])
    try:
        monkeypatch.setattr(spark_session, "_SESSION", _fake_session(proc))
        assert jvm_gone() is None
        check_alive()
    finally:
        proc.kill()
        proc.wait()
