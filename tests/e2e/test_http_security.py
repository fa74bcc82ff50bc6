"""HTTP beyond loopback (issue 8, item 7), against the real ``rootgrep serve`` process: a
non-loopback bind refuses to start without a bearer token and an explicit ``--allowed-host``
list, and with them keeps Host/Origin validation; and a session's first tool call gets its
roots on its own stream, without waiting for the lost-and-retried standalone request."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp_helpers import uri
from test_transports import ACCEPT, http_server, init_body, server_args, server_env

from support import MARKER

pytestmark = pytest.mark.anyio


@pytest.fixture
def tree(world: Path) -> Path:
    root = world / "root"
    (root / "sub" / "in.txt").write_text("needle sub\n")
    return root


@pytest.mark.parametrize(
    "flags",
    [
        (),
        ("--auth-token-env", "RG_TOKEN"),
        ("--allowed-host", "rootgrep.test"),
    ],
    ids=["nothing", "token-only", "allowed-host-only"],
)
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "rootgrep.test"])
def test_a_non_loopback_bind_without_token_and_allowed_hosts_refuses_to_start(
    tmp_path: Path, tree: Path, host: str, flags: tuple[str, ...]
) -> None:
    env = server_env(tmp_path, RG_TOKEN="tok-" + secrets.token_hex(8))
    args = server_args("http", [tree], "--host", host, "--port", "0", *flags)
    proc = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, timeout=60, stdin=subprocess.DEVNULL
    )
    err = proc.stderr.decode()
    assert proc.returncode == 2, (proc.returncode, err[-500:])
    assert len(err.strip().splitlines()) == 1, err  # one line, no traceback
    assert "refusing to start" in err
    for flag in ("--auth-token-env", "--allowed-host"):
        if flag not in flags:
            assert flag in err


def test_a_malformed_allowed_host_refuses_to_start(tmp_path: Path, tree: Path) -> None:
    args = server_args("http", [tree], "--allowed-host", "evil.example/path", "--port", "0")
    proc = subprocess.run(
        [sys.executable, *args], env=server_env(tmp_path), capture_output=True, timeout=60
    )
    assert proc.returncode == 2 and "--allowed-host" in proc.stderr.decode()


async def test_a_non_loopback_bind_keeps_host_origin_and_token_checks(
    tmp_path: Path, tree: Path
) -> None:
    token = "tok-" + secrets.token_hex(16)
    env = server_env(tmp_path, RG_TOKEN=token)
    extra = ("--host", "0.0.0.0", "--auth-token-env", "RG_TOKEN", "--allowed-host", "rootgrep.test")
    async with http_server(tmp_path, [tree], *extra, env=env) as (url, _, _):
        port = url.split(":")[2].split("/")[0]
        auth = {"Authorization": f"Bearer {token}"}
        with anyio.fail_after(30):
            async with httpx2.AsyncClient(timeout=10) as h:

                async def post(headers: dict[str, str]) -> Any:
                    return await h.post(url, json=init_body(), headers={**ACCEPT, **headers})

                for good in (
                    {"Host": f"rootgrep.test:{port}"},
                    {"Host": "rootgrep.test", "Origin": "https://rootgrep.test"},
                    {"Host": f"127.0.0.1:{port}", "Origin": f"http://localhost:{port}"},
                ):
                    r = await post({**auth, **good})
                    assert r.status_code == 200, (good, r.status_code, r.text[:200])
                for bad in (
                    {"Host": "evil.example"},
                    {"Host": f"evil.example:{port}"},
                    {"Host": "rootgrep.test.evil.example"},
                    {"Host": f"rootgrep.test:{port}", "Origin": "http://evil.example"},
                    {"Host": f"rootgrep.test:{port}", "Origin": "http://rootgrep.test.evil"},
                ):
                    r = await post({**auth, **bad})
                    assert 400 <= r.status_code < 500, (bad, r.status_code, r.text[:200])
                    assert "jsonrpc" not in r.text and MARKER not in r.text
                for hdrs in ({"Host": f"rootgrep.test:{port}"}, {"Host": "evil.example"}):
                    r = await post(hdrs)  # no token
                    assert r.status_code == 401, (hdrs, r.status_code)
                    assert token not in r.text


# ---- the first call's roots: on its own stream, at once ---------------------------------------


def _sse_messages(chunk: str) -> list[dict[str, Any]]:
    out = []
    for line in chunk.splitlines():
        if line.startswith("data:") and line[5:].strip():
            out.append(json.loads(line[5:]))
    return out


async def test_the_first_call_gets_its_roots_on_its_own_stream(tmp_path: Path, tree: Path) -> None:
    """A raw client that never opens the standalone GET stream (it is optional): whatever
    the server sends there is lost for good, as the SDK client's first request is lost when
    its GET is not connected yet. The first tools/call must still get its roots, asked for
    on the POST's own response stream, and answer with them."""
    want = uri(tree / "sub")
    async with http_server(tmp_path, [tree]) as (url, _, _):
        with anyio.fail_after(30):
            async with httpx2.AsyncClient(timeout=httpx2.Timeout(20)) as h:
                caps = {"roots": {"listChanged": True}}
                r = await h.post(url, json=init_body(caps), headers=ACCEPT)
                assert r.status_code == 200, r.text
                sid = r.headers["mcp-session-id"]
                hdrs = {**ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
                note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                assert (await h.post(url, json=note, headers=hdrs)).status_code == 202
                call = {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "list_roots", "arguments": {}},
                }
                asked: list[dict[str, Any]] = []
                result: dict[str, Any] | None = None
                async with h.stream("POST", url, json=call, headers=hdrs) as resp:
                    assert resp.status_code == 200
                    buf = ""
                    async for piece in resp.aiter_text():
                        buf += piece.replace("\r\n", "\n")
                        while "\n\n" in buf:
                            event, buf = buf.split("\n\n", 1)
                            for msg in _sse_messages(event):
                                if msg.get("method") == "roots/list":
                                    asked.append(msg)
                                    answer = {
                                        "jsonrpc": "2.0",
                                        "id": msg["id"],
                                        "result": {"roots": [{"uri": want}]},
                                    }
                                    ok = await h.post(url, json=answer, headers=hdrs)
                                    assert ok.status_code in (200, 202), ok.text
                                elif "method" not in msg and msg.get("id") == 2:
                                    result = msg
                        if result is not None:
                            break
    assert len(asked) == 1, (asked, result)  # asked once, on this call's stream, before it answered
    assert result is not None and "result" in result, result
    res = result["result"]
    assert not res.get("isError"), res
    assert [x["uri"] for x in res["structuredContent"]["roots"]] == [want]


# ---- a reconnecting GET with a Last-Event-ID ---------------------------------------------------


@pytest.mark.parametrize("last_event_id", ["junk", "0", "x" * 300])
async def test_a_get_with_a_last_event_id_opens_a_new_stream(
    tmp_path: Path, tree: Path, last_event_id: str
) -> None:
    """The server keeps no event history (it sends no event ids): a client reconnecting with
    a Last-Event-ID (made up, stale) gets a new stream, not a 500 with nothing said, and the
    session still answers calls."""
    async with http_server(tmp_path, [tree]) as (url, _, _):
        with anyio.fail_after(30):
            async with httpx2.AsyncClient(timeout=httpx2.Timeout(20)) as h:
                r = await h.post(url, json=init_body({}), headers=ACCEPT)
                assert r.status_code == 200, r.text
                sid = r.headers["mcp-session-id"]
                hdrs = {**ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
                note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                assert (await h.post(url, json=note, headers=hdrs)).status_code == 202
                get = {**hdrs, "accept": "text/event-stream", "last-event-id": last_event_id}
                async with h.stream("GET", url, headers=get) as resp:
                    assert resp.status_code == 200
                    assert resp.headers["content-type"].startswith("text/event-stream")
                call = {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "list_roots", "arguments": {}},
                }
                r = await h.post(url, json=call, headers=hdrs)
                assert r.status_code == 200, r.text
                msgs = _sse_messages(r.text) if "data:" in r.text else [r.json()]
                res = next(m for m in msgs if m.get("id") == 2)["result"]
                assert not res.get("isError"), res
