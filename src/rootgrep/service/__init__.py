"""The service: every tool's logic over a list of effective roots, shared by server and CLI.

Methods are synchronous and blocking (walks, reads, RE2 scans): callers run them in worker
threads. Each takes the effective roots of the call and, for long work, a ``Token`` that is set
when one of those roots is removed mid-call, so it stops with ``root_removed``. Every
authorization decision (a path mapped to a root, or refused) goes to the audit log.

One module per concept: ``base`` (settings, tokens, cursors, locating a path), ``searching``
(grep, find_files, search, reindex), ``symbols`` (find_symbol, outline), ``files`` (reading
and listing), ``writes``.
"""

from __future__ import annotations

from .base import LIST_PAGE, MAX_RESULTS_CAP, ServiceBase, Settings, Token
from .files import Files
from .searching import GREP_PAGE_BYTES, Searching, _indexed_batches, narrows
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
    "_indexed_batches",
    "narrows",
]
