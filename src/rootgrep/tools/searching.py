"""The search tools: grep (exact), search (ranked), find_files (names), reindex."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ..grep import MAX_CONTEXT
from ..models import FindFilesResult, GrepResult, ReindexResult, SearchResult
from ..service.base import DEFAULT_MAX_LINE_CHARS
from .common import (
    CursorArg,
    ExcludeArg,
    HiddenArg,
    IncludeArg,
    NoIgnoreArg,
    RootArg,
    ScopeArg,
    max_results_arg,
)
from .spec import Args, Call, Out, ToolSpec, cut_items, fit, plural

Lines = Annotated[int | None, Field(ge=0, le=MAX_CONTEXT)]

# ---- grep ------------------------------------------------------------------------------------


class GrepArgs(Args):
    pattern: Annotated[
        str,
        Field(
            description="what to find: a literal string (default), or an RE2 regex with "
            "regex=true (no look-around or backreferences); matched within one line"
        ),
    ]
    root: RootArg = None
    path: ScopeArg = None
    regex: Annotated[bool, Field(description="pattern is an RE2 regex, not a literal")] = False
    case_sensitive: Annotated[bool, Field(description="false: ignore case")] = True
    whole_word: Annotated[
        bool, Field(description="match only where no word character is just before or after")
    ] = False
    include: IncludeArg = None
    exclude: ExcludeArg = None
    output_mode: Annotated[
        Literal["content", "files_with_matches", "count"],
        Field(
            description="content: the matching lines (default); files_with_matches: only "
            "the files that match; count: matching lines per file"
        ),
    ] = "content"
    context: Annotated[
        int, Field(ge=0, le=MAX_CONTEXT, description=f"lines around each match (0-{MAX_CONTEXT})")
    ] = 0
    before: Annotated[
        Lines, Field(description=f"lines before each match (0-{MAX_CONTEXT}; default: context)")
    ] = None
    after: Annotated[
        Lines, Field(description=f"lines after each match (0-{MAX_CONTEXT}; default: context)")
    ] = None
    max_line_chars: Annotated[
        int,
        Field(
            ge=20,
            le=5000,
            description="a longer line is shown as a window of this many characters around "
            f"its match, with … at each cut end (20-5000, default {DEFAULT_MAX_LINE_CHARS})",
        ),
    ] = DEFAULT_MAX_LINE_CHARS
    hidden: HiddenArg = False
    no_ignore: NoIgnoreArg = False
    max_results: max_results_arg(200, what="matches (files in the files modes)") = 200  # type: ignore[valid-type]
    cursor: CursorArg = None


def run_grep(c: Call, a: GrepArgs) -> GrepResult:
    args = a.model_dump()
    # one match (its line and context) stays within half the answer budget, so a wide
    # max_line_chars with much context cannot make a single item pass it many times over
    shown = 1 + (a.context if a.before is None else a.before)
    shown += a.context if a.after is None else a.after
    half = c.service.settings.max_answer_chars // (2 * shown)
    args["max_line_chars"] = min(a.max_line_chars, max(20, half))
    return c.service.grep(c.roots, c.token, **args)


def answer_grep(r: GrepResult, out: Out) -> str:
    if r.output_mode != "content":
        return _answer_grep_files(r, out)
    pieces: list[str] = []
    prev: str | None = None
    shown_to = 0  # the last line number printed in the current file
    for i, m in enumerate(r.matches):
        lines: list[str] = []
        # context after a match stops at the file's next match, shown as a match (as rg)
        nxt = r.matches[i + 1] if i + 1 < len(r.matches) else None
        stop = nxt.line if nxt is not None and nxt.uri == m.uri else None
        if m.uri != prev:  # (the same relative path in several roots: another file)
            lines.append(out.path(m.path, m.uri))
            prev, shown_to = m.uri, 0
        first = m.line - len(m.before)
        if shown_to and first > shown_to + 1:
            lines.append("--")
        for i, b in enumerate(m.before):
            if first + i > shown_to:
                lines.append(f"{first + i}-{b}")
        lines.append(f"{m.line}:{m.text}")
        after = m.after if stop is None else m.after[: max(0, stop - m.line - 1)]
        for j, a in enumerate(after):
            lines.append(f"{m.line + 1 + j}-{a}")
        shown_to = m.line + len(after)
        pieces.append("\n".join(lines))
    total = len(r.matches)

    def footer(k: int) -> str:
        files = len({m.uri for m in r.matches[:k]})
        head = f"({plural(k, 'match', 'matches')} in {plural(files, 'file')}"
        searched = f", {plural(r.files_searched, 'file')} searched"
        return head + searched + _more(r, k, total, "matches", out) + ")"

    k, body = fit(pieces, out.budget, footer)
    cut_items(r, "matches", k)
    return body


def _answer_grep_files(r: GrepResult, out: Out) -> str:
    counting = r.output_mode == "count"
    pieces = [
        f"{out.path(f.path, f.uri)}:{f.matches}" if counting else out.path(f.path, f.uri)
        for f in r.files
    ]
    total = len(r.files)

    def footer(k: int) -> str:
        n = sum(f.matches for f in r.files[:k])
        what = f"{plural(n, 'matching line')} in " if counting else ""
        return f"({what}{plural(k, 'file')}" + _more(r, k, total, "files", out) + ")"

    k, body = fit(pieces, out.budget, footer)
    cut_items(r, "files", k)
    if counting:
        r.total_matches = sum(f.matches for f in r.files)
    return body


def _more(r: GrepResult | FindFilesResult, k: int, total: int, what: str, out: Out) -> str:
    """The end of a footer: what was left out, and the cursor that continues."""
    nxt = r.resume_at(k) if k < total else r.next_cursor
    if k < total:
        left = f"; {total - k} more {what} of this page left out to fit the answer"
        return left + (f"; continue with cursor={nxt}" if nxt else "")
    return f"; more: pass cursor={nxt}" if nxt else ""


GREP = ToolSpec(
    name="grep",
    title="Exact search (like ripgrep)",
    description=(
        "Every line matching `pattern` exactly (a literal; RE2 regex with regex=true), like "
        "ripgrep: exhaustive, in path order, respecting .gitignore and skipping hidden and "
        "binary files unless told otherwise. Use it to find all uses of a name, an exact "
        "string or a pattern; use search for ranked results by words, find_files for file "
        "names. Answers are grouped by file (path, then `line:text`); paths can be passed "
        "back as read_file's `path`. output_mode=files_with_matches or count gives files "
        "only. Long answers are cut to fit: continue with the cursor the answer gives."
    ),
    args=GrepArgs,
    result=GrepResult,
    run=run_grep,
    answer=answer_grep,
    bulk=("matches", "files"),
)

# ---- search ----------------------------------------------------------------------------------


MAX_QUERY_CHARS = 1000  # a longer search query is refused (its cost grows with its words)


class SearchArgs(Args):
    query: Annotated[
        str,
        Field(
            min_length=1,
            max_length=MAX_QUERY_CHARS,
            description="words to rank files by (files holding more of them first; a file "
            "defining one ranks above files using it; stop words dropped, so 'where is X "
            'defined\' works); "quoted phrases", -word excludes whole words, '
            "path:GLOB and ext:py filter",
        ),
    ]
    root: RootArg = None
    path: ScopeArg = None
    include: IncludeArg = None
    exclude: ExcludeArg = None
    max_results: max_results_arg(20, 100, "files") = 20  # type: ignore[valid-type]
    cursor: CursorArg = None


def run_search(c: Call, a: SearchArgs) -> SearchResult:
    return c.service.search(c.roots, c.token, **a.model_dump())


def answer_search(r: SearchResult, out: Out) -> str:
    pieces = []
    for h in r.results:
        lines = [f"{out.path(h.path, h.uri)}  (score {h.score:g})"]
        lines += [f"  {sn.line}: {sn.text}" for sn in h.snippets]
        pieces.append("\n".join(lines))
    total = len(r.results)

    def footer(k: int) -> str:
        notes: list[str] = []
        if r.failed:
            notes.append(
                f"(partial: the index of {', '.join(r.failed)} could not be built; call "
                "reindex to build it again; grep answers exactly now, without the index)"
            )
        if r.partial and (r.building or not r.failed):
            where = ", ".join(r.building) or "a root"
            notes.append(
                f"(partial: the index of {where} is still being built, so results may be "
                "missing; grep answers exactly now, without the index)"
            )
        if k < total:
            nxt = r.resume_at(k)
            notes.append(
                f"({total - k} more results of this page left out to fit the answer"
                + (f"; continue with cursor={nxt})" if nxt else ")")
            )
        elif r.next_cursor:
            notes.append(f"(more: pass cursor={r.next_cursor})")
        if not k and not r.partial:
            notes.append("(no results: try fewer or other words, or grep for an exact string)")
        return "\n".join(notes)

    k, body = fit(pieces, out.budget, footer)
    cut_items(r, "results", k)
    return body


SEARCH = ToolSpec(
    name="search",
    title="Ranked search",
    description=(
        "Files ranked by how well they match words, each with its best lines (the "
        "definition line first). Use it for 'where is X handled', concepts, "
        "or when you do not know the exact string; use grep for every exact occurrence. "
        "Files holding more of the words rank first, a file defining a name above files "
        'using it, tests lower; "quoted phrases", -word excludes, path:GLOB and ext:py '
        "filter. "
        "While an index is still being built the answer says so (grep works meanwhile)."
    ),
    args=SearchArgs,
    result=SearchResult,
    run=run_search,
    answer=answer_search,
    bulk=("results",),
)

# ---- find_files ------------------------------------------------------------------------------


class FindFilesArgs(Args):
    pattern: Annotated[
        str,
        Field(
            description="a gitignore-style glob when it has glob characters (`*.py` at any "
            "depth, `src/*.ts` anchored at the root, `*.{toml,cfg}`), else a case-insensitive "
            "substring of the root-relative path"
        ),
    ]
    root: RootArg = None
    path: ScopeArg = None
    include: IncludeArg = None
    exclude: ExcludeArg = None
    hidden: HiddenArg = False
    no_ignore: NoIgnoreArg = False
    max_results: max_results_arg(200, what="files") = 200  # type: ignore[valid-type]
    cursor: CursorArg = None


def run_find(c: Call, a: FindFilesArgs) -> FindFilesResult:
    return c.service.find_files(c.roots, c.token, **a.model_dump())


def answer_find(r: FindFilesResult, out: Out) -> str:
    pieces = [f"{out.path(f.path, f.uri)}  ({f.size} bytes, {f.mtime})" for f in r.files]
    total = len(r.files)

    def footer(k: int) -> str:
        return f"({plural(k, 'file')}" + _more(r, k, total, "files", out) + ")"

    k, body = fit(pieces, out.budget, footer)
    cut_items(r, "files", k)
    return body


FIND_FILES = ToolSpec(
    name="find_files",
    title="Find files by name",
    description=(
        "Files whose path matches a glob or a substring, in path order, with size and "
        "modification time. Use it to locate files by name; use grep or search to look "
        "inside them."
    ),
    args=FindFilesArgs,
    result=FindFilesResult,
    run=run_find,
    answer=answer_find,
    bulk=("files",),
)

# ---- reindex ---------------------------------------------------------------------------------


class ReindexArgs(Args):
    root: Annotated[
        str | None, Field(description="the root to re-index (id, name or URI); default: every root")
    ] = None


def run_reindex(c: Call, a: ReindexArgs) -> ReindexResult:
    return c.service.reindex(c.roots, c.token, root=a.root, progress=c.progress)


def answer_reindex(r: ReindexResult, out: Out) -> str:
    pieces = [
        f"{x.root.name}: {plural(x.files, 'file')} indexed; {x.added} added, {x.updated} "
        f"updated, {x.removed} removed"
        for x in r.roots
    ]
    total = len(pieces)

    def footer(k: int) -> str:
        return (
            f"({total - k} more roots re-indexed, left out to fit the answer; list_roots shows "
            "every root's index state)"
            if k < total
            else ""
        )

    k, body = fit(pieces, out.budget, footer)
    r.roots = r.roots[:k]
    return body or "(no roots)"


REINDEX = ToolSpec(
    name="reindex",
    title="Re-index",
    description=(
        "Bring the index of a root (or of every root) up to date now, re-reading only files "
        "that changed; sends progress notifications. Rarely needed: indexes follow changes "
        "by themselves, and grep is exact without them."
    ),
    args=ReindexArgs,
    result=ReindexResult,
    run=run_reindex,
    answer=answer_reindex,
    progress=True,
)
