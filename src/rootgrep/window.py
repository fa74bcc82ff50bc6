"""``read_file`` windows: any line range of a text file, streamed in blocks (SPEC §8).

A window is the lines ``start_line``..``end_line`` (1-based, inclusive) of a file, bounded by
``max_lines`` and by ``max_bytes`` (what ONE window returns), never by where the lines lie:
the file is read in ``BLOCK_BYTES`` blocks from its start, newlines are counted with
``bytes.count`` until the window's first line, the window's lines are decoded, and the rest is
counted to the end, so ``total_lines`` is the file's true line count. Reaching line N costs
O(bytes before N); a whole call costs O(file size), bounded by ``max_file_size`` (20 MiB by
default; a larger file is refused with ``too_large``). Memory: one block plus the window
(a line is held only up to ``max_line_chars`` characters, the rest is counted).

Lines are what ``grep`` numbers: a line ends at ``\\n`` (``\\r\\n`` is one terminator), a final
line without a terminator counts, an empty file has 0 lines; so a line ``grep`` reports as
line N is line N here. A leading UTF-8 BOM is not part of line 1 (as in ``grep``).

Each returned line is text (UTF-8, invalid bytes replaced by U+FFFD) **with its terminator
kept** exactly as in the file (``\\n``, ``\\r\\n``, or none for an unterminated last line), so
``"".join(window.lines)`` is the file's text wherever no line was cut. A line longer than
``max_line_chars`` characters (terminator not counted) is cut to that many characters
followed by ``…[+N chars]`` (N = characters left out), then its terminator.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable
from dataclasses import dataclass

from .confine import Beneath, display, is_binary
from .errors import BinaryFile, InvalidArgument, InvalidPath, RootRemoved, TooLarge
from .grep import text_of

BLOCK_BYTES = 1 << 20  # read (and cancellation checked) per block
DEFAULT_MAX_LINES = 2000
DEFAULT_MAX_LINE_CHARS = 2000
_SKIP_SPAN = 1 << 16  # within the block holding start_line: count this much, then find()
_NL = 10


def cut_mark(left_out: int) -> str:
    """What ends a cut line: ``…[+N chars]``."""
    return f"…[+{left_out} chars]"


@dataclass(frozen=True, slots=True)
class Window:
    """One window of a file's lines (see the module docstring for what a line is).

    ``end_line`` is the last line returned (``start_line - 1`` when none is); ``truncated``:
    the window stopped before the requested ``end_line`` (or the file's end) because of
    ``max_lines`` or ``max_bytes``; ``next_start_line``: the line after the last one returned,
    None when that was the file's last line; ``cut_lines``: how many returned lines were cut
    (by ``max_line_chars``, or a first line cut to fit ``max_bytes``)."""

    lines: list[str]
    start_line: int
    end_line: int
    total_lines: int
    next_start_line: int | None
    truncated: bool
    cut_lines: int

    @property
    def content(self) -> str:
        return "".join(self.lines)


class _Line:
    """One line of the window being gathered across blocks: its first ``keep`` characters
    and the count of all of them (an incremental decoder never splits a code point)."""

    __slots__ = ("_dec", "_keep", "_kept", "_parts", "chars", "last")

    def __init__(self, keep: int) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")
        self._parts: list[str] = []
        self._kept = 0
        self._keep = keep
        self.chars = 0
        self.last = ""

    def feed(self, data: bytes, final: bool = False) -> None:
        s = self._dec.decode(data, final)
        if not s:
            return
        if self._kept < self._keep:
            part = s[: self._keep - self._kept]
            self._parts.append(part)
            self._kept += len(part)
        self.chars += len(s)
        self.last = s[-1]

    def finish(self, terminated: bool) -> tuple[str, int, str]:
        """(the characters kept, the line's length in characters, its terminator)."""
        self.feed(b"", final=True)
        text = "".join(self._parts)
        n = self.chars
        term = ""
        if terminated:
            term = "\n"
            if self.last == "\r":
                term = "\r\n"
                n -= 1
                text = text[:n]
        return text, n, term


def _utf8_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8"))


def _render(text: str, n: int, term: str, max_line_chars: int) -> tuple[str, bool]:
    if n <= max_line_chars:
        return text + term, False
    return text[:max_line_chars] + cut_mark(n - max_line_chars) + term, True


def _fit(text: str, n: int, term: str, max_bytes: int) -> str:
    """The line cut to the most characters that fit ``max_bytes`` with its mark (at least
    the mark: a window always returns one line)."""
    lo, hi = 0, min(len(text), n)
    while lo < hi:  # the largest k whose rendering fits
        k = (lo + hi + 1) // 2
        if _utf8_len(text[:k]) + _utf8_len(cut_mark(n - k)) + len(term) <= max_bytes:
            lo = k
        else:
            hi = k - 1
    return text[:lo] + cut_mark(n - lo) + term


def _after_newlines(block: bytes, pos: int, k: int) -> int:
    """The offset just after the ``k``-th newline of ``block`` from ``pos`` (it has them)."""
    while k:
        span = min(pos + _SKIP_SPAN, len(block))
        c = block.count(b"\n", pos, span)
        if c < k:
            k -= c
            pos = span
            continue
        for _ in range(k):
            pos = block.index(b"\n", pos) + 1
        return pos
    return pos


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n % (1 << 20) else f"{n >> 20} MiB"


def _check_limits(max_lines: int, max_bytes: int, max_line_chars: int) -> None:
    if max_lines < 1:
        raise InvalidArgument(f"max_lines must be at least 1 (got {max_lines})")
    if max_bytes < 1:
        raise InvalidArgument(f"max_bytes must be at least 1 (got {max_bytes})")
    if max_line_chars < 1:
        raise InvalidArgument(f"max_line_chars must be at least 1 (got {max_line_chars})")


def read_window(
    fd: int,
    *,
    start_line: int = 1,
    end_line: int | None = None,
    max_lines: int = DEFAULT_MAX_LINES,
    max_bytes: int,
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    max_file_size: int,
    cancelled: Callable[[], bool] | None = None,
    name: str = "the file",
) -> Window:
    """The window ``start_line``..``end_line`` of the regular file open on ``fd`` (read with
    ``pread`` from offset 0; the fd is not closed). ``end_line`` None or past the file's end
    means up to the end; at most ``max_lines`` lines and ``max_bytes`` bytes (UTF-8, marks
    and terminators included) are returned, but always at least one line when the window
    starts on one (cut to fit ``max_bytes`` if need be).

    The whole file is read to count ``total_lines`` (bounded by ``max_file_size``).
    Raises ``too_large`` (over ``max_file_size``, also when it grows past it while read),
    ``binary_file`` (a NUL in the first 8 KiB, as ``Beneath.read``), ``invalid_argument``
    (``start_line`` < 1 or past the last line — 1 is accepted on an empty file —, ``end_line``
    < ``start_line``, a limit < 1) and ``root_removed`` when ``cancelled()`` turns true (asked
    once per block). ``name`` is how messages call the file."""
    _check_limits(max_lines, max_bytes, max_line_chars)
    size = os.fstat(fd).st_size
    if size > max_file_size:
        raise _too_large(name, size, max_file_size)
    asked = (start_line, end_line)
    bad_start = start_line < 1
    bad_end = end_line is not None and end_line < max(start_line, 1)
    if bad_start or bad_end:
        start_line = end_line = 1 << 62  # count only: the message gives the line count
    stop_line = start_line + max_lines - 1
    if end_line is not None:
        stop_line = min(stop_line, end_line)

    keep = max_line_chars + 1  # (+1: a "\r" before the "\n" is the terminator, not content)
    lines: list[str] = []
    used = 0  # bytes of the lines returned
    cut = 0
    line_no = 1  # the line the next byte belongs to
    taking = start_line == 1  # inside the window
    done = False  # the window is complete: count the rest
    cur: _Line | None = None
    offset = 0
    last = -1  # the content's last byte (-1: none yet)

    def add(terminated: bool) -> bool:
        """Finish ``cur`` (line ``line_no``); False when it does not fit the byte budget."""
        nonlocal used, cut
        assert cur is not None
        text, n, term = cur.finish(terminated)
        shown, was_cut = _render(text, n, term, max_line_chars)
        nbytes = _utf8_len(shown)
        if used + nbytes > max_bytes:
            if lines:
                return False
            shown, was_cut = _fit(text, n, term, max_bytes), True
            nbytes = _utf8_len(shown)
        lines.append(shown)
        used += nbytes
        cut += was_cut
        return True

    while True:
        if cancelled is not None and cancelled():
            raise RootRemoved(
                f"reading {name} was cancelled (a root it lies in was removed); retry"
            )
        block = os.pread(fd, BLOCK_BYTES, offset)
        if not block:
            break
        offset += len(block)
        if offset > max_file_size:
            raise _too_large(name, offset, max_file_size)
        if offset == len(block):  # the first block
            if is_binary(block):
                raise BinaryFile(f"{name} is a binary file; rootgrep reads text only")
            block = text_of(block)  # (grep's rule: a leading UTF-8 BOM is not text)
            if not block:  # (the file held only a BOM)
                continue
        last = block[-1]
        pos = 0
        if not taking and not done:
            c = block.count(b"\n")
            if line_no + c < start_line:
                line_no += c
                continue
            pos = _after_newlines(block, 0, start_line - line_no)
            line_no = start_line
            taking = True
        if taking:
            n = len(block)
            while pos < n:
                nl = block.find(b"\n", pos)
                if cur is None:
                    cur = _Line(keep)
                if nl < 0:
                    cur.feed(block[pos:])
                    pos = n
                    break
                cur.feed(block[pos:nl])
                pos = nl + 1
                fitted = add(True)
                cur = None
                line_no += 1
                if not fitted:  # that line opens the next window
                    taking, done = False, True
                    break
                if line_no > stop_line:
                    taking, done = False, True
                    break
        if done:
            line_no += block.count(b"\n", pos)
    if cur is not None:  # the file's last line, without a terminator (line_no)
        add(False)
        cur = None
    total = line_no - 1 if last in (-1, _NL) else line_no  # (line_no - 1 newlines seen)
    if bad_start or bad_end:
        raise _bad_range(name, total, *asked)
    if start_line > max(total, 1):
        if total == 0:
            raise InvalidArgument(
                f"start_line {start_line} is past the end of {name}, which is empty (0 lines); "
                "only start_line 1 is accepted"
            )
        raise InvalidArgument(
            f"start_line {start_line} is past the last line of {name}, which has {total} "
            f"line{'s' if total != 1 else ''}; give a start_line from 1 to {total}"
        )
    end = start_line + len(lines) - 1
    wanted = total if end_line is None else min(end_line, total)
    return Window(
        lines=lines,
        start_line=start_line,
        end_line=end,
        total_lines=total,
        next_start_line=end + 1 if end < total else None,
        truncated=end < wanted,
        cut_lines=cut,
    )


def read_window_at(fs: Beneath, comps: list[bytes], **kwargs: object) -> Window:
    """``read_window`` of the file ``comps`` names beneath ``fs``, opened the one safe way
    (``Beneath.open_file``: O_PATH, ``fstat``, reopened through its own fd) and closed after.
    ``kwargs`` are ``read_window``'s (``name`` defaults to the path shown in quotes)."""
    kwargs.setdefault("name", f"'{display(comps)}'")
    fd, _ = fs.open_file(comps)
    try:
        return read_window(fd, **kwargs)  # type: ignore[arg-type]
    except OSError as e:
        raise InvalidPath(
            f"'{display(comps)}' could not be read ({os.strerror(e.errno or 0)})"
        ) from None
    finally:
        os.close(fd)


def _too_large(name: str, size: int, cap: int) -> TooLarge:
    return TooLarge(
        f"{name} is {_mib(size)}, over the {_mib(cap)} cap on files read_file reads "
        "(--max-file-size); use grep to find the lines you need in it, or ask the operator "
        "to raise --max-file-size"
    )


def _bad_range(name: str, total: int, start: int, end: int | None) -> InvalidArgument:
    lines = f"{total} line{'s' if total != 1 else ''}"
    if start < 1:
        return InvalidArgument(
            f"start_line {start} is not accepted: lines are numbered from 1 and {name} has "
            f"{lines}; give a start_line from 1 to {max(total, 1)}"
        )
    return InvalidArgument(
        f"end_line {end} is before start_line {start}; {name} has {lines}: give an end_line "
        "of at least start_line, or leave end_line out to read to the end"
    )
