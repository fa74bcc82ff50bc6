"""Opening one name beneath a confined directory fd, never through a link nor a hidden
entry: a directory (``open_dir_at``, ``open_dir_keyed_at``), a regular file
(``open_file_at``), and ``reopen_regular``, the one way a file is opened to be read (reached
with ``O_PATH``, checked with ``fstat``, reopened through ``/proc/self/fd``); and
``open_null_device``, the one open by name besides pinning a root.
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod

from ..errors import NotAFile, NotFound, NotRegularFile
from . import hiding
from .hiding import _gone, is_hidden
from .paths import display
from .stats import DirKey, stat_result_key
from .syscalls import _O_DIR, _O_PATH, _O_READ

TYPE_CHECKING = False  # (not ``typing``'s, nor collections.abc at run time: the CLI's start-up)
if TYPE_CHECKING:
    from collections.abc import Callable


def open_dir_at(dirfd: int, name: bytes) -> int:
    """Open a subdirectory by a single name, never through a symlink (nor a hidden one)."""
    fd = os.open(name, _O_DIR | os.O_NOFOLLOW, dir_fd=dirfd)
    if hiding._hidden_inos and is_hidden(os.fstat(fd)):
        os.close(fd)
        raise _gone(name)
    return fd


def open_dir_keyed_at(dirfd: int, name: bytes) -> tuple[int, DirKey]:
    """``open_dir_at`` and the ``fstat_key`` of the directory it opened, from the one
    ``fstat`` that also checks it is not hidden (a re-sync's walk: the key says whether the
    listing kept of it still holds)."""
    fd = os.open(name, _O_DIR | os.O_NOFOLLOW, dir_fd=dirfd)
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if is_hidden(st):  # (the one test of a hidden identity, as ``open_dir_at``'s)
        os.close(fd)
        raise _gone(name)
    return fd, stat_result_key(st)


def open_file_at(dirfd: int, name: bytes) -> tuple[int, os.stat_result]:
    """Open a regular file by a single name for reading, never through a symlink, never
    opening anything else (see ``reopen_regular``). Raises ``NotRegularFile`` or OSError."""
    pfd = os.open(name, _O_PATH | os.O_NOFOLLOW, dir_fd=dirfd)
    return reopen_regular(pfd, [name], lambda: os.open(name, _O_READ | os.O_NOFOLLOW, dir_fd=dirfd))


def _open_proc_fd() -> tuple[int, int]:
    try:
        return os.getpid(), os.open("/proc/self/fd", _O_DIR)
    except OSError:
        return os.getpid(), -1


# (pid, fd of /proc/self/fd): opened once at import (so fd counts stay flat), again after a fork
_proc_fd: tuple[int, int] = _open_proc_fd()


def _proc_fd_dir() -> int:
    global _proc_fd
    if _proc_fd[0] != os.getpid():
        _proc_fd = _open_proc_fd()
    return _proc_fd[1]


def reopen_regular(
    pfd: int, comps: list[bytes], by_name: Callable[[], int]
) -> tuple[int, os.stat_result]:
    """The one way rootgrep opens a file to read it, given the ``O_PATH`` fd its caller
    reached it with (confined; ``O_PATH`` opens nothing: a FIFO's read side stays closed, a
    device's open handler never runs). Checks with ``fstat`` that it is a regular file, then
    reopens that very inode through its ``/proc/self/fd`` magic link (the same file object, so
    no second check is needed). A name a listing called "file" and then swapped for a FIFO or
    a device is therefore never opened. Closes ``pfd``. Without /proc, ``by_name()`` opens
    the name again and it must still be the same inode."""
    try:
        st = os.fstat(pfd)
        if not stat_mod.S_ISREG(st.st_mode):
            _require_regular(st, comps)
        if hiding._hidden_inos and is_hidden(st):  # (the audit log: as if it were not there)
            raise _gone(comps[-1] if comps else b"")
        proc = _proc_fd_dir()
        if proc >= 0:
            return os.open(str(pfd), _O_READ, dir_fd=proc), st
    finally:
        os.close(pfd)
    fd = by_name()
    try:
        st2 = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) or not stat_mod.S_ISREG(st2.st_mode):
        os.close(fd)
        raise NotFound(f"'{display(comps)}' changed while being opened; try again")
    return fd, st2


def _require_regular(st: os.stat_result, comps: list[bytes]) -> None:
    if stat_mod.S_ISREG(st.st_mode):
        return
    if stat_mod.S_ISDIR(st.st_mode):
        raise NotAFile(f"'{display(comps)}' is a directory; use list_directory to see its entries")
    raise NotRegularFile(
        f"'{display(comps)}' is not a regular file (FIFO, device or socket); "
        "only regular files are read"
    )


NULL_DEVICE_PATH = b"/dev/null"
_NULL_RDEV = os.makedev(1, 3)  # (Linux's null device)


def open_null_device(flags: int) -> int:
    """Open ``/dev/null`` (``O_CLOEXEC``): besides pinning a root, the one open by name
    (the sandbox's rule for it, a stdout whose reader went away). Refused unless it is the
    null device itself, so nothing put in its place is written to or granted."""
    fd = os.open(NULL_DEVICE_PATH, flags | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISCHR(st.st_mode) or st.st_rdev != _NULL_RDEV:
            raise OSError(errno.ENODEV, "not the null device", os.fsdecode(NULL_DEVICE_PATH))
    except BaseException:
        os.close(fd)
        raise
    return fd
