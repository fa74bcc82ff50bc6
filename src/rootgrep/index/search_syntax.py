"""``search``'s query language: words, of which stop words are dropped (a natural-language
question, "where is X defined", asks for X; of several words none is required alone),
``"phrases"``, checked on a file's text (``phrase_pattern``: the index keeps no positions),
``-word`` and ``-"phrase"`` excludes, and the ``ext:``, ``-ext:`` and ``path:`` filters
(``parse_search``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .words import CODE, CODE_CASE, LONG_WORD, WORD_RE

# natural-language queries: these words are dropped (SPEC §9); see ``ParsedSearch.natural``
_STOP = (
    "a about an and any are as at be been by can defined define defines definition "
    "declared declaration do does done find for from get gets happen happens handle "
    "handled here how i implemented implementation in into is it its located location me "
    "of on or show shows that the their them there this to use used uses using via was "
    "what when where which who whom why will with work works"
)
STOP_WORDS = frozenset(_STOP.split())
# the stop words that only frame a question ("where is X defined"): never taken for the name
# asked about, even where the code defines a symbol so named (the others, such as ``use``,
# ``get``, ``handle`` or ``done``, are put back when the index defines them: ``rank``)
_FRAME_WORDS = (
    "a an are defined define defines definition declared declaration how i implemented "
    "implementation in is it its located me of show the this what where which who why"
)
_FRAME = frozenset(_FRAME_WORDS.split())
_PUNCTUATION = ".,:;!?\"'()[]{}<>`"


@dataclass
class ParsedSearch:
    """``search`` syntax: words (stop words dropped; of several, files holding more rank
    first), ``"phrases"``, ``-word`` excludes (``-"a phrase"``: files holding it, not each
    of its words), ``path:GLOB`` and ``ext:py`` filter (``-ext:md`` excludes)."""

    words: list[str] = field(default_factory=list)
    phrases: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    not_phrases: list[str] = field(default_factory=list)  # excluded, of several words
    exts: list[str] = field(default_factory=list)
    not_exts: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    natural: bool = False  # several words: not each required (files holding more rank first)
    dropped: list[str] = field(default_factory=list)  # stop words that may name a symbol
    only_stop: bool = False  # every word was a stop word (``words`` kept them all)
    _patterns: tuple[list[re.Pattern[bytes]], list[re.Pattern[bytes]]] | None = field(
        default=None, repr=False, compare=False
    )

    def holds_phrases(self, data: bytes) -> bool:
        """Whether a file's text holds every phrase and no excluded one: a phrase's words in
        order, with only characters that are not word characters between them (as the
        index's words are cut), case ignored. The index only knows that a file holds the
        words somewhere."""
        need, avoid = self._phrase_patterns()
        return all(p.search(data) for p in need) and not any(p.search(data) for p in avoid)

    @property
    def checks_text(self) -> bool:
        """Whether ``holds_phrases`` can tell more than the index."""
        need, avoid = self._phrase_patterns()
        return bool(need or avoid)

    def _phrase_patterns(self) -> tuple[list[re.Pattern[bytes]], list[re.Pattern[bytes]]]:
        if self._patterns is None:
            need = (phrase_pattern(phrase) for phrase in self.phrases)
            avoid = (phrase_pattern(phrase) for phrase in self.not_phrases)
            self._patterns = (
                [p for p in need if p is not None],
                [p for p in avoid if p is not None],
            )
        return self._patterns

    def tokens(self) -> list[tuple[str, str]]:
        """The query's words as index tokens, each once: (lowercased, as typed)."""
        pairs = (zip(CODE.analyze(w), CODE_CASE.analyze(w), strict=False) for w in self.words)
        return list({pair: None for each in pairs for pair in each})


_WORD = re.compile(WORD_RE.encode())


def phrase_pattern(phrase: str) -> re.Pattern[bytes] | None:
    """What a file's text must hold for ``phrase``: its words (as the ``code`` tokenizer
    cuts them, every one, also those too long for the index) one after the other, case
    ignored; None when the index's words alone tell (a phrase of one indexed word).

    Between two words only characters that are not word characters, and at least one,
    except where a run of digits meets a word ("0x1F" is the words 0 and x1f): the words
    of a text are where the tokenizer finds them."""
    words = _WORD.findall(phrase.encode())
    if not words or (len(words) == 1 and len(words[0]) < LONG_WORD):
        return None
    parts = []
    for i, w in enumerate(words):
        digits = w[:1].isdigit()
        if i == 0:  # (a word after a run of digits starts a word: "0x1F" holds x1f)
            parts.append(rb"(?<![A-Za-z0-9_])" + (b"" if digits else rb"[0-9]*"))
        elif words[i - 1][:1].isdigit() and not digits:
            parts.append(rb"[^A-Za-z0-9_]*")
        else:
            parts.append(rb"[^A-Za-z0-9_]+")
        parts.append(re.escape(w))
    parts.append(rb"(?![0-9])" if words[-1][:1].isdigit() else rb"(?![A-Za-z0-9_])")
    return re.compile(b"".join(parts), re.IGNORECASE)


def parse_search(query: str) -> ParsedSearch:
    out = ParsedSearch()
    for m in re.finditer(r'(-?)"([^"]*)"?|(\S+)', query):
        if m.group(3) is None:
            if not m.group(1):
                out.phrases.append(m.group(2))
            elif phrase_pattern(m.group(2)) is None:  # (one word: the index tells)
                out.exclude.append(m.group(2))
            else:  # (not each of its words: the files holding it, checked on each)
                out.not_phrases.append(m.group(2))
            continue
        tok = m.group(3)
        neg = tok.startswith("-") and len(tok) > 1
        body = tok[1:] if neg else tok
        low = body.lower()
        if low.startswith("ext:") and len(body) > 4:
            (out.not_exts if neg else out.exts).append(body[4:].lstrip(".").lower())
        elif low.startswith("path:") and len(body) > 5 and not neg:
            out.paths.append(body[5:])
        elif neg:
            out.exclude.append(body)
        else:
            out.words.append(body)
    # stop words are dropped ("where is X defined" asks for X; a query of stop words only
    # keeps them), and of several words none is required on its own: a file needs one of
    # them, and ``rank`` puts the files holding more of them first (those holding them all
    # lead, as an AND would give them; "gzip decompression" still finds gzip.py after them)
    bare = [w.strip(_PUNCTUATION) for w in out.words]  # ("defined?" is a stop word too)
    kept = [w for w, b in zip(out.words, bare, strict=True) if b.lower() not in STOP_WORDS]
    out.dropped = [b for b in bare if b.lower() in STOP_WORDS - _FRAME]
    if kept:
        out.words = kept
    else:
        out.only_stop = bool(out.words)
    out.natural = len(out.words) >= 2
    return out
