"""Grep: line semantics, columns, context, prefilter soundness, sinks and threads."""

from __future__ import annotations

import itertools
import os
import tempfile
import tracemalloc
from pathlib import Path

import pytest
import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from rootgrep.confine import Beneath
from rootgrep.errors import InvalidPattern
from rootgrep.grep import (
    FileMatches,
    GrepQuery,
    Matcher,
    Room,
    match_spans,
    required_literal,
    run_grep,
    search_buffer,
    search_file,
    text_of,
)
from rootgrep.walker import Walker
from support import error_code, fd_count


def lines(pattern: str, buf: bytes, **kw: object) -> list[tuple[int, int, bytes]]:
    q = GrepQuery(pattern, **kw)  # type: ignore[arg-type]
    return [(m.line, m.column, m.text) for m in search_buffer(Matcher(q), buf, q.context)]


def test_literal_is_literal() -> None:
    buf = b"a.b\naxb\n(a.b)\n"
    assert lines("a.b", buf) == [(1, 1, b"a.b"), (3, 2, b"(a.b)")]
    assert lines("a.b", buf, regex=True) == [(1, 1, b"a.b"), (2, 1, b"axb"), (3, 2, b"(a.b)")]


def test_case_insensitive_and_unicode() -> None:
    buf = "Été\nété\nETE\n".encode()
    assert lines("été", buf, case_sensitive=False) == [
        (1, 1, "Été".encode()),
        (2, 1, "été".encode()),
    ]


def test_columns_are_code_points() -> None:
    buf = "αβγ needle\n😀needle\n".encode()
    assert [c for _, c, _ in lines("needle", buf)] == [5, 2]


def test_whole_word_uses_unicode_word_characters() -> None:
    buf = "foo\nfoobar\nbar_foo\n(foo)\néfoo\nfoo1\n-foo-\n".encode()
    assert [n for n, _, _ in lines("foo", buf, whole_word=True)] == [1, 4, 7]
    assert lines("foo", b"x foo", whole_word=True) == [(1, 3, b"x foo")]


def test_matches_never_cross_a_line_end() -> None:
    buf = b"a\nb\nab\n"
    with pytest.raises(InvalidPattern, match="line break"):  # (asked for: refused, as by rg)
        lines(r"a\nb", buf, regex=True)
    assert lines(r"a\s*b", buf, regex=True) == [(3, 1, b"ab")]
    assert lines(r"a[^x]b", buf, regex=True) == []
    assert lines(r"^b$", buf, regex=True) == [(2, 1, b"b")]


def test_empty_matches_hit_every_line_but_not_past_the_end() -> None:
    assert [n for n, _, _ in lines("x*", b"a\nb\n", regex=True)] == [1, 2]
    assert [n for n, _, _ in lines("x*", b"a\nb", regex=True)] == [1, 2]
    assert lines("x*", b"", regex=True) == []
    assert [n for n, _, _ in lines("", b"a\n\nc\n")] == [1, 2, 3]


def test_crlf_keeps_the_carriage_return_like_rg() -> None:
    assert lines("b", b"a\r\nb\r\n") == [(2, 1, b"b\r")]


def test_utf8_bom_is_not_text() -> None:
    assert lines("#", text_of(b"\xef\xbb\xbf# x\n")) == [(1, 1, b"# x")]
    assert text_of(b"\xef\xbb\xbf\xef\xbb\xbfx") == b"\xef\xbb\xbfx"  # one BOM only


def test_context_at_the_edges() -> None:
    buf = b"1\n2\nhit\n4\n5\n6\nhit\n"
    q = GrepQuery("hit", context=2)
    got = search_buffer(Matcher(q), buf, 2)
    assert [(m.line, list(m.before), list(m.after)) for m in got] == [
        (3, [b"1", b"2"], [b"4", b"5"]),
        (7, [b"5", b"6"], []),
    ]
    first = search_buffer(Matcher(GrepQuery("1")), buf, 3)[0]
    assert first.before == () and first.after == (b"2", b"hit", b"4")


@pytest.mark.parametrize("regex", [False, True])
def test_a_pattern_with_a_line_break_is_refused_as_ripgrep_does(regex: bool) -> None:
    # (the literal fast path would otherwise match across a line end, and RE2 never would)
    assert error_code(Matcher, GrepQuery("foo\nbar", regex=regex)) == "invalid_pattern"


def test_invalid_regex_is_invalid_pattern() -> None:
    for bad in ("(", "a{2,1}", r"(?<=x)y", r"(a)\1"):
        assert error_code(Matcher, GrepQuery(bad, regex=True)) == "invalid_pattern"


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        (r"\w+Error\b", "Error"),
        (r"(foo|bar)baz", "baz"),
        (r"foo|bar", None),
        (r"ab?cd", "cd"),
        (r"x{0,2}yzw", "yzw"),
        (r"x{2}yz", "yz"),
        (r"\.py$", ".py"),
        (r"(?i)abc", None),
        (r"[]abc]defg", "defg"),
        (r"\p{Greek}abc", "abc"),
        (r"a*", None),
        (r"\Qa.b\E", None),
    ],
)
def test_required_literal(pattern: str, literal: str | None) -> None:
    assert required_literal(pattern) == literal


ATOMS = st.sampled_from(
    ["a", "b", "ab", "abc", "x", r"\w", r"\d", ".", "[ab]", "[^a]", r"\b", "(a|b)", "(abc|x)",
     "(?:ab)", r"\.", " ", "_", "é"]
)  # fmt: skip
QUANT = st.sampled_from(["", "", "", "?", "*", "+", "{2}", "{0,1}", "{1,3}"])


@st.composite
def regexes(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.tuples(ATOMS, QUANT), min_size=1, max_size=6))
    body = "".join(a + q for a, q in parts)
    if draw(st.booleans()):
        body += "|" + "".join(a for a, _ in draw(st.lists(st.tuples(ATOMS, QUANT), max_size=2)))
    return body


TEXT = st.text(alphabet="abcx_.é \n", max_size=80)


@settings(max_examples=400, deadline=None)
@given(pattern=regexes(), text=TEXT)
def test_prefilter_never_changes_the_answer(pattern: str, text: str) -> None:
    """The literal prefilter only skips lines; the answer equals a plain RE2 line scan."""
    buf = text.encode()
    try:
        m = Matcher(GrepQuery(pattern, regex=True))
    except Exception:
        return
    got = [(x.line, x.text) for x in search_buffer(m, buf)]
    rx = re2.compile(pattern.encode())
    all_lines = buf.split(b"\n")
    if buf.endswith(b"\n") or not buf:
        all_lines.pop()  # no line after the final terminator
    expected = [(i + 1, line) for i, line in enumerate(all_lines) if rx.search(line) is not None]
    assert got == expected


@pytest.mark.parametrize("pattern", ["getrecursionlimit", "a b", "é", "_x-y,z/=", "x"])
def test_a_regex_without_metacharacters_is_searched_as_its_literal(pattern: str) -> None:
    """(issue 11: no RE2 compile, nor import, for the commonest query) and the answer is
    RE2's, also over bytes that are not UTF-8 and at a last line without a terminator."""
    m = Matcher(GrepQuery(pattern, regex=True))
    assert m._literal == pattern.encode() and m._re is None
    needle = pattern.encode()
    buf = b"\xff" + needle + b"\n\n" + needle * 2 + b" \x80\nno\r\n" + needle
    rx = re2.compile(needle)
    expected = [i + 1 for i, ln in enumerate(buf.split(b"\n")) if rx.search(ln) is not None]
    assert [x.line for x in search_buffer(m, buf)] == expected == [1, 3, 5]
    # (case-insensitive and whole-word queries still go to RE2)
    assert Matcher(GrepQuery(pattern, regex=True, case_sensitive=False))._re is not None
    assert Matcher(GrepQuery(pattern, regex=True, whole_word=True))._re is not None


def test_a_regex_that_is_not_utf8_is_still_refused() -> None:
    """(RE2 refuses such a pattern: the literal shortcut does not take it)"""
    pattern = b"caf\xe9".decode("utf-8", "surrogateescape")
    assert error_code(Matcher, GrepQuery(pattern, regex=True)) == "invalid_pattern"
    assert Matcher(GrepQuery(pattern))._literal == b"caf\xe9"  # (a literal: looked for as is)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    for i in range(60):
        d = tmp_path / f"d{i % 7}"
        d.mkdir(exist_ok=True)
        (d / f"f{i:03}.py").write_text("".join(f"line {j} needle{i}\n" for j in range(i % 5)))
    (tmp_path / "bin.py").write_bytes(b"needle\0\n")
    (tmp_path / "big.py").write_bytes(b"needle\n" + b"x" * 5000)
    return tmp_path


def collect(fs: Beneath, q: GrepQuery, **kw: object) -> list[tuple[bytes, int]]:
    out: list[tuple[bytes, int]] = []

    def sink(fm: FileMatches) -> bool:
        out.extend((fm.path, m.line) for m in fm.matches)
        return True

    run_grep(Matcher(q), Walker(fs).batches(), sink, **kw)  # type: ignore[arg-type]
    return out


def test_threads_give_the_same_ordered_answer(corpus: Path) -> None:
    with Beneath.pin(str(corpus)) as fs:
        one = collect(fs, GrepQuery("needle"), threads=1)
        two = collect(fs, GrepQuery("needle"), threads=3)
    assert one == two and len(one) > 100
    assert one == sorted(one, key=lambda t: (t[0].split(b"/"), t[1]))


def test_binary_and_oversized_files_are_skipped(corpus: Path) -> None:
    with Beneath.pin(str(corpus)) as fs:
        paths = {p for p, _ in collect(fs, GrepQuery("needle"), max_file_size=4096)}
        assert b"bin.py" not in paths and b"big.py" not in paths
        paths = {p for p, _ in collect(fs, GrepQuery("needle"))}
        assert b"big.py" in paths and b"bin.py" not in paths


@pytest.mark.parametrize("threads", [1, 2])
def test_sink_can_stop_early_without_leaking_fds(corpus: Path, threads: int) -> None:
    with Beneath.pin(str(corpus)) as fs:
        before = fd_count()
        seen: list[FileMatches] = []

        def sink(fm: FileMatches) -> bool:
            seen.append(fm)
            return len(seen) < 3

        stats = run_grep(Matcher(GrepQuery("needle")), Walker(fs).batches(), sink, threads=threads)
        assert stats.stopped and len(seen) == 3
        assert fd_count() == before


def test_more_threads_than_the_cap_run_the_cap(corpus: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``-j 100000`` (a CLI's, or one a daemon runs for a CLI) runs ``MAX_THREADS``: each
    thread's chunk is held in flight, so the text held stays bounded."""
    import concurrent.futures

    from rootgrep import grep as grep_mod

    made: list[int] = []
    real = concurrent.futures.ThreadPoolExecutor

    def pool(max_workers: int, **kw: object) -> concurrent.futures.ThreadPoolExecutor:
        made.append(max_workers)
        return real(max_workers, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", pool)
    with Beneath.pin(str(corpus)) as fs:
        found: list[FileMatches] = []
        run_grep(Matcher(GrepQuery("needle")), Walker(fs).batches(), found.append, threads=100_000)
    assert made == [grep_mod.MAX_THREADS - 1] and found


def test_cancellation_stops_the_search(corpus: Path) -> None:
    with Beneath.pin(str(corpus)) as fs:
        stats = run_grep(
            Matcher(GrepQuery("needle")),
            Walker(fs).batches(),
            lambda fm: True,
            threads=2,
            cancelled=lambda: True,
        )
    assert stats.stopped and stats.files_searched == 0


FILE_TEXT = st.text(alphabet="ab x\n", max_size=30)


@settings(max_examples=150, deadline=None)
@given(
    texts=st.lists(FILE_TEXT, min_size=1, max_size=12),
    pattern=st.sampled_from(
        ["^a", "a$", "^$", "x*", "^", "b a", r"\Aa", "(?-m)^a", "a\\z", "ab|ba", "a b"]
    ),
    chunk=st.sampled_from([1, 7, 64, 1 << 20]),
)
def test_joined_chunk_scan_equals_file_by_file(texts: list[str], pattern: str, chunk: int) -> None:
    """Scanning many files joined must find exactly what scanning each file alone finds."""
    with tempfile.TemporaryDirectory() as tmp:
        for i, t in enumerate(texts):
            Path(tmp, f"f{i:02}.txt").write_text(t)
        m = Matcher(GrepQuery(pattern, regex=True))
        expected = [
            (f"f{i:02}.txt".encode(), x.line)
            for i, t in enumerate(texts)
            for x in search_buffer(m, t.encode())
        ]
        with Beneath.pin(tmp) as fs:
            got: list[tuple[bytes, int]] = []
            run_grep(
                m,
                Walker(fs).batches(),
                lambda fm: got.extend((fm.path, x.line) for x in fm.matches) or True,
                chunk_bytes=chunk,
            )
        assert got == expected


def test_may_match_agrees_with_could_match() -> None:
    """``Matcher.may_match`` (one RE2 scan, the test an index's candidates get before they
    are searched) answers as ``could_match`` for literals, regexes with and without a
    required literal, case-insensitive and whole-word queries."""
    from rootgrep.grep import GrepQuery, Matcher

    texts = [
        b"",
        b"getrecursionlimit\n",
        b"setrecursionlimit and get\nlimit\n",
        b"x = sys.getrecursionlimit()",
        b"GETRECURSIONLIMIT\n",
        b"2026-12-01\n",
        b"no dates: 2026-1-01\n",
        b"a.b\n",
        b"aXb\n",
        b"a\xffb\n",
        b"a\xc3\xbfb \xc3\xa9\xe2\x82\xac\n",
        b"a\x00b",
    ]
    queries = [
        GrepQuery("getrecursionlimit"),
        GrepQuery("getrecursionlimit", case_sensitive=False),
        GrepQuery("getrecursionlimit", whole_word=True),
        GrepQuery(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", regex=True),
        GrepQuery(r"get\w+limit", regex=True),
        GrepQuery("a.b"),
        GrepQuery("a.b", regex=True),
        GrepQuery("a\udcffb"),  # (a command line's undecodable byte: not UTF-8)
        GrepQuery("\udcff"),
        GrepQuery("é€"),
        GrepQuery("a\x00b"),
    ]
    for q in queries:
        m = Matcher(q)
        for t in texts:
            assert m.may_match(t) == m.could_match(t), (q, t)


def test_a_large_file_is_read_in_one_piece(tmp_path, monkeypatch) -> None:
    """A file over the 8 KiB binary sniff is read whole into one buffer (its head is sniffed
    with ``pread`` first), not read as a head and a rest joined into a third buffer: one
    ``os.read`` returns the whole file, and the bytes are the file's."""
    import os

    from rootgrep import confine

    body = b"".join(b"line %d getrecursionlimit\n" % i for i in range(20_000))
    (tmp_path / "big.txt").write_bytes(body)
    (tmp_path / "bin.dat").write_bytes(b"x" * 100 + b"\0" + b"y" * 50_000)
    reads: list[int] = []
    read = os.read

    def counting(fd: int, n: int) -> bytes:
        got = read(fd, n)
        reads.append(len(got))
        return got

    monkeypatch.setattr(confine.os, "read", counting)
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert confine.read_searchable_at(dirfd, b"big.txt", 20 << 20) == body
        assert reads[0] == len(body), reads
        reads.clear()
        assert confine.read_searchable_at(dirfd, b"bin.dat", 20 << 20) is None
        assert sum(reads) <= 8192, reads  # (a binary file is never read in full)
    finally:
        os.close(dirfd)


def test_candidates_are_tested_in_a_reused_buffer(tmp_path: Path) -> None:
    """``read_searchable_into``: a file that fits is read into the given buffer (a view of
    it: no buffer of its own), a larger one into bytes of its own, a binary one (a NUL in
    its first 8 KiB, also past them in a large file) not at all."""
    from rootgrep import confine

    (tmp_path / "small.txt").write_bytes(b"getrecursionlimit\n")
    big = b"".join(b"line %d\n" % i for i in range(5000))
    (tmp_path / "big.txt").write_bytes(big)
    (tmp_path / "bin.dat").write_bytes(b"x" * 9000 + b"\0")
    (tmp_path / "head.dat").write_bytes(b"\0" + b"x" * 20_000)
    buf = bytearray(16 << 10)
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        got = confine.read_searchable_into(dirfd, b"small.txt", 1 << 20, buf)
        assert isinstance(got, memoryview) and got.obj is buf and got == b"getrecursionlimit\n"
        got = confine.read_searchable_into(dirfd, b"big.txt", 1 << 20, buf)
        assert isinstance(got, bytes) and got == big
        assert confine.read_searchable_into(dirfd, b"head.dat", 1 << 20, buf) is None
        assert confine.read_searchable_into(dirfd, b"big.txt", 1000, buf) is None
        got = confine.read_searchable_into(dirfd, b"bin.dat", 1 << 20, buf)
        assert got is not None  # (as read_searchable_at: a NUL past 8 KiB is text)
    finally:
        os.close(dirfd)


def test_index_candidates_give_the_same_answer(corpus: Path) -> None:
    """Searched as an index's candidates (``join=False``: read into a reused buffer, tested,
    only the files that may match copied out), the answer and the count of files searched
    are those of a walk's joined search; a BOM is not text there either."""
    (corpus / "bom.py").write_bytes(b"\xef\xbb\xbfneedle first\nneedle\n")
    with Beneath.pin(str(corpus)) as fs:
        for q in (GrepQuery("needle"), GrepQuery("needle4"), GrepQuery(r"ne+dle\d", regex=True)):
            joined = collect(fs, q)
            alone = collect(fs, q, join=False)
            assert alone == joined and joined, q
        stats = []
        for join in (True, False):
            stats.append(
                run_grep(
                    Matcher(GrepQuery("needle")), Walker(fs).batches(), lambda fm: True, join=join
                ).files_searched
            )
        assert stats[0] == stats[1] > 0


def test_an_inverted_search_keeps_within_the_sinks_room() -> None:
    """``-v``'s lines are matches like any others: a room's bounds (lines after a page,
    at most N, at most B bytes) and a counting room hold for them too."""
    m = Matcher(GrepQuery("x", invert=True))
    text = b"".join(b"x\n" if i % 3 == 0 else b"line %d\n" % i for i in range(1, 3001))
    fm = search_file(m, b"f", text, lambda _p: Room(after_line=10, matches=5), None)
    assert fm is not None and fm.cut and [lm.line for lm in fm.matches] == [11, 13, 14, 16, 17]
    fm = search_file(m, b"f", text, lambda _p: Room(bytes=100), None)
    assert fm is not None and fm.cut and sum(len(lm.text) for lm in fm.matches) < 200
    counted = search_file(m, b"f", text, lambda _p: Room(count=True), None)
    assert counted is not None and counted.count == 2000 and not counted.matches
    assert len(search_file(m, b"f", text, None, None).matches) == 2000  # type: ignore[union-attr]


def test_the_spans_of_a_line_are_found_as_they_are_taken() -> None:
    """``-o`` over a long line of empty matches: the first few cost no list of them all."""
    line = b"y" * (4 << 20)
    m = Matcher(GrepQuery("x?", regex=True))
    tracemalloc.start()
    try:
        first = list(itertools.islice(match_spans(m, line), 10))
        held = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert first == [(i, i) for i in range(10)]
    assert held < 1 << 20, held  # (a list of every span: about 300 MB)
