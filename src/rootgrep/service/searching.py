"""Searching: grep, find_files, search (ranked) and reindex."""

from __future__ import annotations

import bisect
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from .. import confine
from ..confine import display
from ..errors import (
    IndexUnavailable,
    InvalidPattern,
    RootgrepError,
)
from ..globs import Globs, as_globs, glob_text, has_glob_chars
from ..grep import (
    MAX_CONTEXT,
    FileMatches,
    GrepQuery,
    GrepStats,
    LineMatch,
    Matcher,
    Room,
    cut_around,
    cut_context,
    plain_regex,
    run_grep,
)
from ..index.manager import Indexed
from ..index.plan import Q, plan
from ..index.ranking import Ranking
from ..index.search_syntax import ParsedSearch, parse_search
from ..models import (
    FileHit,
    FindFilesResult,
    GrepFile,
    GrepMatch,
    GrepResult,
    NotSearched,
    OtherReading,
    OutputMode,
    ReindexResult,
    ReindexRoot,
    RootId,
    SearchHit,
    SearchResult,
    Snippet,
    construct,
)
from ..roots import Root
from ..symbols import Symbol
from ..walker import DirBatch, FileEntry, Walker, WalkOptions, keep_files, order_key, path_batches
from .base import (
    DEFAULT_MAX_LINE_CHARS,
    GREP_PAGE_BYTES,
    MAX_RESULTS_CAP,
    PHRASE_READ_BYTES,
    SEARCH_CHECKS_PER_PAGE,
    TOTAL_SECONDS,
    ServiceBase,
    Token,
    _b64,
    _clamp,
    _fingerprint,
    _unb64,
    audited,
    decode_cursor,
    encode_cursor,
    file_uri,
    iso,
    ref,
    rid,
    text,
)
from .live_search import LiveBudget, live_hits


class Searching(ServiceBase):
    # -- grep --------------------------------------------------------------------------------

    @audited("grep", "search", "pattern")
    def grep(
        self,
        roots: Sequence[Root],
        token: Token,
        *,
        pattern: str,
        root: str | None = None,
        path: str | None = None,
        regex: bool = True,
        fixed_strings: bool = False,
        case_sensitive: bool = True,
        whole_word: bool = False,
        include: str | list[str] | None = None,
        exclude: str | list[str] | None = None,
        context: int = 0,
        before: int | None = None,
        after: int | None = None,
        hidden: bool = False,
        no_ignore: bool = False,
        max_results: int = 200,
        cursor: str | None = None,
        output_mode: OutputMode = "content",
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    ) -> GrepResult:
        started = time.perf_counter()
        regex = regex and not fixed_strings  # (a literal either way it is asked for)
        include, exclude = as_globs(include), as_globs(exclude)
        ahead = _clamp(context if before is None else before, 0, MAX_CONTEXT)
        behind = _clamp(context if after is None else after, 0, MAX_CONTEXT)
        if output_mode != "content":
            ahead = behind = 0
        limit = _clamp(max_results, 1, MAX_RESULTS_CAP)
        matcher = Matcher(
            GrepQuery(pattern, regex, case_sensitive, whole_word, before=ahead, after=behind)
        )
        fp = _fingerprint(t="grep", p=pattern, r=root, pa=path, re=regex, cs=case_sensitive,
                          w=whole_word, i=include, e=exclude, b=ahead, a=behind, h=hidden,
                          n=no_ignore, o=output_mode, m=max_line_chars)  # fmt: skip
        targets = self._targets(roots, "grep", path, root)
        nested = self._nested(roots) if path is None and root is None else {}
        resume = decode_cursor(cursor, "grep", fp) if cursor else None
        keep = _path_filter(include, exclude)
        sink = _GrepPage(limit, output_mode, max(1, max_line_chars), matcher=matcher)
        scope = _Scope(self, targets, nested, keep, hidden, no_ignore, token)
        searched = 0
        skipped = [0, 0, 0, 0]  # (what the page's walk left out: the whole scope's if it ends)
        for ti, (r, _) in enumerate(targets):
            if resume is not None and ti < resume["t"]:
                continue
            at = _unb64(resume["p"]) if resume is not None and ti == resume["t"] else None
            sink.start(ti, r, at, resume["l"] if at is not None and resume else 0)
            found = scope.index_of(r)
            symbols = output_mode == "content" and found is not None
            sink.symbols = _known_symbols(found) if symbols else None
            stats = scope.run(
                matcher, pattern, regex, case_sensitive, ti, sink, at, found, None, skipped
            )
            searched += stats.files_searched
            if sink.more:
                break
        if resume is not None and "tm" in resume:  # (counted by the first page)
            totals = _Totals(resume["tm"], resume["tf"], resume["tx"], resume["ts"],
                             _four(resume["sk"]))  # fmt: skip
        elif not sink.more and resume is None:  # the page holds the whole scope
            totals = _Totals(sink.total, sink.files_matched, True, searched, _four(skipped))
        else:
            totals = scope.count(matcher, pattern, regex, case_sensitive)
            if totals.matches < sink.total or totals.files < sink.files_matched:
                # (files changed between the page and the count: the page is what was seen)
                totals = totals._replace(matches=max(totals.matches, sink.total),
                                         files=max(totals.files, sink.files_matched),
                                         exact=False)  # fmt: skip
        if scope.keep is not None:  # (globs: the walk's counts of what it left out are not
            totals = totals._replace(skipped=(0, 0, 0, 0))  # theirs: said only without)
        other = None
        if not totals.matches and not sink.total and resume is None and totals.exact:
            other = scope.other_reading(pattern, regex, case_sensitive, whole_word, ahead, behind)
        positions = sink.positions

        def resume_at(k: int) -> str | None:
            """The cursor that continues after the first k items of this answer."""
            if k < len(positions) or sink.more:
                t, p, line = positions[k - 1]
                tm, tf, tx, ts, sk = totals
                return encode_cursor("grep", fp, t=t, p=_b64(p), l=line, tm=tm, tf=tf, tx=tx,
                                     ts=ts, sk=sk)  # fmt: skip
            return None

        result = GrepResult(
            output_mode=output_mode,
            matches=sink.out,
            files=sink.files,
            total_matches=totals.matches,
            total_files=totals.files,
            total_exact=totals.exact,
            other_reading=other,
            skipped=_skipped(totals.skipped),
            truncated=sink.more,
            next_cursor=resume_at(len(positions)) if positions else None,
            index_used=scope.used_index,
            files_searched=max(searched, totals.searched),
            elapsed_ms=round((time.perf_counter() - started) * 1000, 2),
        )
        result._resume = resume_at
        return result

    # -- find_files ------------------------------------------------------------------------

    @audited("find_files", "search", "pattern")
    def find_files(
        self,
        roots: Sequence[Root],
        token: Token,
        *,
        pattern: str,
        root: str | None = None,
        path: str | None = None,
        include: str | list[str] | None = None,
        exclude: str | list[str] | None = None,
        hidden: bool = False,
        no_ignore: bool = False,
        max_results: int = 200,
        cursor: str | None = None,
    ) -> FindFilesResult:
        limit = _clamp(max_results, 1, MAX_RESULTS_CAP)
        include, exclude = as_globs(include), as_globs(exclude)
        fp = _fingerprint(t="find", p=pattern, r=root, pa=path, h=hidden, n=no_ignore,
                          i=include, e=exclude)  # fmt: skip
        keep = _path_filter(include, exclude)
        targets = self._targets(roots, "find_files", path, root)
        nested = self._nested(roots) if path is None and root is None else {}
        resume = decode_cursor(cursor, "find", fp) if cursor else None
        match = _name_matcher(pattern)
        out: list[FileHit] = []
        positions: list[tuple[int, bytes]] = []
        more = False
        for ti, (r, comps) in enumerate(targets):
            if resume is not None and ti < resume["t"]:
                continue
            after = _unb64(resume["p"]) if resume is not None and ti == resume["t"] else None
            identity = rid(r)
            opts = WalkOptions(
                hidden=hidden,
                no_ignore=no_ignore,
                prune=nested.get(r.path, frozenset()),
                after=after,
            )
            walker = Walker(r.fs, b"/".join(comps), opts)
            batches = walker.batches()
            try:
                for batch in batches:
                    token.check()
                    with batch:
                        for fe in batch.files:
                            if after is not None and order_key(fe.path) <= order_key(after):
                                continue
                            if not match(fe.path) or (keep is not None and not keep(fe.path)):
                                continue
                            if len(out) >= limit:
                                more = True
                                break
                            try:
                                st = confine.stat_at(batch.fd, fe.name)
                            except OSError:
                                continue
                            out.append(
                                FileHit(
                                    root=identity,
                                    path=display(fe.path),
                                    uri=file_uri(r, fe.path),
                                    size=st.st_size,
                                    mtime=iso(st.st_mtime),
                                )
                            )
                            positions.append((ti, fe.path))
                    if more:
                        break
            finally:
                batches.close()
            if more:
                break

        def resume_at(k: int) -> str | None:
            if k < len(positions) or more:
                t, p = positions[k - 1]
                return encode_cursor("find", fp, t=t, p=_b64(p))
            return None

        result = FindFilesResult(
            files=out, truncated=more, next_cursor=resume_at(len(out)) if out else None
        )
        result._resume = resume_at
        return result

    # -- search (ranked) ---------------------------------------------------------------------

    @audited("search", "search", "pattern")
    def search(
        self,
        roots: Sequence[Root],
        token: Token,
        *,
        query: str,
        root: str | None = None,
        path: str | None = None,
        include: str | list[str] | None = None,
        exclude: str | list[str] | None = None,
        max_results: int = 20,
        cursor: str | None = None,
    ) -> SearchResult:
        """Ranked search (BM25 with file-name and identifier boosts) over the indexes."""
        if self.indexes is None or not self.indexes.enabled:
            raise IndexUnavailable(
                "search needs the index, and indexing is off (--no-index); use grep instead"
            )
        limit = _clamp(max_results, 1, 100)
        include, exclude = as_globs(include), as_globs(exclude)
        fp = _fingerprint(t="search", q=query, r=root, pa=path, i=include, e=exclude)
        offset = int(decode_cursor(cursor, "search", fp)["o"]) if cursor else 0
        targets = self._targets(roots, "search", path, root)
        nested = self._nested(roots) if path is None and root is None else {}
        parsed = parse_search(query)
        keep = _path_filter(include, exclude)
        path_globs = _path_filter(parsed.paths, None) if parsed.paths else None
        hits: list[tuple[float, int, bytes, Root, Any, Ranking]] = []
        partial = False
        building: list[str] = []
        failed: list[str] = []  # (off: the build failed, it is not coming)
        live: list[tuple[int, Root, bytes]] = []  # roots whose index cannot answer it all
        resyncing: list[str] = []
        for ti, (r, comps) in enumerate(targets):
            token.check()
            self.indexes.use(r)  # (no owner: stopped once unused for idle_seconds)
            found = self.indexes.lookup(r)
            own = b"/".join(c for c in comps if c != b".")
            if found is None:
                partial = True  # (this root's index is being replaced or cannot be used)
                building.append(r.name)
                live.append((ti, r, own))
                continue
            ix, place = found
            if ix.state == "off":
                partial = True
                failed.append(r.name)
                live.append((ti, r, own))
            elif ix.state not in ("ready", "stale") and self._resyncing_index(r) is not None:
                resyncing.append(r.name)  # (a whole earlier build, re-synced now: it answers)
            elif ix.state not in ("ready", "stale") or (
                ix.index is not None and ix.index.entries.bare
            ):  # (stale: built, but unwatched; list_roots says so: it is not being built)
                partial = True  # (building; or built for grep, its words not all committed)
                building.append(r.name)
                live.append((ti, r, own))
            if ix.index is None or ix.index.foreign:
                continue
            start = b"/".join(c for c in comps if c != b".")
            if place:
                start = place + b"/" + start if start else place
            prune = nested.get(r.path)
            ranking = ix.index.rank(parsed, token.check)
            cut = len(place) + 1 if place else 0
            for score, rel, addr in ranking.hits:
                if start and not rel.startswith(start + b"/") and rel != start:
                    continue
                rel = rel[cut:]
                if prune and _below_any(rel, prune):
                    continue
                if keep is not None and not keep(rel):
                    continue
                if path_globs is not None and not path_globs(rel):
                    continue
                hits.append((score, ti, rel, r, addr, ranking))
        live_files = 0
        if live:  # what is committed, plus the files a bounded live scan finds
            live_files = self._live_hits(live, parsed, nested, keep, path_globs, hits, token)
        # a total order (score, then root, then path), so pages never overlap or skip
        hits.sort(key=lambda h: (-h[0], h[1], order_key(h[2])))
        # what is shown comes from the file as it is now beneath the pinned root, never from
        # the index's stored copy: a file that left the root (or changed into something that
        # is not a text file) is not shown at all
        results: list[SearchHit] = []
        ends: list[int] = []  # per result: where in ``hits`` the next page starts after it
        at = offset
        budget = SEARCH_CHECKS_PER_PAGE
        phrase_budget = [PHRASE_READ_BYTES]  # (bytes the phrase checks may read past the heads)
        while at < len(hits) and len(results) < limit and budget > 0:
            token.check()
            score, _ti, rel, r, _addr, ranking = hits[at]
            at += 1
            budget -= 1
            data = self._current_text(r, rel)
            if data is None:
                continue
            holds = self._holds_phrases(parsed, r, rel, data, phrase_budget)
            if holds is None and at - 1 > offset:
                at -= 1  # (left unchecked: the page ends before it, the next checks it)
                break
            if not holds:  # (the index cannot tell a phrase from its words in any order;
                continue  # unchecked even with a whole page's budget: not shown)
            snippets = [  # (whole lines, or a window around the match: SPEC §8)
                Snippet(line=n, text=t)
                for n, t in ranking.snippets_of(data, rel, max_chars=DEFAULT_MAX_LINE_CHARS)
            ]
            shown, uri = display(rel), file_uri(r, rel)
            hit = SearchHit(
                root=rid(r), path=shown, uri=uri, score=round(score, 4), snippets=snippets
            )
            results.append(hit)
            ends.append(at)
        more = at < len(hits)

        def resume_at(k: int) -> str | None:
            end = ends[k - 1] if k else offset
            return encode_cursor("search", fp, o=end) if end < len(hits) else None

        result = SearchResult(
            results=results,
            partial=partial,
            building=building,
            failed=failed,
            live_files=live_files,
            resyncing=resyncing,
            next_cursor=encode_cursor("search", fp, o=at) if more else None,
        )
        result._resume = resume_at
        return result

    def _live_hits(
        self,
        live: list[tuple[int, Root, bytes]],
        parsed: ParsedSearch,
        nested: dict[bytes, frozenset[bytes]],
        keep: Callable[[bytes], bool] | None,
        path_globs: Callable[[bytes], bool] | None,
        hits: list[tuple[float, int, bytes, Root, Any, Ranking]],
        token: Token,
    ) -> int:
        """Add to ``hits`` the files of ``live`` (roots whose index cannot answer: being
        built, or failed) that a bounded live scan finds and the index did not (see
        ``live_search``); returns how many files it read."""
        words = parsed.tokens()
        ranking = Ranking(None, None, None, [], words)  # type: ignore[arg-type]  # (snippets)
        seen = {(h[1], h[2]) for h in hits}
        budget = LiveBudget()

        def wanted(rel: bytes) -> bool:
            return (keep is None or keep(rel)) and (path_globs is None or path_globs(rel))

        for ti, r, start in live:
            prune = nested.get(r.path, frozenset())
            for score, rel in live_hits(r, start, prune, parsed, words, wanted, budget,
                                        lambda: token.cancelled):  # fmt: skip
                if (ti, rel) not in seen:
                    hits.append((score, ti, rel, r, None, ranking))
            token.check()
        return budget.files

    def _holds_phrases(
        self, parsed: ParsedSearch, r: Root, rel: bytes, head: bytes, budget: list[int]
    ) -> bool | None:
        """Whether the file holds the query's phrases (and none it excludes): in ``head``
        (what is shown of it), or else anywhere in it up to ``--max-file-size`` (as far as
        the index reads a file: a phrase past the first ``--max-read-bytes`` counts as its
        words do). Those further reads share ``budget`` (bytes left for one page,
        ``PHRASE_READ_BYTES``): None when the budget left cannot check it (the page ends
        there, and the next page checks it with a budget of its own)."""
        if not parsed.checks_text:
            return True
        if len(head) < self.settings.max_read_bytes:
            return parsed.holds_phrases(head)  # (that was the whole file)
        if not parsed.not_phrases and parsed.holds_phrases(head):
            return True
        if budget[0] <= len(head):
            return None  # (the page's reads are spent: unchecked)
        try:
            res = r.fs.read(
                confine.split_relpath(rel), max_bytes=min(self.settings.max_file_size, budget[0])
            )
        except (RootgrepError, OSError):
            return False
        budget[0] -= len(res.data)
        if res.truncated and len(res.data) < self.settings.max_file_size:
            return None  # (cut by the budget, not by the file size cap: unchecked)
        return parsed.holds_phrases(res.data)

    def _current_text(self, r: Root, rel: bytes) -> bytes | None:
        """A search hit's bytes as they are now beneath the root (at most what ``read_file``
        returns in one call); None when it is no longer a text file there."""
        try:
            res = r.fs.read(confine.split_relpath(rel), max_bytes=self.settings.max_read_bytes)
        except (RootgrepError, OSError):
            return None
        return res.data

    def reindex(
        self,
        roots: Sequence[Root],
        token: Token,
        *,
        root: str | None = None,
        progress: Callable[[int, int | None, str], None] | None = None,
    ) -> ReindexResult:
        if self.indexes is None or not self.indexes.enabled:
            raise IndexUnavailable("indexing is off (--no-index); grep still works, live")
        targets = self._targets(roots, "reindex", None, root)
        out: list[ReindexRoot] = []
        base = 0  # files examined in the roots before: progress goes on rising across roots
        for r, _ in targets:
            token.check()
            st = self.indexes.reindex(r, _after(progress, base, r.name, len(targets) > 1))
            base += st.files
            out.append(
                ReindexRoot(
                    root=ref(r), files=st.files, bytes=st.bytes, added=st.added,
                    updated=st.updated, removed=st.removed, elapsed_ms=st.elapsed_ms,
                )
            )  # fmt: skip
        return ReindexResult(roots=out)


# ---- helpers ---------------------------------------------------------------------------------


def _skipped(v: tuple[int, int, int, int]) -> NotSearched | None:
    if not any(v):
        return None
    return NotSearched(hidden=v[0], ignored=v[1], binary=v[2], too_large=v[3])


class _Totals(NamedTuple):
    """A grep's whole scope: matching lines and files (``exact`` false: at least these, the
    count stopped at TOTAL_SECONDS), and the files read to count them."""

    matches: int
    files: int
    exact: bool
    searched: int
    skipped: tuple[int, int, int, int] = (0, 0, 0, 0)  # hidden, ignored, binary, too large


def _four(v: Sequence[int]) -> tuple[int, int, int, int]:
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


class _Scope:
    """What one grep call covers (its targets, their nested roots left to themselves, its
    globs and walk options), searched root by root with or without each root's index: the
    page, then, when the page does not hold it all, the whole scope counted (``count``) and a
    pattern that found nothing counted as read the other way (``other_reading``)."""

    def __init__(
        self,
        service: Searching,
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
        and ignored entries, binary and too large files: ``_Totals.skipped``; through an
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
            source = _indexed_batches(r, found, q, start, prune)
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

    def count(self, matcher: Matcher, pattern: str, regex: bool, case_sensitive: bool) -> _Totals:
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
        return _Totals(counter.matches, counter.files, not late, searched, _four(skipped))

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


def _after(
    progress: Callable[[int, int | None, str], None] | None, base: int, name: str, named: bool
) -> Callable[[int, int | None, str], None] | None:
    """One root's progress as part of a call over several: counted on from ``base`` (MCP
    requires a call's progress to increase), each message naming its root."""
    if progress is None or (not base and not named):
        return progress
    report = progress

    def step(done: int, total: int | None, message: str) -> None:
        report(base + done, None if total is None else base + total, f"{name}: {message}")

    return step


class _GrepPage:
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


def enclosing(defs: list[Symbol], line: int) -> str | None:
    """The innermost definition holding ``line``, as ``Container.name`` (or ``name``): of
    the definitions holding it, the one that starts last (the later one in ``defs`` among
    those starting on the same line). One pass over ``defs``; ``Definitions`` answers the
    same for many lines of a file."""
    best: Symbol | None = None
    for d in defs:
        if d.line <= line <= d.end_line and (best is None or d.line >= best.line):
            best = d
    return None if best is None else _shown(best)


def _shown(d: Symbol) -> str:
    return f"{d.container}.{d.name}" if d.container else d.name


class Definitions:
    """A file's definitions, ready to say which one holds a line (``enclosing``'s answer)
    without a pass over all of them: a file with thousands of definitions and hundreds of
    matching lines cost a pass per match. The definitions are sorted by first line (stably,
    so the later one in the file's list comes later among equal starts); a line's answer is
    the last definition starting at or before it that also ends at or after it. Walking back
    from the last one starting at or before the line, ``up[i]`` jumps to the nearest earlier
    definition that ends after definition i does: the ones in between end no later than i,
    so none of them holds a line i does not hold. Built in linear time; a look-up costs a
    binary search plus one step per level of nesting (and per definition that ends after the
    one before it but still before the line)."""

    __slots__ = ("_defs", "_starts", "_up")

    def __init__(self, defs: Sequence[Symbol]) -> None:
        self._defs = sorted(defs, key=lambda d: d.line)
        self._starts = [d.line for d in self._defs]
        up: list[int] = []
        stack: list[int] = []  # indexes whose end lines decrease strictly
        for i, d in enumerate(self._defs):
            while stack and self._defs[stack[-1]].end_line <= d.end_line:
                stack.pop()
            up.append(stack[-1] if stack else -1)
            stack.append(i)
        self._up = up

    def __len__(self) -> int:
        return len(self._defs)

    def enclosing(self, line: int) -> str | None:
        i = bisect.bisect_right(self._starts, line) - 1
        while i >= 0:
            d = self._defs[i]
            if d.end_line >= line:
                return _shown(d)
            i = self._up[i]
        return None


def _known_symbols(
    found: tuple[Indexed, bytes] | None,
) -> Callable[[bytes], Definitions | None] | None:
    """The stored definitions of a file as it is now: from the index, for a file not changed
    since its commit (a dirty file's stored ones may be stale: none). Decoded once per file
    and commit (``SYMBOL_CACHE``), not once per call."""
    if found is None or found[0].index is None:
        return None
    ix, place = found
    store = ix.index
    dirty = ix.dirty_snapshot()
    entries = store.entries  # (this commit's: a new dict for every commit)

    def load(full: bytes) -> Definitions | None:
        syms = store.symbols_of(full)
        return Definitions(syms) if syms else None

    def of(rel: bytes) -> Definitions | None:
        full = place + b"/" + rel if place else rel
        if full in dirty:
            return None
        entry = entries.get(full)
        if entry is not None and entry.bare:  # (its symbols not committed yet)
            return None
        if entry is None or entry.pending:  # (not committed as listed: asked, never kept)
            return load(full)
        return SYMBOL_CACHE.get(store, entries, full, entry, load)

    return of


MAX_CACHED_SYMBOLS = 50_000  # decoded definitions kept over all indexes (about 10 MB)


class SymbolCache:
    """Decoded stored symbols, per index and commit, least recently used first out.

    A grep names each match's enclosing definition from the symbols stored for its file;
    reading and decoding them cost about 0.15 ms a file (45 ms for a page of 1,000 common
    matches), on every call. They change only with a commit, and every commit replaces the
    index's ``entries`` dict: an index's cached files are dropped as soon as its entries are
    not the ones they were read under, and a file is cached under its entry (file id, size,
    mtime, inode) as well. At most ``MAX_CACHED_SYMBOLS`` definitions are held in all (a
    file counts its definitions plus one)."""

    def __init__(self, limit: int = MAX_CACHED_SYMBOLS) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._held = 0
        # id(index) -> (the index, weakly; the entries read under; (path, fid, key) -> symbols)
        self._by_store: dict[int, tuple[weakref.ref[Any], Any, OrderedDict[Any, Any]]] = {}

    def get(
        self,
        store: Any,
        entries: Any,
        rel: bytes,
        entry: Any,
        load: Callable[[bytes], Definitions | None],
    ) -> Definitions | None:
        key = (rel, entry.fid, entry.key)
        with self._lock:
            files = self._files(store, entries)
            if files is not None and key in files:
                files.move_to_end(key)
                self._by_store[id(store)] = self._by_store.pop(id(store))  # (its index too)
                return files[key]
        syms = load(rel)
        with self._lock:
            if store.entries is not entries:  # (a commit landed meanwhile: not kept)
                return syms
            files = self._files(store, entries)
            if files is None:
                self._drop(id(store))
                files = OrderedDict()
                self._by_store[id(store)] = (weakref.ref(store), entries, files)
            if key not in files:
                files[key] = syms
                self._held += _weight(syms)
            self._by_store[id(store)] = self._by_store.pop(id(store))  # (used last: kept last)
            self._evict()
        return syms

    def _files(self, store: Any, entries: Any) -> OrderedDict[Any, Any] | None:
        """The files cached for this index under these entries (its current ones)."""
        held = self._by_store.get(id(store))
        if held is None or held[0]() is not store or held[1] is not entries:
            return None
        return held[2]

    def _drop(self, sid: int) -> None:
        held = self._by_store.pop(sid, None)
        if held is not None:
            self._held -= sum(_weight(v) for v in held[2].values())

    def _evict(self) -> None:
        for sid in [k for k, h in self._by_store.items() if h[0]() is None]:
            self._drop(sid)  # (an index closed and gone)
        while self._held > self.limit and self._by_store:
            sid, (_, _, files) = next(iter(self._by_store.items()))
            while files and self._held > self.limit:
                _, v = files.popitem(last=False)
                self._held -= _weight(v)
            if not files:
                del self._by_store[sid]

    def clear(self) -> None:
        with self._lock:
            self._by_store.clear()
            self._held = 0


def _weight(defs: Definitions | None) -> int:
    return 1 + (len(defs) if defs is not None else 0)


SYMBOL_CACHE = SymbolCache()


_PAST_EVERY_LINE = 1 << 62  # a files-mode cursor resumes after the whole file


def _name_matcher(pattern: str) -> Callable[[bytes], bool]:
    """find_files: a gitignore-style glob when the pattern has glob characters, else a
    case-insensitive substring of the root-relative path as shown (or as globs see it)."""
    if has_glob_chars(pattern):
        return Globs([pattern]).match
    needle = pattern.casefold()
    return lambda p: needle in display(p).casefold() or needle in glob_text(p).casefold()


def _path_filter(
    include: list[str] | None, exclude: list[str] | None
) -> Callable[[bytes], bool] | None:
    if not include and not exclude:
        return None
    inc = Globs(include, "include glob") if include else None
    exc = Globs(exclude, "exclude glob") if exclude else None

    def keep(path: bytes) -> bool:
        if inc is not None and not inc.match(path):
            return False
        return not (exc is not None and exc.match(path))

    return keep


def narrows(q: Q) -> bool:
    """Whether an index's candidates for ``q`` are narrowed by trigrams: most of them then
    match, and they are searched file by file rather than in joined chunks."""
    return q.op != "all"


def _indexed_batches(
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
        paths = [p for p in paths if not _below_any(p, prune)]
    return path_batches(r.fs, paths)


def _below_any(path: bytes, dirs: frozenset[bytes]) -> bool:
    """Whether ``path`` lies below one of ``dirs`` (root-relative)."""
    i = path.find(b"/")
    while i > 0:
        if path[:i] in dirs:
            return True
        i = path.find(b"/", i + 1)
    return False


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
