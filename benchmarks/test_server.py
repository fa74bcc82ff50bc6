"""Server benchmarks: what a call costs through MCP, and rootgrep's server against the reference.

rtt: one call over a long-lived stdio session (a real ``rootgrep serve --transport stdio``
child behind the SDK's ``Client``, handshake era) against the same call on the library in this
process. Only ``call_tool`` is timed: the session is opened once per benchmark, outside the
timed function, on an event loop that a blocking portal keeps in its own thread. The ratio
stdio/lib is the protocol's overhead (JSON-RPC over pipes, the SDK on both sides, rootgrep's
tool wrapper, the structured result's serialization and the client's output-schema check).
The server runs with ``--no-index``, as the library here has no index: otherwise it starts
indexing its root in the background at once, and that competes with the timed calls.

find: rootgrep's ``find_files`` against ``search_files`` of the reference MCP filesystem server
(npm ``@modelcontextprotocol/server-filesystem``), both over stdio with the same client, on
corpus F. The two do not select exactly the same files: rootgrep skips hidden files, honours
.gitignore/.ignore, lists files only and stops at ``max_results`` (1000 here, its cap); the
reference walks everything (directories included) and returns every match. Each benchmark
records the count it got; the report shows both instead of forcing them equal. The glob is
``*.X`` for rootgrep (gitignore style: any depth) and ``**/*.X`` for the reference (minimatch
on the path relative to the search directory).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent
from pytest_benchmark.fixture import BenchmarkFixture

from rootgrep.roots import pin_root
from rootgrep.service import Service, Settings, Token
from runners import Corpus

pytestmark = pytest.mark.timeout(300)

RTT_TOOLS = ("rootgrep-stdio", "rootgrep-lib")
FIND_TOOLS = ("rootgrep-stdio", "rootgrep-lib", "reference-fs")
FIND_MAX = 1000  # rootgrep's cap on max_results
CALL_TIMEOUT = 120.0  # seconds for any one request (a lost reply fails instead of hanging)
NO_MATCH = "No matches found"  # the reference server's whole answer when nothing matches


def rootgrep_argv(root: str, cache: str) -> list[str]:
    """``rootgrep serve`` over stdio without search indexes: a background index build would
    compete with the timed calls for the CPU (and the library side has no index either). The
    cache directory is a temporary one all the same, so nothing lands in the user's cache."""
    return [
        sys.executable, "-m", "rootgrep", "serve", "--transport", "stdio", "--root", root,
        "--no-index", "--cache-dir", cache,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def cache_dir() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="rootgrep-bench-cache-") as tmp:
        yield tmp


@contextmanager
def connect(
    portal: BlockingPortal, argv: Sequence[str], env: dict[str, str] | None = None
) -> Iterator[Client]:
    """A handshake-era client session with a stdio server child (no roots capability, so
    rootgrep serves its operator roots). Every request is bounded by ``CALL_TIMEOUT``; the
    child's stderr goes to a temporary file and is attached to any failure. ``env``: the
    child's whole environment (default: the SDK's short list of safe variables)."""
    params = StdioServerParameters(command=argv[0], args=list(argv[1:]), env=env)
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err:
        try:
            client = Client(
                stdio_client(params, errlog=err), mode="legacy", read_timeout_seconds=CALL_TIMEOUT
            )
            with portal.wrap_async_context_manager(client) as c:
                yield c
        except BaseException as e:
            err.seek(0)
            e.add_note(f"server stderr (tail): {err.read()[-2000:]}")
            raise


def call(portal: BlockingPortal, client: Client, tool: str, args: dict[str, Any]) -> CallToolResult:
    result = portal.call(client.call_tool, tool, args)
    if result.is_error:
        text = " ".join(c.text for c in result.content if isinstance(c, TextContent))
        raise AssertionError(f"{tool}({args!r}) failed: {text[:500]}")
    return result


def structured(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, "no structured content"
    return result.structured_content


# -- rtt: one call through the protocol against the library --------------------------------


@dataclass(frozen=True)
class Rtt:
    op: str
    args: dict[str, Any]
    rounds: int
    field: str  # the result field counted: a number, or a list whose length is the count
    query: str
    token: bool = False  # the library method takes a Token

    def count(self, result: Any) -> int:
        """The count from a result: the pydantic model (library) or its JSON dict (stdio)."""
        v = result[self.field] if isinstance(result, dict) else getattr(result, self.field)
        return len(v) if isinstance(v, list) else int(v)


RTTS = (
    Rtt(
        "read_file",
        {"path": "json/__init__.py"},
        rounds=50,
        field="total_lines",
        query="`json/__init__.py` (whole file)",
    ),
    Rtt(
        "grep",
        {"pattern": "NotImplementedError", "max_results": 200},
        rounds=10,
        field="matches",
        query="`NotImplementedError`, max_results=200",
        token=True,
    ),
)


@pytest.mark.parametrize(
    ("rtt", "tool"),
    [pytest.param(r, t, id=f"S-{r.op}-{t}") for r in RTTS for t in RTT_TOOLS],
)
def test_rtt(
    benchmark: BenchmarkFixture,
    corpus_s: Corpus,
    portal: BlockingPortal,
    cache_dir: str,
    rtt: Rtt,
    tool: str,
) -> None:
    benchmark.group = f"rtt-{corpus_s.name}-{rtt.op}"
    benchmark.extra_info.update(op="rtt", corpus=corpus_s.name, tool=tool, query=rtt.query)
    root = pin_root(corpus_s.path)
    try:
        svc = Service([root], Settings())
        roots = svc.operator_roots

        def lib() -> int:
            method = getattr(svc, rtt.op)
            res = method(roots, Token(), **rtt.args) if rtt.token else method(roots, **rtt.args)
            return rtt.count(res)

        want = lib()  # the library's answer is the reference for the stdio one
        if tool == "rootgrep-lib":
            got = benchmark.pedantic(lib, rounds=rtt.rounds, iterations=1, warmup_rounds=1)
        else:
            with connect(portal, rootgrep_argv(corpus_s.path, cache_dir)) as client:

                def over_stdio() -> int:
                    return rtt.count(structured(call(portal, client, rtt.op, rtt.args)))

                got = benchmark.pedantic(
                    over_stdio, rounds=rtt.rounds, iterations=1, warmup_rounds=1
                )
    finally:
        root.close()
    benchmark.extra_info.update(count=got)
    assert got == want, f"{tool} {rtt.op}: {got} vs the library's {want}"


# -- find: rootgrep's find_files against the reference server's search_files ---------------


@dataclass(frozen=True)
class Find:
    key: str
    pattern: str  # rootgrep find_files (gitignore glob: any depth)
    ref_pattern: str  # reference search_files (minimatch on the relative path)
    note: str


FINDS = (
    Find("typed", "*.typed", "**/*.typed", "under the cap: both walk the whole tree"),
    Find("pyi", "*.pyi", "**/*.pyi", "over the cap: rootgrep stops at 1000"),
)


def reference_count(result: CallToolResult) -> int:
    text = "".join(c.text for c in result.content if isinstance(c, TextContent))
    return 0 if text.strip() == NO_MATCH else len(text.splitlines())


@pytest.mark.parametrize(
    ("find", "tool"),
    [pytest.param(f, t, id=f"F-{f.key}-{t}") for f in FINDS for t in FIND_TOOLS],
)
def test_find(
    benchmark: BenchmarkFixture,
    request: pytest.FixtureRequest,
    corpus_f: Corpus,
    portal: BlockingPortal,
    cache_dir: str,
    find: Find,
    tool: str,
) -> None:
    benchmark.group = f"find-{corpus_f.name}-{find.key}"
    benchmark.extra_info.update(
        op="find",
        corpus=corpus_f.name,
        tool=tool,
        pattern=find.pattern,
        ref_pattern=find.ref_pattern,
        max_results=FIND_MAX,
        query=f"`{find.pattern}` vs `{find.ref_pattern}` ({find.note})",
    )
    args = {"pattern": find.pattern, "max_results": FIND_MAX}
    truncated: list[bool] = []

    def rootgrep_count(res: Any) -> int:
        """Files in a FindFilesResult (the model) or its JSON dict; keeps the truncated flag."""
        d = res if isinstance(res, dict) else {"files": res.files, "truncated": res.truncated}
        truncated.append(bool(d["truncated"]))
        return len(d["files"])

    if tool == "rootgrep-lib":
        root = pin_root(corpus_f.path)
        try:
            svc = Service([root], Settings())
            roots = svc.operator_roots

            def lib() -> int:
                return rootgrep_count(svc.find_files(roots, Token(), **args))

            got = benchmark.pedantic(lib, rounds=5, iterations=1, warmup_rounds=1)
        finally:
            root.close()
    elif tool == "rootgrep-stdio":
        with connect(portal, rootgrep_argv(corpus_f.path, cache_dir)) as client:

            def over_stdio() -> int:
                return rootgrep_count(structured(call(portal, client, "find_files", args)))

            got = benchmark.pedantic(over_stdio, rounds=5, iterations=1, warmup_rounds=1)
    else:
        argv: tuple[str, ...] = request.getfixturevalue("reference_fs")
        ref_args = {"path": corpus_f.path, "pattern": find.ref_pattern}
        with connect(portal, [*argv, corpus_f.path]) as client:

            def reference() -> int:
                return reference_count(call(portal, client, "search_files", ref_args))

            got = benchmark.pedantic(reference, rounds=3, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(count=got)
    if truncated:
        benchmark.extra_info.update(truncated=truncated[-1])
    assert got > 0, f"{tool} found nothing for {find.pattern!r}: not comparing the same work"
