"""One index's tantivy writer, one per index across processes (tantivy's lock): taken for
a sync, and let go again should another process have written the state since the sync read
it (``StateMoved``); or held for a daemon's whole life. What a writer killed mid-commit left
is collected whenever one is taken."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("rootgrep.index")

WRITER_HEAP = 192_000_000
# two indexing threads: one made one segment of F instead of four (0.32× the text, not
# 0.35×) with about 10% less CPU, but wrote it in the final commit, alone: 34.3 s wall on a
# quiet machine, where two took 25.9 s (schema 7)
WRITER_THREADS = 2


class WriterBusy(Exception):
    """Another writer (usually another process) holds this index's lock."""


class StateMoved(Exception):
    """Another process wrote the index between a sync's start and its taking the writer."""


class Writers:
    """The writer of one ``RootIndex`` (a part of that class: ``store.py``)."""

    def writer_busy(self) -> bool:
        """Whether another writer (a daemon) holds this index right now."""
        with self._sync_lock:  # (a sync of this process holding the writer is not "another")
            if self._writer is not None:
                return False
            try:
                w = self._new_writer()
            except WriterBusy:
                return True
            w.wait_merging_threads()
            return False

    def _sync_writer(self) -> Any:
        """The writer for a sync's changes. One not held between syncs is taken now: should
        another process have written the state since this sync read it (its sync landed
        while this one walked), it is let go and the sync starts again from that state
        (``StateMoved``): else this one would write over that state with its own, older
        one, and hand out again the file ids that process handed out."""
        if self._writer is not None:
            return self._acquire_writer()
        writer = self._new_writer()
        if self._stamp() != self._state_stamp:
            writer.rollback()
            writer.wait_merging_threads()
            raise StateMoved
        return writer

    def _acquire_writer(self) -> Any:
        if self._writer is not None:  # (a held writer: its path is checked at every sync too)
            self.folder.check_path(self._tantivy_path)
            return self._writer
        return self._new_writer()

    def _new_writer(self) -> Any:
        # tantivy writes by path: only while that path still names this folder's own
        self.folder.check_path(self._tantivy_path)
        try:
            writer = self.index.writer(heap_size=WRITER_HEAP, num_threads=WRITER_THREADS)
        except ValueError as e:
            if "Lock" in str(e):
                raise WriterBusy(str(e)) from None
            raise
        # What a writer killed mid-commit left (any process's: this one may have let the
        # writer go between syncs): its files the last commit does not name go, or the next
        # commit, reaching the same opstamp, fails on a delete file of the same name
        # (``<segment>.<opstamp>.del``: "FileAlreadyExists") in every process, for good.
        # Done only while holding the writer: then no other process writes there.
        try:
            writer.garbage_collect_files()
        except ValueError as e:  # (then a commit may fail, and says why)
            log.warning("index of %r: collecting unused files failed: %s", self.dir, e)
        self.folder.sweep_tantivy_temps("tantivy")
        return writer
