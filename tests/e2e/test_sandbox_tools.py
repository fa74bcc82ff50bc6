"""Every tool of a ``serve --sandbox`` process (Landlock), over stdio and streamable HTTP,
through the real MCP client: answers inside the roots (the index built in the cache, every
tree-sitter grammar used), writes refused without ``--allow-write`` and done with it, nothing
of the outside ever shown, a client root outside the operator roots refused. A module the
server would import lazily after the restriction, or a file it would open by name outside
the rules, shows here as a failed call or a warning on the server's stderr."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp_helpers import RootsStub, code, everything, text, uri
from test_transports import http_server, stdio

from rootgrep.sandbox import abi_version
from support import MARKER, checksum

pytestmark = pytest.mark.anyio

ABI, WHY = abi_version()
needs_landlock = pytest.mark.skipif(ABI == 0, reason=f"no Landlock here: {WHY}")

# one definition per supported language: find_symbol finds each through the index, so every
# grammar must have been loaded before the restriction
SOURCES = {
    "a.py": ('def needle_py():\n    return "needle"\n', "needle_py"),
    "b.js": ('function needleJs() { return "needle"; }\n', "needleJs"),
    "c.ts": ('function needleTs(): string { return "needle"; }\n', "needleTs"),
    "d.tsx": ("function NeedleTsx() { return <div>needle</div>; }\n", "NeedleTsx"),
    "e.go": ('package main\n\nfunc NeedleGo() string { return "needle" }\n', "NeedleGo"),
    "f.rs": ('fn needle_rs() -> &\'static str { "needle" }\n', "needle_rs"),
    "g.c": ("int needle_c(void) { return 1; } /* needle */\n", "needle_c"),
    "h.cpp": ("int needle_cpp() { return 1; } // needle\n", "needle_cpp"),
    "I.java": ("class NeedleJava { int needle() { return 1; } }\n", "NeedleJava"),
}
# what a server's stderr must never hold: a failed import, a refused open, a failed build
TROUBLE = ("Traceback", "Permission denied", "PermissionError", "ImportError", "failed",
           "EACCES", "ModuleNotFoundError")  # fmt: skip


@pytest.fixture
def served(world: Path) -> Path:
    root = world / "root"
    for name, (body, _sym) in SOURCES.items():
        (root / "src" / name).parent.mkdir(exist_ok=True)
        (root / "src" / name).write_text(body)
    (root / "notes.txt").write_text("a needle in the notes\n")
    return root


@pytest.fixture(autouse=True)
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every server started here opens the outside secret by name once restricted (the
    test-only hook) and says on stderr what the kernel answered."""
    monkeypatch.setenv("ROOTGREP_TEST_SANDBOX_PROBE", str(tmp_path / "outside" / "secret.txt"))


@asynccontextmanager
async def sandboxed(
    tmp_path: Path, root: Path, transport: str, *extra: str, stub: RootsStub | None = None
) -> AsyncIterator[tuple[Client, Path]]:
    """A sandboxed server of ``root`` behind the real client; yields the client and the
    server's stderr file."""
    args = ["--sandbox", *extra]
    if transport == "stdio":
        async with stdio(tmp_path, [root], "legacy", stub, args) as (c, err, _pid):
            yield c, err
        return
    async with http_server(tmp_path, [root], *args) as (url, err, _proc):
        kw: dict[str, Any] = {"list_roots_callback": stub} if stub is not None else {}
        async with Client(url, mode="legacy", **kw) as c:
            yield c, err


async def ready(c: Client) -> None:
    """Until the root's index is built (in the cache, by the sandboxed process)."""
    with anyio.fail_after(60):  # (hang guard)
        while True:
            res = await c.call_tool("list_roots", {})
            assert not res.is_error, text(res)
            state = res.structured_content["roots"][0]["index"]["state"]
            assert state in ("building", "ready"), state
            if state == "ready":
                return
            await anyio.sleep(0.1)


def ok(res: Any) -> dict[str, Any]:
    assert not res.is_error, text(res)
    assert MARKER not in everything(res)
    return dict(res.structured_content)


async def read_tools(c: Client, world: Path) -> list[Any]:
    """Every read tool inside the root, and reads aimed outside; all answers."""
    out: list[Any] = []
    g = ok(await c.call_tool("grep", {"pattern": "needle"}))
    assert {m["path"] for m in g["matches"]} == {f"src/{n}" for n in SOURCES} | {"notes.txt"}
    assert g["index_used"], g
    out.append(g)
    s = ok(await c.call_tool("search", {"query": "needle"}))
    assert s["results"] and not s["partial"], s
    out.append(s)
    for name, (_body, sym) in SOURCES.items():
        f = ok(await c.call_tool("find_symbol", {"name": sym}))
        assert [x["path"] for x in f["symbols"]] == [f"src/{name}"], (sym, f)
        o = ok(await c.call_tool("outline", {"path": f"src/{name}"}))
        assert o["symbols"], (name, o)
        out += [f, o]
    r = ok(await c.call_tool("read_file", {"path": "src/a.py"}))
    assert r["content"] == SOURCES["a.py"][0]
    ff = ok(await c.call_tool("find_files", {"pattern": "*.py"}))
    assert [f["path"] for f in ff["files"]] == ["src/a.py"]
    ld = ok(await c.call_tool("list_directory", {}))
    assert {e["name"] for e in ld["entries"]} == {"a.txt", "notes.txt", "src", "sub"}
    out += [r, ff, ld]
    out.append(ok(await c.call_tool("directory_tree", {})))
    out.append(ok(await c.call_tool("file_info", {"path": "notes.txt"})))
    out.append(ok(await c.call_tool("reindex", {})))
    # pages (HMAC cursors) and the error paths (argument validation, missing files)
    page = ok(await c.call_tool("find_files", {"pattern": "src", "max_results": 2}))
    rest = ok(await c.call_tool("find_files", {"pattern": "src", "cursor": page["next_cursor"]}))
    assert len(page["files"]) + len(rest["files"]) == len(SOURCES)
    bad = await c.call_tool("grep", {"pattern": "x", "context": 99, "nope": 1})
    assert code(bad) == "invalid_argument", text(bad)
    missing = await c.call_tool("read_file", {"path": "src/none.py"})
    assert code(missing) == "not_found", text(missing)
    out += [page, rest, everything(bad), everything(missing)]
    for p in ("../outside/secret.txt", str(world / "outside" / "secret.txt")):
        res = await c.call_tool("read_file", {"path": p})
        assert code(res) == "outside_roots", text(res)
        out.append(everything(res))
    return out


def clean(err: Path, probe: str = "errno EACCES") -> str:
    log = err.read_text()
    assert f"rootgrep: sandbox probe: {probe}" in log, log[-3000:]
    log = log.replace(f"rootgrep: sandbox probe: {probe}", "")
    for word in TROUBLE:
        assert word not in log, log[-3000:]
    assert MARKER not in log
    return log


@needs_landlock
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_sandboxed_server_answers_every_read_tool_and_refuses_writes(
    tmp_path: Path, served: Path, transport: str
) -> None:
    before = checksum(tmp_path / "outside")
    with anyio.fail_after(120):
        async with sandboxed(tmp_path, served, transport) as (c, err):
            await ready(c)
            outputs = await read_tools(c, tmp_path)
            w = await c.call_tool("write_file", {"path": "new.txt", "content": "x"})
            assert code(w) == "read_only", text(w)
    assert not (served / "new.txt").exists()
    assert MARKER not in json.dumps(outputs, default=str)
    assert checksum(tmp_path / "outside") == before
    clean(err)


@needs_landlock
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_sandboxed_server_with_allow_write_writes_inside_the_root(
    tmp_path: Path, served: Path, transport: str
) -> None:
    before = checksum(tmp_path / "outside")
    audit = tmp_path / f"audit-{transport}.jsonl"  # (granted by a rule on its open fd)
    args = ("--allow-write", "--audit-log", str(audit))
    with anyio.fail_after(120):
        async with sandboxed(tmp_path, served, transport, *args) as (c, err):
            await ready(c)
            await read_tools(c, tmp_path)
            ok(await c.call_tool("write_file", {"path": "new.txt", "content": "one\n"}))
            edit = {"old_text": "one", "new_text": "two"}
            ok(await c.call_tool("edit_file", {"path": "new.txt", "edits": [edit]}))
            ok(await c.call_tool("create_directory", {"path": "made/deeper"}))
            # (a rename across directories: Landlock's REFER right)
            ok(await c.call_tool("move_path", {"source": "new.txt",
                                               "destination": "made/deeper/moved.txt"}))  # fmt: skip
            ok(await c.call_tool("copy_path", {"source": "src", "destination": "copy"}))
            ok(await c.call_tool("delete_path", {"path": "sub", "recursive": True}))
            g = ok(await c.call_tool("grep", {"pattern": "two"}))
            assert [m["path"] for m in g["matches"]] == ["made/deeper/moved.txt"]
            for p in ("../outside/new.txt", str(tmp_path / "outside" / "secret.txt")):
                res = await c.call_tool("write_file", {"path": p, "content": "x"})
                assert code(res) == "outside_roots", text(res)
    decisions = [json.loads(x) for x in audit.read_text().splitlines()]
    assert {"write_file", "move_path", "delete_path"} <= {d["tool"] for d in decisions}
    assert MARKER not in audit.read_text()
    assert (served / "made" / "deeper" / "moved.txt").read_text() == "two\n"
    assert (served / "copy" / "a.py").read_text() == SOURCES["a.py"][0]
    assert not (served / "sub").exists()
    assert checksum(tmp_path / "outside") == before
    clean(err)


@needs_landlock
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_client_root_outside_the_operator_roots_is_refused(
    tmp_path: Path, served: Path, transport: str
) -> None:
    """A client announcing the outside (and one directory inside the operator root): only
    the one inside is served."""
    stub = RootsStub([uri(tmp_path / "outside"), uri(served / "src")])
    with anyio.fail_after(120):
        async with sandboxed(tmp_path, served, transport, stub=stub) as (c, err):
            with anyio.fail_after(30):
                while stub.calls == 0:  # (hang guard: the server asks after initialized)
                    await anyio.sleep(0.05)
            roots = ok(await c.call_tool("list_roots", {}))["roots"]
            assert [r["uri"] for r in roots] == [uri(served / "src")]
            g = ok(await c.call_tool("grep", {"pattern": "needle"}))
            assert {m["path"] for m in g["matches"]} == set(SOURCES)
            res = await c.call_tool("read_file", {"path": str(tmp_path / "outside" / "secret.txt")})
            assert code(res) == "outside_roots", text(res)
            assert MARKER not in everything(res)
            stub.uris = [uri(tmp_path / "outside")]
            await c.send_roots_list_changed()
            res = await c.call_tool("grep", {"pattern": MARKER})
            assert code(res) == "no_roots", text(res)
            assert MARKER not in everything(res)
    log = err.read_text()
    assert "rootgrep: sandbox probe: errno EACCES" in log
    assert MARKER not in log


@needs_landlock
async def test_per_call_roots_of_a_2026_client_are_served_inside_and_refused_outside(
    tmp_path: Path, served: Path
) -> None:
    """A 2026-07-28 client's roots come with each call (pinned then, under the sandbox)."""
    stub = RootsStub([uri(tmp_path / "outside"), uri(served / "src")])
    with anyio.fail_after(120):
        async with stdio(tmp_path, [served], "auto", stub, ["--sandbox"]) as (c, err, _pid):
            g = ok(await c.call_tool("grep", {"pattern": "needle"}))
            assert {m["path"] for m in g["matches"]} == set(SOURCES)
            stub.uris = [uri(tmp_path / "outside")]
            res = await c.call_tool("grep", {"pattern": MARKER})
            assert code(res) == "no_roots", text(res)
            assert MARKER not in everything(res)
    clean(err)


@needs_landlock
async def test_a_sandboxed_stdio_server_points_its_stdin_at_the_null_device(
    tmp_path: Path, served: Path
) -> None:
    """While serving, the SDK points fd 0 at /dev/null (a stray read gets EOF, never the
    wire), opening it by name: under the sandbox that open needs its own rule, or the SDK
    falls back, silently, to serving with fd 0 still the client's pipe."""
    with anyio.fail_after(120):
        async with stdio(tmp_path, [served], "legacy", None, ["--sandbox"]) as (c, err, pid):
            ok(await c.call_tool("read_file", {"path": "notes.txt"}))
            assert os.readlink(f"/proc/{pid}/fd/0") == os.devnull
    clean(err)


@needs_landlock
async def test_the_audit_log_is_written_through_its_fd_and_cannot_be_opened_again(
    tmp_path: Path, served: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log is opened once, before the restriction, and only written through that fd: the
    sandbox grants nothing on it, so the process cannot open it again by name (to read what
    other sessions asked for, or to write over it), and decisions are still recorded."""
    audit = tmp_path / "audit.jsonl"
    monkeypatch.setenv("ROOTGREP_TEST_SANDBOX_PROBE", str(audit))  # (the probe opens the log)
    args = ["--sandbox", "--audit-log", str(audit)]
    with anyio.fail_after(120):
        async with stdio(tmp_path, [served], "legacy", None, args) as (c, err, _pid):
            ok(await c.call_tool("read_file", {"path": "notes.txt"}))
            res = await c.call_tool("read_file", {"path": "../outside/secret.txt"})
            assert code(res) == "outside_roots", text(res)
    decisions = [json.loads(x) for x in audit.read_text().splitlines()]
    assert {(d["tool"], d["decision"]) for d in decisions} >= {
        ("read_file", "allow"),
        ("read_file", "deny"),
    }, decisions
    assert MARKER not in audit.read_text()
    clean(err)


@needs_landlock
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_root_holding_the_operator_root_is_served_as_the_operator_root(
    tmp_path: Path, served: Path, mode: str
) -> None:
    """A client announcing a directory above the operator root (its workspace, or ``/``) is
    served the operator root, as without the sandbox: the client root is only looked up
    (never opened for reading, which the sandbox refuses), and the outside below it, never
    shown. ``auto``: a 2026-07-28 client, its roots sent with each call."""
    stub = RootsStub([uri(tmp_path), "file:///"])
    with anyio.fail_after(120):
        async with stdio(tmp_path, [served], mode, stub, ["--sandbox"]) as (c, err, _pid):
            g = ok(await c.call_tool("grep", {"pattern": "needle"}))
            assert {m["path"] for m in g["matches"]} == {f"src/{n}" for n in SOURCES} | {
                "notes.txt"
            }, g
            roots = ok(await c.call_tool("list_roots", {}))["roots"]
            assert [r["uri"] for r in roots] == [uri(served)], roots
            res = await c.call_tool("grep", {"pattern": MARKER, "path": str(tmp_path)})
            assert res.is_error and MARKER not in everything(res), text(res)
            res = await c.call_tool("read_file", {"path": str(tmp_path / "outside" / "secret.txt")})
            assert code(res) == "outside_roots", text(res)
    clean(err)
