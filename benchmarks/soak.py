"""Soak: many concurrent MCP sessions against one real ``rootgrep serve --transport http``.

``make soak`` (or ``python benchmarks/soak.py [--sessions 64] [--calls 100] [--rounds 2]``).

The server is a child process serving two operator roots, copies of parts of the standard
library in a temporary directory, with a bearer token. Each round opens ``--sessions``
sessions at once through the real SDK client over streamable HTTP and has each make
``--calls`` calls, one after the other, mixed over ``grep``, ``search``, ``find_symbol``,
``read_file`` and ``find_files``. The sessions come in four kinds (a quarter each):

- ``legacy``: handshake era, no roots capability (the operator roots are the scope);
- ``modern``: 2026-07-28, no roots capability;
- ``legacy+roots``: handshake era, announcing two client roots beneath the operator roots;
  half of them change their roots twice mid-run (``notifications/roots/list_changed``, then
  a different ``roots/list`` answer, disjoint from the old one), while a call is in flight;
- ``modern+roots``: 2026-07-28 with roots (sent with each call); half change them twice.

Every answer is checked: a ``read_file`` equals the file on disk, every path a ``grep``,
``search``, ``find_symbol`` or ``find_files`` answer names is a file of the root the call
asked about. Outcomes are counted in three kinds:

- ``ok``: a correct answer;
- ``expected``: a ``[code]`` error that the call had to expect: (a) the call was in flight
  while its session's roots changed (``root_removed``, ``outside_roots``, ``unknown_root``,
  ``not_found``), or (b) the probe each change is followed by: a ``read_file`` of a file of
  a root just removed, by absolute path, which must answer ``[outside_roots]`` (a success
  there would be a failure: the removed root was still served);
- ``failure``: anything else (an exception or time-out, an error without a ``[code]``, an
  unexpected code, a wrong answer).

The server's RSS and open fds are read from ``/proc/<pid>/status`` and ``/proc/<pid>/fd``
(the benchmark's view of the process, not the server's own): after a warm-up (indexes
built, every tool called once in each kind of session), right after each round's calls
(sessions still open) and after its sessions closed (fds polled until they are back to the
baseline or 30 s passed; RSS ``--settle`` seconds later, 3 by default: the server gives
freed memory back to the system after 1 s idle, memory.py). ``--smaps`` also shows where
RSS is (``/proc/<pid>/smaps``: the main heap, the threads' malloc arenas, thread stacks,
other anonymous memory, files); ``--server-env NAME=VALUE`` sets a variable in the
server's environment (e.g. ``MALLOC_ARENA_MAX``). The run fails (exit 1) on any failure,
on fds that do not come back to the baseline, or on RSS after the last round more than
``--rss-margin-mib`` above RSS after the first (a leak grows with the rounds; what a round
allocates once stays in CPython's and the allocator's free lists, so RSS is not expected to
fall to the warm-up's).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx2
from mcp import MCPDeprecationWarning
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, ListRootsResult, Root

TOOLS = ("grep", "search", "find_symbol", "read_file", "find_files")
PARTS_A = ("asyncio", "email", "json", "http", "logging", "concurrent", "importlib", "urllib")
PARTS_B = ("xml", "unittest", "wsgiref", "sqlite3", "tomllib", "zoneinfo", "dbm", "html")
IN_FLIGHT_CODES = {"root_removed", "outside_roots", "unknown_root", "not_found"}
WORDS = ("import", "return", "def ", "class ", "self", "raise", "yield", "None", "lambda")
CALL_TIMEOUT = 60.0  # one call's hang guard (a lost answer fails instead of hanging)
TOKEN_ENV = "RG_SOAK_TOKEN"


def uri(p: Path) -> str:
    return "file://" + quote(str(p))


# ---- the trees ----------------------------------------------------------------------------


@dataclass
class Tree:
    """A root as the benchmark knows it: files (root-relative) and names defined in them."""

    path: Path
    files: list[str]
    symbols: list[str]
    lines: dict[str, int]

    @property
    def uri(self) -> str:
        return uri(self.path)


_DEF = re.compile(r"^\s*(?:def|class)\s+([A-Za-z_]\w*)", re.M)


def copy_parts(dst: Path, parts: Sequence[str]) -> None:
    src = Path(sysconfig.get_paths()["stdlib"])
    for part in parts:
        base = src / part
        if not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if d not in ("__pycache__", "test", "tests")]
            rel = Path(dirpath).relative_to(src)
            for name in filenames:
                if name.endswith(".py"):
                    (dst / rel).mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(Path(dirpath) / name, dst / rel / name)


def scan(path: Path) -> Tree:
    files: list[str] = []
    symbols: set[str] = set()
    lines: dict[str, int] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            rel = p.relative_to(path).as_posix()
            files.append(rel)
            body = p.read_text(errors="replace")
            lines[rel] = len(body.splitlines())
            symbols.update(_DEF.findall(body))
    return Tree(path, files, sorted(symbols), lines)


# ---- the server ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    tmp: Path,
    roots: Sequence[Path],
    token: str,
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [
        sys.executable, "-m", "rootgrep", "serve", "--transport", "http", "--port", str(port),
        "--auth-token-env", TOKEN_ENV, "--cache-dir", str(tmp / "cache"),
        "--index-idle-seconds", "2",
    ]  # fmt: skip
    for r in roots:
        argv += ["--root", str(r)]
    argv += extra
    err = open(tmp / "server.err", "wb")  # noqa: SIM115 (the child's; closed with it)
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err, cwd=str(tmp),
        env={**os.environ, **(env or {}), TOKEN_ENV: token},
    )  # fmt: skip
    err.close()
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {(tmp / 'server.err').read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("the server did not start listening within 60 s") from None
            time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}/mcp"


@dataclass
class Sample:
    rss_kib: int
    hwm_kib: int
    fds: int
    threads: int

    def show(self) -> str:
        return (
            f"RSS {self.rss_kib / 1024:7.1f} MiB  fds {self.fds:4d}  threads {self.threads:3d}"
            f"  (peak RSS {self.hwm_kib / 1024:.1f} MiB)"
        )


def smaps(pid: int) -> str:
    """Where the server's resident memory is, from ``/proc/<pid>/smaps``: the main heap
    (``[heap]``: brk), the other malloc arenas (anonymous mappings inside 64 MiB-aligned
    reservations: the threads' arenas), thread stacks (anonymous mappings after a guard
    page),
    other anonymous memory (mmap'd blocks, Tantivy's and CPython's arenas) and file-backed
    pages, in MiB."""
    kinds: Counter[str] = Counter()
    maps: list[tuple[int, int, str, str]] = []  # start, end, perms, name
    rss: list[int] = []
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                maps.append((lo, hi, head[1], head[5] if len(head) > 5 else ""))
                rss.append(0)
            elif head and head[0] == "Rss:":
                rss[-1] = int(head[1])
    for n, (lo, _hi, _perms, name) in enumerate(maps):
        before = maps[n - 1] if n else None
        if name == "[heap]":
            kind = "heap"
        elif name.startswith("[stack"):
            kind = "main stack"
        elif name:
            kind = "files"
        elif lo % (64 << 20) == 0:  # a thread arena's heap starts 64 MiB-aligned
            kind = "arenas"
        elif (
            before is not None
            and before[1] == lo
            and before[2] == "---p"
            and (before[1] - before[0] <= 64 << 10)
        ):  # after a guard page: a thread's stack
            kind = "stacks"
        else:
            kind = "anon"
        kinds[kind] += rss[n]
    return "  ".join(f"{k} {v / 1024:.1f}" for k, v in sorted(kinds.items()))


def sample(pid: int) -> Sample:
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                fields[key] = int(value.split()[0])
    return Sample(
        fields["VmRSS"], fields["VmHWM"], len(os.listdir(f"/proc/{pid}/fd")), fields["Threads"]
    )


# ---- the sessions -------------------------------------------------------------------------


class Roots:
    """A client's roots callback: raw URIs, changed at will."""

    def __init__(self, trees: Sequence[Tree]) -> None:
        self.trees = list(trees)

    async def __call__(self, context: Any) -> ListRootsResult:
        return ListRootsResult.model_construct(
            roots=[Root(uri=t.uri) for t in self.trees]  # type: ignore[arg-type]
        )


@dataclass
class Stats:
    latency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    ok: Counter[str] = field(default_factory=Counter)
    expected: Counter[str] = field(default_factory=Counter)  # "why: [code]"
    failures: list[str] = field(default_factory=list)
    changes: int = 0


def text_of(r: CallToolResult) -> str:
    return "\n".join(getattr(c, "text", "") for c in r.content)


def error_code(r: CallToolResult) -> str | None:
    t = text_of(r)
    m = re.match(r"\[([a-z_]+)\] ", t)
    return m.group(1) if m else None


def check_answer(tool: str, args: dict[str, Any], tree: Tree, r: CallToolResult) -> str | None:
    """What is wrong with a successful answer (None: nothing)."""
    sc = r.structured_content or {}
    if tool == "read_file":
        rel = Path(args["path"]).relative_to(tree.path).as_posix()
        lines = (tree.path / rel).read_text().splitlines(keepends=True)
        start = sc.get("start_line") or 1
        want = "".join(lines[start - 1 : sc.get("end_line") or len(lines)])
        if sc.get("content") != want or sc.get("path") != rel:
            return f"read_file {rel}: content or path differs from the file on disk"
        return None
    items = {"grep": "matches", "search": "results", "find_symbol": "symbols"}.get(tool, "files")
    known = set(tree.files)
    for item in sc.get(items, []):
        if item.get("path") not in known:
            return f"{tool} named {item.get('path')!r}, not a file of {tree.path}"
    if tool == "find_files" and args["pattern"] == "*.py" and not sc.get("files"):
        return "find_files *.py found nothing"
    return None


def make_call(rng: random.Random, tree: Tree, tool: str) -> dict[str, Any]:
    if tool == "grep":
        if rng.random() < 0.3 and tree.symbols:
            return {"pattern": rng.choice(tree.symbols), "root": tree.uri, "whole_word": True}
        return {"pattern": rng.choice(WORDS), "root": tree.uri, "max_results": 50}
    if tool == "search":
        q = " ".join(rng.sample(tree.symbols, 2)) if rng.random() < 0.5 else rng.choice(WORDS)
        return {"query": q, "root": tree.uri}
    if tool == "find_symbol":
        name = rng.choice(tree.symbols)
        return {"name": name if rng.random() < 0.7 else name[:4], "root": tree.uri,
                "exact": rng.random() < 0.7}  # fmt: skip
    if tool == "read_file":
        rel = rng.choice([f for f in tree.files if tree.lines[f]])
        args: dict[str, Any] = {"path": str(tree.path / rel)}
        if rng.random() < 0.5:
            args["start_line"] = 1 + rng.randrange(tree.lines[rel])
            args["end_line"] = args["start_line"] + rng.randrange(200)
        return args
    pattern = rng.choice(["*.py", "__init__", "*/*.py", "util"])
    return {"pattern": pattern, "root": tree.uri, "max_results": 100}


@dataclass
class Plan:
    kind: str  # legacy | modern | legacy+roots | modern+roots
    roots: list[list[Tree]] | None  # the roots announced in turn (None: no capability)
    change_at: list[int]  # the calls during which the roots change


async def run_session(
    url: str, token: str, plan: Plan, calls: int, seed: int, stats: Stats, operator: list[Tree],
    hold: tuple[anyio.Event, Any] | None = None,
) -> None:  # fmt: skip
    rng = random.Random(seed)
    stub = Roots(plan.roots[0]) if plan.roots else None
    mode = "legacy" if plan.kind.startswith("legacy") else "auto"
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx2.Timeout(CALL_TIMEOUT, read=CALL_TIMEOUT * 2),
        ) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            list_roots_callback=stub,
            read_timeout_seconds=CALL_TIMEOUT,
        ) as client,
    ):
        current = plan.roots[0] if plan.roots else operator
        generation = 0
        probe: Tree | None = None
        for i in range(calls):
            if probe is not None:  # the call after a change: a removed root is not served
                tool, tree = "read_file", probe
                args = {"path": str(probe.path / rng.choice(probe.files))}
                probe = None
                why = "probe"
            else:
                tool, tree = rng.choice(TOOLS), rng.choice(current)
                args = make_call(rng, tree, tool)
                why = None
            changing = i in plan.change_at and stub is not None and plan.roots is not None

            async def change(new: list[Tree]) -> None:
                await anyio.sleep(rng.random() * 0.02)
                stub.trees = new  # type: ignore[union-attr]
                if mode == "legacy":
                    await client.send_roots_list_changed()

            t0 = time.perf_counter()
            result: CallToolResult | None = None
            exc: BaseException | None = None
            try:
                with anyio.fail_after(CALL_TIMEOUT):
                    async with anyio.create_task_group() as tg:
                        if changing:
                            tg.start_soon(change, plan.roots[generation + 1])  # type: ignore[index]
                        result = await client.call_tool(tool, args)
            except Exception as e:  # a failure: counted and shown
                exc = e
            elapsed = time.perf_counter() - t0
            stats.latency[tool].append(elapsed)
            if changing:
                stats.changes += 1
                old = current
                generation += 1
                current = plan.roots[generation]  # type: ignore[index]
                probe = rng.choice(old)
                why = "in flight"
            tag = f"{plan.kind} #{seed} call {i} {tool}"
            if exc is not None or result is None:
                stats.failures.append(f"{tag}: {type(exc).__name__}: {exc}"[:500])
                continue
            code = error_code(result)
            if why == "probe":
                if code == "outside_roots":
                    stats.expected["probe of a removed root: [outside_roots]"] += 1
                else:
                    answer = text_of(result)[:300]
                    stats.failures.append(f"{tag}: a removed root answered: {answer}")
                continue
            if result.is_error:
                if why == "in flight" and code in IN_FLIGHT_CODES:
                    stats.expected[f"roots changed in flight: [{code}]"] += 1
                else:
                    stats.failures.append(f"{tag} {args}: {text_of(result)[:300]}")
                continue
            wrong = check_answer(tool, args, tree, result)
            if wrong:
                stats.failures.append(f"{tag}: {wrong}")
            else:
                stats.ok[tool] += 1
        if hold is not None:
            gate, done = hold
            done()
            hold = None
            await gate.wait()


def plans(sessions: int, calls: int, a: Path, b: Path, rng: random.Random) -> list[Plan]:
    """A quarter of each kind; client roots are pairs of directories beneath the operator
    roots, and a change moves to a pair disjoint from the one before."""
    subs = [d for base in (a, b) for d in sorted(base.iterdir()) if d.is_dir()]
    trees = [scan(d) for d in subs]
    trees = [t for t in trees if len(t.files) >= 2 and t.symbols]
    out: list[Plan] = []
    for n in range(sessions):
        kind = ("legacy", "modern", "legacy+roots", "modern+roots")[n % 4]
        if not kind.endswith("roots"):
            out.append(Plan(kind, None, []))
            continue
        order = rng.sample(trees, 6)
        gens = [order[0:2], order[2:4], order[4:6]]
        change = (n // 4) % 2 == 1
        at = sorted(rng.sample(range(10, calls - 10), 2)) if change and calls > 30 else []
        out.append(Plan(kind, gens, at))
    return out


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def table(stats: Stats) -> str:
    rows = ["| tool | calls | p50 ms | p99 ms | max ms |", "|---|---:|---:|---:|---:|"]
    every: list[float] = []
    for tool in TOOLS:
        xs = stats.latency.get(tool, [])
        every += xs
        rows.append(
            f"| {tool} | {len(xs)} | {pct(xs, 0.5) * 1e3:.1f} | {pct(xs, 0.99) * 1e3:.1f} "
            f"| {max(xs, default=0) * 1e3:.1f} |"
        )
    rows.append(
        f"| **all** | {len(every)} | {pct(every, 0.5) * 1e3:.1f} | {pct(every, 0.99) * 1e3:.1f} "
        f"| {max(every, default=0) * 1e3:.1f} |"
    )
    return "\n".join(rows)


async def warm_up(url: str, token: str, operator: list[Tree], sub: list[Tree]) -> None:
    """Wait for both indexes, then call every tool once in each kind of session."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as c,
    ):
        with anyio.fail_after(300):
            while True:
                r = await c.call_tool("list_roots", {})
                states = [x["index"]["state"] for x in r.structured_content["roots"]]
                if all(s == "ready" for s in states):
                    break
                await anyio.sleep(0.5)
    stats = Stats()
    for kind, roots in (
        ("legacy", None),
        ("modern", None),
        ("legacy+roots", [sub]),
        ("modern+roots", [sub]),
    ):
        await run_session(url, token, Plan(kind, roots, []), 15, 0, stats, operator)
    if stats.failures:
        raise SystemExit("warm-up failed:\n" + "\n".join(stats.failures[:20]))


async def settle(pid: int, fds: int, limit: float = 30.0) -> tuple[Sample, float]:
    """Poll until the server holds ``fds`` fds (or ``limit`` seconds pass)."""
    t0 = time.monotonic()
    while True:
        s = sample(pid)
        if s.fds <= fds or time.monotonic() - t0 > limit:
            return s, time.monotonic() - t0
        await anyio.sleep(0.25)


async def main_async(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="rootgrep-soak-"))
    token = secrets.token_hex(16)
    proc: subprocess.Popen[bytes] | None = None
    try:
        a, b = tmp / "ops" / "a", tmp / "ops" / "b"
        copy_parts(a, PARTS_A)
        copy_parts(b, PARTS_B)
        operator = [scan(a), scan(b)]
        nfiles = sum(len(t.files) for t in operator)
        size = sum((t.path / f).stat().st_size for t in operator for f in t.files)
        print(
            f"trees: 2 operator roots, {nfiles} files, {size / 1e6:.1f} MB "
            f"(parts of the standard library); {args.sessions} sessions x {args.calls} calls, "
            f"{args.rounds} round(s); {os.cpu_count()} CPUs",
            flush=True,
        )
        env = dict(kv.split("=", 1) for kv in args.server_env)
        proc, url = start_server(tmp, [a, b], token, shlex.split(args.server_args), env)
        t0 = time.monotonic()
        await warm_up(url, token, operator, [scan(a / "email"), scan(b / "xml")])
        print(f"warm-up (index builds, every tool once): {time.monotonic() - t0:.1f} s")
        await settle(proc.pid, 0, limit=4.0)  # the warm-up's idle indexes stop (2 s)
        base = sample(proc.pid)
        print(f"before the load:        {base.show()}")
        if args.smaps:
            print(f"  smaps MiB: {smaps(proc.pid)}")
        rng = random.Random(args.seed)
        results: list[dict[str, Any]] = []
        after_close: list[Sample] = []
        ok = True
        for rnd in range(args.rounds):
            session_plans = plans(args.sessions, args.calls, a, b, rng)
            stats, wall, loaded = await run_round(
                url, token, session_plans, args.calls, 1000 * rnd, operator, proc.pid
            )
            closed, waited = await settle(proc.pid, base.fds)
            await anyio.sleep(args.settle)  # (the server's idle trim: memory.py)
            closed = Sample(sample(proc.pid).rss_kib, closed.hwm_kib, closed.fds, closed.threads)
            after_close.append(closed)
            calls = sum(len(x) for x in stats.latency.values())
            print(f"\nround {rnd + 1}: {calls} calls in {wall:.1f} s ({calls / wall:.0f} calls/s), "
                  f"{stats.changes} roots changes")  # fmt: skip
            print(table(stats))
            print(f"ok {sum(stats.ok.values())}, expected errors "
                  f"{sum(stats.expected.values())}, failures {len(stats.failures)}")  # fmt: skip
            for why, n in sorted(stats.expected.items()):
                print(f"  expected: {why} x{n}")
            for f in stats.failures[:20]:
                print(f"  FAILURE: {f}")
            print(f"right after the calls:  {loaded.show()}")
            print(f"after the sessions closed (fds back in {waited:.1f} s, RSS {args.settle:.0f} s "
                  f"later): {closed.show()}")  # fmt: skip
            if args.smaps:
                print(f"  smaps MiB: {smaps(proc.pid)}")
            ok &= not stats.failures and closed.fds == base.fds
            results.append(
                {
                    "round": rnd + 1, "wall_s": wall, "calls": calls,
                    "ok": sum(stats.ok.values()), "expected": dict(stats.expected),
                    "failures": len(stats.failures),
                    "p50_ms": {t: pct(stats.latency[t], 0.5) * 1e3 for t in TOOLS},
                    "p99_ms": {t: pct(stats.latency[t], 0.99) * 1e3 for t in TOOLS},
                    "loaded": loaded.__dict__, "closed": closed.__dict__,
                }
            )  # fmt: skip
        growth = (after_close[-1].rss_kib - after_close[0].rss_kib) / 1024
        fds_back = all(s.fds == base.fds for s in after_close)
        print(
            f"\nfds: {base.fds} before, "
            + ", ".join(str(s.fds) for s in after_close)
            + f" after each round's sessions closed: {'back' if fds_back else 'NOT back (leak)'}"
        )
        total = (after_close[-1].rss_kib - base.rss_kib) / 1024
        print(
            f"RSS after the last round's sessions closed is {growth:+.1f} MiB from after the "
            f"first (margin {args.rss_margin_mib} MiB), {total:+.1f} MiB from before the load"
        )
        if args.rounds > 1 and growth > args.rss_margin_mib:
            ok = False
            print("RSS grows round after round: a leak")
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps({"base": base.__dict__, "rounds": results}) + "\n")
        print("\nPASS" if ok else "\nFAIL")
        return 0 if ok else 1
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


async def run_round(
    url: str, token: str, session_plans: list[Plan], calls: int, seed: int,
    operator: list[Tree], pid: int,
) -> tuple[Stats, float, Sample]:  # fmt: skip
    """All sessions at once; the server sampled once every call is done, sessions still
    open; then they close."""
    stats = Stats()
    t0 = time.monotonic()
    done = anyio.Event()
    finished = 0
    gate = anyio.Event()  # the sessions close together, once every call is done

    def on_done() -> None:
        nonlocal finished
        finished += 1
        if finished == len(session_plans):
            done.set()

    async with anyio.create_task_group() as tg:
        for n, plan in enumerate(session_plans):
            tg.start_soon(
                session_until, url, token, plan, calls, seed + n, stats, operator, gate, on_done
            )
        await done.wait()
        wall = time.monotonic() - t0
        loaded = sample(pid)
        gate.set()
    return stats, wall, loaded


async def session_until(
    url: str, token: str, plan: Plan, calls: int, seed: int, stats: Stats,
    operator: list[Tree], gate: anyio.Event, done: Any,
) -> None:  # fmt: skip
    """``run_session``, whose session stays open once its calls are done until ``gate`` is
    set (so "right after the calls" sees every session still open); ``done()`` once."""
    told = False

    def once() -> None:
        nonlocal told
        if not told:
            told = True
            done()

    try:
        await run_session(url, token, plan, calls, seed, stats, operator, hold=(gate, once))
    except Exception as e:  # a session that could not open or close is one failure
        stats.failures.append(f"{plan.kind} #{seed} session: {type(e).__name__}: {e}"[:500])
    once()


def main(argv: Sequence[str] | None = None) -> int:
    warnings.filterwarnings("ignore", category=MCPDeprecationWarning)  # roots: deprecated
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=64)
    p.add_argument("--calls", type=int, default=100, help="calls per session")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seed", type=int, default=12)
    p.add_argument("--rss-margin-mib", type=float, default=16.0)
    p.add_argument("--json", help="append the figures as one JSON line to this file")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--server-args", default="", help="more `rootgrep serve` flags")
    p.add_argument(
        "--server-env", action="append", default=[], metavar="NAME=VALUE",
        help="set in the server's environment (e.g. MALLOC_ARENA_MAX=2); repeatable",
    )  # fmt: skip
    p.add_argument(
        "--settle", type=float, default=3.0, metavar="SECONDS",
        help="once a round's fds are back, wait this long before reading RSS (the server "
        "gives freed memory back after 1 s idle)",
    )  # fmt: skip
    p.add_argument(
        "--smaps", action="store_true",
        help="also show where RSS is (/proc/<pid>/smaps: heap, arenas, stacks, anon, files)",
    )  # fmt: skip
    return anyio.run(main_async, p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
