"""The inotify tree watcher: it hears changes only (never reads), follows directories that
appear, move or go away, skips what the index does not walk, and says when it lost events."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rootgrep import confine
from rootgrep.confine import Beneath
from rootgrep.index.watch import TreeWatcher


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    for rel in ["a/one.py", "a/b/two.py", "c/three.py", ".hidden/h.py", "ignored/i.py", "top.py"]:
        (r / rel).parent.mkdir(parents=True, exist_ok=True)
        (r / rel).write_text("x = 1\n")
    (r / ".gitignore").write_text("ignored/\n")
    return r


@pytest.fixture
def watcher(tree: Path) -> Iterator[TreeWatcher]:
    fs = Beneath.pin(str(tree))
    w = TreeWatcher(fs)
    w.add(b"")
    yield w
    w.close()
    fs.close()


def gather(w: TreeWatcher, done: Callable[[set[bytes]], bool], seconds: float = 10.0) -> set[bytes]:
    """Marks from polls until ``done(marks)`` holds (or time is up): on a busy machine one
    change's events may come in more than one gather."""
    marks: set[bytes] = set()
    deadline = time.monotonic() + seconds
    while True:
        marks |= w.poll(0.05)
        if done(marks) or time.monotonic() > deadline:
            return marks


def seen(w: TreeWatcher, want: set[bytes]) -> set[bytes]:
    """Marks from polls until all of ``want`` were marked."""
    return gather(w, lambda m: want <= m)


def test_reading_files_makes_no_event(tree: Path, watcher: TreeWatcher) -> None:
    for _ in range(3):
        for rel in ["a/one.py", "a/b/two.py", "c/three.py", "top.py"]:
            d, name = watcher.fs.open_parent(confine.split_relpath(rel))
            try:
                assert confine.read_searchable_at(d, name, 1 << 20) == b"x = 1\n"
            finally:
                os.close(d)
        os.listdir(tree / "a")
    assert watcher.poll(0.1) == set() and watcher.events == 0
    (tree / "a" / "b" / "two.py").write_text("y = 2\n")
    assert seen(watcher, {b"a/b/two.py"}) == {b"a/b/two.py"}


def test_creations_deletions_and_renames_of_files(tree: Path, watcher: TreeWatcher) -> None:
    (tree / "c" / "new.py").write_text("n\n")
    (tree / "a" / "one.py").unlink()
    os.rename(tree / "top.py", tree / "c" / "moved.py")
    want = {b"c/new.py", b"a/one.py", b"top.py", b"c/moved.py"}
    assert seen(watcher, want) == want


def test_a_new_directory_is_walked_and_watched(tree: Path, watcher: TreeWatcher) -> None:
    # made in one go: its files exist before any watch on it can
    (tree / "n" / "m" / "deep").mkdir(parents=True)
    (tree / "n" / "m" / "deep" / "f.py").write_text("f\n")
    (tree / "n" / "g.py").write_text("g\n")
    seen(watcher, {b"n", b"n/m/deep/f.py", b"n/g.py"})
    (tree / "n" / "m" / "deep" / "f.py").write_text("changed\n")
    assert seen(watcher, {b"n/m/deep/f.py"}) == {b"n/m/deep/f.py"}


def test_moved_directories_are_followed(tree: Path, tmp_path: Path, watcher: TreeWatcher) -> None:
    os.rename(tree / "a", tree / "z")
    want = {b"a", b"z", b"z/one.py", b"z/b/two.py"}
    assert want <= seen(watcher, want)
    (tree / "z" / "b" / "two.py").write_text("after the move\n")
    assert seen(watcher, {b"z/b/two.py"}) == {
        b"z/b/two.py"
    }  # the watch follows the directory's new name
    os.rename(tree / "z", tmp_path / "outside")  # moved out: forgotten
    assert seen(watcher, {b"z"}) == {b"z"}
    (tmp_path / "outside" / "one.py").write_text("not ours\n")
    assert watcher.poll(0.2) == set()


def test_a_deleted_directory_is_reported(tree: Path, watcher: TreeWatcher) -> None:
    shutil.rmtree(tree / "a")
    assert b"a" in seen(watcher, {b"a"})
    assert not any(d == b"a" or d.startswith(b"a/") for d in watcher.dirs.values())


def test_hidden_and_ignored_directories_are_not_watched(tree: Path, watcher: TreeWatcher) -> None:
    (tree / ".hidden" / "h.py").write_text("secret change\n")
    (tree / "ignored" / "i.py").write_text("ignored change\n")
    assert watcher.poll(0.2) == set() and watcher.events == 0
    assert sorted(watcher.dirs.values()) == [b"", b"a", b"a/b", b"c"]


def test_lost_events_are_reported_as_an_overflow(tree: Path, watcher: TreeWatcher) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    fds = [os.open(tree / name, os.O_WRONLY) for name in ("top.py", "c/three.py")]
    try:
        for i in range(limit + 100):  # alternate files: identical events in a row coalesce
            os.write(fds[i % 2], b"x")
    finally:
        for fd in fds:
            os.close(fd)
    gather(watcher, lambda _: watcher.overflowed)
    assert watcher.overflowed


def test_a_swap_of_two_directories_keeps_both_watched(tree: Path, watcher: TreeWatcher) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    rename_exchange, at_fdcwd = 2, -100
    assert libc.renameat2(at_fdcwd, bytes(tree / "a"), at_fdcwd, bytes(tree / "c"),
                          rename_exchange) == 0  # fmt: skip
    want = {b"a", b"c", b"a/three.py", b"c/one.py", b"c/b/two.py"}
    assert want <= seen(watcher, want)
    assert sorted(watcher.dirs.values()) == [b"", b"a", b"c", b"c/b"]
    (tree / "a" / "three.py").write_text("edit\n")
    (tree / "c" / "b" / "two.py").write_text("edit\n")
    assert seen(watcher, {b"a/three.py", b"c/b/two.py"}) == {b"a/three.py", b"c/b/two.py"}


def test_a_directory_whose_attributes_change_is_looked_at_again(
    tree: Path, watcher: TreeWatcher
) -> None:
    # e.g. made readable again: its files are marked, so a fold can put them back
    os.chmod(tree / "a", 0o700)
    want = {b"a", b"a/one.py", b"a/b/two.py"}
    assert want <= seen(watcher, want)


def test_an_ignore_file_edit_looks_again_below_it(tree: Path, watcher: TreeWatcher) -> None:
    (tree / "a" / "b" / "gen").mkdir()
    (tree / "a" / "b" / "gen" / "g.py").write_text("g\n")
    (tree / "a" / ".gitignore").write_text("b/gen/\n")
    seen(watcher, {b"a/.gitignore"})
    assert b"a/b/gen" not in watcher.dirs.values()  # ignored: not watched
    (tree / "a" / ".gitignore").write_text("")  # un-ignored: watched, and its files marked
    want = {b"a", b"a/b/gen/g.py"}
    assert want <= seen(watcher, want)
    assert b"a/b/gen" in watcher.dirs.values()
    (tree / ".gitignore").write_text("")  # the root's rules: a full re-sync is asked for
    gather(watcher, lambda _: watcher.overflowed)
    assert watcher.overflowed and b"ignored" in watcher.dirs.values()


def test_a_file_written_without_pause_does_not_hold_the_watcher(
    tree: Path, watcher: TreeWatcher
) -> None:
    import threading

    stop = threading.Event()

    def write() -> None:  # every 2 ms until told to stop (at most 60 s)
        end = time.monotonic() + 60
        with open(tree / "top.py", "a") as f:
            while not stop.is_set() and time.monotonic() < end:
                f.write("x")
                f.flush()
                time.sleep(0.002)

    t = threading.Thread(target=write)
    t.start()
    try:
        assert b"top.py" in watcher.poll(5)
        assert t.is_alive()  # the poll came back while the writes were still going on
    finally:
        stop.set()
        t.join()


def test_after_lost_events_the_watches_are_made_again(tree: Path, watcher: TreeWatcher) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    fds = [os.open(tree / name, os.O_WRONLY) for name in ("top.py", "c/three.py")]
    try:
        for i in range(limit + 100):
            os.write(fds[i % 2], b"x")
    finally:
        for fd in fds:
            os.close(fd)
    (tree / "late").mkdir()  # its creation is lost in the overflow
    gather(watcher, lambda _: watcher.overflowed)
    assert watcher.overflowed and b"late" in watcher.dirs.values()
    (tree / "late" / "f.py").write_text("f\n")
    assert b"late/f.py" in seen(watcher, {b"late/f.py"})
