"""Root-relative paths as components: a path argument validated and split
(``split_relpath``: NUL, lone surrogates, over-long names and absolute paths refused),
compared component-wise (``strip_prefix``), shown in messages (``display``), checked as a
single name (``_check_name``) or as a file's path (``_file_comps``); and an ``OSError``
mapped to the error a tool reports (``_error``).
"""

from __future__ import annotations

import errno
import os

from ..errors import (
    Exists,
    InvalidPath,
    NotADirectory,
    NotAFile,
    NotFound,
    NotRegularFile,
    OutsideRoots,
    ReadOnly,
    RootgrepError,
    TooLarge,
)

MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096


def fsencode_path(path: str | bytes) -> bytes:
    """``os.fsencode`` that turns lone surrogates and NUL into ``invalid_path``."""
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:
        raise InvalidPath(
            "the path is not valid text (a lone surrogate); fix its encoding"
        ) from None
    if b"\0" in raw:
        raise InvalidPath("the path contains a NUL byte; remove it")
    return raw


def split_relpath(rel: str | bytes) -> list[bytes]:
    """Validate a root-relative path and split it into components (``.`` and empties dropped,
    but a trailing ``/`` is kept as a final ``.``: the name before it must be a directory).

    ``..`` is kept: it is resolved physically during the walk and refused if it leaves the root.
    """
    raw = fsencode_path(rel)
    if len(raw) > MAX_PATH_BYTES:
        raise InvalidPath(f"the path is longer than {MAX_PATH_BYTES} bytes; use a shorter path")
    if raw.startswith(b"/"):
        raise OutsideRoots("an absolute path was given where a root-relative one was expected")
    comps = [c for c in raw.split(b"/") if c not in (b"", b".")]
    for c in comps:
        if len(c) > MAX_NAME_BYTES:
            raise InvalidPath(f"a path component is longer than {MAX_NAME_BYTES} bytes")
    if comps and raw.endswith((b"/", b"/.")) and comps[-1] != b"..":
        comps.append(b".")  # "x/" must be a directory: kept as a final '.'
    return comps


def strip_prefix(path: bytes, prefix: bytes) -> list[bytes] | None:
    """Components of ``path`` below ``prefix``, compared component-wise (never as a string
    prefix: ``/w/project-old`` is not inside ``/w/project``); None when outside."""
    p = [c for c in path.split(b"/") if c not in (b"", b".")]
    q = [c for c in prefix.split(b"/") if c not in (b"", b".")]
    if len(p) < len(q) or p[: len(q)] != q:
        return None
    return p[len(q) :]


def display(comps: list[bytes] | bytes | str) -> str:
    """A root-relative path for messages, undecodable bytes shown visibly."""
    if isinstance(comps, list):
        comps = b"/".join(comps)
    if isinstance(comps, str):
        comps = os.fsencode(comps)
    return comps.decode("utf-8", "backslashreplace") or "."


def _error(err: OSError, comps: list[bytes]) -> RootgrepError:
    where = display(comps)
    e = err.errno
    if e == errno.ENOENT:
        return NotFound(f"'{where}' does not exist; list its parent directory to see what is there")
    if e == errno.ENOTDIR:
        return NotADirectory(f"a component of '{where}' is not a directory; check the path")
    if e == errno.EXDEV:
        return OutsideRoots(f"'{where}' resolves outside the root; use a path inside the root")
    if e == errno.EISDIR:
        return NotAFile(f"'{where}' is a directory; use list_directory to see its entries")
    if e == errno.ENXIO:
        return NotRegularFile(f"'{where}' is a socket or device, not a regular file")
    if e == errno.ENAMETOOLONG:
        return InvalidPath(f"'{where}' is too long; use a shorter path")
    if e == errno.ELOOP:
        return OutsideRoots(f"'{where}' is a symbolic link that rootgrep does not follow here")
    if e in (errno.EACCES, errno.EPERM):
        return NotFound(f"'{where}' is not readable (permission denied); check its permissions")
    if e == errno.EEXIST:
        return Exists(f"'{where}' already exists; choose another name or allow overwriting")
    if e == errno.EROFS:
        return ReadOnly(f"'{where}' is on a read-only filesystem; it cannot be changed")
    if e in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return TooLarge(f"no space to write '{where}' (disk full or quota); free space first")
    if e == errno.EMFILE:
        return InvalidPath(f"'{where}' is too deep to resolve with the open-file limit")
    return InvalidPath(f"'{where}' could not be opened ({os.strerror(e or 0)})")


def _check_name(name: bytes) -> None:
    if not name or name in (b".", b"..") or b"/" in name or b"\0" in name:
        raise InvalidPath(f"'{display(name)}' is not a single file name")


def _file_comps(rel: str | bytes | list[bytes]) -> list[bytes]:
    """Components of a path that must name a file: a trailing '/' (or '/.') is refused."""
    comps = rel if isinstance(rel, list) else split_relpath(rel)
    if comps and comps[-1] == b".":
        raise NotADirectory(f"'{display(comps)}' ends with '/', so it must be a directory")
    return comps
