"""``rootgrep search``, ``symbols`` and ``outline``: the MCP tools' answers on the command line."""

from __future__ import annotations

import os
import sys

from ..confine import display
from ..roots import pin_root
from .common import VERBS
from .index_verbs import index_parser
from .targets import display_prefix

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    import argparse
    from typing import Any


def search_parser() -> argparse.ArgumentParser:
    p = index_parser("search")
    p.add_argument("--json", action="store_true", help="one JSON object per result")
    p.add_argument("-n", "--max-results", type=int, default=20)
    return p


def search(args: argparse.Namespace) -> int:
    """Ranked search through the same service the MCP tool uses, after a sync (or with the
    index a daemon keeps fresh)."""
    import json

    from ..index.manager import IndexManager
    from ..service import Service, Settings, Token

    dirs: list[str] = args.dirs or ["."]
    roots = [pin_root(d) for d in dirs]
    manager = IndexManager(args.cache_dir, watch=False, max_file_size=args.max_file_size)
    try:
        for r in roots:
            manager.activate(r, 0)
        for r in roots:
            manager.wait_built(r.path)
        service = Service(roots, Settings(max_file_size=args.max_file_size), indexes=manager)
        found = service.search(roots, Token(), query=args.query, max_results=args.max_results)
        prefix = {
            r.id: display(display_prefix(given)) if args.dirs else ""
            for given, r in zip(dirs, roots, strict=True)
        }
        out = sys.stdout
        for hit in found.results:
            if args.json:
                rec = {"root": hit.root.model_dump(), "path": hit.path, "score": hit.score,
                       "snippets": [s.model_dump() for s in hit.snippets]}  # fmt: skip
                out.write(json.dumps(rec, ensure_ascii=False) + "\n")
            else:
                out.write(f"{prefix[hit.root.id]}{hit.path}  ({hit.score:.2f})\n")
                for sn in hit.snippets:
                    out.write(f"  {sn.line}: {sn.text}\n")
        return 0 if found.results else 1
    finally:
        manager.close()
        for r in roots:
            r.close()


def symbols_parser() -> argparse.ArgumentParser:
    import argparse

    p = argparse.ArgumentParser(
        prog="rootgrep symbols", description=VERBS["symbols"], allow_abbrev=False
    )
    p.add_argument("name", help="the identifier whose definitions to find")
    p.add_argument("dirs", nargs="*", metavar="DIR", help="directories to look in (default: .)")
    p.add_argument("-i", "--ignore-case", action="store_true",
                   help="names containing NAME, ignoring case (not only NAME exactly)")  # fmt: skip
    p.add_argument("--kind", help="only this kind (class, function, method, struct, ...)")
    p.add_argument("--json", action="store_true", help="one JSON object per definition")
    p.add_argument("-n", "--max-results", type=int, default=500, metavar="N")
    return p


def symbols(args: argparse.Namespace) -> int:
    """Definitions by parsing the files live (the walker's rules: .gitignore, no hidden)."""
    import json

    from ..service import Service, Settings, Token

    dirs: list[str] = args.dirs or ["."]
    roots = [pin_root(d) for d in dirs]
    try:
        service = Service(roots, Settings())
        out = sys.stdout
        found = 0
        for given, r in zip(dirs, roots, strict=True):
            prefix = display(display_prefix(given)) if args.dirs else ""
            res = service.find_symbol(
                [r], Token(), name=args.name, exact=not args.ignore_case, kind=args.kind,
                max_results=max(1, min(500, args.max_results)),
            )  # fmt: skip
            for s in res.symbols:
                found += 1
                if args.json:
                    rec = s.model_dump(mode="json") | {"path": prefix + s.path}
                    out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                else:
                    inside = f" (in {s.container})" if s.container else ""
                    out.write(f"{prefix}{s.path}:{s.line}: {s.kind} {s.name}{inside}\n")
        return 0 if found else 1
    finally:
        for r in roots:
            r.close()


def outline_parser() -> argparse.ArgumentParser:
    import argparse

    p = argparse.ArgumentParser(
        prog="rootgrep outline", description=VERBS["outline"], allow_abbrev=False
    )
    p.add_argument("file", help="a source file")
    p.add_argument("--json", action="store_true", help="the outline as one JSON object")
    return p


def outline(args: argparse.Namespace) -> int:
    """One file's definitions: its directory is pinned and the file read beneath it."""
    from ..service import Service, Settings

    raw = os.fsencode(args.file)
    parent, name = os.path.split(raw)
    if not name:
        raise SystemExit(f"rootgrep: {args.file}: not a file")
    root = pin_root(parent or b".")
    try:
        res = Service([root], Settings()).outline([root], path=os.fsdecode(name))
        out = sys.stdout
        if args.json:
            out.write(res.model_dump_json() + "\n")
            return 0

        def walk(nodes: list[Any], depth: int) -> None:
            for n in nodes:
                out.write(f"{args.file}:{n.line}: {'  ' * depth}{n.kind} {n.name}\n")
                walk(n.children, depth + 1)

        walk(res.symbols, 0)
        if res.not_parsed is not None:  # (its definitions are unknown: not "none", exit 1)
            from ..symbols import unparsed_why

            why = unparsed_why(res.not_parsed)
            print(f"rootgrep: {args.file}: not parsed: {why}; grep it instead", file=sys.stderr)
            return 2
        return 0 if res.symbols else 1
    finally:
        root.close()
