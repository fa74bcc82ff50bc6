"""SPEC §8 through the real MCP client: read_file windows to the end, long lines cut around
their match, paths that round-trip with one root or two named alike, checked arguments and
their descriptions, grep's output modes and context (compared with ripgrep)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_helpers import MODES, RootsStub, code, connect, text, uri

from support import RG

pytestmark = pytest.mark.anyio

BUDGET = 20_000  # the default --max-answer-chars
NEXT = re.compile(r"start_line=(\d+)")


def varied_lines(n: int, seed: int, longest: int = 1_800) -> Iterator[str]:
    """n lines of varied length (under read_file's 2,000-character cut), some multibyte; made
    one at a time (the callers stop after a few MB: n of them would be tens of MB)."""
    rnd = random.Random(seed)
    words = ["alpha", "βeta", "gamma", "δέλτα", "日本語", "x", "emoji😀", "tab\there", "z" * 40]
    for i in range(n):
        width = rnd.choice((0, 5, 30, 80, 200, 700, longest))
        line = f"{i + 1}:"
        while len(line) < width:
            line += " " + rnd.choice(words)
        yield line[:longest] + "\n"


async def read_to_end(c: Any, path: str, **extra: Any) -> tuple[str, int, list[int]]:
    """Read ``path`` window by window following next_start_line; check every window's
    answer; return the content read, the total_lines every window agreed on, and each
    window's text size."""
    content, start, sizes, totals = [], 1, [], set()
    while True:
        r = await c.call_tool("read_file", {"path": path, "start_line": start, **extra})
        assert not r.is_error, text(r)
        s = r.structured_content
        t = text(r)
        sizes.append(len(t))
        assert len(t) <= BUDGET, (start, len(t))
        assert s["start_line"] == start
        content.append(s["content"])
        totals.add(s["total_lines"])
        # the structured content holds exactly the lines the text shows
        shown = t.split("\n", 1)[1]
        if s["next_start_line"] is not None:
            assert NEXT.findall(t)[-1] == str(s["next_start_line"]), t[-200:]
            shown = shown.rsplit("\n", 1)[0]
            assert s["end_line"] == s["next_start_line"] - 1
        assert shown == s["content"].removesuffix("\n")
        if s["next_start_line"] is None:
            break
        start = s["next_start_line"]
    (total,) = totals
    return "".join(content), total, sizes


# ---- 1. read_file windows --------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_read_40000_line_file_to_the_end(make_server, tmp_path: Path, mode: str) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    lines = [f"line {i} {'x' * (i % 37)}\n" for i in range(1, 40_001)]
    (root / "big.txt").write_text("".join(lines))
    async with connect(make_server([root]), mode) as c:
        got, total, sizes = await read_to_end(c, "big.txt")
        assert got == "".join(lines) and total == 40_000 and len(sizes) > 1
        tail = await c.call_tool("read_file", {"path": "big.txt", "start_line": 39_990})
        s = tail.structured_content
        assert (s["start_line"], s["end_line"], s["total_lines"]) == (39_990, 40_000, 40_000)
        assert s["content"] == "".join(lines[39_989:]) and s["next_start_line"] is None
        assert "lines 39990-40000 of 40000" in text(tail)
        for args, name in (
            ({"start_line": 40_001}, "start_line"),
            ({"start_line": 100, "end_line": 99}, "end_line"),
            ({"start_line": 0}, "start_line"),
        ):
            bad = await c.call_tool("read_file", {"path": "big.txt", **args})
            assert code(bad) == "invalid_argument", (args, text(bad))
            assert name in text(bad), (args, text(bad))


@pytest.mark.parametrize("mode", MODES)
async def test_read_3mb_file_to_the_end(make_server, tmp_path: Path, mode: str) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    lines, size = [], 0
    for ln in varied_lines(100_000, seed=3):
        lines.append(ln)
        size += len(ln.encode())
        if size > 3_000_000:
            break
    body = "".join(lines)
    assert len(body.encode()) > 3_000_000
    (root / "three.txt").write_text(body)
    async with connect(make_server([root]), mode) as c:
        got, total, sizes = await read_to_end(c, "three.txt")
    assert got == body and total == len(lines)
    print(f"3 MB file: {len(sizes)} windows, largest text {max(sizes)} chars")


async def test_read_21mb_file_without_range_fits(make_server, tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    lines, size = [], 0
    for ln in varied_lines(200_000, seed=21):
        lines.append(ln)
        size += len(ln.encode())
        if size > 2_100_000:
            break
    (root / "two.txt").write_text("".join(lines))
    async with connect(make_server([root]), "legacy") as c:
        r = await c.call_tool("read_file", {"path": "two.txt"})
    t, s = text(r), r.structured_content
    assert len(t) <= BUDGET and s["total_lines"] == len(lines) and s["truncated"] is True
    rest = t.split("\n", 1)[1]
    shown = rest.rsplit("\n", 1)[0]
    assert shown == s["content"].removesuffix("\n")
    assert s["content"] == "".join(lines[: s["end_line"]])
    assert f"start_line={s['next_start_line']}" in t and s["next_start_line"] == s["end_line"] + 1
    print(f"2.1 MB read_file, no range: {len(t)} chars of text")


# ---- 2. a minified line cut around its match -------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_minified_line_cut_around_match(make_server, tmp_path: Path, mode: str) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    half = "".join(f"var a{i}=function(b){{return b+{i}}};" for i in range(6_000))
    line = half[:160_000] + "UNIQUEWORD" + half[:160_000]
    (root / "app.min.js").write_text(line + "\n")
    async with connect(make_server([root]), mode) as c:
        r = await c.call_tool("grep", {"pattern": "UNIQUEWORD"})
        t = text(r)
        (m,) = r.structured_content["matches"]
        assert len(t) < 2_000, len(t)
        assert m["line_truncated"] is True and "UNIQUEWORD" in m["text"]
        assert m["text"].startswith("…") and m["text"].endswith("…")
        shown = [x for x in t.splitlines() if x.startswith("1:")]
        assert shown == ["1:" + m["text"]]
        assert len(m["text"]) <= 300 + 2
        wide = await c.call_tool("grep", {"pattern": "UNIQUEWORD", "max_line_chars": 1000})
        (w,) = wide.structured_content["matches"]
        assert 600 < len(w["text"]) <= 1002 and w["line_truncated"] is True
        assert w["text"].startswith("…") and w["text"].endswith("…")
        # the window is cut from the line as it is
        assert w["text"].strip("…") in line and m["text"].strip("…") in w["text"]
        short = await c.call_tool("grep", {"pattern": "UNIQUEWORD", "max_line_chars": 40})
        (s,) = short.structured_content["matches"]
        assert len(s["text"]) <= 42 and "UNIQUEWORD" in s["text"]


# ---- 3. paths round-trip ---------------------------------------------------------------------


def make_alike(tmp_path: Path) -> tuple[Path, Path]:
    """Two roots both named proj, holding files with the same relative paths but different
    contents (a wrong root would be caught)."""
    a, b = tmp_path / "one" / "proj", tmp_path / "two" / "proj"
    for side, p in (("A", a), ("B", b)):
        (p / "src").mkdir(parents=True)
        (p / "src" / "mod.py").write_text(f"needle in {side} mod\n")
        (p / "README.md").write_text(f"needle readme {side}\n")
        (p / f"only{side}.txt").write_text(f"needle only {side}\n")
    return a, b


def shown_paths(tool: str, t: str) -> list[str]:
    """The paths a tool's text shows (grep: the file headers; find_files, search: each
    line's first field)."""
    out = []
    for line in t.splitlines():
        if not line or line.startswith(("(", " ", "--")) or re.match(r"^\d+[:-]", line):
            continue
        if tool == "grep":
            out.append(line)
        else:
            out.append(line.rsplit("  (", 1)[0])
    return out


async def assert_round_trip(c: Any, tools: dict[str, dict[str, Any]], roots: list[Path]) -> int:
    """Every path shown by each tool's text, passed as is to read_file, opens the file the
    item names (compared with the file on disk)."""
    checked = 0
    for tool, args in tools.items():
        r = await c.call_tool(tool, args)
        assert not r.is_error, text(r)
        items = (
            r.structured_content.get("matches")
            or r.structured_content.get("files")
            or (r.structured_content.get("results") or [])
        )
        paths = shown_paths(tool, text(r))
        uris = list(dict.fromkeys(i["uri"] for i in items))
        assert len(paths) == len(uris) > 0, (tool, text(r))
        for shown, u in zip(paths, uris, strict=True):
            got = await c.call_tool("read_file", {"path": shown})
            assert not got.is_error, (tool, shown, text(got))
            assert got.structured_content["uri"] == u, (tool, shown)
            on_disk = _disk(u)
            assert got.structured_content["content"].encode() == on_disk.read_bytes(), shown
            checked += 1
    return checked


def _disk(u: str) -> Path:
    from rootgrep.roots import parse_file_uri

    return Path(os.fsdecode(parse_file_uri(u)))


SEARCH_TOOLS = {
    "grep": {"pattern": "needle"},
    "find_files": {"pattern": "*"},
}


@pytest.mark.parametrize("mode", MODES)
async def test_two_roots_named_alike_operator(make_server, tmp_path: Path, mode: str) -> None:
    a, b = make_alike(tmp_path)
    async with connect(make_server([a, b]), mode) as c:
        n = await assert_round_trip(c, SEARCH_TOOLS, [a, b])
        assert n == 12
        roots = (await c.call_tool("list_roots", {})).structured_content["roots"]
        ids = [r["id"] for r in roots]
        amb = await c.call_tool("read_file", {"path": "README.md", "root": "proj"})
        assert code(amb) == "ambiguous_root" and all(i in text(amb) for i in ids), text(amb)
        rel = await c.call_tool("read_file", {"path": "README.md"})
        assert code(rel) == "ambiguous_root", text(rel)
        assert all(i in text(rel) for i in ids) or (str(a) in text(rel) and str(b) in text(rel))
        for r in roots:  # a root's id picks it
            by_id = await c.call_tool("read_file", {"path": "README.md", "root": r["id"]})
            want = _disk(r["uri"] + "/README.md").read_text()
            assert by_id.structured_content["content"] == want


async def test_two_roots_named_alike_client(make_server, tmp_path: Path) -> None:
    a, b = make_alike(tmp_path)
    stub = RootsStub([uri(a), uri(b)])
    async with connect(make_server([tmp_path]), "legacy", stub) as c:
        assert await assert_round_trip(c, SEARCH_TOOLS, [a, b]) == 12
        amb = await c.call_tool("grep", {"pattern": "x", "root": "proj"})
        assert code(amb) == "ambiguous_root", text(amb)
        roots = (await c.call_tool("list_roots", {})).structured_content["roots"]
        assert len(roots) == 2 and all(r["id"] in text(amb) for r in roots)


@pytest.mark.parametrize("mode", MODES)
async def test_one_root_relative_paths_round_trip(make_server, tmp_path: Path, mode: str) -> None:
    a, _ = make_alike(tmp_path)
    async with connect(make_server([a]), mode) as c:
        r = await c.call_tool("grep", {"pattern": "needle"})
        assert "src/mod.py" in text(r).splitlines()
        assert await assert_round_trip(c, SEARCH_TOOLS, [a]) == 6


def odd_tree(tmp_path: Path) -> Path:
    p = tmp_path / "odd"
    p.mkdir()
    for i, n in enumerate(ODD_NAMES):
        with open(os.path.join(os.fsencode(p), n), "wb") as f:
            f.write(b"needle odd %d\n" % i)
    return p


ODD_NAMES = [b"with space.txt", b"bad\xffbyte.txt", b"back\\slash.txt", b"file:x.txt",
             b" lead.txt", b"http:also.txt", b"file:%41 #?.txt", b"bad\xff%20#?.txt",
             b"new\nline.txt", b"end.txt ", b"pct%2Fslash.txt", b"~tilde.txt",
             "caf\u00e9.txt".encode(), "cafe\u0301.txt".encode(), b"C:\\drive.txt"]  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
async def test_odd_names_round_trip(make_server, tmp_path: Path, mode: str) -> None:
    p = odd_tree(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "plain.txt").write_text("needle plain\n")
    async with connect(make_server([p]), mode) as c:
        r = await c.call_tool("grep", {"pattern": "needle"})
        shown = shown_paths("grep", text(r))
        assert "with space.txt" in shown
        assert sum(s.startswith("file://") for s in shown) >= 4, shown  # the odd ones as URIs
        assert await assert_round_trip(c, SEARCH_TOOLS, [p]) == 2 * len(ODD_NAMES)
    async with connect(make_server([p, other]), mode) as c:
        assert await assert_round_trip(c, SEARCH_TOOLS, [p, other]) == 2 * len(ODD_NAMES) + 2


async def test_search_paths_round_trip(make_server, tmp_path: Path) -> None:
    import anyio

    a, b = make_alike(tmp_path)
    server = make_server([a, b], index=True)
    with anyio.fail_after(60):
        for r in (a, b):
            while (ix := server.service.indexes.get(str(r).encode())) is None or (
                ix.state != "ready"
            ):
                await anyio.sleep(0.02)
    async with connect(server, "legacy") as c:
        assert await assert_round_trip(c, {"search": {"query": "needle"}}, [a, b]) == 6


# ---- 4. arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_bad_arguments_name_the_argument(make_server, tmp_path: Path, mode: str) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    async with connect(make_server([root]), mode) as c:
        for tool, args, name in (
            ("grep", {"pattern": "x", "glob": "*.py"}, "glob"),
            ("grep", {"pattern": "x", "max_results": "many"}, "max_results"),
            ("grep", {"pattern": "x", "context": 11}, "context"),
            ("grep", {"pattern": "x", "max_results": 0}, "max_results"),
            ("grep", {"pattern": "x", "before": -1}, "before"),
            ("grep", {"pattern": "x", "output_mode": "lines"}, "output_mode"),
            ("grep", {}, "pattern"),
            ("read_file", {}, "path"),
            ("find_files", {"pattern": "*", "max_results": 10**9}, "max_results"),
            ("search", {"query": "x", "include": 3}, "include"),
            ("directory_tree", {"max_depth": "deep"}, "max_depth"),
            ("list_roots", {"verbose": True}, "verbose"),
        ):
            r = await c.call_tool(tool, args)
            t = text(r)
            assert code(r) == "invalid_argument", (tool, args, t)
            assert f"`{name}`" in t, (tool, args, t)
            assert "pydantic" not in t.lower() and "errors.pydantic.dev" not in t, t
            assert "\n" not in t.strip() and len(t) < 2_000, t


@pytest.mark.parametrize("mode", MODES)
async def test_globs_string_or_list_and_braces(make_server, tmp_path: Path, mode: str) -> None:
    root = tmp_path / "proj"
    (root / "sub").mkdir(parents=True)
    for n in ("a.py", "sub/b.py", "c.toml", "sub/d.cfg", "e.txt"):
        (root / n).write_text("word\n")
    async with connect(make_server([root]), mode) as c:
        for tool, args in (("grep", {"pattern": "word"}), ("find_files", {"pattern": "*"})):
            key = "matches" if tool == "grep" else "files"

            async def paths(**kw: Any) -> list[str]:
                r = await c.call_tool(tool, {**args, **kw})  # noqa: B023
                assert not r.is_error, text(r)
                return [x["path"] for x in r.structured_content[key]]  # noqa: B023

            assert await paths(include="*.py") == await paths(include=["*.py"])
            assert await paths(include="*.py") == ["a.py", "sub/b.py"]
            assert await paths(include="*.{toml,cfg}") == ["c.toml", "sub/d.cfg"]
            assert await paths(exclude="*.{py,txt}") == ["c.toml", "sub/d.cfg"]
        ff = await c.call_tool("find_files", {"pattern": "*.{toml,cfg}"})
        assert [f["path"] for f in ff.structured_content["files"]] == ["c.toml", "sub/d.cfg"]


@pytest.mark.parametrize("mode", MODES)
async def test_every_parameter_described_and_instructions(
    make_server, tmp_path: Path, mode: str
) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    async with connect(make_server([root], allow_write=True), mode) as c:
        tools = (await c.list_tools()).tools
        instructions = c.instructions
    assert len(tools) == 17
    missing = []
    for t in tools:
        assert t.description and t.description.strip(), t.name
        models = [("", t.input_schema), *t.input_schema.get("$defs", {}).items()]
        for where, model in models:  # (and the models nested in arguments: edit_file's edits)
            for prop, schema in model.get("properties", {}).items():
                if not (schema.get("description") or "").strip():
                    missing.append(f"{t.name}.{where + '.' if where else ''}{prop}")
    assert not missing, missing
    assert instructions and all(w in instructions for w in ("grep", "search", "find_files"))
    print(f"{sum(len(t.input_schema.get('properties', {})) for t in tools)} parameters described")


# ---- 5. grep output modes and context, compared with rg --------------------------------------


def rg(*args: str, cwd: Path) -> str:
    return subprocess.run(
        [RG, "--sort", "path", "--color", "never", *args],
        cwd=cwd, capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip


def mode_tree(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    rnd = random.Random(5)
    for d in range(6):
        sub = root / f"d{d}" / "inner"
        sub.mkdir(parents=True)
        for f in range(9):
            lines = [rnd.choice(["needle here", "hay", "more hay", "needle needle", ""])
                     for _ in range(rnd.randint(0, 40))]  # fmt: skip
            (sub if f % 2 else sub.parent).joinpath(f"f{f}.txt").write_text(
                "".join(x + "\n" for x in lines)
            )
    return root


@pytest.mark.parametrize("mode", MODES)
async def test_grep_files_modes_equal_rg(make_server, tmp_path: Path, mode: str) -> None:
    root = mode_tree(tmp_path)
    want_l = rg("--no-heading", "-l", "needle", cwd=root).split()
    want_c = [tuple(x.rsplit(":", 1)) for x in rg("--no-heading", "-c", "needle", cwd=root).split()]
    assert len(want_l) > 20
    async with connect(make_server([root]), mode) as c:
        for om in ("files_with_matches", "count"):
            r = await c.call_tool("grep", {"pattern": "needle", "output_mode": om})
            s = r.structured_content
            assert s["matches"] == [] and s["truncated"] is False
            assert [f["path"] for f in s["files"]] == want_l
            assert [(f["path"], str(f["matches"])) for f in s["files"]] == want_c
            assert all(set(f) >= {"root", "path", "uri", "matches"} for f in s["files"])
            assert s["total_matches"] == sum(int(n) for _, n in want_c)
            body = [x for x in text(r).splitlines() if not x.startswith("(")]
            if om == "count":
                assert body == [f"{p}:{n}" for p, n in want_c]
            else:
                assert body == want_l
            # paging by files with the cursor
            paged, cursor = [], None
            while True:
                args = {"pattern": "needle", "output_mode": om, "max_results": 5}
                if cursor:
                    args["cursor"] = cursor
                page = (await c.call_tool("grep", args)).structured_content
                assert len(page["files"]) <= 5
                paged += page["files"]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert paged == s["files"]


def rg_context_lines(out: str) -> list[str]:
    """rg's -n -A/-B output as path:N:text (a match) or path:N-text (context)."""
    lines = []
    for x in out.splitlines():
        if x != "--":
            m = re.match(r"^([^:-]+)[:-](\d+)([:-])(.*)$", x)
            assert m, x
            lines.append(f"{m[1]}:{m[2]}{m[3]}{m[4]}")
    return lines


def our_context_lines(s: dict[str, Any]) -> list[str]:
    seen: dict[tuple[str, int], str] = {}
    for m in s["matches"]:
        before, after = m.get("before", []), m.get("after", [])
        first = m["line"] - len(before)
        for i, b in enumerate(before):
            seen.setdefault((m["path"], first + i), "-" + b)
        seen[(m["path"], m["line"])] = ":" + m["text"]
        for i, a in enumerate(after):
            seen.setdefault((m["path"], m["line"] + 1 + i), "-" + a)
    keys = sorted(seen, key=lambda k: (k[0].split("/"), k[1]))
    return [f"{p}:{n}{seen[(p, n)]}" for p, n in keys]


@pytest.mark.parametrize("mode", MODES)
async def test_grep_before_after_equal_rg(make_server, tmp_path: Path, mode: str) -> None:
    root = mode_tree(tmp_path)
    async with connect(make_server([root]), mode) as c:
        for args, flags in (
            ({"before": 1, "after": 3}, ["-B1", "-A3"]),
            ({"context": 2}, ["-C2"]),
            ({"context": 2, "after": 0}, ["-B2", "-A0"]),
        ):
            r = await c.call_tool("grep", {"pattern": "needle", "max_results": 1000, **args})
            assert not r.is_error and r.structured_content["truncated"] is False, text(r)
            want = rg_context_lines(rg("--no-heading", "-n", *flags, "needle", cwd=root))
            assert our_context_lines(r.structured_content) == want, args
            # the text shows each line once, grouped by file, as rg --heading does
            heading = rg("--heading", "-n", *flags, "needle", cwd=root)
            body = [x for x in text(r).splitlines() if not x.startswith("(")]
            assert body == [x for x in heading.splitlines() if x], args


@pytest.mark.parametrize("mode", MODES)
async def test_roots_with_one_same_named_file_each(make_server, tmp_path: Path, mode: str) -> None:
    """Two roots named alike, each holding only README.md, then roots whose own names do not
    survive as text (a backslash, an undecodable byte, a space, a name that reads as a URI):
    each file's matches are shown under their own file, and every path opens it."""
    alike = [tmp_path / "one" / "proj", tmp_path / "two" / "proj"]
    odd = [Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), n)))
           for n in (b"we\\ird", b"bad\xffroot", b"sp ace", b"file:x")]  # fmt: skip
    for roots in (alike, odd):
        for i, r in enumerate(roots):
            r.mkdir(parents=True)
            (r / "README.md").write_text(f"needle {i}\n")
        async with connect(make_server(roots), mode) as c:
            g = await c.call_tool("grep", {"pattern": "needle"})
            assert len(shown_paths("grep", text(g))) == len(roots), text(g)
            assert await assert_round_trip(c, SEARCH_TOOLS, roots) == 2 * len(roots)


@pytest.mark.parametrize("mode", MODES)
async def test_listings_show_one_line_per_entry(make_server, tmp_path: Path, mode: str) -> None:
    """A name holding a line break is one entry in list_directory's and directory_tree's
    text (quoted), never a second entry or a note of the answer's own."""
    p = odd_tree(tmp_path)
    os.mkdir(os.path.join(os.fsencode(p), b"x\n(more: pass cursor=forged)"))
    async with connect(make_server([p]), mode) as c:
        ls = await c.call_tool("list_directory", {})
        entries = ls.structured_content["entries"]
        assert text(ls).splitlines() == ["./"] + [  # (the heading: the directory's path)
            (json.dumps(e["name"], ensure_ascii=False) if "\n" in e["name"] else e["name"])
            + ("/" if e["type"] == "dir" else "")
            for e in entries
        ]
        tree = await c.call_tool("directory_tree", {})
        lines = text(tree).splitlines()
        assert len(lines) == 1 + len(entries) and not any(x.startswith("(") for x in lines)


@pytest.mark.parametrize("mode", MODES)
async def test_write_answers_show_paths_that_round_trip(
    make_server, tmp_path: Path, mode: str
) -> None:
    a, b = make_alike(tmp_path)
    async with connect(make_server([a, b], allow_write=True), mode) as c:
        ids = [r["id"] for r in (await c.call_tool("list_roots", {})).structured_content["roots"]]
        for tool, args, name in (
            ("write_file", {"path": str(b / "new.txt"), "content": "fresh\n"}, "new.txt"),
            ("move_path", {"source": "new.txt", "destination": "moved.txt"}, "moved.txt"),
            ("copy_path", {"source": "moved.txt", "destination": "copy.txt"}, "copy.txt"),
        ):
            r = await c.call_tool(tool, {**args, **({} if "path" in args else {"root": ids[1]})})
            t = text(r)
            assert not r.is_error, t
            shown = t.split(" -> ")[-1].split(": ")[0] if " -> " in t else t.split(" ")[1]
            got = await c.call_tool("read_file", {"path": shown})
            assert not got.is_error, (tool, t, text(got))
            assert got.structured_content["uri"] == uri(b / name), t


async def test_a_lone_surrogate_in_an_argument_is_invalid_argument(
    make_server, tmp_path: Path
) -> None:
    """Only an in-process client can send a string that is not UTF-8 text; it is refused by
    name, never a crash ("failed unexpectedly")."""
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.txt").write_text("x\n")
    async with connect(make_server([tmp_path / "p"], allow_write=True), "legacy") as c:
        for tool, args, name in [
            ("grep", {"pattern": "a\ud800"}, "pattern"),
            ("write_file", {"path": "b.txt", "content": "\udfff"}, "content"),
            ("edit_file", {"path": "a.txt", "edits": [{"old_text": "x", "new_text": "\ud800"}]},
             "edits[0].new_text"),
        ]:  # fmt: skip
            r = await c.call_tool(tool, args)
            assert code(r) == "invalid_argument", text(r)
            assert f"`{name}`" in text(r) and "unexpectedly" not in text(r)
    assert not (tmp_path / "p" / "b.txt").exists()


async def test_a_search_query_is_bounded(make_server, tmp_path: Path) -> None:
    """A search's cost grows with its words: a query over 1,000 characters is refused by
    name, before any index is asked."""
    (tmp_path / "p").mkdir()
    async with connect(make_server([tmp_path / "p"]), "legacy") as c:
        r = await c.call_tool("search", {"query": "word " * 300})
    assert code(r) == "invalid_argument" and "`query`" in text(r), text(r)


async def test_a_search_phrase_holds_its_words_in_order(make_server, tmp_path: Path) -> None:
    """The index keeps no word positions: a phrase's files are those holding its words in
    order (only non-word characters between them, case ignored), checked on each file as
    it is now; a file holding the words in another order, or joined into one word, is not
    one of them."""
    root = tmp_path / "p"
    root.mkdir()
    files = {
        "in_order.txt": "the Needle project\n",
        "dashed.txt": "needle-project\n",
        "wrapped.txt": "a needle\n    project\n",
        "reversed.txt": "project needle\n",
        "apart.txt": "needle here, and a project there\n",
        "joined.txt": "needleproject needle_project\n",
    }
    for name, body in files.items():
        (root / name).write_text(body)
    server = make_server([root], index=True)
    async with connect(server, "legacy") as c:
        ix = server.service.indexes.get(root.resolve().as_posix().encode())
        with anyio.fail_after(60):  # (a hang guard)
            while ix.state != "ready":
                await anyio.sleep(0.05)
        r = await c.call_tool("search", {"query": '"needle project"'})
        got = {h["path"] for h in r.structured_content["results"]}
        assert got == {"in_order.txt", "dashed.txt", "wrapped.txt"}, text(r)
        words = await c.call_tool("search", {"query": "needle project"})
        assert {h["path"] for h in words.structured_content["results"]} >= got | {
            "reversed.txt",
            "apart.txt",
        }
