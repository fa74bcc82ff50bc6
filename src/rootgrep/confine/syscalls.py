"""The kernel interface confinement is built on: the open flags every open in this package
uses, and through ctypes the calls Python's ``os`` module lacks: ``openat2`` (the
``RESOLVE_*`` flags; whether the kernel, and any seccomp filter, allows it is probed once),
the ``renameat2`` a rename that never replaces uses, and inotify on a confined directory fd.
ctypes is loaded the first time one of them is called (``_c``): importing it is 2 ms of a
CLI grep's start-up, which calls none of them.
"""

from __future__ import annotations

import _thread  # (its Lock: ``threading``'s set-up is 0.5 ms of the CLI's start-up)
import errno
import os

TYPE_CHECKING = False  # (not ``typing``'s: importing typing costs the CLI more than ctypes)
if TYPE_CHECKING:
    import ctypes

RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08

_SYS_OPENAT2 = 437  # same number on x86_64 and aarch64
_RENAME_NOREPLACE = 1
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_O_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_O_PATH = getattr(os, "O_PATH", 0o10000000) | os.O_CLOEXEC


_loaded: dict[str, object] = {}
_load_lock = _thread.allocate_lock()
_state_lock = _thread.allocate_lock()
_openat2_state: dict[str, bool] = {}


def _c() -> tuple[ctypes.CDLL, type]:
    """(libc with the signatures set, the ``struct open_how`` type), made on first use."""
    got = _loaded.get("c")
    if got is None:
        with _load_lock:
            got = _loaded.get("c")
            if got is None:
                import ctypes

                class _OpenHow(ctypes.Structure):
                    _fields_ = [
                        ("flags", ctypes.c_uint64),
                        ("mode", ctypes.c_uint64),
                        ("resolve", ctypes.c_uint64),
                    ]

                libc = ctypes.CDLL(None, use_errno=True)
                libc.syscall.restype = ctypes.c_long
                libc.inotify_init1.restype = ctypes.c_int
                libc.inotify_add_watch.restype = ctypes.c_int
                libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
                libc.inotify_rm_watch.restype = ctypes.c_int
                got = _loaded["c"] = (libc, _OpenHow)
    return got  # type: ignore[return-value]


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()


def _raw_openat2(dirfd: int, path: bytes, flags: int, resolve: int) -> int:
    import ctypes

    libc, open_how = _c()
    how = open_how(flags, 0, resolve)
    for _ in range(16):  # EAGAIN: a concurrent rename raced the lookup; bounded retries
        fd = libc.syscall(
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(dirfd),
            ctypes.c_char_p(path),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err not in (errno.EAGAIN, errno.EINTR):
            raise OSError(err, os.strerror(err))
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))


def renameat2_noreplace(dirfd: int, src: bytes, dst_dirfd: int, dst: bytes) -> int:
    """``renameat2(RENAME_NOREPLACE)``: 0, or the errno it failed with (``ENOSYS`` where
    libc lacks it)."""
    import ctypes

    libc, _ = _c()
    call = getattr(libc, "renameat2", None)
    if call is None:
        return errno.ENOSYS
    rc = call(ctypes.c_int(dirfd), src, ctypes.c_int(dst_dirfd), dst,
              ctypes.c_uint(_RENAME_NOREPLACE))  # fmt: skip
    return 0 if rc == 0 else ctypes.get_errno()


def openat2_available() -> bool:
    """Whether the kernel (and any seccomp filter) lets us call openat2.

    ``ROOTGREP_NO_OPENAT2=1`` in the environment forces the component walk everywhere.
    """
    if os.environ.get("ROOTGREP_NO_OPENAT2") == "1":
        return False
    with _state_lock:
        if "ok" not in _openat2_state:
            try:
                os.close(_raw_openat2(-100, b"/", _O_PATH, RESOLVE_NO_MAGICLINKS))  # AT_FDCWD
                _openat2_state["ok"] = True
            except OSError:
                _openat2_state["ok"] = False
        return _openat2_state["ok"]


# ---- change notification on a confined directory fd ------------------------------------------


def inotify_open() -> int:
    """A non-blocking inotify instance (an fd)."""
    fd = int(_c()[0].inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    if fd < 0:
        err = _errno()
        raise OSError(err, os.strerror(err))
    return fd


def inotify_watch_dir(ifd: int, dirfd: int, mask: int) -> int:
    """Watch the directory a confined fd holds, through the fd's own ``/proc/self/fd`` link
    (the directory the fd is, never one a path names), for the events in ``mask``."""
    wd = int(_c()[0].inotify_add_watch(ifd, f"/proc/self/fd/{dirfd}".encode(), mask))
    if wd < 0:
        err = _errno()
        raise OSError(err, os.strerror(err))
    return wd


def inotify_unwatch(ifd: int, wd: int) -> None:
    _c()[0].inotify_rm_watch(ifd, wd)  # (a watch already gone is no error worth reporting)
