"""Listing a confined directory fd: ``scan_fd`` (``Entry`` tuples sorted by name, links
unfollowed, hidden entries left out, at most ``MAX_DIR_ENTRIES`` of them: the
``DirListing`` says when it was cut) and the walker's ``scan_split`` (the same as plain
tuples, the dot names apart); ``entry_kind``, an entry's kind from its mode.
"""

from __future__ import annotations

import bisect
import itertools
import os
import stat as stat_mod
import sys

from ..records import record
from . import hiding
from .hiding import _hidden_at

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    from typing import Literal, NamedTuple


_FS_ENCODING = sys.getfilesystemencoding()


if TYPE_CHECKING:

    class Entry(NamedTuple):
        """One directory entry, as seen without following symlinks."""

        name: bytes
        kind: Literal["file", "dir", "symlink", "other"]

else:  # (the same tuple without ``typing``)
    Entry = record(
        "Entry", ("name", "kind"), module=__name__,
        doc="One directory entry, as seen without following symlinks.",
    )  # fmt: skip


def entry_kind(st_mode: int) -> Literal["file", "dir", "symlink", "other"]:
    if stat_mod.S_ISREG(st_mode):
        return "file"
    if stat_mod.S_ISDIR(st_mode):
        return "dir"
    if stat_mod.S_ISLNK(st_mode):
        return "symlink"
    return "other"


# ---- fd-relative primitives (a directory fd that is already confined + one name) ----------


MAX_DIR_ENTRIES = 200_000  # a listing holds at most this many of a directory's entries


class DirListing(list[Entry]):
    """``scan_fd``'s answer; ``cut``: the directory held more than ``MAX_DIR_ENTRIES`` entries
    and only the first ones read (in the kernel's order, then sorted) are in it."""

    cut = False


def scan_fd(
    dirfd: int, hidden: list[bytes] | None = None, limit: int = MAX_DIR_ENTRIES
) -> DirListing:
    """List a directory fd opened O_RDONLY|O_DIRECTORY, sorted by name bytes, links unfollowed.

    Hidden entries (the cache dir, the audit log) are left out, their names added to
    ``hidden`` when given. (The entry's inode from the listing is checked first, free; only a
    match costs an ``lstat``.) At most ``MAX_DIR_ENTRIES`` entries are read: a directory an
    attacker or a generator filled costs bounded memory and time (the answer says ``cut``)."""
    out = DirListing()
    append = out.append
    enc = _FS_ENCODING
    new = tuple.__new__  # Entry(...) without a Python frame: one per directory entry
    inos = hiding._hidden_inos
    room = min(limit, MAX_DIR_ENTRIES)  # (``limit``: fewer, for a caller that needs fewer)
    with os.scandir(dirfd) as it:
        for de in it:
            if len(out) >= room:
                out.cut = True
                break
            name = de.name.encode(enc, "surrogateescape")
            if inos and de.inode() in inos and _hidden_at(dirfd, name):
                if hidden is not None:
                    hidden.append(name)
                continue
            if de.is_file(follow_symlinks=False):
                append(new(Entry, (name, "file")))
            elif de.is_dir(follow_symlinks=False):
                append(new(Entry, (name, "dir")))
            elif de.is_symlink():
                append(new(Entry, (name, "symlink")))
            else:
                append(new(Entry, (name, "other")))
    out.sort()  # by name bytes (names are unique within a directory)
    return out


Listed = tuple[bytes, str]  # (name, kind): an ``Entry``'s fields, as a plain tuple


def scan_split(dirfd: int) -> tuple[list[Listed], list[Listed], bool]:
    """``scan_fd``'s listing (hidden entries left out, links unfollowed, at most
    ``MAX_DIR_ENTRIES``) as two lists sorted by name: the names that start with a dot, and
    the others; and whether the directory held more (``DirListing.cut``). The walker's
    listing: plain tuples, and the dot names (hidden files, ignore files) apart without a
    test per entry later."""
    enc = _FS_ENCODING
    inos = hiding._hidden_inos
    room = MAX_DIR_ENTRIES
    with os.scandir(dirfd) as it:
        # hidden entries left out before the cap counts (else one among those read made a
        # cut listing look whole), as ``scan_fd`` counts
        shown = (
            (de for de in it if not (de.inode() in inos and _hidden_at(dirfd, de.name)))
            if inos  # (the cache dir or the audit log may be here: checked by inode first)
            else it
        )
        des = list(itertools.islice(shown, room + 1))
    cut = len(des) > room
    if cut:
        del des[room:]
    listing = [
        (
            de.name.encode(enc, "surrogateescape"),
            "file"
            if de.is_file(follow_symlinks=False)
            else "dir"
            if de.is_dir(follow_symlinks=False)
            else "symlink"
            if de.is_symlink()
            else "other",
        )
        for de in des
    ]
    listing.sort()  # by name bytes (names are unique within a directory)
    lo = bisect.bisect_left(listing, (b".",))  # (sorted: the dot names are one run)
    if lo == len(listing) or listing[lo][0][:1] != b".":
        return [], listing, cut
    hi = bisect.bisect_left(listing, (b"/",), lo)  # (no name holds a "/": the next byte)
    return listing[lo:hi], listing[:lo] + listing[hi:], cut
