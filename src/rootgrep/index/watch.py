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

from .. import confine
from ..confine import Beneath
from ..errors import RootgrepError
from ..walker import Walker

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


class TreeWatcher:
    """inotify watches on the directories a walk of the root enters (hidden and ignored ones
    are not indexed, so not watched). Not thread-safe: one thread polls it."""

    def __init__(self, fs: Beneath) -> None:
        self.fs = fs
        self.fd = confine.inotify_open()
        self.dirs: dict[int, bytes] = {}  # watch descriptor -> directory (root-relative)
        self.overflowed = False  # events were lost: only a full re-sync is exact again
        self.events = 0  # raw events read (the tests count them)
        self._full_warned = False

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

    def _watch_pass(self, rel: bytes) -> int:
        """Watch every directory a walk of ``rel`` enters; how many were not watched yet."""
        added = 0
        for drel, dfd in Walker(self.fs, rel).directories():
            try:
                wd = confine.inotify_watch_dir(self.fd, dfd, MASK)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if not self._full_warned:  # fs.inotify.max_user_watches reached
                    log.warning("out of inotify watches: changes below %r are seen only by a "
                                "full re-sync", confine.display(drel))  # fmt: skip
                    self._full_warned = True
                continue
            if self.dirs.get(wd) != drel:
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
        appeared or went away); empty when nothing happened."""
        marks: set[bytes] = set()
        p = select.poll()
        p.register(self.fd, select.POLLIN)
        wait = timeout
        while p.poll(wait * 1000):
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            self._parse(data, marks)
            wait = DEBOUNCE_SECONDS
        return marks

    def _parse(self, data: bytes, marks: set[bytes]) -> None:
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
                if mask & (IN_CREATE | IN_MOVED_TO):
                    marks |= self.add(rel)
                elif mask & (IN_MOVED_FROM | IN_DELETE):
                    self.drop(rel)
