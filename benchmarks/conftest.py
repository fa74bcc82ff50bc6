"""Corpora and reference counts for the benchmarks.

S is a copy of the interpreter's standard library without ``site-packages`` and
``__pycache__`` (made once per session, so rootgrep and rg see exactly the same files); F is the
interpreter's whole ``lib`` folder, site-packages included, searched in place. The reference
counts come from rg, computed once per corpus and pattern, so each benchmark can check that
rootgrep did the same work as its peer.

The server benchmarks add an event loop in a thread (``portal``: a client session stays open
across rounds while the timed function stays synchronous) and the reference MCP filesystem
server, installed from npm once per session (``reference_fs``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio.from_thread
import pytest
from anyio.from_thread import BlockingPortal

from runners import Corpus, Reference, Tools, find_tool


def _stdlib() -> str:
    return sysconfig.get_paths()["stdlib"]


@pytest.fixture(scope="session")
def tools() -> Tools:
    rg = find_tool("rg")
    exe = find_tool("rootgrep")
    if rg is None or exe is None:
        pytest.skip("needs rg and the rootgrep CLI (install the project with '.[dev]')")
    return Tools(rg=rg, rootgrep=exe)


@pytest.fixture(scope="session")
def reference(tools: Tools) -> Reference:
    return Reference(tools.rg)


@pytest.fixture(scope="session")
def corpus_s() -> Iterator[Corpus]:
    """A copy of the standard library: every file, without site-packages or __pycache__.

    It lives in its own temporary directory, not under pytest's ``tmp_path_factory``: another
    pytest run by the same user rotates that base directory and may delete it mid-session.
    """
    with tempfile.TemporaryDirectory(prefix="rootgrep-bench-") as tmp:
        dest = os.path.join(tmp, "stdlib")
        shutil.copytree(
            _stdlib(),
            dest,
            symlinks=True,
            ignore=shutil.ignore_patterns("site-packages", "__pycache__"),
        )
        yield Corpus("S", dest, rounds=10, strict=True)


@pytest.fixture(scope="session")
def corpus_f() -> Corpus:
    """The interpreter's lib folder in place (site-packages and shared libraries included)."""
    path = os.path.dirname(_stdlib())
    if not Path(path).is_dir():
        pytest.skip(f"no interpreter lib folder at {path}")
    return Corpus("F", path, rounds=5, strict=False)


@pytest.fixture
def corpus(request: pytest.FixtureRequest) -> Corpus:
    """The corpus named by an indirect parameter ("S" or "F")."""
    return request.getfixturevalue(f"corpus_{request.param.lower()}")


# -- MCP server benchmarks ---------------------------------------------------------------------

REFERENCE_FS = "@modelcontextprotocol/server-filesystem"
REFERENCE_FS_VERSION = "2026.8.31"


@pytest.fixture(scope="session")
def portal() -> Iterator[BlockingPortal]:
    """An asyncio event loop in its own thread, for the whole session: an MCP client is entered
    with ``portal.wrap_async_context_manager`` and each timed call is ``portal.call(...)``."""
    with anyio.from_thread.start_blocking_portal(backend="asyncio") as p:
        yield p


@pytest.fixture(scope="session")
def reference_fs() -> Iterator[tuple[str, str]]:
    """The reference filesystem MCP server (npm), installed into a temporary directory once per
    session: its command line ``(node, .../dist/index.js)``, to which the allowed directories
    are appended. Skips when node or npm is missing or the install fails (offline, say)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("needs node and npm for the reference MCP filesystem server")
    with tempfile.TemporaryDirectory(prefix="rootgrep-bench-npm-") as tmp:
        spec = f"{REFERENCE_FS}@{REFERENCE_FS_VERSION}"
        try:
            proc = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefix", tmp, spec],
                cwd=tmp,
                capture_output=True,
                timeout=300,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            pytest.skip(f"npm install {spec} failed: {e}")
        script = Path(tmp, "node_modules", *REFERENCE_FS.split("/"), "dist", "index.js")
        if proc.returncode != 0 or not script.is_file():
            err = proc.stderr.decode("utf-8", "replace").strip()[-500:]
            pytest.skip(f"npm install {spec} failed ({proc.returncode}): {err}")
        yield (node, str(script))
