"""Relevance of ``search`` and ``find_symbols`` on real repositories in C, Rust, Go and
JavaScript (issue 10: "tests outside the project measure the same on other repositories").

``python benchmarks/relevance_repos.py DIR [DIR ...] [--n N] [--seed S]`` measures each
directory (a checkout of someone else's repository) as ``relevance.py`` measures the standard
library, and prints one table row per directory (``--rows``: the misses too, on stderr).

The truth is independent of the indexer's tree-sitter extractor: a definition is a line that
one of the per-language regexes below matches at its start (``_DEFS``), the way a reader
scanning the file would see it. An identifier is a case when it is defined in exactly one
non-test file (``_TESTY``: not a test, example, bench, fuzz, vendored or built (``dist/``,
``*.min.js``) file) and used as a whole word in at least three other files (any file of the
tree); ``N`` of them (40 by default) are sampled with ``random.Random(seed)``. Each is
queried bare (``X``) and as ``where is X defined``; the measure is the rank of the defining
file (first, top 3) and whether ``find_symbols(X)`` names it first. The repositories are not
part of this project: fetch them (``git clone``) and pass their directories."""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from relevance import Case, measure

_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_TESTY = re.compile(
    r"(^|/)(tests?|testing|__tests__|examples?|benches|benchmarks?|fuzz|vendor|"
    r"third_party|node_modules|dist)/|_test\.go$|\.(test|spec)\.[jt]sx?$|(^|/)test[^/]*\.[ch]$"
    r"|\.min\.js$"
)
_C_KEYWORDS = frozenset(("if", "else", "for", "while", "do", "switch", "case", "return", "sizeof"))
_DEFS: dict[str, list[re.Pattern[str]]] = {
    "c": [
        re.compile(r"^\w[\w \*]*\b(\w+)\s*\([^;]*$"),  # a function's head: type name(...
        re.compile(r"^(\w+)\s*\([^;]*\)\s*\{?\s*$"),  # name(...) on its own line (type above)
        re.compile(r"^(?:typedef\s+)?struct\s+(\w+)\s*\{"),
        re.compile(r"^#\s*define\s+(\w+)"),
        re.compile(r"^typedef\s[^;{]*?\b(\w+)\s*;"),
        re.compile(r"^typedef\s[^;{(]*\(\s*\*\s*(\w+)\s*\)"),  # typedef int (*fn)(...)
        re.compile(r"^\}\s*(\w+)\s*;"),  # the end of typedef struct {...} X;
    ],
    "go": [
        re.compile(r"^func (?:\(.*?\) )?(\w+)"),
        re.compile(r"^type (\w+)"),
    ],
    "rust": [
        re.compile(
            r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:(?:const|async|unsafe|extern\s+\"\w+\")\s+)*"
            r"(?:fn|struct|enum|trait|type|const|static|mod|union)\s+(\w+)"
        ),
        re.compile(r"^\s*macro_rules!\s*(\w+)"),
    ],
    "javascript": [
        re.compile(r"^\s*(?:export\s+)?(?:async\s+)?(?:function\s*\*?|class)\s+(\w+)"),
        re.compile(r"^(?:export\s+)?const\s+(\w+)\s*=(?!\s*require\()"),
        re.compile(r"^(?:module\.)?exports\.(\w+)\s*=(?!\s*require\()"),
        # proto.x = function, and each target of a chain proto.x = proto.y = function
        re.compile(r"^((?:\w+\.\w+\s*=\s*)+)(?:async\s+)?function\b"),
        re.compile(r"^\w+\.(\w+)\s*=\s*$"),  # proto.x = (the value on the next line)
    ],
}
_CHAIN = re.compile(r"\w+\.(\w+)\s*=")
_LANG = {".c": "c", ".h": "c", ".go": "go", ".rs": "rust", ".js": "javascript"}
_LANG |= {".mjs": "javascript", ".cjs": "javascript"}
_SKIP_DIRS = {".git", "node_modules", "target"}


def pick(tree: Path, n: int, seed: int) -> list[Case]:
    """``n`` identifiers defined (by ``_DEFS``) in exactly one non-test file of ``tree`` and
    used as a whole word in at least three other files, sampled with ``random.Random(seed)``."""
    defs: dict[str, set[str]] = defaultdict(set)
    users: dict[str, set[str]] = defaultdict(set)
    for p in sorted(tree.rglob("*")):
        if not p.is_file() or p.is_symlink() or _SKIP_DIRS & set(p.relative_to(tree).parts):
            continue
        rel = p.relative_to(tree).as_posix()
        data = p.read_bytes()
        if b"\0" in data[:8192]:
            continue
        for w in set(_WORD.findall(data)):
            users[w.decode()].add(rel)
        lang = _LANG.get(p.suffix)
        if lang is None or _TESTY.search(rel):
            continue
        for line in data.decode("utf-8", "replace").splitlines():
            for rx in _DEFS[lang]:
                m = rx.match(line)
                if m is None or (lang == "c" and m.group(1) in _C_KEYWORDS):
                    continue
                names = _CHAIN.findall(m[1]) if "=" in m[1] else [m[1]]
                for name in names:
                    defs[name].add(rel)
    cases = [
        Case(name, next(iter(where)))
        for name, where in sorted(defs.items())
        if len(where) == 1 and len(users[name] - where) >= 3
    ]
    return random.Random(seed).sample(cases, min(n, len(cases)))


def run(src: Path, n: int, seed: int) -> dict[str, object]:
    """The measure on a copy of ``src`` (so the index's cache sits beside, not inside, it)."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(src, tree, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        return measure(tree, Path(tmp) / "cache", pick(tree, n, seed))


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=10)
    ap.add_argument("--rows", action="store_true", help="print the misses on stderr")
    args = ap.parse_args(argv)
    cols = ("n", "bare_first", "bare_top3", "natural_first", "natural_top3", "symbols_first")
    print(f"{'repository':<16}" + "".join(f"{c:>15}" for c in cols))
    for d in args.dirs:
        out = run(d, args.n, args.seed)
        cells = [f"{out[c]:>15.1%}" if isinstance(out[c], float) else f"{out[c]!s:>15}"
                 for c in cols]  # fmt: skip
        print(f"{d.name:<16}" + "".join(cells), flush=True)
        if args.rows:
            for r in out["rows"]:  # type: ignore[union-attr]
                if r["bare"] != 1 or r["natural"] != 1 or not r["symbol_first"]:
                    print(d.name, json.dumps(r), file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
