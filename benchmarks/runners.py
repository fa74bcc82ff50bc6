"""The measured operations: rootgrep (in process and as a CLI) and its peers.

Every runner returns a count (files listed or matching lines), so a benchmark can check that
rootgrep and its peer did the same work before their times are compared.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from rootgrep.grep import FileMatches, GrepQuery, Matcher, run_grep
from rootgrep.roots import pin_root
from rootgrep.walker import Walker, WalkOptions

# a user's ripgrep config file would change what rg searches and prints
_ENV = {k: v for k, v in os.environ.items() if k != "RIPGREP_CONFIG_PATH"}


def find_tool(name: str) -> str | None:
    """A tool next to this interpreter (the venv's ``bin``), else on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.is_file() and os.access(here, os.X_OK) else shutil.which(name)


@dataclass(frozen=True, slots=True)
class Corpus:
    name: str  # "S" or "F"
    path: str
    rounds: int  # timed rounds per benchmark (after one warm-up round)
    strict: bool  # a count disagreement fails the test (else it warns)


@dataclass(frozen=True, slots=True)
class Tools:
    rg: str
    rootgrep: str


@dataclass(frozen=True, slots=True)
class Pattern:
    key: str  # short name used in group names
    text: str
    regex: bool


PATTERNS: tuple[Pattern, ...] = (
    Pattern("literal-rare", "getrecursionlimit", regex=False),  # a rare literal: 34 files of F
    Pattern("literal", "NotImplementedError", regex=False),  # a common one: 939 files of F
    Pattern("regex-error", r"\w+Error\b", regex=True),  # regex with a required literal
    Pattern("regex-date", r"[0-9]{4}-[0-9]{2}-[0-9]{2}", regex=True),  # no literal at all
)


def _run_counting_lines(argv: list[str]) -> int:
    """Run a search process, stdout into a pipe; the number of output lines.
    Exit status 1 (no match) is fine; 2 or more is an error and fails the benchmark."""
    proc = subprocess.run(argv, capture_output=True, env=_ENV)
    if proc.returncode not in (0, 1):
        err = proc.stderr.decode("utf-8", "replace").strip()[-2000:]
        raise RuntimeError(f"{argv!r} exited with {proc.returncode}: {err}")
    return proc.stdout.count(b"\n")


# -- walking -----------------------------------------------------------------------------------


def rootgrep_walk(path: str) -> int:
    """Files rootgrep's walker yields (hidden skipped, .gitignore/.ignore honoured)."""
    root = pin_root(path)
    try:
        return sum(1 for _ in Walker(root.fs, b"", WalkOptions()).files())
    finally:
        root.close()


def os_walk(path: str) -> int:
    """Every file name os.walk lists (hidden included, nothing stat'ed)."""
    return sum(len(files) for _, _, files in os.walk(path))


def rg_files(rg: str, path: str) -> int:
    """Paths ``rg --files`` prints."""
    return _run_counting_lines([rg, "--files", path])


# -- grep --------------------------------------------------------------------------------------


def rootgrep_grep(pattern: Pattern, path: str) -> int:
    """Matching lines found by rootgrep in this process (threads chosen as the CLI does)."""
    matcher = Matcher(GrepQuery(pattern.text, regex=pattern.regex))
    hits: list[FileMatches] = []

    def sink(fm: FileMatches) -> bool:
        hits.append(fm)
        return True

    root = pin_root(path)
    try:
        batches = Walker(root.fs, b"", WalkOptions()).batches()
        return run_grep(matcher, batches, sink).matches
    finally:
        root.close()


def rootgrep_cli_grep(exe: str, pattern: Pattern, path: str) -> int:
    """Output lines of ``rootgrep grep [-F] -e PATTERN DIR`` (a whole process, as rg is)."""
    return _run_counting_lines(
        [exe, "grep", *([] if pattern.regex else ["-F"]), "-e", pattern.text, path]
    )


def rg_grep(rg: str, pattern: Pattern, path: str) -> int:
    """Output lines of ``rg -n [-F] -e PATTERN DIR``."""
    return _run_counting_lines(
        [rg, "-n", *([] if pattern.regex else ["-F"]), "-e", pattern.text, path]
    )


# -- agreement ---------------------------------------------------------------------------------


class Reference:
    """rg's counts, each computed once per session (the first run also warms the page cache)."""

    def __init__(self, rg: str) -> None:
        self.rg = rg
        self._files: dict[str, int] = {}
        self._lines: dict[tuple[str, Pattern], int] = {}

    def files(self, corpus: Corpus) -> int:
        if corpus.path not in self._files:
            self._files[corpus.path] = rg_files(self.rg, corpus.path)
        return self._files[corpus.path]

    def lines(self, corpus: Corpus, pattern: Pattern) -> int:
        key = (corpus.path, pattern)
        if key not in self._lines:
            self._lines[key] = rg_grep(self.rg, pattern, corpus.path)
        return self._lines[key]


MISMATCH = "count mismatch"  # every agreement warning starts so (benchmarks filter on it)


def check_agreement(*, strict: bool, what: str, got: int, want: int) -> None:
    """``got`` must equal the peer's ``want``: an assertion when ``strict``, else a warning
    that says by how much they differ (the times are then not comparing the same work)."""
    if got == want:
        return
    msg = f"{MISMATCH}: {what}: {got} vs rg {want} ({got - want:+d})"
    if strict:
        raise AssertionError(msg)
    warnings.warn(msg, UserWarning, stacklevel=2)
