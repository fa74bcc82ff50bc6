"""Symbol lookups: the ``sym`` field (every name a file defines, case kept; a variable's or a
constant's behind ``MINOR``) finds the files, their stored ``symbols`` the definitions:
``find_symbols`` (a name, or a substring of one in any case), ``near_symbols`` (a "did you
mean"), ``symbols_of`` (one file's); ``defines_query`` and ``named_query``, the any-case
and exact lookups, which ranking asks too."""

from __future__ import annotations

import difflib
from typing import Any

from tantivy import Occur, Query

from ..symbols import Symbol
from ..walker import order_key
from .fields import fid_query, is_low_path, no_parts
from .parse import MINOR, decode_symbols

MAX_SYMBOL_DOCS = 2_000  # find_symbols reads at most this many files' stored symbols
NEAR_SYMBOL_DOCS = 50  # files whose symbols a "did you mean" reads, at most


def defines_query(schema: Any, word: str) -> Query:
    """Files defining ``word`` in any case."""
    return Query.regex_query(schema, "sym", "(?i)" + MINOR + "?" + _regex_literal(word))


def named_query(schema: Any, name: str) -> Query:
    """Files defining ``name`` exactly (of any kind)."""
    return Query.boolean_query([
        (Occur.Should, Query.term_query(schema, "sym", name)),
        (Occur.Should, Query.term_query(schema, "sym", MINOR + name)),
    ])  # fmt: skip


def _regex_literal(text: str) -> str:
    """``text`` as a literal in tantivy's (Rust) regex syntax."""
    return "".join("\\" + c if c in r"\.+*?()|[]{}^$#&-~" else c for c in text)


class SymbolSearch:
    """Symbol lookups in one ``RootIndex`` (a part of that class: ``store.py``)."""

    def symbols_of(self, rel: bytes) -> list[Symbol] | None:
        """The stored symbols of one indexed file ([] for a language without symbols); None
        when the index does not hold the file."""
        with self._lock:
            searcher = self.index.searcher()
            entry = self.entries.get(rel)
        if entry is None or not entry.fid or entry.bare:  # (bare: no main document yet)
            return None
        q = Query.boolean_query(
            [(Occur.Must, fid_query(self.schema, entry.fid)), no_parts(self.schema)]
        )
        hits = searcher.search(q, limit=1, count=False).hits
        if not hits:
            return None
        return decode_symbols(searcher.doc(hits[0][1]).get_first("symbols"))

    def near_symbols(self, name: str, limit: int = 5) -> list[str]:
        """Up to ``limit`` defined names closest to ``name`` (a "did you mean" for a name
        with no definition): names within two edits of it in the ``sym`` term dictionary
        (one fuzzy query; at most NEAR_SYMBOL_DOCS files' stored symbols read), closest
        first."""
        with self._lock:
            searcher = self.index.searcher()
        if not name or searcher.num_docs == 0 or len(name) > 200:
            return []
        q = Query.boolean_query([
            *((Occur.Should, Query.fuzzy_term_query(self.schema, "sym", t, distance=2))
              for t in dict.fromkeys((name, name.lower(), MINOR + name))),
            (Occur.Should, defines_query(self.schema, name)),  # (the same name in another case)
        ])  # fmt: skip
        hits = searcher.search(q, limit=NEAR_SYMBOL_DOCS, count=False).hits
        names: set[str] = set()
        for _, a in hits:
            for sym in decode_symbols(searcher.doc(a).get_first("symbols")) or ():
                if sym.name != name:
                    names.add(sym.name)
        low = name.lower()
        same = [n for n in sorted(names) if n.lower() == low]  # (another case: first)
        close = difflib.get_close_matches(name, sorted(names), n=limit, cutoff=0.6)
        return list(dict.fromkeys([*same, *close]))[:limit]

    def find_symbols(
        self, name: str, *, exact: bool = True, kind: str | None = None, limit: int = 50
    ) -> list[tuple[bytes, Symbol]]:
        """Definitions named ``name`` (``exact``: equal, case-sensitive; else a
        case-insensitive substring of the name), as (root-relative path, symbol), ordered as
        SPEC §9 says: names equal to ``name`` first (then equal but for case), files outside
        tests before tests, then path order and line. The work is bounded: exact is one term
        lookup in ``sym``; a substring is a regex query over the term dictionary of ``defs``
        (every distinct lowercased name, once); at most ``MAX_SYMBOL_DOCS`` files' stored
        symbols are read (the first in index order)."""
        with self._lock:
            searcher = self.index.searcher()
            paths = self.paths
        if not name or searcher.num_docs == 0:
            return []
        low = name.lower()
        if exact:
            q = named_query(self.schema, name)
        else:  # (``.*`` also takes the ``MINOR`` mark)
            q = Query.regex_query(self.schema, "sym", "(?i).*" + _regex_literal(low) + ".*")
        hits = searcher.search(q, limit=MAX_SYMBOL_DOCS, count=False).hits
        addrs = [a for _, a in hits]
        fids = searcher.fast_field_values("fid", addrs) if addrs else []
        found: list[tuple[tuple[object, ...], bytes, Symbol]] = []
        for a, f in zip(addrs, fids, strict=True):
            rel = paths.get(f)
            if rel is None:
                continue
            testy = is_low_path(rel)
            for sym in decode_symbols(searcher.doc(a).get_first("symbols")) or ():
                if (sym.name != name) if exact else (low not in sym.name.lower()):
                    continue
                if kind is not None and sym.kind != kind:
                    continue
                nearness = 0 if sym.name == name else 1 if sym.name.lower() == low else 2
                found.append(((nearness, testy, order_key(rel), sym.line), rel, sym))
        found.sort(key=lambda t: t[0])
        return [(rel, sym) for _, rel, sym in found[: max(limit, 0)]]
