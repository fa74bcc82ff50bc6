"""A file system mounted inside a watched root, or unmounted from it, after its watches were
made: no inotify event says so (the watches are on the inodes the mount covers), yet grep
answered from the index must see the mount's files, and the covered ones again once it is
gone. The mount table is polled; a root with a mount point below it re-syncs in full.

The mounts are real (tmpfs); without the right to mount, these tests are skipped."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootgrep import confine
from rootgrep.service import Service, Token
from support import rg_matches, wait_until, watched


def mount_tmpfs(where: Path) -> None:
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "rootgrep-test", str(where)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")


def unmount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    made: list[Path] = []
    yield made
    for where in reversed(made):
        unmount(where)


def grep_from_index(svc: Service, root: object, pattern: str) -> list[tuple[str, int]]:
    res = svc.grep([root], Token(), pattern=pattern)  # type: ignore[list-item]
    return sorted((m.path, m.line) for m in res.matches) if res.index_used else []


def settled(manager: object, root_path: str) -> bool:
    ix = manager.get(root_path)  # type: ignore[attr-defined]
    return ix.answers_grep() and ix.answers_exactly() and not ix.dirty


@pytest.mark.parametrize("name", ["sub", "odd name\\with\tescapes"])
def test_a_file_system_mounted_inside_a_watched_root_is_watched_and_synced(
    tmp_path: Path, mounts: list[Path], name: str
) -> None:
    """The mount point's name is escaped in the mount table (space, tab, backslash): it
    must still be known for a point below the root."""
    tree = tmp_path / "tree"
    sub = tree / "pkg" / name
    sub.mkdir(parents=True)
    (sub / "covered.py").write_text("MOUNTMARK = 'covered'\n")
    (tree / "top.py").write_text("MOUNTMARK = 'top'\n")
    with watched(tree, tmp_path / "cache") as (r, manager, svc):
        assert grep_from_index(svc, r, "MOUNTMARK") == sorted(rg_matches(tree, "MOUNTMARK"))
        mount_tmpfs(sub)
        mounts.append(sub)
        (sub / "inside.py").write_text("x = 1\nMOUNTMARK = 'inside'\n")
        want = sorted(rg_matches(tree, "MOUNTMARK"))
        assert (f"pkg/{name}/inside.py", 2) in want and len(want) == 2  # (the oracle agrees)
        # every answer is exact, whether live (the re-sync pending) or from the index
        res = svc.grep([r], Token(), pattern="MOUNTMARK")
        assert sorted((m.path, m.line) for m in res.matches) == want
        wait_until(lambda: settled(manager, r.path), what="the re-sync after the mount")
        assert grep_from_index(svc, r, "MOUNTMARK") == want
        # the mount's own directories are watched now: a file made there is heard
        (sub / "later.py").write_text("MOUNTMARK = 'later'\n")
        want = sorted(rg_matches(tree, "MOUNTMARK"))
        assert len(want) == 3
        wait_until(lambda: grep_from_index(svc, r, "MOUNTMARK") == want and settled(
            manager, r.path), what="the file made in the mount")  # fmt: skip
        unmount(sub)
        mounts.remove(sub)
        want = sorted(rg_matches(tree, "MOUNTMARK"))
        assert (f"pkg/{name}/covered.py", 1) in want and len(want) == 2
        res = svc.grep([r], Token(), pattern="MOUNTMARK")
        assert sorted((m.path, m.line) for m in res.matches) == want
        wait_until(lambda: settled(manager, r.path), what="the re-sync after the unmount")
        assert grep_from_index(svc, r, "MOUNTMARK") == want


def test_a_mount_outside_every_root_makes_no_re_sync(tmp_path: Path, mounts: list[Path]) -> None:
    """A mount elsewhere (a container starting) must not make every root re-sync; one whose
    name only begins like the root's (``tree2`` beside ``tree``) is elsewhere too."""
    tree, beside = tmp_path / "tree", tmp_path / "tree2"
    tree.mkdir()
    beside.mkdir()
    (tree / "a.py").write_text("x = 1\n")
    with watched(tree, tmp_path / "cache") as (r, manager, _svc):
        ix = manager.get(r.path)
        wait_until(lambda: settled(manager, r.path), what="the build")
        syncs = ix.index.synced_at
        mount_tmpfs(beside)
        mounts.append(beside)
        generation = confine.refresh_mounts()[0]
        watcher = ix.watcher
        wait_until(lambda: watcher.inotify._mount_generation >= generation,
                   what="the watcher's look at the table")  # fmt: skip
        assert ix.catch_up()  # (what the look said is handed over: a loss would be heard)
        assert not ix.rescan.is_set() and ix.index.synced_at == syncs


def test_mount_table_names_are_unescaped() -> None:
    table = (b"22 1 0:21 / / rw - ext4 /dev/root rw\n"
             b"40 22 0:35 / /t/a\\040b\\011c\\134d rw - tmpfs x rw\n"
             b"41 22 0:36 / /t/not\\9escape rw - tmpfs x rw\n")  # fmt: skip
    assert confine.parse_mount_table(table) == {
        (22, b"/"),
        (40, b"/t/a b\tc\\d"),
        (41, b"/t/not\\9escape"),
    }


def test_a_query_that_finds_the_table_taken_by_the_reader_waits_for_its_verdict(
    tmp_path: Path, mounts: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared reader read the changed table and is still telling its watchers; a grep's
    catch-up meanwhile found no change left to take and answered from the index, without
    the mount's files (the adversarial review's race, held open here)."""
    import threading

    from rootgrep.index.watch import TreeWatcher

    tree = tmp_path / "tree"
    sub = tree / "sub"
    sub.mkdir(parents=True)
    (tree / "top.py").write_text("MOUNTMARK = 'top'\n")
    inside, release = threading.Event(), threading.Event()
    real = TreeWatcher.beneath_root

    def beneath_root(self: TreeWatcher, points: set[bytes]) -> bool:
        if threading.current_thread().name == "rootgrep-inotify":
            inside.set()
            release.wait(10)  # (the reader, held while it tells the watchers)
        return real(self, points)

    with watched(tree, tmp_path / "cache") as (r, manager, svc):
        wait_until(lambda: settled(manager, r.path), what="the build")
        monkeypatch.setattr(TreeWatcher, "beneath_root", beneath_root)
        mount_tmpfs(sub)
        mounts.append(sub)
        (sub / "inside.py").write_text("MOUNTMARK = 'inside'\n")
        try:
            assert inside.wait(10)  # (a hang guard)
            threading.Timer(0.2, release.set).start()
            res = svc.grep([r], Token(), pattern="MOUNTMARK")
        finally:
            release.set()
        want = sorted(rg_matches(tree, "MOUNTMARK"))
        assert len(want) == 2 and sorted((m.path, m.line) for m in res.matches) == want


def test_a_mount_said_while_the_reader_settles_other_events_still_re_makes_the_watches(
    tmp_path: Path, mounts: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader settled a batch (no loss then), a query's look at the mount table said
    "lost" meanwhile, and the reader took that loss as its own: the full re-sync ran but the
    watches were never made again, so the mount's own directory stayed unwatched and a file
    written there later was never heard (the adversarial review's second race)."""
    import threading

    from rootgrep.index.watch import TreeWatcher

    tree = tmp_path / "tree"
    sub = tree / "sub"
    sub.mkdir(parents=True)
    (tree / "top.py").write_text("MOUNTMARK = 'top'\n")
    armed, inside, release = threading.Event(), threading.Event(), threading.Event()
    real = TreeWatcher._settle

    def settle(self: TreeWatcher, lost: bool | None = None) -> set[bytes]:
        out = real(self, lost)
        if threading.current_thread().name == "rootgrep-inotify" and armed.is_set():
            armed.clear()
            inside.set()
            release.wait(10)  # (the reader, held between its settle and what follows)
        return out

    with watched(tree, tmp_path / "cache") as (r, manager, svc):
        wait_until(lambda: settled(manager, r.path), what="the build")
        monkeypatch.setattr(TreeWatcher, "_settle", settle)
        armed.set()
        (tree / "other.py").write_text("y = 1\n")  # (an event: the reader settles it)
        try:
            assert inside.wait(10)  # (a hang guard)
            mount_tmpfs(sub)
            mounts.append(sub)
            (sub / "inside.py").write_text("MOUNTMARK = 'inside'\n")
            threading.Timer(0.05, release.set).start()
            svc.grep([r], Token(), pattern="MOUNTMARK")  # (its catch-up looks at the table)
        finally:
            release.set()
        wait_until(lambda: settled(manager, r.path), what="the re-sync after the mount")
        (sub / "later.py").write_text("MOUNTMARK = 'later'\n")
        want = sorted(rg_matches(tree, "MOUNTMARK"))
        assert len(want) == 3
        wait_until(lambda: grep_from_index(svc, r, "MOUNTMARK") == want and settled(
            manager, r.path), seconds=10, what="the file made in the mount")  # fmt: skip
