"""A ranked search of files read live, for a root whose index cannot answer yet (its first
build runs, or failed): the files a walk lists are read, at most ``LIVE_SEARCH_BYTES`` and
``LIVE_SEARCH_SECONDS`` of them, and each is scored as the index would score it from its
words alone (how many of the query's words it holds, whole or written as one identifier,
and whether its file name holds them). The answer still says it is partial."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

from .. import confine
from ..index.fields import ext_of, is_low_path
from ..index.ranking import LOW_FACTOR, NAME_SIGNAL, WORD_SIGNAL, cover_weight, joined_words
from ..index.search_syntax import ParsedSearch
from ..roots import Root
from ..walker import Walker, WalkOptions

LIVE_SEARCH_BYTES = 64 << 20  # what one search reads live, at most, over every root
LIVE_SEARCH_SECONDS = 1.5  # ... and for how long
# a word found only inside an identifier (``parse_duration_flag`` holds "duration"): less
# than found whole, or as several words written as one (``ParseDuration``)
INSIDE_SIGNAL = 1.0
LIVE_FILE_BYTES = 2 << 20  # a larger file is not read by the live scan


class LiveBudget:
    """What the live scans of one search may still read, shared by its roots."""

    def __init__(self) -> None:
        self.bytes = LIVE_SEARCH_BYTES
        self.deadline = time.monotonic() + LIVE_SEARCH_SECONDS
        self.files = 0  # files read
        self.cut = False  # the budget ran out before every file was read

    def spent(self) -> bool:
        if self.bytes <= 0 or time.monotonic() > self.deadline:
            self.cut = True
        return self.cut


def _phrase_words(phrase: str) -> list[tuple[str, str]]:
    return ParsedSearch(words=[phrase]).tokens()


def _part_pattern(tokens: list[str]) -> re.Pattern[bytes]:
    """Each token as a sub-word of an identifier, as the index's ``parts`` field cuts them:
    after a non-word character or ``_`` (``parse_duration``, ``PARSE_DURATION``), or
    capitalised after a lowercase letter or digit (``ParseDuration``); not followed by a
    lowercase letter or digit."""
    alts = []
    for t in sorted(set(tokens), key=len, reverse=True):
        if not t.isascii() or not t.isalnum():
            continue
        low, cap, up = (re.escape(x.encode()) for x in (t, t[:1].upper() + t[1:], t.upper()))
        alts.append(rb"(?<![A-Za-z0-9])(?:" + low + rb"|" + cap + rb"|" + up + rb")")
        alts.append(rb"(?<=[a-z0-9])" + cap)
    return re.compile(rb"(?:" + b"|".join(alts or [rb"(?!)"]) + rb")(?![a-z0-9])")


def _word_pattern(forms: list[str]) -> re.Pattern[bytes]:
    alts = b"|".join(re.escape(f.encode()) for f in sorted(set(forms), key=len, reverse=True))
    return re.compile(rb"(?<![A-Za-z0-9_])(" + alts + rb")(?![A-Za-z0-9_])", re.IGNORECASE)


def live_hits(
    r: Root,
    start: bytes,
    prune: frozenset[bytes],
    parsed: ParsedSearch,
    words: list[tuple[str, str]],
    keep: Callable[[bytes], bool],
    budget: LiveBudget,
    cancelled: Callable[[], bool],
) -> Iterator[tuple[float, bytes]]:
    """(score, root-relative path) of each file below ``start`` that answers ``parsed``,
    read live within ``budget``: with one word or several that are each required (not
    ``natural``), every word; else at least one. A file holding a word to exclude, or of an
    extension left out, is not one."""
    tokens = [t for t, _ in words]
    phrased = [t for p in parsed.phrases for t, _ in _phrase_words(p)]
    if phrased:  # (a phrase's words are each required; the phrase itself is checked later)
        tokens = list(dict.fromkeys([*tokens, *phrased]))
    if not tokens:
        return
    joins = joined_words(tokens)
    forms: dict[str, set[int]] = {}
    for k, t in enumerate(tokens):
        forms.setdefault(t, set()).add(k)
        for j in joins.get(k, ()):
            forms.setdefault(j, set()).add(k)
    pattern = _word_pattern(list(forms))
    parts = _part_pattern(tokens)
    index_of = {t: k for k, t in enumerate(tokens)}
    avoid = _word_pattern([w.lower() for w in parsed.exclude]) if parsed.exclude else None
    need = len(tokens) if not parsed.natural or phrased else 1
    top = cover_weight(len(tokens))
    exts = {e.lower() for e in parsed.exts}
    not_exts = {e.lower() for e in parsed.not_exts}
    walker = Walker(r.fs, start, WalkOptions(prune=prune))
    batches = walker.batches()
    try:
        for batch in batches:
            if cancelled() or budget.spent():  # (also between directories without files)
                batch.close()
                return
            with batch:
                for fe in batch.files:
                    if cancelled() or budget.spent():
                        return
                    if not keep(fe.path):
                        continue
                    ext = ext_of(fe.name.decode("utf-8", "replace"))
                    if (exts and ext not in exts) or ext in not_exts:
                        continue
                    data = confine.read_searchable_at(batch.fd, fe.name, LIVE_FILE_BYTES)
                    if data is None:
                        continue
                    budget.bytes -= len(data)
                    budget.files += 1
                    held: set[int] = set()
                    for m in pattern.finditer(data):
                        held |= forms.get(m.group(1).decode("ascii", "replace").lower(), set())
                        if len(held) == len(tokens):
                            break
                    whole = len(held)  # (whole identifiers, or several words as one)
                    if len(held) < len(tokens):  # (the words inside identifiers)
                        for m in parts.finditer(data):
                            k = index_of.get(m.group().decode("ascii").lower())
                            if k is not None:
                                held.add(k)
                                if len(held) == len(tokens):
                                    break
                    if len(held) < need or (avoid is not None and avoid.search(data)):
                        continue
                    name = fe.name.decode("utf-8", "replace").lower()
                    named = sum(1 for t in tokens if t in name)
                    signal = (
                        WORD_SIGNAL * whole
                        + INSIDE_SIGNAL * (len(held) - whole)
                        + NAME_SIGNAL * named
                    )
                    factor = LOW_FACTOR if is_low_path(fe.path) else 1.0
                    yield len(held) * top + factor * signal, fe.path
    finally:
        batches.close()
