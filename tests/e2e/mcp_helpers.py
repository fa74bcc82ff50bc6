"""Helpers for end-to-end tests: a real server, talked to through the real MCP client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import anyio.to_thread
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, ListRootsResult, Root

MODES = ["legacy", "auto"]


def uri(p: Path | str) -> str:
    return "file://" + quote(str(p))


class RootsStub:
    """A client's roots: raw URI strings (sent unmodified, as a real client may) and a log of
    every roots/list the server sent."""

    def __init__(self, uris: Sequence[str] = ()) -> None:
        self.uris = list(uris)
        self.names: dict[str, str] = {}
        self.calls = 0

    async def __call__(self, context: Any) -> ListRootsResult:
        self.calls += 1
        roots = [
            Root.model_construct(uri=u, name=self.names.get(u)) for u in self.uris
        ]  # model_construct: raw strings reach the wire, unnormalised
        return ListRootsResult.model_construct(roots=roots)


@asynccontextmanager
async def connect(
    server: Any, mode: str, roots: RootsStub | None = None, **kw: Any
) -> AsyncIterator[Client]:
    if roots is not None:
        kw["list_roots_callback"] = roots
    async with Client(server, mode=mode, **kw) as client:
        yield client


@asynccontextmanager
async def http_client(
    url: str, roots: Sequence[str], mode: str = "legacy", read: float = 60.0
) -> AsyncIterator[Client]:
    """A real client over streamable HTTP at ``url`` announcing ``roots`` (a ``RootsStub``),
    whose reads wait at most ``read`` seconds (a hang guard: a call on a hung root must come
    back, not wait for good)."""
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=read)) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            list_roots_callback=RootsStub(roots),
        ) as c,
    ):
        yield c


async def until(check: Any) -> None:
    """Wait until the blocking ``check()`` holds, asked on a worker thread (the caller's hang
    guard bounds it)."""
    while not await anyio.to_thread.run_sync(check):
        await anyio.sleep(0.05)


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def code(result: CallToolResult) -> str | None:
    """The [code] of an error result, None for a success."""
    if not result.is_error:
        return None
    t = text(result)
    assert t.startswith("["), t
    return t[1 : t.index("]")]


def everything(result: CallToolResult) -> str:
    return text(result) + json.dumps(result.structured_content or {})
