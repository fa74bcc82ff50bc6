"""The enclosing definition of a line (grep's ``symbol``): ``Definitions`` answers exactly as
the one-pass rule ``enclosing`` does, for nested, overlapping and equal-start definitions."""

from __future__ import annotations

import random

from rootgrep.service.enclosing import Definitions, enclosing
from rootgrep.symbols import Symbol


def sym(name: str, line: int, end: int, container: str | None = None) -> Symbol:
    return Symbol(name=name, kind="function", line=line, end_line=end, container=container,
                  signature="")  # fmt: skip


def test_nested_definitions_name_the_innermost() -> None:
    defs = [sym("A", 1, 20), sym("f", 2, 5, "A"), sym("g", 7, 12, "A"), sym("h", 22, 30)]
    d = Definitions(defs)
    got = {line: d.enclosing(line) for line in (1, 3, 6, 8, 13, 21, 25, 31)}
    assert got == {1: "A", 3: "A.f", 6: "A", 8: "A.g", 13: "A", 21: None, 25: "h", 31: None}


def test_a_line_after_many_siblings_is_found_in_their_container() -> None:
    """A class with many methods: a line after the last one names the class."""
    defs = [sym("C", 1, 10_000)] + [sym(f"m{i}", 2 + 3 * i, 3 + 3 * i, "C") for i in range(3000)]
    d = Definitions(defs)
    assert d.enclosing(9_999) == "C"
    assert d.enclosing(3) == "C.m0"
    assert d.enclosing(10_001) is None


def test_definitions_agree_with_the_one_pass_rule_on_any_intervals() -> None:
    rnd = random.Random(11)
    for _ in range(2000):
        defs = []
        for i in range(rnd.randint(0, 25)):
            a = rnd.randint(1, 60)
            defs.append(sym(f"s{i}", a, a + rnd.randint(0, 30), rnd.choice([None, "C"])))
        d = Definitions(defs)
        for line in range(0, 95):
            assert d.enclosing(line) == enclosing(defs, line), (defs, line)
