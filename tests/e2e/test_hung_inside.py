"""A client root nested in an operator root, on a mount that hangs after the root was accepted.

Every tool call using such a root first checks that the directory pinned at acceptance is
still the one found beneath the operator root's fd at the same place (``Root.still_inside``):
it opens that path again, which on a hung NFS or FUSE mount blocks in the kernel. The check
ran on anyio's default thread limiter with no time-out: each call using the root hung for
good, and once DEFAULT_THREADS of them blocked every thread hop of the server stalled (every
session stopped answering). It now runs on the roots threads like a pin: given up after
PIN_SECONDS (the root left out of the call, with a message saying why), counted among the
hung pins, and a later check of the same root refused at once while that one still blocks.

Against a real ``rootgrep serve --transport http``, through the real SDK client, with a real
mount (a FUSE file system that answers the root's name once, to be looked up again on every
path walk, and then stops answering for it: see ``hung_mount``).
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from hung_mount import fuse_available, hung_mount, stuck_threads
from mcp_helpers import code, http_client, text, until, uri
from test_transports import http_server

from rootgrep.server import DEFAULT_THREADS
from rootgrep.sessions import PIN_SECONDS

pytestmark = pytest.mark.anyio

GUARD = 60  # seconds: a hang guard only
CALLS = 45  # calls on the hung root at once: far more than DEFAULT_THREADS (6), over 40


@pytest.mark.parametrize("announced", ["as-is", "through-a-link"])
async def test_a_nested_root_whose_mount_hangs_after_acceptance_does_not_hang_calls(
    tmp_path: Path, announced: str
) -> None:
    """(Announced through a link inside the operator root, the errors name the root as the
    client spelled it, never the path the link leads to: see ``Root.announced``; they named
    the link's target, as nested roots kept no announced spelling.)"""
    why = fuse_available()
    if why is not None:
        pytest.skip(why)
    assert CALLS > 40 and CALLS > DEFAULT_THREADS
    op = tmp_path / "op"
    good = op / "good"
    good.mkdir(parents=True)
    (good / "in.txt").write_text("needle good\n")
    proj = op / "mnt" / "proj"
    spelled = proj
    if announced == "through-a-link":
        spelled = op / "via"
        spelled.symlink_to(Path("mnt") / "proj")
    results: dict[int, Any] = {}
    async with AsyncExitStack() as stack:
        mount = stack.enter_context(hung_mount(op / "mnt"))
        url, errpath, proc = await stack.enter_async_context(
            # (no roots refresh meanwhile: its re-pin of the root would block on the mount
            # too, one more thread, when the root is spelled through a link)
            http_server(tmp_path, [op], "--no-index", "--roots-ttl", "3600")
        )
        stack.callback(mount.abort)  # (first: a server blocked on the mount cannot stop)
        mount.answer(b"proj", valid=0)  # (looked up again on every path walk through it)
        with anyio.fail_after(GUARD):  # a hang guard
            async with http_client(url, [uri(spelled)]) as c:
                # accepted, and checked at its first call, while the mount answers
                r = await c.call_tool("list_roots", {})
                assert not r.is_error and "proj" in text(r), text(r)
                # the mount stops answering for it: each call's check of it blocks there
                mount.hang(b"proj")
                held = len(mount.lookups)

                async def call(i: int) -> None:
                    results[i] = await c.call_tool("grep", {"pattern": "needle"})

                async with anyio.create_task_group() as tg:
                    for i in range(CALLS):
                        tg.start_soon(call, i)
                    await until(lambda: mount.wait_lookups(held + 1, 0))  # a check blocks
                    # another session, on another root nested in the same operator root,
                    # is answered meanwhile
                    async with http_client(url, [uri(good)]) as other:
                        r = await other.call_tool("grep", {"pattern": "needle"})
                    assert not r.is_error, text(r)
                    assert [m["path"] for m in r.structured_content["matches"]] == ["in.txt"]
                # every call on the hung root was answered: the root is not usable, and why
                assert sorted(results) == list(range(CALLS))
                for res in results.values():
                    assert code(res) == "no_roots", text(res)
                    assert "(a hung network or FUSE mount?)" in text(res), text(res)
                    assert repr(uri(spelled)) in text(res), text(res)
                    if spelled != proj:
                        assert "mnt/proj" not in text(res), text(res)
                said = [text(res) for res in results.values()]
                assert any(f"checking it did not finish within {PIN_SECONDS:g} s" in t
                           for t in said), said  # fmt: skip
                assert any("an earlier check of it did not finish" in t for t in said), said
                # one check blocks on the mount (the later ones were refused at once), and at
                # most one pin of the root the session's roots fetch made meanwhile (a hung
                # path refuses pins at or beneath it, but a link is another path: its pin
                # walks to the mount too); not one thread a call
                assert 1 <= stuck_threads(proc.pid) <= 2
                assert "checking it did not finish" in errpath.read_text()
                # the server still answers that session: its list_roots leaves the root out,
                # saying why. (In 2 of 9 full-suite runs, never alone, one list_roots left it
                # out without a word, as a root that left its operator root: the root was
                # never served, which is what this asserts every time; why a check on the
                # hung mount came back at all is not known yet: see the session note.)
                while True:
                    r = await c.call_tool("list_roots", {})
                    assert not r.is_error and "proj" not in text(r).split("(note:")[0], text(r)
                    if "an earlier check of it" in text(r) or "did not finish" in text(r):
                        break
                    await anyio.sleep(0.2)
                # once the mount answers again, the blocked check ends and the root is served
                mount.answer(b"proj", valid=0)
                await until(lambda: stuck_threads(proc.pid) == 0)
                # (until its thread has left the hung ones, and a check made while the mount
                # came back, which may fail and leave the root out of that one call, is over)
                while "note:" in text(r) or "proj" not in text(r):
                    if "announce it again" in text(r):
                        # (a roots answer that came late, after the mount hung, left it out
                        # of the session: the note says so; the client announces it again,
                        # as it says)
                        await c.send_roots_list_changed()
                        await anyio.sleep(0.2)
                    r = await c.call_tool("list_roots", {})
                assert not r.is_error and "proj" in text(r), text(r)
                r = await c.call_tool("grep", {"pattern": "needle"})
                assert code(r) != "no_roots", text(r)
