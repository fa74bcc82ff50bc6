"""Arguments several tools share, described once."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ..service import MAX_RESULTS_CAP

RootArg = Annotated[
    str | None,
    Field(
        description="which root: its id, name or URI (from list_roots). Needed only with "
        "several roots and a relative path; a path as shown by any tool needs none"
    ),
]
PathArg = Annotated[
    str,
    Field(
        description="a path as shown by grep, find_files or search: root-relative, absolute "
        "inside a root, or a file:// URI"
    ),
]
ScopeArg = Annotated[
    str | None,
    Field(
        description="narrow to this file or directory (root-relative, absolute or file:// "
        "URI); default: every root"
    ),
]
DirArg = Annotated[
    str | None,
    Field(description="a directory (root-relative, absolute or file:// URI); default: the root"),
]
CursorArg = Annotated[
    str | None,
    Field(
        description="next_cursor of the previous answer, to continue a listing (same "
        "tool, same arguments)"
    ),
]
Globs = str | list[str] | None
IncludeArg = Annotated[
    Globs,
    Field(
        description="only paths matching these gitignore-style globs: one glob or a list "
        "(`*.py`, `src/**`, `*.{toml,cfg}`)"
    ),
]
ExcludeArg = Annotated[
    Globs, Field(description="leave out paths matching these globs (one glob or a list)")
]
HiddenArg = Annotated[
    bool, Field(description="also search hidden files and directories (names starting with .)")
]
NoIgnoreArg = Annotated[bool, Field(description="do not apply .gitignore/.ignore rules")]


def max_results_arg(default: int, cap: int = MAX_RESULTS_CAP, what: str = "results") -> object:
    return Annotated[
        int,
        Field(
            ge=1,
            le=cap,
            description=f"at most this many {what} per answer (1-{cap}, default {default}); "
            "page on with cursor",
        ),
    ]
