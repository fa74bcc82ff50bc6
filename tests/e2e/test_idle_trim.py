"""``rootgrep serve`` gives freed memory back to the system once idle (memory.IdleTrim,
glibc's ``malloc_trim``): after a session's calls, over both real transports."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from test_transports import http_server, stdio

from rootgrep.memory import glibc

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(glibc() is None, reason="glibc's malloc only"),
]

TRIMMED = b"freed memory given back to the system (malloc_trim)"


async def trims(errpath: Path, at_least: int) -> int:
    with anyio.fail_after(60):  # (a hang guard)
        while (n := errpath.read_bytes().count(TRIMMED)) < at_least:
            await anyio.sleep(0.05)
    return n


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "in.txt").write_text("needle\n")
    return tmp_path / "t"


async def test_http_server_trims_after_a_sessions_calls(tmp_path: Path, tree: Path) -> None:
    async with (
        http_server(tmp_path, [tree], "--log-level", "debug", "--no-index") as (url, err, _),
        httpx2.AsyncClient(timeout=30) as http,
    ):
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as c:
            r = await c.call_tool("grep", {"pattern": "needle"})
            assert not r.is_error
        await trims(err, 1)  # (after the session closed)


async def test_stdio_server_trims_after_a_call(tmp_path: Path, tree: Path) -> None:
    async with stdio(tmp_path, [tree], "legacy", extra=["--log-level", "debug"]) as (
        c, errpath, _pid,
    ):  # fmt: skip
        r = await c.call_tool("grep", {"pattern": "needle"})
        assert not r.is_error
        n = await trims(errpath, 1)
        r = await c.call_tool("read_file", {"path": "in.txt"})
        assert not r.is_error
        await trims(errpath, n + 1)  # (once per burst of calls)
