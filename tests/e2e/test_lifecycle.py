"""The roots lifecycle on the wire (SPEC §3), through the real MCP client in memory."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_helpers import RootsStub, code, connect, everything, uri

from rootgrep.errors import RootRemoved
from rootgrep.roots import pin_root
from rootgrep.service import Service, Settings
from rootgrep.sessions import ClientRoots
from support import MARKER

pytestmark = pytest.mark.anyio


@pytest.fixture
def dirs(tmp_path: Path) -> Path:
    for d in ("a", "b", "c"):
        (tmp_path / d).mkdir()
        (tmp_path / d / f"{d}.txt").write_text(f"hello from {d}\n")
    return tmp_path


async def wait_for(pred: Any, seconds: float = 10) -> None:
    with anyio.fail_after(seconds):
        while not pred():
            await anyio.sleep(0.01)


def root_names(result: Any) -> list[str]:
    return [r["name"] for r in result.structured_content["roots"]]


async def test_roots_list_after_initialized_and_after_list_changed(make_server, dirs: Path) -> None:
    stub = RootsStub([uri(dirs / "a")])
    async with connect(make_server([dirs]), "legacy", stub) as c:
        await wait_for(lambda: stub.calls == 1)  # sent after initialized, before any tool call
        assert root_names(await c.call_tool("list_roots", {})) == ["a"]
        assert root_names(await c.call_tool("list_roots", {})) == ["a"]
        assert stub.calls == 1  # listChanged clients are not polled
        stub.uris = [uri(dirs / "b"), uri(dirs / "c")]
        await c.send_roots_list_changed()
        await wait_for(lambda: stub.calls == 2)
        assert root_names(await c.call_tool("list_roots", {})) == ["b", "c"]
        g = await c.call_tool("grep", {"pattern": "hello"})
        assert [m["root"]["name"] for m in g.structured_content["matches"]] == ["b", "c"]


async def test_no_roots_capability_never_gets_roots_list(make_server, dirs: Path) -> None:
    audit = dirs / "audit.jsonl"
    async with connect(make_server([dirs / "a"], audit=audit), "legacy") as c:
        assert root_names(await c.call_tool("list_roots", {})) == ["a"]  # operator scope
        r = await c.call_tool("read_file", {"path": "a.txt"})
        assert not r.is_error
    lines = [json.loads(x) for x in audit.read_text().splitlines()]
    assert lines and not any(x["tool"] == "roots" for x in lines)


async def test_without_roots_anywhere_every_tool_fails_closed(make_server, dirs: Path) -> None:
    async with connect(make_server([]), "legacy") as c:
        assert root_names(await c.call_tool("list_roots", {})) == []
        for tool, args in (("grep", {"pattern": "x"}), ("find_files", {"pattern": "x"}),
                           ("read_file", {"path": str(dirs / "a" / "a.txt")}),
                           ("list_directory", {}), ("directory_tree", {}),
                           ("file_info", {"path": "/"})):  # fmt: skip
            assert code(await c.call_tool(tool, args)) == "no_roots", tool


async def test_invalid_client_roots_are_dropped_one_by_one(make_server, dirs: Path) -> None:
    audit = dirs / "audit.jsonl"
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params)

    stub = RootsStub([
        uri(dirs / "a"), "http://example.com/x", uri(dirs / "missing"), "file://evil/share",
        uri(dirs / "b") + "/../c", uri(dirs / "a" / "a.txt"), "FILE://" + str(dirs / "b"),
        uri(dirs / "c") + "?q=1",
    ])  # fmt: skip
    server = make_server([dirs], audit=audit)
    async with connect(server, "legacy", stub, logging_callback=on_log) as c:
        await wait_for(lambda: stub.calls == 1)
        assert root_names(await c.call_tool("list_roots", {})) == ["a", "b"]
        await wait_for(lambda: len(logs) >= 6)
    assert all(p.level == "warning" for p in logs)
    denied = [json.loads(x) for x in audit.read_text().splitlines()]
    denied = [x for x in denied if x["tool"] == "roots" and x["decision"] == "deny"]
    assert len(denied) == 6 and {x["reason"] for x in denied} == {"invalid_uri"}


async def test_intersection_with_operator_roots(make_server, dirs: Path) -> None:
    (dirs / "a" / "deep").mkdir()
    (dirs / "a" / "deep" / "d.txt").write_text("hello deep\n")
    stub = RootsStub([uri(dirs), uri(dirs.parent / "elsewhere-not-served")])
    async with connect(make_server([dirs / "a" / "deep", dirs / "b"]), "legacy", stub) as c:
        names = root_names(await c.call_tool("list_roots", {}))
        assert names == ["deep", "b"]  # client /x ∩ operator /x/a/deep = /x/a/deep
        r = await c.call_tool("read_file", {"path": str(dirs / "a" / "a.txt")})
        assert code(r) == "outside_roots"


async def test_modern_era_fetches_roots_with_each_call(make_server, dirs: Path) -> None:
    stub = RootsStub([uri(dirs / "a")])
    async with connect(make_server([dirs]), "auto", stub) as c:
        assert root_names(await c.call_tool("list_roots", {})) == ["a"]
        n = stub.calls
        stub.uris = [uri(dirs / "c")]  # no notification exists in this era: the next call sees it
        assert root_names(await c.call_tool("list_roots", {})) == ["c"]
        assert stub.calls == n + 1
        r = await c.call_tool("read_file", {"path": str(dirs / "a" / "a.txt")})
        assert code(r) == "outside_roots"


async def test_removed_root_fd_is_closed_once_unused(make_server, dirs: Path) -> None:
    stub = RootsStub([uri(dirs / "a"), uri(dirs / "b")])
    async with connect(make_server([dirs]), "legacy", stub) as c:
        await wait_for(lambda: stub.calls == 1)
        await c.call_tool("list_roots", {})
        before = len(os.listdir("/proc/self/fd"))
        stub.uris = [uri(dirs / "a")]
        await c.send_roots_list_changed()
        await wait_for(lambda: stub.calls == 2)
        await c.call_tool("list_roots", {})
        assert len(os.listdir("/proc/self/fd")) == before - 1


# -- the mechanisms below the wire, made deterministic --------------------------------------


async def test_a_call_on_a_removed_root_is_cancelled(dirs: Path) -> None:
    service = Service([pin_root(str(dirs))], Settings())
    current = [{"uri": uri(dirs / "a")}, {"uri": uri(dirs / "b")}]

    async def fetch() -> list[dict[str, str]]:
        return list(current)

    client = ClientRoots(service, fetch, list_changed=True)
    await client.refresh()
    roots = await client.current()
    b = next(r for r in roots if r.name == "b")
    assert b.acquire()
    from rootgrep.service import Token

    token = Token(frozenset({b.id}))
    client.track(token)
    current.pop()  # the client removes b
    await client.refresh()
    assert token.cancelled
    with pytest.raises(RootRemoved):
        service.grep([b], token, pattern="hello")
    assert b.fs.fd >= 0  # still open: the call holds it
    b.release()
    assert b.fs.fd == -1  # closed by the last user
    client.close()
    service.operator_roots[0].close()


async def test_clients_without_list_changed_are_refetched_after_the_ttl(dirs: Path) -> None:
    service = Service([], Settings(roots_ttl=0.05))
    current = [{"uri": uri(dirs / "a")}]
    calls = 0

    async def fetch() -> list[dict[str, str]]:
        nonlocal calls
        calls += 1
        return list(current)

    client = ClientRoots(service, fetch, list_changed=False)
    await client.refresh()
    assert [r.name for r in await client.current()] == ["a"]
    assert calls == 1  # fresh: no re-fetch
    current[0] = {"uri": uri(dirs / "b")}
    await anyio.sleep(0.1)
    assert [r.name for r in await client.current()] == ["b"]
    assert calls == 2
    client.close()


async def test_a_failed_refresh_leaves_no_roots(dirs: Path) -> None:
    service = Service([], Settings())
    ok = True

    async def fetch() -> list[dict[str, str]]:
        if not ok:
            raise TimeoutError("no answer")
        return [{"uri": uri(dirs / "a")}]

    client = ClientRoots(service, fetch, list_changed=True)
    await client.refresh()
    assert len(await client.current()) == 1
    ok = False
    await client.refresh()
    assert await client.current() == []  # fail closed, never the previous list
    client.close()


async def test_a_removed_root_stops_indexing_and_a_readded_one_is_resynced(
    make_server, dirs: Path
) -> None:
    server = make_server([], index=True)  # (inside an indexed root they would share its index)
    manager = server.service.indexes
    stub = RootsStub([uri(dirs / "a"), uri(dirs / "b")])
    async with connect(server, "legacy", stub) as c:
        await c.call_tool("list_roots", {})  # the effective roots start indexing
        a, b = (str(dirs / x).encode() for x in ("a", "b"))
        await wait_for(
            lambda: all(manager.get(p) and manager.get(p).state == "ready" for p in (a, b))
        )
        g = await c.call_tool("grep", {"pattern": "hello", "root": "b"})
        assert g.structured_content["index_used"] and len(g.structured_content["matches"]) == 1
        old = manager.get(b)
        stub.uris = [uri(dirs / "a")]
        await c.send_roots_list_changed()
        await wait_for(lambda: manager.get(b) is None)
        await wait_for(lambda: old.index is None)  # stopped by a reaper thread, not the loop
        assert old.state == "off"
        assert all(not t.is_alive() for t in old.threads)
        assert code(await c.call_tool("grep", {"pattern": "hello", "root": "b"})) == "unknown_root"
        (dirs / "b" / "later.txt").write_text("hello again\n")  # changed while not a root
        stub.uris = [uri(dirs / "a"), uri(dirs / "b")]
        await c.send_roots_list_changed()
        await wait_for(lambda: stub.calls == 3)
        r = await c.call_tool("grep", {"pattern": "hello", "root": "b"})
        assert [m["path"] for m in r.structured_content["matches"]] == ["b.txt", "later.txt"]
        await wait_for(lambda: manager.get(b) is not None and manager.get(b).state == "ready")
        r = await c.call_tool("grep", {"pattern": "hello", "root": "b"})
        assert r.structured_content["index_used"]
        assert [m["path"] for m in r.structured_content["matches"]] == ["b.txt", "later.txt"]
        roots = await c.call_tool("list_roots", {})
        states = {x["name"]: x["index"]["state"] for x in roots.structured_content["roots"]}
        assert states == {"a": "ready", "b": "ready"}


async def test_a_new_roots_first_build_reports_progress_as_log_messages(
    make_server, dirs: Path
) -> None:
    for i in range(1200):
        (dirs / "c" / f"n{i}.txt").write_text(f"note {i}\n")
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params)

    stub = RootsStub([uri(dirs / "c")])
    async with connect(make_server([], index=True), "legacy", stub, logging_callback=on_log) as c:
        await c.call_tool("list_roots", {})
        await wait_for(lambda: any("ready" in str(p.data) for p in logs), 60)
    texts = [str(p.data) for p in logs if p.logger == "rootgrep.index"]
    assert any("files examined" in t for t in texts) and "ready" in texts[-1]
    assert all(p.level == "info" for p in logs if p.logger == "rootgrep.index")


async def test_a_client_root_moved_out_of_the_operator_root_is_not_served(
    make_server, dirs: Path, tmp_path: Path
) -> None:
    served = dirs  # the operator root
    away = tmp_path / "elsewhere"
    away.mkdir()
    stub = RootsStub([uri(served / "a")])
    async with connect(make_server([served]), "legacy", stub) as c:
        r = await c.call_tool("read_file", {"path": "a.txt"})
        assert r.structured_content["content"] == "hello from a\n"
        os.rename(served / "a", away / "a")  # the pinned directory leaves the operator root
        (away / "a" / "secret.txt").write_text("written outside later\n")
        for tool, args in (("read_file", {"path": "secret.txt"}), ("grep", {"pattern": "later"}),
                           ("list_directory", {})):  # fmt: skip
            res = await c.call_tool(tool, args)
            assert code(res) == "no_roots", tool
            assert "written outside" not in str(res.structured_content) + str(res.content)


@pytest.mark.parametrize("how", ["moved out of the operator root", "removed and re-announced"])
async def test_a_directory_swapped_in_at_a_roots_path_is_never_answered_from_the_old_index(
    make_server, dirs: Path, tmp_path: Path, how: str
) -> None:
    served = dirs
    away = tmp_path / "elsewhere"
    away.mkdir()
    proj = served / "a"
    (proj / "old.py").write_text(f"def gadget():\n    return '{MARKER}'\n")
    stub = RootsStub([uri(proj)])
    server = make_server([served], index=True)  # (the client root shares its index)

    async def ready() -> None:
        with anyio.fail_after(60):
            while (await c.call_tool("list_roots", {})).structured_content["roots"][0]["index"][
                "state"
            ] != "ready":
                await anyio.sleep(0.02)

    async with connect(server, "legacy", stub) as c:
        await ready()
        s = (await c.call_tool("search", {"query": "gadget"})).structured_content
        assert [h["path"] for h in s["results"]] == ["old.py"]
        if how.startswith("removed"):
            stub.uris = []
            await c.send_roots_list_changed()
            await wait_for(lambda: stub.calls == 2)
        os.rename(proj, away / "a")  # the indexed directory goes away (outside every root)
        (away / "a" / "later.py").write_text(f"def gadget():\n    return 'later {MARKER}'\n")
        proj.mkdir()  # and another takes its place
        (proj / "new.py").write_text("def gadget():\n    return 'fresh'\n")
        stub.uris = [uri(proj)]
        await c.send_roots_list_changed()
        await wait_for(lambda: stub.calls == (3 if how.startswith("removed") else 2))
        for _ in range(100):  # during the new directory's build, and after it
            res = await c.call_tool("search", {"query": "gadget"})
            assert MARKER not in everything(res)
            if not res.is_error and [h["path"] for h in res.structured_content["results"]] == [
                "new.py"
            ]:
                break
            await anyio.sleep(0.05)
        else:
            raise AssertionError("the new directory was never searched")
        g = await c.call_tool("grep", {"pattern": "gadget"})
        assert [m["path"] for m in g.structured_content["matches"]] == ["new.py"]
