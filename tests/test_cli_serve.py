"""``rootgrep serve --transport http`` and ``make run`` (issue 9): the port is checked before
the client configuration is printed, the banner gives the server's pid and the roots it
serves, ``make run`` runs the server in the foreground (stopping make stops it, the port is
free again) and adds the checkout as a root only when ARGS gives none. Real processes."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from support import ROOTGREP, listening_port, stop

CHECKOUT = Path(__file__).resolve().parents[1]
BANNER = re.compile(r"rootgrep \S+ \(pid (\d+)\), (.*)")


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def banner_of(stream: IO[str], seconds: float = 60.0) -> list[str]:
    """The lines a server prints up to its client configuration (a hang guard, not a
    threshold: a server that never prints it fails the test)."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    got: list[str] = []
    deadline = time.monotonic() + seconds
    while not got or got[-1] != "client configuration:":
        line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        assert line, f"the server stopped before its banner: {got}"
        got.append(line)
    return got


def wait_for(pred, what: str, seconds: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds  # a hang guard, not a threshold
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_port_in_use_fails_with_one_line_before_the_configuration(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        out = subprocess.run(
            [ROOTGREP, "serve", "--transport", "http", "--port", str(port), "--no-index",
             "--root", str(tmp_path)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("rootgrep: cannot listen on 127.0.0.1:") and str(port) in line
    assert "--port" in line  # says what to do
    assert "mcpServers" not in out.stderr and "client configuration" not in out.stderr


def test_the_banner_gives_the_pid_and_the_roots(tmp_path: Path) -> None:
    a, b = tmp_path / "one", tmp_path / "two"
    a.mkdir()
    b.mkdir()
    proc = subprocess.Popen(
        [ROOTGREP, "serve", "--transport", "http", "--port", "0", "--no-index",
         "--root", str(a), "--root", str(b)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        lines = banner_of(proc.stderr)
        m = BANNER.fullmatch(lines[0])
        assert m is not None, lines
        assert int(m.group(1)) == proc.pid
        assert m.group(2) == f"operator roots: {a}, {b}"
        # (the port the kernel chose, as the server listens on it)
        assert f"http://127.0.0.1:{listening_port(proc.pid)}/mcp" in lines[1]
    finally:
        stop(proc)


# runs its arguments with SIGINT ignored, as a background job of a script runs (POSIX: an
# asynchronous list without job control inherits SIGINT and SIGQUIT ignored)
IGNORING_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "os.execv(sys.argv[1], sys.argv[2:])"
)


@pytest.mark.parametrize(
    ("transport", "ignored", "extra"),
    [("http", True, ()), ("http", False, ()), ("stdio", True, ()), ("stdio", False, ()),
     ("stdio", False, ("--sandbox=best-effort",))],
    ids=["http-sigint-ignored", "http", "stdio-sigint-ignored", "stdio", "stdio-sandboxed"],
)  # fmt: skip
def test_ctrl_c_at_once_stops_the_server(
    tmp_path: Path, transport: str, ignored: bool, extra: tuple[str, ...]
) -> None:
    """SIGINT sent the moment the server shows it runs (http: its banner, before uvicorn
    installs its own handler; stdio: its answer to ``initialize``) stops it, also when it
    was started with SIGINT ignored. (It did not: http started so dropped a Ctrl-C sent
    before uvicorn took the signal over, and `make run` under a test run started in the
    background hung; stdio never stopped on one: Python's handler waited for the next
    input. Sandboxed, the signal receiver's module must be loaded before the restriction.)"""
    args = ["serve", "--transport", transport, "--no-index", "--root", str(tmp_path), *extra]
    if transport == "http":
        args += ["--port", "0"]
    wrap = [sys.executable, "-c", IGNORING_SIGINT, ROOTGREP] if ignored else []
    proc = subprocess.Popen(
        [*wrap, ROOTGREP, *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None and proc.stdin is not None and proc.stdout is not None
        port = 0
        if transport == "http":  # (the port the kernel chose, as the banner says it)
            port = int(banner_of(proc.stderr)[1].rsplit(":", 1)[1].removesuffix("/mcp"))
        else:
            proc.stdin.write(json.dumps(INITIALIZE) + "\n")
            proc.stdin.flush()
            assert '"result"' in proc.stdout.readline()
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)  # (a hang guard)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"SIGINT did not stop it: {_proc_state(proc.pid)}") from None
        if transport == "http":
            assert not port_in_use(port)
    finally:
        stop(proc)


INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "test", "version": "0"}},
}  # fmt: skip


def _installed() -> bool:
    """The checkout's .venv is there and up to date: ``make run`` would not reinstall it (a
    reinstall rewrites the editable install's ``.pth`` under every other test then running,
    which saw ``No module named 'rootgrep'``; ``make test`` installs first, so it never does)."""
    if shutil.which("make") is None or not (CHECKOUT / ".venv" / ".installed").exists():
        return False
    return subprocess.run(["make", "-q", "install"], cwd=CHECKOUT, capture_output=True,
                          timeout=60, check=False).returncode == 0  # fmt: skip


needs_make = pytest.mark.skipif(
    not _installed(), reason="make is missing, or the checkout's .venv is missing or stale"
)


def make_run(args: str) -> subprocess.Popen[str]:
    """``make -s run`` in the checkout, in its own process group, on a port the kernel
    chooses (``PORT=0``: ``listening_port`` finds it)."""
    return subprocess.Popen(
        ["make", "-s", "run", "PORT=0", f"ARGS={args}"],
        cwd=CHECKOUT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def server_of(make: subprocess.Popen[str]) -> tuple[int, str]:
    """The pid and the roots line of the banner the server under ``make run`` printed."""
    assert make.stderr is not None
    m = BANNER.fullmatch(banner_of(make.stderr)[0])
    assert m is not None
    return int(m.group(1)), m.group(2)


def wait_make(make: subprocess.Popen[str], server_pid: int | None, what: str) -> None:
    """Wait for make to exit (a hang guard); if it does not, fail with what the kernel says
    of make and the server (state, signals ignored, blocked and caught, where it sleeps)."""
    try:
        make.wait(30)
    except subprocess.TimeoutExpired:
        seen = [f"{who} {pid}: {_proc_state(pid)}"
                for who, pid in (("make", make.pid), ("server", server_pid)) if pid]  # fmt: skip
        raise AssertionError(f"make did not exit after {what}; " + "; ".join(seen)) from None


def _proc_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/status") as f:
            lines = [ln for ln in f.read().splitlines() if ln.startswith(("State", "Sig", "Shd"))]
        with open(f"/proc/{pid}/wchan") as f:
            lines.append(f"wchan {f.read()}")
    except OSError as e:
        return f"gone ({e.strerror})"
    return ", ".join(lines)


def stop_make(make: subprocess.Popen[str], server_pid: int | None) -> None:
    """Clean up whatever is left (only processes this test started)."""
    if server_pid is not None and alive(server_pid):
        os.kill(server_pid, signal.SIGKILL)
    if make.poll() is None:
        os.killpg(make.pid, signal.SIGKILL)
        make.wait(10)
    if make.stderr is not None:
        make.stderr.close()


@needs_make
def test_make_run_serves_only_the_given_root(tmp_path: Path) -> None:
    make = make_run(f"--no-index --root {tmp_path}")
    pid = None
    try:
        pid, served = server_of(make)
        port = listening_port(pid)
        assert served == f"operator roots: {tmp_path}"  # not the checkout as well
        os.killpg(make.pid, signal.SIGINT)  # Ctrl-C at a terminal: the whole group
        wait_make(make, pid, "Ctrl-C")
        wait_for(lambda: not alive(pid), "the server exiting on Ctrl-C")
        assert not port_in_use(port)
    finally:
        stop_make(make, pid)


@needs_make
def test_make_run_serves_the_checkout_and_stops_with_make() -> None:
    """The default recipe needs a shell (it quotes the checkout's path): the server must
    still be make's own child (exec), or make's SIGTERM stops the shell and leaves the
    server holding the port."""
    make = make_run("--no-index --roots-ttl 3")  # (--roots-ttl is not a --root)
    pid = None
    try:
        pid, served = server_of(make)
        assert served == f"operator roots: {CHECKOUT}"
        port = listening_port(pid)
        os.kill(make.pid, signal.SIGTERM)  # stopping make stops the server it runs
        wait_make(make, pid, "SIGTERM")
        wait_for(lambda: not alive(pid), "the server exiting with make")
        assert not port_in_use(port)
    finally:
        stop_make(make, pid)


@needs_make
def test_make_run_stops_even_when_make_is_killed() -> None:
    """SIGKILL reaches make alone; the server still stops (PR_SET_PDEATHSIG) and frees the
    port."""
    make = make_run("--no-index")
    pid = None
    try:
        pid, _ = server_of(make)
        port = listening_port(pid)
        os.kill(make.pid, signal.SIGKILL)
        make.wait(30)
        wait_for(lambda: not alive(pid), "the server exiting after make was killed")
        wait_for(lambda: not port_in_use(port), "the port free again")
    finally:
        stop_make(make, pid)
