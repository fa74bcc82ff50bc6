"""Through the service, while a build's second commit is held back (its trigrams committed,
its words and symbols not): grep answers from the index only while a watcher keeps it fresh,
and ``find_symbol`` never answers a stored definition from under a directory renamed since
(found by review)."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rootgrep.index.manager import Indexed, IndexManager
from rootgrep.index.store import RootIndex
from rootgrep.roots import Root, pin_root
from rootgrep.service import Service, Settings, Token
from support import shapes_tree


def until(check: Any, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@contextmanager
def held_build(
    monkeypatch: pytest.MonkeyPatch, top: Path, cache: Path, *, watch: bool
) -> Iterator[tuple[Root, IndexManager, Indexed, threading.Event]]:
    """A manager building ``top``'s index with its second commit held until the event is
    set: (root, manager, the root's Indexed, the event)."""
    go, entered = threading.Event(), threading.Event()
    real = RootIndex._complete_locked

    def held(self: RootIndex, *a: Any, **k: Any) -> None:
        if self.entries.bare:
            entered.set()
            go.wait(60)
        real(self, *a, **k)

    monkeypatch.setattr(RootIndex, "_complete_locked", held)
    r = pin_root(str(top))
    manager = IndexManager(str(cache), watch=watch)
    try:
        ix = manager.activate(r, 0)
        assert ix is not None
        until(entered.is_set)
        yield r, manager, ix, go
    finally:
        go.set()
        manager.close()
        r.close()


def grep_paths(service: Service, r: Root, pattern: str) -> tuple[list[str], bool]:
    res = service.grep([r], Token(), pattern=pattern, max_results=1000)
    return sorted({m.path for m in res.matches}), res.index_used


def test_without_a_watcher_grep_scans_live_during_the_second_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = tmp_path / "root"
    (top / "src").mkdir(parents=True)
    for i in range(5):
        (top / "src" / f"f{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    with held_build(monkeypatch, top, tmp_path / "cache", watch=False) as (r, manager, ix, _):
        service = Service([r], Settings(), indexes=manager)
        (top / "src" / "f3.py").write_text("def f3():\n    return 'edited_marker'\n")
        # (nothing watches: the index cannot know of the edit, so it must not answer)
        assert not ix.answers_grep()
        assert grep_paths(service, r, "edited_marker") == (["src/f3.py"], False)


def test_find_symbol_drops_stored_definitions_under_a_renamed_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = tmp_path / "root"
    (top / "keep").mkdir(parents=True)
    (top / "keep" / "api.py").write_text("def stable_api():\n    pass\n")
    for i in range(5):
        (top / f"other{i}.py").write_text(f"def other{i}():\n    pass\n")
    cache = tmp_path / "cache"
    first = IndexManager(str(cache))  # a complete index of the tree as it was
    r0 = pin_root(str(top))
    try:
        first.activate(r0, 0)
        assert first.wait_built(r0.path, 60)
    finally:
        first.close()
        r0.close()
    for i in range(5):  # (changed while no one watched: the next build re-reads them)
        (top / f"other{i}.py").write_text(f"def other{i}_renamed():\n    pass\n")
    with held_build(monkeypatch, top, cache, watch=True) as (r, manager, ix, _):
        assert ix.index is not None and ix.index.entries.bare == 5
        shutil.move(top / "keep", top / "moved")
        service = Service([r], Settings(), indexes=manager)

        def found() -> list[str]:
            res = service.find_symbol([r], Token(), name="stable_api")
            return [s.path for s in res.symbols]

        until(lambda: found() == ["moved/api.py"])  # (the watcher marks both folders)
        assert found() == ["moved/api.py"]
        res = service.find_symbol([r], Token(), name="other2_renamed")  # (a bare file: live)
        assert [s.path for s in res.symbols] == ["other2.py"]


def test_find_symbol_during_a_build_parses_only_the_files_that_may_hold_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found reading the change: every bare file in scope was read and tested at each call
    (the whole tree, on a first build); the index's trigrams already say which may hold the
    name."""
    from rootgrep.service.symbols import Symbols

    top = shapes_tree(
        tmp_path / "root", "class Shape:\n    pass\n", "from shapes import Shape\n", 60
    )
    parsed: list[bytes] = []
    real = Symbols._parse_one

    def counted(self: Symbols, r: Root, rel: bytes, *a: Any) -> Any:
        parsed.append(rel)
        return real(self, r, rel, *a)

    monkeypatch.setattr(Symbols, "_parse_one", counted)
    with held_build(monkeypatch, top, tmp_path / "cache", watch=True) as (r, manager, ix, _):
        assert ix.index is not None and ix.index.entries.bare == 62
        service = Service([r], Settings(), indexes=manager)
        for name, exact, want in (("Shape", True, ["src/shapes.py"]),
                                  ("shape", False, ["src/shapes.py"]),
                                  ("filler7", True, ["src/filler7.py"])):  # fmt: skip
            parsed.clear()
            res = service.find_symbol([r], Token(), name=name, exact=exact)
            assert [s.path for s in res.symbols] == want
            assert len(parsed) <= 2 and set(parsed) >= {w.encode() for w in want}, parsed
