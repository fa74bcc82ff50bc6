"""``rootgrep grep``: ``rg --sort path -n`` over confined roots, from a daemon's index or a
live walk; ``--files``; rg's -g and -t/-T file selection."""

from __future__ import annotations

import io
import os
import sys
import time

from ..errors import InvalidPattern, RootgrepError
from ..grep import (
    MAX_CONTEXT,
    GrepQuery,
    Matcher,
    run_grep,
)
from ..walker import DirBatch, FileEntry, Walker, WalkOptions, keep_files
from .common import describe, n_files, one_line
from .printer import Sink
from .targets import Target, said_errors, targets

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterable, Iterator
    from typing import BinaryIO, TextIO

    from ..index.freshness import FreshAnswer


class Io:
    """Where a grep's output goes and against what its relative PATHs resolve: this
    process's stdout, stderr and working directory (``local``), or a peer's: a daemon running
    a CLI's grep for it (``served_grep``) writes both streams to the peer's socket and
    resolves PATHs against the peer's working directory (``cwd``, absolute)."""

    __slots__ = ("cwd", "err", "out")

    def __init__(self, out: BinaryIO, err: TextIO, cwd: str | None = None) -> None:
        self.out = out
        self.err = err
        self.cwd = cwd  # (None: this process's own, read when needed)

    @classmethod
    def local(cls) -> Io:
        return cls(_stdout_blocks(), sys.stderr)

    def getcwd(self) -> str:
        return self.cwd if self.cwd is not None else os.getcwd()


class Setup:
    """What a grep verb was asked, checked: its patterns' matcher, the PATHs given, the
    context, the -g/-t rules. (A plain class: see ``Target``.)"""

    __slots__ = ("after", "before", "matcher", "paths", "rules")

    def __init__(
        self,
        matcher: Matcher,
        paths: list[str],
        before: int,
        after: int,
        rules: _FileRules | None,
    ) -> None:
        self.matcher = matcher
        self.paths = paths
        self.before = before
        self.after = after
        self.rules = rules

    @property
    def given(self) -> list[str]:
        return self.paths or ["."]


def grep(args: argparse.Namespace) -> int:
    """``rg --sort path -n`` over confined roots: each directory PATH is pinned as a root and
    walked (or its files found in an index a daemon keeps fresh: ``_Source``); a file PATH is
    searched as the one entry of its pinned parent directory."""
    began = time.perf_counter()
    _unrestrict(args)
    if args.type_list:
        from .file_types import type_list

        sys.stdout.write(type_list())
        return 0
    if args.files:
        return _list_files(args, list(args.args), _FileRules.of(args))
    setup = setup_of(args)
    io = Io.local()
    errors: list[str] = []
    opened = (
        (path, target, _Source(args, target, setup.matcher))
        for path, target in targets(setup.given, bool(setup.paths), args, errors)
    )
    return search(args, setup, io, opened, errors, began)


def setup_of(args: argparse.Namespace) -> Setup:
    """The checked request of a grep (not --files, not --type-list): SystemExit with rg's
    kind of message when a flag is out of range or the pattern is not valid."""
    rules = _FileRules.of(args)  # (first: an unknown -t is said before a missing PATTERN)
    patterns: list[str] = list(args.patterns)
    paths: list[str] = list(args.args)
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
    return Setup(matcher, paths, before, after, rules)


def search(
    args: argparse.Namespace,
    setup: Setup,
    io: Io,
    opened: Iterable[tuple[str, Target, _Source]],
    errors: list[str],
    began: float,
) -> int:
    """Search each opened PATH (its target and where its files come from), print as rg
    prints, and give rg's exit status. Each target's root is closed here."""
    matcher, paths, rules = setup.matcher, setup.paths, setup.rules
    given = setup.given
    out = io.out
    # (-H/-I say; else a path is printed unless one file PATH alone is searched, see below)
    sink = Sink(out, args, setup.before or setup.after, args.with_filename is not False, matcher)
    matched = searched = files_matched = listed = 0
    used: list[tuple[str, _Source]] = []
    failed = False
    try:
        for path, target, source in opened:
            try:
                if target.is_file and len(given) == 1 and args.with_filename is None:
                    sink.with_filename = False  # as rg: one file searched prints no path
                sink.target = target
                walker = Walker(
                    target.root.fs,
                    target.start,
                    WalkOptions(hidden=args.hidden, no_ignore=args.no_ignore),
                )
                batches = source.batches if source.batches is not None else walker.batches()
                if rules is not None and not target.is_file:  # (a file PATH: always searched)
                    batches = _filtered(batches, target, rules, io.getcwd())
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
                    print(f"rootgrep: {path}: {one_line(str(e))}", file=io.err)
                    failed = True
                    continue
                matched += stats.matches
                files_matched += stats.files_matched
                searched += stats.files_searched
                listed += source.held
                used.append((path, source))
                failed = said_errors(walker, target, io.err) or failed
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
            "or -t/-T (see --hidden, --no-ignore)",
            file=io.err,
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


def _list_files(args: argparse.Namespace, paths: list[str], rules: _FileRules | None) -> int:
    """``--files``: the files a search of the PATHs would read, printed as rg prints them
    (walk order, which is rg's ``--sort path``; binary and large files too, as rg lists
    them); exit 0 when one was printed, 1 when none, 2 on an error."""
    out = _stdout_blocks()
    printed, failed = 0, False
    errors: list[str] = []
    try:
        for _, target in targets(paths or ["."], bool(paths), args, errors):
            try:
                options = WalkOptions(hidden=args.hidden, no_ignore=args.no_ignore)
                walker = Walker(target.root.fs, target.start, options)
                batches: Iterator[DirBatch] = walker.batches()
                if rules is not None and not target.is_file:
                    batches = _filtered(batches, target, rules, os.getcwd())
                for batch in batches:
                    with batch:
                        for fe in batch.files:
                            out.write(target.shown(fe.path) + b"\n")
                            printed += 1
                failed = said_errors(walker, target) or failed
            finally:
                target.root.close()
    finally:
        out.flush()
    return 2 if failed or errors else 0 if printed else 1


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

    def __init__(self, args: argparse.Namespace, target: Target, matcher: Matcher) -> None:
        self._live()
        if args.no_index:
            self.why = "--no-index"
        elif args.invert_match:
            self.why = "-v (any file may hold a line without a match)"
        elif target.is_file:
            self.why = "a file PATH is read directly"
        elif args.hidden or args.no_ignore:
            self.why = "--hidden/--no-ignore (an index holds what a default walk lists)"
        else:
            self._open(args, target, matcher)

    def _open(self, args: argparse.Namespace, target: Target, matcher: Matcher) -> None:
        from ..index.names import default_cache_dir, no_index_why

        cache = args.cache_dir or default_cache_dir()
        why = no_index_why(cache, target.root.path)  # (no index: the index is not loaded)
        if why is not None:
            self.why = why
            return
        from ..index.freshness import ask_fresh

        query = matcher.query
        q = {
            "pattern": query.pattern,
            "regex": query.regex,
            "case_sensitive": query.case_sensitive,
        }

        def meanwhile() -> None:
            # while the daemon answers: compile the scan that tests its candidates (for a
            # literal, RE2's import and compile are 2 ms; ``may_match`` compiles it once)
            matcher.may_match(b"")

        try:
            fresh, self.why = ask_fresh(
                cache,
                target.root,
                q,
                max_file_size=args.max_file_size,
                meanwhile=meanwhile,
            )
        except (
            OSError,
            RootgrepError,
        ) as e:  # (an index is an optimisation: scan live)
            self.why = f"the index could not be asked ({describe(e)})"
            return
        if fresh is not None:
            self.answered(fresh, target, self.why)

    def _live(self) -> None:
        self.batches: Iterator[DirBatch] | None = None
        self.join = True
        self.held = 0  # files the index holds for the PATH (a walk counts its own)
        self.kind = "live"
        self.why = ""

    @classmethod
    def unasked(cls) -> _Source:
        """A live walk until ``answered`` (the daemon asks its own index: ``served_grep``)."""
        source = cls.__new__(cls)
        source._live()
        return source

    def answered(self, fresh: FreshAnswer, target: Target, why: str) -> None:
        """The PATH's files are the ones a daemon's fresh answer names."""
        self.batches = fresh.batches(target.root)
        # (the candidates of a query with a required trigram mostly match: searched one by
        # one, as the MCP grep does; without one, every text file is, in joined chunks)
        self.join = not fresh.narrowed
        self.held = fresh.held
        self.kind = "index"
        self.why = f"{why}; {n_files(fresh.changed).replace(' ', ' changed ')} read as they are now"


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

    return re.sub(r"\\(?:[pP](?:\{[^}]*\}|.)|.)", "", pattern, flags=re.DOTALL)


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
        invert=args.invert_match,
    )


class _FileRules:
    """Which files rg's -g and -t/-T select. -g first: the last GLOB that matches a path
    itself decides (``!GLOB`` excludes); a directory a ``!GLOB`` matches is pruned with
    everything below it; with any GLOB not starting with ``!``, a file no GLOB selects is not
    searched (directories are entered). Where no GLOB decides, the types do, on the file's
    name: the last -t/-T whose globs match it; with a -t, a file none matches is not
    searched. (Directories are never judged by type.)"""

    def __init__(self, globs: list[str], types: list[tuple[str, str]]) -> None:
        self.globs = None
        self.whitelist = any(not g.startswith("!") for g in globs)
        if globs:
            from ..globs import Globs  # (pathspec: imported only when -g is given)

            self.globs = Globs(globs, "glob")
        self.types = None
        if types:
            from .file_types import FileTypes, UnknownType

            try:
                self.types = FileTypes(types)
            except UnknownType as e:
                raise SystemExit(f"rootgrep: {e}") from None

    @classmethod
    def of(cls, args: argparse.Namespace) -> _FileRules | None:
        return cls(args.globs, args.types) if args.globs or args.types else None

    def pruned(self, directory: bytes) -> bool:
        return self.globs is not None and self.globs.verdict(directory, is_dir=True) is False

    def selected(self, path: bytes) -> bool:
        if self.globs is not None:
            v = self.globs.verdict(path)
            if v is not None:
                return v
            if self.whitelist:
                return False
        if self.types is not None:
            return self.types.verdict(os.fsdecode(path.rpartition(b"/")[2])) is not False
        return True


def _filtered(
    batches: Iterator[DirBatch], target: Target, rules: _FileRules, cwd_path: str
) -> Iterator[DirBatch]:
    """The walk's batches with only the files the rules select. rg matches a glob against
    the path as printed, without a leading ``./`` and with the working directory taken off
    an absolute path below it; each directory below the PATH is judged on its own."""
    cwd = os.fsencode(cwd_path).rstrip(b"/") + b"/"
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
