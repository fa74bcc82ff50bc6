"""The ``rootgrep`` command line: thin verbs over the library.

Exit codes: 0 success or matches, 1 no matches (grep), 2 usage or runtime error (one line on
stderr). Logs go to stderr; stdout carries only results.
"""

from __future__ import annotations

import os
import sys

from .. import __version__
from ..confine import open_null_device
from ..errors import RootgrepError
from .common import VERBS, describe, one_line

# (the grep verb is imported at once, while ``__main__.run`` holds the garbage collector:
# it is the verb that is run most and whose start-up counts; the others when run)
from .grep_verb import grep
from .rg_flags import parse_grep_args

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence


def _top_parser() -> argparse.ArgumentParser:
    import argparse

    p = argparse.ArgumentParser(
        prog="rootgrep",
        allow_abbrev=False,
        description="Root-confined code search. Verbs: "
        + "; ".join(f"{k}: {v}" for k, v in VERBS.items()),
    )
    p.add_argument("--version", action="version", version=f"rootgrep {__version__}")
    p.add_argument("command", choices=sorted(VERBS), metavar="COMMAND")
    p.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in VERBS:
        _top_parser().parse_args(argv)  # prints help, version or a usage error
        return 2
    verb, rest = argv[0], argv[1:]
    try:
        if verb == "grep":
            return grep(parse_grep_args(rest))
        if verb == "serve":
            from .serve_verb import serve, serve_parser

            return serve(serve_parser().parse_args(rest))
        if verb in ("index", "daemon", "status"):
            from .index_verbs import index, index_parser, status

            if verb == "status":
                return status(index_parser("status").parse_args(rest))
            watch = verb == "daemon" or "--watch" in rest
            return index(index_parser("index").parse_args(rest), watch)
        from . import query_verbs as q

        if verb == "search":
            return q.search(q.search_parser().parse_intermixed_args(rest))
        if verb == "symbols":
            return q.symbols(q.symbols_parser().parse_intermixed_args(rest))
        if verb == "outline":
            return q.outline(q.outline_parser().parse_args(rest))
    except RootgrepError as e:
        print(f"rootgrep: {one_line(str(e))}", file=sys.stderr)
        return 2
    except SystemExit as e:
        if isinstance(e.code, str):  # raise SystemExit("message"): a usage error, status 2
            msg = e.code.removeprefix("rootgrep: ")
            print(f"rootgrep: {one_line(msg)}", file=sys.stderr)
            return 2
        raise  # argparse's own exits (help: 0, usage: 2)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): stop quietly, as grep and rg do
        devnull = open_null_device(os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    except Exception as e:  # a runtime error: status 2 and one line, never a traceback
        if _interrupted(e):
            return 130  # (Ctrl-C, wrapped by a library: pydantic's schema building, say)
        print(f"rootgrep: [error] {one_line(describe(e))}", file=sys.stderr)
        return 2
    return 2


def _interrupted(e: BaseException) -> bool:
    """Whether ``e`` came of a KeyboardInterrupt (its cause or context, a few levels down):
    a Ctrl-C while the MCP SDK's types were being built came out as pydantic's SchemaError,
    and the server said so and exited 2, not 130."""
    if type(e).__name__ == "SchemaError" and "KeyboardInterrupt" in str(e):
        return True  # (pydantic-core's, which may carry the interrupt in its words only)
    seen: BaseException = e
    for _ in range(8):
        below = seen.__cause__
        if below is None and not seen.__suppress_context__:  # (``raise ... from None``: not)
            below = seen.__context__
        if below is None:
            return False
        if isinstance(below, KeyboardInterrupt):
            return True
        seen = below
    return False
