"""rootgrep versions of different index schemas sharing one cache dir: each has its own index
folder (never a false negative, never a broken index), and a root's folders of older schemas
go once no process holds them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootgrep.cli import main as cli_main
from rootgrep.index import freshness, names
from rootgrep.index.cache import SCHEMA_VERSION, CacheDir, folder_name
from rootgrep.index.plan import plan
from rootgrep.index.store import RootIndex, prune_cache
from rootgrep.roots import pin_root

WORD = "needle_value"

# A process of another schema (``names.SCHEMA_VERSION`` patched: the folder's name and the
# manifest's version are read from it),
# holding its writer as a daemon does. Commands on stdin: ``sync``; ``fold PATH...`` (a
# watcher's fold: a sync of those paths only); ``check``: reload, then the files holding WORD
# that the index's candidates lack (a false negative each).
WORKER = textwrap.dedent(
    """
    import os, sys
    from rootgrep.index import names, store
    from rootgrep.index.plan import plan
    from rootgrep.roots import pin_root

    tree, cache_dir, schema, word = sys.argv[1:5]
    names.SCHEMA_VERSION = int(schema)
    r = pin_root(tree)
    ix = store.RootIndex(cache_dir, r.path, hold_writer=True, identity=r.fs.identity())
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "sync":
            ix.sync(r.fs)
            print("synced", flush=True)
        elif cmd == "fold":
            ix.sync(r.fs, only=[os.fsencode(a) for a in args])
            print("folded", flush=True)
        elif cmd == "check":
            ix.reload()
            found = set(ix.candidates(plan(word, regex=False)))
            live = set()
            for top, _, names in os.walk(tree):
                for n in names:
                    with open(os.path.join(top, n), "rb") as f:
                        if word.encode() in f.read():
                            live.add(os.fsencode(os.path.relpath(os.path.join(top, n), tree)))
            print(ix.ready, len(live), len(live - found), flush=True)
    ix.close()
    r.close()
    """
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    d = tmp_path / "tree"
    for i in range(120):
        sub = d / f"d{i % 6}"
        sub.mkdir(parents=True, exist_ok=True)
        body = "".join(f"line {j} of file {i}\n" for j in range(40 if i % 4 else 2500))
        (sub / f"f{i:03}.py").write_text(body + (f"{WORD} = {i}\n" if i % 5 == 0 else ""))
    return d


class Worker:
    def __init__(self, tree: Path, cache: Path, schema: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(tree), str(cache), str(schema), WORD],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.ask("") == "ready"

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if command:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        assert answer, f"the worker died answering {command!r}"
        return answer

    def close(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=120)
        self.proc.stdout.close()
        return self.proc.returncode


@pytest.fixture
def worker_factory() -> Iterator[list[Worker]]:
    made: list[Worker] = []
    yield made
    for w in made:
        if w.proc.poll() is None:
            w.close()


def missed(ix: RootIndex, tree: Path) -> tuple[int, int]:
    """(files holding WORD now, how many of them the index's candidates lack)."""
    ix.reload()
    found = set(ix.candidates(plan(WORD, regex=False)))
    live = {
        os.fsencode(os.path.relpath(p, tree))
        for p in tree.rglob("*")
        if p.is_file() and WORD.encode() in p.read_bytes()
    }
    return len(live), len(live - found)


def test_two_schemas_at_once_never_miss_a_match(
    tmp_path: Path, tree: Path, worker_factory: list[Worker]
) -> None:
    """An older version's daemon (schema 9, its writer held) builds; this version (10)
    builds at the same cache while it runs, the tree changed meanwhile; the daemon folds a
    change and greps; this version and a fresh opener grep: none misses a file a live scan
    finds. (When both shared one folder, this version's open wiped and rebuilt the index
    under the daemon, whose next commit named the segments it had held, removed since: every
    process's reload or open then failed on a missing segment file, for good.)"""
    cache = tmp_path / "cache"
    old = Worker(tree, cache, 9)
    worker_factory.append(old)
    assert old.ask("sync") == "synced"
    assert old.ask("check") == "True 24 0"  # (files holding WORD, of them missed)
    added = [f"d0/a{i}.py" for i in range(8)]  # (early in walk order: numbered anew below)
    for rel in added:
        (tree / rel).write_text(f"{WORD} = 'added'\n")
    assert old.ask("fold " + " ".join(added)) == "folded"  # (as its watcher would)
    r = pin_root(str(tree))
    try:
        ix = RootIndex(str(cache), r.path, identity=r.fs.identity())
        try:
            ix.sync(r.fs)
            assert missed(ix, tree) == (32, 0)
            (tree / "d1" / "b.py").write_text(f"{WORD} = 'folded'\n")
            assert old.ask("fold d1/b.py") == "folded"
            assert old.ask("check") == "True 33 0"
            assert old.ask("sync") == "synced"
            assert old.ask("check") == "True 33 0"
            ix.sync(r.fs)
            assert missed(ix, tree) == (33, 0)
        finally:
            ix.close()
        fresh = RootIndex(str(cache), r.path, identity=r.fs.identity())
        try:
            assert missed(fresh, tree) == (33, 0)
        finally:
            fresh.close()
    finally:
        r.close()
    assert old.close() == 0
    assert sorted(p.name for p in cache.iterdir() if p.is_dir()) == sorted(
        [folder_name(r.path, 9), folder_name(r.path)]  # (the old one was held meanwhile)
    )


def _folder(cache: Path, root: bytes, schema: int | None = None) -> Path:
    return cache / folder_name(root, schema)


def test_an_older_schemas_folder_goes_when_not_held_and_stays_while_held(
    tmp_path: Path, tree: Path, worker_factory: list[Worker], capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    r = pin_root(str(tree))
    try:
        old = Worker(tree, cache, 9)
        worker_factory.append(old)
        assert old.ask("sync") == "synced"
        newer = Worker(
            tree, cache, SCHEMA_VERSION + 1
        )  # (a newer version's: never removed by this one)
        worker_factory.append(newer)
        assert newer.close() == 0
        # an index folder named as before folders were keyed by schema (schema 10 and older)
        bare = cache / folder_name(r.path).rsplit("-v", 1)[0]
        bare.mkdir(mode=0o700)
        (bare / "manifest.json").write_text(json.dumps({"schema_version": 10, "root_display": "x"}))
        other_root = _folder(cache, b"/some/other/root", 9)  # (another root's: not this one's)
        other_root.mkdir(mode=0o700)

        ix = RootIndex(str(cache), r.path)  # (opening the root removes what it can)
        ix.close()
        assert _folder(cache, r.path, 9).is_dir()  # held by the running old version
        assert not bare.exists()
        assert _folder(cache, r.path, SCHEMA_VERSION + 1).is_dir() and other_root.is_dir()
        assert cli_main(["status", "--cache-dir", str(cache)]) == 0
        assert "index of schema 9 (another rootgrep version)" in capsys.readouterr().out

        assert old.close() == 0
        ix = RootIndex(str(cache), r.path)
        ix.close()
        assert not _folder(cache, r.path, 9).exists()
        assert (
            _folder(cache, r.path).is_dir() and _folder(cache, r.path, SCHEMA_VERSION + 1).is_dir()
        )
        assert other_root.is_dir()
        assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # (none left mid-way)
    finally:
        r.close()


def test_an_older_schemas_folder_is_evicted_by_the_lru_prune_once_let_go(
    tmp_path: Path, tree: Path, worker_factory: list[Worker]
) -> None:
    cache = tmp_path / "cache"
    r = pin_root(str(tree))
    try:
        ix = RootIndex(str(cache), r.path)
        ix.sync(r.fs)
        old = Worker(tree, cache, 9)  # (opened after: nothing removes it but the prune)
        worker_factory.append(old)
        assert old.ask("sync") == "synced"
        older = _folder(cache, r.path, 9)
        assert prune_cache(str(cache), 1, keep={ix.folder.name}) == []  # held by the old one
        assert old.close() == 0
        assert prune_cache(str(cache), 1, keep={ix.folder.name}) == [str(older)]
        assert not older.exists() and _folder(cache, r.path).is_dir()
        ix.close()
    finally:
        r.close()


def test_a_cli_grep_never_asks_the_daemon_of_another_schema(
    tmp_path: Path, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon binds its socket in its own schema's folder; an asker names the folder of
    its own schema, and one of another schema's is no index to it (it scans live)."""
    cache = tmp_path / "cache"
    r = pin_root(str(tree))
    try:
        monkeypatch.setattr(names, "SCHEMA_VERSION", 9)
        RootIndex(str(cache), r.path).close()
        monkeypatch.undo()
        pinned = CacheDir.open(str(cache))
        try:
            assert pinned.names() == [folder_name(r.path, 9)]
        finally:
            pinned.close()
        query = {"pattern": WORD, "regex": False, "case_sensitive": True}
        answer, why = freshness.ask_fresh(str(cache), r, query, max_file_size=1 << 20)
        assert answer is None and why.startswith("no index of")
    finally:
        r.close()
