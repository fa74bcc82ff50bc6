"""An index's state: what each indexed file's (size, mtime_ns, inode, ctime_ns) and file id
were (ctime: an edit that keeps the size and sets the mtime back, ``touch -r``, ``cp -p``,
still changes it, and user space cannot set it).

Two files in the index folder hold it:
- ``state.bin``, the snapshot: a header (``synced_at``, the number of entries, a random
  *generation*), one fixed-size record per entry, then every path's bytes in the same order.
  It is replaced atomically (temp, fsync, rename), never written in place.
- ``state.log``, the journal: the changes made since that snapshot, appended, one record per
  commit step. Each record is its length and CRC-32, then the generation of the snapshot it
  follows, ``synced_at`` and the changed entries (a gone path has ``GONE`` as its pending
  byte). A record of another generation (a journal left by a crash while a new snapshot
  replaced the old one) is ignored; a torn last record (a crash mid-append) ends the
  journal, and the next writer replaces both files with a snapshot before it appends.

So a small edit appends a record the size of its own entries, whatever the size of the tree;
the snapshot is rewritten only when the journal outgrows a quarter of it (at least
``JOURNAL_MIN_BYTES``): the bytes written per edited file stay bounded by a constant
factor of its record's size, and a reader never replays more than that quarter.
"""

from __future__ import annotations

import itertools
import math
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..confine import Beneath
from ..errors import RootgrepError
from .reading import read_whole

__all__ = [
    "BARE",
    "ENTRY_BYTES",
    "GONE",
    "JOURNAL_FILE",
    "JOURNAL_MIN_BYTES",
    "STATE_FILE",
    "Entries",
    "Entry",
    "IndexCorrupt",
    "Journal",
    "Layered",
    "decode_state",
    "encode_record",
    "encode_state",
    "journal_room",
    "new_generation",
    "read_state",
    "read_together",
    "replay",
    "write_state",
]

STATE_FILE = "state.bin"
JOURNAL_FILE = "state.log"
JOURNAL_MIN_BYTES = 1 << 20  # a journal may always grow this far before a new snapshot
GONE = 2  # the pending byte of a journal entry whose path is gone
BARE = 4  # a bit of the pending byte: the entry is ``bare`` (see ``Entry``)
LINKED = 8  # a bit of the pending byte: the file had more than one name (``Entry.linked``)

_MAGIC = b"rootgrep-state-3\n"
_HEAD = struct.Struct("<dIQ")  # synced_at (NaN: never), number of entries, generation
_ENTRY = struct.Struct("<QQqQqBI")  # fid, size, mtime_ns, inode, ctime_ns, flags, path length
ENTRY_BYTES = _ENTRY.size  # (of a record, before its path)
_RECORD = struct.Struct("<II")  # payload length, CRC-32 of the payload
_RECORD_HEAD = struct.Struct("<QdI")  # generation, synced_at (NaN: never), entries


@dataclass(slots=True)
class Entry:
    fid: int  # 0: seen but not indexed (binary, unreadable)
    size: int
    mtime_ns: int
    ino: int
    ctime_ns: int
    pending: bool = False
    # committed for grep (its trigram documents) but not yet for search and symbols (its
    # main document): a build commits every file's trigrams first, then their words and
    # symbols (``RootIndex._complete_locked``)
    bare: bool = False
    # the file had more than one name (``st_nlink`` > 1) when read: another name, maybe outside
    # the root where no watch hears it, may change it, so grep reads it live whatever the index
    # says (``Indexed.dirty_snapshot``)
    linked: bool = False
    # (size, mtime_ns, inode, ctime_ns), as ``confine.stat_keyed`` makes it: compared once
    # per file on every re-sync, made once, not per comparison
    key: tuple[int, int, int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.key = (self.size, self.mtime_ns, self.ino, self.ctime_ns)

    @property
    def grep_only(self) -> bool:
        """Left by a build between its commits: its trigrams committed, its words and
        symbols not yet (a pending entry's commit may never have landed: it is read again
        in full, whatever it says)."""
        return self.bare and not self.pending


class IndexCorrupt(Exception):
    """A state that breaks an invariant of the index (two files under one file id)."""


K = TypeVar("K")
V = TypeVar("V")
_MISSING: Any = object()
FOLD_MIN = 4096  # the changes an overlay holds at most before it is folded into its base


class Layered(Mapping[K, V]):
    """An immutable mapping: a base dict shared between versions, and an overlay of the
    changes since (a gone key maps to None there). ``changed`` makes the next version in
    time proportional to the changes and the overlay (at most ``FOLD_MIN`` keys), never to
    the base: only once the overlay outgrows ``FOLD_MIN`` is it folded into a new base (a
    copy: one commit in about ``FOLD_MIN`` changed files pays the size of the tree). Each
    version is a new object: readers tell them apart by identity."""

    __slots__ = ("_base", "_len", "_over")

    def __init__(self, base: dict[K, V] | None = None) -> None:
        self._base: dict[K, V] = {} if base is None else base
        self._over: dict[K, V | None] = {}
        self._len = len(self._base)

    def __getitem__(self, key: K) -> V:
        v = self._over.get(key, _MISSING)
        if v is _MISSING:
            return self._base[key]
        if v is None:
            raise KeyError(key)
        return v  # type: ignore[no-any-return]

    def get(self, key: K, default: Any = None) -> Any:
        v = self._over.get(key, _MISSING)
        if v is _MISSING:
            return self._base.get(key, default)
        return default if v is None else v

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None  # type: ignore[arg-type]

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        over = self._over
        if not over:
            return iter(self._base)
        return itertools.chain(
            (k for k in self._base if k not in over), (k for k, v in over.items() if v is not None)
        )

    def items(self) -> Iterator[tuple[K, V]]:  # type: ignore[override]
        over = self._over
        if not over:
            return iter(self._base.items())
        return itertools.chain(
            ((k, v) for k, v in self._base.items() if k not in over),
            ((k, v) for k, v in over.items() if v is not None),  # type: ignore[misc]
        )

    def values(self) -> Iterator[V]:  # type: ignore[override]
        return (v for _, v in self.items())

    def getter(self, *, every: bool = False) -> Callable[[K], V | None]:
        """``get`` for a loop of lookups: the base dict's own when the overlay is empty (no
        Python frame per lookup); with ``every`` (a loop over about every key: a full
        re-sync), a flat copy's otherwise."""
        if not self._over:
            return self._base.get
        return dict(self.items()).get if every else self.get

    def _next(self, changes: Mapping[K, V | None], length: int) -> Layered[K, V]:
        out = object.__new__(type(self))
        over = {**self._over, **changes}
        if len(over) > FOLD_MIN:
            base = dict(self._base)
            for k, v in over.items():
                if v is None:
                    base.pop(k, None)
                else:
                    base[k] = v
            out._base, out._over = base, {}
        else:
            out._base, out._over = self._base, over
        out._len = length
        return out

    def changed(self, changes: Mapping[K, V | None]) -> Layered[K, V]:
        """The next version: ``changes`` applied (a key mapped to None is gone)."""
        length = self._len
        for k, v in changes.items():
            length += (v is not None) - (self.get(k) is not None)
        return self._next(changes, length)


class Entries(Layered[bytes, "Entry"]):
    """An index's entries by root-relative path, with what readers ask of them kept beside:
    each indexed file's path by its file id (``paths``), how many files are indexed
    (``files``) and their bytes, how many entries are pending and how many bare, the highest
    file id, and the paths of files with more than one name (``linked``). A new version
    (``changed``) costs time proportional to its changes (plus the linked paths', when one
    changes), however large the tree."""

    __slots__ = ("bare", "bytes", "files", "linked", "paths", "pending", "top_fid")

    def __init__(self, base: dict[bytes, Entry] | None = None) -> None:
        """From entries read whole (a state file): raises ``IndexCorrupt`` when two paths
        share a file id."""
        super().__init__(base)
        entries = self._base
        paths = {e.fid: p for p, e in entries.items() if e.fid}
        self.files = sum(1 for e in entries.values() if e.fid)
        if len(paths) != self.files:
            seen: dict[int, bytes] = {}
            for p, e in entries.items():
                if e.fid and e.fid in seen:
                    raise IndexCorrupt(f"file id {e.fid} names both {seen[e.fid]!r} and {p!r}")
                seen[e.fid] = p
        self.paths: Layered[int, bytes] = Layered(paths)
        self.bytes = sum(e.size for e in entries.values() if e.fid)
        self.pending = sum(1 for e in entries.values() if e.pending)
        self.bare = sum(1 for e in entries.values() if e.bare)
        self.top_fid = max(paths, default=0)
        self.linked = frozenset(p for p, e in entries.items() if e.linked and e.fid)

    def changed(self, changes: Mapping[bytes, Entry | None]) -> Entries:
        """The next version, ``changes`` applied (None: the path is gone); raises
        ``IndexCorrupt`` (before anything is made) when it would name two paths under one
        file id."""
        length, files, size, pending, bare, top = (
            self._len,
            self.files,
            self.bytes,
            self.pending,
            self.bare,
            self.top_fid,
        )
        fids: dict[int, bytes | None] = {}
        for p, e in changes.items():
            old = self.get(p)
            if old is not None:
                length -= 1
                pending -= old.pending
                bare -= old.bare
                if old.fid:
                    files -= 1
                    size -= old.size
                    if fids.get(old.fid, _MISSING) is _MISSING:
                        fids[old.fid] = None  # (unless another change takes it again)
            if e is not None:
                length += 1
                pending += e.pending
                bare += e.bare
                if e.fid:
                    files += 1
                    size += e.size
                    top = max(top, e.fid)
        for p, e in changes.items():
            if e is None or not e.fid:
                continue
            if fids.get(e.fid) is not None:
                raise IndexCorrupt(f"file id {e.fid} names both {fids[e.fid]!r} and {p!r}")
            holder = self.paths.get(e.fid)
            if holder is not None and holder != p and fids.get(e.fid, _MISSING) is _MISSING:
                raise IndexCorrupt(f"file id {e.fid} names both {holder!r} and {p!r}")
            fids[e.fid] = p
        out = self._next(changes, length)
        assert isinstance(out, Entries)
        out.paths = self.paths.changed(fids)
        out.files, out.bytes, out.pending, out.bare, out.top_fid = (files, size, pending, bare, top)
        linked = self.linked
        if any(p in linked or (e is not None and e.linked) for p, e in changes.items()):
            now = set(linked)
            for p, e in changes.items():
                if e is not None and e.linked and e.fid:
                    now.add(p)
                else:
                    now.discard(p)
            linked = frozenset(now)
        out.linked = linked
        return out


def _time(synced_at: float | None) -> float:
    return math.nan if synced_at is None else synced_at


def _entries(items: Iterable[tuple[bytes, Entry | None]]) -> tuple[int, bytes]:
    pack = _ENTRY.pack
    records, paths = [], []
    for p, e in items:
        if e is None:
            records.append(pack(0, 0, 0, 0, 0, GONE, len(p)))
        else:
            flags = e.pending | (BARE if e.bare else 0) | (LINKED if e.linked else 0)
            records.append(pack(e.fid, e.size, e.mtime_ns, e.ino, e.ctime_ns, flags, len(p)))
        paths.append(p)
    return len(records), b"".join((*records, *paths))


def encode_state(
    entries: dict[bytes, Entry], synced_at: float | None, generation: int = 0
) -> bytes:
    """A snapshot's bytes."""
    n, body = _entries(entries.items())
    return b"".join((_MAGIC, _HEAD.pack(_time(synced_at), n, generation), body))


def encode_record(
    generation: int, synced_at: float | None, changes: Iterable[tuple[bytes, Entry | None]]
) -> bytes:
    """One journal record: ``changes`` are (path, its entry now, or None when gone)."""
    n, body = _entries(changes)
    payload = _RECORD_HEAD.pack(generation, _time(synced_at), n) + body
    return _RECORD.pack(len(payload), zlib.crc32(payload)) + payload


def _unpack(data: bytes, off: int, n: int) -> tuple[list[tuple[bytes, Entry | None]], int]:
    """``n`` entries of ``data`` at ``off`` (None: the path is gone), and the offset after
    them."""
    at = off + n * _ENTRY.size
    out: list[tuple[bytes, Entry | None]] = []
    for fid, size, mtime_ns, ino, ctime_ns, flags, length in _ENTRY.iter_unpack(data[off:at]):
        path = data[at : at + length]
        if len(path) != length:
            raise struct.error("short path")
        at += length
        if flags == GONE:
            out.append((path, None))
        else:
            e = Entry(fid, size, mtime_ns, ino, ctime_ns, bool(flags & 1), bool(flags & BARE),
                      bool(flags & LINKED))  # fmt: skip
            out.append((path, e))
    if len(out) != n:
        raise struct.error("short entries")
    return out, at


@dataclass(slots=True)
class Journal:
    """Where a reader stands: the snapshot's generation, and how many bytes of the journal
    it has applied (``whole``: the journal ends where its last record does)."""

    generation: int = 0
    applied: int = 0
    whole: bool = True
    foreign: int = 0  # records of another generation passed over by the last replay


def _snapshot(data: bytes) -> tuple[dict[bytes, Entry], float | None, int] | None:
    if not data.startswith(_MAGIC):
        return None
    try:
        synced_at, n, generation = _HEAD.unpack_from(data, len(_MAGIC))
        items, at = _unpack(data, len(_MAGIC) + _HEAD.size, n)
    except struct.error:
        return None
    entries = {p: e for p, e in items if e is not None}
    if at != len(data) or len(entries) != n:
        return None
    return entries, None if math.isnan(synced_at) else synced_at, generation


def replay(
    entries: MutableMapping[bytes, Any],
    synced_at: float | None,
    journal: bytes,
    at: Journal,
    *,
    keep_gone: bool = False,
) -> float | None:
    """Apply the journal's records after ``at.applied`` to ``entries`` (in place; a gone
    path is removed, or with ``keep_gone`` set to None: a mapping of changes); return
    ``synced_at`` as the last record applied says; ``at`` then stands after the last whole
    record."""
    off = at.applied
    at.foreign = 0
    while off + _RECORD.size <= len(journal):
        length, crc = _RECORD.unpack_from(journal, off)
        payload = journal[off + _RECORD.size : off + _RECORD.size + length]
        if len(payload) != length or zlib.crc32(payload) != crc:
            break  # torn (a crash mid-append): the journal ends here
        try:
            generation, when, n = _RECORD_HEAD.unpack_from(payload)
            items, end = _unpack(payload, _RECORD_HEAD.size, n)
        except struct.error:
            break
        if end != len(payload):
            break
        if generation == at.generation:  # (else: a journal an older snapshot left)
            for path, e in items:
                if e is None and not keep_gone:
                    entries.pop(path, None)
                else:
                    entries[path] = e
            synced_at = None if math.isnan(when) else when
        else:
            at.foreign += 1
        off += _RECORD.size + length
    at.applied = off
    at.whole = off == len(journal)
    return synced_at


def decode_state(
    data: bytes, journal: bytes = b"", at: Journal | None = None
) -> tuple[dict[bytes, Entry], float | None] | None:
    """The entries and ``synced_at`` of a snapshot's bytes with its journal applied; None
    when the snapshot is not whole. ``at`` (if given) is set to where the reader stands."""
    snap = _snapshot(data)
    if snap is None:
        return None
    entries, synced_at, generation = snap
    where = at if at is not None else Journal()
    where.generation, where.applied = generation, 0
    return entries, replay(entries, synced_at, journal, where)


def journal_room(snapshot_bytes: int) -> int:
    """How long a journal may grow beside a snapshot of this size."""
    return max(JOURNAL_MIN_BYTES, snapshot_bytes // 4)


def new_generation() -> int:
    return int.from_bytes(os.urandom(8), "little") or 1


def _beside(path: str) -> tuple[Beneath, bytes]:
    """The folder of ``path`` pinned (links never followed beneath it), and the file's name."""
    d, name = os.path.split(os.path.abspath(path))
    return Beneath.pin(d, symlinks="never", hides=False), os.fsencode(name)


def write_state(path: str, entries: dict[bytes, Entry], synced_at: float | None) -> None:
    """Write a snapshot atomically at ``path``, of a new generation (a journal beside it is
    then ignored). A convenience: indexes write theirs through their pinned folder."""
    fs, name = _beside(path)
    try:
        data = encode_state(entries, synced_at, new_generation())
        fs.atomic_write([name], data, mode=0o600)
    finally:
        fs.close()


def _snapshot_id(fs: Beneath) -> tuple[int, int, int] | None:
    try:
        st = fs.stat(STATE_FILE, follow=False)
    except (OSError, RootgrepError):
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def read_together(fs: Beneath) -> tuple[bytes | None, bytes]:
    """The snapshot's bytes (None: missing) and the journal's, from one index folder, read
    so that they belong together: a writer replaces the snapshot before it drops the
    journal, so the journal read is the snapshot's when the snapshot is still the same file
    after it (else both are read again, a few times at most)."""
    data, journal = None, b""
    for _ in range(8):
        before = _snapshot_id(fs)
        data = read_whole(fs, STATE_FILE.encode())
        if data is None:
            return None, b""
        journal = read_whole(fs, JOURNAL_FILE.encode()) or b""
        if before is not None and _snapshot_id(fs) == before:
            break
    return data, journal


def read_state(path: str) -> tuple[dict[bytes, Entry], float | None] | None:
    """The entries and ``synced_at`` of the snapshot at ``path`` with the journal beside it
    applied; None when the snapshot is missing or not whole."""
    try:
        fs, name = _beside(path)
    except OSError:
        return None
    try:
        if name == STATE_FILE.encode():
            data, journal = read_together(fs)
        else:  # (a snapshot under another name: no journal of its own)
            data, journal = read_whole(fs, name), b""
    finally:
        fs.close()
    return None if data is None else decode_state(data, journal)
