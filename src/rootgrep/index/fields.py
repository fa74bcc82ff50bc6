"""The index's fields (``build_schema``), and what a file's main document holds
(``main_document``): its path, name and extension, its words, the names it defines and their
sub-words (``name_parts``), its symbols (stored), the ``low`` flag (``is_low``: a test,
vendored, generated or minified file), size and mtime; no trigrams (its part documents hold
them: ``trigrams.py``). ``fid`` ties a file's documents together (``fid_query``)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from tantivy import Document, Index, Occur, Query, SchemaBuilder

from ..confine import display
from . import snippets
from .parse import MINOR, SymbolFields, symbol_fields
from .trigrams import TRIGRAMS
from .words import CODE, WORDS, word_text

# a test, vendored, generated or minified file counts less in ``search`` (the ``low`` flag)
_LOW_PATH = re.compile(
    r"(^|/)(tests?|testing|__tests__|idle_test|testdata|examples?|benches|dist"
    r"|vendor|vendored|third_party|node_modules)/"
    r"|(^|/)(test_[^/]*|conftest)\.py$|_test\.(py|go)$|\.(test|spec)\.[jt]sx?$"
    r"|\.min\.(js|css)$|_pb2\.py$|\.pb\.go$",
    re.IGNORECASE,
)
_GENERATED = re.compile(
    rb"@generated|Code generated .* DO NOT EDIT|DO NOT EDIT|auto-?generated", re.I
)


def build_schema():  # type: ignore[no-untyped-def]
    sb = SchemaBuilder()
    # Only ``symbols`` is stored: every other answer comes from the files as they are now,
    # read beneath the root (a stored copy of each file would double the index and be stale)
    sb.add_unsigned_field("fid", indexed=True, fast=True)
    sb.add_text_field("path", tokenizer_name="raw")
    sb.add_text_field("name", tokenizer_name="code")
    sb.add_text_field("ext", tokenizer_name="raw")
    # word counts without positions (a phrase is checked on the file itself: ``ParsedSearch.
    # holds_phrases``); positions would cost more than a third of the index
    # (the ``code`` tokenizer's words, cut from ``word_text``: see ``WORDS``)
    sb.add_text_field("content", tokenizer_name="words", index_option="freq")
    sb.add_text_field("tri", tokenizer_name="tri", index_option="basic")
    # every name the file defines, case kept; a name it defines only as a variable or
    # constant behind ``MINOR`` (one term per name: case-insensitive lookups are regexes over
    # the term dictionary, which visit each distinct name once)
    sb.add_text_field("sym", tokenizer_name="raw", index_option="basic")
    # the sub-words of every compound name the file defines (``ParseDuration``,
    # ``parse_duration_flag``: parse, duration, flag), lowercased: "duration" finds the files
    # defining ``ParseDuration`` (``name_parts``; uses of such names are found whole only)
    sb.add_text_field("parts", tokenizer_name="words", index_option="basic")
    sb.add_bytes_field("symbols", stored=True)  # ``_encode_symbols``: no signatures
    sb.add_unsigned_field("low", fast=True)  # 1: test, vendored, generated or minified
    sb.add_unsigned_field("size", fast=True)
    sb.add_unsigned_field("mtime", fast=True)
    # 1: a part document (a piece of a file's ``tri``; no other field but ``fid``): only
    # ``candidates`` may see them, every other query excludes them
    sb.add_unsigned_field("part", indexed=True)
    return sb.build()


def register_tokenizers(index: Index) -> None:
    """The tokenizers the fields name (not persisted: registered on every open)."""
    index.register_tokenizer("tri", TRIGRAMS)
    index.register_tokenizer("code", CODE)
    index.register_tokenizer("words", WORDS)


def fid_query(schema: Any, fid: int) -> Query:
    """Every document of a file (its main one and its part documents)."""
    # (deleting by an unsigned term does not match; a term query does)
    return Query.term_query(schema, "fid", fid)


def no_parts(schema: Any) -> tuple[Occur, Query]:
    """The clause that keeps part documents out of a boolean query (needed beside
    ``Query.all_query()``, or a query on ``fid`` or ``tri``: no other field is in them)."""
    return (Occur.MustNot, Query.term_query(schema, "part", 1))


def main_document(
    fid: int,
    rel: bytes,
    data: bytes,
    st: os.stat_result,
    fields: SymbolFields | None = None,
) -> Document:
    """A file's main document: what ``search`` and the symbol lookups ask (no trigrams);
    its symbols' ``fields`` parsed here unless given (by a ``ParseHelper``)."""
    shown = display(rel)
    name = shown.rsplit("/", 1)[-1]
    ext = ext_of(name)
    names, blob = symbol_fields(rel, data) if fields is None else fields
    sym: dict[str, Any] = {"sym": names} if names else {}
    parts = name_parts(names)
    if parts:
        sym["parts"] = parts
    doc = Document(path=shown, name=name, ext=ext, content=word_text(data), **sym)
    if blob is not None:
        doc.add_bytes("symbols", blob)
    doc.add_unsigned("low", int(is_low(rel, data)))
    doc.add_unsigned("fid", fid)
    doc.add_unsigned("size", st.st_size)
    doc.add_unsigned("mtime", int(st.st_mtime))
    return doc


_PARTS_OF: dict[str, str] = {}  # a compound name -> its sub-words (names repeat: once each)
_PARTS_KEPT = 200_000  # names whose sub-words are kept, at most (then the cache starts again)


def name_parts(names: Iterable[str]) -> str:
    """The sub-words of the compound names among ``names`` (camelCase, PascalCase,
    snake_case, acronyms: ``snippets.sub_words``), space-separated; "" when none is
    compound."""
    out: list[str] = []
    cache = _PARTS_OF
    for n in names:
        n = n.removeprefix(MINOR)
        got = cache.get(n)
        if got is None:
            split = snippets.sub_words(n)
            got = " ".join(split) if len(split) > 1 else ""
            if len(cache) >= _PARTS_KEPT:
                cache.clear()
            cache[n] = got
        if got:
            out.append(got)
    return " ".join(out)


def ext_of(name: str) -> str:
    """A file name's extension as the ``ext`` field (and ``ext:`` in a query) means it:
    after its last dot, lowercased; "" for none (a leading dot starts no extension)."""
    return name.rsplit(".", 1)[-1].lower() if "." in name.lstrip(".") else ""


def is_low_path(rel: bytes) -> bool:
    """Whether a root-relative path names a test, vendored or generated file (the one
    heuristic: search ranks such files lower, find_symbol lists their definitions last)."""
    return _LOW_PATH.search(display(rel)) is not None


def is_low(rel: bytes, data: bytes) -> bool:
    """Whether a file counts less in ``search``: a test, vendored or generated file (by its
    path, or a generated marker in its first 1 KiB) or a minified one (lines averaging over
    300 bytes in a file over 1 KiB)."""
    if is_low_path(rel):
        return True
    if _GENERATED.search(data[:1024]):
        return True
    return len(data) > 1024 and len(data) / (data.count(b"\n") + 1) > 300
