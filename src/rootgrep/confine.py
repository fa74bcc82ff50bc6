"""Confinement: every open, stat, list, read and write beneath a pinned root directory fd.

This is the only module that turns a path into a file descriptor. Everything is resolved
relative to a root fd that was pinned once, with ``openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS)``
where the kernel has it and a component-by-component ``O_NOFOLLOW`` walk otherwise. Symlinks are
never followed by the kernel in the walk: each one is read with ``readlinkat`` and re-resolved
lexically beneath the root, so swapping a directory for a symlink mid-resolution cannot lead
outside. A path string is never opened by name (pinning the root is the one exception).
"""

from __future__ import annotations

import _thread  # (its Lock: ``threading``'s set-up is 0.5 ms of the CLI's start-up)
import bisect
import contextlib
import ctypes
import errno
import fcntl
import itertools
import mmap
import os
import stat as stat_mod
import sys
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator

from .errors import (
    BinaryFile,
    Exists,
    InvalidPath,
    NotADirectory,
    NotAFile,
    NotFound,
    NotRegularFile,
    OutsideRoots,
    ReadOnly,
    RootgrepError,
    TooLarge,
)

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    from typing import Literal, NamedTuple, TypeVar

    SymlinkPolicy = Literal["within", "never"]
    _Row = TypeVar("_Row", bound=tuple)  # type: ignore[type-arg]
else:
    SymlinkPolicy = str

RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08

MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096
MAX_SYMLINKS = 40
BINARY_SNIFF_BYTES = 8192
DEFAULT_MAX_READ_BYTES = 1 << 20

_FS_ENCODING = sys.getfilesystemencoding()
_SYS_OPENAT2 = 437  # same number on x86_64 and aarch64
_RENAME_NOREPLACE = 1
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_O_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_WALK_HELD_FDS = 16  # directory fds the component walk keeps open at once
_WALK_DECIDES = frozenset((errno.EXDEV, errno.ELOOP, errno.ENOSYS, errno.EPERM, errno.EAGAIN))
_O_PATH = getattr(os, "O_PATH", 0o10000000) | os.O_CLOEXEC
_INTO_ITSELF = "cannot move a directory into itself; choose a destination outside it"


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_renameat2 = getattr(_libc, "renameat2", None)
_openat2_state: dict[str, bool] = {}
_state_lock = _thread.allocate_lock()


def _raw_openat2(dirfd: int, path: bytes, flags: int, resolve: int) -> int:
    how = _OpenHow(flags, 0, resolve)
    for _ in range(16):  # EAGAIN: a concurrent rename raced the lookup; bounded retries
        fd = _libc.syscall(
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


def fsencode_path(path: str | bytes) -> bytes:
    """``os.fsencode`` that turns lone surrogates and NUL into ``invalid_path``."""
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:
        raise InvalidPath(
            "the path is not valid text (a lone surrogate); fix its encoding"
        ) from None
    if b"\0" in raw:
        raise InvalidPath("the path contains a NUL byte; remove it")
    return raw


def _same_dir(path: bytes, st: os.stat_result) -> bool:
    try:
        other = os.stat(path)
    except OSError:
        return False
    return (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino)


def _canonical_of(fd: int, st: os.stat_result) -> bytes:
    """The absolute path of a pinned directory, read back from the fd and checked against it
    (the kernel's name may be stale, e.g. ``... (deleted)``, or the tree may have moved)."""
    try:
        canonical = os.fsencode(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        raise InvalidPath("cannot read the root's path back from /proc/self/fd") from None
    if not canonical.startswith(b"/") or not _same_dir(canonical, st):
        raise InvalidPath("the root changed while it was being pinned; try again")
    return canonical


def split_relpath(rel: str | bytes) -> list[bytes]:
    """Validate a root-relative path and split it into components (``.`` and empties dropped,
    but a trailing ``/`` is kept as a final ``.``: the name before it must be a directory).

    ``..`` is kept: it is resolved physically during the walk and refused if it leaves the root.
    """
    raw = fsencode_path(rel)
    if len(raw) > MAX_PATH_BYTES:
        raise InvalidPath(f"the path is longer than {MAX_PATH_BYTES} bytes; use a shorter path")
    if raw.startswith(b"/"):
        raise OutsideRoots("an absolute path was given where a root-relative one was expected")
    comps = [c for c in raw.split(b"/") if c not in (b"", b".")]
    for c in comps:
        if len(c) > MAX_NAME_BYTES:
            raise InvalidPath(f"a path component is longer than {MAX_NAME_BYTES} bytes")
    if comps and raw.endswith((b"/", b"/.")) and comps[-1] != b"..":
        comps.append(b".")  # "x/" must be a directory: kept as a final '.'
    return comps


def strip_prefix(path: bytes, prefix: bytes) -> list[bytes] | None:
    """Components of ``path`` below ``prefix``, compared component-wise (never as a string
    prefix: ``/w/project-old`` is not inside ``/w/project``); None when outside."""
    p = [c for c in path.split(b"/") if c not in (b"", b".")]
    q = [c for c in prefix.split(b"/") if c not in (b"", b".")]
    if len(p) < len(q) or p[: len(q)] != q:
        return None
    return p[len(q) :]


def display(comps: list[bytes] | bytes | str) -> str:
    """A root-relative path for messages, undecodable bytes shown visibly."""
    if isinstance(comps, list):
        comps = b"/".join(comps)
    if isinstance(comps, str):
        comps = os.fsencode(comps)
    return comps.decode("utf-8", "backslashreplace") or "."


def _error(err: OSError, comps: list[bytes]) -> RootgrepError:
    where = display(comps)
    e = err.errno
    if e == errno.ENOENT:
        return NotFound(f"'{where}' does not exist; list its parent directory to see what is there")
    if e == errno.ENOTDIR:
        return NotADirectory(f"a component of '{where}' is not a directory; check the path")
    if e == errno.EXDEV:
        return OutsideRoots(f"'{where}' resolves outside the root; use a path inside the root")
    if e == errno.EISDIR:
        return NotAFile(f"'{where}' is a directory; use list_directory to see its entries")
    if e == errno.ENXIO:
        return NotRegularFile(f"'{where}' is a socket or device, not a regular file")
    if e == errno.ENAMETOOLONG:
        return InvalidPath(f"'{where}' is too long; use a shorter path")
    if e == errno.ELOOP:
        return OutsideRoots(f"'{where}' is a symbolic link that rootgrep does not follow here")
    if e in (errno.EACCES, errno.EPERM):
        return NotFound(f"'{where}' is not readable (permission denied); check its permissions")
    if e == errno.EEXIST:
        return Exists(f"'{where}' already exists; choose another name or allow overwriting")
    if e == errno.EROFS:
        return ReadOnly(f"'{where}' is on a read-only filesystem; it cannot be changed")
    if e in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return TooLarge(f"no space to write '{where}' (disk full or quota); free space first")
    if e == errno.EMFILE:
        return InvalidPath(f"'{where}' is too deep to resolve with the open-file limit")
    return InvalidPath(f"'{where}' could not be opened ({os.strerror(e or 0)})")


if TYPE_CHECKING:

    class Entry(NamedTuple):
        """One directory entry, as seen without following symlinks."""

        name: bytes
        kind: Literal["file", "dir", "symlink", "other"]

else:  # (the same tuple without ``typing``)
    Entry = namedtuple("Entry", ("name", "kind"))
    Entry.__doc__ = "One directory entry, as seen without following symlinks."


class ReadResult:
    """A file's bytes as read (at most the asked for: ``truncated``), its size and stat.
    (The classes here are plain classes, not dataclasses: the CLI's start-up does not import
    ``dataclasses``, its import and 0.2 ms per class made being a fifth of it.)"""

    __slots__ = ("data", "size", "stat", "truncated")

    def __init__(self, data: bytes, size: int, truncated: bool, stat: os.stat_result) -> None:
        self.data = data
        self.size = size
        self.truncated = truncated
        self.stat = stat


def entry_kind(st_mode: int) -> Literal["file", "dir", "symlink", "other"]:
    if stat_mod.S_ISREG(st_mode):
        return "file"
    if stat_mod.S_ISDIR(st_mode):
        return "dir"
    if stat_mod.S_ISLNK(st_mode):
        return "symlink"
    return "other"


def is_binary(data: bytes) -> bool:
    """A file is binary when its first 8 KiB hold a NUL byte (SPEC §4)."""
    return b"\0" in data[:BINARY_SNIFF_BYTES]


def _check_name(name: bytes) -> None:
    if not name or name in (b".", b"..") or b"/" in name or b"\0" in name:
        raise InvalidPath(f"'{display(name)}' is not a single file name")


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


# ---- fd-relative primitives (a directory fd that is already confined + one name) ----------


MAX_DIR_ENTRIES = 200_000  # a listing holds at most this many of a directory's entries


class DirListing(list[Entry]):
    """``scan_fd``'s answer; ``cut``: the directory held more than ``MAX_DIR_ENTRIES`` entries
    and only the first ones read (in the kernel's order, then sorted) are in it."""

    cut = False


def scan_fd(
    dirfd: int, hidden: list[bytes] | None = None, limit: int = MAX_DIR_ENTRIES
) -> DirListing:
    """List a directory fd opened O_RDONLY|O_DIRECTORY, sorted by name bytes, links unfollowed.

    Hidden entries (the cache dir, the audit log) are left out, their names added to
    ``hidden`` when given. (The entry's inode from the listing is checked first, free; only a
    match costs an ``lstat``.) At most ``MAX_DIR_ENTRIES`` entries are read: a directory an
    attacker or a generator filled costs bounded memory and time (the answer says ``cut``)."""
    out = DirListing()
    append = out.append
    enc = _FS_ENCODING
    new = tuple.__new__  # Entry(...) without a Python frame: one per directory entry
    inos = _hidden_inos
    room = min(limit, MAX_DIR_ENTRIES)  # (``limit``: fewer, for a caller that needs fewer)
    with os.scandir(dirfd) as it:
        for de in it:
            if len(out) >= room:
                out.cut = True
                break
            name = de.name.encode(enc, "surrogateescape")
            if inos and de.inode() in inos and _hidden_at(dirfd, name):
                if hidden is not None:
                    hidden.append(name)
                continue
            if de.is_file(follow_symlinks=False):
                append(new(Entry, (name, "file")))
            elif de.is_dir(follow_symlinks=False):
                append(new(Entry, (name, "dir")))
            elif de.is_symlink():
                append(new(Entry, (name, "symlink")))
            else:
                append(new(Entry, (name, "other")))
    out.sort()  # by name bytes (names are unique within a directory)
    return out


Listed = tuple[bytes, str]  # (name, kind): an ``Entry``'s fields, as a plain tuple


def scan_split(dirfd: int) -> tuple[list[Listed], list[Listed], bool]:
    """``scan_fd``'s listing (hidden entries left out, links unfollowed, at most
    ``MAX_DIR_ENTRIES``) as two lists sorted by name: the names that start with a dot, and
    the others; and whether the directory held more (``DirListing.cut``). The walker's
    listing: plain tuples, and the dot names (hidden files, ignore files) apart without a
    test per entry later."""
    enc = _FS_ENCODING
    inos = _hidden_inos
    room = MAX_DIR_ENTRIES
    with os.scandir(dirfd) as it:
        # hidden entries left out before the cap counts (else one among those read made a
        # cut listing look whole), as ``scan_fd`` counts
        shown = (
            (de for de in it if not (de.inode() in inos and _hidden_at(dirfd, de.name)))
            if inos  # (the cache dir or the audit log may be here: checked by inode first)
            else it
        )
        des = list(itertools.islice(shown, room + 1))
    cut = len(des) > room
    if cut:
        del des[room:]
    listing = [
        (
            de.name.encode(enc, "surrogateescape"),
            "file"
            if de.is_file(follow_symlinks=False)
            else "dir"
            if de.is_dir(follow_symlinks=False)
            else "symlink"
            if de.is_symlink()
            else "other",
        )
        for de in des
    ]
    listing.sort()  # by name bytes (names are unique within a directory)
    lo = bisect.bisect_left(listing, (b".",))  # (sorted: the dot names are one run)
    if lo == len(listing) or listing[lo][0][:1] != b".":
        return [], listing, cut
    hi = bisect.bisect_left(listing, (b"/",), lo)  # (no name holds a "/": the next byte)
    return listing[lo:hi], listing[:lo] + listing[hi:], cut


def open_dir_at(dirfd: int, name: bytes) -> int:
    """Open a subdirectory by a single name, never through a symlink (nor a hidden one)."""
    fd = os.open(name, _O_DIR | os.O_NOFOLLOW, dir_fd=dirfd)
    if _hidden_inos and is_hidden(os.fstat(fd)):
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
        if _hidden_inos and is_hidden(st):  # (the audit log: as if it were not there)
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


def stat_at(dirfd: int, name: bytes) -> os.stat_result:
    return os.stat(name, dir_fd=dirfd, follow_symlinks=False)


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
    hidden = _hidden_inos
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


def hidden_generation() -> int:
    """Changes whenever the set of hidden identities (cache dirs, audit logs) changes: a
    listing kept from before is no longer what a listing would be now."""
    return _hidden_generation


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
    inos = _hidden_inos
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


def read_fd(fd: int, size_hint: int, max_bytes: int) -> tuple[bytes, bool]:
    """Read at most ``max_bytes`` from ``fd``; the flag says whether more was there.

    One read when the file is as large as ``fstat`` said (the common case); otherwise reads to
    the end, so files that grow, shrink, are sparse or report size 0 (procfs) come out right.
    """
    want = min(max_bytes, size_hint + 1) if size_hint > 0 else min(max_bytes, 65536)
    first = os.read(fd, max(want, 1))
    if 0 < size_hint < max_bytes and len(first) == size_hint:
        return first, False
    if not first:
        return b"", False
    chunks = [first]
    total = len(first)
    while total < max_bytes:
        b = os.read(fd, min(max_bytes - total, 1 << 20))
        if not b:
            return b"".join(chunks), False
        chunks.append(b)
        total += len(b)
    data = b"".join(chunks)
    return data[:max_bytes], total > max_bytes or bool(os.read(fd, 1))


def read_searchable_into(
    dirfd: int, name: bytes, max_file_size: int, buf: bytearray | mmap.mmap | None
) -> memoryview | bytes | None:
    """``read_searchable_at``'s answer, read into ``buf`` when one is given and the file fits
    in it (a view of ``buf``, valid until its next use), else as bytes of its own. For files
    read only to be tested (an index's candidates, most of which do not match): a fresh
    buffer for each file cost more than the read (the memory is mapped, faulted in and
    unmapped again)."""
    try:
        fd, st = open_file_at(dirfd, name)
    except (OSError, RootgrepError):
        return None
    try:
        size = st.st_size
        if size > max_file_size:
            return None
        if buf is None or size >= len(buf):  # (one byte of room: a grown file is read anew)
            return _searchable(fd, size, max_file_size)
        if size > BINARY_SNIFF_BYTES and b"\0" in os.pread(fd, BINARY_SNIFF_BYTES, 0):
            return None
        view = memoryview(buf)
        n = os.readv(fd, [view[: size + 1]])
        if n != size:  # (changed since its fstat: read again from the start)
            os.lseek(fd, 0, os.SEEK_SET)
            return _searchable(fd, size, max_file_size)
        if buf.find(b"\0", 0, min(n, BINARY_SNIFF_BYTES)) >= 0:
            return None
        return view[:n]
    except OSError:
        return None
    finally:
        os.close(fd)


def _searchable(fd: int, size: int, max_file_size: int) -> bytes | None:
    if size <= BINARY_SNIFF_BYTES:
        data, _ = read_fd(fd, size, max_file_size)
        return None if b"\0" in data else data
    if b"\0" in os.pread(fd, BINARY_SNIFF_BYTES, 0):
        return None
    data, _ = read_fd(fd, size, max_file_size)
    return None if data.find(b"\0", 0, BINARY_SNIFF_BYTES) >= 0 else data


def read_searchable_stat_at(
    dirfd: int, name: bytes, max_file_size: int
) -> tuple[bytes | None, os.stat_result] | None:
    """A file's searchable bytes by one name beneath a confined directory fd, with the
    ``fstat`` of the very file read: None when it cannot be opened as a regular file (gone,
    a symlink, not regular); (None, its stat) when it is over ``max_file_size`` or binary."""
    try:
        fd, st = open_file_at(dirfd, name)
    except (OSError, RootgrepError):
        return None
    try:
        if st.st_size > max_file_size:
            return None, st
        return _searchable(fd, st.st_size, max_file_size), st
    except OSError:
        return None
    finally:
        os.close(fd)


def read_searchable_at(dirfd: int, name: bytes, max_file_size: int) -> bytes | None:
    """A searchable file's bytes by one name beneath a confined directory fd, or None when it
    is gone, a symlink, not regular, over ``max_file_size`` or binary (search skips those).
    A large file's first 8 KiB are read alone (``pread``: the file is then read whole from
    its start, into one buffer, not joined from two), so a binary file is never read in
    full."""
    got = read_searchable_stat_at(dirfd, name, max_file_size)
    return None if got is None else got[0]


# ---- change notification on a confined directory fd ------------------------------------------

_libc.inotify_init1.restype = ctypes.c_int
_libc.inotify_add_watch.restype = ctypes.c_int
_libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
_libc.inotify_rm_watch.restype = ctypes.c_int


def inotify_open() -> int:
    """A non-blocking inotify instance (an fd)."""
    fd = int(_libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def inotify_watch_dir(ifd: int, dirfd: int, mask: int) -> int:
    """Watch the directory a confined fd holds, through the fd's own ``/proc/self/fd`` link
    (the directory the fd is, never one a path names), for the events in ``mask``."""
    wd = int(_libc.inotify_add_watch(ifd, f"/proc/self/fd/{dirfd}".encode(), mask))
    if wd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return wd


def inotify_unwatch(ifd: int, wd: int) -> None:
    _libc.inotify_rm_watch(ifd, wd)  # (a watch already gone is no error worth reporting)


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


# ---- a pinned root ---------------------------------------------------------------------------


class Beneath:
    """A pinned root directory and every confined operation beneath it.

    ``aliases`` are the absolute spellings of the root (canonical first) that absolute symlink
    targets may use to stay inside it.
    """

    def __init__(
        self,
        fd: int,
        path: bytes,
        *,
        aliases: tuple[bytes, ...] = (),
        symlinks: SymlinkPolicy = "within",
        use_openat2: bool | None = None,
        hides: bool = True,
    ) -> None:
        if symlinks not in ("within", "never"):
            raise ValueError(f"unknown symlink policy {symlinks!r}")
        self.fd = fd
        # hidden identities are refused beneath this root (False: the cache dir's own pin)
        self.hides = hides
        self._hidden_here: tuple[int, bool] | None = None
        self.path = path
        self.aliases = (path, *[a for a in aliases if a != path])
        self.symlinks: SymlinkPolicy = symlinks
        want = openat2_available() if use_openat2 is None else use_openat2
        self.use_openat2 = bool(want) and openat2_available()
        self._users = 0
        self._retired = False
        self._lock = _thread.allocate_lock()

    @classmethod
    def pin(
        cls,
        path: str | bytes,
        *,
        symlinks: SymlinkPolicy = "within",
        use_openat2: bool | None = None,
        hides: bool = True,
        lookup_only: bool = False,
    ) -> Beneath:
        """Open ``path`` (an absolute directory) once and pin it; its canonical path is read
        back from the fd itself, so a root announced through a symlink is resolved race-free.
        A directory that is (or lies beneath) a hidden one is refused as missing.
        ``lookup_only``: an ``O_PATH`` fd, which names the directory but cannot list or read
        it (what a sandbox still lets the process open above its roots)."""
        if symlinks not in ("within", "never"):
            raise ValueError(f"unknown symlink policy {symlinks!r}")
        raw = fsencode_path(path)
        # the one open by name: pinning a root
        fd = os.open(raw, (_O_PATH | os.O_DIRECTORY) if lookup_only else _O_DIR)
        try:
            st = os.fstat(fd)
            if hides and _hidden_inos and inside_hidden(fd):
                raise _gone(raw)
            canonical = _canonical_of(fd, st)
            aliases = []
            announced = os.fsencode(os.path.abspath(raw))
            # the announced spelling counts only if it is plainly the same directory
            if b".." not in raw.split(b"/") and _same_dir(announced, st):
                aliases.append(announced)
            return cls(
                fd, canonical, aliases=tuple(aliases), symlinks=symlinks,
                use_openat2=use_openat2, hides=hides,
            )  # fmt: skip
        except BaseException:
            os.close(fd)
            raise

    def close(self) -> None:
        with self._lock:
            fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def identity(self) -> tuple[int, int]:
        """(device, inode) of the pinned directory itself: what an index is bound to (the
        same path may later name another directory)."""
        st = os.fstat(self.fd)
        return st.st_dev, st.st_ino

    # The root fd must never be closed while a call still uses it: a reused fd number would
    # silently point beneath another directory. Calls acquire the roots they use; a root that
    # leaves the effective set is retired, and closed when its last user releases it.

    def acquire(self) -> bool:
        with self._lock:
            if self._retired or self.fd < 0:
                return False
            self._users += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            done = self._retired and self._users == 0
        if done:
            self.close()

    @property
    def retired(self) -> bool:
        return self._retired

    def retire(self) -> None:
        with self._lock:
            if self._retired:
                return
            self._retired = True
            done = self._users == 0
        if done:
            self.close()

    def __enter__(self) -> Beneath:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- resolution --------------------------------------------------------------------------

    def open(
        self,
        rel: str | bytes | list[bytes],
        flags: int,
        *,
        follow: bool = True,
        no_symlinks: bool = False,
    ) -> int:
        """Resolve ``rel`` beneath the root and open it with ``flags``.

        ``follow=False`` leaves a final symlink unfollowed (with O_PATH it opens the link).
        ``no_symlinks=True`` refuses every symlink on the way (the walker's view).
        """
        comps = rel if isinstance(rel, list) else split_relpath(rel)
        flags |= os.O_CLOEXEC
        if not comps:
            return os.open(b".", flags & ~os.O_NOFOLLOW, dir_fd=self.fd)
        never = no_symlinks or self.symlinks == "never"
        if not (self.hides and _hidden_inos):
            return self._resolve(comps, flags, follow, never, False)
        # Something is hidden: what a path resolves to is checked, and when a hidden directory
        # lies beneath this root, every directory on the way too (the component walk, since
        # openat2 does not show the directories it went through).
        each = self._holds_hidden()
        try:
            fd = self._resolve(comps, flags, follow, never, each)
        except (RootgrepError, OSError) as e:
            # (a hidden file opened as a directory, say: it must still look missing)
            if not isinstance(e, NotFound) and self._names_hidden(comps, follow, never, each):
                raise _error(_gone(b"/".join(comps)), comps) from None
            raise
        if is_hidden(os.fstat(fd)):
            os.close(fd)
            raise _error(_gone(b"/".join(comps)), comps)
        return fd

    def _names_hidden(self, comps: list[bytes], follow: bool, never: bool, each: bool) -> bool:
        try:
            fd = self._resolve(comps, _O_PATH, follow, never, each)
        except (RootgrepError, OSError):
            return False
        try:
            return is_hidden(os.fstat(fd))
        finally:
            os.close(fd)

    def _holds_hidden(self) -> bool:
        """Whether a hidden directory lies beneath this root (found by identity, walking up
        from each hidden directory; cached until the hidden set changes: tools can neither
        move a hidden directory nor any directory above it)."""
        cached = self._hidden_here
        if cached is not None and cached[0] == _hidden_generation:
            return cached[1]
        gen = _hidden_generation
        try:
            here = holds_hidden(os.fstat(self.fd))
        except OSError:
            here = True  # (when in doubt, the slower walk that checks every directory)
        self._hidden_here = (gen, here)
        return here

    def _resolve(
        self, comps: list[bytes], flags: int, follow: bool, never: bool, each: bool
    ) -> int:
        if self.use_openat2 and not each:
            resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
            if never:
                resolve |= RESOLVE_NO_SYMLINKS
            try:
                return _raw_openat2(
                    self.fd, b"/".join(comps), flags | (0 if follow else os.O_NOFOLLOW), resolve
                )
            except OSError as e:
                # EXDEV/ELOOP may be an absolute link that stays inside, or a refused link:
                # the component walk below gives the precise, equally confined verdict.
                if e.errno not in _WALK_DECIDES:
                    raise _error(e, comps) from None
                if e.errno == errno.ENOSYS:
                    self.use_openat2 = False
        return self._walk(comps, flags, follow, never, each)

    def _walk(
        self, comps: list[bytes], flags: int, follow: bool, never: bool, each: bool = False
    ) -> int:
        """The component walk; ``each``: refuse a hidden directory on the way as missing."""
        pending = list(reversed(comps))  # a stack: pending[-1] is next
        # The directories we stand in, below the root: (name, fd or -1 once closed to keep
        # fds bounded; a closed one is reopened name by name from the root if '..' needs it).
        stack: list[tuple[bytes, int]] = []
        links = 0
        try:
            while pending:
                comp = pending.pop()
                if comp in (b"", b"."):
                    continue
                if comp == b"..":
                    if not stack:
                        raise OutsideRoots(
                            f"'{display(comps)}' leaves the root through '..'; "
                            "use a path inside the root"
                        )
                    _, fd = stack.pop()
                    if fd >= 0:
                        os.close(fd)
                    if stack and stack[-1][1] < 0:
                        stack[-1] = (stack[-1][0], self._reopen([n for n, _ in stack], comps))
                    continue
                cur = stack[-1][1] if stack else self.fd
                last = not pending
                fl = flags | os.O_NOFOLLOW if last else _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW
                try:
                    fd = os.open(comp, fl, dir_fd=cur)
                except OSError as e:
                    if e.errno not in (errno.ELOOP, errno.ENOTDIR) or (last and not follow):
                        raise _error(e, comps) from None
                    target = _readlink_at(cur, comp)
                    if target is None:
                        raise _error(e, comps) from None
                    links = self._push_link(target, pending, stack, links, never, comps)
                    continue
                opened_link = last and follow and flags & _O_PATH == _O_PATH
                if opened_link and stat_mod.S_ISLNK(os.fstat(fd).st_mode):
                    # O_PATH|O_NOFOLLOW opens a link itself: resolve it ourselves.
                    os.close(fd)
                    target = _readlink_at(cur, comp)
                    if target is None:
                        raise NotFound(f"'{display(comps)}' changed while being resolved")
                    links = self._push_link(target, pending, stack, links, never, comps)
                    continue
                if last:
                    return fd
                if each and is_hidden(os.fstat(fd)):
                    os.close(fd)
                    raise _error(_gone(comp), comps)
                stack.append((comp, fd))
                if len(stack) > _WALK_HELD_FDS:
                    name, old = stack[-_WALK_HELD_FDS - 1]
                    if old >= 0:
                        os.close(old)
                        stack[-_WALK_HELD_FDS - 1] = (name, -1)
            # Ended on '..', '.' or a link to a directory: open where we stand.
            cur = stack[-1][1] if stack else self.fd
            return os.open(b".", flags & ~os.O_NOFOLLOW, dir_fd=cur)
        finally:
            for _, fd in stack:
                if fd >= 0:
                    os.close(fd)

    def _reopen(self, names: list[bytes], comps: list[bytes]) -> int:
        """Open root/names[0]/…/names[-1] one name at a time, never through a link."""
        fd = self.fd
        try:
            for name in names:
                nfd = os.open(name, _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                if fd != self.fd:
                    os.close(fd)
                fd = nfd
        except OSError as e:
            if fd != self.fd:
                os.close(fd)
            raise _error(e, comps) from None
        return fd

    def _push_link(
        self,
        target: bytes,
        pending: list[bytes],
        stack: list[tuple[bytes, int]],
        links: int,
        never: bool,
        comps: list[bytes],
    ) -> int:
        where = display(comps)
        if never:
            raise OutsideRoots(f"'{where}' goes through a symbolic link, and links are refused")
        links += 1
        if links > MAX_SYMLINKS:
            raise InvalidPath(f"'{where}' has too many levels of symbolic links")
        if target.startswith(b"/"):
            inner = None
            for alias in self.aliases:
                inner = strip_prefix(target, alias)
                if inner is not None:
                    break
            if inner is None:
                raise OutsideRoots(
                    f"'{where}' is a symbolic link to a place outside the root; "
                    "only links that stay inside the root are followed"
                )
            for _, fd in stack:
                if fd >= 0:
                    os.close(fd)
            stack.clear()
            pending.extend(reversed(inner))
        else:
            pending.extend(reversed(target.split(b"/")))
        return links

    # -- operations --------------------------------------------------------------------------

    def open_dir(self, rel: str | bytes | list[bytes], *, no_symlinks: bool = False) -> int:
        """A readable (scandir-able) directory fd beneath the root."""
        comps = rel if isinstance(rel, list) else split_relpath(rel)
        try:
            return self.open(comps, _O_DIR, no_symlinks=no_symlinks)
        except RootgrepError:
            raise
        except OSError as e:
            raise _error(e, comps) from None

    def open_file(
        self, rel: str | bytes | list[bytes], *, no_symlinks: bool = False
    ) -> tuple[int, os.stat_result]:
        """A read-only fd on a regular file beneath the root.

        The file is first reached with O_PATH and checked with fstat, then reopened through
        its own fd, so a FIFO or device is never opened (no blocking, no device side effects).
        """
        comps = _file_comps(rel)
        try:
            pfd = self.open(comps, _O_PATH, no_symlinks=no_symlinks)
            return reopen_regular(
                pfd, comps, lambda: self.open(comps, _O_READ, no_symlinks=no_symlinks)
            )
        except RootgrepError:
            raise
        except OSError as e:
            raise _error(e, comps) from None

    def stat(self, rel: str | bytes | list[bytes], *, follow: bool = True) -> os.stat_result:
        comps = rel if isinstance(rel, list) else split_relpath(rel)
        if not comps:
            return os.fstat(self.fd)
        try:
            fd = self.open(comps, _O_PATH, follow=follow)
        except RootgrepError:
            raise
        except OSError as e:
            raise _error(e, comps) from None
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def identity_at(self, comps: list[bytes]) -> tuple[int, int] | None:
        """(device, inode) of what ``comps`` names, reached as a walk reaches it: no symlink
        followed on the way or at the end (None when a walk would not get there). A path
        that leads somewhere only through a link is not where a walk finds that directory."""
        try:
            fd = self.open(comps, _O_PATH, follow=False, no_symlinks=True)
        except (OSError, RootgrepError):
            return None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return st.st_dev, st.st_ino

    def where(self) -> bytes | None:
        """The absolute path the pinned directory has now (read back from its fd: it may
        have moved since it was pinned); None when unknown."""
        try:
            return os.fsencode(os.readlink(f"/proc/self/fd/{self.fd}"))
        except OSError:
            return None

    def place_of(
        self, other: Beneath, *, here: bytes | None = None, there: bytes | None = None
    ) -> list[bytes] | None:
        """Where the directory ``other`` pins really is beneath this root now (not where its
        announced path once led): its components, as a walk of this root reaches it (no link
        on the way, the very directory by identity); None when it is not strictly beneath.
        ``here`` and ``there``: the two ``where()`` when the caller already has them."""
        here = here if here is not None else self.where()
        there = there if there is not None else other.where()
        if here is None or there is None:
            return None
        comps = strip_prefix(there, here)
        if not comps:
            return None
        try:
            wanted = other.identity()
        except OSError:
            return None
        return comps if self.identity_at(comps) == wanted else None

    def real_components(self, comps: list[bytes]) -> list[bytes]:
        """Where ``comps`` really is below the root, links resolved (read back from an fd)."""
        fd = self.open(comps, _O_PATH)
        try:
            real = os.fsencode(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return comps
        finally:
            os.close(fd)
        inner = strip_prefix(real, self.path)
        return comps if inner is None else inner

    def physical(self, comps: list[bytes]) -> list[bytes]:
        """``comps`` without ``..``: the directories on the way taken where they really are
        (read back from an fd, so ``link/..`` means the link target's parent, as the kernel
        resolves it), the final name kept and never followed. A ``..`` that leaves the root
        raises ``outside_roots`` here, as any access would."""
        if b".." not in comps:
            return comps
        if comps[-1] in (b"..", b"."):
            return self.real_components(comps)
        return [*self.real_components(comps[:-1]), comps[-1]]

    def list_dir(
        self, rel: str | bytes | list[bytes] = b"", limit: int = MAX_DIR_ENTRIES
    ) -> list[Entry]:
        fd = self.open_dir(rel)
        try:
            return scan_fd(fd, limit=limit)
        finally:
            os.close(fd)

    def read(
        self,
        rel: str | bytes | list[bytes],
        *,
        max_bytes: int = DEFAULT_MAX_READ_BYTES,
        allow_binary: bool = False,
    ) -> ReadResult:
        """Read a regular file's first ``max_bytes``; binary files raise ``binary_file``."""
        comps = _file_comps(rel)
        fd, st = self.open_file(comps)
        try:
            data, truncated = read_fd(fd, st.st_size, max_bytes)
        except OSError as e:
            raise _error(e, comps) from None
        finally:
            os.close(fd)
        if not allow_binary and is_binary(data):
            raise BinaryFile(f"'{display(comps)}' is a binary file; rootgrep reads text only")
        return ReadResult(data, st.st_size, truncated, st)

    def open_parent(self, rel: str | bytes | list[bytes]) -> tuple[int, bytes]:
        """The fd of ``rel``'s parent directory beneath the root, and the final name."""
        comps = rel if isinstance(rel, list) else split_relpath(rel)
        if not comps:
            raise InvalidPath("the root itself has no parent inside the root")
        name = comps[-1]
        _check_name(name)
        return self.open_dir(comps[:-1]), name

    def atomic_write(
        self,
        rel: str | bytes | list[bytes],
        data: bytes,
        *,
        create_only: bool = False,
        mode: int | None = None,
    ) -> os.stat_result:
        """Replace (or create) a file atomically: temp beside it with O_EXCL, fsync, renameat.

        A crash leaves the old content or the new, never a mix. A hard link to an outside file
        is replaced, never written through; a symlink at the target is replaced, not followed.
        The permission bits are kept (never setuid/setgid/sticky) and, when the server runs
        as root, so is the owner: a write never hands a user's file to root.
        """
        comps = _file_comps(rel)
        dirfd, name = self.open_parent(comps)
        try:
            old = _lstat_at(dirfd, name)
            if old is not None and self.hides and is_hidden(old):
                raise _error(_gone(name), comps)
            if old is not None:
                if create_only:
                    raise Exists(f"'{display(comps)}' already exists; choose another path")
                if stat_mod.S_ISDIR(old.st_mode):
                    raise NotAFile(f"'{display(comps)}' is a directory; it cannot be overwritten")
                if not (stat_mod.S_ISREG(old.st_mode) or stat_mod.S_ISLNK(old.st_mode)):
                    raise NotRegularFile(f"'{display(comps)}' is not a regular file")
            keep = old if old is not None and stat_mod.S_ISREG(old.st_mode) else None
            if mode is None:
                mode = stat_mod.S_IMODE(keep.st_mode) if keep is not None else 0o644
            mode &= 0o777
            owner = (keep.st_uid, keep.st_gid) if keep is not None and os.geteuid() == 0 else None
            temp = _write_temp(dirfd, name, mode, (data,), owner)
            _install(dirfd, temp, name, overwrite=not create_only)
            os.fsync(dirfd)
            return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except OSError as e:
            raise _error(e, comps) from None
        finally:
            os.close(dirfd)

    # -- directory changes (write tools) ------------------------------------------------------

    def mkdirs(self, rel: str | bytes | list[bytes], *, mode: int = 0o755) -> int:
        """Create a directory and any missing parents; returns how many were created."""
        comps = rel if isinstance(rel, list) else split_relpath(rel)
        comps = [c for c in comps if c != b"."]
        if not comps:
            return 0
        # the deepest part that already exists (links inside the root are followed there)
        have = len(comps)
        fd = -1
        while have >= 0:
            try:
                fd = self.open_dir(comps[:have])
                break
            except NotFound:
                have -= 1
        if fd < 0:
            raise NotFound("the root itself is gone")
        created = 0
        try:
            for name in comps[have:]:
                _check_name(name)
                try:
                    os.mkdir(name, mode, dir_fd=fd)
                    created += 1
                except FileExistsError:
                    pass  # raced with another creator: fine if it is a directory
                nfd = open_dir_at(fd, name)
                os.close(fd)
                fd = nfd
        except OSError as e:
            raise _error(e, comps) from None
        finally:
            if fd >= 0:
                os.close(fd)
        return created

    def rename(self, src: list[bytes], dst: list[bytes], *, overwrite: bool = False) -> None:
        """Move ``src`` to ``dst`` beneath the root (the link itself when ``src`` is one)."""
        self._refuse_into_itself(src, dst)
        sfd, sname = self.open_parent(src)
        try:
            dfd, dname = self.open_parent(dst)
            try:
                if self.hides and _hidden_inos:
                    self._may_move(sfd, sname, dfd, dname, src, dst)
                if overwrite:
                    os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
                else:
                    _rename_noreplace(sfd, sname, dname, dst_dirfd=dfd)
            except OSError as e:
                if e.errno == errno.EEXIST or e.errno == errno.ENOTEMPTY:
                    raise Exists(
                        f"'{display(dst)}' already exists; pass overwrite=true to replace it"
                    ) from None
                if e.errno == errno.EINVAL:
                    raise InvalidPath(_INTO_ITSELF) from None
                raise _error(e, src) from None
            finally:
                os.close(dfd)
        finally:
            os.close(sfd)

    def _may_move(
        self, sfd: int, sname: bytes, dfd: int, dname: bytes, src: list[bytes], dst: list[bytes]
    ) -> None:
        """Neither end of a move may be hidden, and no directory holding a hidden one may
        move (the index store opens its folders by path, so that path must stay put)."""
        try:
            st = os.stat(sname, dir_fd=sfd, follow_symlinks=False)
        except OSError as e:
            raise _error(e, src) from None
        if is_hidden(st):
            raise _error(_gone(sname), src)
        if _hidden_at(dfd, dname):
            raise _error(_gone(dname), dst)
        if stat_mod.S_ISDIR(st.st_mode) and holds_hidden(st):
            raise InvalidPath(
                f"'{display(src)}' holds rootgrep's own index cache, which must stay where it "
                "is; move the directories inside it instead"
            )

    def _refuse_into_itself(self, src: list[bytes], dst: list[bytes]) -> None:
        """``invalid_path`` when ``src`` is a directory (not a link to one) and ``dst`` lies in
        it, judged where both really are. The kernel refuses such a move too (EINVAL, also
        mapped), but renameat2's EINVAL is ambiguous; this says what happened up front."""
        try:
            if not stat_mod.S_ISDIR(self.stat(src, follow=False).st_mode):
                return
            real_src = self.real_components(src)
            real_dst = (self.real_components(dst[:-1]) if dst[:-1] else []) + dst[-1:]
        except (RootgrepError, OSError):
            return  # the rename itself reports what is wrong with the paths
        if real_dst[: len(real_src)] == real_src:
            raise InvalidPath(_INTO_ITSELF)

    def copy(self, src: list[bytes], dst: list[bytes], *, overwrite: bool = False) -> CopyReport:
        """Copy a file or a directory tree to ``dst`` beneath the root. Each file lands
        atomically; links that leave the root, FIFOs, sockets and devices are skipped and
        reported; links inside the root are copied as the files they point to."""
        report = CopyReport()
        st = self.stat(src)
        if stat_mod.S_ISREG(st.st_mode):
            fd, st = self.open_file(src)
            try:
                dfd, name = self.open_parent(dst)
                try:
                    if self.hides and _hidden_at(dfd, name):
                        raise _error(_gone(name), dst)
                    temp = _copy_fd_to_temp(fd, dfd, name, stat_mod.S_IMODE(st.st_mode))
                    _install(dfd, temp, name, overwrite)
                except FileExistsError:
                    raise Exists(
                        f"'{display(dst)}' already exists; pass overwrite=true to replace it"
                    ) from None
                finally:
                    os.close(dfd)
            finally:
                os.close(fd)
            report.files = 1
            return report
        if not stat_mod.S_ISDIR(st.st_mode):
            raise NotRegularFile(f"'{display(src)}' is not a regular file or a directory")
        real_src = self.real_components(src)
        real_dst_parent = self.real_components(dst[:-1]) if dst[:-1] else []
        if (real_dst_parent + dst[-1:])[: len(real_src)] == real_src:
            raise InvalidPath("a directory cannot be copied into itself")
        dfd, name = self.open_parent(dst)
        try:
            try:
                os.mkdir(name, 0o755, dir_fd=dfd)
            except FileExistsError:
                if not overwrite:
                    raise Exists(
                        f"'{display(dst)}' already exists; pass overwrite=true to merge into it"
                    ) from None
            report.directories = 1
            sfd = self.open_dir(src)
            try:
                tfd = open_dir_at(dfd, name)
                try:
                    _copy_tree(self, src, sfd, tfd, report, overwrite)
                finally:
                    os.close(tfd)
            finally:
                os.close(sfd)
        except OSError as e:
            raise _error(e, dst) from None
        finally:
            os.close(dfd)
        return report

    def remove(
        self,
        rel: list[bytes],
        *,
        recursive: bool = False,
        skipped: list[tuple[bytes, str]] | None = None,
    ) -> int:
        """Remove a file, link or (empty, or with ``recursive``) directory; never the root.
        Returns the number of entries removed. Links are removed, never followed. A recursive
        removal leaves hidden entries (and the directories holding them) in place, noted in
        ``skipped`` by the directory that holds them."""
        if not [c for c in rel if c != b"."]:
            raise InvalidPath("the root itself cannot be deleted")
        dfd, name = self.open_parent([c for c in rel if c != b"."])
        try:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except OSError as e:
                raise _error(e, rel) from None
            if self.hides and is_hidden(st):
                raise _error(_gone(name), rel)
            if not stat_mod.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=dfd)
                return 1
            if not recursive:
                try:
                    os.rmdir(name, dir_fd=dfd)
                except OSError as e:
                    if e.errno == errno.ENOTEMPTY:
                        raise NotAFile(
                            f"'{display(rel)}' is a directory that is not empty; "
                            "pass recursive=true to delete it with its contents"
                        ) from None
                    raise _error(e, rel) from None
                return 1
            kept: list[bytes] = []
            removed = _remove_tree_at(dfd, name, kept)
            if kept:
                if skipped is not None:
                    top = [c for c in rel if c != b"."]
                    for where in kept:
                        full = b"/".join([*top, where] if where else top)
                        skipped.append((full, HIDDEN_REASON))
                return removed
            os.rmdir(name, dir_fd=dfd)
            return removed + 1
        except OSError as e:
            raise _error(e, rel) from None
        finally:
            os.close(dfd)


def _copy_tree(
    fs: Beneath,
    src_rel: list[bytes],
    src_fd: int,
    dst_fd: int,
    report: CopyReport,
    overwrite: bool,
) -> None:
    """Copy the directory ``src_fd`` into ``dst_fd``, entry by entry, fd-relatively."""
    stack = [(src_rel, os.dup(src_fd), os.dup(dst_fd))]
    try:
        while stack:
            rel, sfd, dfd = stack.pop()
            try:
                hidden: list[bytes] = []
                listing = scan_fd(sfd, hidden)
                if hidden:
                    report.skipped.append((b"/".join(rel), HIDDEN_NOT_COPIED))
                if listing.cut:
                    report.skipped.append((b"/".join(rel), TOO_MANY_NOT_COPIED))
                for e in listing:
                    where = [*rel, e.name]
                    if _hidden_at(dfd, e.name):
                        report.skipped.append((b"/".join(rel), HIDDEN_NOT_REPLACED))
                        continue
                    if e.kind == "dir":
                        try:
                            os.mkdir(e.name, 0o755, dir_fd=dfd)
                        except FileExistsError:
                            if not overwrite:
                                report.skipped.append((b"/".join(where), "exists"))
                                continue
                        report.directories += 1
                        stack.append((where, open_dir_at(sfd, e.name), open_dir_at(dfd, e.name)))
                        continue
                    if e.kind == "file":
                        try:
                            fd, st = open_file_at(sfd, e.name)
                        except NotRegularFile:  # swapped for a FIFO or device since listed
                            report.skipped.append((b"/".join(where), "not a regular file"))
                            continue
                        except FileNotFoundError:  # gone since listed
                            report.skipped.append((b"/".join(where), "vanished"))
                            continue
                    elif e.kind == "symlink":
                        # copy what a link inside the root points to; never recreate the link
                        # (its text could escape from the new place) and never follow it out
                        try:
                            fd, st = fs.open_file(where)
                        except OutsideRoots:
                            report.skipped.append((b"/".join(where), "symlink leaving the root"))
                            continue
                        except RootgrepError as err:
                            report.skipped.append((b"/".join(where), f"symlink: {err.code}"))
                            continue
                    else:
                        report.skipped.append((b"/".join(where), "not a regular file"))
                        continue
                    try:
                        temp = _copy_fd_to_temp(fd, dfd, e.name, stat_mod.S_IMODE(st.st_mode))
                    finally:
                        os.close(fd)
                    try:
                        _install(dfd, temp, e.name, overwrite)
                    except FileExistsError:
                        report.skipped.append((b"/".join(where), "exists"))
                        continue
                    report.files += 1
            finally:
                os.close(sfd)
                os.close(dfd)
    finally:
        for _, a, b in stack:
            os.close(a)
            os.close(b)


class CopyReport:
    """What a copy did: files and directories copied, and (path, why) of those skipped."""

    __slots__ = ("directories", "files", "skipped")

    def __init__(self) -> None:
        self.files = 0
        self.directories = 0
        self.skipped: list[tuple[bytes, str]] = []


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


HIDDEN_REASON = "holds an entry rootgrep keeps hidden (its cache or audit log); left in place"
HIDDEN_NOT_COPIED = "holds an entry rootgrep keeps hidden (its cache or audit log); not copied"
HIDDEN_NOT_REPLACED = "an entry rootgrep keeps hidden is in the way here; not copied over it"
TOO_MANY_NOT_COPIED = f"holds more than {MAX_DIR_ENTRIES} entries; only that many copied"


def _remove_tree_at(parent: int, name: bytes, kept: list[bytes] | None = None) -> int:
    """Empty the directory ``parent``/``name`` fd-relatively, never following a link.

    Hidden entries stay, and so do the directories that hold them: their paths (relative to
    ``name``) go to ``kept``."""
    removed = 0
    stack = [(open_dir_at(parent, name), None)]
    stack_names: list[bytes] = []
    full: set[bytes] = set()  # directories (relative) that keep something and stay
    try:
        while stack:
            fd, _ = stack[-1]
            child = None
            here = b"/".join(stack_names)
            hidden: list[bytes] = []
            listing = scan_fd(fd, hidden)
            gone = removed
            for e in listing:
                if e.kind == "dir":
                    sub = here + b"/" + e.name if here else e.name
                    if sub in full:
                        continue
                    child = e.name
                    break
                os.unlink(e.name, dir_fd=fd)
                removed += 1
            if child is None and listing.cut and removed > gone:
                continue  # a directory listed in part: list what is left of it again
            if hidden:
                full.add(here)
                if kept is not None:
                    kept.append(here)
            if child is not None:
                stack.append((open_dir_at(fd, child), None))
                stack_names.append(child)
                continue
            os.close(fd)
            stack.pop()
            if stack_names:
                done = stack_names.pop()
                if here in full:
                    full.add(b"/".join(stack_names))  # (its parent stays too)
                    continue
                os.rmdir(done, dir_fd=stack[-1][0])
                removed += 1
    finally:
        for fd, _ in stack:
            os.close(fd)
    return removed


def _file_comps(rel: str | bytes | list[bytes]) -> list[bytes]:
    """Components of a path that must name a file: a trailing '/' (or '/.') is refused."""
    comps = rel if isinstance(rel, list) else split_relpath(rel)
    if comps and comps[-1] == b".":
        raise NotADirectory(f"'{display(comps)}' ends with '/', so it must be a directory")
    return comps


def _require_regular(st: os.stat_result, comps: list[bytes]) -> None:
    if stat_mod.S_ISREG(st.st_mode):
        return
    if stat_mod.S_ISDIR(st.st_mode):
        raise NotAFile(f"'{display(comps)}' is a directory; use list_directory to see its entries")
    raise NotRegularFile(
        f"'{display(comps)}' is not a regular file (FIFO, device or socket); "
        "only regular files are read"
    )


def _lstat_at(dirfd: int, name: bytes) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _readlink_at(dirfd: int, name: bytes) -> bytes | None:
    try:
        return os.readlink(name, dir_fd=dirfd)
    except OSError as e:
        if e.errno in (errno.EINVAL, errno.ENOENT):
            return None
        raise


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


def _unlink_quiet(dirfd: int, name: bytes) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dirfd)


def _rename_noreplace(dirfd: int, src: bytes, dst: bytes, *, dst_dirfd: int = -1) -> None:
    """renameat2(RENAME_NOREPLACE): fails with EEXIST instead of replacing ``dst``."""
    target = dirfd if dst_dirfd < 0 else dst_dirfd
    if _renameat2 is not None:
        rc = _renameat2(
            ctypes.c_int(dirfd), src, ctypes.c_int(target), dst, ctypes.c_uint(_RENAME_NOREPLACE)
        )
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(err, os.strerror(err))
        st = _lstat_at(dirfd, src)
        if err == errno.EINVAL and st is not None and stat_mod.S_ISDIR(st.st_mode):
            # the link() fallback cannot move a directory (it would say EPERM); EINVAL for a
            # directory is the kernel refusing to move it below itself
            raise OSError(err, os.strerror(err))
    # Filesystems without RENAME_NOREPLACE: link() refuses an existing target too (files only).
    os.link(src, dst, src_dir_fd=dirfd, dst_dir_fd=target, follow_symlinks=False)
    os.unlink(src, dir_fd=dirfd)
