"""Index lifecycle per root: build in the background when a root becomes effective, watch it,
keep a dirty set that grep scans live, fold changes into the index, stop when it goes away.

The watcher (``watch.TreeWatcher``: inotify on the walked directories; ``watchfiles`` where
inotify cannot be used) only says *which* paths changed; every byte is still read beneath the
root's pinned fd. Paths reported outside the root are ignored.

Bounded resources: every root's watcher shares one inotify instance (one fd, one reader thread,
made on first need and closed with the last watcher); at most ``max_watched_roots`` roots are
watched at once (the process's own roots, owner 0, always are, uncounted), the others are
indexed unwatched (``stale``: grep scans them live) until next started. An index
lives while an owner holds it (the process for operator roots, a session for its roots) or,
for uses without an owner (``use``: per-call roots of 2026-07-28 clients, ``search``), until
``idle_seconds`` after its last use; one reaper thread, alive only while such indexes exist,
stops them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from .. import confine
from ..confine import Beneath, strip_prefix
from ..errors import IndexUnavailable, RootgrepError
from ..roots import Root
from ..walker import IGNORE_FILES, Walker
from .cache import CacheDir, default_cache_dir, folder_name, hide_if_present
from .store import RootIndex, first_line, prune_cache
from .sync import Progress, SyncStats
from .watch import Inotify, TreeWatcher
from .writer import WriterBusy

log = logging.getLogger("rootgrep.index")
State = Literal["off", "building", "ready", "stale"]
FLUSH_SECONDS = 1.0
TAKEOVER_SECONDS = 2.0  # how often a reader checks whether the writing process went away
IDLE_SECONDS = 60.0  # an index used without an owner is stopped this long after its last use
MAX_WATCHED_ROOTS = 64  # client roots watched at once per process; others indexed unwatched
TRANSIENT = -1  # the owner of uses without one (``IndexManager.use``)


def _no_room(e: BaseException) -> bool:
    """Whether tantivy's error is the disk's or the quota's being full (ENOSPC, EDQUOT)."""
    text = str(e)
    return any(s in text for s in ("No space left", "os error 28", "Disk quota", "os error 122"))


@dataclass
class Indexed:
    """One root's index and its background work."""

    root_path: bytes
    fs: Beneath  # the manager's own pin (a dup of the root's fd)
    identity: tuple[int, int] = (0, 0)  # (device, inode) of that directory
    index: RootIndex | None = None
    state: State = "building"
    error: str | None = None
    healed: bool = False  # its index was set aside and rebuilt once (``_healing``)
    dirty: set[bytes] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    built: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: set[object] = field(default_factory=set)  # owners, and views of nested roots
    listeners: list[Callable[[str], None]] = field(default_factory=list)
    role: Literal["writer", "reader"] = "writer"
    last_sync: SyncStats | None = None
    watching: threading.Event = field(default_factory=threading.Event)  # watches are in place
    watch_ok: bool = True  # False: changes may go unseen, so the index never answers grep
    folding: bool = True  # False: the fold loop died, so changes are no longer folded in
    rescan_at: float = 0.0  # when a full re-sync was last asked for (reader mode waits for one)
    rescan: threading.Event = field(default_factory=threading.Event)  # events were lost
    losses: int = 0  # how many times events were lost (a full re-sync covers those before it)
    marked: set[bytes] = field(default_factory=set)  # marks made since a fold began
    last_used: float = 0.0  # (monotonic) the last use without an owner began or ended
    busy: int = 0  # calls using it without an owner right now (never reaped meanwhile)
    watcher: TreeWatcher | None = None  # its watches in the shared inotify instance
    watch_slot: bool = False  # counts against max_watched_roots
    reaped: threading.Event = field(default_factory=threading.Event)  # stopped, all let go
    # a build's trigrams are committed (its words and symbols not yet): grep answers from the
    # index while the state still says "building" (``answers_grep``)
    grep_first: bool = False

    def answers_grep(self) -> bool:
        """Whether grep may answer from this index (with the dirty set): it is ready, or a
        build has committed its trigrams, with the watcher working and changes folded."""
        if self.state == "ready":
            return True
        return self.grep_first and self.state == "building" and self.watch_ok and self.folding

    def dirty_snapshot(self) -> set[bytes]:
        """The paths grep must read live rather than trust the index for: the changed ones
        the watcher named, and every indexed file with more than one name (a hard link from
        outside the root changes it where no watch of the root hears)."""
        with self.lock:
            dirty = set(self.dirty)
        index = self.index
        if index is not None and index.entries.linked:
            dirty |= index.entries.linked
        return dirty

    def answers_exactly(self) -> bool:
        """Whether the index plus the dirty set give grep's exact answer right now: no full
        re-sync is pending (events were lost) and no ignore-file edit waits to be folded
        (until then the index would still hold the files it now ignores)."""
        if self.rescan.is_set():
            return False
        with self.lock:
            return not any(p.rpartition(b"/")[2] in IGNORE_FILES for p in self.dirty)

    def catch_up(self) -> bool:
        """Before a query answers from this index: every change the kernel reported before
        now is in the dirty set (the shared reader may not have read it yet: a file written
        just before a grep would otherwise be missed). False when that could not be made
        sure: then grep scans live. (The ``watchfiles`` fallback has no such barrier: there
        it is best effort, a few milliseconds behind.)"""
        w = self.watcher
        if w is None:
            return True
        return w.inotify.drain() and w.deliver(wait=True)

    def lost_events(self) -> None:
        """Changes may have gone unheard: only a full re-sync that begins after now makes the
        index exact again (until it is done, grep scans live)."""
        with self.lock:
            self.losses += 1
            self.rescan_at = time.time()
        self.rescan.set()

    def mark(self, paths: set[bytes]) -> None:
        """The watcher saw these paths change: dirty until a fold that started after now."""
        with self.lock:
            self.dirty |= paths
            self.marked |= paths


@dataclass
class View:
    """A root nested in another root's index: its files are that index's files below
    ``prefix`` (so nested roots share one index, and a file is indexed once)."""

    outer: Indexed
    prefix: bytes  # the nested root's path relative to the outer root, '/'-joined
    identity: tuple[int, int]  # (device, inode) of the nested root's directory
    owners: set[int] = field(default_factory=set)

    @property
    def key(self) -> tuple[str, bytes]:
        """How the view counts among its outer index's users."""
        return ("view", self.prefix)


def shareable(outer: Beneath, comps: list[bytes], identity: tuple[int, int]) -> bool:
    """Whether the outer root's index holds exactly the files a walk of the nested root
    (at ``comps`` beneath it, the very directory ``identity`` names) would list: no hidden
    directory on the way, and no ignore file in the outer root or in a directory between
    the two (its rules would apply to one walk and not to the other)."""
    if not comps or any(c.startswith(b".") for c in comps):
        return False
    # (as the outer walk reaches it: a place reached only through a symlink holds nothing
    # in the outer index, since no walk follows links)
    if outer.identity_at(comps) != identity:
        return False
    for i in range(len(comps)):
        for name in IGNORE_FILES:
            try:
                outer.stat([*comps[:i], name], follow=False)
            except (OSError, RootgrepError):
                continue
            return False
    return True


class IndexManager:
    def __init__(
        self,
        cache_dir: str | None = None,
        *,
        enabled: bool = True,
        watch: bool = True,
        max_file_size: int | None = None,
        hold_writer: bool = False,
        cache_max_bytes: int | None = None,
        idle_seconds: float = IDLE_SECONDS,
        max_watched_roots: int = MAX_WATCHED_ROOTS,
    ) -> None:
        self.cache_dir = cache_dir or default_cache_dir()
        self.enabled = enabled
        self.watch = watch
        self.max_file_size = max_file_size
        self.hold_writer = hold_writer
        self.cache_max_bytes = cache_max_bytes
        # The cache dir is pinned once (refused if unsafe: CacheUnusable) and hidden from every
        # tool of this process while the manager lives (confine's hidden identities).
        self.cache: CacheDir | None = None
        self._hidden: tuple[int, int] | None = None
        if enabled:
            self.cache = CacheDir.open(self.cache_dir)
            self._hidden = confine.hide(self.cache.fd)
        else:  # (unused here, but other processes' indexes may be in it)
            self._hidden = hide_if_present(self.cache_dir)
        self._roots: dict[bytes, Indexed] = {}
        self._views: dict[bytes, View] = {}  # nested roots served by an outer root's index
        self._detached: list[Indexed] = []  # outer indexes only an ended view held: to stop
        self._lock = threading.Lock()
        self._builds = threading.Semaphore(1)  # one full build at a time: they compete for I/O
        self.idle_seconds = idle_seconds
        self.max_watched_roots = max_watched_roots
        self._inotify: Inotify | None = None  # shared by every root's watcher
        self._slots = 0  # roots watched now
        self._reaper: threading.Thread | None = None  # alive while uses without owner exist
        self._leaving: dict[bytes, Indexed] = {}  # stopped, still letting go (being reaped)
        # every index a thread of its own is reaping (``_stop`` without ``wait``): ``close``
        # waits for them too (a session's root released mid-build is one; ``_leaving`` names
        # only the newest per path)
        self._reaping: dict[int, Indexed] = {}  # (by id: an Indexed is not hashable)
        self._wake = threading.Event()
        self._closing = False

    # -- lifecycle ---------------------------------------------------------------------------

    def activate(
        self,
        root: Root,
        owner: int = 0,
        *,
        background: bool = True,
        listener: Callable[[str], None] | None = None,
    ) -> Indexed | None:
        """Start (or share) the index of a root that became effective for ``owner`` (0: the
        process itself, e.g. an operator root, kept for the process's life; else a client
        session, which releases it). ``listener`` hears the first build's progress, as short
        messages."""
        return self._activate(root, owner, background=background, listener=listener)

    def use(
        self, root: Root, *, listener: Callable[[str], None] | None = None, busy: bool = False
    ) -> Indexed | None:
        """Start (or share) the index of a root used without an owner (a per-call root, a
        ``search``): it stays until ``idle_seconds`` after its last use, or while an owner
        holds it. ``busy``: a call uses it until ``leave``, and it is never stopped meanwhile."""
        return self._activate(root, TRANSIENT, background=True, listener=listener, busy=busy)

    def leave(self, ix: Indexed) -> None:
        """A ``use(..., busy=True)`` ended: the idle time starts now."""
        with self._lock:
            ix.busy = max(0, ix.busy - 1)
            ix.last_used = time.monotonic()

    def _activate(
        self,
        root: Root,
        owner: int,
        *,
        background: bool,
        listener: Callable[[str], None] | None,
        busy: bool = False,
    ) -> Indexed | None:
        if not self.enabled:
            return None
        identity = root.fs.identity()
        stale: Indexed | None = None
        previous: Indexed | None = None
        with self._lock:
            ix = self._roots.get(root.path)
            if ix is not None and ix.identity != identity:
                # another directory now stands at this path (moved away and replaced, or
                # re-announced after a swap): the old index must not serve it
                stale = self._roots.pop(root.path)
                ix = None
            if ix is not None:
                ix.users.add(owner)
                self._used(ix, owner, busy)
                # (a session has one listener, which hears each message once)
                if listener is not None and not ix.built.is_set() and listener not in ix.listeners:
                    ix.listeners.append(listener)
                return ix
            if stale is not None:  # (whatever serves the root now: it lets go first)
                self._leaving[root.path] = stale
            view = self._share(root, identity)
            if view is not None:
                ix = view.outer
                if owner == TRANSIENT:  # (kept alive as a use of the outer index itself)
                    ix.users.add(TRANSIENT)
                else:
                    view.owners.add(owner)
                    ix.users.add(view.key)
                self._used(ix, owner, busy)
            else:
                fs = Beneath(
                    os.dup(root.fs.fd), root.path, aliases=root.fs.aliases,
                    symlinks=root.fs.symlinks, use_openat2=root.fs.use_openat2,
                )  # fmt: skip
                ix = Indexed(root.path, fs, identity=identity, users={owner})
                self._used(ix, owner, busy)
                if listener is not None:
                    ix.listeners.append(listener)
                self._roots[root.path] = ix
                previous = self._leaving.get(root.path)  # (it starts once that one let go)
            detached, self._detached = self._detached, []
        if stale is not None:  # (stopped also when a view of an outer index serves the root)
            log.info("%r names another directory now; its old index is dropped", root.path)
            self._stop(stale, wait=False)
        for unused in detached:
            self._stop(unused, wait=False)
        if view is not None:
            return ix
        t = threading.Thread(
            target=self._run_after, args=(previous, ix), name="rootgrep-index", daemon=True
        )
        ix.threads.append(t)
        if background:
            t.start()
        else:
            t.run()
        return ix

    def _used(self, ix: Indexed, owner: int, busy: bool) -> None:
        """(Under the lock.) A use without an owner: its idle time restarts; the reaper runs."""
        if owner != TRANSIENT:
            return
        ix.last_used = time.monotonic()
        ix.busy += busy
        if self._reaper is None and not self._closing:
            self._reaper = threading.Thread(
                target=self._reap_idle, name="rootgrep-idle-reaper", daemon=True
            )
            self._reaper.start()

    def release(self, root_path: bytes, owner: int = 0, *, wait: bool = False) -> None:
        """``owner`` no longer has this root; the last one out stops its index: the build and
        the watcher stop, the searcher is dropped, and the on-disk index is not used again
        before a full re-sync. (A use without an owner within ``idle_seconds`` keeps it.)"""
        with self._lock:
            key: object = owner
            view = self._views.get(root_path)
            # (a view and an index of its own may both stand at one path: another session
            # holds another directory there; each owner lets go of the one it holds)
            if view is not None and (owner in view.owners or root_path not in self._roots):
                view.owners.discard(owner)
                if view.owners:
                    return
                del self._views[root_path]
                root_path, key = view.outer.root_path, view.key
            ix = self._roots.get(root_path)
            if ix is None:
                return
            ix.users.discard(key)
            if ix.users:
                return
            del self._roots[root_path]
            self._leaving[root_path] = ix
        self._stop(ix, wait=wait)

    def _share(self, root: Root, identity: tuple[int, int]) -> View | None:
        """(Under the lock.) The view of an outer root's index that can serve ``root``: an
        existing one of the same directory, or a new one on the outermost active index
        that holds it exactly."""
        view = self._views.get(root.path)
        if view is not None and view.identity == identity and not view.outer.stop.is_set():
            if shareable(view.outer.fs, view.prefix.split(b"/"), identity):
                return view
            # the outer index no longer holds exactly its files (an ignore file appeared on
            # the way, a link, ...): the view ends, and the root gets an index of its own
            # (else it would be answered live, and never by search, for as long as it lasts)
            del self._views[root.path]
            outer = view.outer
            outer.users.discard(view.key)
            if not outer.users and self._roots.get(outer.root_path) is outer:
                del self._roots[outer.root_path]
                self._leaving[outer.root_path] = outer
                self._detached.append(outer)
        for outer in sorted(self._roots.values(), key=lambda o: len(o.root_path)):
            comps = strip_prefix(root.path, outer.root_path)
            if comps and not outer.stop.is_set() and shareable(outer.fs, comps, identity):
                view = View(outer, b"/".join(comps), identity)
                self._views[root.path] = view
                return view
        return None

    def lookup(self, root: Root) -> tuple[Indexed, bytes] | None:
        """The index that holds ``root``'s files now, and the root's place in it (``b""``:
        its own index): only one made from the very directory the root has pinned, and for
        a nested root only while the outer index still holds exactly its files."""
        try:
            identity = root.fs.identity()
        except OSError:
            return None
        ix = self._roots.get(root.path)
        if ix is not None:
            return (ix, b"") if ix.identity == identity else None
        view = self._views.get(root.path)
        if view is None or view.identity != identity or view.outer.stop.is_set():
            return None
        if not shareable(view.outer.fs, view.prefix.split(b"/"), identity):
            return None
        return view.outer, view.prefix

    def _stop(self, ix: Indexed, *, wait: bool) -> None:
        ix.stop.set()
        ix.state = "off"
        if wait:
            self._reap(ix)
        else:  # never block the caller (often the event loop): a thread waits for the work
            with self._lock:
                self._reaping[id(ix)] = ix
            threading.Thread(
                target=self._reap, args=(ix,), name="rootgrep-reap", daemon=True
            ).start()

    def _reap(self, ix: Indexed) -> None:
        try:
            for t in ix.threads:
                if t.is_alive() and t is not threading.current_thread():
                    t.join()
            self._stop_watching(ix)
            if ix.index is not None:
                ix.index.close()
            ix.index = None
            ix.fs.close()
        finally:
            with self._lock:
                if self._leaving.get(ix.root_path) is ix:
                    del self._leaving[ix.root_path]
                for path in [p for p, v in self._views.items() if v.outer is ix]:
                    del self._views[path]  # (its nested roots build their own next time)
                self._reaping.pop(id(ix), None)
            ix.reaped.set()

    def _run_after(self, previous: Indexed | None, ix: Indexed) -> None:
        """An index whose predecessor (same root, just stopped) is still letting go starts
        after it: its writer and watches are gone by then."""
        if previous is not None:
            previous.reaped.wait()
            if ix.stop.is_set():  # (stopped meanwhile, as ``_run`` ends when stopped: a
                return  # session that came and went; a chain of them kept close() waiting)
        self._run(ix)

    def _reap_idle(self) -> None:
        """Stop indexes whose last use without an owner is ``idle_seconds`` old (and that no
        owner holds). Runs while such uses exist; sleeps until the next one may expire."""
        while True:
            expired: list[Indexed] = []
            with self._lock:
                now = time.monotonic()
                waits: list[float] = []
                for ix in list(self._roots.values()):
                    if TRANSIENT not in ix.users:
                        continue
                    left = ix.last_used + self.idle_seconds - now
                    if ix.busy or left > 0:
                        waits.append(self.idle_seconds / 2 if ix.busy else left)
                        continue
                    ix.users.discard(TRANSIENT)
                    if not ix.users:
                        del self._roots[ix.root_path]
                        self._leaving[ix.root_path] = ix
                        expired.append(ix)
                done = not waits or self._closing
                if done:
                    self._reaper = None
            for ix in expired:  # (outside the lock: stopping waits for the index's threads)
                log.info("stopping the index of %r: unused for %.0f s", ix.root_path,
                         self.idle_seconds)  # fmt: skip
                self._stop(ix, wait=True)
            if done:
                return
            self._wake.wait(min(max(min(waits), 0.02), self.idle_seconds))
            self._wake.clear()

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._wake.set()
        for path in list(self._roots):
            with self._lock:
                ix = self._roots.get(path)
                if ix is None:
                    continue
                ix.users = {0}
            self.release(path, 0, wait=True)
        with self._lock:
            reaping = list(self._reaping.values())
        for ix in reaping:  # (stopped before: their builds let go before this returns)
            ix.reaped.wait()
        self._views.clear()
        if self._hidden is not None:
            confine.unhide(self._hidden)
            self._hidden = None
        reaper = self._reaper
        if reaper is not None and reaper is not threading.current_thread():
            reaper.join()

    def prune(self) -> list[str]:
        """Keep the cache under ``cache_max_bytes``, evicting unused indexes, LRU first:
        never one of this process's roots (building, active, or still being reaped), and
        never one any process holds open (the folder's lock, see ``cache.py``)."""
        if self.cache_max_bytes is None or self.cache is None:
            return []
        with self._lock:
            keep = {folder_name(p) for p in self._roots}
        evicted = prune_cache(self.cache, self.cache_max_bytes, keep)
        for d in evicted:
            log.info("evicted the index in %s (cache over --cache-max-bytes)", d)
        return evicted

    def get(self, root_path: bytes) -> Indexed | None:
        return self._roots.get(root_path)

    # -- background work ---------------------------------------------------------------------

    def _run(self, ix: Indexed) -> None:
        shown = os.fsdecode(ix.root_path)

        def tell(message: str) -> None:
            for listen in list(ix.listeners):
                try:
                    listen(message)
                except Exception:  # a listener that went away must not stop the build
                    ix.listeners.remove(listen)

        def progress(done: int, _total: int | None, _message: str) -> None:
            tell(f"indexing {shown}: {done} files examined")

        try:
            index = ix.index = self._open_index(ix)
            if self.watch:
                w = threading.Thread(
                    target=self._watch, args=(ix,), name="rootgrep-watch", daemon=True
                )
                ix.threads.append(w)
                w.start()
                # the build walks after the watches exist, so no change falls between the two
                ix.watching.wait(60)
            while not ix.stop.is_set():
                try:
                    if index.writer_busy():
                        raise WriterBusy("another process writes this index")

                    def grep_ready() -> None:
                        # (its trigrams committed: grep answers from the index while the
                        # build commits the files' words and symbols; "building" until then)
                        ix.grep_first = self.watch  # (unwatched, changes would go unseen)
                        tell(f"indexing {shown}: grep uses the index now; adding words and symbols")

                    with self._builds:
                        if ix.stop.is_set():
                            return
                        ix.role = "writer"
                        ix.last_sync = self._healing(
                            ix, index, None, progress=progress, grep_ready=grep_ready
                        )
                    if ix.stop.is_set():
                        return
                    ix.state = self._fresh(ix)
                    ix.grep_first = False
                    if ix.last_sync is not None:
                        st = ix.last_sync
                        tell(f"index of {shown} ready: {st.files} files ({st.read} read, "
                             f"{st.elapsed_ms / 1000:.1f} s)")  # fmt: skip
                    ix.listeners.clear()
                    ix.built.set()
                    self.prune()
                    while self.watch and not ix.stop.wait(FLUSH_SECONDS):
                        self.flush(ix)
                    return
                except WriterBusy:  # another process (a daemon) writes this index: follow
                    if not self._follow(ix, index):
                        return
                    log.info("the writer of the index of %r went away; taking over", shown)
        except Exception as e:  # an index is an optimisation: grep falls back to live
            ix.error = f"{type(e).__name__}: {first_line(e)}"
            log.warning("indexing %r failed: %s", ix.root_path, ix.error)
            ix.folding = False  # (nothing folds changes in any more: never "ready" again)
            ix.state = "off"
            ix.built.set()

    def _follow(self, ix: Indexed, index: RootIndex) -> bool:
        """Reader mode: reload the other process's commits; a dirty file stays dirty (scanned
        live) until a reloaded state shows it indexed as it is now. Returns True when the
        writer went away (this process then takes over), False when stopped."""
        ix.role = "reader"
        probe = time.monotonic() + TAKEOVER_SECONDS
        while not ix.stop.is_set():
            if time.monotonic() >= probe:
                probe = time.monotonic() + TAKEOVER_SECONDS
                if not index.writer_busy():
                    return True
            index.reload()
            if index.foreign:  # its writer now indexes another directory: never answer
                ix.state = "off"
                ix.error = "another process indexes a different directory at this path"
                ix.built.set()
                return False
            if ix.rescan.is_set() and (index.synced_at or 0.0) > ix.rescan_at:
                ix.rescan.clear()  # the writer has re-synced in full since events were lost
            if index.complete:
                ix.state = self._fresh(ix)
                ix.grep_first = False
                ix.built.set()
            elif index.ready:  # (the writer's build has committed its trigrams: grep may
                ix.grep_first = self.watch  # answer; words and symbols to come)
            elif ix.state in ("ready", "stale"):  # the writer emptied it to rebuild: not yet
                ix.state = "building"
                ix.grep_first = False
            else:
                ix.grep_first = False
            with ix.lock:
                pending = set(ix.dirty)
                ix.marked.clear()
            # (a directory or an unlisted file is never a grep candidate: it can go too)
            walked = Walker(ix.fs).listed(pending)
            done = {p for p in pending if p not in walked or index.is_current(ix.fs, p)}
            with ix.lock:
                ix.dirty -= done - ix.marked
            if ix.stop.wait(FLUSH_SECONDS / 2):
                return False
        return False

    def flush(self, ix: Indexed) -> SyncStats | None:
        """Fold the dirty files into the index; they stay dirty (scanned live) until then.
        After the watcher lost events, a full re-sync."""
        if ix.index is None:
            return None
        if ix.rescan.is_set():
            log.info("re-syncing %r in full: the watcher lost events", ix.root_path)
            return self._fold(ix, ix.index, full=True)
        if not ix.dirty:
            return None
        return self._fold(ix, ix.index, full=False)

    @staticmethod
    def _fold(
        ix: Indexed, index: RootIndex, *, full: bool, progress: Progress | None = None
    ) -> SyncStats:
        """Sync the dirty paths (or, ``full``, the whole tree), then forget the marks it
        covered. A path marked again while the sync runs stays dirty: the sync may have read
        it before that change."""
        with ix.lock:
            pending = set(ix.dirty)
            ix.marked.clear()
            losses = ix.losses
        stats = IndexManager._healing(ix, index, None if full else pending, progress=progress)
        with ix.lock:
            ix.dirty -= pending - ix.marked
            if full and ix.losses == losses:  # (not before it is done: grep would trust the
                ix.rescan.clear()  # index meanwhile; nor if events were lost again since)
        return stats

    @staticmethod
    def _healing(
        ix: Indexed,
        index: RootIndex,
        only: set[bytes] | None,
        *,
        progress: Progress | None = None,
        grep_ready: Callable[[], None] | None = None,
    ) -> SyncStats:
        """``index.sync`` (of ``only``, or of the whole tree); an index found damaged by it
        (tantivy's ``ValueError``: a ``meta.json`` torn since it opened, a segment a commit
        cannot read) is set aside and rebuilt in full, once in the root's life (damage
        again, or a bug, then leaves the root off, as before: grep scans live)."""
        try:
            return index.sync(
                ix.fs, only=only, progress=progress, cancelled=ix.stop.is_set,
                grep_ready=grep_ready,
            )  # fmt: skip
        except ValueError as e:
            if ix.healed or _no_room(e):  # (a full disk is not damage: rebuilding needs room)
                raise
            ix.healed = True
            index.rebuild(e)
        before, ix.state, ix.grep_first = ix.state, "building", False
        stats = index.sync(
            ix.fs, progress=progress, cancelled=ix.stop.is_set, grep_ready=grep_ready
        )
        if before in ("ready", "stale"):  # (a fold's: built again, as it was)
            ix.state = before
        return stats

    def _open_index(self, ix: Indexed) -> RootIndex:
        """The root's index opened (made when missing; set aside and made again when it does
        not open: ``RootIndex._open``)."""
        kw: dict[str, Any] = {"cache": self.cache, "identity": ix.identity}
        if self.max_file_size:
            kw["max_file_size"] = self.max_file_size
        try:
            return RootIndex(self.cache_dir, ix.root_path, hold_writer=self.hold_writer, **kw)
        except WriterBusy:
            return RootIndex(self.cache_dir, ix.root_path, **kw)

    def _fresh(self, ix: Indexed) -> State:
        """The state of a built index: ready only while a working watcher keeps it fresh."""
        return "ready" if self.watch and ix.watch_ok and ix.folding else "stale"

    def _watch(self, ix: Indexed) -> None:
        """Put the root's watches in place (the shared instance's reader hears them from then
        on), or watch with watchfiles in this thread where inotify cannot be used."""
        try:
            with self._lock:  # (the process's own roots are always watched, uncounted)
                full = 0 not in ix.users and self._slots >= self.max_watched_roots
                if not full and 0 not in ix.users:
                    self._slots += 1
                    ix.watch_slot = True
            if full:
                log.warning("not watching %r: %d roots are watched already (the cap); its index "
                            "is stale and grep scans it live", ix.root_path,
                            self.max_watched_roots)  # fmt: skip
                self._unwatched(ix)
                return
            try:
                self._watch_with_inotify(ix)
            except OSError as e:  # no inotify, or no /proc to reach a directory fd through
                self._stop_watching(ix, keep_slot=True)
                log.info("inotify unusable (%s); watching %r with watchfiles", e, ix.root_path)
                self._watch_with_watchfiles(ix)
        except Exception as e:
            log.warning("watching %r stopped: %r; its index is now stale", ix.root_path, e)
            self._unwatched(ix)
            self._stop_watching(ix)
        finally:
            ix.watching.set()  # (also when watching failed: the build must not wait for it)

    def _unwatched(self, ix: Indexed) -> None:
        """Changes may go unseen from now on: grep scans live (``search`` still answers)."""
        ix.watch_ok = False
        if ix.state == "ready":
            ix.state = "stale"

    def _watch_with_inotify(self, ix: Indexed) -> None:
        """Watch the root in the process's shared inotify instance: its reader routes each
        event by watch descriptor to this root's watcher, and ``_heard`` marks the paths."""
        with self._lock:
            if self._inotify is None:
                self._inotify = Inotify()
                self._inotify.start()
            w = ix.watcher = TreeWatcher(ix.fs, self._inotify, sink=partial(self._heard, ix))
        if ix.stop.is_set():
            return
        w.add(b"")
        if w.incomplete:
            self._heard(ix, set(), False)

    def _heard(self, ix: Indexed, marks: set[bytes], lost: bool) -> None:
        """(The shared reader's thread.) What the root's watcher saw since the last batch."""
        w = ix.watcher
        if w is None:
            return
        if w.incomplete:  # out of watches: it gave its watches back; the index turns stale
            self._unwatched(ix)
            self._stop_watching(ix)
            return
        if lost:  # (the watcher has re-made its watches)
            ix.lost_events()
        if marks:
            ix.mark(marks)

    def _stop_watching(self, ix: Indexed, *, keep_slot: bool = False) -> None:
        """Give back the root's watches and (unless ``keep_slot``) its slot; the last watcher
        closes the shared instance (its fd and its thread)."""
        with self._lock:
            w, ix.watcher = ix.watcher, None
        if w is not None:
            w.close()
        with self._lock:
            if ix.watch_slot and not keep_slot:
                ix.watch_slot = False
                self._slots -= 1
            idle = self._inotify
            if idle is None or idle.watchers:
                idle = None
            else:
                self._inotify = None
        if idle is not None:
            idle.close()

    def _watch_with_watchfiles(self, ix: Indexed) -> None:
        from watchfiles import watch

        ix.watching.set()
        for changes in watch(
            os.fsdecode(ix.root_path), stop_event=ix.stop, debounce=10, step=5,
            yield_on_timeout=False, raise_interrupt=False, watch_filter=None,
        ):  # fmt: skip
            marks: set[bytes] = set()
            for _change, path in changes:
                rel = strip_prefix(os.fsencode(path), ix.root_path)
                if rel:
                    marks.add(b"/".join(rel))
            # it names paths, not what they are: a directory that appeared (its files were
            # not named) or an edited ignore file ask for a full re-sync
            if any(p.rpartition(b"/")[2] in IGNORE_FILES for p in marks) or Walker(ix.fs).listed(
                marks, kind="dir"
            ):
                ix.lost_events()
            ix.mark(marks)

    def wait_built(self, root_path: bytes, timeout: float | None = None) -> bool:
        ix = self._roots.get(root_path)
        return ix is not None and ix.built.wait(timeout)

    def wait_answering(self, root_path: bytes, given_up: threading.Event | None = None) -> None:
        """Until the root's index answers grep (its build's trigrams committed) or its build
        ended (built, failed or stopped), or ``given_up`` is set (a daemon's Ctrl-C)."""
        ix = self._roots.get(root_path)
        while ix is not None and not ix.built.wait(0.05) and not ix.grep_first:
            if ix.stop.is_set() or (given_up is not None and given_up.is_set()):
                return  # (stopped before either: nothing to wait for)

    def reindex(
        self, root: Root, progress: Callable[[int, int | None, str], None] | None = None
    ) -> SyncStats:
        """A full sync now (creating the index if needed), reporting progress. The call
        uses the index without owning it (``use``): one it creates, or one whose owners let
        it go, stops ``idle_seconds`` after the call, and it is always the index of the very
        directory ``root`` pins (a nested root's: its outer root's index, re-synced)."""
        ix = self.use(root, busy=True)
        if ix is None:
            raise IndexUnavailable("indexing is off (--no-index); grep still works, live")
        try:
            return self._reindex(ix, progress)
        finally:
            self.leave(ix)

    def _reindex(
        self, ix: Indexed, progress: Callable[[int, int | None, str], None] | None
    ) -> SyncStats:
        deadline = time.monotonic() + 3600
        while ix.index is None and time.monotonic() < deadline and ix.state != "off":
            time.sleep(0.01)
        if ix.index is None and ix.state == "off":  # (its opening failed: tried again)
            try:
                ix.index = self._open_index(ix)
            except Exception as e:
                ix.error = f"{type(e).__name__}: {first_line(e)}"
        if ix.index is None:
            raise IndexUnavailable(
                f"the index could not be opened ({ix.error or 'unknown'}); check that the cache "
                "dir (--cache-dir) is writable and not full, then call reindex again"
            )
        ix.healed = False  # (a reindex always may set a damaged index aside and rebuild it)
        try:
            stats = self._fold(ix, ix.index, full=True, progress=progress)
        except WriterBusy:
            raise IndexUnavailable(
                "another process (rootgrep daemon) is writing this index; it keeps it fresh"
            ) from None
        ix.state, ix.error = self._fresh(ix), None
        ix.built.set()
        return stats
