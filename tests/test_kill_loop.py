"""Kills at every step: a short run of ``benchmarks/kill_loop.py`` (the same code, imported),
and the bug its first runs found."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from tantivy import Query  # noqa: E402

import kill_loop  # noqa: E402
from rootgrep.index.cache import folder_name  # noqa: E402
from rootgrep.index.store import RootIndex  # noqa: E402
from rootgrep.roots import pin_root  # noqa: E402


def test_eight_kills_at_build_fold_commit_and_state_write_leave_an_exact_index(
    tmp_path: Path,
) -> None:
    """SIGKILL ``rootgrep index`` / ``rootgrep daemon`` over an edited tree at moments aimed
    at a build, a fold, a commit and a state write (two each); after each, the index opens,
    re-syncs, names the tree's files and answers every query as a live scan and ripgrep."""
    lines: list[str] = []
    loop = kill_loop.KillLoop(tmp_path, files=120, seed=3, log=lines.append)
    report = loop.run(8)
    assert report.failures == [], report.failures
    assert sum(report.kills.values()) == 8, (report.as_dict(), lines)
    assert report.checks >= 8


def test_a_commit_killed_after_its_delete_file_was_written_does_not_block_the_next(
    tmp_path: Path,
) -> None:
    """A writer killed in a commit after tantivy wrote ``<segment>.<opstamp>.del`` but before
    ``meta.json`` named it (what the kill loop hit): the next process re-reads the same
    changes, reaches the same opstamp and wrote the same file name, and tantivy refused
    ("FileAlreadyExists") — in every later process, for good. The killed commit is laid out
    here exactly: its files kept, ``meta.json`` and the state as they were before it."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(20):
        (tree / f"f{i}.py").write_text(f"x = {i}\n")
    cache = tmp_path / "cache"
    r = pin_root(str(tree))
    try:
        ix = RootIndex(str(cache), r.path)
        ix.sync(r.fs)
        ix.close()
        folder = cache / folder_name(r.path)
        before = {n: (folder / n).read_bytes() for n in ("state.bin", "state.log")
                  if (folder / n).exists()}  # fmt: skip
        meta = (folder / "tantivy" / "meta.json").read_bytes()
        (tree / "f3.py").write_text("x = 'changed'\n")
        ix = RootIndex(str(cache), r.path)
        ix.sync(r.fs)  # (the commit, deleting f3.py's old document: a .del file)
        ix.close()
        assert any(n.endswith(".del") for n in os.listdir(folder / "tantivy"))
        (folder / "tantivy" / "meta.json").write_bytes(meta)  # (its last step never ran)
        for n in ("state.bin", "state.log"):
            if n in before:
                (folder / n).write_bytes(before[n])
            else:
                (folder / n).unlink(missing_ok=True)
        ix = RootIndex(str(cache), r.path)
        try:
            ix.sync(r.fs)
            assert ix.ready
            assert sorted(ix.entries) == sorted(p.name.encode() for p in tree.iterdir())
            lines = kill_loop._grep(r.fs, "changed", ix)
            assert lines == kill_loop._grep(r.fs, "changed", None) == [(b"f3.py", (1,))]
        finally:
            ix.close()
    finally:
        r.close()


# Syncs the tree 40 times, each time after a change, each sync taking a new writer (and so
# collecting the files tantivy no longer needs: ``store._new_writer``), then says "done".
_REWRITER = r"""
import sys
from pathlib import Path
from rootgrep.index.store import RootIndex
from rootgrep.roots import pin_root
tree, cache = Path(sys.argv[1]), sys.argv[2]
r = pin_root(str(tree))
ix = RootIndex(cache, r.path)
for i in range(40):
    (tree / f"w{i % 7}.py").write_text(f"def gamma_{i}(): pass\n" * (i % 5 + 1))
    ix.sync(r.fs)
ix.close()
print("done", flush=True)
"""


def test_a_reader_in_another_process_never_misses_files_while_writers_collect_garbage(
    tmp_path: Path,
) -> None:
    """Every new writer lets tantivy remove the files its last commit does not name. A
    process reading the same index meanwhile (reloading, searching, reading stored
    documents) must never find one of its files gone: tantivy's collection and a reader's
    reload take the index's meta lock (a file lock, across processes), and a file a reader
    opened stays readable once removed. Here the reader answers for the 50 files no writer
    touches, again and again, while another process re-takes the writer 40 times."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(50):
        (tree / f"a{i}.py").write_text(f"def alpha_{i}(): pass\n")
    cache = tmp_path / "cache"
    r = pin_root(str(tree))
    ix = RootIndex(str(cache), r.path)
    try:
        ix.sync(r.fs)
        stable = sorted((f"a{i}.py".encode(), (1,)) for i in range(50))
        p = subprocess.Popen([sys.executable, "-c", _REWRITER, str(tree), str(cache)],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
        reads = 0
        try:
            while p.poll() is None:
                ix.reload()
                assert sorted(kill_loop._grep(r.fs, "alpha_", ix)) == stable
                searcher = ix.index.searcher()
                for _score, addr in searcher.search(Query.all_query(), 200).hits:
                    searcher.doc(addr)  # (stored fields: the segment's store file)
                reads += 1
        finally:
            out, _ = p.communicate(timeout=300)  # (a hang guard)
        assert p.returncode == 0 and out.strip() == "done"
        assert reads > 0
        ix.reload()
        assert sorted(kill_loop._grep(r.fs, "gamma_39", ix)) == [(b"w4.py", (1, 2, 3, 4, 5))]
    finally:
        ix.close()
        r.close()
