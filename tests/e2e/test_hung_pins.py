"""Client roots pinned on a hung mount, the review of the first fix (test_hung_roots.py):

- B1: a pin whose caller is cancelled while it blocks is counted among the hung ones (it was
  not: each cancelled ask of the same hung path left one more thread blocked);
- B2: the audit lines of the accepted roots are written inside the accept's clean-up and never
  on anyio's default limiter (a cancel there leaked the new pins' fds; a full default limiter
  stalled a local root's refresh);
- B5: a given-up pin never keeps ``serve`` from exiting (its thread was one the interpreter
  joins at exit);
- B4: a 2026-07-28 client's per-call roots are pinned on its own share of the roots threads
  (its 8 hung calls held all of them);
- B3: an owner's hung pins are capped for that owner (16 hung subpaths of one session made
  every other session lose its roots at its next refresh).

With a real hung mount (a FUSE file system whose daemon never answers a lookup: see
``hung_mount``), in process where the roots machinery is the subject, against a real
``rootgrep serve`` through the wire where the item is about the server.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from hung_mount import HungMount, fuse_available, hung_mount, stuck_threads
from mcp_helpers import http_client, text, until, uri
from test_transports import http_server, init_body, server_args, server_env

from rootgrep import sessions
from rootgrep.audit import Audit
from rootgrep.server import DEFAULT_THREADS, bound_default_threads
from rootgrep.service import Service, Settings
from rootgrep.sessions import OWNER_HUNG_PINS, ROOTS_THREADS, ClientRoots, accept_raw_roots

pytestmark = pytest.mark.anyio

GUARD = 60  # seconds: a hang guard only
LOCAL_GUARD = 20  # seconds: the same, for waits on local directories only


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[HungMount]:
    why = fuse_available()
    if why is not None:
        pytest.skip(why)
    with hung_mount(tmp_path / "mnt") as m:
        try:
            yield m
        finally:
            m.abort()  # (the blocked opens fail: the given-up pins end, and leave ``_hung``)
            for _ in range(GUARD * 20):
                with sessions._hung_lock:
                    if not sessions._hung:
                        break
                threading.Event().wait(0.05)
            assert not sessions._hung


def fds_on(p: Path) -> int:
    """How many fds of this process are open on directory ``p``."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with suppress(OSError):
            n += os.readlink(f"/proc/self/fd/{fd}") == str(p)
    return n


def _service(audit: Path | None = None) -> Service:
    return Service([], Settings(), Audit(str(audit) if audit else None))


def _fetching(roots: list[Path]) -> Any:
    async def fetch() -> list[dict[str, str]]:
        return [{"uri": uri(p)} for p in roots]

    return fetch


# ---- B1 --------------------------------------------------------------------------------------


async def test_cancelled_pins_of_a_hung_path_leave_one_thread_blocked(
    tmp_path: Path, mount: HungMount
) -> None:
    """20 asks of one hung path, each cancelled while its pin blocks: one thread blocks, counted
    among the hung pins (so the later asks are refused at once); once the mount answers, the
    pin ends late and closes what it opened."""
    service = _service()
    share = anyio.CapacityLimiter(1)
    hung_uri = uri(tmp_path / "mnt" / "sub")
    me = os.getpid()

    async def ask_once() -> Any:
        """Ask; once the ask ends (refused at once) or its pin blocks on the mount, cancel it
        (its session closed, or its client went away). The ask's outcome, if it ended."""
        blocked = stuck_threads(me)
        outcome: list[Any] = []

        async def ask() -> None:
            outcome.append(
                await accept_raw_roots([{"uri": hung_uri}], service, service.audit, (), None, share)
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await until(lambda: outcome or stuck_threads(me) > blocked)
            tg.cancel_scope.cancel()
        return outcome[0] if outcome else None

    with anyio.fail_after(GUARD):
        for _ in range(20):
            outcome = await ask_once()
            if outcome is not None:
                accepted, problems = outcome
                assert accepted == [] and "an earlier opening of it" in problems[0], problems
        assert stuck_threads(me) == 1
        with sessions._hung_lock:
            assert len(sessions._hung) == 1
        # the mount answers: the pin ends, closes the directory it opened, and is not hung
        mount.answer(b"sub")
        assert await anyio.to_thread.run_sync(mount.wait_closed, GUARD)
        await until(lambda: not sessions._hung)
        accepted, problems = await accept_raw_roots([{"uri": hung_uri}], service, service.audit)
        assert problems == [] and len(accepted) == 1
        accepted[0].close()


# ---- B2 --------------------------------------------------------------------------------------


@asynccontextmanager
async def _default_limiter_full() -> AsyncIterator[anyio.CapacityLimiter]:
    """Every token of anyio's default limiter (at DEFAULT_THREADS, as in ``serve``) held by a
    hop that blocks until the block ends (small steps blocked on a hung mount, say)."""
    bound_default_threads()
    limiter = anyio.to_thread.current_default_thread_limiter()
    gate = threading.Event()
    async with anyio.create_task_group() as tg:
        try:
            for _ in range(DEFAULT_THREADS):
                tg.start_soon(anyio.to_thread.run_sync, gate.wait)
            while limiter.borrowed_tokens < DEFAULT_THREADS:  # (no thread hop: none is left)
                await anyio.sleep(0.01)
            yield limiter
        finally:
            gate.set()


async def test_a_cancel_at_the_end_of_an_accept_leaks_no_pin(tmp_path: Path) -> None:
    """An accept whose last step (its audit lines) is cancelled (its session closing) closes
    the roots it pinned: here the step once waited on a full default limiter, where the
    cancel came; the accept now ends without waiting there."""
    local = tmp_path / "local"
    local.mkdir()
    service = _service(tmp_path / "audit.jsonl")
    outcome: list[Any] = []

    async def ask() -> None:
        outcome.append(await accept_raw_roots([{"uri": uri(local)}], service, service.audit))

    try:
        async with _default_limiter_full() as limiter, anyio.create_task_group() as tg:
            with anyio.fail_after(LOCAL_GUARD):
                tg.start_soon(ask)
                # the accept ends, or waits on the default limiter: then it is cancelled
                while not outcome and limiter.statistics().tasks_waiting == 0:
                    await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
    finally:
        service.audit.close()
    for accepted, _ in outcome:  # (the caller's, when it returned them)
        for r in accepted:
            r.close()
    assert fds_on(local) == 0  # no pin left open by nobody
    assert outcome, "the accept waited on anyio's default limiter"


@pytest.mark.parametrize("audited", [False, True])
async def test_a_refresh_never_waits_on_the_default_thread_limiter(
    tmp_path: Path, audited: bool
) -> None:
    """With every token of anyio's default limiter held (small steps blocked on a hung mount,
    say), a session's refresh of a local root still completes, audit log on or off."""
    local = tmp_path / "local"
    local.mkdir()
    service = _service(tmp_path / "audit.jsonl" if audited else None)
    client = ClientRoots(service, _fetching([local]), list_changed=True)
    try:
        async with _default_limiter_full():
            with anyio.fail_after(LOCAL_GUARD):
                await client.refresh()  # while they all still block
            assert not client.failed and [r.path for r in client.roots] == [str(local).encode()]
    finally:
        client.close()
        service.audit.close()
    if audited:
        lines = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
        assert [(x["op"], x["decision"]) for x in lines] == [("accept_root", "allow")]


# ---- B5 --------------------------------------------------------------------------------------


async def test_serve_exits_at_end_of_input_while_a_given_up_pin_still_blocks(
    tmp_path: Path,
) -> None:
    """A stdio server whose client announced a root on a hung mount (one whose opens a fatal
    signal still ends, as on NFS: ``deaf``): the pin is given up, and once its input ends the
    server exits, its pin's thread still blocked."""
    why = fuse_available()
    if why is not None:
        pytest.skip(why)
    errpath = tmp_path / "serve.err"
    async with AsyncExitStack() as stack:
        m = stack.enter_context(hung_mount(tmp_path / "mnt", deaf=True))
        err = stack.enter_context(errpath.open("wb"))
        proc = await anyio.open_process(
            [sys.executable, *server_args("stdio", [])],
            stderr=err,
            env=server_env(tmp_path),
            cwd=str(tmp_path),
        )
        stack.push_async_callback(proc.aclose)

        @stack.callback
        def _end() -> None:
            m.abort()  # (first: a process blocked on the mount cannot end)
            if proc.returncode is None:
                proc.kill()

        assert proc.stdin is not None and proc.stdout is not None
        out = BufferedByteReceiveStream(proc.stdout)

        async def send(msg: dict[str, Any]) -> None:
            await proc.stdin.send(json.dumps(msg).encode() + b"\n")  # type: ignore[union-attr]

        async def until(rid: int) -> dict[str, Any]:
            """The answer to request ``rid``, answering the server's roots/list meanwhile."""
            while True:
                msg = json.loads(await out.receive_until(b"\n", 1 << 24))
                if msg.get("method") == "roots/list":
                    roots = [{"uri": uri(tmp_path / "mnt" / "sub")}]
                    await send({"jsonrpc": "2.0", "id": msg["id"], "result": {"roots": roots}})
                elif msg.get("id") == rid and "method" not in msg:
                    return msg

        with anyio.fail_after(GUARD):  # a hang guard
            await send(init_body({"roots": {"listChanged": True}}))
            assert "result" in await until(1)
            await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            call = {"name": "grep", "arguments": {"pattern": "x"}}
            await send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
            res = (await until(2))["result"]
            assert res.get("isError") and res["content"][0]["text"].startswith("[no_roots]"), res
            assert "did not finish within" in errpath.read_text()
            assert stuck_threads(proc.pid) == 1  # the given-up pin still blocks
            await proc.stdin.aclose()
            await proc.wait()
        assert proc.returncode == 0, errpath.read_text()[-3000:]


# ---- B4 --------------------------------------------------------------------------------------


async def test_one_clients_per_call_roots_on_a_hung_mount_leave_others_pinning(
    tmp_path: Path, mount: HungMount
) -> None:
    """A 2026-07-28 client makes ROOTS_THREADS calls at once, each with a root of its own on
    a hung mount: its pins take turns on its own share, so another session's call (a local
    root) completes while all of those calls still wait."""
    good = tmp_path / "good"
    good.mkdir()
    (good / "in.txt").write_text("needle good\n")
    hung: dict[int, Any] = {}

    async def hung_call(i: int) -> None:
        async with http_client(url, [uri(tmp_path / "mnt" / f"a{i}")], "auto", read=GUARD) as c:
            hung[i] = await c.call_tool("grep", {"pattern": "needle"})

    async with AsyncExitStack() as stack:
        # (no pin given up within the hang guard: the other session cannot get through
        # because one was given up, only because it has threads of its own)
        env = {**server_env(tmp_path), "ROOTGREP_PIN_SECONDS": str(10 * GUARD)}
        url, _, _ = await stack.enter_async_context(http_server(tmp_path, [], env=env))
        stack.callback(mount.abort)  # (first: a server blocked on the mount cannot stop)
        with anyio.fail_after(GUARD):  # a hang guard
            async with anyio.create_task_group() as tg:
                for i in range(ROOTS_THREADS):
                    tg.start_soon(hung_call, i)
                await until(lambda: mount.wait_lookups(1, 0))  # its first pin blocks
                async with http_client(url, [uri(good)], "legacy", read=GUARD) as c:
                    r = await c.call_tool("grep", {"pattern": "needle"})
                assert not r.is_error, text(r)
                assert [m["path"] for m in r.structured_content["matches"]] == ["in.txt"]
                assert hung == {}  # every hung call still waits
                assert len(mount.lookups) == 1  # (its pins take turns)
                tg.cancel_scope.cancel()


# ---- B3 --------------------------------------------------------------------------------------


async def test_one_sessions_hung_pins_leave_other_sessions_roots_served(
    tmp_path: Path, mount: HungMount, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One session announces 20 subpaths of a hung mount: OWNER_HUNG_PINS of its pins block,
    the rest of its roots are refused at once, and another session's refresh keeps its local
    root. With the cap over all owners reached too, a root already served is still re-pinned
    (and only a new one refused)."""
    local = tmp_path / "local"
    local.mkdir()
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    service = _service()
    b = ClientRoots(service, _fetching([local]), list_changed=True)
    hung_paths = [tmp_path / "mnt" / f"s{i}" for i in range(20)]
    a = ClientRoots(service, _fetching(hung_paths), list_changed=True)
    with anyio.fail_after(GUARD):  # a hang guard
        await b.refresh()
        (served,) = b.roots
        with monkeypatch.context() as short:
            short.setattr(sessions, "PIN_SECONDS", 0.2)  # (every pin of ``a`` is given up)
            await a.refresh()
        assert a.roots == []
        await b.refresh()
        assert not b.failed and b.roots == [served] and not served.fs.retired
        await until(lambda: stuck_threads(os.getpid()) >= OWNER_HUNG_PINS)
        assert stuck_threads(os.getpid()) == len(sessions._hung) == OWNER_HUNG_PINS
        # the cap over all owners reached (here by that one session's pins): a root already
        # served is re-pinned still, a new root is refused
        monkeypatch.setattr(sessions, "MAX_HUNG_PINS", OWNER_HUNG_PINS)
        await b.refresh()
        assert not b.failed and b.roots == [served] and not served.fs.retired
        c = ClientRoots(service, _fetching([other_dir]), list_changed=True)
        await c.refresh()
        assert c.roots == []
    b.close()
    c.close()
