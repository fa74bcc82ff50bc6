"""An edit that keeps a file's size and gives it its old mtime back (``touch -r``,
``touch -d``, ``cp -p``, ``os.utime``) is seen by every way an index learns of changes: a
re-sync after a restart (``rootgrep index``, a server's start, ``reindex``), the watcher's
fold, and a daemon the CLI asks. The key of a file holds its ctime, which user space cannot
set back; and a file the watcher named is read again whatever its key says."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootgrep.index.manager import IndexManager
from rootgrep.index.state import Entry
from rootgrep.index.store import RootIndex
from rootgrep.roots import Root, pin_root
from rootgrep.service import Service, Token
from support import ROOTGREP, start_daemon, stop, wait_until, watched

EDITS = ["touch -r", "touch -d", "cp -p", "os.utime"]
OLD, NEW = "old_token_1", "new_token_9"  # (the same length: the size stays)


def same_key_edit(path: Path, how: str, scratch: Path) -> None:
    """``OLD`` replaced by ``NEW`` in place (the same inode), then the old mtime given back
    ``how``; asserted: size, mtime and inode as before."""
    st = os.stat(path)
    data = path.read_bytes().replace(OLD.encode(), NEW.encode())
    assert len(data) == st.st_size
    ref = scratch / "ref"
    ref.write_bytes(data)
    os.utime(ref, ns=(st.st_atime_ns, st.st_mtime_ns))
    if how == "cp -p":  # (cp writes into the existing file: its inode stays)
        subprocess.run(["cp", "-p", str(ref), str(path)], check=True)
    else:
        with open(path, "r+b") as f:
            f.write(data)
        if how == "touch -r":
            subprocess.run(["touch", "-r", str(ref), str(path)], check=True)
        elif how == "touch -d":
            sec, ns = divmod(st.st_mtime_ns, 10**9)
            subprocess.run(["touch", "-d", f"@{sec}.{ns:09d}", str(path)], check=True)
        else:
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = os.stat(path)
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    top = tmp_path / "tree"
    for d in range(3):
        (top / f"p{d}").mkdir(parents=True)
        for f in range(5):
            (top / f"p{d}" / f"m{f}.py").write_text(f"def fn_{d}_{f}():\n    return 0\n")
    (top / "p1" / "target.py").write_text(f"def target():\n    return '{OLD}'\n")
    return top


def found(svc: Service, r: Root, word: str) -> tuple[list[str], list[str]]:
    """(the indexed grep's paths for ``word``, the search's), asserted answered by the index."""
    res = svc.grep([r], Token(), pattern=word)
    assert res.index_used
    hits = svc.search([r], Token(), query=word)
    return [m.path for m in res.matches], [h.path for h in hits.results]


@pytest.mark.parametrize("how", EDITS)
def test_a_resync_after_a_restart_sees_an_edit_that_kept_size_and_mtime(
    tree: Path, tmp_path: Path, how: str
) -> None:
    """What ``rootgrep index`` run again, a server's start and ``reindex`` do: the state
    kept on disk is compared with the tree."""
    r = pin_root(str(tree))
    try:
        ix = RootIndex(str(tmp_path / "cache"), r.path)
        ix.sync(r.fs)
        ix.close()
        same_key_edit(tree / "p1" / "target.py", how, tmp_path)
        ix = RootIndex(str(tmp_path / "cache"), r.path)  # (a restart: the state from disk)
        try:
            stats = ix.sync(r.fs)
            assert stats.updated == 1
        finally:
            ix.close()
    finally:
        r.close()
    with watched(tree, tmp_path / "cache") as (r, _, svc):
        assert found(svc, r, NEW) == (["p1/target.py"], ["p1/target.py"])
        assert found(svc, r, OLD) == ([], [])


@pytest.fixture
def serving(tree: Path, tmp_path: Path) -> Iterator[tuple[Root, IndexManager, Service]]:
    with watched(tree, tmp_path / "cache") as served:
        yield served


@pytest.mark.parametrize("how", EDITS)
def test_the_watchers_fold_keeps_an_edit_that_kept_size_and_mtime(
    tree: Path, tmp_path: Path, serving: tuple[Root, IndexManager, Service], how: str
) -> None:
    """The watcher marks the file dirty (scanned live); its fold compared the key, found it
    unchanged, dropped the mark and kept the old text in the index for good."""
    r, manager, svc = serving
    same_key_edit(tree / "p1" / "target.py", how, tmp_path)
    ix = manager.get(r.path)
    wait_until(lambda: not ix.dirty and found(svc, r, NEW)[0] == ["p1/target.py"])
    wait_until(lambda: found(svc, r, NEW) == (["p1/target.py"], ["p1/target.py"]))
    assert not ix.dirty  # (answered by the index itself, not from the dirty set)
    assert found(svc, r, OLD) == ([], [])


def test_a_sync_of_the_paths_a_watcher_named_reads_them_whatever_their_key(
    tree: Path, tmp_path: Path
) -> None:
    """An edit within one tick of the clock (or on a file system without ctime) leaves even
    the ctime as it was: the state is made to hold the file's key as it is after the edit,
    and a sync of that path (a fold) must still read it."""
    r = pin_root(str(tree))
    ix = RootIndex(str(tmp_path / "cache"), r.path)
    try:
        ix.sync(r.fs)
        same_key_edit(tree / "p1" / "target.py", "os.utime", tmp_path)
        rel = b"p1/target.py"
        old = ix.entries[rel]
        st = os.stat(tree / "p1" / "target.py")
        ix.entries = ix.entries.changed(
            {rel: Entry(old.fid, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)}
        )
        assert ix.is_current(r.fs, rel)  # (what any comparison of keys would conclude)
        assert ix.sync(r.fs, only=[rel]).updated == 1
        assert ix.sync(r.fs).updated == 0  # (a full re-sync still trusts an unchanged key)
    finally:
        ix.close()
        r.close()


def test_the_cli_asking_a_daemon_and_index_run_again_see_the_edit(
    tree: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(cache)}

    def rootgrep(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([ROOTGREP, *args], env=env, capture_output=True, text=True,
                              timeout=60)  # fmt: skip

    assert rootgrep("index", str(tree)).returncode == 0
    same_key_edit(tree / "p1" / "target.py", "touch -r", tmp_path)
    assert rootgrep("index", str(tree)).returncode == 0  # (across a restart: the state)
    want = f"{tree}/p1/target.py:2:    return '{NEW}'\n"
    daemon = start_daemon(tree, cache)
    try:
        assert rootgrep("grep", NEW, str(tree)).stdout == want
        path = tree / "p1" / "target.py"
        st = os.stat(path)
        path.write_text(path.read_text().replace(NEW, OLD))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        back = f"{tree}/p1/target.py:2:    return '{OLD}'\n"
        wait_until(lambda: rootgrep("grep", OLD, str(tree)).stdout == back)
        # (search reads the index alone: the daemon's fold read the file again)
        wait_until(lambda: "p1/target.py" in rootgrep("search", OLD, str(tree)).stdout)
        assert rootgrep("grep", NEW, str(tree)).returncode == 1
    finally:
        stop(daemon)
