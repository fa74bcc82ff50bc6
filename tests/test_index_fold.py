"""A small commit costs what it changes, not what the index holds: a sync of one edited file
makes the next version of the entries (and of the file-id map readers use with them) from
the changes alone, and what it allocates does not grow with the tree; readers see the new
version and its map together. The versions (``state.Entries``) keep their invariants: one
path per file id, the counts readers ask for."""

from __future__ import annotations

import os
import shutil
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rootgrep.index.plan import Q, plan
from rootgrep.index.state import FOLD_MIN, Entries, Entry, IndexCorrupt
from rootgrep.index.store import RootIndex
from rootgrep.roots import Root, pin_root
from rootgrep.walker import list_files, order_key


def make_tree(root: Path, files: int) -> None:
    for i in range(files):
        d = root / f"d{i % 20}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}.txt").write_text(f"file {i}\nword{i % 7}\n")


@contextmanager
def built(tmp_path: Path, files: int) -> Iterator[tuple[Path, Root, RootIndex]]:
    root = tmp_path / f"tree{files}"
    make_tree(root, files)
    r = pin_root(str(root))
    ix = RootIndex(str(tmp_path / f"cache{files}"), r.path)
    try:
        ix.sync(r.fs)
        yield root, r, ix
    finally:
        ix.close()
        r.close()


def recount(entries: Entries) -> tuple[dict[int, bytes], int, int, int]:
    """What a version's kept figures must be, counted from its entries."""
    plain = dict(entries.items())
    paths = {e.fid: p for p, e in plain.items() if e.fid}
    files = sum(1 for e in plain.values() if e.fid)
    size = sum(e.size for e in plain.values() if e.fid)
    pending = sum(1 for e in plain.values() if e.pending)
    return paths, files, size, pending


def test_a_small_edit_allocates_the_same_whatever_the_tree(tmp_path: Path) -> None:
    """Ten one-line edits, each folded as the watcher does: the memory the syncs allocate at
    their peak is the same for 600 files as for 6,000 (a copy of the entries, or a file-id
    map made from all of them, would be ten times larger at 6,000)."""
    peaks = []
    for n in (600, 6000):
        with built(tmp_path, n) as (root, r, ix):
            worst = 0
            for k in range(10):
                i = k * 37
                rel = f"d{i % 20}/f{i:05d}.txt"
                with open(root / rel, "a") as f:
                    f.write(f"edit_{k}_mark\n")
                tracemalloc.start()
                try:
                    st = ix.sync(r.fs, only=[rel.encode()])
                    worst = max(worst, tracemalloc.get_traced_memory()[1])
                finally:
                    tracemalloc.stop()
                assert (st.read, st.updated) == (1, 1)
                assert ix.candidates(plan(f"edit_{k}_mark", regex=False)) == [rel.encode()]
            peaks.append(worst)
            assert ix.paths is ix.entries.paths  # (the pair readers take together)
            assert recount(ix.entries) == (
                dict(ix.paths.items()), ix.file_count, ix.size_bytes, 0
            )  # fmt: skip
            assert sorted(ix.candidates(Q("all"))) == sorted(list_files(r.fs))
    small, large = peaks
    # (a dict of 6,000 entries alone takes about 300 KB; the edits' own work ~ tens of KB)
    assert large < small + 100_000, peaks


def test_a_new_file_and_a_moved_directory_are_followed_without_a_full_sync(
    tmp_path: Path,
) -> None:
    """The dirty set names a new directory's new file, then that directory moved away (and
    then a directory of the tree that gained a file): their files leave the index (the
    writer keeps, per directory, how many entries lie below it, and carries it from version
    to version)."""
    with built(tmp_path, 60) as (root, r, ix):
        (root / "new" / "deep").mkdir(parents=True)
        (root / "new" / "deep" / "n.txt").write_text("fresh_word\n")
        st = ix.sync(r.fs, only=[b"new/deep/n.txt"])
        assert st.added == 1 and b"new/deep/n.txt" in ix.entries
        (root / "d3" / "extra.txt").write_text("more\n")
        assert ix.sync(r.fs, only=[b"d3/extra.txt"]).added == 1
        shutil.move(str(root / "new"), str(tmp_path / "away"))
        st = ix.sync(r.fs, only=[b"new"])
        assert st.removed == 1 and b"new/deep/n.txt" not in ix.entries
        (root / "d3").rename(root / "d3-moved")
        st = ix.sync(r.fs, only=[b"d3"])
        assert st.removed == 4  # (three files of the tree, and extra.txt)
        assert not [p for p in ix.entries if p.startswith(b"d3/")]
        assert ix.sync(r.fs).added == 4  # (found at their new place by a walk)
        assert sorted(ix.entries) == sorted(list_files(r.fs))


def test_an_edit_through_one_name_of_a_hard_link_reaches_the_other(tmp_path: Path) -> None:
    with built(tmp_path, 20) as (root, r, ix):
        os.link(root / "d1" / "f00001.txt", root / "d2" / "linked.txt")
        assert ix.sync(r.fs, only=[b"d2/linked.txt"]).added == 1
        with open(root / "d1" / "f00001.txt", "a") as f:
            f.write("through_one_name\n")
        st = ix.sync(r.fs, only=[b"d1/f00001.txt"])  # (the watcher names only this one)
        assert st.updated == 2
        got = ix.candidates(plan("through_one_name", regex=False))
        assert got == [b"d1/f00001.txt", b"d2/linked.txt"]


def test_versions_keep_one_path_per_file_id_and_their_counts() -> None:
    base = Entries(
        {b"a": Entry(1, 10, 1, 100, 1), b"b": Entry(2, 20, 1, 101, 1), b"c": Entry(0, 5, 1, 9, 1)}
    )
    # a file id another path holds: refused, whichever way it comes
    with pytest.raises(IndexCorrupt):
        base.changed({b"d": Entry(1, 1, 1, 1, 1)})
    with pytest.raises(IndexCorrupt):
        base.changed({b"d": Entry(7, 1, 1, 1, 1), b"e": Entry(7, 1, 1, 2, 1)})
    with pytest.raises(IndexCorrupt):
        Entries({b"x": Entry(3, 1, 1, 1, 1), b"y": Entry(3, 1, 1, 2, 1)})
    # ... unless that path lets it go in the same change (a rename keeps its id)
    moved = base.changed({b"a": None, b"a2": Entry(1, 10, 1, 100, 1, pending=True)})
    assert dict(moved.paths.items()) == {1: b"a2", 2: b"b"}
    assert recount(moved) == ({1: b"a2", 2: b"b"}, 2, 30, 1)
    assert b"a" not in moved and moved.get(b"a") is None and len(moved) == 3
    assert dict(base.items()) == {b"a": base[b"a"], b"b": base[b"b"], b"c": base[b"c"]}
    # many versions, past a fold of the overlay: the same as a dict changed the same way
    plain = dict(base.items())
    cur = base
    for i in range(FOLD_MIN + 50):
        key = b"f%d" % (i % 3000)
        if i % 5 == 4:
            change: Entry | None = None
            plain.pop(key, None)
        else:
            change = Entry(100 + i, i, i, i, i)
            plain[key] = change
        cur = cur.changed({key: change})
        assert len(cur) == len(plain)
    assert dict(cur.items()) == plain and cur == plain and set(cur) == set(plain)
    assert recount(cur) == (dict(cur.paths.items()), cur.files, cur.bytes, cur.pending)
    assert cur.top_fid == 100 + FOLD_MIN + 49


def test_a_selective_grep_after_an_edit_sorts_only_its_hits(tmp_path: Path) -> None:
    """Right after a commit, a query with few hits answers in path order from those hits
    alone (the order of every indexed path is made again only for a query with many)."""
    with built(tmp_path, 600) as (root, r, ix):
        everything = ix.candidates(Q("all"))
        assert everything == sorted(everything, key=order_key)
        with open(root / "d5" / "f00125.txt", "a") as f:
            f.write("file 12 again\n")
        assert ix.sync(r.fs, only=[b"d5/f00125.txt"]).updated == 1
        got = ix.candidates(plan("file 12", regex=False))
        assert ix._order is not None and ix._order[0] is not ix.paths  # (not made again)
        want = [p for p in everything if b"file 12" in (root / os.fsdecode(p)).read_bytes()]
        assert got == want and len(got) == 11  # (12 and 120-129, in path order)
        many = ix.candidates(plan("word3", regex=False))  # (86 of 600: the whole order)
        assert ix._order[0] is ix.paths
        assert many == [p for p in everything if b"word3" in (root / os.fsdecode(p)).read_bytes()]
