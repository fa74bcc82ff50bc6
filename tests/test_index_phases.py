"""A build commits twice: every file's trigrams first (the index answers grep from then on),
then their words and symbols (``RootIndex._complete_locked``). Between the two the tree keeps
changing, the process may be killed or the build cancelled: whatever happens, grep's answers
stay exact, no file is indexed twice, nothing outside the root is read, and the next sync
finishes the work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from rootgrep.index import cache as cache_mod
from rootgrep.index import completing
from rootgrep.index.plan import plan
from rootgrep.index.search_syntax import parse_search
from rootgrep.index.state import (
    Entries,
    Entry,
    Journal,
    decode_state,
    encode_record,
    encode_state,
    replay,
)
from rootgrep.index.store import RootIndex
from rootgrep.roots import Root, pin_root
from support import MARKER, assert_no_marker

FILES = {
    "pkg/shapes.py": "class Shape:\n    def area(self):\n        return getrecursionlimit\n",
    "pkg/util.py": "def helper():\n    return 'plain words here'\n",
    "pkg/deep/more.py": "def deeper():\n    pass\n",
    "notes.txt": "nothing to define, getrecursionlimit once\n",
    "other.js": "function jsThing() { return 1; }\n",
}


def tree_of(top: Path, files: dict[str, str] = FILES) -> Path:
    for rel, text in files.items():
        p = top / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return top


def docs(ix: RootIndex) -> int:
    ix.reload()
    return int(ix.index.searcher().num_docs)


def holding(ix: RootIndex, literal: str) -> list[str]:
    return [p.decode() for p in ix.candidates(plan(literal, regex=False))]


def defined(ix: RootIndex, name: str) -> list[tuple[str, str]]:
    return [(p.decode(), s.kind) for p, s in ix.find_symbols(name)]


def ranked(ix: RootIndex, query: str) -> list[str]:
    return sorted(rel.decode() for _, rel, _ in ix.rank(parse_search(query)).hits)


def build(tmp_path: Path, between: Callable[[RootIndex, Root], None]) -> tuple[RootIndex, Root]:
    """A first build of a tree of ``FILES``, with ``between`` run once its trigrams are
    committed (before its words and symbols are)."""
    top = tree_of(tmp_path / "root")
    r = pin_root(str(top))
    ix = RootIndex(str(tmp_path / "cache"), r.path)
    calls: list[int] = []

    def ready() -> None:
        calls.append(1)
        between(ix, r)

    stats = ix.sync(r.fs, grep_ready=ready)
    assert calls == [1] and stats.grep_ready_ms is not None
    assert 0 <= stats.grep_ready_ms <= stats.elapsed_ms
    return ix, r


def test_the_trigrams_are_committed_first_then_the_words_and_symbols(tmp_path: Path) -> None:
    seen: dict[str, object] = {}

    def between(ix: RootIndex, _r: Root) -> None:
        seen["ready"], seen["complete"] = ix.ready, ix.complete
        seen["bare"] = sorted(p.decode() for p in ix.bare_paths())
        seen["grep"] = holding(ix, "getrecursionlimit")
        seen["symbols"] = defined(ix, "Shape"), ix.symbols_of(b"pkg/shapes.py")
        seen["search"] = ranked(ix, "helper")

    ix, r = build(tmp_path, between)
    try:
        assert seen["ready"] is True and seen["complete"] is False
        assert seen["bare"] == sorted(FILES)
        assert seen["grep"] == ["notes.txt", "pkg/shapes.py"]  # (grep's answer, already)
        assert seen["symbols"] == ([], None)  # (not yet: a service parses bare files live)
        assert seen["search"] == []
        assert ix.complete and ix.bare_paths() == [] and ix.entries.bare == 0
        assert holding(ix, "getrecursionlimit") == ["notes.txt", "pkg/shapes.py"]
        assert defined(ix, "Shape") == [("pkg/shapes.py", "class")]
        assert ranked(ix, "helper") == ["pkg/util.py"]
        assert docs(ix) == 2 * len(FILES)  # (one trigram and one main document per file)
        # a re-sync of the unchanged tree commits nothing, calls nothing
        st = ix.sync(r.fs, grep_ready=lambda: pytest.fail("nothing to defer"))
        assert st.read == 0 and st.grep_ready_ms is None and docs(ix) == 2 * len(FILES)
    finally:
        ix.close()
        r.close()


def test_a_sync_of_a_few_paths_commits_both_at_once(tmp_path: Path) -> None:
    ix, r = build(tmp_path, lambda ix, r: None)
    try:
        (tmp_path / "root" / "pkg" / "util.py").write_text("def renamed():\n    pass\n")
        st = ix.sync(r.fs, only=[b"pkg/util.py"], grep_ready=lambda: pytest.fail("deferred"))
        assert st.updated == 1 and st.grep_ready_ms is None and ix.complete
        assert defined(ix, "renamed") == [("pkg/util.py", "function")]
        assert defined(ix, "helper") == []
    finally:
        ix.close()
        r.close()


def test_a_file_changed_between_the_commits_is_indexed_as_it_is_now(tmp_path: Path) -> None:
    def between(_ix: RootIndex, r: Root) -> None:
        top = Path(os.fsdecode(r.path))
        (top / "pkg" / "util.py").write_text("def replaced_helper():\n    return 'new text'\n")
        (top / "notes.txt").write_bytes(b"binary now\0" * 10)  # (no longer searchable)

    ix, r = build(tmp_path, between)
    try:
        top = tmp_path / "root"
        assert ix.complete
        assert holding(ix, "new text") == ["pkg/util.py"]
        assert holding(ix, "plain words") == []  # (its old trigrams deleted)
        assert holding(ix, "getrecursionlimit") == ["pkg/shapes.py"]
        assert defined(ix, "replaced_helper") == [("pkg/util.py", "function")]
        assert defined(ix, "helper") == []
        for rel in ("pkg/util.py", "notes.txt"):  # (current: grep trusts its entry)
            assert ix.is_current(r.fs, rel.encode())
        assert ix.entries[b"notes.txt"].fid == 0
        assert docs(ix) == 2 * (len(FILES) - 1)
        # the next full sync finds nothing to do
        assert ix.sync(r.fs).read == 0
        assert (top / "pkg" / "util.py").read_text().startswith("def replaced_helper")
    finally:
        ix.close()
        r.close()


def test_files_gone_or_swapped_for_links_and_fifos_between_the_commits(tmp_path: Path) -> None:
    """Between the commits a file is deleted, one becomes a FIFO, one a link to a secret
    outside the root, and a whole directory a link to an outside directory holding files of
    the same names: the second commit reads none of them (never through a link, never
    blocking on the FIFO) and deletes their documents; nothing outside changes."""
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    secret = outside / "secret.txt"
    secret.write_text(f"{MARKER}\nclass Leaked:\n    pass\n")
    (outside / "deep" / "more.py").write_text(f"class Leaked:\n    '{MARKER}'\n")
    before = sorted(
        (p, p.stat().st_mtime_ns, p.read_bytes()) for p in outside.rglob("*") if p.is_file()
    )

    def between(_ix: RootIndex, r: Root) -> None:
        top = Path(os.fsdecode(r.path))
        (top / "pkg" / "util.py").unlink()
        (top / "notes.txt").unlink()
        os.mkfifo(top / "notes.txt")
        (top / "other.js").unlink()
        (top / "other.js").symlink_to(secret)
        (top / "pkg" / "deep" / "more.py").unlink()
        (top / "pkg" / "deep").rmdir()
        (top / "pkg" / "deep").symlink_to(outside / "deep")

    ix, r = build(tmp_path, between)
    try:
        assert ix.complete
        assert sorted(p.decode() for p in ix.entries) == ["pkg/shapes.py"]
        assert docs(ix) == 2
        answers = [
            holding(ix, MARKER), holding(ix, "Leaked"), defined(ix, "Leaked"),
            ranked(ix, "Leaked"), ranked(ix, MARKER.lower()),
            [ix.symbols_of(p) for p in (b"other.js", b"pkg/deep/more.py", b"notes.txt")],
        ]  # fmt: skip
        assert answers == [[], [], [], [], [], [None, None, None]]
        assert_no_marker(answers)
        after = sorted(
            (p, p.stat().st_mtime_ns, p.read_bytes()) for p in outside.rglob("*") if p.is_file()
        )
        assert after == before
    finally:
        ix.close()
        r.close()


def test_a_cancel_between_the_commits_leaves_the_files_for_the_next_sync(tmp_path: Path) -> None:
    top = tree_of(tmp_path / "root")
    r = pin_root(str(top))
    ix = RootIndex(str(tmp_path / "cache"), r.path)
    stop = {"now": False}
    try:
        ix.sync(r.fs, cancelled=lambda: stop["now"], grep_ready=lambda: stop.update(now=True))
        assert ix.ready and not ix.complete and len(ix.bare_paths()) == len(FILES)
        assert holding(ix, "getrecursionlimit") == ["notes.txt", "pkg/shapes.py"]
        assert docs(ix) == len(FILES)  # (trigram documents only: nothing else committed)
        ix.sync(r.fs, only=[b"pkg/util.py"])  # (any sync finishes a bare file's work)
        assert ix.complete and docs(ix) == 2 * len(FILES)
        assert defined(ix, "Shape") == [("pkg/shapes.py", "class")]
    finally:
        ix.close()
        r.close()


def test_the_cli_says_what_an_interrupted_build_left_and_finishes_it(tmp_path: Path) -> None:
    """``status`` names the files an interrupted build left without their words and symbols;
    the next ``rootgrep index`` says it added them (before, it said "unchanged, read 0" while
    it parsed the whole tree, and ``status`` showed a finished index)."""
    top = tree_of(tmp_path / "root")
    cache = tmp_path / "cache"
    r = pin_root(str(top))
    ix = RootIndex(str(cache), r.path, identity=r.fs.identity())  # (as the CLI opens it)
    stop = {"now": False}
    try:
        ix.sync(r.fs, cancelled=lambda: stop["now"], grep_ready=lambda: stop.update(now=True))
        assert len(ix.bare_paths()) == len(FILES)
    finally:
        ix.close()
        r.close()

    def cli(*args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "rootgrep", *args, "--cache-dir", str(cache)],
                             capture_output=True, check=True, timeout=60)  # fmt: skip
        return (out.stdout + out.stderr).decode()

    n = len(FILES)
    assert f"; {n} files without their words and symbols yet" in cli("status")
    # (one of them now binary: no longer indexed, not counted; it was counted out of the
    # files changed, and one too few was said)
    (top / "notes.txt").write_bytes(b"\0binary now\0" * 64)
    said = cli("index", str(top))
    assert f"~1 -0; words and symbols added to {n - 1} files an earlier build left" in said
    assert "without their words" not in cli("status")
    assert "words and symbols added" not in cli("index", str(top))


KILLED_IN_THE_FIRST_COMMIT = r"""
import os, signal, sys
from rootgrep.index.store import RootIndex
from rootgrep.roots import pin_root
r = pin_root(sys.argv[1])
ix = RootIndex(sys.argv[2], r.path, identity=r.fs.identity())  # (as the CLI opens it)
real = RootIndex._record
def record(self, *a, **k):
    real(self, *a, **k)  # the first commit's staged state: every entry pending (and bare)
    os.kill(os.getpid(), signal.SIGKILL)  # killed before the commit lands
RootIndex._record = record
ix.sync(r.fs)
raise SystemExit("not killed")
"""


def test_a_build_killed_in_its_first_commit_is_not_said_to_have_left_files(
    tmp_path: Path,
) -> None:
    """Nothing of it was committed, and grep does not use that index (its entries pending):
    ``status`` said N files were left "without their words and symbols" (grep using the
    index), and the next ``rootgrep index``, reading every file again, said it finished N
    files an earlier build left (found by a review: pending entries counted as bare)."""
    top = tree_of(tmp_path / "root")
    cache = tmp_path / "cache"
    p = subprocess.run([sys.executable, "-c", KILLED_IN_THE_FIRST_COMMIT, str(top), str(cache)],
                       capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert p.returncode == -signal.SIGKILL, p.stderr

    def cli(*args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "rootgrep", *args, "--cache-dir", str(cache)],
                             capture_output=True, check=True, timeout=60)  # fmt: skip
        return (out.stdout + out.stderr).decode()

    n = len(FILES)
    status = cli("status")
    assert "synced never" in status and f"{n} pending" in status, status
    said = cli("index", str(top))
    assert f"~{n} -0" in said, said  # (every file read again in full: pending)
    assert "without their words" not in status and "earlier build left" not in said


def test_a_cancel_stops_the_second_commit_between_two_files_of_one_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled between two files, not only between directories (one directory of 5,000
    files took 10 s to stop: the server's shutdown waited all that time)."""
    files = {f"f{i:03}.py": f"def f{i}():\n    pass\n" for i in range(200)}
    top = tree_of(tmp_path / "root", files)
    r = pin_root(str(top))
    ix = RootIndex(str(tmp_path / "cache"), r.path)
    second, read = threading.Event(), []
    real = completing.text_of

    def counted(data: bytes) -> str:  # (what the second commit does with each file it reads)
        if second.is_set():
            read.append(1)
        return real(data)

    monkeypatch.setattr(completing, "text_of", counted)
    try:
        ix.sync(r.fs, cancelled=lambda: len(read) >= 3, grep_ready=second.set)
        assert len(read) == 3 and len(ix.bare_paths()) == len(files)
    finally:
        ix.close()
        r.close()


CHILD = r"""
import os, signal, sys
from rootgrep.index.store import RootIndex
from rootgrep.roots import pin_root
when = sys.argv[3]
r = pin_root(sys.argv[1])
ix = RootIndex(sys.argv[2], r.path)
if when == "between":
    ix.sync(r.fs, grep_ready=lambda: os.kill(os.getpid(), signal.SIGKILL))
else:  # killed once the second commit has landed, before the state names it
    real, records = RootIndex._record, []
    def record(self, *a, **k):
        records.append(1)
        if len(records) == 4:  # (build: staged, final; then the second commit's staged, final)
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, *a, **k)
    RootIndex._record = record
    ix.sync(r.fs)
raise SystemExit("not killed")
"""


def killed_then_opened(tmp_path: Path, script: str, when: str) -> tuple[Root, RootIndex]:
    """``script`` run on a tree of ``FILES`` (argv: tree, cache dir, ``when``), asserted to
    have killed itself; then the tree's index opened here."""
    top = tree_of(tmp_path / "root")
    cache = tmp_path / "cache"
    p = subprocess.run(
        [sys.executable, "-c", script, str(top), str(cache), when],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert p.returncode == -signal.SIGKILL, p.stderr
    r = pin_root(str(top))
    return r, RootIndex(str(cache), r.path)


@pytest.mark.parametrize("when", ["between", "after-the-second-commit"])
def test_a_build_killed_between_or_after_the_commits_reopens_and_finishes(
    tmp_path: Path, when: str
) -> None:
    r, ix = killed_then_opened(tmp_path, CHILD, when)
    try:
        if when == "between":  # (grep-ready as committed; the rest left to do)
            assert ix.ready and not ix.complete and len(ix.bare_paths()) == len(FILES)
            assert holding(ix, "getrecursionlimit") == ["notes.txt", "pkg/shapes.py"]
            assert defined(ix, "Shape") == []
        else:  # (pending as staged: read again in full, whatever the commit holds)
            assert not ix.ready and ix.entries.pending == len(FILES)
        ix.sync(r.fs)
        assert ix.complete
        assert docs(ix) == 2 * len(FILES)  # (no main document twice)
        assert defined(ix, "Shape") == [("pkg/shapes.py", "class")]
        assert defined(ix, "jsThing") == [("other.js", "function")]
        assert holding(ix, "getrecursionlimit") == ["notes.txt", "pkg/shapes.py"]
        assert ranked(ix, "helper") == ["pkg/util.py"]
    finally:
        ix.close()
        r.close()


ORPHANS = r"""
import os, signal, sys
from pathlib import Path
from rootgrep.index.store import RootIndex
from rootgrep.roots import pin_root
top, cache, when = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
r = pin_root(str(top))
ix = RootIndex(cache, r.path)
real, records = RootIndex._record, []
def record(self, *a, **k):
    real(self, *a, **k)
    records.append(1)
    if len(records) == kill_after:  # (the staged state written, its commit not landed)
        os.kill(os.getpid(), signal.SIGKILL)
RootIndex._record = record
def swap():
    (top / "pkg" / "util.py").unlink()  # (gone)
    (top / "notes.txt").write_bytes(b"now binary\0" * 4)  # (no longer indexed: id 0)
if when == "second-commit":  # (build: staged 1, final 2; the second commit: staged 3)
    kill_after = 3
    ix.sync(r.fs, grep_ready=swap)
else:  # a watcher's sync of the two paths, on a complete index
    kill_after = 1_000
    ix.sync(r.fs)
    swap()
    kill_after = len(records) + 1
    ix.sync(r.fs, only=[b"pkg/util.py", b"notes.txt"])
raise SystemExit("not killed")
"""


@pytest.mark.parametrize("when", ["second-commit", "a-fold"])
def test_a_crash_before_a_commit_that_drops_files_leaves_no_documents_behind(
    tmp_path: Path, when: str
) -> None:
    """Found by review: a commit dropping a file (gone, or now binary) was staged with the
    file forgotten (or under id 0); killed before that commit landed, the file's documents
    stayed in the index for good, and the next new file took their id again."""
    r, ix = killed_then_opened(tmp_path, ORPHANS, when)
    top = tmp_path / "root"
    try:
        ix.sync(r.fs)
        assert ix.complete
        assert sorted(p.decode() for p in ix.entries if ix.entries[p].fid) == [
            "other.js", "pkg/deep/more.py", "pkg/shapes.py"
        ]  # fmt: skip
        assert docs(ix) == 2 * 3  # (nothing of the two files left)
        (top / "new.txt").write_text("a new file\n")
        ix.sync(r.fs)
        assert holding(ix, "plain words") == [] and holding(ix, "getrecursionlimit") == [
            "pkg/shapes.py"
        ]
        assert docs(ix) == 2 * 4
    finally:
        ix.close()
        r.close()


def test_the_bare_flag_survives_the_snapshot_and_the_journal() -> None:
    entries = {
        b"a.py": Entry(1, 10, 20, 30, 20, bare=True),
        b"b.py": Entry(2, 11, 21, 31, 21, pending=True, bare=True),
        b"c.py": Entry(3, 12, 22, 32, 22),
    }
    got, synced_at = decode_state(encode_state(entries, 5.0))
    assert synced_at == 5.0
    assert {p: (e.pending, e.bare) for p, e in got.items()} == {
        b"a.py": (False, True), b"b.py": (True, True), b"c.py": (False, False)
    }  # fmt: skip
    assert Entries(got).bare == 2 and Entries(got).pending == 1
    later = Entries(got).changed(
        {b"a.py": Entry(1, 10, 20, 30, 20), b"d.py": Entry(4, 1, 2, 3, 2, bare=True)}
    )
    assert later.bare == 2 and later.files == 4
    assert later.changed({b"b.py": None, b"d.py": None}).bare == 0
    journal = encode_record(
        7, 5.0, [(b"a.py", Entry(1, 10, 20, 30, 20, bare=True)), (b"c.py", None)]
    )
    replayed: dict[bytes, Entry] = {b"c.py": Entry(3, 12, 22, 32, 22)}
    assert replay(replayed, None, journal, Journal(7)) == 5.0
    assert {p: (e.pending, e.bare) for p, e in replayed.items()} == {b"a.py": (False, True)}


def test_no_main_document_holds_trigrams(tmp_path: Path) -> None:
    """``tri`` only in part documents: a main document, committed later, holds none."""
    ix, r = build(tmp_path, lambda ix, r: None)
    try:
        searcher = ix.index.searcher()
        from tantivy import Occur, Query

        main_with_tri = Query.boolean_query([
            (Occur.Must, Query.term_query(ix.schema, "tri", "get")),
            (Occur.MustNot, Query.term_query(ix.schema, "part", 1)),
        ])  # fmt: skip
        assert searcher.search(main_with_tri, limit=10).hits == []
        assert cache_mod.SCHEMA_VERSION >= 10
    finally:
        ix.close()
        r.close()


def test_the_first_commits_memory_is_given_back_before_the_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """glibc keeps what the first commit's indexing freed (150 MB at 100k files) through the
    whole second commit unless it is trimmed: once, between the two."""
    from rootgrep import memory

    said: list[str] = []
    monkeypatch.setattr(memory, "malloc_trim", lambda: said.append("trim"))
    real = RootIndex._complete_locked

    def second(self: RootIndex, *a: object, **k: object) -> None:
        said.append("second commit")
        real(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(RootIndex, "_complete_locked", second)
    ix, r = build(tmp_path, lambda ix, r: said.append("grep ready"))
    try:
        assert said == ["grep ready", "trim", "second commit"]
    finally:
        ix.close()
        r.close()
