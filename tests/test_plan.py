"""The regex → trigram planner: it may only narrow, never exclude a text that matches."""

from __future__ import annotations

import pytest
import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from rootgrep.index.plan import ALL, EXTRA_FOLDS, plan, text_trigrams
from rootgrep.index.trigrams import TRIGRAMS
from support import fuzz_examples


@pytest.mark.parametrize(
    "text", ["Hello World", "ΑΣ ΟΔΟΣ", "İstanbul", "straße STRASSE", "ſtop", "Kelvin", "a\nb\tc😀d"]
)
def test_text_trigrams_model_the_index_tokenizer(text: str) -> None:
    assert text_trigrams(text) == set(TRIGRAMS.analyze(text))


@pytest.mark.parametrize(
    ("pattern", "regex", "cs", "expected"),
    [
        ("NotImplementedError", False, True, "('Not' & 'otI' & 'tIm' & 'Imp' & 'mpl' & 'ple' & 'lem' & 'eme' & 'men' & 'ent' & 'nte' & 'ted' & 'edE' & 'dEr' & 'Err' & 'rro' & 'ror')"),
        (r"\w+Error\b", True, True, "('Err' & 'rro' & 'ror')"),
        ("(?i)a-1", True, True, "('a-1' | 'A-1')"),
        ("é_x", False, False, "ALL"),  # non-ASCII under case-insensitivity: no spelling list
        ("é_x", False, True, "'é_x'"),
        ("(foo|bar)baz", True, True, "(('bar' & 'arb' & 'rba' & 'baz') | ('foo' & 'oob' & 'oba' & 'baz'))"),
        ("abc|xyz", True, True, "('abc' | 'xyz')"),
        ("a.*bcd", True, True, "'bcd'"),
        ("ab", False, True, "ALL"),
        (r"[0-9]{4}-[0-9]{2}", True, True, "ALL"),
        (r"\pLabc", True, True, "ALL"),  # RE2 syntax Python cannot parse: no narrowing
        ("[[:alpha:]]xyz", True, True, "ALL"),
    ],
)  # fmt: skip
def test_plans(pattern: str, regex: bool, cs: bool, expected: str) -> None:
    assert str(plan(pattern, regex=regex, case_sensitive=cs)) == expected


ATOMS = st.sampled_from(
    ["a", "b", "ab", "abc", "bcd", "x", "K", "s", "S", "ſ", "İ", "Σ", "é", "É", r"\w", r"\d",
     ".", "[ab]", "[^a]", "[a-c]", "[xyz]", r"\b", "(a|b)", "(abc|xyz)", "(?:ab)", r"\.", " ",
     "_", "^", "$", "(ab|)", "[sS]"]
)  # fmt: skip
QUANT = st.sampled_from(["", "", "", "", "?", "*", "+", "{2}", "{0,1}", "{1,3}", "*?", "+?"])


@st.composite
def regexes(draw: st.DrawFn) -> str:
    body = "".join(
        a + q for a, q in draw(st.lists(st.tuples(ATOMS, QUANT), min_size=1, max_size=7))
    )
    if draw(st.booleans()):
        body += "|" + "".join(a + q for a, q in draw(st.lists(st.tuples(ATOMS, QUANT), max_size=3)))
    if draw(st.integers(0, 5)) == 0:
        body = "(?i)" + body
    return body


TEXT = st.text(alphabet="abcdxyzKk\u212aſsSİiΣσςéÉ _.\n0123", max_size=60)


@settings(max_examples=fuzz_examples(600, 20_000), deadline=None)
@given(pattern=regexes(), data=st.data(), cs=st.booleans(), regex=st.booleans())
def test_plan_is_sound(pattern: str, data: st.DataObject, cs: bool, regex: bool) -> None:
    """If RE2 (as grep runs it) finds a match in the text, the plan accepts the text. The
    texts are built around strings generated from the pattern, so most of them match."""
    import re

    try:
        sample = data.draw(st.from_regex(re.compile(pattern if regex else re.escape(pattern))))
    except Exception:
        sample = ""
    sample = data.draw(st.sampled_from([sample, sample.upper(), sample.lower(), sample.swapcase()]))
    text = data.draw(TEXT) + sample + data.draw(TEXT)
    opts = re2.Options()
    opts.never_nl = True
    opts.case_sensitive = cs
    opts.log_errors = False
    body = pattern.encode() if regex else re2.escape(pattern.encode())
    try:
        rx = re2.compile(b"(?m)" + body, opts)
    except re2.error:
        return
    if rx.search(text.encode()) is None:
        return
    q = plan(pattern, regex=regex, case_sensitive=cs)
    assert q.matches(text_trigrams(text)), (pattern, text, str(q))


def test_plan_narrows_something() -> None:
    assert plan(r"foo\w+bar", regex=True) != ALL
    assert plan("needle", regex=False, case_sensitive=False) != ALL


def test_extra_folds_are_every_fold_re2_makes_of_an_ascii_letter() -> None:
    """The planner's case table: RE2 folds each ASCII letter to its other case and, for k and
    s only, to one character beyond ASCII. Checked against RE2 over every code point."""
    import string

    opts = re2.Options()
    opts.case_sensitive = False
    every = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    text = "\n".join(every).encode()
    for c in string.ascii_lowercase:
        rx = re2.compile(b"(?m)^" + c.encode() + b"$", opts)
        folds = {m.group().decode() for m in rx.finditer(text)}
        assert folds == {c, c.upper(), *([EXTRA_FOLDS[c]] if c in EXTRA_FOLDS else [])}, c


def test_case_insensitive_windows_ask_for_every_spelling() -> None:
    import itertools

    q = plan("Ask", regex=False, case_sensitive=False)
    assert q.op == "or"
    spellings = {"".join(p) for p in itertools.product("aA", "sS\u017f", "kK\u212a")}
    assert q.trigrams() == spellings
