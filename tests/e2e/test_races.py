"""Races found by swapping things under a running server (issue 8, items 6 and 9), through the
real MCP client in memory: a write queued behind busy workers after its root was removed, a
cancelled call whose worker still runs, a FIFO swapped in under a name a listing called "file",
and one session flooding the workers while another works."""

from __future__ import annotations

import ctypes
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp_helpers import RootsStub, code, connect, everything, text, uri

from rootgrep.server import SESSION_WORKERS, WORKERS, RootgrepServer
from rootgrep.sessions import ClientRoots
from support import MARKER, wait_blocked_in_open

pytestmark = pytest.mark.anyio

HANG_GUARD = 30.0
_libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_EXCHANGE = 2


async def wait_for(pred: Callable[[], bool], seconds: float = HANG_GUARD) -> None:
    with anyio.fail_after(seconds):
        while not pred():
            await anyio.sleep(0.01)


def snapshot(d: Path) -> dict[str, tuple[int, int, bytes]]:
    out = {}
    for p in sorted(d.rglob("*")):
        st = p.lstat()
        body = p.read_bytes() if stat.S_ISREG(st.st_mode) else b""
        out[str(p)] = (st.st_mode, st.st_size, body)
    return out


@pytest.fixture
def swaps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every roots list a session swapped in (the refresh that retires a removed
    root ends with its swap; waiting for it is deterministic, unlike waiting for tasks)."""
    seen: list[int] = []
    real = ClientRoots._swap

    def spy(self: ClientRoots, new: list[Any]) -> None:
        real(self, new)
        seen.append(len(new))

    monkeypatch.setattr(ClientRoots, "_swap", spy)
    return seen


class Blocker:
    """Makes one service method block in its worker thread until released (a stand-in for a
    slow call: the filesystem underneath stays real)."""

    def __init__(self, server: RootgrepServer, name: str) -> None:
        self.started = 0
        self.finished = 0
        self.held: list[Any] = []
        self.go = threading.Event()
        self._lock = threading.Lock()
        real = getattr(server.service, name)

        def slow(held: Any, *args: Any, **kw: Any) -> Any:
            with self._lock:
                self.started += 1
                self.held.append(list(held))
            try:
                assert self.go.wait(HANG_GUARD), "never released"
                return real(held, *args, **kw)
            finally:
                with self._lock:
                    self.finished += 1

        setattr(server.service, name, slow)


# ---- item 6a: a queued write re-checks its lease ---------------------------------------------


async def test_a_write_queued_behind_busy_workers_after_its_root_was_removed_writes_nothing(
    make_server, world: Path, swaps: list[int]
) -> None:
    root = world / "root"
    stub = RootsStub([uri(root)])
    server = make_server([world], allow_write=True)
    outside = snapshot(world / "outside")
    busy = [object() for _ in range(WORKERS)]
    with anyio.fail_after(HANG_GUARD):
        async with connect(server, "legacy", stub) as c:
            assert not (await c.call_tool("list_roots", {})).is_error
            for b in busy:  # every worker is taken (as by slow calls of other sessions)
                await server.limiter.acquire_on_behalf_of(b)
            results: list[Any] = []

            async def write() -> None:
                args = {"path": "late.txt", "content": f"written late {MARKER}"}
                results.append(await c.call_tool("write_file", args))

            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                await anyio.wait_all_tasks_blocked()  # the write waits for a worker
                assert not results
                stub.uris = []  # the client removes the root
                await c.send_roots_list_changed()
                await wait_for(lambda: swaps[-1:] == [0])  # the root is gone and retired
                for b in busy:  # the workers come free: the write finally starts
                    server.limiter.release_on_behalf_of(b)
            (res,) = results
            assert code(res) == "root_removed", text(res)
    assert not (root / "late.txt").exists()
    assert [p.name for p in root.iterdir() if "late" in p.name] == []  # no temp left either
    assert snapshot(world / "outside") == outside


# ---- item 6b: a cancelled call keeps its root fd until its worker returns --------------------


async def test_a_cancelled_calls_root_fd_stays_open_until_its_worker_returns(
    make_server, world: Path, swaps: list[int]
) -> None:
    root = world / "root"
    stub = RootsStub([uri(root)])
    server = make_server([world])
    slow = Blocker(server, "read_file")
    ino = root.stat().st_ino
    with anyio.fail_after(HANG_GUARD):
        async with connect(server, "legacy", stub) as c:
            assert not (await c.call_tool("list_roots", {})).is_error
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def read() -> None:
                    with scope:
                        await c.call_tool("read_file", {"path": "a.txt"})

                tg.start_soon(read)
                await wait_for(lambda: slow.started == 1)  # the worker runs
                scope.cancel()  # the client gives up: notifications/cancelled
            await anyio.wait_all_tasks_blocked()
            stub.uris = []  # and removes the root: it is retired
            await c.send_roots_list_changed()
            await wait_for(lambda: swaps[-1:] == [0])  # the root is gone and retired
            fs = slow.held[0][0].fs
            assert fs.retired
            assert fs.fd >= 0, "the root fd was closed under a running worker"
            assert os.fstat(fs.fd).st_ino == ino  # and it still is the root's directory
            slow.go.set()  # the worker returns
            await wait_for(lambda: slow.finished == 1)
            await wait_for(lambda: fs.fd == -1)  # then its lease closes the retired root


# ---- item 6c: a FIFO swapped in under a file's name is never opened --------------------------


class Exchanger:
    """Exchanges two names with renameat2(RENAME_EXCHANGE), over and over, until stopped."""

    def __init__(self, *pairs: tuple[Path, Path]) -> None:
        self.pairs = [(os.fsencode(a), os.fsencode(b)) for a, b in pairs]
        self.swaps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for a, b in self.pairs:
                if _libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
                    raise OSError(ctypes.get_errno(), "renameat2 failed")
                self.swaps += 1

    def __enter__(self) -> Exchanger:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


class FifoWatch:
    """Writers blocked in open(fifo, O_WRONLY): such an open returns only when someone opens
    the FIFO's read side, so ``opened`` counts every open of it by the server."""

    def __init__(self, links: list[Path]) -> None:
        self.links = links
        self.opened = 0
        self.tids: list[int] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(p,), daemon=True) for p in links]

    def _run(self, link: Path) -> None:
        self.tids.append(threading.get_native_id())
        while True:
            fd = os.open(link, os.O_WRONLY)  # blocks until a reader opens the FIFO
            os.close(fd)
            if self._stop.is_set():
                return
            self.opened += 1

    def wait_blocked(self) -> None:
        """Until every writer sleeps in open() (before that an open could go unnoticed)."""
        for tid in self.tids:
            wait_blocked_in_open(tid)

    def __enter__(self) -> FifoWatch:
        for t in self._threads:
            t.start()
        while len(self.tids) < len(self._threads):
            time.sleep(0.001)
        self.wait_blocked()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for link, t in zip(self.links, self._threads, strict=True):
            while t.is_alive():  # let each writer out by opening the read side ourselves
                fd = os.open(link, os.O_RDONLY | os.O_NONBLOCK)
                t.join(0.05)
                os.close(fd)


@pytest.fixture
def fifo_world(world: Path) -> Iterator[tuple[Path, list[Path]]]:
    """``root/d/zz.txt`` (a file) and ``root/d/p`` (a FIFO) to be exchanged, and the same for
    the ignore file ``root/.ignore`` and ``root/q``; each FIFO also has a hard link outside the
    root, for the watching writers."""
    root = world / "root"
    d = root / "d"
    d.mkdir()
    for i in range(150):  # read before zz.txt: the listing is a while old when it comes
        (d / f"g{i:03}.txt").write_text("needle plain\n" * 20)
    (d / "zz.txt").write_text("needle swapped\n")
    (root / ".ignore").write_text("nothing-ignored\n")
    links = []
    for fifo in (d / "p", root / "q"):
        os.mkfifo(fifo)
        link = world / "outside" / f"{fifo.name}.link"
        os.link(fifo, link)
        links.append(link)
    yield root, links


FIFO_ROUNDS = {"grep": 80, "copy_path": 12, "reindex": 50}  # copies fsync 150 files each


def _fifo_call(tool: str, i: int) -> tuple[str, dict[str, Any]]:
    if tool == "copy_path":
        return tool, {"source": "d", "destination": f"c{i}"}
    if tool == "reindex":
        return tool, {}
    return tool, {"pattern": "needle"}


@pytest.mark.parametrize("tool", ["grep", "copy_path", "reindex"])
async def test_a_fifo_swapped_in_for_a_file_is_never_opened(
    make_server, fifo_world, tool: str
) -> None:
    """grep (its walk, its ignore files, its reads), copy_path of a tree and the index's sync
    each list a directory and then open what the listing called a file; a thread keeps
    exchanging that file (and the ignore file) with a FIFO."""
    root, links = fifo_world
    world = root.parent
    outside = snapshot(world / "outside")
    server = make_server([root], allow_write=True, index=tool == "reindex")
    outputs: list[str] = []
    with FifoWatch(links) as watch, anyio.fail_after(120):
        async with connect(server, "legacy") as c:
            pairs = ((root / "d" / "zz.txt", root / "d" / "p"), (root / ".ignore", root / "q"))
            with Exchanger(*pairs) as swapping:
                for i in range(FIFO_ROUNDS[tool]):
                    name, args = _fifo_call(tool, i)
                    res = await c.call_tool(name, args)
                    outputs.append(everything(res))
                    assert not res.is_error, text(res)
                    assert watch.opened == 0, f"{tool} opened a FIFO (round {i})"
                    if tool == "copy_path":  # a single file, stat-checked then opened
                        one = await c.call_tool(
                            "copy_path", {"source": "d/zz.txt", "destination": f"one{i}"}
                        )
                        outputs.append(everything(one))
                        assert code(one) in (None, "not_regular_file"), text(one)
                assert swapping.swaps > 0
    assert watch.opened == 0
    for out in outputs:
        assert MARKER not in out
    assert snapshot(world / "outside") == outside
    swapped = {"p", "q", "zz.txt", ".ignore"}
    for p in root.rglob("*"):  # every copy is a regular file or a directory
        mode = p.lstat().st_mode
        assert stat.S_ISREG(mode) or stat.S_ISDIR(mode) or p.parent in (root, root / "d"), p
        assert p.name in swapped or stat.S_ISREG(mode) or stat.S_ISDIR(mode)


# ---- item 9: one session cannot starve another -----------------------------------------------


@pytest.mark.parametrize(
    ("mode_a", "mode_b"), [("legacy", "legacy"), ("auto", "legacy"), ("legacy", "auto")]
)
async def test_a_flooding_session_leaves_workers_to_another(
    make_server, world: Path, mode_a: str, mode_b: str
) -> None:
    """A handshake-era session is its connection; 2026-07-28 calls (no sessions) share one
    share per client address (in memory: one)."""
    root = world / "root"
    server = make_server([root])
    slow = Blocker(server, "read_file")
    flood = WORKERS * 3
    done_a: list[Any] = []
    with anyio.fail_after(HANG_GUARD):
        async with connect(server, mode_a) as a, connect(server, mode_b) as b:
            async with anyio.create_task_group() as tg:

                async def call_a() -> None:
                    done_a.append(await a.call_tool("read_file", {"path": "a.txt"}))

                for _ in range(flood):
                    tg.start_soon(call_a)
                await wait_for(lambda: slow.started == SESSION_WORKERS)
                await anyio.wait_all_tasks_blocked()
                # A's calls hold its share of the workers; the rest wait in A's own queue
                assert slow.started == SESSION_WORKERS and not done_a
                g = await b.call_tool("grep", {"pattern": "alpha"})  # B is served meanwhile
                assert [m["path"] for m in g.structured_content["matches"]] == ["a.txt"]
                assert not done_a and slow.started == SESSION_WORKERS
                slow.go.set()
            assert len(done_a) == flood and all(not r.is_error for r in done_a)
