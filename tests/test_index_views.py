"""Adversarial tests of nested-root views of an outer index (issue 8, items 8, 11, 15): a
directory swapped in under a nested root, symlinks planted on a nested root's way, and
``reindex`` of a nested root must neither leak indexes (threads, watches, fds) nor make
indexed grep lose files. Real trees in tmp dirs; waits are hang guards only."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rootgrep.index import manager as manager_mod
from rootgrep.index.manager import Indexed, IndexManager
from rootgrep.index.store import RootIndex
from rootgrep.roots import Root, pin_root
from rootgrep.service import Service, Settings, Token

MARK = "needle_r1_marker"


def wait_until(pred: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds  # a hang guard
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def index_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name in ("rootgrep-index", "rootgrep-watch"))


def tree(top: Path) -> Path:
    """``top/sub`` holding a few files with MARK; ``top`` one of its own."""
    (top / "sub" / "deep").mkdir(parents=True)
    (top / "own.txt").write_text(f"{MARK} outer\n")
    for i in range(5):
        (top / "sub" / f"f{i}.txt").write_text(f"{MARK} {i}\n")
    (top / "sub" / "deep" / "d.txt").write_text(f"{MARK} deep\n")
    return top / "sub"


def test_a_nested_root_swapped_between_sessions_never_leaks_an_index(tmp_path: Path) -> None:
    """Session 1 pins ``top/sub`` (directory A) before ``top`` is indexed: A gets its own
    index. ``top/sub`` is then replaced by directory B and session 2 announces it: B is a view
    of ``top``'s index, and A's index (another directory at that path) is dropped. Calls of
    the two sessions alternating must not leave one stopped-but-running index per call."""
    top = tmp_path / "top"
    sub = tree(top)
    manager = IndexManager(str(tmp_path / "cache"))
    roots: list[Root] = []
    try:
        old = pin_root(str(sub))
        roots.append(old)
        a = manager.activate(old, 1)
        assert a is not None and manager.wait_built(old.path, 60)
        outer = pin_root(str(top))
        roots.append(outer)
        manager.activate(outer, 1)
        assert manager.wait_built(outer.path, 60)
        os.rename(sub, tmp_path / "moved_away")  # A leaves; B takes its path
        sub.mkdir()
        (sub / "b.txt").write_text(f"{MARK} b\n")
        new = pin_root(str(sub))
        roots.append(new)
        seen: list[Indexed] = [a]
        for _ in range(4):  # the two sessions' calls alternate (every call activates)
            assert manager.activate(new, 2) is manager.get(outer.path)  # B: a view of top
            got = manager.activate(old, 1)  # A again: its own index (not a view any more)
            assert got is not None and got not in seen
            seen.append(got)
        # every index of A but the current one was dropped: each must stop and let go
        current = manager.get(old.path)
        for ix in seen:
            if ix is not current:
                assert ix.reaped.wait(60), "a dropped index was never stopped"
                assert ix.stop.is_set() and ix.index is None and ix.watcher is None
        manager.release(old.path, 1, wait=True)
        manager.release(new.path, 2, wait=True)
        manager.release(outer.path, 1, wait=True)
        wait_until(lambda: index_threads() == 0)
    finally:
        manager.close()
        for r in roots:
            r.close()


def test_reindex_of_a_nested_root_never_keeps_the_outer_index_for_good(tmp_path: Path) -> None:
    """``reindex`` naming a nested root (a view of its outer root's index) re-syncs the outer
    index; it must not make the process an owner of it: once the session lets both roots go
    (and the idle time passes), the outer index is stopped like any other."""
    top = tmp_path / "top"
    sub = tree(top)
    manager = IndexManager(str(tmp_path / "cache"), idle_seconds=0.1)
    outer, inner = pin_root(str(top)), pin_root(str(sub))
    try:
        ix = manager.activate(outer, 5)
        assert ix is not None and manager.wait_built(outer.path, 60)
        assert manager.activate(inner, 5) is ix  # a view
        service = Service([], Settings(), indexes=manager)
        res = service.reindex([outer, inner], Token(), root=inner.id)
        assert len(res.roots) == 1
        manager.release(inner.path, 5)
        manager.release(outer.path, 5)
        wait_until(lambda: manager.get(outer.path) is None, 60)
        assert ix.reaped.wait(60) and ix.index is None
    finally:
        manager.close()
        outer.close()
        inner.close()


def relink(top: Path) -> None:
    """The attack: ``top/real`` (holding the nested root ``real/sub``) is renamed to
    ``top/other`` and a symlink ``top/real -> other`` put in its place, so the nested root's
    path still leads to its directory, but only through a link no walk follows."""
    os.rename(top / "real", top / "other")
    os.symlink("other", top / "real")


def grep_where(service: Service, roots: list[Root], **kw: object) -> list[tuple[str, str]]:
    res = service.grep(roots, Token(), pattern=MARK, **kw)  # type: ignore[arg-type]
    return sorted((m.root.name, m.path) for m in res.matches)


def test_a_link_on_a_nested_root_s_way_never_makes_indexed_grep_lose_its_files(
    tmp_path: Path,
) -> None:
    """A nested root shares the outer index only while the outer walk reaches its directory
    at its place. Once that place is reached only through a symlink, the outer index holds
    nothing there: grep of the nested root must still find every file (it answers live)."""
    top = tmp_path / "top"
    tree(top / "real")
    manager = IndexManager(str(tmp_path / "cache"))
    outer, inner = pin_root(str(top)), pin_root(str(top / "real" / "sub"))
    try:
        ix = manager.activate(outer, 1)
        assert ix is not None and manager.wait_built(outer.path, 60)
        assert manager.activate(inner, 1) is ix  # a view of top's index
        live = Service([], Settings(), indexes=None)
        service = Service([], Settings(), indexes=manager)
        want = grep_where(live, [inner])
        assert len(want) == 6 and grep_where(service, [inner]) == want
        relink(top)
        # the watcher folds the rename in: the outer index now has the files at other/sub
        wait_until(
            lambda: (
                ix.index is not None
                and b"other/sub/f0.txt" in ix.index.entries
                and b"real/sub/f0.txt" not in ix.index.entries
                and not ix.dirty_snapshot()
            )
        )
        assert grep_where(live, [inner]) == want
        assert grep_where(service, [inner]) == want
    finally:
        manager.close()
        outer.close()
        inner.close()


def test_a_nested_root_reached_through_a_link_is_still_reported_once(tmp_path: Path) -> None:
    """After the same trick, a grep over both roots reports each file of the nested root once,
    under the nested root (the outer walk leaves out the nested root's directory where it
    really is, not where its announced path once was)."""
    top = tmp_path / "top"
    tree(top / "real")
    outer, inner = pin_root(str(top)), pin_root(str(top / "real" / "sub"))
    try:
        relink(top)
        live = Service([], Settings(), indexes=None)
        got = grep_where(live, [outer, inner])
        assert got == sorted(
            [("top", "other/own.txt")]
            + [("sub", f"f{i}.txt") for i in range(5)]
            + [("sub", "deep/d.txt")]
        )
    finally:
        outer.close()
        inner.close()


@contextmanager
def following(tmp_path: Path) -> Iterator[tuple[Root, RootIndex, IndexManager, Indexed]]:
    """``tmp/top``'s index written by a holder of its writer in this process (as a daemon
    holds it), and an IndexManager following it as a reader: (root, writer, manager, the
    follower's index), once the follower is ready."""
    top = tmp_path / "top"
    tree(top)
    cache = str(tmp_path / "cache")
    r = pin_root(str(top))
    writer = RootIndex(cache, r.path, hold_writer=True, identity=r.fs.identity())
    manager = IndexManager(cache)
    try:
        writer.sync(r.fs)
        ix = manager.activate(r, 0)
        assert ix is not None
        wait_until(lambda: ix.role == "reader" and ix.state == "ready")
        yield r, writer, manager, ix
    finally:
        manager.close()
        writer.close()  # (closing twice is harmless)
        r.close()


def test_a_reader_never_answers_grep_from_an_index_its_writer_emptied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process following another's index (the writer: a daemon) while that writer empties
    the index to rebuild it (as a daemon does when it finds another directory at the path
    or a state that breaks the file-id invariant): until the rebuild is committed, grep in
    the follower must not answer from the emptied index (it answers live, exactly)."""
    monkeypatch.setattr(manager_mod, "TAKEOVER_SECONDS", 3600.0)  # the writer stays writer
    with following(tmp_path) as (r, writer, manager, ix):
        live = Service([], Settings(), indexes=None)
        service = Service([], Settings(), indexes=manager)
        want = grep_where(live, [r])
        assert len(want) == 7 and grep_where(service, [r]) == want
        with writer._sync_lock:  # the writing process starts over
            writer._reset()
        wait_until(lambda: ix.index is not None and ix.index.synced_at is None)
        assert grep_where(service, [r]) == want
        writer.sync(r.fs)  # its rebuild lands: the follower answers from the index again
        wait_until(lambda: ix.index is not None and ix.index.ready and ix.state == "ready")
        res = service.grep([r], Token(), pattern=MARK)
        assert res.index_used and sorted((m.root.name, m.path) for m in res.matches) == want


def test_a_view_and_an_own_index_at_one_path_are_both_let_go(tmp_path: Path) -> None:
    """After the swap of the first test, session 2 holds ``top/sub`` (B) as a view of
    ``top``'s index while session 1 holds the same path (A, moved away) in an index of its
    own. Session 2 letting go first must release its view (not session 1's index): once
    everyone let go, ``top``'s index stops too."""
    top = tmp_path / "top"
    sub = tree(top)
    manager = IndexManager(str(tmp_path / "cache"))
    old = pin_root(str(sub))
    outer = pin_root(str(top))
    new: Root | None = None
    try:
        manager.activate(old, 1)
        assert manager.wait_built(old.path, 60)
        ix = manager.activate(outer, 1)
        assert ix is not None and manager.wait_built(outer.path, 60)
        os.rename(sub, tmp_path / "moved_away")
        sub.mkdir()
        new = pin_root(str(sub))
        assert manager.activate(new, 2) is ix  # B: a view of top
        own = manager.activate(old, 1)  # A: an index of its own, at the same path
        assert own is not None and own is not ix
        manager.release(new.path, 2, wait=True)  # session 2 goes first
        assert manager.get(old.path) is own and own.state != "off"  # session 1's stays
        manager.release(old.path, 1, wait=True)
        manager.release(outer.path, 1, wait=True)
        assert manager.get(outer.path) is None and ix.reaped.is_set()
        wait_until(lambda: index_threads() == 0)
    finally:
        manager.close()
        for r in (old, outer, new):
            if r is not None:
                r.close()


def test_a_nested_root_whose_view_no_longer_fits_gets_searchable_again(tmp_path: Path) -> None:
    """A nested root is a view of ``top``'s index; then an ignore file appears in ``top``
    (its rules would apply to ``top``'s walk only): the view no longer holds the nested
    root's files exactly. ``search`` of the nested root must not stay empty for good: the
    nested root gets an index of its own."""
    top = tmp_path / "top"
    sub = tree(top)
    manager = IndexManager(str(tmp_path / "cache"), idle_seconds=0.1)  # (search uses)
    outer, inner = pin_root(str(top)), pin_root(str(sub))
    try:
        ix = manager.activate(outer, 1)
        assert ix is not None and manager.wait_built(outer.path, 60)
        assert manager.activate(inner, 1) is ix
        service = Service([], Settings(), indexes=manager)

        def found() -> list[str]:
            manager.activate(inner, 1)  # (as every call of the session does)
            res = service.search([inner], Token(), query=MARK)
            return sorted(h.path for h in res.results)

        want = sorted([f"f{i}.txt" for i in range(5)] + ["deep/d.txt"])
        assert found() == want
        (top / ".gitignore").write_text("*.log\n")
        wait_until(lambda: found() == want)
        assert grep_where(service, [inner]) == [("sub", p) for p in want]
        manager.release(inner.path, 1, wait=True)
        manager.release(outer.path, 1, wait=True)
        wait_until(lambda: index_threads() == 0)
    finally:
        manager.close()
        outer.close()
        inner.close()


def test_a_reader_taking_over_binds_the_index_to_its_own_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer of an index (a daemon) restarts for another directory found at the path,
    writes its manifest (bound to that directory) and dies before anything else. The
    follower that takes over writes its own directory's files into the index: the manifest
    must then name the follower's directory, never the other one (a process of that other
    directory would take these files for its own)."""
    monkeypatch.setattr(manager_mod, "TAKEOVER_SECONDS", 0.05)
    with following(tmp_path) as (r, writer, _manager, ix):
        top = tmp_path / "top"
        cache = str(tmp_path / "cache")
        other = (r.fs.identity()[0], r.fs.identity()[1] + 1_000_003)  # another directory
        writer.identity = other
        writer._write_manifest()  # as the restarted writer does first...
        writer.close()  # ...and it dies
        wait_until(lambda: ix.role == "writer" and ix.state == "ready")
        (top / "late.txt").write_text(f"{MARK} late\n")
        # (and its build done: between its two commits it still holds the writer)
        wait_until(
            lambda: ix.index is not None and b"late.txt" in ix.index.entries and ix.index.complete
        )
        assert ix.index is not None and ix.index._bound_identity() == r.fs.identity()
        # a process of the other directory never takes these files for its own
        theirs = RootIndex(cache, r.path, identity=other)
        try:
            assert theirs.entries == {}
        finally:
            theirs.close()
