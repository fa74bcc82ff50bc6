"""The trigram field (``tri``): a file's text in pieces cut at line ends, each a part
document (``tri_pieces``, ``add_trigrams``), so a build commits every file's trigrams first,
ready for grep; a regex's plan (``plan.Q``) as a tantivy query; and ``candidates``, the
indexed files that may match, in walk order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tantivy import Document, Occur, Query, TextAnalyzerBuilder, Tokenizer

from ..walker import order_key
from .plan import Q
from .state import Layered

TRIGRAMS = TextAnalyzerBuilder(Tokenizer.ngram(3, 3, False)).build()  # case kept (see plan.py)
# A grep match lies within one line (``grep.Matcher`` refuses a pattern with a line break), so
# the trigram AND of a query may be asked of each piece of a file cut at line ends: a file whose
# text is longer than ``PIECE_OVER`` characters has its trigrams indexed in pieces of about
# ``PIECE_CHARS`` (a line never split: a longer line is in one piece), each in a part document
# (``fid``, ``tri`` and ``part`` = 1 only; a smaller file's trigrams in one of them). A
# big file holding every trigram of a rare literal somewhere, far apart, is then no candidate
# (on F: ``getrecursionlimit`` from 123 files, 16.5 MB, to 46 files, 3.0 MB).
PIECE_OVER = 32 * 1024
PIECE_CHARS = 16 * 1024


def tri_pieces(text: str, over: int = PIECE_OVER, piece: int = PIECE_CHARS) -> list[str]:
    """The pieces a file's text has its trigrams indexed in: the whole text up to ``over``
    characters; else slices of it, each ending at the first line end at or after ``piece``
    characters (the last at the text's end). Joined, they are the text: every line lies
    whole within one piece."""
    n = len(text)
    if n <= over:
        return [text]
    out, i = [], 0
    while i < n:
        j = text.find("\n", i + piece - 1) + 1 if i + piece < n else 0
        j = j or n  # (no line end left: the rest is one piece)
        out.append(text[i:j])
        i = j
    return out


def add_trigrams(writer: Any, fid: int, data: bytes) -> None:
    """A file's part documents: one per piece of its text (``tri_pieces``), each with the
    file's ``fid`` (deleting it deletes them all, and its main document)."""
    for piece in tri_pieces(data.decode("utf-8", "replace")):
        doc = Document(tri=piece)
        doc.add_unsigned("fid", fid)
        doc.add_unsigned("part", 1)
        writer.add_document(doc)


@dataclass
class TrigramSearch:
    """Grep's candidates from one ``RootIndex`` (a part of that class: ``store.py``)."""

    # for one generation of ``paths``: each file id's rank in walk order, and every indexed
    # path in that order (``_ordered``)
    _order: tuple[Layered[int, bytes], dict[int, int], list[bytes]] | None = field(
        init=False, default=None
    )

    def tantivy_query(self, q: Q) -> Query:
        if q.op == "all":
            return Query.all_query()
        if q.op == "none":
            return Query.empty_query()
        if q.op == "tri":
            return Query.term_query(self.schema, "tri", q.tri)
        occur = Occur.Must if q.op == "and" else Occur.Should
        return Query.boolean_query([(occur, self.tantivy_query(a)) for a in q.args])

    def _ordered(self, paths: Layered[int, bytes]) -> tuple[dict[int, int], list[bytes]]:
        """For this generation of ``paths``: each file id's rank in walk order, and every
        indexed path in that order (sorted once per commit, not per query)."""
        cached = self._order
        if cached is not None and cached[0] is paths:
            return cached[1], cached[2]
        pairs = sorted(paths.items(), key=lambda fp: order_key(fp[1]))
        rank = {f: i for i, (f, _) in enumerate(pairs)}
        ordered = [p for _, p in pairs]
        self._order = (paths, rank, ordered)
        return rank, ordered

    def candidates(self, q: Q) -> list[bytes]:
        """Root-relative paths of indexed files that may match, in walk (path) order. A few
        hits are sorted by their own paths; many, or every file, by the order of every
        indexed path (made once per version of ``paths``: right after a commit, a selective
        query does no work over the whole index)."""
        with self._lock:
            searcher = self.index.searcher()
            paths = self.paths
        if q.op == "all":  # every indexed (text) file: no query needed
            return self._ordered(paths)[1]
        if searcher.num_docs == 0:
            return []
        # (unscored: the hits are put in walk order below; scoring them cost a third more)
        tq = Query.const_score_query(self.tantivy_query(q), 1.0)
        hits = searcher.search(tq, limit=searcher.num_docs, count=False).hits
        # (a large file's pieces each answer for it: its id once, wherever it came first)
        fids = list(dict.fromkeys(searcher.fast_field_values("fid", [a for _, a in hits])))
        cached = self._order
        if (cached is not None and cached[0] is paths) or len(fids) > len(paths) >> 4:
            rank = self._ordered(paths)[0]
            fids = [f for f in fids if f in rank]
            fids.sort(key=rank.__getitem__)
            path_of = paths.getter()
            return [path_of(f) for f in fids]  # type: ignore[misc]
        get = paths.get
        found: list[bytes] = [p for f in fids if (p := get(f)) is not None]
        found.sort(key=order_key)
        return found
