"""The error vocabulary of rootgrep: one exception type per SPEC error code.

Errors are raised deep (confinement, walker, grep) and rendered once at the edge (the CLI or
the MCP server) as ``[code] message``. A message says what went wrong and what to do next; it
never contains file contents.
"""

from __future__ import annotations

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    from typing import ClassVar


class RootgrepError(Exception):
    """Base class; ``code`` is the SPEC error code shown as the ``[code]`` prefix."""

    code: ClassVar[str] = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class NoRoots(RootgrepError):
    code = "no_roots"


class OutsideRoots(RootgrepError):
    code = "outside_roots"


class RootRemoved(RootgrepError):
    code = "root_removed"


class UnknownRoot(RootgrepError):
    code = "unknown_root"


class AmbiguousRoot(RootgrepError):
    code = "ambiguous_root"


class InvalidUri(RootgrepError):
    code = "invalid_uri"


class InvalidPath(RootgrepError):
    code = "invalid_path"


class NotFound(RootgrepError):
    code = "not_found"


class NotAFile(RootgrepError):
    code = "not_a_file"


class NotADirectory(RootgrepError):
    code = "not_a_directory"


class NotRegularFile(RootgrepError):
    code = "not_regular_file"


class BinaryFile(RootgrepError):
    code = "binary_file"


class TooLarge(RootgrepError):
    code = "too_large"


class Exists(RootgrepError):
    code = "exists"


class ReadOnly(RootgrepError):
    code = "read_only"


class InvalidPattern(RootgrepError):
    code = "invalid_pattern"


class EditMismatch(RootgrepError):
    code = "edit_mismatch"


class IndexUnavailable(RootgrepError):
    code = "index_unavailable"


class InvalidArgument(RootgrepError):
    """An argument that is not a path or a pattern is malformed (a forged or damaged cursor,
    a value out of range); the message names it and says what is accepted."""

    code = "invalid_argument"


ERROR_CODES: tuple[str, ...] = tuple(cls.code for cls in RootgrepError.__subclasses__())
