"""Compile the JIT scanners ahead of the first incident (``forensics warm``).

The engine and collection scanners are numba kernels cached on disk (``cache=True``): the first
process on a machine compiles them, about half a minute of CPU, and every later one loads them in
milliseconds. :func:`warm_kernels` pays that once, up front: it reads the bundled sample's engine
logs, plain and in every collection wrapper, gzipped and not, through the same loaders an ingest
uses, into a throw-away in-memory case. Nothing of the user's is read or written, only numba's
cache (next to the modules, or numba's user-wide cache directory where that is read-only).

Run it after installing (``make warm``; ``make test`` runs it beside the lint), or before timing an ingest, so that neither the
first ingest of an incident nor a benchmark pays for compilation.

Example, on a machine that has not compiled them yet (from Python: ``print(warm_kernels())``)::

    $ forensics warm
    scanner kernels: 64 compiled now, 0 loaded from numba's cache (34.7 s)
"""

from __future__ import annotations

import gzip
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Bytes of each sample engine file taken for the wrapped copies (whole lines); the plain sample
#: is read whole (every line kind), the wrapped copies only need each wrapper's kernels reached
#: on a plain and a gzipped file, engine and router lines.
HEAD_BYTES = 16 << 10
_WRAPPED = ("decode-1/sglang.log", "decode-1/sglang.log.1.gz", "router/smg.log")

#: Time-of-day-only lines (no date in the bracket, as some releases print): the sample has none.
_TIME_ONLY = (b'[2025-01-14 23:59:59] INFO:     127.0.0.1:51234 - "POST /generate HTTP/1.1" 200 OK\n'
              b"[00:00:03 TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.00\n")


@dataclass(frozen=True)
class Warmed:
    """What :func:`warm_kernels` did: kernel signatures compiled now, loaded from the cache, and time.

    (A kernel another kernel calls is compiled on its own but loaded inside its caller: a warm
    cache loads fewer signatures than a cold one compiles.)
    """

    compiled: int
    cached: int
    seconds: float

    def __str__(self) -> str:
        return (f"scanner kernels: {self.compiled} compiled now, {self.cached} loaded from numba's cache "
                f"({self.seconds:.1f} s)")


def _dispatchers() -> list[Any]:
    """Every numba kernel of ``forensics.sources`` (its modules imported)."""
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import forensics.sources as pkg

    found: dict[int, Any] = {}
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if info.name.rsplit(".", 1)[-1] in ("warm", "__main__"):  # itself; a command line
            continue
        mod = importlib.import_module(info.name)
        for value in vars(mod).values():
            if isinstance(value, CPUDispatcher):
                found[id(value)] = value
    return list(found.values())


def _head(src: Path, dst: Path) -> None:
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rb") as fh:
        data = fh.read(HEAD_BYTES)
    data = data[: data.rfind(b"\n") + 1]
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(gzip.compress(data, mtime=0) if src.suffix == ".gz" else data)


def warm_kernels() -> Warmed:
    """Compile (or load from numba's cache) every scanner kernel by reading the bundled sample.

    Example:
        >>> w = warm_kernels()
        >>> w.compiled >= 0 and w.cached >= 0
        True
    """
    from forensics.case import open_case
    from forensics.sample import sample_dir
    from forensics.sample.wrap import WRITERS, wrap_tree

    started = time.perf_counter()
    kernels = _dispatchers()
    # numba counts, per kernel and signature, a compile as a cache miss and a load as a hit (for
    # the process's life: the difference is this call's)
    misses, hits = _counts(kernels)
    engine = sample_dir() / "engine"
    with tempfile.TemporaryDirectory(prefix="forensics-warm-") as tmp:
        root = Path(tmp)
        for name in _WRAPPED:
            _head(engine / name, root / "head" / name)
        (root / "head" / "decode-9").mkdir()
        (root / "head" / "decode-9" / "sglang.log").write_bytes(_TIME_ONLY)
        trees = [engine]
        for wrapper in WRITERS:
            wrap_tree(root / "head", root / wrapper, wrapper, tz="Asia/Singapore")
            trees.append(root / wrapper)
        # one ingest of them all (a file is a file, whatever node it lands on): the per-ingest cost
        # (ledger, starts, facts) is paid once, so a warm cache returns in seconds
        case = open_case(":memory:")
        try:
            case.ingest_engine(trees, tz="Asia/Singapore")
        finally:
            case.close()
    misses_after, hits_after = _counts(kernels)
    return Warmed(compiled=misses_after - misses, cached=hits_after - hits, seconds=time.perf_counter() - started)


def _counts(kernels: list[Any]) -> tuple[int, int]:
    stats = [k.stats for k in kernels]
    return sum(sum(s.cache_misses.values()) for s in stats), sum(sum(s.cache_hits.values()) for s in stats)
