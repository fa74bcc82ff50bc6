"""The terms the index is built from: cheaper ways to make them give the very same terms."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rootgrep.index.words import CODE, LONG_WORD, WORD_JOIN, WORDS, word_term, word_text
from support import fuzz_examples

# pieces a file's bytes are made of: ASCII word characters and digits (runs of them too, to
# reach the length cap), separators, letters beyond ASCII (two of them with ASCII folds), the
# letter that stands for ``_``, bytes that are not UTF-8
PIECES = st.sampled_from(
    [b"a", b"Z", b"q", b"_", b"0", b"7", b"x1F", b"12ab", b" ", b".", b"\n", b"\t", b"-",
     b"\r", b"\x1f", "é".encode(), "µ".encode(), "İ".encode(), "\u212a".encode(),
     "ß".encode(), "٣".encode(), b"\xff", b"\xc3", b"\xe2\x82", b"\xef\xbb\xbf",
     b"w" * 30, b"_" * 20, b"9" * 40]
)  # fmt: skip


@settings(max_examples=fuzz_examples(1_200, 30_000), deadline=None)
@given(st.lists(PIECES, max_size=40).map(b"".join))
def test_content_words_are_the_code_tokenizers(data: bytes) -> None:
    """``content`` is cut by the simple tokenizer from ``word_text``: the same words as the
    ``code`` tokenizer finds in the decoded text, in the same order and as often (BM25 counts
    them), every word shorter than ``LONG_WORD`` characters; what it keeps beyond those is
    only longer words (never asked for)."""
    expected = [word_term(w) for w in CODE.analyze(data.decode("utf-8", "replace"))]
    got = WORDS.analyze(word_text(data))
    assert [w for w in got if len(w) < LONG_WORD] == expected
    assert all(WORD_JOIN not in w or "_" not in w for w in got)


def test_content_words_of_a_sample() -> None:
    data = b"0x1F foo_bar 12ab_3 caf\xc3\xa9 _x9 9_ \xb5s Go2"
    assert WORDS.analyze(word_text(data)) == [
        "0", "x1f", "foo\u00b5bar", "12", "ab\u00b53", "caf", "\u00b5x9", "9", "\u00b5", "s", "go2",
    ]  # fmt: skip
