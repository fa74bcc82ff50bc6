"""The planner's work grows linearly with the pattern (it runs for every grep, even without an
index, in a worker that cannot be interrupted: a quadratic planner let one 8,000-character
literal hold a worker for seconds).

Work is counted, not timed: every Python and C function call the planner makes, under
``sys.setprofile``. A quadratic step (a membership test over a growing list of queries, a
growing AND copied at every node) multiplies the count by 16 when the pattern grows 4 times.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rootgrep.grep import MAX_PATTERN_BYTES
from rootgrep.index.plan import MAX_QUERY_TRIGRAMS, plan, text_trigrams
from rootgrep.roots import pin_root
from rootgrep.service import Service, Settings, Token
from support import error_code

ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _text(n: int, seed: int = 7) -> str:
    rnd = random.Random(seed)
    return "".join(rnd.choice(ALPHABET) for _ in range(n))  # nearly every trigram distinct


def _calls(fn: Callable[[], object]) -> int:
    count = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


SHAPES: dict[str, Callable[[str], tuple[str, bool, bool]]] = {
    "literal": lambda s: (s, False, True),
    "literal -i": lambda s: (s, False, False),
    "regex literal": lambda s: (s, True, True),
    "regex (?i)": lambda s: ("(?i)" + s, True, True),
    "alternation": lambda s: ("|".join(s[i : i + 6] for i in range(0, len(s), 6)), True, True),
    "dots": lambda s: (".".join(s[i : i + 4] for i in range(0, len(s), 4)), True, True),
    "groups": lambda s: (
        "".join(f"({s[i : i + 2]}|{s[i + 2 : i + 4]})" for i in range(0, len(s), 4)),
        True,
        True,
    ),
    "optional": lambda s: (
        "".join(c + "?" if i % 3 == 0 else c for i, c in enumerate(s)),
        True,
        True,
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_work_grows_linearly(shape: str) -> None:
    small, large = (SHAPES[shape](_text(n)) for n in (1500, 6000))
    w_small = _calls(lambda: plan(small[0], regex=small[1], case_sensitive=small[2]))
    w_large = _calls(lambda: plan(large[0], regex=large[1], case_sensitive=large[2]))
    assert w_large < 6 * w_small, (shape, w_small, w_large)  # linear: ~4x; quadratic: ~16x


@pytest.mark.parametrize("regex", [False, True])
@pytest.mark.parametrize("cs", [True, False])
def test_a_100k_literal_plans_into_a_bounded_sound_query(regex: bool, cs: bool) -> None:
    s = _text(100_000)
    q = plan(s, regex=regex, case_sensitive=cs)
    assert q.op == "and"
    assert 0 < len(q.trigrams()) <= MAX_QUERY_TRIGRAMS
    assert q.matches(text_trigrams(s))  # the text itself is never excluded
    assert q.matches(text_trigrams("xx" + s + "yy"))
    if cs:
        assert not q.matches(text_trigrams(s[: len(s) // 2]))  # still narrows


def test_patterns_over_the_cap_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text(_text(1000) + "\n")
    r = pin_root(str(tmp_path))
    try:
        service = Service([r], Settings())
        over = "x" * (MAX_PATTERN_BYTES + 1)
        for regex in (False, True):
            assert error_code(service.grep, [r], Token(), pattern=over, regex=regex) == (
                "invalid_pattern"
            )
        found = service.grep([r], Token(), pattern=_text(1000)[:900])  # long, under the cap
        assert len(found.matches) == 1
    finally:
        r.close()
