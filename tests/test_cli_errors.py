"""The CLI's errors: exit status 2 and one line on stderr, never a traceback (status 1 means
"no match" to a caller of grep)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from support import ROOTGREP


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ROOTGREP, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_grep_usage_error_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x\n")
    out = run("grep", "-C", "11", "x", ".", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("rootgrep: "), out.stderr


def test_runtime_errors_exit_2_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("needle\n")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    cache = str(blocker / "cache")  # the cache dir cannot be made: an OSError deep inside
    out = run("index", "--cache-dir", cache, str(tmp_path), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    last = out.stderr.strip().splitlines()[-1]  # (after the progress bar's line)
    assert re.match(r"rootgrep: \[[a-z_]+\] ", last) and cache in last, out.stderr
