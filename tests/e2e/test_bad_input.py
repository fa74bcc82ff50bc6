"""Bad input gets a clear answer (issue 8, item 10), through the real MCP client in memory:
forged cursors, a burst of roots/list_changed, a root's URI with a trailing slash, a directory
moved into itself."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.types import ListRootsResult, Root
from mcp_helpers import RootsStub, code, connect, text, uri

pytestmark = pytest.mark.anyio


async def test_bad_cursors_through_the_wire_say_invalid_argument(
    make_server, tmp_path: Path
) -> None:
    root = tmp_path / "w"
    root.mkdir()
    for i in range(5):
        (root / f"f{i}.txt").write_text("needle\n")
    raw = json.dumps({"k": "grep", "f": "0" * 16, "t": "x", "p": 3}).encode()
    forged = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    calls = {
        "grep": {"pattern": "needle"},
        "find_files": {"pattern": "*.txt"},
        "list_directory": {},
        "search": {"query": "needle"},
    }
    async with connect(make_server([root], index=True), "legacy") as c:
        for tool, args in calls.items():
            for bad in ("garbage", forged, "é" * 40, "a.b.c", "x" * 20000):
                res = await c.call_tool(tool, {**args, "cursor": bad})
                assert code(res) == "invalid_argument", (tool, bad[:30], text(res))
                assert "without a cursor" in text(res) and "unexpectedly" not in text(res)


class GatedRoots(RootsStub):
    """Answers roots/list only when the gate is open; the answer is the roots as they were
    when the request arrived (so a fetch that started before a change returns the old list)."""

    def __init__(self, uris: list[str]) -> None:
        super().__init__(uris)
        self.gate = anyio.Event()
        self.gate.set()

    async def __call__(self, context: Any) -> ListRootsResult:
        self.calls += 1
        snapshot = list(self.uris)
        await self.gate.wait()
        return ListRootsResult.model_construct(
            roots=[Root.model_construct(uri=u) for u in snapshot]
        )


def _names(result: Any) -> list[str]:
    assert not result.is_error, text(result)
    return [r["name"] for r in result.structured_content["roots"]]


async def test_a_burst_of_list_changed_costs_two_round_trips(make_server, tmp_path: Path) -> None:
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    stub = GatedRoots([uri(tmp_path / "a")])
    with anyio.fail_after(60):
        async with connect(make_server([tmp_path]), "legacy", stub) as c:
            assert _names(await c.call_tool("list_roots", {})) == ["a"]
            before = stub.calls
            stub.gate = anyio.Event()  # the next roots/list stays unanswered for now
            await c.send_roots_list_changed()
            await anyio.wait_all_tasks_blocked()  # its fetch is in flight, holding the old list
            assert stub.calls == before + 1
            stub.uris = [uri(tmp_path / "b")]  # a change after that fetch started
            for _ in range(299):
                await c.send_roots_list_changed()
            await anyio.wait_all_tasks_blocked()  # every notification reached the server
            stub.gate.set()
            # the call waits for a fetch that started after the last notification
            assert _names(await c.call_tool("list_roots", {})) == ["b"]
            assert stub.calls == before + 2, stub.calls - before  # in flight + one queued


async def test_a_roots_own_uri_with_a_trailing_slash_is_the_root(
    make_server, tmp_path: Path
) -> None:
    root = tmp_path / "proj"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "x.txt").write_text("needle\n")
    stub = RootsStub([uri(root)])
    for mode in ("legacy", "auto"):
        async with connect(make_server([tmp_path]), mode, stub) as c:
            for spelling in (uri(root) + "/", str(root) + "/", uri(root) + "/."):
                ls = await c.call_tool("list_directory", {"path": spelling})
                assert not ls.is_error, (mode, spelling, text(ls))
                assert [e["name"] for e in ls.structured_content["entries"]] == ["sub"]
                g = await c.call_tool("grep", {"pattern": "needle", "path": spelling})
                assert [m["path"] for m in g.structured_content["matches"]] == ["sub/x.txt"]
                g = await c.call_tool("grep", {"pattern": "needle", "root": spelling})
                assert not g.is_error, text(g)
                info = await c.call_tool("file_info", {"path": spelling})
                assert info.structured_content["type"] == "dir", text(info)
            rf = await c.call_tool("read_file", {"path": uri(root) + "/"})
            assert code(rf) == "not_a_file", text(rf)
            sibling = await c.call_tool("list_directory", {"path": uri(tmp_path) + "/"})
            assert code(sibling) == "outside_roots"  # the parent stays outside


async def test_moving_a_directory_into_itself_says_so(make_server, tmp_path: Path) -> None:
    root = tmp_path / "w"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.txt").write_text("keep\n")
    (root / "l").symlink_to("a")
    async with connect(make_server([root], allow_write=True), "legacy") as c:
        for src, dst, overwrite in (
            ("a", "a/b/c", False),
            ("a", "a/c", False),
            ("a", "a/b/c", True),
            ("a/", "l/inside", False),  # through a link to itself
            ("a", "a/b", True),
        ):
            res = await c.call_tool(
                "move_path", {"source": src, "destination": dst, "overwrite": overwrite}
            )
            assert code(res) == "invalid_path", (src, dst, text(res))
            assert "into itself" in text(res) and "permission" not in text(res)
        assert (root / "a" / "b" / "f.txt").read_text() == "keep\n"
        ok = await c.call_tool("move_path", {"source": "l", "destination": "a/l2"})
        assert not ok.is_error, text(ok)  # a link is moved itself, never what it names
