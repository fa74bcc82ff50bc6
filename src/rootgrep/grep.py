"""Grep: RE2 line matching over bytes, feeding a sink.

The matcher runs on a whole file's bytes (one RE2 call finds the next matching line, however
many lines lie between), and never lets a match cross a line end (RE2 ``never_nl``), so the
answer is line-oriented like ripgrep's. Files are read through fd-relative opens beneath the
walker's confined directory fds, in worker threads (RE2 and reads release the GIL); results
reach the sink in path order whatever the threads do.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import re2

from . import confine
from .errors import InvalidPattern
from .walker import DirBatch

DEFAULT_MAX_FILE_SIZE = 20 << 20
MAX_CONTEXT = 10
UTF8_BOM = b"\xef\xbb\xbf"
_UNANCHORED = re2._Anchor.UNANCHORED
_NON_WORD = rb"[^\p{L}\p{M}\p{Nd}\p{Pc}\n]"


@dataclass(frozen=True, slots=True)
class GrepQuery:
    pattern: str
    regex: bool = False
    case_sensitive: bool = True
    whole_word: bool = False
    context: int = 0


@dataclass(slots=True)
class LineMatch:
    line: int  # 1-based
    column: int  # 1-based, in code points, of the first match on the line
    text: bytes  # the line without its terminator
    before: list[bytes] = field(default_factory=list)
    after: list[bytes] = field(default_factory=list)


@dataclass(slots=True)
class FileMatches:
    path: bytes  # root-relative
    matches: list[LineMatch]


@dataclass(slots=True)
class GrepStats:
    files_searched: int = 0
    files_matched: int = 0
    matches: int = 0
    stopped: bool = False  # the sink asked to stop (e.g. max_results reached)


class GrepSink(Protocol):
    """Receives each matching file in path order; returns False to stop the search."""

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


class Matcher:
    """A compiled query: ``find(buf, pos)`` gives the span of the next match at or after pos;
    ``prefilter`` is a literal every matching line contains (None when there is none)."""

    def __init__(self, q: GrepQuery) -> None:
        self.query = q
        raw = q.pattern.encode("utf-8", "surrogateescape")
        self._literal: bytes | None = None
        self.prefilter: bytes | None = None
        self._group = 0
        if not q.regex and q.case_sensitive and not q.whole_word:
            self._literal = raw
            self._re = None
            return
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
                "look-around or backreferences, or pass regex=false for a literal"
            ) from None
        self._m = self._re._regexp.Match
        if q.case_sensitive:
            lit = q.pattern if not q.regex else required_literal(q.pattern)
            if lit and len(lit.encode("utf-8", "surrogateescape")) >= 3:
                self.prefilter = lit.encode("utf-8", "surrogateescape")

    def find(self, buf: bytes, pos: int, end: int = -1) -> tuple[int, int] | None:
        if self._literal is not None:
            i = buf.find(self._literal, pos)
            return None if i < 0 else (i, i + len(self._literal))
        spans = self._m(_UNANCHORED, buf, pos, len(buf) if end < 0 else end)
        s = spans[self._group]
        if s[0] < 0:
            return None
        return s

    def could_match(self, buf: bytes) -> bool:
        """A cheap whole-file test: False means no line of ``buf`` can match."""
        if self._literal is not None:
            return self._literal in buf
        if self.prefilter is not None:
            return self.prefilter in buf
        return self._m(_UNANCHORED, buf, 0, len(buf))[0][0] >= 0


def search_buffer(m: Matcher, buf: bytes, context: int = 0) -> list[LineMatch]:
    """Every matching line of ``buf`` (line numbers 1-based), with up to ``context`` lines of
    context on each side."""
    out: list[LineMatch] = []
    if buf.startswith(UTF8_BOM):
        buf = buf[3:]  # as ripgrep does: the BOM is not part of the first line's text
    n = len(buf)
    pos = 0
    line_no = 1
    counted = 0  # line_no is the number of the line that starts at or after `counted`
    find = m.find
    pre = m.prefilter
    while pos <= n:
        if pos == n and (n == 0 or buf[n - 1] == 10):
            break  # nothing after the final line terminator
        if pre is not None:
            # jump to the next line holding the required literal, then verify that line only
            i = buf.find(pre, pos)
            if i < 0:
                break
            ls = buf.rfind(b"\n", 0, i) + 1
            le = buf.find(b"\n", i)
            if le < 0:
                le = n
            span = find(buf, ls, le)
            if span is None:
                pos = le + 1
                continue
        else:
            span = find(buf, pos)
            if span is None:
                break
            ls = buf.rfind(b"\n", 0, span[0]) + 1
            le = buf.find(b"\n", span[0])
            if le < 0:
                le = n
        s = span[0]
        line_no += buf.count(b"\n", counted, ls)
        counted = ls
        text = buf[ls:le]
        col = len(buf[ls:s].decode("utf-8", "replace")) + 1
        lm = LineMatch(line_no, col, text)
        if context:
            lm.before = _lines_before(buf, ls, context)
            lm.after = _lines_after(buf, le, context)
        out.append(lm)
        pos = le + 1
    return out


def _lines_before(buf: bytes, ls: int, k: int) -> list[bytes]:
    out: list[bytes] = []
    end = ls - 1  # the '\n' that ends the previous line
    while k > 0 and end >= 0:
        start = buf.rfind(b"\n", 0, end) + 1
        out.append(buf[start:end])
        end = start - 1
        k -= 1
    out.reverse()
    return out


def _lines_after(buf: bytes, le: int, k: int) -> list[bytes]:
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
    return out


def search_batch(
    m: Matcher, batch: DirBatch, *, max_file_size: int = DEFAULT_MAX_FILE_SIZE
) -> tuple[int, list[FileMatches]]:
    """Search one walker batch (closes it). Returns (files searched, files with matches)."""
    context = m.query.context
    found: list[FileMatches] = []
    searched = 0
    try:
        for fe in batch.files:
            data = confine.read_searchable_at(batch.fd, fe.name, max_file_size)
            if data is None:
                continue
            searched += 1
            if not m.could_match(data):
                continue
            lines = search_buffer(m, data, context)
            if lines:
                found.append(FileMatches(fe.path, lines))
    finally:
        batch.close()
    return searched, found


def run_grep(
    m: Matcher,
    batches: Iterable[DirBatch],
    sink: GrepSink,
    *,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    threads: int = 2,
    cancelled: Callable[[], bool] | None = None,
) -> GrepStats:
    """Search every batch and feed the sink in walk (path) order."""
    stats = GrepStats()

    def deliver(result: tuple[int, list[FileMatches]]) -> bool:
        searched, found = result
        stats.files_searched += searched
        for fm in found:
            stats.files_matched += 1
            stats.matches += len(fm.matches)
            if not sink(fm):
                stats.stopped = True
                return False
        return True

    if threads <= 1:
        for batch in batches:
            if cancelled is not None and cancelled():
                batch.close()
                stats.stopped = True
                break
            if not deliver(search_batch(m, batch, max_file_size=max_file_size)):
                break
        _close_iter(batches)
        return stats

    inflight: collections.deque[tuple[Future[tuple[int, list[FileMatches]]], DirBatch]]
    inflight = collections.deque()
    limit = threads * 8
    ok = True
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rootgrep-grep") as pool:
        try:
            for batch in batches:
                if cancelled is not None and cancelled():
                    batch.close()
                    stats.stopped = True
                    ok = False
                    break
                fut = pool.submit(search_batch, m, batch, max_file_size=max_file_size)
                inflight.append((fut, batch))
                while len(inflight) >= limit:
                    f, _ = inflight.popleft()
                    if not deliver(f.result()):
                        ok = False
                        break
                if not ok:
                    break
            while ok and inflight:
                f, _ = inflight.popleft()
                ok = deliver(f.result())
        finally:
            for f, b in inflight:
                if f.cancel():
                    b.close()
            _close_iter(batches)
    return stats


def _close_iter(it: object) -> None:
    close = getattr(it, "close", None)
    if callable(close):
        close()
