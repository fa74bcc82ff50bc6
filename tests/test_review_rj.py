"""Review of schema 6 (no word positions): a ``"phrase"`` finds the files that hold it as
written, however the ``code`` tokenizer cuts it: a run of digits meeting a word ("0x1F" is
the words 0 and x1f), a word too long for the index (never indexed: still part of the
phrase), case ignored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rootgrep.index.manager import IndexManager
from rootgrep.roots import Root, pin_root
from rootgrep.service import Service, Settings, Token

LONG = "k" * 70  # longer than any word the index keeps (64)

FILES = {
    "hex.c": "#define FLAGS 0x1F | MASK\n",
    "hex_spaced.c": "x = 0 x1F\n",  # (the same words: 0, x1f)
    "hex_other.c": "y = 10x1F; 0 is not x1f here\n",
    "long.txt": f"alpha {LONG} omega\n",
    "long_other.txt": f"alpha omega {LONG}\n",
    "upper.txt": "THE NEEDLE\n  PROJECT\n",
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Root]]:
    root = tmp_path_factory.mktemp("phrases") / "root"
    root.mkdir()
    for name, body in FILES.items():
        (root / name).write_text(body)
    r = pin_root(str(root))
    manager = IndexManager(str(tmp_path_factory.mktemp("cache")))
    manager.activate(r, 0)
    assert manager.wait_built(r.path, 60)  # (a hang guard)
    yield Service([r], Settings(), indexes=manager), r
    manager.close()
    r.close()


def found(tree: tuple[Service, Root], query: str) -> set[str]:
    service, r = tree
    res = service.search([r], Token(), query=query)
    assert not res.partial
    return {h.path for h in res.results}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ('"0x1F | MASK"', {"hex.c"}),
        ('"0x1F"', {"hex.c", "hex_spaced.c"}),
        ('"x = 0"', {"hex_spaced.c"}),
        (f'"alpha {LONG} omega"', {"long.txt"}),
        (f'"omega {LONG}"', {"long_other.txt"}),
        ('"the needle project"', {"upper.txt"}),
    ],
)
def test_a_phrase_finds_the_files_holding_it_as_written(
    tree: tuple[Service, Root], query: str, expected: set[str]
) -> None:
    assert found(tree, query) == expected


def test_a_phrase_past_the_first_read_of_a_large_file_is_found(tmp_path: Path) -> None:
    """The index holds every word of a file up to --max-file-size; what is shown of a hit is
    its first --max-read-bytes: a phrase further on still finds the file (its words alone,
    in another order, do not)."""
    root = tmp_path / "root"
    root.mkdir()
    filler = b"filler line of words\n" * (3 * 4096 // 21 + 1)  # past the 4 KiB read below
    (root / "big.txt").write_bytes(filler + b"the needle project\n")
    (root / "big_apart.txt").write_bytes(filler + b"project needle\n")
    (root / "small.txt").write_bytes(b"a needle project\n")
    r = pin_root(str(root))
    manager = IndexManager(str(tmp_path / "cache"))
    try:
        manager.activate(r, 0)
        assert manager.wait_built(r.path, 60)  # (a hang guard)
        service = Service([r], Settings(max_read_bytes=4096), indexes=manager)
        res = service.search([r], Token(), query='"needle project"')
        assert {h.path for h in res.results} == {"big.txt", "small.txt"}
    finally:
        manager.close()
        r.close()


def test_the_phrase_checks_of_one_page_read_a_bounded_amount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checking a phrase past a hit's first read reads the file again: those reads share one
    budget per page (``PHRASE_READ_BYTES``, lowered here), so a query cannot make a page
    read every large file whole; a hit left unchecked past it is not shown (never shown
    unchecked), and with room every one is."""
    from rootgrep.service import ranked

    root = tmp_path / "root"
    root.mkdir()
    filler = b"filler line of words\n" * 600  # ~12 KiB: past the 4 KiB read below
    for i in range(4):
        (root / f"big{i}.txt").write_bytes(filler + b"the needle project\n")
    r = pin_root(str(root))
    manager = IndexManager(str(tmp_path / "cache"))
    try:
        manager.activate(r, 0)
        assert manager.wait_built(r.path, 60)  # (a hang guard)
        service = Service([r], Settings(max_read_bytes=4096), indexes=manager)
        whole = service.search([r], Token(), query='"needle project"')
        assert {h.path for h in whole.results} == {f"big{i}.txt" for i in range(4)}
        monkeypatch.setattr(ranked, "PHRASE_READ_BYTES", 2 * len(filler))
        cut = service.search([r], Token(), query='"needle project"')
        assert 1 <= len(cut.results) < 4
        assert {h.path for h in cut.results} < {h.path for h in whole.results}
        # a hit left unchecked ends its page and is checked by the next: paged through, the
        # pages hold every file once (before, one past the budget was skipped for good)
        seen: list[str] = [h.path for h in cut.results]
        cursor = cut.next_cursor
        for _ in range(10):
            if cursor is None:
                break
            page = service.search([r], Token(), query='"needle project"', cursor=cursor)
            seen += [h.path for h in page.results]
            cursor = page.next_cursor
        assert sorted(seen) == sorted(h.path for h in whole.results)
    finally:
        manager.close()
        r.close()


_FOLDER = r"""
import os, random, sys
from rootgrep.index import state
state.JOURNAL_MIN_BYTES = 700  # (a snapshot every few folds: compactions all along)
from rootgrep.index.store import RootIndex
from rootgrep.roots import pin_root
root, cache, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(seed)
r = pin_root(root)
ix = RootIndex(cache, r.path)
ix.sync(r.fs)
print(0, flush=True)
for k in range(1, 10**6):
    name = f"d{rnd.randrange(4)}/f{rnd.randrange(12)}.txt"
    p = os.path.join(root, name)
    if rnd.random() < 0.25 and os.path.exists(p):
        os.unlink(p)
    else:
        with open(p, "a") as f:
            f.write(f"needle {k}\n")
    ix.sync(r.fs, only=[name.encode()])
    print(k, flush=True)
"""


def test_a_writer_killed_at_any_fold_leaves_an_index_that_resyncs_to_the_tree(
    tmp_path: Path,
) -> None:
    """SIGKILL of a process folding one edit at a time (appends, snapshots, commits), at a
    different moment each round: the index reopens, a sync brings it to the tree, and its
    answers are ripgrep's."""
    import random
    import subprocess
    import sys

    from rootgrep.index.plan import Q
    from rootgrep.index.search_syntax import parse_search
    from rootgrep.index.store import RootIndex
    from rootgrep.walker import list_files
    from support import RG

    root = tmp_path / "root"
    for d in range(4):
        (root / f"d{d}").mkdir(parents=True)
        for i in range(0, 12, 2):
            (root / f"d{d}" / f"f{i}.txt").write_text(f"file {i}\n")
    cache = str(tmp_path / "cache")
    rnd = random.Random(7)
    for round_ in range(6):
        child = subprocess.Popen(
            [sys.executable, "-c", _FOLDER, str(root), cache, str(round_)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            for _ in range(rnd.randint(1, 25)):
                assert child.stdout.readline(), "the folding process ended early"
        finally:
            child.kill()
            child.wait(timeout=60)  # (a hang guard)
            if child.stdout is not None:
                child.stdout.close()
        r = pin_root(str(root))
        ix = RootIndex(cache, r.path)
        try:
            ix.sync(r.fs)
            assert ix.ready
            files = sorted(list_files(r.fs))
            assert sorted(ix.entries) == files
            assert sorted(ix.candidates(Q("all"))) == files
            out = subprocess.run(
                [RG, "-l", "needle", "."], cwd=root, capture_output=True, check=False
            )
            rg = {line.removeprefix(b"./") for line in out.stdout.splitlines()}
            assert {rel for _s, rel, _a in ix.rank(parse_search("needle")).hits} == rg
        finally:
            ix.close()
            r.close()


def test_an_excluded_phrase_excludes_the_files_holding_it_not_each_of_its_words(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    files = {
        "phrase.txt": "use foo bar here\n",
        "foo.txt": "use foo alone\n",
        "reversed.txt": "use bar foo\n",
        "far.txt": "foo\n" + "filler\n" * 2000 + "foo bar\n",  # (past the 4 KiB read)
    }
    for name, body in files.items():
        (root / name).write_text(body)
    r = pin_root(str(root))
    manager = IndexManager(str(tmp_path / "cache"))
    try:
        manager.activate(r, 0)
        assert manager.wait_built(r.path, 60)  # (a hang guard)
        service = Service([r], Settings(max_read_bytes=4096), indexes=manager)
        res = service.search([r], Token(), query='foo -"foo bar"')
        assert {h.path for h in res.results} == {"foo.txt", "reversed.txt"}
        res = service.search([r], Token(), query='use -"alone"')  # (one word: as -alone)
        assert {h.path for h in res.results} == {"phrase.txt", "reversed.txt"}
    finally:
        manager.close()
        r.close()
