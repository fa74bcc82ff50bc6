"""The search tools: grep (exact), search (ranked), find_files (names), reindex."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ..grep import MAX_CONTEXT
from ..models import FindFilesResult, GrepResult, ReindexResult, SearchResult
from ..service.base import DEFAULT_MAX_LINE_CHARS, TOTAL_SECONDS
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
            description="an RE2 regex, as rg's (no look-around or backreferences), matched "
            "within a line; a literal with fixed_strings=true"
        ),
    ]
    root: RootArg = None
    path: ScopeArg = None
    regex: Annotated[bool, Field(description="false: a literal (as fixed_strings=true)")] = True
    fixed_strings: Annotated[
        bool, Field(description="pattern is a literal, not a regex (rg -F)")
    ] = False
    case_sensitive: Annotated[bool, Field(description="false: ignore case")] = True
    whole_word: Annotated[bool, Field(description="only whole words (rg -w)")] = False
    include: IncludeArg = None
    exclude: ExcludeArg = None
    output_mode: Annotated[
        Literal["content", "files_with_matches", "count"],
        Field(
            description="content: matching lines; files_with_matches: files only; count: "
            "matching lines per file"
        ),
    ] = "content"
    context: Annotated[
        int, Field(ge=0, le=MAX_CONTEXT, description="lines around each match (rg -C)")
    ] = 0
    before: Annotated[Lines, Field(description="lines before each match (default: context)")] = None
    after: Annotated[Lines, Field(description="lines after each match (default: context)")] = None
    max_line_chars: Annotated[
        int,
        Field(
            ge=20,
            le=5000,
            description="a longer line is cut to this many characters around its match",
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
    held: str | None = None  # the enclosing definition last named in the current file
    shown_to = 0  # the last line number printed in the current file
    # (separators between groups of lines only where lines around matches are shown)
    separated = any(m.before or m.after for m in r.matches)
    for i, m in enumerate(r.matches):
        lines: list[str] = []
        # context after a match stops at the file's next match, shown as a match (as rg)
        nxt = r.matches[i + 1] if i + 1 < len(r.matches) else None
        stop = nxt.line if nxt is not None and nxt.uri == m.uri else None
        if m.uri != prev:  # (the same relative path in several roots: another file)
            # the file, and the definition holding its first match: "who calls X" in one call
            head = out.path(m.path, m.uri)
            lines.append(f"{head} › {m.symbol}" if m.symbol else head)
            prev, shown_to, held = m.uri, 0, m.symbol
        elif m.symbol != held:
            lines.append(f"› {m.symbol or '(outside any definition)'}")
            held = m.symbol
        first = m.line - len(m.before)
        if separated and shown_to and first > shown_to + 1:
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
        whole = k == r.total_matches and r.total_exact and not r.truncated
        if whole and not k:
            head = "(no matches"
        elif whole:  # (a page that holds the whole scope)
            head = f"({plural(k, 'match', 'matches')} in {plural(files, 'file')}"
        else:
            head = (
                f"({k} of {_total(r.total_matches, r, 'match', 'matches')} shown, in {files} "
                f"of {_total(r.total_files, r, 'file')}"
            )
        searched = f"; {plural(r.files_searched, 'file')} searched"
        tail = _more(r, k, total, "matches", out) + ")"
        return head + searched + _counted(r) + tail + _other(r) + _not_searched(r)

    k, body = fit(pieces, out.budget, footer)
    cut_items(r, "matches", k)
    return body


def _total(n: int, r: GrepResult, one: str, many: str | None = None) -> str:
    return ("" if r.total_exact else "at least ") + plural(n, one, many)


def _counted(r: GrepResult) -> str:
    return "" if r.total_exact else f" (counting stopped after {TOTAL_SECONDS:g} s)"


def _not_searched(r: GrepResult) -> str:
    """The coverage line: what the scope holds that was not searched, and how to search it
    (only when there is something)."""
    k = r.skipped
    if k is None:
        return ""
    parts = []
    if k.hidden:
        parts.append(f"{plural(k.hidden, 'hidden entry', 'hidden entries')} (hidden=true)")
    if k.ignored:
        parts.append(f"{plural(k.ignored, 'entry', 'entries')} ignored by .gitignore/.ignore "
                     "(no_ignore=true)")  # fmt: skip
    if k.binary:
        parts.append(plural(k.binary, "binary file"))
    if k.too_large:
        parts.append(f"{plural(k.too_large, 'file')} over the size limit")
    return "\n(not searched: " + ", ".join(parts) + ")"


def _other(r: GrepResult) -> str:
    """The line saying what a pattern that found nothing finds read the other way."""
    o = r.other_reading
    if o is None:
        return ""
    n = ("" if o.exact else "at least ") + plural(o.matches, "line")
    found = f"matches {n} in {plural(o.files, 'file')}"
    if o.read_as == "literal":
        return (
            "\n(as a regex the pattern matches nothing; as a literal (fixed_strings=true) "
            f"it {found})"
        )
    return (
        "\n(as a literal the pattern matches nothing; as a regex (the default: leave "
        f"fixed_strings and regex out) it {found})"
    )


def _answer_grep_files(r: GrepResult, out: Out) -> str:
    counting = r.output_mode == "count"
    pieces = [
        f"{out.path(f.path, f.uri)}:{f.matches}" if counting else out.path(f.path, f.uri)
        for f in r.files
    ]
    total = len(r.files)

    def footer(k: int) -> str:
        n = sum(f.matches for f in r.files[:k])
        whole = k == r.total_files and r.total_exact and not r.truncated
        if whole:
            what = f"{plural(n, 'matching line')} in " if counting else ""
            head = f"({what}{plural(k, 'file')}"
        else:
            head = f"({k} of {_total(r.total_files, r, 'file')} shown"
            if counting:
                head += f", {_total(r.total_matches, r, 'matching line')} in all"
        more = _more(r, k, total, "files", out)
        return head + _counted(r) + more + ")" + _other(r) + _not_searched(r)

    k, body = fit(pieces, out.budget, footer)
    cut_items(r, "files", k)
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
        "Every line matching `pattern`, an RE2 regex as in rg (`a|b`, `f\\(x\\)`; "
        "fixed_strings=true: a literal): exhaustive, in path order, skipping ignored, hidden "
        "and binary files unless told. Use it for every use of a name or string; search "
        "ranks files by words, find_files matches names. Grouped by file (`path › "
        "enclosing definition`, then `line:text`); the footer gives the true totals and the "
        "cursor that continues."
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
            scanned = (
                f"; these come from what it holds and a live scan of {plural(r.live_files, 'file')}"
                if r.live_files
                else ""
            )
            notes.append(
                f"(partial: the index of {where} is still being built, so results may be "
                f"missing{scanned}; grep answers exactly now, without the index)"
            )
        if r.resyncing:
            notes.append(
                f"(from the last build of the index of {', '.join(r.resyncing)}, being "
                "re-synced now: a file changed while no rootgrep ran may rank as it was)"
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
    bulk=("roots",),
)
