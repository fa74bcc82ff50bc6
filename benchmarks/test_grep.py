"""Grep benchmarks: matching lines of four patterns over each corpus.

rootgrep in process (one thread: the search engine alone), the rootgrep CLI (a whole process
with Python start-up, the fair peer of rg) and ``rg -n`` (a whole process, its default
threads). The patterns are a rare literal, a common one, a regex with a required literal
(prefiltered) and a regex with no literal (every file goes through RE2). Each benchmark checks
that its matching-line count equals rg's, so the times compare the same work.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from runners import (
    MISMATCH,
    PATTERNS,
    Corpus,
    Pattern,
    Reference,
    Tools,
    check_agreement,
    rg_grep,
    rootgrep_cli_grep,
    rootgrep_grep,
)

TOOLS = ("rootgrep", "rootgrep-cli", "rg")

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.filterwarnings(f"default:{MISMATCH}:UserWarning"),
]


@pytest.mark.parametrize(
    ("corpus", "pattern", "tool"),
    [
        pytest.param(c, p, t, id=f"{c}-{p.key}-{t}")
        for c in ("S", "F")
        for p in PATTERNS
        for t in TOOLS
    ],
    indirect=["corpus"],
)
def test_grep(
    benchmark: BenchmarkFixture,
    corpus: Corpus,
    pattern: Pattern,
    tool: str,
    tools: Tools,
    reference: Reference,
) -> None:
    fns: dict[str, Callable[[], int]] = {
        "rootgrep": partial(rootgrep_grep, pattern, corpus.path),
        "rootgrep-cli": partial(rootgrep_cli_grep, tools.rootgrep, pattern, corpus.path),
        "rg": partial(rg_grep, tools.rg, pattern, corpus.path),
    }
    want = reference.lines(corpus, pattern)
    group = f"grep-{corpus.name}-{pattern.key}"
    benchmark.group = group
    benchmark.extra_info.update(
        op="grep", corpus=corpus.name, tool=tool, pattern=pattern.text, regex=pattern.regex
    )
    got = benchmark.pedantic(fns[tool], rounds=corpus.rounds, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(count=got, rg_count=want)
    check_agreement(strict=corpus.strict, what=f"{group} {tool} matching lines", got=got, want=want)
