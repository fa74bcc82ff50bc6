"""Queries during builds are a normal condition: grep stays exact while a first build, a
``reindex`` and watcher folds run and other tasks keep calling ``grep``, ``search``,
``list_roots`` and ``reindex`` (issue 8, item 1)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_helpers import connect

from rootgrep.index.state import STATE_FILE, read_state
from support import RG

pytestmark = pytest.mark.anyio
PATTERN = "NotImplementedError"


def rg_lines(root: Path, pattern: str) -> set[tuple[str, int]]:
    out = subprocess.run(
        [RG, "-n", "--no-heading", "-F", pattern, "."],
        cwd=root, capture_output=True, check=False,
    ).stdout.decode()  # fmt: skip
    found = set()
    for line in out.splitlines():
        path, n, _ = line.split(":", 2)
        found.add((path.removeprefix("./"), int(n)))
    return found


async def grep_all(c: Any, pattern: str) -> tuple[set[tuple[str, int]], bool]:
    """Every (path, line) of a grep, following its cursor; and whether the index answered."""
    found: set[tuple[str, int]] = set()
    cursor = None
    used = False
    while True:
        args: dict[str, Any] = {"pattern": pattern, "max_results": 1000}
        if cursor:
            args["cursor"] = cursor
        r = await c.call_tool("grep", args)
        assert not r.is_error, r.content
        sc = r.structured_content
        used = used or sc["index_used"]
        found |= {(m["path"], m["line"]) for m in sc["matches"]}
        cursor = sc["next_cursor"]
        if cursor is None:
            return found, used


def churn(root: Path, stop: threading.Event) -> None:
    """Files created, edited and deleted without pause (none holds the pattern): the watcher
    keeps marking paths and the index keeps folding them in."""
    d = root / "churn"
    d.mkdir()
    i = 0
    while not stop.is_set():
        p = d / f"f{i % 40}.txt"
        if i % 7 == 3 and p.exists():
            p.unlink()
        else:
            p.write_text(f"churn {i}\n" * (1 + i % 5))
        i += 1
        stop.wait(0.002)


def assert_one_path_per_fid(cache: Path) -> None:
    for state in cache.glob(f"*/{STATE_FILE}"):
        got = read_state(str(state))
        assert got is not None
        fids = [e.fid for e in got[0].values() if e.fid]
        assert len(fids) == len(set(fids)), "two files share one file id"


@pytest.mark.parametrize("run", range(2))
async def test_grep_stays_exact_while_builds_reindexes_and_folds_run(
    make_server, stdlib_copy: Path, tmp_path: Path, run: int
) -> None:
    root = tmp_path / "lib"
    # (the standard library without its own tests, 11 of its 28 MB: each build still runs
    # for seconds under the calls, and the runs cost make test a third as much)
    shutil.copytree(stdlib_copy, root, ignore=shutil.ignore_patterns("test", "tests"))
    expected = rg_lines(root, PATTERN)
    assert len(expected) > 100
    server = make_server([root], index=True)  # the first build starts now, in the background
    stop = threading.Event()
    writer = threading.Thread(target=churn, args=(root, stop), daemon=True)
    wrong: list[str] = []
    answered_by_index = 0
    reindexed = 0

    async with connect(server, "legacy") as c:

        async def reindexer() -> None:
            nonlocal reindexed
            for _ in range(3):  # the first arrives while the first build is running
                r = await c.call_tool("reindex", {})
                assert not r.is_error, r.content
                reindexed += 1
                await anyio.sleep(0.05)

        async def grepper() -> None:
            nonlocal answered_by_index
            while reindexed < 3 or answered_by_index < 4:
                found, used = await grep_all(c, PATTERN)
                answered_by_index += used
                if found != expected:
                    wrong.append(
                        f"index_used={used}: {len(found)} lines of {len(expected)}; "
                        f"missing {sorted(expected - found)[:3]}, extra {sorted(found - expected)[:3]}"
                    )

        async def others() -> None:
            while reindexed < 3:
                for tool, args in (("list_roots", {}), ("search", {"query": PATTERN})):
                    r = await c.call_tool(tool, args)
                    assert not r.is_error, r.content
                await anyio.sleep(0)

        writer.start()
        try:
            with anyio.fail_after(240):  # a hang guard, not a threshold
                async with anyio.create_task_group() as tg:
                    tg.start_soon(reindexer)
                    tg.start_soon(grepper)
                    tg.start_soon(grepper)
                    tg.start_soon(others)
        finally:
            stop.set()
            writer.join()
        assert not wrong, wrong[:5]
        assert answered_by_index >= 4  # the index really answered, not only live scans
        state = server.service.indexes.get(os.fsencode(root.resolve()))
        assert state is not None and state.role == "writer"
    assert_one_path_per_fid(tmp_path / "cache")
