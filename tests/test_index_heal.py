"""A damaged index heals itself: a torn ``meta.json``, a segment whose file is not whole, or
a torn state, at open or while serving, is set aside (``tantivy.broken``) and rebuilt from
the files, once, with a log line; ``reindex`` always rebuilds. Before, the root stayed
``off`` for good, ``reindex`` answered ``[index_unavailable]`` and ``search`` said "still
being built" forever. The damage is real bytes written over the index's own files."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootgrep.index.manager import IndexManager
from rootgrep.roots import Root, pin_root
from rootgrep.service import Service, Token
from support import rg_matches, wait_until, watched


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    top = tmp_path / "tree"
    for d in range(4):
        (top / f"p{d}").mkdir(parents=True)
        for f in range(10):
            (top / f"p{d}" / f"m{f}.py").write_text(f"def handler_{d}_{f}(x):\n    return x\n")
    return top


def folder_of(cache: Path) -> Path:
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]
    return folder


def tear_meta(cache: Path) -> None:
    meta = folder_of(cache) / "tantivy" / "meta.json"
    data = meta.read_bytes()
    meta.write_bytes(data[: len(data) // 2])


def break_segment(cache: Path) -> None:
    """Every term dictionary's bytes flipped (its footer among them): it does not open."""
    for p in (folder_of(cache) / "tantivy").glob("*.term"):
        p.write_bytes(bytes(b ^ 0xFF for b in p.read_bytes()))


def tear_state(cache: Path) -> None:
    state = folder_of(cache) / "state.bin"
    data = state.read_bytes()
    state.write_bytes(data[: len(data) // 2])


DAMAGE = {"torn meta.json": tear_meta, "broken segment": break_segment, "torn state": tear_state}


def build(tree: Path, cache: Path) -> None:
    """Built and closed as a server builds it (bound to the directory: nothing but the
    damage makes the next open rebuild)."""
    with watched(tree, cache):
        pass


@pytest.fixture
def served(tree: Path, tmp_path: Path) -> Iterator[tuple[Root, IndexManager, Service]]:
    with watched(tree, tmp_path / "cache") as served:
        yield served


def answers_rightly(svc: Service, r: Root, tree: Path, indexed: bool = True) -> None:
    """grep (from the index while it is watched) equal to rg; search finds a definition and
    says nothing is partial; the index holds one main document per file (none of a lost
    state's left)."""
    got = svc.grep([r], Token(), pattern="handler_2_")
    assert got.index_used == indexed
    assert [(m.path, m.line) for m in got.matches] == rg_matches(tree, "handler_2_")
    hits = svc.search([r], Token(), query="handler_3_7")
    assert [h.path for h in hits.results] == ["p3/m7.py"] and not hits.partial
    ix = svc.indexes.get(r.path).index  # type: ignore[union-attr]
    assert ix.index.searcher().num_docs == 2 * 40  # (a main and a trigram document a file)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_an_index_damaged_while_closed_is_set_aside_and_rebuilt_at_open(
    tree: Path, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    build(tree, cache)
    DAMAGE[damage](cache)
    with (
        caplog.at_level(logging.WARNING, logger="rootgrep.index"),
        watched(tree, cache, built=False) as (r, manager, svc),
    ):
        # asked at once, while the damaged index is set aside and rebuilt: exact throughout
        for _ in range(20):
            got = svc.grep([r], Token(), pattern="handler_2_")
            assert [(m.path, m.line) for m in got.matches] == rg_matches(tree, "handler_2_")
        assert manager.wait_built(r.path, 60)
        ix = manager.get(r.path)
        assert ix is not None and ix.state == "ready", ix.error
        assert "rebuil" in caplog.text  # (one line says what happened)
        answers_rightly(svc, r, tree)
    if damage != "torn state":  # (the state alone is rebuilt in place: nothing to keep)
        assert (folder_of(cache) / "tantivy.broken").is_dir()


def test_an_index_damaged_while_serving_heals_at_the_next_fold(
    tree: Path, tmp_path: Path, served: tuple[Root, IndexManager, Service],
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """The watcher's fold opens a writer, which reads ``meta.json``: it failed, the root went
    ``off``, and search said "still being built" from then on."""
    r, manager, svc = served
    tear_meta(tmp_path / "cache")
    with caplog.at_level(logging.WARNING, logger="rootgrep.index"):
        (tree / "p0" / "m0.py").write_text("def handler_0_0(x):\n    return 'edited_while_torn'\n")
        ix = manager.get(r.path)
        assert ix is not None

        def found() -> list[str]:
            return [h.path for h in svc.search([r], Token(), query="edited_while_torn").results]

        wait_until(lambda: found() == ["p0/m0.py"] and not ix.dirty)
    assert ix.state == "ready", ix.error
    assert "damaged" in caplog.text
    answers_rightly(svc, r, tree)


def test_reindex_rebuilds_a_root_left_off_and_search_says_it_failed(
    tree: Path, tmp_path: Path, served: tuple[Root, IndexManager, Service],
) -> None:  # fmt: skip
    """Damaged again after its one heal, the root is left off (grep scans live); search
    says the index could not be built (not "still being built"), and reindex rebuilds it."""
    r, manager, svc = served
    ix = manager.get(r.path)
    assert ix is not None
    ix.healed = True  # (its one heal spent)
    tear_meta(tmp_path / "cache")
    (tree / "p1" / "m1.py").write_text("def handler_1_1(x):\n    return 'second'\n")
    wait_until(lambda: ix.state == "off")
    hits = svc.search([r], Token(), query="handler_3_7")
    assert hits.partial and hits.failed == [r.name] and hits.building == []
    res = svc.reindex([r], Token())
    assert res.roots[0].files == 40
    # (stale: its watcher's folds ended with the failure; grep scans live, search answers)
    assert ix.state == "stale" and ix.error is None
    answers_rightly(svc, r, tree, indexed=False)
    assert os.path.isdir(folder_of(tmp_path / "cache") / "tantivy.broken")


def test_an_index_another_process_writes_is_never_set_aside(tree: Path, tmp_path: Path) -> None:
    """Found by review: a heal moved aside the folder a daemon was writing (its writer lock
    went with it), took a writer of its own on the new one, and the daemon's next commit
    named segments now in ``tantivy.broken``: the next open found an empty index. A heal
    now takes tantivy's writer lock first, and leaves alone an index someone writes."""
    from rootgrep.index.store import RootIndex

    r = pin_root(str(tree))
    cache = tmp_path / "cache"
    writer = RootIndex(str(cache), r.path, hold_writer=True)  # (a daemon: its writer held)
    try:
        writer.sync(r.fs)
        other = RootIndex(str(cache), r.path)
        try:
            with pytest.raises(ValueError, match="damage seen"):
                other.rebuild(ValueError("damage seen by this one"))
        finally:
            other.close()
        assert not (folder_of(cache) / "tantivy.broken").exists()
        (tree / "p0" / "m1.py").write_text("def handler_0_1(x):\n    return 'still_written'\n")
        assert writer.sync(r.fs, only=[b"p0/m1.py"]).updated == 1
    finally:
        writer.close()
    again = RootIndex(str(cache), r.path)
    try:
        assert again.file_count == 40 and not again.corrupt
    finally:
        again.close()
        r.close()
