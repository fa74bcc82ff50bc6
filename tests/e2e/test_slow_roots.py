"""Findings of the soak (issue 12, item 2) about roots over HTTP under load, against a real
``rootgrep serve --transport http`` through the real SDK client.

Under load (64 sessions on 2 cores) a client's ``roots/list`` answer can take longer than the
2 s after which a request on the standalone GET stream is taken for lost and asked again.
The first call of a session asks once more on its own response stream, which cannot lose a
request; that ask was bounded by the same 2 s, so with a slow answer it gave up too, the
standalone attempts timed out as well, and the session's first call answered ``[no_roots]``
although the client had announced valid roots (12 of 6,400 calls in one soak round).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_helpers import RootsStub, text, uri
from test_transports import http_server

pytestmark = pytest.mark.anyio

SLOW = 3.0  # seconds a client takes to answer roots/list: over the 2 s lost-request retry


class SlowRoots(RootsStub):
    async def __call__(self, context: Any) -> Any:
        await anyio.sleep(SLOW)
        return await super().__call__(context)


async def test_a_slow_roots_answer_still_reaches_the_first_call(
    tmp_path: Path, world: Path
) -> None:
    root = world / "root"
    (root / "sub" / "in.txt").write_text("needle sub\n")
    stub = SlowRoots([uri(root / "sub")])
    async with http_server(tmp_path, [root]) as (url, _, _):
        with anyio.fail_after(60):  # a hang guard
            async with (
                httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=60)) as http,
                Client(
                    streamable_http_client(url, http_client=http),
                    mode="legacy",
                    list_roots_callback=stub,
                ) as c,
            ):
                r = await c.call_tool("grep", {"pattern": "needle"})
                assert not r.is_error, text(r)
                assert [m["path"] for m in r.structured_content["matches"]] == ["in.txt"]
