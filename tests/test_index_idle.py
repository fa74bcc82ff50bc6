"""Indexes used without an owner (per-call roots, ``search``) live until ``idle_seconds`` after
their last use; an owner keeps one for as long as it holds it; a call in progress keeps it;
and the same root used again while its old index still lets go starts after it (as the writer).
Waits are hang guards only."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rootgrep.index.manager import IndexManager
from rootgrep.roots import Root, pin_root


def wait_until(pred: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds  # a hang guard
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Root]:
    d = tmp_path / "tree"
    for i in range(20):
        (d / f"p{i}").mkdir(parents=True)
        for j in range(100):
            (d / f"p{i}" / f"m{j}.py").write_text(f"def fn_{i}_{j}():\n    return {j}\n" * 20)
    r = pin_root(str(d))
    yield r
    r.close()


def reaper_alive() -> bool:
    return any(t.name == "rootgrep-idle-reaper" for t in threading.enumerate())


def test_an_ownerless_use_ends_after_the_idle_time_and_the_reaper_with_it(
    root: Root, tmp_path: Path
) -> None:
    manager = IndexManager(str(tmp_path / "cache"), idle_seconds=0.3)
    try:
        ix = manager.use(root, busy=True)  # (held through its first build)
        assert ix is not None and manager.wait_built(root.path, 60)
        manager.leave(ix)
        wait_until(lambda: manager.get(root.path) is None and ix.reaped.is_set())
        assert ix.state == "off" and ix.index is None and ix.watcher is None
        assert all(not t.is_alive() for t in ix.threads)
        wait_until(lambda: not reaper_alive())  # nothing left to reap: no thread stays
    finally:
        manager.close()


def test_an_owner_keeps_it_and_a_busy_call_keeps_it(root: Root, tmp_path: Path) -> None:
    manager = IndexManager(str(tmp_path / "cache"), idle_seconds=0.2)
    try:
        held = manager.activate(root, 7)
        assert held is not None and manager.use(root) is held
        assert manager.wait_built(root.path, 60)
        wait_until(lambda: -1 not in held.users)  # the ownerless use expired...
        assert manager.get(root.path) is held and held.state == "ready"  # ...the owner stays
        manager.release(root.path, 7, wait=True)
        assert manager.get(root.path) is None
        busy = manager.use(root, busy=True)
        assert busy is not None and manager.wait_built(root.path, 60)
        time.sleep(0.6)  # three idle times pass while the call still runs
        assert manager.get(root.path) is busy
        manager.leave(busy)
        wait_until(lambda: manager.get(root.path) is None)
    finally:
        manager.close()


def test_a_root_used_again_while_its_old_index_lets_go_starts_after_it(
    root: Root, tmp_path: Path
) -> None:
    manager = IndexManager(str(tmp_path / "cache"), idle_seconds=0.05)
    try:
        old = manager.use(root)  # expires while its first build (2,000 files) still runs
        assert old is not None
        wait_until(lambda: manager.get(root.path) is None)
        new = manager.use(root, busy=True)
        assert new is not None and new is not old
        assert new.built.wait(60) and old.reaped.is_set()
        assert new.role == "writer"  # not a reader of its predecessor's lingering writer
        assert new.state == "ready"
        manager.leave(new)
    finally:
        manager.close()
