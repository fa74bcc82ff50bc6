"""Walker: dirfd-relative traversal of a root, with ignore rules, in path order.

Each directory is opened by a single name relative to its parent's fd with ``O_NOFOLLOW``, so the
walk cannot leave the root however the tree changes under it; symlinks are never followed (their
targets inside the root are found at their real place). Entries come out in component-wise byte
order (the order of ``rg --sort path``), grouped in ``DirBatch`` runs that carry their own
directory fd, so a consumer opens each file by one name beneath an already-confined fd.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat as stat_mod
import time

from . import confine
from .confine import (
    Beneath,
    Entry,
    Listed,
    listing,  # (the cap a listing keeps to, where it is read)
)
from .errors import NotRegularFile, RootgrepError
from .ignore import IgnoreFile
from .records import record

_new_entry = tuple.__new__
IGNORE_FILES: tuple[bytes, ...] = (b".ignore", b".gitignore")  # higher precedence first
MAX_IGNORE_FILE_BYTES = 4 << 20  # read this much of an ignore file (100k rules fit)
MAX_HELD_FDS = 64  # directory fds kept open along the current path; deeper ones are reopened


class WalkOptions:
    """What a walk lists: hidden entries or not, ignore files or not, files up to a size (when
    set, files are stat'ed and larger ones skipped), and root-relative directories not entered
    (other effective roots nested in this one: their files are reported under them, once),
    and ``after``, a cursor's position (root-relative): directories whose every path sorts
    before it are not entered, so a page resumed deep in a tree costs no walk of what went
    before.

    This module's classes are plain classes, not dataclasses: the ``dataclasses`` import and
    0.2 ms per class made are a fifth of the CLI's start-up, and a CLI grep loads them all."""

    __slots__ = ("after", "hidden", "max_file_size", "no_ignore", "prune")

    def __init__(
        self,
        hidden: bool = False,
        no_ignore: bool = False,
        max_file_size: int | None = None,
        prune: frozenset[bytes] = frozenset(),
        after: bytes | None = None,
    ) -> None:
        self.hidden = hidden
        self.no_ignore = no_ignore
        self.max_file_size = max_file_size
        self.prune = prune
        self.after = after


TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterable, Iterator
    from typing import NamedTuple

    class FileEntry(NamedTuple):
        """A file the walk found: its name, its root-relative path, and its stat when the
        walk needed one (with ``max_file_size``). A tuple: one is made per file of every
        walk."""

        name: bytes
        path: bytes  # root-relative, '/'-separated
        stat: os.stat_result | None = None

else:  # (the same tuple without ``typing``)
    FileEntry = record(
        "FileEntry", ("name", "path", "stat"), defaults=(None,), module=__name__,
        doc="A file the walk found: name, root-relative path, stat (or None).",
    )  # fmt: skip


class DirBatch:
    """A run of files from one directory and a dup of that directory's fd (closed by ``close``)."""

    __slots__ = ("dir", "fd", "files", "owned")

    def __init__(self, dir: bytes, fd: int, files: list[FileEntry], owned: bool = True) -> None:
        self.dir = dir
        self.fd = fd
        self.files = files
        self.owned = owned  # False: the walker's own fd, lent until its next step (never closed)

    def close(self) -> None:
        if self.fd >= 0:
            if self.owned:
                os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> DirBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Level:
    """The ignore files of one directory; ``base`` is that directory, root-relative.
    ``files[k]`` holds the rules of ``IGNORE_FILES[k]`` (None when absent or empty)."""

    __slots__ = ("base", "files")

    def __init__(self, base: bytes, files: list[IgnoreFile | None]) -> None:
        self.base = base
        self.files = files


class _Frame:
    __slots__ = ("entries", "fd", "idx", "ignores", "levels", "rel", "segments", "skips")

    def __init__(
        self,
        rel: bytes,
        fd: int,
        entries: list[Listed],
        levels: list[_Level],
        idx: int = 0,
        segments: list[list[bytes] | bytes] | None = None,
    ) -> None:
        self.rel = rel
        self.fd = fd  # -1 once closed to bound fds on a deep tree (reopened when needed)
        self.entries = entries  # (name, kind), in name order: files and directories kept
        self.levels = levels
        self.idx = idx
        # ``runs``' view of the entries: runs of file names and directory names, in order
        self.segments = segments
        # the ignore files read here: name -> fstat_key (None: not readable), for Listings
        self.ignores: dict[bytes, confine.DirKey | None] = {}
        self.skips = _NO_SKIPS  # (hidden, ignored) entries of this listing left out


_NO_SKIPS = (0, 0)


class _Kept:
    """What ``Listings`` keeps of one directory."""

    __slots__ = ("ignores", "key", "levels", "parent", "segments", "skips")

    def __init__(
        self,
        key: confine.DirKey,
        ignores: dict[bytes, confine.DirKey | None],
        parent: list[_Level],
        levels: list[_Level],
        segments: list[list[bytes] | bytes],
        skips: tuple[int, int] = _NO_SKIPS,
    ) -> None:
        self.key = key
        self.ignores = ignores
        self.parent = parent
        self.levels = levels
        self.segments = segments
        self.skips = skips


class Listings:
    """What ``Walker.runs`` kept of each directory it listed, for the next walk of the same
    root with the same options (a re-sync): its runs of file names, its subdirectories and
    the ignore rules in force there. A directory is listed again, and its ignore files read
    again, unless all of these are as they were when it was kept:
    - the directory's own (device, inode, mtime_ns, ctime_ns, size): an entry made, removed
      or renamed in it changes its mtime and ctime; ``touch -d`` may set its mtime back but
      never its ctime;
    - the same key of each of its ignore files (an edit in place changes their ctime);
    - the rules in force above it: the very same rule objects (a parent listed again with
      changed ignore files makes new ones, and every directory below it is listed again);
    - the hidden identities (``confine.hidden_generation``) and the walk's options.
    A listing is kept only when the directory and its ignore files changed at least
    ``SETTLE_NS`` before it was read (by ctime): a change within the same tick of the file
    system's clock as the read could leave the times as they were. The read's time is this
    host's clock: the file system's timestamps are taken to come from a clock within
    ``SETTLE_NS`` of it (any local file system's: the kernel's; a network file system's
    server running more than that behind could have a listing kept that a change within
    one of its ticks of the read left out; one running ahead only keeps less). Files are
    never kept: a re-sync stats each one every time (an edit in place changes no
    directory).

    Bounded: one entry per directory walked (entries of directories no longer walked are
    dropped at the end of each full walk), holding its kept names, as many as the index
    state holds paths."""

    SETTLE_NS = 2_000_000_000  # (2 s: coarser than any local file system's timestamps)

    __slots__ = ("dirs", "fresh", "scope")

    def __init__(self) -> None:
        self.dirs: dict[bytes, _Kept] = {}  # as of the last walk
        self.fresh: dict[bytes, _Kept] = {}  # kept by the walk under way
        self.scope: tuple[object, ...] | None = None

    def __len__(self) -> int:
        return len(self.dirs)

    def _begin(self, scope: tuple[object, ...]) -> None:
        if scope != self.scope:
            self.dirs, self.scope = {}, scope
        self.fresh = {}

    def _end(self, complete: bool) -> None:
        """A complete walk's directories replace the last one's (those gone are dropped)."""
        if complete:
            self.dirs = self.fresh
        else:
            self.dirs.update(self.fresh)
        self.fresh = {}


class Walker:
    """Walk ``start`` (root-relative) beneath ``fs``; see ``batches`` and ``files``.
    ``errors`` gathers (path, why) of what could not be read."""

    def __init__(
        self,
        fs: Beneath,
        start: bytes = b"",
        options: WalkOptions | None = None,
        errors: list[tuple[bytes, str]] | None = None,
        listings: Listings | None = None,
    ) -> None:
        self.fs = fs
        self.start = start
        self.options = WalkOptions() if options is None else options
        self.errors: list[tuple[bytes, str]] = [] if errors is None else errors
        self.listings = listings  # kept for ``runs`` (None: every directory listed)
        self._keeping: Listings | None = None  # ``listings`` while ``runs`` walks
        # entries (files and directories, not what is below them) left out of the walk as
        # hidden, or by an ignore rule: what a search says it did not look at; ``skips``:
        # the same per directory listed (root-relative: (hidden, ignored)), where not none
        self.hidden_skipped = 0
        self.ignored_skipped = 0
        self.skips: dict[bytes, tuple[int, int]] = {}

    def files(self) -> Iterator[FileEntry]:
        for batch in self.batches():
            with batch:
                yield from batch.files

    def batches(self, *, lent: bool = False) -> Iterator[DirBatch]:
        """The files below ``start``, in path order, in runs of one directory each with a
        dup of that directory's fd (the batch's own: closed by ``close``). ``lent``: the
        walker's own fd instead, valid only until the walk's next step, for a consumer done
        with each batch before it asks for the next (a re-sync: two syscalls fewer a run)."""
        comps = confine.split_relpath(self.start)
        start = b"/".join(comps)
        st = self.fs.stat(comps)
        if stat_mod.S_ISREG(st.st_mode):
            # An explicit file is searched even if hidden or ignored (as ripgrep does), also
            # when it is a link that stays inside the root: it is read at its real place.
            real = self.fs.real_components(comps)
            dirfd, name = self.fs.open_parent(real)
            yield DirBatch(b"/".join(comps[:-1]), dirfd, [FileEntry(name, start, st)])
            return
        if not stat_mod.S_ISDIR(st.st_mode):
            raise NotRegularFile(f"'{confine.display(start)}' is neither a file nor a directory")
        yield from self._walk_frames(self._start(comps), lent)

    def _walk_frames(self, frames: list[_Frame], lent: bool = False) -> Iterator[DirBatch]:
        """``batches`` from a frame stack (its first frame: the start, never closed before the
        end), which it closes."""
        limit = self.options.max_file_size
        stat_each = confine.stat_regular_each
        try:
            while (top := self._current(frames)) is not None:
                entries, i, n = top.entries, top.idx, len(top.entries)
                prefix = top.rel + b"/" if top.rel else b""
                run: list[bytes] = []  # the names of the files before the next directory
                descended = False
                while i < n:
                    name, kind = entries[i]
                    i += 1
                    if kind == "file":
                        run.append(name)
                        continue
                    # a directory: emit the files before it, then descend
                    if run:
                        if files := self._run(top.fd, prefix, run, limit, stat_each):
                            fd = top.fd if lent else os.dup(top.fd)
                            yield DirBatch(top.rel, fd, files, not lent)
                        run = []
                    if self._descend(frames, top, i, name, prefix + name):
                        descended = True
                        break
                if descended:
                    continue
                top.idx = i
                if run and (files := self._run(top.fd, prefix, run, limit, stat_each)):
                    yield DirBatch(top.rel, top.fd if lent else os.dup(top.fd), files, not lent)
                frames.pop()
                if top.fd >= 0:
                    os.close(top.fd)
        finally:
            _close_frames(frames)

    def _descend(self, frames: list[_Frame], top: _Frame, i: int, name: bytes, rel: bytes) -> bool:
        """Enter ``top``'s subdirectory ``name`` (``rel`` beneath the root), ``top`` to go on
        at entry ``i`` once it is done; False when it cannot be entered (skipped, as the
        walk's errors say)."""
        child = self._open_child(top.fd, name, rel)
        if child is None:
            return False
        top.idx = i
        frames.append(self._enter(rel, child, top.levels))
        self._bound_fds(frames)
        return True

    def runs(self) -> Iterator[tuple[int, bytes, list[bytes]]]:
        """The files below ``start`` (a directory), in path order, as (fd, prefix, names):
        each run of one directory's files, unstat'ed, with the walker's own fd of that
        directory (valid until the walk's next step; never to be closed) and the prefix of
        their root-relative paths. A re-sync's walk: with ``listings``, a directory that
        has not changed since the last walk is not listed again (see ``Listings``); its
        files are the caller's to stat. The names lists are shared with ``listings``: read
        only."""
        comps = confine.split_relpath(self.start)
        listings = self.listings
        if listings is not None:
            o = self.options
            if o.after is not None:
                listings = self.listings = None
            else:
                scope = (o.hidden, o.no_ignore, o.prune, confine.hidden_generation())
                listings._begin(scope)
        complete = False
        self._keeping = listings  # (only ``runs`` uses them: the other walks need entries)
        frames: list[_Frame] = []
        try:  # (one generator, the walk's loop in it: a layer fewer for each run)
            frames = self._start(comps)
            top = self._current(frames)
            while top is not None:
                segments = top.segments
                if segments is None:
                    segments = top.segments = _segments(top.entries)
                i, n = top.idx, len(segments)
                prefix = top.rel + b"/" if top.rel else b""
                descended = False
                while i < n:
                    seg = segments[i]
                    i += 1
                    if type(seg) is list:
                        yield top.fd, prefix, seg
                        continue
                    assert isinstance(seg, bytes)
                    if listings is not None:
                        descended = self._descend_kept(listings, frames, top, i, seg, prefix + seg)
                    else:
                        descended = self._descend(frames, top, i, seg, prefix + seg)
                    if descended:
                        break
                if descended:
                    top = frames[-1]  # (the directory just entered: its fd is open)
                    continue
                frames.pop()
                if top.fd >= 0:
                    os.close(top.fd)
                top = frames[-1] if frames and frames[-1].fd >= 0 else self._current(frames)
            complete = True
        finally:
            try:
                _close_frames(frames)
            finally:
                self._keeping = None
                if listings is not None:
                    listings._end(complete)

    def _descend_kept(
        self, listings: Listings, frames: list[_Frame], top: _Frame, i: int, name: bytes, rel: bytes
    ) -> bool:
        """``_descend`` for a walk keeping ``listings``: the subdirectory opened and its key
        taken with one ``fstat`` (``confine.open_dir_keyed_at``), its frame from what was kept
        of it when that still holds (``_kept_frame``)."""
        try:
            fd, key = confine.open_dir_keyed_at(top.fd, name)
        except (OSError, RootgrepError) as e:
            self._not_opened(rel, e)
            return False
        top.idx = i
        try:
            old = listings.dirs.get(rel)
            if (
                old is not None and old.key == key and old.parent is top.levels and not old.ignores
            ):  # (``_kept_frame``'s most common case, without its call)
                listings.fresh[rel] = old  # (before the frame holds the fd: closed once)
                frames.append(_Frame(rel, fd, [], old.levels, 0, old.segments))
                if old.skips is not _NO_SKIPS:
                    self._skipped(rel, old.skips)
            else:
                frames.append(self._kept_frame(listings, rel, fd, top.levels, key))
        except BaseException:
            if not frames or frames[-1].fd != fd:  # (a frame holding it: closed with them)
                os.close(fd)
            raise
        if len(frames) > MAX_HELD_FDS + 1:
            self._bound_fds(frames)
        return True

    @staticmethod
    def _run(
        fd: int,
        prefix: bytes,
        names: list[bytes],
        limit: int | None,
        stat_each: Callable[..., list[FileEntry]],
    ) -> list[FileEntry]:
        """One directory run's files: with their stats when the walk has a size limit (one
        ``fstatat`` each, those over it or no longer regular files left out)."""
        if limit is None:
            return [_new_entry(FileEntry, (name, prefix + name, None)) for name in names]
        return stat_each(fd, names, prefix, limit, FileEntry)

    def tree_entries(self, max_depth: int) -> Iterator[tuple[int, bytes, Entry]]:
        """(depth, root-relative path, entry) for files and directories below ``start``, in
        pre-order and path order, descending at most ``max_depth`` levels (1: the start's
        own entries). The same ignore and hidden rules as ``batches``."""
        for depth, rel, e, _fd in self._preorder(max_depth):
            yield depth, rel, e

    def directories(self) -> Iterator[tuple[bytes, int]]:
        """Every directory the walk enters, ``start`` first, in pre-order: its root-relative
        path and its fd (the walker's own: valid until the next step, never to be closed)."""
        frames = self._start(confine.split_relpath(self.start))
        try:
            yield frames[0].rel, frames[0].fd
            for _depth, rel, e, fd in self._preorder(None, frames):
                if e.kind == "dir" and fd >= 0:
                    yield rel, fd
        finally:
            _close_frames(frames)

    def _preorder(
        self, max_depth: int | None, frames: list[_Frame] | None = None
    ) -> Iterator[tuple[int, bytes, Entry, int]]:
        """(depth, path, entry, fd of the directory just entered or -1) below the start."""
        if frames is None:
            frames = self._start(confine.split_relpath(self.start))
        try:
            while (top := self._current(frames)) is not None:
                if top.idx >= len(top.entries):
                    frames.pop()
                    if top.fd >= 0:
                        os.close(top.fd)
                    continue
                e = Entry(*top.entries[top.idx])
                top.idx += 1
                rel = top.rel + b"/" + e.name if top.rel else e.name
                child = None
                if e.kind == "dir" and (max_depth is None or len(frames) < max_depth):
                    child = self._open_child(top.fd, e.name, rel)
                    if child is not None:
                        frames.append(self._enter(rel, child, top.levels))
                        self._bound_fds(frames)
                yield len(frames) - (child is not None), rel, e, -1 if child is None else child
        finally:
            _close_frames(frames)

    def would_list(self, rel: bytes, kind: str = "file") -> bool:
        """Whether a walk from the root with these options reaches ``rel`` (a file, or with
        ``kind="dir"`` a directory): everything on the way passes the ignore and hidden rules."""
        return bool(self.listed([rel], kind))

    def listed(self, paths: Iterable[bytes], kind: str = "file") -> set[bytes]:
        """The ones of ``paths`` (root-relative) that a walk from the root with these options
        reaches as ``kind``. Each directory on the way is listed once, however many of the
        paths it holds (a dirty set may name thousands of files of one directory)."""
        memo: dict[bytes, tuple[dict[bytes, str], list[_Level]] | None] = {}
        out: set[bytes] = set()
        for rel in paths:
            try:
                comps = [c for c in confine.split_relpath(rel) if c != b"."]
            except RootgrepError:
                continue  # not a path a walk could produce (e.g. longer than PATH_MAX)
            if not comps:
                if kind == "dir":
                    out.add(rel)
                continue
            here = self._listing(comps[:-1], memo)
            if here is not None and here[0].get(comps[-1]) == kind:
                out.add(rel)
        return out

    def _listing(
        self, comps: list[bytes], memo: dict[bytes, tuple[dict[bytes, str], list[_Level]] | None]
    ) -> tuple[dict[bytes, str], list[_Level]] | None:
        """What a walk keeps of directory ``comps`` (name -> kind) and the ignore levels in
        force there; None when a walk never enters it. Memoised along the way, in ``memo``."""
        depth = len(comps)
        while depth > 0 and b"/".join(comps[:depth]) not in memo:
            depth -= 1  # the deepest ancestor already known (or the root)
        for i in range(depth, len(comps) + 1):
            key = b"/".join(comps[:i])
            if key in memo:
                continue
            levels: list[_Level] = []
            if i:  # (its parent is in memo: the loop goes down from a known ancestor)
                up = memo[b"/".join(comps[: i - 1])]
                if up is None or up[0].get(comps[i - 1]) != "dir":
                    memo[key] = None
                    continue
                levels = up[1]
            try:
                fd = self.fs.open_dir(comps[:i], no_symlinks=True)
            except (OSError, RootgrepError):
                memo[key] = None
                continue
            try:
                frame = self._frame(key, fd, levels)
            finally:
                os.close(fd)
            memo[key] = (dict(frame.entries), frame.levels)
        return memo[b"/".join(comps)]

    # -- internals ---------------------------------------------------------------------------

    def _start(self, comps: list[bytes]) -> list[_Frame]:
        """The frame stack of a walk from ``comps``: the start directory, with the ignore
        files of its ancestors inside the root already loaded."""
        fd = self.fs.open_dir(comps)
        levels = [] if self.options.no_ignore else self._ancestor_levels(comps)
        return [self._enter(b"/".join(comps), fd, levels)]

    def _current(self, frames: list[_Frame]) -> _Frame | None:
        """The top frame, its fd reopened if it was closed to bound fds; frames that cannot
        be re-entered are dropped (the reason is in ``errors``)."""
        while frames:
            if frames[-1].fd >= 0 or self._reopen(frames):
                return frames[-1]
            frames.pop()
        return None

    def _enter(self, rel: bytes, fd: int, parent_levels: list[_Level]) -> _Frame:
        try:
            if self._keeping is not None:
                return self._kept_frame(self._keeping, rel, fd, parent_levels)
            return self._frame(rel, fd, parent_levels)
        except BaseException:
            os.close(fd)
            raise

    def _kept_frame(
        self,
        listings: Listings,
        rel: bytes,
        fd: int,
        parent_levels: list[_Level],
        key: confine.DirKey | None = None,
    ) -> _Frame:
        """``_frame`` from what ``listings`` kept of the directory when it is unchanged
        (see ``Listings``); else listed and read again, and kept when settled. ``key``: the
        directory's ``fstat_key`` taken from ``fd`` when it was opened (else taken now)."""
        if key is None:
            key = confine.fstat_key(fd)
        old = listings.dirs.get(rel)
        if (
            old is not None
            and old.key == key
            and (old.parent is parent_levels or _same_levels(old.parent, parent_levels))
            and (
                not old.ignores
                or all(confine.stat_key_at(fd, name) == k for name, k in old.ignores.items())
            )
        ):
            listings.fresh[rel] = old
            if old.skips is not _NO_SKIPS:
                self._skipped(rel, old.skips)
            return _Frame(rel, fd, [], old.levels, 0, old.segments)
        read_at = time.time_ns()
        errors = len(self.errors)
        frame = self._frame(rel, fd, parent_levels)
        frame.segments = _segments(frame.entries)
        settled = read_at - Listings.SETTLE_NS
        if len(self.errors) != errors or key[3] >= settled:
            return frame  # (not kept: listed again next time)
        for k in frame.ignores.values():
            if k is None or k[3] >= settled:
                return frame
        if (
            old is not None
            and old.ignores == frame.ignores
            and _same_levels(old.parent, parent_levels)
        ):
            frame.levels = old.levels  # the same rules: those below may keep theirs
        listings.fresh[rel] = _Kept(
            key, frame.ignores, parent_levels, frame.levels, frame.segments, frame.skips
        )
        return frame

    def _frame(self, rel: bytes, fd: int, parent_levels: list[_Level]) -> _Frame:
        try:
            dotted, plain, cut = confine.scan_split(fd)
        except OSError as e:
            self.errors.append((rel, e.strerror or "cannot list"))
            dotted, plain, cut = [], [], False
        if cut:
            self.errors.append((rel, f"more than {listing.MAX_DIR_ENTRIES} entries: rest skipped"))
        levels = parent_levels
        ignores: dict[bytes, confine.DirKey | None] = {}
        if dotted and not self.options.no_ignore:  # (every ignore file's name has a dot)
            level = self._load_level(fd, rel, dotted, ignores)
            if level is not None:
                levels = [*parent_levels, level]
        prune = self.options.prune
        hidden = self.options.hidden
        after = order_key(self.options.after) if self.options.after is not None else None
        unseen = 0  # hidden entries left out
        if dotted and (hidden or levels):  # (a rule may whitelist a dot name)
            plain = sorted(plain + dotted)
        elif dotted:
            unseen = sum(1 for e in dotted if e[1] in _WALKED)
        if after is not None:  # (a cursor's place: directories wholly before it are left)
            plain = [e for e in plain if e[1] != "dir" or not _wholly_before(rel, e[0], after)]
        if not levels and not prune:  # (the common case: one comprehension)
            frame = _Frame(rel, fd, [e for e in plain if e[1] in _WALKED], levels)
            frame.ignores = ignores
            if unseen:
                frame.skips = (unseen, 0)
                self._skipped(rel, frame.skips)
            return frame
        kept: list[Listed] = []
        ignored = 0
        for e in plain:
            name, kind = e
            if kind not in _WALKED:
                continue
            if prune and kind == "dir" and (rel + b"/" + name if rel else name) in prune:
                continue
            verdict = self._ignored(levels, rel, name, kind == "dir") if levels else None
            if verdict is True:
                ignored += 1
                continue
            if verdict is None and not hidden and name.startswith(b"."):
                unseen += 1
                continue
            kept.append(e)
        frame = _Frame(rel, fd, kept, levels)
        frame.ignores = ignores
        if unseen or ignored:
            frame.skips = (unseen, ignored)
            self._skipped(rel, frame.skips)
        return frame

    def _skipped(self, rel: bytes, skips: tuple[int, int]) -> None:
        self.hidden_skipped += skips[0]
        self.ignored_skipped += skips[1]
        self.skips[rel] = skips

    def _ignored(self, levels: list[_Level], rel: bytes, name: bytes, is_dir: bool) -> bool | None:
        """True: ignored; False: whitelisted by a negation; None: no rule matched.

        As ripgrep ranks them: any ``.ignore`` rule (the deepest directory's first) beats any
        ``.gitignore`` rule; among files of one kind, the deepest directory decides."""
        full = rel + b"/" + name if rel else name
        for kind in range(len(IGNORE_FILES)):
            for level in reversed(levels):
                rules = level.files[kind]
                if rules is None:
                    continue
                sub = full[len(level.base) + 1 :] if level.base else full
                verdict = rules.check(sub, is_dir)
                if verdict is not None:
                    return verdict
        return None

    def _load_level(
        self,
        fd: int,
        rel: bytes,
        listing: Iterable[Listed],
        keys: dict[bytes, confine.DirKey | None] | None = None,
    ) -> _Level | None:
        """The rules of the ignore files of directory ``fd``; ``keys`` gets the
        ``fstat_key`` of each taken from the very file read, before it was read (None: not
        read, or its read failed)."""
        present = {name for name, kind in listing if kind == "file" and name in IGNORE_FILES}
        if not present:
            return None
        files: list[IgnoreFile | None] = []
        for name in IGNORE_FILES:
            files.append(None)
            if name not in present:
                continue
            if keys is not None:
                keys[name] = None
            try:
                ffd, st = confine.open_file_at(fd, name)
            except (OSError, RootgrepError):
                continue
            if keys is not None:
                keys[name] = confine.stat_result_key(st)
            try:
                data, cut = confine.read_fd(ffd, st.st_size, MAX_IGNORE_FILE_BYTES)
                if cut:  # read up to the cap: never take the cut last line for a rule
                    data = data[: data.rfind(b"\n") + 1]
            except OSError:  # (its rules left out of this walk: the listing is not kept)
                if keys is not None:
                    keys[name] = None
                continue
            finally:
                os.close(ffd)
            rules = IgnoreFile.parse(data)
            if rules:
                files[-1] = rules
        return _Level(rel, files) if any(files) else None

    def _ancestor_levels(self, comps: list[bytes]) -> list[_Level]:
        """Ignore files of the root and of each directory above ``start`` (inside the root)."""
        levels: list[_Level] = []
        for i in range(len(comps)):
            try:
                fd = self.fs.open_dir(comps[:i])
            except RootgrepError:
                continue
            try:
                level = self._load_level(fd, b"/".join(comps[:i]), confine.scan_fd(fd))
            finally:
                os.close(fd)
            if level is not None:
                levels.append(level)
        return levels

    def _open_child(self, fd: int, name: bytes, rel: bytes) -> int | None:
        try:
            return confine.open_dir_at(fd, name)
        except (OSError, RootgrepError) as e:
            self._not_opened(rel, e)
            return None

    def _not_opened(self, rel: bytes, e: OSError | RootgrepError) -> None:
        """Why directory ``rel`` was not entered, in ``errors`` (gone, or no longer a
        directory, or now a link: said nothing)."""
        if isinstance(e, RootgrepError):
            self.errors.append((rel, e.message))
        elif e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            self.errors.append((rel, e.strerror or "cannot open"))

    def _reopen(self, frames: list[_Frame]) -> bool:
        """Reopen the top frame's closed fd, one name at a time from the nearest open
        ancestor (the start directory is never closed), keeping the last few on the way."""
        i = len(frames) - 1
        j = i - 1
        while frames[j].fd < 0:
            j -= 1
        cur = frames[j].fd
        try:
            for k in range(j + 1, i + 1):
                name = frames[k].rel.rsplit(b"/", 1)[-1]
                cur = frames[k].fd = confine.open_dir_at(cur, name)
        except OSError as e:
            self.errors.append((frames[i].rel, e.strerror or "cannot reopen"))
            for k in range(j + 1, i + 1):
                if frames[k].fd >= 0:
                    os.close(frames[k].fd)
                    frames[k].fd = -1
            return False
        for k in range(j + 1, i - MAX_HELD_FDS + 1):
            os.close(frames[k].fd)
            frames[k].fd = -1
        return True

    @staticmethod
    def _bound_fds(frames: list[_Frame]) -> None:
        i = len(frames) - MAX_HELD_FDS - 1
        if i >= 1 and frames[i].fd >= 0:  # frame 0 (the start) stays open
            os.close(frames[i].fd)
            frames[i].fd = -1


_WALKED = frozenset(("file", "dir"))  # symlinks are never followed; FIFOs, sockets and
# devices never read


def _segments(entries: list[Listed]) -> list[list[bytes] | bytes]:
    """A directory's kept entries as ``runs`` goes through them: each run of file names (a
    list) between its subdirectories (their names), in order."""
    files = [name for name, kind in entries if kind == "file"]
    if len(files) == len(entries):  # (no subdirectory: most directories)
        return [files] if files else []
    out: list[list[bytes] | bytes] = []
    run: list[bytes] = []
    for name, kind in entries:
        if kind == "file":
            run.append(name)
            continue
        if run:
            out.append(run)
            run = []
        out.append(name)
    if run:
        out.append(run)
    return out


def _same_levels(a: list[_Level], b: list[_Level]) -> bool:
    """The same rules in force: the very same rule objects, in the same order."""
    return a is b or (len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True)))


def keep_files(
    batches: Generator[DirBatch, None, None], select: Callable[[DirBatch], list[FileEntry]]
) -> Iterator[DirBatch]:
    """The walk's batches with only the files ``select`` keeps of each: a batch left with
    none is closed, not yielded, and the walk is closed when the caller stops."""
    try:
        for batch in batches:
            files = select(batch)
            if not files:
                batch.close()
                continue
            batch.files = files
            yield batch
    finally:
        batches.close()


def _wholly_before(rel: bytes, name: bytes, after: bytes) -> bool:
    """Whether the directory ``rel``/``name`` and everything below it sort before the
    position ``after`` (an ``order_key``): it sorts before and ``after`` is not inside it."""
    key = order_key(rel + b"/" + name if rel else name)
    return key < after and not after.startswith(key + b"\0")


def order_key(path: bytes) -> bytes:
    """The walk's order as one bytes key: component-wise byte order, which is the order of
    the path with each ``/`` made a NUL (no name holds a NUL, and NUL sorts before every
    other byte, so a directory's own path sorts before its descendants and ``a/b`` before
    ``a.b``). Cheaper than comparing lists of components."""
    return path.replace(b"/", b"\0")


def path_batches(fs: Beneath, paths: Iterable[bytes]) -> Iterator[DirBatch]:
    """``DirBatch`` runs for known root-relative file paths given in walk order (an index's
    candidates), each directory opened by one name at a time beneath its parent's fd, never
    through a link. The open directories along the current path are kept, so a directory
    costs one ``openat`` however deep it is. Directories that cannot be opened (gone, now a
    link) are skipped with their files."""
    stack: list[tuple[bytes, int]] = []  # (directory, fd) from the root down the current path
    try:
        for parent, group in itertools.groupby(paths, key=lambda p: p.rpartition(b"/")[0]):
            files = [_new_entry(FileEntry, (p.rpartition(b"/")[2], p, None)) for p in group]
            fd = _open_along(fs, stack, parent)
            if fd >= 0:
                yield DirBatch(parent, os.dup(fd), files)
    finally:
        for _, fd in stack:
            os.close(fd)


def _open_along(fs: Beneath, stack: list[tuple[bytes, int]], rel: bytes) -> int:
    """The fd of directory ``rel`` with ``stack`` moved to it (its ancestors' fds below it);
    -1 when it cannot be opened."""
    while stack and not (
        rel == stack[-1][0] or not stack[-1][0] or rel.startswith(stack[-1][0] + b"/")
    ):
        os.close(stack.pop()[1])
    if not stack:
        try:
            stack.append((b"", fs.open_dir([])))
        except (OSError, RootgrepError):
            return -1
    here = stack[-1][0]
    if here == rel:
        return stack[-1][1]
    rest = rel[len(here) + 1 :] if here else rel
    for name in rest.split(b"/"):
        if name in (b"", b".", b".."):
            return -1  # not a name (an index only holds walked paths; never leave the root)
        if len(stack) > MAX_HELD_FDS:  # a very deep tree: drop the middle of the path
            os.close(stack.pop(1)[1])  # (never the root's)
        cur, fd = stack[-1]
        try:
            child = confine.open_dir_at(fd, name)
        except OSError:
            return -1
        stack.append((cur + b"/" + name if cur else name, child))
    return stack[-1][1]


def _close_frames(frames: list[_Frame]) -> None:
    for f in frames:
        if f.fd >= 0:
            fd, f.fd = f.fd, -1  # (marked closed first: never closed twice)
            os.close(fd)


def list_files(fs: Beneath, start: bytes = b"", **options: bool | int | None) -> list[bytes]:
    """Root-relative paths of every file the walker yields, in order (a convenience)."""
    return [f.path for f in Walker(fs, start, WalkOptions(**options)).files()]  # type: ignore[arg-type]
