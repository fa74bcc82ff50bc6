"""The process's mount table, and when it changes.

A file system mounted inside a watched root (or unmounted from one) changes what lies beneath
the root without one inotify event: the watches are on the inodes that were there before, and
the mount covers them. The kernel says that the table changed (``POLLPRI`` on an open
``/proc/self/mountinfo``); ``refresh_mounts`` reads the table again then, and the watchers
compare mount points with their roots (``index.watch``).

One fd for the whole process, opened on first use (``open_mount_table``; the sandbox opens it
before it restricts the process: the file cannot be opened after). Only this module polls it, under
its lock: the kernel reports each change once per open file, to the first poll that asks.
Nothing beneath a root is opened here, and the table is only read, never followed as paths.
"""

from __future__ import annotations

import logging
import os
import select
import threading

log = logging.getLogger("rootgrep.confine")

MOUNT_TABLE = "/proc/self/mountinfo"
MAX_TABLE_BYTES = 8 << 20  # a table larger than this is not parsed: every root re-syncs

Mounts = frozenset[tuple[int, bytes]] | None  # (mount id, mount point); None: not known

_lock = threading.Lock()
_fd = -2  # -2: not opened yet; -1: cannot be opened here
_generation = 0
_mounts: Mounts = frozenset()


def open_mount_table() -> bool:
    """Open the mount table (once); False when this process cannot read it."""
    global _fd, _mounts
    with _lock:
        if _fd == -2:
            try:
                _fd = os.open(MOUNT_TABLE, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as e:
                _fd = -1
                log.info("no mount table (%s): mounts inside roots are not followed", e)
            else:
                _mounts = _read()
        return _fd >= 0


def refresh_mounts() -> tuple[int, Mounts]:
    """(generation, mounts): the generation grows each time the kernel said the table
    changed; the mounts are as read then (None: too large, or unreadable)."""
    global _generation, _mounts
    open_mount_table()
    with _lock:
        if _fd >= 0:
            p = select.poll()
            p.register(_fd, select.POLLPRI | select.POLLERR)
            if p.poll(0):
                _generation += 1
                _mounts = _read()
        return _generation, _mounts


def mount_points_changed(before: Mounts, after: Mounts) -> set[bytes] | None:
    """The mount points where something was mounted or unmounted between two tables; None
    when either is not known (then any root may be affected)."""
    if before is None or after is None:
        return None
    return {point for _, point in before ^ after}


def _read() -> Mounts:
    """The table as it reads now (under ``_lock``)."""
    chunks: list[bytes] = []
    size = 0
    try:
        os.lseek(_fd, 0, os.SEEK_SET)
        while chunk := os.read(_fd, 1 << 16):
            size += len(chunk)
            if size > MAX_TABLE_BYTES:
                log.warning("the mount table is over %d bytes: not parsed", MAX_TABLE_BYTES)
                return None
            chunks.append(chunk)
    except OSError as e:
        log.warning("cannot read the mount table: %s", e)
        return None
    return parse_mount_table(b"".join(chunks))


def parse_mount_table(table: bytes) -> frozenset[tuple[int, bytes]]:
    """(mount id, mount point) of each line of a ``mountinfo`` table; a point's space, tab,
    newline and backslash come escaped as ``\\ooo`` (octal)."""
    out = set()
    for line in table.split(b"\n"):
        fields = line.split(b" ", 5)
        if len(fields) < 5 or not fields[0].isdigit():
            continue
        out.add((int(fields[0]), _unescape(fields[4])))
    return frozenset(out)


def _unescape(field: bytes) -> bytes:
    if b"\\" not in field:
        return field
    out = bytearray()
    i = 0
    while i < len(field):
        octal = field[i + 1 : i + 4]
        if field[i] == 0x5C and len(octal) == 3 and all(0x30 <= c <= 0x37 for c in octal):
            out.append(int(octal, 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return bytes(out)
