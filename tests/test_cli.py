"""``rootgrep grep`` against ``rg -n --sort path`` on real code, plus exit codes and errors."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from support import MARKER, RG, ROOTGREP

ENV = {k: v for k, v in os.environ.items() if k != "RIPGREP_CONFIG_PATH"}


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [ROOTGREP, *args], capture_output=True, cwd=cwd, env=ENV, timeout=120, check=False
    )


def rg(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [RG, "-n", "--sort", "path", *args], capture_output=True, cwd=cwd, env=ENV, check=False
    )


# (flags, pattern): the same ripgrep flags to both (-F literal, -i, -w; a regex by default)
CASES = [
    (["-F"], "NotImplementedError"),
    (["-F"], "self.assertEqual("),
    (["-F", "-i"], "import os"),
    (["-F", "-w"], "self"),
    (["-F", "-i", "-w"], "Error"),
    ([], r"\w+Error\b"),
    ([], r"[0-9]{4}-[0-9]{2}-[0-9]{2}"),
    ([], r"^\s*def __\w+__\(self"),
    (["-i"], r"(foo|bar)baz"),
    (["-w"], r"[A-Z]\w+Error\("),
    ([], r"^$"),
    ([], r"x*"),
    (["-F", "-C", "2"], "NotImplementedError"),
    (["-C", "1"], r"^import (os|sys)$"),
]


@pytest.mark.parametrize(("flags", "pattern"), CASES, ids=[c[1] for c in CASES])
def test_output_equals_ripgrep_on_the_standard_library(
    stdlib_copy: Path, flags: list[str], pattern: str
) -> None:
    mine = run("grep", *flags, "-e", pattern, str(stdlib_copy))
    ref = rg(*flags, "-e", pattern, str(stdlib_copy))
    assert ref.returncode == 0 and ref.stdout  # the case really matches something
    assert mine.returncode == 0, mine.stderr
    assert mine.stdout == ref.stdout


def test_relative_output_without_a_dir(stdlib_copy: Path) -> None:
    mine = run("grep", "NotImplementedError", cwd=stdlib_copy / "json")
    ref = rg("-F", "NotImplementedError", cwd=stdlib_copy / "json")
    assert mine.stdout == ref.stdout and mine.returncode == ref.returncode


def test_several_dirs_in_the_order_given(stdlib_copy: Path) -> None:
    a, b = str(stdlib_copy / "json"), str(stdlib_copy / "email") + "/"
    mine = run("grep", "-e", r"def \w+\(", a, b)
    assert mine.returncode == 0
    lines = mine.stdout.splitlines()
    assert lines[0].startswith(a.encode() + b"/")
    assert lines[-1].startswith(b.encode())  # "email/" printed as "email/x", not "email//x"
    assert not any(b"//" in ln.split(b":")[0] for ln in lines)


def test_exit_codes_and_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    assert run("grep", "hello", str(tmp_path)).returncode == 0
    none = run("grep", "absent", str(tmp_path))
    assert none.returncode == 1 and none.stdout == b""
    bad = run("grep", "-e", "(", str(tmp_path))
    assert bad.returncode == 2 and bad.stdout == b""
    assert bad.stderr.decode().startswith("rootgrep: [invalid_pattern] ")
    assert len(bad.stderr.decode().strip().splitlines()) == 1
    missing = run("grep", "x", str(tmp_path / "missing"))
    assert missing.returncode == 2 and b"[invalid_path]" in missing.stderr
    assert run("grep").returncode == 2  # usage error
    assert run("bogus").returncode == 2


def test_json_lines(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\nαβ = x\n")
    out = run("grep", "--json", "x", str(tmp_path))
    recs = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["path"], r["line"], r["column"]) for r in recs] == [("a.py", 1, 1), ("a.py", 2, 6)]
    assert recs[0]["root"]["uri"].startswith("file://") and len(recs[0]["root"]["id"]) == 12


def test_cli_never_prints_a_secret_outside_the_root(world: Path) -> None:
    root = world / "root"
    os.symlink(world / "outside", root / "escape_dir")
    os.symlink(world / "outside" / "secret.txt", root / "escape_file")
    for flags in ([], ["--hidden", "--no-ignore"]):
        out = run("grep", *flags, MARKER, str(root))
        assert out.returncode == 1
        assert MARKER.encode() not in out.stdout + out.stderr


def test_odd_names_are_printed_raw_like_rg(tmp_path: Path) -> None:
    r = os.fsencode(tmp_path)
    for name in (b"new\nline.txt", b"bad\xff.txt"):
        with open(r + b"/" + name, "wb") as f:
            f.write(b"needle\n")
    mine = run("grep", "needle", str(tmp_path))
    assert mine.stdout == rg("-F", "needle", str(tmp_path)).stdout


def test_python_dash_m_works(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "rootgrep", "grep", "hello", str(tmp_path)],
        capture_output=True,
        check=False,
    )
    assert out.returncode == 0 and out.stdout.endswith(b"a.txt:1:hello\n")
