"""Bound the C heap of the loaders' threads: glibc's malloc arenas capped at one per usable core.

glibc gives each thread that allocates its own heap ("arena", up to 8 per core), and a freed
block returns to its arena, not to the system. The engine loader's reading, preparing, inflating
and hashing threads each allocate the numpy arrays of 16 MiB blocks: every thread's arena grows
to its own high-water mark and keeps it. Measured on the 100 k set's engine tree (1.0 M lines,
fresh processes, 2 cores): peak RSS 1,151-1,344 MiB with glibc's default (8 arenas a core),
756-826 MiB with two, and no more CPU. Arrow allocates with mimalloc, not affected; DuckDB's
threads use glibc's malloc too, which is why the cap is one arena per core, not fewer: as many
threads as cores allocate at once without waiting on each other's arena.

The cap is process-wide and only limits arenas created from now on, so it is set as early as
possible, once: when ``forensics`` is imported (the console script imports it first; a cap set
at the first ingest did nothing, the arenas were made by then). In a process whose threads
already made more arenas (numpy, DuckDB or Arrow imported and busy before ``forensics``) those
are shared and the bound is weaker. It is never set where the
user already chose (``MALLOC_ARENA_MAX`` in the environment, which glibc reads at start), and does
nothing where the C library is not glibc.

Example:
    >>> cap_arenas() in (True, False)
    True
"""

from __future__ import annotations

import ctypes
import os
import sys

#: ``M_ARENA_MAX`` of glibc's ``mallopt``
_M_ARENA_MAX = -8
#: arenas allowed: one per core the process may run on (at least two)
ARENAS = max(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2)

_done: bool | None = None


def cap_arenas() -> bool:
    """Cap glibc's malloc arenas at :data:`ARENAS` (once per process); True if the cap is in force.

    Example:
        >>> cap_arenas() == cap_arenas()
        True
    """
    global _done
    if _done is None:
        _done = False
        if sys.platform.startswith("linux") and "MALLOC_ARENA_MAX" not in os.environ:
            try:
                libc = ctypes.CDLL(None)
                if hasattr(libc, "gnu_get_libc_version"):  # glibc, not musl
                    _done = bool(libc.mallopt(_M_ARENA_MAX, ARENAS))
            except OSError:
                pass
    return _done
