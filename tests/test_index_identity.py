"""An index belongs to a directory, not to a path (issue 8, items 4 and 11): a directory
moved away and replaced, a root re-announced after a swap, a root moved out of its operator
root, a file moved out of its root, and a daemon that stops."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rootgrep.index.manager import IndexManager
from rootgrep.roots import Root, pin_root
from rootgrep.service import Service, Settings, Token
from support import MARKER, assert_no_marker, start_daemon, stop


def wait_until(pred, seconds: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not pred():
        assert time.monotonic() < deadline, "timed out"  # a hang guard
        time.sleep(0.02)


def make_old(root: Path) -> None:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "old.py").write_text(f"def widget():\n    return '{MARKER}'\n")


def searched(svc: Service, r: Root, query: str) -> tuple[list[str], str]:
    res = svc.search([r], Token(), query=query)
    return [h.path for h in res.results], res.model_dump_json()


@pytest.mark.parametrize("same_manager", [False, True])
def test_a_directory_replaced_at_a_roots_path_never_answers_from_the_old_index(
    tmp_path: Path, same_manager: bool
) -> None:
    root = tmp_path / "proj"
    outside = tmp_path / "outside"
    outside.mkdir()
    make_old(root)
    cache = str(tmp_path / "cache")
    first = IndexManager(cache, watch=False)
    r = pin_root(str(root))
    try:
        first.activate(r, 0)
        assert first.wait_built(r.path, 60)
        svc = Service([r], Settings(), indexes=first)
        assert searched(svc, r, "widget")[0] == ["pkg/old.py"]
        if not same_manager:  # a new process with the same cache dir
            first.close()
        r.close()
        # the directory moves out of reach, another takes its place
        os.rename(root, outside / "proj-old")
        (root / "src").mkdir(parents=True)
        (root / "src" / "new.py").write_text("def widget():\n    return 'fresh'\n")
        manager = first if same_manager else IndexManager(cache, watch=False)
        r = pin_root(str(root))
        svc = Service([r], Settings(), indexes=manager)
        seen: list[str] = []
        for _ in range(50):  # while the new directory is being indexed, and after
            paths, everything = searched(svc, r, "widget")
            assert_no_marker(everything)
            assert "pkg/old.py" not in paths
            seen = paths
            if manager.get(r.path) is not None and manager.get(r.path).built.is_set():  # type: ignore[union-attr]
                break
            time.sleep(0.01)
        wait_until(lambda: searched(svc, r, "widget")[0] == ["src/new.py"])
        manager.close()
        assert seen is not None
    finally:
        first.close()
        r.close()


def test_a_file_moved_out_of_its_root_is_not_shown_by_search(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    outside = tmp_path / "outside"
    outside.mkdir()
    make_old(root)
    (root / "pkg" / "kept.py").write_text("def widget_helper():\n    widget()\n")
    manager = IndexManager(str(tmp_path / "cache"), watch=False)  # no fold can hide the gap
    r = pin_root(str(root))
    try:
        manager.activate(r, 0)
        assert manager.wait_built(r.path, 60)
        svc = Service([r], Settings(), indexes=manager)
        assert sorted(searched(svc, r, "widget")[0]) == ["pkg/kept.py", "pkg/old.py"]
        os.rename(root / "pkg" / "old.py", outside / "old.py")  # it left the root
        paths, everything = searched(svc, r, "widget")
        assert paths == ["pkg/kept.py"]
        assert_no_marker(everything)
        # a file changed since it was indexed shows what it holds now, not the stored copy
        (root / "pkg" / "kept.py").write_text(f"def widget_helper():\n    # {MARKER}\n")
        os.rename(outside / "old.py", tmp_path / "moved.py")
        (root / "pkg" / "kept.py").write_text("def widget_helper():\n    return 1\n")
        res = svc.search([r], Token(), query="widget_helper")
        assert [h.path for h in res.results] == ["pkg/kept.py"]
        assert res.results[0].snippets[0].text == "def widget_helper():"
    finally:
        manager.close()
        r.close()


def test_a_reader_takes_over_the_writer_when_its_daemon_dies(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("def alpha():\n    pass\n")
    cache = tmp_path / "cache"
    daemon = start_daemon(root, cache)
    r = pin_root(str(root))
    manager = IndexManager(str(cache))
    try:
        ix = manager.activate(r, 0)
        assert ix is not None
        wait_until(lambda: ix.state == "ready")
        assert ix.role == "reader"
        daemon.kill()  # no clean shutdown: the lock goes with the process
        daemon.wait(10)
        wait_until(lambda: ix.role == "writer")
        svc = Service([r], Settings(), indexes=manager)
        (root / "pkg" / "late.py").write_text("def written_after_the_daemon():\n    pass\n")
        # this process now folds changes in itself: search (index only) finds the new file
        wait_until(lambda: searched(svc, r, "written_after_the_daemon")[0] == ["pkg/late.py"])
        wait_until(lambda: not ix.dirty and ix.state == "ready")
        g = svc.grep([r], Token(), pattern="written_after_the_daemon")
        assert g.index_used and [m.path for m in g.matches] == ["pkg/late.py"]
    finally:
        manager.close()
        r.close()
        stop(daemon, 5)
