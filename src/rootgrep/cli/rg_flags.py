"""``rootgrep grep``'s flags, as ripgrep's: the argparse parser (help, errors, rare forms) and
a table the common forms are read with, without argparse (``quick_grep_args``: 3 ms of every
grep's start-up)."""

from __future__ import annotations

import os
import types

from ..grep import (
    DEFAULT_MAX_FILE_SIZE,
    MAX_CONTEXT,
)
from .common import VERBS

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    import argparse
    from typing import Any


GREP_EPILOG = """\
exit status: 0 a line matched, 1 no line matched, 2 an error (a bad pattern, a missing
PATH, a directory that could not be read), also when other PATHs matched (as rg).
Output is sorted by path (like `rg --sort path`); line numbers are always shown."""


def grep_parser(quiet: bool = False) -> argparse.ArgumentParser:
    """The grep verb's parser; ``quiet``: one that prints nothing, not even help or a usage
    error (it still raises SystemExit): the daemon's, parsing a CLI's words for it."""
    import argparse

    class _Quiet(argparse.ArgumentParser):
        def _print_message(self, message: str, file: Any = None) -> None:
            pass

    class _GrepHelp(argparse.RawDescriptionHelpFormatter):
        """argparse's formatter without ``shutil`` (argparse makes one per ``add_argument``,
        and the default asks ``shutil.get_terminal_size``: 2 ms of imports at every start)."""

        def __init__(self, prog: str) -> None:
            try:
                width = int(os.environ.get("COLUMNS", "")) or os.get_terminal_size(2).columns
            except (ValueError, OSError):
                width = 80
            super().__init__(prog, width=max(width - 2, 20))

    g = (_Quiet if quiet else argparse.ArgumentParser)(
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
        "-F",
        "--fixed-strings",
        action="store_true",
        help="the patterns are literal strings",
    )
    for flags, case, what in (
        (("-i", "--ignore-case"), "insensitive", "case-insensitive"),
        (("-s", "--case-sensitive"), "sensitive", "case-sensitive (the default)"),
        (
            ("-S", "--smart-case"),
            "smart",
            "case-insensitive unless a pattern has an upper case",
        ),
    ):
        g.add_argument(
            *flags,
            dest="case",
            action="store_const",
            const=case,
            help=what + " (last wins)",
        )
    g.add_argument("-w", "--word-regexp", action="store_true", help="match whole words only")
    g.add_argument(
        "-v",
        "--invert-match",
        action="store_true",
        help="show the lines that do not match (always a live scan)",
    )
    g.add_argument(
        "-o",
        "--only-matching",
        action="store_true",
        help="print each match of a line on a line of its own (with -c: count matches; "
        "--json still gives whole lines)",
    )
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
        "-t",
        "--type",
        action="append",
        default=[],
        dest="types",
        type=_selected,
        metavar="TYPE",
        help="search only files of TYPE (rg's types, matched on the file name: see "
        "--type-list; `all`: every type); repeatable, with -T the last that matches wins",
    )
    g.add_argument(
        "-T",
        "--type-not",
        action="append",
        default=[],
        dest="types",
        type=_negated,
        metavar="TYPE",
        help="do not search files of TYPE",
    )
    g.add_argument(
        "--type-list",
        action="store_true",
        help="print the file types -t and -T know, with their globs, and exit",
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
        "-n",
        "--line-number",
        action="store_true",
        help="accepted: line numbers are always on",
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


def _selected(name: str) -> tuple[str, str]:
    return ("select", name)


def _negated(name: str) -> tuple[str, str]:
    return ("negate", name)


# ``rootgrep grep``'s flags as ``grep_parser`` declares them, for ``quick_grep_args``: each
# option string → (dest, how, const); how is "const" (store ``const``), "append", "str",
# "int" (take a value), "select"/"negate" (append ``(how, value)``: -t/-T, in order) or a
# tuple of the choices. test_cli_quick_args keeps this table and
# the defaults equal to the parser's actions.
GREP_FLAGS: dict[str, tuple[str, Any, Any]] = {
    name: (dest, how, const)
    for names, dest, how, const in (
        (("-e", "--regexp"), "patterns", "append", None),
        (("-F", "--fixed-strings"), "fixed_strings", "const", True),
        (("-i", "--ignore-case"), "case", "const", "insensitive"),
        (("-s", "--case-sensitive"), "case", "const", "sensitive"),
        (("-S", "--smart-case"), "case", "const", "smart"),
        (("-w", "--word-regexp"), "word_regexp", "const", True),
        (("-v", "--invert-match"), "invert_match", "const", True),
        (("-o", "--only-matching"), "only_matching", "const", True),
        (("-A", "--after-context"), "after", "int", None),
        (("-B", "--before-context"), "before", "int", None),
        (("-C", "--context"), "context", "int", None),
        (("-m", "--max-count"), "max_count", "int", None),
        (("-l", "--files-with-matches"), "mode", "const", "files"),
        (("-c", "--count"), "mode", "const", "count"),
        (("-g", "--glob"), "globs", "append", None),
        (("-t", "--type"), "types", "select", None),
        (("-T", "--type-not"), "types", "negate", None),
        (("--type-list",), "type_list", "const", True),
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


GREP_DEFAULTS: dict[str, Any] = {
    "args": [], "patterns": [], "fixed_strings": False, "case": None, "word_regexp": False,
    "after": None, "before": None, "context": None, "mode": None, "globs": [], "files": False,
    "max_count": None, "unrestricted": 0, "invert_match": False, "only_matching": False,
    "types": [], "type_list": False,
    "hidden": False, "no_ignore": False, "json": False, "max_columns": 0,
    "with_filename": None, "line_number": False, "no_heading": False, "sort": None,
    "max_file_size": DEFAULT_MAX_FILE_SIZE, "symlinks": "within", "no_index": False,
    "stats": False, "cache_dir": None, "threads": None,
}  # fmt: skip


def quick_grep_args(argv: list[str]) -> Any:
    """``grep_parser().parse_intermixed_args(argv)``'s namespace (the same attributes and
    values) without argparse, for the words a grep is mostly given: exact option strings
    (``--name=value`` too), each value in the next word unless it starts with a dash, and
    words without a leading dash as PATTERN and PATHs. Anything else (help, an abbreviated
    or bundled flag, ``--``, a value argparse would refuse or read otherwise) gives None:
    argparse then parses the words and says what is wrong. (Building argparse's parser
    and importing it, with gettext and locale, were 3 ms of every grep's start.)"""
    values = {k: list(v) if isinstance(v, list) else v for k, v in GREP_DEFAULTS.items()}
    i, n = 0, len(argv)
    while i < n:
        word = argv[i]
        i += 1
        if not word.startswith("-"):
            values["args"].append(word)
            continue
        name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        spec = GREP_FLAGS.get(name)
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
        elif how in ("select", "negate"):
            values[dest].append((how, value))
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


_TAKES_ANY_VALUE = {
    "-e": "--regexp",
    "--regexp": "--regexp",
    "-g": "--glob",
    "--glob": "--glob",
}


def attach_values(argv: list[str]) -> list[str]:
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


def parse_grep_args(argv: list[str], quiet: bool = False) -> Any:
    """``rootgrep grep``'s words read as rg reads them: ``quick_grep_args`` for the common
    forms, argparse for the rest (help, errors, bundled or rare flags; ``quiet``: printing
    nothing, see ``grep_parser``)."""
    argv = attach_values(argv)
    args = quick_grep_args(argv)
    if args is None:
        gp = grep_parser(quiet)
        # intermixed parsing lets flags follow DIRs (as in rg); it mishandles "--"
        args = gp.parse_args(argv) if "--" in argv else gp.parse_intermixed_args(argv)
    return args
