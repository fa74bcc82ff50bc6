"""What the CLI's verbs share: their names and one-line descriptions, and how a count, an error
and a PATH are said."""

from __future__ import annotations

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)


VERBS = {
    "serve": "serve the MCP tools over stdio or streamable HTTP",
    "grep": "exact line search, output like `rg -n`",
    "index": "build or refresh the search indexes of directories (--watch: keep them fresh)",
    "daemon": "keep the indexes of directories fresh (the same as index --watch)",
    "search": "ranked search over the indexes (built or refreshed first)",
    "status": "the indexes in the cache directory",
    "symbols": "where a name is defined (parsed with tree-sitter), output `path:line: kind name`",
    "outline": "a file's definitions, nested, output `path:line: kind name`",
}


def n_files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def describe(e: Exception) -> str:
    if isinstance(e, OSError) and e.strerror:
        where = f": {e.filename}" if e.filename is not None else ""
        return f"{e.strerror}{where}"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def one_line(msg: str) -> str:
    return " ".join(msg.split())[:2000]
