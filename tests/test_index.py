"""The per-root index: indexed grep equals live grep, incremental sync, freshness, crashes."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rootgrep.index.manager import IndexManager
from rootgrep.index.plan import Q
from rootgrep.index.state import STATE_FILE, Entry, read_state, write_state
from rootgrep.index.store import RootIndex, _dir_bytes, index_dir_for, prune_cache
from rootgrep.roots import Root, pin_root
from rootgrep.service import Service, Settings, Token
from rootgrep.walker import list_files
from support import rg_matches


def wait_until(pred, seconds: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def both(live: Service, indexed: Service, root: Root, **q: object) -> tuple[list, list, bool]:  # type: ignore[type-arg]
    a = live.grep([root], Token(), max_results=1000, **q)  # type: ignore[arg-type]
    b = indexed.grep([root], Token(), max_results=1000, **q)  # type: ignore[arg-type]
    return [m.model_dump() for m in a.matches], [m.model_dump() for m in b.matches], b.index_used


# -- a generated corpus, indexed once ----------------------------------------------------------

WORDS = ["alpha", "beta", "Gamma", "delta", "foo_bar", "FooBar", "x", "ſtrange", "Σigma", "42",
         "err", "Error", "errno", "ab", "abc", "bcd", "\t", "é", "日本", "\u212aelvin",
         "maſk"]  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Service, Root]]:
    rnd = random.Random(7)
    root = tmp_path_factory.mktemp("corpus")
    for i in range(120):
        d = root / f"d{i % 9}" / (f"s{i % 4}" if i % 3 else "")
        d.mkdir(parents=True, exist_ok=True)
        lines = [
            " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(0, 8)))
            for _ in range(rnd.randint(0, 30))
        ]
        (d / f"f{i}.txt").write_text("\n".join(lines) + ("\n" if i % 5 else ""))
    (root / ".gitignore").write_text("d8/\n")
    (root / "bin.dat").write_bytes(b"alpha\0beta")
    r = pin_root(str(root))
    manager = IndexManager(str(tmp_path_factory.mktemp("cache")))
    manager.activate(r, 0)
    assert manager.wait_built(r.path, 60)
    indexed = Service([r], Settings(), indexes=manager)
    live = Service([r], Settings())
    yield live, indexed, r
    manager.close()
    r.close()


LITERALS = st.sampled_from([*WORDS, "alpha beta", "a", "Err", "ERROR", "foo", "bar", "ſt", "igma",
                            "kelvin", "MASK"])  # fmt: skip
REGEXES = st.sampled_from(
    [r"\w+rror\b", r"(alpha|beta) gamma", r"[Ff]oo_?[Bb]ar", r"^delta", r"\d+$", r"b.d",
     r"(?i)GAMMA\s+\w+", r"é|日本", r"x*", r"Σ\w+", r"ab(c|cd)?", r"err(no|or)"]
)  # fmt: skip


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    query=st.one_of(st.tuples(LITERALS, st.just(False)), st.tuples(REGEXES, st.just(True))),
    case_sensitive=st.booleans(),
    whole_word=st.booleans(),
)
def test_indexed_grep_equals_live_grep(corpus: tuple[Service, Service, Root],
                                       query: tuple[str, bool], case_sensitive: bool,
                                       whole_word: bool) -> None:  # fmt: skip
    live, indexed, root = corpus
    pattern, regex = query
    a, b, used = both(live, indexed, root, pattern=pattern, regex=regex,
                      case_sensitive=case_sensitive, whole_word=whole_word)  # fmt: skip
    assert used
    assert a == b


@pytest.mark.parametrize("path", ["d1", "d2/s1", None])
def test_indexed_grep_narrowed_to_a_path(
    corpus: tuple[Service, Service, Root], path: str | None
) -> None:
    live, indexed, root = corpus
    a, b, used = both(live, indexed, root, pattern="alpha", path=path)
    assert a == b and used and a


def test_ignored_or_hidden_requests_stay_live(corpus: tuple[Service, Service, Root]) -> None:
    live, indexed, root = corpus
    a, b, used = both(live, indexed, root, pattern="alpha", no_ignore=True)
    assert a == b and not used
    a, b, used = both(live, indexed, root, pattern="alpha", path="d8")  # inside an ignored dir
    assert a == b and not used and a


# -- real code against ripgrep ---------------------------------------------------------------


@pytest.fixture(scope="module")
def stdlib_index(
    stdlib_copy: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Service, Root]]:
    r = pin_root(str(stdlib_copy))
    manager = IndexManager(str(tmp_path_factory.mktemp("cache")))
    manager.activate(r, 0)
    assert manager.wait_built(r.path, 120)
    yield Service([r], Settings(), indexes=manager), r
    manager.close()
    r.close()


@pytest.mark.parametrize(
    ("pattern", "regex", "cs", "ww", "rg_flags"),
    [
        ("NotImplementedError", False, True, False, ["-F"]),
        (r"\w+Error\b", True, True, False, []),
        (r"[0-9]{4}-[0-9]{2}-[0-9]{2}", True, True, False, []),
        ("import os", False, False, False, ["-F", "-i"]),
        ("self", False, True, True, ["-F", "-w"]),
        (r"def (__init__|__repr__)\(self", True, True, False, []),
    ],
)
def test_indexed_grep_equals_rg_on_the_standard_library(
    stdlib_index: tuple[Service, Root], stdlib_copy: Path, pattern: str, regex: bool, cs: bool,
    ww: bool, rg_flags: list[str],
) -> None:  # fmt: skip
    svc, root = stdlib_index
    got: list[tuple[str, int]] = []
    cursor = None
    while True:
        res = svc.grep([root], Token(), pattern=pattern, regex=regex, case_sensitive=cs,
                       whole_word=ww, max_results=1000, cursor=cursor)  # fmt: skip
        assert res.index_used
        got += [(m.path, m.line) for m in res.matches]
        cursor = res.next_cursor
        if cursor is None:
            break
    want = rg_matches(stdlib_copy, pattern, *rg_flags)
    assert got == want and got


# -- sync and freshness --------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    r = tmp_path / "tree"
    for i in range(40):
        (r / f"p{i % 4}").mkdir(parents=True, exist_ok=True)
        (r / f"p{i % 4}" / f"m{i}.py").write_text(f"def fn_{i}():\n    return {i}\n")
    return r


def test_incremental_sync_reads_only_what_changed(tree: Path, tmp_path: Path) -> None:
    r = pin_root(str(tree))
    try:
        ix = RootIndex(str(tmp_path / "cache"), r.path)
        first = ix.sync(r.fs)
        assert first.read == 40 and first.added == 40
        again = ix.sync(r.fs)
        assert (again.read, again.added, again.updated, again.removed) == (0, 0, 0, 0)
        (tree / "p1" / "m1.py").write_text("def fn_1():\n    return 'changed'\n")
        (tree / "p2" / "new.py").write_text("def brand_new():\n    pass\n")
        (tree / "p3" / "m3.py").unlink()
        os.rename(tree / "p0" / "m0.py", tree / "p0" / "renamed.py")
        third = ix.sync(r.fs)
        assert third.read == 3  # the changed file, the new one, the renamed one
        assert (third.added, third.updated, third.removed) == (2, 1, 2)
        # a reopened index (another process, or after a restart) knows what it holds
        ix2 = RootIndex(str(tmp_path / "cache"), r.path)
        assert ix2.sync(r.fs).read == 0 and ix2.file_count == 40
    finally:
        r.close()


def test_a_state_with_two_files_under_one_id_is_rebuilt_not_served(
    tree: Path, tmp_path: Path
) -> None:
    r = pin_root(str(tree))
    try:
        cache = str(tmp_path / "cache")
        ix = RootIndex(cache, r.path)
        ix.sync(r.fs)
        state = os.path.join(ix.dir, STATE_FILE)
        entries, synced_at = read_state(state)  # type: ignore[misc]
        a, b = sorted(entries)[:2]
        entries[b] = Entry(
            entries[a].fid,
            entries[b].size,
            entries[b].mtime_ns,
            entries[b].ino,
            entries[b].ctime_ns,
        )
        write_state(state, entries, synced_at)  # what the reload race of issue 8 wrote
        reopened = RootIndex(cache, r.path)
        assert reopened.corrupt and reopened.file_count == 0  # never served as it is
        st = reopened.sync(r.fs)
        assert st.read == 40 and reopened.file_count == 40
        again = read_state(state)
        assert again is not None
        fids = [e.fid for e in again[0].values() if e.fid]
        assert len(fids) == len(set(fids)) == 40
        assert sorted(reopened.candidates(Q("all"))) == sorted(list_files(r.fs))
    finally:
        r.close()


@pytest.fixture
def serving(tree: Path, tmp_path: Path) -> Iterator[tuple[Root, IndexManager, Service, Service]]:
    """The tree's root with a watched, built index: (root, manager, indexed service, live one)."""
    r = pin_root(str(tree))
    manager = IndexManager(str(tmp_path / "cache"))
    try:
        manager.activate(r, 0)
        assert manager.wait_built(r.path, 60)
        yield r, manager, Service([r], Settings(), indexes=manager), Service([r], Settings())
    finally:
        manager.close()
        r.close()


def test_changes_while_serving_show_up_in_grep_at_once_and_in_search_after_sync(
    tree: Path, serving: tuple[Root, IndexManager, Service, Service]
) -> None:
    r, manager, svc, live = serving

    def grep(p: str) -> list[str] | None:
        """The indexed answer once it agrees with a live scan (None until then: the
        watcher reports a change a few milliseconds after it happens)."""
        res = svc.grep([r], Token(), pattern=p)
        assert res.index_used
        want = [m.path for m in live.grep([r], Token(), pattern=p).matches]
        got = [m.path for m in res.matches]
        return got if got == want else None

    assert grep("fn_5") == ["p1/m5.py"]
    (tree / "p1" / "m5.py").write_text("def renamed_fn():\n    pass\n")
    (tree / "p2" / "fresh.py").write_text("def fn_5_again():\n    pass\n")
    os.rename(tree / "p3" / "m7.py", tree / "p0" / "moved.py")
    wait_until(lambda: grep("fn_5") == ["p2/fresh.py"], 2)
    wait_until(lambda: grep("fn_7") == ["p0/moved.py"], 2)
    wait_until(lambda: grep("renamed_fn") == ["p1/m5.py"], 2)
    assert manager.get(r.path).dirty  # answered from the dirty set, before any commit
    # the watcher's batch is folded into the index, then ranked search sees it too
    wait_until(lambda: not manager.get(r.path).dirty)
    hits = svc.search([r], Token(), query="fresh")
    assert [h.path for h in hits.results] == ["p2/fresh.py"]
    gone = svc.search([r], Token(), query="fn_7 ext:py")
    assert [h.path for h in gone.results] == ["p0/moved.py"]


def test_directory_moves_and_deletions_while_serving(
    tree: Path, serving: tuple[Root, IndexManager, Service, Service]
) -> None:
    r, manager, svc, live = serving

    def agree(pattern: str) -> bool:
        res = svc.grep([r], Token(), pattern=pattern, max_results=1000)
        want = live.grep([r], Token(), pattern=pattern, max_results=1000)
        return res.index_used and [m.path for m in res.matches] == [m.path for m in want.matches]

    (tree / "q").mkdir()
    os.rename(tree / "p1", tree / "q" / "p1")
    shutil.rmtree(tree / "p2")
    (tree / "p3" / "sub" / "deeper").mkdir(parents=True)
    (tree / "p3" / "sub" / "deeper" / "late.py").write_text("def made_in_a_new_dir():\n")
    wait_until(lambda: agree("def fn_") and agree("made_in_a_new_dir"), 5)
    wait_until(lambda: not manager.get(r.path).dirty)
    index = manager.get(r.path).index
    assert index is not None
    held = set(index.entries)
    assert not any(p.startswith((b"p1/", b"p2/")) for p in held)
    assert {b"q/p1/m1.py", b"p3/sub/deeper/late.py"} <= held
    assert index.sync(r.fs).read == 0  # the folded changes left nothing for a full sync


@pytest.mark.parametrize("where", ["", "p0/"])
def test_ignore_file_edits_while_serving(
    tree: Path, serving: tuple[Root, IndexManager, Service, Service], where: str
) -> None:
    """An ignore file that changes which files a walk keeps: newly ignored files leave the
    answers, newly visible ones join them (and are watched from then on)."""
    r, manager, svc, live = serving
    base = tree / where
    (base / "gen").mkdir()
    (base / "gen" / "g.py").write_text("def fn_generated():\n")
    (base / ".gitignore").write_text("gen/\n")
    wait_until(lambda: not manager.get(r.path).dirty)

    def agree(pattern: str) -> list[str] | None:
        res = svc.grep([r], Token(), pattern=pattern, max_results=1000)
        want = [m.path for m in live.grep([r], Token(), pattern=pattern, max_results=1000).matches]
        got = [m.path for m in res.matches]
        return got if res.index_used and got == want else None

    # (the edit's events may still be on their way: until they are folded in, grep is live)
    wait_until(lambda: agree("fn_generated") == [], 5)
    (base / ".gitignore").write_text("m*.py\n")  # gen/ visible, the m*.py files ignored
    wait_until(lambda: agree("fn_generated") == [f"{where}gen/g.py"], 5)
    wait_until(lambda: agree("def fn_") is not None and not manager.get(r.path).dirty, 5)
    hits = agree("def fn_")
    assert hits is not None and f"{where}gen/g.py" in hits
    assert not [h for h in hits if h.startswith(where) and h.rpartition("/")[2].startswith("m")]
    (base / "gen" / "g.py").write_text("def fn_edited_later():\n")  # gen/ is watched now
    wait_until(lambda: agree("fn_edited_later") == [f"{where}gen/g.py"], 5)


def test_a_hard_link_changes_with_the_file_it_names(
    tree: Path, serving: tuple[Root, IndexManager, Service, Service]
) -> None:
    r, manager, svc, live = serving
    os.link(tree / "p1" / "m1.py", tree / "p2" / "also_m1.py")
    index = manager.get(r.path).index
    assert index is not None
    wait_until(lambda: b"p2/also_m1.py" in index.entries and not manager.get(r.path).dirty)
    with open(tree / "p1" / "m1.py", "a") as f:  # written through one name only
        f.write("def through_one_name():\n")

    def indexed() -> list[str] | None:
        res = svc.grep([r], Token(), pattern="through_one_name")
        folded = res.index_used and not manager.get(r.path).dirty
        return [m.path for m in res.matches] if folded else None

    wait_until(lambda: indexed() == ["p1/m1.py", "p2/also_m1.py"], 5)
    assert [m.path for m in live.grep([r], Token(), pattern="through_one_name").matches] == [
        "p1/m1.py", "p2/also_m1.py"
    ]  # fmt: skip


@pytest.mark.parametrize("synced_at", [None, 1764500000.25])
def test_the_state_file_round_trips_and_refuses_a_torn_copy(
    tmp_path: Path, synced_at: float | None
) -> None:
    entries = {
        b"a.py": Entry(1, 10, 1_700_000_000_123_456_789, 42, 1_700_000_000_123_456_789),
        b"dir/\xff\nodd name": Entry(0, 0, -5, 2**63 + 7, -5, pending=True),  # not text, pending
        b"": Entry(3, 2**40, 0, 1, 0),
    }
    path = str(tmp_path / STATE_FILE)
    write_state(path, entries, synced_at)
    got = read_state(path)
    assert got is not None
    back, when = got
    assert when == synced_at
    assert {p: (e.fid, e.size, e.mtime_ns, e.ino, e.pending) for p, e in back.items()} == {
        p: (e.fid, e.size, e.mtime_ns, e.ino, e.pending) for p, e in entries.items()
    }
    data = Path(path).read_bytes()
    for torn in (data[:-1], data[: len(data) // 2], data + b"x", b"", b"not a state"):
        Path(path).write_bytes(torn)
        assert read_state(path) is None


def test_where_inotify_cannot_be_used_watchfiles_keeps_the_index_fresh(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rootgrep.index.manager as manager_module

    def no_inotify(*_args: object, **_kw: object) -> object:
        raise OSError(38, "inotify unavailable here")  # (as on a kernel without it)

    monkeypatch.setattr(manager_module, "TreeWatcher", no_inotify)
    r = pin_root(str(tree))
    manager = IndexManager(str(tmp_path / "cache"))
    try:
        manager.activate(r, 0)
        assert manager.wait_built(r.path, 60) and manager.get(r.path).state == "ready"
        svc, live = Service([r], Settings(), indexes=manager), Service([r], Settings())

        def agree(pattern: str) -> list[str] | None:
            res = svc.grep([r], Token(), pattern=pattern)
            want = [m.path for m in live.grep([r], Token(), pattern=pattern).matches]
            got = [m.path for m in res.matches]
            return got if res.index_used and got == want else None

        (tree / "p1" / "m5.py").write_text("def edited_meanwhile():\n")
        (tree / "newdir" / "deep").mkdir(parents=True)  # a directory: a full re-sync
        (tree / "newdir" / "deep" / "n.py").write_text("def in_a_new_dir():\n")
        (tree / ".gitignore").write_text("p2/\n")  # an ignore file: a full re-sync too
        wait_until(lambda: agree("edited_meanwhile") == ["p1/m5.py"], 10)
        wait_until(lambda: agree("in_a_new_dir") == ["newdir/deep/n.py"], 10)
        wait_until(lambda: agree("def fn_") is not None and not manager.get(r.path).dirty, 10)
        assert not any(p.startswith("p2/") for p in agree("def fn_") or [])
    finally:
        manager.close()
        r.close()


def test_removed_root_stops_indexing_and_a_readded_one_resyncs(tree: Path, tmp_path: Path) -> None:
    r = pin_root(str(tree))
    manager = IndexManager(str(tmp_path / "cache"))
    try:
        ix = manager.activate(r, 42)
        assert ix is not None and manager.wait_built(r.path, 60)
        manager.release(r.path, 42, wait=True)
        assert manager.get(r.path) is None and ix.state == "off" and ix.index is None
        assert all(not t.is_alive() for t in ix.threads)
        (tree / "p1" / "late.py").write_text("def added_while_away():\n    pass\n")
        again = manager.activate(r, 43)
        assert again is not None and again is not ix and again.state == "building"
        assert manager.wait_built(r.path, 60) and again.state == "ready"
        svc = Service([r], Settings(), indexes=manager)
        res = svc.grep([r], Token(), pattern="added_while_away")
        assert res.index_used and [m.path for m in res.matches] == ["p1/late.py"]
    finally:
        manager.close()
        r.close()


BUILD_SCRIPT = """
import sys
from rootgrep.roots import pin_root
from rootgrep.index.store import RootIndex
r = pin_root(sys.argv[1])
ix = RootIndex(sys.argv[2], r.path)
print("start", flush=True)
ix.sync(r.fs)
print("done", flush=True)
"""


def test_a_build_killed_with_sigkill_reopens_and_resyncs(tmp_path: Path) -> None:
    src = tmp_path / "big"
    for i in range(1500):
        (src / f"d{i % 30}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 30}" / f"f{i}.txt").write_text(f"token_{i} " * 400 + "\n")
    cache = tmp_path / "cache"
    rnd = random.Random(3)
    for attempt in range(4):
        p = subprocess.Popen([sys.executable, "-c", BUILD_SCRIPT, str(src), str(cache)],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert p.stdout is not None and p.stdout.readline().strip() == "start"
        time.sleep(rnd.uniform(0.05, 0.6) if attempt else 0.2)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        p.stdout.close()
    r = pin_root(str(src))
    try:
        ix = RootIndex(str(cache), r.path)  # opens whatever the kills left
        ix.sync(r.fs)
        svc = Service([r], Settings())
        manager = IndexManager(str(cache))
        manager.activate(r, 0)
        assert manager.wait_built(r.path, 120) and manager.get(r.path).state == "ready"
        indexed = Service([r], Settings(), indexes=manager)
        for pat in ("token_1234 ", "token_7 ", "token_1499"):
            a = svc.grep([r], Token(), pattern=pat, max_results=1000)
            b = indexed.grep([r], Token(), pattern=pat, max_results=1000)
            assert b.index_used and [m.path for m in a.matches] == [m.path for m in b.matches]
            assert a.matches
        assert ix.file_count == 1500
        manager.close()
    finally:
        r.close()


def test_cache_is_bounded_least_recently_used_first(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    roots = []
    for name in ("one", "two", "three"):
        d = tmp_path / name
        d.mkdir()
        for i in range(30):
            (d / f"f{i}.txt").write_text(f"{name} {i} " * 200)
        roots.append(pin_root(str(d)))
    try:
        for r in roots:
            RootIndex(str(cache), r.path).sync(r.fs)
        order = [index_dir_for(str(cache), r.path) for r in roots]
        for age, d in enumerate(order):  # "one" was used longest ago
            for f in ("last_used", "manifest.json"):
                os.utime(os.path.join(d, f), (1000 + age, 1000 + age))
        sizes = [_dir_bytes(d) for d in order]
        evicted = prune_cache(str(cache), sizes[1] + sizes[2] + 1, keep=set())
        assert evicted == [order[0]] and not os.path.exists(order[0])
        evicted = prune_cache(str(cache), 1, keep={order[1]})  # in use: never evicted
        assert evicted == [order[2]] and os.path.exists(order[1])
    finally:
        for r in roots:
            r.close()


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 10])  # (10: a link under an ignored name)
def test_random_changes_while_serving_keep_indexed_grep_exact(tmp_path: Path, seed: int) -> None:
    """A seeded storm of creations, edits, deletions, renames and moves of files and
    directories, hard links, symlinks, binary files, hidden directories, files and directories
    trading places, and ignore-file edits, made while serving: after each burst, once
    the watcher has caught up, indexed grep equals live grep, and after the fold the index
    holds exactly the files a walk lists."""
    rnd = random.Random(seed)
    root = tmp_path / "storm"
    root.mkdir()
    words = ["alpha", "beta", "gamma", "Delta", "needle"]
    r = pin_root(str(root))
    manager = IndexManager(str(tmp_path / "cache"))
    try:
        manager.activate(r, 0)
        assert manager.wait_built(r.path, 60)
        svc, live = Service([r], Settings(), indexes=manager), Service([r], Settings())

        def dirs() -> list[Path]:
            return [root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]

        def files() -> list[Path]:
            return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]

        def text() -> str:
            return "\n".join(" ".join(rnd.choices(words, k=3)) for _ in range(rnd.randint(1, 4)))

        def step() -> None:
            op = rnd.randrange(9)
            if op <= 2 or not files():  # a new file, in a new directory now and then
                d = rnd.choice(dirs())
                if rnd.random() < 0.3:
                    d = d / f"d{rnd.randrange(100)}"
                    d.mkdir(exist_ok=True)
                (d / f"f{rnd.randrange(1000)}.txt").write_text(text())
            elif op == 3:
                rnd.choice(files()).write_text(text())
            elif op == 4:
                rnd.choice(files()).unlink()
            elif op == 5:
                f = rnd.choice(files())
                f.rename(rnd.choice(dirs()) / f"m{rnd.randrange(1000)}.txt")
            elif op == 6 and len(dirs()) > 1:
                d = rnd.choice(dirs()[1:])
                dest = rnd.choice(dirs()) / f"moved{rnd.randrange(100)}"
                if not dest.exists() and not str(dest).startswith(str(d)):
                    d.rename(dest)
            elif op == 7:
                f = rnd.choice(files())
                link = rnd.choice(dirs()) / f"h{rnd.randrange(1000)}.txt"
                if not link.exists():
                    os.link(f, link)
            elif op == 8 and rnd.random() < 0.5:
                odd(rnd.randrange(6))
            else:  # ignore rules that come and go
                d = rnd.choice(dirs())
                rules = rnd.choice(["", "m*.txt\n", "d1*/\n", "*.txt\n!f*.txt\n"])
                (d / ".gitignore").write_text(rules)

        def odd(kind: int) -> None:
            """Links, binary files, hidden directories, a file and a directory trading places,
            an ignore file renamed away."""
            if kind == 0:
                link = rnd.choice(dirs()) / f"s{rnd.randrange(100)}"
                if not os.path.lexists(link):
                    os.symlink(rnd.choice(files() + dirs()), link)
            elif kind == 1:
                f = rnd.choice(dirs()) / f"b{rnd.randrange(100)}.txt"
                f.write_bytes(b"needle alpha beta\0binary")
            elif kind == 2:
                (rnd.choice(dirs()) / ".hid").mkdir(exist_ok=True)
            elif kind == 3 and files():
                f = rnd.choice(files())
                f.unlink()
                f.mkdir()
                (f / "in.txt").write_text(text())
            elif kind == 4 and len(dirs()) > 1:
                d = rnd.choice(dirs()[1:])
                shutil.rmtree(d)
                d.write_text(text())
            elif kind == 5 and (ignores := sorted(root.rglob(".gitignore"))):
                g = rnd.choice(ignores)
                g.rename(g.parent / "old.gitignore")

        def agree(pattern: str) -> bool:
            res = svc.grep([r], Token(), pattern=pattern, max_results=1000)
            want = live.grep([r], Token(), pattern=pattern, max_results=1000)
            if not res.index_used:
                return False  # (not caught up yet: an ignore edit is still being folded)
            return [(m.path, m.line) for m in res.matches] == [
                (m.path, m.line) for m in want.matches
            ]

        for _burst in range(6):
            for _ in range(rnd.randint(3, 12)):
                step()
            for pattern in ("needle", "alpha beta", "Delta"):
                wait_until(lambda p=pattern: agree(p), 10)
        wait_until(lambda: not manager.get(r.path).dirty, 10)
        index = manager.get(r.path).index
        assert index is not None
        wait_until(lambda: set(index.entries) == set(list_files(r.fs)), 10)  # (binary too)
    finally:
        manager.close()
        r.close()


def test_a_change_finished_before_a_grep_is_always_seen_by_it(
    serving: tuple[Root, IndexManager, Service, Service], tree: Path
) -> None:
    """No pause between a write and the grep that follows: the watcher's reader may not have
    read the events yet, so indexed grep first routes what the kernel already queued."""
    r, _manager, indexed, _live = serving
    for i in range(30):
        d = tree / f"new{i}"
        d.mkdir()
        (d / "b.txt").write_text(f"fresh_token_{i}\n")  # in a directory not yet watched
        (tree / "p0" / "m0.py").write_text(f"edited_token_{i}\n")  # an edit of a known file
        for pattern, path in ((f"fresh_token_{i}", f"new{i}/b.txt"),
                              (f"edited_token_{i}", "p0/m0.py")):  # fmt: skip
            g = indexed.grep([r], Token(), pattern=pattern)
            assert [m.path for m in g.matches] == [path], (i, pattern)
            assert g.index_used
