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

from pathlib import Path
from typing import Any

from forensics.sample._gen import GENERATOR_VERSION, Generator

DEFAULT_REQUESTS = 10000
DEFAULT_SEED = 20260909

__all__ = ["DEFAULT_REQUESTS", "DEFAULT_SEED", "GENERATOR_VERSION", "generate"]


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
