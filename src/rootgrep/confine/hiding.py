"""Hiding rootgrep's own cache dir and audit log from every tool, by identity (st_dev,
st_ino), never by a path: ``hide`` and ``unhide``, the tests every listing and open of this
package makes (``is_hidden``, ``_hidden_at``: a set lookup when nothing is hidden), whether a
directory is or lies beneath a hidden one (``inside_hidden``) or holds one (``holds_hidden``),
both by ``..`` steps, and ``hidden_generation``, which changes with the hidden set. The other
modules read the set as ``hiding._hidden_inos`` (it is replaced, never mutated).
"""

from __future__ import annotations

import _thread  # (its Lock: ``threading``'s set-up is 0.5 ms of the CLI's start-up)
import errno
import os
import stat as stat_mod

from .syscalls import _O_DIR, _O_PATH

# ---- hidden identities: rootgrep's own cache dir and audit log ------------------------------
#
# When the index cache or the audit log lies inside a served root (the default cache with a
# root of $HOME), no tool may see, read, write, move, copy or delete it: a client would read
# other sessions' root paths and file names there, or turn index writes into writes outside the
# roots. They are hidden by identity (st_dev, st_ino), never by a path prefix: every listing
# drops them (``scan_fd``), every open of a directory or file by one name refuses them as a
# missing name, and single-path resolution (``Beneath.open``) refuses a path that resolves to
# them or goes through a hidden directory. The checks cost a set lookup when nothing is hidden,
# and one ``fstat`` of an fd already open when something is.

# (dev, ino) -> [references, dir fd or -1, inode its parent's listing shows or -1]
_hidden: dict[tuple[int, int], list[int]] = {}
_hidden_inos: frozenset[int] = frozenset()  # read without the lock (replaced, never mutated)
_hidden_generation = 0
_hidden_lock = _thread.allocate_lock()
_ROOT_DEPTH_MAX = 4096  # '..' steps from a directory to '/' (a bound, not a real depth)


def hide(fd: int) -> tuple[int, int]:
    """Hide the file or directory ``fd`` is from every tool (until ``unhide``); returns its
    identity. A directory's fd is kept (dup'd) to find its ancestors."""
    global _hidden_inos, _hidden_generation
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino)
    with _hidden_lock:
        if key in _hidden:
            _hidden[key][0] += 1
        else:
            is_dir = stat_mod.S_ISDIR(st.st_mode)
            keep = os.dup(fd) if is_dir else -1
            _hidden[key] = [1, keep, _covered_ino(fd, st) if is_dir else -1]
            _hidden_inos = _all_hidden_inos()
            _hidden_generation += 1
    return key


def _all_hidden_inos() -> frozenset[int]:
    return frozenset(ino for _, ino in _hidden) | {v[2] for v in _hidden.values() if v[2] >= 0}


def _covered_ino(fd: int, st: os.stat_result) -> int:
    """For a directory that is a mount point: the inode its parent's listing shows for it
    (the covered directory's, not the mounted one's), so listings leave it out too; -1
    otherwise. (Scans the parent once, only for a mount point.)"""
    try:
        pfd = os.open(b"..", _O_DIR, dir_fd=fd)
    except OSError:
        return -1
    try:
        if os.fstat(pfd).st_dev == st.st_dev:
            return -1
        with os.scandir(pfd) as it:
            for de in it:
                try:
                    there = os.stat(de.name, dir_fd=pfd, follow_symlinks=False)
                except OSError:
                    continue
                if (there.st_dev, there.st_ino) == (st.st_dev, st.st_ino):
                    return de.inode()
        return -1
    except OSError:
        return -1
    finally:
        os.close(pfd)


def unhide(key: tuple[int, int]) -> None:
    global _hidden_inos, _hidden_generation
    with _hidden_lock:
        ref = _hidden.get(key)
        if ref is None:
            return
        ref[0] -= 1
        if ref[0] > 0:
            return
        del _hidden[key]
        _hidden_inos = _all_hidden_inos()
        _hidden_generation += 1
    if ref[1] >= 0:
        os.close(ref[1])


def is_hidden(st: os.stat_result) -> bool:
    """Whether ``st`` is the cache dir or the audit log of this process (by identity)."""
    return st.st_ino in _hidden_inos and (st.st_dev, st.st_ino) in _hidden


def _hidden_at(dirfd: int, name: bytes) -> bool:
    if not _hidden_inos:
        return False
    try:
        return is_hidden(os.stat(name, dir_fd=dirfd, follow_symlinks=False))
    except OSError:
        return False


def _gone(name: bytes | str) -> OSError:
    """What a hidden name looks like to a caller: a name that does not exist."""
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)


def _up(fd: int) -> int:
    return os.open(b"..", _O_PATH | os.O_DIRECTORY, dir_fd=fd)


def _chain_holds(start_fd: int, wanted: set[tuple[int, int]], *, self_too: bool) -> bool:
    """Whether a directory in ``wanted`` is ``start_fd`` (with ``self_too``) or one of its
    ancestors, found by ``..`` steps up to ``/`` (identity all the way, never a path)."""
    cur = os.dup(start_fd)
    try:
        st = os.fstat(cur)
        if self_too and (st.st_dev, st.st_ino) in wanted:
            return True
        for _ in range(_ROOT_DEPTH_MAX):
            up = _up(cur)
            os.close(cur)
            cur = up
            ust = os.fstat(cur)
            if (ust.st_dev, ust.st_ino) in wanted:
                return True
            if (ust.st_dev, ust.st_ino) == (st.st_dev, st.st_ino):
                return False  # '/': its '..' is itself
            st = ust
        return False
    finally:
        os.close(cur)


def _hidden_dir_fds() -> list[int]:
    with _hidden_lock:
        return [os.dup(v[1]) for v in _hidden.values() if v[1] >= 0]


def inside_hidden(fd: int) -> bool:
    """Whether the directory ``fd`` is a hidden directory or lies beneath one."""
    with _hidden_lock:
        wanted = {k for k, v in _hidden.items() if v[1] >= 0}
    return bool(wanted) and _chain_holds(fd, wanted, self_too=True)


def holds_hidden(st: os.stat_result) -> bool:
    """Whether the directory ``st`` is an ancestor of a hidden directory (walking up from each
    hidden directory: a handful of ``..`` steps, done only when a directory is moved)."""
    wanted = {(st.st_dev, st.st_ino)}
    fds = _hidden_dir_fds()
    try:
        return any(_chain_holds(fd, wanted, self_too=False) for fd in fds)
    finally:
        for fd in fds:
            os.close(fd)


def hidden_generation() -> int:
    """Changes whenever the set of hidden identities (cache dirs, audit logs) changes: a
    listing kept from before is no longer what a listing would be now."""
    return _hidden_generation
