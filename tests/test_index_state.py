"""The index state's journal: a small edit appends a record the size of its own entries
(whatever the size of the tree), readers replay it (a follower only what is new), a torn
tail or a journal an older snapshot left is never applied, and a full journal becomes a
snapshot."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rootgrep.index import state as state_mod
from rootgrep.index.plan import Q
from rootgrep.index.search_syntax import parse_search
from rootgrep.index.state import JOURNAL_FILE, STATE_FILE, read_state
from rootgrep.index.store import RootIndex
from rootgrep.index.writer import WriterBusy
from rootgrep.roots import Root, pin_root
from rootgrep.walker import list_files


def make_tree(root: Path, files: int) -> None:
    for i in range(files):
        d = root / f"d{i % 10}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}.txt").write_text(f"file {i}\nword{i % 7}\n")


@contextmanager
def built(tmp_path: Path, files: int, name: str = "tree") -> Iterator[tuple[Path, Root, RootIndex]]:
    """A tree of ``files`` files, pinned, and its index built (closed afterwards)."""
    root = tmp_path / name
    make_tree(root, files)
    r = pin_root(str(root))
    ix = RootIndex(str(tmp_path / f"cache-{name}"), r.path)
    try:
        ix.sync(r.fs)
        yield root, r, ix
    finally:
        ix.close()
        r.close()


def edit_and_fold(ix: RootIndex, fs, root: Path, n: int) -> None:  # type: ignore[no-untyped-def]
    """``n`` one-line edits, each folded as the watcher does (``sync(only=...)``)."""
    for k in range(n):
        rel = f"d{k % 10}/f{k:05d}.txt"
        with open(root / rel, "a") as f:
            f.write(f"edit {k}\n")
        st = ix.sync(fs, only=[rel.encode()])
        assert st.updated == 1


def test_bytes_written_per_edit_do_not_grow_with_the_tree(tmp_path: Path) -> None:
    grown = []
    for n in (40, 400):
        with built(tmp_path, n, f"tree{n}") as (root, r, ix):
            snap = os.stat(os.path.join(ix.dir, STATE_FILE))
            edit_and_fold(ix, r.fs, root, 10)
            after = os.stat(os.path.join(ix.dir, STATE_FILE))
            assert (after.st_ino, after.st_size) == (snap.st_ino, snap.st_size)  # not rewritten
            grown.append(os.stat(os.path.join(ix.dir, JOURNAL_FILE)).st_size)
            # what a reader makes of snapshot + journal is the state the writer holds
            got = read_state(os.path.join(ix.dir, STATE_FILE))
            assert got is not None and got[0] == ix.entries and got[1] == ix.synced_at
            reopened = RootIndex(os.path.dirname(ix.dir), r.path)
            assert reopened.entries == ix.entries and reopened.ready
            assert sorted(reopened.candidates(Q("all"))) == sorted(list_files(r.fs))
            reopened.close()
    assert grown[0] == grown[1] > 0  # the same ten edits: the same bytes, whatever the tree


def test_a_follower_replays_only_what_was_appended(tmp_path: Path) -> None:
    with built(tmp_path, 30) as (root, r, writer):
        follower = RootIndex(os.path.dirname(writer.dir), r.path)
        before = follower.entries
        (root / "d0" / "new.txt").write_text("a new file\n")
        (root / "d1" / "f00001.txt").unlink()
        writer.sync(r.fs, only=[b"d0/new.txt", b"d1/f00001.txt"])
        follower.reload()
        assert follower.entries is not before and follower.entries == writer.entries
        assert b"d0/new.txt" in follower.entries and b"d1/f00001.txt" not in follower.entries
        assert follower._journal.applied == os.stat(os.path.join(writer.dir, JOURNAL_FILE)).st_size
        assert sorted(follower.candidates(Q("all"))) == sorted(list_files(r.fs))
        follower.close()


def test_a_torn_journal_tail_is_not_applied_and_the_next_sync_repairs(tmp_path: Path) -> None:
    with built(tmp_path, 20) as (root, r, ix):
        edit_and_fold(ix, r.fs, root, 3)
        journal = os.path.join(ix.dir, JOURNAL_FILE)
        whole = Path(journal).read_bytes()
        snap = os.stat(os.path.join(ix.dir, STATE_FILE)).st_ino
        ix.close()
        # a crash in the middle of the last append (the commit's second record)
        Path(journal).write_bytes(whole[:-5])
        reopened = RootIndex(os.path.dirname(ix.dir), r.path)
        assert not reopened._journal.whole
        # the first record of the last edit stands: its file is pending, to be read again
        assert reopened.entries[b"d2/f00002.txt"].pending and not reopened.ready
        st = reopened.sync(r.fs)
        assert st.read == 1 and reopened.ready
        # the writer did not append after a torn tail: it wrote a snapshot first
        assert os.stat(os.path.join(reopened.dir, STATE_FILE)).st_ino != snap
        got = read_state(os.path.join(reopened.dir, STATE_FILE))
        assert got is not None and got[0] == reopened.entries
        assert sorted(reopened.candidates(Q("all"))) == sorted(list_files(r.fs))
        reopened.close()


def test_a_journal_of_an_older_snapshot_is_ignored(tmp_path: Path) -> None:
    with built(tmp_path, 20) as (root, r, ix):
        (root / "d0" / "late.txt").write_text("late\n")
        ix.sync(r.fs, only=[b"d0/late.txt"])
        journal = Path(ix.dir) / JOURNAL_FILE
        kept = journal.read_bytes()
        # a later sync, its journal made a snapshot, then a crash before the journal was
        # dropped: the old journal is still there beside the new snapshot
        (root / "d0" / "late.txt").unlink()
        ix.sync(r.fs)
        ix._save_state(ix.entries, ix.synced_at)  # (what a full journal leads to)
        assert not journal.exists()
        journal.write_bytes(kept)  # (the old journal: it adds late.txt back)
        got = read_state(os.path.join(ix.dir, STATE_FILE))
        assert got is not None and b"d0/late.txt" not in got[0]
        ix.close()
        reopened = RootIndex(os.path.dirname(ix.dir), r.path)
        assert b"d0/late.txt" not in reopened.entries and reopened.ready
        reopened.close()


def test_a_full_journal_becomes_a_snapshot(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(state_mod, "JOURNAL_MIN_BYTES", 400)
    with built(tmp_path, 20) as (root, r, ix):
        sizes = []
        for k in range(12):
            edit_and_fold(ix, r.fs, root, 1 + k % 2)
            j = Path(ix.dir) / JOURNAL_FILE
            sizes.append(j.stat().st_size if j.exists() else 0)
            assert sizes[-1] <= 400
        # it was dropped along the way (a snapshot written): the journal shrank at least once
        assert any(b < a for a, b in itertools.pairwise(sizes)), sizes
        got = read_state(os.path.join(ix.dir, STATE_FILE))
        assert got is not None and got[0] == ix.entries


def _compact_and_add(writer: RootIndex, fs, root: Path, name: str) -> None:  # type: ignore[no-untyped-def]
    """What another process may do at any moment: a full journal becomes a new snapshot
    (a new generation), then a new file is folded in (appended to the new journal)."""
    writer._save_state(writer.entries, writer.synced_at)
    (root / "d0" / name).write_text(f"{name} holds needle\n")
    writer.sync(fs, only=[f"d0/{name}".encode()])


def test_a_follower_opened_while_the_writer_compacts_follows_the_new_journal(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # the follower reads snapshot + journal, then (before it takes its stamp) the writer
    # replaces the snapshot: what it follows afterwards must be the new snapshot's journal
    with built(tmp_path, 30) as (root, r, writer):
        edit_and_fold(writer, r.fs, root, 2)
        real = RootIndex._load_state
        hooked = []

        def load_then_compact(self: RootIndex) -> None:
            real(self)
            if self is not writer and not hooked:
                hooked.append(1)
                _compact_and_add(writer, r.fs, root, "during.txt")

        monkeypatch.setattr(RootIndex, "_load_state", load_then_compact)
        follower = RootIndex(os.path.dirname(writer.dir), r.path)
        monkeypatch.setattr(RootIndex, "_load_state", real)
        assert hooked
        for k in range(3):  # (later folds: the follower must keep up with each)
            (root / "d1" / f"later{k}.txt").write_text("needle later\n")
            writer.sync(r.fs, only=[f"d1/later{k}.txt".encode()])
            follower.reload()
            assert follower.entries == writer.entries
            assert sorted(follower.candidates(Q("all"))) == sorted(list_files(r.fs))
        follower.close()


def test_a_follower_whose_journal_is_replaced_while_it_reloads_is_not_behind(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # the follower takes its stamp (the journal grew: follow it), then the writer replaces
    # snapshot and journal before the follower reads the journal: it must not apply the new
    # journal from its old position (records of another generation: skipped) while its
    # searcher already holds the new commit
    with built(tmp_path, 30) as (root, r, writer):
        follower = RootIndex(os.path.dirname(writer.dir), r.path)
        edit_and_fold(writer, r.fs, root, 2)
        real = RootIndex._stamp
        hooked = []

        def stamp_then_compact(self: RootIndex):  # type: ignore[no-untyped-def]
            got = real(self)
            if self is follower and not hooked:
                hooked.append(1)
                _compact_and_add(writer, r.fs, root, "during.txt")
            return got

        monkeypatch.setattr(RootIndex, "_stamp", stamp_then_compact)
        follower.reload()
        monkeypatch.setattr(RootIndex, "_stamp", real)
        assert hooked
        assert b"d0/during.txt" in follower.entries and follower.entries == writer.entries
        assert sorted(follower.candidates(Q("all"))) == sorted(list_files(r.fs))
        follower.close()


def test_two_processes_folding_in_turn_lose_none_of_each_others_files(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # two writers that do not hold the writer between syncs (two serve processes on one
    # cache, both folding): one's whole sync lands while the other walks, before it takes
    # the writer. The second must start from the first's state: no file lost from the
    # state, no file id handed out twice (a document of one file answering for another)
    with built(tmp_path, 30) as (root, r, a):
        b = RootIndex(os.path.dirname(a.dir), r.path)
        real = RootIndex._new_writer
        hooked = []

        def other_syncs_first(self: RootIndex):  # type: ignore[no-untyped-def]
            if self is a and not hooked:
                hooked.append(1)
                (root / "d1" / "b.txt").write_text("bonly\n")
                b.sync(r.fs, only=[b"d1/b.txt"])
            return real(self)

        monkeypatch.setattr(RootIndex, "_new_writer", other_syncs_first)
        (root / "d0" / "a.txt").write_text("aonly\n")
        a.sync(r.fs, only=[b"d0/a.txt"])
        monkeypatch.setattr(RootIndex, "_new_writer", real)
        assert hooked
        b.close()
        c = RootIndex(os.path.dirname(a.dir), r.path)
        try:
            assert b"d0/a.txt" in c.entries and b"d1/b.txt" in c.entries and c.ready
            assert sorted(c.candidates(Q("all"))) == sorted(list_files(r.fs))
            for word, rel in (("bonly", b"d1/b.txt"), ("aonly", b"d0/a.txt")):
                assert [h[1] for h in c.rank(parse_search(word)).hits] == [rel]
        finally:
            c.close()


def test_a_writer_is_let_go_only_once_the_state_names_its_commit(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # between a sync's commit and its second record (the commit's state) another process
    # syncs: it must not get the writer then (it would write a state the first one then
    # writes over, or the other way round: a file of one of them lost from the state)
    with built(tmp_path, 30) as (root, r, a):
        b = RootIndex(os.path.dirname(a.dir), r.path)
        real = RootIndex._record
        calls = []
        refused = []

        def other_syncs_between(self: RootIndex, *args):  # type: ignore[no-untyped-def]
            calls.append(self)
            if self is b and calls.count(b) == 2:  # (b's commit is made, its state not yet)
                (root / "d0" / "a.txt").write_text("aonly\n")
                try:
                    a.sync(r.fs, only=[b"d0/a.txt"])
                except WriterBusy:
                    refused.append(1)
            return real(self, *args)

        monkeypatch.setattr(RootIndex, "_record", other_syncs_between)
        (root / "d1" / "b.txt").write_text("bonly\n")
        b.sync(r.fs, only=[b"d1/b.txt"])
        monkeypatch.setattr(RootIndex, "_record", real)
        assert calls.count(b) >= 2
        if refused:  # (the writer was b's: a folds its file on its next sync)
            a.sync(r.fs, only=[b"d0/a.txt"])
        b.close()
        c = RootIndex(os.path.dirname(a.dir), r.path)
        try:
            assert b"d0/a.txt" in c.entries and b"d1/b.txt" in c.entries and c.ready
            assert sorted(c.candidates(Q("all"))) == sorted(list_files(r.fs))
            for word, rel in (("bonly", b"d1/b.txt"), ("aonly", b"d0/a.txt")):
                assert [h[1] for h in c.rank(parse_search(word)).hits] == [rel]
        finally:
            c.close()


def test_status_counts_what_the_state_holds_while_a_compaction_lands(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # `rootgrep status` reads the snapshot, then the journal: a compaction in between must
    # not leave it counting the old snapshot alone (the new journal's records are of
    # another generation: passed over)
    from rootgrep.index import cache as cache_mod

    with built(tmp_path, 30) as (root, r, writer):
        (root / "d2" / "x.txt").write_text("x\n")
        writer.sync(r.fs, only=[b"d2/x.txt"])  # (in the journal, not the snapshot)
        real = cache_mod.read_whole
        hooked = []

        def read_then_compact(fs, name):  # type: ignore[no-untyped-def]
            data = real(fs, name)
            if name == STATE_FILE.encode() and not hooked:
                hooked.append(1)
                _compact_and_add(writer, r.fs, root, "during.txt")
            return data

        monkeypatch.setattr(cache_mod, "read_whole", read_then_compact)
        monkeypatch.setattr(state_mod, "read_whole", read_then_compact)
        (entry,) = writer.cache.entries()
        files, size, pending, _bare, synced_at = entry.summary()
        assert hooked
        assert (files, size, pending) == (writer.file_count, writer.size_bytes, 0)
        assert synced_at == writer.synced_at


def test_a_reader_taking_over_appends_to_the_journal_it_followed(tmp_path: Path) -> None:
    with built(tmp_path, 30) as (root, r, writer):
        reader = RootIndex(os.path.dirname(writer.dir), r.path)
        edit_and_fold(writer, r.fs, root, 3)
        reader.reload()  # (follows the journal)
        assert reader.entries == writer.entries
        snap = os.stat(os.path.join(writer.dir, STATE_FILE)).st_ino
        size = os.stat(os.path.join(writer.dir, JOURNAL_FILE)).st_size
        # the writer goes away; the reader folds the next edits itself
        (root / "d3" / "new.txt").write_text("taken over\n")
        reader.sync(r.fs, only=[b"d3/new.txt"])
        assert os.stat(os.path.join(writer.dir, STATE_FILE)).st_ino == snap  # appended
        assert os.stat(os.path.join(writer.dir, JOURNAL_FILE)).st_size > size
        again = RootIndex(os.path.dirname(writer.dir), r.path)
        try:
            assert again.entries == reader.entries and again.ready
            assert sorted(again.candidates(Q("all"))) == sorted(list_files(r.fs))
        finally:
            again.close()
            reader.close()
