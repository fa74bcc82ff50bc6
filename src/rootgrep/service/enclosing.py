"""The definition that holds a line (a grep match names its enclosing function or class):
a file's stored definitions from the index, decoded once per file and commit and kept in a
bounded cache (``SYMBOL_CACHE``)."""

from __future__ import annotations

import bisect
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from ..index.manager import Indexed
from ..symbols import Symbol


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


def known_symbols(
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
