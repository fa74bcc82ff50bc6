"""Every tool through the real MCP client (in-memory), in both protocol eras."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from mcp_helpers import MODES, RootsStub, code, connect, text, uri

pytestmark = pytest.mark.anyio


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    p = tmp_path / "proj"
    (p / "src" / "pkg").mkdir(parents=True)
    (p / "docs").mkdir()
    for i in range(30):
        (p / "src" / "pkg" / f"m{i:02}.py").write_text(
            "".join(f"def f{j}():\n    return 'needle {i}.{j}'\n" for j in range(5))
        )
    (p / "README.md").write_text("# needle project\nsecond line\nthird line\n")
    (p / "docs" / "guide.md").write_text("Needle in docs\n")
    (p / ".gitignore").write_text("build/\n")
    (p / "build").mkdir()
    (p / "build" / "out.py").write_text("needle in build\n")
    (p / ".hidden.py").write_text("needle hidden\n")
    return p


READ_TOOLS = {"list_roots", "grep", "find_files", "find_symbol", "outline", "read_file", "list_directory",
              "directory_tree", "file_info", "search", "reindex"}  # fmt: skip
WRITE_TOOLS = {"write_file", "edit_file", "create_directory", "move_path", "copy_path",
               "delete_path"}  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
async def test_tool_list_annotations_and_schemas(make_server, proj: Path, mode: str) -> None:
    async with connect(make_server([proj]), mode) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) == READ_TOOLS
    for t in tools.values():
        assert t.annotations is not None
        assert t.annotations.read_only_hint is True and t.annotations.open_world_hint is False
        assert t.output_schema is not None and t.output_schema.get("type") == "object"
        assert "roots" not in t.input_schema.get("properties", {})
    async with connect(make_server([proj], allow_write=True), mode) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) == READ_TOOLS | WRITE_TOOLS
    # (SPEC §8: annotations tell the truth; each of these can destroy what a file held)
    destructive = {n for n, t in tools.items() if t.annotations.destructive_hint}
    assert destructive == {"write_file", "edit_file", "move_path", "copy_path", "delete_path"}
    assert all(tools[n].annotations.read_only_hint is False for n in WRITE_TOOLS)
    assert tools["write_file"].annotations.idempotent_hint is True
    assert tools["edit_file"].annotations.idempotent_hint is False


@pytest.mark.parametrize("mode", MODES)
async def test_list_roots_and_identity(make_server, proj: Path, mode: str) -> None:
    async with connect(make_server([proj]), mode) as c:
        r = await c.call_tool("list_roots", {})
    (root,) = r.structured_content["roots"]
    assert root["uri"] == uri(proj) and root["name"] == "proj" and root["source"] == "operator"
    assert root["index"]["state"] == "off" and r.structured_content["read_only"] is True
    assert "proj" in text(r)


@pytest.mark.parametrize("mode", MODES)
async def test_grep_results_order_and_paging(make_server, proj: Path, mode: str) -> None:
    async with connect(make_server([proj]), mode) as c:
        full = await c.call_tool("grep", {"pattern": "needle", "max_results": 1000})
        m = full.structured_content["matches"]
        assert (
            full.structured_content["truncated"] is False
            and full.structured_content["next_cursor"] is None
        )
        assert len(m) == 30 * 5 + 1  # not build/ (ignored), not .hidden.py, not docs (Needle)
        keys = [(x["path"].split("/"), x["line"]) for x in m]
        assert keys == sorted(keys)
        first = m[0]
        # each match names its root by identity (its URI once, in list_roots)
        assert set(first["root"]) == {"id", "name"} and first["root"]["name"] == proj.name
        assert first["uri"].startswith(uri(proj) + "/")
        assert first["column"] >= 1 and isinstance(first["text"], str)
        # pages of 7 add up to the unpaged answer
        pages, cursor = [], None
        while True:
            args = {"pattern": "needle", "max_results": 7}
            if cursor:
                args["cursor"] = cursor
            page = (await c.call_tool("grep", args)).structured_content
            pages += page["matches"]
            cursor = page["next_cursor"]
            assert page["truncated"] == (cursor is not None)
            if cursor is None:
                break
        assert pages == m
        # options
        ci = await c.call_tool("grep", {"pattern": "NEEDLE", "case_sensitive": False})
        assert len(ci.structured_content["matches"]) == 30 * 5 + 2
        hid = await c.call_tool("grep", {"pattern": "needle", "hidden": True, "no_ignore": True,
                                         "max_results": 1000})  # fmt: skip
        paths = {x["path"] for x in hid.structured_content["matches"]}
        assert {".hidden.py", "build/out.py"} <= paths
        inc = await c.call_tool("grep", {"pattern": "needle", "include": ["*.md"]})
        assert [x["path"] for x in inc.structured_content["matches"]] == ["README.md"]
        exc = await c.call_tool("grep", {"pattern": "needle", "exclude": ["src/"]})
        assert [x["path"] for x in exc.structured_content["matches"]] == ["README.md"]
        ctx = await c.call_tool("grep", {"pattern": "second", "context": 1})
        (hit,) = ctx.structured_content["matches"]
        assert hit["before"] == ["# needle project"] and hit["after"] == ["third line"]
        rx = await c.call_tool(
            "grep", {"pattern": r"f[0-9]\(", "regex": True, "path": "src/pkg/m00.py"}
        )
        assert [x["line"] for x in rx.structured_content["matches"]] == [1, 3, 5, 7, 9]
        bad = await c.call_tool("grep", {"pattern": "(", "regex": True})
        assert code(bad) == "invalid_pattern"
        wrong = await c.call_tool("grep", {"pattern": "other", "cursor": cursor or "abc"})
        assert code(wrong) == "invalid_argument"


@pytest.mark.parametrize("mode", MODES)
async def test_find_files(make_server, proj: Path, mode: str) -> None:
    async with connect(make_server([proj]), mode) as c:
        g = (await c.call_tool("find_files", {"pattern": "*.md"})).structured_content
        assert [f["path"] for f in g["files"]] == ["README.md", "docs/guide.md"]
        assert g["files"][0]["size"] > 0 and g["files"][0]["mtime"].endswith("Z")
        sub = (await c.call_tool("find_files", {"pattern": "PKG/M0"})).structured_content
        assert len(sub["files"]) == 10  # case-insensitive substring
        anchored = (await c.call_tool("find_files", {"pattern": "src/*.py"})).structured_content
        assert anchored["files"] == []  # anchored at the root: no .py directly in src/
        paged, cursor = [], None
        while True:
            args = {"pattern": "*.py", "max_results": 4}
            if cursor:
                args["cursor"] = cursor
            page = (await c.call_tool("find_files", args)).structured_content
            paged += page["files"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        full = (await c.call_tool("find_files", {"pattern": "*.py"})).structured_content
        assert paged == full["files"] and len(paged) == 30


@pytest.mark.parametrize("mode", MODES)
async def test_read_file(make_server, proj: Path, mode: str) -> None:
    async with connect(make_server([proj]), mode) as c:
        r = (await c.call_tool("read_file", {"path": "README.md"})).structured_content
        assert r["content"] == "# needle project\nsecond line\nthird line\n"
        assert (r["start_line"], r["end_line"], r["total_lines"], r["truncated"]) == (
            1,
            3,
            3,
            False,
        )
        part = (await c.call_tool("read_file", {"path": "README.md", "start_line": 2,
                                                "end_line": 2})).structured_content  # fmt: skip
        assert part["content"] == "second line\n" and part["start_line"] == 2
        absolute = await c.call_tool("read_file", {"path": str(proj / "docs" / "guide.md")})
        assert absolute.structured_content["path"] == "docs/guide.md"
        via_uri = await c.call_tool("read_file", {"path": uri(proj / "docs" / "guide.md")})
        assert via_uri.structured_content["content"] == "Needle in docs\n"
        (proj / "bin.dat").write_bytes(b"\0\1\2")
        assert code(await c.call_tool("read_file", {"path": "bin.dat"})) == "binary_file"
        assert code(await c.call_tool("read_file", {"path": "nope.txt"})) == "not_found"
        assert code(await c.call_tool("read_file", {"path": "docs"})) == "not_a_file"


@pytest.mark.parametrize("mode", MODES)
async def test_list_directory_tree_and_info(make_server, proj: Path, mode: str) -> None:
    os.symlink("README.md", proj / "link.md")
    async with connect(make_server([proj]), mode) as c:
        ls = (await c.call_tool("list_directory", {})).structured_content
        names = {e["name"]: e["type"] for e in ls["entries"]}
        assert (
            names["src"] == "dir"
            and names["link.md"] == "symlink"
            and names[".hidden.py"] == "file"
        )
        assert ls["path"] == "." and ls["next_cursor"] is None
        tree = (await c.call_tool("directory_tree", {"max_depth": 2})).structured_content
        top = {n["name"]: n for n in tree["tree"]["children"]}
        assert "build" not in top and ".hidden.py" not in top  # ignore and hidden rules
        assert top["src"]["children"][0]["name"] == "pkg"
        assert top["src"]["children"][0]["children"] is not None
        assert top["src"]["children"][0]["children"] == []  # depth 2 stops below pkg
        small = (await c.call_tool("directory_tree", {"max_entries": 3})).structured_content
        assert small["truncated"] is True
        info = (await c.call_tool("file_info", {"path": "link.md"})).structured_content
        assert info["type"] == "symlink" and info["is_symlink"] is True
        info = (await c.call_tool("file_info", {"path": "README.md"})).structured_content
        assert info["type"] == "file" and info["mode"] == "0644" and info["size"] == 40


async def test_list_directory_pages(make_server, tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.mkdir()
    for i in range(1203):
        (big / f"f{i:04}").write_text("")
    async with connect(make_server([big]), "legacy") as c:
        names, cursor, pages = [], None, 0
        while True:
            args = {"cursor": cursor} if cursor else {}
            page = (await c.call_tool("list_directory", args)).structured_content
            names += [e["name"] for e in page["entries"]]
            cursor = page["next_cursor"]
            pages += 1
            if cursor is None:
                break
    assert names == [f"f{i:04}" for i in range(1203)] and pages == 3


@pytest.mark.parametrize("mode", MODES)
async def test_write_tools(make_server, proj: Path, mode: str) -> None:
    async with connect(make_server([proj], allow_write=True), mode) as c:
        w = await c.call_tool("write_file", {"path": "new/x.txt", "content": "one\n"})
        assert code(w) == "not_found"  # the parent must exist
        assert not (await c.call_tool("create_directory", {"path": "new/deeper"})).is_error
        w = await c.call_tool("write_file", {"path": "new/x.txt", "content": "one\ntwo\n"})
        assert (
            w.structured_content["created"] is True
            and (proj / "new/x.txt").read_text() == "one\ntwo\n"
        )
        again = await c.call_tool(
            "write_file", {"path": "new/x.txt", "content": "z", "create_only": True}
        )
        assert code(again) == "exists"
        dry = await c.call_tool("edit_file", {"path": "new/x.txt", "dry_run": True,
                                              "edits": [{"old_text": "two", "new_text": "2"}]})  # fmt: skip
        assert "-two" in dry.structured_content["diff"] and "+2" in dry.structured_content["diff"]
        assert (proj / "new/x.txt").read_text() == "one\ntwo\n"
        done = await c.call_tool("edit_file", {"path": "new/x.txt",
                                               "edits": [{"old_text": "two", "new_text": "2"}]})  # fmt: skip
        assert done.structured_content["applied"] and (proj / "new/x.txt").read_text() == "one\n2\n"
        miss = await c.call_tool("edit_file", {"path": "new/x.txt",
                                               "edits": [{"old_text": "absent", "new_text": ""}]})  # fmt: skip
        assert code(miss) == "edit_mismatch"
        mv = await c.call_tool("move_path", {"source": "new/x.txt", "destination": "new/y.txt"})
        assert (
            not mv.is_error and (proj / "new/y.txt").exists() and not (proj / "new/x.txt").exists()
        )
        (proj / "new/z.txt").write_text("z")
        clash = await c.call_tool("move_path", {"source": "new/z.txt", "destination": "new/y.txt"})
        assert code(clash) == "exists"
        cp = await c.call_tool("copy_path", {"source": "src", "destination": "src2"})
        assert cp.structured_content["files"] == 30
        assert (proj / "src2/pkg/m07.py").read_text() == (proj / "src/pkg/m07.py").read_text()
        assert code(await c.call_tool("delete_path", {"path": "src2"})) == "not_a_file"
        rm = await c.call_tool("delete_path", {"path": "src2", "recursive": True})
        assert rm.structured_content["removed"] == 32 and not (proj / "src2").exists()
        assert (
            code(await c.call_tool("delete_path", {"path": ".", "recursive": True}))
            == "invalid_path"
        )
        assert code(await c.call_tool("delete_path", {"path": str(proj)})) == "invalid_path"
        assert proj.is_dir()


async def test_structured_output_matches_text(make_server, proj: Path) -> None:
    async with connect(make_server([proj]), "legacy") as c:
        r = await c.call_tool("grep", {"pattern": "second"})
    assert "README.md\n2:second line\n(1 match in 1 file;" in text(r)
    assert json.loads(json.dumps(r.structured_content))["matches"][0]["line"] == 2


async def test_client_roots_are_the_scope_without_operator_roots(make_server, proj: Path) -> None:
    stub = RootsStub([uri(proj / "docs")])
    async with connect(make_server([]), "legacy", stub) as c:
        r = await c.call_tool("grep", {"pattern": "Needle"})
    assert [m["path"] for m in r.structured_content["matches"]] == ["guide.md"]


@pytest.mark.parametrize("mode", MODES)
async def test_search_and_reindex_with_progress(make_server, proj: Path, mode: str) -> None:
    import anyio

    server = make_server([proj], index=True)
    manager = server.service.indexes
    with anyio.fail_after(60):
        while (
            manager.get(str(proj).encode()) is None
            or manager.get(str(proj).encode()).state != "ready"
        ):
            await anyio.sleep(0.02)
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    for i in range(600):
        (proj / "docs" / f"bulk{i}.md").write_text(f"bulk page {i}\n")
    async with connect(server, mode) as c:
        r = await c.call_tool("reindex", {}, progress_callback=on_progress)
        (stat,) = r.structured_content["roots"]
        assert stat["added"] >= 600 and stat["files"] >= 632 and stat["root"]["name"] == "proj"
        with anyio.fail_after(10):
            while not progress:  # notifications may trail the result
                await anyio.sleep(0.02)
        assert progress[0][:2] == (0, None)  # the start
        while progress[-1][1] is None:  # the end, with the total the walk found
            await anyio.sleep(0.02)
        assert progress[-1][0] == progress[-1][1] >= 632
        s = (await c.call_tool("search", {"query": "f3 needle ext:py"})).structured_content
        assert s["partial"] is False and s["results"]
        assert all(h["path"].endswith(".py") for h in s["results"])
        top = s["results"][0]
        assert top["snippets"] and top["snippets"][0]["line"] >= 1 and top["score"] > 0
        phrase = (await c.call_tool("search", {"query": '"needle project"'})).structured_content
        assert [h["path"] for h in phrase["results"]] == ["README.md"]
        none = (await c.call_tool("search", {"query": "needle -needle"})).structured_content
        assert none["results"] == []
        paged, cursor = [], None
        while True:
            args = {"query": "bulk", "max_results": 50}
            if cursor:
                args["cursor"] = cursor
            page = (await c.call_tool("search", args)).structured_content
            paged += [h["path"] for h in page["results"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert len(paged) == len(set(paged)) == 600
        g = (await c.call_tool("grep", {"pattern": "needle 3.4"})).structured_content
        assert g["index_used"] is True and [m["path"] for m in g["matches"]] == ["src/pkg/m03.py"]


async def test_search_without_an_index_says_so(make_server, proj: Path) -> None:
    async with connect(make_server([proj]), "legacy") as c:
        assert code(await c.call_tool("search", {"query": "needle"})) == "index_unavailable"
        assert code(await c.call_tool("reindex", {})) == "index_unavailable"


@pytest.mark.parametrize("mode", MODES)
async def test_reindex_of_an_unchanged_tree_reports_its_start_and_end(
    make_server, tmp_path: Path, mode: str
) -> None:
    import anyio

    tree = tmp_path / "small"
    for i in range(400):
        (tree / f"d{i % 10}").mkdir(parents=True, exist_ok=True)
        (tree / f"d{i % 10}" / f"f{i}.txt").write_text(f"file {i}\n")
    server = make_server([tree], index=True)
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with connect(server, mode) as c:
        first = await c.call_tool("reindex", {})
        assert not first.is_error
        r = await c.call_tool("reindex", {}, progress_callback=on_progress)  # nothing changed
        assert r.structured_content["roots"][0]["updated"] == 0
        with anyio.fail_after(10):  # (notifications may trail the result)
            while not progress or progress[-1][1] is None:
                await anyio.sleep(0.02)
    assert progress[0][:2] == (0, None)
    assert progress[-1][:2] == (400, 400)
    assert all(m for _, _, m in progress)


async def test_directory_tree_stops_at_500_entries_by_default(make_server, tmp_path: Path) -> None:
    tree = tmp_path / "wide"
    for i in range(30):
        (tree / f"d{i:02}").mkdir(parents=True)
        for j in range(30):
            (tree / f"d{i:02}" / f"f{j:02}.txt").write_text("x\n")
    async with connect(make_server([tree]), "legacy") as c:
        res = (await c.call_tool("directory_tree", {})).structured_content

    def count(node: dict) -> int:  # type: ignore[type-arg]
        return sum(1 + count(ch) for ch in node.get("children") or [])

    assert res["truncated"] is True and count(res["tree"]) == 500  # (SPEC §8's default)
