"""``rootgrep grep`` takes ripgrep's flags (SPEC §8): its stdout and exit status equal those
of ``rg -n --sort path`` given the same arguments, run as processes on a copy of real code
(packages of the standard library) plus odd cases (CRLF, a BOM, a long line, a last line
without a terminator, hidden and ignored files, names with spaces)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from support import MARKER, RG, ROOTGREP

ENV = {k: v for k, v in os.environ.items() if k != "RIPGREP_CONFIG_PATH"}
PACKAGES = ("json", "email", "logging", "concurrent", "idlelib", "unittest")


def _text_file(path: Path) -> bool:
    with open(path, "rb") as f:
        return b"\0" not in f.read()  # (images and other binaries are not copied)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few hundred files of real code, and the odd cases rg has rules for."""
    src = Path(sysconfig.get_paths()["stdlib"])
    top = tmp_path_factory.mktemp("rgtree") / "code"
    for pkg in PACKAGES:
        for dirpath, dirnames, filenames in os.walk(src / pkg):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            rel = Path(dirpath).relative_to(src)
            for name in filenames:
                if _text_file(Path(dirpath) / name):
                    (top / rel).mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(Path(dirpath) / name, top / rel / name)
    odd = top / "odd"
    odd.mkdir()
    (odd / "crlf.txt").write_bytes(b"import os\r\nx = 1\r\nimport sys\r\n")
    (odd / "bom.py").write_bytes(b"\xef\xbb\xbfimport os\nprint(os.sep)\n")
    (odd / "noeol.py").write_bytes(b"a = 1\nimport os")
    (odd / "long.txt").write_text("x" * 300 + " import os " + "y" * 300 + "\nimport os\n")
    (odd / "sp ace.py").write_text("def setrecursionlimit_here():\n    import os\n")
    (odd / "unit_test.py").write_text("import os  # a test\nclass T: pass\n")
    (odd / "other_test.py").write_text("def other():\n    raise NotImplementedError\n")
    (odd / "words.txt").write_text("café cls\ncls_x\nxcls\n(cls)\nÉcole CLS\n-x --flag\n")
    (top / ".hidden").mkdir()
    (top / ".hidden" / "h.py").write_text("import os\nraise NotImplementedError\n")
    (top / "ignored").mkdir()
    (top / "ignored" / "i.py").write_text("import os\nraise NotImplementedError\n")
    (top / ".ignore").write_text("ignored/\n")  # (rg reads .gitignore only in a git repo)
    return top


def run_both(
    args: list[str], cwd: Path
) -> tuple[subprocess.CompletedProcess[bytes], subprocess.CompletedProcess[bytes]]:
    def run(cmd: list[str]) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(cmd, cwd=cwd, env=ENV, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=120, check=False)  # fmt: skip

    return run([ROOTGREP, "grep", *args]), run([RG, "-n", "--sort", "path", *args])


# the same arguments to both, run in the tree
CASES: dict[str, list[str]] = {
    "fixed-string": ["-F", "self.assertEqual("],
    "fixed-string-metachars": ["-F", "*args, **kwargs)"],
    "regex-by-default": ["def .*recursionlimit"],
    "regex-classes": [r"^\s*def __\w+__\(self"],
    "regex-empty-lines": ["^$", "json"],
    "two-e": ["-e", "NotImplementedError", "-e", r"def \w+_test\("],
    "two-e-then-paths": ["-e", "import os", "-e", "import sys", "odd", "json"],
    "two-e-fixed": ["-F", "-e", "os.path.join(", "-e", "sys.exit("],
    "e-dash-patterns": ["-e", "--flag", "-e", "-x", "odd"],
    "e-empty-pattern": ["-c", "-e", "", "odd"],
    "ignore-case": ["-i", "IMPORT OS"],
    "ignore-case-regex": ["-i", r"class \w+error\("],
    "smart-case-lower": ["-S", "import os"],
    "smart-case-upper": ["-S", "Import"],
    "case-sensitive-last": ["-i", "-s", "Message"],
    "word": ["-w", "cls"],
    "word-ignore-case": ["-w", "-i", "cls"],
    "files-with-matches": ["-l", "recursionlimit"],
    "count": ["-c", "NotImplementedError"],
    "count-two-e": ["-c", "-e", "import os", "-e", "import sys"],
    "glob": ["-g", "*.py", "import os"],
    "glob-negated": ["-g", "!*_test.py", "import os"],
    "glob-both": ["-g", "*.py", "-g", "!test_*", "-e", "NotImplementedError"],
    "glob-anchored": ["-g", "json/*.py", "import"],
    "glob-anchored-dir-arg": ["-g", "json/*.py", "import", "json"],
    "glob-dot-dir-arg": ["-g", "json/*.py", "import", "."],
    "glob-dir-negated": ["-g", "!idlelib", "-c", "import os"],
    "glob-dir-negated-beats-file": ["-g", "*.py", "-g", "!*_test", "-c", "import os"],
    "glob-dir-not-its-files": ["-g", "json", "-g", "*.txt", "-c", "import"],
    "glob-double-star": ["-g", "idlelib/**", "-g", "!*.txt", "-l", "import"],
    "after": ["-A", "2", "NotImplementedError"],
    "before": ["-B", "1", "NotImplementedError"],
    "context": ["-C", "2", "NotImplementedError"],
    "asymmetric": ["-B", "3", "-A", "1", r"^import (os|sys)$"],
    "context-with-after": ["-C", "2", "-A", "0", "raise NotImplementedError"],
    "one-file": ["import", "json/decoder.py"],
    "one-file-dot-slash": ["import", "./json/decoder.py"],
    "one-file-context": ["-C", "1", "import", "json/decoder.py"],
    "one-file-count": ["-c", "import", "json/decoder.py"],
    "one-file-list": ["-l", "import", "json/decoder.py"],
    "file-and-dir": ["import", "json/decoder.py", "email/"],
    "file-and-dir-context": ["-A", "1", "import os", "odd/bom.py", "odd"],
    "file-glob-bypass": ["-g", "*.txt", "import", "json/decoder.py"],
    "ignored-file-arg": ["import", "ignored/i.py"],
    "hidden": ["--hidden", "NotImplementedError"],
    "no-ignore": ["--no-ignore", "NotImplementedError"],
    "dot": ["NotImplementedError", "."],
    "dot-slash": ["NotImplementedError", "./"],
    "dir-double-slash": ["import os", "odd//"],
    "max-columns": ["-M", "80", "import os"],
    "max-columns-context": ["-M", "40", "-C", "1", "import os", "odd"],
    "no-heading-n": ["--no-heading", "-n", "-F", "import os", "odd"],
}


@pytest.mark.parametrize("args", CASES.values(), ids=CASES.keys())
def test_equals_ripgrep(tree: Path, args: list[str]) -> None:
    mine, ref = run_both(args, tree)
    assert ref.returncode == 0 and ref.stdout, ref.stderr  # the case matches something
    assert mine.returncode == 0, mine.stderr
    assert mine.stdout == ref.stdout


def test_absolute_paths_and_globs_equal_ripgrep(tree: Path) -> None:
    """A directory given as an absolute path prints absolute paths; a glob is matched with
    the working directory taken off them (as rg does), or against them when outside it."""
    for cwd, args in (
        (tree, ["-g", "json/*.py", "import", str(tree)]),
        (tree.parent, ["-g", "json/*.py", "import", str(tree)]),
        (tree.parent, ["-g", "code/json/*.py", "import", "code"]),
        (tree.parent, ["-g", "*.py", "-c", "import os", str(tree) + "/"]),
        (tree.parent, ["import", str(tree / "json" / "decoder.py"), str(tree / "odd")]),
    ):
        mine, ref = run_both(args, cwd)
        assert (mine.returncode, mine.stdout) == (ref.returncode, ref.stdout), args


def test_no_match_exits_1(tree: Path) -> None:
    for args in (["no_such_identifier_anywhere"], ["-l", "-F", "no such(thing"],
                 ["-c", "zzzq", "json/decoder.py"], ["-g", "*.none", "import", "."]):  # fmt: skip
        mine, ref = run_both(args, tree)
        assert ref.returncode == 1
        assert (mine.returncode, mine.stdout) == (1, b""), args


def test_nothing_searched_in_the_working_directory_exits_2(tree: Path) -> None:
    """As rg: with no PATH, a search that finds no file to search is an error (status 2)
    that says why, rather than a plain "no match"."""
    mine, ref = run_both(["-g", "*.none", "import"], tree)
    assert ref.returncode == 2
    assert (mine.returncode, mine.stdout) == (2, b"")
    assert mine.stderr.startswith(b"rootgrep: no files were searched")


def test_bad_regex_exits_2_with_one_line(tree: Path) -> None:
    for pattern in ("(unclosed", "a{2,1}", r"(?<=x)y"):
        mine, ref = run_both([pattern], tree)
        assert ref.returncode == 2
        assert (mine.returncode, mine.stdout) == (2, b"")
        line = mine.stderr.decode()
        assert line.startswith("rootgrep: [invalid_pattern] ") and line.count("\n") == 1, line
        assert "-F" in line  # says what to do instead


def test_a_missing_path_exits_2_after_searching_the_others(tree: Path) -> None:
    """As rg: the error is reported on stderr, the other PATHs are searched and printed,
    and the status is 2 although lines matched."""
    mine, ref = run_both(["import os", "odd", "missing.py", "odd/bom.py"], tree)
    assert ref.returncode == 2 and ref.stdout
    assert (mine.returncode, mine.stdout) == (2, ref.stdout)
    assert b"missing.py" in mine.stderr and mine.stderr.count(b"\n") == 1


def test_usage_errors_exit_2(tree: Path) -> None:
    for args in ([], ["-C", "11", "x"], ["-A", "-1", "x"], ["-M", "-1", "x"], ["--bogus", "x"]):
        mine = subprocess.run([ROOTGREP, "grep", *args], cwd=tree, capture_output=True,
                              timeout=60, check=False)  # fmt: skip
        assert mine.returncode == 2 and mine.stdout == b"", args
        assert mine.stderr.startswith(b"rootgrep") or b"usage:" in mine.stderr


def test_a_file_argument_is_read_beneath_its_parent_never_through_an_escaping_link(
    world: Path,
) -> None:
    """A file PATH is opened beneath its pinned parent directory: a link in it that leads
    out of that directory is refused (one error line, status 2), the secret never printed."""
    root = world / "root"
    os.symlink(world / "outside" / "secret.txt", root / "escape_file")
    os.symlink("a.txt", root / "inside_link")
    out = subprocess.run([ROOTGREP, "grep", MARKER, "escape_file", "a.txt"], cwd=root,
                         capture_output=True, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 2
    assert MARKER.encode() not in out.stdout + out.stderr
    assert b"escape_file" in out.stderr
    ok = subprocess.run([ROOTGREP, "grep", "alpha", "inside_link"], cwd=root,
                        capture_output=True, timeout=60, check=False)  # fmt: skip
    assert (ok.returncode, ok.stdout) == (0, b"1:alpha\n")


def test_json_with_count(tree: Path) -> None:
    import json

    out = subprocess.run([ROOTGREP, "grep", "--json", "-c", "import os", "odd"], cwd=tree,
                         capture_output=True, timeout=60, check=False)  # fmt: skip
    recs = [json.loads(x) for x in out.stdout.splitlines()]
    ref = run_both(["-c", "import os", "odd"], tree)[1].stdout.decode().splitlines()
    assert [f"odd/{r['path']}:{r['matches']}" for r in recs] == ref
    assert all(r["root"]["uri"].endswith("/odd") for r in recs)


@pytest.mark.parametrize(
    "args",
    [
        ["--fixed", "import os", "odd"],  # (was taken for --fixed-strings)
        ["--files-with", "import os", "odd"],  # (was --files-with-matches)
        ["--ignore-c", "import os", "odd"],  # (was --ignore-case)
        ["--hid", "import os", "odd"],  # (was --hidden)
    ],
    ids=["fixed", "files-with", "ignore-c", "hid"],
)
def test_an_abbreviated_flag_is_refused_as_rg_refuses_it(tree: Path, args: list[str]) -> None:
    """Python's argparse took any unambiguous prefix of a long flag for the flag; rg takes
    none (`--ignore` is rg's own flag, the opposite of `--ignore-case`)."""
    mine, ref = run_both(args, tree)
    assert ref.returncode == 2, ref
    assert (mine.returncode, mine.stdout) == (2, b""), mine
    assert b"unrecognized arguments" in mine.stderr


def test_ignore_undoes_no_ignore_as_in_rg(tree: Path) -> None:
    for args in (["--ignore", "-c", "import os"], ["--no-ignore", "--ignore", "-c", "import os"],
                 ["--ignore", "--no-ignore", "-c", "import os"]):  # fmt: skip
        mine, ref = run_both(args, tree)
        assert ref.returncode == 0, ref.stderr
        assert (mine.returncode, mine.stdout) == (0, ref.stdout), args


@pytest.mark.parametrize(
    "args",
    [
        ["--files"],
        ["--files", "odd", "json"],
        ["--files", "."],
        ["--files", "-g", "*.py", "json"],
        ["--files", "--hidden"],
        ["--files", "--no-ignore", "-g", "!*.py"],
        ["--files", "odd/words.txt"],
        ["--files", "-g", "*.nothing"],  # (none: exit 1)
    ],
    ids=["all", "paths", "dot", "glob", "hidden", "no-ignore-negated", "file", "none"],
)
def test_files_lists_what_rg_lists(tree: Path, args: list[str]) -> None:
    """``--files``: the files a search would read, as rg lists them (it was taken for
    ``--files-with-matches``, with the first PATH as the pattern)."""
    mine, ref = run_both(args, tree)
    assert (mine.returncode, mine.stdout) == (ref.returncode, ref.stdout), (
        mine.stderr,
        ref.stderr,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "1", "import os"],
        ["-m", "2", "-A", "3", "import", "json"],  # (a match within the context: a match)
        ["-m", "1", "-B", "2", "-A", "1", "def ", "odd"],
        ["-c", "-m", "3", "import", "json"],
        ["-l", "-m", "1", "import os", "odd"],
        ["-m", "1", "-F", "import os", "odd/crlf.txt"],
    ],
    ids=["one", "after", "context", "count", "files", "file"],
)
def test_max_count_equals_ripgrep(tree: Path, args: list[str]) -> None:
    mine, ref = run_both(args, tree)
    assert ref.returncode == 0 and ref.stdout, ref.stderr
    assert (mine.returncode, mine.stdout) == (0, ref.stdout), mine.stderr


def test_max_count_zero_matches_nothing_as_in_rg(tree: Path) -> None:
    mine, ref = run_both(["-m", "0", "import os", "odd"], tree)
    assert (mine.returncode, mine.stdout) == (ref.returncode, ref.stdout) == (1, b"")


@pytest.mark.parametrize(
    "args",
    [
        ["-u", "-c", "raise NotImplementedError"],  # (ignored/ searched, .hidden/ not)
        ["-uu", "-c", "raise NotImplementedError"],  # (both)
        ["-u", "-u", "--files"],
        ["--unrestricted", "--files"],
    ],
    ids=["u", "uu", "u-u", "long"],
)
def test_unrestricted_equals_ripgrep(tree: Path, args: list[str]) -> None:
    mine, ref = run_both(args, tree)
    assert ref.returncode == 0 and ref.stdout, ref.stderr
    assert (mine.returncode, mine.stdout) == (0, ref.stdout), mine.stderr


def test_uuu_is_refused_as_binary_files_are_never_searched(tree: Path) -> None:
    mine, _ = run_both(["-uuu", "import os"], tree)
    assert (mine.returncode, mine.stdout) == (2, b"") and b"binary" in mine.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["-v", "import", "json"],
        ["-v", "-C", "1", "^import", "json/tool.py"],
        ["-v", "-c", "o", "odd"],
        ["-v", "-l", "import", "odd"],
        ["-v", "-m", "1", "-A", "1", "import", "odd"],
        ["-v", "-w", "cls", "odd/words.txt"],
        ["-v", "", "odd"],  # (every line matches: nothing, exit 1)
        ["-o", r"recursion\w+"],
        ["-o", "-w", "-i", "cls", "odd"],
        ["-o", "-C", "1", "-e", "import", "-e", "os", "odd"],
        ["-o", "-c", "o", "odd"],
        ["-o", "-v", "-c", "import", "odd"],
        ["-o", "-v", "import", "odd"],
        ["-o", "-m", "1", "s", "odd/crlf.txt"],
        ["-o", "-M", "4", "[^ ]+", "odd/words.txt"],
        ["-o", "-F", "-i", "é", "odd/words.txt"],
        ["-o", "x?", "odd/words.txt"],  # (empty matches, one a byte, after a match none)
    ],
    ids=[
        "v", "v-context", "v-count", "v-files", "v-max-count", "v-word", "v-every-line",
        "o", "o-word", "o-context", "o-count", "o-v-count", "o-v", "o-max-count",
        "o-max-columns", "o-fixed-multibyte", "o-empty",
    ],
)  # fmt: skip
def test_invert_and_only_matching_equal_ripgrep(tree: Path, args: list[str]) -> None:
    """``-v`` (the lines without a match; context: the matching lines around) and ``-o``
    (each match alone; ``-c -o`` counts matches, 0 with ``-v``), beside rg."""
    mine, ref = run_both(args, tree)
    assert ref.stdout or ref.returncode == 1, ref.stderr
    assert (mine.returncode, mine.stdout) == (ref.returncode, ref.stdout), mine.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["-t", "py", "-c", "import os"],
        ["-tpy", "--type=txt", "-l", "import"],
        ["-T", "py", "-c", "import"],
        ["--type-not", "py", "--type", "txt", "-l", "import"],
        ["-t", "all", "-T", "py", "-l", "import"],
        ["-t", "py", "-T", "py", "import"],  # (nothing searched: exit 2)
        ["-g", "*.txt", "-T", "txt", "-l", "import"],  # (a -g verdict comes first)
        ["-g", "!json", "-t", "py", "-l", "import"],
        ["-t", "txt", "-l", "import", "json/decoder.py", "odd"],  # (a file PATH: searched)
        ["--files", "-t", "txt"],
        ["--files", "-T", "py", "json", "odd"],
        ["--type-list"],
    ],
    ids=[
        "t", "t-two", "T", "T-then-t", "all-but", "t-T-same", "glob-first", "glob-dir-and-t",
        "file-path", "files-t", "files-T", "type-list",
    ],
)  # fmt: skip
def test_file_types_equal_ripgrep(tree: Path, args: list[str]) -> None:
    mine, ref = run_both(args, tree)
    assert ref.stdout or ref.returncode == 2, ref.stderr
    assert (mine.returncode, mine.stdout) == (ref.returncode, ref.stdout), mine.stderr


def test_an_unknown_type_is_refused_as_rg_refuses_it(tree: Path) -> None:
    mine, ref = run_both(["-t", "nosuchtype", "import"], tree)
    assert mine.returncode == ref.returncode == 2 and mine.stdout == ref.stdout == b""
    assert b"unrecognized file type: nosuchtype" in mine.stderr
    assert b"unrecognized file type: nosuchtype" in ref.stderr
