"""``rootgrep serve``: the MCP server over stdio or HTTP, its start (sandbox, port check,
banner) and its stop (builds let go in time, else an exit at once)."""

from __future__ import annotations

import os
import sys

from .. import __version__
from ..confine import open_null_device
from ..grep import (
    DEFAULT_MAX_FILE_SIZE,
)
from ..roots import Root, pin_root
from .common import VERBS

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    import argparse
    from typing import Any


MAX_ANSWER_CHARS = 100_000  # (text and structured copy stay under the SDK's 1 MiB message limit)


def serve_parser() -> argparse.ArgumentParser:
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
        "--auth-token-env",
        metavar="VAR",
        help="HTTP: require 'Authorization: Bearer $VAR'",
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
        print(
            f"rootgrep: --exit-with-parent: prctl failed ({os.strerror(err)})",
            file=sys.stderr,
        )
        return True
    return os.getppid() == parent and parent != 1


def serve(args: argparse.Namespace) -> int:
    import logging
    import signal

    # Ctrl-C (SIGINT) stops the server from its first instant, as it does once uvicorn or the
    # stdio loop handles it: a server started with SIGINT ignored (a background job of a
    # script inherits that) would otherwise drop one sent before then and serve on
    signal.signal(signal.SIGINT, signal.default_int_handler)

    from ..audit import Audit
    from ..memory import tune_malloc

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
        from ..http_guard import http_exposure_problem

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
    from ..index.manager import IndexManager

    indexes = IndexManager(
        args.cache_dir,
        enabled=not args.no_index,
        max_file_size=args.max_file_size,
        cache_max_bytes=args.cache_max_bytes,
        idle_seconds=args.index_idle_seconds,
        max_watched_roots=args.max_watched_roots,
    )
    # (the MCP SDK and the service only now: a start refused above costs no second of
    # importing them, the SDK's types alone about 0.5 s of CPU)
    from ..server import build_server, serve_http, serve_stdio
    from ..service import Service, Settings

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
        from ..sandbox import STRICT_MIN_ABI, abi_version

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
    from .. import sandbox
    from ..sandbox import Rule

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
