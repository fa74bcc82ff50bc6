"""What one grep answer may hold, and cancellation inside grep's loops.

Before: one grep over a 9.5 MB file of 20 KB lines with ``context=10`` gathered every matching
line of the file with 20 lines of context (about 200 MB of slices) and put 200 of them in one
answer; the server's RSS reached 1.87 GB. Now a page holds about ``GREP_PAGE_BYTES`` of text
(matching lines plus context), stops there with ``truncated`` and a cursor that continues
exactly, and the search never gathers more of a file than the page can take. Cancellation was
asked once per directory batch only; now per file and, within a file, per MiB scanned.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootgrep.grep import (
    CANCEL_CHECK_BYTES,
    FileMatches,
    GrepQuery,
    Matcher,
    run_grep,
    search_buffer,
)
from rootgrep.roots import Root, pin_root
from rootgrep.service import GREP_PAGE_BYTES, Service, Settings, Token
from rootgrep.walker import Walker

LINE = 20_000
LINES = 475  # 9.5 MB


def _long_lines(rnd: random.Random, n: int, every: int) -> bytes:
    out = []
    for i in range(n):
        body = bytes(rnd.choice(b"abcdefghij ") for _ in range(LINE - 20))
        out.append((b"needle %06d " % i if i % every == 0 else b"xxxxxx %06d " % i) + body)
    return b"\n".join(out) + b"\n"


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Root]]:
    root = tmp_path_factory.mktemp("budget") / "root"
    root.mkdir()
    rnd = random.Random(5)
    (root / "a_small.txt").write_bytes(b"needle one\nnothing\nneedle two\n")
    (root / "big.txt").write_bytes(_long_lines(rnd, LINES, 1))  # every line matches
    (root / "mid.txt").write_bytes(_long_lines(rnd, 60, 3))
    (root / "z_small.txt").write_bytes(b"a needle\n")
    r = pin_root(str(root))
    yield root, r
    r.close()


def _size(m: object) -> int:
    return sum(len(s.encode()) for s in [m.text, *m.before, *m.after])  # type: ignore[attr-defined]


def _live(root: Path, context: int) -> list[tuple[str, int, str, list[str], list[str]]]:
    """Every match, by a scan with no page (the oracle)."""
    out = []
    m = Matcher(GrepQuery("needle", context=context))
    for name in sorted(p.name for p in root.iterdir()):
        for lm in search_buffer(m, (root / name).read_bytes(), context):
            out.append((name, lm.line, lm.text.decode(), [b.decode() for b in lm.before],
                        [a.decode() for a in lm.after]))  # fmt: skip
    return out


@pytest.mark.parametrize("context", [10, 0])
def test_pages_hold_at_most_the_budget_and_continue_exactly(
    big: tuple[Path, Root], context: int
) -> None:
    root, r = big
    service = Service([r], Settings())
    expected = _live(root, context)
    assert len(expected) == 2 + LINES + 20 + 1
    biggest = max(len(t) + sum(map(len, b)) + sum(map(len, a)) for _, _, t, b, a in expected)
    got: list[tuple[str, int, str, list[str], list[str]]] = []
    cursor = None
    pages = 0
    while True:
        page = service.grep([r], Token(), pattern="needle", context=context, max_results=1000,
                            cursor=cursor, max_line_chars=1 << 30)  # (lines whole)  # fmt: skip
        pages += 1
        held = sum(_size(m) for m in page.matches)
        assert held <= GREP_PAGE_BYTES + biggest  # the budget, passed by at most one match
        assert len(page.model_dump_json()) <= 3 * (GREP_PAGE_BYTES + biggest)
        assert page.matches, "every page advances"
        got += [(m.path, m.line, m.text, m.before, m.after) for m in page.matches]
        if page.next_cursor is None:
            assert not page.truncated
            break
        assert page.truncated
        cursor = page.next_cursor
    assert got == expected
    if context:
        assert pages >= len(expected) * 20 * LINE // GREP_PAGE_BYTES // 2


def test_max_results_still_pages_exactly(big: tuple[Path, Root]) -> None:
    root, r = big
    service = Service([r], Settings())
    expected = [(n, line) for n, line, *_ in _live(root, 0)]
    got: list[tuple[str, int]] = []
    cursor = None
    while True:
        page = service.grep([r], Token(), pattern="needle", max_results=7, cursor=cursor)
        assert len(page.matches) <= 7
        got += [(m.path, m.line) for m in page.matches]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert got == expected


class _Collect:
    def __init__(self) -> None:
        self.files: list[FileMatches] = []

    def __call__(self, fm: FileMatches) -> bool:
        self.files.append(fm)
        return True


def test_cancellation_is_asked_within_a_huge_file(big: tuple[Path, Root]) -> None:
    root, r = big
    asked = 0

    def cancelled() -> bool:
        nonlocal asked
        asked += 1
        return asked >= stop_at

    size = (root / "big.txt").stat().st_size
    assert size > 4 * CANCEL_CHECK_BYTES
    # how often a full scan of this one file asks (never cancelled)
    stop_at = 1 << 30
    sink = _Collect()
    m = Matcher(GrepQuery("needle", regex=True))
    run_grep(m, Walker(r.fs, b"big.txt").batches(), sink, cancelled=cancelled)
    full = asked
    assert full >= size // CANCEL_CHECK_BYTES  # at least once per MiB of the file
    assert sum(len(f.matches) for f in sink.files) == LINES
    # cancelled in the middle of the file: the search stops there
    asked, stop_at = 0, full // 2
    sink = _Collect()
    stats = run_grep(m, Walker(r.fs, b"big.txt").batches(), sink, cancelled=cancelled)
    assert stats.stopped
    assert asked == stop_at  # asked no more once cancelled
    assert sink.files == []


def test_cancellation_is_asked_per_file(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"f{i:02}.txt").write_text("needle\n")  # one directory: one batch
    r = pin_root(str(tmp_path))
    try:
        asked = 0

        def cancelled() -> bool:
            nonlocal asked
            asked += 1
            return asked > 10

        sink = _Collect()
        stats = run_grep(
            Matcher(GrepQuery("needle")), Walker(r.fs).batches(), sink, cancelled=cancelled
        )
        assert stats.stopped
        assert stats.files_searched < 10
    finally:
        r.close()
