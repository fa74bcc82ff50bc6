"""The service's common ground: settings, cancellation, cursors, the audit decorator, and
mapping a call's arguments to roots. The tools' logic is in the sibling modules.

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
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from ..audit import Audit
from ..confine import DEFAULT_MAX_READ_BYTES, SymlinkPolicy
from ..errors import (
    InvalidArgument,
    NoRoots,
    RootgrepError,
    RootRemoved,
)
from ..grep import (
    DEFAULT_MAX_FILE_SIZE,
)
from ..index.manager import Indexed, IndexManager
from ..models import (
    IndexInfo,
    RootId,
    RootRef,
)
from ..roots import Root, faithful, path_to_uri, resolve_target, uri_like

MAX_RESULTS_CAP = 1000
SEARCH_CHECKS_PER_PAGE = 200  # hits checked against the disk for one page of search results
PHRASE_READ_BYTES = 64 << 20  # read past the hits' first reads to check phrases, per page
GREP_PAGE_BYTES = 1 << 20  # text (matching lines and context) one grep answer holds, at most about
LIST_PAGE = 500
# grep counts the matches of its whole scope past the page for this long at most (then its
# answer says "at least"); the same bound applies to the count of a pattern read the other
# way (regex / literal) when it finds nothing
TOTAL_SECONDS = 2.0
MAX_SYMBOL_HITS = 5000  # definitions one find_symbol gathers (then sorted and paged)
DEFAULT_MAX_LINE_CHARS = 300  # grep: a longer line is shown as a window around its match
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
    max_answer_chars: int = 20_000  # a tool's text answer stays under this (SPEC §8)


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


def rid(r: Root) -> RootId:
    """A root's identity as every item of a list carries it."""
    return RootId(id=r.id, name=r.name)


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
        def wrapper(self: ServiceBase, roots: Sequence[Root], *args: Any, **kw: Any) -> Any:
            requested = kw.get(arg)
            if arg == "pattern":
                requested = kw.get("path")
            try:
                result = fn(self, roots, *args, **kw)
            except RootgrepError as e:
                self.audit.record(tool=tool, op=op, requested=requested, decision="deny",
                                  reason=e.code)  # fmt: skip
                # (a suggestion only where taking it reads: a tool that writes, moves or
                # deletes is never pointed at another file that exists)
                reads = op in ("read", "search", "list", "stat") and e.code == "not_found"
                near = near_paths(roots, requested, kw.get("root")) if reads else []
                if near and isinstance(requested, str):
                    shown = ", ".join(repr(p) for p in near)
                    said = e.message.replace("; list its parent directory to see what is there", "")
                    raise type(e)(f"{said}; did you mean {shown}?") from None
                raise
            root = getattr(result, "root", None)
            where = getattr(result, "path", None) or getattr(result, "destination", None)
            self.audit.record(tool=tool, op=op, requested=requested, decision="allow",
                              reason="inside_root", root_id=root.id if root else None,
                              path=where)  # fmt: skip
            return result

        return wrapper  # type: ignore[return-value]

    return deco


NEAR_NAMES = 5000  # a mistyped path is compared with at most this many names of its directory
NEAR_LISTING = 20_000  # a directory with more entries than this gets no suggestion at all


def near_paths(roots: Sequence[Root], path: object, root: str | None) -> list[str]:
    """For a path that does not exist: up to 3 existing paths it likely meant (the first
    missing name replaced by the closest names of the directory that holds it, kept when
    the rest of the path then exists), or none."""
    if not isinstance(path, str) or not path:
        return []
    try:
        r, comps = resolve_target(roots, path, root)
        comps = r.fs.physical(comps)
    except (RootgrepError, OSError):
        return []
    comps = [c for c in comps if c not in (b"", b".")]
    for depth in range(len(comps)):
        try:
            r.fs.stat(comps[: depth + 1])
            continue
        except (RootgrepError, OSError):
            pass
        try:  # comps[depth] is the first name missing
            entries = r.fs.list_dir(comps[:depth], limit=NEAR_LISTING + 1)
        except (RootgrepError, OSError):
            return []
        if len(entries) > NEAR_LISTING:  # (a huge directory: no guess is worth its cost)
            return []
        want = comps[depth].decode("utf-8", "surrogateescape")
        # (names of about the same length only, then the closest of at most NEAR_NAMES)
        names = {
            n: e.name
            for e in entries
            if abs(len(n := e.name.decode("utf-8", "surrogateescape")) - len(want))
            <= max(2, len(want) // 3)
        }
        pool = list(names)[:NEAR_NAMES]
        out: list[str] = []
        for close in difflib.get_close_matches(want, pool, n=3, cutoff=0.6):
            guess = [*comps[:depth], names[close], *comps[depth + 1 :]]
            try:
                r.fs.stat(guess)
            except (RootgrepError, OSError):
                continue
            out.append(_passable(r, guess, len(roots) > 1))
        return out
    return []


def _passable(r: Root, comps: list[bytes], several: bool) -> str:
    """A path as a tool takes it back, shown as answers show paths (``tools.spec.Out.path``):
    root-relative text with one root, absolute with ``several``; the file's URI when the
    text would not survive (``roots.faithful``)."""
    rel = b"/".join(comps)
    try:
        text = (r.path + b"/" + rel if several else rel).decode("utf-8")
    except UnicodeDecodeError:
        return file_uri(r, rel)
    if not faithful(text) or (not several and uri_like(text)):
        return file_uri(r, rel)
    return text


# ---- the service -----------------------------------------------------------------------------


class ServiceBase:
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

    def _resyncing_index(self, r: Root) -> tuple[Indexed, bytes] | None:
        """The index of ``r`` when it is not ready but holds a whole earlier build (reopened
        after a stop or a restart, its re-sync running): lookups that need not be exact
        (find_symbol, search) answer from it at once, saying so, instead of parsing or
        reading the tree live (seconds on a large one)."""
        found = self.indexes.lookup(r) if self.indexes is not None else None
        if found is None:
            return None
        store = found[0].index
        if store is None or store.foreign or not store.complete or found[0].state == "off":
            return None
        return found

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
        if not ix.answers_grep() or store is None or not store.ready:
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
        phase: Literal["none", "grep", "complete"] = "none"
        if ix.state == "ready" and store.ready:
            phase = "complete" if store.complete else "grep"
        elif ix.answers_grep() and store.ready:  # (a build's first commit landed)
            phase = "grep"
        return IndexInfo(
            state=ix.state,
            phase=phase,
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
