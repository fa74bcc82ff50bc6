"""The daemon's wire (``index.freshness``): a request and an answer header are lines of words
that read back to what was sent, whatever the pattern holds; a line of another version is
refused, and the asker then scans live."""

from __future__ import annotations

import pytest

from rootgrep.index.freshness import (
    PROTOCOL,
    _answer_line,
    _b64,
    _parse_answer,
    _parse_request,
    _request_line,
)

PATTERNS = ["getrecursionlimit", "a b\nc\td", "ünïcødé ✓", "\udcff raw byte", "", " ", "=\0"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_request_reads_back_as_it_was_sent(pattern: str) -> None:
    request = {"v": PROTOCOL, "root": _b64(b"/srv/a b"), "place": _b64(b"lib/\xff sub"),
               "dev": 2049, "ino": 1 << 40, "q": {"pattern": pattern, "regex": True,
                                                   "case_sensitive": False}}  # fmt: skip
    line = _request_line(request)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert _parse_request(line[:-1]) == request
    flipped = {**request, "q": {"pattern": pattern, "regex": False, "case_sensitive": True}}
    assert _parse_request(_request_line(flipped)[:-1]) == flipped


@pytest.mark.parametrize(
    "line",
    [
        b'{"v":1,"root":"Lw==","place":"","dev":1,"ino":2,"q":{}}',  # (protocol 1: JSON)
        b"1 Lw== Lw== 1 2 eA== 1 1",
        b"2 Lw== Lw== 1 2 eA== 1",
        b"2 Lw== Lw== 1 2 eA== 1 2",
        b"2 Lw== Lw== x 2 eA== 1 1",
        b"",
    ],
)
def test_a_request_of_another_version_or_garbage_is_refused(line: bytes) -> None:
    with pytest.raises(ValueError):
        _parse_request(line)


def test_an_answer_header_reads_back() -> None:
    fresh = {"fresh": True, "pid": 41, "max_file_size": 20 << 20, "changed": 3, "held": 7,
             "narrowed": True}  # fmt: skip
    line = _answer_line(fresh, 1234)
    assert line.count(b"\n") == 1
    assert _parse_answer(line[:-1]) == {**fresh, "bytes": 1234}
    assert _parse_answer(_answer_line({**fresh, "narrowed": False}, 0)[:-1])["narrowed"] is False
    why = {"fresh": False, "why": "ValueError: two\nlines"}
    assert _parse_answer(_answer_line(why, 0)[:-1]) == {"fresh": False,
                                                        "why": "ValueError: two lines"}  # fmt: skip


@pytest.mark.parametrize("line", [b'{"fresh":true}', b"1 2 3", b"1 a b c d e f", b"", b"2 x"])
def test_an_answer_of_another_version_or_garbage_is_refused(line: bytes) -> None:
    with pytest.raises(ValueError):
        _parse_answer(line)
