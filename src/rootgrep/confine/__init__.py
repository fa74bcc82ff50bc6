"""Confinement: every open, stat, list, read and write beneath a pinned root directory fd.

This package is the only code that turns a path into a file descriptor. Everything is resolved
relative to a root fd that was pinned once, with ``openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS)``
where the kernel has it and a component-by-component ``O_NOFOLLOW`` walk otherwise. Symlinks are
never followed by the kernel in the walk: each one is read with ``readlinkat`` and re-resolved
lexically beneath the root, so swapping a directory for a symlink mid-resolution cannot lead
outside. A path string is never opened by name (pinning the root is the one exception).

One module per concept, each importing its siblings directly (this one only gathers their
names): ``syscalls`` (the open flags; openat2, renameat2 and inotify through ctypes),
``paths`` (root-relative components, messages, the error mapping), ``hiding`` (the cache
dir and audit log hidden by identity), ``listing`` (``scan_fd``, ``scan_split``),
``opening`` (one name opened beneath a directory fd, a file reopened to be read),
``mounts`` (the process's mount table, and when it changes), ``stats`` (one name's stat,
the keys a re-sync compares), ``reading`` (a file's bytes, binary detection), ``beneath``
(``Beneath``: the pinned root, resolution, reads), ``walk`` (the ``O_NOFOLLOW`` component
walk it falls back to), ``writes`` (its write operations) and ``temps`` (atomic writes'
temps, and removing those killed writers left).
``sockets`` (a daemon's socket reached beneath a pinned cache dir) needs only ``os``: the CLI
connects to its daemon through it before anything else of rootgrep is loaded.

Each name is loaded with its module the first time it is used (PEP 562), so importing the
package costs nothing until then (the whole of it, ctypes included, is about 6 ms of a start).
A name patched here (a test's ``monkeypatch``) reaches the callers that use it as
``confine.X``; the package's own modules use it where it lives: patch that module.
"""

from __future__ import annotations

import os  # noqa: F401  (``confine.os``: what callers and tests use of it)

_MODULES: dict[str, tuple[str, ...]] = {
    "beneath": (
        "Beneath",
        "SymlinkPolicy",
    ),
    "hiding": (
        "hidden_generation",
        "hide",
        "holds_hidden",
        "inside_hidden",
        "is_hidden",
        "unhide",
    ),
    "listing": (
        "MAX_DIR_ENTRIES",
        "DirListing",
        "Entry",
        "Listed",
        "entry_kind",
        "scan_fd",
        "scan_split",
    ),
    "mounts": (
        "Mounts",
        "mount_points_changed",
        "open_mount_table",
        "parse_mount_table",
        "refresh_mounts",
    ),
    "opening": (
        "NULL_DEVICE_PATH",
        "open_dir_at",
        "open_dir_keyed_at",
        "open_file_at",
        "open_null_device",
        "reopen_regular",
    ),
    "paths": (
        "MAX_NAME_BYTES",
        "MAX_PATH_BYTES",
        "_error",
        "display",
        "fsencode_path",
        "split_relpath",
        "strip_prefix",
    ),
    "reading": (
        "BINARY_SNIFF_BYTES",
        "DEFAULT_MAX_READ_BYTES",
        "ReadResult",
        "is_binary",
        "read_fd",
        "read_searchable_at",
        "read_searchable_into",
        "read_searchable_stat_at",
    ),
    "sockets": (
        "bind_path",
        "entry_at",
        "pin_lookup",
        "socket_at",
        "socket_beneath",
    ),
    "stats": (
        "DirKey",
        "FileKey",
        "fstat_key",
        "stat_at",
        "stat_key_at",
        "stat_keyed",
        "stat_keys",
        "stat_regular_at",
        "stat_regular_each",
        "stat_result_key",
    ),
    "syscalls": (
        "RESOLVE_BENEATH",
        "RESOLVE_NO_MAGICLINKS",
        "RESOLVE_NO_SYMLINKS",
        "RESOLVE_NO_XDEV",
        "inotify_open",
        "inotify_unwatch",
        "inotify_watch_dir",
        "openat2_available",
    ),
    "temps": (
        "_install",
        "_write_temp",
        "is_temp_name",
        "remove_dead_temp",
        "remove_dead_temps",
    ),
    "walk": ("MAX_SYMLINKS",),
    "writes": (
        "HIDDEN_NOT_COPIED",
        "HIDDEN_NOT_REPLACED",
        "HIDDEN_REASON",
        "TOO_MANY_NOT_COPIED",
        "CopyReport",
    ),
}
_HOME = {name: module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> object:
    """A name of the package, loaded (with its module) the first time it is asked for, and
    kept here: after that it is an attribute like any other (a test may patch it)."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # (``__import__``, not importlib: importing that costs the CLI 0.4 ms)
    value = getattr(__import__(f"{__name__}.{module}", fromlist=("_",)), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
