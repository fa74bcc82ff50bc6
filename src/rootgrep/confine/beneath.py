"""``Beneath``: a pinned root directory (opened once by its path, its canonical path read
back from the fd) and every confined operation beneath it. Its lifetime (``acquire``,
``release``, ``retire``: the fd is closed only once no call uses it), resolving a path
beneath it (``open``: ``openat2`` with ``RESOLVE_BENEATH`` where the kernel has it, else the
component walk it inherits from ``walk.py``; hidden identities refused) and reading there:
open, stat, list, read, where a directory really is (``place_of``, ``physical``). Its write
operations are those of ``writes.py``, which it inherits too.
"""

from __future__ import annotations

import _thread  # (its Lock: ``threading``'s set-up is 0.5 ms of the CLI's start-up)
import errno
import os

from ..errors import BinaryFile, InvalidPath, NotFound, RootgrepError
from . import hiding
from .hiding import _gone, holds_hidden, inside_hidden, is_hidden
from .listing import MAX_DIR_ENTRIES, Entry, scan_fd
from .opening import reopen_regular
from .paths import (
    _check_name,
    _error,
    _file_comps,
    display,
    fsencode_path,
    split_relpath,
    strip_prefix,
)
from .reading import DEFAULT_MAX_READ_BYTES, ReadResult, is_binary, read_fd
from .syscalls import (
    _O_DIR,
    _O_PATH,
    _O_READ,
    RESOLVE_BENEATH,
    RESOLVE_NO_MAGICLINKS,
    RESOLVE_NO_SYMLINKS,
    _raw_openat2,
    openat2_available,
)
from .walk import ComponentWalk
from .writes import Writes

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    from typing import Literal

    SymlinkPolicy = Literal["within", "never"]
else:
    SymlinkPolicy = str


_WALK_DECIDES = frozenset((errno.EXDEV, errno.ELOOP, errno.ENOSYS, errno.EPERM, errno.EAGAIN))


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


# ---- a pinned root ---------------------------------------------------------------------------


class Beneath(ComponentWalk, Writes):
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
        # (None: openat2 if the kernel allows it, probed when a path is first resolved: a CLI
        # grep that resolves none loads no ctypes)
        self._use_openat2: bool | None = None if use_openat2 is None or use_openat2 else False
        self._users = 0
        self._retired = False
        self._lock = _thread.allocate_lock()

    @property
    def use_openat2(self) -> bool:
        """Whether paths are resolved with openat2 (else the ``O_NOFOLLOW`` component walk)."""
        use = self._use_openat2
        if use is None:
            use = self._use_openat2 = openat2_available()
        return use

    @use_openat2.setter
    def use_openat2(self, value: bool) -> None:
        self._use_openat2 = value

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
            if hides and hiding._hidden_inos and inside_hidden(fd):
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
        if not (self.hides and hiding._hidden_inos):
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
        if cached is not None and cached[0] == hiding._hidden_generation:
            return cached[1]
        gen = hiding._hidden_generation
        try:
            here = holds_hidden(os.fstat(self.fd))
        except OSError:
            here = True  # (when in doubt, the slower walk that checks every directory)
        self._hidden_here = (gen, here)
        return here

    def _resolve(
        self, comps: list[bytes], flags: int, follow: bool, never: bool, each: bool
    ) -> int:
        # (one name: the walk's one openat(O_NOFOLLOW) is as fast, and a CLI grep of a file
        # so loads no ctypes)
        if len(comps) > 1 and not each and self.use_openat2:
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
