"""Odd file names (any bytes but NUL and '/': invalid UTF-8, line breaks, bytes that look like
encoded surrogates) never disable a tool for a root, and globs still match them.

Before: one file named ``caf\\xe9.py`` anywhere in a root made ``find_files`` with a glob and
every ``grep`` with ``include``/``exclude`` fail "unexpectedly" for the whole root (the glob
engine could not encode the name), and ``*.py`` missed ``x.py`` in a directory whose name
holds a line break. Names are fuzzed with hypothesis and sent through the real MCP client.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_helpers import code, connect, text

from rootgrep.audit import Audit
from rootgrep.confine import display
from rootgrep.roots import pin_root
from rootgrep.server import build_server
from rootgrep.service import Service, Settings

ODD = [b"caf\xe9", b"\xed\xa0\x80", b"\xff\xfe", b"a\nb", b"\n", b"x\r", b"\xc3", b" ", b"\\",
       b"\xf0\x9f\x98\x80", b"\xe2\x80\xae", b"[ab]", b"*", b"?", b"!x", b"#x"]  # fmt: skip
SUFFIXES = [b".py", b".txt", b"", b".py\n", b".PY"]
RESERVED = {b".", b"..", b".gitignore", b".ignore"}


def _base() -> st.SearchStrategy[bytes]:
    raw = st.binary(min_size=1, max_size=8).map(
        lambda b: b.replace(b"/", b"_").replace(b"\0", b"_")
    )
    return st.one_of(raw, st.sampled_from(ODD))


@st.composite
def trees(draw: st.DrawFn) -> dict[bytes, bool]:
    """root-relative path -> is a file; at most one level of odd directories."""
    out: dict[bytes, bool] = {}
    dirs = draw(st.lists(_base(), max_size=3, unique=True))
    dirs = [d for d in dirs if d not in RESERVED]
    for d in dirs:
        out[d] = False
    for _ in range(draw(st.integers(1, 10))):
        name = draw(_base()) + draw(st.sampled_from(SUFFIXES))
        if name in RESERVED or name in dirs or len(name) > 255:
            continue
        where = draw(st.sampled_from([b"", *dirs]))
        out[where + b"/" + name if where else name] = True
    return out


def _hidden(path: bytes) -> bool:
    return any(c.startswith(b".") for c in path.split(b"/"))


def _py(path: bytes) -> bool:
    """Whether ``*.py`` selects ``path``: as in a ``.gitignore``, it matches a name at any
    depth, and a directory it matches takes every file below it (``x.py/c.txt``)."""
    return any(c.endswith(b".py") for c in path.split(b"/"))


async def _check(server: object, tree: dict[bytes, bool]) -> None:
    files = [p for p, is_file in tree.items() if is_file]
    shown = {p: display(p) for p in files}
    py = sorted(shown[p] for p in files if _py(p))
    not_py = sorted(shown[p] for p in files if not _py(p))
    visible = {display(p) for p in tree if not _hidden(p)}
    async with connect(server, "legacy") as c:
        r = await c.call_tool("find_files", {"pattern": "*.py", "hidden": True})
        assert code(r) is None, text(r)
        assert sorted(f["path"] for f in r.structured_content["files"]) == py
        r = await c.call_tool("find_files", {"pattern": "*", "hidden": True, "max_results": 1000})
        assert code(r) is None, text(r)
        assert sorted(f["path"] for f in r.structured_content["files"]) == sorted(shown.values())
        for include, exclude, expected in (
            (["*.py"], None, py),
            (None, ["*.py"], not_py),
            (["*"], ["*.py"], not_py),
        ):
            args = {"pattern": "hello", "hidden": True, "max_results": 1000}
            if include:
                args["include"] = include
            if exclude:
                args["exclude"] = exclude
            r = await c.call_tool("grep", args)
            assert code(r) is None, text(r)
            assert sorted(m["path"] for m in r.structured_content["matches"]) == expected, args
        r = await c.call_tool("directory_tree", {"max_depth": 5})
        assert code(r) is None, text(r)
        seen: set[str] = set()

        def walk(node: dict, prefix: str) -> None:
            for ch in node.get("children") or []:
                rel = prefix + ch["name"]
                seen.add(rel)
                walk(ch, rel + "/")

        walk(r.structured_content["tree"], "")
        assert seen == visible
        r = await c.call_tool("list_directory", {})
        assert code(r) is None, text(r)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("odd") / "root"
    root.mkdir()
    r = pin_root(str(root))
    service = Service([r], Settings(), Audit(None))
    yield root, build_server(service)
    r.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tree=trees())
def test_odd_names_through_every_globbing_tool(served, tree: dict[bytes, bool]) -> None:  # type: ignore[no-untyped-def]
    root, server = served
    broot = os.fsencode(root)
    for entry in os.listdir(broot):
        p = os.path.join(broot, entry)
        shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
    for rel, is_file in sorted(tree.items(), key=lambda kv: kv[1]):  # directories first
        p = os.path.join(broot, rel)
        if is_file:
            with open(p, "wb") as f:
                f.write(b"hello\n")
        else:
            os.mkdir(p)
    anyio.run(_check, server, tree)


@pytest.mark.parametrize(
    "name",
    [
        b"caf\xe9.py",
        b"\xed\xa0\x80.py",
        b"a\nb/x.py",
        b"x\n.py",
        b"\xff/\xfe.py",
        b".py/_.txt",
        b"x.py/c.txt",
        b"a\n.py/b.txt",
    ],
)
def test_fixed_odd_names(served, name: bytes) -> None:  # type: ignore[no-untyped-def]
    tree: dict[bytes, bool] = {}
    parts = name.split(b"/")
    for i in range(1, len(parts)):
        tree[b"/".join(parts[:i])] = False
    tree[name] = True
    tree[b"plain.txt"] = True
    test_odd_names_through_every_globbing_tool.hypothesis.inner_test(served, tree)  # type: ignore[attr-defined]


def test_globs_see_one_replacement_per_odd_byte(tmp_path: Path) -> None:
    from rootgrep.globs import Globs, glob_text

    assert glob_text(b"caf\xe9.py") == "caf\ufffd.py"
    assert glob_text(b"\xed\xa0\x80") == "\ufffd" * 3
    assert glob_text(b"a\nb") == "a\ufffdb"
    assert glob_text("x\udce9") == "x\ufffd"  # a lone surrogate in a pattern (from JSON)
    assert Globs(["caf?.py"]).match(b"caf\xe9.py")
    assert not Globs(["caf?.py"]).match(b"caf\xc3\xa9\xe9.py")
    assert Globs(["caf?.py"]).match("café.py".encode())
    assert not Globs(["*.py"]).match(b"x.py\n")
