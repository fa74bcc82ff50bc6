"""One index's state on disk as its ``RootIndex`` holds it (``state.py`` is the format):
read (the snapshot with its journal, read so that the two belong together), followed (the
records another process appended since), written (a record appended to the journal while it
has room, else a new snapshot), and ``reload``: another process's commits picked up with the
state that names their documents."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .state import (
    ENTRY_BYTES,
    JOURNAL_FILE,
    STATE_FILE,
    Entries,
    Entry,
    IndexCorrupt,
    Journal,
    decode_state,
    encode_record,
    encode_state,
    journal_room,
    new_generation,
    replay,
)

log = logging.getLogger("rootgrep.index")


@dataclass
class StateFiles:
    """The state files of one ``RootIndex`` (a part of that class: ``store.py``)."""

    _state_stamp: tuple[int, ...] | None = field(init=False, default=(-1, -1, -1))
    _journal: Journal = field(init=False, default_factory=Journal)
    _snapshot_bytes: int = field(init=False, default=0)
    # (inode, mtime_ns, size) of the snapshot file the state in memory was read from (or
    # written as); None when not known for sure (then never followed, always read whole)
    _snapshot_id: tuple[int, int, int] | None = field(init=False, default=None)

    def _read_state(self, at: Journal) -> tuple[dict[bytes, Entry], float | None] | None:
        """The snapshot with its journal applied (``at``: where this reader then stands).
        A writer replaces the snapshot before it drops the journal: the two read here belong
        together when the snapshot is still the same file after both reads."""
        self._snapshot_id = None
        for _ in range(8):
            before = _file_id(self.folder.stat(STATE_FILE))
            data = self.folder.read(STATE_FILE)
            if data is None:
                return None
            journal = self.folder.read(JOURNAL_FILE) or b""
            if before is not None and _file_id(self.folder.stat(STATE_FILE)) == before:
                self._snapshot_id = before  # (else: never followed, always read whole)
                break
        self._snapshot_bytes = len(data)
        return decode_state(data, journal, at)

    def _load_state(self) -> None:
        at = Journal()
        got = self._read_state(at)
        if got is None and self.index.searcher().num_docs:
            # (documents no state names: their file ids would be handed out again, to other
            # files; a snapshot is replaced whole, so only damage or a hand leaves this)
            log.warning("the index state in %s is missing or torn; rebuilding the index", self.dir)
            self.corrupt = True
        entries, synced_at = got or ({}, None)
        self._set_state(entries, synced_at, at)

    def _set_state(
        self, entries: dict[bytes, Entry] | Entries, synced_at: float | None, at: Journal
    ) -> None:
        try:
            state = entries if isinstance(entries, Entries) else Entries(entries)
        except IndexCorrupt as e:  # (a state written by a bug): rebuilt by the next sync
            log.error("the index state in %s is not valid (%s); it will be rebuilt", self.dir, e)
            state, synced_at = Entries(), None
            self.corrupt = True
        self.entries = state
        self.paths = state.paths
        self.next_fid = state.top_fid + 1
        self.synced_at = synced_at
        self._journal = at

    def _follow_journal(self) -> bool:
        """Apply what another process appended to the journal since this one read it (the
        snapshot unchanged); False when only a whole reload can tell.

        A writer replaces the snapshot before it drops the journal: the journal read here is
        the one of the snapshot this process holds only if that snapshot is still in place
        after the read (a stamp taken before cannot tell: a compaction may come between)."""
        journal = self.folder.read(JOURNAL_FILE)
        at = Journal(self._journal.generation, self._journal.applied)
        if journal is None or len(journal) < at.applied:
            return False
        held = self._snapshot_id
        if held is None or _file_id(self.folder.stat(STATE_FILE)) != held:
            return False
        changes: dict[bytes, Entry | None] = {}  # (the records' changes, applied below)
        synced_at = replay(changes, self.synced_at, journal, at, keep_gone=True)
        if at.foreign:  # (records of another snapshot: not the journal this state follows)
            return False
        try:
            state = self.entries.changed(changes)  # (time of the changes, not of the tree)
        except IndexCorrupt:
            return False  # (read whole: judged there)
        self._set_state(state, synced_at, at)
        return True

    def _save_state(self, entries: Mapping[bytes, Entry], synced_at: float | None) -> None:
        """Replace the snapshot (a new generation), then drop the journal it holds."""
        generation = new_generation()
        data = encode_state(entries, synced_at, generation)
        self.folder.write(STATE_FILE, data)
        self._snapshot_id = _file_id(self.folder.stat(STATE_FILE))
        self.folder.remove(JOURNAL_FILE)
        self._snapshot_bytes = len(data)
        self._journal = Journal(generation)
        self._state_stamp = self._stamp()  # (our own write: nothing to reload)

    def _record(
        self,
        entries: Mapping[bytes, Entry],
        synced_at: float | None,
        changes: Mapping[bytes, Entry | None],
    ) -> None:
        """Make the state on disk ``entries``: append ``changes`` (what differs from the
        state on disk) to the journal while it has room, else write a snapshot."""
        at = self._journal
        room = journal_room(self._snapshot_bytes) - at.applied
        # a change of a large part of the tree (a build) is a snapshot: no record is made
        if len(changes) * ENTRY_BYTES > room or len(changes) * 8 > len(entries):
            self._save_state(entries, synced_at)
            return
        record = encode_record(at.generation, synced_at, changes.items())
        st = self.folder.stat(JOURNAL_FILE)
        on_disk = 0 if st is None else st.st_size
        fits = len(record) <= room
        # (appended beside a snapshot another process wrote since, a record of this one's
        # generation would be passed over by every reader)
        ours = self._snapshot_id is not None
        ours = ours and _file_id(self.folder.stat(STATE_FILE)) == self._snapshot_id
        if not (at.generation and at.whole and on_disk == at.applied and fits and ours):
            self._save_state(entries, synced_at)
            return
        self.folder.append(JOURNAL_FILE, record)
        at.applied += len(record)
        self._state_stamp = self._stamp()

    def _stamp(self) -> tuple[int, ...] | None:
        st = self.folder.stat(STATE_FILE)
        if st is None:
            return None
        # (each snapshot replaces the file: a new inode, even within one timestamp tick;
        # the journal only grows until a snapshot drops it)
        log_st = self.folder.stat(JOURNAL_FILE)
        tail = (-1, -1) if log_st is None else (log_st.st_ino, log_st.st_size)
        return (st.st_ino, st.st_mtime_ns, st.st_size, *tail)

    def reload(self) -> None:
        """Pick up commits (also another process's) and the state that goes with them."""
        stamp = self._stamp()
        # a sync of this process owns the state while it runs (its file ids included):
        # loading the file then would hand out ids again from an older counter
        if not self._sync_lock.acquire(blocking=False):
            return
        try:
            with self._lock:
                self.index.reload()
                if stamp != self._state_stamp:
                    # (whether the snapshot is still the one held: told by the follow itself)
                    if stamp is None or not self._follow_journal():
                        self._load_state()
                    self._state_stamp = stamp
                    if self.identity is not None and self._bound_identity() != self.identity:
                        self.foreign = True  # its writer now indexes another directory
        finally:
            self._sync_lock.release()


def _file_id(st: os.stat_result | None) -> tuple[int, int, int] | None:
    """Which file a snapshot is: each one replaces the last (a new inode while the old one is
    open; mtime and size besides, should a freed inode number come back)."""
    return None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size)
