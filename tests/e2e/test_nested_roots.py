"""Nested effective roots (issue 8, item 15): a file is reported once, under the innermost
root that holds it, by grep (live and indexed), find_files and search."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import anyio
import pytest
from mcp_helpers import RootsStub, connect, uri

pytestmark = pytest.mark.anyio


def nested_tree(top: Path, depth: int) -> list[Path]:
    """``top/n1/n2/...``: each level holds ``f.py`` with the word ``needle_word``."""
    levels = [top]
    for i in range(1, depth):
        levels.append(levels[-1] / f"n{i}")
    for d in levels:
        d.mkdir(parents=True, exist_ok=True)
        (d / "f.py").write_text(f"def needle_word():\n    return '{d.name}'\n")
    return levels


@pytest.mark.parametrize("index", [False, True])
async def test_a_file_is_reported_once_under_its_innermost_root(
    make_server, tmp_path: Path, index: bool
) -> None:
    levels = nested_tree(tmp_path / "top", 6)
    stub = RootsStub([uri(d) for d in levels])
    server = make_server([], index=index)
    async with connect(server, "legacy", stub) as c:
        roots = (await c.call_tool("list_roots", {})).structured_content["roots"]
        assert [r["name"] for r in roots] == [d.name for d in levels]
        if index:  # the client roots' indexes are built in the background: wait for them
            with anyio.fail_after(60):
                while not all(
                    r["index"]["state"] == "ready"
                    for r in (await c.call_tool("list_roots", {})).structured_content["roots"]
                ):
                    await anyio.sleep(0.05)
        g = (await c.call_tool("grep", {"pattern": "needle_word"})).structured_content
        assert g["index_used"] is index
        where = [(m["root"]["name"], m["path"]) for m in g["matches"]]
        assert where == [(d.name, "f.py") for d in levels]
        f = (await c.call_tool("find_files", {"pattern": "*.py"})).structured_content
        assert [(h["root"]["name"], h["path"]) for h in f["files"]] == where
        if index:
            s = (await c.call_tool("search", {"query": "needle_word"})).structured_content
            found = Counter((h["root"]["name"], h["path"]) for h in s["results"])
            assert sorted(found) == sorted(where) and set(found.values()) == {1}
        # a search limited to one outer root still sees everything below it
        inner = (
            await c.call_tool("grep", {"pattern": "needle_word", "root": levels[0].name})
        ).structured_content
        assert len(inner["matches"]) == len(levels)


async def test_nested_roots_share_one_index(make_server, tmp_path: Path) -> None:
    levels = nested_tree(tmp_path / "top", 12)
    for i, d in enumerate(levels):  # some text of its own at every level
        (d / "notes.md").write_text("".join(f"line {i}-{j} needle_word\n" for j in range(20)))
    stub = RootsStub([uri(d) for d in levels])
    server = make_server([], index=True)
    manager = server.service.indexes
    cache = tmp_path / "cache"
    async with connect(server, "legacy", stub) as c:
        infos = (await c.call_tool("list_roots", {})).structured_content["roots"]
        assert len(infos) == len(levels)
        with anyio.fail_after(60):
            while manager.get(str(levels[0]).encode()) is None or (
                manager.get(str(levels[0]).encode()).state != "ready"
            ):
                await anyio.sleep(0.05)
        # one index: the outermost root's; the nested roots are views of it
        assert [d.name for d in levels if manager.get(str(d).encode())] == [levels[0].name]
        assert len(list(cache.glob("*/manifest.json"))) == 1
        infos = (await c.call_tool("list_roots", {})).structured_content["roots"]
        assert [i["index"]["state"] for i in infos] == ["ready"] * len(levels)
        assert [i["index"]["files"] for i in infos] == [2 * (len(levels) - k) for k in range(12)]
        for k, d in enumerate(levels):  # each nested root answers from the shared index
            g = (
                await c.call_tool("grep", {"pattern": "needle_word", "root": d.name,
                                           "max_results": 1000})
            ).structured_content  # fmt: skip
            assert g["index_used"] is True
            assert len(g["matches"]) == 21 * (len(levels) - k)
            assert g["matches"][0]["path"] == "f.py"
            s = (
                await c.call_tool("search", {"query": "needle_word", "root": d.name,
                                             "max_results": 100})
            ).structured_content  # fmt: skip
            assert len(s["results"]) == 2 * (len(levels) - k)
            assert all((d / h["path"]).is_file() for h in s["results"])
        # a new file deep down shows up in every enclosing root at once (one watcher)
        (levels[-1] / "late.py").write_text("late_needle = 1\n")
        with anyio.fail_after(10):  # (the watcher hears of it a few milliseconds later)
            while not (
                g := (await c.call_tool("grep", {"pattern": "late_needle"})).structured_content
            )["matches"]:
                await anyio.sleep(0.01)
        assert [(m["root"]["name"], m["path"]) for m in g["matches"]] == [
            (levels[-1].name, "late.py")
        ]
        g = (
            await c.call_tool("grep", {"pattern": "late_needle", "root": levels[2].name})
        ).structured_content
        assert [m["path"] for m in g["matches"]] == [
            "/".join(d.name for d in levels[3:]) + "/late.py"
        ]


async def test_a_nested_root_the_outer_index_cannot_hold_exactly_is_answered_exactly(
    make_server, tmp_path: Path
) -> None:
    top = tmp_path / "top"
    inner = top / "mid" / "inner"
    hidden = top / ".hidden"
    for d in (inner, hidden):
        d.mkdir(parents=True)
        (d / "a.txt").write_text("needle_word here\n")
        (d / "gen.txt").write_text("needle_word generated\n")
    stub = RootsStub([uri(top), uri(inner), uri(hidden)])
    server = make_server([], index=True)
    manager = server.service.indexes
    async with connect(server, "legacy", stub) as c:

        async def grep_in(name: str) -> tuple[list[str], bool]:
            g = await c.call_tool("grep", {"pattern": "needle_word", "root": name})
            return [m["path"] for m in g.structured_content["matches"]], g.structured_content[
                "index_used"
            ]

        with anyio.fail_after(60):
            while not all(
                r["index"]["state"] == "ready"
                for r in (await c.call_tool("list_roots", {})).structured_content["roots"]
            ):
                await anyio.sleep(0.05)
        # the hidden root is not in the outer index: it has its own
        assert manager.get(str(hidden).encode()) is not None
        assert manager.get(str(inner).encode()) is None  # shared with the outer one
        assert await grep_in("inner") == (["a.txt", "gen.txt"], True)
        assert await grep_in(".hidden") == (["a.txt", "gen.txt"], True)
        # an ignore file between the two: the outer walk now leaves gen.txt out, a walk of
        # the nested root does not; the nested root is answered exactly (live, until the
        # index of its own that it gets then is built)
        (top / "mid" / ".gitignore").write_text("gen.txt\n")
        with anyio.fail_after(10):  # (the outer root's watcher hears of the edit soon after)
            while await grep_in("top") != (["mid/inner/a.txt"], True):  # (folded in)
                await anyio.sleep(0.01)
        assert (await grep_in("inner"))[0] == ["a.txt", "gen.txt"]
        with anyio.fail_after(60):
            while await grep_in("inner") != (["a.txt", "gen.txt"], True):
                await anyio.sleep(0.05)
        assert manager.get(str(inner).encode()) is not None  # (its own index now)
