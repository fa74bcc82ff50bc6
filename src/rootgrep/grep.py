"""Grep: RE2 line matching over bytes, feeding a sink.

The matcher runs on a whole file's bytes (one RE2 call finds the next matching line, however
many lines lie between), and never lets a match cross a line end (RE2 ``never_nl``), so the
answer is line-oriented like ripgrep's. Files are read through fd-relative opens beneath the
walker's confined directory fds, in worker threads (RE2 and reads release the GIL); results
reach the sink in path order whatever the threads do.
"""

from __future__ import annotations

import _thread
import bisect
import mmap
import operator

from . import confine
from .errors import InvalidPattern
from .walker import DirBatch

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
if TYPE_CHECKING:  # (imported where threads are used: the CLI's start-up stays short)
    from concurrent.futures import Future
    from typing import Any, Protocol
else:
    Protocol = object

DEFAULT_MAX_FILE_SIZE = 20 << 20
MAX_CONTEXT = 10
MAX_PATTERN_BYTES = 256 << 10  # a longer pattern is refused (invalid_pattern)
CANCEL_CHECK_BYTES = 1 << 20  # a scan checks for cancellation at least this often in a file
CHUNK_BYTES = 1 << 20
# the most search threads one grep runs (``-j`` above it is this): each holds a chunk in flight, so
# ``-j 100000`` would otherwise hold 100 GB of text
MAX_THREADS = 8
UTF8_BOM = b"\xef\xbb\xbf"
_UNANCHORED: Any = None  # RE2's Anchor.UNANCHORED, once ``_re2`` has imported it
_NON_WORD = rb"[^\p{L}\p{M}\p{Nd}\p{Pc}\n]"


class GrepQuery:
    """What to look for. ``before``/``after``: context lines on each side of a match (each
    at most ``MAX_CONTEXT``); ``context`` is the convenience that sets both (an explicit
    ``before`` or ``after`` wins over it).

    This module's classes are plain classes, not dataclasses: the ``dataclasses`` import and
    0.2 ms per class made are a fifth of the CLI's start-up, and a CLI grep loads them all."""

    __slots__ = (
        "after", "before", "case_sensitive", "context", "invert", "pattern", "regex", "whole_word",
    )  # fmt: skip

    def __init__(
        self,
        pattern: str,
        regex: bool = False,
        case_sensitive: bool = True,
        whole_word: bool = False,
        context: int = 0,
        before: int = -1,  # -1: as ``context``
        after: int = -1,
        invert: bool = False,
    ) -> None:
        self.pattern = pattern
        self.regex = regex
        self.case_sensitive = case_sensitive
        self.whole_word = whole_word
        self.context = context
        self.before = context if before < 0 else before
        self.after = context if after < 0 else after
        self.invert = invert  # (the CLI's -v: the lines that do not match are the matches)

    def __repr__(self) -> str:
        return (
            f"GrepQuery({self.pattern!r}, regex={self.regex}, case_sensitive="
            f"{self.case_sensitive}, whole_word={self.whole_word}, before={self.before}, "
            f"after={self.after}, invert={self.invert})"
        )


class LineMatch(tuple):  # type: ignore[type-arg]
    """One matching line: 1-based ``line``, the byte ``offset`` of the first match in it, the
    line's bytes without its terminator, and up to ``context`` lines around it.

    A tuple underneath, built with ``tuple.__new__`` (no Python frame): a search may make
    hundreds of thousands of these, and this is the one object made per matching line."""

    __slots__ = ()

    def __new__(
        cls,
        line: int,
        offset: int,
        text: bytes,
        before: tuple[bytes, ...] = (),
        after: tuple[bytes, ...] = (),
    ) -> LineMatch:
        return tuple.__new__(cls, (line, offset, text, before, after))

    line = property(operator.itemgetter(0), doc="1-based line number")
    offset = property(operator.itemgetter(1), doc="byte offset of the first match in the line")
    text = property(operator.itemgetter(2), doc="the line, without its terminator")
    before = property(operator.itemgetter(3), doc="context lines before")
    after = property(operator.itemgetter(4), doc="context lines after")

    @property
    def column(self) -> int:
        """1-based column of the first match, in code points."""
        return len(self[2][: self[1]].decode("utf-8", "replace")) + 1

    def __repr__(self) -> str:
        return f"LineMatch(line={self.line}, column={self.column}, text={self.text!r})"


_new_match = tuple.__new__


class FileMatches:
    """One file's matching lines (``path`` root-relative). ``cut``: the file's later matches
    were not gathered (the sink's room ran out); ``count``: with a counting room, the file's
    matching lines (``matches`` is then empty)."""

    __slots__ = ("count", "cut", "matches", "path")

    def __init__(
        self, path: bytes, matches: list[LineMatch], cut: bool = False, count: int = -1
    ) -> None:
        self.path = path
        self.matches = matches
        self.cut = cut
        self.count = count

    def __repr__(self) -> str:
        return f"FileMatches({self.path!r}, {self.matches!r}, cut={self.cut}, count={self.count})"


class Room:
    """What a sink can still take from one file: matches on lines after ``after_line``, at
    most ``matches`` of them (-1: no bound), gathering stops once their text (lines and
    context) passes ``bytes``. A search never holds more of a file than that. ``count``:
    count the matching lines only (no line is held: memory stays flat)."""

    __slots__ = ("after_line", "bytes", "count", "matches")

    def __init__(
        self, after_line: int = 0, matches: int = -1, bytes: int = -1, count: bool = False
    ) -> None:
        self.after_line = after_line
        self.matches = matches
        self.bytes = bytes
        self.count = count


class Cancelled(Exception):
    """The search was cancelled (raised inside the loops, caught by ``run_grep``)."""


class GrepStats:
    """What a search did; ``stopped``: the sink asked to stop (e.g. max_results reached)."""

    __slots__ = ("binary", "files_matched", "files_searched", "matches", "stopped", "too_large")

    def __init__(self) -> None:
        self.files_searched = 0
        self.files_matched = 0
        self.matches = 0
        self.stopped = False
        self.binary = 0  # files of a walk left out as binary (a NUL in their first 8 KiB)
        self.too_large = 0  # ... as larger than max_file_size

    def __repr__(self) -> str:
        return (
            f"GrepStats(files_searched={self.files_searched}, files_matched="
            f"{self.files_matched}, matches={self.matches}, stopped={self.stopped})"
        )


def _whole_text() -> Any:
    """What makes a regex unjoinable: ``\\A``, ``\\z``, or flags changed inline (``re``
    imported only for a regex: a literal grep's start-up does without it)."""
    import re

    return re.compile(r"\\[Az]|\(\?[a-zA-Z-]*-?[imsU]")


class GrepSink(Protocol):
    """Receives each matching file in path order; returns False to stop the search. A sink
    may also have ``room(path) -> Room | None``: what it can still take from that file, so
    a search gathers no more than that (see ``Room``)."""

    def __call__(self, fm: FileMatches) -> bool: ...


_META = set(".^$*+?()[]{}|\\")
_ESCAPED_LITERALS = set("!\"#%&',-./:;<=>@_`~ ") | _META


def required_literal(pattern: str) -> str | None:
    """The longest run of plain characters every match of an RE2 ``pattern`` must contain,
    or None when no such run is evident (alternation at the top level, inline flags).

    Conservative: characters inside groups and classes never count, and a character made
    optional by ``?``, ``*`` or ``{0,…}`` is dropped. A prefilter for live grep only.
    """
    if "(?" in pattern.replace("(?:", ""):
        return None
    best = ""
    cur: list[str] = []
    depth = 0
    i, n = 0, len(pattern)

    def flush() -> None:
        nonlocal best, cur
        if depth == 0 and len(cur) > len(best):
            best = "".join(cur)
        cur = []

    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1] if i + 1 < n else ""
            if nxt in _ESCAPED_LITERALS and nxt:
                if depth == 0:
                    cur.append(nxt)
                i += 2
                continue
            if nxt in ("p", "P", "x") and i + 2 < n and pattern[i + 2] == "{":
                end = pattern.find("}", i + 2)
                i = n if end < 0 else end + 1
            elif nxt in ("p", "P"):
                i += 3
            elif nxt == "x":
                i += 4
            elif nxt == "Q":
                return None
            else:
                i += 2
            flush()
            continue
        if c == "[":
            flush()
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                if pattern[j] == "\\":
                    j += 1
                elif pattern.startswith("[:", j):
                    end = pattern.find(":]", j + 2)
                    j = end + 1 if end >= 0 else j
                j += 1
            i = j + 1
            continue
        if c == "(":
            flush()
            depth += 1
        elif c == ")":
            flush()
            depth = max(0, depth - 1)
        elif c == "|":
            if depth == 0:
                return None
        elif c in "*?":
            if cur:
                cur.pop()
            flush()
        elif c == "{":
            end = pattern.find("}", i)
            spec = pattern[i + 1 : end] if end > 0 else ""
            if spec and spec.split(",")[0].strip() in ("0", "") and cur:
                cur.pop()
            flush()
            i = n if end < 0 else end + 1
            continue
        elif c == "+" or c in ".^$":
            flush()
        elif depth == 0:
            cur.append(c)
        i += 1
    flush()
    return best or None


def _re2() -> Any:
    """The RE2 module, imported when a query first needs it: a plain literal never does, and
    the import is 2 ms of a CLI grep's start-up."""
    global _UNANCHORED
    import re2

    _UNANCHORED = re2._Anchor.UNANCHORED
    return re2


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_OCTAL_DIGITS = frozenset("01234567")


def _escaped_code(pattern: str, i: int) -> tuple[int, int | None]:
    """The escape at ``pattern[i]`` (a backslash) as RE2 reads it: where it ends, and the
    code point it stands for when it is a hex (``\\x0a``, ``\\x{a}``) or octal (``\\012``,
    ``\\12``) character code or ``\\n``; None for any other escape."""
    c = pattern[i + 1]
    if c == "n":
        return i + 2, 10
    if c == "x":
        if pattern.startswith("{", i + 2):
            end = pattern.find("}", i + 3)
            digits = pattern[i + 3 : end] if end > 0 else ""
            if digits and _HEX_DIGITS.issuperset(digits) and len(digits) <= 8:
                return end + 1, int(digits, 16)
            return i + 2, None
        digits = pattern[i + 2 : i + 4]
        if len(digits) == 2 and _HEX_DIGITS.issuperset(digits):
            return i + 4, int(digits, 16)
        return i + 2, None
    if c in _OCTAL_DIGITS:  # \0 and up to two more digits; \1-\7 need one more (else: a
        j = i + 2  # back-reference, which RE2 refuses itself)
        while j < min(len(pattern), i + 4) and pattern[j] in _OCTAL_DIGITS:
            j += 1
        if c != "0" and j == i + 2:
            return j, None
        return j, int(pattern[i + 1 : j], 8)
    return i + 2, None


def _line_escape(pattern: str) -> str | None:
    """What in a regex asks for a line end, which grep never matches (RE2's ``never_nl``;
    ripgrep refuses both too): RE2's ``\\C`` (any byte: the one construct ``never_nl``
    leaves free to match one, so a "line" match could span lines, and files joined for one
    scan), or a line break written as an escape outside a character class (``\\n``,
    ``\\x0a``, ``\\012``...: it would quietly match nothing). None when there is neither.
    Escapes are read as RE2 reads them: ``\\\\n`` is a backslash then ``n``, ``\\Q...\\E``
    quotes its text; inside ``[...]`` a line break is only one character of the class."""
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            c = pattern[i + 1]
            if c == "C":
                return "\\C (any byte), which may match a line end"
            if c == "Q":  # (quoted up to ``\\E``, or to the end)
                e = pattern.find("\\E", i + 2)
                if e < 0:
                    return None
                i = e + 2
                continue
            end, code = _escaped_code(pattern, i)
            if code == 10 and not in_class:
                return f"{pattern[i:end]} (a line break)"
            i = end
            continue
        if in_class:
            if ch == "[" and pattern.startswith("[:", i):  # ([:alpha:] and its like)
                e = pattern.find(":]", i + 2)
                i = e + 2 if e > 0 else i + 1
                continue
            if ch == "]":
                in_class = False
        elif ch == "[":
            in_class = True
            i += 1
            if pattern.startswith("^", i):
                i += 1
            if pattern.startswith("]", i):  # (a ] first in a class is one of its characters)
                i += 1
            continue
        i += 1
    return None


def plain_regex(pattern: str) -> bool:
    """A regex that matches exactly its own text: no metacharacter, and valid UTF-8 (RE2
    refuses other bytes). Such a pattern is looked for as a literal, as ``bytes.find``."""
    if not pattern or not _META.isdisjoint(pattern):
        return False
    try:
        pattern.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Matcher:
    """A compiled query: ``find(buf, pos)`` gives the span of the next match at or after pos;
    ``prefilter`` is a literal every matching line contains (None when there is none)."""

    def __init__(self, q: GrepQuery) -> None:
        if len(q.pattern.encode("utf-8", "surrogateescape")) > MAX_PATTERN_BYTES:
            raise InvalidPattern(
                f"the pattern is longer than {MAX_PATTERN_BYTES >> 10} KiB; search for a "
                "shorter, distinctive part of it"
            )
        if "\n" in q.pattern:
            raise InvalidPattern(
                "the pattern holds a line break, and grep matches within one line: search "
                "for each line of it separately"
            )
        line_escape = _line_escape(q.pattern) if q.regex and "\\" in q.pattern else None
        if line_escape is not None:
            raise InvalidPattern(
                f"the regex uses {line_escape}, and grep matches within one line: search for "
                "each line of it separately (for any character, use .)"
            )
        self.query = q
        self.invert = q.invert
        raw = q.pattern.encode("utf-8", "surrogateescape")
        self._literal: bytes | None = None
        self.prefilter: bytes | None = None
        self._group = 0
        self._m: Any = None
        # texts may be joined and scanned at once unless the pattern anchors on the whole text
        # (\A, \z) or changes flags inline (e.g. turning multi-line off)
        self.joinable = not q.invert and (  # (-v: a file without a match has every line)
            not q.regex
            or ("\\" not in q.pattern and "(" not in q.pattern)  # (neither can be there)
            or _whole_text().search(q.pattern) is None
        )
        if (not q.regex or plain_regex(q.pattern)) and q.case_sensitive and not q.whole_word:
            self._literal = raw
            self._re = None
            self._scan: Any = None  # (compiled at its first use: a live grep never needs RE2)
            return
        re2 = _re2()
        body = raw if q.regex else re2.escape(raw)
        if q.whole_word:
            # Unicode word characters, as ripgrep's -w: no word char just before or after
            body = rb"(?:^|" + _NON_WORD + rb")(" + body + rb")(?:$|" + _NON_WORD + rb")"
            self._group = 1
        opts = re2.Options()
        opts.never_nl = True  # a match never spans a line end (ripgrep's line-oriented rule)
        opts.case_sensitive = q.case_sensitive
        opts.log_errors = False
        opts.max_mem = 64 << 20
        try:
            if q.whole_word and q.regex:  # (the pattern alone first: wrapped in groups, a
                re2.compile(raw, opts)  # `[` or an `a)|(b` would compile, meaning otherwise)
            self._re = re2.compile(b"(?m)" + body, opts)
        except re2.error as e:
            msg = (
                e.args[0].decode("utf-8", "replace")
                if e.args and isinstance(e.args[0], bytes)
                else str(e)
            )
            msg = msg.split(": ", 1)[0]  # RE2 appends the (internally wrapped) pattern
            raise InvalidPattern(
                f"the regex {q.pattern[:200]!r} does not compile ({msg}); RE2 syntax has no "
                "look-around or backreferences; to search for it as written, pass "
                "fixed_strings=true"
            ) from None
        self._m = self._re._regexp.Match
        if q.case_sensitive:
            lit = q.pattern if not q.regex else required_literal(q.pattern)
            if lit and len(lit.encode("utf-8", "surrogateescape")) >= 3:
                self.prefilter = lit.encode("utf-8", "surrogateescape")
        self._scan = _literal_scan(self.prefilter) if self.prefilter is not None else self._m

    def find(self, buf: bytes, pos: int, end: int = -1) -> tuple[int, int] | None:
        if self._literal is not None:
            i = buf.find(self._literal, pos)
            return None if i < 0 else (i, i + len(self._literal))
        spans = self._m(_UNANCHORED, buf, pos, len(buf) if end < 0 else end)
        s = spans[self._group]
        if s[0] < 0:
            return None
        return s

    @property
    def scan_bound(self) -> bool:
        """True when finding candidates means an RE2 scan (which releases the GIL)."""
        return self._literal is None and self.prefilter is None

    def next_candidate(self, buf: bytes, pos: int) -> int:
        """Offset of the next place at or after ``pos`` where a match may be (-1: none)."""
        if self._literal is not None:
            return buf.find(self._literal, pos)
        if self.prefilter is not None:
            return buf.find(self.prefilter, pos)
        return int(self._m(_UNANCHORED, buf, pos, len(buf))[0][0])

    def may_match(self, buf: bytes) -> bool:
        """``could_match``'s answer from one RE2 scan (which releases the GIL): for a
        literal about twice as fast as ``bytes.find`` over a file that does not hold it."""
        if self._scan is None:
            assert self._literal is not None
            self._scan = _literal_scan(self._literal)
        return self._scan(_UNANCHORED, buf, 0, len(buf))[0][0] >= 0

    def could_match(self, buf: bytes) -> bool:
        """A cheap whole-file test: False means no line of ``buf`` can match."""
        if self._literal is not None:
            return self._literal in buf
        if self.prefilter is not None:
            return self.prefilter in buf
        return self._m(_UNANCHORED, buf, 0, len(buf))[0][0] >= 0


def match_spans(m: Matcher, line: bytes) -> Iterator[tuple[int, int]]:
    """Each match of one line (without its terminator), left to right, as rg's ``-o``
    prints them: a search goes on from the end of the last match; an empty match right where
    the last one ended is skipped, and after an empty match the search steps one byte.
    (Yielded one at a time: a long line may hold a match per byte.)"""
    n = len(line)
    pos, last_end = 0, -1
    while pos <= n:
        span = m.find(line, pos)
        if span is None:
            return
        s, e = span
        if s < e:
            yield s, e
            pos = last_end = e
            continue
        if s != last_end:
            yield s, e
            last_end = e
        pos = s + 1  # (one byte, as rg: an empty match may fall inside a character)


def _literal_scan(literal: bytes) -> Any:
    """An RE2 search for ``literal``'s bytes (its bound ``Match``), compiled as Latin-1 so
    that every byte is one character: a literal that is not valid UTF-8 (a command line's
    undecodable bytes) compiles too, and matches exactly where ``bytes.find`` would."""
    re2 = _re2()
    opts = re2.Options()
    opts.log_errors = False
    opts.encoding = re2.Options.Encoding.LATIN1
    return re2.compile(re2.escape(literal), opts)._regexp.Match


def search_buffer(
    m: Matcher,
    buf: bytes,
    context: int = 0,
    room: Room | None = None,
    cancelled: Callable[[], bool] | None = None,
    *,
    after: int = -1,
) -> list[LineMatch]:
    """Every matching line of ``buf`` (a file's ``text_of``; line numbers 1-based), with up to
    ``context`` lines of context before it and ``after`` lines after it (-1: ``context``
    too); with ``room``, only those after its line and
    up to its bounds (``search_file`` says whether it stopped early). ``cancelled`` is asked
    at least every ``CANCEL_CHECK_BYTES`` of the buffer (raising ``Cancelled``).

    One loop, written out by hand: it runs once per matching line of every file, where every
    call counts. A literal (or a regex's required literal) is looked for with ``bytes.find``,
    and RE2 then checks only the line it lies on; without one, RE2 finds the next match over
    the rest of the buffer.
    """
    n = len(buf)
    if n == 0:
        return []
    end = n - 1 if buf[n - 1] == 10 else n  # nothing after the final line terminator
    lit, rx, group = m._literal, m._m, m._group
    needle = lit if lit is not None else m.prefilter
    out: list[LineMatch] = []
    append = out.append
    find, rfind, count = buf.find, buf.rfind, buf.count
    line_no = 1
    counted = 0  # line_no is the number of the line that starts at `counted`
    pos = 0
    skip_to = room.after_line if room is not None else 0
    max_n = room.matches if room is not None else -1
    max_b = room.bytes if room is not None else -1
    held = 0  # bytes of text gathered (lines and context), when bounded
    check_at = CANCEL_CHECK_BYTES if cancelled is not None else n + 1
    n_before = context
    n_after = context if after < 0 else after
    while pos <= end:
        if pos >= check_at:
            if cancelled is not None and cancelled():
                raise Cancelled
            check_at = pos + CANCEL_CHECK_BYTES
        if needle is not None:
            s = find(needle, pos)
            if s < 0 or s > end:
                break
            ls = rfind(b"\n", 0, s) + 1
            le = find(b"\n", s)
            if le < 0:
                le = n
            if lit is None:  # the required literal is there: does the regex match the line?
                s = rx(_UNANCHORED, buf, ls, le)[group][0]
                if s < 0:
                    pos = le + 1
                    continue
        else:
            s = rx(_UNANCHORED, buf, pos, n)[group][0]
            if s < 0 or s > end:
                break  # (an empty match after the final terminator is not a line)
            ls = rfind(b"\n", 0, s) + 1
            le = find(b"\n", s)
            if le < 0:
                le = n
        line_no += count(b"\n", counted, ls)
        counted = ls
        if line_no <= skip_to:  # a page before this one already had it
            pos = le + 1
            continue
        if n_before or n_after:
            lines_b = _lines_before(buf, ls, n_before)
            lines_a = _lines_after(buf, le, n_after)
            append(_new_match(LineMatch, (line_no, s - ls, buf[ls:le], lines_b, lines_a)))
            if max_b >= 0:
                held += le - ls + sum(map(len, lines_b)) + sum(map(len, lines_a))
        else:
            append(_new_match(LineMatch, (line_no, s - ls, buf[ls:le], (), ())))
            if max_b >= 0:
                held += le - ls
        pos = le + 1
        if (max_b >= 0 and held > max_b) or len(out) == max_n:
            break
    return out


def count_lines(m: Matcher, buf: bytes, cancelled: Callable[[], bool] | None = None) -> int:
    """How many lines of ``buf`` match (``search_buffer``'s rule), holding none of them."""
    n = len(buf)
    if n == 0:
        return 0
    end = n - 1 if buf[n - 1] == 10 else n
    lit, rx, group = m._literal, m._m, m._group
    needle = lit if lit is not None else m.prefilter
    find = buf.find
    found = pos = 0
    check_at = CANCEL_CHECK_BYTES
    while pos <= end:
        if pos >= check_at:
            if cancelled is not None and cancelled():
                raise Cancelled
            check_at = pos + CANCEL_CHECK_BYTES
        if needle is not None:
            s = find(needle, pos)
            if s < 0 or s > end:
                break
            ls = buf.rfind(b"\n", 0, s) + 1
            le = find(b"\n", s)
            le = n if le < 0 else le
            if lit is None and rx(_UNANCHORED, buf, ls, le)[group][0] < 0:
                pos = le + 1
                continue
        else:
            s = rx(_UNANCHORED, buf, pos, n)[group][0]
            if s < 0 or s > end:
                break
            le = find(b"\n", s)
            le = n if le < 0 else le
        found += 1
        pos = le + 1
    return found


def search_file(
    m: Matcher,
    path: bytes,
    text: bytes,
    room: Callable[[bytes], Room | None] | None,
    cancelled: Callable[[], bool] | None,
) -> FileMatches | None:
    """One file's matches within the sink's room (None when it has none)."""
    r = room(path) if room is not None else None
    if r is not None and r.count:
        n = count_lines(m, text, cancelled)
        if m.invert:  # (-v: the lines without a match)
            n = _line_count(text) - n
        return FileMatches(path, [], count=n) if n else None
    q = m.query
    search = search_inverted if m.invert else search_buffer
    lines = search(m, text, q.before, r, cancelled, after=q.after)
    if not lines:
        return None
    cut = r is not None and (
        len(lines) == r.matches or (r.bytes >= 0 and sum(_held(lm) for lm in lines) > r.bytes)
    )
    return FileMatches(path, lines, cut)


def _line_count(buf: bytes) -> int:
    """Lines of ``buf`` (``\n`` ends a line; a last line without one counts)."""
    return buf.count(b"\n") + (1 if buf and not buf.endswith(b"\n") else 0)


def search_inverted(
    m: Matcher,
    buf: bytes,
    before: int = 0,
    room: Room | None = None,
    cancelled: Callable[[], bool] | None = None,
    *,
    after: int = 0,
) -> list[LineMatch]:
    """Every line of ``buf`` that does not match (``-v``), each with up to ``before`` and
    ``after`` lines of context (the matching lines around it), offset 0; ``room`` and
    ``cancelled`` as in ``search_buffer``."""
    matching = {lm[0] for lm in search_buffer(m, buf, 0, None, cancelled)}
    skip_to = room.after_line if room is not None else 0
    max_n = room.matches if room is not None else -1
    max_b = room.bytes if room is not None else -1
    lines = buf.split(b"\n")
    if not buf or buf.endswith(b"\n"):
        lines.pop()  # (nothing after the final line terminator)
    out: list[LineMatch] = []
    held = 0
    for i, text in enumerate(lines):
        if cancelled is not None and not i % 65536 and cancelled():
            raise Cancelled
        if i + 1 in matching or i + 1 <= skip_to:
            continue
        lines_b = tuple(lines[max(0, i - before) : i]) if before else ()
        lines_a = tuple(lines[i + 1 : i + 1 + after]) if after else ()
        out.append(_new_match(LineMatch, (i + 1, 0, text, lines_b, lines_a)))
        if max_b >= 0:
            held += len(text) + sum(map(len, lines_b)) + sum(map(len, lines_a))
        if (max_b >= 0 and held > max_b) or len(out) == max_n:
            break
    return out


def _held(lm: LineMatch) -> int:
    return len(lm[2]) + sum(map(len, lm[3])) + sum(map(len, lm[4]))


def _lines_before(buf: bytes, ls: int, k: int) -> tuple[bytes, ...]:
    out: list[bytes] = []
    end = ls - 1  # the '\n' that ends the previous line
    while k > 0 and end >= 0:
        start = buf.rfind(b"\n", 0, end) + 1
        out.append(buf[start:end])
        end = start - 1
        k -= 1
    out.reverse()
    return tuple(out)


def _lines_after(buf: bytes, le: int, k: int) -> tuple[bytes, ...]:
    out: list[bytes] = []
    n = len(buf)
    start = le + 1
    while k > 0 and start < n:
        end = buf.find(b"\n", start)
        if end < 0:
            end = n
        out.append(buf[start:end])
        start = end + 1
        k -= 1
    return tuple(out)


def text_of(data: bytes) -> bytes:
    """A file's searchable text: its bytes without a UTF-8 BOM (as ripgrep treats it)."""
    return data[3:] if data.startswith(UTF8_BOM) else data


class _Chunk:
    """Files read together (about ``CHUNK_BYTES``), searched with one scan of their join."""

    __slots__ = ("paths", "texts")

    def __init__(self, paths: list[bytes], texts: list[bytes]) -> None:
        self.paths = paths
        self.texts = texts


def _read_each(
    batches: Iterable[DirBatch],
    stats: GrepStats,
    cancelled: Callable[[], bool] | None,
    read: Callable[[int, bytes], bytes | memoryview | None],
) -> Iterator[tuple[bytes, bytes | memoryview]]:
    """``(path, text)`` of each file of ``batches`` that ``read(dirfd, name)`` gives (a
    searchable file's bytes), in order, without a UTF-8 BOM (``text_of``, on a view too),
    each counted in ``stats.files_searched``; stops (``stats.stopped``) once ``cancelled``."""
    for batch in batches:
        if cancelled is not None and cancelled():
            batch.close()
            stats.stopped = True
            return
        with batch:
            for fe in batch.files:
                if cancelled is not None and cancelled():
                    stats.stopped = True
                    return
                got = read(batch.fd, fe.name)
                if got is None:
                    continue
                stats.files_searched += 1
                yield fe.path, (got[3:] if got[:3] == UTF8_BOM else got)


def _read_chunks(
    batches: Iterable[DirBatch],
    max_file_size: int,
    stats: GrepStats,
    cancelled: Callable[[], bool] | None,
    chunk_bytes: int,
) -> Iterator[_Chunk]:
    paths: list[bytes] = []
    texts: list[bytes] = []
    size = 0

    def read(dirfd: int, name: bytes) -> bytes | None:
        got = confine.read_searchable_stat_at(dirfd, name, max_file_size)
        if got is None:  # (gone, or not a regular file)
            return None
        data, st = got
        if data is None:
            if st.st_size > max_file_size:
                stats.too_large += 1
            else:
                stats.binary += 1
        return data

    for path, text in _read_each(batches, stats, cancelled, read):
        paths.append(path)
        texts.append(text)  # type: ignore[arg-type]  # (bytes: read_searchable_at's)
        size += len(text)
        if size >= chunk_bytes:
            yield _Chunk(paths, texts)
            paths, texts, size = [], [], 0
    if paths:
        yield _Chunk(paths, texts)


REUSED_READ_BYTES = 4 << 20  # each searching thread keeps one read buffer of this size
_buffers = _thread._local()  # (not ``threading``: the CLI's start-up does not import it)


def _read_buffer() -> mmap.mmap:
    """This thread's buffer for candidate files (``REUSED_READ_BYTES``; a larger file is
    read into bytes of its own): anonymous memory, whose pages the kernel gives as reads
    first touch them (a bytearray's 4 MiB were zeroed first: 2 ms of a CLI grep)."""
    buf = getattr(_buffers, "buf", None)
    if buf is None:
        buf = _buffers.buf = mmap.mmap(-1, REUSED_READ_BYTES)
    return buf


def _candidate_texts(
    m: Matcher,
    batches: Iterable[DirBatch],
    max_file_size: int,
    stats: GrepStats,
    cancelled: Callable[[], bool] | None,
) -> Iterator[tuple[bytes, bytes]]:
    """``(path, text)`` of each searchable file of ``batches`` that may match, in order, for
    files most of which hold no match (an index's candidates: every trigram of the literal
    somewhere in the file, the literal itself in few of them). Each file is read into this
    thread's reused buffer and tested there with one RE2 scan (``Matcher.may_match``); only
    a file that passes is copied out, to be searched."""
    buf = _read_buffer()

    def read(dirfd: int, name: bytes) -> bytes | memoryview | None:
        return confine.read_searchable_into(dirfd, name, max_file_size, buf)

    for path, text in _read_each(batches, stats, cancelled, read):
        if m.may_match(text):  # type: ignore[arg-type]
            yield path, bytes(text)


def search_chunk(
    m: Matcher,
    chunk: _Chunk,
    join: bool = True,
    room: Callable[[bytes], Room | None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> list[FileMatches]:
    """Matching files of a chunk, in order. One scan over the chunk's texts joined by newlines
    finds the next file that can match (a match never spans a line end, so never two files);
    only such files are searched line by line. Without ``join`` (files that most likely match,
    such as an index's candidates) each file is searched at once: no join, no second scan.
    ``room`` and ``cancelled``: see ``search_buffer`` (cancellation is also asked per file)."""
    found: list[FileMatches] = []
    texts = chunk.texts
    if not join or len(texts) == 1 or not m.joinable:
        for path, text in zip(chunk.paths, texts, strict=True):
            if cancelled is not None and cancelled():
                raise Cancelled
            # (an index's candidates: most of them hold every trigram of the literal but not
            # the literal, and one RE2 scan says so faster than the search's bytes.find)
            if not m.invert and not (m.could_match(text) if join else m.may_match(text)):
                continue
            fm = search_file(m, path, text, room, cancelled)
            if fm is not None:
                found.append(fm)
                if fm.cut:
                    break  # the sink is full: nothing after this file can be taken
        return found
    joined = b"\n".join(texts)
    starts: list[int] = []
    at = 0
    for t in texts:
        starts.append(at)
        at += len(t) + 1
    pos = 0
    while True:
        hit = m.next_candidate(joined, pos)
        if hit < 0:
            break
        idx = bisect.bisect_right(starts, hit) - 1
        if cancelled is not None and cancelled():
            raise Cancelled
        fm = search_file(m, chunk.paths[idx], texts[idx], room, cancelled)
        if fm is not None:
            found.append(fm)
            if fm.cut:
                break
        if idx + 1 >= len(starts):
            break
        pos = starts[idx + 1]
    return found


def run_grep(
    m: Matcher,
    batches: Iterable[DirBatch],
    sink: GrepSink,
    *,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    threads: int | None = None,
    cancelled: Callable[[], bool] | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    join: bool = True,
) -> GrepStats:
    """Search every batch and feed the sink in walk (path) order.

    The calling thread walks and reads; with ``threads > 1`` the scans run in worker threads
    (RE2 releases the GIL during a scan, so reading and scanning overlap). ``None`` chooses:
    two threads when scans are RE2-bound (no literal to look for), else one (``bytes.find``
    and per-line work hold the GIL, and extra threads were measured slower). ``join=False``
    is for an index's candidates: each is read into a reused buffer and tested there, and
    those that may match are searched file by file (``_candidate_texts``; ``threads`` does
    not apply).
    """
    stats = GrepStats()
    if threads is None:
        threads = 2 if m.scan_bound else 1
    threads = min(threads, MAX_THREADS)
    room = getattr(sink, "room", None)

    def deliver(found: list[FileMatches]) -> bool:
        for fm in found:
            stats.files_matched += 1
            stats.matches += fm.count if fm.count >= 0 else len(fm.matches)
            if not sink(fm):
                stats.stopped = True
                return False
        return True

    if not join:  # (an index's candidates)
        texts = _candidate_texts(m, batches, max_file_size, stats, cancelled)
        try:
            for path, text in texts:
                if cancelled is not None and cancelled():
                    raise Cancelled
                fm = search_file(m, path, text, room, cancelled)
                if fm is not None and not deliver([fm]):
                    break
        except Cancelled:
            stats.stopped = True
        finally:
            texts.close()
            _close_iter(batches)
        return stats
    chunks = _read_chunks(batches, max_file_size, stats, cancelled, chunk_bytes)
    try:
        if threads <= 1:
            for chunk in chunks:
                if not deliver(search_chunk(m, chunk, join, room, cancelled)):
                    break
            return stats
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        inflight: deque[Future[list[FileMatches]]] = deque()
        with ThreadPoolExecutor(
            max_workers=threads - 1 or 1, thread_name_prefix="rootgrep"
        ) as pool:
            try:
                ok = True
                for chunk in chunks:
                    # (the room asked in a worker is at most what the sink has left: a
                    # chunk in flight may gather more than is taken, never more than a page)
                    inflight.append(pool.submit(search_chunk, m, chunk, join, room, cancelled))
                    while ok and len(inflight) > threads:
                        ok = deliver(inflight.popleft().result())
                    if not ok:
                        break
                while ok and inflight:
                    ok = deliver(inflight.popleft().result())
            finally:
                for f in inflight:
                    f.cancel()
        return stats
    except Cancelled:
        stats.stopped = True
        return stats
    finally:
        chunks.close()
        _close_iter(batches)


def _close_iter(it: object) -> None:
    close = getattr(it, "close", None)
    if callable(close):
        close()


# ---- long lines: a window of characters around the match (SPEC §8 grep max_line_chars) ----

CUT = "…"


def _seq_len(lead: int) -> int:
    """How many bytes a UTF-8 sequence starting with ``lead`` has (1: not a lead byte)."""
    if 0xC2 <= lead < 0xE0:
        return 2
    if 0xE0 <= lead < 0xF0:
        return 3
    return 4 if 0xF0 <= lead < 0xF5 else 1


def _char_start(line: bytes, j: int) -> int:
    """Where the character holding byte offset ``j`` starts: ``j`` itself when ``j`` is a
    boundary (a stray continuation byte is a character of its own, as decoding sees it)."""
    if j >= len(line) or not 0x80 <= line[j] < 0xC0:
        return j
    for p in range(j - 1, max(j - 4, -1), -1):
        b = line[p]
        if not 0x80 <= b < 0xC0:  # the byte that opens the run of continuation bytes
            return p if p + _seq_len(b) > j else j
    return j


def _decode_span(line: bytes, i: int, j: int) -> str:
    """``line[i:j]`` as text, the two ends moved inward to character boundaries (by at most
    three bytes), so no character is split by a cut."""
    p = _char_start(line, i)
    if p < i:
        i = min(p + _seq_len(line[p]), j)
    j = max(_char_start(line, j), i)
    return line[i:j].decode("utf-8", "replace")


def cut_around(line: bytes, start: int, end: int, max_chars: int) -> tuple[str, bool]:
    """A matching line as shown: decoded (UTF-8, invalid bytes replaced) and, when longer
    than ``max_chars`` characters, a window of at most ``max_chars`` characters around the
    match ``[start, end)`` (byte offsets into ``line``) with ``…`` at each cut end; the flag
    says it was cut. The match is centred when the line allows; a match longer than
    ``max_chars`` shows its beginning. Only about ``4 * max_chars`` bytes on each side of
    the match's start are decoded, whatever the line's length."""
    n = len(line)
    reach = 4 * max_chars + 4  # bytes enough for max_chars characters
    if n <= reach:
        whole = line.decode("utf-8", "replace")
        if len(whole) <= max_chars:
            return whole, False
    start = min(max(start, 0), n)
    end = min(max(end, start), n)
    i = max(0, start - reach)
    pre = _decode_span(line, i, start)
    mid_end = min(end, start + reach)
    mid = _decode_span(line, start, mid_end)
    if len(mid) >= max_chars:  # the match alone fills the window: its beginning
        before = CUT if start > 0 else ""
        shown = mid[:max_chars]
        return before + shown + (CUT if len(mid) > max_chars or mid_end < n else ""), True
    j = min(n, end + reach)
    post = _decode_span(line, end, j)
    room = max_chars - len(mid)
    a = min(len(pre), room // 2)
    b = min(len(post), room - a)
    a = min(len(pre), room - b)  # what the right side could not use goes left
    left_cut = a < len(pre) or i > 0
    right_cut = b < len(post) or j < n
    text = pre[len(pre) - a :] + mid + post[:b]
    return (CUT if left_cut else "") + text + (CUT if right_cut else ""), left_cut or right_cut


def cut_context(line: bytes, max_chars: int) -> tuple[str, bool]:
    """A context line as shown: decoded, and when longer than ``max_chars`` characters its
    first ``max_chars`` followed by ``…``; the flag says it was cut."""
    n = len(line)
    reach = 4 * max_chars + 4
    if n <= reach:
        whole = line.decode("utf-8", "replace")
        if len(whole) <= max_chars:
            return whole, False
    head = _decode_span(line, 0, min(n, reach))
    return head[:max_chars] + CUT, True
