"""``Beneath``'s write operations, a mixin it inherits (``Writes``): ``atomic_write``,
``mkdirs``, ``rename``, ``copy`` (a tree copied entry by entry, ``_copy_tree``; what was
left out said in a ``CopyReport``) and ``remove`` (a tree emptied fd-relatively,
``_remove_tree_at``): never through a link that leaves the root, never touching a hidden
entry (nor moving a directory that holds one).
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod

from ..errors import (
    Exists,
    InvalidPath,
    NotAFile,
    NotFound,
    NotRegularFile,
    OutsideRoots,
    RootgrepError,
)
from . import hiding
from .hiding import _gone, _hidden_at, holds_hidden, is_hidden
from .listing import MAX_DIR_ENTRIES, scan_fd
from .opening import open_dir_at, open_file_at
from .paths import _check_name, _error, _file_comps, display, split_relpath
from .stats import _lstat_at
from .temps import _copy_fd_to_temp, _install, _rename_noreplace, _write_temp

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)


_INTO_ITSELF = "cannot move a directory into itself; choose a destination outside it"


HIDDEN_REASON = "holds an entry rootgrep keeps hidden (its cache or audit log); left in place"
HIDDEN_NOT_COPIED = "holds an entry rootgrep keeps hidden (its cache or audit log); not copied"
HIDDEN_NOT_REPLACED = "an entry rootgrep keeps hidden is in the way here; not copied over it"
TOO_MANY_NOT_COPIED = f"holds more than {MAX_DIR_ENTRIES} entries; only that many copied"


class Writes:
    """The write operations of ``Beneath`` (which inherits them), and what they use of it."""

    if TYPE_CHECKING:  # (``Beneath``'s own)
        hides: bool

        def open_dir(self, rel: str | bytes | list[bytes], *, no_symlinks: bool = False) -> int: ...
        def open_file(self, rel: str | bytes | list[bytes]) -> tuple[int, os.stat_result]: ...
        def open_parent(self, rel: str | bytes | list[bytes]) -> tuple[int, bytes]: ...
        def real_components(self, comps: list[bytes]) -> list[bytes]: ...
        def stat(
            self, rel: str | bytes | list[bytes], *, follow: bool = True
        ) -> os.stat_result: ...

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
                if self.hides and hiding._hidden_inos:
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
    fs: Writes,
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
