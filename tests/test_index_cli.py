"""The index verbs, and a daemon writing an index while another process reads it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from rootgrep.index.manager import IndexManager
from rootgrep.roots import pin_root
from rootgrep.service import Service, Settings, Token
from support import ROOTGREP, start_daemon, stop


def run(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(cache)}
    return subprocess.run([ROOTGREP, *args], capture_output=True, text=True, env=env,
                          timeout=120, check=False)  # fmt: skip


def make_tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "parser.py").write_text(
        "class TokenParser:\n    def parse_tokens(self):\n        pass\n"
    )
    (root / "pkg" / "lexer.py").write_text("def tokenize(text):\n    return text.split()\n")
    (root / "README.md").write_text("# A parser\nParses tokens.\n")
    return root


def test_index_search_and_status(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    cache = tmp_path / "cache"
    first = run("index", str(tree), cache=cache)
    assert first.returncode == 0, first.stderr
    assert "3 files indexed" in first.stderr and "+3" in first.stderr
    again = run("index", str(tree), cache=cache)
    assert "read 0" in again.stderr  # nothing changed, nothing re-read
    hits = run("search", "parse_tokens", str(tree), cache=cache)
    assert hits.returncode == 0 and hits.stdout.splitlines()[0].startswith(f"{tree}/pkg/parser.py")
    assert "  2:     def parse_tokens(self):" in hits.stdout
    js = run("search", "--json", "tokens ext:md", str(tree), cache=cache)
    (rec,) = [json.loads(x) for x in js.stdout.splitlines()]
    assert rec["path"] == "README.md" and rec["root"]["name"] == "tree"
    none = run("search", "absentword", str(tree), cache=cache)
    assert none.returncode == 1 and none.stdout == ""
    excluded = run("search", "parser -tokenparser", str(tree), cache=cache)
    assert "parser.py" not in excluded.stdout and "README.md" in excluded.stdout
    status = run("status", cache=cache)
    assert str(tree) in status.stdout and "3 files" in status.stdout


def wait_until(pred, seconds: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_daemon_writes_and_a_server_process_reads(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    cache = tmp_path / "cache"
    daemon = start_daemon(tree, cache)
    r = pin_root(str(tree))
    manager = IndexManager(str(cache))
    try:
        ix = manager.activate(r, 0)
        assert ix is not None
        wait_until(lambda: ix.state == "ready")
        assert ix.role == "reader"  # the daemon holds the writer lock
        svc = Service([r], Settings(), indexes=manager)
        (tree / "pkg" / "fresh.py").write_text("def brand_new_symbol():\n    pass\n")
        # grep is exact at once (this process's own watcher marks the file dirty) ...
        wait_until(
            lambda: (
                [m.path for m in svc.grep([r], Token(), pattern="brand_new_symbol").matches]
                == ["pkg/fresh.py"]
            ),
            5,
        )
        # ... and the daemon's commit reaches this process's searcher
        wait_until(
            lambda: (
                [h.path for h in svc.search([r], Token(), query="brand_new_symbol").results]
                == ["pkg/fresh.py"]
            )
        )
        wait_until(lambda: not ix.dirty)  # the reloaded state covers it: no longer scanned live
    finally:
        manager.close()
        r.close()
        status = stop(daemon, 15)
    assert status == 0  # the daemon stopped cleanly on SIGTERM
