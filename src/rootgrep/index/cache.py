"""The index cache directory: pinned once as an fd; every cache file is reached beneath it.

The cache dir is opened once (created 0700 if missing) and refused when it is a symlink, not
owned by the effective uid, or writable by group or others: someone else could have planted
links or folders in it. From then on every create, open, list and remove of a cache file is
fd-relative beneath that pin through ``confine.Beneath`` with ``symlinks="never"``: a link
planted where an index folder or a file of it should be is never followed (an index folder
that is not a directory is unlinked and made again).

Each index folder is named by a hash of its root's canonical path and the index schema version
(``folder_name``): rootgrep versions of different schemas never share a folder (one that
rebuilt a shared folder in its own layout would leave a running process of the other reading,
and writing, an index it no longer understands). Each holds a ``lock`` file: every process
that has the index open holds a shared ``flock`` on it from open to close. Eviction takes it
exclusive without waiting and skips the folder when it cannot, then renames the folder away
and removes it while still holding the lock, so an index in use is never removed and a process
that was waiting for the lock sees that its folder went and makes a new one. A root's folders
of older schemas go the same way when this version opens the root (``evict_older``), and the
least recently used ones under ``--cache-max-bytes`` (``prune``).

Tantivy opens its index by path. Measured (strace, and renaming an ancestor under a running
writer): given ``/proc/self/fd/N`` it canonicalises the name once, at open, and then opens
every file by that string, so after an ancestor of the cache is renamed and replaced by a
symlink its next commit lands in the symlink's target. The fd trick buys nothing, so tantivy
is given the folder's path as read back from the pinned fd, checked to still be that very
directory (by identity) when it is opened and before each writer is made; and no tool may move
a directory that holds the cache (``confine.Beneath.rename``), so clients cannot change that
path. What remains is a process of the operator's own user renaming the cache's ancestors.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat as stat_mod
import weakref
from collections.abc import Iterator

from .. import confine
from ..confine import Beneath
from ..errors import InvalidPath, RootgrepError

# (the names are ``names.py``'s, re-exported: the cache's users name them from here)
from .names import SCHEMA_VERSION as SCHEMA_VERSION
from .names import default_cache_dir as default_cache_dir
from .names import folder_name as folder_name
from .names import root_key
from .reading import read_whole

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    from typing import Any


CACHE_MODE = 0o700
LOCK_FILE = b"lock"
OPEN_LOCK = "open.lock"  # held exclusive by the process making (or remaking) an index
MANIFEST = b"manifest.json"
LAST_USED = b"last_used"
_EVICTING = b".evict-"  # a folder being removed (renamed first, so nobody opens it by name)
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_TRIES = 20  # an evictor racing the open of the same folder, again and again
MAX_SWEPT_TEMPS = 64  # temps a killed process left, removed per folder per open
_ALNUM = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


def is_tantivy_temp(name: bytes) -> bool:
    """Whether ``name`` is named as the tempfile crate names tantivy's temps: ``.tmp`` and 6
    ASCII letters or digits (tested without ``re``: the CLI's start-up does not import it)."""
    return len(name) == 10 and name[:4] == b".tmp" and _ALNUM.issuperset(name[4:])


def hide_if_present(path: str) -> tuple[int, int] | None:
    """Hide a cache dir this process does not use (``--no-index``) from its tools all the
    same: other processes' indexes may be there. None when there is no such directory."""
    try:
        fd = os.open(os.path.abspath(path), _O_DIR)
    except OSError:
        return None
    try:
        return confine.hide(fd)
    finally:
        os.close(fd)


class CacheUnusable(InvalidPath):
    """The cache dir cannot be trusted (a symlink, someone else's, or group/other-writable)."""


def older_schema(name: str, root_path: bytes, schema: int) -> bool:
    """Whether ``name`` is an index folder of ``root_path`` for a schema older than
    ``schema``: ``-v`` and a lower version, or the bare hash (the folder of every schema up
    to 10, before folders were keyed by it)."""
    key = root_key(root_path)
    if name == key:
        return True
    version = name[len(key) + 2 :] if name.startswith(key + "-v") else ""
    return version.isascii() and version.isdigit() and int(version) < schema


class CacheDir:
    """The pinned cache dir. ``path`` is the name it was opened by (for messages and for
    the folder paths handed to tantivy: see ``IndexFolder.subdir_path``)."""

    def __init__(self, fs: Beneath, path: str) -> None:
        self.fs = fs
        self.path = path
        self._closer = weakref.finalize(self, fs.close)

    @property
    def fd(self) -> int:
        return self.fs.fd

    @classmethod
    def open(cls, path: str, *, create: bool = True) -> CacheDir:
        """Pin the cache dir, creating it (and missing parents) 0700 unless ``create`` is
        False (then a missing one is ``CacheUnusable``); refuse an unsafe one.

        The ancestors are resolved by name (a cache under a symlinked ``~/.cache`` is fine);
        the cache dir itself never through a link."""
        path = os.path.abspath(path)
        parent = os.path.dirname(path)
        try:
            if create:
                os.makedirs(parent, mode=CACHE_MODE, exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(path, CACHE_MODE)
            fd = os.open(path, _O_DIR)  # the one open by name: pinning the cache
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise CacheUnusable(
                    f"the cache dir {path} is a symbolic link or not a directory; rootgrep "
                    "refuses it (give a real directory with --cache-dir, or --no-index)"
                ) from None
            raise CacheUnusable(
                f"the cache dir {path} cannot be created or opened ({e.strerror}); "
                "give another with --cache-dir, or --no-index"
            ) from None
        try:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid():
                raise CacheUnusable(
                    f"the cache dir {path} belongs to uid {st.st_uid}, not to this user "
                    f"({os.geteuid()}); rootgrep refuses it (give your own with --cache-dir)"
                )
            if st.st_mode & 0o022:
                raise CacheUnusable(
                    f"the cache dir {path} is writable by group or others (mode "
                    f"{stat_mod.S_IMODE(st.st_mode):04o}); rootgrep refuses it: "
                    f"chmod 700 {path}, or give another with --cache-dir"
                )
            if st.st_mode & 0o077:
                os.fchmod(fd, CACHE_MODE)  # readable by others (made by an older rootgrep)
            canonical = os.fsencode(os.readlink(f"/proc/self/fd/{fd}"))
            fs = Beneath(fd, canonical, symlinks="never", hides=False)
        except BaseException:
            os.close(fd)
            raise
        return cls(fs, path)

    def close(self) -> None:
        self._closer()

    # -- index folders -----------------------------------------------------------------------

    def folder_path(self, name: str) -> str:
        return os.path.join(self.path, name)

    def open_index(self, root_path: bytes, *, create: bool = True) -> IndexFolder | None:
        """The index folder of a root, created 0700 if missing (None instead when ``create``
        is False), locked shared until closed."""
        name = folder_name(root_path).encode()
        for _ in range(_OPEN_TRIES):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, CACHE_MODE, dir_fd=self.fd)
            try:
                fd = os.open(name, _O_DIR, dir_fd=self.fd)
            except FileNotFoundError:
                if not create:
                    return None  # (not there, or evicted meanwhile: nothing is made)
                continue  # evicted in between: make it again
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                # a link or a file where the folder belongs: never followed; removed (unlink
                # removes the link itself) and the folder made again
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=self.fd)
                continue
            try:
                folder = self._lock(fd, name)
            except BaseException:
                os.close(fd)
                raise
            if folder is not None:
                folder.sweep_temps()  # (what a process killed mid-write left)
                return folder
            os.close(fd)
        raise InvalidPath(f"the index folder {name.decode()} keeps being evicted; try again")

    def _lock(self, fd: int, name: bytes) -> IndexFolder | None:
        lock = os.open(
            LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd
        )
        try:
            fcntl.flock(lock, fcntl.LOCK_SH)  # (an evictor holds it only while removing)
            if not self._still_there(fd, name) or os.fstat(lock).st_nlink == 0:
                os.close(lock)
                return None  # evicted while we waited for the lock
        except BaseException:
            os.close(lock)
            raise
        fs = Beneath(fd, self._path_of(fd), symlinks="never", hides=False)
        return IndexFolder(self, name.decode(), fs, lock)

    def _still_there(self, fd: int, name: bytes) -> bool:
        try:
            now = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return False
        st = os.fstat(fd)
        return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)

    @staticmethod
    def _path_of(fd: int) -> bytes:
        return os.fsencode(os.readlink(f"/proc/self/fd/{fd}"))

    def names(self) -> list[str]:
        """The index folders' names (sorted), links and leftovers of evictions left out."""
        return sorted(
            e.name.decode("utf-8", "replace")
            for e in confine.scan_fd(self.fd)
            if e.kind == "dir" and not e.name.startswith(b".")
        )

    def entries(self) -> list[CachedIndex]:
        """Every index folder with a readable manifest."""
        out: list[CachedIndex] = []
        for name in self.names():
            try:
                fd = os.open(name, _O_DIR, dir_fd=self.fd)
            except OSError:
                continue
            try:
                fs = Beneath(os.dup(fd), b"", symlinks="never", hides=False)
                try:
                    manifest = _json(read_whole(fs, MANIFEST))
                    if manifest is None:
                        continue
                    used = max(_mtime(fs, MANIFEST), _mtime(fs, LAST_USED))
                    size = tree_bytes(fd)
                finally:
                    fs.close()
            finally:
                os.close(fd)
            schema = manifest.get("schema_version")
            out.append(
                CachedIndex(self.folder_path(name), str(manifest.get("root_display")), size,
                            used, self, name, schema if isinstance(schema, int) else None)
            )  # fmt: skip
        return out

    def evict_older(self, root_path: bytes, schema: int) -> list[str]:
        """Remove the index folders of ``root_path`` for schemas older than ``schema`` that no
        process holds (``evict``; one a process of that version has open stays, for the LRU
        ``prune`` once let go). Those removed, as paths. A newer version's are left alone."""
        removed: list[str] = []
        for name in self.names():
            if not older_schema(name, root_path, schema):
                continue
            with contextlib.suppress(OSError):
                if self.evict(name):
                    removed.append(self.folder_path(name))
        return removed

    def evict(self, name: str) -> bool:
        """Remove an index folder if no process holds it (its lock taken exclusive, without
        waiting); False when it is in use."""
        raw = name.encode()
        try:
            fd = os.open(raw, _O_DIR, dir_fd=self.fd)
        except FileNotFoundError:
            return False
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):  # not a folder of ours: just unlink
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(raw, dir_fd=self.fd)
                return True
            raise
        try:
            lock = os.open(
                LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd
            )
            try:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False  # some process has this index open
                if not self._still_there(fd, raw):
                    return False
                away = _EVICTING + raw + b"-" + os.urandom(4).hex().encode()
                os.rename(raw, away, src_dir_fd=self.fd, dst_dir_fd=self.fd)
                self._remove(away)
                return True
            finally:
                os.close(lock)  # (releases the lock, after the folder is gone)
        finally:
            os.close(fd)

    def _remove(self, name: bytes) -> None:
        with contextlib.suppress(RootgrepError, OSError):
            self.fs.remove([name], recursive=True)

    def sweep(self) -> None:
        """Remove what an eviction interrupted by a crash left behind."""
        for e in confine.scan_fd(self.fd):
            if e.name.startswith(_EVICTING):
                self._remove(e.name)


class CachedIndex:
    """One index folder of the cache, as the cache sees it (no index opened). (A plain
    class, not a dataclass: the CLI's start-up does not import ``dataclasses``.)"""

    def __init__(
        self,
        dir: str,
        root_display: str,
        disk_bytes: int,
        last_used: float,
        cache: CacheDir | None = None,
        name: str = "",
        schema: int | None = None,
    ) -> None:
        self.dir = dir
        self.root_display = root_display
        self.disk_bytes = disk_bytes
        self.last_used = last_used
        self.cache = cache
        self.name = name
        self.schema = schema  # (from its manifest: another version's, unless SCHEMA_VERSION)

    def summary(self) -> tuple[int, int, int, int, float | None]:
        """(files indexed, bytes of text, files pending, files bare, synced_at) from its state
        file; a bare file has its trigrams only (a build interrupted between its commits)."""
        # (here: a CLI grep asking a daemon opens the cache but decodes no state)
        from .state import decode_state, read_together

        data, journal = None, b""
        if self.cache is not None:
            try:
                fd = os.open(self.name.encode(), _O_DIR, dir_fd=self.cache.fd)
            except OSError:
                fd = -1
            if fd >= 0:
                fs = Beneath(fd, b"", symlinks="never", hides=False)
                try:
                    data, journal = read_together(fs)
                finally:
                    fs.close()
        decoded = decode_state(data, journal) if data is not None else None
        entries, synced_at = decoded or ({}, None)
        indexed = [e for e in entries.values() if e.fid]
        pending = sum(1 for e in entries.values() if e.pending)
        bare = sum(1 for e in indexed if e.grep_only)
        return len(indexed), sum(e.size for e in indexed), pending, bare, synced_at


class IndexFolder:
    """One index folder, pinned and locked shared (released by ``close``)."""

    def __init__(self, cache: CacheDir, name: str, fs: Beneath, lock_fd: int) -> None:
        self.cache = cache
        self.name = name
        self.fs = fs
        self.path = cache.folder_path(name)
        self._closer = weakref.finalize(self, _release, fs, lock_fd)

    @property
    def closed(self) -> bool:
        return not self._closer.alive

    def close(self) -> None:
        self._closer()

    def read(self, name: str) -> bytes | None:
        return read_whole(self.fs, name.encode())

    def read_json(self, name: str) -> dict[str, Any] | None:
        return _json(self.read(name))

    def write(self, name: str, data: bytes) -> None:
        """Replace a file of the folder atomically (temp, fsync, rename), mode 0600."""
        self.fs.atomic_write([name.encode()], data, mode=0o600)

    def sweep_temps(self) -> int:
        """Remove the temps of this folder's atomic writes (``write``) that a killed process
        left, never one a live writer holds (``confine.remove_dead_temp``); at most
        ``MAX_SWEPT_TEMPS``. How many were removed."""
        try:
            names = [e.name for e in confine.scan_fd(self.fs.fd) if e.kind == "file"]
        except OSError:
            return 0
        return confine.remove_dead_temps(self.fs.fd, names, MAX_SWEPT_TEMPS)

    def sweep_tantivy_temps(self, sub: str) -> int:
        """Remove the temps tantivy's own atomic writes (``meta.json``, ``.managed.json``:
        ``.tmp`` and 6 letters or digits) left in the subfolder ``sub``. Only while this
        process holds the index's writer: tantivy writes them only then (the segment and
        delete files a killed commit left are tantivy's own to collect: ``_new_writer``).
        Regular files only, never through a link; at most ``MAX_SWEPT_TEMPS``."""
        removed = 0
        try:
            fd = self.fs.open_dir([sub.encode()])
        except (OSError, RootgrepError):
            return 0
        try:
            for e in confine.scan_fd(fd):
                if removed >= MAX_SWEPT_TEMPS:
                    break
                if e.kind == "file" and is_tantivy_temp(e.name):
                    with contextlib.suppress(OSError):
                        os.unlink(e.name, dir_fd=fd)
                        removed += 1
        except OSError:
            pass
        finally:
            os.close(fd)
        return removed

    def stat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=self.fs.fd, follow_symlinks=False)
        except OSError:
            return None

    def remove(self, name: str) -> None:
        """Remove a file or a whole subfolder (never following a link); gone already is fine."""
        with contextlib.suppress(FileNotFoundError):
            try:
                self.fs.remove([name.encode()], recursive=True)
            except RootgrepError as e:
                if e.code != "not_found":
                    raise

    @contextlib.contextmanager
    def writer_lock(self, sub: str) -> Iterator[bool]:
        """Try tantivy's writer lock of the subfolder ``sub`` (the ``flock`` its writers take
        on ``.tantivy-writer.lock``), held until the block ends; yields whether it was had
        (False: another process writes that index now). Through the folder's fd, never
        through a link."""
        try:
            dirfd = os.open(sub, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                            dir_fd=self.fs.fd)  # fmt: skip
        except FileNotFoundError:
            yield True
            return
        try:
            fd = os.open(".tantivy-writer.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                         | os.O_CLOEXEC | os.O_NONBLOCK, 0o600, dir_fd=dirfd)  # fmt: skip
        finally:
            os.close(dirfd)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def set_aside(self, name: str) -> str:
        """Move the subfolder ``name`` aside as ``<name>.broken`` (the one set aside before,
        if any, removed first: at most one is kept, counted in the folder's size and evicted
        with it), for whoever wants to see what broke. Returns the new name."""
        aside = name + ".broken"
        self.remove(aside)
        try:
            self.fs.rename([name.encode()], [aside.encode()])
        except RootgrepError as e:
            if e.code != "not_found":
                raise
        return aside

    def append(self, name: str, data: bytes) -> None:
        """Append to a file of the folder (made if missing, mode 0600, never through a
        link), then fsync it: what was appended survives a crash whole or as a torn tail."""
        fd = self._open_file(name, os.O_WRONLY | os.O_APPEND)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def exclusive(self, name: str) -> Iterator[None]:
        """Hold an exclusive ``flock`` on the folder's file ``name`` (made if missing, mode
        0600, never through a link) until the block ends: one process at a time among those
        that take it. Blocks while another holds it (its holder only makes an empty index)."""
        fd = self._open_file(name, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # (and the lock with it)

    def touch(self, name: str) -> None:
        fd = self._open_file(name, os.O_WRONLY)
        try:
            os.utime(fd)
        finally:
            os.close(fd)

    def _open_file(self, name: str, flags: int) -> int:
        """A file of the folder opened with ``flags`` (made if missing, mode 0600, never
        through a link, never waiting on a FIFO), checked to be a regular file."""
        fd = os.open(
            name,
            flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
            0o600,
            dir_fd=self.fs.fd,
        )
        try:
            if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"{name} in the index folder is not a regular file")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def subdir_path(self, name: str) -> tuple[str, bool]:
        """A subfolder (made 0700 if missing, never through a link) as a path for tantivy,
        which opens by path: the folder's name read back from its fd, checked to be it; and
        whether it was made just now (empty)."""
        raw = name.encode()
        made = False
        for _ in range(_OPEN_TRIES):
            try:
                os.mkdir(raw, CACHE_MODE, dir_fd=self.fs.fd)
                made = True
            except FileExistsError:
                pass
            try:
                fd = os.open(raw, _O_DIR, dir_fd=self.fs.fd)
                break
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(raw, dir_fd=self.fs.fd)  # a link or a file: removed, not followed
        else:
            raise InvalidPath(f"the index folder {self.path} keeps changing; try again")
        try:
            st = os.fstat(fd)
            path = os.readlink(f"/proc/self/fd/{fd}")
            if not self._is(path, st):
                raise InvalidPath(f"the index folder {self.path} moved while being opened")
            return path, made
        finally:
            os.close(fd)

    def check_path(self, path: str) -> None:
        """Refuse to go on writing through ``path`` once it no longer names this folder's
        subfolder (an ancestor of the cache was moved or replaced)."""
        sub = os.path.basename(path).encode()
        try:
            fd = self.fs.open_dir([sub])
        except RootgrepError:
            raise InvalidPath(f"the index folder {self.path} lost its {sub!r}") from None
        try:
            if not self._is(path, os.fstat(fd)):
                raise InvalidPath(
                    f"the index folder {self.path} is no longer where it was opened (an "
                    "ancestor of the cache dir was moved); the index is not written any more"
                )
        finally:
            os.close(fd)

    @staticmethod
    def _is(path: str, st: os.stat_result) -> bool:
        try:
            now = os.stat(path)
        except OSError:
            return False
        return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def _release(fs: Beneath, lock_fd: int) -> None:
    os.close(lock_fd)  # (releases the shared lock)
    fs.close()


def _json(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    import json  # (here: a CLI grep asking a daemon opens the cache but reads no JSON)

    try:
        obj = json.loads(data)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _mtime(fs: Beneath, name: bytes) -> float:
    try:
        return os.stat(name, dir_fd=fs.fd, follow_symlinks=False).st_mtime
    except OSError:
        return 0.0


def tree_bytes(fd: int) -> int:
    """The bytes of every file below the directory ``fd`` (fd-relative, links not followed)."""
    total = 0
    stack = [os.dup(fd)]
    try:
        while stack:
            cur = stack.pop()
            try:
                for e in confine.scan_fd(cur):
                    if e.kind == "dir":
                        with contextlib.suppress(OSError):
                            stack.append(confine.open_dir_at(cur, e.name))
                        continue
                    with contextlib.suppress(OSError):
                        total += os.stat(e.name, dir_fd=cur, follow_symlinks=False).st_size
            except OSError:
                pass
            finally:
                os.close(cur)
    finally:
        for f in stack:
            os.close(f)
    return total


def prune(cache: CacheDir, max_bytes: int, keep: set[str]) -> list[str]:
    """Evict the least recently used indexes until the cache holds at most ``max_bytes``.
    Never one in ``keep`` (folder names or paths: this process uses it) nor one any process
    holds open (its lock). Returns the evicted folders' paths."""
    cache.sweep()
    kept = {os.path.basename(k) for k in keep}
    found = cache.entries()
    total = sum(c.disk_bytes for c in found)
    evicted: list[str] = []
    for c in sorted(found, key=lambda c: c.last_used):
        if total <= max_bytes:
            break
        if c.name in kept or not cache.evict(c.name):
            continue
        evicted.append(c.dir)
        total -= c.disk_bytes
    return evicted
