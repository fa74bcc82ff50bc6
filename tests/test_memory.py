"""The C allocator of ``rootgrep serve`` (memory.py): glibc's arenas capped, freed memory
given back when the server is idle."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from rootgrep.memory import ARENA_MAX, IdleTrim, glibc

needs_glibc = pytest.mark.skipif(glibc() is None, reason="glibc's malloc only")

# 16 threads alive at once, each allocating (outside CPython's small-object allocator): glibc
# gives each a new arena until its cap; then malloc_info's XML has one <heap> per arena.
ARENAS = r"""
import ctypes, os, sys, threading
from rootgrep.memory import tune_malloc
if sys.argv[1] == "tuned":
    assert tune_malloc()
libc = ctypes.CDLL(None)
barrier = threading.Barrier(17)
def work():
    keep = [bytearray(4000) for _ in range(50)]
    barrier.wait(60)
    barrier.wait(60)
ts = [threading.Thread(target=work) for _ in range(16)]
for t in ts:
    t.start()
barrier.wait(60)
buf, size = ctypes.c_char_p(), ctypes.c_size_t()
libc.open_memstream.restype = ctypes.c_void_p
fp = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
libc.malloc_info(0, ctypes.c_void_p(fp))
libc.fclose(ctypes.c_void_p(fp))
print(buf.value.decode().count("<heap nr="))
barrier.wait(60)
for t in ts:
    t.join()
"""


def arenas(mode: str, env: dict[str, str] | None = None) -> int:
    out = subprocess.run(
        [sys.executable, "-c", ARENAS, mode], capture_output=True, text=True, timeout=120,
        env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


@needs_glibc
def test_tune_malloc_caps_the_arenas_of_many_live_threads() -> None:
    assert arenas("plain") > ARENA_MAX  # (glibc's default: a new arena per contending thread)
    assert arenas("tuned") <= ARENA_MAX


@needs_glibc
def test_the_operators_malloc_arena_max_is_left_as_it_is() -> None:
    import os

    env = {**os.environ, "MALLOC_ARENA_MAX": "4"}
    code = "from rootgrep.memory import tune_malloc; print(tune_malloc())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "False", out.stderr
    assert arenas("plain", env) == 4  # (glibc's own variable rules)


def test_idle_trim_runs_once_no_call_is_in_flight_once_per_burst() -> None:
    ran: list[str] = []
    busy = threading.Event()
    trim = IdleTrim(lambda: ran.append("busy" if busy.is_set() else "idle"), idle=0.05)
    busy.set()
    trim.begin()
    trim.touch()  # (activity, but a call is still in flight)
    assert not trim.wait_trims(1, 0.5)
    busy.clear()
    trim.end()
    assert trim.wait_trims(1, 30)
    assert not trim.wait_trims(2, 0.3)  # no activity since: no second trim
    trim.begin()
    trim.end()
    assert trim.wait_trims(2, 30)
    assert ran == ["idle", "idle"]
