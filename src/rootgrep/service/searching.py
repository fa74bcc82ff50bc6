"""Searching: the tools over a call's scope, composed (grep in ``grepping``, ranked search in
``ranked``), with find_files (paths by glob or substring) and reindex here."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import confine
from ..confine import display
from ..errors import IndexUnavailable
from ..globs import Globs, as_globs, glob_text, has_glob_chars
from ..models import FileHit, FindFilesResult, ReindexResult, ReindexRoot
from ..roots import Root
from ..walker import Walker, WalkOptions, order_key
from .base import (
    MAX_RESULTS_CAP,
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
)
from .filters import path_filter
from .grepping import Grepping
from .ranked import RankedSearch


class Searching(Grepping, RankedSearch):
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
        keep = path_filter(include, exclude)
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


def _name_matcher(pattern: str) -> Callable[[bytes], bool]:
    """find_files: a gitignore-style glob when the pattern has glob characters, else a
    case-insensitive substring of the root-relative path as shown (or as globs see it)."""
    if has_glob_chars(pattern):
        return Globs([pattern]).match
    needle = pattern.casefold()
    return lambda p: needle in display(p).casefold() or needle in glob_text(p).casefold()
