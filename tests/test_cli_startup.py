"""The CLI's live grep imports only what it needs: start-up is mostly imports (issue 11)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# the server's stack, the index's, the parsers', the progress bars', the -g globs' and the
# thread pool's: none is needed to grep a small tree live
NOT_NEEDED = (
    "mcp", "pydantic", "uvicorn", "starlette", "anyio", "tantivy", "tree_sitter", "rich",
    "pathspec", "concurrent.futures", "rootgrep.service", "rootgrep.server",
)  # fmt: skip


def imported_by(args: list[str], cwd: Path) -> tuple[int, bytes, set[str]]:
    code = (
        "import sys\nfrom rootgrep.cli import main\n"
        f"code = main({args!r})\nsys.stdout.flush()\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\nsys.exit(code)\n"
    )
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(cwd / "no-cache")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=cwd, env=env,
                         timeout=60, check=False)  # fmt: skip
    return out.returncode, out.stdout, set(out.stderr.decode().split())


def test_a_live_grep_of_a_tiny_tree_imports_only_what_it_uses(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / ".gitignore").write_text("*.log\n")
    code, out, modules = imported_by(["grep", "hello"], tmp_path)
    assert code == 0 and out == b"a.txt:1:hello\n"
    loaded = {m for m in NOT_NEEDED if any(x == m or x.startswith(m + ".") for x in modules)}
    assert not loaded


def test_glob_rules_still_load_what_they_need(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / "b.py").write_text("hello\n")
    code, out, modules = imported_by(["grep", "-g", "*.py", "hello"], tmp_path)
    assert code == 0 and out == b"b.py:1:hello\n"
    assert "pathspec" in modules
