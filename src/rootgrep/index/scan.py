"""What a sync looks at, and what it left out. A full re-sync walks the tree, listing again
only the directories changed since the last walk and leaving out the runs of files it finds
as the state holds them (``_walk``); a sync of a watcher's paths stats those, and every other
indexed name of the same files (``_stat_each``); how many indexed files each directory holds
(``_dirs_of``); what the last whole walk skipped, for a search's coverage line
(``not_searched``)."""

from __future__ import annotations

import os
import stat as stat_mod
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import confine
from ..confine import Beneath
from ..errors import RootgrepError
from ..walker import Listings, Walker, WalkOptions, order_key, path_batches
from .state import FOLD_MIN, Entries, Entry

# a re-sync's run of one directory's files: (directory fd, the prefix of their root-relative
# paths, names, stats, keys), the stat and key None for a name that is not a regular file
# within the size limit (``confine.stat_keyed``)
Run = tuple[
    int,
    bytes,
    list[bytes],
    list["os.stat_result | None"],
    list["confine.FileKey | None"],
]
# what the last full re-sync found of a run as the state held it (see ``RootIndex._runs``):
# (the listing's names list, the state's keys of those files, how many the state holds, the
# prefix of their paths)
KeptRun = tuple[list[bytes], list[Any], int, bytes]


class WalkCheck:
    """What a full re-sync's walk (``RootIndex._walk``) does besides yielding runs: it counts
    the names it examined (``examined``) and says progress (``tick``), and it leaves out the
    runs it finds as the state holds them: ``last``, the runs the last full re-sync found so
    (``RootIndex._runs``, or empty: none to trust), but those of the directories in
    ``dirty``; ``checked``, those this walk finds so (the next one's ``last``; the sync's
    loop adds those it checks against the state); ``unread``, the runs left out, and
    ``known``, how many of the state's files they hold."""

    __slots__ = ("checked", "dirty", "examined", "known", "last", "tick", "unread")

    def __init__(
        self,
        last: dict[int, KeptRun],
        dirty: set[bytes],
        checked: dict[int, KeptRun],
        tick: Callable[[int], None] | None,
    ) -> None:
        self.last = last
        self.dirty = dirty
        self.checked = checked
        self.tick = tick
        self.unread: list[KeptRun] = []
        self.examined = 0
        self.known = 0


@dataclass
class TreeScan:
    """The walks of one ``RootIndex``'s syncs (a part of that class: ``store.py``)."""

    # the last ``not_searched``: (entries, skips, (directory, pruned), counts)
    _unsearched: tuple[Entries, object, object, tuple[int, int, int, int]] | None = field(
        init=False, default=None
    )
    # the writer's own (under ``_sync_lock``): for one version of ``entries``, how many
    # entries each directory holds at any depth (built when first asked for)
    _dirs: tuple[Entries, dict[bytes, int]] | None = field(init=False, default=None)
    # the writer's own: what the last full walk kept of each directory of the tree, so a
    # re-sync lists again only the directories that changed (it stats every file)
    # (kept from the second full walk on: a process that syncs once, a CLI's ``index``,
    # pays nothing for them; ``_walks`` counts this object's full walks)
    _listings: Listings = field(init=False, default_factory=Listings, repr=False)
    _walks: int = field(init=False, default=0, repr=False)
    # what the last whole walk left out, per directory: (hidden, ignored) entries of its
    # listing (``Walker.skips``), and files over ``max_file_size`` per run of file names
    # (id of the names list -> (names, prefix, count)): a search's coverage line
    _skips: dict[bytes, tuple[int, int]] = field(init=False, default_factory=dict, repr=False)
    _large: dict[int, tuple[list[bytes], bytes, int]] = field(
        init=False, default_factory=dict, repr=False
    )
    # the writer's own: the runs of files the last full re-sync found as the state holds
    # them (``KeptRun``), by the ``id`` of the listing's names list (which each holds: no
    # other list has that id while it is here), for ``_runs_of``, the version of ``entries``
    # they were checked against (kept up by each commit of this process: the directories it
    # changed go in ``_runs_dirty``, whose runs no longer hold, until the next full walk
    # replaces them). (No dict per directory nor tuple per run made by a re-sync that finds
    # them all: nothing for the cyclic GC, whose full passes over the index's objects cost a
    # re-sync of F a tenth of its time.)
    _runs: dict[int, KeptRun] = field(init=False, default_factory=dict, repr=False)
    _runs_dirty: set[bytes] = field(init=False, default_factory=set, repr=False)
    _runs_of: Entries | None = field(init=False, default=None, repr=False)

    def _dirs_of(self, entries: Entries) -> dict[bytes, int]:
        """How many entries each directory holds at any depth, for this version of the
        entries (built once, O(entries × depth); then kept up by ``_follow_dirs``)."""
        held = self._dirs
        if held is not None and held[0] is entries:
            return held[1]
        dirs: dict[bytes, int] = {}
        for rel in entries:
            for d in _ancestors(rel):
                dirs[d] = dirs.get(d, 0) + 1
        self._dirs = (entries, dirs)
        return dirs

    def _follow_dirs(
        self, base: Entries, final: Entries, changed: dict[bytes, Entry], deleted: list[bytes]
    ) -> None:
        """Carry the directory counts of ``base`` over to ``final`` (in time of the changes);
        dropped instead after a change of much of the tree (built again when asked for)."""
        held = self._dirs
        self._dirs = None
        if held is None or held[0] is not base or len(changed) + len(deleted) > FOLD_MIN:
            return
        dirs = held[1]
        for rel, step in [*((r, 1) for r in changed if r not in base), *((r, -1) for r in deleted)]:
            for d in _ancestors(rel):
                n = dirs.get(d, 0) + step
                if n > 0:
                    dirs[d] = n
                else:
                    dirs.pop(d, None)
        self._dirs = (final, dirs)

    def _walk(
        self, fs: Beneath, cancelled: Callable[[], bool] | None, check: WalkCheck
    ) -> Generator[Run, None, None]:
        """Every file of the tree with its stat, run by run (``Run``), but the runs found as
        the state holds them (``check``). The walk lists again only the directories changed
        since the last one (``Listings``); every file is stat'ed.

        A run is left out when it is the very names list a run of ``check.last`` holds (a
        listing ``Listings`` kept: the directory unchanged, and the hidden identities the
        same, its scope) and each file's key (``confine.stat_keys``) is the one the state
        held for it then: it still holds it (a commit marks the directories it changed
        dirty). It costs no stat result, no step of the sync's loop, and no new object."""
        listings = self._listings if self._walks > 0 else None
        self._walks += 1
        walker = Walker(fs, b"", WalkOptions(), listings=listings)
        limit = self.max_file_size
        stat_keyed, stat_keys = confine.stat_keyed, confine.stat_keys
        last, dirty, checked = check.last, check.dirty, check.checked
        unread, tick = check.unread, check.tick
        examined = known = 0
        large, was_large = {}, self._large
        whole = False
        try:
            for fd, prefix, names in walker.runs():  # (each run is done before the next)
                if cancelled is not None and cancelled():
                    return
                if tick is not None:  # (the count before this run: the last is the total,
                    tick(examined)  # said once, by ``done``)
                examined += len(names)
                kept = last.get(id(names))
                if (
                    kept is not None
                    and kept[0] is names
                    and not (dirty and prefix in dirty)
                    and stat_keys(fd, names, limit) == kept[1]
                ):
                    checked[id(names)] = kept
                    unread.append(kept)
                    known += kept[2]
                    big = was_large.get(id(names))
                    if big is not None and big[0] is names:
                        large[id(names)] = big
                    continue
                over: list[int] = []
                sts, keys = stat_keyed(fd, names, limit, over)
                if over and over[0]:
                    large[id(names)] = (names, prefix, over[0])
                yield fd, prefix, names, sts, keys
            whole = True
        finally:
            check.examined, check.known = examined, known
            if whole:
                self._skips, self._large = walker.skips, large

    def _stat_each(
        self, fs: Beneath, paths: Iterable[bytes], entries: Mapping[bytes, Entry]
    ) -> Generator[Run, None, None]:
        """``Run``s for ``paths``, then for every other indexed
        name of the same files (a hard link made or written through one name changes them
        all, and the watcher only names the one it saw). Only a file with more than one
        name (``st_nlink``) can have another: the entries are looked through for its
        inode only then."""
        paths = set(paths)
        walked = Walker(fs).listed(paths)  # (what a full walk would not reach is gone)
        inos: set[int] = set()
        yield from self._stat_batches(fs, walked, inos)
        for rel in paths - walked:  # a name a walk skips (ignored, hidden) may be a link too
            try:
                st = fs.stat(rel, follow=False)
            except (OSError, RootgrepError):
                continue
            if stat_mod.S_ISREG(st.st_mode) and st.st_nlink > 1:
                inos.add(st.st_ino)
        others = inos and {p for p, e in entries.items() if e.ino in inos and p not in walked}
        if others:
            yield from self._stat_batches(fs, Walker(fs).listed(others), set())

    def _stat_batches(self, fs: Beneath, paths: set[bytes], inos: set[int]) -> Iterable[Run]:
        for batch in path_batches(fs, sorted(paths, key=order_key)):
            with batch:
                names = [fe.name for fe in batch.files]
                sts, keys = confine.stat_keyed(batch.fd, names, self.max_file_size)
                for st in sts:
                    if st is not None and st.st_nlink > 1:
                        inos.add(st.st_ino)
                yield batch.fd, batch.dir + b"/" if batch.dir else b"", names, sts, keys

    def not_searched(
        self, under: bytes = b"", prune: frozenset[bytes] = frozenset()
    ) -> tuple[int, int, int, int]:
        """What the tree below ``under`` (root-relative; b"": all) holds that no indexed
        search reads: (hidden entries, ignored entries, binary files, files over the size
        limit), as of the last whole walk (hidden and ignored entries, large files) and the
        entries now (binary files: file id 0). Counted once for a version of them and a
        directory (a search's coverage line)."""
        with self._lock:
            entries = self.entries
        skips, large = self._skips, self._large
        got = self._unsearched
        key = (under, prune)
        if got is not None and got[0] is entries and got[1] is skips and got[2] == key:
            return got[3]
        prefix = under + b"/" if under else b""
        # (below a nested root left to itself, nothing counts: that root's search says it)
        pruned = tuple(p + b"/" for p in prune)

        def counted(rel: bytes) -> bool:
            return rel.startswith(prefix) and not (pruned and (rel + b"/").startswith(pruned))

        binary = sum(1 for rel, e in entries.items() if not e.fid and counted(rel))
        hidden = ignored = 0
        for d, (h, i) in skips.items():
            if (not under or d == under or d.startswith(prefix)) and counted(d + b"/"):
                hidden, ignored = hidden + h, ignored + i
        big = sum(n for _, p, n in large.values() if counted(p))
        counts = (hidden, ignored, binary, big)
        self._unsearched = (entries, skips, key, counts)
        return counts


def with_files_below(
    paths: set[bytes], entries: Mapping[bytes, Entry], dirs: dict[bytes, int]
) -> set[bytes]:
    """``paths`` plus every indexed file below those of them that are directories holding
    indexed files (``dirs``: moved, deleted or changed, their files must be looked at
    again). The entries are looked through only then: a new file or an edited one costs
    nothing here. (Other names of an edited file: ``RootIndex._stat_each``.)"""
    prefixes = tuple(p + b"/" for p in paths if p in dirs)
    if prefixes:
        paths.update(p for p in entries if p.startswith(prefixes))
    return paths


def _ancestors(rel: bytes) -> Iterator[bytes]:
    """The directories a root-relative path lies in, the root's own excepted."""
    i = rel.find(b"/")
    while i >= 0:
        yield rel[:i]
        i = rel.find(b"/", i + 1)
