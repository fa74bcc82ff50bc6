"""Corpora and reference counts for the benchmarks.

S is a copy of the interpreter's standard library without ``site-packages`` and
``__pycache__`` (made once per session, so rootgrep and rg see exactly the same files); F is the
interpreter's whole ``lib`` folder, site-packages included, searched in place. The reference
counts come from rg, computed once per corpus and pattern, so each benchmark can check that
rootgrep did the same work as its peer.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

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
