"""``forensics warm`` compiles the scanners' kernels once; each kernel is compiled in one flavour."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import cli

FIX = Path(__file__).resolve().parent / "fixtures" / "collect"

#: Read in a fresh process (so no other test's direct kernel calls count): the sample's engine
#: files (plain and gzipped), then collected files whose blocks come writable (a JSON document's
#: records, a plain file's bytearray); prints the kernels compiled in more than one flavour.
_PROBE = r"""
import json, sys
from pathlib import Path
from forensics.case import open_case
from forensics.sample import sample_dir
from forensics.sources.collect import read_lines
from forensics.sources.warm import _dispatchers
case = open_case(":memory:")
case.ingest_engine([sample_dir() / "engine" / "decode-1", sample_dir() / "engine" / "router"], tz="UTC")
for name in sys.argv[1:]:
    for _ in read_lines(name, context={"tz": "UTC"}):
        pass
twice = {}
for k in _dispatchers():
    seen = {}
    for sig in k.signatures:
        plain = str(tuple((str(a.dtype), a.ndim) if hasattr(a, "ndim") and hasattr(a, "dtype") else str(a) for a in sig))
        seen.setdefault(plain, []).append(str(sig))
    twice.update({k.py_func.__qualname__: v for v in seen.values() if len(v) > 1})
print(json.dumps(twice))
"""


def test_warm_command_says_what_it_compiled_and_loaded() -> None:
    res = CliRunner().invoke(cli, ["warm"])
    assert res.exit_code == 0, res.output
    assert re.fullmatch(r"scanner kernels: \d+ compiled now, \d+ loaded from numba's cache \(\d+\.\d s\)\n", res.output)


def test_no_kernel_is_compiled_twice_for_read_only_and_writable_or_strided_arrays() -> None:
    # A writable block beside a read-only one, or a strided column of a 2-D span array beside a
    # contiguous one, compiled a kernel a second time: ~30 s more on the first such file of a
    # machine (every kernel's entry now hands on one flavour: lines.read_only, spans._c64).
    files = [str(FIX / n) for n in ("cloudwatch-container-insights.json", "docker-json.log", "journald.json",
                                    "loki.jsonl", "cri-containerd.log")]
    out = subprocess.run([sys.executable, "-c", _PROBE, *files], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == {}
