"""The reading tools: list_roots, read_file, list_directory, directory_tree, file_info."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ..confine import MAX_DIR_ENTRIES
from ..models import (
    DirectoryTreeResult,
    FileInfoResult,
    ListDirectoryResult,
    ListRootsResult,
    ReadFileResult,
    TreeNode,
)
from ..window import DEFAULT_MAX_LINES
from .common import CursorArg, DirArg, PathArg, RootArg
from .spec import Args, Call, Out, ToolSpec, cut_items, fit, plural, shown_name

# ---- list_roots ------------------------------------------------------------------------------


class ListRootsArgs(Args):
    cursor: CursorArg = None


def run_list_roots(c: Call, a: ListRootsArgs) -> ListRootsResult:
    return c.service.list_roots(c.roots, cursor=a.cursor)


_PHASE_SAID = {
    "none": "; grep, search and find_symbol read files live until it is built",
    "grep": "; grep answers from it, its words and symbols still being added (search and "
    "find_symbol read files live)",
    "complete": "",
}


def answer_roots(r: ListRootsResult, out: Out) -> str:
    pieces = [
        f"{x.name} (id {x.id}) {x.uri} [{x.source}; index {x.index.state}"
        + (f", {plural(x.index.files, 'file')}" if x.index.state != "off" else "")
        + (_PHASE_SAID[x.index.phase] if x.index.state in ("building", "ready") else "")
        + "]"
        for x in r.roots
    ] or ["(no roots: the client announced none inside the roots the operator serves)"]
    mode = "read-only" if r.read_only else "writes allowed"
    total = len(r.roots)

    def footer(k: int) -> str:
        left = (
            f"; {total - k} more roots left out to fit the answer; continue with "
            f"cursor={r.resume_at(k)}"
            if k < total
            else ""
        )
        return f"({mode}{left})"

    k, body = fit(pieces, out.budget, footer)
    cut_items(r, "roots", k)
    return body


LIST_ROOTS = ToolSpec(
    name="list_roots",
    title="List roots",
    description=(
        "The roots you can search and read (the client's roots within the operator's), with "
        "their ids, names, URIs and index state, and whether writes are allowed. Call it "
        "first when unsure what is served."
    ),
    args=ListRootsArgs,
    result=ListRootsResult,
    run=run_list_roots,
    answer=answer_roots,
    bulk=("roots",),
)

# ---- read_file -------------------------------------------------------------------------------


class ReadFileArgs(Args):
    path: PathArg
    root: RootArg = None
    start_line: Annotated[
        int | None, Field(ge=1, description="first line to return (1-based; default 1)")
    ] = None
    end_line: Annotated[
        int | None,
        Field(
            ge=1, description="last line to return (inclusive; default: start_line + max_lines - 1)"
        ),
    ] = None
    max_lines: Annotated[
        int,
        Field(
            ge=1,
            le=100_000,
            description=f"at most this many lines (default {DEFAULT_MAX_LINES}; fewer when "
            "the answer's character budget is reached first); the answer gives "
            "next_start_line to read on",
        ),
    ] = DEFAULT_MAX_LINES


def run_read(c: Call, a: ReadFileArgs) -> ReadFileResult:
    return c.service.read_file(c.roots, token=c.token, **a.model_dump())


def answer_read(r: ReadFileResult, out: Out) -> str:
    lines = r._lines or r.content.splitlines(keepends=True)
    pieces = [x[:-1] if x.endswith("\n") else x for x in lines]
    where = out.path(r.path, r.uri)
    # the header and footer count against the budget: the longest they can be once the
    # window is cut (a path can be thousands of characters)
    most = r.total_lines
    room = len(_read_header(where, r.start_line, most, most, r.lines_cut or 0))
    room += len(_read_footer(r, most)) + 1
    k, body = fit(pieces, max(1, out.budget - room), lambda k: "")
    if k < len(lines):
        r.content = "".join(lines[:k])
        r.end_line = r.start_line + k - 1
        nxt = r.resume_at(k)
        r.next_start_line = nxt if isinstance(nxt, int) else None
        r.truncated = True
    head = _read_header(where, r.start_line, r.end_line, r.total_lines, r.lines_cut or 0)
    tail = _read_footer(r) if r.next_start_line is not None else ""
    return f"{head}\n{body}{tail}"


def _read_header(where: str, start: int, end: int, total: int, cut: int) -> str:
    span = f"lines {start}-{end} of {total}" if end >= start else f"empty ({total} lines)"
    return f"{where} ({span}" + (f"; {plural(cut, 'long line')} cut" if cut else "") + ")"


def _read_footer(r: ReadFileResult, most: int | None = None) -> str:
    """The last line of a window that does not reach the file's end: which lines it gave,
    and where the next one starts (``most``: the longest it can be, to make room for it)."""
    if most is not None:
        end = nxt = total = most
    else:
        end, total, nxt = r.end_line, r.total_lines, r.next_start_line or 0
    return f"\n(lines {r.start_line}-{end} of {total} shown; next: start_line={nxt})"


READ_FILE = ToolSpec(
    name="read_file",
    title="Read a text file",
    description=(
        "A text file's lines from start_line (default 1): as many as fit the answer (about "
        f"20k characters; at most max_lines={DEFAULT_MAX_LINES}), so check the range it "
        "gives: it ends with `next: start_line=N` where the window stops before the end. "
        "Lines over 2000 characters are cut; binary files are refused. Paths from grep, "
        "search or find_files work as shown."
    ),
    args=ReadFileArgs,
    result=ReadFileResult,
    run=run_read,
    answer=answer_read,
)

# ---- list_directory --------------------------------------------------------------------------


class ListDirectoryArgs(Args):
    path: DirArg = None
    root: RootArg = None
    cursor: CursorArg = None


def run_ls(c: Call, a: ListDirectoryArgs) -> ListDirectoryResult:
    return c.service.list_directory(c.roots, **a.model_dump())


_MARK = {"dir": "/", "symlink": "@", "other": "|", "file": ""}


def answer_ls(r: ListDirectoryResult, out: Out) -> str:
    here = out.path(r.path, r.uri)
    pieces = [f"{here}/"]  # (a heading that round-trips; entries are names in it)
    pieces += [f"{shown_name(e.name)}{_MARK[e.type]}" for e in r.entries]
    total = len(r.entries)

    def footer(shown: int) -> str:
        k = max(0, shown - 1)  # (the first piece is the heading)
        if k < total:
            nxt = r.resume_at(k)
            return f"({total - k} more entries of this page left out; continue with cursor={nxt})"
        if r.next_cursor:
            return f"(more: pass cursor={r.next_cursor})"
        if r.truncated:
            return (
                f"(the directory holds more than {MAX_DIR_ENTRIES:,} entries: only the first "
                "ones read are listed; reach the others with find_files or grep's glob)"
            )
        return "" if total else "(empty)"

    shown, body = fit(pieces, out.budget, footer)
    k = max(0, shown - 1)
    if k < total:
        r.entries = r.entries[:k]
        nxt = r.resume_at(k)
        r.next_cursor = nxt if isinstance(nxt, str) else None
    return body


LIST_DIRECTORY = ToolSpec(
    name="list_directory",
    title="List a directory",
    description=(
        "The entries of one directory (default: the root), sorted by name, links shown as "
        "links (name@), directories as name/. Use directory_tree for several levels, "
        "find_files to find files by name anywhere."
    ),
    args=ListDirectoryArgs,
    result=ListDirectoryResult,
    run=run_ls,
    answer=answer_ls,
    bulk=("entries",),
)

# ---- directory_tree --------------------------------------------------------------------------


class DirectoryTreeArgs(Args):
    path: DirArg = None
    root: RootArg = None
    max_depth: Annotated[
        int, Field(ge=1, le=20, description="levels below the directory (1-20, default 3)")
    ] = 3
    max_entries: Annotated[
        int,
        Field(ge=1, le=10_000, description="at most this many entries (1-10000, default 500)"),
    ] = 500


def run_tree(c: Call, a: DirectoryTreeArgs) -> DirectoryTreeResult:
    return c.service.directory_tree(c.roots, c.token, **a.model_dump())


def answer_tree(r: DirectoryTreeResult, out: Out) -> str:
    order: list[tuple[int, TreeNode]] = []

    def walk(node: TreeNode, depth: int) -> None:
        order.append((depth, node))
        for child in node.children or []:
            walk(child, depth + 1)

    walk(r.tree, 0)
    pieces = ["  " * d + shown_name(n.name) + ("/" if n.type == "dir" else "") for d, n in order]
    pieces[0] = out.path(r.path, r.uri) + "/"  # (the top: a path that round-trips)
    total = len(pieces)

    def footer(k: int) -> str:
        if k < total or r.truncated:
            return (
                "(truncated: pass a deeper `path`, a smaller max_depth, or use find_files)"
                if k < total
                else "(truncated at max_entries: raise it, or narrow the path)"
            )
        return ""

    k, body = fit(pieces, out.budget, footer)
    if k < total:
        keep = {id(n) for _, n in order[:k]}
        for _, n in order[:k]:
            if n.children is not None:
                n.children = [ch for ch in n.children if id(ch) in keep]
        r.truncated = True
    return body


DIRECTORY_TREE = ToolSpec(
    name="directory_tree",
    title="Directory tree",
    description=(
        "The files and directories below a directory, nested, to max_depth levels, with "
        ".gitignore rules applied and hidden entries left out; at most max_entries entries "
        "(500 unless told). Use it to get the lay of a project."
    ),
    args=DirectoryTreeArgs,
    result=DirectoryTreeResult,
    run=run_tree,
    answer=answer_tree,
)

# ---- file_info -------------------------------------------------------------------------------


class FileInfoArgs(Args):
    path: PathArg
    root: RootArg = None


def run_info(c: Call, a: FileInfoArgs) -> FileInfoResult:
    return c.service.file_info(c.roots, **a.model_dump())


def answer_info(r: FileInfoResult, out: Out) -> str:
    return (
        f"{out.path(r.path, r.uri)}: {r.type}, {r.size} bytes, mode {r.mode}, modified "
        f"{r.mtime}" + (", symlink" if r.is_symlink else "")
    )


FILE_INFO = ToolSpec(
    name="file_info",
    title="File information",
    description=(
        "Type, size, modification time and mode of one path (a link is described itself, "
        "not followed)."
    ),
    args=FileInfoArgs,
    result=FileInfoResult,
    run=run_info,
    answer=answer_info,
)
