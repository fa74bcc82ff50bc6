"""The tools' globs (``find_files`` patterns, ``include``/``exclude`` of grep and search):
gitignore-style (``pathspec.GitIgnoreSpec``: ``*.py`` matches at any depth, a pattern with a
``/`` is anchored, a directory pattern covers everything below it), matched on text.

Names are bytes and need not be UTF-8, while the glob engine matches text (and its RE2 backend
refuses lone surrogates, and its ``.`` stops at a line break). ``glob_text`` is the one place
that turns a name into the text a glob sees: UTF-8 decoded, and every byte that does not
decode, and every line break, becomes one U+FFFD, which ``*`` and ``?`` match like any
character. So ``*.py`` matches ``caf\\xe9.py`` and ``a\\nb/x.py``, and one odd name never fails
a tool for the whole root. Patterns go through the same mapping.

Braces: ``{a,b}`` alternatives (which pathspec lacks) are expanded first, as a shell or
ripgrep's globset does: ``*.{toml,cfg}`` is ``*.toml`` and ``*.cfg``; groups nest
(``{a,{b,c}}``); ``\\{``, ``\\}`` and ``\\,`` are literal; a group without a top-level comma
(``{}``, ``{a}``) and an unbalanced brace are literal text; braces inside ``[...]`` are
literal. A leading ``!`` negates every alternative. One glob expands to at most
``MAX_BRACE_EXPANSIONS`` (256) patterns and nests at most ``MAX_BRACE_DEPTH`` (32) deep, else
``invalid_pattern``. Ignore files (``.gitignore``, ``.ignore``) are not globs of this module:
git has no braces there.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from pathspec import GitIgnoreSpec

from .errors import InvalidArgument, InvalidPattern

GLOB_CHARS = frozenset("*?[")
MAX_BRACE_EXPANSIONS = 256
MAX_BRACE_DEPTH = 32
_ODD = {cp: 0xFFFD for cp in range(0xD800, 0xE000)} | {0x0A: 0xFFFD}


def glob_text(name: bytes | str) -> str:
    """A root-relative path (or a pattern) as the text globs are matched against."""
    if isinstance(name, bytes):
        if b"\n" not in name:
            try:
                return name.decode("utf-8")
            except UnicodeDecodeError:
                pass
        name = name.decode("utf-8", "surrogateescape")  # one surrogate per undecodable byte
    return name.translate(_ODD)


class Globs:
    """Compiled gitignore-style globs: ``match(path)`` says whether they select a path (the
    last pattern that matches decides, ``!`` negates, as in a ``.gitignore``)."""

    __slots__ = ("_spec",)

    def __init__(self, patterns: Sequence[str], what: str = "glob") -> None:
        for p in patterns:
            if _unclosed_class(p):  # (as rg's globs: gitignore rules would match it literally)
                raise InvalidPattern(
                    f"the {what} {p[:200]!r} opens a character class `[` it never closes; "
                    "close it (`[a-z]`), or write `\\[` to match a `[`"
                )
        lines = [glob_text(x) for p in patterns for x in expand_braces(p, what)]
        try:
            self._spec = GitIgnoreSpec.from_lines(lines)
        except Exception as e:  # pathspec raises its own error types for bad globs
            shown = ", ".join(repr(p) for p in patterns)[:300]
            raise InvalidPattern(f"the {what} {shown} is not valid ({e})") from None

    def match(self, path: bytes) -> bool:
        return bool(self._spec.match_file(glob_text(path)))

    def verdict(self, path: bytes, is_dir: bool = False) -> bool | None:
        """The last pattern that matches ``path`` itself decides: True for a plain pattern,
        False for a ``!`` one, None when none does. Unlike ``match``, a pattern that matches
        only a directory above ``path`` does not count (ripgrep's ``-g`` rules, where such a
        directory is pruned or entered on its own verdict)."""
        text = glob_text(path)
        if is_dir:
            text += "/"
        end = len(text) - 1 if is_dir else -1  # where a directory mark may match: its own /
        for pattern in reversed(self._spec.patterns):
            rx = getattr(pattern, "regex", None)
            if pattern.include is None or rx is None:
                continue
            m = rx.match(text)
            if m is None:
                continue
            mark = rx.groupindex.get("ps_d")  # pathspec's group for "a directory above"
            if mark is not None and m.start(mark) not in (-1, end):
                continue
            return bool(pattern.include)
        return None


def has_glob_chars(pattern: str) -> bool:
    """Whether ``pattern`` is a glob (``*``, ``?``, ``[``, or a ``{a,b}`` group)."""
    return any(c in GLOB_CHARS for c in pattern) or (
        "{" in pattern and bool(_brace_groups(pattern)[0])
    )


def as_globs(value: str | Sequence[str] | None, what: str = "include") -> list[str] | None:
    """An ``include``/``exclude`` argument as a list of globs: one string is one glob (a
    comma is part of a name; ``{a,b}`` gives alternatives), a list is taken as it is; None,
    ``""`` and ``[]`` mean no filter (None). ``what`` names the argument in errors."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value] if value else None
    if isinstance(value, bytes) or not isinstance(value, Sequence):
        raise InvalidArgument(f"{what} must be a glob or a list of globs (strings)")
    out: list[str] = []
    for v in value:
        if not isinstance(v, str):
            raise InvalidArgument(
                f"{what} must be a glob or a list of globs (strings); {type(v).__name__} "
                "found in the list"
            )
        if v:
            out.append(v)
    return out or None


# ---- brace expansion ------------------------------------------------------------------------


def _bracket_end(p: str, i: int) -> int:
    """The index after the ``[...]`` expression opening at ``i`` (pathspec's rules: ``!`` or
    ``^`` may open it, a ``]`` right after is literal); ``i + 1`` when it never closes."""
    j = i + 1
    n = len(p)
    if j < n and p[j] in "!^":
        j += 1
    if j < n and p[j] == "]":
        j += 1
    k = p.find("]", j)
    return i + 1 if k < 0 else k + 1


def _brace_groups(p: str) -> tuple[dict[int, int], dict[int, list[int]]]:
    """The expandable groups of ``p``: ``{open: close}`` for balanced braces holding a
    top-level comma, and each group's top-level comma positions. One pass with a stack
    (linear: a long pattern of odd braces costs no more than its length)."""
    pairs: dict[int, int] = {}
    commas: dict[int, list[int]] = {}
    stack: list[int] = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _bracket_end(p, i)
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            o = stack.pop()
            if o in commas:
                pairs[o] = i
        elif c == "," and stack:
            commas.setdefault(stack[-1], []).append(i)
        i += 1
    return pairs, {o: cs for o, cs in commas.items() if o in pairs}


class _TooMany(Exception):
    pass


def _expand(
    p: str, a: int, b: int, pairs: dict[int, int], commas: dict[int, list[int]], depth: int
) -> list[str]:
    """Every expansion of ``p[a:b]`` (at most MAX_BRACE_EXPANSIONS)."""
    if depth > MAX_BRACE_DEPTH:
        raise _TooMany(f"nests braces more than {MAX_BRACE_DEPTH} deep")
    out = [""]
    lit = a  # start of the literal text not yet added
    i = a
    while i < b:
        c = p[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _bracket_end(p, i)
            continue
        close = pairs.get(i) if c == "{" else None
        if close is None or close >= b:
            i += 1
            continue
        text = p[lit:i]
        bounds = [i, *commas[i], close]
        alts: list[str] = []
        for s, e in itertools.pairwise(bounds):
            alts += _expand(p, s + 1, e, pairs, commas, depth + 1)
            if len(alts) > MAX_BRACE_EXPANSIONS:
                raise _TooMany(f"expands to more than {MAX_BRACE_EXPANSIONS} globs")
        if len(out) * len(alts) > MAX_BRACE_EXPANSIONS:
            raise _TooMany(f"expands to more than {MAX_BRACE_EXPANSIONS} globs")
        out = [o + text + x for o in out for x in alts]
        i = lit = close + 1
    tail = p[lit:b]
    return [o + tail for o in out]


def _unclosed_class(pattern: str) -> bool:
    """Whether ``pattern`` has a ``[`` (not escaped) with no ``]`` after it to close it (a
    ``]`` right after ``[`` or ``[!`` is part of the class, as in fnmatch)."""
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            j = i + 1
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            close = pattern.find("]", j)
            if close < 0:
                return True
            i = close + 1
            continue
        i += 1
    return False


def expand_braces(pattern: str, what: str = "glob") -> list[str]:
    """The globs ``pattern`` stands for once its ``{a,b}`` groups are expanded (see the
    module docstring); ``[pattern]`` when it has none."""
    if "{" not in pattern:
        return [pattern]
    neg = pattern.startswith("!")
    body = pattern[1:] if neg else pattern
    pairs, commas = _brace_groups(body)
    if not pairs:
        return [pattern]
    try:
        alts = _expand(body, 0, len(body), pairs, commas, 0)
    except _TooMany as e:
        raise InvalidPattern(
            f"the {what} {pattern[:200]!r} {e}; use fewer {{a,b}} groups, or pass several "
            "globs as a list"
        ) from None
    # an alternative must not turn into a negation or a comment by coming first
    alts = ["\\" + x if x[:1] in ("!", "#") else x for x in alts]
    return ["!" + x for x in alts] if neg else alts
