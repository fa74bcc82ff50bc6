"""Every fd-relative open of a file to read it goes O_PATH -> fstat -> reopen through
/proc/self/fd: a FIFO (or device) under a name a listing called "file" is never opened. The
deterministic half of tests/e2e/test_races.py (which swaps under a running server)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rootgrep import confine
from rootgrep.confine import Beneath
from rootgrep.errors import NotRegularFile
from support import blocked_in_open, wait_blocked_in_open


class BlockedWriter:
    """A writer blocked in open(fifo, O_WRONLY): ``opened`` is set once anyone opens the
    FIFO's read side."""

    def __init__(self, fifo: Path) -> None:
        self.fifo = fifo
        self.opened = threading.Event()
        self.stop = False
        self.tid = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        while not self.tid:
            time.sleep(0.001)
        wait_blocked_in_open(self.tid)  # from here, only a reader's open lets it out

    def _run(self) -> None:
        self.tid = threading.get_native_id()
        fd = os.open(self.fifo, os.O_WRONLY)
        os.close(fd)
        if not self.stop:
            self.opened.set()

    def close(self) -> None:
        self.stop = True
        while self.thread.is_alive():
            fd = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
            self.thread.join(0.05)
            os.close(fd)


@pytest.fixture
def fifo_dir(tmp_path: Path) -> Iterator[tuple[Path, BlockedWriter]]:
    root = tmp_path / "root"
    root.mkdir()
    (root / "ok.txt").write_text("fine\n")
    os.mkfifo(root / "p")
    os.link(root / "p", tmp_path / "p.link")  # the writer opens it outside the root
    w = BlockedWriter(tmp_path / "p.link")
    yield root, w
    w.close()


OPENERS: dict[str, Callable[[int, Beneath], object]] = {
    "open_file_at": lambda dfd, fs: confine.open_file_at(dfd, b"p"),
    "read_searchable_at": lambda dfd, fs: confine.read_searchable_at(dfd, b"p", 1 << 20),
    "Beneath.open_file": lambda dfd, fs: fs.open_file("p"),
    "Beneath.read": lambda dfd, fs: fs.read("p"),
}


@pytest.mark.parametrize("opener", list(OPENERS))
def test_no_opener_opens_a_fifo(fifo_dir: tuple[Path, BlockedWriter], opener: str) -> None:
    root, writer = fifo_dir
    fs = Beneath.pin(str(root))
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            got = OPENERS[opener](dfd, fs)
        except NotRegularFile:
            got = None
        assert got is None
        writer.thread.join(0.05)  # a grace period for a writer let out to say so
        assert blocked_in_open(writer.tid) and not writer.opened.is_set(), f"{opener} opened it"
        fd, st = confine.open_file_at(dfd, b"ok.txt")  # a regular file still opens
        assert os.read(fd, 100) == b"fine\n" and st.st_size == 5
        os.close(fd)
        assert confine.read_searchable_at(dfd, b"ok.txt", 1 << 20) == b"fine\n"
    finally:
        os.close(dfd)
        fs.close()


def test_a_large_file_is_read_once_into_one_buffer(tmp_path: Path) -> None:
    """(issue 11) A file over the 8 KiB binary sniff is read whole into one buffer: not as
    its head plus the rest joined, a second copy of every large file a grep reads (its
    allocations, as tracemalloc counts them, stay near the file's size)."""
    import tracemalloc

    size = 4 << 20
    data = (b"x" * 99 + b"\n") * (size // 100)
    (tmp_path / "big.txt").write_bytes(data)
    (tmp_path / "bin.dat").write_bytes(b"x" * 100 + b"\0" + b"y" * size)
    (tmp_path / "late.dat").write_bytes(b"x" * 9000 + b"\0")  # (text: the sniff is 8 KiB)
    dfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        tracemalloc.start()
        try:
            got = confine.read_searchable_at(dfd, b"big.txt", 16 << 20)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert got == data
        assert peak < len(data) * 1.5  # (head + rest, joined: twice the file)
        assert confine.read_searchable_at(dfd, b"bin.dat", 16 << 20) is None
        assert confine.read_searchable_at(dfd, b"late.dat", 16 << 20) == b"x" * 9000 + b"\0"
    finally:
        os.close(dfd)
