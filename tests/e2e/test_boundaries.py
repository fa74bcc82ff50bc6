"""The ten boundary cases of the server issue, each through every tool that takes a path,
through the real MCP client in both eras. A secret's marker must never come back."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_helpers import MODES, RootsStub, code, connect, everything, uri

from support import MARKER

pytestmark = pytest.mark.anyio


# tool -> how to pass a path to it
PATH_TOOLS: dict[str, Callable[[str], dict[str, Any]]] = {
    "grep": lambda p: {"pattern": "x", "path": p},
    "find_files": lambda p: {"pattern": "*", "path": p},
    "read_file": lambda p: {"path": p},
    "list_directory": lambda p: {"path": p},
    "directory_tree": lambda p: {"path": p},
    "file_info": lambda p: {"path": p},
    "write_file": lambda p: {"path": p, "content": "new"},
    "edit_file": lambda p: {"path": p, "edits": [{"old_text": "x", "new_text": "y"}]},
    "create_directory": lambda p: {"path": p},
    "move_path": lambda p: {"source": p, "destination": "moved.txt"},
    "copy_path": lambda p: {"source": p, "destination": "copied.txt"},
    "delete_path": lambda p: {"path": p},
}
FILE_OK = {"grep", "find_files", "read_file", "file_info", "write_file", "edit_file",
           "move_path", "copy_path", "delete_path"}  # fmt: skip


@pytest.fixture
def world(world: Path) -> Path:
    """The shared world (``root``, ``root-evil``, ``outside/secret.txt``) with lines every tool
    can act on, and links from inside the root to the secret."""
    (world / "root" / "a.txt").write_text("x marks\n")
    (world / "root" / "sub" / "b.txt").write_text("x too\n")
    # the secrets hold an "x" too, so a leak would show up as a match of the tools' pattern
    (world / "outside" / "secret.txt").write_text(f"x {MARKER}\n")
    (world / "root-evil" / "x.txt").write_text(f"x {MARKER}\n")
    os.symlink(world / "outside" / "secret.txt", world / "root" / "leak.txt")
    os.symlink(world / "outside", world / "root" / "leakdir")
    return world


async def call_all(c: Any, path: str) -> dict[str, Any]:
    results = {}
    for tool, args in PATH_TOOLS.items():
        results[tool] = await c.call_tool(tool, args(path))
    return results


def no_marker(results: dict[str, Any]) -> None:
    for tool, r in results.items():
        assert MARKER not in everything(r), tool


@pytest.mark.parametrize("mode", MODES)
async def test_1_a_file_directly_beneath_a_root(make_server, world: Path, mode: str) -> None:
    for spelling in ("a.txt", str(world / "root" / "a.txt"), uri(world / "root" / "a.txt")):
        (world / "root" / "a.txt").write_text("x marks\n")
        async with connect(make_server([world / "root"], allow_write=True), mode) as c:
            for tool in ("read_file", "file_info", "grep", "find_files", "edit_file"):
                r = await c.call_tool(tool, PATH_TOOLS[tool](spelling))
                assert not r.is_error, (tool, spelling, everything(r))


@pytest.mark.parametrize("mode", MODES)
async def test_2_sibling_with_a_similar_name(make_server, world: Path, mode: str) -> None:
    async with connect(make_server([world / "root"], allow_write=True), mode) as c:
        for spelling in (str(world / "root-evil" / "x.txt"), uri(world / "root-evil" / "x.txt")):
            results = await call_all(c, spelling)
            no_marker(results)
            assert {t: code(r) for t, r in results.items()} == dict.fromkeys(
                PATH_TOOLS, "outside_roots"
            )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "spelling",
    ["../outside/secret.txt", "sub/../../outside/secret.txt", "%s/%%2e%%2e/outside/secret.txt",
     "%s/..%%2foutside%%2fsecret.txt"],
)  # fmt: skip
async def test_3_dotdot_traversal(make_server, world: Path, mode: str, spelling: str) -> None:
    if "%s" in spelling:
        spelling = spelling % uri(world / "root")
    async with connect(make_server([world / "root"], allow_write=True), mode) as c:
        results = await call_all(c, spelling)
    no_marker(results)
    assert {t: code(r) for t, r in results.items()} == dict.fromkeys(PATH_TOOLS, "outside_roots")
    assert (world / "outside" / "secret.txt").read_text() == f"x {MARKER}\n"


@pytest.mark.parametrize("mode", MODES)
async def test_4_symlink_from_inside_to_outside(make_server, world: Path, mode: str) -> None:
    async with connect(make_server([world / "root"], allow_write=True), mode) as c:
        results = await call_all(c, "leakdir/secret.txt")
        no_marker(results)
        assert {t: code(r) for t, r in results.items()} == dict.fromkeys(
            PATH_TOOLS, "outside_roots"
        )
        for tool in ("read_file", "grep", "edit_file", "copy_path"):
            r = await c.call_tool(tool, PATH_TOOLS[tool]("leak.txt"))
            assert code(r) == "outside_roots", tool
            assert MARKER not in everything(r)
    assert (world / "outside" / "secret.txt").read_text() == f"x {MARKER}\n"


async def test_5_root_removed_after_initialization(make_server, world: Path) -> None:
    stub = RootsStub([uri(world / "root"), uri(world / "root-evil")])
    async with connect(make_server([world], allow_write=True), "legacy", stub) as c:
        r = await c.call_tool("read_file", {"path": str(world / "root-evil" / "x.txt")})
        assert not r.is_error  # served while it is a root
        stub.uris = [uri(world / "root")]
        await c.send_roots_list_changed()
        with anyio.fail_after(10):
            while stub.calls < 2:
                await anyio.sleep(0.02)
        for spelling in (str(world / "root-evil" / "x.txt"), uri(world / "root-evil" / "x.txt")):
            results = await call_all(c, spelling)
            no_marker(results)
            assert {t: code(r) for t, r in results.items()} == dict.fromkeys(
                PATH_TOOLS, "outside_roots"
            )
        named = await c.call_tool("read_file", {"path": "a.txt", "root": "root-evil"})
        assert code(named) == "unknown_root"


@pytest.mark.parametrize("operator", [False, True])
async def test_6_empty_roots_response(make_server, world: Path, operator: bool) -> None:
    stub = RootsStub([])
    server = make_server([world / "root"] if operator else [], allow_write=True)
    async with connect(server, "legacy", stub) as c:
        results = await call_all(c, "a.txt")
        results["list_roots"] = await c.call_tool("list_roots", {})
    assert results.pop("list_roots").structured_content["roots"] == []
    assert {t: code(r) for t, r in results.items()} == dict.fromkeys(PATH_TOOLS, "no_roots")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("spelling", ["http://localhost/proj/a.txt", "smb://host/share/a.txt",
                                      "file://evil/share/a.txt", "ftp://x/y"])  # fmt: skip
async def test_7_unsupported_uri_scheme(make_server, world: Path, mode: str, spelling: str) -> None:
    async with connect(make_server([world / "root"], allow_write=True), mode) as c:
        results = await call_all(c, spelling)
    assert {t: code(r) for t, r in results.items()} == dict.fromkeys(PATH_TOOLS, "invalid_uri")


@pytest.mark.parametrize("mode", MODES)
async def test_8_recursive_operations_skip_escaping_entries(
    make_server, world: Path, mode: str
) -> None:
    (world / "root" / "sub" / "fifo").parent.mkdir(exist_ok=True)
    os.mkfifo(world / "root" / "sub" / "fifo")
    os.symlink(world / "outside", world / "root" / "sub" / "esc")
    async with connect(make_server([world / "root"], allow_write=True), mode) as c:
        for tool, args in (
            ("grep", {"pattern": MARKER, "hidden": True, "no_ignore": True}),
            ("grep", {"pattern": "x", "path": "sub"}),
            ("find_files", {"pattern": "*", "hidden": True, "no_ignore": True}),
            ("directory_tree", {"max_depth": 5}),
            ("list_directory", {"path": "sub"}),
        ):
            r = await c.call_tool(tool, args)
            assert not r.is_error, tool
            assert MARKER not in everything(r)
            assert "secret.txt" not in everything(r)
        g = await c.call_tool("grep", {"pattern": "x", "hidden": True, "no_ignore": True})
        assert {m["path"] for m in g.structured_content["matches"]} == {"a.txt", "sub/b.txt"}
        cp = await c.call_tool("copy_path", {"source": "sub", "destination": "copy"})
        assert not cp.is_error
        skipped = {s["path"]: s["reason"] for s in cp.structured_content["skipped"]}
        assert set(skipped) == {"sub/esc", "sub/fifo"}
        assert sorted(os.listdir(world / "root" / "copy")) == ["b.txt"]
    assert MARKER not in "".join(
        p.read_text() for p in (world / "root").rglob("*") if p.is_file() and not p.is_symlink()
    )


@pytest.mark.parametrize("mode", MODES)
async def test_9_write_while_read_only(make_server, world: Path, mode: str) -> None:
    before = sorted(p.name for p in (world / "root").iterdir())
    async with connect(make_server([world / "root"]), mode) as c:
        for tool in ("write_file", "edit_file", "create_directory", "move_path", "copy_path",
                     "delete_path"):  # fmt: skip
            r = await c.call_tool(tool, PATH_TOOLS[tool]("a.txt"))
            assert code(r) == "read_only", tool
    assert sorted(p.name for p in (world / "root").iterdir()) == before
    assert (world / "root" / "a.txt").read_text() == "x marks\n"


@pytest.mark.parametrize("mode", MODES)
async def test_10_case_variant_path(make_server, world: Path, mode: str) -> None:
    upper = str(world / "ROOT" / "a.txt")
    async with connect(make_server([world / "root"], allow_write=True), mode) as c:
        results = await call_all(c, upper)
        assert {t: code(r) for t, r in results.items()} == dict.fromkeys(
            PATH_TOOLS, "outside_roots"
        )
        for tool in ("read_file", "file_info", "edit_file", "delete_path"):
            r = await c.call_tool(tool, PATH_TOOLS[tool]("A.TXT"))
            assert code(r) == "not_found", tool  # a case variant is another (absent) name
    assert (world / "root" / "a.txt").read_text() == "x marks\n"
