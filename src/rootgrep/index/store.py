"""One root's Tantivy index (``RootIndex``): its folder, opened (made, or made again when
missing, damaged or of another directory), its manifest, and the views of its state.

Layout (one folder per root and schema version under the cache dir, named by a hash of the
root's canonical path and the version: ``names.folder_name``):
``manifest.json`` (schema version, root path), ``tantivy/`` (the index), ``state.bin`` (what
each indexed file's (size, mtime_ns, inode) and file id were; a compact binary file, since it
is rewritten at every commit and read by every process that follows the index). A file's id
(``fid``, a fast field) maps a hit back to its path without fetching stored documents.

The class is made of parts, one module each: ``sync.py`` (a sync and the commit protocol:
crash safety), ``completing.py`` (a build's second commit, words and symbols), ``writer.py``
(the writer and its lock), ``scan.py`` (what a sync walks and stats), ``state_io.py`` (the
state files read, followed and written), ``trigrams.py`` (grep's candidates),
``ranking.py`` (ranked search) and ``symbol_search.py`` (symbol lookups); the fields and a
file's documents are ``fields.py``'s.

The store knows nothing of MCP; it reads files only through the walker and the confinement
module, and reaches its own files only beneath the pinned cache dir (``cache.py``: fd-relative,
never through a link, each folder locked shared while it is open so eviction skips it).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from tantivy import Index

from ..confine import Beneath, display
from ..errors import RootgrepError
from ..grep import DEFAULT_MAX_FILE_SIZE
from . import cache as cache_mod
from . import names
from .cache import OPEN_LOCK, CachedIndex, CacheDir, IndexFolder
from .completing import Completing
from .fields import build_schema, register_tokenizers
from .ranking import RankedSearch
from .scan import TreeScan
from .state import JOURNAL_FILE, STATE_FILE, Entries, Entry, Layered
from .state_io import StateFiles
from .symbol_search import SymbolSearch
from .sync import Syncing
from .trigrams import TrigramSearch
from .writer import WriterBusy, Writers

log = logging.getLogger("rootgrep.index")


def index_dir_for(cache_dir: str, root_path: bytes) -> str:
    """Where a root's index folder is (a name, for messages and tests: never opened by it)."""
    return os.path.join(os.path.abspath(cache_dir), cache_mod.folder_name(root_path))


def _dir_bytes(d: str) -> int:
    """The bytes of the files below folder ``d`` (pinned, then fd-relative, links unfollowed)."""
    fs = Beneath.pin(d, symlinks="never", hides=False)
    try:
        return cache_mod.tree_bytes(fs.fd)
    finally:
        fs.close()


def _cache(cache_dir: str | CacheDir) -> tuple[CacheDir, bool]:
    """The pinned cache dir, and whether it was pinned here (then the caller closes it)."""
    if isinstance(cache_dir, CacheDir):
        return cache_dir, False
    return CacheDir.open(cache_dir), True


def cached_indexes(cache_dir: str | CacheDir) -> list[CachedIndex]:
    """Every index folder in the cache (a folder with a readable manifest)."""
    cache, own = _cache(cache_dir)
    try:
        return cache.entries()
    finally:
        if own:
            cache.close()


def prune_cache(cache_dir: str | CacheDir, max_bytes: int, keep: set[str]) -> list[str]:
    """Evict the least recently used indexes until the cache holds at most ``max_bytes``;
    indexes in ``keep`` (folder paths or names in use here) and indexes any process holds
    open are never evicted. Returns the evicted folders."""
    cache, own = _cache(cache_dir)
    try:
        return cache_mod.prune(cache, max_bytes, keep)
    finally:
        if own:
            cache.close()


class ForeignIndex(Exception):
    """The index at a root's path was built from another directory, and another process
    writes it: this process must not answer from it."""


def first_line(e: BaseException, limit: int = 200) -> str:
    """An error as one short line (tantivy's quote a whole ``meta.json``: cut before it)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = text.split(" Content:", 1)[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Damaged(Exception):
    """The tantivy folder does not open (a torn ``meta.json``, a segment that is not whole):
    set aside and made again (``RootIndex._open``)."""


def paths_by_fid(entries: dict[bytes, Entry]) -> dict[int, bytes]:
    """Each indexed file's path by its id; raises ``IndexCorrupt`` when two paths share one."""
    return dict(Entries(entries).paths)


@dataclass
class RootIndex(
    Syncing,
    Completing,
    Writers,
    TreeScan,
    StateFiles,
    TrigramSearch,
    RankedSearch,
    SymbolSearch,
):
    """One root's index. Thread-safe for readers; one sync at a time (and one writer per
    index across processes, by Tantivy's lock). Each part keeps its own fields (the walks'
    kept runs, the state files' stamps, ...); these are the ones every part reads."""

    cache_dir: str
    root_path: bytes
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    hold_writer: bool = False  # a daemon keeps the writer (and its lock) for its whole life
    cache: CacheDir | None = None  # the pinned cache dir (None: pinned here from cache_dir)
    dir: str = field(init=False)
    folder: IndexFolder = field(init=False, repr=False)
    _own_cache: bool = field(init=False, default=False, repr=False)
    _tantivy_path: str = field(init=False, default="", repr=False)
    index: Index = field(init=False)
    schema: object = field(init=False)
    # one version of each (a new one per commit, never changed in place; swapped together
    # under ``_lock``): ``paths`` is ``entries.paths``
    entries: Entries = field(init=False, default_factory=Entries)
    paths: Layered[int, bytes] = field(init=False, default_factory=Layered)
    next_fid: int = field(init=False, default=1)
    synced_at: float | None = field(init=False, default=None)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)  # state swaps
    _sync_lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    identity: tuple[int, int] | None = None  # (device, inode) of the pinned root directory
    corrupt: bool = field(init=False, default=False)  # the state broke an invariant
    foreign: bool = field(init=False, default=False)  # its writer indexes another directory
    _writer: Any = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.cache is None:
            self.cache, self._own_cache = CacheDir.open(self.cache_dir), True
        try:
            # pinned beneath the cache fd, never through a link; locked shared until close
            folder = self.cache.open_index(self.root_path)
            assert folder is not None  # (made when missing)
            self.folder = folder
        except BaseException:
            self._close_cache()
            raise
        try:
            self._open()
        except BaseException:
            self.folder.close()
            self._close_cache()
            raise
        self._evict_older()

    def _evict_older(self) -> None:
        """Remove this root's index folders of older schemas that no process holds (an older
        rootgrep's daemon still running keeps its own: see ``CacheDir.evict_older``)."""
        assert self.cache is not None
        try:
            gone = self.cache.evict_older(self.root_path, names.SCHEMA_VERSION)
        except (OSError, RootgrepError) as e:  # (the cache listing: left to the LRU prune)
            log.warning("index of %r: older versions' folders not removed: %s", self.dir, e)
            return
        for d in gone:
            log.info("removed %s, the index of an older rootgrep version", d)

    def _open(self) -> None:
        self.dir = self.folder.path
        self.schema = build_schema()
        made = self._made()
        try:
            if made:
                self._open_made()
            else:  # another process may be making it at this moment: one at a time (else
                with self.folder.exclusive(OPEN_LOCK):  # one removes what the other made)
                    self._open_made()
        except _Damaged as e:  # set aside and made again, once (a second failure is raised)
            cause = e.__cause__ or e
            with self.folder.exclusive(OPEN_LOCK), self.folder.writer_lock("tantivy") as mine:
                # (another process writes it: its merge may have moved a segment under this
                # open; never set aside what someone writes)
                if not mine:
                    raise cause from None
                self._set_aside(first_line(cause))
            self._open_made_locked()
        if self.hold_writer:
            self._writer = self._new_writer()

    def _made(self) -> bool:
        """Whether the index is there, for this schema and root (then opening it makes
        nothing, and needs no lock)."""
        if not self._manifest_ok():
            return False
        try:
            self.folder.fs.stat([b"tantivy", b"meta.json"], follow=False)
        except (OSError, RootgrepError):
            return False
        return True

    def _open_made_locked(self) -> None:
        with self.folder.exclusive(OPEN_LOCK):
            self._open_made()

    def _open_made(self) -> None:
        """Open the index, made (or made again) first when missing or stale."""
        stale = not self._manifest_ok()
        if stale:
            self.folder.remove("tantivy")
            for old in (STATE_FILE, JOURNAL_FILE, "state.json"):  # (1 and 2: JSON)
                self.folder.remove(old)
        # tantivy opens by path (see cache.py): the folder's own, checked against its fd
        self._tantivy_path, fresh = self.folder.subdir_path("tantivy")
        if fresh:  # (a state naming documents of an index that is not there would lie)
            self.folder.remove(STATE_FILE)
            self.folder.remove(JOURNAL_FILE)
        fresh = fresh or stale
        try:
            self.index = Index(self.schema, path=self._tantivy_path, reuse=True)
        except ValueError as e:  # (a torn meta.json, a segment whose footer is not whole)
            raise _Damaged("it does not open") from e
        # searchers move only with ``reload`` (under the lock, with the state that names the
        # documents: a file id is only ever read with the state it belongs to), never on
        # their own as a commit (this process's or another's) lands
        self.index.config_reader(reload_policy="Manual")
        register_tokenizers(self.index)  # (not persisted: on every open)
        stamp = self._stamp()  # (taken before the read: never newer than it)
        self._load_state()
        self._state_stamp = stamp
        bound = self._bound_identity()
        if self.identity is not None and not fresh and bound != self.identity:
            # the index describes another directory once found at this path (moved away,
            # replaced): never answer from it; empty it, or leave it to the process writing it
            with self._sync_lock:
                try:
                    self._reset()
                except WriterBusy:
                    raise ForeignIndex(
                        "another process indexes a different directory at this path"
                    ) from None
            log.warning("the index of %r was made for another directory; rebuilding", self.dir)
        if fresh or bound != self.identity:
            self._write_manifest()
        self.touch()

    def _close_cache(self) -> None:
        if self._own_cache and self.cache is not None:
            self.cache.close()

    def _read_manifest(self) -> dict[str, Any] | None:
        return self.folder.read_json("manifest.json")

    def _manifest_ok(self) -> bool:
        m = self._read_manifest()
        if m is None:
            return False
        schema = names.SCHEMA_VERSION
        return m.get("schema_version") == schema and m.get("root") == _b64(self.root_path)

    def _bound_identity(self) -> tuple[int, int] | None:
        """(device, inode) of the directory the index was built from, from its manifest."""
        m = self._read_manifest() or {}
        dev, ino = m.get("root_dev"), m.get("root_ino")
        return (dev, ino) if isinstance(dev, int) and isinstance(ino, int) else None

    def _write_manifest(self, **extra: object) -> None:
        """The manifest: schema version and root (and the device and inode of the directory
        the index is made from), plus ``extra`` fields (JSON values)."""
        manifest: dict[str, object] = {
            "schema_version": names.SCHEMA_VERSION,
            "root": _b64(self.root_path),
            "root_display": display(self.root_path),
        }
        if self.identity is not None:
            manifest["root_dev"], manifest["root_ino"] = self.identity
        manifest.update(extra)
        self.folder.write("manifest.json", json.dumps(manifest, separators=(",", ":")).encode())

    def _set_aside(self, why: str) -> None:
        """The tantivy folder moved aside (``tantivy.broken``) with the state naming its
        documents, so that the next open makes an empty index (under ``OPEN_LOCK``)."""
        aside = self.folder.set_aside("tantivy")
        for name in (STATE_FILE, JOURNAL_FILE):
            self.folder.remove(name)
        log.warning("the index in %s is damaged (%s); moved aside as %s and rebuilt from the "
                    "files", self.dir, why, aside)  # fmt: skip

    def rebuild(self, why: BaseException) -> None:
        """Set the index aside and start again empty (the next sync rebuilds it in full):
        for damage found after it opened (a ``meta.json`` torn since, a segment a commit
        cannot read). A held writer is let go first; searchers already taken keep reading
        the old files."""
        with self._sync_lock:
            if self._writer is not None:
                with contextlib.suppress(ValueError):
                    self._writer.rollback()
                with contextlib.suppress(ValueError):  # (its lock let go now, not at a GC)
                    self._writer.wait_merging_threads()
                self._writer = None
            self._let_carried_go()
            with self.folder.exclusive(OPEN_LOCK):
                with self.folder.writer_lock("tantivy") as mine:
                    if not mine:  # (another process writes it now: not this one's to drop)
                        raise why
                    self._set_aside(first_line(why))
                with self._lock:
                    self._open_made()
            self.corrupt = False
            if self.hold_writer:
                self._writer = self._new_writer()

    def is_current(self, fs: Beneath, rel: bytes) -> bool:
        """Whether the index holds ``rel`` as it is on disk now (or rightly lacks it)."""
        entry = self.entries.get(rel)
        try:
            st = fs.stat(rel, follow=False)
        except Exception:
            return entry is None
        return (
            entry is not None
            and not entry.pending
            and entry.key == (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
        )

    @property
    def ready(self) -> bool:
        """Synced in full at least once, and no entry pending. Asked by every indexed grep:
        the pending count is kept with each version of ``entries``."""
        return self.synced_at is not None and not self.entries.pending

    @property
    def complete(self) -> bool:
        """``ready``, and every file's words and symbols committed too (none ``bare``): only
        then do ``rank`` and ``find_symbols`` see every indexed file."""
        return self.ready and not self.entries.bare

    def bare_paths(self) -> list[bytes]:
        """The files committed for grep only (``Entry.bare``): their words and symbols are
        not in the index yet. One pass over the entries when there are any."""
        entries = self.entries
        return [p for p, e in entries.items() if e.bare] if entries.bare else []

    @property
    def size_bytes(self) -> int:
        return self.entries.bytes

    @property
    def file_count(self) -> int:
        return self.entries.files

    def count_below(self, place: bytes) -> tuple[int, int]:
        """(files, bytes of text) of the indexed files below ``place`` (a directory)."""
        below = place + b"/"
        sizes = [e.size for p, e in self.entries.items() if e.fid and p.startswith(below)]
        return len(sizes), sum(sizes)

    def touch(self) -> None:
        """Mark the index as used now (the cache evicts the least recently used first)."""
        self.folder.touch("last_used")

    def close(self) -> None:
        """Release a held writer (its lock) after its merges finish, then the folder's lock
        (from then on the cache may evict it)."""
        with self._sync_lock:
            if self._writer is not None:
                self._writer.wait_merging_threads()
                self._writer = None
            self.folder.close()
            self._close_cache()


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()
