"""Temps left by a write killed mid-way are removed at the next start, never a live writer's.

The killed writer is a helper process that calls the very confine function every atomic write
uses (``_write_temp``) and is SIGKILLed while its temp exists; "the next start" is a real
``rootgrep serve --allow-write`` process's first write in the root, and an index folder
opened again (``CacheDir.open_index``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from rootgrep import confine
from rootgrep.confine import Beneath
from rootgrep.index.cache import CacheDir, folder_name
from rootgrep.index.store import RootIndex
from rootgrep.roots import pin_root
from rootgrep.service import writes
from rootgrep.service.writes import sweep_temps
from support import MARKER, assert_no_marker, checksum
from test_race import Swapper

# Writes ``NAME`` in directory DIR through confine._write_temp, one chunk, says "temp" and
# waits for a line on stdin before the next (EOF: the last), then installs the temp.
_WRITER = r"""
import os, sys
from rootgrep import confine
d, name = sys.argv[1], sys.argv[2].encode()
dirfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
def chunks():
    yield b"x" * 65536
    print("temp", flush=True)
    sys.stdin.readline()
    yield b"y" * 65536
temp = confine._write_temp(dirfd, name, 0o644, chunks())
confine._install(dirfd, temp, name, overwrite=True)
print("done", flush=True)
"""


def _writer(directory: Path, name: str) -> subprocess.Popen[str]:
    """A writer stopped in the middle of its write (its temp exists, whole or not)."""
    p = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(directory), name],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "temp"
    return p


def _temps(directory: Path, name: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith(f".{name}.rootgrep-"))


def _killed_writer(directory: Path, name: str) -> str:
    p = _writer(directory, name)
    p.send_signal(signal.SIGKILL)
    p.wait(30)
    assert p.stdin is not None and p.stdout is not None
    p.stdin.close()
    p.stdout.close()
    (left,) = _temps(directory, name)  # what a killed write leaves today
    assert confine.is_temp_name(left.encode())
    return left


def test_a_write_killed_mid_way_leaves_a_temp_that_the_next_server_removes(world: Path) -> None:
    """A real server process with --allow-write, on its first write in the root, removes the
    temps killed writes left there (also in a hidden, an ignored and a nested directory), and
    changes nothing else inside the root or outside it."""
    root = world / "root"
    (root / ".hidden").mkdir()
    (root / "build").mkdir()
    (root / ".gitignore").write_text("build/\n*.tmp\n")
    left = {
        d: _killed_writer(d, "big.txt")
        for d in (root, root / "sub", root / ".hidden", root / "build")
    }
    outside_before = checksum(world / "outside")
    for d, name in left.items():
        assert (d / name).exists()

    async def first_write() -> str:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "rootgrep", "serve", "--allow-write", "--no-index", "--root", str(root)],
            env={**os.environ, "ROOTGREP_CACHE_DIR": str(world / "cache")},
        )
        with open(world / "server.err", "w") as err, anyio.fail_after(60):
            async with Client(stdio_client(params, errlog=err), mode="legacy") as c:
                res = await c.call_tool("write_file", {"path": "new.txt", "content": "hi\n"})
                assert not res.is_error
                return repr(res)

    out = anyio.run(first_write)
    assert_no_marker(out)
    for d, name in left.items():
        assert not (d / name).exists(), d
    assert (root / "new.txt").read_text() == "hi\n"
    assert sorted(os.listdir(root)) == [".gitignore", ".hidden", "a.txt", "build", "new.txt", "sub"]
    assert checksum(world / "outside") == outside_before


def test_a_temp_held_by_a_live_writer_is_kept_and_its_write_completes(world: Path) -> None:
    root = world / "root"
    p = _writer(root / "sub", "big.txt")
    try:
        (live,) = _temps(root / "sub", "big.txt")
        fs = Beneath.pin(str(root))
        try:
            assert sweep_temps(fs) == 0
        finally:
            fs.close()
        assert _temps(root / "sub", "big.txt") == [live]
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "done"
    finally:
        p.kill()
        p.wait(30)
        for pipe in (p.stdin, p.stdout):
            if pipe is not None:
                pipe.close()
    assert (root / "sub" / "big.txt").read_bytes() == b"x" * 65536 + b"y" * 65536
    assert _temps(root / "sub", "big.txt") == []


def test_only_a_single_linked_regular_file_named_like_a_temp_is_removed(world: Path) -> None:
    """Decided: a name matching the pattern exactly, on a regular file with one link owned by
    this user and not locked, is taken for a killed writer's temp (a file can carry no other
    mark of ours). Links (never followed), directories, FIFOs, hard-linked files and names
    that only look alike are left as they are; nothing outside the root changes."""
    root = world / "root"
    secret = world / "outside" / "secret.txt"
    hexes = iter(f"{i:012x}" for i in range(1, 100))

    def temp_name(base: str = "f") -> str:
        return f".{base}.rootgrep-{next(hexes)}.tmp"

    plain = root / temp_name()
    plain.write_text("left by hand\n")
    link = root / temp_name()
    link.symlink_to(secret)
    dangling = root / temp_name()
    dangling.symlink_to(world / "outside" / "new-file")
    directory = root / temp_name()
    directory.mkdir()
    (directory / "x").write_text("x\n")
    fifo = root / temp_name()
    os.mkfifo(fifo)
    linked = root / temp_name()
    linked.write_text("two names\n")
    os.link(linked, root / "other-name.txt")
    outside_link = root / temp_name()
    os.link(secret, outside_link)
    alike = [root / ".f.rootgrep-XYZ.tmp", root / ".f.rootgrep-0000000000ab.tmp.bak",
             root / "f.rootgrep-0000000000ab.tmp", root / ".f.rootgrep-0000000000AB.tmp"]  # fmt: skip
    for p in alike:
        p.write_text("look-alike\n")
    before = checksum(world / "outside")
    fs = Beneath.pin(str(root))
    try:
        assert sweep_temps(fs) == 1
    finally:
        fs.close()
    assert not plain.exists()
    for kept in (link, dangling, directory, fifo, linked, outside_link, *alike):
        assert os.path.lexists(kept), kept
    assert secret.read_text() == f"{MARKER}\n"
    assert not (world / "outside" / "new-file").exists()
    assert checksum(world / "outside") == before


def test_an_index_folder_opened_again_removes_its_dead_temps_only(tmp_path: Path) -> None:
    """The index folder's own atomic writes (state, manifest) killed mid-way: their temps
    go when the folder is next opened; a live writer's stays; tantivy's temps go once this
    process holds the index's writer."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.py").write_text("def alpha(): pass\n")
    cache = tmp_path / "cache"
    r = pin_root(str(tree))
    ix = RootIndex(str(cache), r.path)
    ix.sync(r.fs)
    ix.close()
    folder = cache / folder_name(r.path)
    dead = _killed_writer(folder, "state.bin")
    live_writer = _writer(folder, "manifest.json")
    try:
        (live,) = _temps(folder, "manifest.json")
        tantivy_temp = folder / "tantivy" / ".tmpAb12Cd"
        tantivy_temp.write_text("{")  # what a write of meta.json killed mid-way leaves
        pinned = CacheDir.open(str(cache))
        try:
            opened = pinned.open_index(r.path)
            assert opened is not None
            opened.close()
        finally:
            pinned.close()
        assert not (folder / dead).exists()
        assert (folder / live).exists()
        assert tantivy_temp.exists()  # (no writer taken yet)
        ix = RootIndex(str(cache), r.path)
        try:
            (tree / "b.py").write_text("def beta(): pass\n")
            ix.sync(r.fs)  # (takes the writer)
            assert not tantivy_temp.exists()
            assert sorted(ix.entries) == [b"a.py", b"b.py"]
        finally:
            ix.close()
    finally:
        live_writer.kill()
        live_writer.wait(30)
        for pipe in (live_writer.stdin, live_writer.stdout):
            if pipe is not None:
                pipe.close()
        r.close()


def test_a_cleaner_between_a_writers_open_and_its_lock_never_takes_a_live_temp(
    tmp_path: Path,
) -> None:
    """The window between a temp's creation and its writer's flock: a cleaner that removed
    the file in it makes the writer start again with another name (its write still lands)."""
    d = tmp_path / "d"
    d.mkdir()
    dirfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    real_open = os.open
    cleaned: list[bool] = []

    def open_then_clean(path: object, flags: int, *a: object, **kw: object) -> int:
        fd = real_open(path, flags, *a, **kw)  # type: ignore[arg-type]
        if isinstance(path, bytes) and flags & os.O_EXCL and not cleaned:
            cleaned.append(confine.remove_dead_temp(dirfd, path))  # (before the writer locks)
        return fd

    try:
        os.open = open_then_clean  # type: ignore[assignment]
        try:
            temp = confine._write_temp(dirfd, b"t.txt", 0o644, [b"payload"])
        finally:
            os.open = real_open  # type: ignore[assignment]
        assert cleaned == [True]  # the first temp was taken by the cleaner
        assert confine.remove_dead_temp(dirfd, temp[0]) is False  # the second is locked
        confine._install(dirfd, temp, b"t.txt", overwrite=True)
    finally:
        os.close(dirfd)
    assert (d / "t.txt").read_bytes() == b"payload"
    assert os.listdir(d) == ["t.txt"]


def test_the_root_sweep_stops_after_its_cap_of_entries_directories_included(
    world: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep's cap counts every entry looked at, directories too: a root of empty
    directories alone (no files) would otherwise be walked to its end at the first write,
    however large it is. With the cap made 50, the root's own temp goes, a temp past 150
    empty directories stays (the next process's sweep, or a smaller tree, gets it)."""
    monkeypatch.setattr(writes, "SWEEP_MAX_ENTRIES", 50)
    root = world / "root"
    for i in range(150):
        (root / f"d{i:03}").mkdir()
    (root / "zz").mkdir()
    first = root / ".a.txt.rootgrep-0000000000aa.tmp"
    last = root / "zz" / ".b.txt.rootgrep-0000000000bb.tmp"
    for p in (first, last):
        p.write_text("left by a killed write\n")
    before = checksum(world / "outside")
    fs = Beneath.pin(str(root))
    try:
        assert sweep_temps(fs) == 1
    finally:
        fs.close()
    assert not first.exists()
    assert last.exists()
    assert checksum(world / "outside") == before


def _dead_temp(directory: Path, name: str) -> None:
    """A temp-named file left unlocked in ``directory``, if it is a directory right now
    (never through a link)."""
    with contextlib.suppress(OSError):
        dirfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dirfd))
        finally:
            os.close(dirfd)


def test_a_root_sweep_during_the_symlink_swap_race_removes_nothing_outside(world: Path) -> None:
    """A directory inside the root exchanged with a symlink to the outside as fast as a
    thread can, while the root is swept 200 times: the temps in the directory go whichever
    name it has at that instant, the outside's temp-named file (unlocked, one link: a dead
    temp by every rule but its place) is never removed, and nothing outside changes."""
    root = world / "root"
    outside = world / "outside"
    inner = root / "inner"
    inner.mkdir()
    os.symlink(outside, root / "swap")
    bait = outside / ".secret.txt.rootgrep-0000000000cc.tmp"
    bait.write_text(f"{MARKER}\n")
    before = checksum(outside)
    removed = 0
    fs = Beneath.pin(str(root))
    try:
        with Swapper(inner, root / "swap") as swapper:
            for i in range(200):
                for d in ("inner", "swap"):  # (the directory, under either name now)
                    _dead_temp(root / d, f".t.rootgrep-{i:012x}.tmp")
                removed += sweep_temps(fs)
        assert swapper.swaps > 0
    finally:
        fs.close()
    assert removed > 0
    assert bait.read_text() == f"{MARKER}\n"
    assert checksum(outside) == before


# 1000 atomic writes over three files of directory DIR (the confine path every write takes);
# prints each failure, then "errors N".
_REWRITES = r"""
import sys
from rootgrep.confine import Beneath
fs = Beneath.pin(sys.argv[1])
errors = 0
for i in range(1000):
    try:
        fs.atomic_write([b"t%d.txt" % (i % 3)], b"v%d" % i)
    except Exception as e:
        errors += 1
        print("failed:", repr(e), flush=True)
print("errors", errors, flush=True)
"""


def test_a_cleaner_sweeping_nonstop_beside_another_process_writing_never_fails_a_write(
    tmp_path: Path,
) -> None:
    """Another process writes 1000 times while this one sweeps the directory without pause
    (a cleaner can take a temp in the instant between its creation and its writer's lock):
    every write lands, and only the three targets are left."""
    d = tmp_path / "d"
    d.mkdir()
    p = subprocess.Popen([sys.executable, "-c", _REWRITES, str(d)],
                         stdout=subprocess.PIPE, text=True)  # fmt: skip
    dirfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while p.poll() is None:
            names = [e.name for e in confine.scan_fd(dirfd) if e.kind == "file"]
            confine.remove_dead_temps(dirfd, names, 1000)
    finally:
        os.close(dirfd)
        out, _ = p.communicate(timeout=300)  # (a hang guard)
    assert out.strip() == "errors 0", out
    assert sorted(os.listdir(d)) == ["t0.txt", "t1.txt", "t2.txt"]
    assert [(d / f"t{i}.txt").read_bytes() for i in range(3)] == [b"v999", b"v997", b"v998"]
