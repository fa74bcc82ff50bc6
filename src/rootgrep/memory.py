"""The C allocator of a long-running server (glibc only; with another C library nothing is
done).

glibc's malloc gives each thread that allocates while the others hold theirs an arena of its
own, up to 8 per CPU, and memory freed in an arena goes back to the system only from the
arena's top. The server's worker threads come and go (anyio's pool: up to 40, each ended
after 10 s idle), each new one landing in whichever arena is free, so under many sessions
every arena grew to the peak its threads ever reached, fragmented, and the server's RSS
climbed round over round (``make soak``: +106 MiB over 4 rounds, almost all of it in
thread arenas; README "Load"). Two remedies, both for ``rootgrep serve`` only:

- ``tune_malloc``: at most ``ARENA_MAX`` arenas (``mallopt(M_ARENA_MAX)``, before the
  server starts its threads), unless the operator set ``MALLOC_ARENA_MAX`` (glibc's own
  variable, then left as it is);
- ``IdleTrim``: ``malloc_trim(0)`` (every arena's free pages back to the system) once no
  tool call has been in flight for ``IDLE_TRIM_SECONDS`` after the last activity, in a
  thread of its own (started at the first activity: after ``--sandbox``, which needs a
  single-threaded process), once per burst of activity.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger("rootgrep.memory")

M_ARENA_MAX = -8  # (malloc.h)
ARENA_MAX = 2  # arenas at most: the main one and one for the threads' contention
IDLE_TRIM_SECONDS = 1.0  # idle time (no call in flight, no activity) before a trim

_libc: list[ctypes.CDLL | None] = []


def glibc() -> ctypes.CDLL | None:
    """The process's C library if it is glibc (with ``mallopt`` and ``malloc_trim``)."""
    if not _libc:
        try:
            libc: ctypes.CDLL | None = ctypes.CDLL(None)  # (the symbols already loaded)
        except OSError:
            libc = None
        if libc is not None and not all(
            hasattr(libc, f) for f in ("gnu_get_libc_version", "mallopt", "malloc_trim")
        ):
            libc = None
        if libc is not None:
            libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
            libc.mallopt.restype = ctypes.c_int
            libc.malloc_trim.argtypes = [ctypes.c_size_t]
            libc.malloc_trim.restype = ctypes.c_int
        _libc.append(libc)
    return _libc[0]


def tune_malloc() -> bool:
    """Cap glibc's arenas at ``ARENA_MAX`` (to call before the process starts threads: the
    cap is fixed once 8 arenas exist). False when nothing was set (not glibc, or the
    operator's ``MALLOC_ARENA_MAX`` rules)."""
    libc = glibc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, ARENA_MAX))


def malloc_trim() -> None:
    libc = glibc()
    if libc is not None:
        libc.malloc_trim(0)


class IdleTrim:
    """Calls ``trim`` once the server is idle: no call in flight (``begin``/``end``) and
    ``idle`` seconds since the last activity (``end`` or ``touch``: e.g. a session's
    connection that closed), once per burst of activity."""

    def __init__(
        self, trim: Callable[[], object] = malloc_trim, idle: float = IDLE_TRIM_SECONDS
    ) -> None:
        self._trim = trim
        self._idle = idle
        self._cond = threading.Condition()
        self._busy = 0
        self._last = 0.0
        self._due = False
        self._thread: threading.Thread | None = None
        self.trims = 0

    def begin(self) -> None:
        with self._cond:
            self._busy += 1
            self._due = True

    def end(self) -> None:
        with self._cond:
            self._busy -= 1
        self.touch()

    def touch(self) -> None:
        with self._cond:
            self._last = time.monotonic()
            self._due = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="rootgrep-malloc-trim", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._due or self._busy:
                    self._cond.wait()
                wait = self._last + self._idle - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                self._due = False
            try:
                self._trim()
                log.debug("idle: freed memory given back to the system (malloc_trim)")
            except Exception:  # (best effort: memory is given back at the next one)
                log.debug("malloc_trim failed", exc_info=True)
            with self._cond:
                self.trims += 1
                self._cond.notify_all()

    def wait_trims(self, n: int, timeout: float) -> bool:
        """Wait until ``n`` trims ran (``timeout``: a hang guard); for tests."""
        with self._cond:
            return self._cond.wait_for(lambda: self.trims >= n, timeout)


def idle_trimmer() -> IdleTrim | None:
    """An ``IdleTrim`` calling glibc's ``malloc_trim``; None with another C library."""
    return IdleTrim() if glibc() is not None else None
