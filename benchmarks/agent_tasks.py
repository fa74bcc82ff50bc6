"""An agent's tasks through a real MCP client over stdio (issue 24): is the first answer right?

Usage: ``python benchmarks/agent_tasks.py [--json FILE]`` (``make bench`` runs it). Nothing is
downloaded: a small tree is generated in the manner of five public repositories (redis' C,
sympy's Python, express's JavaScript, tokio's Rust, zoekt's Go), a ``rootgrep serve`` over
stdio indexes it, and each task is asked as an agent would ask it, from its first call on. Per
task it prints whether the answer was right (checked against ripgrep or against what the tree
was made to hold), how many characters of text the model read, and how many calls it took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

BIN = Path(sys.executable).parent
RG = str(BIN / "rg") if (BIN / "rg").exists() else (shutil.which("rg") or "rg")


def make_tree(top: Path) -> None:
    """The corpus: a few files of each repository's kind, with what each task looks for."""
    (top / "redis" / "src").mkdir(parents=True)
    (top / "redis" / "src" / "networking.c").write_text(
        '/* Networking: client connections. */\n#include "server.h"\n\n'
        "static void acceptCommonHandler(connection *conn, int flags, char *ip) {\n"
        "    client *c = createClient(conn);\n    if (c == NULL) return;\n}\n\n"
        "void readQueryFromClient(connection *conn) {\n    client *c = connGetPrivateData(conn);\n"
        "    if (processCommandAndResetClient(c) == C_ERR) return;\n}\n\n"
        "int processCommandAndResetClient(client *c) {\n    int deadclient = 0;\n"
        "    if (processCommand(c) == C_OK) commandProcessed(c);\n    return deadclient;\n}\n"
    )
    (top / "redis" / "src" / "anet.c").write_text(
        "int anetTcpAccept(char *err, int s, char *ip, size_t ip_len, int *port) {\n"
        "    return anetGenericAccept(err, s, NULL, NULL);\n}\n"
    )
    (top / "redis" / "src" / "server.c").write_text(
        "int processCommand(client *c) {\n    return C_OK;\n}\n\n"
        + "".join(f"static int helper{i}(void) {{\n    return {i};\n}}\n" for i in range(400))
    )
    sym = top / "sympy" / "sympy"
    for d in ("core", "simplify", "polys", "simplify/tests"):
        (sym / d).mkdir(parents=True, exist_ok=True)
    (sym / "core" / "expr.py").write_text(
        "class Expr:\n    def simplify(self, **kwargs):\n"
        "        from sympy.simplify import simplify\n"
        "        return simplify(self, **kwargs)\n"
    )
    (sym / "polys" / "polytools.py").write_text(
        "class Poly:\n    def simplify(self):\n        return self\n"
    )
    (sym / "simplify" / "simplify.py").write_text(
        "".join(f"def helper_{i}(x):\n    return x\n\n" for i in range(200))
        + "def simplify(expr, ratio=1.7, measure=None, rational=False):\n    return expr\n"
    )
    (sym / "simplify" / "tests" / "test_simplify.py").write_text("def simplify():\n    pass\n")
    (top / "express" / "lib" / "router").mkdir(parents=True)
    (top / "express" / "lib" / "express.js").write_text(
        "var Router = require('./router');\nexports.Router = Router;\n"
    )
    (top / "express" / "lib" / "router" / "index.js").write_text(
        "module.exports = Router;\n\nfunction Router(options) {\n  return this;\n}\n"
    )
    (top / "tokio" / "src" / "sync").mkdir(parents=True)
    (top / "tokio" / "src" / "sync" / "mpsc.rs").write_text(
        "pub struct Semaphore {\n    permits: usize,\n}\n\nimpl<T> Receiver<T> {\n"
        "    pub fn new(chan: Chan<T>) -> Receiver<T> {\n        Receiver { chan }\n    }\n}\n"
    )
    (top / "zoekt" / "build").mkdir(parents=True)
    (top / "zoekt" / "build" / "builder.go").write_text(
        "package build\n\ntype Options struct {\n\tIndexDir string\n}\n\n"
        "func (o *Options) HashOptions() string {\n\treturn o.IndexDir\n}\n\n"
        "func ParseDuration(s string) (int, error) {\n\treturn 0, nil\n}\n"
    )
    (top / "zoekt" / "build" / "big.txt").write_text(
        "".join(f"line {i:05} of a long file, read window by window\n" for i in range(1, 3001))
    )


def rg_count(top: Path, *args: str) -> tuple[int, int]:
    out = subprocess.run([RG, "--no-config", "-c", *args], cwd=top, capture_output=True, text=True)
    counts = [int(r.rsplit(":", 1)[1]) for r in out.stdout.splitlines()]
    return sum(counts), len(counts)


def text(r: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in r.content)


class Session:
    """One client session: every call's text counted (what the model reads)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.calls = 0
        self.chars = 0

    async def call(self, tool: str, args: dict[str, Any]) -> Any:
        r = await self.client.call_tool(tool, args)
        self.calls += 1
        self.chars += len(text(r))
        return r


async def task_callers(s: Session, top: Path) -> bool:
    r = await s.call("grep", {"pattern": r"processCommand\(c\)", "path": "redis"})
    return "redis/src/networking.c › processCommandAndResetClient" in text(r)


async def task_alternation(s: Session, top: Path) -> bool:
    r = await s.call("grep", {"pattern": "anetTcpAccept|acceptCommonHandler", "path": "redis"})
    n, files = rg_count(top / "redis", "-e", "anetTcpAccept|acceptCommonHandler")
    return (
        r.structured_content["total_matches"] == n and r.structured_content["total_files"] == files
    )


async def task_literal_parens(s: Session, top: Path) -> bool:
    """A literal written as an agent writes it: nothing as a regex, and the answer says what
    the literal finds."""
    r = await s.call("grep", {"pattern": "processCommand(c)", "path": "redis"})
    n, _ = rg_count(top / "redis", "-F", "-e", "processCommand(c)")
    return f"it matches {n} line" in text(r)


async def task_true_total(s: Session, top: Path) -> bool:
    r = await s.call("grep", {"pattern": "return"})
    n, files = rg_count(top, "-e", "return")
    sc = r.structured_content
    return (sc["total_matches"], sc["total_files"]) == (n, files) and f"of {n} matches" in text(r)


async def task_read_long_file(s: Session, top: Path) -> bool:
    want = (top / "zoekt" / "build" / "big.txt").read_text()
    got, start = [], 1
    while True:
        r = await s.call("read_file", {"path": "zoekt/build/big.txt", "start_line": start})
        got.append(r.structured_content["content"])
        nxt = re.search(r"next: start_line=(\d+)\)$", text(r))
        if nxt is None:
            break
        start = int(nxt.group(1))
    return "".join(got) == want


async def task_rust_owner(s: Session, top: Path) -> bool:
    r = await s.call("outline", {"path": "tokio/src/sync/mpsc.rs"})
    return "method new (of Receiver)" in text(r)


async def task_go_receiver(s: Session, top: Path) -> bool:
    r = await s.call("outline", {"path": "zoekt/build/builder.go"})
    top_level = r.structured_content["symbols"]
    options = next((n for n in top_level if n["name"] == "Options"), {})
    return [c["name"] for c in options.get("children", [])] == ["HashOptions"]


async def task_definition_first(s: Session, top: Path) -> bool:
    r = await s.call("find_symbol", {"name": "simplify"})
    return r.structured_content["symbols"][0]["path"] == "sympy/sympy/simplify/simplify.py"


async def task_reexport(s: Session, top: Path) -> bool:
    """The function first, the `exports.Router = Router` after it, marked as a re-export."""
    r = await s.call("find_symbol", {"name": "Router"})
    hits = [(h["path"], h.get("binding")) for h in r.structured_content["symbols"]]
    return hits == [
        ("express/lib/router/index.js", None),
        ("express/lib/express.js", "alias"),
    ] and ("re-export" in text(r))


async def task_did_you_mean(s: Session, top: Path) -> bool:
    r = await s.call("find_symbol", {"name": "simplfy"})
    return "did you mean simplify" in text(r)


async def task_mistyped_path(s: Session, top: Path) -> bool:
    r = await s.call("read_file", {"path": "redis/src/networkng.c"})
    return "did you mean 'redis/src/networking.c'?" in text(r)


async def task_sub_words(s: Session, top: Path) -> bool:
    r = await s.call("search", {"query": "parse duration"})
    hits = r.structured_content["results"]
    return bool(hits) and hits[0]["path"] == "zoekt/build/builder.go"


async def task_best_line(s: Session, top: Path) -> bool:
    r = await s.call("search", {"query": "where are client connections accepted"})
    hits = r.structured_content["results"]
    return (
        bool(hits)
        and hits[0]["path"] == "redis/src/networking.c"
        and any("acceptCommonHandler" in sn["text"] for sn in hits[0]["snippets"][:2])
    )


TASKS: list[tuple[str, Callable[[Session, Path], Awaitable[bool]]]] = [
    ("who calls processCommand (callers in the text)", task_callers),
    ("a|b regex by default", task_alternation),
    ("a literal with parentheses", task_literal_parens),
    ("true totals of a common word", task_true_total),
    ("read a 3,000-line file to the end", task_read_long_file),
    ("Rust impl method's owner", task_rust_owner),
    ("Go method under its receiver", task_go_receiver),
    ("find_symbol: the definition first", task_definition_first),
    ("find_symbol: a re-export marked", task_reexport),
    ("find_symbol: did you mean", task_did_you_mean),
    ("read_file: a mistyped path", task_mistyped_path),
    ("search: identifiers' sub-words", task_sub_words),
    ("search: the line holding most words", task_best_line),
]


async def run(top: Path, cache: Path) -> list[dict[str, Any]]:
    params = StdioServerParameters(
        command=str(BIN / "rootgrep"),
        args=["serve", "--root", str(top), "--cache-dir", str(cache)],
    )
    rows = []
    async with Client(stdio_client(params), mode="legacy") as c:
        deadline = time.monotonic() + 120
        while "ready" not in text(await c.call_tool("list_roots", {})):  # (built first)
            if time.monotonic() > deadline:
                raise SystemExit("the index was not built within 120 s")
            await asyncio.sleep(0.1)
        for name, task in TASKS:
            s = Session(c)
            try:
                ok = await task(s, top)
            except Exception as e:  # a task that breaks is a wrong answer, said so
                ok = False
                name += f" ({type(e).__name__}: {e})"
            rows.append({"task": name, "correct": ok, "chars": s.chars, "calls": s.calls})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp) / "repos"
        make_tree(top)
        rows = asyncio.run(run(top, Path(tmp) / "cache"))
    print("\n| task | correct | characters | calls |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['task']} | {'yes' if r['correct'] else 'NO'} | {r['chars']} | {r['calls']} |")
    right = sum(r["correct"] for r in rows)
    print(f"\n{right} of {len(rows)} tasks answered right; {sum(r['calls'] for r in rows)} calls, "
          f"{sum(r['chars'] for r in rows)} characters")  # fmt: skip
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
