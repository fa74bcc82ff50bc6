"""Ranked search (``search``): the BM25 query that finds the files answering a query
(``_search_query``), the signals per query word that order them (``rank``: a definition of
the word, in any case or its very case, the file's name, the word whole in the content or
inside a compound name the file defines; a low file counting less; how many of the words a
file holds above all), the identifiers adjacent words make (``joined_words``), and
``Ranking``, the scored files, with the snippets of those shown (``snippets.py``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tantivy import Occur, Query

from .. import symbols
from ..grep import cut_around, text_of
from . import snippets
from .fields import no_parts
from .parse import MINOR
from .search_syntax import ParsedSearch
from .symbol_search import defines_query, named_query
from .words import CODE, LONG_WORD, word_term

# per query word (see ``rank``): a definition of that name (any case), of that very name, of
# that very name and not a variable or constant; the file name holds it; the content does.
# CASE > NAME: the very name's definition outranks a file named after the word that defines
# it in another case (anyhow's `trait Context` in lib.rs over context.rs's `fn context`)
DEF_SIGNAL, CASE_SIGNAL, MAIN_SIGNAL, NAME_SIGNAL, WORD_SIGNAL = 8.0, 5.0, 2.0, 4.0, 2.0
PART_SIGNAL = 3.0  # the file defines a compound name holding the word (``parts``)
LOW_FACTOR = 0.5  # what a low file's signals and BM25 count for
MAX_SNIPPETS = 6  # lines per search hit
SNIPPET_LINE_CHARS = 300  # a longer snippet line is a window around its match (SPEC §8)


def cover_weight(words: int) -> float:
    """What each query word a file holds adds to its score: more than every signal of every
    word together, so a file holding more of the words always ranks first."""
    every = DEF_SIGNAL + CASE_SIGNAL + MAIN_SIGNAL + NAME_SIGNAL + WORD_SIGNAL + PART_SIGNAL
    return (every + 1) * max(words, 1)


JOINED_TOKENS = 8  # a query's first tokens that are joined into identifiers, at most


def joined_words(tokens: Sequence[str]) -> dict[int, list[str]]:
    """For each query token (by index), the identifiers two or three adjacent tokens make
    when written as one, lowercased: camelCase / PascalCase (``parseduration``) and
    snake_case (``parse_duration``), so "parse duration" finds ``ParseDuration``. A file
    holding one holds each token in it (the index keeps identifiers whole). Only the first
    ``JOINED_TOKENS`` tokens are joined: each join costs the ranking three queries."""
    out: dict[int, list[str]] = {}
    tokens = tokens[:JOINED_TOKENS]
    for width in (2, 3):
        for i in range(len(tokens) - width + 1):
            part = tokens[i : i + width]
            for joined in ("".join(part), "_".join(part)):
                if len(joined) < LONG_WORD:
                    for k in range(i, i + width):
                        out.setdefault(k, []).append(joined)
    return out


class RankedSearch:
    """Ranked search over one ``RootIndex`` (a part of that class: ``store.py``)."""

    def _search_query(self, p: ParsedSearch, words: list[tuple[str, str]]) -> Query:
        """The files that answer ``p`` (its filters), scored by BM25 over content and file
        name: the tie-breaker of ``rank``. A single word is required; of several words, at
        least one."""
        must: list[tuple[Occur, Query]] = []
        any_word: list[tuple[Occur, Query]] = []
        joins = joined_words([t for t, _ in words])
        for k, (tok, _) in enumerate(words):
            one = Query.boolean_query([
                (Occur.Should, Query.term_query(self.schema, "content", word_term(tok))),
                (Occur.Should, Query.boost_query(
                    Query.term_query(self.schema, "name", tok), 4.0)),
                (Occur.Should, Query.const_score_query(defines_query(self.schema, tok), 0.0)),
                *((Occur.Should, Query.term_query(self.schema, "content", word_term(j)))
                  for j in joins.get(k, ())),
                (Occur.Should, Query.const_score_query(
                    Query.term_query(self.schema, "parts", tok), 0.0)),
            ])  # fmt: skip
            (any_word if p.natural else must).append(
                (Occur.Should if p.natural else Occur.Must, one)
            )
        if any_word:
            must.append((Occur.Must, Query.boolean_query(any_word)))
        for phrase in p.phrases:  # (each word required here; the order is checked on the
            for tok in CODE.analyze(phrase):  # file when it is shown: no positions stored)
                must.append((Occur.Must, Query.term_query(self.schema, "content", word_term(tok))))
        for w in p.exclude:  # whole words: a token of the code tokenizer ("test" ≠ "testing")
            for tok in CODE.analyze(w):
                must.append(
                    (Occur.MustNot, Query.term_query(self.schema, "content", word_term(tok)))
                )
        if p.exts:
            any_ext = [(Occur.Should, Query.term_query(self.schema, "ext", e)) for e in p.exts]
            must.append((Occur.Must, Query.boolean_query(any_ext)))
        for e in p.not_exts:
            must.append((Occur.MustNot, Query.term_query(self.schema, "ext", e)))
        if not any(o == Occur.Must for o, _ in must):  # (only excludes or filters)
            must.append((Occur.Must, Query.all_query()))
            must.append(no_parts(self.schema))
        return Query.boolean_query(must)

    def rank(self, p: ParsedSearch, check: Callable[[], None] | None = None) -> Ranking:
        """Every file that answers a search, with its score: cheap (no stored documents are
        read); ``Ranking.snippets_of`` makes the snippets of the few that are shown, from the
        files as they are now.

        The score, in the manner of zoekt's: per query word a file earns ``DEF_SIGNAL`` when
        it defines a symbol of that name, ``NAME_SIGNAL`` when its file name holds the word,
        ``WORD_SIGNAL`` when its content holds it as a whole word (constants: no IDF); a
        test, vendored, generated or minified file (``low``) has its signals and tie-breaker
        multiplied by ``LOW_FACTOR``; BM25, squashed into [0, 1), breaks ties. Above all
        of it counts how many of the query's words a file holds (of several words not every
        one is required)."""
        with self._lock:
            searcher = self.index.searcher()
            paths = self.paths
        named = [  # stop words the code defines: "where is use defined" asks for ``use``
            w
            for w in p.dropped
            if searcher.doc_freq("sym", w) or searcher.doc_freq("sym", MINOR + w)
        ]
        if named:
            kept = [] if p.only_stop else p.words
            p = dataclasses.replace(
                p, words=[*kept, *named], dropped=[], natural=len(kept) + len(named) >= 2
            )
        words = p.tokens()
        q = self._search_query(p, words)
        n = searcher.num_docs
        if n == 0:
            return Ranking(self, searcher, q, [], words)
        hits = searcher.search(q, limit=n, count=False).hits
        if not hits:
            return Ranking(self, searcher, q, [], words)
        addrs = [addr for _, addr in hits]
        fids = searcher.fast_field_values("fid", addrs)
        lows = searcher.fast_field_values("low", addrs)
        keys = [(a.segment_ord, a.doc) for a in addrs]
        signal = [0.0] * len(hits)
        cover = [0] * len(hits)
        where = {k: i for i, k in enumerate(keys)}
        joins = joined_words([t for t, _ in words])
        for k, (tok, case) in enumerate(words):
            held = [False] * len(hits)
            signals = [
                (defines_query(self.schema, tok), DEF_SIGNAL),
                (named_query(self.schema, case), CASE_SIGNAL),
                (Query.term_query(self.schema, "sym", case), MAIN_SIGNAL),
                (Query.term_query(self.schema, "name", tok), NAME_SIGNAL),
                (Query.term_query(self.schema, "content", word_term(tok)), WORD_SIGNAL),
            ]
            # the word inside an identifier (``ParseDuration`` holds "duration"), weaker
            signals.append((Query.term_query(self.schema, "parts", tok), PART_SIGNAL))
            for j in joins.get(k, ()):  # (a file holding ``ParseDuration`` holds "parse")
                signals += [
                    (defines_query(self.schema, j), DEF_SIGNAL),
                    (Query.term_query(self.schema, "name", j), NAME_SIGNAL),
                    (Query.term_query(self.schema, "content", word_term(j)), WORD_SIGNAL),
                ]
            for tq, weight in signals:
                if check is not None:  # (a cancelled call stops between two queries)
                    check()
                for _, a in searcher.search(tq, limit=n, count=False).hits:
                    i = where.get((a.segment_ord, a.doc))
                    if i is not None:
                        signal[i] += weight
                        held[i] = True
            for i, h in enumerate(held):
                cover[i] += h
        top = cover_weight(len(words))
        ranked = []
        path_of = paths.getter()  # (the base dict's own get when no overlay is left)
        for i, ((bm25, addr), f, low) in enumerate(zip(hits, fids, lows, strict=True)):
            rel = path_of(f)
            if rel is None:
                continue
            tie = float(bm25) / (float(bm25) + 10.0)
            score = cover[i] * top + (LOW_FACTOR if low else 1.0) * (signal[i] + tie)
            ranked.append((score, rel, addr))
        return Ranking(self, searcher, q, ranked, words)


@dataclass
class Ranking:
    """The scored files of one search on one index, and the searcher that scored them."""

    store: RankedSearch  # (the index that ranked them)
    searcher: Any
    query: Query
    hits: list[tuple[float, bytes, Any]]  # (score, root-relative path, doc address)
    words: list[tuple[str, str]] = field(default_factory=list)  # the query's tokens

    def snippets_of(
        self, data: bytes, path: bytes = b"", *, max_chars: int = SNIPPET_LINE_CHARS
    ) -> list[tuple[int, str]]:
        """Snippets from a file's bytes as read now (what a served search shows): the lines
        where a word of the query (or a name made of several: ``ParseDuration``) is defined
        (the file parsed now), then the lines holding the most of the query's words, whole
        or as sub-words of identifiers, stems meeting (``snippets.best_lines``); at most
        ``MAX_SNIPPETS`` lines, each whole or, past ``max_chars`` characters, a window around
        its first match with ``…`` at each cut end."""
        words = {low for low, _ in self.words}
        if not words:
            return []
        data = text_of(data)
        lines = data.split(b"\n")
        stems = snippets.word_stems(case for _, case in self.words)
        first: list[int] = []
        several = len(stems) >= 2
        for sym in symbols.extract(path, data) or ():
            if len(first) >= MAX_SNIPPETS:
                break
            # a definition of a query word, or of a name made of two of them or more
            # ("parse duration": ParseDuration; split only when two stems are in it)
            name = sym.name.lower()
            if sym.line in first:
                continue
            if name in words or (
                several
                and sum(1 for st in stems if st in name) >= 2
                and len({snippets.stem(p) for p in snippets.sub_words(sym.name)} & stems) >= 2
            ):
                first.append(sym.line)
        out = []
        for i, (start, end) in snippets.best_lines(data, lines, stems, first, MAX_SNIPPETS):
            line = lines[i - 1].rstrip(b"\r")
            out.append((i, cut_around(line, start, end, max_chars)[0]))
        return out
