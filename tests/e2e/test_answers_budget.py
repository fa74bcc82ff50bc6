"""SPEC §8 budgets through the real MCP client: every tool's text stays under
--max-answer-chars (plus at most one item), says what was left out and how to continue, and
following the cursors gives exactly the items of the unbudgeted answer; the largest answers
with default arguments; no_roots; search during a first build; build log messages once."""

from __future__ import annotations

import json
import random
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_helpers import MODES, RootsStub, code, connect, text, uri

pytestmark = pytest.mark.anyio

DEFAULT = 20_000
HANG_GUARD = 120


def big_tree(tmp_path: Path, files: int = 3_000, name: str = "big") -> Path:
    """files text files in nested directories, with long lines and many matches."""
    root = tmp_path / name
    rnd = random.Random(7)
    for i in range(files):
        d = root / f"pkg{i % 30:02}" / f"mod{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        lines = []
        for j in range(rnd.randint(3, 30)):
            width = rnd.choice((10, 60, 250, 1_500))
            lines.append(f"needle {i}.{j} " + "w" * width)
        (d / f"file_{i:05}_with_a_longer_name.py").write_text("\n".join(lines) + "\n")
    return root


def items_of(tool: str, s: dict[str, Any]) -> list[Any]:
    if tool == "grep" and s.get("output_mode", "content") != "content":
        return s["files"]
    key = {"grep": "matches", "find_files": "files", "search": "results",
           "list_directory": "entries"}[tool]  # fmt: skip
    return s[key]


def shown_count(tool: str, t: str) -> int:
    """How many items a tool's text shows."""
    lines = [x for x in t.splitlines() if x and not x.startswith("(")]
    if tool == "grep":
        return sum(bool(re.match(r"^\d+:", x)) for x in lines)
    if tool == "search":
        return sum(not x.startswith(" ") for x in lines)
    if tool == "list_directory":
        return len(lines) - 1  # (its heading: the directory's path)
    return len(lines)


def largest_item(items: list[Any]) -> int:
    """A bound on the text of the largest item (an answer may pass its budget by one)."""
    return max((len(json.dumps(x, ensure_ascii=False)) for x in items), default=0)


async def follow(c: Any, tool: str, args: dict[str, Any], budget: int | None) -> list[Any]:
    """Every item of a listing, following its cursors; with a budget, checks each answer:
    under the budget (plus one item), says what was left out, structured = shown."""
    got, cursor, pages = [], None, 0
    while True:
        r = await c.call_tool(tool, {**args, **({"cursor": cursor} if cursor else {})})
        assert not r.is_error, text(r)
        s, t = r.structured_content, text(r)
        items = items_of(tool, s)
        as_shown = "find_files" if items is s.get("files") else tool  # (one line per item)
        assert shown_count(as_shown, t) == len(items), (tool, t[-300:])
        if budget is not None:
            if len(items) > 1:
                assert len(t) <= budget, (tool, len(t))
            else:
                assert len(t) <= budget + largest_item(items), (tool, len(t))
        if s.get("next_cursor"):
            assert f"cursor={s['next_cursor']}" in t, t[-300:]
        got += items
        pages += 1
        cursor = s.get("next_cursor")
        if cursor is None:
            return got
        assert pages < 10_000


# Each page is computed whole (up to max_results items) before the budget cuts it, so the
# page size sets what paging costs, not what it checks: a page of 100 grep matches or 10
# search results is cut by these budgets after a few items as one of 1,000 or 100 is
# (``first`` below shows it), and the cut pages are followed at that size.
BUDGETED = {
    "grep": {"pattern": "needle", "max_results": 30},
    "find_files": {"pattern": "*.py", "max_results": 1000},
    "list_directory": {"path": "flat"},
}


async def test_small_budget_pages_add_up_to_the_whole(make_server, tmp_path: Path) -> None:
    root = big_tree(tmp_path, files=150)  # (about 2,500 matching lines)
    (root / "flat").mkdir()
    for i in range(300):
        (root / "flat" / f"entry_{i:04}_{'n' * 40}.txt").write_text("")
    budget = 3_000
    full_server = make_server([root])
    small_server = make_server([root], max_answer_chars=budget)
    for tool, args in BUDGETED.items():
        async with connect(full_server, "legacy") as c:
            whole = await follow(c, tool, {**args, "max_results": 100}
                                 if tool != "list_directory" else args, None)  # fmt: skip
        async with connect(small_server, "legacy") as c:
            first = await c.call_tool(tool, args)
            t = text(first)
            assert "left out" in t and "cursor=" in t, (tool, t[-300:])
            cut = await follow(c, tool, args, budget)
        assert cut == whole, tool
        assert len(whole) > 20, tool


async def test_small_budget_search_and_read(make_server, tmp_path: Path) -> None:
    root = big_tree(tmp_path, files=150)
    budget = 2_500
    server = make_server([root], index=True, max_answer_chars=budget)
    await _ready(server, root)
    async with connect(server, "legacy") as c:
        first = await c.call_tool("search", {"query": "needle", "max_results": 100})
        assert "left out" in text(first) and "cursor=" in text(first), text(first)[-300:]
        cut = await follow(c, "search", {"query": "needle", "max_results": 10}, budget)
    full = make_server([root], index=True)
    await _ready(full, root)
    async with connect(full, "legacy") as c:
        whole = await follow(c, "search", {"query": "needle", "max_results": 100}, None)
    assert [h["uri"] for h in cut] == [h["uri"] for h in whole] and len(whole) == 150
    # read_file, directory_tree, list_roots, file_info under the small budget
    async with connect(server, "legacy") as c:
        one = "pkg00/mod0/file_00000_with_a_longer_name.py"
        r = await c.call_tool("read_file", {"path": one})
        assert len(text(r)) <= budget + 1_600 and "start_line=" in text(r)
        tree = await c.call_tool("directory_tree", {})
        assert len(text(tree)) <= budget and tree.structured_content["truncated"] is True
        for tool, args in (("list_roots", {}), ("file_info", {"path": one})):
            assert len(text(await c.call_tool(tool, args))) <= budget


async def _ready(server: Any, *roots: Path) -> None:
    with anyio.fail_after(HANG_GUARD):
        for r in roots:
            while (ix := server.service.indexes.get(str(r).encode())) is None or (
                ix.state != "ready"
            ):
                await anyio.sleep(0.02)


async def test_largest_default_answers(make_server, tmp_path: Path) -> None:
    root = big_tree(tmp_path, files=1_500)  # (every listing and grep still over the budget)
    big_file = root / "huge.txt"
    big_file.write_text("".join(f"needle line {i} " + "y" * (i % 3_000) + "\n"
                                for i in range(4_000)))  # fmt: skip
    server = make_server([root], index=True)
    await _ready(server, root)
    calls = {
        "grep": {"pattern": "needle"},
        "grep files": {"pattern": "needle", "output_mode": "files_with_matches"},
        "grep count": {"pattern": "needle", "output_mode": "count"},
        "grep context": {"pattern": "needle", "context": 10},
        "search": {"query": "needle"},
        "find_files": {"pattern": "*"},
        "read_file": {"path": "huge.txt"},
        "list_directory": {"path": "pkg00/mod0"},
        "directory_tree": {},
        "list_roots": {},
        "file_info": {"path": "huge.txt"},
    }
    sizes: dict[str, int] = {}
    async with connect(server, "legacy") as c:
        for name, args in calls.items():
            r = await c.call_tool(name.split()[0], args)
            assert not r.is_error, text(r)
            t = text(r)
            sizes[name] = len(t)
            if name == "directory_tree":
                assert r.structured_content["truncated"] is True
                shown = [x for x in t.splitlines() if not x.startswith("(")]
                assert len(shown) == nodes(r.structured_content["tree"]), "tree: text = items"
            # at most one item over the budget (every item is bounded: lines are cut)
            assert len(t) <= DEFAULT + 2_500, (name, len(t))
            if name.startswith("grep") or name in ("find_files", "list_directory", "search"):
                tool = name.split()[0]
                if shown_count(tool, t) > 1:
                    assert len(t) <= DEFAULT, (name, len(t))
    print("largest default answers (chars of text):", sizes, file=sys.stderr)
    print(f"largest: {max(sizes.items(), key=lambda kv: kv[1])}", file=sys.stderr)


def nodes(tree: dict[str, Any]) -> int:
    return 1 + sum(nodes(ch) for ch in tree.get("children") or [])


async def test_200_match_grep_on_the_stdlib(make_server, tmp_path: Path) -> None:
    lib = Path(shutil.__file__).parent
    root = tmp_path / "stdlib"
    root.mkdir()
    for name in ("http", "json", "email", "logging"):
        shutil.copytree(lib / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    async with connect(make_server([root]), "legacy") as c:
        r = await c.call_tool("grep", {"pattern": "def "})
        t = text(r)
        structured = len(json.dumps(r.structured_content))
        n = len(r.structured_content["matches"])
    async with connect(make_server([lib]), "legacy") as c:  # (read only: the stdlib itself)
        tree = await c.call_tool("directory_tree", {})
    assert tree.structured_content["truncated"] is True
    shown = [x for x in text(tree).splitlines() if not x.startswith("(")]
    assert len(shown) == nodes(tree.structured_content["tree"]) <= 1 + 500  # (and the dir)
    print(f"200-match grep: {n} matches, {len(t)} chars of text, {structured} of structured "
          f"content; default directory_tree: {len(text(tree))} chars", file=sys.stderr)  # fmt: skip
    assert len(t) <= DEFAULT and n == shown_count("grep", t)
    assert len(text(tree)) <= DEFAULT


# ---- 7. no_roots -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_no_roots_names_both_sides(make_server, tmp_path: Path, mode: str) -> None:
    served, away = tmp_path / "served", tmp_path / "away"
    served.mkdir()
    away.mkdir()
    stub = RootsStub([uri(away)])
    async with connect(make_server([served]), mode, stub) as c:
        for tool, args in (("grep", {"pattern": "x"}), ("read_file", {"path": "a"})):
            r = await c.call_tool(tool, args)
            assert code(r) == "no_roots", text(r)
            assert uri(away) in text(r) and str(served) in text(r), text(r)


# ---- 8. search during a first build ----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_search_while_building_is_never_a_final_empty_answer(
    make_server, tmp_path: Path, mode: str
) -> None:
    root = big_tree(tmp_path, files=3_000)
    server = make_server([root], index=True)
    async with connect(server, mode) as c:
        r = await c.call_tool("search", {"query": "needle"})
        s, t = r.structured_content, text(r)
        assert not r.is_error, t
        if s["partial"]:
            assert "grep" in t, t
        else:
            assert s["results"], t  # a final answer: needle is in every file
        assert s["results"] or "grep" in t, t
    print(f"search during the build: partial={s['partial']}, {len(s['results'])} results",
          file=sys.stderr)  # fmt: skip


# ---- 9. build log notifications, once each ---------------------------------------------------


@pytest.mark.parametrize("source", ["client", "operator"])
@pytest.mark.parametrize("mode", MODES)
async def test_build_messages_heard_once(
    make_server, tmp_path: Path, mode: str, source: str
) -> None:
    root = big_tree(tmp_path, files=700, name="c")
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params)

    stub = RootsStub([uri(root)]) if source == "client" else None
    server = make_server([] if source == "client" else [root], index=True)
    async with connect(server, mode, stub, logging_callback=on_log) as c:
        for tool, args in (("list_roots", {}), ("grep", {"pattern": "needle 3.1 "}),
                           ("find_files", {"pattern": "*_00001_*"}), ("list_roots", {}),
                           ("search", {"query": "needle"}), ("list_roots", {})):  # fmt: skip
            assert not (await c.call_tool(tool, args)).is_error
        with anyio.fail_after(HANG_GUARD):
            while True:
                r = await c.call_tool("list_roots", {})
                if r.structured_content["roots"][0]["index"]["state"] == "ready":
                    break
                await anyio.sleep(0.02)
            # (logging is a session's: the 2026-07-28 era has none, and hears nothing)
            while mode == "legacy" and logs and not any("ready" in str(p.data) for p in logs):
                await anyio.sleep(0.02)
        for _ in range(5):  # (a later duplicate would have arrived by now: calls are in order)
            await c.call_tool("list_roots", {})
    texts = [str(p.data) for p in logs if p.logger == "rootgrep.index"]
    ready = [t for t in texts if "ready" in t]
    print(f"{source}/{mode}: {len(texts)} build messages", file=sys.stderr)
    # (an operator root's build may end before the first call: then nothing is heard)
    assert len(ready) == (1 if mode == "legacy" and texts else 0), texts
    assert len(texts) == len(set(texts)), texts


# ---- a long path does not push read_file over its budget -------------------------------------


@pytest.mark.parametrize("several", [False, True])
async def test_read_file_budget_counts_its_header(
    make_server, tmp_path: Path, several: bool
) -> None:
    root = tmp_path / "proj"
    deep = root.joinpath(*[f"{i:02}" + "d" * 197 for i in range(15)])  # a 3,000-char path
    deep.mkdir(parents=True)
    lines = [f"line {i}\n" for i in range(1, 2_001)]
    (deep / "f.txt").write_text("".join(lines))
    other = tmp_path / "other"
    other.mkdir()
    budget = 5_000
    server = make_server([root, other] if several else [root], max_answer_chars=budget)
    async with connect(server, "legacy") as c:
        path = str((deep / "f.txt").relative_to(root)) if not several else str(deep / "f.txt")
        got, start = [], 1
        while start is not None:
            r = await c.call_tool("read_file", {"path": path, "start_line": start})
            t, s = text(r), r.structured_content
            assert not r.is_error, t[:300]
            assert len(t) <= budget, len(t)
            got.append(s["content"])
            start = s["next_start_line"]
    assert "".join(got) == "".join(lines)


async def test_small_budget_with_long_paths(make_server, tmp_path: Path) -> None:
    """Long paths (and so long cursors) still page under the budget and add up."""
    root = tmp_path / "proj"
    deep = root.joinpath(*[f"{i:02}" + "d" * 197 for i in range(12)])
    for j in range(2):  # (80 files, 160 matching lines: pages of 10, and cut ones)
        d = deep / f"sub{j}"
        d.mkdir(parents=True)
        for i in range(40):
            (d / f"{i:03}_{'n' * 150}.txt").write_text(f"needle {j}.{i}\nhay\nneedle again\n")
    rel = str(deep.relative_to(root))
    budget = 8_000
    page = {"max_results": 10}  # (cut after an item or two, as a page of 200 is: see BUDGETED)
    for tool, args in (
        ("grep", {"pattern": "needle", **page}),
        ("grep", {"pattern": "needle", "output_mode": "count", **page}),
        ("grep", {"pattern": "needle", "output_mode": "files_with_matches", **page}),
        ("grep", {"pattern": "needle", "before": 1, "after": 2, **page}),
        ("find_files", {"pattern": "*.txt", **page}),
        ("list_directory", {"path": rel + "/sub1"}),
    ):
        async with connect(make_server([root]), "legacy") as c:
            whole = await follow(c, tool, args, None)
        async with connect(make_server([root], max_answer_chars=budget), "legacy") as c:
            cut = await follow(c, tool, args, budget)
        assert cut == whole and len(whole) >= 40, (tool, args)


# ---- over HTTP: a large file no longer overflows the client's message limit -----------------


async def test_read_a_900k_file_over_http(tmp_path: Path) -> None:
    from mcp.client import Client
    from test_transports import http_server

    root = tmp_path / "proj"
    root.mkdir()
    rnd = random.Random(9)
    lines = []
    while sum(map(len, lines)) < 900_000:  # escapes in JSON make its content weigh more
        lines.append("".join(rnd.choice('é"\\\t<>😀ab') for _ in range(rnd.randint(0, 300))) + "\n")
    body = "".join(lines)
    (root / "big.txt").write_text(body)
    got, start, calls = [], 1, 0
    async with http_server(tmp_path, [root]) as (url, _, _):
        with anyio.fail_after(HANG_GUARD):
            async with Client(url, mode="legacy") as c:
                while start is not None:
                    r = await c.call_tool("read_file", {"path": "big.txt", "start_line": start,
                                                        "max_lines": 100_000})  # fmt: skip
                    assert not r.is_error, text(r)[:300]
                    assert len(text(r)) <= DEFAULT
                    got.append(r.structured_content["content"])
                    start = r.structured_content["next_start_line"]
                    calls += 1
    assert "".join(got) == body and calls > 1


# ---- edit_file on a minified line: the diff shows what changed --------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_edit_diff_of_a_long_line_shows_the_change(
    make_server, tmp_path: Path, mode: str
) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    half = "".join(f"var a{i}=function(b){{return b+{i}}};" for i in range(6_000))
    line = half[:160_000] + "UNIQUEWORD" + half[:160_000]
    (root / "app.min.js").write_text("head\n" + line + "\n" + "x" * 9_000 + "\n")
    async with connect(make_server([root], allow_write=True), mode) as c:
        edits = [{"old_text": "UNIQUEWORD", "new_text": "OTHER"},
                 {"old_text": "x" * 9_000, "new_text": "y" * 9_000}]  # fmt: skip
        r = await c.call_tool("edit_file", {"path": "app.min.js", "edits": edits})
        t = text(r)
        assert not r.is_error and len(t) < 12_000, len(t)
        diff = t.splitlines()
        (minus,) = [x for x in diff if x.startswith("-") and "UNIQUEWORD" in x]
        (plus,) = [x for x in diff if x.startswith("+") and "OTHER" in x]
        assert minus.startswith("-…") and minus.endswith("…") and len(minus) <= 2_003
        assert plus.startswith("+…") and plus.endswith("…") and len(plus) <= 2_003
        assert minus[2:-1] in line and plus[2:-1].replace("OTHER", "UNIQUEWORD") in line
        assert any(x.startswith("-xxx") and x.endswith("…") for x in diff)
        assert r.structured_content["diff"].rstrip("\n") == t.split("\n(", 1)[0].rstrip("\n")
    assert (root / "app.min.js").read_text() == "head\n" + line.replace(
        "UNIQUEWORD", "OTHER"
    ) + "\n" + "y" * 9_000 + "\n"


@pytest.mark.parametrize("mode", MODES)
async def test_calls_during_a_build_add_at_most_one_listener(tmp_path: Path, mode: str) -> None:
    """However many calls a client makes while an index builds, the build keeps at most one
    listener for it (a 2026-07-28 call, a connection of its own that hears no logging, adds
    none): before, each such call added one that was never removed."""
    from rootgrep.index.manager import IndexManager
    from rootgrep.roots import pin_root
    from rootgrep.server import build_server
    from rootgrep.service import Service, Settings

    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "a.py").write_text("x = 1\n")
    root = pin_root(str(proj))
    manager = IndexManager(str(tmp_path / "cache"))
    manager._builds.acquire()  # the build waits for its turn: it stays "building" meanwhile
    try:
        manager.activate(root, 0)
        server = build_server(Service([root], Settings(), indexes=manager))
        async with connect(server, mode) as c:
            for _ in range(5):
                assert not (await c.call_tool("grep", {"pattern": "zzzq"})).is_error
            ix = manager.get(root.path)
            assert ix is not None and ix.state == "building"
            assert len(ix.listeners) <= 1
    finally:
        manager._builds.release()
        manager.close()
        root.close()


async def test_one_match_with_wide_lines_and_much_context_stays_within_the_budget(
    make_server, tmp_path: Path
) -> None:
    """context=10 with max_line_chars=5000 on long lines made one item of about 105k
    characters (five times the budget); the width now shrinks so one match fits in half."""
    p = tmp_path / "p"
    p.mkdir()
    long = "x" * 9000
    (p / "a.txt").write_text("".join(f"{long} {i}\n" for i in range(30)) + f"needle {long}\n"
                             + "".join(f"{long} {i}\n" for i in range(30)))  # fmt: skip
    async with connect(make_server([p]), "legacy") as c:
        r = await c.call_tool("grep", {"pattern": "needle", "context": 10, "max_line_chars": 5000})
    assert not r.is_error and len(text(r)) <= 20_000, len(text(r))
    assert r.structured_content["matches"][0]["line_truncated"] is True
