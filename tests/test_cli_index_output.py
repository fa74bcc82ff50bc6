"""``rootgrep index`` output (issue 9): one final line per root that gives its file count,
a total with several roots, and no progress bar left behind (none says "0 files" for an
unchanged tree). Run as a process with stderr captured: not a terminal, as in CI or a log."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from support import ROOTGREP, stop


def index(*dirs: Path, cache: Path) -> list[str]:
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(cache)}
    out = subprocess.run([ROOTGREP, "index", *map(str, dirs)], capture_output=True, text=True,
                         env=env, timeout=120, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    return out.stderr.splitlines()


def test_index_twice_shows_the_count_and_leaves_no_zero_bar(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    for i in range(3):
        (tree / "pkg" / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    cache = tmp_path / "cache"

    (first,) = index(tree, cache=cache)  # one line: no bar line beside it
    assert first.startswith(f"{tree}: 3 files indexed; read 3 ")
    assert "+3 ~0 -0" in first

    (again,) = index(tree, cache=cache)
    assert again.startswith(f"{tree}: 3 files indexed; unchanged")
    assert "0 files" not in again

    (tree / "pkg" / "m0.py").write_text("changed\n")
    (tree / "pkg" / "m1.py").unlink()
    (changed,) = index(tree, cache=cache)
    assert changed.startswith(f"{tree}: 2 files indexed; read 1 ") and "+0 ~1 -1" in changed


def test_several_roots_end_with_a_total(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for d, n in ((a, 2), (b, 1)):
        d.mkdir()
        for i in range(n):
            (d / f"f{i}.txt").write_text("x\n")
    lines = index(a, b, cache=tmp_path / "cache")
    assert [ln.split(";")[0] for ln in lines] == [
        f"{a}: 2 files indexed",
        f"{b}: 1 file indexed",
        "total: 3 files indexed in 2 of 2 roots",
    ]


def _imported(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines()
            if line.startswith("import time:")}  # fmt: skip


def test_index_to_no_terminal_writes_plain_lines_without_importing_rich(tmp_path: Path) -> None:
    """stderr no terminal (a log, CI): the same lines, and rich is not imported for a bar
    nobody sees (50-120 ms of every ``rootgrep index``)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("x\n")
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPROFILEIMPORTTIME": "1"}  # fmt: skip
    out = subprocess.run([ROOTGREP, "index", str(tree)], capture_output=True, text=True,
                         env=env, timeout=120, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    names = _imported(out.stderr)
    assert "rootgrep.index.store" in names  # (the listing is there)
    assert not {n for n in names if n.split(".")[0] == "rich"}
    said = [ln for ln in out.stderr.splitlines() if not ln.startswith("import time:")]
    assert len(said) == 1 and said[0].startswith(f"{tree}: 1 file indexed; read 1 ")


def test_index_to_a_terminal_draws_its_bar_with_rich(tmp_path: Path) -> None:
    """stderr a terminal (a pseudo-terminal here): rich's bar, and the summary line."""
    import pty

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("x\n")
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPROFILEIMPORTTIME": "1", "TERM": "xterm"}  # fmt: skip
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([ROOTGREP, "index", str(tree)], stdout=subprocess.DEVNULL,
                                stderr=follower, env=env)  # fmt: skip
        os.close(follower)
        follower = -1
        got = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # (EIO: the process closed its end)
                break
            if not chunk:
                break
            got += chunk
        assert proc.wait(timeout=120) == 0
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    text = got.decode(errors="replace")
    assert "rich.progress" in _imported(text.replace("\r", ""))
    assert f"{tree}: 1 file indexed; read 1 " in text


def test_index_with_stderr_closed_or_its_reader_gone_still_indexes_every_root(
    tmp_path: Path,
) -> None:
    """stderr closed (``2>&-``), or a pipe whose reader went away: the lines are lost, the
    indexing of every root is not (exit 0, each root's index made)."""
    trees = []
    for name in ("a", "b"):
        tree = tmp_path / name
        tree.mkdir()
        (tree / "f.txt").write_text("x\n")
        trees.append(str(tree))
    for how in ("closed", "broken"):
        cache = tmp_path / f"cache-{how}"
        env = {**os.environ, "ROOTGREP_CACHE_DIR": str(cache)}
        if how == "closed":
            proc = subprocess.run([ROOTGREP, "index", *trees], env=env, timeout=120,
                                  stdout=subprocess.DEVNULL, stderr=None, check=False,
                                  preexec_fn=lambda: os.close(2))  # fmt: skip
            code = proc.returncode
        else:
            read, write = os.pipe()
            os.close(read)  # (the reader is gone before the first line)
            try:
                code = subprocess.run([ROOTGREP, "index", *trees], env=env, timeout=120,
                                      stdout=subprocess.DEVNULL, stderr=write,
                                      check=False).returncode  # fmt: skip
            finally:
                os.close(write)
        assert code == 0, how
        lines = index(*map(Path, trees), cache=cache)  # (both indexed by the run before)
        assert [ln.split(": ", 1)[1].split(";")[1].strip()[:17] for ln in lines[:2]] == [
            "unchanged, read 0"
        ] * 2, (how, lines)


def test_a_name_with_control_characters_is_shown_escaped(tmp_path: Path) -> None:
    tree = tmp_path / "t\x1b[31mred\tname"
    tree.mkdir()
    (tree / "f.txt").write_text("x\n")
    (line,) = index(tree, cache=tmp_path / "cache")
    assert "\x1b" not in line and "\t" not in line
    assert line.startswith(str(tmp_path) + "/t\\x1b[31mred\\x09name: 1 file indexed")


def test_index_where_a_daemon_keeps_the_index_asks_it_and_opens_nothing(tmp_path: Path) -> None:
    """A running daemon holds the index's writer and folds every change: ``rootgrep index``
    asks it (its socket) and says so, without importing the index (tantivy, the state: a
    re-sync of its own would stat every file); a root it does not keep is synced here."""
    tree, other = tmp_path / "tree", tmp_path / "other"
    for d, n in ((tree, 3), (other, 1)):
        d.mkdir()
        for i in range(n):
            (d / f"f{i}.py").write_text(f"x = {i}\n")
    cache = tmp_path / "cache"
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(cache)}
    daemon = subprocess.Popen([ROOTGREP, "daemon", str(tree)], env=env, text=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        assert daemon.stderr is not None
        # (": ready (writer)" when its build was done before it was served, else
        # ": ready (built)" once it is, after "watching")
        seen: list[str] = []
        while not (any("watching" in s for s in seen) and any(": ready (" in s for s in seen)):
            seen.append(daemon.stderr.readline())
            assert seen[-1], ("the daemon exited", seen)
        out = subprocess.run([ROOTGREP, "index", str(tree)], capture_output=True, text=True,
                             env={**env, "PYTHONPROFILEIMPORTTIME": "1"}, timeout=120,
                             check=False)  # fmt: skip
        assert out.returncode == 0, out.stderr
        names = _imported(out.stderr)
        assert not names & {"rootgrep.index.store", "tantivy", "rootgrep.index.state"}, names
        said = [ln for ln in out.stderr.splitlines() if not ln.startswith("import time:")]
        assert said == [f"{tree}: 3 files indexed; kept fresh by rootgrep daemon pid {daemon.pid}"]
        (tree / "new.py").write_text("y = 1\n")
        first, second, total = index(tree, other, cache=cache)
        assert first.startswith(f"{tree}: ") and f"by rootgrep daemon pid {daemon.pid}" in first
        assert first.startswith(f"{tree}: 4 files") or "1 changed path not folded" in first
        assert second.startswith(f"{other}: 1 file indexed; read 1 ")  # (synced here)
        assert total.startswith("total: ") and total.endswith(" indexed in 2 of 2 roots")
        lines = index(other, tree, cache=cache)  # (in the order given, whoever syncs each)
        assert lines[0].startswith(f"{other}: 1 file indexed; unchanged")
        assert lines[1].startswith(f"{tree}: ") and "kept fresh" in lines[1]
        other_cap = subprocess.run([ROOTGREP, "index", "--max-file-size", "1000", str(tree)],
                                   capture_output=True, text=True, env=env, timeout=120,
                                   check=False)  # fmt: skip
        # (synced here when the daemon's writer is free at that moment, as it mostly is)
        assert other_cap.returncode == 0, other_cap.stderr
        assert other_cap.stderr.startswith((
            f"{tree}: not synced here: another process holds the index's writer; its daemon "
            "says: it indexes files up to 20971520 bytes, not 1000\n",
            f"{tree}: 4 files indexed; ")), other_cap.stderr  # fmt: skip
    finally:
        assert stop(daemon, 15) == 0
    (again,) = index(tree, cache=cache)  # (no daemon: synced here, every change folded in)
    assert again.startswith(f"{tree}: 4 files indexed; ")


def test_index_asked_all_through_a_daemons_first_build_never_says_a_wrong_count(
    tmp_path: Path,
) -> None:
    """``rootgrep index`` asked again and again from a daemon's start to the end of its
    first build: before its trigrams are committed the daemon has no socket and holds the
    writer (not synced here, said so); after, it answers (kept fresh, its symbols still being
    added, then in). Every line has the tree's true count, and the command never fails."""
    tree = tmp_path / "tree"
    for i in range(3_000):
        d = tree / f"p{i % 30}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"m{i}.py").write_text("".join(f"def f{i}_{j}():\n    return {j}\n"
                                            for j in range(20)))  # fmt: skip
    cache = tmp_path / "cache"
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(cache)}
    daemon = subprocess.Popen([ROOTGREP, "daemon", str(tree)], env=env, text=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 120  # (a hang guard)
        while time.monotonic() < deadline:
            (line,) = index(tree, cache=cache)
            seen.append(line)
            kept = f"{tree}: 3000 files indexed; kept fresh by rootgrep daemon pid {daemon.pid}"
            if line == kept:
                break  # (its symbols are in)
            assert line in (
                f"{kept}; its words and symbols still being added",
                f"{tree}: not synced here: another process holds the index's writer (a "
                "rootgrep serve, daemon or index, perhaps building it: run this again later)",
            ) or line.startswith(tuple(f"{tree}: 3000 files indexed; {how}" for how in (
                "read 3000 ", "unchanged, read 0 "))), line  # fmt: skip
            # (asked before the daemon took the writer: built here, and the daemon follows
            # that index until it takes the writer over)
        assert seen[-1] == kept, seen
        assert seen[0] != kept, seen  # (the first was asked before the build's end)
    finally:
        assert stop(daemon, 15) == 0
