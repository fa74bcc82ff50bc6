"""Long lines in grep answers (SPEC §8 ``max_line_chars``): ``cut_around`` shows a window of
characters around the match, ``cut_context`` the start of a context line; neither ever splits
a code point, and the match is always inside the window."""

from __future__ import annotations

import pytest

from rootgrep.grep import GrepQuery, Matcher, cut_around, cut_context, search_buffer

CUT = "…"


def shown_part(text: str) -> str:
    """The characters of the line a cut shows (the marks taken off)."""
    return text.removeprefix(CUT).removesuffix(CUT)


def test_a_line_within_the_limit_is_shown_whole() -> None:
    assert cut_around(b"def main():", 4, 8, 300) == ("def main():", False)
    assert cut_context(b"    return 1", 300) == ("    return 1", False)
    # 300 characters of 2 bytes each: 600 bytes, still within 300 characters
    line = "é".encode() * 300
    assert cut_around(line, 10, 12, 300) == ("é" * 300, False)
    assert cut_context(line, 300) == ("é" * 300, False)
    assert cut_around(b"", 0, 0, 5) == ("", False)


def test_a_320_kb_minified_line_is_cut_around_its_match_found_by_grep() -> None:
    line = b"var a=1;" * 20_000 + b"function needleInHaystack(){return 42}" + b"var b=2;" * 20_000
    buf = b"// header\n" + line + b"\n// footer\n"
    m = Matcher(GrepQuery("needleInHaystack"))
    (lm,) = search_buffer(m, buf)
    assert lm.line == 2 and len(lm.text) > 320_000
    span = m.find(lm.text, lm.offset)
    assert span is not None
    text, cut = cut_around(lm.text, span[0], span[1], 300)
    assert cut and text.startswith(CUT) and text.endswith(CUT)
    body = shown_part(text)
    assert len(body) == 300 and "needleInHaystack" in body
    assert body in line.decode()
    # centred: about as much shown before the match as after it
    before, _, after = body.partition("needleInHaystack")
    assert abs(len(before) - len(after)) <= 1


def test_a_match_at_the_very_start_shows_the_line_s_beginning() -> None:
    line = b"needle" + b"x" * 5000
    text, cut = cut_around(line, 0, 6, 40)
    assert cut and text == "needle" + "x" * 34 + CUT


def test_a_match_at_the_very_end_shows_the_line_s_end() -> None:
    line = b"x" * 5000 + b"needle"
    text, cut = cut_around(line, 5000, 5006, 40)
    assert cut and text == CUT + "x" * 34 + "needle"
    # an empty match at the end of the line (a regex like `$`)
    text, cut = cut_around(line, 5006, 5006, 40)
    assert cut and text == CUT + "x" * 34 + "needle"


def test_a_match_longer_than_the_window_shows_its_beginning() -> None:
    line = b"a" * 100 + b"M" * 1000 + b"z" * 100
    text, cut = cut_around(line, 100, 1100, 50)
    assert cut and text == CUT + "M" * 50 + CUT
    text, cut = cut_around(b"M" * 1000, 0, 1000, 50)
    assert cut and text == "M" * 50 + CUT


@pytest.mark.parametrize("max_chars", [1, 2, 7, 20])
def test_multibyte_text_is_never_split_and_the_match_is_always_inside(max_chars: int) -> None:
    # 1-, 2-, 3- and 4-byte characters, all different (so a shown part has one place)
    chars = "".join(chr(c + i) for i in range(50) for c in (0x21, 0x100, 0x4E00, 0x1F300))
    line = chars.encode()
    starts = [len(chars[:k].encode()) for k in range(len(chars) + 1)]
    for k in range(len(chars) + 1):
        for width in (0, 1, 3, 25):
            e = min(k + width, len(chars))
            s_b, e_b = starts[k], starts[e]
            text, cut = cut_around(line, s_b, e_b, max_chars)
            assert cut
            assert "\ufffd" not in text, "a character was split"
            body = shown_part(text)
            at = chars.find(body)
            assert len(body) <= max_chars and at >= 0
            # the match (or its first max_chars characters) is inside, at its place
            assert at <= k and k + min(e - k, max_chars) <= at + len(body)
            assert text.startswith(CUT) == (at > 0)
            assert text.endswith(CUT) == (at + len(body) < len(chars))


def test_an_offset_inside_a_character_still_splits_nothing() -> None:
    line = "€".encode() * 100  # 3 bytes each
    for s in range(0, 30):
        text, cut = cut_around(line, s, s + 1, 5)
        assert cut and "\ufffd" not in text and set(shown_part(text)) == {"€"}


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    line = b"\xff\xfe" * 500 + b"needle" + b"\x80" * 500
    text, cut = cut_around(line, 1000, 1006, 20)
    assert cut and "needle" in text
    assert set(shown_part(text).replace("needle", "")) == {"\ufffd"}


def test_a_long_context_line_shows_its_start() -> None:
    text, cut = cut_context(b"x" * 320_000, 300)
    assert cut and text == "x" * 300 + CUT
    line = "😀".encode() * 1000
    for max_chars in (1, 3, 300):
        text, cut = cut_context(line, max_chars)
        assert cut and text == "😀" * max_chars + CUT
    text, cut = cut_context(b"\xffabc" * 10, 5)
    assert cut and text == "\ufffdabc\ufffd" + CUT
