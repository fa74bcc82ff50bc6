"""Bounded resources on the wire (issue 8, items 8 and 13): indexes, watchers, fds and threads
of roots nobody uses any more come back; one client cannot take every inotify instance.

Counts are of this process (the in-memory server runs in it): fds in /proc/self/fd, threads
(threading and /proc/self/task), inotify instances (fds linked to anon_inode:inotify). Waits
are hang guards only."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_helpers import RootsStub, code, connect, text, uri

from rootgrep.audit import Audit
from rootgrep.index.manager import IndexManager
from rootgrep.roots import pin_root
from rootgrep.server import RootgrepServer, build_server
from rootgrep.service import Service, Settings, Token

pytestmark = pytest.mark.anyio


def counts() -> dict[str, int]:
    fds = os.listdir("/proc/self/fd")
    inotify = 0
    for fd in fds:
        with contextlib.suppress(OSError):  # (the fd listdir used is closed by now)
            inotify += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
    return {
        "fds": len(fds),
        "threads": threading.active_count(),
        "tasks": len(os.listdir("/proc/self/task")),
        "inotify": inotify,
    }


def near(base: dict[str, int], slack: dict[str, int]) -> Callable[[], bool]:
    return lambda: all(counts()[k] <= base[k] + slack.get(k, 0) for k in base)


async def wait_for(pred: Callable[[], bool], seconds: float = 60) -> None:
    with anyio.fail_after(seconds):  # a hang guard
        while not pred():
            await anyio.sleep(0.02)


def tree(base: Path, name: str) -> Path:
    d = base / name
    (d / "src").mkdir(parents=True)
    (d / "src" / "mod.py").write_text(f"def fn_{name}():\n    return 'needle {name}'\n")
    (d / "README").write_text(f"needle in {name}\n")
    return d


@pytest.fixture
def server_with(tmp_path: Path) -> Iterator[Callable[..., RootgrepServer]]:
    made: list[Service] = []

    def make(settings: Settings, **manager: Any) -> RootgrepServer:
        indexes = IndexManager(str(tmp_path / "cache"), **manager)
        service = Service([], settings, Audit(str(tmp_path / "audit.jsonl")), indexes)
        made.append(service)
        return build_server(service)

    yield make
    for s in made:
        assert s.indexes is not None
        s.indexes.close()
        s.audit.close()


async def test_one_off_roots_give_back_their_fds_threads_and_inotify_instances(
    server_with: Callable[..., RootgrepServer], tmp_path: Path
) -> None:
    """50 per-call roots of a 2026-07-28 client, then 20 handshake sessions that open, use
    (grep, search) and close: after the idle time every index, watcher and fd is gone (a
    leak of one fd per root would be 25 times the slack)."""
    server = server_with(Settings(), idle_seconds=0.5)
    manager = server.service.indexes
    assert manager is not None
    warm = tree(tmp_path, "warm")
    stub = RootsStub([uri(warm)])
    async with connect(server, "auto", stub) as c:
        await c.call_tool("grep", {"pattern": "needle"})  # warm up: imports, worker threads
        first = manager.get(bytes(warm))
        assert first is not None
        await wait_for(lambda: manager.get(bytes(warm)) is None and first.index is None)
        base = counts()
        for i in range(50):
            d = tree(tmp_path, f"once{i}")
            stub.uris = [uri(d)]
            g = await c.call_tool("grep", {"pattern": "needle"})
            assert [m["path"] for m in g.structured_content["matches"]] == ["README", "src/mod.py"]
            if i % 5 == 0:
                s = await c.call_tool("search", {"query": f"fn_once{i}"})
                assert not s.is_error, text(s)
    for i in range(20):
        d = tree(tmp_path, f"session{i}")
        async with connect(server, "legacy", RootsStub([uri(d)])) as c:
            assert not (await c.call_tool("grep", {"pattern": "needle"})).is_error
            assert not (await c.call_tool("search", {"query": f"fn_session{i}"})).is_error
    # (worker threads of anyio's pool may linger: a few threads of slack, nothing per root)
    await wait_for(near(base, {"fds": 2, "threads": 4, "tasks": 4}))
    assert manager._roots == {}
    assert counts()["inotify"] == base["inotify"]


async def test_a_client_announcing_200_roots_gets_a_capped_share(
    server_with: Callable[..., RootgrepServer], tmp_path: Path
) -> None:
    """A handshake-era client announcing 200 roots: 64 are served (the others refused, in
    the log notification, the audit log and the tools' answers), one inotify instance serves
    them all, threads stay bounded, and grep in an accepted root is exact."""
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params)

    dirs = [tree(tmp_path, f"r{i:03}") for i in range(200)]
    server = server_with(Settings())
    manager = server.service.indexes
    assert manager is not None
    base = counts()
    stub = RootsStub([uri(d) for d in dirs])
    async with connect(server, "legacy", stub, logging_callback=on_log) as c:
        listed = await c.call_tool("list_roots", {})
        names = [r["name"] for r in listed.structured_content["roots"]]
        assert names == [f"r{i:03}" for i in range(64)]
        assert "136 of the 200 roots the client announced were refused" in text(listed)
        refused = await c.call_tool("grep", {"pattern": "needle", "root": "r150"})
        assert code(refused) == "unknown_root" and "at most 64 roots" in text(refused)
        await wait_for(lambda: any("were refused" in str(p.data) for p in logs))
        audit = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
        denied = [x for x in audit if x["reason"] == "too_many_roots"]
        assert len(denied) == 136 and {x["requested"] for x in denied} == {
            uri(d) for d in dirs[64:]
        }
        await wait_for(
            lambda: all((ix := manager.get(bytes(d))) and ix.built.is_set() for d in dirs[:64]),
            120,
        )
        now = counts()
        assert now["inotify"] <= base["inotify"] + 1  # one instance, whatever the roots
        # one index thread per served root (each with a native one of Tantivy), one reader
        # (and a few of anyio's workers)
        assert now["threads"] <= base["threads"] + 64 + 8
        assert now["tasks"] <= base["tasks"] + 2 * 64 + 8
        names = [t.name for t in threading.enumerate()]
        assert names.count("rootgrep-inotify") == 1 and "rootgrep-watch" not in names
        assert names.count("rootgrep-index") == 64
        states = {r["index"]["state"] for r in (await c.call_tool("list_roots", {})).structured_content["roots"]}  # fmt: skip
        assert states == {"ready"}
        # changes in one root are heard for that root alone, and grep stays exact
        (dirs[37] / "src" / "late.py").write_text("needle written late\n")
        (dirs[5] / "README").write_text("no longer\n")
        for d in (dirs[37], dirs[5], dirs[6]):
            want = live_grep(d, "needle")
            got: list[tuple[str, int]] = []

            async def answer(d: Path = d) -> list[tuple[str, int]]:
                g = await c.call_tool("grep", {"pattern": "needle", "root": d.name})
                return [(m["path"], m["line"]) for m in g.structured_content["matches"]]

            with anyio.fail_after(20):  # the watcher is a few ms behind a change: a hang guard
                while (got := await answer()) != want:
                    await anyio.sleep(0.02)
            assert got == want
        assert [p for p, _ in live_grep(dirs[37], "needle")] == [
            "README",
            "src/late.py",
            "src/mod.py",
        ]
        assert [p for p, _ in live_grep(dirs[5], "needle")] == ["src/mod.py"]
        ix6 = manager.get(bytes(dirs[6]))
        assert ix6 is not None and not ix6.dirty  # nothing of the others' changes landed here
        g = await c.call_tool("grep", {"pattern": "needle", "root": "r006"})
        assert g.structured_content["index_used"]


def live_grep(d: Path, pattern: str) -> list[tuple[str, int]]:
    """A live scan (no index) of one directory."""
    r = pin_root(str(d))
    try:
        res = Service([], Settings()).grep([r], Token(), pattern=pattern)
        return [(m.path, m.line) for m in res.matches]
    finally:
        r.close()


async def test_roots_beyond_the_watcher_cap_are_indexed_stale_and_grep_stays_exact(
    server_with: Callable[..., RootgrepServer], tmp_path: Path
) -> None:
    dirs = [tree(tmp_path, f"w{i}") for i in range(5)]
    server = server_with(Settings(), max_watched_roots=2)
    manager = server.service.indexes
    assert manager is not None
    async with connect(server, "legacy", RootsStub([uri(d) for d in dirs])) as c:
        await c.call_tool("list_roots", {})
        await wait_for(
            lambda: all((ix := manager.get(bytes(d))) and ix.built.is_set() for d in dirs)
        )
        roots = (await c.call_tool("list_roots", {})).structured_content["roots"]
        states = {r["name"]: r["index"]["state"] for r in roots}
        assert sorted(states.values()) == ["ready", "ready", "stale", "stale", "stale"]
        assert counts()["inotify"] >= 1
        for d in dirs:
            (d / "src" / "new.py").write_text("needle, new\n")
        for d in dirs:
            want = live_grep(d, "needle")
            assert [p for p, _ in want] == ["README", "src/mod.py", "src/new.py"]
            g = await c.call_tool("grep", {"pattern": "needle", "root": d.name})
            if states[d.name] == "stale":  # answered live at once, never from the index
                assert not g.structured_content["index_used"]
                assert [(m["path"], m["line"]) for m in g.structured_content["matches"]] == want
            else:  # watched: exact once the watcher heard of the change (a hang guard)
                with anyio.fail_after(20):
                    while [(m["path"], m["line"]) for m in g.structured_content["matches"]] != want:
                        await anyio.sleep(0.02)
                        g = await c.call_tool("grep", {"pattern": "needle", "root": d.name})
                assert g.structured_content["index_used"]
