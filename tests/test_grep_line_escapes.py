"""A regex that asks for a line end says so: grep matches within one line (RE2's
``never_nl``), so ``foo\\nbar`` written as an escape used to match nothing, without a word.
It is refused as ripgrep refuses it ("the literal \\n is not allowed"), live, indexed and in
the CLI; a line break that is only one character of a class, or quoted, or a backslash
before an ``n``, is no line end and still matches as ripgrep matches."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rootgrep.errors import InvalidPattern
from rootgrep.index.manager import IndexManager
from rootgrep.roots import pin_root
from rootgrep.service import Service, Settings, Token
from support import RG, ROOTGREP, rg_matches

REFUSED = [r"b\n", r"\x0a", r"\x{a}", r"\x0A", r"(?:\n)?c", r"[[:alpha:]]\n", r"b\nc"]
# escapes ripgrep's parser reads otherwise (octal): refused here all the same
REFUSED_HERE_ONLY = [r"b\012", r"b\12"]
# (pattern, the same for ripgrep: it has no \Q...\E)
KEPT = [(p, p) for p in (r"[^\n]+", r"\\n", r"[^a\n]d", r"a\tb", r"x\x41")] + [(r"\Q\n\E", r"\\n")]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "a.txt").write_text("ab\ncd\n")
    (root / "b.txt").write_text("a\\n literal \\Q\\n\\E\nxA a\tb\n")
    return root


def rg_lines(tree: Path, pattern: str) -> tuple[int, list[tuple[str, int]]]:
    """ripgrep's exit status for ``pattern`` (2: refused) and its matching lines."""
    code = subprocess.run([RG, "-q", "-e", pattern, "."], cwd=tree, capture_output=True,
                          check=False).returncode  # fmt: skip
    return code, rg_matches(tree, pattern)


def test_a_line_end_escape_is_refused_live_indexed_and_in_the_cli(
    tmp_path: Path, tree: Path
) -> None:
    r = pin_root(str(tree))
    manager = IndexManager(str(tmp_path / "cache"))
    try:
        manager.activate(r, 0)
        assert manager.wait_built(r.path, 60)
        services = (Service([r], Settings(), indexes=manager), Service([r], Settings()))
        for pattern in REFUSED + REFUSED_HERE_ONLY:
            for svc in services:
                with pytest.raises(InvalidPattern, match="line break") as e:
                    svc.grep([r], Token(), pattern=pattern, regex=True, max_results=100)
                assert "within one line" in str(e.value)
            if pattern in REFUSED:
                assert rg_lines(tree, pattern)[0] == 2, pattern  # (ripgrep refuses it too)
            cli = subprocess.run([ROOTGREP, "grep", "-e", pattern, str(tree)],
                                 capture_output=True, text=True, check=False)  # fmt: skip
            assert cli.returncode == 2 and not cli.stdout, (pattern, cli)
            assert (
                cli.stderr.startswith("rootgrep: [invalid_pattern]") and "line break" in cli.stderr
            )
        for pattern, for_rg in KEPT:
            code, want = rg_lines(tree, for_rg)
            assert code in (0, 1) and want, pattern
            for svc in services:
                res = svc.grep([r], Token(), pattern=pattern, regex=True, max_results=100)
                assert [(m.path, m.line) for m in res.matches] == want, pattern
    finally:
        manager.close()
        r.close()
