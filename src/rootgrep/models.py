"""Result models: the tools' structured output (and their output schemas), shared with the CLI.

Paths are root-relative POSIX strings; names that are not valid UTF-8 show their bytes as
``\\xNN`` escapes. Times are ISO 8601 in UTC.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

EntryType = Literal["file", "dir", "symlink", "other"]


class RootRef(BaseModel):
    id: str = Field(description="stable id of the root (a hash of its canonical path)")
    name: str
    uri: str = Field(description="canonical file:// URI of the root")


class IndexInfo(BaseModel):
    state: Literal["off", "building", "ready", "stale"] = "off"
    files: int = 0
    bytes: int = 0
    updated_at: str | None = None


class RootInfo(RootRef):
    source: Literal["client", "operator", "both"]
    index: IndexInfo = Field(default_factory=IndexInfo)


class ListRootsResult(BaseModel):
    roots: list[RootInfo]
    read_only: bool


class GrepMatch(BaseModel):
    root: RootRef
    path: str
    uri: str
    line: int = Field(description="1-based line number")
    column: int = Field(description="1-based column of the first match, in code points")
    text: str
    before: list[str] = Field(default_factory=list)
    after: list[str] = Field(default_factory=list)


class GrepResult(BaseModel):
    matches: list[GrepMatch]
    truncated: bool = Field(description="more matches exist: pass next_cursor to get them")
    next_cursor: str | None = None
    index_used: bool = False
    files_searched: int = 0
    elapsed_ms: float = 0.0


class FileHit(BaseModel):
    root: RootRef
    path: str
    uri: str
    size: int
    mtime: str


class FindFilesResult(BaseModel):
    files: list[FileHit]
    truncated: bool
    next_cursor: str | None = None


class ReadFileResult(BaseModel):
    root: RootRef
    path: str
    uri: str
    content: str
    start_line: int
    end_line: int
    total_lines: int = Field(description="lines in the part of the file that was read")
    truncated: bool = Field(description="the file is larger than the read cap")


class DirEntry(BaseModel):
    name: str
    type: EntryType
    size: int | None = None
    mtime: str | None = None


class ListDirectoryResult(BaseModel):
    root: RootRef
    path: str
    entries: list[DirEntry]
    next_cursor: str | None = None


class TreeNode(BaseModel):
    name: str
    type: EntryType
    children: list[TreeNode] | None = None


class DirectoryTreeResult(BaseModel):
    root: RootRef
    path: str
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


class CopyResult(BaseModel):
    root: RootRef
    source: str
    destination: str
    uri: str
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
    root: RootRef
    path: str
    uri: str
    score: float
    snippets: list[Snippet]


class SearchResult(BaseModel):
    results: list[SearchHit]
    partial: bool = Field(description="an index is still being built: results may be missing")
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
