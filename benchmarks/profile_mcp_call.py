"""Where one MCP ``grep`` call's time goes, stage by stage, on both sides of a stdio session.

Usage: ``.venv/bin/python benchmarks/profile_mcp_call.py [--corpus DIR] [--calls N]
[--cache-dir DIR] [--case KEY]... [--max-answer-chars N]`` (default corpus: the interpreter's
lib folder, F; keep the cache dir between runs to skip the first build; with
``PYTHONPATH=<other checkout>/src`` it profiles that version of the server). The script
starts ``rootgrep serve --transport stdio`` as a child of itself (``--child``), with time
stamps around the stages of a call (the SDK's and rootgrep's own functions, wrapped before the
server starts), waits until the index is ready, then makes N calls per case through the real
``Client``, itself timed the same way on the client side. It prints, per case, each stage's
mean time per call in ms.

Stages nest (``server: tool call`` holds ``rootgrep: call``, which holds ``rootgrep:
Service.grep``...): the rows overlap, they do not add up. ``to_thread hop`` is the time spent
getting into and out of worker threads (``anyio.to_thread.run_sync`` minus the work it ran;
the stdio transport's own reads and writes included). For a sampling profile of the server
instead, run it under py-spy (a dev tool, not a dependency):
``py-spy record -o prof.svg -- .venv/bin/rootgrep serve ...``.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import signal
import sys
import sysconfig
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

# -- stage timers (used by both processes) ------------------------------------------------------

TOTALS: dict[str, float] = defaultdict(float)
COUNTS: dict[str, int] = defaultdict(int)


def _record(name: str, seconds: float) -> None:
    TOTALS[name] += seconds
    COUNTS[name] += 1


def wrap(owner: Any, attr: str, name: str) -> None:
    """Time every call of ``owner.attr`` (a function, method or coroutine function) as ``name``."""
    fn = inspect.getattr_static(owner, attr)
    kind = type(fn)
    raw = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn
    if inspect.iscoroutinefunction(raw):

        @functools.wraps(raw)
        async def timed_async(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return await raw(*a, **kw)
            finally:
                _record(name, time.perf_counter() - t)

        new: Any = timed_async
    else:

        @functools.wraps(raw)
        def timed(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return raw(*a, **kw)
            finally:
                _record(name, time.perf_counter() - t)

        new = timed
    if kind in (classmethod, staticmethod):
        new = kind(new)
    setattr(owner, attr, new)


def wrap_to_thread(name: str, work_name: str) -> None:
    """``anyio.to_thread.run_sync``: the whole hop and, apart, the work it ran."""
    import anyio.to_thread

    orig = anyio.to_thread.run_sync

    async def run_sync(func: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        def work(*a: Any) -> Any:
            t = time.perf_counter()
            try:
                return func(*a)
            finally:
                _record(work_name, time.perf_counter() - t)

        t = time.perf_counter()
        try:
            return await orig(work, *args, **kw)
        finally:
            _record(name, time.perf_counter() - t)

    anyio.to_thread.run_sync = run_sync  # type: ignore[assignment]


def snapshot() -> dict[str, tuple[float, int]]:
    return {k: (TOTALS[k], COUNTS[k]) for k in TOTALS}


def reset() -> None:
    TOTALS.clear()
    COUNTS.clear()


# -- the server child ---------------------------------------------------------------------------

SERVER_STAGES = (
    # (module, owner attribute path, attribute, stage name)
    ("mcp.server.runner", "ServerRunner", "_on_request", "server: request (after parse)"),
    ("mcp.server.runner", None, "_dump_result", "server: result model_dump"),
    ("mcp.server.runner._methods", None, "serialize_server_result", "server: result sieve"),
    ("mcp.server.runner._methods", None, "validate_client_request", "server: request check"),
    ("mcp_types", "CallToolRequestParams", "model_validate", "server: params model"),
    ("mcp.server.mcpserver.server", "MCPServer", "call_tool", "server: tool call"),
    ("mcp.server.mcpserver.utilities.func_metadata", "FuncMetadata", "validate_arguments",
     "server: argument validation"),
    ("mcp.server.mcpserver.tools.base", None, "resolve_arguments", "server: resolvers"),
    ("mcp.server.mcpserver.utilities.func_metadata", "FuncMetadata", "convert_result",
     "server: output validation"),
    ("rootgrep.server", "RootgrepServer", "call", "rootgrep: call"),
    ("rootgrep.server", "RootgrepServer", "_run", "rootgrep: _run (hop + work)"),
    ("rootgrep.server", "RootgrepServer", "_lease", "rootgrep: lease"),
    ("rootgrep.service.grepping", "Grepping", "grep", "rootgrep: Service.grep"),
    ("rootgrep.service.grep_scope", None, "run_grep", "rootgrep: run_grep"),
    ("rootgrep.service.grep_scope", None, "indexed_batches", "rootgrep: index candidates"),
    ("rootgrep.index.store", "RootIndex", "candidates", "rootgrep: store.candidates"),
    ("rootgrep.index.store", "RootIndex", "symbols_of", "rootgrep: store.symbols_of"),
    ("rootgrep.index.manager", "IndexManager", "activate", "rootgrep: indexes.activate"),
    ("rootgrep.tools.searching", None, "fit", "rootgrep: fit"),
    ("rootgrep.tools.searching", None, "cut_items", "rootgrep: cut_items"),
    ("rootgrep.models", "GrepResult", "model_dump", "rootgrep: structured model_dump"),
    ("rootgrep.sessions", None, "scope", "rootgrep: scope"),
)  # fmt: skip

CLIENT_STAGES = (
    ("mcp.client.client", "Client", "call_tool", "client: call_tool (whole call)"),
    ("mcp.client.stdio", None, "_parse_line", "client: parse the answer's JSON line"),
    ("mcp.client.session", "ClientSession", "validate_tool_result",
     "client: output schema check (jsonschema)"),
)  # fmt: skip


def _install(stages: tuple[tuple[str, str | None, str, str], ...]) -> None:
    import importlib

    for module, owner_name, attr, name in stages:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            parent, _, child = module.rpartition(".")
            mod = getattr(importlib.import_module(parent), child)
        owner = getattr(mod, owner_name, None) if owner_name else mod
        if owner is None or not hasattr(owner, attr):
            print(f"(profile: no {module}.{owner_name}.{attr}; skipped)", file=sys.stderr)
            continue
        wrap(owner, attr, name)


def _install_stdio_writer() -> None:
    """The JSON dump of each outgoing message (stdio's writer calls ``model_dump_json``)."""
    import mcp_types

    for cls_name in ("JSONRPCResponse", "JSONRPCNotification", "JSONRPCRequest"):
        cls = getattr(mcp_types, cls_name, None)
        if cls is not None:
            wrap(cls, "model_dump_json", "server: JSON dump of the message")


def wrap_gc(side: str) -> None:
    """Garbage collections: their time per generation (a full one walks every object)."""
    import gc

    started: list[float] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            _record(f"{side}: gc generation {info['generation']}", time.perf_counter() - started[0])

    gc.callbacks.append(on_gc)


def child_main(stats_file: str, argv: list[str]) -> None:
    _install(SERVER_STAGES)
    wrap_gc("server")
    _install_stdio_writer()
    wrap_to_thread("rootgrep: to_thread (hop + work)", "rootgrep: to_thread work")
    wrap_tool_answer()

    def on_reset(*_: Any) -> None:
        reset()

    def on_dump(*_: Any) -> None:
        with open(stats_file, "w", encoding="utf-8") as f:
            json.dump(snapshot(), f)

    signal.signal(signal.SIGUSR1, on_reset)
    signal.signal(signal.SIGUSR2, on_dump)
    with open(stats_file + ".pid", "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))
    from rootgrep.cli import main

    raise SystemExit(main(argv))


def wrap_tool_answer() -> None:
    """The grep tool's text rendering (its spec holds the function itself)."""
    from rootgrep.tools import searching

    spec = searching.GREP
    answer = spec.answer

    def timed(r: Any, out: Any) -> str:
        t = time.perf_counter()
        try:
            return answer(r, out)
        finally:
            _record("rootgrep: text answer (fit, cut)", time.perf_counter() - t)

    object.__setattr__(spec, "answer", timed)


# -- the client parent --------------------------------------------------------------------------

CASES = {
    "rare": {"pattern": "getrecursionlimit", "max_results": 200},
    "200": {"pattern": "NotImplementedError", "max_results": 200},
    "1000": {"pattern": "NotImplementedError", "max_results": 1000},
    "date": {"pattern": r"[0-9]{4}-[0-9]{2}-[0-9]{2}", "regex": True, "max_results": 200},
}


def parent_main(ns: argparse.Namespace) -> None:
    import anyio
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    _install(CLIENT_STAGES)
    wrap_gc("client")
    fd, stats_name = tempfile.mkstemp(prefix="rootgrep-prof-", suffix=".json")
    os.close(fd)
    argv = [
        os.path.abspath(__file__), "--child", stats_name, "--", "serve",
        "--transport", "stdio", "--root", ns.corpus, "--cache-dir", ns.cache_dir,
        "--max-answer-chars", str(ns.max_answer_chars),
    ]  # fmt: skip

    async def run() -> None:
        # (the whole environment: PYTHONPATH=<other checkout>/src profiles another version)
        params = StdioServerParameters(command=sys.executable, args=argv, env=dict(os.environ))
        async with Client(stdio_client(params), mode="legacy", read_timeout_seconds=900) as c:
            t0 = time.monotonic()
            while True:
                r = await c.call_tool("list_roots", {})
                roots = (r.structured_content or {}).get("roots", [])
                if roots and all(x["index"]["state"] == "ready" for x in roots):
                    break
                if time.monotonic() - t0 > 900:
                    raise TimeoutError("index not ready")
                await anyio.sleep(0.5)
            with open(stats_name + ".pid", encoding="utf-8") as f:
                pid = int(f.read())
            for key in ns.case or list(CASES):
                args = CASES[key]
                for _ in range(3):  # warm-up
                    await c.call_tool("grep", args)
                reset()
                os.kill(pid, signal.SIGUSR1)
                await anyio.sleep(0.2)
                for _ in range(ns.calls):
                    res = await c.call_tool("grep", args)
                    assert not res.is_error, res
                os.kill(pid, signal.SIGUSR2)
                await anyio.sleep(0.3)
                with open(stats_name, encoding="utf-8") as f:
                    server = {k: tuple(v) for k, v in json.load(f).items()}
                n = len((res.structured_content or {}).get("matches", []))
                print_table(f"{key}: {args} ({n} matches), {ns.calls} calls", server, ns.calls)

    anyio.run(run)


def print_table(title: str, server: dict[str, tuple[float, int]], calls: int) -> None:
    rows = sorted(server.items()) + sorted(snapshot().items())
    print(f"\n## {title}\n")
    print("| stage | ms per call | calls per call |")
    print("|---|---:|---:|")
    for name, (total, count) in rows:
        print(f"| {name} | {total / calls * 1000:.2f} | {count / calls:.1f} |")
    hop = server.get("rootgrep: to_thread (hop + work)", (0.0, 0))[0]
    work = server.get("rootgrep: to_thread work", (0.0, 0))[0]
    print(f"| (to_thread hop: whole minus work) | {(hop - work) / calls * 1000:.2f} | |")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        stats_file = sys.argv[2]
        rest = sys.argv[3:]
        child_main(stats_file, rest[1:] if rest[:1] == ["--"] else rest)
        return
    default = os.path.dirname(sysconfig.get_paths()["stdlib"])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", default=default, help="directory to serve (default: F)")
    p.add_argument("--calls", type=int, default=30, help="timed calls per case")
    p.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "rootgrep-prof"))
    p.add_argument("--case", action="append", choices=sorted(CASES), help="(repeatable)")
    p.add_argument(
        "--max-answer-chars",
        type=int,
        default=100_000,
        help="the server's answer budget (as the benchmark: 1,000 lines fit)",
    )
    parent_main(p.parse_args())


if __name__ == "__main__":
    main()
