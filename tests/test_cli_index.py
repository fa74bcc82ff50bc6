"""``rootgrep grep`` answers from the index a running daemon keeps fresh, exactly as a live
scan (ripgrep) does, and scans live otherwise (``--stats`` says which ran and why)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import MARKER, RG, ROOTGREP, assert_no_marker, stop

ENV = {k: v for k, v in os.environ.items() if k != "RIPGREP_CONFIG_PATH"}
WORD = "frobnicate_widget"
# a daemon that never folds changes on its own: every edit stays in its dirty set, so the
# CLI's answer after an edit can only be right if the dirty set reaches it
SLOW_FOLD = (
    "import sys; import rootgrep.index.manager as m; m.FLUSH_SECONDS = 3600.0; "
    "from rootgrep.cli import main; sys.exit(main(sys.argv[1:]))"
)


def make_tree(root: Path) -> Path:
    tree = root / "tree"
    (tree / "pkg" / "sub").mkdir(parents=True)
    # (.ignore: rg reads a .gitignore only in a git repository; and not at the top, where
    # a walk from a directory below would not read it, so the index could not serve one)
    (tree / "pkg" / ".ignore").write_text("*.log\n")
    (tree / "a.py").write_text(f"def {WORD}():\n    return 1\n")
    (tree / "b.py").write_text("nothing here\n" * 50)
    (tree / "pkg" / "c.py").write_text(f"x = 1\n# call {WORD} later\ny = 2\n")
    (tree / "pkg" / "sub" / "d.txt").write_text(f"{WORD.upper()}\n{WORD}\n")
    (tree / "pkg" / "gone.py").write_text(f"{WORD} in a file that will be removed\n")
    (tree / "pkg" / "skip.log").write_text(f"{WORD} ignored\n")
    (tree / "bin.dat").write_bytes(b"\0\1\2" + WORD.encode())
    for i in range(30):
        (tree / "pkg" / f"f{i}.py").write_text(f"value_{i} = {i}\n")
    return tree


def grep(cache: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [ROOTGREP, "grep", "--cache-dir", str(cache), *args],
        capture_output=True, cwd=cwd, env=ENV, timeout=120, check=False,
    )  # fmt: skip


def rg(*args: str, cwd: Path | None = None) -> bytes:
    out = subprocess.run([RG, "-n", "--sort", "path", *args], capture_output=True, cwd=cwd,
                         env=ENV, timeout=120, check=False)  # fmt: skip
    return out.stdout


def split_stats(out: bytes) -> tuple[bytes, str]:
    """(the results, the --stats block) of a grep's stdout."""
    lines = out.split(b"\n")
    for i in range(len(lines) - 2, -1, -1):
        if lines[i] == b"" and lines[i + 1].endswith(b" matched lines"):
            return b"\n".join(lines[:i]) + (b"\n" if i else b""), b"\n".join(lines[i:]).decode()
    raise AssertionError(f"no --stats block in {out!r}")


def start_daemon(tree: Path, cache: Path, *, slow_fold: bool) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-c", SLOW_FOLD] if slow_fold else [ROOTGREP]
    daemon, seen = watching([*cmd, "daemon", str(tree)], {**ENV, "ROOTGREP_CACHE_DIR": str(cache)})
    assert not any("scans it live" in s for s in seen), seen  # it serves its index
    return daemon


def watching(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], list[str]]:
    """A daemon started, once it says it is watching; and the lines it said before."""
    daemon = subprocess.Popen(argv, env=env, text=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    assert daemon.stderr is not None
    seen = []
    while "watching" not in (line := daemon.stderr.readline()):
        seen.append(line)
        if not line:
            stop(daemon)
            raise AssertionError(f"the daemon exited: {''.join(seen)}")
    return daemon, seen


def same_as_rg(cache: Path, *args: str, cwd: Path | None = None) -> str:
    """Run the grep with --stats; assert its results are rg's; return the stats block."""
    mine = grep(cache, "--stats", *args, cwd=cwd)
    assert mine.returncode in (0, 1), mine.stderr
    results, stats = split_stats(mine.stdout)
    assert results == rg(*args, cwd=cwd)
    return stats


def test_no_index_cache_scans_live_and_creates_nothing(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    cache = tmp_path / "no-cache"
    stats = same_as_rg(cache, WORD, str(tree))
    assert f"searched by live: no index cache at {cache}" in stats
    assert not cache.exists()  # (looking never creates the cache)


def test_a_cache_without_an_index_of_the_path_scans_live(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    cache = tmp_path / "cache"
    other = tmp_path / "other"
    other.mkdir()
    (other / "o.py").write_text(f"{WORD}\n")
    subprocess.run([ROOTGREP, "index", str(other), "--cache-dir", str(cache)], env=ENV,
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    stats = same_as_rg(cache, WORD, str(tree))
    assert f"no index of {tree} or of a directory above it in {cache}" in stats


def test_an_index_no_daemon_keeps_fresh_is_not_trusted(tmp_path: Path) -> None:
    """Built by ``rootgrep index`` and then edited: nothing knows what changed since, so the
    grep scans live, and the edit is seen."""
    tree = make_tree(tmp_path)
    cache = tmp_path / "cache"
    subprocess.run([ROOTGREP, "index", str(tree), "--cache-dir", str(cache)], env=ENV,
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    (tree / "b.py").write_text(f"now {WORD} is here\n")
    (tree / "a.py").write_text("no longer\n")
    stats = same_as_rg(cache, WORD, str(tree))
    assert "searched by live: no daemon keeps the index of" in stats
    assert b"b.py:1:now" in grep(cache, WORD, str(tree)).stdout


def test_a_daemons_index_answers_and_edits_after_it_was_built_are_seen(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    cache = tmp_path / "cache"
    daemon = start_daemon(tree, cache, slow_fold=True)
    try:
        stats = same_as_rg(cache, WORD, str(tree))
        assert "searched by index: the index of" in stats, stats
        assert "0 changed files" in stats
        # edits the daemon has not folded into its index: only its dirty set knows them
        (tree / "b.py").write_text(f"nothing\nnow {WORD} is here\n")  # gains a match
        (tree / "a.py").write_text("def renamed():\n    return 1\n")  # loses its match
        (tree / "pkg" / "gone.py").unlink()
        (tree / "pkg" / "new.py").write_text(f"import {WORD}\n")  # a new file
        (tree / "pkg" / "new.log").write_text(f"{WORD}\n")  # new, but ignored
        for args in ([WORD], ["-i", WORD], ["-c", WORD], ["-l", "-F", WORD], [r"now \w+"]):
            stats = same_as_rg(cache, *args, str(tree))
            assert "searched by index" in stats, stats
        out = grep(cache, WORD, str(tree)).stdout
        assert b"b.py:2:now" in out and b"new.py" in out and b"a.py" not in out
        assert b"gone.py" not in out and b"new.log" not in out
        assert "3 changed files read as they are now" in stats  # b.py, a.py, new.py
        # a directory below the daemon's root shares its index (relative output too)
        stats = same_as_rg(cache, WORD, "pkg", cwd=tree)
        assert "searched by index" in stats
        stats = same_as_rg(cache, WORD, cwd=tree / "pkg")
        assert "searched by index" in stats
    finally:
        assert stop(daemon, 15) == 0


def test_an_ignore_file_between_the_index_root_and_the_path_scans_live(tmp_path: Path) -> None:
    """The index of the tree lists what a walk from the tree lists; a walk from pkg/sub/
    does not read pkg/.ignore, and so may list other files: live."""
    tree = make_tree(tmp_path)
    cache = tmp_path / "cache"
    daemon = start_daemon(tree, cache, slow_fold=False)
    try:
        stats = same_as_rg(cache, WORD, str(tree / "pkg" / "sub"))
        assert "searched by live" in stats and "an ignore file on the way" in stats, stats
    finally:
        assert stop(daemon, 15) == 0


def test_a_folding_daemon_answers_the_same(tmp_path: Path) -> None:
    """With the daemon's usual folding (once a second) the answer is the same whether an
    edit is still dirty or already folded in."""
    tree = make_tree(tmp_path)
    cache = tmp_path / "cache"
    daemon = start_daemon(tree, cache, slow_fold=False)
    try:
        for i in range(5):
            (tree / "pkg" / f"f{i}.py").write_text(f"{WORD}_{i} = {i}\n")
            stats = same_as_rg(cache, WORD, str(tree))
            assert "searched by index" in stats, stats  # (the daemon answers, dirty or not)
    finally:
        assert stop(daemon, 15) == 0


def test_no_index_never_opens_the_index(tmp_path: Path) -> None:
    """With a daemon serving a fresh index, ``--no-index`` scans live: no module of the index
    package is even imported (so no cache, socket or index file is opened)."""
    tree = make_tree(tmp_path)
    cache = tmp_path / "cache"
    daemon = start_daemon(tree, cache, slow_fold=True)
    code = (
        "import sys\nfrom rootgrep.cli import main\n"
        f"code = main(['grep', '--no-index', '--stats', '--cache-dir', {str(cache)!r}, "
        f"{WORD!r}, {str(tree)!r}])\nsys.stdout.flush()\n"
        "print(sorted(m for m in sys.modules if m.startswith('rootgrep.index')), "
        "file=sys.stderr)\nsys.exit(code)\n"
    )
    try:
        assert "searched by index" in same_as_rg(cache, WORD, str(tree))  # (it could)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=ENV,
                             timeout=120, check=False)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stderr.strip() == b"[]"
        results, stats = split_stats(out.stdout)
        assert results == rg(WORD, str(tree))
        assert "searched by live: --no-index" in stats
    finally:
        assert stop(daemon, 15) == 0


def test_nothing_outside_the_path_is_read_through_the_index(tmp_path: Path) -> None:
    """The daemon indexes the whole tree, a secret included; a grep of a directory below it
    answers from that index but never shows a file outside that directory."""
    tree = make_tree(tmp_path)
    (tree / "secret.txt").write_text(f"{WORD} {MARKER}\n")
    cache = tmp_path / "cache"
    daemon = start_daemon(tree, cache, slow_fold=True)
    try:
        (tree / "secret2.txt").write_text(f"{WORD} {MARKER}\n")  # dirty, outside pkg/
        out = grep(cache, "--stats", WORD, str(tree / "pkg"))
        assert "searched by index" in out.stdout.decode()
        assert_no_marker(out.stdout, out.stderr)
        assert split_stats(out.stdout)[0] == rg(WORD, str(tree / "pkg"))
    finally:
        assert stop(daemon, 15) == 0


@pytest.mark.parametrize(
    "env",
    [
        ({"ROOTGREP_CACHE_DIR": "/x/rg-cache", "XDG_CACHE_HOME": "/x/xdg"}, "/x/rg-cache"),
        ({"XDG_CACHE_HOME": "/x/xdg", "HOME": "/x/home"}, "/x/xdg/rootgrep"),
        ({"HOME": "/x/home"}, "/x/home/.cache/rootgrep"),
    ],
)
def test_the_cli_finds_the_cache_where_the_index_puts_it(
    env: tuple[dict[str, str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rootgrep.index import cache, freshness

    for k in ("ROOTGREP_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env[0].items():
        monkeypatch.setenv(k, v)
    assert freshness.default_cache_dir() == cache.default_cache_dir() == env[1]


def test_a_killed_daemon_leaves_a_live_scan_and_its_successor_answers(tmp_path: Path) -> None:
    """A daemon killed by SIGKILL leaves its socket file behind: the grep then finds nobody
    answering and scans live; the next daemon replaces the socket and answers."""
    tree = make_tree(tmp_path)
    cache = tmp_path / "cache"
    first = start_daemon(tree, cache, slow_fold=True)
    first.kill()
    first.wait(15)
    stop(first)
    assert list(cache.glob("*/daemon.sock"))  # (left behind)
    (tree / "b.py").write_text(f"{WORD} after the daemon died\n")
    stats = same_as_rg(cache, WORD, str(tree))
    assert "searched by live: no daemon keeps the index of" in stats, stats
    second = start_daemon(tree, cache, slow_fold=True)
    try:
        (tree / "a.py").write_text("gone\n")
        stats = same_as_rg(cache, WORD, str(tree))
        assert "searched by index" in stats, stats
    finally:
        assert stop(second, 15) == 0
    assert not list(cache.glob("*/daemon.sock"))  # (a clean stop removes its socket)


@pytest.mark.parametrize("place", [b"lib//sub", b"lib/./sub", b"lib/../lib/sub", b"../outside"])
def test_the_daemon_refuses_a_request_naming_its_directory_oddly(
    tmp_path: Path, place, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A request's directory below the root must be plain names: with an empty, ``.`` or
    ``..`` part the daemon's prefix cut would not match what the asker reads (its answer
    says not fresh, and the asker scans live). And an answer over its cap is refused by the
    daemon before it is sent, not only by the asker."""
    from rootgrep.index import freshness
    from rootgrep.index.freshness import PROTOCOL, FreshnessServer, _b64
    from rootgrep.index.manager import IndexManager
    from rootgrep.roots import pin_root

    tree = make_tree(tmp_path / "tree")
    (tree / "lib" / "sub").mkdir(parents=True)
    (tree / "lib" / "sub" / "d.py").write_text(f"{WORD} = 4\n")
    r = pin_root(str(tree))
    manager = IndexManager(str(tmp_path / "cache"))
    server = FreshnessServer(manager)
    try:
        manager.activate(r, 0)
        assert manager.wait_built(r.path, 60)
        st = os.stat(tree / "lib" / "sub")
        query = {"pattern": WORD, "regex": False, "case_sensitive": True}
        request = {"v": PROTOCOL, "root": _b64(r.path), "place": _b64(b"lib/sub"),
                   "dev": st.st_dev, "ino": st.st_ino, "q": query}  # fmt: skip
        plain, _ = server.answer(r.path, request)
        assert plain["fresh"], plain  # (the same directory, named plainly)
        odd, paths = server.answer(r.path, {**request, "place": _b64(place)})
        assert not odd["fresh"] and paths == [], odd
        monkeypatch.setattr(freshness, "MAX_ANSWER", 3)  # (the one file's path is longer)
        big, paths = server.answer(r.path, request)
        assert not big["fresh"] and "cap" in big["why"] and paths == [], big
    finally:
        server.close()
        manager.close()
        r.close()


def test_asking_for_a_fresh_index_creates_nothing_in_the_cache(tmp_path: Path) -> None:
    """``ask_fresh`` only reads the cache: a cache dir that is missing is not made, and an
    index folder evicted between the listing and the asking is not made again (was: both
    were checked by name first, then opened with the creating openers)."""
    import shutil

    from rootgrep.index.cache import CacheDir, folder_name
    from rootgrep.index.freshness import _ask_index, ask_fresh
    from rootgrep.roots import pin_root

    tree = make_tree(tmp_path / "tree")
    r = pin_root(str(tree))
    query = {"pattern": WORD, "regex": False, "case_sensitive": True}
    try:
        missing = tmp_path / "no-cache" / "here"
        found, why = ask_fresh(str(missing), r, query, max_file_size=1 << 20)
        assert found is None and "no index cache" in why
        assert not (tmp_path / "no-cache").exists()
        cache = CacheDir.open(str(tmp_path / "cache"))
        try:
            folder = cache.open_index(r.path)
            assert folder is not None
            folder.close()
            shutil.rmtree(tmp_path / "cache" / folder_name(r.path))  # (evicted meanwhile)
            found, why = _ask_index(cache, r.path, r, query, 1 << 20)
            assert found is None and "gone" in why, why
            assert not (tmp_path / "cache" / folder_name(r.path)).exists()
        finally:
            cache.close()
    finally:
        r.close()


def test_a_daemon_answering_no_candidate_still_says_its_files_were_there(
    tmp_path: Path,
) -> None:
    """The daemon counts the files it holds only when it answers none (issue 11: the count
    is a pass over every indexed file): a grep of the working directory whose pattern no
    file can hold is still "no match" (1), not "no files were searched" (2), as rg says."""
    tree = make_tree(tmp_path)
    cache = tmp_path / "cache"
    daemon = start_daemon(tree, cache, slow_fold=False)
    try:
        out = grep(cache, "--stats", "zq_nowhere_qz", cwd=tree)
        assert out.returncode == 1, out.stderr
        assert out.stderr == b""
        assert "searched by index" in split_stats(out.stdout)[1]
        found = grep(cache, "--stats", WORD, cwd=tree / "pkg")  # (and a directory below)
        assert found.returncode == 0 and "searched by index" in split_stats(found.stdout)[1]
        assert split_stats(found.stdout)[0] == rg(WORD, cwd=tree / "pkg")
        none_below = grep(cache, "zq_nowhere_qz", cwd=tree / "pkg")
        assert none_below.returncode == 1 and none_below.stderr == b""
    finally:
        assert stop(daemon, 15) == 0


# the second commit (words and symbols) of a daemon's build, held until the file named by
# ROOTGREP_TEST_GO exists, then done as ``then`` says: grep must be answered meanwhile
HELD_BUILD = (
    "import os, sys, time; from rootgrep.index.store import RootIndex\n"
    "real = RootIndex._complete_locked\n"
    "def held(self, *a, **k):\n"
    "    while not os.path.exists(os.environ['ROOTGREP_TEST_GO']): time.sleep(0.02)\n"
    "    if os.environ['ROOTGREP_TEST_THEN'] == 'fail':\n"
    "        raise OSError(28, 'No space left on device')\n"
    "    return real(self, *a, **k)\n"
    "RootIndex._complete_locked = held\n"
    "from rootgrep.cli import main; sys.exit(main(sys.argv[1:]))"
)


def held_daemon(tmp_path: Path, then: str) -> tuple[Path, Path, Path, subprocess.Popen[str]]:
    """A daemon over ``make_tree`` whose build's second commit is held (``HELD_BUILD``), once
    it says it is watching and that it answers grep: (tree, cache, the go file, daemon)."""
    tree = make_tree(tmp_path)
    cache, go = tmp_path / "cache", tmp_path / "go"
    env = {**ENV, "ROOTGREP_CACHE_DIR": str(cache), "ROOTGREP_TEST_GO": str(go),
           "ROOTGREP_TEST_THEN": then}  # fmt: skip
    daemon, seen = watching([sys.executable, "-c", HELD_BUILD, "daemon", str(tree)], env)
    assert any("building" in s and "grep answered from it now" in s for s in seen), seen
    return tree, cache, go, daemon


def next_line(daemon: subprocess.Popen[str], starting: str) -> str:
    assert daemon.stderr is not None
    while not (line := daemon.stderr.readline()).startswith(starting):
        assert line, "the daemon exited"
    return line


def test_a_daemon_answers_grep_once_its_build_has_committed_the_trigrams(tmp_path: Path) -> None:
    """Found by review: the daemon waited for its whole build (words and symbols too) before
    it answered other processes' grep."""
    tree, cache, go, daemon = held_daemon(tmp_path, "finish")
    try:
        stats = same_as_rg(cache, WORD, str(tree))
        assert "searched by index: the index of" in stats, stats
        go.touch()  # (the second commit goes on)
        assert next_line(daemon, f"{tree}: ") == f"{tree}: ready (built)\n"
        assert "searched by index" in same_as_rg(cache, WORD, str(tree))
    finally:
        go.touch()
        stop(daemon)


def test_a_daemon_says_when_its_build_failed_after_the_trigrams(tmp_path: Path) -> None:
    """Found by review: a build failing in its second commit (a full disk) was said to be
    "(built)"; grep in other processes then scans live, as the daemon's index is off."""
    tree, cache, go, daemon = held_daemon(tmp_path, "fail")
    try:
        go.touch()
        line = next_line(daemon, f"{tree}: ")
        assert line.startswith(f"{tree}: off (failed: ") and "No space left on device" in line
        stats = same_as_rg(cache, WORD, str(tree))
        assert "searched by live" in stats, stats
    finally:
        stop(daemon)


CTRL_C_WHILE_STARTING = (
    "import os, signal, sys; from rootgrep.index.manager import IndexManager\n"
    "real = IndexManager.wait_answering\n"
    "def interrupted(self, *a, **k):\n"
    "    os.kill(os.getpid(), signal.SIGINT)  # (Ctrl-C while the first root builds)\n"
    "    return real(self, *a, **k)\n"
    "IndexManager.wait_answering = interrupted\n"
    "from rootgrep.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_a_daemon_stopped_while_its_roots_start_starts_no_more(tmp_path: Path) -> None:
    """Ctrl-C while the first root's build starts: the daemon stops there. Before, it
    waited for that build, started the next roots' builds, said "watching; Ctrl-C to stop",
    then stopped (a review: 11 s after a Ctrl-C with a large root first)."""
    first, second = make_tree(tmp_path / "a"), make_tree(tmp_path / "b")
    env = {**ENV, "ROOTGREP_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run(
        [sys.executable, "-c", CTRL_C_WHILE_STARTING, "daemon", str(first), str(second)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "watching" not in out.stderr and str(second) not in out.stderr, out.stderr
