"""Relevance on a subset of the standard library (issue 10): 40 identifiers picked by a seeded
script (benchmarks/relevance.py), each defined in exactly one non-test file and used in three
others; the full measure is ``python benchmarks/relevance.py``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import relevance


def test_the_defining_file_ranks_first_on_the_standard_library() -> None:
    out = relevance.run(40, 10, subset=True)
    assert out["n"] == 40
    misses = [r for r in out["rows"] if r["bare"] != 1]  # type: ignore[union-attr]
    assert out["bare_first"] >= 0.90, misses
    assert out["natural_first"] >= 0.80, out["rows"]
    assert out["bare_top3"] >= 0.97 and out["natural_top3"] >= 0.97, out["rows"]
    assert out["symbols_first"] is not None and out["symbols_first"] >= 0.98, out["rows"]
