"""One inotify instance for every root of a process: events are routed by watch descriptor to
the right root, directories that nested roots both watch keep their watch while either needs
it, and a root that runs out of watches gives its own back instead of starving the others."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rootgrep import confine
from rootgrep.confine import Beneath
from rootgrep.index import watch as watch_module
from rootgrep.index.watch import Inotify, TreeWatcher


def inotify_fds() -> int:
    """inotify instances this process holds (fds linked to ``anon_inode:inotify``)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # (the fd listdir used is closed by now)
            n += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
    return n


class Heard:
    """A sink: every batch the shared reader hands a watcher."""

    def __init__(self) -> None:
        self.marks: set[bytes] = set()
        self.lost = False
        self.lock = threading.Lock()

    def __call__(self, marks: set[bytes], lost: bool) -> None:
        with self.lock:
            self.marks |= marks
            self.lost |= lost

    def until(self, done: Callable[[set[bytes]], bool], seconds: float = 10.0) -> set[bytes]:
        deadline = time.monotonic() + seconds  # a hang guard, not a threshold
        while time.monotonic() < deadline:
            with self.lock:
                if done(self.marks):
                    return set(self.marks)
            time.sleep(0.01)
        with self.lock:
            return set(self.marks)

    def clear(self) -> None:
        with self.lock:
            self.marks.clear()


@pytest.fixture
def trees(tmp_path: Path) -> list[Path]:
    out = []
    for name in ("one", "two", "three"):
        r = tmp_path / name
        (r / "sub" / "deep").mkdir(parents=True)
        (r / "top.py").write_text("x\n")
        (r / "sub" / "deep" / "d.py").write_text("x\n")
        out.append(r)
    return out


@pytest.fixture
def shared() -> Iterator[Inotify]:
    hub = Inotify()
    hub.start()
    yield hub
    hub.close()


def watched(hub: Inotify, root: Path, heard: Heard) -> tuple[TreeWatcher, Beneath]:
    fs = Beneath.pin(str(root))
    w = TreeWatcher(fs, hub, sink=heard)
    w.add(b"")
    return w, fs


def test_events_of_many_roots_come_through_one_instance_to_the_right_root(
    trees: list[Path], shared: Inotify
) -> None:
    before = inotify_fds()
    threads = threading.active_count()
    sinks = [Heard() for _ in trees]
    made = [watched(shared, r, h) for r, h in zip(trees, sinks, strict=True)]
    try:
        assert inotify_fds() == before  # no instance per root: the shared one only
        assert threading.active_count() == threads  # and no thread per root
        (trees[1] / "sub" / "deep" / "d.py").write_text("edited in two\n")
        (trees[2] / "new.py").write_text("made in three\n")
        assert sinks[1].until(lambda m: b"sub/deep/d.py" in m) == {b"sub/deep/d.py"}
        assert sinks[2].until(lambda m: b"new.py" in m) == {b"new.py"}
        time.sleep(0.2)  # (room for a misrouted event to arrive: none may)
        assert sinks[0].marks == set()
        assert sinks[1].marks == {b"sub/deep/d.py"} and sinks[2].marks == {b"new.py"}
        # a directory made in one root is walked and watched for that root alone
        (trees[0] / "fresh" / "inner").mkdir(parents=True)
        (trees[0] / "fresh" / "inner" / "f.py").write_text("f\n")
        sinks[0].until(lambda m: b"fresh/inner/f.py" in m)
        sinks[0].clear()
        (trees[0] / "fresh" / "inner" / "f.py").write_text("again\n")
        assert sinks[0].until(lambda m: b"fresh/inner/f.py" in m) == {b"fresh/inner/f.py"}
        assert b"fresh/inner" in made[0][0].dirs.values()
        assert not any(b"fresh" in d for w, _ in made[1:] for d in w.dirs.values())
    finally:
        for w, fs in made:
            w.close()
            fs.close()
    assert shared.routes == {} and shared.watchers == []  # every watch given back


def test_nested_roots_share_a_watch_that_stays_while_either_needs_it(
    trees: list[Path], shared: Inotify
) -> None:
    outer, inner = Heard(), Heard()
    wo, fo = watched(shared, trees[0], outer)
    wi, fi = watched(shared, trees[0] / "sub", inner)
    try:
        (trees[0] / "sub" / "deep" / "d.py").write_text("both hear this\n")
        assert b"sub/deep/d.py" in outer.until(lambda m: b"sub/deep/d.py" in m)
        assert b"deep/d.py" in inner.until(lambda m: b"deep/d.py" in m)
        wi.close()  # the inner root goes: the kernel watch on sub/ must stay for the outer
        outer.clear()
        (trees[0] / "sub" / "deep" / "d.py").write_text("only the outer now\n")
        assert b"sub/deep/d.py" in outer.until(lambda m: b"sub/deep/d.py" in m)
        assert sorted(wo.dirs.values()) == [b"", b"sub", b"sub/deep"]
    finally:
        wi.close()
        wo.close()
        fi.close()
        fo.close()


def test_a_root_out_of_watches_gives_its_own_back_and_the_others_keep_theirs(
    trees: list[Path], shared: Inotify, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = Heard(), Heard()
    w1, f1 = watched(shared, trees[0], first)
    real = confine.inotify_watch_dir
    budget = [1]  # fs.inotify.max_user_watches, as if one watch were left for the user

    def scarce(ifd: int, dirfd: int, mask: int) -> int:
        if budget[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        budget[0] -= 1
        return real(ifd, dirfd, mask)

    monkeypatch.setattr(watch_module.confine, "inotify_watch_dir", scarce)
    w2, f2 = watched(shared, trees[1], second)
    try:
        assert w2.incomplete and w2.dirs == {}  # it took one watch, then gave it back
        assert not w1.incomplete and sorted(w1.dirs.values()) == [b"", b"sub", b"sub/deep"]
        (trees[0] / "sub" / "deep" / "d.py").write_text("still heard\n")
        assert b"sub/deep/d.py" in first.until(lambda m: b"sub/deep/d.py" in m)
        (trees[1] / "fresh").mkdir()  # an incomplete watcher adds nothing any more
        time.sleep(0.2)
        assert w2.dirs == {}
    finally:
        w2.close()
        w1.close()
        f1.close()
        f2.close()


def test_the_shared_reader_closes_its_instance_when_stopped(trees: list[Path]) -> None:
    before = inotify_fds()
    hub = Inotify()
    hub.start()
    w, fs = watched(hub, trees[0], Heard())
    assert inotify_fds() == before + 1
    w.close()
    hub.close()
    fs.close()
    assert inotify_fds() == before
    assert hub._thread is not None and not hub._thread.is_alive()


def test_in_the_manager_a_root_out_of_watches_turns_stale_and_frees_its_slot(
    trees: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rootgrep.index.manager import IndexManager
    from rootgrep.roots import pin_root
    from rootgrep.service import Service, Settings, Token

    roots = [pin_root(str(t)) for t in trees]
    manager = IndexManager(str(tmp_path / "cache"), max_watched_roots=2)
    real = confine.inotify_watch_dir
    scarce = [False]

    def watch_dir(ifd: int, dirfd: int, mask: int) -> int:
        if scarce[0]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(ifd, dirfd, mask)

    monkeypatch.setattr(watch_module.confine, "inotify_watch_dir", watch_dir)
    try:
        first = manager.activate(roots[0], 5)
        assert first is not None and manager.wait_built(roots[0].path, 60)
        scarce[0] = True  # the user's watches run out
        second = manager.activate(roots[1], 5)
        assert second is not None and manager.wait_built(roots[1].path, 60)
        assert first.state == "ready" and second.state == "stale"
        assert second.watcher is None and not second.watch_slot  # its slot is free again
        scarce[0] = False
        third = manager.activate(roots[2], 5)  # so a third root is watched (cap 2)
        assert third is not None and manager.wait_built(roots[2].path, 60)
        assert third.state == "ready"
        (trees[1] / "sub" / "late.py").write_text("needle\n")  # the stale root: live grep
        res = Service(roots, Settings(), indexes=manager).grep(
            [roots[1]], Token(), pattern="needle"
        )
        assert not res.index_used and [m.path for m in res.matches] == ["sub/late.py"]
    finally:
        manager.close()
        for r in roots:
            r.close()


def test_the_processs_own_roots_are_watched_whatever_the_cap(
    trees: list[Path], tmp_path: Path
) -> None:
    from rootgrep.index.manager import IndexManager
    from rootgrep.roots import pin_root

    roots = [pin_root(str(t)) for t in trees]
    manager = IndexManager(str(tmp_path / "cache"), max_watched_roots=1)
    try:
        client = manager.activate(roots[0], 5)  # a session's root takes the one slot
        ours = [manager.activate(r, 0) for r in roots[1:]]  # operator roots: uncounted
        extra = manager.use(roots[2])  # (an operator root used by a call stays watched)
        for r in roots:
            assert manager.wait_built(r.path, 60)
        assert client is not None and client.state == "ready"
        assert all(ix is not None and ix.state == "ready" for ix in ours) and extra is ours[1]
        assert inotify_fds() >= 1
    finally:
        manager.close()
        for r in roots:
            r.close()


def test_a_query_catching_up_waits_for_marks_the_reader_took_but_has_not_handed_over(
    trees: list[Path], shared: Inotify
) -> None:
    """The shared reader takes a root's marks, then hands them to its sink outside the
    watcher's lock: a query's catch-up (``drain`` then ``deliver(wait=True)``) that finds
    no marks left must not say "caught up" before the reader's sink call is done (a file
    written just before a grep was missed, about once in a full test run under load)."""
    entered, release = threading.Event(), threading.Event()
    got: set[bytes] = set()

    def sink(marks: set[bytes], lost: bool) -> None:
        if marks and threading.current_thread() is shared._thread and not release.is_set():
            entered.set()
            release.wait(10)  # (the reader held between taking the marks and handing them)
        got.update(marks)

    fs = Beneath.pin(str(trees[0]))
    w = TreeWatcher(fs, shared, sink=sink)
    w.add(b"")
    try:
        (trees[0] / "new.py").write_text("x\n")
        assert entered.wait(10)  # (a hang guard)
        answer: list[tuple[bool, set[bytes]]] = []

        def catch_up() -> None:
            ok = shared.drain() and w.deliver(wait=True)
            answer.append((ok, set(got)))

        query = threading.Thread(target=catch_up)
        query.start()
        query.join(0.2)  # (it waits for the reader now; or, without the barrier, is done)
        release.set()
        query.join(10)
        ((ok, seen),) = answer
        assert not ok or b"new.py" in seen, (ok, seen)  # caught up: the sink holds it
    finally:
        release.set()
        w.close()
        fs.close()


def test_while_the_full_re_sync_after_lost_events_runs_grep_scans_live(
    trees: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events were lost (a queue overflow; a mount inside the root): the index is exact
    again only once a full re-sync is done. The flag that says so was cleared when that
    re-sync began, so grep trusted the index all through it and missed the file the lost
    events named."""
    from rootgrep.index.manager import IndexManager
    from rootgrep.service import Token
    from support import wait_until, watched

    entered, release = threading.Event(), threading.Event()
    real = IndexManager._healing

    def healing(ix: object, index: object, paths: object, **kw: object) -> object:
        if paths is None and not release.is_set():  # (the full re-sync: held)
            entered.set()
            release.wait(30)
        return real(ix, index, paths, **kw)  # type: ignore[arg-type]

    tree = trees[0]
    with watched(tree, tmp_path / "cache") as (r, manager, svc):
        ix = manager.get(r.path)
        w = ix.watcher
        monkeypatch.setattr(IndexManager, "_healing", staticmethod(healing))
        deaf = monkeypatch.context()
        with deaf as m:  # the events of this write are lost, as in an overflow
            m.setattr(w, "_event", lambda *a: None)
            (tree / "sub" / "unheard.py").write_text("needle = 1\n")
            assert ix.catch_up()
        with w.inotify.lock:
            w.overflowed = True  # (what the reader does when the kernel says IN_Q_OVERFLOW)
        try:
            assert ix.catch_up() and entered.wait(30)  # (a hang guard)
            res = svc.grep([r], Token(), pattern="needle")
            assert not res.index_used and [m.path for m in res.matches] == ["sub/unheard.py"]
        finally:
            release.set()
        wait_until(ix.answers_exactly, what="the full re-sync")
        res = svc.grep([r], Token(), pattern="needle")
        assert res.index_used and [m.path for m in res.matches] == ["sub/unheard.py"]
