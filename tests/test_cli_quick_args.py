"""``rootgrep grep`` reads its usual flags without argparse (``rg_flags.quick_grep_args``): the
namespace is argparse's own for every word list it takes, and it leaves to argparse every
word list it does not fully understand (help, abbreviations, bundled flags, bad values)."""

from __future__ import annotations

import argparse

import pytest

from rootgrep import cli
from rootgrep.cli import rg_flags

KINDS = {
    argparse._StoreTrueAction: "const",
    argparse._StoreFalseAction: "const",
    argparse._StoreConstAction: "const",
    argparse._AppendAction: "append",
    argparse._CountAction: "count",
}


def argparse_args(argv: list[str]) -> dict[str, object]:
    g = rg_flags.grep_parser()
    return vars(g.parse_args(argv) if "--" in argv else g.parse_intermixed_args(argv))


def test_the_table_is_the_parsers_own() -> None:
    """Every option string of the parser is in the table with its dest and what it does
    (and nothing else is), and the defaults are the parser's."""
    seen: set[str] = set()
    for action in rg_flags.grep_parser()._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        if type(action) is argparse._AppendAction and action.type is not None:
            how = action.type("x")[0]  # (-t/-T: "select"/"negate", appended with the value)
        elif type(action) in KINDS:
            how = KINDS[type(action)]
        elif action.choices is not None:
            how = tuple(action.choices)
        else:
            assert type(action) is argparse._StoreAction and action.nargs is None
            how = "int" if action.type is int else "str"
            assert action.type in (None, int)
        const = action.const if how == "const" else None
        for opt in action.option_strings:
            assert rg_flags.GREP_FLAGS[opt] == (action.dest, how, const), opt
            seen.add(opt)
    assert seen == set(rg_flags.GREP_FLAGS)
    assert argparse_args([]) == rg_flags.GREP_DEFAULTS


TAKEN = [
    ["getrecursionlimit", "/usr/lib"],
    ["--cache-dir", "/tmp/c", "getrecursionlimit", "a", "b"],
    ["--cache-dir=/tmp/c", "x"],
    ["-i", "x", "dir", "-w", "-F", "--stats"],
    ["-S", "Foo", "-s", "-i"],
    ["--regexp=-foo", "--regexp=", "-e", "bar", "dir"],
    ["-A", "2", "-B", "3", "x", "-C", "1", "-A", "4"],
    ["--after-context=0", "x"],
    ["-l", "x", "-c"],
    ["-c", "x", "-l"],
    ["-g", "*.py", "-g", "!tests/**", "--glob=*.md", "x", "."],
    ["--hidden", "--no-ignore", "--json", "x"],
    ["-M", "80", "-H", "x", "-I", "file"],
    ["-n", "--no-heading", "--sort", "path", "x"],
    ["--sort=path", "--symlinks", "never", "x"],
    ["--symlinks=within", "--max-file-size", "1000", "--threads", "3", "x"],
    ["--no-index", "x", ""],
    ["", "a=b", "x y"],
    ["-e", "a", "-e", "b", "--fixed-strings", "--word-regexp", "--ignore-case"],
    ["--line-number", "--with-filename", "--no-filename", "--count", "--files-with-matches", "x"],
    ["--case-sensitive", "--smart-case", "--context", "2", "--before-context", "1", "x"],
    ["--max-columns", "+7", "--threads=1_0", "x"],
    ["-t", "py", "-T", "md", "--type=rust", "--type-not=c", "-v", "-o", "x"],
    ["--type-list"],
    ["--invert-match", "--only-matching", "x", "-t", "all"],
]


@pytest.mark.parametrize("argv", TAKEN)
def test_the_words_it_reads_give_argparses_namespace(argv: list[str]) -> None:
    words = rg_flags.attach_values(argv)
    quick = rg_flags.quick_grep_args(words)
    assert quick is not None
    assert vars(quick) == argparse_args(words)


LEFT_TO_ARGPARSE = [
    ["-h"],
    ["--help"],
    ["--stat", "x"],  # (argparse takes an abbreviation)
    ["-iw", "x"],  # (bundled)
    ["-A3", "x"],
    ["-A=3", "x"],
    ["--", "-x"],
    ["x", "--", "--stats"],
    ["-1", "x"],  # (argparse reads it as a PATTERN)
    ["- x", "dir"],
    ["-", "x"],
    ["-A", "-1", "x"],
    ["-A", "three", "x"],
    ["--threads=", "x"],
    ["--sort", "size", "x"],
    ["--symlinks=follow", "x"],
    ["--stats=yes", "x"],
    ["--cache-dir", "--stats", "x"],
    ["x", "--cache-dir"],
    ["--bogus", "x"],
    ["-tpy", "x"],  # (a value attached to a short flag)
    ["-t", "-x", "y"],
]


@pytest.mark.parametrize("argv", LEFT_TO_ARGPARSE)
def test_other_words_are_left_to_argparse(argv: list[str]) -> None:
    words = rg_flags.attach_values(argv)
    assert rg_flags.quick_grep_args(words) is None


def test_a_usage_error_is_still_argparses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["grep", "-A", "three", "x"])
    assert e.value.code == 2
    assert "argument -A/--after-context: invalid int value: 'three'" in capsys.readouterr().err
