"""A CLI's ``rootgrep grep`` run whole in the daemon (the asking side: ``remote_grep``).

``run_for_peer`` parses the CLI's arguments as the CLI would, opens each PATH against the
CLI's working directory, and asks this daemon's own index for each PATH's files
(``FreshnessServer.fresh_for``: the same answer a local grep would get over the socket). Only
when every PATH is answered so does it run ``grep_verb.search``, the local grep's own loop,
writing stdout and stderr as frames to the CLI (``index.run_wire``); else it declines before
writing anything, and the CLI runs the grep itself. Output streams: at most ``MAX_FRAME``
bytes are held, and a CLI that reads no more holds this thread (one of
``freshness.MAX_RUNS``) until it goes or the daemon stops.
"""

from __future__ import annotations

import io
import os
import time

from ..confine import display, strip_prefix
from ..errors import RootgrepError
from ..index import run_wire
from ..roots import pin_root
from .common import one_line
from .grep_verb import Io, _Source, search, setup_of
from .rg_flags import parse_grep_args
from .targets import Target, display_prefix

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    import socket

    from ..index.freshness import FreshnessServer


class _Frames(io.RawIOBase):
    """A raw stream whose writes go to the CLI as frames of one kind."""

    def __init__(self, conn: socket.socket, kind: bytes) -> None:
        self.conn = conn
        self.kind = kind

    def writable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        data = bytes(b)
        for at in range(0, len(data), run_wire.MAX_FRAME):
            self.conn.sendall(run_wire.frame(self.kind, data[at : at + run_wire.MAX_FRAME]))
        return len(data)


def declined(args: argparse.Namespace) -> str:
    """Why the daemon does not run this grep (the CLI then does), or ""."""
    if args.files or args.type_list:
        return "--files and --type-list are run by the CLI"
    if args.stats:
        return "--stats is run by the CLI (it says where each PATH's files came from)"
    if args.no_index or args.invert_match or args.hidden or args.no_ignore or args.unrestricted:
        return "a live scan (-v, --hidden, --no-ignore, -u or --no-index)"
    return ""


def _open_beneath(
    server: FreshnessServer,
    root_path: bytes,
    cwd: str,
    path: str,
    explicit: bool,
    args: argparse.Namespace,
) -> tuple[Target | None, str]:
    """A directory PATH of the CLI's, opened beneath this daemon's pinned root without
    following a link (as the root's walk reaches it), and pinned from that fd: the daemon
    never opens a directory outside its root for a CLI. None, and why, for a PATH elsewhere,
    through a link, with a ``..``, or not a directory (the CLI opens those itself)."""
    raw = os.fsencode(path)
    if b".." in raw.split(b"/"):  # (``a/../b`` is ``b`` only when ``a`` is no link)
        return None, "a PATH with .. is opened by the CLI"
    at = os.path.normpath(os.path.join(os.fsencode(cwd), raw))
    comps = strip_prefix(at, root_path)
    ix = server.manager.get(root_path)
    if comps is None or ix is None:
        return None, f"{display(root_path)} does not hold {display(at)}"
    try:
        fd = ix.fs.open_dir(comps, no_symlinks=True)
    except RootgrepError as e:  # (a file PATH, a link, gone: the CLI opens it, or says so)
        return None, str(e)
    try:
        root = pin_root(f"/proc/self/fd/{fd}", symlinks=args.symlinks)
    except RootgrepError as e:
        return None, str(e)
    finally:
        os.close(fd)
    return Target(raw, root, b"", False, display_prefix(raw) if explicit else b""), ""


def run_for_peer(
    server: FreshnessServer, root_path: bytes, conn: socket.socket, cwd: str, argv: list[str]
) -> None:
    """Run ``rootgrep grep ARGV`` for the CLI at ``conn`` (working directory ``cwd``), or
    decline (a LOCAL frame) before any output."""
    began = time.perf_counter()
    conn.settimeout(None)  # (a CLI piped into a pager may read slowly: it is waited for)

    def decline(why: str) -> None:
        conn.sendall(run_wire.frame(run_wire.LOCAL, why.encode("utf-8", "replace")[:200]))

    try:  # (quiet: argparse would print help or a usage error on the daemon's own streams)
        args = parse_grep_args(argv, quiet=True)
    except SystemExit:  # (a usage error, or --help: the CLI says it in its own words)
        return decline("usage")
    why = declined(args)
    if why:
        return decline(why)
    try:
        setup = setup_of(args)
    except (SystemExit, RootgrepError):
        return decline("usage")
    query = {
        "pattern": setup.matcher.query.pattern,
        "regex": setup.matcher.query.regex,
        "case_sensitive": setup.matcher.query.case_sensitive,
    }
    opened: list[tuple[str, Target, _Source]] = []
    try:
        for path in setup.given:
            target, why = _open_beneath(server, root_path, cwd, path, bool(setup.paths), args)
            if target is None:
                return decline(why)
            source = _Source.unasked()
            opened.append((path, target, source))
            fresh, why = server.fresh_for(
                root_path, target.root, query, max_file_size=args.max_file_size
            )
            if fresh is None:
                return decline(why)
            source.answered(fresh, target, why)
        # accepted: an empty stdout frame, after which the CLI waits as long as the grep
        # takes (this one may say nothing for a while: -c over a large tree)
        conn.sendall(run_wire.frame(run_wire.OUT, b""))
        out = io.BufferedWriter(_Frames(conn, run_wire.OUT), 1 << 16)
        err = io.TextIOWrapper(
            io.BufferedWriter(_Frames(conn, run_wire.ERR), 1 << 12),
            encoding="utf-8",
            errors="backslashreplace",
            write_through=True,
        )
        try:
            status = search(args, setup, Io(out, err, cwd), opened, [], began)
        except RootgrepError as e:  # (as the CLI's ``main`` says one)
            err.write(f"rootgrep: {one_line(str(e))}\n")
            status = 2
        err.flush()
        conn.sendall(run_wire.frame(run_wire.EXIT, b"%d" % status))
    finally:  # (``search`` closes those it reached; a close is idempotent)
        for _, target, _ in opened:
            target.root.close()
