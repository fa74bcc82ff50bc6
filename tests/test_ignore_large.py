"""A very large ignore file (100k rules, as ripgrep takes) works in every tool, like ripgrep.

One RE2 set over 5,200 ordinary rules exceeds RE2's memory budget; the rules are compiled in
parts. Before that, such a file made every walk of the root raise: grep, find_files and
directory_tree failed for the whole root, the index never became ready, and the CLI printed a
traceback with exit status 1.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootgrep.ignore import IgnoreFile
from rootgrep.index.manager import IndexManager
from rootgrep.roots import Root, pin_root
from rootgrep.service import Service, Settings, Token
from rootgrep.walker import list_files
from support import RG, ROOTGREP

RULES = 100_000
RG_WALK = ["--files", "--sort", "path", "--null", "--no-require-git", "--no-ignore-global",
           "--no-ignore-parent"]  # fmt: skip


def _rules(n: int) -> str:
    """``n`` rules of several kinds: names anywhere, anchored paths, directory rules, globs,
    and negations, so that which rule decides depends on rules from every part."""
    out = []
    for i in range(n):
        k = i % 5
        if k == 0:
            out.append(f"name{i}.txt")
        elif k == 1:
            out.append(f"/top{i}/")
        elif k == 2:
            out.append(f"glob{i}_*.log")
        elif k == 3:
            out.append(f"!name{i - 3}.txt")  # re-includes what rule i - 3 ignores
        else:
            out.append(f"d{i}/**/deep.txt")
    # late rules that flip early ones: the last matching rule decides
    out += ["!name0.txt", "name5.txt.bak", "!glob2_a.log", f"name{n - 5}.txt"]
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def big_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("big") / "root"
    sub = root / "sub"
    sub.mkdir(parents=True)
    names = [
        "name0.txt", "name5.txt", "name10.txt", "name99995.txt", "name99990.txt",
        "glob2_a.log", "glob7_b.log", "glob7.log", "keep0.txt", "other.txt", "top1/x.txt",
        "a/top1/x.txt", "top6/y.txt", "d4/deep.txt", "d4/q/r/deep.txt", "d9/deep.txt",
        "plain.py",
    ]  # fmt: skip
    for base in (root, sub):
        for n in names:
            p = base / n
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("needle here\n")
    (sub / ".gitignore").write_text(_rules(RULES))  # a deep ignore file, as in the issue
    (root / ".ignore").write_text(_rules(RULES // 4))
    yield root


@pytest.fixture(scope="module")
def big_root(big_tree: Path) -> Iterator[Root]:
    r = pin_root(str(big_tree))
    yield r
    r.close()


@pytest.fixture(scope="module")
def rg_list(big_tree: Path) -> list[bytes]:
    """What ``rg --files`` lists (ripgrep itself takes seconds over these rules: once)."""
    out = subprocess.run([RG, *RG_WALK], cwd=big_tree, capture_output=True, check=False)
    assert out.returncode in (0, 1), out.stderr
    return [p for p in out.stdout.split(b"\0") if p]


def test_walker_equals_rg_files(big_root: Root, rg_list: list[bytes]) -> None:
    got = list_files(big_root.fs)
    assert got == rg_list
    assert b"sub/plain.py" in got and b"sub/name5.txt" in got  # kept; re-included by rule 8
    assert b"sub/glob7_b.log" not in got  # ignored by an early rule
    assert b"sub/name99995.txt" not in got  # re-included, then ignored by the very last rule


def test_grep_find_files_and_directory_tree_work(big_root: Root, rg_list: list[bytes]) -> None:
    service = Service([big_root], Settings())
    expected = [p.decode() for p in rg_list]
    found = service.grep([big_root], Token(), pattern="needle", max_results=1000)
    assert [m.path for m in found.matches] == expected
    files = service.find_files([big_root], Token(), pattern="*.txt", max_results=1000)
    assert [f.path for f in files.files] == [p for p in expected if p.endswith(".txt")]
    tree = service.directory_tree([big_root], Token(), max_depth=10)
    shown: list[str] = []

    def walk(node: object, prefix: str) -> None:
        for c in node.children or []:  # type: ignore[attr-defined]
            rel = prefix + c.name
            if c.type == "file":
                shown.append(rel)
            else:
                walk(c, rel + "/")

    walk(tree.tree, "")
    assert sorted(shown) == sorted(expected)


def test_an_indexed_root_becomes_ready(
    big_root: Root, rg_list: list[bytes], tmp_path: Path
) -> None:
    manager = IndexManager(str(tmp_path / "cache"))
    try:
        manager.activate(big_root, 0)
        assert manager.wait_built(big_root.path, 300)
        ix = manager.get(big_root.path)
        assert ix is not None and ix.state == "ready", (ix and ix.state, ix and ix.error)
        service = Service([big_root], Settings(), indexes=manager)
        found = service.grep([big_root], Token(), pattern="needle", max_results=1000)
        assert found.index_used
        assert [m.path for m in found.matches] == [p.decode() for p in rg_list]
    finally:
        manager.close()


def test_cli_grep_with_the_large_file(big_tree: Path, rg_list: list[bytes]) -> None:
    mine = subprocess.run([ROOTGREP, "grep", "needle"], cwd=big_tree, capture_output=True)
    assert mine.returncode == 0, mine.stderr
    assert mine.stdout == b"".join(p + b":1:needle here\n" for p in rg_list)


def test_a_rule_that_cannot_compile_is_skipped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    monster = "*a" * 100_000  # one rule far over RE2's memory budget, between two ordinary ones
    with caplog.at_level(logging.WARNING, logger="rootgrep.ignore"):
        rules = IgnoreFile.parse(f"x\n{monster}\nlate.txt\n".encode())
    assert rules.check(b"x", False) is True
    assert rules.check(b"late.txt", False) is True
    assert rules.check(b"other", False) is None
    assert len(rules.rules) == 2
    assert any("skipped" in r.getMessage() for r in caplog.records)


def test_an_ignore_file_over_the_cap_never_yields_a_cut_rule(tmp_path: Path) -> None:
    from rootgrep.walker import MAX_IGNORE_FILE_BYTES

    filler = b"#" * 99 + b"\n"
    body = filler * (MAX_IGNORE_FILE_BYTES // len(filler))
    body += b"#" * (MAX_IGNORE_FILE_BYTES - len(body) - 1) + b"\n"  # exactly the cap so far
    (tmp_path / ".gitignore").write_bytes(body[:-2] + b"\na_rule_cut_at_the_cap\n")
    (tmp_path / "a").write_text("x\n")  # what the cut rule's first byte would ignore
    (tmp_path / "b").write_text("x\n")
    r = pin_root(str(tmp_path))
    try:
        assert list_files(r.fs) == [b"a", b"b"]
    finally:
        r.close()


def test_names_paths_and_suffix_rules_need_no_regex_sets() -> None:
    """Each rule in an RE2 set costs memory (its DFA cache grows to the set's budget: about
    400 MB for 100k rules); plain names, anchored paths and ``*SUFFIX`` rules are looked up in
    dicts instead, with the same answers (the fuzz and rg comparisons above check them)."""
    lines = [f"name{i}.txt\n/top{i}/x\n*.ext{i}\n!keep{i}\n" for i in range(30_000)]
    rules = IgnoreFile.parse("".join(lines).encode() + b"glob*x\n")
    assert len(rules._parts) == 1 and len(rules._parts[0][1]) == 1  # only "glob*x"
    assert rules.check(b"a/name7.txt", False) is True
    assert rules.check(b"top7/x", False) is True and rules.check(b"a/top7/x", False) is None
    assert rules.check(b"a/b.ext7", False) is True and rules.check(b"a/b.ext7x", False) is None
    assert rules.check(b"keep7", False) is False
    assert rules.check(b"globbyx", False) is True
