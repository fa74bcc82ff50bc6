"""The write tools, listed only with --allow-write (otherwise a call answers [read_only]).

Every write is atomic (a temp file beside the target, fsync, rename) and confined like a
read."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ..grep import cut_around, cut_context
from ..models import (
    CopyResult,
    DeleteResult,
    EditResult,
    MoveResult,
    PathResult,
    Skipped,
    WriteResult,
)
from .common import PathArg, RootArg
from .spec import DESTRUCTIVE, OVERWRITE, WRITE, Args, Call, Out, ToolSpec, fit, plural


class WriteFileArgs(Args):
    path: PathArg
    content: Annotated[str, Field(description="the whole new content of the file (UTF-8)")]
    root: RootArg = None
    create_only: Annotated[
        bool, Field(description="refuse to replace a file that exists ([exists])")
    ] = False


def run_write(c: Call, a: WriteFileArgs) -> WriteResult:
    return c.service.write_file(c.roots, **a.model_dump())


def answer_write(r: WriteResult, out: Out) -> str:
    return f"{'created' if r.created else 'replaced'} {out.path(r.path, r.uri)} ({r.bytes} bytes)"


WRITE_FILE = ToolSpec(
    name="write_file",
    title="Write a file",
    description=(
        "Create a file or replace its whole content, atomically. To change part of a file "
        "use edit_file (it shows a diff and checks what it replaces)."
    ),
    args=WriteFileArgs,
    result=WriteResult,
    run=run_write,
    answer=answer_write,
    annotations=OVERWRITE,
    write=True,
)


class Edit(Args):
    old_text: str = Field(description="text that occurs exactly once in the file")
    new_text: str = Field(description="what replaces it")


class EditFileArgs(Args):
    path: PathArg
    edits: Annotated[
        list[Edit],
        Field(min_length=1, description="replacements, applied in order: [{old_text, new_text}]"),
    ]
    root: RootArg = None
    dry_run: Annotated[bool, Field(description="show the diff without writing")] = False


def run_edit(c: Call, a: EditFileArgs) -> EditResult:
    pairs = [(e.old_text, e.new_text) for e in a.edits]
    return c.service.edit_file(c.roots, path=a.path, edits=pairs, root=a.root, dry_run=a.dry_run)


DIFF_LINE_CHARS = 2_000  # a longer diff line is shown as a window around what changed


def answer_edit(r: EditResult, out: Out) -> str:
    lines = (r.diff or "(no change)").split("\n")
    cut = _cut_diff_lines(lines)
    if cut != lines:  # (the structured diff holds the lines as the text shows them)
        lines = cut
        r.diff = "\n".join(lines)
    total = len(lines)

    def footer(k: int) -> str:
        notes = [f"(diff cut: {total - k} more lines left out)"] if k < total else []
        if not r.applied:
            notes.append("(dry run: nothing written)")
        return "\n".join(notes)

    k, body = fit(lines, out.budget, footer)
    if k < total:
        r.diff = "\n".join(lines[:k]) + "\n"
    return body


EDIT_FILE = ToolSpec(
    name="edit_file",
    title="Edit a file",
    description=(
        "Replace text in a file: each edit's old_text must occur exactly once; applied in "
        "order, atomically, and answered with a unified diff (dry_run=true shows it without "
        "writing)."
    ),
    args=EditFileArgs,
    result=EditResult,
    run=run_edit,
    answer=answer_edit,
    annotations=DESTRUCTIVE,
    write=True,
)


def _cut_diff_lines(lines: list[str]) -> list[str]:
    """Diff lines over DIFF_LINE_CHARS (a minified file's one line) cut to a window around
    what changed: a removed line and the added line it pairs with are cut around the span
    where they differ, any other long line keeps its start; ``…`` marks each cut end."""
    out = list(lines)
    body = 2 if len(out) >= 2 and out[0].startswith("--- ") and out[1].startswith("+++ ") else 0
    i = body
    while i < len(out):
        j = i
        while j < len(out) and out[j].startswith("-"):
            j += 1
        k = j
        while k < len(out) and out[k].startswith("+"):
            k += 1
        if k == i:
            out[i] = _cut_diff_line(out[i], None)
            i += 1
            continue
        removed, added = range(i, j), range(j, k)
        for n in removed:
            m = j + (n - i)
            out[n] = _cut_diff_line(out[n], out[m] if m in added else None)
        for m in added:
            n = i + (m - j)
            out[m] = _cut_diff_line(out[m], lines[n] if n in removed else None)
        i = k
    return out


def _cut_diff_line(line: str, other: str | None) -> str:
    if len(line) <= DIFF_LINE_CHARS:
        return line
    mark, text = line[:1], line[1:]
    raw = text.encode()
    if other is None:
        return mark + cut_context(raw, DIFF_LINE_CHARS)[0]
    peer = other[1:]
    p = _common_prefix(text, peer)
    rest, peer_rest = text[p:], peer[p:]
    q = _common_prefix(rest[::-1], peer_rest[::-1])
    start = len(text[:p].encode())
    end = len(raw) - len(text[len(text) - q :].encode()) if q else len(raw)
    return mark + cut_around(raw, start, max(start, end), DIFF_LINE_CHARS)[0]


def _common_prefix(a: str, b: str) -> int:
    """How many leading characters a and b share (a binary search over slice comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class CreateDirectoryArgs(Args):
    path: PathArg
    root: RootArg = None


def run_mkdir(c: Call, a: CreateDirectoryArgs) -> PathResult:
    return c.service.create_directory(c.roots, **a.model_dump())


CREATE_DIRECTORY = ToolSpec(
    name="create_directory",
    title="Create a directory",
    description="Create a directory and any missing parents (nothing happens if it exists).",
    args=CreateDirectoryArgs,
    result=PathResult,
    run=run_mkdir,
    answer=lambda r, out: f"directory {out.path(r.path, r.uri)} exists",
    annotations=WRITE,
    write=True,
)


class MoveArgs(Args):
    source: Annotated[str, Field(description="the file or directory to move (a path as shown)")]
    destination: Annotated[str, Field(description="where it goes, in the same root")]
    root: RootArg = None
    overwrite: Annotated[bool, Field(description="replace what is at the destination")] = False


def run_move(c: Call, a: MoveArgs) -> MoveResult:
    return c.service.move_path(c.roots, **a.model_dump())


MOVE_PATH = ToolSpec(
    name="move_path",
    title="Move or rename",
    description="Move or rename a file or directory within a root (one atomic rename).",
    args=MoveArgs,
    result=MoveResult,
    run=run_move,
    answer=lambda r, out: f"moved {r.source} -> {out.path(r.destination, r.uri)}",
    annotations=DESTRUCTIVE,
    write=True,
)


class CopyArgs(MoveArgs):
    source: Annotated[str, Field(description="the file or directory to copy (a path as shown)")]
    destination: Annotated[str, Field(description="where the copy goes, in the same root")]


def run_copy(c: Call, a: CopyArgs) -> CopyResult:
    return c.service.copy_path(c.roots, **a.model_dump())


def _skipped(head: str, skipped: list[Skipped], out: Out) -> tuple[str, int]:
    pieces = [head] + [f"skipped {_shown(out, s.path, s.uri)}: {s.reason}" for s in skipped]
    total = len(pieces)

    def footer(k: int) -> str:
        return f"({total - k} more skipped entries left out)" if k < total else ""

    k, body = fit(pieces, out.budget, footer)
    return body, max(0, k - 1)


def _shown(out: Out, path: str, uri: str | None) -> str:
    """A path that still exists after the write (a copy's source, a skipped entry), shown
    so that it round-trips (Out.path)."""
    return out.path(path, uri) if uri is not None else path


def answer_copy(r: CopyResult, out: Out) -> str:
    head = (
        f"copied {_shown(out, r.source, r.source_uri)} -> {out.path(r.destination, r.uri)}: "
        f"{plural(r.files, 'file')}, {plural(r.directories, 'directory', 'directories')}"
    )
    body, k = _skipped(head, r.skipped, out)
    r.skipped = r.skipped[:k]
    return body


COPY_PATH = ToolSpec(
    name="copy_path",
    title="Copy",
    description=(
        "Copy a file or a directory tree within a root; links leaving the root and special "
        "files are skipped and reported."
    ),
    args=CopyArgs,
    result=CopyResult,
    run=run_copy,
    answer=answer_copy,
    annotations=OVERWRITE,
    write=True,
)


class DeleteArgs(Args):
    path: PathArg
    root: RootArg = None
    recursive: Annotated[bool, Field(description="needed to delete a non-empty directory")] = False


def run_delete(c: Call, a: DeleteArgs) -> DeleteResult:
    return c.service.delete_path(c.roots, **a.model_dump())


def answer_delete(r: DeleteResult, out: Out) -> str:
    head = f"deleted {r.path} ({plural(r.removed, 'entry', 'entries')})"
    pieces = [head] + [f"left {_shown(out, k.path, k.uri)}: {k.reason}" for k in r.skipped]
    total = len(pieces)

    def footer(k: int) -> str:
        more = plural(total - k, "more directory", "more directories")
        return f"({more} left in place, left out to fit the answer)" if k < total else ""

    k, body = fit(pieces, out.budget, footer)
    r.skipped = r.skipped[: max(0, k - 1)]
    return body


DELETE_PATH = ToolSpec(
    name="delete_path",
    title="Delete",
    description=(
        "Delete a file, link or directory (recursive=true for a non-empty one); never a root "
        "itself. A link is removed, never followed."
    ),
    args=DeleteArgs,
    result=DeleteResult,
    run=run_delete,
    answer=answer_delete,
    annotations=DESTRUCTIVE,
    write=True,
)
