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


def test_only_a_querys_first_words_are_joined_into_identifiers() -> None:
    """Each joined identifier costs the ranking three queries: a 200-word query made
    thousands (the query's length is its only bound)."""
    from rootgrep.index.ranking import JOINED_TOKENS, joined_words

    joins = joined_words([f"w{i}" for i in range(200)])
    assert joins and max(joins) < JOINED_TOKENS
    assert sum(map(len, joins.values())) <= 6 * JOINED_TOKENS * 2


def test_the_snippet_scan_looks_at_a_bounded_number_of_matches() -> None:
    """A first line holding one query word more than SCORED_MATCHES times, then a line
    holding two: the scan stops inside the first line (one line of a file could cost a
    Python step per match, 0.9 s for 5 MB), so the second is not weighed."""
    from rootgrep.index.snippets import SCORED_MATCHES, best_lines

    lines = [b"alpha " * (SCORED_MATCHES + 10), b"alpha beta"]
    got = best_lines(b"\n".join(lines), lines, {"alpha", "beta"}, [], 1)
    assert got and got[0][0] == 1
    lines = [b"alpha " * 10, b"alpha beta"]  # (below the bound: the line of two words)
    got = best_lines(b"\n".join(lines), lines, {"alpha", "beta"}, [], 1)
    assert got[0][0] == 2
