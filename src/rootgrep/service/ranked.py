"""The search tool: ranked search (BM25 with file-name and identifier boosts) over the
indexes, plus a bounded live scan of roots whose index cannot answer yet; every hit shown
from the file as it is now, its phrases checked."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .. import confine
from ..confine import display
from ..errors import IndexUnavailable, RootgrepError
from ..globs import as_globs
from ..index.ranking import Ranking
from ..index.search_syntax import ParsedSearch, parse_search
from ..models import SearchHit, SearchResult, Snippet
from ..roots import Root
from ..walker import order_key
from .base import (
    DEFAULT_MAX_LINE_CHARS,
    PHRASE_READ_BYTES,
    SEARCH_CHECKS_PER_PAGE,
    ServiceBase,
    Token,
    _clamp,
    _fingerprint,
    audited,
    decode_cursor,
    encode_cursor,
    file_uri,
    rid,
)
from .filters import below_any, path_filter
from .live_search import LiveBudget, live_hits


class RankedSearch(ServiceBase):
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
        keep = path_filter(include, exclude)
        path_globs = path_filter(parsed.paths, None) if parsed.paths else None
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
                if prune and below_any(rel, prune):
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
