"""Relevance of ``search`` and ``find_symbols`` on the standard library (issue 10).

Identifiers are picked by a script, never by hand: names defined by ``class``/``def`` (the
``ast`` module, independent of the indexer's tree-sitter) in exactly one non-test file and used
as a whole word in at least three other files, sampled with ``random.Random(seed)``. Each is
queried bare (``X``) and as ``where is X defined``; the measure is the rank of the defining
file (first, top 3) and whether ``find_symbols(X)`` names it first.

``python benchmarks/relevance.py [N] [--subset]`` prints the figures (full: the whole stdlib
without site-packages; the test in tests/test_relevance.py runs the subset).
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
import shutil
import sys
import sysconfig
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from rootgrep.index.search_syntax import parse_search
from rootgrep.index.store import RootIndex
from rootgrep.roots import pin_root
from rootgrep.walker import order_key

STDLIB = Path(sysconfig.get_paths()["stdlib"])
SUBSET_PACKAGES = ("email", "http", "json", "logging", "xml", "urllib", "concurrent", "importlib")
_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_TESTY = re.compile(r"(^|/)(tests?|idle_test)/|(^|/)test_[^/]*\.py$|_test\.py$")


def copy_corpus(dst: Path, *, subset: bool) -> Path:
    """The stdlib (without site-packages and caches) copied below ``dst``; ``subset``: its
    top-level modules, a few packages and 60 seeded test modules."""
    ignore = shutil.ignore_patterns("__pycache__", "site-packages", "*.pyc")
    if not subset:
        shutil.copytree(STDLIB, dst, ignore=ignore, symlinks=True)
        return dst
    dst.mkdir(parents=True)
    for p in sorted(STDLIB.glob("*.py")):
        shutil.copy2(p, dst / p.name)
    for pkg in SUBSET_PACKAGES:
        shutil.copytree(STDLIB / pkg, dst / pkg, ignore=ignore)
    tests = sorted(p.name for p in (STDLIB / "test").glob("test_*.py"))
    (dst / "test").mkdir()
    for name in random.Random(1).sample(tests, 60):
        shutil.copy2(STDLIB / "test" / name, dst / "test" / name)
    return dst


@dataclass(frozen=True)
class Case:
    name: str
    defined_in: str  # root-relative path


def pick(tree: Path, n: int, seed: int) -> list[Case]:
    """``n`` identifiers defined in exactly one non-test file and used (whole word) in at
    least three other files of ``tree``, sampled with ``random.Random(seed)``."""
    defs: dict[str, set[str]] = defaultdict(set)
    users: dict[str, set[str]] = defaultdict(set)
    for p in sorted(tree.rglob("*")):
        if not p.is_file() or p.is_symlink():
            continue
        rel = p.relative_to(tree).as_posix()
        data = p.read_bytes()
        if b"\0" in data[:8192]:
            continue
        for w in set(_WORD.findall(data)):
            users[w.decode()].add(rel)
        if p.suffix != ".py" or _TESTY.search(rel):
            continue
        try:
            mod = ast.parse(data)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(mod):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                defs[node.name].add(rel)
    cases = [
        Case(name, next(iter(where)))
        for name, where in sorted(defs.items())
        if len(where) == 1 and not name.startswith("__") and len(users[name] - where) >= 3
    ]
    return random.Random(seed).sample(cases, min(n, len(cases)))


def ranked(ix: RootIndex, query: str) -> list[str]:
    """The files ``search`` would list for ``query``, in its order (score, then path)."""
    hits = ix.rank(parse_search(query)).hits
    hits = sorted(hits, key=lambda h: (-h[0], order_key(h[1])))
    return [h[1].decode() for h in hits]


def measure(tree: Path, cache: Path, cases: list[Case]) -> dict[str, object]:
    root = pin_root(str(tree))
    ix = RootIndex(str(cache), root.path)
    try:
        ix.sync(root.fs)
        rows = []
        for c in cases:
            bare = ranked(ix, c.name)
            natural = ranked(ix, f"where is {c.name} defined")
            sym = None
            if hasattr(ix, "find_symbols"):
                found = ix.find_symbols(c.name, limit=50)
                sym = found[0][0].decode() if found else None
            rows.append({
                "name": c.name,
                "file": c.defined_in,
                "bare": bare.index(c.defined_in) + 1 if c.defined_in in bare else None,
                "natural": natural.index(c.defined_in) + 1 if c.defined_in in natural else None,
                "symbol_first": sym == c.defined_in if sym is not None or hasattr(
                    ix, "find_symbols") else None,
            })  # fmt: skip
    finally:
        ix.close()
        root.close()
    n = len(rows)

    def share(key: str, top: int) -> float:
        return sum(1 for r in rows if r[key] is not None and r[key] <= top) / n

    sym_ok = [r["symbol_first"] for r in rows if r["symbol_first"] is not None]
    return {
        "n": n,
        "bare_first": share("bare", 1),
        "bare_top3": share("bare", 3),
        "natural_first": share("natural", 1),
        "natural_top3": share("natural", 3),
        "symbols_first": sum(sym_ok) / len(sym_ok) if sym_ok else None,
        "rows": rows,
    }


def run(n: int, seed: int, *, subset: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        tree = copy_corpus(Path(tmp) / "lib", subset=subset)
        cases = pick(tree, n, seed)
        return measure(tree, Path(tmp) / "cache", cases)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out = run(int(args[0]) if args else 200, 10, subset="--subset" in sys.argv)
    misses = [r for r in out["rows"] if r["bare"] != 1 or r["natural"] != 1]  # type: ignore[union-attr]
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}))
    for r in misses[:40]:
        print(json.dumps(r), file=sys.stderr)
    os.environ.get("RELEVANCE_ROWS") and print(json.dumps(out["rows"], indent=1))
