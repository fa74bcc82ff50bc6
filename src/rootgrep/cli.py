"""The ``rootgrep`` command line: thin verbs over the library.

Exit codes: 0 success or matches, 1 no matches (grep), 2 usage or runtime error (one line on
stderr). Logs go to stderr; stdout carries only results.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import BinaryIO

from . import __version__
from .confine import display
from .errors import RootgrepError
from .grep import DEFAULT_MAX_FILE_SIZE, MAX_CONTEXT, FileMatches, GrepQuery, Matcher, run_grep
from .roots import Root, pin_root
from .walker import Walker, WalkOptions

VERBS = {
    "serve": "serve the MCP tools over stdio or streamable HTTP",
    "grep": "exact line search, output like `rg -n`",
}


def _top_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rootgrep",
        description="Root-confined code search. Verbs: "
        + "; ".join(f"{k}: {v}" for k, v in VERBS.items()),
    )
    p.add_argument("--version", action="version", version=f"rootgrep {__version__}")
    p.add_argument("command", choices=sorted(VERBS), metavar="COMMAND")
    p.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def _grep_parser() -> argparse.ArgumentParser:
    g = argparse.ArgumentParser(prog="rootgrep grep", description=VERBS["grep"])
    g.add_argument("pattern", help="a literal string (or an RE2 regex with -e)")
    g.add_argument("dirs", nargs="*", metavar="DIR", help="directories to search (default: .)")
    g.add_argument("-e", "--regex", action="store_true", help="PATTERN is an RE2 regex")
    g.add_argument("-i", "--ignore-case", action="store_true", help="case-insensitive")
    g.add_argument("-w", "--word", action="store_true", help="match whole words only")
    g.add_argument(
        "-C",
        "--context",
        type=int,
        default=0,
        metavar="N",
        help=f"show N lines around each match (at most {MAX_CONTEXT})",
    )
    g.add_argument("--hidden", action="store_true", help="search hidden files and directories")
    g.add_argument("--no-ignore", action="store_true", help="ignore .gitignore/.ignore rules")
    g.add_argument("--json", action="store_true", help="one JSON object per matching line")
    g.add_argument(
        "--max-file-size",
        type=int,
        default=DEFAULT_MAX_FILE_SIZE,
        metavar="BYTES",
        help="skip files larger than this (default 20 MiB)",
    )
    g.add_argument("--symlinks", choices=("within", "never"), default="within")
    g.add_argument(
        "--threads",
        type=int,
        default=None,
        help="search threads (default: 2 for regexes without a literal, else 1; on CPython "
        "more threads contend for the GIL and were measured slower)",
    )
    return g


def _serve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rootgrep serve", description=VERBS["serve"])
    p.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="DIR",
        help="an operator root (repeatable; default: $ROOTGREP_ROOTS, "
        "os.pathsep-separated); with none, the client's roots are the scope",
    )
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default loopback)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--allow-write", action="store_true", help="offer the write tools")
    p.add_argument("--no-index", action="store_true", help="do not build search indexes")
    p.add_argument("--symlinks", choices=("within", "never"), default="within")
    p.add_argument("--cache-dir", metavar="DIR", help="index cache (see the README)")
    p.add_argument("--audit-log", metavar="FILE", help="append JSON lines of every decision")
    p.add_argument(
        "--auth-token-env", metavar="VAR", help="HTTP: require 'Authorization: Bearer $VAR'"
    )
    p.add_argument(
        "--roots-ttl",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="re-fetch roots older than this for clients without listChanged",
    )
    p.add_argument("--max-read-bytes", type=int, default=1 << 20, metavar="BYTES")
    p.add_argument("--max-file-size", type=int, default=DEFAULT_MAX_FILE_SIZE, metavar="BYTES")
    p.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    return p


def _serve(args: argparse.Namespace) -> int:
    import logging

    from .audit import Audit
    from .server import build_server, serve_http, serve_stdio
    from .service import Service, Settings

    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    dirs = list(args.root)
    if not dirs and os.environ.get("ROOTGREP_ROOTS"):
        dirs = [d for d in os.environ["ROOTGREP_ROOTS"].split(os.pathsep) if d]
    token = None
    if args.auth_token_env:
        token = os.environ.get(args.auth_token_env)
        if not token:
            raise SystemExit(
                f"rootgrep: --auth-token-env {args.auth_token_env}: that variable is empty"
            )
    roots = [pin_root(d, symlinks=args.symlinks) for d in dirs]
    from .index.manager import IndexManager

    indexes = IndexManager(
        args.cache_dir, enabled=not args.no_index, max_file_size=args.max_file_size
    )
    for r in roots:
        indexes.activate(r, 0)  # operator roots start building at once, in the background
    settings = Settings(
        allow_write=args.allow_write,
        symlinks=args.symlinks,
        max_read_bytes=args.max_read_bytes,
        max_file_size=args.max_file_size,
        roots_ttl=args.roots_ttl,
    )
    service = Service(roots, settings, Audit(args.audit_log), indexes)
    mcp = build_server(service)
    if args.transport == "stdio":
        serve_stdio(mcp)
        return 0
    url = f"http://{args.host}:{args.port}/mcp"
    print(_http_banner(url, token is not None, roots), file=sys.stderr, flush=True)
    serve_http(mcp, host=args.host, port=args.port, token=token)
    return 0


def _http_banner(url: str, auth: bool, roots: list[Root]) -> str:
    entry: dict[str, object] = {"type": "http", "url": url}
    if auth:
        entry["headers"] = {"Authorization": "Bearer ${ROOTGREP_TOKEN}"}
    snippet = json.dumps({"mcpServers": {"rootgrep": entry}}, indent=2)
    served = ", ".join(os.fsdecode(r.path) for r in roots) or "the client's roots"
    return (
        f"rootgrep {__version__} serving {served}\n"
        f"MCP endpoint (streamable HTTP): {url}\n"
        f"client configuration:\n{snippet}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in VERBS:
        _top_parser().parse_args(argv)  # prints help, version or a usage error
        return 2
    verb, rest = argv[0], argv[1:]
    try:
        if verb == "serve":
            return _serve(_serve_parser().parse_args(rest))
        if verb == "grep":
            gp = _grep_parser()
            # intermixed parsing lets flags follow DIRs (as in rg); it mishandles "--"
            return _grep(gp.parse_args(rest) if "--" in rest else gp.parse_intermixed_args(rest))
    except RootgrepError as e:
        print(f"rootgrep: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): stop quietly, as grep and rg do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return 2


def _grep(args: argparse.Namespace) -> int:
    if not 0 <= args.context <= MAX_CONTEXT:
        raise SystemExit(f"rootgrep: --context must be between 0 and {MAX_CONTEXT}")
    query = GrepQuery(
        args.pattern,
        regex=args.regex,
        case_sensitive=not args.ignore_case,
        whole_word=args.word,
        context=args.context,
    )
    matcher = Matcher(query)
    dirs: list[str] = args.dirs or ["."]
    roots = [pin_root(d, symlinks=args.symlinks) for d in dirs]
    out = sys.stdout.buffer
    total = 0
    try:
        for given, root in zip(dirs, roots, strict=True):
            prefix = b"" if not args.dirs else _display_prefix(given)
            sink = _JsonSink(out, root) if args.json else _TextSink(out, prefix, args.context)
            walker = Walker(root.fs, b"", WalkOptions(hidden=args.hidden, no_ignore=args.no_ignore))
            stats = run_grep(
                matcher,
                walker.batches(),
                sink,
                max_file_size=args.max_file_size,
                threads=args.threads,
            )
            total += stats.matches
            for rel, why in walker.errors:
                print(f"rootgrep: {display(prefix + rel)}: {why}", file=sys.stderr)
    finally:
        out.flush()
        for r in roots:
            r.close()
    return 0 if total else 1


def _display_prefix(given: str) -> bytes:
    raw = os.fsencode(given)
    stripped = raw.rstrip(b"/")
    return (stripped or b"") + b"/"


class _TextSink:
    """``path:line:text`` like ``rg -n``; context lines as ``path-line-text`` with ``--``."""

    def __init__(self, out: BinaryIO, prefix: bytes, context: int) -> None:
        self.out = out
        self.prefix = prefix
        self.context = context
        self.first = True

    def __call__(self, fm: FileMatches) -> bool:
        path = self.prefix + fm.path
        w = self.out.write
        if not self.context:
            for lm in fm.matches:
                w(b"%s:%d:%s\n" % (path, lm.line, lm.text))
            return True
        lines: dict[int, tuple[bytes, bool]] = {}
        for lm in fm.matches:
            for i, t in enumerate(lm.before):
                lines.setdefault(lm.line - len(lm.before) + i, (t, False))
            lines[lm.line] = (lm.text, True)
            for i, t in enumerate(lm.after):
                lines.setdefault(lm.line + 1 + i, (t, False))
        prev = None
        for n in sorted(lines):
            if (prev is not None and n != prev + 1) or (prev is None and not self.first):
                w(b"--\n")
            text, is_match = lines[n]
            w(
                b"%s%s%d%s%s\n"
                % (path, b":" if is_match else b"-", n, b":" if is_match else b"-", text)
            )
            prev = n
        self.first = False
        return True


class _JsonSink:
    def __init__(self, out: BinaryIO, root: Root) -> None:
        self.out = out
        self.root = root

    def __call__(self, fm: FileMatches) -> bool:
        path = display(fm.path)
        for lm in fm.matches:
            rec = {
                "root": self.root.identity(),
                "path": path,
                "line": lm.line,
                "column": lm.column,
                "text": lm.text.decode("utf-8", "replace"),
                "before": [b.decode("utf-8", "replace") for b in lm.before],
                "after": [a.decode("utf-8", "replace") for a in lm.after],
            }
            self.out.write(json.dumps(rec, ensure_ascii=False).encode() + b"\n")
        return True
