"""The service: every tool's logic over a list of effective roots, shared by server and CLI.

Methods here are synchronous and blocking (walks, reads, RE2 scans): callers run them in worker
threads. Each takes the effective roots of the call and a ``Token`` that is set when one of
those roots is removed mid-call, so long operations stop with ``root_removed``. Every
authorization decision (a path mapped to a root, or refused) goes to the audit log.
"""

from __future__ import annotations

import base64
import datetime as _dt
import difflib
import functools
import hashlib
import hmac
import json
import os
import secrets
import stat as stat_mod
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from . import confine
from .audit import Audit
from .confine import DEFAULT_MAX_READ_BYTES, SymlinkPolicy, display
from .errors import (
    EditMismatch,
    IndexUnavailable,
    InvalidArgument,
    InvalidPath,
    NoRoots,
    NotADirectory,
    ReadOnly,
    RootgrepError,
    RootRemoved,
    TooLarge,
)
from .globs import Globs, glob_text, has_glob_chars
from .grep import (
    DEFAULT_MAX_FILE_SIZE,
    MAX_CONTEXT,
    FileMatches,
    GrepQuery,
    Matcher,
    Room,
    run_grep,
)
from .index.manager import Indexed, IndexManager
from .index.plan import Q, plan
from .index.store import Ranking, parse_search
from .models import (
    CopyResult,
    DeleteResult,
    DirectoryTreeResult,
    DirEntry,
    EditResult,
    FileHit,
    FileInfoResult,
    FindFilesResult,
    GrepMatch,
    GrepResult,
    IndexInfo,
    ListDirectoryResult,
    ListRootsResult,
    MoveResult,
    PathResult,
    ReadFileResult,
    ReindexResult,
    ReindexRoot,
    RootInfo,
    RootRef,
    SearchHit,
    SearchResult,
    Skipped,
    Snippet,
    TreeNode,
    WriteResult,
)
from .roots import Root, path_to_uri, resolve_target
from .walker import DirBatch, Walker, WalkOptions, order_key, path_batches

MAX_RESULTS_CAP = 1000
SEARCH_CHECKS_PER_PAGE = 200  # hits checked against the disk for one page of search results
GREP_PAGE_BYTES = 1 << 20  # text (matching lines and context) one grep answer holds, at most about
LIST_PAGE = 500
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Settings:
    allow_write: bool = False
    symlinks: SymlinkPolicy = "within"
    max_read_bytes: int = DEFAULT_MAX_READ_BYTES
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    roots_ttl: float = 5.0
    use_openat2: bool | None = None
    max_roots_per_session: int = 64  # a client's roots beyond this are refused (README)


@dataclass(eq=False)
class Token:
    """Cancellation for one call: set when a root it uses is removed."""

    roots: frozenset[str] = frozenset()
    _event: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise RootRemoved("a root this call was using was removed by the client; retry")


def text(b: bytes) -> str:
    """Bytes of a file or a name as text: invalid UTF-8 replaced visibly."""
    return b.decode("utf-8", "replace")


def iso(ts: float) -> str:
    return (
        _dt.datetime.fromtimestamp(ts, _dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


def ref(r: Root) -> RootRef:
    return RootRef(id=r.id, name=r.name, uri=r.uri)


def file_uri(r: Root, path: bytes) -> str:
    return path_to_uri(r.path + b"/" + path if path else r.path)


def _clamp(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, n))


# ---- cursors ---------------------------------------------------------------------------------


def _fingerprint(**args: Any) -> str:
    raw = json.dumps(args, sort_keys=True, default=str).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


# A cursor is ``base64(json position) "." base64(HMAC-SHA256(key, that payload))[:16 bytes]``
# under a key drawn once per process: the server only ever resumes from positions it wrote
# itself. A forged, garbled or foreign cursor (another process, another tool, other arguments)
# answers ``invalid_argument`` ("start the listing again without a cursor"), never a crash.
_CURSOR_KEY = secrets.token_bytes(32)
_CURSOR_MAC_BYTES = 16
MAX_CURSOR_CHARS = 16384  # longer than any cursor this process writes: refused unread
_RESTART = "start the listing again without a cursor"


def _cursor_mac(payload: bytes) -> bytes:
    """The MAC of a cursor's payload text, as the base64 text the cursor carries (compared as
    text: a base64 spelling that merely decodes to the same bytes is not accepted either)."""
    digest = hmac.new(_CURSOR_KEY, payload, hashlib.sha256).digest()[:_CURSOR_MAC_BYTES]
    return base64.urlsafe_b64encode(digest).rstrip(b"=")


def encode_cursor(kind: str, fp: str, **pos: Any) -> str:
    raw = json.dumps({"k": kind, "f": fp, **pos}, separators=(",", ":")).encode()
    payload = base64.urlsafe_b64encode(raw).rstrip(b"=")
    return (payload + b"." + _cursor_mac(payload)).decode()


def decode_cursor(cursor: Any, kind: str, fp: str) -> dict[str, Any]:
    """The position a cursor of ``kind`` written by this process for these arguments holds."""
    if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR_CHARS:
        raise InvalidArgument(f"`cursor` is not a cursor rootgrep gave out; {_RESTART}")
    try:
        payload, _, mac = cursor.encode("ascii").partition(b".")
        authentic = hmac.compare_digest(mac, _cursor_mac(payload))
    except UnicodeEncodeError:  # not ASCII: not one of ours
        authentic = False
    if not authentic:
        raise InvalidArgument(
            "`cursor` is damaged or was not given out by this server process (cursors do not "
            f"survive a restart); {_RESTART}"
        )
    data = json.loads(base64.urlsafe_b64decode(payload + b"=" * (-len(payload) % 4)))
    if not isinstance(data, dict) or data.get("k") != kind or data.get("f") != fp:
        raise InvalidArgument(
            "`cursor` belongs to another call; repeat the same tool with the same arguments "
            f"and the cursor from its previous page, or {_RESTART}"
        )
    return dict(data)


def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).decode()


def _unb64(s: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(s)
    except (ValueError, TypeError):
        raise InvalidArgument(f"`cursor` is damaged; {_RESTART}") from None


def audited(tool: str, op: str, arg: str) -> Callable[[F], F]:
    """Record the decision of one call in the audit log: ``allow`` with the root and the
    normalised root-relative path it reached, or ``deny`` with the error code."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Service, roots: Sequence[Root], *args: Any, **kw: Any) -> Any:
            requested = kw.get(arg)
            if arg == "pattern":
                requested = kw.get("path")
            try:
                result = fn(self, roots, *args, **kw)
            except RootgrepError as e:
                self.audit.record(tool=tool, op=op, requested=requested, decision="deny",
                                  reason=e.code)  # fmt: skip
                raise
            root = getattr(result, "root", None)
            where = getattr(result, "path", None) or getattr(result, "destination", None)
            self.audit.record(tool=tool, op=op, requested=requested, decision="allow",
                              reason="inside_root", root_id=root.id if root else None,
                              path=where)  # fmt: skip
            return result

        return wrapper  # type: ignore[return-value]

    return deco


# ---- the service -----------------------------------------------------------------------------


class Service:
    def __init__(
        self,
        operator_roots: Sequence[Root],
        settings: Settings,
        audit: Audit | None = None,
        indexes: IndexManager | None = None,
    ) -> None:
        self.operator_roots = list(operator_roots)
        self.settings = settings
        self.audit = audit or Audit(None)
        self.indexes = indexes

    def _ready_index(self, r: Root) -> tuple[Indexed, bytes] | None:
        """The index that answers grep for ``r`` exactly right now, and ``r``'s place in it
        (``b""``, or a nested root's path inside its outer root's index)."""
        found = self.indexes.lookup(r) if self.indexes is not None else None
        if found is None:
            return None
        ix = found[0]
        store = ix.index
        # (the store's own word too: a writing process that emptied the index to rebuild it
        # leaves a follower "ready" until it notices; an empty or pending state never answers)
        if ix.state != "ready" or store is None or not store.ready:
            return None
        # every change finished before this call reaches the dirty set first (the watcher's
        # reader may not have read it yet); then the index plus that set are the answer
        if not ix.catch_up() or not ix.answers_exactly():
            return None
        return found

    def index_info(self, r: Root) -> IndexInfo:
        found = self.indexes.lookup(r) if self.indexes is not None else None
        ix = found[0] if found is not None else None
        if ix is None or ix.index is None:
            return IndexInfo(state=ix.state if ix is not None else "off")
        store = ix.index
        files, size = store.file_count, store.size_bytes
        if found is not None and found[1]:  # shared with an outer root: count its own part
            files, size = store.count_below(found[1])
        return IndexInfo(
            state=ix.state,
            files=files,
            bytes=size,
            updated_at=iso(store.synced_at) if store.synced_at else None,
        )

    # -- authorization ---------------------------------------------------------------------

    def _locate(
        self,
        roots: Sequence[Root],
        tool: str,
        op: str,
        path: str | None,
        root: str | None,
    ) -> tuple[Root, list[bytes]]:
        """Map (path, root) to a root and components, ``..`` resolved physically beneath the
        root (so results name the file where it really is)."""
        r, comps = resolve_target(roots, path, root)
        return r, r.fs.physical(comps)

    def _targets(
        self, roots: Sequence[Root], tool: str, path: str | None, root: str | None
    ) -> list[tuple[Root, list[bytes]]]:
        """Where a search runs: every root when neither path nor root is given."""
        if not roots:
            raise NoRoots("no effective roots: the client announced none inside the served roots")
        if path is None and root is None:
            return [(r, []) for r in roots]
        return [self._locate(roots, tool, "search", path, root)]

    def _nested(self, roots: Sequence[Root]) -> dict[bytes, frozenset[bytes]]:
        """For each root, where the other effective roots' directories really are inside it
        now (root-relative, reached as its walk reaches them: no link on the way, checked by
        identity), whatever path they were announced by: a search over every root leaves them
        out, so each file is reported once, under the innermost root holding it."""
        out: dict[bytes, frozenset[bytes]] = {}
        if len(roots) < 2:
            return out
        where = [r.fs.where() for r in roots]  # (read once per root, not once per pair)
        for i, outer in enumerate(roots):
            inner: set[bytes] = set()
            for j, r in enumerate(roots):
                here, there = where[i], where[j]
                if i == j or here is None or there is None:
                    continue
                place = outer.fs.place_of(r.fs, here=here, there=there)
                if place:
                    inner.add(b"/".join(place))
            if inner:
                out[outer.path] = frozenset(inner)
        return out

    # -- list_roots ------------------------------------------------------------------------

    def list_roots(self, roots: Sequence[Root]) -> ListRootsResult:
        return ListRootsResult(
            roots=[
                RootInfo(id=r.id, name=r.name, uri=r.uri, source=r.source, index=self.index_info(r))
                for r in roots
            ],
            read_only=not self.settings.allow_write,
        )

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
        regex: bool = False,
        case_sensitive: bool = True,
        whole_word: bool = False,
        include: list[str] | None = None,
        exclude: list[str] | None = None,
        context: int = 0,
        hidden: bool = False,
        no_ignore: bool = False,
        max_results: int = 200,
        cursor: str | None = None,
    ) -> GrepResult:
        started = time.perf_counter()
        context = _clamp(context, 0, MAX_CONTEXT)
        limit = _clamp(max_results, 1, MAX_RESULTS_CAP)
        matcher = Matcher(GrepQuery(pattern, regex, case_sensitive, whole_word, context))
        fp = _fingerprint(t="grep", p=pattern, r=root, pa=path, re=regex, cs=case_sensitive,
                          w=whole_word, i=include, e=exclude, c=context, h=hidden,
                          n=no_ignore)  # fmt: skip
        targets = self._targets(roots, "grep", path, root)
        nested = self._nested(roots) if path is None and root is None else {}
        resume = decode_cursor(cursor, "grep", fp) if cursor else None
        keep = _path_filter(include, exclude)
        sink = _GrepPage(limit)
        searched = 0
        used_index = False
        q: Q | None = None
        for ti, (r, comps) in enumerate(targets):
            if resume is not None and ti < resume["t"]:
                continue
            after = _unb64(resume["p"]) if resume is not None and ti == resume["t"] else None
            sink.start(ti, r, after, resume["l"] if after is not None and resume else 0)
            prune = nested.get(r.path, frozenset())
            opts = WalkOptions(hidden=hidden, no_ignore=no_ignore, prune=prune)
            found = None if hidden or no_ignore else self._ready_index(r)
            start = b"/".join(c for c in comps if c != b".")
            # with no required trigram the index still knows which files are text (binary
            # files are never opened) and spares the walk
            narrowed = False
            if found is not None and Walker(r.fs).would_list(start, "dir"):
                if q is None:  # planned only when an index is used, once for every root
                    q = plan(pattern, regex=regex, case_sensitive=case_sensitive)
                used_index = True
                narrowed = narrows(q)
                source = _indexed_batches(r, found, q, start, prune)
            else:
                source = Walker(r.fs, start, opts).batches()
            batches = _filter_batches(source, keep, after)
            stats = run_grep(
                matcher,
                batches,
                sink,
                max_file_size=self.settings.max_file_size,
                cancelled=lambda: token.cancelled,
                join=not narrowed,
            )
            token.check()
            searched += stats.files_searched
            if sink.more:
                break
        next_cursor = None
        if sink.more and sink.last is not None:
            t, p, line = sink.last
            next_cursor = encode_cursor("grep", fp, t=t, p=_b64(p), l=line)
        return GrepResult(
            matches=sink.out,
            truncated=sink.more,
            next_cursor=next_cursor,
            index_used=used_index,
            files_searched=searched,
            elapsed_ms=round((time.perf_counter() - started) * 1000, 2),
        )

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
        hidden: bool = False,
        no_ignore: bool = False,
        max_results: int = 200,
        cursor: str | None = None,
    ) -> FindFilesResult:
        limit = _clamp(max_results, 1, MAX_RESULTS_CAP)
        fp = _fingerprint(t="find", p=pattern, r=root, pa=path, h=hidden, n=no_ignore)
        targets = self._targets(roots, "find_files", path, root)
        nested = self._nested(roots) if path is None and root is None else {}
        resume = decode_cursor(cursor, "find", fp) if cursor else None
        match = _name_matcher(pattern)
        out: list[FileHit] = []
        last: tuple[int, bytes] | None = None
        more = False
        for ti, (r, comps) in enumerate(targets):
            if resume is not None and ti < resume["t"]:
                continue
            after = _unb64(resume["p"]) if resume is not None and ti == resume["t"] else None
            identity = ref(r)
            opts = WalkOptions(
                hidden=hidden, no_ignore=no_ignore, prune=nested.get(r.path, frozenset())
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
                            if not match(fe.path):
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
                            last = (ti, fe.path)
                    if more:
                        break
            finally:
                batches.close()
            if more:
                break
        next_cursor = None
        if more and last is not None:
            next_cursor = encode_cursor("find", fp, t=last[0], p=_b64(last[1]))
        return FindFilesResult(files=out, truncated=more, next_cursor=next_cursor)

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
        include: list[str] | None = None,
        exclude: list[str] | None = None,
        max_results: int = 20,
        cursor: str | None = None,
    ) -> SearchResult:
        """Ranked search (BM25 with file-name and identifier boosts) over the indexes."""
        if self.indexes is None or not self.indexes.enabled:
            raise IndexUnavailable(
                "search needs the index, and indexing is off (--no-index); use grep instead"
            )
        limit = _clamp(max_results, 1, 100)
        fp = _fingerprint(t="search", q=query, r=root, pa=path, i=include, e=exclude)
        offset = int(decode_cursor(cursor, "search", fp)["o"]) if cursor else 0
        targets = self._targets(roots, "search", path, root)
        nested = self._nested(roots) if path is None and root is None else {}
        parsed = parse_search(query)
        keep = _path_filter(include, exclude)
        path_globs = _path_filter(parsed.paths, None) if parsed.paths else None
        hits: list[tuple[float, int, bytes, Root, Any, Ranking]] = []
        partial = False
        for ti, (r, comps) in enumerate(targets):
            token.check()
            self.indexes.use(r)  # (no owner: stopped once unused for idle_seconds)
            found = self.indexes.lookup(r)
            if found is None:
                partial = True  # (this root's index is being replaced or cannot be used)
                continue
            ix, place = found
            if ix.state != "ready":
                partial = True
            if ix.index is None or ix.index.foreign:
                continue
            start = b"/".join(c for c in comps if c != b".")
            if place:
                start = place + b"/" + start if start else place
            prune = nested.get(r.path)
            ranking = ix.index.rank(parsed)
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
        # a total order (score, then root, then path), so pages never overlap or skip
        hits.sort(key=lambda h: (-h[0], h[1], order_key(h[2])))
        # what is shown comes from the file as it is now beneath the pinned root, never from
        # the index's stored copy: a file that left the root (or changed into something that
        # is not a text file) is not shown at all
        results: list[SearchHit] = []
        at = offset
        budget = SEARCH_CHECKS_PER_PAGE
        while at < len(hits) and len(results) < limit and budget > 0:
            token.check()
            score, _ti, rel, r, _addr, ranking = hits[at]
            at += 1
            budget -= 1
            data = self._current_text(r, rel)
            if data is None:
                continue
            results.append(
                SearchHit(
                    root=ref(r), path=display(rel), uri=file_uri(r, rel), score=round(score, 4),
                    snippets=[Snippet(line=n, text=t) for n, t in ranking.snippets_of(data)],
                )
            )  # fmt: skip
        more = at < len(hits)
        nxt = encode_cursor("search", fp, o=at) if more else None
        return SearchResult(results=results, partial=partial, next_cursor=nxt)

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
        for r, _ in targets:
            token.check()
            st = self.indexes.reindex(r, progress)
            out.append(
                ReindexRoot(
                    root=ref(r), files=st.files, bytes=st.bytes, added=st.added,
                    updated=st.updated, removed=st.removed, elapsed_ms=st.elapsed_ms,
                )
            )  # fmt: skip
        return ReindexResult(roots=out)

    # -- read_file ---------------------------------------------------------------------------

    @audited("read_file", "read", "path")
    def read_file(
        self,
        roots: Sequence[Root],
        *,
        path: str,
        root: str | None = None,
        start_line: int | None = None,
        end_line: int | None = None,
    ) -> ReadFileResult:
        r, comps = self._locate(roots, "read_file", "read", path, root)
        res = r.fs.read(comps, max_bytes=self.settings.max_read_bytes)
        content = text(res.data)
        lines = content.splitlines(keepends=True)
        total = len(lines)
        first = 1 if start_line is None else max(1, start_line)
        last = total if end_line is None else min(total, end_line)
        if start_line is None and end_line is None:
            chosen = content
        else:
            chosen = "".join(lines[first - 1 : last]) if last >= first else ""
        return ReadFileResult(
            root=ref(r),
            path=display(comps),
            uri=file_uri(r, b"/".join(comps)),
            content=chosen,
            start_line=first,
            end_line=max(last, first - 1),
            total_lines=total,
            truncated=res.truncated,
        )

    # -- list_directory ----------------------------------------------------------------------

    @audited("list_directory", "list", "path")
    def list_directory(
        self,
        roots: Sequence[Root],
        *,
        path: str | None = None,
        root: str | None = None,
        cursor: str | None = None,
    ) -> ListDirectoryResult:
        r, comps = self._locate(roots, "list_directory", "list", path, root)
        fp = _fingerprint(t="ls", r=r.id, p=display(comps))
        after = _unb64(decode_cursor(cursor, "ls", fp)["n"]) if cursor else None
        fd = r.fs.open_dir(comps)
        entries: list[DirEntry] = []
        more = False
        last = b""
        try:
            for e in confine.scan_fd(fd):
                if after is not None and e.name <= after:
                    continue
                if len(entries) >= LIST_PAGE:
                    more = True
                    break
                try:
                    st: os.stat_result | None = confine.stat_at(fd, e.name)
                except OSError:
                    st = None
                entries.append(
                    DirEntry(
                        name=display(e.name),
                        type=e.kind,
                        size=st.st_size if st is not None else None,
                        mtime=iso(st.st_mtime) if st is not None else None,
                    )
                )
                last = e.name
        finally:
            os.close(fd)
        return ListDirectoryResult(
            root=ref(r),
            path=display(comps),
            entries=entries,
            next_cursor=encode_cursor("ls", fp, n=_b64(last)) if more else None,
        )

    # -- directory_tree ----------------------------------------------------------------------

    @audited("directory_tree", "list", "path")
    def directory_tree(
        self,
        roots: Sequence[Root],
        token: Token,
        *,
        path: str | None = None,
        root: str | None = None,
        max_depth: int = 3,
        max_entries: int = 500,
    ) -> DirectoryTreeResult:
        r, comps = self._locate(roots, "directory_tree", "list", path, root)
        depth = _clamp(max_depth, 1, 20)
        cap = _clamp(max_entries, 1, 10000)
        st = r.fs.stat(comps)
        if not stat_mod.S_ISDIR(st.st_mode):
            raise NotADirectory(f"'{display(comps)}' is not a directory")
        top = TreeNode(name=display(comps[-1]) if comps else r.name, type="dir", children=[])
        stack: list[TreeNode] = [top]
        truncated = False
        count = 0
        walker = Walker(r.fs, b"/".join(comps))
        entries = walker.tree_entries(depth)
        try:
            for level, _rel, e in entries:
                token.check()
                if count >= cap:
                    truncated = True
                    break
                del stack[level:]
                node = TreeNode(
                    name=display(e.name), type=e.kind, children=[] if e.kind == "dir" else None
                )
                parent = stack[-1]
                assert parent.children is not None
                parent.children.append(node)
                count += 1
                if e.kind == "dir":
                    stack.append(node)
        finally:
            entries.close()
        return DirectoryTreeResult(root=ref(r), path=display(comps), tree=top, truncated=truncated)

    # -- file_info ---------------------------------------------------------------------------

    @audited("file_info", "stat", "path")
    def file_info(
        self, roots: Sequence[Root], *, path: str, root: str | None = None
    ) -> FileInfoResult:
        r, comps = self._locate(roots, "file_info", "stat", path, root)
        st = r.fs.stat(comps, follow=False)
        return FileInfoResult(
            root=ref(r),
            path=display(comps),
            uri=file_uri(r, b"/".join(comps)),
            type=confine.entry_kind(st.st_mode),
            size=st.st_size,
            mtime=iso(st.st_mtime),
            mode=f"{stat_mod.S_IMODE(st.st_mode):04o}",
            is_symlink=stat_mod.S_ISLNK(st.st_mode),
        )

    # -- writes ------------------------------------------------------------------------------

    def _writable(self, tool: str, path: str | None) -> None:
        if not self.settings.allow_write:
            raise ReadOnly(
                "rootgrep is serving read-only; the operator must start it with --allow-write"
            )

    @audited("write_file", "write", "path")
    def write_file(
        self,
        roots: Sequence[Root],
        *,
        path: str,
        content: str,
        root: str | None = None,
        create_only: bool = False,
    ) -> WriteResult:
        self._writable("write_file", path)
        r, comps = self._locate(roots, "write_file", "write", path, root)
        data = content.encode("utf-8")
        existed = True
        try:
            r.fs.stat(comps, follow=False)
        except RootgrepError:
            existed = False
        r.fs.atomic_write(comps, data, create_only=create_only)
        return WriteResult(
            root=ref(r),
            path=display(comps),
            uri=file_uri(r, b"/".join(comps)),
            bytes=len(data),
            created=not existed,
        )

    @audited("edit_file", "edit", "path")
    def edit_file(
        self,
        roots: Sequence[Root],
        *,
        path: str,
        edits: list[tuple[str, str]],
        root: str | None = None,
        dry_run: bool = False,
    ) -> EditResult:
        self._writable("edit_file", path) if not dry_run else None
        r, comps = self._locate(roots, "edit_file", "edit" if not dry_run else "read", path, root)
        res = r.fs.read(comps, max_bytes=self.settings.max_file_size)
        if res.truncated:
            raise TooLarge(
                f"'{display(comps)}' is larger than --max-file-size; edit it another way"
            )
        before = res.data
        after = before
        for i, (old, new) in enumerate(edits, 1):
            o = old.encode("utf-8")
            n = after.count(o) if o else 0
            if n != 1:
                raise EditMismatch(
                    f"edit {i}: old_text occurs {n} times in '{display(comps)}' (it must occur "
                    "exactly once); read the file again and give a longer, unique old_text"
                )
            after = after.replace(o, new.encode("utf-8"), 1)
        shown = display(comps)
        diff = "".join(
            difflib.unified_diff(
                text(before).splitlines(keepends=True),
                text(after).splitlines(keepends=True),
                fromfile=f"a/{shown}",
                tofile=f"b/{shown}",
            )
        )
        if not dry_run:
            r.fs.atomic_write(comps, after)
        return EditResult(
            root=ref(r), path=shown, uri=file_uri(r, b"/".join(comps)), diff=diff,
            applied=not dry_run,
        )  # fmt: skip

    @audited("create_directory", "mkdir", "path")
    def create_directory(
        self, roots: Sequence[Root], *, path: str, root: str | None = None
    ) -> PathResult:
        self._writable("create_directory", path)
        r, comps = self._locate(roots, "create_directory", "mkdir", path, root)
        r.fs.mkdirs(comps)
        return PathResult(root=ref(r), path=display(comps), uri=file_uri(r, b"/".join(comps)))

    def _pair(
        self, roots: Sequence[Root], tool: str, source: str, destination: str, root: str | None
    ) -> tuple[Root, list[bytes], list[bytes]]:
        r, src = self._locate(roots, tool, "read", source, root)
        r2, dst = self._locate(roots, tool, "write", destination, root or r.id)
        if r2 is not r and r2.id != r.id:
            raise InvalidPath("source and destination must be in the same root")
        src = [c for c in src if c != b"."]
        dst = [c for c in dst if c != b"."]
        if not src or not dst:
            raise InvalidPath("a root itself cannot be moved, copied over or replaced")
        return r, src, dst

    @audited("move_path", "move", "source")
    def move_path(
        self,
        roots: Sequence[Root],
        *,
        source: str,
        destination: str,
        root: str | None = None,
        overwrite: bool = False,
    ) -> MoveResult:
        self._writable("move_path", source)
        r, src, dst = self._pair(roots, "move_path", source, destination, root)
        r.fs.rename(src, dst, overwrite=overwrite)
        return MoveResult(
            root=ref(r), source=display(src), destination=display(dst),
            uri=file_uri(r, b"/".join(dst)),
        )  # fmt: skip

    @audited("copy_path", "copy", "source")
    def copy_path(
        self,
        roots: Sequence[Root],
        *,
        source: str,
        destination: str,
        root: str | None = None,
        overwrite: bool = False,
    ) -> CopyResult:
        self._writable("copy_path", source)
        r, src, dst = self._pair(roots, "copy_path", source, destination, root)
        rep = r.fs.copy(src, dst, overwrite=overwrite)
        for p, why in rep.skipped:
            self.audit.record(tool="copy_path", op="copy", requested=display(p), decision="deny",
                              reason=why, root_id=r.id, path=display(p))  # fmt: skip
        return CopyResult(
            root=ref(r),
            source=display(src),
            destination=display(dst),
            uri=file_uri(r, b"/".join(dst)),
            files=rep.files,
            directories=rep.directories,
            skipped=[Skipped(path=display(p), reason=why) for p, why in rep.skipped],
        )

    @audited("delete_path", "delete", "path")
    def delete_path(
        self,
        roots: Sequence[Root],
        *,
        path: str,
        root: str | None = None,
        recursive: bool = False,
    ) -> DeleteResult:
        self._writable("delete_path", path)
        r, comps = self._locate(roots, "delete_path", "delete", path, root)
        kept: list[tuple[bytes, str]] = []
        removed = r.fs.remove(comps, recursive=recursive, skipped=kept)
        return DeleteResult(
            root=ref(r), path=display(comps), removed=removed,
            skipped=[Skipped(path=display(p), reason=why) for p, why in kept],
        )  # fmt: skip


# ---- helpers ---------------------------------------------------------------------------------


class _GrepPage:
    """A grep sink that fills one page of results, skipping what a cursor already covered.

    A page holds at most ``limit`` matches and about ``budget`` bytes of text (matching lines
    and their context): the match that would pass the budget starts the next page (the first
    match of a page is always taken, so paging always advances). ``room`` tells the search
    what is left, so no more than that is ever gathered from a file."""

    def __init__(self, limit: int, budget: int = GREP_PAGE_BYTES) -> None:
        self.limit = limit
        self.budget = budget
        self.held = 0
        self.out: list[GrepMatch] = []
        self.more = False
        self.last: tuple[int, bytes, int] | None = None
        self._t = 0
        self._root: Root | None = None
        self._ref: RootRef | None = None
        self._after: bytes | None = None
        self._after_line = 0

    def start(self, t: int, root: Root, after: bytes | None, after_line: int) -> None:
        self._t, self._root, self._ref = t, root, ref(root)
        self._after, self._after_line = after, after_line

    def room(self, path: bytes) -> Room:
        return Room(
            after_line=self._after_line if path == self._after else 0,
            matches=self.limit - len(self.out) + 1,  # one more than fits: proof of more
            bytes=max(0, self.budget - self.held),
        )

    def __call__(self, fm: FileMatches) -> bool:
        assert self._root is not None and self._ref is not None
        shown = display(fm.path)
        uri = file_uri(self._root, fm.path)
        for lm in fm.matches:
            if fm.path == self._after and lm.line <= self._after_line:
                continue
            size = len(lm.text) + sum(map(len, lm.before)) + sum(map(len, lm.after))
            if len(self.out) >= self.limit or (self.out and self.held + size > self.budget):
                self.more = True
                return False
            self.held += size
            self.out.append(
                GrepMatch(
                    root=self._ref,
                    path=shown,
                    uri=uri,
                    line=lm.line,
                    column=lm.column,
                    text=text(lm.text),
                    before=[text(b) for b in lm.before],
                    after=[text(a) for a in lm.after],
                )
            )
            self.last = (self._t, fm.path, lm.line)
        if fm.cut:  # the search stopped gathering this file: the rest is for the next page
            self.more = True
            return False
        return True


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
    try:
        for batch in batches:
            files = [
                f
                for f in batch.files
                if (key is None or order_key(f.path) >= key) and (keep is None or keep(f.path))
            ]
            if not files:
                batch.close()
                continue
            batch.files = files
            yield batch
    finally:
        batches.close()
