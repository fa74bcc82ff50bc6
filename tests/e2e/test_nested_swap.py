"""Over MCP (issue 8, items 8 and 15): a nested root's directory swapped while two sessions
hold the two directories at its path. Each session's calls activate its roots; one's is a view
of the outer root's index, the other's an index of its own. Alternating calls must not leave
one stopped-but-running index (a thread, watches, fds) behind per call. Waits are hang
guards only."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import anyio
import pytest
from mcp_helpers import RootsStub, connect, uri

pytestmark = pytest.mark.anyio
MARK = "needle_swap_marker"


def index_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "rootgrep-index")


async def test_alternating_sessions_on_a_swapped_nested_root_leak_no_index(
    make_server, tmp_path: Path
) -> None:
    """The operator serves ``top`` and ``top/sub`` (directory A, indexed on its own: an
    ignore file in ``top`` kept it from sharing ``top``'s index, and is then removed). A is then moved away and B made at its path. A client without roots
    capability is served the operator roots (A where it is now); a client announcing
    ``top/sub`` gets B, a view of ``top``'s index. Their calls alternate."""
    top = tmp_path / "top"
    sub = top / "sub"
    sub.mkdir(parents=True)
    for i in range(3):
        (sub / f"f{i}.txt").write_text(f"{MARK} {i}\n")
    (top / ".ignore").write_text("*.nothing\n")
    server = make_server([top, sub], index=True, roots_ttl=3600.0)
    manager = server.service.indexes

    async def grep(c) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
        g = await c.call_tool("grep", {"pattern": MARK})
        assert not g.is_error, g
        return sorted((m["root"]["name"], m["path"]) for m in g.structured_content["matches"])

    async with connect(server, "legacy") as operator_only:
        with anyio.fail_after(60):
            while not all(
                r["index"]["state"] == "ready"
                for r in (await operator_only.call_tool("list_roots", {})).structured_content[
                    "roots"
                ]
            ):
                await anyio.sleep(0.05)
        assert manager.get(str(sub).encode()) is not None  # A: an index of its own
        (top / ".ignore").unlink()
        os.rename(sub, tmp_path / "moved")  # A moves away (still an operator root)
        sub.mkdir()
        (sub / "b.txt").write_text(f"{MARK} b\n")
        outer = manager.get(str(top).encode())
        with anyio.fail_after(60):  # (top's index folds the swap in)
            while outer.index is None or b"sub/b.txt" not in outer.index.entries:
                await anyio.sleep(0.05)
        async with connect(server, "legacy", RootsStub([uri(sub)])) as client:
            for _ in range(6):  # the two clients' calls alternate
                assert await grep(client) == [("sub", "b.txt")]  # B: a view of top's index
                assert await grep(operator_only) == [("sub", f"f{i}.txt") for i in range(3)] + [
                    ("top", "sub/b.txt")
                ]
            # live: top's index and A's current one; every other one of A's let go
            with anyio.fail_after(60):
                while index_threads() > 2:
                    await anyio.sleep(0.05)
            assert manager.get(str(top).encode()) is not None
