"""One page of a grep's answer: matching lines (or files) gathered up to the page's count and
text budget, each line cut to its width around the match, with where a cursor resumes."""

from __future__ import annotations

from collections.abc import Callable

from ..confine import display
from ..grep import FileMatches, LineMatch, Matcher, Room, cut_around, cut_context
from ..models import GrepFile, GrepMatch, OutputMode, RootId, construct
from ..roots import Root
from .base import DEFAULT_MAX_LINE_CHARS, GREP_PAGE_BYTES, file_uri, rid, text
from .enclosing import Definitions

_PAST_EVERY_LINE = 1 << 62  # a files-mode cursor resumes after the whole file


class GrepPage:
    """A grep sink that fills one page of results, skipping what a cursor already covered.

    A page holds at most ``limit`` items (matching lines, or files in the two files modes)
    and about ``budget`` bytes of text (matching lines and their context, as shown): the
    item that would pass the budget starts the next page (the first item of a page is always
    taken, so paging always advances). ``room`` tells the search what is left, so no more
    than that is ever gathered from a file; the files modes gather only a count per file.
    ``positions`` holds, per item, where a cursor resumes after it."""

    def __init__(
        self,
        limit: int,
        mode: OutputMode = "content",
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
        budget: int = GREP_PAGE_BYTES,
        matcher: Matcher | None = None,
    ) -> None:
        self.matcher = matcher  # (where a cut line's match ends)
        # a matching file's definitions when the index knows them as the file is now (each
        # match then names its enclosing definition), else None
        self.symbols: Callable[[bytes], Definitions | None] | None = None
        self.limit = limit
        self.mode = mode
        self.max_line_chars = max_line_chars
        self.budget = budget
        self.held = 0
        self.out: list[GrepMatch] = []
        self.files: list[GrepFile] = []
        self.total = 0
        self.files_matched = 0  # files with an item in the page
        self.positions: list[tuple[int, bytes, int]] = []
        self.more = False
        self._t = 0
        self._root: Root | None = None
        self._ref: RootId | None = None
        self._after: bytes | None = None
        self._after_line = 0

    def start(self, t: int, root: Root, after: bytes | None, after_line: int) -> None:
        self._t, self._root, self._ref = t, root, rid(root)
        self._after, self._after_line = after, after_line

    def room(self, path: bytes) -> Room:
        skip = self._after_line if path == self._after else 0
        if self.mode != "content":
            # both files modes report each file's matching lines (SPEC §8); a room of one
            # match would read as "the sink is full" and end the search at the first file
            return Room(after_line=skip, count=True)
        return Room(
            after_line=skip,
            matches=self.limit - len(self.out) + 1,  # one more than fits: proof of more
            bytes=max(0, self.budget - self.held),
        )

    def __call__(self, fm: FileMatches) -> bool:
        assert self._root is not None and self._ref is not None
        if self.mode != "content":
            return self._file(fm)
        shown = display(fm.path)
        uri = file_uri(self._root, fm.path)
        defs = self.symbols(fm.path) if self.symbols is not None else None
        taken = self.total
        for lm in fm.matches:
            if fm.path == self._after and lm.line <= self._after_line:
                continue
            m = self._match(lm, shown, uri, defs.enclosing(lm.line) if defs else None)
            size = len(m.text) + sum(map(len, m.before)) + sum(map(len, m.after))
            if len(self.out) >= self.limit or (self.out and self.held + size > self.budget):
                self.more = True
                self.files_matched += self.total > taken
                return False
            self.held += size
            self.out.append(m)
            self.total += 1
            self.positions.append((self._t, fm.path, lm.line))
        self.files_matched += self.total > taken
        if fm.cut:  # the search stopped gathering this file: the rest is for the next page
            self.more = True
            return False
        return True

    def _match(self, lm: LineMatch, shown: str, uri: str, symbol: str | None) -> GrepMatch:
        width = self.max_line_chars
        if len(lm.text) > width:  # (bytes: never fewer than characters)
            span = self.matcher.find(lm.text, lm.offset) if self.matcher is not None else None
            end = span[1] if span is not None else lm.offset
            line, cut = cut_around(lm.text, lm.offset, end, width)
        else:
            line, cut = text(lm.text), False
        before, after = lm.before, lm.after
        ctx: list[str] = []
        for c in (*before, *after):
            t, c_cut = cut_context(c, width)
            ctx.append(t)
            cut = cut or c_cut
        # (constructed, not validated: every value has its type already, and validating
        # each of a page's 1,000 matches cost more than building it)
        return construct(
            GrepMatch, root=self._ref, path=shown, uri=uri, line=lm.line, column=lm.column,
            text=line, before=ctx[: len(before)], after=ctx[len(before) :], symbol=symbol,
            line_truncated=cut,
        )  # fmt: skip

    def _file(self, fm: FileMatches) -> bool:
        assert self._root is not None and self._ref is not None
        if fm.path == self._after:  # a files-mode cursor resumes after this whole file
            return True
        if len(self.files) >= self.limit:
            self.more = True
            return False
        n = fm.count if fm.count >= 0 else len(fm.matches)
        where = display(fm.path)
        uri = file_uri(self._root, fm.path)
        self.files.append(GrepFile(root=self._ref, path=where, uri=uri, matches=n))
        self.total += n
        self.files_matched += 1
        self.positions.append((self._t, fm.path, _PAST_EVERY_LINE))
        return True
