"""A sync: the index brought up to date with the tree, by the commit protocol.

A full sync commits twice: every changed file's trigrams first (then the index answers
grep), then their words and symbols (``completing.py``); a sync of a few paths commits both
at once. Crash safety: before each commit, the state is rewritten as the union of the
committed and the new entries, the new ones marked pending (``_stage``); after the commit it
is rewritten without the pending marks and without deleted files (``StateFiles._record``). A
crash at any moment leaves a state that names every document the index may hold, and pending
entries are re-read by the next sync. Tantivy's commits are atomic, and its lock admits one
writer per index across processes (``writer.py``); a sync that finds another process wrote
the state since it read it starts again from that state (``_again``)."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .. import confine, memory
from ..confine import Beneath
from ..grep import text_of
from .fields import fid_query, main_document
from .scan import KeptRun, Run, WalkCheck, with_files_below
from .state import Entries, Entry, IndexCorrupt
from .trigrams import add_trigrams
from .writer import StateMoved, WriterBusy

log = logging.getLogger("rootgrep.index")
_T = TypeVar("_T")
PROGRESS_SECONDS = 0.25
SYNC_STARTS = 4  # a sync starts again at most this often while other processes write


@dataclass
class SyncStats:
    files: int = 0
    bytes: int = 0
    added: int = 0
    updated: int = 0
    removed: int = 0
    read: int = 0  # files whose bytes were read (the rest were unchanged)
    # files an earlier sync left bare (a build interrupted between its commits) that this one
    # gave their words and symbols (``left_bare``: those files, when it began; None: none)
    finished: int = 0
    left_bare: set[bytes] | None = field(default=None, repr=False)
    elapsed_ms: float = 0.0
    # when the index was ready for grep (its trigrams committed), from the sync's start: a
    # build commits every file's words and symbols after that (None: nothing was deferred)
    grep_ready_ms: float | None = None


Progress = Callable[[int, int | None, str], None]


class _Ticker:
    """Progress of one sync: at its start, about every ``PROGRESS_SECONDS`` while it walks,
    and at its end (with the total, known once the walk is over)."""

    def __init__(self, progress: Progress | None, *, full: bool) -> None:
        self.progress = progress if full else None
        self.next = time.monotonic() + PROGRESS_SECONDS
        self.said = 0  # (each count is said once: a listener hears no message twice)
        if self.progress is not None:
            self.progress(0, None, "re-syncing: walking the tree")

    def __call__(self, examined: int) -> None:
        if self.progress is None or examined == self.said or time.monotonic() < self.next:
            return
        self.next = time.monotonic() + PROGRESS_SECONDS
        self.said = examined
        self.progress(examined, None, f"{examined} files examined")

    def done(self, examined: int, stats: SyncStats) -> None:
        if self.progress is not None:
            self.progress(examined, examined, f"{examined} files examined, {stats.read} read")


@dataclass
class Syncing:
    """The syncs of one ``RootIndex`` (a part of that class: ``store.py``)."""

    # a sync's writer (not held between syncs) kept from its first commit for its second
    _carried: Any = field(init=False, default=None, repr=False)

    def sync(
        self,
        fs: Beneath,
        *,
        only: Iterable[bytes] | None = None,
        progress: Progress | None = None,
        cancelled: Callable[[], bool] | None = None,
        grep_ready: Callable[[], None] | None = None,
        completing: Progress | None = None,
    ) -> SyncStats:
        """Bring the index up to date with the tree: re-read only files whose
        (size, mtime_ns, inode) changed, delete vanished ones. ``only`` limits the work to
        those root-relative paths (the watcher's dirty set).

        A full sync commits twice: every changed file's trigrams first (then ``grep_ready``
        is called: the index answers grep from here on), then their words and symbols
        (``_complete_locked``, which every sync also does for files a crash or a cancel left
        ``bare``). ``progress`` hears the files the walk examined, ``completing`` how many of
        the bare files have had their words and symbols added (done, of total).

        Invariant, checked before every state write: one path per file id. Should a sync
        ever break it, nothing is committed; the index is emptied and rebuilt in full."""
        started = time.perf_counter()
        with self._sync_lock:
            if self.identity is not None and self._bound_identity() != self.identity:
                # another process bound the index to another directory at this path since
                # it was opened (and stopped writing): this process writes it now, with its
                # own directory's files, so it empties it and binds it to that directory
                log.warning("the index in %s was bound to another directory; rebuilding", self.dir)
                self._reset()
                self._write_manifest()
                self.foreign = False
                only = None
            if self.corrupt:
                self._reset()
                only = None
            try:
                try:
                    stats = self._sync_from_latest(fs, only, progress, cancelled)
                except IndexCorrupt as e:
                    log.error("index of %r: %s; rebuilding it in full", self.root_path, e)
                    self._let_carried_go()
                    self._reset()
                    stats = self._sync_from_latest(fs, None, progress, cancelled)
                if self.entries.bare and not (cancelled is not None and cancelled()):
                    if self.ready:
                        stats.grep_ready_ms = stats.elapsed_ms
                        if grep_ready is not None:
                            grep_ready()
                    # the first commit's indexing memory, freed, given back before the second
                    # fills its own (glibc keeps it otherwise: at 100k files the second commit's
                    # peak was 28 MB higher, the first's 150 MB held through all of it)
                    memory.malloc_trim()
                    # (started again while another process's sync lands in between)
                    self._again(lambda: self._complete_locked(fs, stats, completing, cancelled))
                    stats.files = self.file_count
                    stats.elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
            finally:
                self._let_carried_go()
            return stats

    def _sync_from_latest(
        self,
        fs: Beneath,
        only: Iterable[bytes] | None,
        progress: Progress | None,
        cancelled: Callable[[], bool] | None,
    ) -> SyncStats:
        """A sync that starts again (from the state then on disk) while another process's
        sync lands between this one's start and its taking the writer (``_again``)."""
        return self._again(lambda: self._sync_locked(fs, only, progress, cancelled))

    def _again(self, step: Callable[[], _T]) -> _T:
        """``step`` (which reads the state and then takes the writer) started again while
        another process's sync lands in between (``StateMoved``); at most ``SYNC_STARTS``
        times, then ``WriterBusy`` (that process keeps writing: follow it)."""
        for _ in range(SYNC_STARTS):
            try:
                return step()
            except StateMoved:
                log.info("index of %r: written by another process meanwhile; again", self.dir)
        raise WriterBusy("another process keeps writing this index")

    def _let_carried_go(self) -> None:
        """The first commit's writer, kept for a second commit that did not take it (a
        cancel, an error): let go, so other processes may write."""
        carried, self._carried = self._carried, None
        if carried is not None:
            carried.rollback()
            carried.wait_merging_threads()

    def _stage(self, base: Entries, changes: Mapping[bytes, Entry | None]) -> None:
        """The state written before a commit (``_staging``): made, written and let go (a
        build's is as large as the tree)."""
        staging = self._staging(base, changes)
        self._record(base.changed(staging), self.synced_at, staging)

    @staticmethod
    def _staging(base: Entries, changes: Mapping[bytes, Entry | None]) -> Mapping[bytes, Entry]:
        """The entries a state names before a commit lands (each pending: read again in full
        after a crash, whatever the commit holds). A file the commit stops indexing (gone,
        or now binary: file id 0) keeps its old id until then: after a crash before the
        commit, its documents are still there, and the re-read deletes them by that id (a
        state naming id 0 would leave them in the index for good)."""
        get = base.get
        if all(
            new is not None and ((old := get(rel)) is None or new.fid == old.fid or not old.fid)
            for rel, new in changes.items()
        ):  # (the usual case, a build's second commit's: ``changes`` itself, not a copy)
            return changes  # type: ignore[return-value]
        out: dict[bytes, Entry] = {}
        for rel, new in changes.items():
            old = get(rel)
            if old is not None and old.fid and (new is None or new.fid != old.fid):
                out[rel] = Entry(old.fid, *old.key, pending=True, linked=old.linked)
            elif new is not None:
                out[rel] = new
        return out

    def _reset(self) -> None:
        """Empty the index and its state (under the sync lock): the next sync rebuilds. The
        empty state is written first: a process following this index then never holds the
        old state (ready) with an emptied searcher."""
        writer = self._acquire_writer()
        try:
            self._save_state(Entries(), None)
            writer.delete_all_documents()
            writer.commit()
        finally:
            if self._writer is None:
                writer.wait_merging_threads()
        with self._lock:
            self.index.reload()
            self.entries = Entries()
            self.paths, self.synced_at = self.entries.paths, None
        self.next_fid = 1
        self.corrupt = False

    def _catch_up(self) -> None:
        """Before a sync's work (under the sync lock): when another process wrote the index
        since (a daemon that has since stopped), start from what it committed, so no file id
        is handed out twice across processes."""
        stamp = self._stamp()
        if self._writer is None and stamp != self._state_stamp:
            with self._lock:
                self.index.reload()
                self._load_state()
                self._state_stamp = stamp  # (taken before the read: never newer than it)

    def _sync_locked(
        self,
        fs: Beneath,
        only: Iterable[bytes] | None,
        progress: Progress | None,
        cancelled: Callable[[], bool] | None,
    ) -> SyncStats:
        started = time.perf_counter()
        stats = SyncStats()
        tick = _Ticker(progress, full=only is None)
        writer: Any = None  # created on the first change: an unchanged tree writes nothing
        files: Generator[Run, None, None] | None = None  # (closed at the end: a failed
        # sync's walk too)
        self._catch_up()
        try:
            with self._lock:
                base = self.entries  # (a version: never changed in place)
            if base.bare:  # (only after an interrupted build: a walk of the entries then)
                stats.left_bare = {rel for rel, e in base.items() if e.grep_only}
            # ids are never handed out twice, whatever state was loaded meanwhile
            self.next_fid = max(self.next_fid, base.top_fid + 1)
            # the files a watcher named are read again whatever their key says (an edit within
            # one tick of the clock, or of a file system that keeps no ctime, leaves it)
            forced: set[bytes] = set()
            if only is not None:
                only = forced = set(only)
                if any(p not in base for p in only):  # (a directory among them, maybe)
                    only = with_files_below(only, base, self._dirs_of(base))
            changed: dict[bytes, Entry] = {}
            deleted: list[bytes] = []
            before = len(base)
            walked: list[bytes] = []  # every file found (a list: cheaper than a set)
            known = 0  # how many of them the index already had
            examined = 0
            get: Callable[[bytes], Entry | None] | None = None  # (made when first needed)
            found = walked.append
            ticking = tick.progress is not None
            quick = not base.pending  # (a pending entry is read again whatever its key)
            if self._runs_of is not base:  # (a state loaded, or reset: nothing kept holds)
                self._runs, self._runs_dirty = {}, set()
            keeping = only is None and self._walks > 0  # (see ``_listings``)
            # a full sync commits the files' trigrams alone first (grep can use them at
            # once), then their words and symbols (``_complete_locked``: tree-sitter's parse, most
            # of a build's time); a sync of a few paths commits both at once
            defer = only is None
            checked: dict[int, KeptRun] | None = {} if keeping else None
            check = WalkCheck(
                self._runs if quick and checked is not None else {},
                self._runs_dirty,
                {} if checked is None else checked,
                tick if ticking else None,
            )
            files = (
                self._walk(fs, cancelled, check)
                if only is None
                else self._stat_each(fs, only, base)
            )
            for dirfd, prefix, names, sts, keys in files:
                if only is not None:  # (a full walk counts and ticks in ``_walk``)
                    if ticking:  # (the count before this run: the last is the total, said
                        tick(examined)  # once, by ``done``)
                    examined += len(names)
                rels = [prefix + name for name in names]
                if get is None:  # (a flat copy when the state has an overlay: once a sync)
                    get = base.getter(every=only is None)
                if quick and not changed and not forced:
                    olds = list(map(get, rels))
                    want = [None if old is None else old.key for old in olds]
                    if keys == want:  # (None in both: not a file here, nor in the state)
                        n = len(rels) - want.count(None)
                        if checked is not None:
                            checked[id(names)] = (names, want, n, prefix)
                        walked.extend(rels)
                        known += n
                        continue
                for name, rel, st, key in zip(names, rels, sts, keys, strict=True):
                    if st is None:
                        continue  # (no longer a regular file, or over the size limit)
                    found(rel)
                    old = get(rel) if not changed or rel not in changed else changed[rel]
                    if old is not None:
                        known += 1
                        if old.key == key and not old.pending and rel not in forced:
                            continue
                    if writer is None:
                        writer = self._sync_writer()
                    data = confine.read_searchable_at(dirfd, name, self.max_file_size)
                    stats.read += 1
                    if old is not None and old.fid:
                        writer.delete_documents_by_query(fid_query(self.schema, old.fid))
                    fid = 0
                    if data is not None:
                        fid = old.fid if old is not None and old.fid else self._take_fid()
                        text = text_of(data)
                        add_trigrams(writer, fid, text)
                        if not defer:
                            writer.add_document(main_document(fid, rel, text, st))
                        stats.bytes += len(data)
                    if old is None:
                        stats.added += 1
                    else:
                        stats.updated += 1
                    changed[rel] = Entry(
                        fid,
                        st.st_size,
                        st.st_mtime_ns,
                        st.st_ino,
                        st.st_ctime_ns,
                        pending=True,
                        bare=defer and fid != 0,
                        linked=st.st_nlink > 1,
                    )
            if checked is not None and (cancelled is None or not cancelled()):
                # (runs of directories no longer walked: dropped)
                self._runs, self._runs_dirty = checked, set()
            if only is None:  # every entry the walk did not find is gone
                examined += check.examined
                known += check.known
                if known != before:
                    for names, _keys, _n, prefix in check.unread:
                        walked.extend([prefix + name for name in names])
                gone = set() if known == before else set(base).difference(walked)
            else:
                gone = set(only).difference(walked)
            for rel in sorted(gone):
                old = base.get(rel)
                if old is None:
                    continue
                if old.fid:
                    if writer is None:
                        writer = self._sync_writer()
                    writer.delete_documents_by_query(fid_query(self.schema, old.fid))
                deleted.append(rel)
                stats.removed += 1
            if cancelled is not None and cancelled():
                return stats
            tick.done(examined, stats)
            synced = time.time() if only is None else self.synced_at
            if not changed and not deleted:
                if only is None and self.synced_at is None:
                    self._record(base, synced, {})
                    with self._lock:
                        self.synced_at = synced
                elif only is None:
                    with self._lock:
                        self.synced_at = synced
            else:
                # 1) a state naming every document the commit may hold, new ones pending
                # (``changed`` raises IndexCorrupt before anything is committed)
                self._stage(base, changed)
                if writer is not None:
                    writer.commit()
                for entry in changed.values():
                    entry.pending = False
                # 2) the committed state: a new version, in time of the changes
                now: dict[bytes, Entry | None] = {**changed, **dict.fromkeys(deleted)}
                final = base.changed(now)
                self._record(final, synced, now)
                del now
                if writer is not None:  # (kept until the state names the commit: a writer
                    if self._writer is None:  # taking it next starts from that state)
                        if final.bare:  # (kept for the second commit: ``_carried``)
                            self._carried = writer
                        else:
                            writer.wait_merging_threads()  # let other processes write
                    writer = None
                if self._runs:  # (their runs no longer hold)
                    self._runs_dirty.update(
                        rel[: rel.rfind(b"/") + 1] for rel in itertools.chain(changed, deleted)
                    )
                    if len(self._runs_dirty) > len(self._runs):  # (bounded: a daemon's
                        # watcher syncs between full walks may touch ever new directories)
                        self._runs, self._runs_dirty = {}, set()
                with self._lock:
                    self.index.reload()
                    self.entries = final
                    self.paths = final.paths
                    self.synced_at = synced
                self._follow_dirs(base, final, changed, deleted)
            self._runs_of = self.entries  # (the runs kept were checked against it)
        finally:
            try:
                if files is not None:  # (a walk given up holds directory fds: closed now,
                    files.close()  # not when the exception that ended it is dropped)
            finally:
                if writer is not None:
                    writer.rollback()
                    if self._writer is None:
                        writer.wait_merging_threads()
        stats.files = self.file_count
        stats.elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
        return stats

    def _take_fid(self) -> int:
        fid = self.next_fid
        self.next_fid += 1
        return fid
