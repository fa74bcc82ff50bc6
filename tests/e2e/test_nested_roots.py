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
            manager = server.service.indexes
            with anyio.fail_after(60):
                while not all(
                    (ix := manager.get(str(d).encode())) is not None and ix.state == "ready"
                    for d in levels
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
