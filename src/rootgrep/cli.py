"""The ``rootgrep`` command line: thin verbs over the library.

Exit codes: 0 success or matches, 1 no matches (grep), 2 usage or runtime error (one line on
stderr). Logs go to stderr; stdout carries only results.
"""

from __future__ import annotations

import io
import os
import stat
import sys
import time
import types
from collections.abc import Iterator, Sequence

from . import __version__
from .confine import display, open_null_device
from .errors import InvalidPattern, RootgrepError
from .grep import (
    DEFAULT_MAX_FILE_SIZE,
    MAX_CONTEXT,
    FileMatches,
    GrepQuery,
    LineMatch,
    Matcher,
    run_grep,
)
from .roots import Root, pin_root
from .walker import DirBatch, FileEntry, Walker, WalkOptions, keep_files

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:  # (argparse is imported by each parser: a plain grep reads its flags
    import argparse  # with ``_quick_grep_args``, and argparse costs 3 ms of its start-up)
    from typing import Any, BinaryIO

MAX_ANSWER_CHARS = 100_000  # (text and structured copy stay under the SDK's 1 MiB message limit)

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


GREP_EPILOG = """\
exit status: 0 a line matched, 1 no line matched, 2 an error (a bad pattern, a missing
PATH, a directory that could not be read), also when other PATHs matched (as rg).
Output is sorted by path (like `rg --sort path`); line numbers are always shown."""


def _grep_parser() -> argparse.ArgumentParser:
    import argparse

    class _GrepHelp(argparse.RawDescriptionHelpFormatter):
        """argparse's formatter without ``shutil`` (argparse makes one per ``add_argument``,
        and the default asks ``shutil.get_terminal_size``: 2 ms of imports at every start)."""

        def __init__(self, prog: str) -> None:
            try:
                width = int(os.environ.get("COLUMNS", "")) or os.get_terminal_size(2).columns
            except (ValueError, OSError):
                width = 80
            super().__init__(prog, width=max(width - 2, 20))

    g = argparse.ArgumentParser(
        prog="rootgrep grep",
        allow_abbrev=False,  # (``--files`` must not become ``--files-with-matches``)
        usage="rootgrep grep [OPTIONS] PATTERN [PATH ...]\n"
        "       rootgrep grep [OPTIONS] -e PATTERN ... [PATH ...]",
        description=VERBS["grep"] + ", with ripgrep's flags",
        epilog=GREP_EPILOG,
        formatter_class=_GrepHelp,
    )
    g.add_argument(
        "args",
        nargs="*",
        metavar="PATTERN PATH",
        help="an RE2 regex (unless -e gives the patterns), then files or directories to "
        "search (default: the current directory)",
    )
    g.add_argument(
        "-e",
        "--regexp",
        action="append",
        default=[],
        dest="patterns",
        metavar="PATTERN",
        help="a pattern (repeatable: a line matches if any matches); every positional "
        "argument is then a PATH",
    )
    g.add_argument(
        "-F", "--fixed-strings", action="store_true", help="the patterns are literal strings"
    )
    for flags, case, what in (
        (("-i", "--ignore-case"), "insensitive", "case-insensitive"),
        (("-s", "--case-sensitive"), "sensitive", "case-sensitive (the default)"),
        (("-S", "--smart-case"), "smart", "case-insensitive unless a pattern has an upper case"),
    ):
        g.add_argument(
            *flags, dest="case", action="store_const", const=case, help=what + " (last wins)"
        )
    g.add_argument("-w", "--word-regexp", action="store_true", help="match whole words only")
    for flags, dest, what in (
        (("-A", "--after-context"), "after", "after"),
        (("-B", "--before-context"), "before", "before"),
        (("-C", "--context"), "context", "before and after"),
    ):
        g.add_argument(
            *flags,
            dest=dest,
            type=int,
            default=None,
            metavar="N",
            help=f"show N lines {what} each match (at most {MAX_CONTEXT})",
        )
    g.add_argument(
        "-m",
        "--max-count",
        type=int,
        default=None,
        metavar="NUM",
        help="at most NUM matching lines per file (as rg: a line after them within -A's "
        "context that matches is shown as a match, and does not count)",
    )
    g.add_argument(
        "-l",
        "--files-with-matches",
        dest="mode",
        action="store_const",
        const="files",
        help="print only the paths of files with a match (-l/-c: the last wins)",
    )
    g.add_argument(
        "-c",
        "--count",
        dest="mode",
        action="store_const",
        const="count",
        help="print `path:N`, the number of matching lines, per file with a match",
    )
    g.add_argument(
        "-g",
        "--glob",
        action="append",
        default=[],
        dest="globs",
        metavar="GLOB",
        help="search only files matching GLOB (gitignore style, matched against the path "
        "as printed, without a leading ./); !GLOB excludes; repeatable, the last match "
        "wins; files given as PATH are always searched",
    )
    g.add_argument(
        "--files",
        action="store_true",
        help="print the files that would be searched, one a line (as rg's --files; every "
        "positional argument is then a PATH)",
    )
    g.add_argument(
        "-u",
        "--unrestricted",
        action="count",
        default=0,
        help="-u: as --no-ignore; -uu: and --hidden (rg's -uuu, binary files too, is refused: "
        "binary files are never searched)",
    )
    g.add_argument("--hidden", action="store_true", help="search hidden files and directories")
    g.add_argument("--no-ignore", action="store_true", help="ignore .gitignore/.ignore rules")
    g.add_argument(
        "--ignore",
        dest="no_ignore",
        action="store_false",
        help="respect .gitignore/.ignore rules (the default; undoes an earlier --no-ignore)",
    )
    g.add_argument(
        "--json",
        action="store_true",
        help="rootgrep's JSON lines (not rg's format): one object per matching line "
        "{root, path, line, column, text, before, after}; with -l/-c one per file "
        "{root, path, matches}",
    )
    g.add_argument(
        "-M",
        "--max-columns",
        type=int,
        default=0,
        metavar="N",
        help="print a line longer than N bytes as `[Omitted long matching line]` "
        "(0: no limit, the default)",
    )
    g.add_argument("-H", "--with-filename", dest="with_filename", action="store_const", const=True)
    g.add_argument("-I", "--no-filename", dest="with_filename", action="store_const", const=False)
    g.add_argument(
        "-n", "--line-number", action="store_true", help="accepted: line numbers are always on"
    )
    g.add_argument("--no-heading", action="store_true", help="accepted: there is no heading")
    g.add_argument("--sort", choices=("path",), help="accepted: output is always sorted by path")
    g.add_argument(
        "--max-file-size",
        type=int,
        default=DEFAULT_MAX_FILE_SIZE,
        metavar="BYTES",
        help="skip files larger than this (default 20 MiB)",
    )
    g.add_argument("--symlinks", choices=("within", "never"), default="within")
    g.add_argument(
        "--no-index",
        action="store_true",
        help="always scan live (by default an index a running `rootgrep daemon` keeps fresh "
        "is used when it holds the PATH: same answer, faster)",
    )
    g.add_argument(
        "--stats",
        action="store_true",
        help="after the results, print counts, the time, and whether the index or a live "
        "scan answered and why (on stdout as rg; on stderr with --json)",
    )
    g.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="where to look for indexes (default: $ROOTGREP_CACHE_DIR, else "
        "$XDG_CACHE_HOME/rootgrep, else ~/.cache/rootgrep)",
    )
    g.add_argument(
        "--threads",
        type=int,
        default=None,
        help="search threads (default: 2 for regexes without a literal, else 1; on CPython "
        "more threads contend for the GIL and were measured slower)",
    )
    return g


# ``rootgrep grep``'s flags as ``_grep_parser`` declares them, for ``_quick_grep_args``: each
# option string → (dest, how, const); how is "const" (store ``const``), "append", "str",
# "int" (take a value) or a tuple of the choices. test_cli_quick_args keeps this table and
# the defaults equal to the parser's actions.
_GREP_FLAGS: dict[str, tuple[str, Any, Any]] = {
    name: (dest, how, const)
    for names, dest, how, const in (
        (("-e", "--regexp"), "patterns", "append", None),
        (("-F", "--fixed-strings"), "fixed_strings", "const", True),
        (("-i", "--ignore-case"), "case", "const", "insensitive"),
        (("-s", "--case-sensitive"), "case", "const", "sensitive"),
        (("-S", "--smart-case"), "case", "const", "smart"),
        (("-w", "--word-regexp"), "word_regexp", "const", True),
        (("-A", "--after-context"), "after", "int", None),
        (("-B", "--before-context"), "before", "int", None),
        (("-C", "--context"), "context", "int", None),
        (("-m", "--max-count"), "max_count", "int", None),
        (("-l", "--files-with-matches"), "mode", "const", "files"),
        (("-c", "--count"), "mode", "const", "count"),
        (("-g", "--glob"), "globs", "append", None),
        (("--files",), "files", "const", True),
        (("-u", "--unrestricted"), "unrestricted", "count", None),
        (("--hidden",), "hidden", "const", True),
        (("--no-ignore",), "no_ignore", "const", True),
        (("--ignore",), "no_ignore", "const", False),
        (("--json",), "json", "const", True),
        (("-M", "--max-columns"), "max_columns", "int", None),
        (("-H", "--with-filename"), "with_filename", "const", True),
        (("-I", "--no-filename"), "with_filename", "const", False),
        (("-n", "--line-number"), "line_number", "const", True),
        (("--no-heading",), "no_heading", "const", True),
        (("--sort",), "sort", ("path",), None),
        (("--max-file-size",), "max_file_size", "int", None),
        (("--symlinks",), "symlinks", ("within", "never"), None),
        (("--no-index",), "no_index", "const", True),
        (("--stats",), "stats", "const", True),
        (("--cache-dir",), "cache_dir", "str", None),
        (("--threads",), "threads", "int", None),
    )
    for name in names
}
_GREP_DEFAULTS: dict[str, Any] = {
    "args": [], "patterns": [], "fixed_strings": False, "case": None, "word_regexp": False,
    "after": None, "before": None, "context": None, "mode": None, "globs": [], "files": False,
    "max_count": None, "unrestricted": 0,
    "hidden": False, "no_ignore": False, "json": False, "max_columns": 0,
    "with_filename": None, "line_number": False, "no_heading": False, "sort": None,
    "max_file_size": DEFAULT_MAX_FILE_SIZE, "symlinks": "within", "no_index": False,
    "stats": False, "cache_dir": None, "threads": None,
}  # fmt: skip


def _quick_grep_args(argv: list[str]) -> Any:
    """``_grep_parser().parse_intermixed_args(argv)``'s namespace (the same attributes and
    values) without argparse, for the words a grep is mostly given: exact option strings
    (``--name=value`` too), each value in the next word unless it starts with a dash, and
    words without a leading dash as PATTERN and PATHs. Anything else (help, an abbreviated
    or bundled flag, ``--``, a value argparse would refuse or read otherwise) gives None:
    argparse then parses the words and says what is wrong. (Building argparse's parser
    and importing it, with gettext and locale, were 3 ms of every grep's start.)"""
    values = {k: list(v) if isinstance(v, list) else v for k, v in _GREP_DEFAULTS.items()}
    i, n = 0, len(argv)
    while i < n:
        word = argv[i]
        i += 1
        if not word.startswith("-"):
            values["args"].append(word)
            continue
        name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        spec = _GREP_FLAGS.get(name)
        if spec is None:
            return None
        dest, how, const = spec
        if how == "const":
            if eq:
                return None
            values[dest] = const
            continue
        if how == "count":
            if eq:
                return None
            values[dest] += 1
            continue
        if not eq:
            if i >= n or argv[i].startswith("-"):
                return None
            value = argv[i]
            i += 1
        if how == "append":
            values[dest].append(value)
        elif how == "str":
            values[dest] = value
        elif how == "int":
            try:
                values[dest] = int(value)
            except ValueError:
                return None
        elif value in how:
            values[dest] = value
        else:
            return None
    return types.SimpleNamespace(**values)


def _serve_parser() -> argparse.ArgumentParser:
    import argparse

    p = argparse.ArgumentParser(
        prog="rootgrep serve", description=VERBS["serve"], allow_abbrev=False
    )
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
    p.add_argument("--port", type=int, default=8765, help="HTTP port (0: one the kernel picks)")
    p.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="HTTP: open connections at most (default: a quarter of the fd limit, 32-1024); "
        "past it the oldest one still waiting for its request is closed",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        metavar="SECONDS",
        help="HTTP: a request's head and body must arrive within this (default 10)",
    )
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
        f"call, with a cursor (default 20000; 200 to {MAX_ANSWER_CHARS})",
    )
    p.add_argument("--max-file-size", type=int, default=DEFAULT_MAX_FILE_SIZE, metavar="BYTES")
    p.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    p.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop when the process that started this one dies, even by SIGKILL (Linux "
        "PR_SET_PDEATHSIG; `make run` uses it)",
    )
    p.add_argument(
        "--sandbox",
        nargs="?",
        const="strict",
        choices=("strict", "best-effort"),
        help="after start-up, restrict the process with Landlock: read only beneath the "
        "--roots (write with --allow-write), read-write the cache dir (the audit log is "
        "written through its open fd), nothing else, no program file run; needs --root. "
        "Refuses to start where the kernel lacks it, unless --sandbox=best-effort (which "
        "warns and goes on)",
    )
    return p


def _exit_with_parent() -> bool:
    """Ask the kernel for SIGTERM when the parent dies (``PR_SET_PDEATHSIG``); False when the
    parent is already gone (then this process was re-parented before the request)."""
    import ctypes
    import signal

    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    if libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        print(f"rootgrep: --exit-with-parent: prctl failed ({os.strerror(err)})", file=sys.stderr)
        return True
    return os.getppid() == parent and parent != 1


def _serve(args: argparse.Namespace) -> int:
    import logging
    import signal

    # Ctrl-C (SIGINT) stops the server from its first instant, as it does once uvicorn or the
    # stdio loop handles it: a server started with SIGINT ignored (a background job of a
    # script inherits that) would otherwise drop one sent before then and serve on
    signal.signal(signal.SIGINT, signal.default_int_handler)

    from .audit import Audit
    from .memory import tune_malloc
    from .server import build_server, serve_http, serve_stdio
    from .service import Service, Settings

    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if args.exit_with_parent and not _exit_with_parent():
        return 0  # (the parent was already gone)
    tune_malloc()  # (before the server's threads: glibc's arenas, see memory.py)
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
    if (args.max_connections is not None and args.max_connections < 1) or (
        args.request_timeout is not None and not args.request_timeout > 0
    ):
        print("rootgrep: --max-connections needs N >= 1 and --request-timeout a number of "
              "seconds > 0", file=sys.stderr)  # fmt: skip
        return 2
    if args.transport == "http":
        from .server import http_exposure_problem

        problem = http_exposure_problem(args.host, token, args.allowed_host)
        if problem is None:
            problem = _port_problem(args.host, args.port)
        if problem is not None:
            print(f"rootgrep: {problem}", file=sys.stderr)
            return 2
    if args.sandbox:
        problem = _sandbox_problem(args.sandbox, dirs)
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
    settings = Settings(
        allow_write=args.allow_write,
        symlinks=args.symlinks,
        max_read_bytes=args.max_read_bytes,
        max_file_size=args.max_file_size,
        roots_ttl=args.roots_ttl,
        max_roots_per_session=args.max_roots_per_session,
        max_answer_chars=min(MAX_ANSWER_CHARS, max(200, args.max_answer_chars)),
    )
    audit = Audit(args.audit_log)
    service = Service(roots, settings, audit, indexes)
    mcp = build_server(service)

    def start(port: int | None = None) -> None:
        # (with one thread still: the sandbox, when asked for, must come before any other)
        if port is not None:  # (HTTP, bound: the port it got, for --port 0 too)
            url = f"http://{args.host}:{port}/mcp"
            print(_http_banner(url, token is not None, roots), file=sys.stderr, flush=True)
        if args.sandbox:
            _enter_sandbox(args, roots, indexes.cache)
        _test_probe()
        for r in roots:
            indexes.activate(r, 0)  # operator roots start building at once, in the background

    status = 0
    try:
        if args.transport == "stdio":
            start()
            serve_stdio(mcp)
        else:
            serve_http(
                mcp, host=args.host, port=args.port, token=token,
                allowed_hosts=args.allowed_host, before_serving=start,
                max_connections=args.max_connections, request_seconds=args.request_timeout,
            )  # fmt: skip
    except KeyboardInterrupt:
        status = 130
        raise
    finally:
        _stop_indexes(indexes, status)
    return 0


SHUTDOWN_SECONDS = 10.0  # how long a server that stops waits for its builds to let go


def _stop_indexes(indexes: Any, status: int) -> None:
    """A stopping server's builds, cancelled and waited for (``IndexManager.close``) before
    the interpreter finalizes: it ends a build's thread found inside native code (tantivy,
    RE2) by unwinding it, which aborted the process ("terminate called without an active
    exception", SIGABRT, a core file). Past ``SHUTDOWN_SECONDS`` (a commit that will not end),
    or at a second Ctrl-C meanwhile, the process exits at once with ``status`` (130 after a
    Ctrl-C), without finalizing: the index is crash-safe at any moment."""
    import threading

    try:
        try:
            closer = threading.Thread(target=indexes.close, name="rootgrep-shutdown", daemon=True)
            closer.start()  # (in the try: a Ctrl-C may come while it waits for the thread)
            closer.join(SHUTDOWN_SECONDS)
            if not closer.is_alive():
                return
            why = f"the index builds did not stop within {SHUTDOWN_SECONDS:.0f} s"
        except KeyboardInterrupt:  # (Python's handler raises it here: uvicorn put it back)
            why, status = "interrupted while the index builds stopped", 130
    except KeyboardInterrupt:  # (another, in the handler above)
        why, status = "interrupted while the index builds stopped", 130
    _exit_now(f"{why}: exiting without them", status)


EXIT_WRITE_SECONDS = 1.0  # how long a server exiting at once may spend saying why


def _exit_now(why: str, status: int) -> None:
    """Say ``why`` on stderr and exit with ``status`` at once, without finalizing; no Ctrl-C
    stops it on the way (it would finalize the interpreter over a running build), and a
    write that blocks (a stderr pipe nobody reads) does not either: a timer exits after
    ``EXIT_WRITE_SECONDS`` whatever the writes do."""
    import signal
    import threading

    timer = None
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        timer = threading.Timer(EXIT_WRITE_SECONDS, os._exit, (status,))
        timer.daemon = True
        timer.start()
        import logging

        logging.getLogger("rootgrep").warning("%s", why)
        import contextlib

        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # (a closed pipe or stream)
                stream.flush()
    except KeyboardInterrupt:  # (one that came before SIG_IGN took hold)
        status = 130
    if timer is not None:  # (said in time: the exit is this one)
        timer.cancel()
    os._exit(status)


SANDBOX_PROBE_ENV = "ROOTGREP_TEST_SANDBOX_PROBE"


def _sandbox_problem(mode: str, dirs: list[str]) -> str | None:
    """Why ``serve --sandbox`` cannot start (checked before anything is opened), or None."""
    if not dirs:
        return (
            "--sandbox needs at least one --root (or $ROOTGREP_ROOTS): the sandboxed process "
            "can read only beneath the operator roots, so client roots outside them could not "
            "be served; pass --root DIR for each directory to serve"
        )
    if mode == "strict":
        from .sandbox import STRICT_MIN_ABI, abi_version

        abi, why = abi_version()
        if abi == 0:
            return f"--sandbox: {why}; use --sandbox=best-effort to serve without it"
        if abi < STRICT_MIN_ABI:
            return (
                f"--sandbox: the kernel's Landlock ABI is {abi}, --sandbox needs "
                f"{STRICT_MIN_ABI} (Linux 6.2) to govern every right that changes a file; use "
                "--sandbox=best-effort to serve with what it has"
            )
    return None


def _enter_sandbox(args: argparse.Namespace, roots: list[Root], cache: Any) -> None:
    """Restrict the process with Landlock (see sandbox.py), beneath the fds it holds. Strict:
    a failure stops the server (SystemExit, one line); best-effort: a warning on stderr."""
    from . import sandbox
    from .sandbox import Rule

    tree = sandbox.READ | (sandbox.WRITE_TREE if args.allow_write else 0)
    rules = [Rule(r.fs.fd, tree, f"--root {os.fsdecode(r.path)}") for r in roots]
    if cache is not None:
        rules.append(Rule(cache.fd, sandbox.CACHE, "the cache dir"))
    # (the audit log needs no rule: it is written only through the fd it holds, and Landlock
    # checks opens, not writes to an open fd; so it cannot be opened again, to be read or
    # written over)
    strict = args.sandbox == "strict"
    null = open_null_device(os.O_PATH)  # (stdio points fd 0 at it)
    try:  # (closed on every path: a failed load or restriction too)
        rules.append(Rule(null, sandbox.NULL_DEVICE, os.devnull))
        sandbox.load_lazy_modules()
        try:
            abi = sandbox.restrict(rules, min_abi=sandbox.STRICT_MIN_ABI if strict else 1)
        except sandbox.SandboxError as e:
            if strict:
                raise SystemExit(f"--sandbox: {e}") from None
            print(f"rootgrep: warning: --sandbox=best-effort: {e}; serving WITHOUT the sandbox",
                  file=sys.stderr, flush=True)  # fmt: skip
            return
    finally:
        os.close(null)
    if abi < sandbox.STRICT_MIN_ABI:
        print(f"rootgrep: warning: --sandbox=best-effort: Landlock ABI {abi} governs only part "
              "of the rights that change a file (truncate needs ABI 3)", file=sys.stderr,
              flush=True)  # fmt: skip
    import logging

    logging.getLogger("rootgrep").info("sandboxed with Landlock ABI %d", abi)


def _test_probe() -> None:
    """Test-only (``ROOTGREP_TEST_SANDBOX_PROBE=PATH``, read once here at start, never by a
    tool): open PATH by plain name and say on stderr whether the kernel let it, so a test sees
    the sandbox hold by itself."""
    path = os.environ.get(SANDBOX_PROBE_ENV)
    if not path:
        return
    import errno

    try:
        os.close(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        outcome = "opened"
    except OSError as e:
        outcome = f"errno {errno.errorcode.get(e.errno, e.errno)}"
    print(f"rootgrep: sandbox probe: {outcome}", file=sys.stderr, flush=True)


def _port_problem(host: str, port: int) -> str | None:
    """Whether ``host:port`` can be listened on, checked by binding it once (and closing)
    before anything is printed: a port in use fails with one clear line, not after the
    client configuration has been shown. (``SO_REUSEADDR`` as uvicorn sets it, so a port
    left in TIME_WAIT by a previous run is not taken for one in use.)"""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as e:
        return f"--host {host}: cannot be resolved ({e.strerror or e})"
    family, kind, proto, _canon, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as e:
            why = e.strerror or str(e)
            return (
                f"cannot listen on {host}:{port} ({why}): another server (an earlier "
                "`make run`?) holds it; stop it, or pass --port N"
            )
    return None


def _http_banner(url: str, auth: bool, roots: list[Root]) -> str:
    entry: dict[str, object] = {"type": "http", "url": url}
    if auth:
        entry["headers"] = {"Authorization": "Bearer ${ROOTGREP_TOKEN}"}
    import json

    snippet = json.dumps({"mcpServers": {"rootgrep": entry}}, indent=2)
    if roots:
        served = "operator roots: " + ", ".join(os.fsdecode(r.path) for r in roots)
    else:
        served = "no operator roots: each client's own roots are the scope"
    return (
        f"rootgrep {__version__} (pid {os.getpid()}), {served}\n"
        f"MCP endpoint (streamable HTTP): {url}\n"
        f"client configuration:\n{snippet}"
    )


def _index_parser(verb: str) -> argparse.ArgumentParser:
    import argparse

    p = argparse.ArgumentParser(
        prog=f"rootgrep {verb}", description=VERBS[verb], allow_abbrev=False
    )
    if verb == "search":
        p.add_argument(
            "query",
            help='words (files holding more of them first), "phrases", -word, path:GLOB, ext:py',
        )
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
    from .index.cache import CacheDir
    from .index.store import ForeignIndex, RootIndex, WriterBusy, default_cache_dir

    cache = args.cache_dir or default_cache_dir()
    roots = [pin_root(d) for d in args.dirs]
    if watch:
        return _daemon(cache, roots, args.max_file_size)
    pinned = CacheDir.open(cache)  # (refused with a clear message when unsafe: exit 2)
    console, bar_shown = _progress_bar()
    total_files = indexed = 0
    try:
        with bar_shown as bar:
            for r in roots:
                shown = os.fsdecode(r.path)
                task = bar.add_task(shown, total=None)
                try:
                    ix = RootIndex(
                        cache, r.path, max_file_size=args.max_file_size, cache=pinned,
                        identity=r.fs.identity(),
                    )  # fmt: skip
                except ForeignIndex as e:
                    bar.remove_task(task)
                    _say(console, f"{shown}: not indexed ({e})")
                    continue

                def progress(done: int, total: int | None, _msg: str, task: Any = task) -> None:
                    bar.update(task, completed=done, total=total)

                def completing(
                    done: int, total: int | None, _msg: str, task: Any = task, shown: str = shown
                ) -> None:  # (after the trigrams' commit: grep can use the index already)
                    bar.update(task, completed=done, total=total, description=f"{shown} (symbols)")

                try:
                    st = ix.sync(r.fs, progress=progress, completing=completing)
                except WriterBusy:
                    bar.remove_task(task)
                    _say(console, f"{shown}: kept by a daemon (not synced here)")
                    continue
                finally:
                    ix.close()
                bar.remove_task(task)
                total_files += st.files
                indexed += 1
                change = (
                    f"read {st.read} ({st.bytes} bytes): +{st.added} ~{st.updated} -{st.removed}"
                    if st.read or st.removed
                    else "unchanged, read 0"
                )
                if st.finished:  # (left by an interrupted build)
                    change += (
                        f"; words and symbols added to {_files(st.finished)} an earlier build left"
                    )
                took = f"{st.elapsed_ms / 1000:.2f} s"
                if st.grep_ready_ms is not None:  # (a build: its trigrams committed first)
                    took += f" (ready for grep in {st.grep_ready_ms / 1000:.2f} s)"
                _say(console, f"{shown}: {_files(st.files)} indexed; {change} in {took}")
        if len(roots) > 1:
            _say(
                console, f"total: {_files(total_files)} indexed in {indexed} of {len(roots)} roots"
            )
        return 0
    finally:
        pinned.close()
        for r in roots:
            r.close()


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _say(console: Any, line: str) -> None:
    """One plain line on stderr, above a live progress bar (never markup-parsed, no emoji
    codes, control characters of a path name shown as escapes)."""
    console.print(_printable(line), markup=False, highlight=False, emoji=False, soft_wrap=True)


_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}


def _printable(line: str) -> str:
    """``line`` with each control character (a name's ESC, CR, tab...) as ``\\xNN``: a
    log or a terminal shows the name, and no name moves the cursor or colours the screen."""
    return line.translate(_CONTROLS)


def _progress_bar() -> tuple[Any, Any]:
    """``index``'s console and progress bar: on a terminal, rich's (transient: the bar shows
    progress while a root syncs and is then replaced by that root's summary line, so no
    stale count, "0 files", is left behind); otherwise (a log, CI, a pipe) plain lines and no
    bar, without importing rich (50-120 ms of every ``rootgrep index``)."""
    err = sys.stderr
    try:
        tty = err is not None and err.isatty()
    except (OSError, ValueError):  # (closed)
        tty = False
    if not tty:
        plain = _PlainLines()
        return plain, plain
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = _stderr_console()
    bar = Progress(
        SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
        TextColumn("{task.completed} files"), TimeElapsedColumn(),
        console=console, transient=True, disable=not console.is_terminal,
    )  # fmt: skip
    return console, bar


class _PlainLines:
    """What ``index`` asks of rich's console and progress bar when stderr is no terminal:
    each line written as it is, no bar. A stderr closed, or whose reader went away, loses
    the lines, never the indexing of the roots after it."""

    broken = False

    def __enter__(self) -> _PlainLines:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def print(self, line: str, **_: Any) -> None:
        err = sys.stderr
        if err is None or self.broken:
            return
        try:
            err.write(line + "\n")
            err.flush()
        except (OSError, ValueError):  # (a broken pipe, a closed stream: said nowhere)
            self.broken = True

    def add_task(self, *_: Any, **__: Any) -> int:
        return 0

    def update(self, *_: Any, **__: Any) -> None:
        pass

    def remove_task(self, *_: Any) -> None:
        pass


def _daemon(cache: str, roots: list[Root], max_file_size: int) -> int:
    """Hold each index's writer for good (other processes read it and reload after commits),
    sync it, then keep it fresh from file-system events until SIGINT or SIGTERM."""
    import signal
    import threading

    from .index.freshness import FreshnessServer
    from .index.manager import IndexManager

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    manager = IndexManager(cache, max_file_size=max_file_size, hold_writer=True)
    # tells another process's grep which files changed since the last fold, so the CLI's
    # grep can answer from these indexes exactly (see index/freshness.py)
    answers = FreshnessServer(manager)
    try:
        building = []
        for r in roots:
            if stop.is_set():  # (Ctrl-C while the roots start: no more of them)
                return 0
            ix = manager.activate(r, 0)
            # (served once grep can use it: a build commits the trigrams first)
            manager.wait_answering(r.path, stop)
            if stop.is_set():
                return 0
            if ix is not None:
                what = ix.role if ix.error is None else f"failed: {ix.error}"
                not_served = answers.serve(r.path)
                if not_served is not None:
                    what += f"; grep in other processes scans it live: {not_served}"
                elif not ix.built.is_set():
                    what += "; grep answered from it now, its words and symbols being added"
                    building.append((r, ix))
                print(f"{os.fsdecode(r.path)}: {ix.state} ({what})", file=sys.stderr)
        print("watching; Ctrl-C to stop", file=sys.stderr, flush=True)
        while not stop.wait(0.25 if building else 1.0):
            for r, ix in [b for b in building if b[1].built.is_set()]:
                building.remove((r, ix))
                how = "built" if ix.error is None else f"failed: {ix.error}"
                print(f"{os.fsdecode(r.path)}: {ix.state} ({how})", file=sys.stderr, flush=True)
        return 0
    finally:
        answers.close()
        manager.close()
        for r in roots:
            r.close()


def _search(args: argparse.Namespace) -> int:
    """Ranked search through the same service the MCP tool uses, after a sync (or with the
    index a daemon keeps fresh)."""
    import json

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


def _symbols_parser() -> argparse.ArgumentParser:
    import argparse

    p = argparse.ArgumentParser(
        prog="rootgrep symbols", description=VERBS["symbols"], allow_abbrev=False
    )
    p.add_argument("name", help="the identifier whose definitions to find")
    p.add_argument("dirs", nargs="*", metavar="DIR", help="directories to look in (default: .)")
    p.add_argument("-i", "--ignore-case", action="store_true",
                   help="names containing NAME, ignoring case (not only NAME exactly)")  # fmt: skip
    p.add_argument("--kind", help="only this kind (class, function, method, struct, ...)")
    p.add_argument("--json", action="store_true", help="one JSON object per definition")
    p.add_argument("-n", "--max-results", type=int, default=500, metavar="N")
    return p


def _symbols(args: argparse.Namespace) -> int:
    """Definitions by parsing the files live (the walker's rules: .gitignore, no hidden)."""
    import json

    from .service import Service, Settings, Token

    dirs: list[str] = args.dirs or ["."]
    roots = [pin_root(d) for d in dirs]
    try:
        service = Service(roots, Settings())
        out = sys.stdout
        found = 0
        for given, r in zip(dirs, roots, strict=True):
            prefix = display(_display_prefix(given)) if args.dirs else ""
            res = service.find_symbol(
                [r], Token(), name=args.name, exact=not args.ignore_case, kind=args.kind,
                max_results=max(1, min(500, args.max_results)),
            )  # fmt: skip
            for s in res.symbols:
                found += 1
                if args.json:
                    rec = s.model_dump(mode="json") | {"path": prefix + s.path}
                    out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                else:
                    inside = f" (in {s.container})" if s.container else ""
                    out.write(f"{prefix}{s.path}:{s.line}: {s.kind} {s.name}{inside}\n")
        return 0 if found else 1
    finally:
        for r in roots:
            r.close()


def _outline_parser() -> argparse.ArgumentParser:
    import argparse

    p = argparse.ArgumentParser(
        prog="rootgrep outline", description=VERBS["outline"], allow_abbrev=False
    )
    p.add_argument("file", help="a source file")
    p.add_argument("--json", action="store_true", help="the outline as one JSON object")
    return p


def _outline(args: argparse.Namespace) -> int:
    """One file's definitions: its directory is pinned and the file read beneath it."""
    from .service import Service, Settings

    raw = os.fsencode(args.file)
    parent, name = os.path.split(raw)
    if not name:
        raise SystemExit(f"rootgrep: {args.file}: not a file")
    root = pin_root(parent or b".")
    try:
        res = Service([root], Settings()).outline([root], path=os.fsdecode(name))
        out = sys.stdout
        if args.json:
            out.write(res.model_dump_json() + "\n")
            return 0

        def walk(nodes: list[Any], depth: int) -> None:
            for n in nodes:
                out.write(f"{args.file}:{n.line}: {'  ' * depth}{n.kind} {n.name}\n")
                walk(n.children, depth + 1)

        walk(res.symbols, 0)
        return 0 if res.symbols else 1
    finally:
        root.close()


def _status(args: argparse.Namespace) -> int:
    from .index.cache import SCHEMA_VERSION, CacheDir
    from .index.store import cached_indexes, default_cache_dir

    cache = args.cache_dir or default_cache_dir()
    print(f"cache: {cache}")
    if not os.path.lexists(cache):
        return 0  # (no cache yet: nothing to list, and nothing is created)
    pinned = CacheDir.open(cache)  # the same checks as every user of the cache
    try:
        for c in cached_indexes(pinned):
            if c.schema != SCHEMA_VERSION:  # (its state may not be this version's format)
                print(
                    f"{c.root_display}: index of schema {c.schema} (another rootgrep version), "
                    f"{c.disk_bytes} bytes on disk"
                )
                continue
            files, text_bytes, pending, bare, when = c.summary()
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if when else "never"
            print(
                f"{c.root_display}: {files} files, {text_bytes} bytes of text, index "
                f"{c.disk_bytes} bytes on disk, synced {stamp}"
                + (f", {pending} pending" if pending else "")
                + (
                    f"; {bare} files without their words and symbols yet (a build interrupted: "
                    "grep uses the index, `rootgrep index` adds them)"
                    if bare
                    else ""
                )
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
        if verb == "symbols":
            return _symbols(_symbols_parser().parse_intermixed_args(rest))
        if verb == "outline":
            return _outline(_outline_parser().parse_args(rest))
        if verb == "status":
            return _status(_index_parser("status").parse_args(rest))
        if verb == "grep":
            rest = _attach_values(rest)
            args = _quick_grep_args(rest)
            if args is None:
                gp = _grep_parser()
                # intermixed parsing lets flags follow DIRs (as in rg); it mishandles "--"
                args = gp.parse_args(rest) if "--" in rest else gp.parse_intermixed_args(rest)
            return _grep(args)
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
        devnull = open_null_device(os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    except Exception as e:  # a runtime error: status 2 and one line, never a traceback
        print(f"rootgrep: [error] {_one_line(_describe(e))}", file=sys.stderr)
        return 2
    return 2


_TAKES_ANY_VALUE = {"-e": "--regexp", "--regexp": "--regexp", "-g": "--glob", "--glob": "--glob"}


def _attach_values(argv: list[str]) -> list[str]:
    """``-e -foo`` as rg reads it: the word after ``-e``/``-g`` is their value even when it
    starts with a dash (argparse would take it for a flag), so it is attached as
    ``--regexp=-foo``."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return out + argv[i:]
        if a in _TAKES_ANY_VALUE and i + 1 < len(argv):
            out.append(f"{_TAKES_ANY_VALUE[a]}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def _describe(e: Exception) -> str:
    if isinstance(e, OSError) and e.strerror:
        where = f": {e.filename}" if e.filename is not None else ""
        return f"{e.strerror}{where}"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _one_line(msg: str) -> str:
    return " ".join(msg.split())[:2000]


def _grep(args: argparse.Namespace) -> int:
    """``rg --sort path -n`` over confined roots: each directory PATH is pinned as a root and
    walked (or its files found in an index a daemon keeps fresh: ``_Source``); a file PATH is
    searched as the one entry of its pinned parent directory."""
    began = time.perf_counter()
    patterns: list[str] = list(args.patterns)
    paths: list[str] = list(args.args)
    _unrestrict(args)
    if args.files:
        return _list_files(args, paths)
    if not patterns:
        if not paths:
            raise SystemExit("rootgrep: give a PATTERN (or -e PATTERN); see rootgrep grep -h")
        patterns = [paths.pop(0)]
    before, after = _context_of(args)
    if args.max_columns < 0:
        raise SystemExit("rootgrep: --max-columns must be 0 (no limit) or more")
    if args.max_count is not None and args.max_count < 0:
        raise SystemExit("rootgrep: --max-count must be 0 or more")
    try:
        matcher = Matcher(_query_of(patterns, args, before, after))
    except InvalidPattern as e:  # (the message speaks of the MCP tool's argument)
        raise InvalidPattern(e.message.replace("pass fixed_strings=true", "pass -F")) from None
    rules = _GlobRules(args.globs) if args.globs else None
    out = _stdout_blocks()
    given = paths or ["."]
    # (-H/-I say; else a path is printed unless one file PATH alone is searched, see below)
    sink = _Sink(out, args, before or after, args.with_filename is not False)
    matched = searched = files_matched = listed = 0
    used: list[tuple[str, _Source]] = []
    failed = False
    errors: list[str] = []
    try:
        for path, target in _targets(given, bool(paths), args, errors):
            try:
                if target.is_file and len(given) == 1 and args.with_filename is None:
                    sink.with_filename = False  # as rg: one file searched prints no path
                sink.target = target
                walker = Walker(
                    target.root.fs,
                    target.start,
                    WalkOptions(hidden=args.hidden, no_ignore=args.no_ignore),
                )
                source = _Source(args, target, matcher)
                batches = source.batches if source.batches is not None else walker.batches()
                if rules is not None and not target.is_file:  # (a file PATH: always searched)
                    batches = _glob_batches(batches, target, rules)
                try:
                    stats = run_grep(
                        matcher,
                        batches,
                        sink,
                        max_file_size=args.max_file_size,
                        threads=args.threads,
                        join=source.join,
                    )
                except RootgrepError as e:  # the PATH vanished, or is a FIFO, ...
                    print(f"rootgrep: {path}: {_one_line(str(e))}", file=sys.stderr)
                    failed = True
                    continue
                matched += stats.matches
                files_matched += stats.files_matched
                searched += stats.files_searched
                listed += source.held
                used.append((path, source))
                failed = _said_errors(walker, target) or failed
            finally:
                target.root.close()
    finally:
        out.flush()
    failed = failed or bool(errors)
    if args.stats:
        _print_stats(args, matched, files_matched, searched, used, time.perf_counter() - began)
    if not paths and not searched and not listed and not failed:
        # as rg: searching the working directory found no file at all (an error, status 2)
        print(
            "rootgrep: no files were searched: they are hidden, ignored or excluded by -g "
            "(see --hidden, --no-ignore)",
            file=sys.stderr,
        )
        return 2
    if failed:
        return 2
    if args.max_count is not None:  # (-m 0 shows nothing: as rg, no match)
        return 0 if sink.shown else 1
    return 0 if matched else 1


def _unrestrict(args: argparse.Namespace) -> None:
    """rg's ``-u`` (``--no-ignore``) and ``-uu`` (and ``--hidden``); ``-uuu`` would search
    binary files, which rootgrep never does: refused."""
    if args.unrestricted >= 3:
        raise SystemExit(
            "rootgrep: -uuu searches binary files, and rootgrep never does (a NUL in a file's "
            "first 8 KiB makes it binary); use -uu"
        )
    if args.unrestricted >= 1:
        args.no_ignore = True
    if args.unrestricted >= 2:
        args.hidden = True


def _list_files(args: argparse.Namespace, paths: list[str]) -> int:
    """``--files``: the files a search of the PATHs would read, printed as rg prints them
    (walk order, which is rg's ``--sort path``; binary and large files too, as rg lists
    them); exit 0 when one was printed, 1 when none, 2 on an error."""
    rules = _GlobRules(args.globs) if args.globs else None
    out = _stdout_blocks()
    printed, failed = 0, False
    errors: list[str] = []
    try:
        for _, target in _targets(paths or ["."], bool(paths), args, errors):
            try:
                options = WalkOptions(hidden=args.hidden, no_ignore=args.no_ignore)
                walker = Walker(target.root.fs, target.start, options)
                batches: Iterator[DirBatch] = walker.batches()
                if rules is not None and not target.is_file:
                    batches = _glob_batches(batches, target, rules)
                for batch in batches:
                    with batch:
                        for fe in batch.files:
                            out.write(target.shown(fe.path) + b"\n")
                            printed += 1
                failed = _said_errors(walker, target) or failed
            finally:
                target.root.close()
    finally:
        out.flush()
    return 2 if failed or errors else 0 if printed else 1


def _targets(
    given: list[str], explicit: bool, args: argparse.Namespace, errors: list[str]
) -> Iterator[tuple[str, _Target]]:
    """Each PATH pinned (``_open_target``), in order; one that cannot be is said on stderr,
    as rg says it, and added to ``errors``. The caller closes each target's root."""
    for path in given:
        try:
            yield path, _open_target(path, explicit, args.symlinks)
        except RootgrepError as e:
            print(f"rootgrep: {path}: {_one_line(str(e))}", file=sys.stderr)
            errors.append(path)


def _said_errors(walker: Walker, target: _Target) -> bool:
    """Say on stderr what a walk could not read (as rg does); whether there was any."""
    for rel, why in walker.errors:
        print(f"rootgrep: {display(target.shown(rel))}: {why}", file=sys.stderr)
    return bool(walker.errors)


def _stdout_blocks() -> BinaryIO:
    """stdout's bytes, written 64 KiB at a time. With ``PYTHONUNBUFFERED`` (or ``-u``) Python's
    own binary stdout is raw, and each printed line was a ``write(2)`` of its own; the writer
    made here is over a second handle of the same fd that never closes it."""
    out = sys.stdout.buffer
    if isinstance(out, io.RawIOBase):
        return io.BufferedWriter(io.FileIO(out.fileno(), "wb", closefd=False), 1 << 16)
    return out


class _Source:
    """Where one directory PATH's files come from: the index a running daemon keeps fresh
    (``index.freshness``: its candidates plus every file changed since its last fold, each
    read and matched now, so the answer is a live scan's), else a live walk; ``why`` says
    which and why. ``batches`` is None for a live walk."""

    def __init__(self, args: argparse.Namespace, target: _Target, matcher: Matcher) -> None:
        self.batches: Iterator[DirBatch] | None = None
        self.join = True
        self.held = 0  # files the index holds for the PATH (a walk counts its own)
        self.kind = "live"
        self.why = ""
        if args.no_index:
            self.why = "--no-index"
        elif target.is_file:
            self.why = "a file PATH is read directly"
        elif args.hidden or args.no_ignore:
            self.why = "--hidden/--no-ignore (an index holds what a default walk lists)"
        else:
            self._open(args, target, matcher)

    def _open(self, args: argparse.Namespace, target: _Target, matcher: Matcher) -> None:
        from .index.freshness import ask_fresh, default_cache_dir

        cache = args.cache_dir or default_cache_dir()
        query = matcher.query
        q = {"pattern": query.pattern, "regex": query.regex, "case_sensitive": query.case_sensitive}

        def meanwhile() -> None:
            # while the daemon answers: compile the scan that tests its candidates (for a
            # literal, RE2's import and compile are 2 ms; ``may_match`` compiles it once)
            matcher.may_match(b"")

        try:
            fresh, self.why = ask_fresh(
                cache, target.root, q, max_file_size=args.max_file_size, meanwhile=meanwhile
            )
        except (OSError, RootgrepError) as e:  # (an index is an optimisation: scan live)
            self.why = f"the index could not be asked ({_describe(e)})"
            return
        if fresh is None:
            return
        self.batches = fresh.batches(target.root)
        # (the candidates of a query with a required trigram mostly match: searched one by
        # one, as the MCP grep does; without one, every text file is, in joined chunks)
        self.join = not fresh.narrowed
        self.held = fresh.held
        self.kind = "index"
        self.why += f"; {_files(fresh.changed).replace(' ', ' changed ')} read as they are now"


def _print_stats(
    args: argparse.Namespace,
    lines: int,
    files_matched: int,
    searched: int,
    used: list[tuple[str, _Source]],
    seconds: float,
) -> None:
    """rg's ``--stats`` block (the counts rootgrep has), and which source answered each PATH."""
    out = sys.stderr if args.json else sys.stdout
    rows = [
        "",
        f"{lines} matched lines",
        f"{files_matched} files contained matches",
        f"{searched} files searched",
    ]
    for path, source in used:
        where = f"{path}: " if len(used) > 1 else ""
        rows.append(f"{where}searched by {source.kind}: {source.why}")
    rows.append(f"{seconds:.6f} seconds")
    out.flush()
    out.write("\n".join(rows) + "\n")
    out.flush()


def _context_of(args: argparse.Namespace) -> tuple[int, int]:
    """(before, after) as rg reads them: -A and -B override their side of -C."""
    for flag, n in (("--after-context", args.after), ("--before-context", args.before),
                    ("--context", args.context)):  # fmt: skip
        if n is not None and not 0 <= n <= MAX_CONTEXT:
            raise SystemExit(f"rootgrep: {flag} must be between 0 and {MAX_CONTEXT}")
    both = args.context or 0
    return (
        both if args.before is None else args.before,
        both if args.after is None else args.after,
    )


def _without_escapes(pattern: str) -> str:
    """A pattern without its escapes (``\\W``, ``\\p{Lu}``...): what is left are its literals."""
    if "\\" not in pattern:
        return pattern
    import re

    return re.sub(r"\\(?:[pP](?:\{[^}]*\}|.)|.)", "", pattern, flags=re.S)


def _query_of(patterns: list[str], args: argparse.Namespace, before: int, after: int) -> GrepQuery:
    """One query for all the patterns: a line matches if any does (an RE2 alternation)."""
    case = args.case or "sensitive"
    if case == "smart":
        # as rg's --smart-case: insensitive unless a pattern has an upper-case literal
        # (escapes such as \W or \p{Lu} are not literals)
        texts = patterns if args.fixed_strings else [_without_escapes(p) for p in patterns]
        case = "sensitive" if any(c.isupper() for t in texts for c in t) else "insensitive"
    if len(patterns) == 1:
        pattern, regex = patterns[0], not args.fixed_strings
    else:
        import re2

        parts = [re2.escape(p) if args.fixed_strings else p for p in patterns]
        pattern, regex = "|".join(f"(?:{p})" for p in parts), True
    return GrepQuery(
        pattern,
        regex=regex,
        case_sensitive=case == "sensitive",
        whole_word=args.word_regexp,
        before=before,
        after=after,
    )


class _Target:
    """One PATH: the pinned directory searched (a directory PATH itself, or a file PATH's
    parent) and where the walk starts in it (b"" or the file's name). (A plain class: a
    dataclass costs its module's import and 0.2 ms to make, on every CLI start.)"""

    __slots__ = ("given", "is_file", "prefix", "root", "start")

    def __init__(
        self, given: bytes, root: Root, start: bytes, is_file: bool, prefix: bytes
    ) -> None:
        self.given = given
        self.root = root
        self.start = start
        self.is_file = is_file
        self.prefix = prefix  # what is printed before a root-relative path (directories)

    def shown(self, rel: bytes) -> bytes:
        """A file's path as rg prints it: a file PATH as given, else PATH joined with it."""
        return self.given if self.is_file else self.prefix + rel


def _open_target(path: str, explicit: bool, symlinks: Any) -> _Target:
    raw = os.fsencode(path)
    try:
        root = pin_root(path, symlinks=symlinks)
    except RootgrepError as not_dir:
        # not a directory: a file, opened beneath its pinned parent by its one name
        parent, name = os.path.split(raw)
        if not name or name in (b".", b".."):
            raise
        try:
            root = pin_root(parent or b".", symlinks=symlinks)
        except RootgrepError:
            raise not_dir from None
        try:
            st = root.fs.stat([name])
        except RootgrepError:
            root.close()
            raise not_dir from None
        if stat.S_ISDIR(st.st_mode):  # (became a directory meanwhile: search it as one)
            return _Target(raw, root, name, False, _display_prefix(raw) if explicit else b"")
        return _Target(raw, root, name, True, b"")
    return _Target(raw, root, b"", False, _display_prefix(raw) if explicit else b"")


def _display_prefix(given: str | bytes) -> bytes:
    """rg joins a directory PATH and a file's relative path as Rust's ``Path::join`` does: a
    ``/`` between them unless PATH already ends with one (``dir/`` → ``dir/x``)."""
    raw = os.fsencode(given)
    return raw if raw.endswith(b"/") else raw + b"/"


class _GlobRules:
    """rg's -g rules: the last GLOB that matches a path itself decides (``!GLOB`` excludes);
    a directory a ``!GLOB`` matches is pruned with everything below it; with any GLOB not
    starting with ``!``, a file no GLOB selects is not searched (directories are entered)."""

    def __init__(self, globs: list[str]) -> None:
        from .globs import Globs  # (pathspec: imported only when -g is given)

        self.globs = Globs(globs, "glob")
        self.whitelist = any(not g.startswith("!") for g in globs)

    def pruned(self, directory: bytes) -> bool:
        return self.globs.verdict(directory, is_dir=True) is False

    def selected(self, path: bytes) -> bool:
        v = self.globs.verdict(path)
        return not self.whitelist if v is None else v


def _glob_batches(
    batches: Iterator[DirBatch], target: _Target, rules: _GlobRules
) -> Iterator[DirBatch]:
    """The walk's batches with only the files the globs select. rg matches a glob against
    the path as printed, without a leading ``./`` and with the working directory taken off
    an absolute path below it; each directory below the PATH is judged on its own."""
    cwd = os.fsencode(os.getcwd()).rstrip(b"/") + b"/"
    pruned: dict[bytes, bool] = {b"": False}  # (the PATH itself is never judged, as in rg)

    def is_pruned(rel_dir: bytes) -> bool:
        if rel_dir not in pruned:
            parent = rel_dir.rpartition(b"/")[0]
            pruned[rel_dir] = is_pruned(parent) or rules.pruned(
                _glob_path(target.shown(rel_dir), cwd)
            )
        return pruned[rel_dir]

    def select(batch: DirBatch) -> list[FileEntry]:
        if is_pruned(batch.dir):
            return []
        return [fe for fe in batch.files if rules.selected(_glob_path(target.shown(fe.path), cwd))]

    yield from keep_files(batches, select)


def _glob_path(shown: bytes, cwd: bytes) -> bytes:
    if shown.startswith(b"./"):
        return shown[2:]
    if shown.startswith(cwd):
        return shown[len(cwd) :]
    return shown


OMITTED_MATCH = b"[Omitted long matching line]"  # rg 14's words for a line over -M
OMITTED_CONTEXT = b"[Omitted long context line]"


class _Sink:
    """Prints what ``rg -n --sort path`` prints: ``path:line:text``; context lines as
    ``path-line-text`` with ``--`` between groups that do not touch; ``-l`` paths; ``-c``
    ``path:N``. Without a file name (one file PATH): ``line:text``, ``N``. ``--json``: see
    the flag's help."""

    def __init__(self, out: BinaryIO, args: argparse.Namespace, context: int, names: bool) -> None:
        self.out = out
        self.mode: str = args.mode or "content"
        self.json: bool = args.json
        self.context = context
        self.max_columns: int = args.max_columns
        self.with_filename = names
        self.target: _Target | None = None
        self.first = True
        self.max_count: int | None = args.max_count
        self.shown = 0  # files with a line shown (-m 0 shows none)

    def __call__(self, fm: FileMatches) -> bool:
        assert self.target is not None
        path = self.target.shown(fm.path)
        w = self.out.write
        late: list[LineMatch] = []  # (-m: matches past NUM, shown only as context)
        if self.max_count is not None and len(fm.matches) > self.max_count:
            late = fm.matches[self.max_count :]
            fm = FileMatches(fm.path, fm.matches[: self.max_count])
        if not fm.matches:
            return True
        self.shown += 1
        if self.json:
            self._json(fm)
        elif self.mode == "files":
            w(path + b"\n")
        elif self.mode == "count":
            n = b"%d" % len(fm.matches)
            w(path + b":" + n + b"\n" if self.with_filename else n + b"\n")
        else:
            self._content(path, fm, late)
        return True

    def _line(self, path: bytes, n: int, text: bytes, is_match: bool) -> bytes:
        sep = b":" if is_match else b"-"
        if self.max_columns and len(text) + 1 > self.max_columns:
            # (rg counts the line terminator; a last line without one is counted as if it
            # had one here)
            text = OMITTED_MATCH if is_match else OMITTED_CONTEXT
        if self.with_filename:
            return b"%s%s%d%s%s\n" % (path, sep, n, sep, text)
        return b"%d%s%s\n" % (n, sep, text)

    def _content(self, path: bytes, fm: FileMatches, late: Sequence[LineMatch] = ()) -> None:
        w = self.out.write
        if not self.context:
            for lm in fm.matches:
                w(self._line(path, lm.line, lm.text, True))
            return
        lines: dict[int, tuple[bytes, bool]] = {}
        for lm in fm.matches:
            for i, t in enumerate(lm.before):
                lines.setdefault(lm.line - len(lm.before) + i, (t, False))
            lines[lm.line] = (lm.text, True)
            for i, t in enumerate(lm.after):
                lines.setdefault(lm.line + 1 + i, (t, False))
        for lm in late:  # (a match past -m's NUM within the context shown: as rg, a match)
            if lm.line in lines:
                lines[lm.line] = (lm.text, True)
        prev = None
        for n in sorted(lines):
            if (prev is not None and n != prev + 1) or (prev is None and not self.first):
                w(b"--\n")
            text, is_match = lines[n]
            w(self._line(path, n, text, is_match))
            prev = n
        self.first = False

    def _json(self, fm: FileMatches) -> None:
        import json

        assert self.target is not None
        root = self.target.root.identity()
        path = display(fm.path)
        if self.mode != "content":
            rec: dict[str, object] = {"root": root, "path": path, "matches": len(fm.matches)}
            self.out.write(json.dumps(rec, ensure_ascii=False).encode() + b"\n")
            return
        for lm in fm.matches:
            rec = {
                "root": root,
                "path": path,
                "line": lm.line,
                "column": lm.column,
                "text": lm.text.decode("utf-8", "replace"),
                "before": [b.decode("utf-8", "replace") for b in lm.before],
                "after": [a.decode("utf-8", "replace") for a in lm.after],
            }
            self.out.write(json.dumps(rec, ensure_ascii=False).encode() + b"\n")
