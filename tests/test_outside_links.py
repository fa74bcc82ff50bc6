"""A file inside a root with another name outside it (a hard link) can be edited through that
name, where no watch of the root hears it (inotify reports a change to the directory whose
name was used). The index marks each file that had more than one name when read
(``Entry.linked``), and grep reads every such file live, whatever the index says; a link
made later changes the file's link count and ctime, which no watch of the root hears either
(the kernel tells only watches of the file itself): the next full re-sync (``reindex``, a
restart) reads it again and marks it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootgrep.index.manager import IndexManager
from rootgrep.roots import Root
from rootgrep.service import Service, Token
from support import watched


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "src").mkdir(parents=True)
    outside.mkdir()
    for i in range(20):
        (root / "src" / f"m{i}.py").write_text(f"def f{i}():\n    return 'plain_{i}'\n")
    (root / "src" / "early.py").write_text("VALUE = 'before_edit'\n")
    (root / "src" / "late.py").write_text("OTHER = 'before_edit'\n")
    os.link(root / "src" / "early.py", outside / "early_alias.py")  # (before the index)
    return root, outside


@pytest.fixture
def served(
    world: tuple[Path, Path], tmp_path: Path
) -> Iterator[tuple[Root, IndexManager, Service]]:
    with watched(world[0], tmp_path / "cache") as served:
        yield served


def edit_in_place(path: Path, old: str, new: str) -> None:
    """Written through ``path`` into the same inode (what an editor saving in place, or
    ``cat > f``, does), not a new file renamed over it."""
    data = path.read_text().replace(old, new)
    with open(path, "r+") as f:
        f.write(data)
        f.truncate()


def grep(svc: Service, r: Root, pattern: str) -> list[str]:
    res = svc.grep([r], Token(), pattern=pattern)
    assert res.index_used
    return [m.path for m in res.matches]


def test_an_edit_through_a_name_outside_the_root_is_seen_at_once(
    world: tuple[Path, Path], served: tuple[Root, IndexManager, Service]
) -> None:
    _root, outside = world
    r, manager, svc = served
    ix = manager.get(r.path)
    assert ix is not None and ix.index is not None
    assert ix.index.entries.linked == {b"src/early.py"}
    assert grep(svc, r, "before_edit") == ["src/early.py", "src/late.py"]
    edit_in_place(outside / "early_alias.py", "before_edit", "edited_from_outside")
    assert not ix.dirty  # (no watch heard it: the root's directories saw no change)
    assert grep(svc, r, "edited_from_outside") == ["src/early.py"]  # (at once: read live)
    assert grep(svc, r, "before_edit") == ["src/late.py"]


def test_a_link_made_from_outside_later_is_marked_by_the_next_reindex(
    world: tuple[Path, Path], served: tuple[Root, IndexManager, Service]
) -> None:
    root, outside = world
    r, manager, svc = served
    ix = manager.get(r.path)
    assert ix is not None and ix.index is not None
    os.link(root / "src" / "late.py", outside / "late_alias.py")
    svc.reindex([r], Token())  # (its ctime changed with its link count: read again)
    assert ix.index.entries.linked == {b"src/early.py", b"src/late.py"}
    edit_in_place(outside / "late_alias.py", "before_edit", "edited_late")
    assert grep(svc, r, "edited_late") == ["src/late.py"]
    os.unlink(outside / "late_alias.py")
    svc.reindex([r], Token())  # (one name again: no longer read live, and its text new)
    assert ix.index.entries.linked == {b"src/early.py"}
    assert grep(svc, r, "edited_late") == ["src/late.py"]
