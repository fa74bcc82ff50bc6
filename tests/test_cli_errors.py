"""The CLI's errors: exit status 2 and one line on stderr, never a traceback (status 1 means
"no match" to a caller of grep)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

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


def test_a_ctrl_c_a_library_wrapped_still_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SIGINT while pydantic built the MCP SDK's types (``serve``'s start) came out as its
    SchemaError around the KeyboardInterrupt: the server said "[error] ... SchemaError" and
    exited 2. An interrupt is an interrupt, however wrapped: 130 and nothing said; any other
    error still says itself."""
    from rootgrep import cli
    from rootgrep.cli import query_verbs

    def interrupted_while_building(_args: object) -> int:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise RuntimeError("Error building schema") from e

    monkeypatch.setattr(query_verbs, "outline", interrupted_while_building)
    assert cli.main(["outline", str(tmp_path / "a.py")]) == 130
    assert capsys.readouterr().err == ""

    class SchemaError(Exception):  # (pydantic-core's, which says the interrupt in words)
        pass

    def said_in_words(_args: object) -> int:
        raise SchemaError("Error building schema: KeyboardInterrupt")

    monkeypatch.setattr(query_verbs, "outline", said_in_words)
    assert cli.main(["outline", str(tmp_path / "a.py")]) == 130
    assert capsys.readouterr().err == ""

    def failed(_args: object) -> int:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:  # (dealt with: what follows is an error of its own)
            raise RuntimeError("Error building schema") from None

    monkeypatch.setattr(query_verbs, "outline", failed)
    assert cli.main(["outline", str(tmp_path / "a.py")]) == 2
    assert "Error building schema" in capsys.readouterr().err
