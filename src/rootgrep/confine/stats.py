"""Stats of single names beneath a confined directory fd, never through a link: ``stat_at``,
of regular files only (``stat_regular_at``, ``stat_regular_each``), and the keys a re-sync
compares: a directory's ``DirKey`` (``fstat_key``, ``stat_key_at``) and each file's of a
run of names, ``FileKey`` (``stat_keyed``, with the stats; ``stat_keys``, without).
"""

from __future__ import annotations

import os
import stat as stat_mod

from . import hiding
from .hiding import is_hidden

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    from typing import TypeVar

    _Row = TypeVar("_Row", bound=tuple)  # type: ignore[type-arg]


def stat_at(dirfd: int, name: bytes) -> os.stat_result:
    return os.stat(name, dir_fd=dirfd, follow_symlinks=False)


def _lstat_at(dirfd: int, name: bytes) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def stat_regular_at(dirfd: int, name: bytes) -> os.stat_result | None:
    """The stat of a regular file by one name (never through a link); None otherwise."""
    try:
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except OSError:
        return None
    return st if stat_mod.S_ISREG(st.st_mode) and not is_hidden(st) else None


_S_IFMT, _S_IFREG = 0o170000, 0o100000


def stat_regular_each(
    dirfd: int, names: list[bytes], prefix: bytes, max_size: int, cls: type[_Row]
) -> list[_Row]:
    """A ``cls`` tuple ``(name, prefix + name, stat)`` for each of ``names`` (single names
    beneath the confined directory ``dirfd``) that is a regular file of at most
    ``max_size`` bytes, by one ``fstatat`` each, never through a link; the others (gone,
    links, directories, hidden) are left out. The walker's stat of every file of a
    re-sync: one call per directory run, no Python frame per file."""
    out: list[_Row] = []
    append = out.append
    stat = os.stat
    new = tuple.__new__
    hidden = hiding._hidden_inos
    for name in names:
        try:
            st = stat(name, dir_fd=dirfd, follow_symlinks=False)
        except OSError:
            continue
        if st.st_mode & _S_IFMT != _S_IFREG or st.st_size > max_size:
            continue
        if hidden and is_hidden(st):
            continue
        append(new(cls, (name, prefix + name, st)))
    return out


DirKey = tuple[int, int, int, int, int]  # (dev, inode, mtime_ns, ctime_ns, size)


def stat_result_key(st: os.stat_result) -> DirKey:
    """What ``fstat_key`` takes of a stat."""
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def fstat_key(fd: int) -> DirKey:
    """What changes whenever the entry an fd holds changes: its identity, its mtime and
    ctime (a directory's change with every entry made, removed or renamed in it; a file's
    with every write, and its ctime with every chmod, link or rename, whatever ``touch -d``
    sets its mtime to) and its size."""
    return stat_result_key(os.fstat(fd))


def stat_key_at(dirfd: int, name: bytes) -> DirKey | None:
    """``fstat_key`` of one name beneath ``dirfd``, never through a link; None when absent."""
    try:
        return stat_result_key(os.stat(name, dir_fd=dirfd, follow_symlinks=False))
    except OSError:
        return None


# (size, mtime_ns, inode, ctime_ns): what a re-sync compares (ctime: an edit in place that
# keeps the size and sets the mtime back, ``touch -r``, still changes it)
FileKey = tuple[int, int, int, int]


def stat_keyed(
    dirfd: int, names: list[bytes], max_size: int, large: list[int] | None = None
) -> tuple[list[os.stat_result | None], list[FileKey | None]]:
    """The stat of each of ``names`` (single names beneath the confined directory
    ``dirfd``, one ``fstatat`` each, never through a link) and its key (``FileKey``),
    both None for a name that is not a regular file of at most ``max_size`` bytes
    (gone, a link, a directory, hidden). A re-sync's stat of a directory run: the keys
    compare with the state's in one list comparison; no Python frame per file."""
    stat = os.stat
    try:
        sts: list[os.stat_result | None] = [
            stat(name, dir_fd=dirfd, follow_symlinks=False) for name in names
        ]
    except OSError:  # (one of them gone meanwhile: name by name)
        sts = []
        for name in names:
            try:
                sts.append(stat(name, dir_fd=dirfd, follow_symlinks=False))
            except OSError:
                sts.append(None)
    keys: list[FileKey | None] = [
        (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
        if st is not None and st.st_mode & _S_IFMT == _S_IFREG and st.st_size <= max_size
        else None
        for st in sts
    ]
    inos = hiding._hidden_inos
    if inos and not inos.isdisjoint([key[2] for key in keys if key is not None]):
        for i, st in enumerate(sts):  # (an inode number the cache dir's may be another's)
            if st is not None and is_hidden(st):
                keys[i] = None
    if None in keys:
        if large is not None:  # (how many are regular files over max_size: a coverage count)
            large.append(sum(1 for st in sts if st is not None and st.st_size > max_size
                             and st.st_mode & _S_IFMT == _S_IFREG))  # fmt: skip
        sts = [st if key is not None else None for st, key in zip(sts, keys, strict=True)]
    return sts, keys


def stat_keys(dirfd: int, names: list[bytes], max_size: int) -> list[FileKey | None] | None:
    """The keys ``stat_keyed`` gives ``names`` (one ``fstatat`` each, never through a link),
    without their stats and without its test of hidden identities; None when one of the
    names is gone. Only to compare with keys ``stat_keyed`` gave the very same listing
    (the same names list) under the same hidden identities, never to read or list: a name
    hidden now had a None key then, and its key now is not None, so the lists differ (a
    re-sync's run found as it was, ``RootIndex._walk``: one pass, no list of stats)."""
    stat = os.stat
    try:
        return [
            (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
            if (st := stat(name, dir_fd=dirfd, follow_symlinks=False)).st_mode & _S_IFMT == _S_IFREG
            and st.st_size <= max_size
            else None
            for name in names
        ]
    except OSError:
        return None
