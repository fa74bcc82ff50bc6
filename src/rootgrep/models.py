"""Result models: the tools' structured output (and their output schemas), shared with the CLI.

Paths are root-relative POSIX strings; names that are not valid UTF-8 show their bytes as
``\\xNN`` escapes. Times are ISO 8601 in UTC.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, PrivateAttr
from pydantic_core import PydanticUndefined

EntryType = Literal["file", "dir", "symlink", "other"]
OutputMode = Literal["content", "files_with_matches", "count"]


class Listing(BaseModel):
    """A result whose items may be cut to fit an answer: ``resume_at(k)`` is the cursor (or
    line) that continues after its first k items (None: nothing follows them)."""

    _resume: Callable[[int], str | int | None] | None = PrivateAttr(default=None)

    def resume_at(self, k: int) -> str | int | None:
        return self._resume(k) if self._resume is not None else None


class RootId(BaseModel):
    """The root an item belongs to, on every item of a list (its URI is in ``list_roots``)."""

    id: str = Field(description="stable id of the root (a hash of its canonical path)")
    name: str


class RootRef(RootId):
    uri: str = Field(description="canonical file:// URI of the root")


def _empty(v: object) -> bool:
    return not v


class IndexInfo(BaseModel):
    state: Literal["off", "building", "ready", "stale"] = "off"
    phase: Literal["none", "grep", "complete"] = Field(
        default="none",
        description="what the index answers now: none (grep, search and find_symbol read the "
        "files live), grep (its trigrams are committed: grep answers from it, while its words "
        "and symbols are still being added), complete (grep, search and find_symbol)",
    )
    files: int = 0
    bytes: int = 0
    updated_at: str | None = None


class RootInfo(RootRef):
    source: Literal["client", "operator", "both"]
    index: IndexInfo = Field(default_factory=IndexInfo)


class ListRootsResult(Listing):
    roots: list[RootInfo]
    read_only: bool
    next_cursor: str | None = None


class GrepMatch(BaseModel):
    root: RootId
    path: str
    uri: str
    line: int = Field(description="1-based line number")
    column: int = Field(description="1-based column of the first match, in code points")
    text: str = Field(description="the line (a long one: a window around the match)")
    before: list[str] = Field(
        default_factory=list, exclude_if=_empty, description="context lines before (if any)"
    )
    after: list[str] = Field(
        default_factory=list, exclude_if=_empty, description="context lines after (if any)"
    )
    symbol: str | None = Field(
        None,
        exclude_if=_empty,
        description="the innermost definition holding the line (Container.name), when the "
        "index knows the file's definitions",
    )
    line_truncated: bool = Field(
        False,
        exclude_if=_empty,
        description="true when the line (or a context line) was longer than max_line_chars "
        "and is shown cut, with … at each cut end",
    )


_M = TypeVar("_M", bound=BaseModel)
# the defaults ``construct`` may share between instances (any other: ``model_construct``'s)
_IMMUTABLE = frozenset({type(None), bool, int, float, str, bytes, type(PydanticUndefined)})
_set = object.__setattr__
# per model class: its field names in order, the plain defaults, the default factories
_PLANS: dict[
    type, tuple[tuple[str, ...], frozenset[str], dict[str, Any], dict[str, Callable[[], Any]]]
] = {}


def construct(cls: type[_M], **values: Any) -> _M:
    """``cls.model_construct(**values)`` (values trusted, not validated: each has its type
    already) at a third of its cost: a page of 1,000 grep matches built 1,000 models, and
    ``model_construct`` looks through every field's aliases and defaults each time. The same
    instance (``__dict__`` in field order, ``model_fields_set`` the names given); a class
    with aliases, a ``model_post_init``, a default that is not immutable (``model_construct``
    copies it for each instance) or a default factory that takes the validated data is left
    to ``model_construct``, as is an unknown name (a test keeps the two equal)."""
    plan = _PLANS.get(cls)
    if plan is None:
        fields = cls.__pydantic_fields__
        if (
            cls.__pydantic_post_init__
            or cls.__pydantic_root_model__
            or cls.model_config.get("extra") == "allow"
            or any(
                f.alias
                or f.validation_alias
                or f.default_factory_takes_validated_data
                or type(f.default) not in _IMMUTABLE
                for f in fields.values()
            )
        ):
            return cls.model_construct(**values)
        plan = _PLANS[cls] = (
            tuple(fields),
            frozenset(fields),
            {n: f.default for n, f in fields.items() if not f.is_required()},
            {n: f.default_factory for n, f in fields.items() if f.default_factory},  # type: ignore[misc]
        )
    names, known, defaults, factories = plan
    if not values.keys() <= known:
        return cls.model_construct(**values)
    m = cls.__new__(cls)
    _set(
        m,
        "__dict__",
        {
            n: values[n] if n in values else factories[n]() if n in factories else defaults[n]
            for n in names
            if n in values or n in defaults
        },
    )
    _set(m, "__pydantic_fields_set__", set(values))
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_private__", None)
    return m


class GrepFile(BaseModel):
    root: RootId
    path: str
    uri: str
    matches: int = Field(description="matching lines in this file")


class OtherReading(BaseModel):
    read_as: Literal["literal", "regex"]
    matches: int
    files: int
    exact: bool = True


class NotSearched(BaseModel):
    """What a search left out of its scope (counts only: none of it was read)."""

    hidden: int = Field(0, description="hidden entries (names starting with .): hidden=true")
    ignored: int = Field(0, description="entries .gitignore/.ignore leave out: no_ignore=true")
    binary: int = Field(0, description="binary files (a NUL in their first 8 KiB)")
    too_large: int = Field(0, description="files over the server's --max-file-size")


class GrepResult(Listing):
    output_mode: OutputMode = "content"
    matches: list[GrepMatch] = Field(description="output_mode=content: the matching lines")
    files: list[GrepFile] = Field(
        default_factory=list,
        exclude_if=_empty,
        description="output_mode=files_with_matches or count: the matching files, in path order",
    )
    total_matches: int = Field(
        0,
        description="matching lines in the whole scope, not only this page (at least this "
        "many when total_exact is false)",
    )
    total_files: int = Field(0, description="files with a match in the whole scope")
    total_exact: bool = Field(
        True, description="false: counting stopped at its time cap; the totals are lower bounds"
    )
    skipped: NotSearched | None = Field(
        None,
        exclude_if=_empty,
        description="what the scope holds that was not searched (entries, not their contents: "
        "a hidden directory counts once; through an index, binary files only)",
    )
    other_reading: OtherReading | None = Field(
        None,
        exclude_if=_empty,
        description="nothing matched: what the pattern matches read the other way",
    )
    truncated: bool = Field(description="more results exist: pass next_cursor to get them")
    next_cursor: str | None = None
    index_used: bool = False
    files_searched: int = 0
    elapsed_ms: float = 0.0


class FileHit(BaseModel):
    root: RootId
    path: str
    uri: str
    size: int
    mtime: str


class FindFilesResult(Listing):
    files: list[FileHit]
    truncated: bool
    next_cursor: str | None = None


class ReadFileResult(Listing):
    root: RootRef
    path: str
    uri: str
    content: str = Field(description="the lines start_line..end_line, with their line ends")
    start_line: int
    end_line: int = Field(description="the last line returned (start_line - 1 when none)")
    total_lines: int = Field(description="the file's line count")
    next_start_line: int | None = Field(
        None, description="where the next window starts (null: this one reached the end)"
    )
    truncated: bool = Field(
        description="the window stopped before end_line or the file's end (max_lines, the "
        "read cap or the answer budget): read on from next_start_line"
    )
    _lines: list[str] = PrivateAttr(default_factory=list)  # content, line by line
    lines_cut: int = Field(
        0, exclude_if=_empty, description="lines longer than 2000 characters shown cut"
    )


class DirEntry(BaseModel):
    name: str
    type: EntryType
    size: int | None = None
    mtime: str | None = None


class ListDirectoryResult(Listing):
    root: RootRef
    path: str
    uri: str = ""
    entries: list[DirEntry]
    next_cursor: str | None = None
    truncated: bool = Field(
        default=False,
        description="the directory holds more entries than one listing reads (200,000): "
        "the pages hold only the first ones read",
    )


class TreeNode(BaseModel):
    name: str
    type: EntryType
    children: list[TreeNode] | None = None


class DirectoryTreeResult(BaseModel):
    root: RootRef
    path: str
    uri: str = ""
    tree: TreeNode
    truncated: bool


class FileInfoResult(BaseModel):
    root: RootRef
    path: str
    uri: str
    type: EntryType
    size: int
    mtime: str
    mode: str = Field(description="permission bits in octal, e.g. 0644")
    is_symlink: bool


class WriteResult(BaseModel):
    root: RootRef
    path: str
    uri: str
    bytes: int
    created: bool


class EditResult(BaseModel):
    root: RootRef
    path: str
    uri: str
    diff: str
    applied: bool = Field(description="false for a dry run")


class PathResult(BaseModel):
    root: RootRef
    path: str
    uri: str


class MoveResult(BaseModel):
    root: RootRef
    source: str
    destination: str
    uri: str


class Skipped(BaseModel):
    path: str
    reason: str
    uri: str | None = None


class CopyResult(BaseModel):
    root: RootRef
    source: str
    destination: str
    uri: str
    source_uri: str | None = None
    files: int
    directories: int
    skipped: list[Skipped]


class DeleteResult(BaseModel):
    root: RootRef
    path: str
    removed: int = Field(description="entries removed")
    skipped: list[Skipped] = Field(
        default_factory=list,
        description="directories left in place because they hold an entry rootgrep keeps "
        "hidden (its own cache or audit log)",
    )


class Snippet(BaseModel):
    line: int
    text: str


class SearchHit(BaseModel):
    root: RootId
    path: str
    uri: str
    score: float
    snippets: list[Snippet]


class SearchResult(Listing):
    results: list[SearchHit]
    partial: bool = Field(description="an index is still being built: results may be missing")
    building: list[str] = Field(
        default_factory=list,
        exclude_if=_empty,
        description="names of the roots whose index is still being built (grep answers "
        "exactly for them meanwhile)",
    )
    failed: list[str] = Field(
        default_factory=list,
        exclude_if=_empty,
        description="names of the roots whose index could not be built (reindex tries "
        "again; grep answers exactly without it)",
    )
    live_files: int = Field(
        0,
        exclude_if=_empty,
        description="files of those roots read live for this answer (a bounded scan)",
    )
    resyncing: list[str] = Field(
        default_factory=list,
        exclude_if=_empty,
        description="roots answered from their index's last build while it re-syncs",
    )
    next_cursor: str | None = None


class ReindexRoot(BaseModel):
    root: RootRef
    files: int
    bytes: int
    added: int
    updated: int
    removed: int
    elapsed_ms: float


class ReindexResult(BaseModel):
    roots: list[ReindexRoot]


SymbolKind = Literal[
    "class", "function", "method", "struct", "enum", "interface", "trait", "type", "constant",
    "macro", "module", "variable",
]  # fmt: skip


class SymbolHit(BaseModel):
    root: RootId
    path: str
    uri: str
    name: str
    kind: str = Field(description="class, function, method, struct, enum, interface, trait, ...")
    line: int = Field(description="1-based line where the definition starts")
    end_line: int = Field(description="1-based line where it ends")
    container: str | None = Field(None, description="the enclosing definition's name")
    signature: str = Field(description="the definition's first line, trimmed (≤ 200 chars)")
    binding: Literal["alias", "import"] | None = Field(
        None,
        exclude_if=_empty,
        description="a name bound to another, not defined here: alias (a re-export "
        "`exports.X = X`, `X = mod.Y`) or import",
    )


class FindSymbolResult(Listing):
    symbols: list[SymbolHit]
    truncated: bool = Field(description="more definitions exist: pass next_cursor")
    next_cursor: str | None = None
    near: list[str] = Field(
        default_factory=list,
        exclude_if=_empty,
        description="no definition found: defined names close to the one asked (did you mean)",
    )
    resyncing: list[str] = Field(
        default_factory=list,
        exclude_if=_empty,
        description="roots answered from their index's last build while it re-syncs (files "
        "changed while no rootgrep ran may be missed until it is done)",
    )
    _exact: bool = PrivateAttr(default=True)  # (exact=false asked: say so when none found)


class OutlineNode(BaseModel):
    name: str
    kind: str
    line: int
    end_line: int
    signature: str
    container: str | None = Field(
        None,
        exclude_if=_empty,
        description="the type or scope that owns it (a method's class, impl type or receiver)",
    )
    children: list[OutlineNode] = Field(default_factory=list, exclude_if=_empty)


class OutlineResult(BaseModel):
    root: RootRef
    path: str
    uri: str
    language: str
    symbols: list[OutlineNode]
    truncated: bool = Field(
        False, description="the file is over the parse cap (2 MiB): no symbols were read"
    )
    not_parsed: str | None = Field(
        None,
        description="why the file was not parsed, so its definitions are unknown (not "
        "none): 'large' (over 2 MiB), 'long lines' (lines averaging over 10,000 characters: "
        "minified), 'timeout' (its parse passed 0.25 s of CPU plus 2 s a MiB, at most 2 s)",
    )
    next_cursor: str | None = Field(
        None, description="more definitions follow: pass it as `cursor` to get them"
    )
    _skip: int = PrivateAttr(default=0)  # definitions (in file order) a cursor already gave
    _cursor: Callable[[int], str] | None = PrivateAttr(default=None)  # cursor after k of them

    def _cursor_at(self, k: int) -> str | None:
        return self._cursor(k) if self._cursor is not None else None
