"""How code's text is cut into words: the ``code`` tokenizer (the words a query asks for,
and a file name's), the ``content`` field's faster cut of the same words (``word_text``, cut
by the ``words`` tokenizer, ``_`` stored as ``WORD_JOIN``), and a token as that field stores
it (``word_term``)."""

from __future__ import annotations

import re2
from tantivy import Filter, TextAnalyzerBuilder, Tokenizer

WORD_RE = r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+"  # a word of the ``code`` tokenizer
LONG_WORD = 64  # longer words are not indexed (too long to be asked for)
CODE = (
    TextAnalyzerBuilder(Tokenizer.regex(WORD_RE))
    .filter(Filter.lowercase())
    .filter(Filter.remove_long(LONG_WORD))
    .build()
)
CODE_CASE = (  # query words as ``sym`` terms (case kept)
    TextAnalyzerBuilder(Tokenizer.regex(WORD_RE)).filter(Filter.remove_long(LONG_WORD)).build()
)
# The ``content`` field holds the ``code`` tokenizer's words, cut faster: tantivy's regex
# tokenizer runs one regex search per word (on F, 4× the CPU of its simple tokenizer, which
# cuts at every character that is not alphanumeric). So a file's words are cut by the simple
# tokenizer from ``word_text``, a rewrite of its bytes made to give the same words, each as
# often: ``_`` is stored as ``WORD_JOIN`` (a letter: it stays inside a word, and no other
# letter beyond ASCII is left). A word takes up to two bytes per character then, so the
# length cap in bytes is doubled: every word under ``LONG_WORD`` characters is kept, and
# some longer ones (never asked for: a query drops them) too.
WORD_JOIN = "\u00b5"  # MICRO SIGN
WORDS = (
    TextAnalyzerBuilder(Tokenizer.simple())
    .filter(Filter.lowercase())
    .filter(Filter.remove_long(2 * LONG_WORD - 1))
    .build()
)
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_RE2_OPTIONS.encoding = re2.Options.Encoding.LATIN1  # (byte by byte: a stray byte separates)
# a run of digits that starts a word, and the word character after it ("0x1F": 0, x1f)
_DIGITS_THEN_WORD = re2.compile(rb"(?:^|[^A-Za-z0-9_])[0-9]+[A-Za-z_]", _RE2_OPTIONS)._regexp
_UNANCHORED = re2._Anchor.UNANCHORED


def word_text(data: bytes) -> str:
    """The text the simple tokenizer cuts into the ``code`` tokenizer's words of ``data``
    (``_`` as ``WORD_JOIN``): each byte beyond ASCII is a separator (the regex's words are
    ASCII: a UTF-8 character, valid or not, only ever separates them), and a space goes
    between a run of digits that starts a word and the letter or ``_`` after it (the regex
    cuts "0x1F" into 0 and x1f). RE2 finds those runs (Python's ``re.sub`` costs three
    times as much on F)."""
    match, n, pos, last = _DIGITS_THEN_WORD.Match, len(data), 0, 0
    parts: list[bytes] = []
    while True:
        span = match(_UNANCHORED, data, pos, n)[0]
        if span[0] < 0:
            break
        cut = span[1] - 1  # (the letter after the digits)
        parts.append(data[last:cut])
        last = pos = cut
    if parts:
        parts.append(data[last:])
        data = b" ".join(parts)
    return data.decode("ascii", "replace").replace("_", WORD_JOIN)


def word_term(token: str) -> str:
    """A ``code`` token as the ``content`` field stores it."""
    return token.replace("_", WORD_JOIN)
