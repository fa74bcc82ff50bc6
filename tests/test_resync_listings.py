"""A re-sync lists again only the directories that changed (``walker.Listings``), and still
finds every change of the tree: each test changes a real tree after a re-sync that used
the kept listings, and checks the next re-sync against a walk that keeps nothing."""

from __future__ import annotations

import errno
import itertools
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rootgrep import confine
from rootgrep.index.cache import hide_if_present
from rootgrep.index.plan import plan
from rootgrep.index.store import RootIndex
from rootgrep.index.sync import SyncStats
from rootgrep.index.writer import WriterBusy
from rootgrep.roots import Root, pin_root
from rootgrep.walker import Listings, Walker, WalkOptions, list_files
from support import fd_count


@pytest.fixture
def settle_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing is kept as soon as its directory's last change is older than the read (the
    tests wait for the file system's clock to move on instead; see ``settled``)."""
    monkeypatch.setattr(Listings, "SETTLE_NS", 0)


def settled(tree: Path) -> None:
    """Wait until the file system's clock has moved past every change made to ``tree`` so
    far (its timestamps are coarser than the clock: a few ms), so a change made after
    this never leaves a time as it was. The loop is a hang guard, not a threshold."""
    newest = max(os.lstat(p).st_ctime_ns for p in [tree, *tree.rglob("*")])
    probe = tree.parent / "clock-probe"
    deadline = time.monotonic() + 10
    while True:
        probe.write_bytes(b"")
        if os.stat(probe).st_ctime_ns > newest and time.time_ns() > newest:
            return
        assert time.monotonic() < deadline, "the file system's clock did not move"
        time.sleep(0.001)


class Counted:
    """How many directories the walks list (every ``confine.scan_split``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        real = confine.scan_split

        def counting(fd: int) -> tuple[list[confine.Listed], list[confine.Listed], bool]:
            self.n += 1
            return real(fd)

        monkeypatch.setattr(confine, "scan_split", counting)

    def take(self) -> int:
        n, self.n = self.n, 0
        return n


def make_tree(base: Path) -> Path:
    tree = base / "tree"
    for d in ("a", "a/deep", "a/deep/er", "b", "c"):
        (tree / d).mkdir(parents=True)
    for rel in ("top.py", "a/one.py", "a/two.log", "a/deep/x.py", "a/deep/er/y.py",
                "a/deep/er/z.log", "b/keep.py", "b/same.py", "c/c.py"):  # fmt: skip
        (tree / rel).write_text(f"# {rel}\nvalue = 1\n")
    (tree / ".gitignore").write_text("*.tmp\n")
    return tree


class Synced:
    """A tree, its index, and the truth: what an index built from scratch would hold."""

    def __init__(self, base: Path, tree: Path) -> None:
        self.tree = tree
        self.root: Root = pin_root(str(tree))
        self.ix = RootIndex(str(base / "cache"), self.root.path)

    def sync(self) -> SyncStats:
        return self.ix.sync(self.root.fs)

    def truth(self) -> list[bytes]:
        return list_files(self.root.fs, max_file_size=self.ix.max_file_size)

    def held(self) -> list[bytes]:
        return sorted(self.ix.entries, key=lambda p: p.replace(b"/", b"\0"))


@pytest.fixture
def synced(tmp_path: Path, settle_now: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Synced]:
    s = Synced(tmp_path, make_tree(tmp_path))
    try:
        settled(s.tree)
        assert s.sync().added == 9
        s.sync()  # (the listings are kept from a second full walk on)
        yield s
    finally:
        s.root.close()


def test_an_unchanged_tree_is_listed_once_then_only_where_it_changed(
    tmp_path: Path, settle_now: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Synced(tmp_path, make_tree(tmp_path))
    try:
        settled(s.tree)
        counted = Counted(monkeypatch)
        assert s.sync().added == 9
        assert counted.take() == 6  # the root and its five directories
        s.sync()  # (the listings are kept from a second full walk on)
        assert counted.take() == 6
        again = s.sync()
        assert (again.read, again.added, again.removed) == (0, 0, 0)
        assert counted.take() == 0  # nothing listed again: every file only stat'ed
        (s.tree / "b" / "new.py").write_text("new = 1\n")
        third = s.sync()
        assert (third.read, third.added) == (1, 1)
        assert counted.take() == 1  # only b
        assert s.held() == s.truth()
    finally:
        s.root.close()


def test_a_directory_changed_just_before_the_walk_is_listed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within ``SETTLE_NS`` of its last change a directory's listing is not kept: a second
    change in the same tick of the file system's clock would leave its times as they
    were."""
    tree = make_tree(tmp_path)
    (tree / ".gitignore").unlink()  # (rules read again would make those below listed again)
    s = Synced(tmp_path, tree)
    monkeypatch.setattr(Listings, "SETTLE_NS", 3600 * 10**9)
    try:
        counted = Counted(monkeypatch)
        s.sync()
        s.sync()
        s.sync()
        assert counted.take() == 18  # each of the six directories, every time
    finally:
        s.root.close()


def _change_and_check(s: Synced, change: Callable[[Path], None], **want: int) -> SyncStats:
    stats = s.sync()  # (this one uses the listings kept by the build)
    assert (stats.read, stats.added, stats.removed) == (0, 0, 0)
    change(s.tree)
    stats = s.sync()
    assert s.held() == s.truth()
    for name, n in want.items():
        assert getattr(stats, name) == n, (name, stats)
    return stats


def test_a_file_edited_in_place_with_the_same_size_is_read_again(synced: Synced) -> None:
    path = synced.tree / "a" / "deep" / "er" / "y.py"
    before = path.read_text()
    _change_and_check(
        synced, lambda t: path.write_text(before.replace("1", "2")), read=1, updated=1
    )


def test_a_file_replaced_by_rename_is_read_again(synced: Synced) -> None:
    def replace(t: Path) -> None:
        (t / "b" / ".new").write_text("# b/same.py\nvalue = 1\n")  # same size, new inode
        os.rename(t / "b" / ".new", t / "b" / "same.py")

    _change_and_check(synced, replace, read=1, updated=1)


def test_added_and_removed_files_are_found(synced: Synced) -> None:
    def change(t: Path) -> None:
        (t / "a" / "deep" / "er" / "w.py").write_text("w = 1\n")
        (t / "c" / "c.py").unlink()

    _change_and_check(synced, change, added=1, removed=1)


def test_a_new_ignore_file_in_a_directory_applies_below_it(synced: Synced) -> None:
    _change_and_check(
        synced, lambda t: (t / "a" / "deep" / ".ignore").write_text("y.py\n"), removed=1
    )
    assert b"a/deep/er/y.py" not in synced.ix.entries


def test_an_ignore_file_edited_in_place_above_applies_deep_below(synced: Synced) -> None:
    """Editing the root's .gitignore changes no directory's mtime: its own key is checked,
    and every directory below gets the new rules."""
    path = synced.tree / ".gitignore"
    _change_and_check(synced, lambda t: path.write_text("*.tmp\ny.py\n"), removed=1)
    assert b"a/deep/er/y.py" not in synced.ix.entries
    _change_and_check(synced, lambda t: path.write_text("*.tmp\n"), added=1)
    assert b"a/deep/er/y.py" in synced.ix.entries


def test_an_ignore_file_edited_with_its_times_set_back_is_read_again(synced: Synced) -> None:
    path = synced.tree / "a" / ".gitignore"
    path.write_text("#\n")
    settled(synced.tree)
    synced.sync()
    st = os.stat(path)

    def change(t: Path) -> None:
        path.write_text("x.py\n")  # same size
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    _change_and_check(synced, change, removed=1)
    assert b"a/deep/x.py" not in synced.ix.entries


def test_a_directory_renamed_is_found_under_its_new_name(synced: Synced) -> None:
    _change_and_check(
        synced, lambda t: os.rename(t / "a" / "deep", t / "a" / "moved"), added=3, removed=3
    )
    assert b"a/moved/er/y.py" in synced.ix.entries


def test_two_directories_swapped_by_rename_are_found(synced: Synced) -> None:
    """b and c swap places: each name now holds the other directory (its own inode)."""

    def swap(t: Path) -> None:
        os.rename(t / "b", t / "tmp")
        os.rename(t / "c", t / "b")
        os.rename(t / "tmp", t / "c")

    _change_and_check(synced, swap, added=3, removed=3)


def test_a_symlink_swapped_for_a_directory_and_back(synced: Synced) -> None:
    def to_link(t: Path) -> None:
        os.rename(t / "c", t / "c-real")
        os.symlink("c-real", t / "c")

    _change_and_check(synced, to_link)  # c/c.py gone, c-real/c.py there

    def to_dir(t: Path) -> None:
        os.unlink(t / "c")
        os.rename(t / "c-real", t / "c")

    _change_and_check(synced, to_dir)
    assert b"c/c.py" in synced.ix.entries


def test_a_file_swapped_for_a_symlink_is_dropped(synced: Synced) -> None:
    def change(t: Path) -> None:
        os.unlink(t / "b" / "keep.py")
        os.symlink("same.py", t / "b" / "keep.py")

    _change_and_check(synced, change, removed=1)


def test_a_file_added_with_the_directory_times_set_back_is_found(synced: Synced) -> None:
    """``touch -d`` on the directory restores its mtime: its ctime still moved."""
    d = synced.tree / "a" / "deep"
    st = os.stat(d)

    def change(t: Path) -> None:
        (d / "hidden-by-time.py").write_text("h = 1\n")
        os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.stat(d).st_mtime_ns == st.st_mtime_ns

    _change_and_check(synced, change, added=1)


def test_a_mode_change_is_seen_as_a_fresh_walk_sees_it(synced: Synced) -> None:
    """A directory made unreadable and a file made unreadable: the re-sync answers what a
    walk that keeps nothing answers (for root, both are still read)."""

    def change(t: Path) -> None:
        os.chmod(t / "a" / "deep", 0)
        os.chmod(t / "b" / "keep.py", 0)

    try:
        _change_and_check(synced, change)
    finally:
        os.chmod(synced.tree / "a" / "deep", 0o755)
        os.chmod(synced.tree / "b" / "keep.py", 0o644)


def test_a_file_grown_past_the_size_limit_is_dropped(synced: Synced) -> None:
    synced.ix.max_file_size = 64
    _change_and_check(synced, lambda t: (t / "c" / "c.py").write_text("x" * 100), removed=1)


def _restore(path: Path, text: str, st: os.stat_result) -> None:
    """Write ``text`` back in place (same inode) and set the times back: the file's key
    (size, mtime_ns, inode) is again the one ``st`` had."""
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns and os.stat(path).st_ino == st.st_ino


def test_a_run_changed_by_a_partial_sync_is_checked_against_the_state_again(
    synced: Synced,
) -> None:
    """A full re-sync keeps each run of files it found as the state holds them; a sync of a
    few paths (the watcher's) that changes one of them must drop that run: here the file
    then gets its old key back, so only the state (which holds the edit) tells."""
    path = synced.tree / "b" / "keep.py"
    text, st = path.read_text(), os.stat(path)
    assert synced.sync().read == 0  # (the runs are kept now)
    path.write_text(text.replace("1", "9"))
    assert synced.ix.sync(synced.root.fs, only=[b"b/keep.py"]).updated == 1
    _restore(path, text, st)
    again = synced.sync()
    assert (again.read, again.updated) == (1, 1)
    assert synced.ix.entries[b"b/keep.py"].key[:3] == (st.st_size, st.st_mtime_ns, st.st_ino)


def test_a_run_changed_by_another_process_is_checked_against_its_state(
    synced: Synced, tmp_path: Path
) -> None:
    """The same, the edit indexed by another process's sync of the same index: the state
    this one loads from it holds the edit."""
    path = synced.tree / "b" / "keep.py"
    text, st = path.read_text(), os.stat(path)
    assert synced.sync().read == 0
    path.write_text(text.replace("1", "9"))
    other = RootIndex(str(tmp_path / "cache"), synced.root.path)
    assert other.sync(synced.root.fs).updated == 1
    _restore(path, text, st)
    again = synced.sync()
    assert (again.read, again.updated) == (1, 1)


def test_a_file_over_the_size_limit_that_shrinks_under_it_is_added(synced: Synced) -> None:
    """A run holding a file over the limit (in neither the keys nor the state) is kept
    too; the file's own stat still tells when it comes under the limit."""
    synced.ix.max_file_size = 64
    big = synced.tree / "b" / "big.py"
    big.write_text("x" * 100)
    settled(synced.tree)
    synced.sync()
    assert b"b/big.py" not in synced.ix.entries
    _change_and_check(synced, lambda t: big.write_text("x" * 10), added=1)


def test_runs_with_kept_listings_give_the_walk_and_other_walks_stay_whole(
    tmp_path: Path, settle_now: None
) -> None:
    """``Walker.runs`` from kept listings yields exactly the files of a walk that keeps
    nothing; the same walker's other walks (which need every entry) never use them."""
    tree = make_tree(tmp_path)
    settled(tree)
    root = pin_root(str(tree))
    try:
        fs, listings = root.fs, Listings()
        want = list_files(fs)
        for _ in range(2):
            w = Walker(fs, b"", WalkOptions(), listings=listings)
            assert [prefix + n for _fd, prefix, names in w.runs() for n in names] == want
        assert len(listings) == 6
        w = Walker(fs, b"", WalkOptions(), listings=listings)
        assert [f.path for f in w.files()] == want
        assert list(w.tree_entries(9)) == list(Walker(fs).tree_entries(9))
    finally:
        root.close()


def test_runs_with_kept_listings_on_a_deep_tree_hold_few_fds(
    tmp_path: Path, settle_now: None
) -> None:
    """A tree deeper than the fds a walk holds (``MAX_HELD_FDS``): the walks from kept
    listings close and reopen the directories along the path as a walk that keeps nothing
    does, give its files in its order, each run with its own directory's fd, and leave no
    fd open."""
    tree = tmp_path / "deep"
    here = tree
    for depth in range(150):
        here = here / "d"
        here.mkdir(parents=True)
        if depth % 7 == 0:
            (here / "f.py").write_text(f"f = {depth}\n")
    (tree / "top.py").write_text("t = 1\n")
    settled(tree)
    root = pin_root(str(tree))
    try:
        fs, listings = root.fs, Listings()
        want = list_files(fs)
        before = fd_count()
        for _ in range(3):
            got, peak = [], 0
            for fd, prefix, names in Walker(fs, b"", WalkOptions(), listings=listings).runs():
                peak = max(peak, fd_count() - before)
                keys = confine.stat_keys(fd, names, 1 << 20)  # (each run's fd is its own)
                assert keys is not None and None not in keys, prefix
                got.extend(prefix + n for n in names)
            assert got == want
            assert peak < 80  # (MAX_HELD_FDS and a few, not one per level)
            assert fd_count() == before
        assert len(listings) == 151
    finally:
        root.close()


def test_stat_keyed_keeps_only_regular_files_within_the_limit(tmp_path: Path) -> None:
    """One stat per name; a name gone, too large, a directory or a link has no key (a gone
    one makes the run's stats go name by name); ``stat_keys`` gives the same keys."""
    (tmp_path / "a").write_bytes(b"12345")
    (tmp_path / "big").write_bytes(b"x" * 11)
    (tmp_path / "d").mkdir()
    os.symlink("a", tmp_path / "l")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        sts, keys = confine.stat_keyed(fd, [b"a", b"big", b"d", b"l", b"gone"], 10)
        st = os.stat(tmp_path / "a")
        assert keys == [(5, st.st_mtime_ns, st.st_ino, st.st_ctime_ns), None, None, None, None]
        assert sts[0] is not None and sts[0].st_ino == st.st_ino and sts[1:] == [None] * 4
        sts, keys = confine.stat_keyed(fd, [b"a", b"big"], 10)  # (nothing gone: one pass)
        assert keys == [(5, st.st_mtime_ns, st.st_ino, st.st_ctime_ns), None] and sts[1] is None
        # the same keys without the stats (a kept run's check); None when a name is gone
        assert confine.stat_keys(fd, [b"a", b"big", b"d", b"l"], 10) == [*keys, None, None]
        assert confine.stat_keys(fd, [b"a", b"gone"], 10) is None
    finally:
        os.close(fd)


def test_an_ignore_file_that_failed_to_read_is_read_again(
    synced: Synced, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read error on an ignore file (a device's EIO, injected here: the tree is real) left
    its rules out of that walk, as a walk that keeps nothing would; the listing must not
    be kept with the rules missing, or the next re-sync keeps them missing for good."""
    ignore = synced.tree / "a" / "deep" / ".gitignore"
    ignore.write_text("x.py\n")
    settled(synced.tree)
    synced.sync()
    synced.sync()
    assert b"a/deep/x.py" not in synced.ix.entries
    ino = os.stat(ignore).st_ino
    real = confine.read_fd
    failed: list[int] = []

    def failing(fd: int, size_hint: int, max_bytes: int) -> tuple[bytes, bool]:
        if not failed and os.fstat(fd).st_ino == ino:
            failed.append(fd)
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, size_hint, max_bytes)

    monkeypatch.setattr(confine, "read_fd", failing)
    (synced.tree / "a" / "deep" / "new.py").write_text("n = 1\n")  # (a/deep listed again)
    settled(synced.tree)
    synced.sync()
    assert failed and b"a/deep/x.py" in synced.ix.entries  # (the rules could not be read)
    synced.sync()
    assert synced.held() == synced.truth()
    assert b"a/deep/x.py" not in synced.ix.entries


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], capture_output=True)


@pytest.fixture
def can_mount(tmp_path: Path) -> None:
    """Mounts need the privilege (root in a container that allows them): skipped otherwise."""
    probe = tmp_path / "mount-probe"
    probe.mkdir()
    try:
        _mount("-t", "tmpfs", "none", str(probe))
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("cannot mount here")
    _umount(probe)


def test_mounts_over_a_kept_directory_and_a_kept_ignore_file_are_seen(
    synced: Synced, tmp_path: Path, can_mount: None
) -> None:
    """A mount changes no directory's times (the parent's listing is the same): the key of
    the directory (or ignore file) opened beneath it is the mounted one's."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "m.py").write_text("m = 1\n")
    rules = tmp_path / "rules"
    rules.write_text("y.py\n")
    ignore = synced.tree / "a" / ".gitignore"
    ignore.write_text("#\n")
    settled(synced.tree)
    synced.sync()
    t = synced.tree
    try:
        _change_and_check(synced, lambda t: _mount("--bind", str(other), str(t / "c")), added=1)
        _change_and_check(synced, lambda t: _mount("-t", "tmpfs", "none", str(t / "a" / "deep")))
        assert not any(p.startswith(b"a/deep/") for p in synced.ix.entries)
        _change_and_check(synced, lambda t: _umount(t / "a" / "deep"), added=3)
        _change_and_check(synced, lambda t: _mount("--bind", str(rules), str(ignore)), removed=1)
        assert b"a/deep/er/y.py" not in synced.ix.entries
        _change_and_check(synced, lambda t: _umount(ignore), added=1)
        _change_and_check(synced, lambda t: _umount(t / "c"), added=1, removed=1)
    finally:
        for path in (t / "c", t / "a" / "deep", ignore):
            _umount(path)


def test_a_cache_dir_hidden_and_shown_again_inside_the_root(synced: Synced) -> None:
    """Another index's cache dir made inside the root and hidden (``confine.hide``), then
    shown again, then hidden again: the listings kept before are not what a listing is
    now (each time twice: the second sync uses what the first kept)."""
    cache = synced.tree / "b" / "cache"
    cache.mkdir()
    (cache / "state.py").write_text("s = 1\n")
    settled(synced.tree)
    for hide in (True, False, True, False):
        hidden = hide_if_present(str(cache)) if hide else None
        try:
            for _ in range(2):
                synced.sync()
                assert synced.held() == synced.truth()
                assert (b"b/cache/state.py" in synced.ix.entries) is not hide
        finally:
            if hidden is not None:
                confine.unhide(hidden)


def test_a_file_of_a_kept_run_hidden_and_shown_again(synced: Synced) -> None:
    """A file of a run found as kept (its directory unchanged, its key as the state holds
    it) becomes hidden (``confine.hide``: an audit log inside the root): it leaves the
    index though nothing about it changed, and comes back once shown again. The run's keys
    are compared without the hidden test (``confine.stat_keys``): only a listing kept
    under the same hidden identities may be trusted so (each time twice: the second sync
    uses what the first kept)."""
    path = synced.tree / "b" / "keep.py"
    assert synced.sync().read == 0  # (the runs are kept now)
    fd = os.open(path, os.O_RDONLY)
    try:
        for hide in (True, False, True, False):
            hidden = confine.hide(fd) if hide else None
            try:
                for _ in range(2):
                    synced.sync()
                    assert synced.held() == synced.truth()
                    assert (b"b/keep.py" in synced.ix.entries) is not hide
            finally:
                if hidden is not None:
                    confine.unhide(hidden)
    finally:
        os.close(fd)


def test_a_hidden_directory_mounted_over_a_kept_one_is_never_walked(
    synced: Synced, tmp_path: Path, can_mount: None
) -> None:
    """A hidden directory (another index's cache dir) bind-mounted over a directory whose
    listing is kept: the parent's listing is unchanged (a mount changes no times) and still
    shows the name, so only the open of the directory itself (``open_dir_keyed_at``'s
    test of the identity it opened) keeps the hidden files out."""
    cache = tmp_path / "other-cache"
    cache.mkdir()
    (cache / "state.py").write_text("SECRET_MARKER_7f3a = 1\n")
    hidden = hide_if_present(str(cache))
    assert hidden is not None
    target = synced.tree / "c"
    try:
        assert synced.sync().read == 0
        _mount("--bind", str(cache), str(target))
        for _ in range(2):
            synced.sync()
            assert not any(p.startswith(b"c/") for p in synced.ix.entries)
            assert synced.ix.candidates(plan("SECRET_MARKER_7f3a", regex=False)) == []
            w = Walker(synced.root.fs, b"", WalkOptions(), listings=synced.ix._listings)
            assert not any(p.startswith(b"c") for _fd, p, _names in w.runs())
    finally:
        _umount(target)
        confine.unhide(hidden)
    synced.sync()
    assert synced.held() == synced.truth()
    assert b"c/c.py" in synced.ix.entries


def test_a_hidden_file_mounted_over_a_file_of_a_kept_run_is_never_read(
    synced: Synced, tmp_path: Path, can_mount: None
) -> None:
    """A hidden file (an audit log) bind-mounted over a file of a run found as kept: no
    directory changed, the name stays; its key is now the hidden file's, so the run is
    checked again in full, and the hidden file is dropped, never read."""
    log = tmp_path / "audit.log"
    log.write_text("SECRET_MARKER_9c1e = 1\n")
    fd = os.open(log, os.O_RDONLY)
    hidden = confine.hide(fd)
    target = synced.tree / "b" / "keep.py"
    try:
        assert synced.sync().read == 0
        _mount("--bind", str(log), str(target))
        for _ in range(2):
            stats = synced.sync()
            assert stats.read == 0
            assert b"b/keep.py" not in synced.ix.entries
            assert synced.ix.candidates(plan("SECRET_MARKER_9c1e", regex=False)) == []
    finally:
        _umount(target)
        confine.unhide(hidden)
        os.close(fd)
    synced.sync()
    assert synced.held() == synced.truth()


def test_open_dir_keyed_at_refuses_a_hidden_directory(tmp_path: Path) -> None:
    """As ``open_dir_at`` does; the key is ``fstat_key``'s of the directory opened."""
    (tmp_path / "seen").mkdir()
    (tmp_path / "cache").mkdir()
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    hidden_fd = os.open(tmp_path / "cache", os.O_RDONLY | os.O_DIRECTORY)
    hidden = confine.hide(hidden_fd)
    try:
        fd, key = confine.open_dir_keyed_at(parent, b"seen")
        try:
            assert key == confine.fstat_key(fd)
        finally:
            os.close(fd)
        for opener in (confine.open_dir_at, confine.open_dir_keyed_at):
            with pytest.raises(FileNotFoundError):
                opener(parent, b"cache")
    finally:
        confine.unhide(hidden)
        os.close(hidden_fd)
        os.close(parent)


def test_a_sync_that_failed_mid_walk_leaves_nothing_stale(synced: Synced, tmp_path: Path) -> None:
    """The writer held by another (a daemon): the sync fails at its first change, its walk
    half done; the next one finds every change, the failed sync's and later ones."""
    holder = RootIndex(str(tmp_path / "cache"), synced.root.path, hold_writer=True)
    try:
        (synced.tree / "a" / "new.py").write_text("n = 1\n")
        (synced.tree / "c" / "c.py").write_text("changed = 2\n")
        settled(synced.tree)
        with pytest.raises(WriterBusy):
            synced.sync()
        (synced.tree / "b" / "later.py").write_text("later = 1\n")
    finally:
        holder.close()
    settled(synced.tree)
    stats = synced.sync()
    assert (stats.added, stats.updated) == (2, 1)
    assert synced.held() == synced.truth()


def test_directories_gone_are_dropped_from_the_kept_listings_and_runs(synced: Synced) -> None:
    """Bounded while directories churn: a complete walk keeps only what it walked."""
    for i in range(20):
        (synced.tree / "b" / f"t{i}").mkdir()
        (synced.tree / "b" / f"t{i}" / "f.py").write_text("f = 1\n")
    settled(synced.tree)
    synced.sync()
    synced.sync()
    assert len(synced.ix._listings) == 26
    assert sum(run[3].startswith(b"b/t") for run in synced.ix._runs.values()) == 20
    for i in range(20):
        shutil.rmtree(synced.tree / "b" / f"t{i}")
    settled(synced.tree)
    synced.sync()
    assert len(synced.ix._listings) == 6
    assert not any(run[3].startswith(b"b/t") for run in synced.ix._runs.values())
    assert synced.held() == synced.truth()


def test_one_listings_across_walks_with_other_options_and_starts(
    tmp_path: Path, settle_now: None
) -> None:
    """``Walker.runs`` with one ``Listings`` and the options (hidden, no_ignore, prune) or
    the start changed between walks: each walk's files are those of a walk keeping nothing."""
    tree = make_tree(tmp_path)
    (tree / ".hid").mkdir()
    (tree / ".hid" / "h.py").write_text("h = 1\n")
    (tree / "x.tmp").write_text("t = 1\n")
    (tree / "a" / ".ignore").write_text("one.py\n")
    settled(tree)
    root = pin_root(str(tree))
    try:
        fs, listings = root.fs, Listings()
        walks = [(b"", WalkOptions()), (b"", WalkOptions(hidden=True)),
                 (b"", WalkOptions(no_ignore=True)), (b"", WalkOptions()), (b"a", WalkOptions()),
                 (b"", WalkOptions(prune=frozenset([b"a/deep"]))), (b"a/deep", WalkOptions()),
                 (b"", WalkOptions(hidden=True, no_ignore=True)), (b"", WalkOptions(hidden=True))]  # fmt: skip
        for start, options in walks * 2:
            want = [f.path for f in Walker(fs, start, options).files()]
            w = Walker(fs, start, options, listings=listings)
            assert [p + n for _fd, p, names in w.runs() for n in names] == want, (start, options)
    finally:
        root.close()


@pytest.fixture
def coarse_fs(tmp_path: Path, can_mount: None) -> Iterator[Path]:
    """A file system that keeps times to the second (ext4 with 128-byte inodes), on a loop
    device: a tick long enough for a listing and two changes to fall within one."""
    img, mnt = tmp_path / "coarse.img", tmp_path / "coarse"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(16 << 20)
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", "-I", "128", str(img)], check=True,
                       capture_output=True)  # fmt: skip
        _mount("-o", "loop", str(img), str(mnt))
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no ext4 on a loop device here")
    try:
        yield mnt
    finally:
        _umount(mnt)


def test_a_change_in_the_same_second_as_the_listing_is_found(
    tmp_path: Path, coarse_fs: Path
) -> None:
    """On a file system with 1 s timestamps, a file added, the directory listed by a
    re-sync, and another file added, all within one second, leave the directory's key as
    it was at the listing: that listing must not be kept (``SETTLE_NS``), or the next
    re-sync misses the second file for good. (With ``SETTLE_NS`` set to 0 it does.)"""
    tree = make_tree(coarse_fs)
    s = Synced(tmp_path, tree)
    try:
        s.sync()
        s.sync()  # (the listings are kept from a second full walk on)
        d = tree / "b"
        deadline = time.monotonic() + 60  # (a hang guard: one try in a second is enough)
        for i in itertools.count():
            (d / f"first{i}.py").write_text("first = 1\n")
            key = confine.stat_result_key(os.stat(d))
            s.sync()  # (b listed again, within the second of that change)
            (d / f"second{i}.py").write_text("second = 1\n")
            if confine.stat_result_key(os.stat(d)) == key:
                break  # (the second change left b's key as the listing saw it)
            assert time.monotonic() < deadline, "never two changes within one tick"
        s.sync()
        assert f"b/second{i}.py".encode() in s.ix.entries
        assert s.held() == s.truth()
    finally:
        s.root.close()


def test_an_ignore_file_edited_twice_in_the_second_of_its_read_is_read_again(
    tmp_path: Path, coarse_fs: Path
) -> None:
    """The same for the root's .gitignore edited in place (same size, same inode) above
    every kept directory: the edit after the read leaves its key as the read saw it."""
    tree = make_tree(coarse_fs)
    ignore = tree / ".gitignore"
    s = Synced(tmp_path, tree)
    try:
        s.sync()
        s.sync()
        deadline = time.monotonic() + 60  # (a hang guard)
        while True:
            with open(ignore, "r+b") as f:  # (in place: the same inode, the same size)
                f.write(b"*.tmp\n")
            key = confine.stat_result_key(os.stat(ignore))
            s.sync()  # (the rules read within the second of that edit)
            assert b"a/deep/er/y.py" in s.ix.entries
            with open(ignore, "r+b") as f:
                f.write(b"y.py\n")
            if confine.stat_result_key(os.stat(ignore)) == key:
                break
            assert time.monotonic() < deadline, "never two edits within one tick"
        s.sync()
        assert b"a/deep/er/y.py" not in s.ix.entries
        assert s.held() == s.truth()
    finally:
        s.root.close()


def test_a_sync_failed_mid_walk_closes_its_walks_fds_at_once(
    synced: Synced, tmp_path: Path
) -> None:
    """A sync that fails mid-walk (another process holds the writer) closes the directory
    fds its walk held before the error reaches the caller (the manager follows the other
    writer inside its ``except WriterBusy``: as long as that writer lives)."""
    here = synced.tree / "a"
    for _ in range(20):
        here = here / "d"
        here.mkdir()
        (here / "f.py").write_text("x = 1\n")
    settled(synced.tree)
    synced.sync()
    synced.sync()
    (here / "f.py").write_text("x = 22\n")  # (a change deep down: the walk fails there)
    settled(synced.tree)
    holder = RootIndex(str(tmp_path / "cache"), synced.root.path, hold_writer=True)
    try:
        before = fd_count()
        try:
            synced.sync()
        except WriterBusy:
            assert fd_count() == before  # (inside the handler: no walk fd left open)
        else:
            raise AssertionError("the sync took the writer another index holds")
    finally:
        holder.close()


def test_an_unchanged_settled_tree_stats_no_run_into_stat_results(
    synced: Synced, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once its listings are kept, a re-sync of an unchanged tree checks every run by its
    keys in the walk (``confine.stat_keys``): no run reaches ``stat_keyed`` nor the sync's
    loop, and the progress it says counts every file all the same."""
    settled(synced.tree)
    synced.sync()
    calls: list[int] = []
    real = confine.stat_keyed

    def counting(
        dirfd: int, names: list[bytes], max_size: int, *more: Any
    ) -> tuple[list[os.stat_result | None], list[confine.FileKey | None]]:
        calls.append(len(names))
        return real(dirfd, names, max_size, *more)

    monkeypatch.setattr(confine, "stat_keyed", counting)
    said: list[int] = []
    stats = synced.ix.sync(synced.root.fs, progress=lambda done, _t, _m: said.append(done))
    assert calls == [] and stats.read == 0
    assert said and said[-1] == len(synced.truth())  # (every file, said once, by ``done``)
    (synced.tree / "b" / "same.py").write_text("value = 2\n")  # (the same size)
    assert synced.sync().updated == 1 and len(calls) == 1  # (only b/'s run)


def test_a_file_dropped_by_a_partial_sync_and_restored_is_added_again(synced: Synced) -> None:
    """A partial sync drops a file (grown past the limit); the file then gets its old key
    back (content and times restored, its directory untouched): the directory of a file the
    state no longer holds is marked as changed, so the next full re-sync adds it again."""
    synced.ix.max_file_size = 64
    p = synced.tree / "b" / "keep.py"
    text, st = p.read_text(), os.stat(p)
    p.write_text("x" * 100)
    assert synced.ix.sync(synced.root.fs, only=[b"b/keep.py"]).removed == 1
    _restore(p, text, st)
    assert synced.sync().added == 1
    assert synced.held() == synced.truth()


def test_the_directories_marked_changed_between_full_walks_stay_bounded(
    synced: Synced,
) -> None:
    """A daemon's watcher syncs between full walks may touch ever new directories: the
    set of directories whose kept runs no longer hold never outgrows the runs kept (then
    both are dropped: the next full walk checks every run against the state)."""
    settled(synced.tree)
    synced.sync()
    runs = len(synced.ix._runs)
    assert runs > 0
    for i in range(3 * runs):
        d = synced.tree / "tmp" / f"job{i}"
        d.mkdir(parents=True)
        (d / "out.py").write_text("y = 1\n")
        rel = os.fsencode(d.relative_to(synced.tree)) + b"/out.py"
        synced.ix.sync(synced.root.fs, only=[rel])
        shutil.rmtree(d)
        synced.ix.sync(synced.root.fs, only=[rel])
        assert len(synced.ix._runs_dirty) <= max(1, len(synced.ix._runs))
    settled(synced.tree)
    synced.sync()
    assert synced.held() == synced.truth()


def test_a_walk_interrupted_while_entering_a_kept_directory_closes_its_fd_once(
    tmp_path: Path, settle_now: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception while an unchanged directory is entered (an interrupt, no memory) closes
    its fd once: a second close could close another thread's file of the same number."""
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "f.py").write_text("x\n")
    (tree / "g.py").write_text("y\n")
    settled(tree)
    root = pin_root(str(tree))
    try:
        kept = Listings()
        for _ in range(2):
            list(Walker(root.fs, b"", WalkOptions(), listings=kept).runs())

        class Raising(dict[bytes, object]):
            def __setitem__(self, k: bytes, v: object) -> None:
                if k == b"sub":
                    raise KeyboardInterrupt
                super().__setitem__(k, v)

        begin = Listings._begin

        def raising_begin(self: Listings, scope: object) -> None:
            begin(self, scope)  # type: ignore[arg-type]
            self.fresh = Raising()  # type: ignore[assignment]

        monkeypatch.setattr(Listings, "_begin", raising_begin)
        closed: list[int] = []
        real_close = os.close

        def counting_close(fd: int) -> None:
            closed.append(fd)
            real_close(fd)

        monkeypatch.setattr(os, "close", counting_close)
        with pytest.raises(KeyboardInterrupt):
            list(Walker(root.fs, b"", WalkOptions(), listings=kept).runs())
        monkeypatch.setattr(os, "close", real_close)
        assert len(closed) == len(set(closed)), closed
    finally:
        root.close()
