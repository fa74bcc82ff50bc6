"""Which lines of a file a ranked search shows: the lines holding the most of the query's words.

A query's words are matched against a line's identifiers and against their sub-words
(``acceptCommonHandler``: accept, common, handler; ``parse_duration``: parse, duration;
``HTTPServer``: http, server), each reduced to a crude stem (``accepted`` and ``accepts`` are
``accept``, ``connections`` is ``connection``), so "where are client connections accepted"
picks the line defining ``acceptCommonHandler(connection *conn)``. Only lines a cheap
case-insensitive scan finds a stem in are looked at word by word, and a file is looked at up
to ``SNIPPET_SCAN_BYTES`` (its first ``SCORED_LINES`` such lines scored).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

SNIPPET_SCAN_BYTES = 4 << 20  # a file's lines past this are not looked at for snippets
SCORED_LINES = 2000  # lines a scan finds a stem in that are scored, at most
SCORED_MATCHES = 20_000  # stems found that are looked at, at most (a line of them: bounded)

# the sub-words of an identifier: an acronym before a capitalised word (HTTP|Server), a
# capitalised or lowercase word, an acronym, a number
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_SUFFIXES = ("ations", "ation", "ings", "ing", "edly", "ed", "ers", "er", "es", "s", "e")


def stem(word: str) -> str:
    """A crude stem of a lowercase word: one common English ending taken off when at least
    three letters stay (``accepted`` → ``accept``, ``handlers`` → ``handl``,
    ``handler`` → ``handl``), so the forms of a word meet."""
    for end in _SUFFIXES:
        if word.endswith(end) and len(word) - len(end) >= 3:
            return word[: -len(end)]
    return word


def sub_words(identifier: str) -> list[str]:
    """An identifier's sub-words, lowercased: camelCase, PascalCase, snake_case and acronyms
    split (``parseHTTPResponse``: parse, http, response); a plain word is itself."""
    out: list[str] = []
    for piece in identifier.split("_"):
        out.extend(p.lower() for p in _PART.findall(piece))
    return out


def word_stems(words: Iterable[str]) -> set[str]:
    """The stems a query's words are looked for by (each word, and its sub-words)."""
    out: set[str] = set()
    for w in words:
        out.add(stem(w.lower()))
        out.update(stem(p) for p in sub_words(w))
    return {s for s in out if s}


def best_lines(
    data: bytes, lines: Sequence[bytes], stems: set[str], first: Sequence[int], limit: int
) -> list[tuple[int, tuple[int, int]]]:
    """Up to ``limit`` line numbers (1-based) of ``data`` (split into ``lines``) to show:
    those of ``first`` (definitions of a query word), then the lines holding the most
    distinct stems of ``stems``, ties in file order; each with the span of its first stem in
    the line (to cut a long line around it; (0, 0) when none). One scan of the file's first
    ``SNIPPET_SCAN_BYTES`` finds every stem (a stem inside a longer word counts: it ranks
    lines, never decides what a search finds), at most ``SCORED_LINES`` lines of them."""
    if not stems:
        return [(i, (0, 0)) for i in first[:limit]]
    scan = re.compile(
        b"|".join(re.escape(s.encode()) for s in sorted(stems, key=len, reverse=True)),
        re.IGNORECASE,
    )

    def span(line: bytes) -> tuple[int, int]:
        m = scan.search(line)
        return (m.start(), m.end()) if m else (0, 0)

    chosen = [(i, span(lines[i - 1])) for i in first[:limit] if 0 < i <= len(lines)]
    taken = {i for i, _ in chosen}
    held: dict[int, set[bytes]] = {}
    spans: dict[int, tuple[int, int]] = {}
    line, last, start = 1, 0, 0
    for k, m in enumerate(scan.finditer(data, 0, min(len(data), SNIPPET_SCAN_BYTES))):
        if k >= SCORED_MATCHES:
            break
        pos = m.start()
        crossed = data.count(b"\n", last, pos)
        if crossed:
            line += crossed
            start = data.rfind(b"\n", last, pos) + 1
        last = pos
        found = held.get(line)
        if found is None:
            if len(held) >= SCORED_LINES:
                break
            found = held[line] = set()
            spans[line] = (pos - start, m.end() - start)
        found.add(m.group().lower())
    ranked = sorted((i for i in held if i not in taken), key=lambda i: (-len(held[i]), i))
    chosen += [(i, spans[i]) for i in ranked[: max(0, limit - len(chosen))]]
    return chosen
