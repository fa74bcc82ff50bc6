"""A build's second commit (``_complete_locked``): each file the first left ``bare`` (its
trigrams committed, ready for grep) read again and given its main document, with its words
and symbols; the parse, most of the commit's time, shared with a helper process on large
builds (``parse.py``). A file changed since its trigrams were committed is indexed anew, one
gone is deleted. Every sync completes what a crash or a cancel between the two left."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import confine
from ..confine import Beneath
from ..grep import text_of
from ..walker import order_key, path_batches
from .fields import fid_query, main_document
from .parse import HELPER_MIN_BYTES, ParseHelper, SharedParse, SymbolFields
from .state import Entry
from .sync import PROGRESS_SECONDS, Progress, SyncStats
from .trigrams import add_trigrams


@dataclass
class Completing:
    """The second commits of one ``RootIndex``'s builds (a part of that class: ``store.py``)."""

    # whether the last second commit had a parse helper (``parse.ParseHelper``), for tests
    last_helped: bool = field(init=False, default=False, repr=False)

    def _complete_locked(
        self,
        fs: Beneath,
        stats: SyncStats,
        progress: Progress | None,
        cancelled: Callable[[], bool] | None,
    ) -> None:
        """The second commit of a build: each bare file is read again (beneath its
        directory's fd, as the walk found it: never through a link) and its main document
        added. A file changed since its trigrams were committed is indexed anew, trigrams and
        all, as a sync of it would; a file gone, or no longer a regular file, is deleted.
        The state is written as a sync writes it (the entries pending until the commit has
        landed: a crash in between re-reads them in full). Cancelled (between two files),
        it commits nothing and the files stay bare (grep-ready), for the next sync."""
        self._catch_up()
        with self._lock:
            base = self.entries
        if not base.bare:
            return
        todo = sorted((rel for rel, e in base.items() if e.bare), key=order_key)
        total = len(todo)
        # (the first commit's writer, kept: another of 192 MB taken after it was let go
        # raised the build's peak memory by 70 to 170 MB)
        writer, self._carried = self._carried or self._sync_writer(), None
        changes: dict[bytes, Entry | None] = {}
        limit, get = self.max_file_size, base.getter()
        next_tick = time.monotonic() + PROGRESS_SECONDS

        def add_main(item: tuple[int, bytes, bytes, os.stat_result], f: SymbolFields) -> None:
            writer.add_document(main_document(*item, fields=f))

        # (the parse, most of this commit's time, shared with a helper process on large
        # builds: ``parse.py``)
        helped = sum(e.size for e in map(get, todo) if e is not None) >= HELPER_MIN_BYTES
        shared = SharedParse(add_main, ParseHelper.start() if helped else None)
        self.last_helped = shared.helper is not None
        try:
            batches = path_batches(fs, todo)
            for batch in batches:
                try:
                    if cancelled is not None and cancelled():
                        return
                    if progress is not None and time.monotonic() >= next_tick:
                        next_tick = time.monotonic() + PROGRESS_SECONDS
                        progress(len(changes), total, f"words and symbols: {len(changes)} of "
                                 f"{total} files")  # fmt: skip
                    for f in batch.files:
                        # (a file at a time: one directory of 5,000 files took 10 s to stop)
                        if cancelled is not None and cancelled():
                            return
                        rel, old = f.path, get(f.path)
                        assert old is not None and old.fid
                        got = confine.read_searchable_stat_at(batch.fd, f.name, limit)
                        if got is None:  # (gone, or no longer a regular file: below)
                            continue
                        data, st = got
                        key = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
                        if data is not None and key == old.key:
                            # (the old entry's numbers and key, shared: the stat's own are
                            # let go, some 150 bytes a file while both versions are held;
                            # 15 of the 127 MiB of Python objects at the peak of 100k files)
                            new = Entry(old.fid, *old.key, pending=True, linked=old.linked)
                            new.key = old.key
                            text = text_of(data)
                            shared.add((old.fid, rel, text, st), rel, text)
                        else:  # (changed since its trigrams were committed)
                            writer.delete_documents_by_query(fid_query(self.schema, old.fid))
                            stats.updated += 1
                            new = Entry(old.fid if data is not None else 0, *key, pending=True,
                                        linked=st.st_nlink > 1)  # fmt: skip
                            if data is not None:
                                text = text_of(data)
                                add_trigrams(writer, old.fid, text)
                                writer.add_document(main_document(old.fid, rel, text, st))
                        changes[rel] = new
                finally:
                    batch.close()
            batches.close()  # (its directory fds at once, not when it is dropped)
            if cancelled is not None and cancelled():
                return
            shared.finish()
            for rel in todo:  # (not read above: gone, or its directory is)
                if rel not in changes:
                    old = get(rel)
                    assert old is not None
                    writer.delete_documents_by_query(fid_query(self.schema, old.fid))
                    changes[rel] = None
                    stats.removed += 1
            self._stage(base, changes)
            writer.commit()
            left = stats.left_bare or ()
            for rel, entry in changes.items():
                if entry is not None:
                    entry.pending = False
                    stats.finished += entry.fid != 0 and rel in left
            final = base.changed(changes)
            self._record(final, self.synced_at, changes)
            if self._writer is None:  # (let other processes write between syncs)
                writer.wait_merging_threads()
            writer = None
            moved = [r for r, e in changes.items() if e is None or e.key != get(r).key]
            if self._runs_of is base:  # (the runs kept hold but for the files that moved)
                self._runs_of = final
                self._runs_dirty.update(rel[: rel.rfind(b"/") + 1] for rel in moved)
            with self._lock:
                self.index.reload()
                self.entries = final
                self.paths = final.paths
            gone = [r for r, e in changes.items() if e is None]
            self._follow_dirs(base, final, {}, gone)
            if progress is not None:
                progress(total, total, f"words and symbols: {total} files")
        finally:
            shared.close()
            if writer is not None:
                writer.rollback()
                if self._writer is None:
                    writer.wait_merging_threads()
