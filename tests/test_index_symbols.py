"""Symbols in the index (SPEC §9): stored per file at index time, looked up by name, kept
fresh by the watcher; and the ranking and snippets of ``search`` that use them (issue 10)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootgrep.index.cache import SCHEMA_VERSION
from rootgrep.index.manager import IndexManager
from rootgrep.index.search_syntax import parse_search
from rootgrep.index.store import RootIndex
from rootgrep.roots import Root, pin_root
from rootgrep.service import Service, Settings, Token

TREE = {
    "pkg/shapes.py": "class Shape:\n    def area(self):\n        return 0\n\n\ndef make_shape():\n    return Shape()\n",
    "web/app.js": "class Widget {\n  render() {\n    return 1;\n  }\n}\nfunction mountWidget() {\n  return new Widget();\n}\n",
    "srv/main.go": "package main\n\ntype Server struct {\n\tport int\n}\n\nfunc (s *Server) Serve() error {\n\treturn nil\n}\n",
    "core/lib.rs": "pub struct Engine {\n    n: u32,\n}\n\nimpl Engine {\n    pub fn start(&self) -> u32 {\n        self.n\n    }\n}\n",
    "c/util.c": "int add_numbers(int a, int b)\n{\n    return a + b;\n}\n",
    "notes.txt": "Shape Widget Server Engine add_numbers\n",
}  # fmt: skip


def wait_until(pred, seconds: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def write(tree: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)


@pytest.fixture
def indexed(tmp_path: Path) -> Iterator[tuple[Path, RootIndex]]:
    tree = tmp_path / "tree"
    write(tree, TREE)
    r = pin_root(str(tree))
    ix = RootIndex(str(tmp_path / "cache"), r.path)
    ix.sync(r.fs)
    try:
        yield tree, ix
    finally:
        ix.close()
        r.close()


def found(ix: RootIndex, name: str, **kw: object) -> list[tuple[str, str, int, int, str | None]]:
    return [
        (p.decode(), s.kind, s.line, s.end_line, s.container)
        for p, s in ix.find_symbols(name, limit=50, **kw)  # type: ignore[arg-type]
    ]


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("Shape", ("pkg/shapes.py", "class", 1, 3, None)),
        ("area", ("pkg/shapes.py", "method", 2, 3, "Shape")),
        ("make_shape", ("pkg/shapes.py", "function", 6, 7, None)),
        ("Widget", ("web/app.js", "class", 1, 5, None)),
        ("render", ("web/app.js", "method", 2, 4, "Widget")),
        ("mountWidget", ("web/app.js", "function", 6, 8, None)),
        ("Server", ("srv/main.go", "struct", 3, 5, None)),
        ("Serve", ("srv/main.go", "method", 7, 9, "Server")),
        ("Engine", ("core/lib.rs", "struct", 1, 3, None)),
        ("start", ("core/lib.rs", "method", 6, 8, "Engine")),
        ("add_numbers", ("c/util.c", "function", 1, 4, None)),
    ],
)
def test_find_symbols_finds_each_definition_with_kind_lines_and_container(
    indexed: tuple[Path, RootIndex], name: str, want: tuple[str, str, int, int, str | None]
) -> None:
    _, ix = indexed
    assert found(ix, name) == [want]  # (notes.txt names them all, and defines none)


def test_exact_lookup_is_case_sensitive_substring_is_not(
    indexed: tuple[Path, RootIndex],
) -> None:
    _, ix = indexed
    assert found(ix, "shape") == []
    assert found(ix, "SHAPE", exact=False) == [
        ("pkg/shapes.py", "class", 1, 3, None),
        ("pkg/shapes.py", "function", 6, 7, None),
    ]
    # equal names first, then path order; kind filters
    assert [f[0] for f in found(ix, "serve", exact=False)] == ["srv/main.go", "srv/main.go"]
    assert found(ix, "Serve", exact=False)[0][:2] == ("srv/main.go", "method")
    assert found(ix, "Widget", exact=False, kind="function") == [
        ("web/app.js", "function", 6, 8, None)
    ]
    assert found(ix, "a.*", exact=False) == []  # a literal, not a regex


def test_symbols_of_one_file(indexed: tuple[Path, RootIndex]) -> None:
    _, ix = indexed
    syms = ix.symbols_of(b"pkg/shapes.py")
    assert syms is not None
    assert [(s.name, s.kind, s.container) for s in syms] == [
        ("Shape", "class", None),
        ("area", "method", "Shape"),
        ("make_shape", "function", None),
    ]
    # (no signature is stored: find_symbol reads it from the file as it is now)
    assert [s.signature for s in syms] == ["", "", ""] and [s.line for s in syms] == [1, 2, 6]
    assert ix.symbols_of(b"notes.txt") == []  # indexed, no language
    assert ix.symbols_of(b"missing.py") is None


def test_an_index_of_the_previous_schema_is_rebuilt_with_symbols(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    write(tree, TREE)
    r = pin_root(str(tree))
    try:
        ix = RootIndex(str(tmp_path / "cache"), r.path)
        ix.sync(r.fs)
        ix._write_manifest()
        manifest = ix.folder.read_json("manifest.json")
        assert manifest is not None and manifest["schema_version"] == SCHEMA_VERSION == 12
        ix.folder.write(  # as an index of schema 9 (a file's first trigrams in its main doc) left it
            "manifest.json",
            ix.folder.read("manifest.json").replace(
                b'"schema_version":%d' % SCHEMA_VERSION, b'"schema_version":9'
            ),  # type: ignore[union-attr]
        )
        ix.close()
        again = RootIndex(str(tmp_path / "cache"), r.path)
        try:
            assert again.file_count == 0  # emptied: the next sync rebuilds it
            again.sync(r.fs)
            assert found(again, "Shape") == [("pkg/shapes.py", "class", 1, 3, None)]
        finally:
            again.close()
    finally:
        r.close()


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[Path, Root, IndexManager]]:
    tree = tmp_path / "tree"
    write(tree, TREE)
    r = pin_root(str(tree))
    manager = IndexManager(str(tmp_path / "cache"))
    try:
        manager.activate(r, 0)
        assert manager.wait_built(r.path, 60)
        yield tree, r, manager
    finally:
        manager.close()
        r.close()


def test_a_function_renamed_while_serving_is_found_under_its_new_name_only(
    serving: tuple[Path, Root, IndexManager],
) -> None:
    tree, r, manager = serving
    ix = manager.get(r.path).index
    assert ix is not None
    assert found(ix, "make_shape") == [("pkg/shapes.py", "function", 6, 7, None)]
    text = TREE["pkg/shapes.py"].replace("make_shape", "build_shape")
    (tree / "pkg" / "shapes.py").write_text(text)
    # the change is in the dirty set first, then folded and committed
    wait_until(lambda: found(ix, "build_shape") != [] and not manager.get(r.path).dirty)
    assert found(ix, "build_shape") == [("pkg/shapes.py", "function", 6, 7, None)]
    assert found(ix, "make_shape") == []
    os.unlink(tree / "pkg" / "shapes.py")
    wait_until(lambda: found(ix, "Shape") == [] and not manager.get(r.path).dirty)
    assert ix.symbols_of(b"pkg/shapes.py") is None


# -- ranking and snippets --------------------------------------------------------------------

RANKED = {
    # uses the name a lot, defines nothing
    "a_user.py": "from srv import HTTPServer\n" + "x = HTTPServer()\n" * 30,
    # its test: defines a subclass, uses the name
    "tests/test_srv.py": "class HTTPServer(object):\n    pass\nHTTPServer()\n",
    # the definition, once, in a long file
    "srv.py": "import os\n" + "# filler\n" * 200 + "class HTTPServer:\n    pass\n",
    "httpserver.py": "# a file named after the word: HTTPServer\nprint(1)\n",
    # a test that uses it as much as a_user.py
    "tests/test_user.py": "from srv import HTTPServer\n" + "x = HTTPServer()\n" * 30,
}


def ranked(tmp_path: Path, files: dict[str, str], query: str) -> list[str]:
    tree = tmp_path / "t"
    write(tree, files)
    r = pin_root(str(tree))
    ix = RootIndex(str(tmp_path / "c"), r.path)
    try:
        ix.sync(r.fs)
        hits = sorted(ix.rank(parse_search(query)).hits, key=lambda h: (-h[0], h[1]))
        return [h[1].decode() for h in hits]
    finally:
        ix.close()
        r.close()


def test_a_definition_outranks_a_file_name_which_outranks_uses_and_tests_count_less(
    tmp_path: Path,
) -> None:
    assert ranked(tmp_path, RANKED, "HTTPServer") == [
        "srv.py",  # defines it
        "tests/test_srv.py",  # defines it too, in a test: counts half
        "httpserver.py",  # its file name
        "a_user.py",  # uses it, many times
        "tests/test_user.py",  # the same uses, in a test
    ]


def test_a_definition_of_the_very_name_outranks_a_file_named_after_it_defining_another_case(
    tmp_path: Path,
) -> None:
    """anyhow's ``Context``: ``src/lib.rs`` defines ``trait Context``; ``src/context.rs`` is
    named after the word, uses it often and defines ``fn context`` (another case). The very
    name's definition must win (was a tie on signals, which BM25 gave to the short file)."""
    files = {
        "src/lib.rs": "pub trait Context<T> {\n    fn with(self) -> T;\n}\n" + "// filler\n" * 200,
        "src/context.rs": "impl<T> Context<T> for Option<T> {\n    fn context(self) {}\n}\n"
        + "// Context Context\n" * 5,
    }  # fmt: skip
    assert ranked(tmp_path, files, "Context")[0] == "src/lib.rs"


@pytest.mark.parametrize("folder", ["examples", "example", "benches", "testdata", "dist"])
def test_example_bench_testdata_and_build_output_folders_count_less(
    tmp_path: Path, folder: str
) -> None:
    """A demo, a benchmark, test data or a built copy (``dist/``) that defines a name ranks
    after the project's own definition, and ``find_symbols`` lists it last (express's
    ``examples/``, ripgrep's ``benches/``, lodash's ``dist/lodash.js``)."""
    files = {
        f"{folder}/a.js": "function runAll() {}\n",
        "z/lib.js": "// filler\n" * 200 + "function runAll() {}\n",
    }
    assert ranked(tmp_path, files, "runAll") == ["z/lib.js", f"{folder}/a.js"]
    r = pin_root(str(tmp_path / "t"))
    ix = RootIndex(str(tmp_path / "c"), r.path)
    try:
        ix.sync(r.fs)
        assert [p for p, *_ in found(ix, "runAll")] == ["z/lib.js", f"{folder}/a.js"]
    finally:
        ix.close()
        r.close()


def test_a_natural_language_query_drops_stop_words_and_does_not_need_every_word(
    tmp_path: Path,
) -> None:
    files = {
        "gzip.py": "def decompress(data):\n    return data\n# gzip files\n",
        "other.py": "# files here\n",
        "where.py": "where = is_ = defined = 1\n",
    }
    got = ranked(tmp_path, files, "how are gzip files decompressed")
    assert got[0] == "gzip.py" and set(got) == {"gzip.py", "other.py"}
    assert ranked(tmp_path / "2", files, "where is decompress defined") == ["gzip.py"]
    # two words: the file holding both first, then those holding one (no AND)
    both = {"a.py": "gzip\n", "b.py": "gzip decompression\n", "c.py": "nothing\n"}
    assert ranked(tmp_path / "3", both, "gzip decompression") == ["b.py", "a.py"]


def test_minus_word_excludes_whole_words_only(tmp_path: Path) -> None:
    files = {
        "server.py": "class HTTPServer:\n    pass\n# testing the server\n",
        "with_test.py": "HTTPServer\ndef test():\n    pass\n",
    }
    assert ranked(tmp_path, files, "HTTPServer -test") == ["server.py"]


def test_snippets_show_the_definition_line_first_then_whole_matching_lines(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "t"
    long_line = "x = [" + ", ".join(["HTTPServer"] + ["other"] * 100) + "]"
    write(tree, {
        "srv.py": "from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer\n"
        + long_line + "\n" + "# filler\n" * 50 + "class HTTPServer(object):\n    pass\n",
    })  # fmt: skip
    r = pin_root(str(tree))
    svc_manager = IndexManager(str(tmp_path / "c"))
    try:
        svc_manager.activate(r, 0)
        assert svc_manager.wait_built(r.path, 60)
        svc = Service([r], Settings(), indexes=svc_manager)
        hit = svc.search([r], Token(), query="HTTPServer").results[0]
        lines = [(s.line, s.text) for s in hit.snippets]
        assert lines[0] == (53, "class HTTPServer(object):")
        assert lines[1] == (
            1,
            "from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer",
        )
        assert lines[2][0] == 2 and "HTTPServer" in lines[2][1]
        assert len(lines[2][1]) <= 302 and lines[2][1].endswith("…")
    finally:
        svc_manager.close()
        r.close()


def test_a_cancelled_search_stops_while_it_ranks(indexed: tuple[Path, RootIndex]) -> None:
    """``rank`` asks its ``check`` between the term queries of every signal, so a call whose
    root was removed stops there, not after scoring every document."""
    _, ix = indexed
    asked = []

    def check() -> None:
        asked.append(1)
        if len(asked) == 3:
            raise RuntimeError("cancelled")

    with pytest.raises(RuntimeError, match="cancelled"):
        ix.rank(parse_search("Shape area widget"), check)
    assert len(asked) == 3
    assert ix.rank(parse_search("Shape area widget")).hits  # (the same search, not cancelled)


@pytest.mark.parametrize("query", ["where is handle defined", "handle: where is it defined?"])
def test_a_stop_word_the_code_defines_is_the_name_asked_about(tmp_path: Path, query: str) -> None:
    """Stop words are dropped from natural queries, but "where is handle defined" asks for
    ``handle``: a dropped word the index defines as a symbol is put back (the words that
    only frame the question, "where", "is", "defined", never are)."""
    tree = tmp_path / "tree"
    write(tree, {
        "web/handlers.py": "def handle(request):\n    return request\n",
        "notes.md": "where is handle defined? where it is defined, the request code says\n",
        **{f"use{i}.py": "from web.handlers import handle\nhandle(None)\n" for i in range(3)},
    })  # fmt: skip
    r = pin_root(str(tree))
    try:
        ix = RootIndex(str(tmp_path / "cache"), r.path)
        ix.sync(r.fs)
        hits = sorted(ix.rank(parse_search(query)).hits, key=lambda h: (-h[0], h[1]))
        assert hits[0][1] == b"web/handlers.py", [h[1] for h in hits]
        ix.close()
    finally:
        r.close()
