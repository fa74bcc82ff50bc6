"""The real ``rootgrep serve`` process over stdio and streamable HTTP: roots per era, stdout
hygiene, roots on many HTTP connects, bearer auth, DNS-rebinding protection, crash-atomic
writes and an audit log free of secrets."""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_helpers import MODES, RootsStub, code, text, uri

from support import listening_port, stop

pytestmark = pytest.mark.anyio

MARKER = "SECRET-MARKER-7f3a9c"  # the same constant as tests/conftest.py (checked below)
START_TIMEOUT = 10.0


# ---- helpers ---------------------------------------------------------------------------------


def server_args(transport: str, roots: Sequence[Path], *extra: str) -> list[str]:
    args = ["-m", "rootgrep", "serve", "--transport", transport]
    for r in roots:
        args += ["--root", str(r)]
    return [*args, *extra]


def server_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "ROOTGREP_CACHE_DIR": str(tmp_path / "cache"), **extra}


def _ours(pid: int, needle: str) -> bool:
    """Whether ``pid`` is still the server we started (its command line names our tmp dir)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return needle.encode() in f.read()
    except OSError:
        return False


def _kill_if_ours(pid: int | None, needle: str) -> None:
    if pid and _ours(pid, needle):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@asynccontextmanager
async def stdio(
    tmp_path: Path,
    roots: Sequence[Path],
    mode: str,
    stub: RootsStub | None = None,
    extra: Sequence[str] = (),
    tag: str = "stdio",
) -> AsyncIterator[tuple[Client, Path, int]]:
    """A real ``rootgrep serve --transport stdio`` child behind the SDK's Client; yields the
    client, the file its stderr goes to, and its pid (``sh -c exec`` keeps the pid)."""
    errpath = tmp_path / f"{tag}-{secrets.token_hex(3)}.err"
    pidfile = errpath.with_suffix(".pid")
    params = StdioServerParameters(
        command="/bin/sh",
        args=[
            "-c",
            'echo $$ > "$0"; exec "$@"',
            str(pidfile),
            sys.executable,
            *server_args("stdio", roots, *extra),
        ],
        env=server_env(tmp_path),
        cwd=str(tmp_path),
    )
    kw: dict[str, Any] = {"list_roots_callback": stub} if stub is not None else {}
    pid: int | None = None
    with open(errpath, "w") as err:
        try:
            async with Client(stdio_client(params, errlog=err), mode=mode, **kw) as c:
                pid = int(pidfile.read_text())
                yield c, errpath, pid
        finally:
            if pid is None and pidfile.exists():
                with suppress(ValueError):
                    pid = int(pidfile.read_text())
            _kill_if_ours(pid, str(tmp_path))


@asynccontextmanager
async def http_server(
    tmp_path: Path,
    roots: Sequence[Path],
    *extra: str,
    env: dict[str, str] | None = None,
    tag: str = "http",
) -> AsyncIterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    """A real ``rootgrep serve --transport http`` child; yields the /mcp URL, the file holding
    its stderr and stdout, and the process. Waits (bounded) until the port accepts."""
    errpath = tmp_path / f"{tag}.err"
    outpath = tmp_path / f"{tag}.out"
    with open(errpath, "wb") as err, open(outpath, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *server_args("http", roots, "--port", "0", *extra)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=env or server_env(tmp_path),
            cwd=str(tmp_path),
        )
        try:
            try:  # (port 0: the kernel's choice, which no other process can take first)
                port = await anyio.to_thread.run_sync(listening_port, proc.pid, START_TIMEOUT)
            except AssertionError as e:
                proc.poll()
                raise AssertionError(
                    f"{e}; exit status {proc.returncode}: {errpath.read_text()[-2000:]}"
                ) from None
            with anyio.fail_after(START_TIMEOUT):
                while True:
                    if proc.poll() is not None:
                        raise AssertionError(
                            f"server exited with {proc.returncode}: {errpath.read_text()[-2000:]}"
                        )
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                        break
                    except OSError:
                        await anyio.sleep(0.05)
            yield f"http://127.0.0.1:{port}/mcp", errpath, proc
        finally:
            stop(proc, 5)


def init_body(caps: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": caps or {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }


ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def tree(world: Path) -> Path:
    """``world``'s root plus files with a common word in three places."""
    root = world / "root"
    (root / "other").mkdir()
    (root / "top.txt").write_text("needle top\n")
    (root / "sub" / "in.txt").write_text("needle sub\n")
    (root / "other" / "o.txt").write_text("needle other\n")
    return root


def paths(result: Any) -> list[str]:
    assert not result.is_error, text(result)
    return [m["path"] for m in result.structured_content["matches"]]


def root_uris(result: Any) -> list[str]:
    assert not result.is_error, text(result)
    return [r["uri"] for r in result.structured_content["roots"]]


# ---- 1. stdio: roots per era ------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_stdio_client_roots_intersection_and_refresh(
    tmp_path: Path, tree: Path, mode: str
) -> None:
    stub = RootsStub([uri(tree / "sub")])
    with anyio.fail_after(40):
        async with stdio(tmp_path, [tree], mode, stub) as (c, _, _):
            if mode == "legacy":
                assert c.protocol_version != "2026-07-28"
            (r,) = (await c.call_tool("list_roots", {})).structured_content["roots"]
            assert r["uri"] == uri(tree / "sub") and r["source"] == "client"
            assert paths(await c.call_tool("grep", {"pattern": "needle"})) == ["in.txt"]
            rf = await c.call_tool("read_file", {"path": "in.txt"})
            assert not rf.is_error and rf.structured_content["content"] == "needle sub\n"
            # outside the client's root, though inside the operator's
            assert code(await c.call_tool("read_file", {"path": str(tree / "top.txt")})) == (
                "outside_roots"
            )
            assert stub.calls >= 1
            before = stub.calls
            stub.uris = [uri(tree / "other")]
            if mode == "legacy":
                await c.send_roots_list_changed()
            with anyio.fail_after(10):  # the refresh is asynchronous
                while root_uris(await c.call_tool("list_roots", {})) != [uri(tree / "other")]:
                    await anyio.sleep(0.05)
            assert stub.calls > before
            assert paths(await c.call_tool("grep", {"pattern": "needle"})) == ["o.txt"]
            assert code(await c.call_tool("read_file", {"path": "in.txt"})) in (
                "not_found",
                "outside_roots",
            )
            rf = await c.call_tool("read_file", {"path": "o.txt"})
            assert rf.structured_content["content"] == "needle other\n"


@pytest.mark.parametrize("mode", MODES)
async def test_stdio_client_without_roots_uses_operator_roots(
    tmp_path: Path, tree: Path, mode: str
) -> None:
    audit = tmp_path / "audit.jsonl"
    with anyio.fail_after(30):
        async with stdio(tmp_path, [tree], mode, None, ["--audit-log", str(audit)]) as (c, err, _):
            (r,) = (await c.call_tool("list_roots", {})).structured_content["roots"]
            assert r["uri"] == uri(tree) and r["source"] == "operator"
            assert paths(await c.call_tool("grep", {"pattern": "needle"})) == [
                "other/o.txt",
                "sub/in.txt",
                "top.txt",
            ]
            rf = await c.call_tool("read_file", {"path": "sub/in.txt"})
            assert rf.structured_content["content"] == "needle sub\n"
    # no roots/list went out: nothing was accepted or failed
    lines = [json.loads(x) for x in audit.read_text().splitlines()]
    assert lines and not [x for x in lines if x["tool"] == "roots"]
    assert "roots/list" not in err.read_text()


# ---- 2. stdio: stdout carries only the protocol -----------------------------------------------


async def test_stdio_stdout_is_protocol_only_with_debug_logs(tmp_path: Path, tree: Path) -> None:
    """A raw JSON-RPC session (no roots capability) with --log-level debug: every stdout line
    is a JSON-RPC message, none is a roots/list request, the logs are on stderr."""
    errpath = tmp_path / "raw.err"
    lines: list[bytes] = []
    with open(errpath, "wb") as err:
        proc = await anyio.open_process(
            [sys.executable, *server_args("stdio", [tree], "--log-level", "debug")],
            stderr=err,
            env=server_env(tmp_path),
            cwd=str(tmp_path),
        )
        try:
            assert proc.stdin is not None and proc.stdout is not None
            out = BufferedByteReceiveStream(proc.stdout)

            async def send(msg: dict[str, Any]) -> None:
                await proc.stdin.send(json.dumps(msg).encode() + b"\n")  # type: ignore[union-attr]

            async def until(rid: int) -> dict[str, Any]:
                while True:
                    line = await out.receive_until(b"\n", 1 << 24)
                    lines.append(line)
                    msg = json.loads(line)
                    if msg.get("id") == rid and "method" not in msg:
                        return msg

            with anyio.fail_after(20):
                await send(init_body())
                assert "result" in await until(1)
                await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
                await send(
                    {
                        "jsonrpc": "2.0",
                        "id": 2,
                        "method": "tools/call",
                        "params": {"name": "list_roots", "arguments": {}},
                    }
                )
                res = (await until(2))["result"]
                assert [r["uri"] for r in res["structuredContent"]["roots"]] == [uri(tree)]
                await send(
                    {
                        "jsonrpc": "2.0",
                        "id": 3,
                        "method": "tools/call",
                        "params": {"name": "grep", "arguments": {"pattern": "needle"}},
                    }
                )
                res = (await until(3))["result"]
                assert not res.get("isError") and len(res["structuredContent"]["matches"]) == 3
                await send({"jsonrpc": "2.0", "id": 4, "method": "ping"})
                await until(4)
                await proc.stdin.aclose()
                with suppress(anyio.EndOfStream, anyio.IncompleteRead):
                    while True:
                        lines.append(await out.receive_until(b"\n", 1 << 24))
                await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                with anyio.move_on_after(5, shield=True):
                    await proc.wait()
            await proc.aclose()
    for line in lines:
        msg = json.loads(line)  # anything that is not JSON fails here
        assert msg.get("jsonrpc") == "2.0", line
        assert msg.get("method") != "roots/list", "roots/list sent to a client without roots"
    logs = errpath.read_text()
    assert "DEBUG" in logs  # the debug logs exist, and they went to stderr


async def test_stdio_calls_work_with_debug_logging(tmp_path: Path, tree: Path) -> None:
    stub = RootsStub([uri(tree / "sub")])
    with anyio.fail_after(30):
        async with stdio(tmp_path, [tree], "legacy", stub, ["--log-level", "debug"]) as (c, err, _):
            assert root_uris(await c.call_tool("list_roots", {})) == [uri(tree / "sub")]
            assert paths(await c.call_tool("grep", {"pattern": "needle"})) == ["in.txt"]
            for _ in range(20):
                rf = await c.call_tool("read_file", {"path": "in.txt"})
                assert rf.structured_content["content"] == "needle sub\n"
    assert "DEBUG" in err.read_text()


# ---- 3. HTTP: every connect gets its roots ----------------------------------------------------


async def test_http_twenty_connects_each_get_their_roots(tmp_path: Path, world: Path) -> None:
    root = world / "root"
    for i in range(20):
        (root / f"c{i:02}").mkdir()
        (root / f"c{i:02}" / f"n{i:02}.txt").write_text(f"needle {i}\n")
    calls, slow = [], 0
    async with http_server(tmp_path, [root]) as (url, _, _):
        for i in range(20):
            stub = RootsStub([uri(root / f"c{i:02}")])
            t0 = time.monotonic()
            with anyio.fail_after(20):
                async with Client(url, mode="legacy", list_roots_callback=stub) as c:
                    lr = await c.call_tool("list_roots", {})
                    assert root_uris(lr) == [uri(root / f"c{i:02}")], (i, text(lr))
                    assert paths(await c.call_tool("grep", {"pattern": "needle"})) == [
                        f"n{i:02}.txt"
                    ]
            calls.append(stub.calls)
            slow += time.monotonic() - t0 > 1.5  # informational: a lost first roots/list
    assert all(n >= 1 for n in calls), calls
    print(f"\nHTTP connects slower than 1.5 s (first roots/list retried): {slow}/20")


# ---- 4. HTTP: bearer token --------------------------------------------------------------------


async def test_http_bearer_token(tmp_path: Path, tree: Path) -> None:
    token = "tok-" + secrets.token_hex(16)
    audit = tmp_path / "audit.jsonl"
    env = server_env(tmp_path, ROOTGREP_TEST_TOKEN=token)
    extra = (
        "--auth-token-env",
        "ROOTGREP_TEST_TOKEN",
        "--audit-log",
        str(audit),
        "--log-level",
        "debug",
    )
    async with http_server(tmp_path, [tree], *extra, env=env) as (url, errpath, _):
        with anyio.fail_after(30):
            async with httpx2.AsyncClient(timeout=10) as h:
                for hdrs in (
                    {},
                    {"Authorization": "Bearer wrong"},
                    {"Authorization": "Bearer " + "x" * len(token)},
                    {"Authorization": token},
                ):
                    r = await h.post(url, json=init_body(), headers={**ACCEPT, **hdrs})
                    assert r.status_code == 401, (hdrs, r.status_code)
                    assert token not in r.text
                r = await h.post(
                    url, json=init_body(), headers={**ACCEPT, "Authorization": f"Bearer {token}"}
                )
                assert r.status_code == 200
            async with httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {token}"},
                timeout=httpx2.Timeout(30, read=300),
            ) as http:
                stub = RootsStub([uri(tree / "sub")])
                async with Client(
                    streamable_http_client(url, http_client=http),
                    mode="legacy",
                    list_roots_callback=stub,
                ) as c:
                    assert root_uris(await c.call_tool("list_roots", {})) == [uri(tree / "sub")]
                    assert paths(await c.call_tool("grep", {"pattern": "needle"})) == ["in.txt"]
                    rf = await c.call_tool("read_file", {"path": "in.txt"})
                    assert rf.structured_content["content"] == "needle sub\n"
    logs = errpath.read_bytes() + errpath.with_suffix(".out").read_bytes()
    assert b"DEBUG" in logs and b"127.0.0.1" in logs  # the server did log
    assert token.encode() not in logs
    assert audit.stat().st_size > 0
    assert token not in audit.read_text()


# ---- 5. HTTP: DNS-rebinding protection --------------------------------------------------------


async def test_http_foreign_host_or_origin_rejected(tmp_path: Path, tree: Path) -> None:
    async with http_server(tmp_path, [tree]) as (url, _, _):
        with anyio.fail_after(20):
            async with httpx2.AsyncClient(timeout=10) as h:
                ok = await h.post(url, json=init_body(), headers=ACCEPT)
                assert ok.status_code == 200, ok.text  # the control: a local request works
                for bad in (
                    {"Host": "evil.example"},
                    {"Host": "evil.example:80"},
                    {"Origin": "http://evil.example"},
                    {"Host": "evil.example", "Origin": "http://evil.example"},
                ):
                    r = await h.post(url, json=init_body(), headers={**ACCEPT, **bad})
                    assert 400 <= r.status_code < 500, (bad, r.status_code, r.text[:200])
                    assert "jsonrpc" not in r.text  # refused before any MCP handling


# ---- 6. SIGKILL during write_file -------------------------------------------------------------

BIG = 30 * 1024 * 1024


def _sig(p: Path) -> tuple[int, int, int]:
    st = p.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


def _killer(
    pid: int,
    needle: str,
    target: Path,
    prefix: str,
    wait_tmp: bool,
    delay: float,
    done: threading.Event,
    seen: dict[str, bool],
) -> None:
    deadline = time.monotonic() + 20
    if wait_tmp:  # kill inside the write window: once a temp file appears or the target changes
        before = _sig(target)
        while time.monotonic() < deadline and not done.is_set():
            if any(n.startswith(prefix) for n in os.listdir(target.parent)):
                seen["tmp"] = True
                break
            with suppress(OSError):
                if _sig(target) != before:
                    break
            time.sleep(0.0005)
    done.wait(delay)
    _kill_if_ours(pid, needle)


async def test_sigkill_during_write_file_is_atomic(tmp_path: Path, world: Path) -> None:
    root = world / "root"
    target = root / "big.txt"
    old, new = b"a" * BIG, "b" * BIG
    prefix = ".big.txt.rootgrep-"
    rng = random.Random()
    outcomes: list[tuple[str, float, str, int]] = []
    for i in range(4):  # (three kills inside the write, one at random)
        target.write_bytes(old)
        # most kills land inside the write (the temp file exists for some 30-90 ms here),
        # the others at a random moment from the call's start
        wait_tmp = i % 3 != 2
        delay = rng.uniform(0, 0.03) if wait_tmp else rng.uniform(0.05, 0.6)
        done = threading.Event()
        seen: dict[str, bool] = {}
        with anyio.fail_after(60):
            try:
                async with stdio(
                    tmp_path, [root], "legacy", None, ["--allow-write"], tag=f"kill{i}"
                ) as (c, _, pid):

                    async def call(c: Client = c, done: threading.Event = done) -> None:
                        try:
                            await c.call_tool("write_file", {"path": "big.txt", "content": new})
                        except Exception:
                            pass
                        finally:
                            done.set()

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(call)
                        await anyio.to_thread.run_sync(
                            _killer, pid, str(tmp_path), target, prefix, wait_tmp, delay, done, seen
                        )
            except Exception:
                pass  # the transport reports the dead server; what matters is the file
        data = target.read_bytes()
        assert target.is_file() and not target.is_symlink()
        assert len(data) == BIG, (i, delay, len(data))
        assert data in (old, new.encode()), (i, delay, "mixed content")
        leftovers = [n for n in os.listdir(root) if n.startswith(prefix)]
        assert all(n.endswith(".tmp") for n in leftovers), leftovers
        outcomes.append(
            (
                "a" if data == old else "b",
                round(delay, 3),
                "tmp-seen" if seen else "-",
                len(leftovers),
            )
        )
        for n in leftovers:
            os.unlink(root / n)
    print("\nkill outcomes (content, delay, temp seen, temp leftovers):", outcomes)


# ---- 7. the audit log holds no secret ---------------------------------------------------------


async def test_audit_log_has_decisions_and_no_secret(tmp_path: Path, world: Path) -> None:
    assert (world / "outside" / "secret.txt").read_text().strip() == MARKER
    root = world / "root"
    (root / "notes.txt").write_text(f"first\n{MARKER} inside the root\nlast\n")
    (root / "sub" / "deep.txt").write_text(f"{MARKER}\n")
    (root / "link.txt").symlink_to(world / "outside" / "secret.txt")
    (root / "rel-link.txt").symlink_to("../outside/secret.txt")
    audit = tmp_path / "audit.jsonl"
    stub = RootsStub([uri(root), uri(world / "outside"), "http://example.com/x"])
    with anyio.fail_after(40):
        async with stdio(tmp_path, [root], "legacy", stub, ["--audit-log", str(audit)]) as (
            c,
            err,
            _,
        ):
            assert root_uris(await c.call_tool("list_roots", {})) == [uri(root)]
            rf = await c.call_tool("read_file", {"path": "notes.txt"})
            assert MARKER in rf.structured_content["content"]  # allowed: inside the root
            rf = await c.call_tool("read_file", {"path": "sub/deep.txt", "start_line": 1})
            assert not rf.is_error
            for p in (
                "../outside/secret.txt",
                "sub/../../outside/secret.txt",
                str(world / "outside" / "secret.txt"),
                uri(world / "outside" / "secret.txt"),
                str(world / "root-evil" / "x.txt"),
                "link.txt",
                "rel-link.txt",
            ):
                res = await c.call_tool("read_file", {"path": p})
                assert code(res) == "outside_roots", (p, text(res))
                assert MARKER not in text(res)
            info = await c.call_tool("file_info", {"path": "../outside/secret.txt"})
            assert code(info) == "outside_roots"
            g = await c.call_tool("grep", {"pattern": MARKER, "hidden": True, "no_ignore": True})
            assert sorted(paths(g)) == ["notes.txt", "sub/deep.txt"]
            g = await c.call_tool("grep", {"pattern": MARKER, "path": "../outside"})
            assert code(g) == "outside_roots"
    data = audit.read_bytes()
    assert MARKER.encode() not in data
    assert MARKER not in err.read_text()
    entries = [json.loads(x) for x in data.decode().splitlines()]
    fields = {"ts", "tool", "op", "requested", "root_id", "path", "decision", "reason"}
    assert entries and all(fields <= set(e) for e in entries), entries[:3]
    assert {e["decision"] for e in entries} == {"allow", "deny"}
    denies = [e for e in entries if e["decision"] == "deny" and e["reason"] == "outside_roots"]
    assert len(denies) >= 8, denies
    assert {e["tool"] for e in denies} >= {"read_file", "file_info", "grep"}
    allows = {(e["tool"], e["path"]) for e in entries if e["decision"] == "allow"}
    assert ("read_file", "notes.txt") in allows
    # the invalid client root was dropped and audited
    assert any(e["tool"] == "roots" and e["decision"] == "deny" for e in entries)


def test_http_serve_prints_the_endpoint_and_a_client_config(tmp_path: Path, tree: Path) -> None:
    """What `make run` shows: the URL and a configuration snippet a client can paste."""
    proc = subprocess.Popen(
        [sys.executable, *server_args("http", [tree], "--port", "0")],
        env=server_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        while not (lines and lines[-1].startswith("}")):
            line = proc.stderr.readline()
            assert line, "the server exited: " + "".join(lines)
            lines.append(line)
        text = "".join(lines)
        url = f"http://127.0.0.1:{listening_port(proc.pid)}/mcp"
        assert f"MCP endpoint (streamable HTTP): {url}" in text
        snippet = json.loads(text[text.index("{") :])
        assert snippet == {"mcpServers": {"rootgrep": {"type": "http", "url": url}}}
    finally:
        stop(proc)
