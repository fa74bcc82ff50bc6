"""Writing (only with --allow-write): write, edit, mkdir, move, copy, delete."""

from __future__ import annotations

import difflib
import logging
import threading
from collections.abc import Sequence

from .. import confine
from ..confine import Beneath, display
from ..errors import (
    EditMismatch,
    InvalidPath,
    ReadOnly,
    RootgrepError,
    TooLarge,
)
from ..models import (
    CopyResult,
    DeleteResult,
    EditResult,
    MoveResult,
    PathResult,
    Skipped,
    WriteResult,
)
from ..roots import Root
from ..walker import Walker, WalkOptions
from .base import (
    ServiceBase,
    audited,
    file_uri,
    ref,
    text,
)

log = logging.getLogger("rootgrep.writes")
# A root's temps left by writes killed mid-way (``confine.remove_dead_temp``) are removed
# before the first write this process makes in that root: one walk of the root with hidden
# and ignored names shown, at most this many entries looked at (files and directories: a
# tree of empty directories costs as much to walk) and this many temps removed.
SWEEP_MAX_ENTRIES = 100_000
SWEEP_MAX_REMOVED = 1_000
_swept: set[tuple[int, int]] = set()  # (device, inode) of the roots swept by this process
_swept_lock = threading.Lock()


def sweep_temps(fs: Beneath) -> int:
    """Remove the dead temps of atomic writes beneath the root ``fs`` (a killed writer's;
    never a live writer's: ``confine.remove_dead_temp``), within the caps above. Every
    listing and unlink is fd-relative beneath the root, links never followed; the cache and
    the audit log are never listed. How many were removed."""
    removed = examined = 0
    walker = Walker(fs, b"", WalkOptions(hidden=True, no_ignore=True))
    for _rel, dirfd in walker.directories():  # (the walker's fd: valid for this step)
        if examined >= SWEEP_MAX_ENTRIES or removed >= SWEEP_MAX_REMOVED:
            break
        try:
            listing = confine.scan_fd(dirfd)
        except OSError:
            continue  # (gone meanwhile)
        examined += 1 + len(listing)
        names = [e.name for e in listing if e.kind == "file"]
        removed += confine.remove_dead_temps(dirfd, names, SWEEP_MAX_REMOVED - removed)
    if removed:
        log.info("removed %d temp files that killed writes left in %r", removed, fs.path)
    return removed


def sweep_once(fs: Beneath) -> None:
    """``sweep_temps`` the first time this process writes in the root ``fs``."""
    key = fs.identity()
    with _swept_lock:
        if key in _swept:
            return
        _swept.add(key)
    sweep_temps(fs)


class Writes(ServiceBase):
    # -- writes ------------------------------------------------------------------------------

    def _writable(self, tool: str, path: str | None) -> None:
        if not self.settings.allow_write:
            raise ReadOnly(
                "rootgrep is serving read-only; the operator must start it with --allow-write"
            )

    @audited("write_file", "write", "path")
    def write_file(
        self,
        roots: Sequence[Root],
        *,
        path: str,
        content: str,
        root: str | None = None,
        create_only: bool = False,
    ) -> WriteResult:
        self._writable("write_file", path)
        r, comps = self._locate(roots, "write_file", "write", path, root)
        sweep_once(r.fs)
        data = content.encode("utf-8")
        existed = True
        try:
            r.fs.stat(comps, follow=False)
        except RootgrepError:
            existed = False
        r.fs.atomic_write(comps, data, create_only=create_only)
        return WriteResult(
            root=ref(r),
            path=display(comps),
            uri=file_uri(r, b"/".join(comps)),
            bytes=len(data),
            created=not existed,
        )

    @audited("edit_file", "edit", "path")
    def edit_file(
        self,
        roots: Sequence[Root],
        *,
        path: str,
        edits: list[tuple[str, str]],
        root: str | None = None,
        dry_run: bool = False,
    ) -> EditResult:
        self._writable("edit_file", path) if not dry_run else None
        r, comps = self._locate(roots, "edit_file", "edit" if not dry_run else "read", path, root)
        res = r.fs.read(comps, max_bytes=self.settings.max_file_size)
        if res.truncated:
            raise TooLarge(
                f"'{display(comps)}' is larger than --max-file-size; edit it another way"
            )
        before = res.data
        after = before
        for i, (old, new) in enumerate(edits, 1):
            o = old.encode("utf-8")
            n = after.count(o) if o else 0
            if n != 1:
                raise EditMismatch(
                    f"edit {i}: old_text occurs {n} times in '{display(comps)}' (it must occur "
                    "exactly once); read the file again and give a longer, unique old_text"
                )
            after = after.replace(o, new.encode("utf-8"), 1)
        shown = display(comps)
        diff = "".join(
            difflib.unified_diff(
                text(before).splitlines(keepends=True),
                text(after).splitlines(keepends=True),
                fromfile=f"a/{shown}",
                tofile=f"b/{shown}",
            )
        )
        if not dry_run:
            sweep_once(r.fs)
            r.fs.atomic_write(comps, after)
        return EditResult(
            root=ref(r), path=shown, uri=file_uri(r, b"/".join(comps)), diff=diff,
            applied=not dry_run,
        )  # fmt: skip

    @audited("create_directory", "mkdir", "path")
    def create_directory(
        self, roots: Sequence[Root], *, path: str, root: str | None = None
    ) -> PathResult:
        self._writable("create_directory", path)
        r, comps = self._locate(roots, "create_directory", "mkdir", path, root)
        r.fs.mkdirs(comps)
        return PathResult(root=ref(r), path=display(comps), uri=file_uri(r, b"/".join(comps)))

    def _pair(
        self, roots: Sequence[Root], tool: str, source: str, destination: str, root: str | None
    ) -> tuple[Root, list[bytes], list[bytes]]:
        r, src = self._locate(roots, tool, "read", source, root)
        r2, dst = self._locate(roots, tool, "write", destination, root or r.id)
        if r2 is not r and r2.id != r.id:
            raise InvalidPath("source and destination must be in the same root")
        src = [c for c in src if c != b"."]
        dst = [c for c in dst if c != b"."]
        if not src or not dst:
            raise InvalidPath("a root itself cannot be moved, copied over or replaced")
        return r, src, dst

    @audited("move_path", "move", "source")
    def move_path(
        self,
        roots: Sequence[Root],
        *,
        source: str,
        destination: str,
        root: str | None = None,
        overwrite: bool = False,
    ) -> MoveResult:
        self._writable("move_path", source)
        r, src, dst = self._pair(roots, "move_path", source, destination, root)
        r.fs.rename(src, dst, overwrite=overwrite)
        return MoveResult(
            root=ref(r), source=display(src), destination=display(dst),
            uri=file_uri(r, b"/".join(dst)),
        )  # fmt: skip

    @audited("copy_path", "copy", "source")
    def copy_path(
        self,
        roots: Sequence[Root],
        *,
        source: str,
        destination: str,
        root: str | None = None,
        overwrite: bool = False,
    ) -> CopyResult:
        self._writable("copy_path", source)
        r, src, dst = self._pair(roots, "copy_path", source, destination, root)
        sweep_once(r.fs)
        rep = r.fs.copy(src, dst, overwrite=overwrite)
        for p, why in rep.skipped:
            self.audit.record(tool="copy_path", op="copy", requested=display(p), decision="deny",
                              reason=why, root_id=r.id, path=display(p))  # fmt: skip
        return CopyResult(
            root=ref(r),
            source=display(src),
            destination=display(dst),
            uri=file_uri(r, b"/".join(dst)),
            source_uri=file_uri(r, b"/".join(src)),
            files=rep.files,
            directories=rep.directories,
            skipped=[
                Skipped(path=display(p), reason=why, uri=file_uri(r, p)) for p, why in rep.skipped
            ],
        )

    @audited("delete_path", "delete", "path")
    def delete_path(
        self,
        roots: Sequence[Root],
        *,
        path: str,
        root: str | None = None,
        recursive: bool = False,
    ) -> DeleteResult:
        self._writable("delete_path", path)
        r, comps = self._locate(roots, "delete_path", "delete", path, root)
        kept: list[tuple[bytes, str]] = []
        removed = r.fs.remove(comps, recursive=recursive, skipped=kept)
        return DeleteResult(
            root=ref(r), path=display(comps), removed=removed,
            skipped=[Skipped(path=display(p), reason=why, uri=file_uri(r, p)) for p, why in kept],
        )  # fmt: skip
