"""Findings of the soak (issue 12, item 2) about roots over HTTP under load, against a real
``rootgrep serve --transport http`` through the real SDK client.

Under load (64 sessions on 2 cores) a client's ``roots/list`` answer can take longer than the
2 s after which a request on the standalone GET stream is taken for lost and asked again.
The first call of a session asks once more on its own response stream, which cannot lose a
request; that ask was bounded by the same 2 s, so with a slow answer it gave up too, the
standalone attempts timed out as well, and the session's first call answered ``[no_roots]``
although the client had announced valid roots (12 of 6,400 calls in one soak round).

The slow client here is slow by events, not by a sleep: it answers no ``roots/list`` until
the server has given up on one (timed it out: the server's ``notifications/cancelled``
interrupts the client's handler) that it sent after a request still waiting for its answer.
A request sent later that already timed out proves the one still waiting has waited at least
the server's lost-request time-out; only the call's own-stream ask can still be waiting then
(every standalone ask is given up after it).
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


class AnswersAfterAGiveUp(RootsStub):
    """Holds every ``roots/list`` until the server gave up on a later one (see above)."""

    def __init__(self, uris: list[str]) -> None:
        super().__init__(uris)
        self.waiting: set[int] = set()  # ids of the requests held
        self.given_up: list[int] = []  # ids of the requests the server cancelled
        self.answered_after_a_give_up: list[int] = []
        self.released = anyio.Event()

    async def __call__(self, context: Any) -> Any:
        rid = int(context.request_id)
        self.waiting.add(rid)
        try:
            await self.released.wait()
        except anyio.get_cancelled_exc_class():  # the server timed this request out
            self.waiting.discard(rid)
            self.given_up.append(rid)
            if any(w < rid for w in self.waiting):  # a request sent earlier still waits
                self.released.set()
            raise
        self.waiting.discard(rid)
        self.answered_after_a_give_up.append(rid)
        return await super().__call__(context)


async def test_a_slow_roots_answer_still_reaches_the_first_call(
    tmp_path: Path, world: Path
) -> None:
    root = world / "root"
    (root / "sub" / "in.txt").write_text("needle sub\n")
    stub = AnswersAfterAGiveUp([uri(root / "sub")])
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
    # not vacuous: the answer the call used came only after the server had timed out a
    # request it sent later (so it had waited longer than that time-out)
    assert stub.released.is_set()
    assert stub.answered_after_a_give_up, (stub.given_up, stub.waiting)
    assert min(stub.answered_after_a_give_up) < max(stub.given_up)
