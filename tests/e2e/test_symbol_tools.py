"""find_symbol and outline through the real MCP client, with and without an index, and the
CLI verbs ``rootgrep symbols`` / ``rootgrep outline`` (SPEC §9)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp_helpers import MODES, code, connect, text

from rootgrep.symbols import extract
from support import ROOTGREP

pytestmark = pytest.mark.anyio

PY = """\
import os

LIMIT = 10


class Parser:
    def parse(self, data):
        return data

    class Inner:
        def parse(self):
            pass


def parse(text):
    return Parser().parse(text)
"""
GO = """\
package p

type Parser struct {
\tn int
}

func (p *Parser) Parse(s string) string {
\treturn s
}

func Helper() {}
"""
RS = """\
pub struct Parser {
    n: u32,
}

impl Parser {
    pub fn parse(&self) -> u32 {
        self.n
    }
}

pub fn helper() {}
"""
JS = """\
export class Parser {
  parse(s) {
    return s;
  }
}

export function helper() {}
"""


def tree(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "src" / "parser.py").write_text(PY)
    (root / "src" / "parser.go").write_text(GO)
    (root / "src" / "parser.rs").write_text(RS)
    (root / "src" / "parser.js").write_text(JS)
    (root / "tests" / "test_parser.py").write_text("def parse():\n    pass\n")
    (root / "notes.txt").write_text("def parse(): not code\n")
    return root


async def index_ready(server, root: Path) -> None:  # type: ignore[no-untyped-def]
    """Wait (a hang guard, not a timing) until the root's first build is done."""
    ix = server.service.indexes.get(root.resolve().as_posix().encode())
    assert ix is not None
    with anyio.fail_after(60):
        while ix.state != "ready":
            await anyio.sleep(0.05)


def rows(result) -> list[tuple[str, int, int, str, str | None, str]]:  # type: ignore[no-untyped-def]
    sc = result.structured_content
    assert sc is not None, text(result)
    return [
        (s["path"], s["line"], s["end_line"], s["kind"], s["container"], s["name"])
        for s in sc["symbols"]
    ]


@pytest.mark.parametrize("mode", MODES)
async def test_find_symbol_finds_every_definition_with_kind_lines_and_container(
    make_server, tmp_path: Path, mode: str
) -> None:
    root = tree(tmp_path)
    async with connect(make_server([root]), mode) as c:
        r = await c.call_tool("find_symbol", {"name": "parse"})
        got = rows(r)
        assert got[-1] == ("tests/test_parser.py", 1, 2, "function", None, "parse")  # tests last
        assert set(got[:-1]) == {
            ("src/parser.py", 7, 8, "method", "Parser", "parse"),
            ("src/parser.py", 11, 12, "method", "Inner", "parse"),
            ("src/parser.py", 15, 16, "function", None, "parse"),
            ("src/parser.rs", 6, 8, "method", "Parser", "parse"),
            ("src/parser.js", 2, 4, "method", "Parser", "parse"),
        }
        # exact is case-sensitive: Go's Parse is another name
        go = rows(await c.call_tool("find_symbol", {"name": "Parse"}))
        assert go == [("src/parser.go", 7, 9, "method", "Parser", "Parse")]
        # exact=false: names containing it, any case; exact names first
        loose = rows(await c.call_tool("find_symbol", {"name": "parse", "exact": False}))
        names = [x[5] for x in loose]
        assert {"parse", "Parse", "Parser"} <= set(names)
        assert names.index("Parser") > max(i for i, n in enumerate(names) if n == "parse")
        # kind, include (a string) and path narrow it
        structs = rows(await c.call_tool("find_symbol", {"name": "Parser", "kind": "struct"}))
        assert structs == [("src/parser.go", 3, 5, "struct", None, "Parser"),
                           ("src/parser.rs", 1, 3, "struct", None, "Parser")]  # fmt: skip
        only_rs = await c.call_tool("find_symbol", {"name": "parse", "include": "*.rs"})
        assert [x[0] for x in rows(only_rs)] == ["src/parser.rs"]
        none = await c.call_tool("find_symbol", {"name": "parse", "path": "tests"})
        assert [x[0] for x in rows(none)] == ["tests/test_parser.py"]
        # the text names each definition by a path that read_file opens
        first = text(r).splitlines()[0]
        shown = first.split(":", 1)[0]
        read = await c.call_tool("read_file", {"path": shown})
        assert "class Parser" in text(read)


@pytest.mark.parametrize("mode", MODES)
async def test_find_symbol_pages_exactly(make_server, tmp_path: Path, mode: str) -> None:
    root = tree(tmp_path)
    async with connect(make_server([root]), mode) as c:
        whole = rows(await c.call_tool("find_symbol", {"name": "parse"}))
        got, cursor = [], None
        while True:
            args = {"name": "parse", "max_results": 2} | ({"cursor": cursor} if cursor else {})
            r = await c.call_tool("find_symbol", args)
            got += rows(r)
            cursor = r.structured_content["next_cursor"]
            if cursor is None:
                break
        assert got == whole


@pytest.mark.parametrize("mode", MODES)
async def test_outline_nests_methods_under_their_class(
    make_server, tmp_path: Path, mode: str
) -> None:
    root = tree(tmp_path)
    async with connect(make_server([root]), mode) as c:
        r = await c.call_tool("outline", {"path": "src/parser.py"})
        sc = r.structured_content
        assert sc["language"] == "python"

        def shape(nodes):  # type: ignore[no-untyped-def]
            return [(n["kind"], n["name"], n["line"], shape(n.get("children", []))) for n in nodes]

        assert shape(sc["symbols"]) == [
            ("constant", "LIMIT", 3, []),
            ("class", "Parser", 6, [
                ("method", "parse", 7, []),
                ("class", "Inner", 10, [("method", "parse", 11, [])]),
            ]),
            ("function", "parse", 15, []),
        ]  # fmt: skip
        assert "  7-8 method parse" in text(r)
        assert code(await c.call_tool("outline", {"path": "notes.txt"})) == "invalid_argument"
        folder = await c.call_tool("outline", {"path": "src"})
        assert code(folder) == "not_a_file" and "is a directory" in text(folder)


async def test_an_outline_a_cap_stopped_says_so_not_no_definitions(
    make_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose parse passes its time limit, or whose lines are minified, has definitions
    nobody looked at: its outline said "(no definitions)", which an agent takes at its word."""
    from rootgrep import symbols

    monkeypatch.setattr(symbols, "PARSE_TIMEOUT_SECONDS", -1.0)  # (every parse halted)
    root = tmp_path / "root"
    root.mkdir()
    slow = "".join(f"def handler_{i}(x):\n    return x\n\n" for i in range(300))
    (root / "slow.py").write_text(slow + "# a comment line\n" * 3_000)
    (root / "min.js").write_text("function f(){return 1}" + ";var x=1" * 3_000)
    (root / "none.py").write_text("print(1)\n# nothing defined\n")
    (root / "big.py").write_text("def f():\n    pass\n" * 130_000)  # (over 2 MiB)
    async with connect(make_server([root]), "legacy") as c:
        r = await c.call_tool("outline", {"path": "big.py"})
        sc = r.structured_content
        assert (sc["truncated"], sc["not_parsed"]) == (True, "large"), sc
        assert "2 MiB parse cap" in text(r) and "no definitions" not in text(r), text(r)
        r = await c.call_tool("outline", {"path": "slow.py"})
        assert r.structured_content["not_parsed"] == "timeout", r.structured_content
        assert "not parsed" in text(r) and "no definitions" not in text(r), text(r)
        r = await c.call_tool("outline", {"path": "min.js"})
        assert r.structured_content["not_parsed"] == "long lines", r.structured_content
        assert "minified" in text(r) and "no definitions" not in text(r), text(r)
        r = await c.call_tool("outline", {"path": "none.py"})
        assert r.structured_content["not_parsed"] is None and "(no definitions)" in text(r)


def test_cli_outline_of_a_file_not_parsed_says_so(tmp_path: Path) -> None:
    """``rootgrep outline`` of a minified or an over-cap file printed nothing and exited 1,
    as for a file with no definitions; it says why and exits 2."""
    (tmp_path / "min.js").write_text("function f(){return 1}" + ";var x=1" * 3_000)
    (tmp_path / "big.py").write_text("def f():\n    pass\n" * 130_000)  # (over 2 MiB)
    (tmp_path / "none.py").write_text("print(1)\n")
    for name, why in (("min.js", "minified"), ("big.py", "2 MiB")):
        out = subprocess.run([ROOTGREP, "outline", str(tmp_path / name)], capture_output=True,
                             text=True, timeout=60, check=False)  # fmt: skip
        assert (out.returncode, out.stdout) == (2, ""), out
        assert "not parsed" in out.stderr and why in out.stderr, out.stderr
    out = subprocess.run([ROOTGREP, "outline", str(tmp_path / "none.py")], capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert (out.returncode, out.stdout, out.stderr) == (1, "", "")


@pytest.mark.parametrize("mode", MODES)
async def test_a_renamed_function_is_found_under_its_new_name_at_once(
    make_server, tmp_path: Path, mode: str
) -> None:
    """With an index serving the root, an edit is seen by the next call (the changed file is
    parsed live until its fold), under the new name and not the old one."""
    root = tree(tmp_path)
    server = make_server([root], index=True)
    async with connect(server, mode) as c:
        await index_ready(server, root)
        before = rows(await c.call_tool("find_symbol", {"name": "helper"}))
        assert [x[0] for x in before] == ["src/parser.js", "src/parser.rs"]
        rs = root / "src" / "parser.rs"
        rs.write_text(RS.replace("fn helper()", "fn assist()"))
        renamed = rows(await c.call_tool("find_symbol", {"name": "assist"}))
        assert renamed == [("src/parser.rs", 11, 11, "function", None, "assist")]
        old = rows(await c.call_tool("find_symbol", {"name": "helper"}))
        assert [x[0] for x in old] == ["src/parser.js"]  # (JS still has one)


def test_cli_symbols_and_outline(tmp_path: Path) -> None:
    root = tree(tmp_path)
    out = subprocess.run([ROOTGREP, "symbols", "Parser", str(root)], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert f"{root}/src/parser.py:6: class Parser" in lines
    assert f"{root}/src/parser.go:3: struct Parser" in lines
    none = subprocess.run([ROOTGREP, "symbols", "Nope", str(root)], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert none.returncode == 1 and none.stdout == ""
    ol = subprocess.run([ROOTGREP, "outline", str(root / "src" / "parser.py")],
                        capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ol.returncode == 0, ol.stderr
    f = root / "src" / "parser.py"
    assert ol.stdout.splitlines()[:3] == [f"{f}:3: constant LIMIT", f"{f}:6: class Parser",
                                          f"{f}:7:   method parse"]  # fmt: skip


async def test_grep_matches_name_their_enclosing_definition(make_server, tmp_path: Path) -> None:
    """With the index serving, each match carries the innermost definition holding it
    (from the symbols stored at index time); a file changed since its commit has none
    until its fold (its stored symbols may be stale)."""
    root = tree(tmp_path)
    server = make_server([root], index=True)
    async with connect(server, "legacy") as c:
        await index_ready(server, root)
        r = await c.call_tool("grep", {"pattern": "return", "include": "*.py"})
        got = {(m["path"], m["line"]): m.get("symbol") for m in r.structured_content["matches"]}
        assert got == {("src/parser.py", 8): "Parser.parse", ("src/parser.py", 16): "parse"}
        # three lines added on top: stale symbols would put line 11 in Inner.parse
        (root / "src" / "parser.py").write_text("#\n#\n#\n" + PY)
        r = await c.call_tool("grep", {"pattern": "return", "include": "*.py"})
        now = {m["line"]: m.get("symbol") for m in r.structured_content["matches"]}
        assert set(now) == {11, 19}
        assert now[11] in (None, "Parser.parse") and now[19] in (None, "parse"), now


@pytest.mark.parametrize("mode", MODES)
async def test_find_symbol_answers_while_the_first_build_waits(tmp_path: Path, mode: str) -> None:
    """A client asks before any index is ready (the build is held back): find_symbol parses
    the files as they are, never an empty answer."""
    from rootgrep.index.manager import IndexManager
    from rootgrep.roots import pin_root
    from rootgrep.server import build_server
    from rootgrep.service import Service, Settings

    root = pin_root(str(tree(tmp_path)))
    manager = IndexManager(str(tmp_path / "cache"))
    manager._builds.acquire()  # the first build waits for its turn: it stays "building"
    try:
        manager.activate(root, 0)
        server = build_server(Service([root], Settings(), indexes=manager))
        async with connect(server, mode) as c:
            r = await c.call_tool("find_symbol", {"name": "Parser", "kind": "struct"})
            assert [x[0] for x in rows(r)] == ["src/parser.go", "src/parser.rs"]
            ix = manager.get(root.path)
            assert ix is not None and ix.state == "building"
    finally:
        manager._builds.release()
        manager.close()
        root.close()


async def test_signatures_from_the_index_are_read_from_the_files(
    make_server, tmp_path: Path
) -> None:
    """The index stores no signatures: find_symbol answering from it reads each definition's
    first line from the file as it is now, the same signature a live parse gives."""
    root = tree(tmp_path)
    live: dict[tuple[str, int], str] = {}
    for rel in ("src/parser.py", "src/parser.rs", "src/parser.js", "tests/test_parser.py"):
        for s in extract(rel.encode(), (root / rel).read_bytes()) or ():
            if s.name == "parse":
                live[(rel, s.line)] = s.signature
    server = make_server([root], index=True)
    async with connect(server, "legacy") as c:
        await index_ready(server, root)
        ix = server.service.indexes.get(root.resolve().as_posix().encode())
        assert ix.index.find_symbols("parse")  # (the index answers: no signatures stored)
        assert all(not s.signature for _, s in ix.index.find_symbols("parse"))
        asked = []
        real = ix.index.find_symbols

        def spy(*a, **kw):  # type: ignore[no-untyped-def]
            asked.append(a)  # (the real lookup, only counted)
            return real(*a, **kw)

        ix.index.find_symbols = spy  # type: ignore[method-assign]
        r = await c.call_tool("find_symbol", {"name": "parse"})
        assert asked, "find_symbol did not answer from the index"
        got = {(h["path"], h["line"]): h["signature"] for h in r.structured_content["symbols"]}
    assert got == live and all(got.values()), got


async def test_a_signature_on_a_long_line_is_the_one_a_live_parse_gives(
    make_server, tmp_path: Path
) -> None:
    """On a line longer than the extractor looks (a minified file), a definition's signature
    starts at the definition, not at the line: find_symbol answering from the index (which
    stores no signatures) gives the same signature as a live parse, for each definition of
    the line."""
    root = tmp_path / "proj"
    root.mkdir()
    data = "var table = [" + ",".join(["1"] * 900) + "]; function foo(a) { return a; } "
    data += "function bar(b) { return b; }\n"
    (root / "min.js").write_text(data)
    live = {s.name: s.signature for s in extract(b"min.js", data.encode()) or ()}
    assert live["foo"].startswith("function foo(a)"), live
    server = make_server([root], index=True)
    async with connect(server, "legacy") as c:
        await index_ready(server, root)
        ix = server.service.indexes.get(root.resolve().as_posix().encode())
        assert ix.index.find_symbols("foo")  # (the index answers)
        for name in ("foo", "bar"):
            r = await c.call_tool("find_symbol", {"name": name})
            (hit,) = r.structured_content["symbols"]
            assert hit["signature"] == live[name], (name, hit["signature"][:80])


@pytest.mark.parametrize("mode", MODES)
async def test_an_outline_cut_to_fit_continues_with_its_cursor(
    make_server, tmp_path: Path, mode: str
) -> None:
    """A large file's outline is paged: each answer fits the budget (passed by at most one
    item), says how to go on, and the pages together give every definition once, a method
    under its class even when the class began on an earlier page."""
    root = tmp_path / "root"
    root.mkdir()
    body = ["class Big:"] + [f"    def method_{i}(self):\n        return {i}\n" for i in range(120)]
    body += [f"def top_{i}():\n    return {i}\n" for i in range(80)]
    (root / "big.py").write_text("\n".join(body))
    whole = [(s.kind, s.name, s.line) for s in extract(b"big.py", (root / "big.py").read_bytes())]
    budget = 1500
    async with connect(make_server([root], max_answer_chars=budget), mode) as c:

        def flat(nodes, above=()):  # type: ignore[no-untyped-def]
            for n in nodes:
                yield (n["kind"], n["name"], n["line"]), above
                yield from flat(n.get("children", []), (*above, n["name"]))

        got: list[tuple[str, str, int]] = []
        cursor = None
        for _ in range(50):
            r = await c.call_tool(
                "outline", {"path": "big.py"} | ({"cursor": cursor} if cursor else {})
            )
            assert code(r) is None, text(r)
            assert len(text(r)) <= budget + 200
            items = list(flat(r.structured_content["symbols"]))
            for item, above in items:
                if item[1].startswith("method_"):
                    assert above == ("Big",)  # (nested under its class on every page)
            before = len(got)
            for item, _ in items:  # (only a container may come again, as a later page's context)
                assert item not in got or item[1] == "Big", ("shown twice", item)
            got += [item for item, _ in items if item not in got]
            assert len(got) > before, "a page must advance"
            cursor = r.structured_content.get("next_cursor")
            if cursor is None:
                break
            assert f"cursor={cursor}" in text(r)
        assert cursor is None and sorted(got, key=lambda x: x[2]) == sorted(
            whole, key=lambda x: x[2]
        )
        forged = await c.call_tool("outline", {"path": "big.py", "cursor": "x" + (cursor or "abc")})
        assert code(forged) == "invalid_argument"
        # a cursor of the file as it was: an edit since (same size too) is said, not paged on
        first = await c.call_tool("outline", {"path": "big.py"})
        cursor = first.structured_content["next_cursor"]
        again = await c.call_tool("outline", {"path": "big.py", "cursor": cursor})
        assert code(again) is None, text(again)
        data = (root / "big.py").read_bytes()
        st = (root / "big.py").stat()
        (root / "big.py").write_bytes(b"# " + data[2:])  # (the first line commented out)
        os.utime(root / "big.py", ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))
        stale = await c.call_tool("outline", {"path": "big.py", "cursor": cursor})
        assert code(stale) == "invalid_argument" and "changed since" in text(stale), text(stale)
        assert "without a cursor" in text(stale)
