"""The grep tool: a page of matching lines (or files) over the call's scope, through each
root's index when it is ready, with the scope's true totals, the skipped files, a cursor and,
for a pattern that found nothing, what it finds read the other way."""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..globs import as_globs
from ..grep import MAX_CONTEXT, GrepQuery, Matcher
from ..models import GrepResult, NotSearched, OutputMode
from ..roots import Root
from .base import (
    DEFAULT_MAX_LINE_CHARS,
    MAX_RESULTS_CAP,
    ServiceBase,
    Token,
    _b64,
    _clamp,
    _fingerprint,
    _unb64,
    audited,
    decode_cursor,
    encode_cursor,
)
from .enclosing import known_symbols
from .filters import path_filter
from .grep_page import GrepPage
from .grep_scope import Scope, Totals, as_four


class Grepping(ServiceBase):
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
        keep = path_filter(include, exclude)
        sink = GrepPage(limit, output_mode, max(1, max_line_chars), matcher=matcher)
        scope = Scope(self, targets, nested, keep, hidden, no_ignore, token)
        searched = 0
        skipped = [0, 0, 0, 0]  # (what the page's walk left out: the whole scope's if it ends)
        for ti, (r, _) in enumerate(targets):
            if resume is not None and ti < resume["t"]:
                continue
            at = _unb64(resume["p"]) if resume is not None and ti == resume["t"] else None
            sink.start(ti, r, at, resume["l"] if at is not None and resume else 0)
            found = scope.index_of(r)
            symbols = output_mode == "content" and found is not None
            sink.symbols = known_symbols(found) if symbols else None
            stats = scope.run(
                matcher, pattern, regex, case_sensitive, ti, sink, at, found, None, skipped
            )
            searched += stats.files_searched
            if sink.more:
                break
        if resume is not None and "tm" in resume:  # (counted by the first page)
            totals = Totals(resume["tm"], resume["tf"], resume["tx"], resume["ts"],
                             as_four(resume["sk"]))  # fmt: skip
        elif not sink.more and resume is None:  # the page holds the whole scope
            totals = Totals(sink.total, sink.files_matched, True, searched, as_four(skipped))
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


def _skipped(v: tuple[int, int, int, int]) -> NotSearched | None:
    if not any(v):
        return None
    return NotSearched(hidden=v[0], ignored=v[1], binary=v[2], too_large=v[3])
