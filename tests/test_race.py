"""The symlink-swap race (CONFINEMENT.md): a thread exchanges a directory inside the root with a
symlink to the outside, as fast as it can, while reads and walks run. Zero bytes or names from
outside may ever come back, in either resolution mode.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootgrep.confine import Beneath
from rootgrep.errors import RootgrepError
from rootgrep.grep import GrepQuery, Matcher, run_grep
from rootgrep.walker import Walker, WalkOptions
from support import MARKER

RACE_SECONDS = 3.0
_libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_EXCHANGE = 2


class Swapper:
    """Exchanges ``a`` and ``b`` with renameat2(RENAME_EXCHANGE) until stopped."""

    def __init__(self, a: Path, b: Path) -> None:
        self.a, self.b = os.fsencode(a), os.fsencode(b)
        self.swaps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(256):
                rc = _libc.renameat2(AT_FDCWD, self.a, AT_FDCWD, self.b, RENAME_EXCHANGE)
                if rc != 0:
                    raise OSError(ctypes.get_errno(), "renameat2 failed")
                self.swaps += 1

    def __enter__(self) -> Swapper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def arena(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "inner").mkdir(parents=True)
    (root / "inner" / "f.txt").write_text("inside\n")
    (root / "keep.txt").write_text("inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text(f"{MARKER}\n")
    (outside / "only-outside.txt").write_text(f"{MARKER}\n")
    os.symlink(outside, root / "swap")  # swapped with root/inner, over and over
    return tmp_path


@pytest.fixture
def fs(arena: Path, mode: str) -> Iterator[Beneath]:
    b = Beneath.pin(str(arena / "root"), use_openat2=(mode == "openat2"))
    yield b
    b.close()


def test_reads_during_swap_race_never_leak(fs: Beneath, arena: Path) -> None:
    reads = ok = refused = 0
    with Swapper(arena / "root" / "inner", arena / "root" / "swap") as swapper:
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline:
            for path in ("inner/f.txt", "swap/f.txt", "inner/../inner/f.txt"):
                reads += 1
                try:
                    data = fs.read(path).data
                except RootgrepError as e:
                    assert MARKER not in str(e)
                    refused += 1
                    continue
                assert MARKER.encode() not in data
                assert data == b"inside\n"
                ok += 1
            try:
                names = [e.name for e in fs.list_dir("inner")]
            except RootgrepError:
                continue
            assert b"only-outside.txt" not in names
    assert swapper.swaps > 1000, "the race did not run"
    assert ok > 0 and refused > 0, (ok, refused)  # both outcomes were really exercised


def test_walks_and_greps_during_swap_race_never_leak(fs: Beneath, arena: Path) -> None:
    walks = 0
    saw_inside = False
    matcher = Matcher(GrepQuery(MARKER))
    with Swapper(arena / "root" / "inner", arena / "root" / "swap") as swapper:
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline:
            opts = WalkOptions(hidden=True, no_ignore=True)
            paths = [f.path for f in Walker(fs, b"", opts).files()]
            assert not any(p.endswith(b"only-outside.txt") for p in paths)
            saw_inside |= b"inner/f.txt" in paths
            stats = run_grep(matcher, Walker(fs, b"", opts).batches(), _no_match, threads=1)
            assert stats.matches == 0
            walks += 1
    assert swapper.swaps > 1000 and walks > 10
    assert saw_inside


def _no_match(fm: object) -> bool:
    raise AssertionError(f"the marker was found: {fm!r}")
