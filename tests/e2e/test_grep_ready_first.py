"""A first build's trigrams are committed before its words and symbols: while the second
commit is held back, a real client's ``grep`` is answered from the index and exactly (a file
written meanwhile included), ``find_symbol`` finds the definitions of the files whose symbols
are not committed yet (parsed live), ``search`` says it is partial, and ``list_roots`` still
says "building", in its grep phase; once the build is done, all of it comes from the index."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_helpers import MODES, code, connect, text

from rootgrep.index.manager import IndexManager
from rootgrep.index.store import RootIndex
from rootgrep.roots import pin_root
from rootgrep.server import build_server
from rootgrep.service import Service, Settings
from support import shapes_tree

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", MODES)
async def test_grep_answers_from_the_index_before_the_symbols_are_committed(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = shapes_tree(
        tmp_path / "root",
        "class Shape:\n    def area(self):\n        pass\n",
        "from shapes import Shape\nShape().area()\n",
        40,
    )
    held, entered = threading.Event(), threading.Event()
    real = RootIndex._complete_locked

    def slow_complete(self: RootIndex, *a: Any, **k: Any) -> None:
        entered.set()
        held.wait(60)
        real(self, *a, **k)

    monkeypatch.setattr(RootIndex, "_complete_locked", slow_complete)
    root = pin_root(str(top))
    manager = IndexManager(str(tmp_path / "cache"))
    try:
        manager.activate(root, 0)
        server = build_server(Service([root], Settings(), indexes=manager))
        async with connect(server, mode) as c:
            with anyio.fail_after(60):  # (a hang guard)
                while not entered.is_set():
                    await anyio.sleep(0.02)
            ix = manager.get(root.path)
            assert ix is not None and ix.index is not None
            assert ix.state == "building" and ix.grep_first and ix.index.bare_paths()
            (top / "src" / "late.py").write_text("class Late:\n    Shape = None\n")
            r = await c.call_tool("grep", {"pattern": "Shape"})
            sc = r.structured_content
            assert code(r) is None and sc["index_used"] is True, text(r)
            assert sorted({m["path"] for m in sc["matches"]}) == [
                "src/late.py", "src/shapes.py", "src/use.py"
            ]  # fmt: skip
            r = await c.call_tool("find_symbol", {"name": "Shape"})
            assert code(r) is None, text(r)
            assert [(s["path"], s["kind"]) for s in r.structured_content["symbols"]] == [
                ("src/shapes.py", "class")
            ]
            r = await c.call_tool("find_symbol", {"name": "Late"})
            assert [s["path"] for s in r.structured_content["symbols"]] == ["src/late.py"]
            r = await c.call_tool("search", {"query": "Shape"})
            assert code(r) is None and r.structured_content["partial"] is True
            assert "partial" in text(r)
            r = await c.call_tool("list_roots", {})
            assert [x["index"]["state"] for x in r.structured_content["roots"]] == ["building"]
            # (and which phase: grep answers from it, its words and symbols are to come)
            assert [x["index"]["phase"] for x in r.structured_content["roots"]] == ["grep"]
            assert "grep answers from it, its words and symbols still being added" in text(r)
            held.set()
            with anyio.fail_after(60):
                while ix.state != "ready":
                    await anyio.sleep(0.02)
            assert not ix.grep_first and ix.index.complete
            r = await c.call_tool("list_roots", {})
            assert [x["index"]["phase"] for x in r.structured_content["roots"]] == ["complete"]
            assert "still being added" not in text(r)
            r = await c.call_tool("search", {"query": "Shape"})
            sc = r.structured_content
            assert sc["partial"] is False and sc["results"][0]["path"] == "src/shapes.py", text(r)
            r = await c.call_tool("find_symbol", {"name": "filler7"})
            assert [s["path"] for s in r.structured_content["symbols"]] == ["src/filler7.py"]
    finally:
        held.set()
        manager.close()
        root.close()
