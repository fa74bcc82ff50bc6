"""Arguments several tools share, described once."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ..service import MAX_RESULTS_CAP

RootArg = Annotated[
    str | None,
    Field(
        description="root id, name or URI (list_roots); needed only for a relative path "
        "with several roots"
    ),
]
PathArg = Annotated[
    str,
    Field(description="a path as answers show it (root-relative, absolute or file:// URI)"),
]
ScopeArg = Annotated[
    str | None,
    Field(description="only this file or directory (default: every root)"),
]
DirArg = Annotated[
    str | None,
    Field(description="a directory (default: the root)"),
]
CursorArg = Annotated[
    str | None,
    Field(description="next_cursor of the previous answer (same arguments)"),
]
Globs = str | list[str] | None
IncludeArg = Annotated[
    Globs,
    Field(description="only paths matching these globs (one or a list: `*.py`, `src/**`)"),
]
ExcludeArg = Annotated[Globs, Field(description="leave out paths matching these globs")]
HiddenArg = Annotated[bool, Field(description="also hidden files (names starting with .)")]
NoIgnoreArg = Annotated[bool, Field(description="also files .gitignore/.ignore leave out")]


def max_results_arg(default: int, cap: int = MAX_RESULTS_CAP, what: str = "results") -> object:
    return Annotated[
        int,
        Field(
            ge=1,
            le=cap,
            description=f"at most this many {what} per answer (≤ {cap})",
        ),
    ]
