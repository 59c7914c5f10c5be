"""Seeded, deterministic generator of one realistic SGLang prefill/decode incident.

The sample reproduces the shape of the GLM-5.3 incident: a rolling restart
leaves two prefill nodes with a KV pool (681,280 tokens) smaller than the
context length (1,048,576), so prompts of >= 681,274 tokens are swapped for a
1-token placeholder and answered with HTTP 200 from stale KV pages. It writes
real log formats (SGLang engine logs in local time, the smg router log,
Cloudflare Logpush ``http_requests`` NDJSON and a LiteLLM_SpendLogs CSV
export) plus ``truth.json`` listing every leak, window and trap.

Example:
    >>> import tempfile
    >>> from forensics.sample import generate
    >>> truth = generate(tempfile.mkdtemp(), requests=300)
    >>> truth["admission_limit"], truth["engine_tz"]
    (681274, 'Asia/Singapore')
"""

from __future__ import annotations

import atexit
import datetime as dt
import shutil
import tempfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.sample._gen import GENERATOR_VERSION, Generator

if TYPE_CHECKING:
    from forensics.case import Case

DEFAULT_REQUESTS = 10000
DEFAULT_SEED = 20260909

__all__ = ["DEFAULT_REQUESTS", "DEFAULT_SEED", "GENERATOR_VERSION", "generate", "sample_case", "sample_dir"]


def generate(out_dir: str | Path, *, requests: int = DEFAULT_REQUESTS, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Generate the sample incident into ``out_dir`` and return its truth dict.

    Same arguments give bit-for-bit identical files. Output is streamed with
    bounded memory, so ``requests`` may be in the millions. ``engine/`` and
    ``gateway/`` under ``out_dir`` are replaced; ``truth.json`` is written.

    Example:
        >>> import tempfile
        >>> t = generate(tempfile.mkdtemp(), requests=300, seed=7)
        >>> sorted(t["nodes"])[:2]
        ['decode-0', 'decode-1']
    """
    return Generator(out_dir, requests=requests, seed=seed).run()


@cache
def sample_dir() -> Path:
    """The bundled sample incident's directory: ``sample_data/`` of a checkout, else a generated copy.

    An installed wheel has no ``sample_data/``: the same files are then generated (bit for bit) into
    a temporary directory, removed when the process ends.

    Example:
        >>> sorted(p.name for p in sample_dir().iterdir() if p.is_dir())
        ['engine', 'gateway']
    """
    checkout = Path(__file__).resolve().parents[2] / "sample_data"
    if (checkout / "truth.json").is_file():
        return checkout
    tmp = Path(tempfile.mkdtemp(prefix="forensics-sample-"))
    atexit.register(shutil.rmtree, tmp, True)
    generate(tmp)
    return tmp


@cache
def _sample_case_path() -> Path:
    from forensics.case import open_case

    tmp = Path(tempfile.mkdtemp(prefix="forensics-sample-case-"))
    atexit.register(shutil.rmtree, tmp, True)
    path = tmp / "case.duckdb"
    with open_case(path, now=dt.datetime(2026, 10, 1)) as case:
        case.ingest_gateway(sample_dir() / "gateway")
        case.ingest_engine(sample_dir() / "engine", tz="Asia/Singapore")
    return path


@cache
def sample_case() -> Case:
    """The bundled sample incident ingested into a temporary case, opened read-only (once per process).

    What the docstring examples of the toolkit run on; also a quick way to try a query.

    Example:
        >>> import forensics
        >>> case = sample_case()
        >>> forensics.affected_requests(case).df().confidence.value_counts().to_dict()
        {'confirmed': 32, 'suspected': 3}
    """
    from forensics.case import open_case

    return open_case(_sample_case_path(), read_only=True)
