"""What one grep call covers, searched root by root with or without each root's index: the
files an index names (its candidates plus the dirty files), a cursor's and the globs' cut of
them, and the whole scope counted past the page (``Totals``) or read the other way."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from ..errors import InvalidPattern
from ..grep import FileMatches, GrepQuery, GrepStats, Matcher, Room, plain_regex, run_grep
from ..index.manager import Indexed
from ..index.plan import Q, plan
from ..models import OtherReading
from ..roots import Root
from ..walker import DirBatch, FileEntry, Walker, WalkOptions, keep_files, order_key, path_batches
from .base import TOTAL_SECONDS, ServiceBase, Token
from .filters import below_any


class Totals(NamedTuple):
    """A grep's whole scope: matching lines and files (``exact`` false: at least these, the
    count stopped at TOTAL_SECONDS), and the files read to count them."""

    matches: int
    files: int
    exact: bool
    searched: int
    skipped: tuple[int, int, int, int] = (0, 0, 0, 0)  # hidden, ignored, binary, too large


def as_four(v: Sequence[int]) -> tuple[int, int, int, int]:
    return (v[0], v[1], v[2], v[3])


class _Counter:
    """A grep sink that only counts matching lines and files (never holds a line)."""

    def __init__(self) -> None:
        self.matches = 0
        self.files = 0

    def room(self, path: bytes) -> Room:
        return Room(count=True)

    def __call__(self, fm: FileMatches) -> bool:
        n = fm.count if fm.count >= 0 else len(fm.matches)
        if n:
            self.matches += n
            self.files += 1
        return True


class Scope:
    """What one grep call covers (its targets, their nested roots left to themselves, its
    globs and walk options), searched root by root with or without each root's index: the
    page, then, when the page does not hold it all, the whole scope counted (``count``) and a
    pattern that found nothing counted as read the other way (``other_reading``)."""

    def __init__(
        self,
        service: ServiceBase,
        targets: list[tuple[Root, list[bytes]]],
        nested: dict[bytes, frozenset[bytes]],
        keep: Callable[[bytes], bool] | None,
        hidden: bool,
        no_ignore: bool,
        token: Token,
    ) -> None:
        self.service = service
        self.targets = targets
        self.nested = nested
        self.keep = keep
        self.hidden = hidden
        self.no_ignore = no_ignore
        self.token = token
        self.used_index = False
        self._plans: dict[tuple[str, bool, bool], Q] = {}

    def index_of(self, r: Root) -> tuple[Indexed, bytes] | None:
        if self.hidden or self.no_ignore:  # (an index holds neither)
            return None
        return self.service._ready_index(r)

    def run(
        self,
        matcher: Matcher,
        pattern: str,
        regex: bool,
        case_sensitive: bool,
        ti: int,
        sink: Any,
        at: bytes | None,
        found: tuple[Indexed, bytes] | None,
        cancelled: Callable[[], bool] | None = None,
        skipped: list[int] | None = None,
    ) -> GrepStats:
        """Search target ``ti`` (from just after ``at``) into ``sink``, through ``found``
        (its ready index, or None: a walk); adds to ``skipped`` what it left out (hidden
        and ignored entries, binary and too large files: ``Totals.skipped``; through an
        index, only the binary files it holds)."""
        r, comps = self.targets[ti]
        prune = self.nested.get(r.path, frozenset())
        start = b"/".join(c for c in comps if c != b".")
        # with no required trigram the index still knows which files are text (binary
        # files are never opened) and spares the walk
        narrowed = False
        walker = None
        if found is not None and Walker(r.fs).would_list(start, "dir"):
            key = (pattern, regex, case_sensitive)
            q = self._plans.get(key)
            if q is None:  # (planned once a call, only when an index is used)
                q = self._plans[key] = plan(pattern, regex=regex, case_sensitive=case_sensitive)
            self.used_index = True
            narrowed = narrows(q)
            source = indexed_batches(r, found, q, start, prune)
            if skipped is not None and found[0].index is not None:
                ix, place = found
                where = b"/".join(p for p in (place, start) if p)
                inner = frozenset(place + b"/" + p if place else p for p in prune)
                for i, n in enumerate(ix.index.not_searched(where, inner)):
                    skipped[i] += n
        else:
            opts = WalkOptions(hidden=self.hidden, no_ignore=self.no_ignore, prune=prune, after=at)
            walker = Walker(r.fs, start, opts)
            source = walker.batches()
        stats = run_grep(
            matcher,
            _filter_batches(source, self.keep, at),
            sink,
            max_file_size=self.service.settings.max_file_size,
            cancelled=cancelled or (lambda: self.token.cancelled),
            join=not narrowed,
        )
        self.token.check()
        if skipped is not None:
            if walker is not None:
                skipped[0] += walker.hidden_skipped
                skipped[1] += walker.ignored_skipped
            skipped[2] += stats.binary
            skipped[3] += stats.too_large
        return stats

    def count(self, matcher: Matcher, pattern: str, regex: bool, case_sensitive: bool) -> Totals:
        """The matching lines and files of the whole scope, counted for TOTAL_SECONDS at
        most (then ``exact`` is false)."""
        deadline = time.monotonic() + TOTAL_SECONDS
        counter = _Counter()
        late = False

        def stop() -> bool:
            nonlocal late
            late = late or time.monotonic() > deadline
            return late or self.token.cancelled

        searched = 0
        skipped = [0, 0, 0, 0]
        for ti, (r, _) in enumerate(self.targets):
            found = self.index_of(r)
            stats = self.run(
                matcher, pattern, regex, case_sensitive, ti, counter, None, found, stop, skipped
            )
            searched += stats.files_searched
            if late:
                break
        return Totals(counter.matches, counter.files, not late, searched, as_four(skipped))

    def other_reading(
        self,
        pattern: str,
        regex: bool,
        case_sensitive: bool,
        whole_word: bool,
        before: int,
        after: int,
    ) -> OtherReading | None:
        """For a pattern that matched nothing: what it matches read the other way (a regex as
        a literal, a literal as a regex), when that reading differs and finds something."""
        if plain_regex(pattern):  # (reads the same both ways)
            return None
        try:
            m = Matcher(GrepQuery(pattern, not regex, case_sensitive, whole_word, before, after))
        except InvalidPattern:
            return None
        t = self.count(m, pattern, not regex, case_sensitive)
        if not t.matches:
            return None
        return OtherReading(
            read_as="literal" if regex else "regex", matches=t.matches, files=t.files,
            exact=t.exact,
        )  # fmt: skip


def narrows(q: Q) -> bool:
    """Whether an index's candidates for ``q`` are narrowed by trigrams: most of them then
    match, and they are searched file by file rather than in joined chunks."""
    return q.op != "all"


def indexed_batches(
    r: Root,
    found: tuple[Indexed, bytes],
    q: Q,
    start: bytes,
    prune: frozenset[bytes] = frozenset(),
) -> Iterator[DirBatch]:
    """The files grep must read when an index is ready: the index's candidates plus every
    dirty file (changed since the last commit) that a walk would list, in path order, grouped
    by directory. Each directory is opened beneath the root, never through a link. A nested
    root sharing its outer root's index takes the part below its place in it."""
    ix, place = found
    assert ix.index is not None
    # the dirty set first: a flush that lands in between then leaves a changed file in one
    # of the two (dirty, or the reloaded index), never in neither
    dirty = ix.dirty_snapshot()
    paths = ix.index.candidates(q)  # already in walk order
    if place:  # (stripping one common prefix keeps the walk order)
        cut = len(place) + 1
        below = place + b"/"
        paths = [p[cut:] for p in paths if p.startswith(below)]
        dirty = {p[cut:] for p in dirty if p.startswith(below)}
    if dirty:
        extra = Walker(r.fs).listed(dirty)
        if extra:
            paths = sorted(extra.union(paths), key=order_key)
    if start:
        under = start + b"/"
        paths = [p for p in paths if p.startswith(under)]
    if prune:
        paths = [p for p in paths if not below_any(p, prune)]
    return path_batches(r.fs, paths)


def _filter_batches(
    batches: Iterator[DirBatch],
    keep: Callable[[bytes], bool] | None,
    after: bytes | None,
) -> Iterator[DirBatch]:
    """Drop files a cursor already covered (strictly before ``after``) or the globs exclude."""
    if keep is None and after is None:
        yield from batches
        return
    key = order_key(after) if after is not None else None

    def select(batch: DirBatch) -> list[FileEntry]:
        return [
            f
            for f in batch.files
            if (key is None or order_key(f.path) >= key) and (keep is None or keep(f.path))
        ]

    yield from keep_files(batches, select)
