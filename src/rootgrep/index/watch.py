"""Change notification for an indexed root: inotify on every directory the index walks.

It asks only for changes (writes, attribute changes, creations, deletions, moves), never for
opens, reads or closes. A watcher that hears those (watchfiles' does) charges every file that
grep or a sync reads with an event that another thread must take and drop: measured, that cost
about 20% of an indexed grep over 32k files on 2 cores, and doubled the CPU of an open-read-close.

Events only name paths to look at again: nothing is read here, and every byte is still read
beneath the root's pinned fd. Directories are watched through their confined fds, never by a
path. A directory that appears (created, or moved in) is walked at once, so files made in it
before its watch existed are not missed; one that goes away is reported so that the index can
drop everything below it. A queue overflow asks for a full re-sync.

One ``Inotify`` instance (one fd, one reader thread) serves every root of a process: the user's
inotify instances are few (fs.inotify.max_user_instances, often 128), so one per root let one
client starve every other process of the user.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import struct
import threading
import time
from collections.abc import Callable

from .. import confine
from ..confine import Beneath
from ..errors import RootgrepError
from ..walker import IGNORE_FILES, Walker

log = logging.getLogger("rootgrep.index")

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_ISDIR = 0x40000000
MASK = (
    IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
    | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
)  # fmt: skip
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)
DEBOUNCE_SECONDS = 0.01  # after the first event, gather what follows this closely
MAX_GATHER_SECONDS = 0.1  # but never longer (a file written without pause must not hold us)
POLL_SECONDS = 0.05  # a shared instance's reader looks at its stop flag this often
DRAIN_READS = 64  # reads of up to 64 KiB a query's catch-up makes at most (then: live grep)
DELIVER_WAIT_SECONDS = 1.0  # how long a query's catch-up waits for a running walk of its root


class Inotify:
    """One inotify instance (one fd) shared by the TreeWatchers of many roots.

    Each watch descriptor is routed to every watcher that watches its directory: nested roots
    watch some directories twice, which the kernel gives one descriptor (and one watch), so a
    descriptor is removed only when its last watcher lets go. A shared instance is read by one
    thread for all its watchers (``start``); a private one by its only watcher's ``poll``.
    A queue overflow loses events of every root: each of its watchers then reports it.
    """

    def __init__(self) -> None:
        self.fd = confine.inotify_open()
        self.lock = threading.Lock()  # routes, and each watcher's directories
        # held over each read of the fd and the routing of what it gave: whoever waits for it
        # knows every event the kernel had queued before is routed (see ``drain``)
        self.read_lock = threading.Lock()
        self.routes: dict[int, dict[TreeWatcher, bytes]] = {}  # wd -> watcher -> directory
        self.watchers: list[TreeWatcher] = []
        self.events = 0  # raw events read
        # the mount table as last compared (a mount inside a root makes no inotify event);
        # held over a whole look: a query's look that finds the table already taken by the
        # reader's returns only once the reader has told the watchers
        self._mounts_lock = threading.Lock()
        self._mount_generation, self._mounts = confine.refresh_mounts()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- watches -------------------------------------------------------------------------------

    def attach(self, w: TreeWatcher) -> None:
        with self.lock:
            self.watchers.append(w)

    def detach(self, w: TreeWatcher) -> int:
        """Forget ``w`` (its watches must be gone); how many watchers remain."""
        with self.lock:
            if w in self.watchers:
                self.watchers.remove(w)
            return len(self.watchers)

    def watch(self, w: TreeWatcher, dirfd: int, drel: bytes) -> bool:
        """Watch the directory ``dirfd`` holds for ``w`` under the name ``drel``; False when
        ``w`` already watches it (a directory seen under two names keeps its first)."""
        with self.lock:  # (held over the syscall: no event of the new watch goes unrouted)
            wd = confine.inotify_watch_dir(self.fd, dirfd, MASK)
            users = self.routes.setdefault(wd, {})
            if w in users:
                return False
            users[w] = drel
            w._dirs[wd] = drel
            return True

    def unwatch(self, w: TreeWatcher, wd: int) -> None:
        with self.lock:
            w._dirs.pop(wd, None)
            users = self.routes.get(wd)
            if users is None or users.pop(w, None) is None or users:
                return
            del self.routes[wd]
            confine.inotify_unwatch(self.fd, wd)

    # -- events --------------------------------------------------------------------------------

    def read(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for events and route them to their watchers. Once
        events come, what follows within ``DEBOUNCE_SECONDS`` joins them, for at most
        ``MAX_GATHER_SECONDS``."""
        p = select.poll()
        p.register(self.fd, select.POLLIN)
        wait = timeout
        deadline: float | None = None
        while p.poll(wait * 1000):
            if not self._read_once():
                break
            now = time.monotonic()
            if deadline is None:
                deadline = now + MAX_GATHER_SECONDS
            if now >= deadline:
                break
            wait = min(DEBOUNCE_SECONDS, deadline - now)
        self.check_mounts()

    def check_mounts(self) -> None:
        """Whether something was mounted or unmounted beneath a watcher's root since the last
        look: its watches are on inodes the mount now covers (or that it uncovered), and
        no event said so. Each such watcher is told events were lost (it watches its tree
        again, and its owner re-syncs in full)."""
        with self._mounts_lock:
            generation, mounts = confine.refresh_mounts()
            if generation == self._mount_generation:
                return
            with self.lock:
                watchers = list(self.watchers)
            changed = confine.mount_points_changed(self._mounts, mounts)
            for w in watchers:
                if changed is None or w.beneath_root(changed):
                    log.info("a file system was mounted or unmounted in %r: it is watched "
                             "and synced again", confine.display(w.fs.path))  # fmt: skip
                    with self.lock:
                        w.events += 1
                        w.overflowed = True
            self._mounts, self._mount_generation = mounts, generation

    def _read_once(self) -> bool:
        """Read what the fd holds and route it; False when it held nothing."""
        with self.read_lock:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return False
            self._route(data)
            return True

    def drain(self) -> bool:
        """Route every event the kernel queued before this call (from any thread): a change
        finished before a query is then seen by it, not a poll later. Events are queued by
        the very syscall that makes the change, so nothing finished before is left out.
        False when that could not be done within ``DRAIN_READS`` reads (a writer that never
        stops must not hold a query)."""
        if self.fd < 0:
            return False
        self.check_mounts()
        return any(not self._read_once() for _ in range(DRAIN_READS))  # (an empty read: done)

    def _route(self, data: bytes) -> None:
        off = 0
        with self.lock:
            while off + _EVENT.size <= len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, off)
                name = data[off + _EVENT.size : off + _EVENT.size + size].rstrip(b"\0")
                off += _EVENT.size + size
                self.events += 1
                if mask & IN_Q_OVERFLOW:
                    for w in self.watchers:
                        w.events += 1
                        w.overflowed = True
                    continue
                users = self.routes.get(wd)
                if not users:
                    continue  # a watch already dropped
                if mask & IN_IGNORED:  # the kernel removed the watch (its directory is gone)
                    del self.routes[wd]
                    for w in users:
                        w.events += 1
                        w._dirs.pop(wd, None)
                    continue
                for w, base in users.items():
                    w._event(base, mask, name)

    # -- the shared reader ---------------------------------------------------------------------

    def start(self) -> None:
        """Read events for every attached watcher in one thread, handing each its marks."""
        self._thread = threading.Thread(target=self._loop, name="rootgrep-inotify", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self.read(POLL_SECONDS)
                with self.lock:
                    watchers = list(self.watchers)
                for w in watchers:
                    w.deliver()
        except Exception as e:  # every root it watched may now miss changes: say so to each
            log.warning("the inotify reader stopped: %r; indexes it watched are now stale", e)
            with self.lock:
                watchers = list(self.watchers)
            for w in watchers:
                w.incomplete = True
                w.deliver()
        finally:
            os.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        """Stop the reader (waiting for it, unless called from it) and close the fd."""
        self._stop.set()
        t = self._thread
        if t is None:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
        elif t is not threading.current_thread():
            t.join()


class TreeWatcher:
    """inotify watches on the directories a walk of the root enters (hidden and ignored ones
    are not indexed, so not watched).

    With ``inotify`` (shared by many roots) and a ``sink``, the instance's reader thread hands
    the sink each batch of marks; without, the watcher owns a private instance and its owner
    calls ``poll``. ``add``, ``drop``, ``reset`` and ``close`` may be called from any thread.
    Out of watches, a watcher gives every watch of its root back (so other roots keep theirs)
    and says ``incomplete``: its root's changes go unseen from then on.
    """

    def __init__(
        self,
        fs: Beneath,
        inotify: Inotify | None = None,
        *,
        sink: Callable[[set[bytes], bool], None] | None = None,
    ) -> None:
        self.fs = fs
        self._own = inotify is None
        self.inotify = inotify if inotify is not None else Inotify()
        self.sink = sink  # (marks, events were lost): called by a shared instance's reader
        self.lock = threading.RLock()  # one walk at a time
        self._dirs: dict[int, bytes] = {}  # watch descriptor -> directory (root-relative)
        self.overflowed = False  # events were lost: only a full re-sync is exact again (the
        # watches are re-made at once; the owner re-syncs and clears this)
        self.events = 0  # raw events routed here (the tests count them)
        self.incomplete = False  # out of watches: this root is not watched any more
        self.closed = False
        self._told_incomplete = False
        # deliveries whose marks are taken but not yet handed to the sink (counted before the
        # marks are taken: a query's ``deliver(wait=True)`` that finds no marks left waits for
        # them, so what another thread took from under it is in the sink when it returns)
        self._delivering = 0
        self._delivered = threading.Condition(threading.Lock())
        self._marks: set[bytes] = set()  # what the events named since the last settle
        self._gone: set[bytes] = set()
        self._fresh: set[bytes] = set()
        self.inotify.attach(self)

    @property
    def fd(self) -> int:
        return self.inotify.fd

    @property
    def dirs(self) -> dict[int, bytes]:
        """Watch descriptor -> root-relative directory, as of now."""
        with self.inotify.lock:
            return dict(self._dirs)

    def close(self) -> None:
        """Give back every watch (a shared instance stays open for the other roots)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            for wd in list(self.dirs):
                self.inotify.unwatch(self, wd)
            self.inotify.detach(self)
        if self._own:
            self.inotify.close()

    def __enter__(self) -> TreeWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def beneath_root(self, points: set[bytes]) -> bool:
        """Whether any of these absolute mount points lies below the root (as it is named
        now: it may have moved since it was pinned; unknown, any may)."""
        top = self.fs.where()
        if top is None:
            return bool(points)
        under = top.rstrip(b"/") + b"/"
        return any(p.startswith(under) for p in points)

    def add(self, rel: bytes) -> set[bytes]:
        """Watch ``rel`` and the directories below it that a walk enters; for a directory
        below the root, also the files found in it (they may predate its watch)."""
        with self.lock:
            if self.closed or self.incomplete:
                return set()
            if rel and not Walker(self.fs).would_list(rel, kind="dir"):
                return set()
            try:
                # a directory is listed before its watch exists: one made in between is caught
                # by the next pass (a few at most: a directory mounted twice never settles)
                for _ in range(3):
                    if not self._watch_pass(rel):
                        break
                return {f.path for f in Walker(self.fs, rel).files()} if rel else set()
            except (OSError, RootgrepError):
                if not rel:
                    raise  # the root itself cannot be watched
                return {rel}  # it went away meanwhile: what it held is gone

    def reset(self) -> None:
        """Forget every watch and watch the tree again (after lost events, names and watches
        may no longer agree)."""
        with self.lock:
            for wd in list(self.dirs):
                self.inotify.unwatch(self, wd)
            self.add(b"")

    def _watch_pass(self, rel: bytes) -> int:
        """Watch every directory a walk of ``rel`` enters; how many were not watched yet."""
        added = 0
        for drel, dfd in Walker(self.fs, rel).directories():
            try:
                fresh = self.inotify.watch(self, dfd, drel)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                self._out_of_watches(drel)
                return 0
            added += fresh
        return added

    def _out_of_watches(self, drel: bytes) -> None:
        """fs.inotify.max_user_watches reached: give this root's watches back to the others
        and stop watching it (its index turns stale; grep scans it live)."""
        log.warning("out of inotify watches at %r: this root is not watched any more, so grep "
                    "scans it live", confine.display(drel))  # fmt: skip
        self.incomplete = True
        for wd in list(self.dirs):
            self.inotify.unwatch(self, wd)

    def drop(self, rel: bytes) -> None:
        """Stop watching ``rel`` and everything below it (it went away or moved)."""
        under = rel + b"/"
        with self.lock:
            for wd, d in self.dirs.items():
                if d == rel or d.startswith(under):
                    self.inotify.unwatch(self, wd)

    def poll(self, timeout: float) -> set[bytes]:
        """(A private instance.) Root-relative paths changed within ``timeout`` seconds (files,
        and directories that appeared, changed or went away); empty when nothing happened."""
        self.inotify.read(timeout)
        with self.lock:
            return self._settle()

    def deliver(self, *, wait: bool = False) -> bool:
        """(A shared instance's reader.) Hand the sink what the routed events name, once any
        came; later if a walk of this root runs right now (never wait for it, unless
        ``wait``: a query that must see every change finished before it)."""
        if (
            not (self._marks or self._gone or self._fresh or self.overflowed)
            and (not self.incomplete or self._told_incomplete)
            and not (wait and self._delivering)
        ):
            return True
        if not self.lock.acquire(blocking=wait, timeout=DELIVER_WAIT_SECONDS if wait else -1):
            return False
        try:
            if self.closed:
                return False
            with self._delivered:
                self._delivering += 1  # (before the marks are taken: see ``_delivering``)
            # (the loss is taken before the settle that re-makes the watches for it: one
            # said after that, by a query's look at the mount table, waits for the next)
            with self.inotify.lock:
                lost, self.overflowed = self.overflowed, False
            try:
                marks = self._settle(lost)
                self._told_incomplete = self.incomplete
            except BaseException:
                self.overflowed |= lost
                self._done_delivering()
                raise
        finally:
            self.lock.release()
        try:
            if self.sink is not None:
                try:
                    self.sink(marks, lost)
                except Exception:
                    log.exception("a watcher's sink failed")
                    return False
        finally:
            self._done_delivering()
        if wait:  # (and what other threads took before: in the sink too, once they are done)
            with self._delivered:
                return self._delivered.wait_for(
                    lambda: self._delivering == 0, timeout=DELIVER_WAIT_SECONDS
                )
        return True

    def _done_delivering(self) -> None:
        with self._delivered:
            self._delivering -= 1
            self._delivered.notify_all()

    def _settle(self, lost: bool | None = None) -> set[bytes]:
        """The marks since the last settle; the watches made again first if events were
        ``lost`` (by default: if the watcher says so now)."""
        with self.inotify.lock:
            marks, gone, fresh = self._marks, self._gone, self._fresh
            self._marks, self._gone, self._fresh = set(), set(), set()
        if self.overflowed if lost is None else lost:
            self.reset()
            return marks
        # directories that went away first, then those that appeared, and a name that went
        # away is looked at again: another directory may have taken it (an exchange of two,
        # even one whose events straddle two polls, ends with both watched)
        for d in gone:
            self.drop(d)
        for d in fresh | gone:
            marks |= self.add(d)
        return marks

    def _event(self, base: bytes, mask: int, name: bytes) -> None:
        """One routed event on the directory ``base`` (under the instance's lock)."""
        self.events += 1
        if not name:
            return  # an event on a directory itself
        rel = base + b"/" + name if base else name
        self._marks.add(rel)
        if mask & IN_ISDIR:
            if mask & (IN_MOVED_FROM | IN_DELETE):
                self._gone.add(rel)
            else:  # created, moved in, or its attributes changed (perhaps readable again)
                self._fresh.add(rel)
        elif name in IGNORE_FILES:
            # which files a walk keeps below here may have changed: look at them all again
            if base:
                self._fresh.add(base)
                self._marks.add(base)
            else:
                self.overflowed = True  # the root's own rules: a full re-sync
