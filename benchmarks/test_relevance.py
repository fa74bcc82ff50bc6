"""The full relevance measure on the standard library (issue 10 targets), run by ``make
bench``: 200 identifiers picked by ``relevance.pick`` (seeded), queried bare and as "where is X
defined", and looked up with ``find_symbols``; the figures go to the benchmark's extra info."""

from __future__ import annotations

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

import relevance

pytestmark = [pytest.mark.timeout(1800)]


def test_relevance_on_the_standard_library(benchmark: BenchmarkFixture) -> None:
    out = benchmark.pedantic(lambda: relevance.run(200, 10, subset=False), rounds=1)
    figures = {k: v for k, v in out.items() if k != "rows"}
    benchmark.extra_info.update(figures)
    assert out["bare_first"] >= 0.90 and out["natural_first"] >= 0.80, figures
    assert out["bare_top3"] >= 0.97 and out["natural_top3"] >= 0.97, figures
    assert out["symbols_first"] is not None and out["symbols_first"] >= 0.98, figures
