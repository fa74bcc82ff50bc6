"""A server that stops while it builds an index exits cleanly, and its index reopens.

Before: the interpreter, finalizing, ended the build's (daemon) thread wherever it was; found
inside native code (RE2's pybind11 wrapper re-taking the GIL), the unwind aborted the whole
process: "terminate called without an active exception", SIGABRT (rc -6) and a core file, in
9 of 12 stdio sessions that ended mid-build on this test's kind of tree. The server now
cancels its builds and waits for them (``serve_verb._stop_indexes``) before it returns.

A review of that first version found three more ways (the last three tests):
1. An index a client session released (its build still stopping) was not waited for by
   ``IndexManager.close``: it walked ``_roots`` only, and a released root moves to
   ``_leaving``, reaped by a thread of its own. A stdio session with a client root that
   ended mid-build still aborted (3 of 6).
2. A second Ctrl-C while the server waited for its builds raised KeyboardInterrupt out of
   the wait, and the interpreter finalized over the running build (the abort again, 4 of 6
   HTTP servers given SIGINT twice 0.15 s apart, mid-build). It now exits at once (130).
3. After SIGINT, a wait that timed out exited with status 0, not 130.

A second review found three more (the tests after those): a Ctrl-C while the shutdown
thread started, or while its warning was logged, still escaped the wait (2 of 6 HTTP
servers under a flood of SIGINTs aborted); and sessions coming and going on one root at 50
a second chained indexes, each waiting for the one before it to let go and then still
opening its index: ``close`` took 15.5 s after 5 s of it.

A third review found that the exit at once, which ignores SIGINT, hung for good on a stderr
pipe nobody read (its warning's write never returned): it now exits on a timer whatever
its writes do (the last test).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import rootgrep.cli.serve_verb as serve_verb
from rootgrep.index import manager as manager_mod
from rootgrep.index.manager import IndexManager
from rootgrep.index.store import RootIndex
from rootgrep.roots import pin_root
from support import listening_port


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 6.5 MB of Python in 300 files: a build of a second or so, most of it spent in
    native code (trigrams, words, symbols)."""
    root = tmp_path_factory.mktemp("exit") / "root"
    for d in range(6):
        (root / f"d{d}").mkdir(parents=True)
        for f in range(50):
            body = "".join(
                f"def fn_{d}_{f}_{i}(x, y=0x1F):\n    return x + y * {i}  # 2nd value\n\n"
                for i in range(300)
            )
            (root / f"d{d}" / f"m{f}.py").write_text(body)
    return root


def _serve(root: Path, cache: Path, transport: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "rootgrep", "serve", "--root", str(root)]
    args += ["--cache-dir", str(cache), "--transport", transport]
    if transport == "http":
        args += ["--port", "0"]  # (the kernel's choice: ``_serving`` finds it)
    return subprocess.Popen(
        args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _ended(p: subprocess.Popen[bytes]) -> tuple[int, str]:
    """The server's exit status (killed if it does not end within a minute) and its stderr;
    its pipes closed."""
    try:
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.stderr is not None
    err = p.stderr.read().decode(errors="replace")
    for stream in (p.stdin, p.stdout, p.stderr):
        if stream is not None:
            stream.close()
    assert "terminate called" not in err
    return rc, err


def _left_to_a_resync(root: Path, cache: Path) -> int:
    """The files ``rootgrep index`` reads, or gives their words and symbols, to bring the
    index up to date (0 after a finished build); it fails if the index does not reopen."""
    out = subprocess.run(
        [sys.executable, "-m", "rootgrep", "index", "--cache-dir", str(cache), str(root)],
        capture_output=True,
        timeout=120,
        check=True,
    )
    said = out.stdout + out.stderr
    read = re.search(rb"\bread (\d+)", said)
    assert read is not None, said
    left = re.search(rb"words and symbols added to (\d+) files? an earlier build left", said)
    return int(read.group(1)) + (int(left.group(1)) if left else 0)


def test_a_stdio_server_that_quits_mid_build_exits_cleanly(tree: Path, tmp_path: Path) -> None:
    mid_build = 0
    for n, delay in enumerate((0.2, 1.0)):
        cache = tmp_path / f"cache{n}"
        p = _serve(tree, cache, "stdio")
        assert p.stdin is not None and p.stdout is not None and p.stderr is not None
        hello = {"protocolVersion": "2025-06-18", "capabilities": {},
                 "clientInfo": {"name": "t", "version": "1"}}  # fmt: skip
        p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                  "params": hello}).encode() + b"\n")  # fmt: skip
        p.stdin.flush()
        assert b'"result"' in p.stdout.readline()
        p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        p.stdin.flush()
        time.sleep(delay)  # (the operator root's build started with the server)
        p.stdin.close()  # the client goes: the stdio loop ends
        rc, err = _ended(p)
        assert rc == 0, (delay, rc, err[-2000:])
        mid_build += _left_to_a_resync(tree, cache) > 0
    assert mid_build > 0  # (some sessions ended mid-build: the test means something)


def _serving(p: subprocess.Popen[bytes]) -> None:
    """Once the HTTP server ``p`` (started with ``--port 0``) accepts connections (its
    build started then)."""
    try:
        port = listening_port(p.pid)
    except AssertionError:
        p.kill()
        raise AssertionError(_ended(p)) from None
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or p.poll() is not None:
                p.kill()
                raise AssertionError(_ended(p)) from None
            time.sleep(0.02)


def test_an_http_server_stopped_mid_build_exits_cleanly(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    p = _serve(tree, cache, "http")
    _serving(p)
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    rc, err = _ended(p)
    assert rc == 130, (rc, err[-2000:])  # (Ctrl-C's status, as documented)
    _left_to_a_resync(tree, cache)  # (it reopens)


def test_close_waits_for_an_index_a_session_released_mid_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = tmp_path / "root"
    top.mkdir()
    (top / "a.py").write_text("def a():\n    pass\n")
    started, finished = threading.Event(), threading.Event()

    def slow_sync(self: RootIndex, fs: object, **kw: object) -> None:
        # a build that notices its cancel late (a commit in native code)
        started.set()
        cancelled = kw.get("cancelled")
        while not (callable(cancelled) and cancelled()):
            time.sleep(0.01)
        time.sleep(0.5)
        finished.set()

    monkeypatch.setattr(RootIndex, "sync", slow_sync)
    r = pin_root(str(top))
    manager = IndexManager(str(tmp_path / "cache"))
    try:
        ix = manager.activate(r, 12345)  # a client session's root (the session owns it)
        assert ix is not None
        assert started.wait(10)
        manager.release(r.path, 12345)  # the session ends (``ClientRoots.close``)
        manager.close()  # what ``serve_verb._stop_indexes`` runs, then the interpreter finalizes
        alive = [t.name for t in ix.threads if t.is_alive()]
        assert finished.is_set() and not alive, alive
    finally:
        finished.wait(5)
        r.close()


SLOW_CLOSE = textwrap.dedent(
    """
    import sys, time
    import rootgrep.cli as cli
    import rootgrep.cli.serve_verb as serve_verb
    from rootgrep.index.manager import IndexManager
    serve_verb.SHUTDOWN_SECONDS = float(sys.argv[1])
    real = IndexManager.close
    def slow_close(self):  # (builds that take a while to let go)
        print("closing", file=sys.stderr, flush=True)
        time.sleep(2.0)
        real(self)
        print("builds let go", file=sys.stderr, flush=True)
    IndexManager.close = slow_close
    sys.exit(cli.main(sys.argv[2:]))
    """
)


def _slow_closing_server(tmp_path: Path, shutdown_seconds: float) -> subprocess.Popen[bytes]:
    top = tmp_path / "root"
    top.mkdir()
    (top / "a.py").write_text("def a():\n    pass\n")
    p = subprocess.Popen(
        [sys.executable, "-c", SLOW_CLOSE, str(shutdown_seconds), "serve", "--transport", "http",
         "--port", "0", "--root", str(top), "--cache-dir", str(tmp_path / "cache")],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    _serving(p)
    return p


def test_a_second_ctrl_c_ends_the_wait_for_the_builds_at_once(tmp_path: Path) -> None:
    p = _slow_closing_server(tmp_path, 10.0)
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    assert p.stderr is not None
    # once uvicorn has stopped and the server waits for its builds (a second SIGINT before
    # that would be uvicorn's own "force exit")
    while b"closing" not in p.stderr.readline():
        assert p.poll() is None
    p.send_signal(signal.SIGINT)  # the user presses Ctrl-C again
    rc, err = _ended(p)
    assert rc == 130, err[-1500:]
    # it exited without finalizing (at once, as the second Ctrl-C asks), the wait cut short
    assert "interrupted while the index builds stopped" in err, err[-1500:]
    assert "builds let go" not in err


def test_ctrl_c_still_exits_130_when_the_builds_do_not_let_go_in_time(tmp_path: Path) -> None:
    p = _slow_closing_server(tmp_path, 0.5)
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    rc, err = _ended(p)
    assert "did not stop within" in err, err[-1500:]
    assert rc == 130, (rc, err[-1500:])  # (Ctrl-C's documented status)


class _Exited(BaseException):
    """``os._exit``, in this process: raised with the status it was called with."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _stop_indexes_interrupted(monkeypatch: pytest.MonkeyPatch) -> object:
    """``serve_verb._stop_indexes`` over builds that have not let go (the test interrupts it):
    the status it exits with, or what went wrong."""

    def exit_now(status: int) -> None:
        raise _Exited(status)

    class Stuck:
        let_go = threading.Event()

        def close(self) -> None:
            self.let_go.wait(30)

    monkeypatch.setattr(os, "_exit", exit_now)
    indexes, sigint = Stuck(), signal.getsignal(signal.SIGINT)
    try:
        serve_verb._stop_indexes(indexes, 0)
    except KeyboardInterrupt:
        return "KeyboardInterrupt escaped while the builds still ran"
    except _Exited as e:
        return e.status
    finally:
        indexes.let_go.set()
        signal.signal(signal.SIGINT, sigint)  # (it ignores SIGINT on its way out)
    return "returned while the builds still ran"


def test_a_ctrl_c_while_the_shutdown_thread_starts_exits_130(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = threading.Thread

    class InterruptedStart(real):  # type: ignore[misc,valid-type]
        def start(self) -> None:
            super().start()
            raise KeyboardInterrupt  # (SIGINT while ``start`` waits for the thread to run)

    monkeypatch.setattr(threading, "Thread", InterruptedStart)
    assert _stop_indexes_interrupted(monkeypatch) == 130


def test_a_ctrl_c_while_the_shutdown_warning_is_logged_exits_130(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class InterruptedLog(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            raise KeyboardInterrupt  # (another Ctrl-C, while the warning is written)

    monkeypatch.setattr(serve_verb, "SHUTDOWN_SECONDS", 0.05)
    log, interrupting = logging.getLogger("rootgrep"), InterruptedLog()
    log.addFilter(interrupting)
    try:
        assert _stop_indexes_interrupted(monkeypatch) == 130
    finally:
        log.removeFilter(interrupting)


def test_an_index_stopped_while_it_waited_for_its_predecessor_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's root released mid-build, then another session's (same root) activated
    and released before the first let go: the second must not open and sync an index once
    the first is gone (a chain of them kept ``close`` waiting, one link at a time)."""
    top = tmp_path / "root"
    top.mkdir()
    (top / "a.py").write_text("def a():\n    pass\n")
    started, syncs = threading.Event(), []

    def slow_sync(self: RootIndex, fs: object, **kw: object) -> None:
        syncs.append(1)
        started.set()
        cancelled = kw.get("cancelled")
        while not (callable(cancelled) and cancelled()):
            time.sleep(0.01)
        time.sleep(0.5)  # (the first takes a while to let go)

    opened = []

    class Counted(RootIndex):
        def __post_init__(self) -> None:
            opened.append(1)
            super().__post_init__()

    monkeypatch.setattr(RootIndex, "sync", slow_sync)
    monkeypatch.setattr(manager_mod, "RootIndex", Counted)
    r = pin_root(str(top))
    manager = IndexManager(str(tmp_path / "cache"))
    try:
        assert manager.activate(r, 1) is not None
        assert started.wait(10)
        manager.release(r.path, 1)  # (the first, still letting go)
        second = manager.activate(r, 2)
        assert second is not None
        manager.release(r.path, 2)  # (gone before the first let go)
        manager.close()
        assert not [t for t in second.threads if t.is_alive()]
        assert len(opened) == 1 and len(syncs) == 1  # (the second never opened its index)
    finally:
        r.close()


STUCK_CLOSE = textwrap.dedent(
    """
    import sys, time
    import rootgrep.cli as cli
    import rootgrep.cli.serve_verb as serve_verb
    from rootgrep.index.manager import IndexManager
    serve_verb.SHUTDOWN_SECONDS = 1.0
    def stuck_close(self):  # (builds that will not let go: a commit that does not end)
        print("closing", file=sys.stderr, flush=True)
        time.sleep(60)
    IndexManager.close = stuck_close
    sys.exit(cli.main(sys.argv[1:]))
    """
)


def test_the_exit_at_once_does_not_hang_on_a_stderr_nobody_reads(tmp_path: Path) -> None:
    top = tmp_path / "root"
    top.mkdir()
    (top / "a.py").write_text("def a():\n    pass\n")
    r, w = os.pipe()
    p = subprocess.Popen(
        [sys.executable, "-c", STUCK_CLOSE, "serve", "--transport", "http", "--port", "0",
         "--root", str(top), "--cache-dir", str(tmp_path / "cache")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=w,
    )  # fmt: skip
    err = os.fdopen(r, "rb", buffering=0)
    try:
        _serving(p)
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)  # uvicorn stops; the server waits for its builds
        seen = b""
        while b"closing" not in seen:
            seen += err.read(4096)

        def fill() -> None:  # (from now on nobody reads stderr, and the pipe is full)
            with contextlib.suppress(OSError):
                while True:
                    os.write(w, b"x" * 4096)

        threading.Thread(target=fill, daemon=True).start()
        # past SHUTDOWN_SECONDS its warning's write blocks; SIGINT is ignored by then
        assert p.wait(timeout=30) == 130
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(w)
        err.close()
