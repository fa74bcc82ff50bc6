"""A phrase search asked while the root's first build is held back, then after it: during
the build the answer says it is partial (never a final "no results" and never a hit the
files do not hold); once built, the phrase is found only in the file whose text holds it
word after word, not in one holding the same words apart."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp_helpers import MODES, code, connect, text

from rootgrep.index.manager import IndexManager
from rootgrep.roots import pin_root
from rootgrep.server import build_server
from rootgrep.service import Service, Settings

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", MODES)
async def test_a_phrase_search_during_and_after_the_first_build(tmp_path: Path, mode: str) -> None:
    top = tmp_path / "root"
    (top / "src").mkdir(parents=True)
    (top / "src" / "joined.py").write_text("# we decode the gzip stream here\nx = 1\n")
    (top / "src" / "apart.py").write_text("# the stream, once gzip is done, we decode\ny = 2\n")
    (top / "src" / "other.py").write_text("def unrelated():\n    return 3\n")
    root = pin_root(str(top))
    manager = IndexManager(str(tmp_path / "cache"))
    manager._builds.acquire()  # the first build waits for its turn: it stays "building"
    held = True
    try:
        manager.activate(root, 0)
        server = build_server(Service([root], Settings(), indexes=manager))
        async with connect(server, mode) as c:
            r = await c.call_tool("search", {"query": '"decode the gzip stream"'})
            assert code(r) is None, text(r)
            sc = r.structured_content
            assert sc["partial"] is True and "partial" in text(r)
            assert all(h["path"] == "src/joined.py" for h in sc["results"])
            ix = manager.get(root.path)
            assert ix is not None and ix.state == "building"
            manager._builds.release()
            held = False
            with anyio.fail_after(60):  # (a hang guard)
                while ix.state != "ready":
                    await anyio.sleep(0.05)
            r = await c.call_tool("search", {"query": '"decode the gzip stream"'})
            sc = r.structured_content
            assert sc["partial"] is False
            assert [h["path"] for h in sc["results"]] == ["src/joined.py"], text(r)
            r = await c.call_tool("search", {"query": "decode gzip stream"})
            assert {h["path"] for h in r.structured_content["results"]} == {
                "src/joined.py",
                "src/apart.py",
            }
            r = await c.call_tool("search", {"query": 'gzip -"decode the gzip stream"'})
            assert [h["path"] for h in r.structured_content["results"]] == ["src/apart.py"]
    finally:
        if held:
            manager._builds.release()
        manager.close()
        root.close()
