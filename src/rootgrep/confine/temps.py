"""Atomic replacement and its temps: a file's new content written to a temp beside it
(``_write_temp``: O_EXCL, locked, fsync'd) and renamed over it (``_install``; without
overwriting, ``_rename_noreplace``), the temps' names (``is_temp_name``), and removing the
temps killed writers left (``remove_dead_temp``, ``remove_dead_temps``: only a temp no
writer holds the lock of).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat as stat_mod

from ..errors import Exists, RootgrepError
from .opening import open_file_at
from .stats import _lstat_at
from .syscalls import renameat2_noreplace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

# ---- temp files of atomic writes, and removing those a killed writer left ----------------
#
# A write goes to ``.<name>.rootgrep-<12 hex>.tmp`` beside its target, renamed over it when
# whole. A writer killed before the rename leaves that temp behind; the next process to
# start there removes it (``remove_dead_temp``). Another process may be writing right now,
# so a temp is known dead by its lock: the writer holds an exclusive ``flock`` on its temp's
# fd from just after creating it until the rename is done (flock locks belong to the open
# file description: another open of the same file conflicts, also within one process, and
# the kernel drops the lock when the writer dies). A cleaner removes a temp only when it can
# take that lock without waiting, and only while the name still names the inode it locked.
# The one window, a cleaner locking a temp between a writer's open and its flock, is closed
# on the writer's side: a writer that cannot take its own lock, or finds its temp unlinked
# once it holds it, makes another.

_TEMP_MARK = b".rootgrep-"  # a temp's name: "." + the target's (1-200 bytes) + this
_TEMP_TAIL = len(_TEMP_MARK) + 12 + len(b".tmp")  # + 12 hex digits + ".tmp"
_HEX = frozenset(b"0123456789abcdef")
_TEMP_TRIES = 100


def is_temp_name(name: bytes) -> bool:
    """Whether ``name`` is named like the temp of an atomic write (``_create_temp``):
    ``.<name>.rootgrep-<12 hex digits>.tmp``, ``<name>`` 1-200 bytes without ``/`` (tested
    without ``re``: the CLI's start-up does not import it)."""
    n = len(name)
    if not 2 + _TEMP_TAIL <= n <= 201 + _TEMP_TAIL or name[:1] != b"." or name[-4:] != b".tmp":
        return False
    tail = name[n - _TEMP_TAIL :]
    return (
        tail.startswith(_TEMP_MARK)
        and _HEX.issuperset(tail[len(_TEMP_MARK) : len(_TEMP_MARK) + 12])
        and b"/" not in name[1 : n - _TEMP_TAIL]
    )


def _create_temp(dirfd: int, name: bytes, mode: int) -> tuple[bytes, int]:
    """A new temp file beside ``name``, created with O_EXCL, never through a link, and
    locked (exclusive flock) for as long as its fd stays open."""
    base = name[:200]
    for _ in range(_TEMP_TRIES):
        tmp = b".%s.rootgrep-%s.tmp" % (base, os.urandom(6).hex().encode())
        try:
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                mode & 0o777 | 0o600,
                dir_fd=dirfd,
            )
        except FileExistsError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a cleaner took it between the open and now: it goes
            os.close(fd)
            continue
        except OSError:
            pass  # (no flock on this filesystem: no cleaner can lock it either, so it stays)
        if os.fstat(fd).st_nlink == 0:  # removed by a cleaner before the lock: another
            os.close(fd)
            continue
        return tmp, fd
    raise Exists("could not create a temporary file beside the target")


def remove_dead_temp(dirfd: int, name: bytes) -> bool:
    """Remove the temp ``name`` beneath the confined directory ``dirfd`` if no writer holds
    it: named like one of ours (``is_temp_name``), a regular file (reached with ``O_PATH``
    and reopened, so no FIFO or device is ever opened; never through a link) with one link,
    owned by this process's user (any owner when running as root: root's writes keep the
    target's owner), not hidden, and its lock free now. A link, a directory, a FIFO, a
    hard-linked file or another user's file so named is left alone. True when removed."""
    if not is_temp_name(name):
        return False
    try:
        fd, st = open_file_at(dirfd, name)
    except (OSError, RootgrepError):
        return False  # (a link, gone, hidden, not a regular file)
    try:
        euid = os.geteuid()
        if st.st_nlink != 1 or (euid != 0 and st.st_uid != euid):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live writer's
        now = _lstat_at(dirfd, name)
        if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return False  # (renamed over its target meanwhile)
        os.unlink(name, dir_fd=dirfd)  # (still locked: a writer that locks it later sees
        return True  # its temp unlinked and makes another)
    except OSError:
        return False
    finally:
        os.close(fd)


def remove_dead_temps(dirfd: int, names: Iterable[bytes], limit: int) -> int:
    """``remove_dead_temp`` for the temp-named ones of ``names`` (at most ``limit``
    removed); how many were removed."""
    removed = 0
    for name in names:
        if removed >= limit:
            break
        if is_temp_name(name) and remove_dead_temp(dirfd, name):
            removed += 1
    return removed


def _write_temp(
    dirfd: int,
    name: bytes,
    mode: int,
    chunks: Iterable[bytes],
    owner: tuple[int, int] | None = None,
) -> tuple[bytes, int]:
    """Write ``chunks`` to a new temp file beside ``name`` (O_EXCL), set its owner and mode,
    fsync it; returns the temp's name and its fd, still open and locked (``_create_temp``):
    ``_install`` closes it once the temp is renamed. Removed again if anything fails."""
    tmp, out = _create_temp(dirfd, name, mode & 0o777)
    try:
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
        if owner is not None:
            os.fchown(out, *owner)
        os.fchmod(out, mode & 0o777)
        os.fsync(out)
    except BaseException:
        _unlink_quiet(dirfd, tmp)  # (while still locked: no cleaner takes it meanwhile)
        os.close(out)
        raise
    return tmp, out


def _read_chunks(fd: int) -> Iterator[bytes]:
    while chunk := os.read(fd, 1 << 20):
        yield chunk


def _copy_fd_to_temp(src_fd: int, dirfd: int, name: bytes, mode: int) -> tuple[bytes, int]:
    """Copy an open file into a new temp file beside ``name``; returns the temp (as
    ``_write_temp``)."""
    return _write_temp(dirfd, name, mode, _read_chunks(src_fd))


def _install(dirfd: int, temp: tuple[bytes, int], name: bytes, overwrite: bool) -> None:
    """Rename the temp over ``name`` (or, without ``overwrite``, only if ``name`` is free),
    then close the temp's fd (its lock is held until the temp's name is gone)."""
    tmp, fd = temp
    try:
        if overwrite:
            os.rename(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        else:
            _rename_noreplace(dirfd, tmp, name)
    except BaseException:
        _unlink_quiet(dirfd, tmp)
        raise
    finally:
        os.close(fd)


def _unlink_quiet(dirfd: int, name: bytes) -> None:
    try:  # (not ``contextlib.suppress``: importing contextlib is 1 ms of the CLI's start)
        os.unlink(name, dir_fd=dirfd)
    except OSError:
        return


def _rename_noreplace(dirfd: int, src: bytes, dst: bytes, *, dst_dirfd: int = -1) -> None:
    """renameat2(RENAME_NOREPLACE): fails with EEXIST instead of replacing ``dst``."""
    target = dirfd if dst_dirfd < 0 else dst_dirfd
    err = renameat2_noreplace(dirfd, src, target, dst)
    if err == 0:
        return
    if err not in (errno.EINVAL, errno.ENOSYS):
        raise OSError(err, os.strerror(err))
    if err == errno.EINVAL:
        st = _lstat_at(dirfd, src)
        if st is not None and stat_mod.S_ISDIR(st.st_mode):
            # the link() fallback cannot move a directory (it would say EPERM); EINVAL for a
            # directory is the kernel refusing to move it below itself
            raise OSError(err, os.strerror(err))
    # Filesystems without RENAME_NOREPLACE: link() refuses an existing target too (files only).
    os.link(src, dst, src_dir_fd=dirfd, dst_dir_fd=target, follow_symlinks=False)
    os.unlink(src, dir_fd=dirfd)
