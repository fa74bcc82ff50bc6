"""The ``rootgrep`` command line: thin verbs over the library.

Exit codes: 0 success or matches, 1 no matches (grep), 2 usage or runtime error (one line on
stderr). Logs go to stderr; stdout carries only results.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, BinaryIO

from . import __version__
from .confine import display
from .errors import RootgrepError
from .grep import DEFAULT_MAX_FILE_SIZE, MAX_CONTEXT, FileMatches, GrepQuery, Matcher, run_grep
from .roots import Root, pin_root
from .walker import Walker, WalkOptions

VERBS = {
    "serve": "serve the MCP tools over stdio or streamable HTTP",
    "grep": "exact line search, output like `rg -n`",
    "index": "build or refresh the search indexes of directories (--watch: keep them fresh)",
    "daemon": "keep the indexes of directories fresh (the same as index --watch)",
    "search": "ranked search over the indexes (built or refreshed first)",
    "status": "the indexes in the cache directory",
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
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="HTTP bind address (default loopback; any other needs --auth-token-env and "
        "--allowed-host)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="HTTP: a Host header value clients use, as name, name:port or [v6]:port "
        "(repeatable; the loopback names are always allowed; Origin must match too)",
    )
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--allow-write", action="store_true", help="offer the write tools")
    p.add_argument("--no-index", action="store_true", help="do not build search indexes")
    p.add_argument("--symlinks", choices=("within", "never"), default="within")
    p.add_argument("--cache-dir", metavar="DIR", help="index cache (see the README)")
    p.add_argument(
        "--cache-max-bytes",
        type=int,
        metavar="BYTES",
        help="evict least recently used indexes beyond this size",
    )
    p.add_argument(
        "--max-roots-per-session",
        type=int,
        default=64,
        metavar="N",
        help="serve at most N of a client's roots; the rest are refused (default 64)",
    )
    p.add_argument(
        "--max-watched-roots",
        type=int,
        default=64,
        metavar="N",
        help="watch at most N client roots at once; the others are indexed unwatched "
        "(default 64; operator roots are always watched)",
    )
    p.add_argument(
        "--index-idle-seconds",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="stop an index used without a session (per-call roots, search) after this "
        "long unused (default 60)",
    )
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
    p.add_argument(
        "--max-read-bytes",
        type=int,
        default=1 << 20,
        metavar="BYTES",
        help="what one read_file call returns at most (default 1 MiB)",
    )
    p.add_argument(
        "--max-answer-chars",
        type=int,
        default=20_000,
        metavar="N",
        help="a tool's text answer stays under N characters; the rest is left for the next "
        "call, with a cursor (default 20000)",
    )
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
            print(
                f"rootgrep: --auth-token-env {args.auth_token_env}: that variable is empty",
                file=sys.stderr,
            )
            return 2
    if args.transport == "http":
        from .server import http_exposure_problem

        problem = http_exposure_problem(args.host, token, args.allowed_host)
        if problem is not None:
            print(f"rootgrep: {problem}", file=sys.stderr)
            return 2
    roots = [pin_root(d, symlinks=args.symlinks) for d in dirs]
    from .index.manager import IndexManager

    indexes = IndexManager(
        args.cache_dir,
        enabled=not args.no_index,
        max_file_size=args.max_file_size,
        cache_max_bytes=args.cache_max_bytes,
        idle_seconds=args.index_idle_seconds,
        max_watched_roots=args.max_watched_roots,
    )
    for r in roots:
        indexes.activate(r, 0)  # operator roots start building at once, in the background
    settings = Settings(
        allow_write=args.allow_write,
        symlinks=args.symlinks,
        max_read_bytes=args.max_read_bytes,
        max_file_size=args.max_file_size,
        roots_ttl=args.roots_ttl,
        max_roots_per_session=args.max_roots_per_session,
        max_answer_chars=max(200, args.max_answer_chars),
    )
    service = Service(roots, settings, Audit(args.audit_log), indexes)
    mcp = build_server(service)
    if args.transport == "stdio":
        serve_stdio(mcp)
        return 0
    url = f"http://{args.host}:{args.port}/mcp"
    print(_http_banner(url, token is not None, roots), file=sys.stderr, flush=True)
    serve_http(mcp, host=args.host, port=args.port, token=token, allowed_hosts=args.allowed_host)
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


def _index_parser(verb: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"rootgrep {verb}", description=VERBS[verb])
    if verb == "search":
        p.add_argument("query", help='words (ANDed), "phrases", -word, path:GLOB, ext:py')
    if verb != "status":
        p.add_argument("dirs", nargs="*" if verb == "search" else "+", metavar="DIR")
    if verb == "index":
        p.add_argument("--watch", action="store_true", help="stay up and keep them fresh")
    if verb == "search":
        p.add_argument("--json", action="store_true", help="one JSON object per result")
        p.add_argument("-n", "--max-results", type=int, default=20)
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="default: $ROOTGREP_CACHE_DIR, else $XDG_CACHE_HOME/rootgrep, else ~/.cache/rootgrep",
    )
    p.add_argument("--max-file-size", type=int, default=DEFAULT_MAX_FILE_SIZE, metavar="BYTES")
    return p


def _index(args: argparse.Namespace, watch: bool) -> int:
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from .index.cache import CacheDir
    from .index.store import ForeignIndex, RootIndex, WriterBusy, default_cache_dir

    cache = args.cache_dir or default_cache_dir()
    roots = [pin_root(d) for d in args.dirs]
    if watch:
        return _daemon(cache, roots, args.max_file_size)
    pinned = CacheDir.open(cache)  # (refused with a clear message when unsafe: exit 2)
    try:
        with Progress(
            SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
            TextColumn("{task.completed} files"), TimeElapsedColumn(),
            console=_stderr_console(), transient=False,
        ) as bar:  # fmt: skip
            for r in roots:
                task = bar.add_task(os.fsdecode(r.path), total=None)
                try:
                    ix = RootIndex(
                        cache, r.path, max_file_size=args.max_file_size, cache=pinned,
                        identity=r.fs.identity(),
                    )  # fmt: skip
                except ForeignIndex as e:
                    bar.update(task, description=f"{os.fsdecode(r.path)} ({e})")
                    continue

                def progress(done: int, total: int | None, _msg: str, task: Any = task) -> None:
                    bar.update(task, completed=done, total=total)

                try:
                    st = ix.sync(r.fs, progress=progress)
                except WriterBusy:
                    bar.update(task, description=f"{os.fsdecode(r.path)} (kept by a daemon)")
                    continue
                finally:
                    ix.close()
                bar.update(task, completed=st.read, total=st.read)
                print(
                    f"{os.fsdecode(r.path)}: {st.files} files indexed; read {st.read} "
                    f"({st.bytes} bytes): +{st.added} ~{st.updated} -{st.removed} "
                    f"in {st.elapsed_ms / 1000:.2f} s",
                    file=sys.stderr,
                )
        return 0
    finally:
        pinned.close()
        for r in roots:
            r.close()


def _daemon(cache: str, roots: list[Root], max_file_size: int) -> int:
    """Hold each index's writer for good (other processes read it and reload after commits),
    sync it, then keep it fresh from file-system events until SIGINT or SIGTERM."""
    from .index.manager import IndexManager

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    manager = IndexManager(cache, max_file_size=max_file_size, hold_writer=True)
    try:
        for r in roots:
            ix = manager.activate(r, 0)
            manager.wait_built(r.path)
            if ix is not None:
                what = ix.role if ix.error is None else f"failed: {ix.error}"
                print(f"{os.fsdecode(r.path)}: {ix.state} ({what})", file=sys.stderr)
        print("watching; Ctrl-C to stop", file=sys.stderr, flush=True)
        while not stop.wait(1.0):
            pass
        return 0
    finally:
        manager.close()
        for r in roots:
            r.close()


def _search(args: argparse.Namespace) -> int:
    """Ranked search through the same service the MCP tool uses, after a sync (or with the
    index a daemon keeps fresh)."""
    from .index.manager import IndexManager
    from .service import Service, Settings, Token

    dirs: list[str] = args.dirs or ["."]
    roots = [pin_root(d) for d in dirs]
    manager = IndexManager(args.cache_dir, watch=False, max_file_size=args.max_file_size)
    try:
        for r in roots:
            manager.activate(r, 0)
        for r in roots:
            manager.wait_built(r.path)
        service = Service(roots, Settings(max_file_size=args.max_file_size), indexes=manager)
        found = service.search(roots, Token(), query=args.query, max_results=args.max_results)
        prefix = {
            r.id: display(_display_prefix(given)) if args.dirs else ""
            for given, r in zip(dirs, roots, strict=True)
        }
        out = sys.stdout
        for hit in found.results:
            if args.json:
                rec = {"root": hit.root.model_dump(), "path": hit.path, "score": hit.score,
                       "snippets": [s.model_dump() for s in hit.snippets]}  # fmt: skip
                out.write(json.dumps(rec, ensure_ascii=False) + "\n")
            else:
                out.write(f"{prefix[hit.root.id]}{hit.path}  ({hit.score:.2f})\n")
                for sn in hit.snippets:
                    out.write(f"  {sn.line}: {sn.text}\n")
        return 0 if found.results else 1
    finally:
        manager.close()
        for r in roots:
            r.close()


def _status(args: argparse.Namespace) -> int:
    from .index.cache import CacheDir
    from .index.store import cached_indexes, default_cache_dir

    cache = args.cache_dir or default_cache_dir()
    print(f"cache: {cache}")
    if not os.path.lexists(cache):
        return 0  # (no cache yet: nothing to list, and nothing is created)
    pinned = CacheDir.open(cache)  # the same checks as every user of the cache
    try:
        for c in cached_indexes(pinned):
            files, text_bytes, pending, when = c.summary()
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if when else "never"
            print(
                f"{c.root_display}: {files} files, {text_bytes} bytes of text, index "
                f"{c.disk_bytes} bytes on disk, synced {stamp}"
                + (f", {pending} pending" if pending else "")
            )
    finally:
        pinned.close()
    return 0


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in VERBS:
        _top_parser().parse_args(argv)  # prints help, version or a usage error
        return 2
    verb, rest = argv[0], argv[1:]
    try:
        if verb == "serve":
            return _serve(_serve_parser().parse_args(rest))
        if verb in ("index", "daemon"):
            return _index(
                _index_parser("index").parse_args(rest), verb == "daemon" or "--watch" in rest
            )
        if verb == "search":
            return _search(_index_parser("search").parse_intermixed_args(rest))
        if verb == "status":
            return _status(_index_parser("status").parse_args(rest))
        if verb == "grep":
            gp = _grep_parser()
            # intermixed parsing lets flags follow DIRs (as in rg); it mishandles "--"
            return _grep(gp.parse_args(rest) if "--" in rest else gp.parse_intermixed_args(rest))
    except RootgrepError as e:
        print(f"rootgrep: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except SystemExit as e:
        if isinstance(e.code, str):  # raise SystemExit("message"): a usage error, status 2
            msg = e.code.removeprefix("rootgrep: ")
            print(f"rootgrep: {_one_line(msg)}", file=sys.stderr)
            return 2
        raise  # argparse's own exits (help: 0, usage: 2)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): stop quietly, as grep and rg do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as e:  # a runtime error: status 2 and one line, never a traceback
        print(f"rootgrep: [error] {_one_line(_describe(e))}", file=sys.stderr)
        return 2
    return 2


def _describe(e: Exception) -> str:
    if isinstance(e, OSError) and e.strerror:
        where = f": {e.filename}" if e.filename is not None else ""
        return f"{e.strerror}{where}"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _one_line(msg: str) -> str:
    return " ".join(msg.split())[:2000]


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
