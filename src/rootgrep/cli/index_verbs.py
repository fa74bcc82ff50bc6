"""``rootgrep index``, ``daemon`` and ``status``: build, keep fresh and list the indexes of a
cache directory."""

from __future__ import annotations

import os
import sys
import time

from ..grep import (
    DEFAULT_MAX_FILE_SIZE,
)
from ..roots import Root, pin_root
from .common import VERBS, n_files

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    import argparse
    from typing import Any


def index_parser(verb: str) -> argparse.ArgumentParser:
    """``index``'s and ``status``'s flags (``search``'s are these and its own)."""
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
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="default: $ROOTGREP_CACHE_DIR, else $XDG_CACHE_HOME/rootgrep, else ~/.cache/rootgrep",
    )
    p.add_argument("--max-file-size", type=int, default=DEFAULT_MAX_FILE_SIZE, metavar="BYTES")
    return p


def index(args: argparse.Namespace, watch: bool) -> int:
    from ..index.names import default_cache_dir

    cache = args.cache_dir or default_cache_dir()
    roots = [pin_root(d) for d in args.dirs]
    if watch:
        return _daemon(cache, roots, args.max_file_size)
    try:
        return _index(cache, roots, args.max_file_size)
    finally:
        for r in roots:
            r.close()


def _kept_by_daemon(cache: str, r: Root, max_file_size: int) -> tuple[int, str] | str:
    """(files, what to say) when a running daemon keeps ``r``'s own index with the same
    ``max_file_size``: it holds the writer and folds every change, so nothing is synced here
    (and the index is not even opened: no tantivy, no state, no stat of every file). Else
    what its daemon said, if one answered ("" if none did): the root is synced here."""
    from ..index.freshness import ask_kept

    kept, _why, said = ask_kept(cache, r)
    if kept is None:
        return said
    if kept["max_file_size"] != max_file_size:
        return f"it indexes files up to {kept['max_file_size']} bytes, not {max_file_size}"
    said = f"kept fresh by rootgrep daemon pid {kept['pid']}"
    if kept["changed"]:
        n = kept["changed"]
        said += f", {n} changed path{'s' if n != 1 else ''} not folded in yet (grep reads"
        said += " them live)" if n != 1 else " it live)"
    if not kept["symbols"]:
        said += "; its words and symbols still being added"
    return kept["files"], f"{os.fsdecode(r.path)}: {n_files(kept['files'])} indexed; {said}"


def _index(cache: str, roots: list[Root], max_file_size: int) -> int:
    plain = _PlainLines()  # (the lines of roots a daemon keeps: no bar, no rich)
    total_files = indexed = 0
    left: list[tuple[Root, str]] = []  # (synced here together, their lines in order given)
    for r in [*roots, None]:
        kept = None if r is None else _kept_by_daemon(cache, r, max_file_size)
        if isinstance(kept, str) and r is not None:
            left.append((r, kept))
            continue
        if left:
            total_files, indexed = _sync_here(cache, left, max_file_size, total_files, indexed)
            left = []
        if kept is not None:
            _say(plain, kept[1])
            total_files += kept[0]
            indexed += 1
    if len(roots) > 1:
        _say(plain, f"total: {n_files(total_files)} indexed in {indexed} of {len(roots)} roots")
    return 0


def _sync_here(
    cache: str, roots: list[tuple[Root, str]], max_file_size: int, total_files: int, indexed: int
) -> tuple[int, int]:
    """Sync each of ``roots``' indexes in this process, with a progress bar (each with what
    its daemon said, if one answered: why it does not keep the index); the totals of files
    and indexed roots, added to those given."""
    from ..index.cache import CacheDir
    from ..index.store import ForeignIndex, RootIndex
    from ..index.writer import WriterBusy

    pinned = CacheDir.open(cache)  # (refused with a clear message when unsafe: exit 2)
    console, bar_shown = _progress_bar()
    try:
        with bar_shown as bar:
            for r, daemon_said in roots:
                shown = os.fsdecode(r.path)
                task = bar.add_task(shown, total=None)
                try:
                    ix = RootIndex(
                        cache, r.path, max_file_size=max_file_size, cache=pinned,
                        identity=r.fs.identity(),
                    )  # fmt: skip
                except ForeignIndex as e:
                    bar.remove_task(task)
                    _say(console, f"{shown}: not indexed ({e})")
                    continue

                def progress(done: int, total: int | None, _msg: str, task: Any = task) -> None:
                    bar.update(task, completed=done, total=total)

                def completing(
                    done: int,
                    total: int | None,
                    _msg: str,
                    task: Any = task,
                    shown: str = shown,
                ) -> None:  # (after the trigrams' commit: grep can use the index already)
                    bar.update(
                        task,
                        completed=done,
                        total=total,
                        description=f"{shown} (symbols)",
                    )

                try:
                    st = ix.sync(r.fs, progress=progress, completing=completing)
                except WriterBusy:  # (a daemon still building, or another process's sync)
                    bar.remove_task(task)
                    said = (
                        f"; its daemon says: {daemon_said}"
                        if daemon_said
                        else " (a rootgrep serve, daemon or index, perhaps "
                        "building it: run this again later)"
                    )
                    _say(console, f"{shown}: not synced here: another process holds the "
                                  f"index's writer{said}")  # fmt: skip
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
                        f"; words and symbols added to {n_files(st.finished)} an earlier build left"
                    )
                took = f"{st.elapsed_ms / 1000:.2f} s"
                if st.grep_ready_ms is not None:  # (a build: its trigrams committed first)
                    took += f" (ready for grep in {st.grep_ready_ms / 1000:.2f} s)"
                _say(console, f"{shown}: {n_files(st.files)} indexed; {change} in {took}")
        return total_files, indexed
    finally:
        pinned.close()


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
    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

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

    from ..index.freshness import FreshnessServer
    from ..index.manager import IndexManager

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    manager = IndexManager(cache, max_file_size=max_file_size, hold_writer=True)
    # tells another process's grep which files changed since the last fold, so the CLI's
    # grep can answer from these indexes exactly (see index/freshness.py)
    answers = FreshnessServer(manager)
    # and runs a CLI's whole grep here, when the CLI asks (``remote_grep``, ``served_grep``)
    from .served_grep import run_for_peer

    answers.runner = run_for_peer
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
                print(
                    f"{os.fsdecode(r.path)}: {ix.state} ({how})",
                    file=sys.stderr,
                    flush=True,
                )
        return 0
    finally:
        answers.close()
        manager.close()
        for r in roots:
            r.close()


def status(args: argparse.Namespace) -> int:
    from ..index.cache import SCHEMA_VERSION, CacheDir, default_cache_dir
    from ..index.store import cached_indexes

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
