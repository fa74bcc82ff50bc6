"""The code tools: find_symbol (where a name is defined) and outline (a file's structure)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ..models import FindSymbolResult, OutlineNode, OutlineResult, SymbolKind
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
        pieces.append(
            f"{out.path(s.path, s.uri)}:{s.line}: {s.kind} {s.name}{inside}\n  {s.signature}"
        )
    total = len(r.symbols)

    def footer(k: int) -> str:
        if not total:
            return "(no definitions found: try exact=false, or grep for the name)"
        nxt = r.resume_at(k) if k < total else r.next_cursor
        left = f"; {total - k} more left out to fit the answer" if k < total else ""
        more = f"; continue with cursor={nxt}" if nxt else ""
        return f"({plural(k, 'definition')}{left}{more})"

    k, body = fit(pieces, out.budget, footer)
    cut_items(r, "symbols", k)
    return body


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


def run_outline(c: Call, a: OutlineArgs) -> OutlineResult:
    return c.service.outline(c.roots, **a.model_dump())


def answer_outline(r: OutlineResult, out: Out) -> str:
    order: list[tuple[int, OutlineNode]] = []

    def walk(nodes: list[OutlineNode], depth: int) -> None:
        for n in nodes:
            order.append((depth, n))
            walk(n.children, depth + 1)

    walk(r.symbols, 0)
    pieces = [f"{'  ' * d}{n.line}-{n.end_line} {n.kind} {n.name}" for d, n in order]
    head = f"{out.path(r.path, r.uri)} ({r.language})"
    total = len(pieces)

    def footer(k: int) -> str:
        if r.truncated:
            return "(the file is over the 2 MiB parse cap: use grep or read_file)"
        if not total:
            return "(no definitions)"
        return f"({total - k} more definitions left out to fit the answer)" if k < total else ""

    k, body = fit([head, *pieces], out.budget, lambda k: footer(max(0, k - 1)))
    if k - 1 < total:
        keep = {id(n) for _, n in order[: max(0, k - 1)]}

        def prune(nodes: list[OutlineNode]) -> list[OutlineNode]:
            kept = [n for n in nodes if id(n) in keep]
            for n in kept:
                n.children = prune(n.children)
            return kept

        r.symbols = prune(r.symbols)
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
)
