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
"""

from __future__ import annotations

import errno
import logging
import os
import select
import struct
import time

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


class TreeWatcher:
    """inotify watches on the directories a walk of the root enters (hidden and ignored ones
    are not indexed, so not watched). Not thread-safe: one thread polls it."""

    def __init__(self, fs: Beneath) -> None:
        self.fs = fs
        self.fd = confine.inotify_open()
        self.dirs: dict[int, bytes] = {}  # watch descriptor -> directory (root-relative)
        self.overflowed = False  # events were lost: only a full re-sync is exact again (the
        # watches are re-made at once; the owner re-syncs and clears this)
        self.events = 0  # raw events read (the tests count them)
        self.incomplete = False  # out of watches: some directories are not watched

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> TreeWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, rel: bytes) -> set[bytes]:
        """Watch ``rel`` and the directories below it that a walk enters; for a directory
        below the root, also the files found in it (they may predate its watch)."""
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
        for wd in list(self.dirs):
            confine.inotify_unwatch(self.fd, wd)
        self.dirs.clear()
        self.add(b"")

    def _watch_pass(self, rel: bytes) -> int:
        """Watch every directory a walk of ``rel`` enters; how many were not watched yet."""
        added = 0
        for drel, dfd in Walker(self.fs, rel).directories():
            try:
                wd = confine.inotify_watch_dir(self.fd, dfd, MASK)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if not self.incomplete:  # fs.inotify.max_user_watches reached
                    log.warning("out of inotify watches at %r: changes there go unseen, so grep "
                                "scans live", confine.display(drel))  # fmt: skip
                    self.incomplete = True
                continue
            if wd not in self.dirs:  # (a directory seen under two names keeps its first)
                self.dirs[wd] = drel
                added += 1
        return added

    def drop(self, rel: bytes) -> None:
        """Stop watching ``rel`` and everything below it (it went away or moved)."""
        under = rel + b"/"
        for wd, d in list(self.dirs.items()):
            if d == rel or d.startswith(under):
                del self.dirs[wd]
                confine.inotify_unwatch(self.fd, wd)

    def poll(self, timeout: float) -> set[bytes]:
        """Root-relative paths changed within ``timeout`` seconds (files, and directories that
        appeared, changed or went away); empty when nothing happened. Once events come, what
        follows within ``DEBOUNCE_SECONDS`` joins them, for at most ``MAX_GATHER_SECONDS``."""
        marks: set[bytes] = set()
        gone: set[bytes] = set()
        fresh: set[bytes] = set()
        p = select.poll()
        p.register(self.fd, select.POLLIN)
        wait = timeout
        deadline: float | None = None
        while p.poll(wait * 1000):
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            self._parse(data, marks, gone, fresh)
            now = time.monotonic()
            if deadline is None:
                deadline = now + MAX_GATHER_SECONDS
            if now >= deadline:
                break
            wait = min(DEBOUNCE_SECONDS, deadline - now)
        if self.overflowed:
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

    def _parse(self, data: bytes, marks: set[bytes], gone: set[bytes], fresh: set[bytes]) -> None:
        off = 0
        while off + _EVENT.size <= len(data):
            wd, mask, _cookie, size = _EVENT.unpack_from(data, off)
            name = data[off + _EVENT.size : off + _EVENT.size + size].rstrip(b"\0")
            off += _EVENT.size + size
            self.events += 1
            if mask & IN_Q_OVERFLOW:
                self.overflowed = True
                continue
            if mask & IN_IGNORED:
                self.dirs.pop(wd, None)
                continue
            base = self.dirs.get(wd)
            if base is None or not name:
                continue  # a watch already dropped, or an event on a directory itself
            rel = base + b"/" + name if base else name
            marks.add(rel)
            if mask & IN_ISDIR:
                if mask & (IN_MOVED_FROM | IN_DELETE):
                    gone.add(rel)
                else:  # created, moved in, or its attributes changed (perhaps readable again)
                    fresh.add(rel)
            elif name in IGNORE_FILES:
                # which files a walk keeps below here may have changed: look at them all again
                if base:
                    fresh.add(base)
                    marks.add(base)
                else:
                    self.overflowed = True  # the root's own rules: a full re-sync
