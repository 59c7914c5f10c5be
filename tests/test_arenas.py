"""The toolkit's processes share one glibc malloc arena per core across their threads (forensics.arenas)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from forensics.arenas import ARENAS

#: In a fresh process: ``import forensics``, then ``argv[1]`` threads each allocating and freeing blocks,
#: then the number of heaps glibc's malloc_info reports (the main arena and every thread arena).
_PROBE = r"""
import ctypes, re, sys, tempfile, threading
import forensics
def work():
    for _ in range(50):
        b = [bytearray(200_000) for _ in range(20)]
        del b
ts = [threading.Thread(target=work) for _ in range(int(sys.argv[1]))]
[t.start() for t in ts]; [t.join() for t in ts]
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
with tempfile.NamedTemporaryFile() as f:
    fp = libc.fopen(f.name.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(fp)); libc.fclose(ctypes.c_void_p(fp))
    print(len(re.findall(r'<heap nr="', open(f.name).read())))
"""

glibc = pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
                           reason="glibc's malloc arenas only")


def _heaps(env: dict[str, str]) -> int:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(ARENAS + 8)], capture_output=True, text=True, check=True, env=env)
    return int(out.stdout.split()[-1])


@glibc
@pytest.mark.parametrize(("user_setting", "most"), [(None, ARENAS), (str(ARENAS + 4), ARENAS + 4)])
def test_threads_of_a_process_that_imports_forensics_share_one_arena_per_core(user_setting: str | None,
                                                                                 most: int) -> None:
    # one arena per allocating thread kept each thread's high-water mark: the engine ingest of
    # 1 M lines peaked at 1.2-1.3 GiB instead of ~0.8 GiB; a user's own MALLOC_ARENA_MAX wins
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    if user_setting is not None:
        env["MALLOC_ARENA_MAX"] = user_setting
    heaps = _heaps(env)
    assert heaps <= most
    if user_setting is not None:
        assert heaps > ARENAS  # the user's setting was kept, not overridden by the toolkit's
