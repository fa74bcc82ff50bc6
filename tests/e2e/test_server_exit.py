"""A server that stops while it builds an index exits cleanly, and its index reopens.

Before: the interpreter, finalizing, ended the build's (daemon) thread wherever it was; found
inside native code (RE2's pybind11 wrapper re-taking the GIL), the unwind aborted the whole
process: "terminate called without an active exception", SIGABRT (rc -6) and a core file, in
9 of 12 stdio sessions that ended mid-build on this test's kind of tree. The server now
cancels its builds and waits for them (``cli._stop_indexes``) before it returns.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 13 MB of Python in 600 files: a build of a second or two, most of it spent in
    native code (trigrams, words, symbols)."""
    root = tmp_path_factory.mktemp("exit") / "root"
    for d in range(12):
        (root / f"d{d}").mkdir(parents=True)
        for f in range(50):
            body = "".join(
                f"def fn_{d}_{f}_{i}(x, y=0x1F):\n    return x + y * {i}  # 2nd value\n\n"
                for i in range(300)
            )
            (root / f"d{d}" / f"m{f}.py").write_text(body)
    return root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(root: Path, cache: Path, transport: str, port: int = 0) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "rootgrep", "serve", "--root", str(root)]
    args += ["--cache-dir", str(cache), "--transport", transport]
    if transport == "http":
        args += ["--port", str(port)]
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
    for n, delay in enumerate((0.2, 0.6, 1.0, 1.4)):
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


def test_an_http_server_stopped_mid_build_exits_cleanly(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    port = _free_port()
    p = _serve(tree, cache, "http", port)
    deadline = time.monotonic() + 30
    while True:  # (until it serves: its build started then)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or p.poll() is not None:
                p.kill()
                raise AssertionError(_ended(p)) from None
            time.sleep(0.02)
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    rc, err = _ended(p)
    assert rc == 130, (rc, err[-2000:])  # (Ctrl-C's status, as documented)
    _left_to_a_resync(tree, cache)  # (it reopens)
