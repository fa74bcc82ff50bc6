"""The code tools: find_symbol (where a name is defined) and outline (a file's structure)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ..models import FindSymbolResult, OutlineNode, OutlineResult, SymbolKind
from ..symbols import UNPARSED_LARGE, unparsed_why
from .common import CursorArg, ExcludeArg, IncludeArg, PathArg, RootArg, ScopeArg, max_results_arg
from .spec import Args, Call, Out, ToolSpec, cut_items, fit, plural


class FindSymbolArgs(Args):
    name: Annotated[
        str,
        Field(
            min_length=1,
            description="the identifier to find the definition of (a class, function, "
            "method, type, constant, ...)",
        ),
    ]
    root: RootArg = None
    path: ScopeArg = None
    kind: Annotated[SymbolKind | None, Field(description="only definitions of this kind")] = None
    exact: Annotated[
        bool,
        Field(description="true: the name exactly; false: names containing it, ignoring case"),
    ] = True
    include: IncludeArg = None
    exclude: ExcludeArg = None
    max_results: max_results_arg(50, 500, "definitions") = 50  # type: ignore[valid-type]
    cursor: CursorArg = None


def run_find_symbol(c: Call, a: FindSymbolArgs) -> FindSymbolResult:
    return c.service.find_symbol(c.roots, c.token, **a.model_dump())


def answer_find_symbol(r: FindSymbolResult, out: Out) -> str:
    pieces = []
    for s in r.symbols:
        inside = f" (in {s.container})" if s.container else ""
        bound = f" ({_BOUND[s.binding]})" if s.binding else ""
        pieces.append(
            f"{out.path(s.path, s.uri)}:{s.line}: {s.kind} {s.name}{inside}{bound}\n  {s.signature}"
        )
    total = len(r.symbols)

    def footer(k: int) -> str:
        if not total:
            near = f"did you mean {', '.join(r.near)}? or " if r.near else ""
            wider = "try exact=false, or " if r._exact else ""
            return f"(no definitions found: {near}{wider}grep for the name)" + _resyncing(
                r.resyncing
            )
        nxt = r.resume_at(k) if k < total else r.next_cursor
        left = f"; {total - k} more left out to fit the answer" if k < total else ""
        more = f"; continue with cursor={nxt}" if nxt else ""
        return f"({plural(k, 'definition')}{left}{more})" + _resyncing(r.resyncing)

    k, body = fit(pieces, out.budget, footer)
    cut_items(r, "symbols", k)
    return body


def _resyncing(names: list[str]) -> str:
    if not names:
        return ""
    return (
        f"\n(from the last build of the index of {', '.join(names)}, being re-synced now: "
        "a file changed while no rootgrep ran may be missed; grep is exact meanwhile)"
    )


_BOUND = {
    "alias": "bound to another name: a re-export or an alias",
    "import": "an import: defined in the module it comes from",
}

FIND_SYMBOL = ToolSpec(
    name="find_symbol",
    title="Find where a name is defined",
    description=(
        "The definitions of a name (class, function, method, struct, type, constant, ...) "
        "with file, line range, enclosing definition and signature, from the code's syntax "
        "(Python, JavaScript, TypeScript, Go, Rust, C, C++, Java). Use it for 'where is X "
        "defined'; use grep for every use of X, search when you do not know the name."
    ),
    args=FindSymbolArgs,
    result=FindSymbolResult,
    run=run_find_symbol,
    answer=answer_find_symbol,
    bulk=("symbols",),
)


class OutlineArgs(Args):
    path: PathArg
    root: RootArg = None
    cursor: CursorArg = None


def run_outline(c: Call, a: OutlineArgs) -> OutlineResult:
    return c.service.outline(c.roots, **a.model_dump())


def answer_outline(r: OutlineResult, out: Out) -> str:
    """The definitions in file order, nested by indentation, from the cursor's place on (a
    definition nested in one the cursor passed comes under that one again, as its context),
    as many as fit; the rest is the next cursor's."""
    order: list[tuple[int, OutlineNode, tuple[OutlineNode, ...]]] = []

    def walk(nodes: list[OutlineNode], depth: int, above: tuple[OutlineNode, ...]) -> None:
        for n in nodes:
            order.append((depth, n, above))
            walk(n.children, depth + 1, (*above, n))

    def shown(n: OutlineNode, above: tuple[OutlineNode, ...]) -> str:
        # a method whose owner is not the definition it is listed under (none in this
        # file: a Rust `impl X` of a type defined elsewhere) says whose it is
        owner = n.container is not None and (not above or above[-1].name != n.container)
        return f"{n.kind} {n.name}" + (f" (of {n.container})" if owner else "")

    walk(r.symbols, 0, ())
    skip = min(r._skip, len(order))
    page = order[skip:]
    context = list(page[0][2]) if page else []  # (the containers the cursor passed)
    lines = [f"{'  ' * d}{n.line}-{n.end_line} {shown(n, a)}" for d, n, a in page]
    head = f"{out.path(r.path, r.uri)} ({r.language})"
    heads = [head, *(f"{'  ' * d}{n.line}-{n.end_line} {n.kind} {n.name} (continued)"
                     for d, n in enumerate(context))]  # fmt: skip
    total = len(lines)

    def footer(k: int) -> str:
        if r.truncated or r.not_parsed is not None:
            why = unparsed_why(r.not_parsed or UNPARSED_LARGE)
            return (
                f"(not parsed: {why}, so its definitions are unknown, not none: use grep or "
                "read_file)"
            )
        if not order:
            return "(no definitions)"
        if k < total:
            return f"({total - k} more definitions: continue with cursor={r._cursor_at(skip + k)})"
        return ""

    # (the heading and the containers go with the first definition: one piece, so a page
    # always shows at least one definition and paging advances)
    pieces = ["\n".join([*heads, *lines[:1]]), *lines[1:]]
    k, body = fit(pieces, out.budget, lambda k: footer(k if total else 0))
    shown = min(k, total)
    keep = {id(n) for n in context} | {id(n) for _, n, _ in page[:shown]}

    def prune(nodes: list[OutlineNode]) -> list[OutlineNode]:
        kept = [n for n in nodes if id(n) in keep]
        for n in kept:
            n.children = prune(n.children)
        return kept

    if skip or shown < total:
        r.symbols = prune(r.symbols)
    r.next_cursor = r._cursor_at(skip + shown) if shown < total else None
    return body


OUTLINE = ToolSpec(
    name="outline",
    title="Outline a file",
    description=(
        "One file's definitions, nested (methods under their class), with line ranges: read "
        "a large file's structure first, then read_file the lines you need."
    ),
    args=OutlineArgs,
    result=OutlineResult,
    run=run_outline,
    answer=answer_outline,
    bulk=("symbols",),
)
