"""Generated inputs (issue 12, item 4): hypothesis over URIs, root lists, paths and tool
arguments, asserting that no answer names anything outside the roots, that nothing outside
changes, and that every tool error starts with a ``[code]``.

- URIs and root lists go through ``roots.py``'s parsing functions directly
  (``parse_file_uri``, ``accept_client_root``, ``effective_roots``, ``resolve_target``);
- tool arguments go through the real MCP client (the SDK's in-memory transport, the real
  server object from ``build_server``), read tools against a read-only server with two
  operator roots and write tools against a writable one, over a real tree holding symlinks
  out (relative, absolute, through ``/proc/self/root``), odd names, a FIFO and a symlink loop;
- client root lists also go over the wire: a handshake-era client announces a generated
  list, sends ``roots/list_changed``, and calls tools.

Outside the roots lie files holding ``MARKER`` and a name no generated input spells
(``unlisted-q7z``): neither may ever appear in an answer (text or structured); an absolute
path beneath the test's directory may appear only inside a root, or as an echo of the
request's own argument; every file and directory outside the roots keeps its bytes, mode,
inode and mtime.

Short by default (``make test``: a few hundred examples, derandomized, so CI is stable);
``ROOTGREP_FUZZ=1`` (``make fuzz``) runs the benchmark-length version (over 100k examples in
all) and prints how many examples each test ran and how long it took.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import sys
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.client import Client
from mcp.types import CallToolResult, ListRootsResult, Root

from rootgrep.audit import Audit
from rootgrep.errors import ERROR_CODES, RootgrepError
from rootgrep.roots import (
    accept_client_root,
    effective_roots,
    parse_file_uri,
    path_to_uri,
    pin_root,
    resolve_target,
)
from rootgrep.server import build_server
from rootgrep.service import Service, Settings
from support import FUZZ, MARKER

UNLISTED = "unlisted-q7z"  # the name of a file outside: no generated input spells it
RAN: Counter[str] = Counter()
TOOK: Counter[str] = Counter()


def examples(short: int, long: int) -> Any:
    """Settings: ``short`` derandomized examples in ``make test``, ``long`` under ROOTGREP_FUZZ."""
    return settings(
        max_examples=long if FUZZ else short,
        derandomize=not FUZZ,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# ---- the world --------------------------------------------------------------------------------

ODD_NAMES = [b"caf\xe9.txt", b"a\nb.txt", b"%2e%2e", b"..\\x", "．．".encode(), b"sp ace.py",
             b"\xff\xfe", b"x:y.txt", b"-rf", b"#f", b"?q"]  # fmt: skip


def populate(root: Path, base: Path) -> None:
    """The tree every root gets: plain files, odd names, links out, a FIFO, a loop."""
    broot = os.fsencode(root)
    (root / "sub").mkdir()
    (root / ".hidden").mkdir()
    (root / "a.txt").write_text("alpha needle SECRET-not\n")
    (root / "sub" / "b.py").write_text("def needle():\n    return 'beta'\n")
    (root / ".hidden" / "h.txt").write_text("hidden needle\n")
    (root / ".gitignore").write_text("ignored.txt\n")
    (root / "ignored.txt").write_text("ignored needle\n")
    (root / "bin.dat").write_bytes(b"\0binary needle\n")
    for name in ODD_NAMES:
        with open(os.path.join(broot, name), "wb") as f:
            f.write(b"odd needle\n")
    os.mkfifo(root / "pipe")
    os.symlink("../outside", root / "out_dir")
    os.symlink("../outside/secret.txt", root / "out_file")
    os.symlink(str(base / "outside" / "secret.txt"), root / "abs_out")
    os.symlink("/proc/self/root" + str(base / "outside"), root / "proc_out")
    os.symlink("../root-evil", root / "evil_dir")
    os.symlink("a.txt", root / "in_link")
    os.symlink("loop", root / "loop")


def snapshot(base: Path, skip: set[Path]) -> dict[str, tuple[Any, ...]]:
    """Every entry beneath ``base`` outside ``skip``: type, mode, inode, size, mtime, and a
    file's hash or a link's target."""
    out: dict[str, tuple[Any, ...]] = {}
    bskip = {os.fsencode(p) for p in skip}
    for dirpath, dirnames, filenames in os.walk(os.fsencode(base)):
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in bskip]
        for name in [*dirnames, *filenames]:
            p = os.path.join(dirpath, name)
            if p in bskip:
                continue
            st_ = os.lstat(p)
            extra: Any = None
            if stat.S_ISLNK(st_.st_mode):
                extra = os.readlink(p)
            elif stat.S_ISREG(st_.st_mode):
                with open(p, "rb") as f:
                    extra = hashlib.sha256(f.read()).hexdigest()
            out[os.fsdecode(p)] = (st_.st_mode, st_.st_ino, st_.st_size, st_.st_mtime_ns, extra)
        st_ = os.lstat(dirpath)
        out[os.fsdecode(dirpath) + "/."] = (st_.st_mode, st_.st_ino, st_.st_mtime_ns)
    return out


class World:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "root"
        self.root2 = base / "root2"
        self.rootw = base / "rootw"
        self.cache = base / "cache"
        for r in (self.root, self.root2, self.rootw):
            r.mkdir()
            populate(r, base)
        outside = base / "outside"
        outside.mkdir()
        (outside / "secret.txt").write_text(f"{MARKER} needle\n")
        (outside / f"{UNLISTED}.txt").write_text(f"{MARKER} needle\n")
        (outside / "deep").mkdir()
        (outside / "deep" / "secret.py").write_text(f"def needle(): '{MARKER}'\n")
        evil = base / "root-evil"
        evil.mkdir()
        (evil / "x.txt").write_text(f"{MARKER} evil needle\n")
        self.roots = [self.root, self.root2]

    def reset_writable(self) -> None:
        for entry in os.listdir(os.fsencode(self.rootw)):
            p = os.path.join(os.fsencode(self.rootw), entry)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
        populate(self.rootw, self.base)

    def outside_state(self, served: list[Path]) -> dict[str, tuple[Any, ...]]:
        return snapshot(self.base, {*served, self.cache})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("gen"))


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    if FUZZ:
        total = sum(RAN.values())
        lines = [f"{name}: {n} examples in {TOOK[name]:.0f} s" for name, n in sorted(RAN.items())]
        sys.stderr.write(
            "\ngenerated inputs:\n  "
            + "\n  ".join(lines)
            + f"\n  total: {total} examples in {sum(TOOK.values()):.0f} s\n"
        )


class Clock:
    """Counts a test's examples and the time they took (the ROOTGREP_FUZZ report)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        RAN[self.name] += 1
        TOOK[self.name] += time.perf_counter() - self.t0


# ---- what no answer may hold ----------------------------------------------------------------


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def _inside(p: str, roots: list[Path]) -> bool:
    parts = p.split("/")
    for r in roots:
        rp = str(r).split("/")
        if parts[: len(rp)] == rp:
            return True
    return False


def assert_confined(world: World, roots: list[Path], args: Any, answer: str) -> None:
    """No secret, no unlisted outside name, and no absolute path beneath the test's
    directory outside ``roots`` except as an echo of one of the request's own strings."""
    for form in (answer, urllib.parse.unquote(answer, errors="replace")):
        assert MARKER not in form, answer[:2000]
        assert UNLISTED not in form, answer[:2000]
    echoes = sorted({s for s in _strings(args) if len(s) >= 2}, key=len, reverse=True)
    base = str(world.base)
    for form in (answer, urllib.parse.unquote(answer, errors="replace")):
        for e in echoes:
            for spelled in (e, urllib.parse.unquote(e, errors="replace"), e[:200]):
                # (an echo that is part of the base path itself, such as "root" or the base,
                # is not erased: it would erase the base everywhere, and the check with it)
                if len(spelled) >= 2 and spelled not in base:
                    form = form.replace(spelled, "\0")
        for m in re.finditer(re.escape(base) + r"[^\s'\"\\,;:)\]}]*", form):
            assert _inside(m.group(0), roots), (m.group(0), answer[:2000])


def assert_coded(r: CallToolResult) -> None:
    if not r.is_error:
        return
    t = "\n".join(getattr(c, "text", "") for c in r.content)
    m = re.match(r"\[([a-z_]+)\] ", t)
    assert m is not None and m.group(1) in ERROR_CODES, t[:500]
    assert "failed unexpectedly" not in t, t[:500]


def everything(r: CallToolResult) -> str:
    texts = "\n".join(getattr(c, "text", "") for c in r.content)
    return texts + "\n" + json.dumps(r.structured_content or {}, ensure_ascii=False)


# ---- strategies -----------------------------------------------------------------------------

NAMES = ["a.txt", "sub", "b.py", ".hidden", "h.txt", ".gitignore", "ignored.txt", "bin.dat",
         "pipe", "out_dir", "out_file", "abs_out", "proc_out", "evil_dir", "in_link", "loop",
         "..", ".", "", "outside", "secret.txt", "root-evil", "x.txt", "deep", "secret.py",
         "root", "root2", "rootw", "cache", "~", "%2e%2e", "%2E%2e", "..%2f", "%2f", "%00",
         "%252e%252e", "%c0%ae", "．．", "‥", "／", "..\\..", "C:\\x", "\\\\host\\share",
         "a%2fb", "sp ace.py", "caf%e9.txt", "a%0Ab.txt", "-rf", "#f", "?q", "x:y.txt",
         "ROOT", "proc", "self", "fd", "0", "etc", "passwd"]  # fmt: skip


ENTRIES = ["out_dir", "out_file", "abs_out", "proc_out", "evil_dir", "loop", "pipe", "in_link",
           "out_dir/secret.txt", "proc_out/deep", "evil_dir/x.txt", "..", "../outside",
           "../outside/secret.txt", "a.txt", "sub", "bin.dat", "%2e%2e/outside", "..%2foutside",
           ""]  # fmt: skip


@st.composite
def relpaths(draw: st.DrawFn) -> str:
    parts = draw(
        st.lists(
            st.one_of(st.sampled_from(NAMES), st.text(min_size=1, max_size=6)),
            min_size=1,
            max_size=5,
        )
    )
    tail = draw(st.sampled_from(["", "", "/", "/."]))
    return "/".join(parts) + tail


def path_args(world: World) -> st.SearchStrategy[str]:
    """Relative paths, absolute paths and URIs, inside, beside and outside the roots."""
    base = str(world.base)
    prefixes = ["", "", "/", base + "/", base + "/root/", base + "/root2/", base + "/rootw/",
                base + "/root-evil/", base + "/outside/", "/proc/self/root" + base + "/",
                base + "/root/sub/../", base + "/root/../"]  # fmt: skip

    at_roots = [base + "/root/", base + "/root2/", base + "/rootw/", "file://" + base + "/root/",
                "file://" + base + "/rootw/"]  # fmt: skip

    @st.composite
    def make(draw: st.DrawFn) -> str:
        if draw(st.integers(0, 3)) == 0:  # one entry of a root, plainly: a link out, the FIFO
            return draw(st.sampled_from(at_roots)) + draw(st.sampled_from(ENTRIES))
        prefix = draw(st.sampled_from(prefixes))
        rel = draw(relpaths())
        p = prefix + rel if prefix or not rel.startswith("/") else rel
        style = draw(st.sampled_from(["plain", "plain", "uri", "uri-quoted", "uri-odd"]))
        if style == "plain" or not p.startswith("/"):
            return p
        if style == "uri":
            return "file://" + p
        if style == "uri-quoted":
            return "file://" + urllib.parse.quote(p)
        schemes = ["FILE://", "file://localhost", "file:", "file://evil", "http://",
                   "file:///..", "file://localhost/."]  # fmt: skip
        scheme = draw(st.sampled_from(schemes))
        return scheme + p + draw(st.sampled_from(["", "", "?q", "#f", "%00"]))

    return make()


def root_args(world: World) -> st.SearchStrategy[str | None]:
    base = str(world.base)
    return st.one_of(
        st.none(),
        st.none(),
        st.sampled_from(
            [
                "root",
                "root2",
                "rootw",
                "outside",
                base,
                base + "/root",
                base + "/outside",
                path_to_uri(os.fsencode(world.root)),
                path_to_uri(os.fsencode(world.root)) + "/",
                "file:///",
                "file://" + base + "/root/../outside",
                "",
            ]
        ),
        st.text(max_size=8),
    )


PATTERN_WORDS = ["needle", "SECRET", "MARKER", "7f3a9c", "evil", "S.C", "(?i)secret",
                 "needle|SECRET", ".*", "^", "[", "(", "\\", "a{99999}", "", "odd", "def",
                 "beta", "*", "**/*", "*.txt", "{a,b}*", "!x", "[!a]*"]  # fmt: skip
PATTERNS = st.one_of(st.sampled_from(PATTERN_WORDS), st.text(max_size=10))
GLOBS = st.one_of(
    st.none(),
    st.sampled_from(["*.txt", "*.py", "sub/*", "**/secret*", "../*", "/*", "{a,b}*", "!*"]),
    st.lists(st.sampled_from(["*.txt", "*", "../outside/*", "*.py", "[", "{"]), max_size=3),
)
ODD_VALUES = st.one_of(
    st.integers(-(2**40), 2**40), st.booleans(), st.none(), st.text(max_size=5),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)  # fmt: skip

# (the tools that take a path and show what is there come up more often)
READ_TOOLS = ["grep", "grep", "search", "find_symbol", "find_files", "read_file", "read_file",
              "outline", "list_directory", "directory_tree", "file_info", "file_info",
              "list_roots"]  # fmt: skip
WRITE_TOOLS = ["write_file", "edit_file", "create_directory", "move_path", "copy_path",
               "delete_path"]  # fmt: skip


def tool_calls(world: World, tools: list[str]) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    paths = path_args(world)
    roots = root_args(world)
    ints = st.one_of(st.integers(-3, 30), st.integers(-(2**31), 2**31))
    bools = st.booleans()
    optional: dict[str, st.SearchStrategy[Any]] = {
        "root": roots, "regex": bools, "case_sensitive": bools, "whole_word": bools,
        "include": GLOBS, "exclude": GLOBS, "hidden": bools, "no_ignore": bools,
        "output_mode": st.sampled_from(["content", "files_with_matches", "count", "x"]),
        "context": ints, "before": ints, "after": ints, "max_line_chars": ints,
        "max_results": ints, "start_line": ints, "end_line": ints, "max_lines": ints,
        "max_depth": ints, "max_entries": ints, "exact": bools,
        "kind": st.sampled_from(["function", "class", "x", "method"]),
        "cursor": st.one_of(st.text(max_size=20), st.just("eyJ4IjoxfQ")),
        "create_only": bools, "overwrite": bools, "recursive": bools, "dry_run": bools,
    }  # fmt: skip
    required: dict[str, dict[str, st.SearchStrategy[Any]]] = {
        "grep": {"pattern": PATTERNS}, "search": {"query": PATTERNS},
        "find_symbol": {"name": PATTERNS}, "find_files": {"pattern": PATTERNS},
        "read_file": {"path": paths}, "outline": {"path": paths}, "file_info": {"path": paths},
        "list_directory": {}, "directory_tree": {}, "list_roots": {},
        "write_file": {"path": paths, "content": st.text(max_size=20)},
        "edit_file": {"path": paths, "edits": st.lists(st.fixed_dictionaries(
            {"old_text": st.sampled_from(["needle", "alpha", "", "x"]),
             "new_text": st.text(max_size=8)}), max_size=2)},
        "create_directory": {"path": paths},
        "move_path": {"source": paths, "destination": paths},
        "copy_path": {"source": paths, "destination": paths},
        "delete_path": {"path": paths},
    }  # fmt: skip
    takes_path = {"grep", "search", "find_symbol", "find_files", "list_directory",
                  "directory_tree"}  # fmt: skip

    @st.composite
    def make(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
        tool = draw(st.sampled_from(tools))
        args = {k: draw(v) for k, v in required[tool].items()}
        names = sorted(optional)
        for k in draw(st.lists(st.sampled_from(names), max_size=4, unique=True)):
            args[k] = draw(optional[k])
        if tool in takes_path and draw(st.booleans()):
            args["path"] = draw(paths)
        if draw(st.integers(0, 19)) == 0:  # a wrong type, an unknown name, a missing one
            how = draw(st.sampled_from(["type", "unknown", "missing"]))
            if how == "type" and args:
                args[draw(st.sampled_from(sorted(args)))] = draw(ODD_VALUES)
            elif how == "unknown":
                args[draw(st.sampled_from(["bogus", "paths", "Root", "__proto__"]))] = 1
            elif args:
                del args[draw(st.sampled_from(sorted(args)))]
        return tool, {k: v for k, v in args.items() if not (v is None and draw(st.booleans()))}

    return make()


# ---- servers and clients over the SDK's in-memory transport ----------------------------------


class Stub:
    """A client's roots: raw URIs sent unmodified (``model_construct``)."""

    def __init__(self) -> None:
        self.uris: list[str] = []

    async def __call__(self, context: Any) -> ListRootsResult:
        return ListRootsResult.model_construct(
            roots=[Root.model_construct(uri=u, name=None) for u in self.uris]
        )


class Served:
    def __init__(self, client: Client, portal: Any, roots: list[Path], stub: Stub | None) -> None:
        self.client, self.portal, self.roots, self.stub = client, portal, roots, stub

    def call(self, tool: str, args: dict[str, Any]) -> CallToolResult:
        async def go() -> CallToolResult:
            with anyio.fail_after(60):  # a hang guard
                return await self.client.call_tool(tool, args)

        return self.portal.call(go)


@pytest.fixture(scope="module")
def portal() -> Iterator[Any]:
    with anyio.from_thread.start_blocking_portal("asyncio") as p:
        yield p


def _serve(
    portal: Any, roots: list[Path], *, allow_write: bool, index: Any, stub: Stub | None
) -> Iterator[Served]:
    pins = [pin_root(str(p)) for p in roots]
    if index is not None:
        for r in pins:
            index.activate(r, 0)
    service = Service(pins, Settings(allow_write=allow_write), Audit(None), index)
    server = build_server(service)
    cm = portal.wrap_async_context_manager(Client(server, mode="legacy", list_roots_callback=stub))
    client = cm.__enter__()
    try:
        yield Served(client, portal, roots, stub)
    finally:
        cm.__exit__(None, None, None)
        for r in pins:
            r.close()


@pytest.fixture(scope="module")
def reader(world: World, portal: Any) -> Iterator[Served]:
    from rootgrep.index.manager import IndexManager

    index = IndexManager(str(world.cache))
    try:
        yield from _serve(portal, world.roots, allow_write=False, index=index, stub=None)
    finally:
        index.close()


@pytest.fixture(scope="module")
def writer(world: World, portal: Any) -> Iterator[Served]:
    yield from _serve(portal, [world.rootw], allow_write=True, index=None, stub=None)


@pytest.fixture(scope="module")
def announcer(world: World, portal: Any) -> Iterator[Served]:
    yield from _serve(portal, world.roots, allow_write=False, index=None, stub=Stub())


# ---- tool arguments through the real client --------------------------------------------------


@pytest.fixture(scope="module")
def read_calls(world: World) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    return tool_calls(world, READ_TOOLS)


@pytest.fixture(scope="module")
def write_calls(world: World) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    return tool_calls(world, [*WRITE_TOOLS, "read_file", "list_directory", "grep"])


@examples(short=150, long=35_000)
@given(data=st.data())
def test_read_tools_never_answer_outside_the_roots(
    world: World, reader: Served, read_calls: Any, data: st.DataObject
) -> None:
    before = world.outside_state(world.roots) if RAN["read tools"] % 500 == 0 else None
    tool, args = data.draw(read_calls)
    with Clock("read tools"):
        r = reader.call(tool, args)
        assert_coded(r)
        assert_confined(world, world.roots, args, everything(r))
    if before is not None:
        assert world.outside_state(world.roots) == before


@examples(short=80, long=8_000)
@given(data=st.data())
def test_write_tools_change_nothing_outside_the_root(
    world: World, writer: Served, write_calls: Any, data: st.DataObject
) -> None:
    world.reset_writable()
    before = world.outside_state([world.rootw])
    tool, args = data.draw(write_calls)
    with Clock("write tools"):
        r = writer.call(tool, args)
        assert_coded(r)
        assert_confined(world, [world.rootw], args, everything(r))
        assert world.outside_state([world.rootw]) == before


# ---- root lists: over the wire and through roots.py --------------------------------------------


def root_uris(world: World) -> st.SearchStrategy[str]:
    """Client root URIs: mostly well-formed file URIs inside, at, above, beside and outside
    the operator roots (through links too), with encoding tricks."""
    base = str(world.base)
    spots = ["/root", "/root/sub", "/root/.hidden", "/root/out_dir", "/root/evil_dir",
             "/root/proc_out", "/root/in_link", "/root/loop", "/root/pipe", "/root2", "/rootw",
             "", "/outside", "/outside/deep", "/root-evil", "/root/sub/..", "/root/./sub",
             "/root/%2e%2e", "/root/%2E%2E/outside", "/root/..%2foutside", "/root%2fsub",
             "/root/%252e%252e", "/ROOT", "/root/．．", "/cache", "/root/nonexistent"]  # fmt: skip

    @st.composite
    def make(draw: st.DrawFn) -> str:
        spot = draw(st.sampled_from(spots))
        p = base + spot if draw(st.integers(0, 9)) else "/proc/self/root" + base + spot
        schemes = ["file://", "file://", "FILE://", "file://localhost", "file:", "file://evil",
                   "http://", "file:/"]  # fmt: skip
        scheme = draw(st.sampled_from(schemes))
        quoted = urllib.parse.quote(p, safe="/%") if draw(st.booleans()) else p
        tail = draw(st.sampled_from(["", "", "", "/", "?x", "#y", "%00", "/.", "/.."]))
        return scheme + quoted + tail

    return st.one_of(make(), make(), st.text(max_size=12))


@pytest.fixture(scope="module")
def root_lists(world: World) -> st.SearchStrategy[list[str]]:
    return st.lists(root_uris(world), max_size=5)


ANNOUNCED_CALLS = [("list_roots", {}), ("grep", {"pattern": "needle", "hidden": True}),
                   ("find_files", {"pattern": "*", "hidden": True}),
                   ("directory_tree", {"max_depth": 4})]  # fmt: skip


@examples(short=40, long=4_000)
@given(data=st.data())
def test_announced_root_lists_never_widen_the_scope(
    world: World, announcer: Served, root_lists: Any, read_calls: Any, data: st.DataObject
) -> None:
    assert announcer.stub is not None
    uris = data.draw(root_lists)
    tool, args = data.draw(st.one_of(st.sampled_from(ANNOUNCED_CALLS), read_calls))
    with Clock("announced root lists"):
        announcer.stub.uris = uris
        announcer.portal.call(announcer.client.send_roots_list_changed)
        r = announcer.call("list_roots", {})
        assert not r.is_error
        for root in r.structured_content["roots"]:
            path = os.fsdecode(parse_file_uri(root["uri"]))
            assert _inside(path, world.roots), (uris, root)
            assert os.path.realpath(path) == path
        r = announcer.call(tool, args)
        assert_coded(r)
        assert_confined(world, world.roots, [args, uris], everything(r))


@examples(short=150, long=40_000)
@given(uri=st.one_of(st.text(max_size=40), st.builds(lambda a, b: a + b, st.sampled_from(
    ["file://", "FILE:", "file:/", "file://localhost", "file://x", "file:///", "fIlE://"]),
    st.text(max_size=30))))  # fmt: skip
def test_parse_file_uri_gives_an_absolute_path_or_invalid_uri(uri: str) -> None:
    with Clock("parse_file_uri"):
        try:
            raw = parse_file_uri(uri)
        except RootgrepError as e:
            assert e.code == "invalid_uri" and str(e).startswith("[invalid_uri] ")
            return
        assert raw.startswith(b"/") and b"\0" not in raw
        assert parse_file_uri(path_to_uri(raw)) == raw  # the canonical URI names the same path


@examples(short=60, long=14_000)
@given(data=st.data())
def test_root_lists_intersect_to_directories_inside_the_operator_roots(
    world: World, root_lists: Any, data: st.DataObject
) -> None:
    uris = data.draw(root_lists)
    operator = [pin_root(str(world.root)), pin_root(str(world.root2))]
    accepted = []
    with Clock("root lists"):
        try:
            for u in uris:
                try:
                    accepted.append(accept_client_root(u))
                except RootgrepError as e:
                    assert e.code == "invalid_uri", str(e)
            for r in effective_roots(accepted, operator):
                path = os.fsdecode(r.path)
                assert _inside(path, world.roots), (uris, path)
                assert os.path.realpath(path) == path
                pinned, there = os.fstat(r.fs.fd), os.stat(path)
                assert (pinned.st_dev, pinned.st_ino) == (there.st_dev, there.st_ino)
                assert r.still_inside()
                target = data.draw(path_args(world))
                try:
                    got, comps = resolve_target([r], target)
                except RootgrepError as e:
                    assert str(e).startswith(f"[{e.code}] ") and e.code in ERROR_CODES
                    continue
                assert got is r and all(b"/" not in c and b"\0" not in c for c in comps)
        finally:
            for r in accepted + operator:
                r.close()


# ---- what the generated inputs found, pinned ---------------------------------------------------


def test_no_roots_names_the_roots_as_announced_not_where_their_links_lead(
    world: World, announcer: Served
) -> None:
    """Found by ``test_announced_root_lists_never_widen_the_scope``: a client root announced
    through a link inside the operator's root that leads out of it was resolved when
    accepted, and ``[no_roots]`` then named the link's target (a directory outside every
    root) by its canonical URI. It names the roots as the client announced them."""
    assert announcer.stub is not None
    link = f"file://{world.base}/root/out_dir"
    for uris in ([link], [f"file:///proc/self/root{world.base}/root/out_dir"]):
        announcer.stub.uris = uris
        announcer.portal.call(announcer.client.send_roots_list_changed)
        r = announcer.call("grep", {"pattern": "needle"})
        shown = everything(r)
        assert r.is_error and shown.startswith("[no_roots] "), shown
        assert uris[0] in shown  # what the client announced, as it spelled it
        assert str(world.base / "outside") not in shown, shown
        assert_confined(world, world.roots, uris, shown)
