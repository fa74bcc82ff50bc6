"""Walk benchmarks: list every file of a corpus.

rootgrep's walker (fd-relative, sorted, hidden files skipped, ignore files honoured) against
plain ``os.walk`` (listing only, nothing stat'ed: a floor for Python) and ``rg --files`` (a
whole process, its own parallel walker). The walker and ``rg --files`` must list the same
number of files; ``os.walk`` also lists hidden files and symlinks, so its count is only shown.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from runners import (
    MISMATCH,
    Corpus,
    Reference,
    Tools,
    check_agreement,
    os_walk,
    rg_files,
    rootgrep_walk,
)

TOOLS = ("rootgrep", "os.walk", "rg --files")

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.filterwarnings(f"default:{MISMATCH}:UserWarning"),
]


@pytest.mark.parametrize(
    ("corpus", "tool"),
    [pytest.param(c, t, id=f"{c}-{t}") for c in ("S", "F") for t in TOOLS],
    indirect=["corpus"],
)
def test_walk(
    benchmark: BenchmarkFixture, corpus: Corpus, tool: str, tools: Tools, reference: Reference
) -> None:
    fns: dict[str, Callable[[], int]] = {
        "rootgrep": partial(rootgrep_walk, corpus.path),
        "os.walk": partial(os_walk, corpus.path),
        "rg --files": partial(rg_files, tools.rg, corpus.path),
    }
    want = reference.files(corpus)
    benchmark.group = f"walk-{corpus.name}"
    benchmark.extra_info.update(op="walk", corpus=corpus.name, tool=tool)
    got = benchmark.pedantic(fns[tool], rounds=corpus.rounds, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(count=got, rg_count=want)
    if tool != "os.walk":
        check_agreement(
            strict=corpus.strict, what=f"walk-{corpus.name} {tool} files", got=got, want=want
        )
