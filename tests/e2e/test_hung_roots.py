"""Client roots on a hung mount (review leftover 1): pinning a root opens it, and on a hung
NFS or FUSE mount that open blocks in the kernel. Those pins ran on anyio's default thread
limiter (DEFAULT_THREADS = 6 in a served process), so a few sessions announcing such roots
held every token for good, and every other session's roots steps (and every other thread hop
without its own limiter) waited behind them: no session could make a call any more.

Against a real ``rootgrep serve --transport http``, through the real SDK client, with a real
hung mount (a FUSE file system whose daemon never answers a lookup: see ``hung_mount``).
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from hung_mount import fuse_available, hung_mount, stuck_threads
from mcp_helpers import code, http_client, text, until, uri
from test_transports import http_server

from rootgrep.server import DEFAULT_THREADS
from rootgrep.sessions import PIN_SECONDS, ROOTS_THREADS

pytestmark = pytest.mark.anyio

HUNG_SESSIONS = 7  # more than DEFAULT_THREADS (6), fewer than ROOTS_THREADS
GUARD = 60  # seconds: a hang guard only


async def _session_call(
    url: str, roots: list[str], results: dict[int, Any], key: int, tool: str = "grep"
) -> None:
    async with http_client(url, roots, read=GUARD) as c:
        args = {"pattern": "needle"} if tool == "grep" else {}
        results[key] = await c.call_tool(tool, args)


async def test_roots_on_a_hung_mount_leave_other_sessions_working(tmp_path: Path) -> None:
    why = fuse_available()
    if why is not None:
        pytest.skip(why)
    assert DEFAULT_THREADS < HUNG_SESSIONS < ROOTS_THREADS
    good = tmp_path / "good"
    good.mkdir()
    (good / "in.txt").write_text("needle good\n")
    audit = tmp_path / "audit.jsonl"
    hung: dict[int, Any] = {}
    async with AsyncExitStack() as stack:
        mount = stack.enter_context(hung_mount(tmp_path / "mnt"))
        url, errpath, proc = await stack.enter_async_context(
            http_server(tmp_path, [], "--audit-log", str(audit))
        )
        stack.callback(mount.abort)  # (first: a server blocked on the mount cannot stop)
        with anyio.fail_after(GUARD):  # a hang guard
            async with anyio.create_task_group() as tg:
                for i in range(HUNG_SESSIONS):
                    roots = [uri(tmp_path / "mnt" / f"sub{i}")]
                    tg.start_soon(_session_call, url, roots, hung, i)
                # DEFAULT_THREADS of the server's threads are stuck in the kernel on the hung
                # mount, pinning those roots
                await until(lambda: stuck_threads(proc.pid) >= DEFAULT_THREADS)
                # another session's roots and tool call still complete
                ok: dict[int, Any] = {}
                await _session_call(url, [uri(good)], ok, 0)
                r = ok[0]
                assert not r.is_error, text(r)
                assert [m["path"] for m in r.structured_content["matches"]] == ["in.txt"]
                # every hung session's pin started (none waited behind the others)
                await until(lambda: len(set(mount.lookups)) >= HUNG_SESSIONS)
        # the hung sessions were answered too: their root was dropped after PIN_SECONDS
        assert sorted(hung) == list(range(HUNG_SESSIONS))
        for res in hung.values():
            assert code(res) == "no_roots", text(res)
        log = errpath.read_text()
        assert f"did not finish within {PIN_SECONDS:g} s" in log, log[-3000:]
        # a session announcing a root on the hung mount again is refused at once: no new
        # thread blocks on it (the given-up ones, one a hung session, still do)
        assert stuck_threads(proc.pid) == HUNG_SESSIONS
        before = list(mount.lookups)
        again: dict[int, Any] = {}
        with anyio.fail_after(GUARD):
            await _session_call(url, [uri(tmp_path / "mnt" / "sub0")], again, 0)
        assert code(again[0]) == "no_roots", text(again[0])
        assert "an earlier opening of it did not finish" in errpath.read_text()
        assert stuck_threads(proc.pid) == HUNG_SESSIONS
        assert mount.lookups == before
        # once the mount answers for sub0, its given-up pin ends late: the directories it
        # opened are all closed again (none kept by nobody), and the root is served again
        mount.answer(b"sub0")
        with anyio.fail_after(GUARD):
            assert await anyio.to_thread.run_sync(mount.wait_closed, GUARD)
            await _session_call(url, [uri(tmp_path / "mnt" / "sub0")], again, 1, "list_roots")
        assert not again[1].is_error and "sub0" in text(again[1]), text(again[1])
        # once the rest answer too (here: the mount is torn down, so their opens fail), the
        # given-up threads end and a root is tried again (and refused for what it is now)
        mount.abort()
        with anyio.fail_after(GUARD):
            await until(lambda: stuck_threads(proc.pid) == 0)
            await _session_call(url, [uri(tmp_path / "mnt" / "sub1")], again, 2)
        assert code(again[2]) == "no_roots", text(again[2])
        assert "Transport endpoint is not connected" in errpath.read_text()
    lines = [json.loads(x) for x in audit.read_text().splitlines()]
    timed_out = [x for x in lines if x["op"] == "accept_root" and x["reason"] == "pin_timeout"]
    assert len(timed_out) >= HUNG_SESSIONS + 1, lines
    assert all(x["decision"] == "deny" for x in timed_out)
    last = [
        x for x in lines if x["op"] == "accept_root" and (x["requested"] or "").endswith("/sub1")
    ][-1]
    assert (last["decision"], last["reason"]) == ("deny", "invalid_uri"), last
