"""Two versions of the server side by side: the same ``grep`` calls, alternated call by call.

Usage: ``.venv/bin/python benchmarks/ab_mcp_latency.py OTHER_SRC [--rounds N] [--corpus DIR]
[--cache-dir DIR]``: one ``rootgrep serve`` over stdio runs ``OTHER_SRC`` (a ``src`` folder of
another checkout, e.g. ``git archive BASE src | tar -x -C /tmp/base``), one this checkout,
both on the same corpus (default F, the interpreter's lib folder) and cache, with
``--max-answer-chars 100000``. Once both indexes are ready, each round makes one call on
each, so both see the same machine load (this project's machine is shared and noisy: medians
of separate runs moved by ±30%). Prints the median per call of each and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import sysconfig
import tempfile
import time
from typing import Any

import anyio
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

CASES: dict[str, dict[str, Any]] = {
    "rare literal": {"pattern": "getrecursionlimit", "max_results": 200},
    "common literal, first 200": {"pattern": "NotImplementedError", "max_results": 200},
    "common literal, 1,000": {"pattern": "NotImplementedError", "max_results": 1000},
    "date regex, first 200": {
        "pattern": r"[0-9]{4}-[0-9]{2}-[0-9]{2}", "regex": True, "max_results": 200,
    },
}  # fmt: skip


def params(src: str | None, corpus: str, cache: str) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if src is not None:
        env["PYTHONPATH"] = src
    args = ["-m", "rootgrep", "serve", "--root", corpus, "--cache-dir", cache,
            "--max-answer-chars", "100000"]  # fmt: skip
    return StdioServerParameters(command=sys.executable, args=args, env=env)


async def ready(c: Client) -> None:
    with anyio.fail_after(900):
        while True:
            r = await c.call_tool("list_roots", {})
            roots = (r.structured_content or {}).get("roots", [])
            if roots and all(x["index"]["state"] == "ready" for x in roots):
                return
            await anyio.sleep(0.5)


async def run(ns: argparse.Namespace) -> None:
    with open(os.devnull, "w") as quiet:
        other = stdio_client(params(ns.other_src, ns.corpus, ns.cache_dir), errlog=quiet)
        this = stdio_client(params(None, ns.corpus, ns.cache_dir), errlog=quiet)
        async with Client(other, mode="legacy") as b, Client(this, mode="legacy") as a:
            await ready(b)
            await ready(a)
            print("| call | other | this | this / other |\n|---|---:|---:|---:|")
            for name, args in CASES.items():
                times: dict[int, list[float]] = {0: [], 1: []}
                for c in (b, a):
                    for _ in range(3):  # warm-up
                        await c.call_tool("grep", args)
                for _ in range(ns.rounds):
                    for i, c in enumerate((b, a)):
                        t = time.perf_counter()
                        r = await c.call_tool("grep", args)
                        times[i].append(time.perf_counter() - t)
                        assert not r.is_error, r
                n = len((r.structured_content or {}).get("matches", []))
                mb, ma = (statistics.median(times[i]) * 1000 for i in (0, 1))
                print(f"| {name} ({n} lines) | {mb:.1f} ms | {ma:.1f} ms | {ma / mb:.2f}× |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("other_src", help="the src folder of the other version")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--corpus", default=os.path.dirname(sysconfig.get_paths()["stdlib"]))
    p.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "rootgrep-prof"))
    anyio.run(run, p.parse_args())


if __name__ == "__main__":
    main()
