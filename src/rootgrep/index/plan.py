"""Query planning: a regex (or literal) → the trigrams any match must contain, as an AND/OR tree.

In the manner of Google Code Search and zoekt (Russ Cox, "Regular Expression Matching with a
Trigram Index"): each regex node is summarised by the strings it can match when there are few
(``exact``), or else by what its matches must start and end with (``prefix``/``suffix``) and a
boolean query over trigrams (``match``). The result only narrows the candidates: every candidate
is verified with RE2 against the file itself, so the plan must never exclude a file that
matches (soundness), and "match everything" is always a correct answer.

Trigrams are taken as the index takes them: three consecutive characters of the text, case
kept (``Err`` and ``err`` are different terms, which makes the index far more selective on
code). A case-insensitive pattern asks for any of a window's spellings (``err | Err | eRr ...``,
with ``K`` and ``ſ`` where RE2 folds ``k`` and ``s`` to them); a window with a character whose
spellings cannot be listed gives no trigram. This module is pure: no index, no files.

Planning is linear in the pattern's length (a literal of 100k characters plans in a blink):
conjuncts are gathered in lists and combined once, sets de-duplicate by hashing, an exact
string is kept only up to ``MAX_EXACT_LEN`` characters before it becomes a query, and the
final query keeps at most ``MAX_QUERY_TRIGRAMS`` trigrams (dropping a conjunct only widens it).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re._constants as sre_c
import re._parser as sre_parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

MAX_EXACT = 16  # the most strings an ``exact`` set may hold before it becomes a query
MAX_EXACT_LEN = 32  # the longest string an ``exact`` set may hold (longer: a query)
MAX_SET = 64  # the most prefixes or suffixes kept
MAX_QUERY_TRIGRAMS = 256  # the most trigram terms a plan asks the index for


# ---- the boolean query over trigrams ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Q:
    op: Literal["all", "none", "tri", "and", "or"]
    tri: str = ""
    args: tuple[Q, ...] = ()

    def __str__(self) -> str:
        if self.op in ("all", "none"):
            return self.op.upper()
        if self.op == "tri":
            return repr(self.tri)
        sep = " & " if self.op == "and" else " | "
        return "(" + sep.join(map(str, self.args)) + ")"

    def trigrams(self) -> set[str]:
        if self.op == "tri":
            return {self.tri}
        return set().union(*(a.trigrams() for a in self.args)) if self.args else set()

    def matches(self, present: set[str]) -> bool:
        """Evaluate against the set of trigrams a text has (for tests and the dirty set)."""
        if self.op == "all":
            return True
        if self.op == "none":
            return False
        if self.op == "tri":
            return self.tri in present
        if self.op == "and":
            return all(a.matches(present) for a in self.args)
        return any(a.matches(present) for a in self.args)


ALL = Q("all")
NONE = Q("none")


def q_and(*qs: Q) -> Q:
    args: dict[Q, None] = {}  # ordered, de-duplicated by hash (a list would be quadratic)
    for q in qs:
        if q.op == "none":
            return NONE
        if q.op == "all":
            continue
        if q.op == "and":
            args.update(dict.fromkeys(q.args))
        else:
            args[q] = None
    if not args:
        return ALL
    return next(iter(args)) if len(args) == 1 else Q("and", args=tuple(args))


def q_or(*qs: Q) -> Q:
    args: dict[Q, None] = {}
    for q in qs:
        if q.op == "all":
            return ALL
        if q.op == "none":
            continue
        if q.op == "or":
            args.update(dict.fromkeys(q.args))
        else:
            args[q] = None
    if not args:
        return NONE
    return next(iter(args)) if len(args) == 1 else Q("or", args=tuple(args))


def _size(q: Q) -> int:
    """The number of trigram terms in ``q``."""
    if q.op == "tri":
        return 1
    return sum(_size(a) for a in q.args)


def bounded(q: Q, budget: int = MAX_QUERY_TRIGRAMS) -> Q:
    """``q`` with at most ``budget`` trigram terms, never narrower: conjuncts beyond the budget
    are dropped (each is required, so fewer of them admit more), and a disjunction too large
    to keep becomes ``ALL``. The conjuncts kept are spread over the whole AND (its first ones
    alone would all come from the pattern's start)."""
    if q.op in ("all", "none") or _size(q) <= budget:
        return q
    if q.op != "and":
        return ALL
    chosen: dict[int, Q] = {}
    for i in _spread(len(q.args)):
        if budget <= 0:
            break
        b = bounded(q.args[i], budget)
        if b.op != "all":
            chosen[i] = b
            budget -= _size(b)
    return q_and(*(chosen[i] for i in sorted(chosen)))


def _spread(n: int) -> Iterator[int]:
    """0 … n-1, each once, in an order that halves the gaps: ends, middle, quarters, …"""
    seen: set[int] = set()
    step = n
    while step >= 1:
        for i in range(0, n, step):
            if i not in seen:
                seen.add(i)
                yield i
        if n - 1 not in seen:
            seen.add(n - 1)
            yield n - 1
        step //= 2


# ---- trigrams as the index makes them --------------------------------------------------------

# ASCII letters that RE2's case folding also joins to a character outside ASCII (the tests
# check this table against RE2 over every code point)
EXTRA_FOLDS: dict[str, str] = {"k": "\u212a", "s": "\u017f"}  # Kelvin sign, long s


def _variants(ch: str, ci: bool) -> tuple[str, ...] | None:
    """The characters the indexed text may hold where a match has ``ch``: ``ch`` itself, or
    for a case-insensitive pattern every character RE2 folds together with it. None when
    that cannot be known: a surrogate (a raw byte, which the index saw as U+FFFD), or a
    non-ASCII character under case-insensitivity (its folds are too irregular to list)."""
    if "\ud800" <= ch <= "\udfff":
        return None
    if not ci:
        return (ch,)
    if not ch.isascii():
        return None
    if not ch.isalpha():
        return (ch,)
    lo = ch.lower()
    extra = EXTRA_FOLDS.get(lo)
    return (lo, ch.upper(), extra) if extra else (lo, ch.upper())


def string_trigrams(s: str, ci: bool) -> list[tuple[str, ...]]:
    """The index terms a literal ``s`` must produce, one entry per three-character window:
    the window's spellings the index may hold (one when case-sensitive), any of which will do.
    Windows with a character that cannot be reasoned about are skipped."""
    out: dict[tuple[str, ...], None] = {}  # ordered, de-duplicated in linear time
    variants = [_variants(c, ci) for c in s]
    for i in range(len(s) - 2):
        chars = variants[i : i + 3]
        if any(v is None for v in chars):
            continue
        out[tuple("".join(p) for p in itertools.product(*chars))] = None  # type: ignore[arg-type]
    return list(out)


def text_trigrams(text: str) -> set[str]:
    """Every trigram term of a text, as the index stores them (tests use this)."""
    return {text[i : i + 3] for i in range(len(text) - 2)}


def _strings_query(strings: set[str], ci: bool) -> Q:
    """Any one of ``strings`` must occur: OR over strings of AND over their windows (each
    window: any of its spellings)."""
    return q_or(
        *(
            q_and(*(q_or(*(Q("tri", t) for t in w)) for w in string_trigrams(s, ci)))
            for s in sorted(strings)
        )
    )


# ---- regex summaries -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Info:
    emptyable: bool
    exact: frozenset[str] | None  # every string the node matches, when few
    prefix: frozenset[str]  # what every match starts with (when exact is None)
    suffix: frozenset[str]  # what every match ends with (when exact is None)
    match: Q


ANY_CHAR = Info(False, None, frozenset({""}), frozenset({""}), ALL)
ANYTHING = Info(True, None, frozenset({""}), frozenset({""}), ALL)
EMPTY = Info(True, frozenset({""}), frozenset(), frozenset(), ALL)


def _exact(strings: set[str]) -> Info:
    return Info("" in strings, frozenset(strings), frozenset(), frozenset(), ALL)


def _inexact(info: Info, ci: bool) -> Info:
    """Turn an exact set into prefix/suffix/match form."""
    if info.exact is None:
        return info
    return Info(
        info.emptyable,
        None,
        _trim(info.exact, "prefix"),
        _trim(info.exact, "suffix"),
        q_and(info.match, _strings_query(set(info.exact), ci)),
    )


def _trim(strings: frozenset[str] | set[str], side: str) -> frozenset[str]:
    """Keep only what a trigram across the boundary needs: two characters per string."""
    if side == "prefix":
        return frozenset(s[:2] for s in strings)
    return frozenset(s[-2:] for s in strings)


def _cross(a: frozenset[str], b: frozenset[str]) -> set[str]:
    return {x + y for x, y in itertools.product(a, b)}


def _longest(strings: frozenset[str]) -> int:
    return max(map(len, strings), default=0)


def concat(x: Info, y: Info, ci: bool) -> Info:
    if (
        x.exact is not None
        and y.exact is not None
        and len(x.exact) * len(y.exact) <= MAX_EXACT
        and _longest(x.exact) + _longest(y.exact) <= MAX_EXACT_LEN
    ):
        return Info(
            x.emptyable and y.emptyable, frozenset(_cross(x.exact, y.exact)), frozenset(),
            frozenset(), q_and(x.match, y.match),
        )  # fmt: skip
    match = q_and(x.match, y.match)
    # what every match of x then y starts with
    if x.exact is not None:
        prefix = _cross(x.exact, y.prefix if y.exact is None else y.exact)
        match = q_and(match, _strings_query(set(x.exact), ci))
    else:
        prefix = set(x.prefix)
        if x.emptyable:
            prefix |= set(y.prefix if y.exact is None else y.exact)
    if y.exact is not None:
        suffix = _cross(x.suffix if x.exact is None else x.exact, y.exact)
        match = q_and(match, _strings_query(set(y.exact), ci))
    else:
        suffix = set(y.suffix)
        if y.emptyable:
            suffix |= set(x.suffix if x.exact is None else x.exact)
    # trigrams that straddle the boundary: some suffix of x followed by some prefix of y
    left = x.exact if x.exact is not None else x.suffix
    right = y.exact if y.exact is not None else y.prefix
    if left and right and len(left) * len(right) <= MAX_SET:
        match = q_and(
            match, _strings_query(_cross(_trim(left, "suffix"), _trim(right, "prefix")), ci)
        )
    if len(prefix) > MAX_SET:
        prefix = {""}
    if len(suffix) > MAX_SET:
        suffix = {""}
    return Info(
        x.emptyable and y.emptyable, None, _trim(prefix, "prefix"), _trim(suffix, "suffix"), match
    )


def alternate(x: Info, y: Info, ci: bool) -> Info:
    if x.exact is not None and y.exact is not None and len(x.exact) + len(y.exact) <= MAX_EXACT:
        return Info(
            x.emptyable or y.emptyable, x.exact | y.exact, frozenset(), frozenset(),
            q_and(x.match, y.match) if x.match == y.match else q_or(x.match, y.match),
        )  # fmt: skip
    a, b = _inexact(x, ci), _inexact(y, ci)
    prefix = a.prefix | b.prefix
    suffix = a.suffix | b.suffix
    return Info(
        a.emptyable or b.emptyable,
        None,
        prefix if len(prefix) <= MAX_SET else frozenset({""}),
        suffix if len(suffix) <= MAX_SET else frozenset({""}),
        q_or(a.match, b.match),
    )


def _class_chars(items: list[tuple[object, object]]) -> set[str] | None:
    """The characters of a small, positive character class; None when large or negated."""
    chars: set[str] = set()
    for op, av in items:
        if op is sre_c.LITERAL:
            chars.add(chr(av))  # type: ignore[arg-type]
        elif op is sre_c.RANGE:
            lo, hi = av  # type: ignore[misc]
            if hi - lo > 8:
                return None
            chars.update(chr(c) for c in range(lo, hi + 1))
        else:  # NEGATE, CATEGORY (\d, \w ...)
            return None
        if len(chars) > 8:
            return None
    return chars


def _node(op: object, av: object, ci: bool) -> Info:
    if op is sre_c.LITERAL:
        return _exact({chr(av)})  # type: ignore[arg-type]
    if op is sre_c.NOT_LITERAL or op is sre_c.ANY or op is sre_c.CATEGORY:
        return ANY_CHAR
    if op is sre_c.IN:
        chars = _class_chars(av)  # type: ignore[arg-type]
        return _exact(chars) if chars else ANY_CHAR
    if op is sre_c.AT:
        return EMPTY
    if op is sre_c.SUBPATTERN:
        return _seq(av[-1], ci)  # type: ignore[index]
    if op is sre_c.ATOMIC_GROUP:
        return _seq(av, ci)
    if op is sre_c.BRANCH:
        return _alternatives([_seq(alt, ci) for alt in av[1]], ci)  # type: ignore[index]
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, sre_c.POSSESSIVE_REPEAT):
        lo, hi, sub = av  # type: ignore[misc]
        inner = _seq(sub, ci)
        if lo == 0:
            if hi == 1 and inner.exact is not None and len(inner.exact) < MAX_EXACT:
                return _exact(set(inner.exact) | {""})
            return ANYTHING
        if lo == hi == 1:
            return inner
        # at least once: what one occurrence needs, and its ends
        one = _inexact(inner, ci)
        return Info(inner.emptyable, None, one.prefix, one.suffix, one.match)
    if op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
        return EMPTY  # look-around consumes nothing (RE2 refuses it anyway)
    return ANYTHING  # anything unforeseen: no narrowing


def _alternatives(infos: list[Info], ci: bool) -> Info:
    """Any one of ``infos``: exact while the union stays small, else an OR made once (folding
    pair by pair would copy the growing OR at every step)."""
    if len(infos) <= 2:
        return functools.reduce(lambda a, b: alternate(a, b, ci), infos)
    if (
        all(i.exact is not None for i in infos)
        and sum(len(i.exact or ()) for i in infos) <= MAX_EXACT
    ):
        return functools.reduce(lambda a, b: alternate(a, b, ci), infos)
    parts = [_inexact(i, ci) for i in infos]
    prefix = frozenset().union(*(p.prefix for p in parts))
    suffix = frozenset().union(*(p.suffix for p in parts))
    return Info(
        any(p.emptyable for p in parts),
        None,
        prefix if len(prefix) <= MAX_SET else frozenset({""}),
        suffix if len(suffix) <= MAX_SET else frozenset({""}),
        q_or(*(p.match for p in parts)),
    )


def _literal_runs(sub: sre_parse.SubPattern, ci: bool) -> Iterator[Info]:
    """The nodes of a concatenation, a run of plain characters as one node (a long run
    already as a query: its own trigrams, its ends kept for the neighbours')."""
    run: list[str] = []
    for op, av in [*sub, (None, None)]:
        if op is sre_c.LITERAL:
            run.append(chr(av))  # type: ignore[arg-type]
            continue
        if run:
            lit = "".join(run)
            run = []
            if len(lit) <= MAX_EXACT_LEN:
                yield _exact({lit})
            else:
                yield Info(False, None, frozenset({lit[:2]}), frozenset({lit[-2:]}),
                           _strings_query({lit}, ci))  # fmt: skip
        if op is not None:
            yield _node(op, av, ci)


def _seq(sub: sre_parse.SubPattern, ci: bool) -> Info:
    """A concatenation. ``concat`` only ANDs the left side's query into its result, so the
    left side is carried without one and the conjuncts gathered, then ANDed once: folding
    them step by step would copy a growing AND at every node (quadratic in the length)."""
    info = EMPTY
    conjuncts: list[Q] = []
    for node in _literal_runs(sub, ci):
        info = concat(info, node, ci)
        if info.match.op != "all":
            conjuncts.append(info.match)
            info = dataclasses.replace(info, match=ALL)
    if not conjuncts:
        return info
    return dataclasses.replace(info, match=q_and(*conjuncts))


_UNPARSEABLE_HINTS = ("[:", "\\p", "\\P", "\\Q", "\\C", "\\x{", "(?<", "(?U")


def plan(pattern: str, *, regex: bool, case_sensitive: bool = True) -> Q:
    """The trigram query every file with a match satisfies (``ALL``: no narrowing)."""
    if not regex:
        return bounded(_strings_query({pattern}, not case_sensitive))
    if any(h in pattern for h in _UNPARSEABLE_HINTS):
        return ALL  # RE2 syntax Python's parser would misread: do not guess
    try:
        parsed = sre_parse.parse(pattern.replace("\\z", "\\Z"))
    except Exception:  # re.error and friends: RE2 accepts what Python does not
        return ALL
    ci = not case_sensitive or bool(parsed.state.flags & sre_c.SRE_FLAG_IGNORECASE)
    if "(?" in pattern and "i" in "".join(re_flags_in(pattern)):
        ci = True
    info = _inexact(_seq(parsed, ci), ci)
    return bounded(info.match)


def re_flags_in(pattern: str) -> list[str]:
    """Inline flag groups like ``(?i)`` or ``(?i:...)`` anywhere in a pattern."""
    import re

    return re.findall(r"\(\?([a-zA-Z-]+)[:)]", pattern)
