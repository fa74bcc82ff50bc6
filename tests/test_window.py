"""``read_file`` windows (SPEC §8): any line of a file up to ``max_file_size`` is reachable,
one window is bounded by ``max_lines`` and ``max_bytes``, ``total_lines`` is the file's true
count. Real files in a tmp dir, opened beneath a pinned root."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rootgrep import window as window_mod
from rootgrep.confine import split_relpath
from rootgrep.errors import (
    BinaryFile,
    InvalidArgument,
    OutsideRoots,
    RootRemoved,
    TooLarge,
)
from rootgrep.roots import Root, pin_root
from rootgrep.window import BLOCK_BYTES, Window, read_window, read_window_at
from support import MARKER, assert_no_marker

MIB = 1 << 20


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Root]:
    (tmp_path / "root").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text(f"{MARKER}\n" * 10)
    r = pin_root(str(tmp_path / "root"))
    yield r
    r.close()


def put(root: Root, name: str, data: bytes) -> list[bytes]:
    Path(os.fsdecode(root.path), name).write_bytes(data)
    return split_relpath(name)


def window(root: Root, name: str, **kw: object) -> Window:
    kw.setdefault("max_bytes", MIB)
    kw.setdefault("max_file_size", 20 * MIB)
    return read_window_at(root.fs, split_relpath(name), **kw)


def true_lines(data: bytes) -> list[str]:
    """The file's lines as a window shows them: split at ``\\n`` only, terminators kept."""
    return [ln.decode("utf-8", "replace") for ln in re.findall(rb"[^\n]*\n|[^\n]+$", data)]


def read_all(root: Root, name: str, **kw: object) -> tuple[list[str], list[Window]]:
    """Every window from line 1, each started at the previous one's ``next_start_line``."""
    got: list[str] = []
    wins: list[Window] = []
    start = 1
    while True:
        w = window(root, name, start_line=start, **kw)
        wins.append(w)
        assert w.start_line == start
        assert w.end_line == start + len(w.lines) - 1
        # a window that starts on a line returns at least that line
        assert w.lines or w.total_lines == 0
        got += w.lines
        if w.next_start_line is None:
            assert w.end_line == w.total_lines
            return got, wins
        assert w.next_start_line == w.end_line + 1
        start = w.next_start_line


def test_a_40000_line_file_is_read_window_by_window_to_its_last_line(root: Root) -> None:
    data = b"".join(b"line %d of the file\n" % i for i in range(1, 40001))
    put(root, "big.txt", data)
    got, wins = read_all(root, "big.txt")
    assert got == true_lines(data)
    assert len(wins) == 20  # max_lines = 2000 by default
    assert all(w.total_lines == 40000 for w in wins)
    assert all(w.truncated for w in wins[:-1]) and not wins[-1].truncated
    # the line the issue could not reach (start_line 39990 answered nothing)
    w = window(root, "big.txt", start_line=39990)
    assert w.lines[0] == "line 39990 of the file\n"
    assert (w.end_line, w.total_lines, w.next_start_line) == (40000, 40000, None)
    w = window(root, "big.txt", start_line=39990, end_line=39991)
    assert w.lines == ["line 39990 of the file\n", "line 39991 of the file\n"]
    assert (w.next_start_line, w.truncated) == (39992, False)


def test_a_3_mb_file_is_read_window_by_window_within_the_byte_budget(root: Root) -> None:
    # lines of different lengths, with two-byte characters: some straddle a block boundary
    lines = [("é" * (i % 37) + f" {i} " + "x" * (i % 60) + "\n").encode() for i in range(45000)]
    data = b"".join(lines)
    j = data.rindex("é".encode(), 0, BLOCK_BYTES)  # shifted to end on its first byte:
    data = b"p" * (BLOCK_BYTES - 1 - j) + data
    assert len(data) > 3 * 10**6
    assert data[BLOCK_BYTES] & 0xC0 == 0x80, "a character must straddle the first block's end"
    put(root, "three.txt", data)
    budget = 256 << 10
    got, wins = read_all(root, "three.txt", max_lines=100_000, max_bytes=budget)
    assert got == true_lines(data)
    assert len(wins) > 3 * 10**6 // budget
    for w in wins:
        assert w.total_lines == 45000
        assert sum(len(x.encode()) for x in w.lines) <= budget
        assert w.cut_lines == 0
    assert all(w.truncated for w in wins[:-1])


def test_a_320_kb_single_line_is_cut_and_says_how_much_was_left_out(root: Root) -> None:
    line = ("var a=" + "ü" * 1000 + "x" * 318_000).encode() + b";\n"
    put(root, "min.js", line)
    n = len(line.decode()) - 1  # characters without the terminator
    w = window(root, "min.js")
    assert w.lines == ["var a=" + "ü" * 1000 + "x" * 994 + f"…[+{n - 2000} chars]\n"]
    assert (w.total_lines, w.cut_lines, w.truncated, w.next_start_line) == (1, 1, False, None)
    w = window(root, "min.js", max_line_chars=4)
    assert w.lines == [f"var …[+{n - 4} chars]\n"]


def test_crlf_lines_and_a_last_line_without_a_terminator(root: Root) -> None:
    data = b"one\r\ntwo\r\n\r\nlast"
    put(root, "crlf.txt", data)
    w = window(root, "crlf.txt")
    assert w.lines == ["one\r\n", "two\r\n", "\r\n", "last"]
    assert (w.total_lines, w.next_start_line) == (4, None)
    assert w.content == data.decode()
    w = window(root, "crlf.txt", start_line=4)
    assert (w.lines, w.end_line) == (["last"], 4)
    # a "\r" is the terminator's, never a character of the line (max_line_chars = 3 fits)
    w = window(root, "crlf.txt", max_line_chars=3)
    assert w.lines == ["one\r\n", "two\r\n", "\r\n", "las…[+1 chars]"] and w.cut_lines == 1


def test_lines_are_grep_s_lines_only_newline_ends_one(root: Root) -> None:
    # str.splitlines would break these at \r, \x0c, \x1c, \u2028: grep and the window do not
    data = "a\rb\x0cc\x1cd\u2028e\nsecond\n".encode()
    put(root, "odd.txt", data)
    w = window(root, "odd.txt")
    assert w.lines == ["a\rb\x0cc\x1cd\u2028e\n", "second\n"]
    assert w.total_lines == 2
    assert window(root, "odd.txt", start_line=2).lines == ["second\n"]


def test_a_bom_is_not_part_of_line_one_and_invalid_utf8_is_replaced(root: Root) -> None:
    put(root, "bom.txt", b"\xef\xbb\xbfhead\nbad \xff\xfe end\n")
    w = window(root, "bom.txt")
    assert w.lines == ["head\n", "bad \ufffd\ufffd end\n"]


def test_an_empty_file_has_no_lines_and_accepts_only_start_line_1(root: Root) -> None:
    put(root, "empty.txt", b"")
    w = window(root, "empty.txt")
    assert (w.lines, w.start_line, w.end_line, w.total_lines) == ([], 1, 0, 0)
    assert (w.next_start_line, w.truncated, w.cut_lines) == (None, False, 0)
    with pytest.raises(InvalidArgument, match=r"start_line 2 .*empty \(0 lines\)"):
        window(root, "empty.txt", start_line=2)


@pytest.mark.parametrize(
    ("start", "end", "says"),
    [
        (11, None, r"start_line 11 is past the last line of 'ten.txt', which has 10 lines; "
                   r"give a start_line from 1 to 10"),
        (0, None, r"start_line 0 .*numbered from 1 .*has 10 lines"),
        (-5, 3, r"start_line -5 .*has 10 lines"),
        (5, 4, r"end_line 4 is before start_line 5; 'ten.txt' has 10 lines"),
        (1, 0, r"end_line 0 is before start_line 1; 'ten.txt' has 10 lines"),
    ],
)  # fmt: skip
def test_out_of_range_and_inverted_ranges_are_invalid_arguments(
    root: Root, start: int, end: int | None, says: str
) -> None:
    put(root, "ten.txt", b"".join(b"%d\n" % i for i in range(1, 11)))
    with pytest.raises(InvalidArgument, match=says) as e:
        window(root, "ten.txt", start_line=start, end_line=end)
    assert str(e.value).startswith("[invalid_argument] ")


def test_an_end_line_past_the_end_reads_to_the_end(root: Root) -> None:
    put(root, "ten.txt", b"".join(b"%d\n" % i for i in range(1, 11)))
    w = window(root, "ten.txt", start_line=9, end_line=500)
    assert (w.lines, w.end_line, w.next_start_line) == (["9\n", "10\n"], 10, None)
    assert not w.truncated
    w = window(root, "ten.txt", start_line=3, end_line=4)
    assert (w.lines, w.truncated, w.next_start_line) == (["3\n", "4\n"], False, 5)
    w = window(root, "ten.txt", start_line=3, end_line=8, max_lines=2)
    assert (w.lines, w.truncated, w.next_start_line) == (["3\n", "4\n"], True, 5)


def test_a_max_bytes_smaller_than_one_line_still_returns_that_line_cut(root: Root) -> None:
    data = b"a" * 500 + b"\n" + "é".encode() * 300 + b"\nshort\n"
    put(root, "wide.txt", data)
    got, wins = read_all(root, "wide.txt", max_bytes=100)
    assert len(wins) == 3 and got[2] == "short\n"
    for w, left in zip(wins[:2], (500, 300), strict=True):
        (line,) = w.lines
        assert len(line.encode()) <= 100 and w.cut_lines == 1
        kept = line[: line.index("…")]
        assert line == kept + f"…[+{left - len(kept)} chars]\n"
    assert wins[0].truncated and wins[0].next_start_line == 2


def test_a_file_over_max_file_size_is_refused_naming_the_cap(root: Root) -> None:
    put(root, "huge.txt", b"x\n" * (600 << 10))  # 1.2 MiB
    with pytest.raises(TooLarge, match=r"over the 1 MiB cap .*--max-file-size.*grep") as e:
        window(root, "huge.txt", max_file_size=MIB)
    assert "'huge.txt'" in str(e.value)
    assert window(root, "huge.txt", max_file_size=2 * MIB).total_lines == 600 << 10


def test_a_binary_file_is_refused_as_read_does(root: Root) -> None:
    put(root, "bin.dat", b"text\n\0more\n")
    with pytest.raises(BinaryFile):
        window(root, "bin.dat")


def test_cancellation_is_asked_per_block(root: Root) -> None:
    put(root, "three.txt", (b"y" * 99 + b"\n") * (3 * BLOCK_BYTES // 100))
    asked = []

    def cancelled() -> bool:
        asked.append(1)
        return len(asked) > 2

    with pytest.raises(RootRemoved):
        window(root, "three.txt", cancelled=cancelled)
    assert len(asked) == 3


def test_a_window_opens_only_beneath_the_root(root: Root, tmp_path: Path) -> None:
    os.symlink(tmp_path / "outside" / "secret.txt", tmp_path / "root" / "link.txt")
    for name in ("../outside/secret.txt", "link.txt"):
        with pytest.raises(OutsideRoots) as e:
            window(root, name)
        assert_no_marker(str(e.value))


def test_read_window_streams_an_fd_from_its_start(root: Root) -> None:
    comps = put(root, "f.txt", b"1\n2\n3\n")
    fd, _ = root.fs.open_file(comps)
    try:
        os.read(fd, 2)  # wherever the fd's offset is, the window reads from offset 0
        w = read_window(fd, start_line=2, max_bytes=MIB, max_file_size=MIB)
    finally:
        os.close(fd)
    assert (w.lines, w.total_lines) == (["2\n", "3\n"], 3)


_PIECES = [b"a", b"bc", b"\n", b"\r", b"\r\n", "é".encode(), "😀".encode(), b"\xff", b"\xe2\x82"]


def _expected(data: bytes) -> list[tuple[str, int, str]]:
    """Each true line as (its text, its length in characters, its terminator)."""
    out = []
    for raw in re.findall(rb"[^\n]*\n|[^\n]+$", data):
        term = ""
        if raw.endswith(b"\n"):
            raw, term = raw[:-1], "\n"
            if raw.endswith(b"\r"):
                raw, term = raw[:-1], "\r\n"
        text = raw.decode("utf-8", "replace")
        out.append((text, len(text), term))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(st.sampled_from(_PIECES), max_size=60),
    block=st.integers(3, 9),
    max_lines=st.integers(1, 6),
    max_bytes=st.integers(1, 40),
    max_line_chars=st.integers(1, 8),
)
def test_windows_of_any_text_in_tiny_blocks_equal_its_lines(
    tmp_path_factory: pytest.TempPathFactory,
    pieces: list[bytes],
    block: int,
    max_lines: int,
    max_bytes: int,
    max_line_chars: int,
) -> None:
    """Blocks of 3-9 bytes put every block boundary inside lines, terminators and
    characters: the windows, read one after another, are still the file's lines."""
    data = b"".join(pieces)
    d = tmp_path_factory.mktemp("w")
    (d / "f.txt").write_bytes(data)
    want = _expected(data)
    r = pin_root(str(d))
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(window_mod, "BLOCK_BYTES", block)
            got, wins = read_all(
                r, "f.txt", max_lines=max_lines, max_bytes=max_bytes, max_line_chars=max_line_chars
            )
    finally:
        r.close()
    assert all(w.total_lines == len(want) for w in wins)
    assert len(got) == len(want)
    for w in wins:
        assert len(w.lines) <= max_lines
        assert len(w.lines) == 1 or sum(len(x.encode()) for x in w.lines) <= max_bytes
    for shown, (text, n, term) in zip(got, want, strict=True):
        if n <= max_line_chars and len((text + term).encode()) <= max_bytes:
            assert shown == text + term
            continue
        assert shown.endswith(term)
        body = shown[: len(shown) - len(term)]
        kept, mark, left = body.rpartition("…[+")
        assert mark and left.endswith(" chars]")
        assert text.startswith(kept) and len(kept) <= max_line_chars
        assert int(left.removesuffix(" chars]")) == n - len(kept)
