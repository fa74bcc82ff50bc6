"""Reading a file from a confined fd: ``read_fd`` (at most so many bytes, however large
``fstat`` said the file was), the binary test (``is_binary``: a NUL in the first 8 KiB),
``ReadResult``, and search's reads by one name (``read_searchable_at``,
``read_searchable_stat_at``, ``read_searchable_into`` a reused buffer), which leave binary
and over-large files out without reading them whole.
"""

from __future__ import annotations

import mmap
import os

from ..errors import RootgrepError
from .opening import open_file_at

BINARY_SNIFF_BYTES = 8192
DEFAULT_MAX_READ_BYTES = 1 << 20


class ReadResult:
    """A file's bytes as read (at most the asked for: ``truncated``), its size and stat.
    (The classes here are plain classes, not dataclasses: the CLI's start-up does not import
    ``dataclasses``, its import and 0.2 ms per class made being a fifth of it.)"""

    __slots__ = ("data", "size", "stat", "truncated")

    def __init__(self, data: bytes, size: int, truncated: bool, stat: os.stat_result) -> None:
        self.data = data
        self.size = size
        self.truncated = truncated
        self.stat = stat


def is_binary(data: bytes) -> bool:
    """A file is binary when its first 8 KiB hold a NUL byte (SPEC §4)."""
    return b"\0" in data[:BINARY_SNIFF_BYTES]


def read_fd(fd: int, size_hint: int, max_bytes: int) -> tuple[bytes, bool]:
    """Read at most ``max_bytes`` from ``fd``; the flag says whether more was there.

    One read when the file is as large as ``fstat`` said (the common case); otherwise reads to
    the end, so files that grow, shrink, are sparse or report size 0 (procfs) come out right.
    """
    want = min(max_bytes, size_hint + 1) if size_hint > 0 else min(max_bytes, 65536)
    first = os.read(fd, max(want, 1))
    if 0 < size_hint < max_bytes and len(first) == size_hint:
        return first, False
    if not first:
        return b"", False
    chunks = [first]
    total = len(first)
    while total < max_bytes:
        b = os.read(fd, min(max_bytes - total, 1 << 20))
        if not b:
            return b"".join(chunks), False
        chunks.append(b)
        total += len(b)
    data = b"".join(chunks)
    return data[:max_bytes], total > max_bytes or bool(os.read(fd, 1))


def read_searchable_into(
    dirfd: int, name: bytes, max_file_size: int, buf: bytearray | mmap.mmap | None
) -> memoryview | bytes | None:
    """``read_searchable_at``'s answer, read into ``buf`` when one is given and the file fits
    in it (a view of ``buf``, valid until its next use), else as bytes of its own. For files
    read only to be tested (an index's candidates, most of which do not match): a fresh
    buffer for each file cost more than the read (the memory is mapped, faulted in and
    unmapped again)."""
    try:
        fd, st = open_file_at(dirfd, name)
    except (OSError, RootgrepError):
        return None
    try:
        size = st.st_size
        if size > max_file_size:
            return None
        if buf is None or size >= len(buf):  # (one byte of room: a grown file is read anew)
            return _searchable(fd, size, max_file_size)
        if size > BINARY_SNIFF_BYTES and b"\0" in os.pread(fd, BINARY_SNIFF_BYTES, 0):
            return None
        view = memoryview(buf)
        n = os.readv(fd, [view[: size + 1]])
        if n != size:  # (changed since its fstat: read again from the start)
            os.lseek(fd, 0, os.SEEK_SET)
            return _searchable(fd, size, max_file_size)
        if buf.find(b"\0", 0, min(n, BINARY_SNIFF_BYTES)) >= 0:
            return None
        return view[:n]
    except OSError:
        return None
    finally:
        os.close(fd)


def _searchable(fd: int, size: int, max_file_size: int) -> bytes | None:
    if size <= BINARY_SNIFF_BYTES:
        data, _ = read_fd(fd, size, max_file_size)
        return None if b"\0" in data else data
    if b"\0" in os.pread(fd, BINARY_SNIFF_BYTES, 0):
        return None
    data, _ = read_fd(fd, size, max_file_size)
    return None if data.find(b"\0", 0, BINARY_SNIFF_BYTES) >= 0 else data


def read_searchable_stat_at(
    dirfd: int, name: bytes, max_file_size: int
) -> tuple[bytes | None, os.stat_result] | None:
    """A file's searchable bytes by one name beneath a confined directory fd, with the
    ``fstat`` of the very file read: None when it cannot be opened as a regular file (gone,
    a symlink, not regular); (None, its stat) when it is over ``max_file_size`` or binary."""
    try:
        fd, st = open_file_at(dirfd, name)
    except (OSError, RootgrepError):
        return None
    try:
        if st.st_size > max_file_size:
            return None, st
        return _searchable(fd, st.st_size, max_file_size), st
    except OSError:
        return None
    finally:
        os.close(fd)


def read_searchable_at(dirfd: int, name: bytes, max_file_size: int) -> bytes | None:
    """A searchable file's bytes by one name beneath a confined directory fd, or None when it
    is gone, a symlink, not regular, over ``max_file_size`` or binary (search skips those).
    A large file's first 8 KiB are read alone (``pread``: the file is then read whole from
    its start, into one buffer, not joined from two), so a binary file is never read in
    full."""
    got = read_searchable_stat_at(dirfd, name, max_file_size)
    return None if got is None else got[0]
