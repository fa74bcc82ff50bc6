"""A daemon's Unix socket reached beneath a pinned directory, with nothing but ``os``.

``bind`` and ``connect`` take a path, not a directory fd. So the socket is named through the
``/proc/self/fd`` link of its own directory's fd, which was opened one name at a time beneath
the pinned cache dir, never through a symlink (``O_NOFOLLOW``); and the socket's own name is
checked to be a socket, not a link, first. ``pin_lookup`` pins the cache dir itself (the
open by name every root's pinning is), refusing one another user could have planted in.
This module loads no ctypes and none of its siblings: ``rootgrep grep`` looks for its
daemon through it before anything else of rootgrep is loaded.
"""

from __future__ import annotations

import os
import stat as stat_mod

_O_LOOKUP = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def pin_lookup(path: str | bytes) -> int | None:
    """``path``, a private directory, opened once by name as an ``O_PATH`` fd (it names the
    directory: nothing is listed or read through it). None when it is missing, a symbolic
    link, not this user's, or writable by group or others: what ``index.cache`` refuses as a
    cache dir (someone else could have planted folders or sockets in it)."""
    try:
        fd = os.open(path, _O_LOOKUP | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        st = None
    if st is None or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        return None
    return fd


def entry_at(dirfd: int, name: str) -> bool:
    """Whether ``name`` exists in the directory ``dirfd`` holds (not followed if a link)."""
    try:
        os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except OSError:
        return False
    return True


def socket_at(dirfd: int, name: str) -> str | None:
    """The path through which ``connect`` reaches the socket ``name`` of the directory
    ``dirfd`` holds; None when there is none, or ``name`` is a link or not a socket."""
    try:
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except OSError:
        return None
    return bind_path(dirfd, name) if stat_mod.S_ISSOCK(st.st_mode) else None


def bind_path(dirfd: int, name: str) -> str:
    """The path at which ``bind`` makes the socket ``name`` in the directory ``dirfd``
    holds (``bind`` never follows a link: a name that exists fails it)."""
    return f"/proc/self/fd/{dirfd}/{name}"


def socket_beneath(dirfd: int, folder: str, name: str) -> tuple[int, str] | None:
    """The subdirectory ``folder`` of ``dirfd`` opened without following a link, and
    ``socket_at`` of its socket ``name``: ``(fd, path)``, the caller closes ``fd`` once
    connected. None when either is missing, or is a link, or ``name`` is not a socket."""
    try:
        fd = os.open(folder, _O_LOOKUP | os.O_NOFOLLOW, dir_fd=dirfd)
    except OSError:
        return None
    path = socket_at(fd, name)
    if path is None:
        os.close(fd)
        return None
    return fd, path
