"""The per-root Tantivy store: schema, on-disk layout, sync, and queries.

Layout (one folder per root and schema version under the cache dir, named by a hash of the
root's canonical path and the version: ``cache.folder_name``):
``manifest.json`` (schema version, root path), ``tantivy/`` (the index), ``state.bin`` (what
each indexed file's (size, mtime_ns, inode) and file id were; a compact binary file, since it
is rewritten at every commit and read by every process that follows the index). A file's id
(``fid``, a fast field) maps a hit back to its path without fetching stored documents.

Crash safety: before each commit, ``state.bin`` is rewritten as the union of the committed and
the new entries, the new ones marked pending; after the commit it is rewritten without the
pending marks and without deleted files. A crash at any moment leaves a state that names every
document the index may hold, and pending entries are re-read by the next sync. Tantivy's commits
are atomic, and its lock admits one writer per index across processes.

The store knows nothing of MCP; it reads files only through the walker and the confinement
module, and reaches its own files only beneath the pinned cache dir (``cache.py``: fd-relative,
never through a link, each folder locked shared while it is open so eviction skips it).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import difflib
import itertools
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import re2
from tantivy import (
    Document,
    Filter,
    Index,
    Occur,
    Query,
    SchemaBuilder,
    TextAnalyzerBuilder,
    Tokenizer,
)

from .. import confine, memory, symbols
from ..confine import Beneath, display
from ..errors import RootgrepError
from ..grep import DEFAULT_MAX_FILE_SIZE, cut_around, text_of
from ..symbols import Symbol
from ..walker import Listings, Walker, WalkOptions, order_key, path_batches
from . import cache as cache_mod
from . import snippets
from .cache import OPEN_LOCK, CachedIndex, CacheDir, IndexFolder
from .cache import default_cache_dir as default_cache_dir  # (re-exported)
from .parse import (
    HELPER_MIN_BYTES,
    MINOR,
    ParseHelper,
    SharedParse,
    SymbolFields,
    decode_symbols,
    symbol_fields,
)
from .plan import Q
from .state import (
    ENTRY_BYTES,
    FOLD_MIN,
    JOURNAL_FILE,
    STATE_FILE,
    Entries,
    Entry,
    IndexCorrupt,
    Journal,
    Layered,
    decode_state,
    encode_record,
    encode_state,
    journal_room,
    new_generation,
    replay,
)
from .state import read_state as read_state  # (re-exported: the state file's readers)
from .state import write_state as write_state

log = logging.getLogger("rootgrep.index")
_T = TypeVar("_T")

# The schema version: set in cache.py (which names each version's folders by it: versions
# never share one) and read from there at run time; re-exported here. Its history:
# 2: trigrams keep their case; 3: binary state; 4: bound to a directory;
# 5: symbols (``sym``, ``defs``, ``symbols``) and the ``low`` (test/vendored/generated) flag;
# 6: no stored copy of the files (snippets and grep read the files themselves), and no
# positions (phrases are checked on the files); 7: one ``sym`` field for every symbol name
# (``defs`` and ``main`` folded into it), symbols stored compactly, without signatures;
# 8: ``content`` cut by the simple tokenizer over ``word_text`` (``_`` stored as ``WORD_JOIN``);
# 9: a large file's trigrams in pieces cut at line ends (``tri_pieces``: part documents);
# 10: every file's trigrams in part documents only (its main document holds none), so a
# build commits them first, ready for grep, and its words and symbols after (``_complete_locked``);
# 11: a file's key holds its ctime (``state.Entry``: an edit that keeps the size and sets the
# mtime back is seen); 12: ``parts``, the sub-words of the compound names a file defines
SCHEMA_VERSION = cache_mod.SCHEMA_VERSION
WRITER_HEAP = 192_000_000
PROGRESS_SECONDS = 0.25
# two indexing threads: one made one segment of F instead of four (0.32× the text, not
# 0.35×) with about 10% less CPU, but wrote it in the final commit, alone: 34.3 s wall on a
# quiet machine, where two took 25.9 s (schema 7)
WRITER_THREADS = 2
SYNC_STARTS = 4  # a sync starts again at most this often while other processes write
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
_WORD_RE = r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+"  # a word of the ``code`` tokenizer
_LONG_WORD = 64  # longer words are not indexed (too long to be asked for)
_CODE = (
    TextAnalyzerBuilder(Tokenizer.regex(_WORD_RE))
    .filter(Filter.lowercase())
    .filter(Filter.remove_long(_LONG_WORD))
    .build()
)
_CODE_CASE = (  # query words as ``sym`` terms (case kept)
    TextAnalyzerBuilder(Tokenizer.regex(_WORD_RE)).filter(Filter.remove_long(_LONG_WORD)).build()
)
# The ``content`` field holds the ``code`` tokenizer's words, cut faster: tantivy's regex
# tokenizer runs one regex search per word (on F, 4× the CPU of its simple tokenizer, which
# cuts at every character that is not alphanumeric). So a file's words are cut by the simple
# tokenizer from ``word_text``, a rewrite of its bytes made to give the same words, each as
# often: ``_`` is stored as ``WORD_JOIN`` (a letter: it stays inside a word, and no other
# letter beyond ASCII is left). A word takes up to two bytes per character then, so the
# length cap in bytes is doubled: every word under ``_LONG_WORD`` characters is kept, and
# some longer ones (never asked for: a query drops them) too.
WORD_JOIN = "\u00b5"  # MICRO SIGN
_WORDS = (
    TextAnalyzerBuilder(Tokenizer.simple())
    .filter(Filter.lowercase())
    .filter(Filter.remove_long(2 * _LONG_WORD - 1))
    .build()
)
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_RE2_OPTIONS.encoding = re2.Options.Encoding.LATIN1  # (byte by byte: a stray byte separates)
# a run of digits that starts a word, and the word character after it ("0x1F": 0, x1f)
_DIGITS_THEN_WORD = re2.compile(rb"(?:^|[^A-Za-z0-9_])[0-9]+[A-Za-z_]", _RE2_OPTIONS)._regexp
_UNANCHORED = re2._Anchor.UNANCHORED


def word_text(data: bytes) -> str:
    """The text the simple tokenizer cuts into the ``code`` tokenizer's words of ``data``
    (``_`` as ``WORD_JOIN``): each byte beyond ASCII is a separator (the regex's words are
    ASCII: a UTF-8 character, valid or not, only ever separates them), and a space goes
    between a run of digits that starts a word and the letter or ``_`` after it (the regex
    cuts "0x1F" into 0 and x1f). RE2 finds those runs (Python's ``re.sub`` costs three
    times as much on F)."""
    match, n, pos, last = _DIGITS_THEN_WORD.Match, len(data), 0, 0
    parts: list[bytes] = []
    while True:
        span = match(_UNANCHORED, data, pos, n)[0]
        if span[0] < 0:
            break
        cut = span[1] - 1  # (the letter after the digits)
        parts.append(data[last:cut])
        last = pos = cut
    if parts:
        parts.append(data[last:])
        data = b" ".join(parts)
    return data.decode("ascii", "replace").replace("_", WORD_JOIN)


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


def word_term(token: str) -> str:
    """A ``code`` token as the ``content`` field stores it."""
    return token.replace("_", WORD_JOIN)


MAX_SYMBOL_DOCS = 2_000  # find_symbols reads at most this many files' stored symbols
NEAR_SYMBOL_DOCS = 50  # files whose symbols a "did you mean" reads, at most
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
# per query word (see ``rank``): a definition of that name (any case), of that very name, of
# that very name and not a variable or constant; the file name holds it; the content does.
# CASE > NAME: the very name's definition outranks a file named after the word that defines
# it in another case (anyhow's `trait Context` in lib.rs over context.rs's `fn context`)
DEF_SIGNAL, CASE_SIGNAL, MAIN_SIGNAL, NAME_SIGNAL, WORD_SIGNAL = 8.0, 5.0, 2.0, 4.0, 2.0
PART_SIGNAL = 3.0  # the file defines a compound name holding the word (``parts``)
LOW_FACTOR = 0.5  # what a low file's signals and BM25 count for
MAX_SNIPPETS = 6  # lines per search hit
SNIPPET_LINE_CHARS = 300  # a longer snippet line is a window around its match (SPEC §8)
# natural-language queries: these words are dropped (SPEC §9); see ``ParsedSearch.natural``
_STOP = (
    "a about an and any are as at be been by can defined define defines definition "
    "declared declaration do does done find for from get gets happen happens handle "
    "handled here how i implemented implementation in into is it its located location me "
    "of on or show shows that the their them there this to use used uses using via was "
    "what when where which who whom why will with work works"
)
STOP_WORDS = frozenset(_STOP.split())
# the stop words that only frame a question ("where is X defined"): never taken for the name
# asked about, even where the code defines a symbol so named (the others, such as ``use``,
# ``get``, ``handle`` or ``done``, are put back when the index defines them: ``rank``)
_FRAME_WORDS = (
    "a an are defined define defines definition declared declaration how i implemented "
    "implementation in is it its located me of show the this what where which who why"
)
_FRAME = frozenset(_FRAME_WORDS.split())
_PUNCTUATION = ".,:;!?\"'()[]{}<>`"


def index_dir_for(cache_dir: str, root_path: bytes) -> str:
    """Where a root's index folder is (a name, for messages and tests: never opened by it)."""
    return os.path.join(os.path.abspath(cache_dir), cache_mod.folder_name(root_path))


def _dir_bytes(d: str) -> int:
    """The bytes of the files below folder ``d`` (pinned, then fd-relative, links unfollowed)."""
    fs = Beneath.pin(d, symlinks="never", hides=False)
    try:
        return cache_mod.tree_bytes(fs.fd)
    finally:
        fs.close()


def _cache(cache_dir: str | CacheDir) -> tuple[CacheDir, bool]:
    """The pinned cache dir, and whether it was pinned here (then the caller closes it)."""
    if isinstance(cache_dir, CacheDir):
        return cache_dir, False
    return CacheDir.open(cache_dir), True


def cached_indexes(cache_dir: str | CacheDir) -> list[CachedIndex]:
    """Every index folder in the cache (a folder with a readable manifest)."""
    cache, own = _cache(cache_dir)
    try:
        return cache.entries()
    finally:
        if own:
            cache.close()


def prune_cache(cache_dir: str | CacheDir, max_bytes: int, keep: set[str]) -> list[str]:
    """Evict the least recently used indexes until the cache holds at most ``max_bytes``;
    indexes in ``keep`` (folder paths or names in use here) and indexes any process holds
    open are never evicted. Returns the evicted folders."""
    cache, own = _cache(cache_dir)
    try:
        return cache_mod.prune(cache, max_bytes, keep)
    finally:
        if own:
            cache.close()


def _schema():  # type: ignore[no-untyped-def]
    sb = SchemaBuilder()
    # Only ``symbols`` is stored: every other answer comes from the files as they are now,
    # read beneath the root (a stored copy of each file would double the index and be stale)
    sb.add_unsigned_field("fid", indexed=True, fast=True)
    sb.add_text_field("path", tokenizer_name="raw")
    sb.add_text_field("name", tokenizer_name="code")
    sb.add_text_field("ext", tokenizer_name="raw")
    # word counts without positions (a phrase is checked on the file itself: ``ParsedSearch.
    # holds_phrases``); positions would cost more than a third of the index
    # (the ``code`` tokenizer's words, cut from ``word_text``: see ``_WORDS``)
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


@dataclass
class SyncStats:
    files: int = 0
    bytes: int = 0
    added: int = 0
    updated: int = 0
    removed: int = 0
    read: int = 0  # files whose bytes were read (the rest were unchanged)
    # files an earlier sync left bare (a build interrupted between its commits) that this one
    # gave their words and symbols (``left_bare``: those files, when it began; None: none)
    finished: int = 0
    left_bare: set[bytes] | None = field(default=None, repr=False)
    elapsed_ms: float = 0.0
    # when the index was ready for grep (its trigrams committed), from the sync's start: a
    # build commits every file's words and symbols after that (None: nothing was deferred)
    grep_ready_ms: float | None = None


Progress = Callable[[int, int | None, str], None]


class WriterBusy(Exception):
    """Another writer (usually another process) holds this index's lock."""


class ForeignIndex(Exception):
    """The index at a root's path was built from another directory, and another process
    writes it: this process must not answer from it."""


class _StateMoved(Exception):
    """Another process wrote the index between a sync's start and its taking the writer."""


def first_line(e: BaseException, limit: int = 200) -> str:
    """An error as one short line (tantivy's quote a whole ``meta.json``: cut before it)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = text.split(" Content:", 1)[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Damaged(Exception):
    """The tantivy folder does not open (a torn ``meta.json``, a segment that is not whole):
    set aside and made again (``RootIndex._open``)."""


def paths_by_fid(entries: dict[bytes, Entry]) -> dict[int, bytes]:
    """Each indexed file's path by its id; raises ``IndexCorrupt`` when two paths share one."""
    return dict(Entries(entries).paths)


class _Ticker:
    """Progress of one sync: at its start, about every ``PROGRESS_SECONDS`` while it walks,
    and at its end (with the total, known once the walk is over)."""

    def __init__(self, progress: Progress | None, *, full: bool) -> None:
        self.progress = progress if full else None
        self.next = time.monotonic() + PROGRESS_SECONDS
        self.said = 0  # (each count is said once: a listener hears no message twice)
        if self.progress is not None:
            self.progress(0, None, "re-syncing: walking the tree")

    def __call__(self, examined: int) -> None:
        if self.progress is None or examined == self.said or time.monotonic() < self.next:
            return
        self.next = time.monotonic() + PROGRESS_SECONDS
        self.said = examined
        self.progress(examined, None, f"{examined} files examined")

    def done(self, examined: int, stats: SyncStats) -> None:
        if self.progress is not None:
            self.progress(examined, examined, f"{examined} files examined, {stats.read} read")


# a re-sync's run of one directory's files: (directory fd, the prefix of their root-relative
# paths, names, stats, keys), the stat and key None for a name that is not a regular file
# within the size limit (``confine.stat_keyed``)
_Run = tuple[
    int,
    bytes,
    list[bytes],
    list["os.stat_result | None"],
    list["confine.FileKey | None"],
]
# what the last full re-sync found of a run as the state held it (see ``RootIndex._runs``):
# (the listing's names list, the state's keys of those files, how many the state holds, the
# prefix of their paths)
_KeptRun = tuple[list[bytes], list[Any], int, bytes]


class _WalkCheck:
    """What a full re-sync's walk (``RootIndex._walk``) does besides yielding runs: it counts
    the names it examined (``examined``) and says progress (``tick``), and it leaves out the
    runs it finds as the state holds them: ``last``, the runs the last full re-sync found so
    (``RootIndex._runs``, or empty: none to trust), but those of the directories in
    ``dirty``; ``checked``, those this walk finds so (the next one's ``last``; the sync's
    loop adds those it checks against the state); ``unread``, the runs left out, and
    ``known``, how many of the state's files they hold."""

    __slots__ = ("checked", "dirty", "examined", "known", "last", "tick", "unread")

    def __init__(
        self,
        last: dict[int, _KeptRun],
        dirty: set[bytes],
        checked: dict[int, _KeptRun],
        tick: Callable[[int], None] | None,
    ) -> None:
        self.last = last
        self.dirty = dirty
        self.checked = checked
        self.tick = tick
        self.unread: list[_KeptRun] = []
        self.examined = 0
        self.known = 0


@dataclass
class RootIndex:
    """One root's index. Thread-safe for readers; one sync at a time (and one writer per
    index across processes, by Tantivy's lock)."""

    cache_dir: str
    root_path: bytes
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    hold_writer: bool = False  # a daemon keeps the writer (and its lock) for its whole life
    cache: CacheDir | None = None  # the pinned cache dir (None: pinned here from cache_dir)
    dir: str = field(init=False)
    folder: IndexFolder = field(init=False, repr=False)
    _own_cache: bool = field(init=False, default=False, repr=False)
    _tantivy_path: str = field(init=False, default="", repr=False)
    index: Index = field(init=False)
    schema: object = field(init=False)
    # one version of each (a new one per commit, never changed in place; swapped together
    # under ``_lock``): ``paths`` is ``entries.paths``
    entries: Entries = field(init=False, default_factory=Entries)
    paths: Layered[int, bytes] = field(init=False, default_factory=Layered)
    next_fid: int = field(init=False, default=1)
    synced_at: float | None = field(init=False, default=None)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)  # state swaps
    _sync_lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _state_stamp: tuple[int, ...] | None = field(init=False, default=(-1, -1, -1))
    _journal: Journal = field(init=False, default_factory=Journal)
    _snapshot_bytes: int = field(init=False, default=0)
    # (inode, mtime_ns, size) of the snapshot file the state in memory was read from (or
    # written as); None when not known for sure (then never followed, always read whole)
    _snapshot_id: tuple[int, int, int] | None = field(init=False, default=None)
    identity: tuple[int, int] | None = None  # (device, inode) of the pinned root directory
    corrupt: bool = field(init=False, default=False)  # the state broke an invariant
    foreign: bool = field(init=False, default=False)  # its writer indexes another directory
    _writer: Any = field(init=False, default=None)
    _order: tuple[Layered[int, bytes], dict[int, int], list[bytes]] | None = field(
        init=False, default=None
    )
    # the last ``not_searched``: (entries, skips, (directory, pruned), counts)
    _unsearched: tuple[Entries, object, object, tuple[int, int, int, int]] | None = field(
        init=False, default=None
    )
    # the writer's own (under ``_sync_lock``): for one version of ``entries``, how many
    # entries each directory holds at any depth (built when first asked for)
    _dirs: tuple[Entries, dict[bytes, int]] | None = field(init=False, default=None)
    # the writer's own: what the last full walk kept of each directory of the tree, so a
    # re-sync lists again only the directories that changed (it stats every file)
    # (kept from the second full walk on: a process that syncs once, a CLI's ``index``,
    # pays nothing for them; ``_walks`` counts this object's full walks)
    _listings: Listings = field(init=False, default_factory=Listings, repr=False)
    _walks: int = field(init=False, default=0, repr=False)
    # what the last whole walk left out, per directory: (hidden, ignored) entries of its
    # listing (``Walker.skips``), and files over ``max_file_size`` per run of file names
    # (id of the names list -> (names, prefix, count)): a search's coverage line
    _skips: dict[bytes, tuple[int, int]] = field(init=False, default_factory=dict, repr=False)
    _large: dict[int, tuple[list[bytes], bytes, int]] = field(
        init=False, default_factory=dict, repr=False
    )
    # the writer's own: the runs of files the last full re-sync found as the state holds
    # them (``_KeptRun``), by the ``id`` of the listing's names list (which each holds: no
    # other list has that id while it is here), for ``_runs_of``, the version of ``entries``
    # they were checked against (kept up by each commit of this process: the directories it
    # changed go in ``_runs_dirty``, whose runs no longer hold, until the next full walk
    # replaces them). (No dict per directory nor tuple per run made by a re-sync that finds
    # them all: nothing for the cyclic GC, whose full passes over the index's objects cost a
    # re-sync of F a tenth of its time.)
    _runs: dict[int, _KeptRun] = field(init=False, default_factory=dict, repr=False)
    _runs_dirty: set[bytes] = field(init=False, default_factory=set, repr=False)
    _runs_of: Entries | None = field(init=False, default=None, repr=False)
    # whether the last second commit had a parse helper (``parse.ParseHelper``), for tests
    last_helped: bool = field(init=False, default=False, repr=False)
    # a sync's writer (not held between syncs) kept from its first commit for its second
    _carried: Any = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        if self.cache is None:
            self.cache, self._own_cache = CacheDir.open(self.cache_dir), True
        try:
            # pinned beneath the cache fd, never through a link; locked shared until close
            folder = self.cache.open_index(self.root_path)
            assert folder is not None  # (made when missing)
            self.folder = folder
        except BaseException:
            self._close_cache()
            raise
        try:
            self._open()
        except BaseException:
            self.folder.close()
            self._close_cache()
            raise
        self._evict_older()

    def _evict_older(self) -> None:
        """Remove this root's index folders of older schemas that no process holds (an older
        rootgrep's daemon still running keeps its own: see ``CacheDir.evict_older``)."""
        assert self.cache is not None
        try:
            gone = self.cache.evict_older(self.root_path, cache_mod.SCHEMA_VERSION)
        except (OSError, RootgrepError) as e:  # (the cache listing: left to the LRU prune)
            log.warning("index of %r: older versions' folders not removed: %s", self.dir, e)
            return
        for d in gone:
            log.info("removed %s, the index of an older rootgrep version", d)

    def _open(self) -> None:
        self.dir = self.folder.path
        self.schema = _schema()
        made = self._made()
        try:
            if made:
                self._open_made()
            else:  # another process may be making it at this moment: one at a time (else
                with self.folder.exclusive(OPEN_LOCK):  # one removes what the other made)
                    self._open_made()
        except _Damaged as e:  # set aside and made again, once (a second failure is raised)
            cause = e.__cause__ or e
            with self.folder.exclusive(OPEN_LOCK), self.folder.writer_lock("tantivy") as mine:
                # (another process writes it: its merge may have moved a segment under this
                # open; never set aside what someone writes)
                if not mine:
                    raise cause from None
                self._set_aside(first_line(cause))
            self._open_made_locked()
        if self.hold_writer:
            self._writer = self._new_writer()

    def _made(self) -> bool:
        """Whether the index is there, for this schema and root (then opening it makes
        nothing, and needs no lock)."""
        if not self._manifest_ok():
            return False
        try:
            self.folder.fs.stat([b"tantivy", b"meta.json"], follow=False)
        except (OSError, RootgrepError):
            return False
        return True

    def _open_made_locked(self) -> None:
        with self.folder.exclusive(OPEN_LOCK):
            self._open_made()

    def _open_made(self) -> None:
        """Open the index, made (or made again) first when missing or stale."""
        stale = not self._manifest_ok()
        if stale:
            self.folder.remove("tantivy")
            for old in (STATE_FILE, JOURNAL_FILE, "state.json"):  # (1 and 2: JSON)
                self.folder.remove(old)
        # tantivy opens by path (see cache.py): the folder's own, checked against its fd
        self._tantivy_path, fresh = self.folder.subdir_path("tantivy")
        if fresh:  # (a state naming documents of an index that is not there would lie)
            self.folder.remove(STATE_FILE)
            self.folder.remove(JOURNAL_FILE)
        fresh = fresh or stale
        try:
            self.index = Index(self.schema, path=self._tantivy_path, reuse=True)
        except ValueError as e:  # (a torn meta.json, a segment whose footer is not whole)
            raise _Damaged("it does not open") from e
        # searchers move only with ``reload`` (under the lock, with the state that names the
        # documents: a file id is only ever read with the state it belongs to), never on
        # their own as a commit (this process's or another's) lands
        self.index.config_reader(reload_policy="Manual")
        self.index.register_tokenizer("tri", TRIGRAMS)  # not persisted: register on every open
        self.index.register_tokenizer("code", _CODE)
        self.index.register_tokenizer("words", _WORDS)
        stamp = self._stamp()  # (taken before the read: never newer than it)
        self._load_state()
        self._state_stamp = stamp
        bound = self._bound_identity()
        if self.identity is not None and not fresh and bound != self.identity:
            # the index describes another directory once found at this path (moved away,
            # replaced): never answer from it; empty it, or leave it to the process writing it
            with self._sync_lock:
                try:
                    self._reset()
                except WriterBusy:
                    raise ForeignIndex(
                        "another process indexes a different directory at this path"
                    ) from None
            log.warning("the index of %r was made for another directory; rebuilding", self.dir)
        if fresh or bound != self.identity:
            self._write_manifest()
        self.touch()

    def _close_cache(self) -> None:
        if self._own_cache and self.cache is not None:
            self.cache.close()

    # -- files on disk -----------------------------------------------------------------------

    def _read_manifest(self) -> dict[str, Any] | None:
        return self.folder.read_json("manifest.json")

    def _manifest_ok(self) -> bool:
        m = self._read_manifest()
        if m is None:
            return False
        schema = cache_mod.SCHEMA_VERSION
        return m.get("schema_version") == schema and m.get("root") == _b64(self.root_path)

    def _bound_identity(self) -> tuple[int, int] | None:
        """(device, inode) of the directory the index was built from, from its manifest."""
        m = self._read_manifest() or {}
        dev, ino = m.get("root_dev"), m.get("root_ino")
        return (dev, ino) if isinstance(dev, int) and isinstance(ino, int) else None

    def _write_manifest(self, **extra: object) -> None:
        """The manifest: schema version and root (and the device and inode of the directory
        the index is made from), plus ``extra`` fields (JSON values)."""
        manifest: dict[str, object] = {
            "schema_version": cache_mod.SCHEMA_VERSION,
            "root": _b64(self.root_path),
            "root_display": display(self.root_path),
        }
        if self.identity is not None:
            manifest["root_dev"], manifest["root_ino"] = self.identity
        manifest.update(extra)
        self.folder.write("manifest.json", json.dumps(manifest, separators=(",", ":")).encode())

    def _read_state(self, at: Journal) -> tuple[dict[bytes, Entry], float | None] | None:
        """The snapshot with its journal applied (``at``: where this reader then stands).
        A writer replaces the snapshot before it drops the journal: the two read here belong
        together when the snapshot is still the same file after both reads."""
        self._snapshot_id = None
        for _ in range(8):
            before = _file_id(self.folder.stat(STATE_FILE))
            data = self.folder.read(STATE_FILE)
            if data is None:
                return None
            journal = self.folder.read(JOURNAL_FILE) or b""
            if before is not None and _file_id(self.folder.stat(STATE_FILE)) == before:
                self._snapshot_id = before  # (else: never followed, always read whole)
                break
        self._snapshot_bytes = len(data)
        return decode_state(data, journal, at)

    def _load_state(self) -> None:
        at = Journal()
        got = self._read_state(at)
        if got is None and self.index.searcher().num_docs:
            # (documents no state names: their file ids would be handed out again, to other
            # files; a snapshot is replaced whole, so only damage or a hand leaves this)
            log.warning("the index state in %s is missing or torn; rebuilding the index", self.dir)
            self.corrupt = True
        entries, synced_at = got or ({}, None)
        self._set_state(entries, synced_at, at)

    def _set_aside(self, why: str) -> None:
        """The tantivy folder moved aside (``tantivy.broken``) with the state naming its
        documents, so that the next open makes an empty index (under ``OPEN_LOCK``)."""
        aside = self.folder.set_aside("tantivy")
        for name in (STATE_FILE, JOURNAL_FILE):
            self.folder.remove(name)
        log.warning("the index in %s is damaged (%s); moved aside as %s and rebuilt from the "
                    "files", self.dir, why, aside)  # fmt: skip

    def rebuild(self, why: BaseException) -> None:
        """Set the index aside and start again empty (the next sync rebuilds it in full):
        for damage found after it opened (a ``meta.json`` torn since, a segment a commit
        cannot read). A held writer is let go first; searchers already taken keep reading
        the old files."""
        with self._sync_lock:
            if self._writer is not None:
                with contextlib.suppress(ValueError):
                    self._writer.rollback()
                with contextlib.suppress(ValueError):  # (its lock let go now, not at a GC)
                    self._writer.wait_merging_threads()
                self._writer = None
            self._let_carried_go()
            with self.folder.exclusive(OPEN_LOCK):
                with self.folder.writer_lock("tantivy") as mine:
                    if not mine:  # (another process writes it now: not this one's to drop)
                        raise why
                    self._set_aside(first_line(why))
                with self._lock:
                    self._open_made()
            self.corrupt = False
            if self.hold_writer:
                self._writer = self._new_writer()

    def _set_state(
        self, entries: dict[bytes, Entry] | Entries, synced_at: float | None, at: Journal
    ) -> None:
        try:
            state = entries if isinstance(entries, Entries) else Entries(entries)
        except IndexCorrupt as e:  # (a state written by a bug): rebuilt by the next sync
            log.error("the index state in %s is not valid (%s); it will be rebuilt", self.dir, e)
            state, synced_at = Entries(), None
            self.corrupt = True
        self.entries = state
        self.paths = state.paths
        self.next_fid = state.top_fid + 1
        self.synced_at = synced_at
        self._journal = at

    def _follow_journal(self) -> bool:
        """Apply what another process appended to the journal since this one read it (the
        snapshot unchanged); False when only a whole reload can tell.

        A writer replaces the snapshot before it drops the journal: the journal read here is
        the one of the snapshot this process holds only if that snapshot is still in place
        after the read (a stamp taken before cannot tell: a compaction may come between)."""
        journal = self.folder.read(JOURNAL_FILE)
        at = Journal(self._journal.generation, self._journal.applied)
        if journal is None or len(journal) < at.applied:
            return False
        held = self._snapshot_id
        if held is None or _file_id(self.folder.stat(STATE_FILE)) != held:
            return False
        changes: dict[bytes, Entry | None] = {}  # (the records' changes, applied below)
        synced_at = replay(changes, self.synced_at, journal, at, keep_gone=True)
        if at.foreign:  # (records of another snapshot: not the journal this state follows)
            return False
        try:
            state = self.entries.changed(changes)  # (time of the changes, not of the tree)
        except IndexCorrupt:
            return False  # (read whole: judged there)
        self._set_state(state, synced_at, at)
        return True

    def _save_state(self, entries: Mapping[bytes, Entry], synced_at: float | None) -> None:
        """Replace the snapshot (a new generation), then drop the journal it holds."""
        generation = new_generation()
        data = encode_state(entries, synced_at, generation)
        self.folder.write(STATE_FILE, data)
        self._snapshot_id = _file_id(self.folder.stat(STATE_FILE))
        self.folder.remove(JOURNAL_FILE)
        self._snapshot_bytes = len(data)
        self._journal = Journal(generation)
        self._state_stamp = self._stamp()  # (our own write: nothing to reload)

    def _record(
        self,
        entries: Mapping[bytes, Entry],
        synced_at: float | None,
        changes: Mapping[bytes, Entry | None],
    ) -> None:
        """Make the state on disk ``entries``: append ``changes`` (what differs from the
        state on disk) to the journal while it has room, else write a snapshot."""
        at = self._journal
        room = journal_room(self._snapshot_bytes) - at.applied
        # a change of a large part of the tree (a build) is a snapshot: no record is made
        if len(changes) * ENTRY_BYTES > room or len(changes) * 8 > len(entries):
            self._save_state(entries, synced_at)
            return
        record = encode_record(at.generation, synced_at, changes.items())
        st = self.folder.stat(JOURNAL_FILE)
        on_disk = 0 if st is None else st.st_size
        fits = len(record) <= room
        # (appended beside a snapshot another process wrote since, a record of this one's
        # generation would be passed over by every reader)
        ours = self._snapshot_id is not None
        ours = ours and _file_id(self.folder.stat(STATE_FILE)) == self._snapshot_id
        if not (at.generation and at.whole and on_disk == at.applied and fits and ours):
            self._save_state(entries, synced_at)
            return
        self.folder.append(JOURNAL_FILE, record)
        at.applied += len(record)
        self._state_stamp = self._stamp()

    def _stamp(self) -> tuple[int, ...] | None:
        st = self.folder.stat(STATE_FILE)
        if st is None:
            return None
        # (each snapshot replaces the file: a new inode, even within one timestamp tick;
        # the journal only grows until a snapshot drops it)
        log_st = self.folder.stat(JOURNAL_FILE)
        tail = (-1, -1) if log_st is None else (log_st.st_ino, log_st.st_size)
        return (st.st_ino, st.st_mtime_ns, st.st_size, *tail)

    def reload(self) -> None:
        """Pick up commits (also another process's) and the state that goes with them."""
        stamp = self._stamp()
        # a sync of this process owns the state while it runs (its file ids included):
        # loading the file then would hand out ids again from an older counter
        if not self._sync_lock.acquire(blocking=False):
            return
        try:
            with self._lock:
                self.index.reload()
                if stamp != self._state_stamp:
                    # (whether the snapshot is still the one held: told by the follow itself)
                    if stamp is None or not self._follow_journal():
                        self._load_state()
                    self._state_stamp = stamp
                    if self.identity is not None and self._bound_identity() != self.identity:
                        self.foreign = True  # its writer now indexes another directory
        finally:
            self._sync_lock.release()

    def is_current(self, fs: Beneath, rel: bytes) -> bool:
        """Whether the index holds ``rel`` as it is on disk now (or rightly lacks it)."""
        entry = self.entries.get(rel)
        try:
            st = fs.stat(rel, follow=False)
        except Exception:
            return entry is None
        return (
            entry is not None
            and not entry.pending
            and entry.key == (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
        )

    @property
    def ready(self) -> bool:
        """Synced in full at least once, and no entry pending. Asked by every indexed grep:
        the pending count is kept with each version of ``entries``."""
        return self.synced_at is not None and not self.entries.pending

    @property
    def complete(self) -> bool:
        """``ready``, and every file's words and symbols committed too (none ``bare``): only
        then do ``rank`` and ``find_symbols`` see every indexed file."""
        return self.ready and not self.entries.bare

    def bare_paths(self) -> list[bytes]:
        """The files committed for grep only (``Entry.bare``): their words and symbols are
        not in the index yet. One pass over the entries when there are any."""
        entries = self.entries
        return [p for p, e in entries.items() if e.bare] if entries.bare else []

    @property
    def size_bytes(self) -> int:
        return self.entries.bytes

    @property
    def file_count(self) -> int:
        return self.entries.files

    def count_below(self, place: bytes) -> tuple[int, int]:
        """(files, bytes of text) of the indexed files below ``place`` (a directory)."""
        below = place + b"/"
        sizes = [e.size for p, e in self.entries.items() if e.fid and p.startswith(below)]
        return len(sizes), sum(sizes)

    # -- sync --------------------------------------------------------------------------------

    def sync(
        self,
        fs: Beneath,
        *,
        only: Iterable[bytes] | None = None,
        progress: Progress | None = None,
        cancelled: Callable[[], bool] | None = None,
        grep_ready: Callable[[], None] | None = None,
        completing: Progress | None = None,
    ) -> SyncStats:
        """Bring the index up to date with the tree: re-read only files whose
        (size, mtime_ns, inode) changed, delete vanished ones. ``only`` limits the work to
        those root-relative paths (the watcher's dirty set).

        A full sync commits twice: every changed file's trigrams first (then ``grep_ready``
        is called: the index answers grep from here on), then their words and symbols
        (``_complete_locked``, which every sync also does for files a crash or a cancel left
        ``bare``). ``progress`` hears the files the walk examined, ``completing`` how many of
        the bare files have had their words and symbols added (done, of total).

        Invariant, checked before every state write: one path per file id. Should a sync
        ever break it, nothing is committed; the index is emptied and rebuilt in full."""
        started = time.perf_counter()
        with self._sync_lock:
            if self.identity is not None and self._bound_identity() != self.identity:
                # another process bound the index to another directory at this path since
                # it was opened (and stopped writing): this process writes it now, with its
                # own directory's files, so it empties it and binds it to that directory
                log.warning("the index in %s was bound to another directory; rebuilding", self.dir)
                self._reset()
                self._write_manifest()
                self.foreign = False
                only = None
            if self.corrupt:
                self._reset()
                only = None
            try:
                try:
                    stats = self._sync_from_latest(fs, only, progress, cancelled)
                except IndexCorrupt as e:
                    log.error("index of %r: %s; rebuilding it in full", self.root_path, e)
                    self._let_carried_go()
                    self._reset()
                    stats = self._sync_from_latest(fs, None, progress, cancelled)
                if self.entries.bare and not (cancelled is not None and cancelled()):
                    if self.ready:
                        stats.grep_ready_ms = stats.elapsed_ms
                        if grep_ready is not None:
                            grep_ready()
                    # the first commit's indexing memory, freed, given back before the second
                    # fills its own (glibc keeps it otherwise: at 100k files the second commit's
                    # peak was 28 MB higher, the first's 150 MB held through all of it)
                    memory.malloc_trim()
                    # (started again while another process's sync lands in between)
                    self._again(lambda: self._complete_locked(fs, stats, completing, cancelled))
                    stats.files = self.file_count
                    stats.elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
            finally:
                self._let_carried_go()
            return stats

    def _sync_from_latest(
        self,
        fs: Beneath,
        only: Iterable[bytes] | None,
        progress: Progress | None,
        cancelled: Callable[[], bool] | None,
    ) -> SyncStats:
        """A sync that starts again (from the state then on disk) while another process's
        sync lands between this one's start and its taking the writer (``_again``)."""
        return self._again(lambda: self._sync_locked(fs, only, progress, cancelled))

    def _again(self, step: Callable[[], _T]) -> _T:
        """``step`` (which reads the state and then takes the writer) started again while
        another process's sync lands in between (``_StateMoved``); at most ``SYNC_STARTS``
        times, then ``WriterBusy`` (that process keeps writing: follow it)."""
        for _ in range(SYNC_STARTS):
            try:
                return step()
            except _StateMoved:
                log.info("index of %r: written by another process meanwhile; again", self.dir)
        raise WriterBusy("another process keeps writing this index")

    def _complete_locked(
        self,
        fs: Beneath,
        stats: SyncStats,
        progress: Progress | None,
        cancelled: Callable[[], bool] | None,
    ) -> None:
        """The second commit of a build: each bare file is read again (beneath its
        directory's fd, as the walk found it: never through a link) and its main document
        added. A file changed since its trigrams were committed is indexed anew, trigrams and
        all, as a sync of it would; a file gone, or no longer a regular file, is deleted.
        The state is written as a sync writes it (the entries pending until the commit has
        landed: a crash in between re-reads them in full). Cancelled (between two files),
        it commits nothing and the files stay bare (grep-ready), for the next sync."""
        self._catch_up()
        with self._lock:
            base = self.entries
        if not base.bare:
            return
        todo = sorted((rel for rel, e in base.items() if e.bare), key=order_key)
        total = len(todo)
        # (the first commit's writer, kept: another of 192 MB taken after it was let go
        # raised the build's peak memory by 70 to 170 MB)
        writer, self._carried = self._carried or self._sync_writer(), None
        changes: dict[bytes, Entry | None] = {}
        limit, get = self.max_file_size, base.getter()
        next_tick = time.monotonic() + PROGRESS_SECONDS

        def add_main(item: tuple[int, bytes, bytes, os.stat_result], f: SymbolFields) -> None:
            writer.add_document(self._main_document(*item, fields=f))

        # (the parse, most of this commit's time, shared with a helper process on large
        # builds: ``parse.py``)
        helped = sum(e.size for e in map(get, todo) if e is not None) >= HELPER_MIN_BYTES
        shared = SharedParse(add_main, ParseHelper.start() if helped else None)
        self.last_helped = shared.helper is not None
        try:
            batches = path_batches(fs, todo)
            for batch in batches:
                try:
                    if cancelled is not None and cancelled():
                        return
                    if progress is not None and time.monotonic() >= next_tick:
                        next_tick = time.monotonic() + PROGRESS_SECONDS
                        progress(len(changes), total, f"words and symbols: {len(changes)} of "
                                 f"{total} files")  # fmt: skip
                    for f in batch.files:
                        # (a file at a time: one directory of 5,000 files took 10 s to stop)
                        if cancelled is not None and cancelled():
                            return
                        rel, old = f.path, get(f.path)
                        assert old is not None and old.fid
                        got = confine.read_searchable_stat_at(batch.fd, f.name, limit)
                        if got is None:  # (gone, or no longer a regular file: below)
                            continue
                        data, st = got
                        key = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
                        if data is not None and key == old.key:
                            # (the old entry's numbers and key, shared: the stat's own are
                            # let go, some 150 bytes a file while both versions are held;
                            # 15 of the 127 MiB of Python objects at the peak of 100k files)
                            new = Entry(old.fid, *old.key, pending=True, linked=old.linked)
                            new.key = old.key
                            text = text_of(data)
                            shared.add((old.fid, rel, text, st), rel, text)
                        else:  # (changed since its trigrams were committed)
                            writer.delete_documents_by_query(self._fid_query(old.fid))
                            stats.updated += 1
                            new = Entry(old.fid if data is not None else 0, *key, pending=True,
                                        linked=st.st_nlink > 1)  # fmt: skip
                            if data is not None:
                                text = text_of(data)
                                self._add_trigrams(writer, old.fid, text)
                                writer.add_document(self._main_document(old.fid, rel, text, st))
                        changes[rel] = new
                finally:
                    batch.close()
            batches.close()  # (its directory fds at once, not when it is dropped)
            if cancelled is not None and cancelled():
                return
            shared.finish()
            for rel in todo:  # (not read above: gone, or its directory is)
                if rel not in changes:
                    old = get(rel)
                    assert old is not None
                    writer.delete_documents_by_query(self._fid_query(old.fid))
                    changes[rel] = None
                    stats.removed += 1
            self._stage(base, changes)
            writer.commit()
            left = stats.left_bare or ()
            for rel, entry in changes.items():
                if entry is not None:
                    entry.pending = False
                    stats.finished += entry.fid != 0 and rel in left
            final = base.changed(changes)
            self._record(final, self.synced_at, changes)
            if self._writer is None:  # (let other processes write between syncs)
                writer.wait_merging_threads()
            writer = None
            moved = [r for r, e in changes.items() if e is None or e.key != get(r).key]
            if self._runs_of is base:  # (the runs kept hold but for the files that moved)
                self._runs_of = final
                self._runs_dirty.update(rel[: rel.rfind(b"/") + 1] for rel in moved)
            with self._lock:
                self.index.reload()
                self.entries = final
                self.paths = final.paths
            gone = [r for r, e in changes.items() if e is None]
            self._follow_dirs(base, final, {}, gone)
            if progress is not None:
                progress(total, total, f"words and symbols: {total} files")
        finally:
            shared.close()
            if writer is not None:
                writer.rollback()
                if self._writer is None:
                    writer.wait_merging_threads()

    def _let_carried_go(self) -> None:
        """The first commit's writer, kept for a second commit that did not take it (a
        cancel, an error): let go, so other processes may write."""
        carried, self._carried = self._carried, None
        if carried is not None:
            carried.rollback()
            carried.wait_merging_threads()

    def _stage(self, base: Entries, changes: Mapping[bytes, Entry | None]) -> None:
        """The state written before a commit (``_staging``): made, written and let go (a
        build's is as large as the tree)."""
        staging = self._staging(base, changes)
        self._record(base.changed(staging), self.synced_at, staging)

    @staticmethod
    def _staging(base: Entries, changes: Mapping[bytes, Entry | None]) -> Mapping[bytes, Entry]:
        """The entries a state names before a commit lands (each pending: read again in full
        after a crash, whatever the commit holds). A file the commit stops indexing (gone,
        or now binary: file id 0) keeps its old id until then: after a crash before the
        commit, its documents are still there, and the re-read deletes them by that id (a
        state naming id 0 would leave them in the index for good)."""
        get = base.get
        if all(
            new is not None and ((old := get(rel)) is None or new.fid == old.fid or not old.fid)
            for rel, new in changes.items()
        ):  # (the usual case, a build's second commit's: ``changes`` itself, not a copy)
            return changes  # type: ignore[return-value]
        out: dict[bytes, Entry] = {}
        for rel, new in changes.items():
            old = get(rel)
            if old is not None and old.fid and (new is None or new.fid != old.fid):
                out[rel] = Entry(old.fid, *old.key, pending=True, linked=old.linked)
            elif new is not None:
                out[rel] = new
        return out

    def _reset(self) -> None:
        """Empty the index and its state (under the sync lock): the next sync rebuilds. The
        empty state is written first: a process following this index then never holds the
        old state (ready) with an emptied searcher."""
        writer = self._acquire_writer()
        try:
            self._save_state(Entries(), None)
            writer.delete_all_documents()
            writer.commit()
        finally:
            if self._writer is None:
                writer.wait_merging_threads()
        with self._lock:
            self.index.reload()
            self.entries = Entries()
            self.paths, self.synced_at = self.entries.paths, None
        self.next_fid = 1
        self.corrupt = False

    def _catch_up(self) -> None:
        """Before a sync's work (under the sync lock): when another process wrote the index
        since (a daemon that has since stopped), start from what it committed, so no file id
        is handed out twice across processes."""
        stamp = self._stamp()
        if self._writer is None and stamp != self._state_stamp:
            with self._lock:
                self.index.reload()
                self._load_state()
                self._state_stamp = stamp  # (taken before the read: never newer than it)

    def _sync_locked(
        self,
        fs: Beneath,
        only: Iterable[bytes] | None,
        progress: Progress | None,
        cancelled: Callable[[], bool] | None,
    ) -> SyncStats:
        started = time.perf_counter()
        stats = SyncStats()
        tick = _Ticker(progress, full=only is None)
        writer: Any = None  # created on the first change: an unchanged tree writes nothing
        files: Generator[_Run, None, None] | None = None  # (closed at the end: a failed
        # sync's walk too)
        self._catch_up()
        try:
            with self._lock:
                base = self.entries  # (a version: never changed in place)
            if base.bare:  # (only after an interrupted build: a walk of the entries then)
                stats.left_bare = {rel for rel, e in base.items() if e.grep_only}
            # ids are never handed out twice, whatever state was loaded meanwhile
            self.next_fid = max(self.next_fid, base.top_fid + 1)
            # the files a watcher named are read again whatever their key says (an edit within
            # one tick of the clock, or of a file system that keeps no ctime, leaves it)
            forced: set[bytes] = set()
            if only is not None:
                only = forced = set(only)
                if any(p not in base for p in only):  # (a directory among them, maybe)
                    only = _with_files_below(only, base, self._dirs_of(base))
            changed: dict[bytes, Entry] = {}
            deleted: list[bytes] = []
            before = len(base)
            walked: list[bytes] = []  # every file found (a list: cheaper than a set)
            known = 0  # how many of them the index already had
            examined = 0
            get: Callable[[bytes], Entry | None] | None = None  # (made when first needed)
            found = walked.append
            ticking = tick.progress is not None
            quick = not base.pending  # (a pending entry is read again whatever its key)
            if self._runs_of is not base:  # (a state loaded, or reset: nothing kept holds)
                self._runs, self._runs_dirty = {}, set()
            keeping = only is None and self._walks > 0  # (see ``_listings``)
            # a full sync commits the files' trigrams alone first (grep can use them at
            # once), then their words and symbols (``_complete_locked``: tree-sitter's parse, most
            # of a build's time); a sync of a few paths commits both at once
            defer = only is None
            checked: dict[int, _KeptRun] | None = {} if keeping else None
            check = _WalkCheck(
                self._runs if quick and checked is not None else {},
                self._runs_dirty,
                {} if checked is None else checked,
                tick if ticking else None,
            )
            files = (
                self._walk(fs, cancelled, check)
                if only is None
                else self._stat_each(fs, only, base)
            )
            for dirfd, prefix, names, sts, keys in files:
                if only is not None:  # (a full walk counts and ticks in ``_walk``)
                    if ticking:  # (the count before this run: the last is the total, said
                        tick(examined)  # once, by ``done``)
                    examined += len(names)
                rels = [prefix + name for name in names]
                if get is None:  # (a flat copy when the state has an overlay: once a sync)
                    get = base.getter(every=only is None)
                if quick and not changed and not forced:
                    olds = list(map(get, rels))
                    want = [None if old is None else old.key for old in olds]
                    if keys == want:  # (None in both: not a file here, nor in the state)
                        n = len(rels) - want.count(None)
                        if checked is not None:
                            checked[id(names)] = (names, want, n, prefix)
                        walked.extend(rels)
                        known += n
                        continue
                for name, rel, st, key in zip(names, rels, sts, keys, strict=True):
                    if st is None:
                        continue  # (no longer a regular file, or over the size limit)
                    found(rel)
                    old = get(rel) if not changed or rel not in changed else changed[rel]
                    if old is not None:
                        known += 1
                        if old.key == key and not old.pending and rel not in forced:
                            continue
                    if writer is None:
                        writer = self._sync_writer()
                    data = confine.read_searchable_at(dirfd, name, self.max_file_size)
                    stats.read += 1
                    if old is not None and old.fid:
                        writer.delete_documents_by_query(self._fid_query(old.fid))
                    fid = 0
                    if data is not None:
                        fid = old.fid if old is not None and old.fid else self._take_fid()
                        text = text_of(data)
                        self._add_trigrams(writer, fid, text)
                        if not defer:
                            writer.add_document(self._main_document(fid, rel, text, st))
                        stats.bytes += len(data)
                    if old is None:
                        stats.added += 1
                    else:
                        stats.updated += 1
                    changed[rel] = Entry(
                        fid,
                        st.st_size,
                        st.st_mtime_ns,
                        st.st_ino,
                        st.st_ctime_ns,
                        pending=True,
                        bare=defer and fid != 0,
                        linked=st.st_nlink > 1,
                    )
            if checked is not None and (cancelled is None or not cancelled()):
                # (runs of directories no longer walked: dropped)
                self._runs, self._runs_dirty = checked, set()
            if only is None:  # every entry the walk did not find is gone
                examined += check.examined
                known += check.known
                if known != before:
                    for names, _keys, _n, prefix in check.unread:
                        walked.extend([prefix + name for name in names])
                gone = set() if known == before else set(base).difference(walked)
            else:
                gone = set(only).difference(walked)
            for rel in sorted(gone):
                old = base.get(rel)
                if old is None:
                    continue
                if old.fid:
                    if writer is None:
                        writer = self._sync_writer()
                    writer.delete_documents_by_query(self._fid_query(old.fid))
                deleted.append(rel)
                stats.removed += 1
            if cancelled is not None and cancelled():
                return stats
            tick.done(examined, stats)
            synced = time.time() if only is None else self.synced_at
            if not changed and not deleted:
                if only is None and self.synced_at is None:
                    self._record(base, synced, {})
                    with self._lock:
                        self.synced_at = synced
                elif only is None:
                    with self._lock:
                        self.synced_at = synced
            else:
                # 1) a state naming every document the commit may hold, new ones pending
                # (``changed`` raises IndexCorrupt before anything is committed)
                self._stage(base, changed)
                if writer is not None:
                    writer.commit()
                for entry in changed.values():
                    entry.pending = False
                # 2) the committed state: a new version, in time of the changes
                now: dict[bytes, Entry | None] = {**changed, **dict.fromkeys(deleted)}
                final = base.changed(now)
                self._record(final, synced, now)
                del now
                if writer is not None:  # (kept until the state names the commit: a writer
                    if self._writer is None:  # taking it next starts from that state)
                        if final.bare:  # (kept for the second commit: ``_carried``)
                            self._carried = writer
                        else:
                            writer.wait_merging_threads()  # let other processes write
                    writer = None
                if self._runs:  # (their runs no longer hold)
                    self._runs_dirty.update(
                        rel[: rel.rfind(b"/") + 1] for rel in itertools.chain(changed, deleted)
                    )
                    if len(self._runs_dirty) > len(self._runs):  # (bounded: a daemon's
                        # watcher syncs between full walks may touch ever new directories)
                        self._runs, self._runs_dirty = {}, set()
                with self._lock:
                    self.index.reload()
                    self.entries = final
                    self.paths = final.paths
                    self.synced_at = synced
                self._follow_dirs(base, final, changed, deleted)
            self._runs_of = self.entries  # (the runs kept were checked against it)
        finally:
            try:
                if files is not None:  # (a walk given up holds directory fds: closed now,
                    files.close()  # not when the exception that ended it is dropped)
            finally:
                if writer is not None:
                    writer.rollback()
                    if self._writer is None:
                        writer.wait_merging_threads()
        stats.files = self.file_count
        stats.elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
        return stats

    def _dirs_of(self, entries: Entries) -> dict[bytes, int]:
        """How many entries each directory holds at any depth, for this version of the
        entries (built once, O(entries × depth); then kept up by ``_follow_dirs``)."""
        held = self._dirs
        if held is not None and held[0] is entries:
            return held[1]
        dirs: dict[bytes, int] = {}
        for rel in entries:
            for d in _ancestors(rel):
                dirs[d] = dirs.get(d, 0) + 1
        self._dirs = (entries, dirs)
        return dirs

    def _follow_dirs(
        self, base: Entries, final: Entries, changed: dict[bytes, Entry], deleted: list[bytes]
    ) -> None:
        """Carry the directory counts of ``base`` over to ``final`` (in time of the changes);
        dropped instead after a change of much of the tree (built again when asked for)."""
        held = self._dirs
        self._dirs = None
        if held is None or held[0] is not base or len(changed) + len(deleted) > FOLD_MIN:
            return
        dirs = held[1]
        for rel, step in [*((r, 1) for r in changed if r not in base), *((r, -1) for r in deleted)]:
            for d in _ancestors(rel):
                n = dirs.get(d, 0) + step
                if n > 0:
                    dirs[d] = n
                else:
                    dirs.pop(d, None)
        self._dirs = (final, dirs)

    def _walk(
        self, fs: Beneath, cancelled: Callable[[], bool] | None, check: _WalkCheck
    ) -> Generator[_Run, None, None]:
        """Every file of the tree with its stat, run by run (``_Run``), but the runs found as
        the state holds them (``check``). The walk lists again only the directories changed
        since the last one (``Listings``); every file is stat'ed.

        A run is left out when it is the very names list a run of ``check.last`` holds (a
        listing ``Listings`` kept: the directory unchanged, and the hidden identities the
        same, its scope) and each file's key (``confine.stat_keys``) is the one the state
        held for it then: it still holds it (a commit marks the directories it changed
        dirty). It costs no stat result, no step of the sync's loop, and no new object."""
        listings = self._listings if self._walks > 0 else None
        self._walks += 1
        walker = Walker(fs, b"", WalkOptions(), listings=listings)
        limit = self.max_file_size
        stat_keyed, stat_keys = confine.stat_keyed, confine.stat_keys
        last, dirty, checked = check.last, check.dirty, check.checked
        unread, tick = check.unread, check.tick
        examined = known = 0
        large, was_large = {}, self._large
        whole = False
        try:
            for fd, prefix, names in walker.runs():  # (each run is done before the next)
                if cancelled is not None and cancelled():
                    return
                if tick is not None:  # (the count before this run: the last is the total,
                    tick(examined)  # said once, by ``done``)
                examined += len(names)
                kept = last.get(id(names))
                if (
                    kept is not None
                    and kept[0] is names
                    and not (dirty and prefix in dirty)
                    and stat_keys(fd, names, limit) == kept[1]
                ):
                    checked[id(names)] = kept
                    unread.append(kept)
                    known += kept[2]
                    big = was_large.get(id(names))
                    if big is not None and big[0] is names:
                        large[id(names)] = big
                    continue
                over: list[int] = []
                sts, keys = stat_keyed(fd, names, limit, over)
                if over and over[0]:
                    large[id(names)] = (names, prefix, over[0])
                yield fd, prefix, names, sts, keys
            whole = True
        finally:
            check.examined, check.known = examined, known
            if whole:
                self._skips, self._large = walker.skips, large

    def _stat_each(
        self, fs: Beneath, paths: Iterable[bytes], entries: Mapping[bytes, Entry]
    ) -> Generator[_Run, None, None]:
        """``_Run``s for ``paths``, then for every other indexed
        name of the same files (a hard link made or written through one name changes them
        all, and the watcher only names the one it saw). Only a file with more than one
        name (``st_nlink``) can have another: the entries are looked through for its
        inode only then."""
        paths = set(paths)
        walked = Walker(fs).listed(paths)  # (what a full walk would not reach is gone)
        inos: set[int] = set()
        yield from self._stat_batches(fs, walked, inos)
        for rel in paths - walked:  # a name a walk skips (ignored, hidden) may be a link too
            try:
                st = fs.stat(rel, follow=False)
            except (OSError, RootgrepError):
                continue
            if confine.stat_mod.S_ISREG(st.st_mode) and st.st_nlink > 1:
                inos.add(st.st_ino)
        others = inos and {p for p, e in entries.items() if e.ino in inos and p not in walked}
        if others:
            yield from self._stat_batches(fs, Walker(fs).listed(others), set())

    def _stat_batches(self, fs: Beneath, paths: set[bytes], inos: set[int]) -> Iterable[_Run]:
        for batch in path_batches(fs, sorted(paths, key=order_key)):
            with batch:
                names = [fe.name for fe in batch.files]
                sts, keys = confine.stat_keyed(batch.fd, names, self.max_file_size)
                for st in sts:
                    if st is not None and st.st_nlink > 1:
                        inos.add(st.st_ino)
                yield batch.fd, batch.dir + b"/" if batch.dir else b"", names, sts, keys

    def touch(self) -> None:
        """Mark the index as used now (the cache evicts the least recently used first)."""
        self.folder.touch("last_used")

    def writer_busy(self) -> bool:
        """Whether another writer (a daemon) holds this index right now."""
        with self._sync_lock:  # (a sync of this process holding the writer is not "another")
            if self._writer is not None:
                return False
            try:
                w = self._new_writer()
            except WriterBusy:
                return True
            w.wait_merging_threads()
            return False

    def _sync_writer(self) -> Any:
        """The writer for a sync's changes. One not held between syncs is taken now: should
        another process have written the state since this sync read it (its sync landed
        while this one walked), it is let go and the sync starts again from that state
        (``_StateMoved``): else this one would write over that state with its own, older
        one, and hand out again the file ids that process handed out."""
        if self._writer is not None:
            return self._acquire_writer()
        writer = self._new_writer()
        if self._stamp() != self._state_stamp:
            writer.rollback()
            writer.wait_merging_threads()
            raise _StateMoved
        return writer

    def _acquire_writer(self) -> Any:
        if self._writer is not None:  # (a held writer: its path is checked at every sync too)
            self.folder.check_path(self._tantivy_path)
            return self._writer
        return self._new_writer()

    def _new_writer(self) -> Any:
        # tantivy writes by path: only while that path still names this folder's own
        self.folder.check_path(self._tantivy_path)
        try:
            writer = self.index.writer(heap_size=WRITER_HEAP, num_threads=WRITER_THREADS)
        except ValueError as e:
            if "Lock" in str(e):
                raise WriterBusy(str(e)) from None
            raise
        # What a writer killed mid-commit left (any process's: this one may have let the
        # writer go between syncs): its files the last commit does not name go, or the next
        # commit, reaching the same opstamp, fails on a delete file of the same name
        # (``<segment>.<opstamp>.del``: "FileAlreadyExists") in every process, for good.
        # Done only while holding the writer: then no other process writes there.
        try:
            writer.garbage_collect_files()
        except ValueError as e:  # (then a commit may fail, and says why)
            log.warning("index of %r: collecting unused files failed: %s", self.dir, e)
        self.folder.sweep_tantivy_temps("tantivy")
        return writer

    def close(self) -> None:
        """Release a held writer (its lock) after its merges finish, then the folder's lock
        (from then on the cache may evict it)."""
        with self._sync_lock:
            if self._writer is not None:
                self._writer.wait_merging_threads()
                self._writer = None
            self.folder.close()
            self._close_cache()

    def _fid_query(self, fid: int) -> Query:
        """Every document of a file (its main one and its part documents)."""
        # (deleting by an unsigned term does not match; a term query does)
        return Query.term_query(self.schema, "fid", fid)

    def _parts(self) -> tuple[Occur, Query]:
        """The clause that keeps part documents out of a boolean query (needed beside
        ``Query.all_query()``, or a query on ``fid`` or ``tri``: no other field is in them)."""
        return (Occur.MustNot, Query.term_query(self.schema, "part", 1))

    def _take_fid(self) -> int:
        fid = self.next_fid
        self.next_fid += 1
        return fid

    def _add_trigrams(self, writer: Any, fid: int, data: bytes) -> None:
        """A file's part documents: one per piece of its text (``tri_pieces``), each with the
        file's ``fid`` (deleting it deletes them all, and its main document)."""
        for piece in tri_pieces(data.decode("utf-8", "replace")):
            doc = Document(tri=piece)
            doc.add_unsigned("fid", fid)
            doc.add_unsigned("part", 1)
            writer.add_document(doc)

    def _main_document(
        self,
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

    # -- queries -----------------------------------------------------------------------------

    def tantivy_query(self, q: Q) -> Query:
        if q.op == "all":
            return Query.all_query()
        if q.op == "none":
            return Query.empty_query()
        if q.op == "tri":
            return Query.term_query(self.schema, "tri", q.tri)
        occur = Occur.Must if q.op == "and" else Occur.Should
        return Query.boolean_query([(occur, self.tantivy_query(a)) for a in q.args])

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
                (Occur.Should, Query.const_score_query(self._defines(tok), 0.0)),
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
            for tok in _CODE.analyze(phrase):  # file when it is shown: no positions stored)
                must.append((Occur.Must, Query.term_query(self.schema, "content", word_term(tok))))
        for w in p.exclude:  # whole words: a token of the code tokenizer ("test" ≠ "testing")
            for tok in _CODE.analyze(w):
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
            must.append(self._parts())
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
                (self._defines(tok), DEF_SIGNAL),
                (self._named(case), CASE_SIGNAL),
                (Query.term_query(self.schema, "sym", case), MAIN_SIGNAL),
                (Query.term_query(self.schema, "name", tok), NAME_SIGNAL),
                (Query.term_query(self.schema, "content", word_term(tok)), WORD_SIGNAL),
            ]
            # the word inside an identifier (``ParseDuration`` holds "duration"), weaker
            signals.append((Query.term_query(self.schema, "parts", tok), PART_SIGNAL))
            for j in joins.get(k, ()):  # (a file holding ``ParseDuration`` holds "parse")
                signals += [
                    (self._defines(j), DEF_SIGNAL),
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

    # -- symbols -----------------------------------------------------------------------------

    def _defines(self, word: str) -> Query:
        """Files defining ``word`` in any case."""
        return Query.regex_query(self.schema, "sym", "(?i)" + MINOR + "?" + _regex_literal(word))

    def _named(self, name: str) -> Query:
        """Files defining ``name`` exactly (of any kind)."""
        return Query.boolean_query([
            (Occur.Should, Query.term_query(self.schema, "sym", name)),
            (Occur.Should, Query.term_query(self.schema, "sym", MINOR + name)),
        ])  # fmt: skip

    def symbols_of(self, rel: bytes) -> list[Symbol] | None:
        """The stored symbols of one indexed file ([] for a language without symbols); None
        when the index does not hold the file."""
        with self._lock:
            searcher = self.index.searcher()
            entry = self.entries.get(rel)
        if entry is None or not entry.fid or entry.bare:  # (bare: no main document yet)
            return None
        q = Query.boolean_query([(Occur.Must, self._fid_query(entry.fid)), self._parts()])
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
            (Occur.Should, self._defines(name)),  # (the same name in another case)
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
            q = self._named(name)
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

    def not_searched(
        self, under: bytes = b"", prune: frozenset[bytes] = frozenset()
    ) -> tuple[int, int, int, int]:
        """What the tree below ``under`` (root-relative; b"": all) holds that no indexed
        search reads: (hidden entries, ignored entries, binary files, files over the size
        limit), as of the last whole walk (hidden and ignored entries, large files) and the
        entries now (binary files: file id 0). Counted once for a version of them and a
        directory (a search's coverage line)."""
        with self._lock:
            entries = self.entries
        skips, large = self._skips, self._large
        got = self._unsearched
        key = (under, prune)
        if got is not None and got[0] is entries and got[1] is skips and got[2] == key:
            return got[3]
        prefix = under + b"/" if under else b""
        # (below a nested root left to itself, nothing counts: that root's search says it)
        pruned = tuple(p + b"/" for p in prune)

        def counted(rel: bytes) -> bool:
            return rel.startswith(prefix) and not (pruned and (rel + b"/").startswith(pruned))

        binary = sum(1 for rel, e in entries.items() if not e.fid and counted(rel))
        hidden = ignored = 0
        for d, (h, i) in skips.items():
            if (not under or d == under or d.startswith(prefix)) and counted(d + b"/"):
                hidden, ignored = hidden + h, ignored + i
        big = sum(n for _, p, n in large.values() if counted(p))
        counts = (hidden, ignored, binary, big)
        self._unsearched = (entries, skips, key, counts)
        return counts

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


@dataclass
class ParsedSearch:
    """``search`` syntax: words (stop words dropped; of several, files holding more rank
    first), ``"phrases"``, ``-word`` excludes (``-"a phrase"``: files holding it, not each
    of its words), ``path:GLOB`` and ``ext:py`` filter (``-ext:md`` excludes)."""

    words: list[str] = field(default_factory=list)
    phrases: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    not_phrases: list[str] = field(default_factory=list)  # excluded, of several words
    exts: list[str] = field(default_factory=list)
    not_exts: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    natural: bool = False  # several words: not each required (files holding more rank first)
    dropped: list[str] = field(default_factory=list)  # stop words that may name a symbol
    only_stop: bool = False  # every word was a stop word (``words`` kept them all)
    _patterns: tuple[list[re.Pattern[bytes]], list[re.Pattern[bytes]]] | None = field(
        default=None, repr=False, compare=False
    )

    def holds_phrases(self, data: bytes) -> bool:
        """Whether a file's text holds every phrase and no excluded one: a phrase's words in
        order, with only characters that are not word characters between them (as the
        index's words are cut), case ignored. The index only knows that a file holds the
        words somewhere."""
        need, avoid = self._phrase_patterns()
        return all(p.search(data) for p in need) and not any(p.search(data) for p in avoid)

    @property
    def checks_text(self) -> bool:
        """Whether ``holds_phrases`` can tell more than the index."""
        need, avoid = self._phrase_patterns()
        return bool(need or avoid)

    def _phrase_patterns(self) -> tuple[list[re.Pattern[bytes]], list[re.Pattern[bytes]]]:
        if self._patterns is None:
            need = (phrase_pattern(phrase) for phrase in self.phrases)
            avoid = (phrase_pattern(phrase) for phrase in self.not_phrases)
            self._patterns = (
                [p for p in need if p is not None],
                [p for p in avoid if p is not None],
            )
        return self._patterns

    def tokens(self) -> list[tuple[str, str]]:
        """The query's words as index tokens, each once: (lowercased, as typed)."""
        pairs = (zip(_CODE.analyze(w), _CODE_CASE.analyze(w), strict=False) for w in self.words)
        return list({pair: None for each in pairs for pair in each})


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
                if len(joined) < _LONG_WORD:
                    for k in range(i, i + width):
                        out.setdefault(k, []).append(joined)
    return out


_WORD = re.compile(_WORD_RE.encode())


def phrase_pattern(phrase: str) -> re.Pattern[bytes] | None:
    """What a file's text must hold for ``phrase``: its words (as the ``code`` tokenizer
    cuts them, every one, also those too long for the index) one after the other, case
    ignored; None when the index's words alone tell (a phrase of one indexed word).

    Between two words only characters that are not word characters, and at least one,
    except where a run of digits meets a word ("0x1F" is the words 0 and x1f): the words
    of a text are where the tokenizer finds them."""
    words = _WORD.findall(phrase.encode())
    if not words or (len(words) == 1 and len(words[0]) < _LONG_WORD):
        return None
    parts = []
    for i, w in enumerate(words):
        digits = w[:1].isdigit()
        if i == 0:  # (a word after a run of digits starts a word: "0x1F" holds x1f)
            parts.append(rb"(?<![A-Za-z0-9_])" + (b"" if digits else rb"[0-9]*"))
        elif words[i - 1][:1].isdigit() and not digits:
            parts.append(rb"[^A-Za-z0-9_]*")
        else:
            parts.append(rb"[^A-Za-z0-9_]+")
        parts.append(re.escape(w))
    parts.append(rb"(?![0-9])" if words[-1][:1].isdigit() else rb"(?![A-Za-z0-9_])")
    return re.compile(b"".join(parts), re.IGNORECASE)


def parse_search(query: str) -> ParsedSearch:
    out = ParsedSearch()
    for m in re.finditer(r'(-?)"([^"]*)"?|(\S+)', query):
        if m.group(3) is None:
            if not m.group(1):
                out.phrases.append(m.group(2))
            elif phrase_pattern(m.group(2)) is None:  # (one word: the index tells)
                out.exclude.append(m.group(2))
            else:  # (not each of its words: the files holding it, checked on each)
                out.not_phrases.append(m.group(2))
            continue
        tok = m.group(3)
        neg = tok.startswith("-") and len(tok) > 1
        body = tok[1:] if neg else tok
        low = body.lower()
        if low.startswith("ext:") and len(body) > 4:
            (out.not_exts if neg else out.exts).append(body[4:].lstrip(".").lower())
        elif low.startswith("path:") and len(body) > 5 and not neg:
            out.paths.append(body[5:])
        elif neg:
            out.exclude.append(body)
        else:
            out.words.append(body)
    # stop words are dropped ("where is X defined" asks for X; a query of stop words only
    # keeps them), and of several words none is required on its own: a file needs one of
    # them, and ``rank`` puts the files holding more of them first (those holding them all
    # lead, as an AND would give them; "gzip decompression" still finds gzip.py after them)
    bare = [w.strip(_PUNCTUATION) for w in out.words]  # ("defined?" is a stop word too)
    kept = [w for w, b in zip(out.words, bare, strict=True) if b.lower() not in STOP_WORDS]
    out.dropped = [b for b in bare if b.lower() in STOP_WORDS - _FRAME]
    if kept:
        out.words = kept
    else:
        out.only_stop = bool(out.words)
    out.natural = len(out.words) >= 2
    return out


@dataclass
class Ranking:
    """The scored files of one search on one index, and the searcher that scored them."""

    store: RootIndex
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


def _with_files_below(
    paths: set[bytes], entries: Mapping[bytes, Entry], dirs: dict[bytes, int]
) -> set[bytes]:
    """``paths`` plus every indexed file below those of them that are directories holding
    indexed files (``dirs``: moved, deleted or changed, their files must be looked at
    again). The entries are looked through only then: a new file or an edited one costs
    nothing here. (Other names of an edited file: ``RootIndex._stat_each``.)"""
    prefixes = tuple(p + b"/" for p in paths if p in dirs)
    if prefixes:
        paths.update(p for p in entries if p.startswith(prefixes))
    return paths


def _ancestors(rel: bytes) -> Iterator[bytes]:
    """The directories a root-relative path lies in, the root's own excepted."""
    i = rel.find(b"/")
    while i >= 0:
        yield rel[:i]
        i = rel.find(b"/", i + 1)


def _file_id(st: os.stat_result | None) -> tuple[int, int, int] | None:
    """Which file a snapshot is: each one replaces the last (a new inode while the old one is
    open; mtime and size besides, should a freed inode number come back)."""
    return None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size)


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


def _regex_literal(text: str) -> str:
    """``text`` as a literal in tantivy's (Rust) regex syntax."""
    return "".join("\\" + c if c in r"\.+*?()|[]{}^$#&-~" else c for c in text)


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()
