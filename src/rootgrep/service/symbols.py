"""Code symbols: find_symbol (where a name is defined) and outline (one file's structure).

With a ready index, ``find_symbol`` is a lookup in the definitions stored at index time, plus a
live parse of every file changed since the last commit (the dirty set), so a definition renamed
a moment ago is found under its new name and not under the old one. Without an index (off, or
still building) the files a walk lists are parsed live: only those whose bytes contain the
name (a cheap test before any parse), within the same budgets. ``outline`` always parses its one
file as it is now.
"""

from __future__ import annotations

import difflib
import re
import stat as stat_mod
from collections.abc import Iterator, Sequence

from .. import confine
from ..confine import display
from ..errors import InvalidArgument, NotAFile, RootgrepError
from ..index.fields import is_low_path
from ..index.plan import plan
from ..models import FindSymbolResult, OutlineNode, OutlineResult, SymbolHit
from ..roots import Root
from ..symbols import (
    SIGNATURE_LOOK,
    UNPARSED_LARGE,
    Symbol,
    extract,
    extract_why,
    language_of,
    line_signature,
    supported_languages,
)
from ..symbols import outline as outline_of
from ..walker import Walker, WalkOptions, order_key
from .base import (
    MAX_SYMBOL_HITS,
    ServiceBase,
    Token,
    _clamp,
    _fingerprint,
    audited,
    decode_cursor,
    encode_cursor,
    file_uri,
    ref,
    rid,
)
from .filters import below_any, path_filter

MAX_SYMBOL_FILE_BYTES = 2 << 20  # a larger file is not parsed live (the extractor's own cap)
SIGNATURE_READ_BYTES = 16 << 20  # one find_symbol page reads at most this much for signatures


class Symbols(ServiceBase):
    @audited("find_symbol", "search", "pattern")
    def find_symbol(
        self,
        roots: Sequence[Root],
        token: Token,
        *,
        name: str,
        root: str | None = None,
        path: str | None = None,
        kind: str | None = None,
        exact: bool = True,
        include: str | list[str] | None = None,
        exclude: str | list[str] | None = None,
        max_results: int = 50,
        cursor: str | None = None,
    ) -> FindSymbolResult:
        from ..globs import as_globs

        limit = _clamp(max_results, 1, 500)
        include, exclude = as_globs(include), as_globs(exclude)
        fp = _fingerprint(t="sym", n=name, r=root, pa=path, k=kind, x=exact, i=include,
                          e=exclude)  # fmt: skip
        offset = int(decode_cursor(cursor, "sym", fp)["o"]) if cursor else 0
        targets = self._targets(roots, "find_symbol", path, root)
        nested = self._nested(roots) if path is None and root is None else {}
        keep = path_filter(include, exclude)
        wanted = _matcher(name, exact, kind)
        found: list[tuple[int, Root, bytes, Symbol]] = []
        capped = False
        resyncing: list[str] = []  # roots answered from an earlier build being re-synced
        for ti, (r, comps) in enumerate(targets):
            token.check()
            start = b"/".join(c for c in comps if c != b".")
            prune = nested.get(r.path, frozenset())
            for rel, sym in self._symbols_in(
                r, start, prune, name, exact, wanted, token, resyncing
            ):
                if keep is not None and not keep(rel):
                    continue
                found.append((ti, r, rel, sym))
                if len(found) >= MAX_SYMBOL_HITS:
                    capped = True
                    break
            if capped:
                break
        found.sort(key=lambda h: _rank(name, h[0], h[2], h[3]))
        page = found[offset : offset + limit]
        if resyncing:
            page = self._as_now(page, {n for n in resyncing}, name, exact, wanted, token)
        signatures = _signatures(page, token)
        hits = [
            _hit(r, rel, s, s.signature or signatures.get((id(r), rel, s.line, s.name), ""))
            for _ti, r, rel, s in page
        ]
        end = offset + len(page)

        def resume_at(k: int) -> str | None:
            at = offset + k
            return encode_cursor("sym", fp, o=at) if at < len(found) else None

        near: list[str] = []
        if not found and exact and not cursor:
            near = self._near_names(targets, name)
        result = FindSymbolResult(
            symbols=hits, truncated=end < len(found) or capped, next_cursor=resume_at(len(page)),
            near=near, resyncing=resyncing,
        )  # fmt: skip
        result._exact = exact
        result._resume = resume_at
        return result

    def _as_now(
        self,
        page: list[tuple[int, Root, bytes, Symbol]],
        resyncing: set[str],
        name: str,
        exact: bool,
        wanted: object,
        token: Token,
    ) -> list[tuple[int, Root, bytes, Symbol]]:
        """A page's definitions from an index being re-synced, each checked against its file
        as it is now (parsed live: at most a page of files): a definition its file no longer
        holds (the file gone, replaced or edited while no rootgrep ran) is left out."""
        now: dict[tuple[int, bytes], set[tuple[str, int]]] = {}
        kept = []
        for hit in page:
            ti, r, rel, sym = hit
            if r.name not in resyncing:
                kept.append(hit)
                continue
            key = (ti, rel)
            if key not in now:
                token.check()
                now[key] = {(s.name, s.line) for _, s in self._parse_one(r, rel, name, exact,
                                                                          wanted)}  # fmt: skip
            if (sym.name, sym.line) in now[key]:
                kept.append(hit)
        return kept

    def _near_names(self, targets: list[tuple[Root, list[bytes]]], name: str) -> list[str]:
        """Up to 5 defined names close to ``name``, from the ready indexes of the targets
        (none without one: a live parse of the whole tree for a name nobody defines would
        cost what the call just did again)."""
        near: list[str] = []
        for r, _ in targets:
            ready = self._ready_index(r) or self._resyncing_index(r)
            store = ready[0].index if ready is not None else None
            if store is None or not hasattr(store, "near_symbols"):
                continue
            for n in store.near_symbols(name):
                if n not in near:
                    near.append(n)
        return difflib.get_close_matches(name, near, n=5, cutoff=0) if near else []

    def _symbols_in(
        self,
        r: Root,
        start: bytes,
        prune: frozenset[bytes],
        name: str,
        exact: bool,
        wanted: object,
        token: Token,
        resyncing: list[str] | None = None,
    ) -> Iterator[tuple[bytes, Symbol]]:
        """Every definition of the name below ``start`` in root ``r``: from the index when it
        answers exactly now (its dirty files parsed live), else by parsing live."""
        match = wanted  # (a callable: Symbol -> bool)
        assert callable(match)
        ready = self._ready_index(r)
        if ready is None:
            ready = self._resyncing_index(r)
            if ready is not None and resyncing is not None:
                resyncing.append(r.name)
        if ready is not None and hasattr(ready[0].index, "find_symbols"):
            ix, place = ready
            assert ix.index is not None
            # (a bare file, committed for grep while a build commits its symbols, is parsed
            # live as a dirty one is: the index holds no symbols of it yet)
            cut = len(place) + 1 if place else 0
            scope = place + b"/" + start if place and start else place or start
            bare = getattr(ix.index, "bare_paths", list)
            dirty = ix.dirty_snapshot()
            marked = frozenset(dirty)  # (a renamed or removed directory is marked itself:
            # the stored symbols of the files below it, under their old paths, may be stale)
            waiting = bare()
            if waiting:  # (only those whose trigrams say they may hold the name: the index
                # answers that much already, so a call during a build reads a few files,
                # not the whole tree)
                may = ix.index.candidates(plan(name, regex=False, case_sensitive=exact))
                dirty |= set(waiting).intersection(p for p in may if not _outside(p, scope))
            for rel, sym in ix.index.find_symbols(
                name, exact=exact, limit=MAX_SYMBOL_HITS
            ):  # (already in the index's own paths)
                if rel in dirty or (place and not rel.startswith(place + b"/")):
                    continue
                if marked and below_any(rel, marked):
                    continue
                rel = rel[cut:]
                if _outside(rel, start) or (prune and below_any(rel, prune)):
                    continue
                if match(sym):
                    yield rel, sym
            changed = {p[cut:] for p in dirty if not place or p.startswith(place + b"/")}
            if changed:
                listed = Walker(r.fs).listed(changed)
                for rel in sorted(listed, key=order_key):
                    token.check()
                    if _outside(rel, start) or (prune and below_any(rel, prune)):
                        continue
                    yield from self._parse_one(r, rel, name, exact, match)
            return
        walker = Walker(r.fs, start, WalkOptions(prune=prune))
        batches = walker.batches()
        try:
            for batch in batches:
                token.check()
                with batch:
                    for fe in batch.files:
                        if language_of(fe.path) is None:
                            continue
                        data = confine.read_searchable_at(batch.fd, fe.name, MAX_SYMBOL_FILE_BYTES)
                        if data is None or not _may_define(data, name, exact):
                            continue
                        for sym in extract(fe.path, data) or []:
                            if match(sym):
                                yield fe.path, sym
        finally:
            batches.close()

    def _parse_one(
        self, r: Root, rel: bytes, name: str, exact: bool, match: object
    ) -> Iterator[tuple[bytes, Symbol]]:
        assert callable(match)
        if language_of(rel) is None:
            return
        try:
            res = r.fs.read(confine.split_relpath(rel), max_bytes=MAX_SYMBOL_FILE_BYTES)
        except (OSError, RootgrepError):  # gone or not text any more: it defines nothing now
            return
        if res.truncated or not _may_define(res.data, name, exact):
            return
        for sym in extract(rel, res.data) or []:
            if match(sym):
                yield rel, sym

    @audited("outline", "read", "path")
    def outline(
        self,
        roots: Sequence[Root],
        *,
        path: str,
        root: str | None = None,
        cursor: str | None = None,
    ) -> OutlineResult:
        r, comps = self._locate(roots, "outline", "read", path, root)
        rel = b"/".join(comps)
        fp = _fingerprint(t="outline", r=r.id, p=display(comps))
        at = decode_cursor(cursor, "outline", fp) if cursor else {"n": 0}
        if stat_mod.S_ISDIR(r.fs.stat(comps).st_mode):
            raise NotAFile(
                f"'{display(comps)}' is a directory; outline takes a source file (list its "
                "files with list_directory or find_files)"
            )
        language = language_of(rel)
        if language is None:
            raise InvalidArgument(
                f"outline does not support the language of '{display(comps)}': it parses "
                f"{supported_languages()}; read the file with read_file, or grep it"
            )
        res = r.fs.read(comps, max_bytes=MAX_SYMBOL_FILE_BYTES)
        # a cursor counts definitions of the file as it was: edited or replaced since, its
        # pages would repeat or skip some
        version = [res.stat.st_ino, res.stat.st_size, res.stat.st_mtime_ns, res.stat.st_ctime_ns]
        if cursor and at.get("v") != version:
            raise InvalidArgument(
                f"'{display(comps)}' changed since the page that cursor came from; start "
                "the outline again without a cursor"
            )
        skip = at.get("n")
        symbols, why = extract_why(rel, res.data) if not res.truncated else ([], UNPARSED_LARGE)
        result = OutlineResult(
            root=ref(r), path=display(comps), uri=file_uri(r, rel), language=language,
            symbols=[_node(n) for n in outline_of(symbols or [])], truncated=res.truncated,
            not_parsed=why,
        )  # fmt: skip
        result._skip = skip if isinstance(skip, int) and skip > 0 else 0
        result._cursor = lambda k: encode_cursor("outline", fp, n=k, v=version)
        return result


def _signatures(
    page: Sequence[tuple[int, Root, bytes, Symbol]], token: Token
) -> dict[tuple[int, bytes, int, str], str]:
    """The signatures the index does not store (the first line of each definition, trimmed,
    as ``symbols.extract`` makes it), read from the files as they are now: each file once, at
    most ``SIGNATURE_READ_BYTES`` in all for one page (past that, or for a file no longer
    there, the signature is left empty)."""
    wanted: dict[tuple[int, bytes], tuple[Root, set[tuple[int, str]]]] = {}
    for _ti, r, rel, sym in page:
        if not sym.signature:
            wanted.setdefault((id(r), rel), (r, set()))[1].add((sym.line, sym.name))
    out: dict[tuple[int, bytes, int, str], str] = {}
    budget = SIGNATURE_READ_BYTES
    for (key, rel), (r, lines) in wanted.items():
        token.check()
        if budget <= 0:
            break
        try:
            res = r.fs.read(
                confine.split_relpath(rel), max_bytes=min(budget, MAX_SYMBOL_FILE_BYTES)
            )
        except (OSError, RootgrepError):  # gone, or not a text file any more: no signature
            continue
        budget -= len(res.data)
        text = res.data.split(b"\n", max(n for n, _ in lines))
        parsed: dict[tuple[int, str], str] | None = None
        for n, name in lines:
            if n > len(text) or (n == len(text) and res.truncated):
                continue
            raw = text[n - 1]
            if len(raw) <= SIGNATURE_LOOK:  # (taken whole by the extractor too)
                out[(key, rel, n, name)] = line_signature(raw)
                continue
            if parsed is None and not res.truncated:  # a long line: the extractor's own
                found = extract(rel, res.data) or []  # look around the definition's start
                parsed = {(s.line, s.name): s.signature for s in reversed(found)}
            if parsed is not None and (n, name) in parsed:
                out[(key, rel, n, name)] = parsed[(n, name)]
    return out


# kinds that define a thing, ranked before a name bound by an assignment (a re-export
# `exports.X = X`, an alias `X = other.Y`): find_symbol's definition first
_BINDINGS = frozenset(("variable",))
# a value that is an import: `require(…)` or `import(…)` as the value, or a statement that
# starts with import / from / use (a word inside a string or a comment is none)
_IMPORT = re.compile(
    r"=\s*(?:await\s+)?(?:require|import)\s*\(|^\s*(?:import|from|use|pub\s+use)\s"
)


def _rank(name: str, ti: int, rel: bytes, s: Symbol) -> tuple[object, ...]:
    """find_symbol's order: the exact name first; outside tests, vendored and generated
    files before them; a definition before a name an assignment binds; a top-level one
    before a member; a public one before a private one; a file named after the name
    before others (``simplify/simplify.py``, ``router/index.js``); then root, path, line."""
    return (
        s.name != name,
        is_low_path(rel),
        s.kind in _BINDINGS,
        s.container is not None,
        _private(rel, s.name),
        not _named_after(rel, s.name),
        ti,
        order_key(rel),
        s.line,
    )


def _private(rel: bytes, name: str) -> bool:
    """A name its language's convention calls private: ``_x`` (Python, JavaScript, ...), a
    lowercase Go name (not exported)."""
    return name.startswith("_") or (rel.endswith(b".go") and name[:1].islower())


def _named_after(rel: bytes, name: str) -> bool:
    parts = rel.rsplit(b"/", 2)
    stem = parts[-1].split(b".", 1)[0].decode("utf-8", "replace").lower()
    folder = parts[-2].decode("utf-8", "replace").lower() if len(parts) > 1 else ""
    low = name.lower()
    return stem == low or (stem == "index" and folder == low) or (folder == low and stem == "mod")


def binding_of(s: Symbol, signature: str) -> str | None:
    """For a name an assignment binds (kind variable): ``import`` when its value is an
    import (``require(…)``, ``import …``), ``alias`` when it is another name (a re-export
    ``exports.X = X``, ``X = mod.Y``); None for a definition (``timeout = 5`` included)."""
    if s.kind not in _BINDINGS:
        return None
    if _IMPORT.search(signature):
        return "import"
    _, eq, value = signature.partition("=")
    value = value.strip().rstrip(";,").strip()
    if eq and value and re.fullmatch(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*", value):
        return "alias"
    return None


def _hit(r: Root, rel: bytes, s: Symbol, signature: str) -> SymbolHit:
    return SymbolHit(
        root=rid(r), path=display(rel), uri=file_uri(r, rel), name=s.name, kind=s.kind,
        line=s.line, end_line=s.end_line, container=s.container, signature=signature,
        binding=binding_of(s, signature),
    )  # fmt: skip


def _node(n: object) -> OutlineNode:
    sym: Symbol = n.symbol  # type: ignore[attr-defined]
    return OutlineNode(
        name=sym.name, kind=sym.kind, line=sym.line, end_line=sym.end_line,
        signature=sym.signature, container=sym.container,
        children=[_node(c) for c in n.children],  # type: ignore[attr-defined]
    )  # fmt: skip


def _matcher(name: str, exact: bool, kind: str | None) -> object:
    folded = name.casefold()

    def match(s: Symbol) -> bool:
        if kind is not None and s.kind != kind:
            return False
        return s.name == name if exact else folded in s.name.casefold()

    return match


def _may_define(data: bytes, name: str, exact: bool) -> bool:
    """A cheap test before a parse: a file whose bytes lack the name defines nothing of it."""
    needle = name.encode("utf-8", "surrogateescape")
    if exact:
        return needle in data
    return needle.lower() in data.lower()


def _outside(rel: bytes, start: bytes) -> bool:
    return bool(start) and rel != start and not rel.startswith(start + b"/")
