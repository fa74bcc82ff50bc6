"""The tools' globs (SPEC §8): ``{a,b}`` alternatives, string-or-list ``include``/``exclude``."""

from __future__ import annotations

import pytest

from rootgrep.errors import InvalidArgument, InvalidPattern
from rootgrep.globs import (
    MAX_BRACE_EXPANSIONS,
    Globs,
    as_globs,
    expand_braces,
    has_glob_chars,
)


def selects(patterns: list[str], paths: list[str]) -> list[str]:
    g = Globs(patterns)
    return [p for p in paths if g.match(p.encode())]


def test_alternatives_of_extensions() -> None:
    paths = ["a.toml", "sub/b.cfg", "c.py", "sub/d.toml.bak", "x.{toml,cfg}", "e.ini"]
    assert selects(["*.{toml,cfg}"], paths) == ["a.toml", "sub/b.cfg"]
    assert expand_braces("*.{toml,cfg}") == ["*.toml", "*.cfg"]


def test_alternatives_of_directories_stay_anchored() -> None:
    paths = ["src/a/x.py", "src/b/y.py", "src/c/z.py", "lib/src/a/x.py", "src/a/x.txt"]
    assert selects(["src/{a,b}/*.py"], paths) == ["src/a/x.py", "src/b/y.py"]


def test_nested_groups() -> None:
    assert expand_braces("{a,{b,c}}") == ["a", "b", "c"]
    assert expand_braces("x{1,{2,3}y}z") == ["x1z", "x2yz", "x3yz"]
    assert expand_braces("{a,b}{c,d}") == ["ac", "ad", "bc", "bd"]
    assert selects(["{a,{b,c}}"], ["a", "b", "c", "d", "sub/c"]) == ["a", "b", "c", "sub/c"]


def test_a_negation_applies_to_every_alternative() -> None:
    paths = ["a.md", "b.txt", "c.py", "d/e.md"]
    assert selects(["*", "!*.{md,txt}"], paths) == ["c.py"]
    assert expand_braces("!*.{md,txt}") == ["!*.md", "!*.txt"]
    # an alternative that starts with "!" is a name, not a negation
    assert selects(["{!a,b}"], ["!a", "a", "b"]) == ["!a", "b"]


def test_literal_braces() -> None:
    # {} and a group without a comma are literal text, as in a shell
    assert expand_braces("{}") == ["{}"]
    assert selects(["x{}.py"], ["x{}.py", "x.py"]) == ["x{}.py"]
    assert selects(["{a}.py"], ["{a}.py", "a.py"]) == ["{a}.py"]
    assert expand_braces("{a{b,c}}") == ["{ab}", "{ac}"]
    # unbalanced braces are literal
    assert selects(["a{b", "c}d"], ["a{b", "c}d", "ab"]) == ["a{b", "c}d"]
    # escapes: \{ and \} are literal braces, \, a literal comma inside a group
    assert selects([r"\{a,b}"], ["{a,b}", "a", "b"]) == ["{a,b}"]
    assert selects([r"{a\,b,c}"], ["a,b", "c", "a", "b"]) == ["a,b", "c"]
    # inside a bracket expression a brace is one character of the set
    assert selects(["[{}]x"], ["{x", "}x", "x"]) == ["{x", "}x"]
    assert selects(["[{]x{1,2}"], ["{x1", "{x2", "x1"]) == ["{x1", "{x2"]


def test_the_number_of_expansions_is_capped() -> None:
    eight = "{a,b}" * 8  # 2**8 = 256: accepted
    assert len(expand_braces(eight)) == MAX_BRACE_EXPANSIONS == 256
    with pytest.raises(InvalidPattern, match=r"more than 256 globs; use fewer \{a,b\} groups"):
        Globs([eight + "{a,b}"], "include glob")
    with pytest.raises(InvalidPattern, match=r"the include glob .* more than 256"):
        Globs(["{" + ",".join(str(i) for i in range(300)) + "}"], "include glob")
    # the cap is met before anything large is built: 2**60 alternatives refused at once
    with pytest.raises(InvalidPattern, match="more than 256"):
        expand_braces("{a,b}" * 60)
    with pytest.raises(InvalidPattern, match="more than 32 deep"):
        expand_braces("{a," * 40 + "b" + "}" * 40)


def test_many_odd_braces_are_literal_and_cheap() -> None:
    # linear in the pattern's length (one pass with a stack); a hang would hit the timeout
    p = "{" * 200_000 + "x" + "}" * 3
    assert expand_braces(p) == [p]
    assert expand_braces("{a," * 20_000) == ["{a," * 20_000]


def test_a_brace_group_makes_a_find_files_pattern_a_glob() -> None:
    assert has_glob_chars("{setup,pyproject}.{cfg,toml}")
    assert not has_glob_chars("{a}.py")
    assert not has_glob_chars("a,b")
    assert has_glob_chars("*.py")


def test_include_and_exclude_take_a_string_or_a_list() -> None:
    assert as_globs("*.py") == ["*.py"]
    assert as_globs("*.{py,pyi}") == ["*.{py,pyi}"]
    assert as_globs(["*.py", "*.md"]) == ["*.py", "*.md"]
    assert as_globs(None) is None
    assert as_globs("") is None
    assert as_globs([]) is None
    assert as_globs(["", "*.py"]) == ["*.py"]
    with pytest.raises(
        InvalidArgument, match=r"^\[invalid_argument\] exclude must be a glob or a list of globs"
    ):
        as_globs(["*.py", 3], "exclude")  # type: ignore[list-item]
    with pytest.raises(InvalidArgument, match="include must be a glob"):
        as_globs(7)  # type: ignore[arg-type]
