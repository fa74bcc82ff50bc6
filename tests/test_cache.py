"""The index cache dir: pinned, owner- and mode-checked, never followed through a link, and
eviction that skips every index some process (or this one) holds."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from rootgrep.errors import InvalidPath
from rootgrep.index.cache import SCHEMA_VERSION, CacheDir, CacheUnusable, folder_name
from rootgrep.index.manager import IndexManager
from rootgrep.index.plan import plan
from rootgrep.index.search_syntax import parse_search
from rootgrep.index.store import RootIndex, index_dir_for, prune_cache
from rootgrep.roots import pin_root
from support import MARKER, ROOTGREP, assert_no_marker, checksum


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    d = tmp_path / "tree"
    d.mkdir()
    for i in range(20):
        (d / f"f{i}.py").write_text(f"def function_{i}():\n    return 'needle {i}'\n" * 20)
    return d


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside every root that looks like an index folder to a careless writer."""
    d = tmp_path / "outside"
    (d / "tantivy").mkdir(parents=True)
    (d / "secret.txt").write_text(MARKER)
    (d / "manifest.json").write_text('{"precious": true}')
    (d / "state.bin").write_text("precious state")
    (d / "tantivy" / "meta.json").write_text("precious meta")
    return d


def test_the_cache_dir_and_its_folders_are_created_0700_and_files_0600(
    tmp_path: Path, tree: Path
) -> None:
    cache = tmp_path / "deep" / "cache"
    r = pin_root(str(tree))
    try:
        ix = RootIndex(str(cache), r.path)
        ix.sync(r.fs)
        ix.close()
    finally:
        r.close()
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    folder = Path(index_dir_for(str(cache), r.path))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "tantivy").stat().st_mode) == 0o700
    for name in ("manifest.json", "state.bin", "lock", "last_used"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name


def test_an_existing_cache_readable_by_others_is_narrowed_to_0700(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    os.chmod(cache, 0o755)
    CacheDir.open(str(cache)).close()
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


def _refusals(tmp_path: Path) -> dict[str, Path]:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 4242, 4242)  # (the tests run as root: another uid owns it)
    group = tmp_path / "group-writable"
    group.mkdir()
    os.chmod(group, 0o770)
    others = tmp_path / "world-writable"
    others.mkdir()
    os.chmod(others, 0o703)
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    return {"someone else's": theirs, "group-writable": group, "world-writable": others,
            "a symlink": link}  # fmt: skip


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_an_unsafe_cache_dir_is_refused_with_a_clear_message(tmp_path: Path, tree: Path) -> None:
    r = pin_root(str(tree))
    try:
        for why, cache in _refusals(tmp_path).items():
            before = checksum(tmp_path / "real") if why == "a symlink" else None
            with pytest.raises(CacheUnusable) as err:
                CacheDir.open(str(cache))
            assert str(cache) in str(err.value), why
            with pytest.raises(CacheUnusable):
                IndexManager(str(cache))
            with pytest.raises(CacheUnusable):
                RootIndex(str(cache), r.path)
            assert list(os.listdir(cache)) == [], why  # nothing was written into it
            if before is not None:
                assert checksum(tmp_path / "real") == before
    finally:
        r.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_serve_and_the_cli_refuse_an_unsafe_cache_dir_at_start(tmp_path: Path, tree: Path) -> None:
    cache = _refusals(tmp_path)["someone else's"]
    for args in (["status"], ["index", str(tree)], ["search", "x", str(tree)],
                 ["serve", "--root", str(tree)]):  # fmt: skip
        p = subprocess.run([ROOTGREP, *args, "--cache-dir", str(cache)], capture_output=True,
                           text=True, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
        assert p.returncode == 2, (args, p.stderr)
        assert "[invalid_path]" in p.stderr and "belongs to uid 4242" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
    ok = subprocess.run([ROOTGREP, "serve", "--root", str(tree), "--no-index", "--cache-dir",
                         str(cache)], capture_output=True, text=True, timeout=60,
                        stdin=subprocess.DEVNULL)  # fmt: skip
    assert ok.returncode == 0, ok.stderr  # --no-index never touches the cache


@pytest.mark.parametrize("planted", ["folder", "tantivy", "state.bin", "manifest.json"])
def test_a_link_planted_in_the_cache_is_never_followed(
    tmp_path: Path, tree: Path, outside: Path, planted: str
) -> None:
    """Item 5: a symlink where a root's index folder (or a file of it) belongs, pointing
    outside: building, re-syncing, evicting and status never write, read or delete there."""
    cache = tmp_path / "cache"
    r = pin_root(str(tree))
    try:
        folder = Path(index_dir_for(str(cache), r.path))
        if planted == "folder":
            cache.mkdir(mode=0o700)
            folder.symlink_to(outside)
        else:
            first = RootIndex(str(cache), r.path)
            first.sync(r.fs)
            first.close()
            target = outside / planted
            if (folder / planted).is_dir():
                shutil.rmtree(folder / planted)
            else:
                (folder / planted).unlink()
            (folder / planted).symlink_to(target)
        before = checksum(outside)
        ix = RootIndex(str(cache), r.path)
        ix.sync(r.fs)
        hits = ix.candidates(plan("needle 3", regex=False))
        assert hits, "the index works in a real folder of its own"
        ix.close()
        status = subprocess.run([ROOTGREP, "status", "--cache-dir", str(cache)],
                                capture_output=True, text=True, timeout=60)  # fmt: skip
        assert status.returncode == 0, status.stderr
        assert_no_marker(status.stdout, status.stderr)
        assert folder.is_dir() and not folder.is_symlink()
        prune_cache(str(cache), 0, keep=set())
        assert checksum(outside) == before
        assert (outside / "secret.txt").read_text() == MARKER
    finally:
        r.close()


HOLDER = textwrap.dedent(
    """
    import sys
    from rootgrep.index.plan import plan
    from rootgrep.index.store import RootIndex
    from rootgrep.roots import pin_root

    r = pin_root(sys.argv[1])
    ix = RootIndex(sys.argv[2], r.path)
    ix.sync(r.fs)
    print("ready", flush=True)
    for line in sys.stdin:
        ix.reload()
        print(len(ix.candidates(plan(line.strip(), regex=False))), flush=True)
    ix.close()
    """
)


def test_eviction_skips_an_index_another_process_holds(tmp_path: Path, tree: Path) -> None:
    """Item 14: a second process holds an index; a manager here with a tiny
    --cache-max-bytes builds its own and prunes: the other process's folder stays, and its
    index still answers."""
    cache = tmp_path / "cache"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tree), str(cache)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert holder.stdin is not None and holder.stdout is not None
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.txt").write_text("something else entirely\n" * 100)
    try:
        assert holder.stdout.readline().strip() == "ready"
        held = Path(index_dir_for(str(cache), os.fsencode(os.path.realpath(tree))))
        assert held.is_dir()
        manager = IndexManager(str(cache), watch=False, cache_max_bytes=1)
        r = pin_root(str(other))
        try:
            manager.activate(r, 0, background=False)  # builds, then prunes
            manager.release(r.path, 0, wait=True)
            evicted = manager.prune()  # ("other" is unused now: it may go; the held one not)
        finally:
            manager.close()
            r.close()
        assert held.is_dir() and str(held) not in evicted
        assert Path(index_dir_for(str(cache), r.path)).exists() is False
        holder.stdin.write("needle 7\n")
        holder.stdin.flush()
        assert int(holder.stdout.readline()) == 1  # its index still works
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
        holder.stdout.close()
    assert holder.returncode == 0
    # once no process holds it, it is evicted like any other
    assert prune_cache(str(cache), 1, keep=set()) == [str(held)]


def test_eviction_never_takes_an_index_still_building_in_this_process(
    tmp_path: Path, tree: Path
) -> None:
    """Item 14, in one process: while a build waits for its turn (the manager builds one
    root at a time), neither its own manager's prune nor another manager's evicts it."""
    cache = tmp_path / "cache"
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "s.txt").write_text("old index\n" * 100)
    s = pin_root(str(stale))
    RootIndex(str(cache), s.path).sync(s.fs)  # an unused index: the one that may go
    manager = IndexManager(str(cache), watch=False, cache_max_bytes=1)
    other = IndexManager(str(cache), watch=False, cache_max_bytes=1)
    r = pin_root(str(tree))
    gate = threading.Event()
    try:
        manager._builds.acquire()  # the build must wait: it stays "building"
        ix = manager.activate(r, 0)
        assert ix is not None
        for _ in range(6000):
            if ix.index is not None:
                break
            gate.wait(0.01)
        assert ix.state == "building" and ix.index is not None
        folder = Path(ix.index.dir)
        evicted = manager.prune() + other.prune()
        assert folder.is_dir() and str(folder) not in evicted
        assert index_dir_for(str(cache), s.path) in evicted
        manager._builds.release()
        assert manager.wait_built(r.path, 120)
        assert ix.state != "off", ix.error
        ranking = ix.index.rank(parse_search("function_3"))
        assert [p for _, p, _ in ranking.hits] == [b"f3.py"]
    finally:
        manager.close()
        other.close()
        r.close()
        s.close()


def test_folder_names_are_the_hash_of_the_root_path_and_the_schema_version() -> None:
    digest = hashlib.sha256(b"/a").hexdigest()[:20]
    assert folder_name(b"/a") == f"{digest}-v{SCHEMA_VERSION}"
    assert folder_name(b"/a", 9) == f"{digest}-v9"


@pytest.mark.parametrize("hold_writer", [False, True])
def test_no_write_once_the_cache_path_leads_elsewhere(
    tmp_path: Path, tree: Path, outside: Path, hold_writer: bool
) -> None:
    """Tantivy writes by path: when an ancestor of the cache is renamed and replaced by a
    symlink to the outside (only the operator's own processes can: no tool may move it),
    the next sync refuses to write instead of writing into the symlink's target."""
    base = tmp_path / "base"
    cache = base / "cache"
    r = pin_root(str(tree))
    ix = RootIndex(str(cache), r.path, hold_writer=hold_writer)
    try:
        ix.sync(r.fs)
        os.rename(base, tmp_path / "base-moved")
        fake = outside / "cache" / folder_name(r.path) / "tantivy"
        fake.mkdir(parents=True)
        base.symlink_to(outside)
        before = checksum(outside)
        (tree / "new.py").write_text("a new file\n")
        with pytest.raises(InvalidPath):
            ix.sync(r.fs)
        assert checksum(outside) == before
    finally:
        ix.close()
        r.close()


def _service_outputs(home: Path, cache: Path, *, index: bool) -> list[str]:
    """What every reading tool shows of ``home`` (which holds ``cache``) with the cache dir
    hidden: its listings, greps, and its files asked for by name."""
    from rootgrep.errors import RootgrepError
    from rootgrep.service import Service, Settings, Token

    manager = IndexManager(str(cache), enabled=index, watch=False)
    roots = [pin_root(str(home))]
    service = Service(roots, Settings(), indexes=manager)
    outs: list[str] = []
    rel = str(cache.relative_to(home))
    try:
        outs.append(repr(service.list_directory(roots)))
        outs.append(repr(service.list_directory(roots, path=str(cache.parent.relative_to(home)))))
        outs.append(repr(service.find_files(roots, Token(), pattern="*", hidden=True)))
        outs.append(repr(service.directory_tree(roots, Token(), max_depth=6)))
        for pattern in ("precious-root-path", "schema_version"):
            found = service.grep(roots, Token(), pattern=pattern, hidden=True, no_ignore=True)
            outs.append(repr(found))
            assert found.matches == []
        for p in (rel, f"{rel}/some-index/manifest.json", f"{rel}/some-index/"):
            for call, arg in ((service.read_file, p.rstrip("/")), (service.file_info, p),
                              (service.list_directory, p)):  # fmt: skip
                try:
                    outs.append(repr(call(roots, path=arg)))
                except RootgrepError as e:
                    assert e.code == "not_found", e  # (its message only echoes the request)
                else:
                    raise AssertionError(f"{p} was shown: {outs[-1]}")
    finally:
        manager.close()
        roots[0].close()
    return outs


def _plant_other_index(cache: Path) -> None:
    folder = cache / "some-index"
    folder.mkdir(parents=True, mode=0o700)
    (folder / "manifest.json").write_text('{"schema_version": 3, "root_display": '
                                          '"/elsewhere/precious-root-path"}')  # fmt: skip


def test_with_no_index_another_process_s_cache_is_hidden_all_the_same(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "proj").mkdir(parents=True)
    (home / "proj" / "a.txt").write_text("hello\n")
    cache = home / "cache-dir" / "rootgrep"
    _plant_other_index(cache)
    for out in _service_outputs(home, cache, index=False):
        assert "precious-root-path" not in out and "some-index" not in out, out
        assert "'rootgrep'" not in out and "name='rootgrep'" not in out, out


def test_a_cache_dir_that_is_a_mount_point_is_hidden_from_its_parent_s_listing(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    (home / "proj").mkdir(parents=True)
    (home / "proj" / "a.txt").write_text("hello\n")
    cache = home / "mnt" / "rootgrep"
    cache.mkdir(parents=True, mode=0o700)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0700", "none", str(cache)],
                      capture_output=True).returncode != 0:  # fmt: skip
        pytest.skip("cannot mount a tmpfs here")
    try:
        assert os.stat(cache).st_dev != os.stat(cache.parent).st_dev
        _plant_other_index(cache)
        for out in _service_outputs(home, cache, index=True):
            assert "precious-root-path" not in out and "some-index" not in out, out
            assert "name='rootgrep'" not in out, out
    finally:
        subprocess.run(["umount", str(cache)], check=True)
