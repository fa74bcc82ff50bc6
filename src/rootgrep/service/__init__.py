"""The service: every tool's logic over a list of effective roots, shared by server and CLI.

Methods are synchronous and blocking (walks, reads, RE2 scans): callers run them in worker
threads. Each takes the effective roots of the call and, for long work, a ``Token`` that is set
when one of those roots is removed mid-call, so it stops with ``root_removed``. Every
authorization decision (a path mapped to a root, or refused) goes to the audit log.

One module per concept: ``base`` (settings, tokens, cursors, locating a path), ``filters``
(globs, nested roots), ``searching`` (find_files, reindex; the search tools composed),
``grepping`` (grep) with ``grep_scope`` (what a call covers, counted) and ``grep_page`` (one
page of it), ``enclosing`` (the definition holding a line), ``ranked`` (search) with
``live_search``, ``symbols`` (find_symbol, outline), ``files`` (reading and listing),
``writes``.
"""

from __future__ import annotations

from .base import GREP_PAGE_BYTES, LIST_PAGE, MAX_RESULTS_CAP, ServiceBase, Settings, Token
from .files import Files
from .grep_scope import indexed_batches, narrows
from .searching import Searching
from .symbols import Symbols
from .writes import Writes


class Service(Searching, Symbols, Files, Writes, ServiceBase):
    """Every tool's logic (see the modules of this package)."""


__all__ = [
    "GREP_PAGE_BYTES",
    "LIST_PAGE",
    "MAX_RESULTS_CAP",
    "Service",
    "Settings",
    "Token",
    "indexed_batches",
    "narrows",
]
