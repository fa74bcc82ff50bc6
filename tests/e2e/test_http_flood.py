"""HTTP under idle floods: eight times ``--max-connections`` of connections that send nothing,
and as many that send their request head a byte at a time (slowloris), kept open (each one the
server closes is opened again) against a real ``rootgrep serve --transport http`` while an
authenticated client keeps calling it through the real SDK. The server's fds stay within the
cap (20,000 idle connections once took all 20,000 of them, and the client timed out; under
load, one accept batch of uvicorn's 2,048 held every reconnecting flood socket at once), the
slow ones are closed at their deadline, and every call of the client is answered."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_helpers import text

from rootgrep.http_guard import LISTEN_BACKLOG, accept_batch
from support import listening_port, stop

pytestmark = pytest.mark.anyio

CAP = 16
FLOOD = 8 * CAP  # idle connections, and as many slow ones: far more than the bound below
REQUEST_SECONDS = 2.0


def fds_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def listen_queue(port: int) -> int:
    """The backlog of the socket listening on ``port`` (``ss``: a listening socket's
    Send-Q is its backlog)."""
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return int(out.split()[2])


def somaxconn() -> int:
    return int(Path("/proc/sys/net/core/somaxconn").read_text())


class Flood:
    """``idle`` connections that send nothing and ``slow`` ones that send a request head a
    byte every 0.3 s, each one the server closes opened again, on a thread of its own."""

    HEAD = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"

    def __init__(self, port: int, idle: int, slow: int) -> None:
        self.port, self.idle, self.slow = port, idle, slow
        self.closed_by_server = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self) -> socket.socket | None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=1)
        except OSError:
            return None
        s.setblocking(False)
        return s

    def _run(self) -> None:
        socks: list[tuple[socket.socket | None, bool, int]] = [
            (self._connect(), i >= self.idle, 0) for i in range(self.idle + self.slow)
        ]
        next_byte = time.monotonic()
        while not self.stop.is_set():
            now = time.monotonic()
            send = now >= next_byte
            if send:
                next_byte = now + 0.3
            for i, (s, slow, at) in enumerate(socks):
                if s is None:
                    socks[i] = (self._connect(), slow, 0)
                    continue
                try:
                    if s.recv(4096) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    pass
                except OSError:
                    self.closed_by_server += 1
                    s.close()
                    socks[i] = (self._connect(), slow, 0)
                    continue
                if slow and send and at < len(self.HEAD):
                    try:
                        s.send(self.HEAD[at : at + 1])
                        socks[i] = (s, slow, at + 1)
                    except OSError:
                        pass
            time.sleep(0.05)
        for s, _, _ in socks:
            if s is not None:
                s.close()

    def __enter__(self) -> Flood:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


async def test_an_idle_and_slowloris_flood_neither_takes_the_fds_nor_the_client(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("needle\n")
    token = secrets.token_hex(16)
    env = {**os.environ, "FLOOD_TOKEN": token, "ROOTGREP_CACHE_DIR": str(tmp_path / "cache")}
    err = open(tmp_path / "server.err", "wb")  # noqa: SIM115 (the child's; closed below)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rootgrep", "serve", "--transport", "http", "--port", "0",
         "--no-index", "--root", str(root), "--auth-token-env", "FLOOD_TOKEN",
         "--max-connections", str(CAP), "--request-timeout", str(REQUEST_SECONDS)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=err,
    )  # fmt: skip
    try:
        port = await anyio.to_thread.run_sync(listening_port, proc.pid)
        url = f"http://127.0.0.1:{port}/mcp"
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=30)) as http,
            Client(streamable_http_client(url, http_client=http), mode="legacy") as c,
        ):
            r = await c.call_tool("grep", {"pattern": "needle"})
            assert not r.is_error and "a.txt" in text(r)
            # the kernel still queues a full backlog (asyncio listened with the accept
            # batch's; a queue of 16 reset the client's connection under the flood)
            assert listen_queue(port) == min(LISTEN_BACKLOG, somaxconn())
            baseline = fds_of(proc.pid)
            most, calls = baseline, 0
            with Flood(port, idle=FLOOD, slow=FLOOD) as flood:
                # (through three request deadlines, and at least 20 calls, however slow)
                end = time.monotonic() + 3 * REQUEST_SECONDS + 2
                while time.monotonic() < end or calls < 20:
                    with anyio.fail_after(15):  # (a hang guard: each call is answered)
                        r = await c.call_tool("grep", {"pattern": "needle"})
                    assert not r.is_error and "a.txt" in text(r), text(r)
                    calls += 1
                    most = max(most, fds_of(proc.pid))
                    await anyio.sleep(0.1)
            # (the client's own connections and a few being accepted besides the cap)
            # (the cap; the connections accepted and not closed yet, a few accept batches
            # of at most ``accept_batch``; the client's own: never the flood's size)
            assert most - baseline <= CAP + 4 * accept_batch(CAP) + 8, (most, baseline)
            assert flood.closed_by_server >= 2 * CAP  # (shed, and the slow ones timed out)
        assert "--max-connections" in (tmp_path / "server.err").read_text()  # (said)
    finally:
        stop(proc)
        err.close()
