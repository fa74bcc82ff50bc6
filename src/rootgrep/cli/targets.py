"""The PATHs a CLI verb is given, each pinned as a root (a directory PATH itself, a file
PATH's parent), and how a file's path beneath one is printed (as rg prints it)."""

from __future__ import annotations

import os
import stat
import sys

from ..confine import display
from ..errors import RootgrepError
from ..roots import Root, pin_root
from ..walker import Walker
from .common import one_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator
    from typing import Any, TextIO


def targets(
    given: list[str], explicit: bool, args: argparse.Namespace, errors: list[str]
) -> Iterator[tuple[str, Target]]:
    """Each PATH pinned (``_open_target``), in order; one that cannot be is said on stderr,
    as rg says it, and added to ``errors``. The caller closes each target's root."""
    for path in given:
        try:
            yield path, open_target(path, explicit, args.symlinks)
        except RootgrepError as e:
            print(f"rootgrep: {path}: {one_line(str(e))}", file=sys.stderr)
            errors.append(path)


def said_errors(walker: Walker, target: Target, err: TextIO | None = None) -> bool:
    """Say on stderr (or ``err``) what a walk could not read (as rg does); whether there was
    any."""
    for rel, why in walker.errors:
        print(f"rootgrep: {display(target.shown(rel))}: {why}", file=err or sys.stderr)
    return bool(walker.errors)


class Target:
    """One PATH: the pinned directory searched (a directory PATH itself, or a file PATH's
    parent) and where the walk starts in it (b"" or the file's name). (A plain class: a
    dataclass costs its module's import and 0.2 ms to make, on every CLI start.)"""

    __slots__ = ("given", "is_file", "prefix", "root", "start")

    def __init__(
        self, given: bytes, root: Root, start: bytes, is_file: bool, prefix: bytes
    ) -> None:
        self.given = given
        self.root = root
        self.start = start
        self.is_file = is_file
        self.prefix = prefix  # what is printed before a root-relative path (directories)

    def shown(self, rel: bytes) -> bytes:
        """A file's path as rg prints it: a file PATH as given, else PATH joined with it."""
        return self.given if self.is_file else self.prefix + rel


def open_target(path: str, explicit: bool, symlinks: Any) -> Target:
    raw = os.fsencode(path)
    try:
        root = pin_root(path, symlinks=symlinks)
    except RootgrepError as not_dir:
        # not a directory: a file, opened beneath its pinned parent by its one name
        parent, name = os.path.split(raw)
        if not name or name in (b".", b".."):
            raise
        try:
            root = pin_root(parent or b".", symlinks=symlinks)
        except RootgrepError:
            raise not_dir from None
        try:
            st = root.fs.stat([name])
        except RootgrepError:
            root.close()
            raise not_dir from None
        if stat.S_ISDIR(st.st_mode):  # (became a directory meanwhile: search it as one)
            return Target(raw, root, name, False, display_prefix(raw) if explicit else b"")
        return Target(raw, root, name, True, b"")
    return Target(raw, root, b"", False, display_prefix(raw) if explicit else b"")


def display_prefix(given: str | bytes) -> bytes:
    """rg joins a directory PATH and a file's relative path as Rust's ``Path::join`` does: a
    ``/`` between them unless PATH already ends with one (``dir/`` → ``dir/x``)."""
    raw = os.fsencode(given)
    return raw if raw.endswith(b"/") else raw + b"/"
