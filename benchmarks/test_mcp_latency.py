"""MCP call latency: one ``grep`` over a long-lived stdio session on corpus F, index ready.

What an agent waits for per call: a real ``rootgrep serve --transport stdio --root F`` child
behind the SDK's ``Client`` (handshake era, no roots capability: the operator root is the
scope), its index of F built first (the fixture waits until ``list_roots`` says ``ready``),
then the same call repeated. Only ``call_tool`` is timed, on a session opened once for the
module. The peer is ``csearch`` (Russ Cox's trigram index tools, Debian package
``codesearch``) as a whole process over its own ``cindex`` of F, in the same run; it always
prints every matching line (it has no limit), so the "first 200" rows compare rootgrep's
first page with csearch's whole answer. Without ``csearch``/``cindex`` those rows are skipped
with a note (``apt-get install codesearch``).

The server child gets this process's environment (``PYTHONPATH=<other checkout>/src``
measures another version of rootgrep with the same benchmark). The queries: a rare literal
(``getrecursionlimit``), a common literal (``NotImplementedError``) with ``max_results`` 200
and 1,000, and a regex with no trigram (a date), first 200. The server runs with
``--max-answer-chars 100000`` (the largest budget), so that 1,000 matching lines fit in one
answer (at the default 20,000 characters the page holds about 330 of them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal
from mcp.client import Client
from pytest_benchmark.fixture import BenchmarkFixture

from runners import Corpus
from test_server import call, connect, structured

pytestmark = pytest.mark.timeout(1800)

READY_TIMEOUT = 900.0  # seconds for the first build of F's index (a hang guard)
TOOLS = ("rootgrep-mcp", "csearch")


@dataclass(frozen=True)
class Case:
    key: str
    pattern: str
    regex: bool
    max_results: int
    rounds: int

    @property
    def query(self) -> str:
        return f"`{self.pattern}`, max_results={self.max_results}"

    @property
    def csearch_pattern(self) -> str:
        """csearch takes an RE2 regex: a literal is escaped."""
        return self.pattern if self.regex else _re2_escape(self.pattern)


CASES = (
    Case("literal-rare", "getrecursionlimit", regex=False, max_results=200, rounds=50),
    Case("literal-200", "NotImplementedError", regex=False, max_results=200, rounds=30),
    Case("literal-1000", "NotImplementedError", regex=False, max_results=1000, rounds=20),
    Case("regex-date-200", r"[0-9]{4}-[0-9]{2}-[0-9]{2}", regex=True, max_results=200, rounds=20),
)


def _re2_escape(s: str) -> str:
    return "".join("\\" + c if not (c.isalnum() or c == "_") else c for c in s)


@pytest.fixture(scope="module")
def served_f(portal: BlockingPortal, corpus_f: Corpus) -> Iterator[Client]:
    """A stdio server on F with its index ready (built into a temporary cache first)."""
    with tempfile.TemporaryDirectory(prefix="rootgrep-bench-lat-") as cache:
        argv = [
            sys.executable, "-m", "rootgrep", "serve", "--transport", "stdio",
            "--root", corpus_f.path, "--cache-dir", cache, "--max-answer-chars", "100000",
        ]  # fmt: skip
        with connect(portal, argv, env=dict(os.environ)) as client:
            deadline = time.monotonic() + READY_TIMEOUT
            while True:
                roots = structured(call(portal, client, "list_roots", {}))["roots"]
                if roots and all(r["index"]["state"] == "ready" for r in roots):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"F's index not ready after {READY_TIMEOUT} s: {roots}")
                time.sleep(0.5)
            yield client


@pytest.fixture(scope="module")
def csearch_index(corpus_f: Corpus) -> Iterator[tuple[str, dict[str, str]]]:
    """``csearch``'s path and an environment whose CSEARCHINDEX is a fresh ``cindex`` of F."""
    csearch, cindex = shutil.which("csearch"), shutil.which("cindex")
    if csearch is None or cindex is None:
        pytest.skip("needs csearch and cindex (apt-get install codesearch) for the peer rows")
    with tempfile.TemporaryDirectory(prefix="rootgrep-bench-csearch-") as tmp:
        env = {**os.environ, "CSEARCHINDEX": os.path.join(tmp, "csearchindex")}
        proc = subprocess.run([cindex, corpus_f.path], env=env, capture_output=True)
        if proc.returncode != 0:
            pytest.skip(f"cindex failed: {proc.stderr.decode('utf-8', 'replace')[-500:]}")
        yield csearch, env


def run_csearch(csearch: str, env: dict[str, str], pattern: str) -> int:
    """Output lines of ``csearch -n PATTERN`` (a whole process)."""
    proc = subprocess.run([csearch, "-n", pattern], env=env, capture_output=True)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"csearch exited {proc.returncode}: {proc.stderr[-500:]!r}")
    return proc.stdout.count(b"\n")


@pytest.mark.parametrize(
    ("case", "tool"),
    [pytest.param(c, t, id=f"F-{c.key}-{t}") for c in CASES for t in TOOLS],
)
def test_mcp_latency(
    benchmark: BenchmarkFixture,
    request: pytest.FixtureRequest,
    portal: BlockingPortal,
    corpus_f: Corpus,
    case: Case,
    tool: str,
) -> None:
    benchmark.group = f"mcp-{corpus_f.name}-{case.key}"
    benchmark.extra_info.update(op="mcp", corpus=corpus_f.name, tool=tool, query=case.query)
    if tool == "csearch":
        csearch, env = request.getfixturevalue("csearch_index")
        fn = lambda: run_csearch(csearch, env, case.csearch_pattern)  # noqa: E731
        got = benchmark.pedantic(fn, rounds=min(case.rounds, 10), iterations=1, warmup_rounds=1)
    else:
        client: Client = request.getfixturevalue("served_f")
        args: dict[str, Any] = {
            "pattern": case.pattern, "regex": case.regex, "max_results": case.max_results,
        }  # fmt: skip
        used: list[bool] = []

        def one() -> int:
            res = structured(call(portal, client, "grep", args))
            used.append(bool(res["index_used"]))
            return len(res["matches"])

        got = benchmark.pedantic(one, rounds=case.rounds, iterations=1, warmup_rounds=2)
        assert all(used), "the index was not used: not the measurement this benchmark makes"
    benchmark.extra_info.update(count=got)
    assert got > 0, f"{tool} found nothing for {case.pattern!r}"
