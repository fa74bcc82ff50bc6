"""Another process's grep answered exactly from the index a running daemon keeps fresh.

A ``rootgrep daemon`` (or ``index --watch``) keeps a root's index fresh: its watcher marks each
changed path dirty, and dirty files are folded into the index about once a second. Another
process (the CLI's ``grep``) could read the index, but not that dirty set, so the index alone
may be up to a fold behind. The daemon therefore answers for it: one Unix socket per index
folder (``daemon.sock``, in the 0700 cache dir: only the cache's owner can reach it; the peer's
uid is checked as well). A request names the root, the asker's directory below it (by path
and by device and inode) and the query; the daemon drains its watcher first
(``Indexed.catch_up``: every change the kernel reported before the request is in the dirty
set), then answers as its own MCP grep does (``service.grep_scope.indexed_batches``): the dirty
set, then the index's trigram candidates, plus every dirty file a walk lists, in walk order.
The asker reads each of those files from disk now, beneath its own pinned directory, and
matches it now: the answer equals a live scan's, and the asker never opens the index (no
writer, no state file, no tantivy import: a rare literal on the standard library answers in
tens of milliseconds).

The wire is two lines of words, not JSON (the asker's start would import ``json``, 1 ms of a
CLI grep): the request ``PROTOCOL root place dev ino pattern regex case_sensitive`` (paths
and the pattern in base64, flags 0 or 1); the answer ``1 pid max_file_size changed held
narrowed bytes`` followed by that many bytes of NUL-separated paths, or ``0 why``. A daemon
and an asker of other versions do not understand each other: the asker then scans live.

``rootgrep index DIR`` asks first whether DIR's daemon keeps its index (``ask_kept``): the
request ``sync PROTOCOL root dev ino``, the answer ``1 pid max_file_size files changed
symbols_ready`` (after the watcher is drained, as for a grep) or ``0 why``. Answered, the
command syncs nothing itself (the daemon holds the writer and folds every change) and never
imports the index: tens of milliseconds where its own re-sync would stat every file.

Not fresh (no daemon, a daemon still building, a watcher that lost events or is capped, an
ignore file edited and not yet folded, more than ``MAX_DIRTY`` unfolded changes, a directory
the index does not hold exactly): the asker scans live and says why.
"""

from __future__ import annotations

import _socket  # (the C module: ``socket``'s enum set-up costs the CLI's start-up 1.5 ms)
import binascii  # (``base64``'s C half: ``base64`` itself imports ``re`` and ``struct``)
import contextlib
import errno
import os
import struct
import time
from collections.abc import Callable, Iterator

from ..confine import bind_path, display, socket_at, strip_prefix
from ..errors import RootgrepError
from ..roots import Root
from ..walker import DirBatch, Walker, order_key, path_batches
from . import run_wire
from .cache import CacheDir, IndexFolder, folder_name
from .names import SOCKET_NAME, no_index_of, no_index_why, self_and_ancestors
from .names import default_cache_dir as default_cache_dir  # (re-exported: the CLI's)

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    import socket
    from typing import Any

    from .manager import IndexManager

PROTOCOL = 2  # (1: JSON lines)
MAX_DIRTY = 20_000  # more unfolded changes than this: not fresh (the answer stays small)
MAX_LINE = 1 << 20  # a request line (a pattern of up to grep.MAX_PATTERN_BYTES, in base64)
MAX_ANSWER = 1 << 30  # the paths of an answer (NUL-separated); an index of 10M files fits
TIMEOUT_SECONDS = 5.0  # hang guard on either side of one exchange
MAX_RUNS = 4  # CLI greps run whole at once (``_start_run``); one more is run by its CLI
REQUEST_SECONDS = 1.0  # the daemon reads a whole request line within this (an asker sends
# it in one write at once: one that trickles in would hold the one answering thread)
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


def _b64(b: bytes) -> str:
    return binascii.b2a_base64(b, newline=False).decode("ascii")


def _unb64(s: object) -> bytes:
    if not isinstance(s, str):
        raise ValueError("not a string")
    return binascii.a2b_base64(s.encode("ascii"), strict_mode=True)


def _peer_uid(conn: socket.socket | _socket.socket) -> int:
    _pid, uid, _gid = _PEERCRED.unpack(
        conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, _PEERCRED.size)
    )
    return uid


def _read_line(conn: socket.socket, limit: int, seconds: float | None = None) -> bytes:
    """One line from ``conn`` (at most ``limit`` bytes), within ``seconds`` in all when
    given (else each read within the socket's own time-out): a peer that sends a byte at a
    time cannot hold the reader longer."""
    buf = bytearray()
    deadline = None if seconds is None else time.monotonic() + seconds
    while b"\n" not in buf:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the line did not come in time")
            conn.settimeout(left)
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        buf += chunk
        if len(buf) > limit:
            raise ValueError("line too long")
    return bytes(buf).partition(b"\n")[0]


def _flag(word: bytes) -> bool:
    if word not in (b"0", b"1"):
        raise ValueError("not a flag")
    return word == b"1"


def _request_line(request: dict[str, Any]) -> bytes:
    """A request (``v``, ``root`` and ``place`` in base64, ``dev``, ``ino``, ``q``: ``pattern``,
    ``regex``, ``case_sensitive``) as its line on the wire; ``_parse_request`` reads it back."""
    q = request["q"]
    pattern = _b64(str(q["pattern"]).encode("utf-8", "surrogatepass"))
    words = (str(request["v"]), request["root"], request["place"], str(int(request["dev"])),
             str(int(request["ino"])), pattern, "1" if q["regex"] else "0",
             "1" if q["case_sensitive"] else "0")  # fmt: skip
    return " ".join(words).encode("ascii") + b"\n"


def _parse_request(line: bytes) -> dict[str, Any]:
    words = line.split(b" ")
    if len(words) != 8 or words[0] != str(PROTOCOL).encode():
        raise ValueError("a request of another version of rootgrep")
    _v, root, place, dev, ino, pattern, regex, case = words
    q = {"pattern": _unb64(pattern.decode("ascii")).decode("utf-8", "surrogatepass"),
         "regex": _flag(regex), "case_sensitive": _flag(case)}  # fmt: skip
    return {"v": PROTOCOL, "root": root.decode("ascii"), "place": place.decode("ascii"),
            "dev": int(dev), "ino": int(ino), "q": q}  # fmt: skip


def _answer_line(answer: dict[str, Any], size: int) -> bytes:
    """An answer's first line: fresh, with its counts and the size of the paths that follow;
    or not, and why (on one line)."""
    if not answer.get("fresh"):
        why = " ".join(str(answer.get("why") or "not fresh").split())
        return b"0 " + why.encode("utf-8", "replace") + b"\n"
    counts = (answer["pid"], answer["max_file_size"], answer["changed"], answer["held"])
    return b"1 %d %d %d %d %d %d\n" % (*counts, 1 if answer["narrowed"] else 0, size)


def _answer_numbers(line: bytes, count: int) -> list[int] | str:
    """The ``count`` numbers of a fresh answer's line (``1 N...``), or the why of one not
    fresh (``0 why``); ValueError for anything else."""
    fresh, _, rest = line.partition(b" ")
    if fresh == b"0":
        return rest.decode("utf-8", "replace")
    words = rest.split(b" ")
    if fresh != b"1" or len(words) != count:
        raise ValueError("not an answer")
    return [int(w) for w in words]


def _parse_answer(line: bytes) -> dict[str, Any]:
    numbers = _answer_numbers(line, 6)
    if isinstance(numbers, str):
        return {"fresh": False, "why": numbers}
    pid, max_file_size, changed, held, narrowed, size = numbers
    return {"fresh": True, "pid": pid, "max_file_size": max_file_size, "changed": changed,
            "held": held, "narrowed": narrowed == 1, "bytes": size}  # fmt: skip


SYNC_WORD = b"sync"


def _sync_request_line(root_path: bytes, identity: tuple[int, int]) -> bytes:
    return b"%s %d %s %d %d\n" % (SYNC_WORD, PROTOCOL, _b64(root_path).encode("ascii"),
                                  *identity)  # fmt: skip


def _parse_sync_request(line: bytes, root_path: bytes) -> tuple[int, int]:
    """The (device, inode) a ``sync`` request line names; ValueError for one of another
    version, or of another root than ``root_path``."""
    words = line.split(b" ")
    if len(words) != 5 or words[0] != SYNC_WORD or words[1] != str(PROTOCOL).encode():
        raise ValueError("a sync request of another version of rootgrep")
    if _unb64(words[2].decode("ascii")) != root_path:
        raise ValueError("the request names another root")
    return int(words[3]), int(words[4])


def _kept_line(kept: dict[str, Any]) -> bytes:
    if not kept.get("fresh"):
        return _answer_line(kept, 0)
    words = (kept["pid"], kept["max_file_size"], kept["files"], kept["changed"],
             1 if kept["symbols"] else 0)  # fmt: skip
    return b"1 %d %d %d %d %d\n" % words


def _parse_kept(line: bytes) -> dict[str, Any]:
    numbers = _answer_numbers(line, 5)
    if isinstance(numbers, str):
        return {"fresh": False, "why": numbers}
    pid, max_file_size, files, changed, symbols = numbers
    return {"fresh": True, "pid": pid, "max_file_size": max_file_size, "files": files,
            "changed": changed, "symbols": symbols == 1}  # fmt: skip


# -- the daemon's side -------------------------------------------------------------------------


class _Served:
    """One served index: its root, folder, listening socket and that socket file's inode
    (removed at close only if it is still this one). (A plain class, not a dataclass: the
    CLI's start-up does not import ``dataclasses``.)"""

    __slots__ = ("folder", "ino", "root_path", "sock")

    def __init__(
        self, root_path: bytes, folder: IndexFolder, sock: socket.socket, ino: int
    ) -> None:
        self.root_path = root_path
        self.folder = folder
        self.sock = sock
        self.ino = ino


class FreshnessServer:
    """The daemon's answers: one listening socket per served index, one thread for all."""

    def __init__(self, manager: IndexManager) -> None:
        import selectors
        import socket

        self.manager = manager
        self._served: list[_Served] = []
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._readable = selectors.EVENT_READ
        self._selector.register(self._wake_r, self._readable, None)
        self._thread: Any = None  # (threading.Thread, made on first use)
        self._closed = False
        # a CLI's grep run whole, on a thread of its own (``_start_run``): at most MAX_RUNS
        self.runner: Callable[[FreshnessServer, bytes, Any, str, list[str]], None] | None = None
        import threading

        self._runs = threading.BoundedSemaphore(MAX_RUNS)
        self._running: set[Any] = set()  # (their connections: shut at close)
        self._running_lock = threading.Lock()

    def serve(self, root_path: bytes) -> str | None:
        """Answer for the index of ``root_path`` (its own index: not a view of an outer one).
        None when served; else why not (another live daemon serves it already, or no index)."""
        import socket

        ix = self.manager.get(root_path)
        if ix is None or ix.index is None:
            return "no index of its own here"
        folder = ix.index.folder
        # (bind and connect take a path: the folder's pinned fd, through /proc, never its
        # name; a socket's name that is a link is never connected through, only replaced)
        if folder.stat(SOCKET_NAME) is not None:
            live = socket_at(folder.fs.fd, SOCKET_NAME)
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            probe.settimeout(TIMEOUT_SECONDS)
            try:
                if live is not None:
                    probe.connect(live)
                    return "another daemon answers for this index already"
            except OSError:  # left by a daemon that died: replaced
                pass
            finally:
                probe.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(SOCKET_NAME, dir_fd=folder.fs.fd)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.bind(bind_path(folder.fs.fd, SOCKET_NAME))
            sock.listen(16)
            sock.setblocking(False)
            st = folder.stat(SOCKET_NAME)
        except OSError as e:
            sock.close()
            return f"cannot listen ({e.strerror or e})"
        served = _Served(root_path, folder, sock, st.st_ino if st is not None else -1)
        self._served.append(served)
        self._selector.register(sock, self._readable, served)
        if self._thread is None:
            import threading

            self._thread = threading.Thread(
                target=self._loop, name="rootgrep-freshness", daemon=True
            )
            self._thread.start()
        return None

    def _loop(self) -> None:
        import logging

        log = logging.getLogger("rootgrep.index")
        while not self._closed:
            for key, _ in self._selector.select():
                served = key.data
                if served is None:  # woken to close
                    return
                try:
                    conn, _addr = served.sock.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as e:
                    log.warning("freshness socket of %r: %s", served.root_path, e)
                    continue
                handed = False
                try:
                    handed = self._exchange(conn, served)
                except Exception as e:  # a client that went away, garbage, a bug: the
                    # asker scans live; this thread serves the next one
                    log.info("a freshness request failed: %r", e)
                finally:
                    if not handed:
                        conn.close()

    def _exchange(self, conn: socket.socket, served: _Served) -> bool:
        """Answer one connection; True when it was handed to a thread of its own (a grep run
        whole: ``_start_run``), which closes it."""
        conn.setblocking(True)
        conn.settimeout(TIMEOUT_SECONDS)
        if _peer_uid(conn) != os.geteuid():
            return False  # (the cache dir is 0700; a peer of another uid is refused all the same)
        # one thread answers every asker in turn: a request that trickles in is cut off
        line = _read_line(conn, MAX_LINE, REQUEST_SECONDS)
        conn.settimeout(TIMEOUT_SECONDS)
        if run_wire.is_run_request(line):
            return self._start_run(conn, served, line)
        if line.startswith(SYNC_WORD + b" "):
            try:
                dev, ino = _parse_sync_request(line, served.root_path)
                kept = self.kept(served.root_path, (dev, ino))
            except Exception as e:  # (a bad request: the asker syncs it itself)
                kept = {"fresh": False, "why": f"{type(e).__name__}: {e}"}
            conn.sendall(_kept_line(kept))
            return False
        paths: list[bytes] = []
        try:
            request = _parse_request(line)
            if _unb64(request.get("root")) != served.root_path:
                raise ValueError("the request names another root")
            answer, paths = self.answer(served.root_path, request)
        except Exception as e:  # (a bad request, or the index failed: the asker scans live)
            answer = {"fresh": False, "why": f"{type(e).__name__}: {e}"}
        blob = b"\0".join(paths)
        conn.sendall(_answer_line(answer, len(blob)) + blob)
        return False

    def _start_run(self, conn: socket.socket, served: _Served, line: bytes) -> bool:
        """A CLI's grep run whole (``remote_grep``) on a thread of its own, by ``runner``
        (the CLI's, given by the daemon verb: the index knows nothing of printing); declined
        when there is none, or ``MAX_RUNS`` run already (the CLI then runs it itself)."""
        import threading

        if self.runner is None or self._closed or not self._runs.acquire(blocking=False):
            conn.sendall(run_wire.frame(run_wire.LOCAL, b"busy"))
            return False

        def run() -> None:
            import logging

            try:
                cwd, argv = run_wire.parse_run_request(line)
                assert self.runner is not None
                self.runner(self, served.root_path, conn, cwd, argv)
            except Exception as e:  # (the CLI says its connection broke off, or runs it)
                logging.getLogger("rootgrep.index").info("a grep run for a CLI failed: %r", e)
            finally:
                with self._running_lock:
                    self._running.discard(conn)
                conn.close()
                self._runs.release()

        with self._running_lock:
            self._running.add(conn)
        threading.Thread(target=run, name="rootgrep-cli-grep", daemon=True).start()
        return True

    def fresh_for(
        self, root_path: bytes, target: Root, query: dict[str, Any], max_file_size: int
    ) -> tuple[FreshAnswer | None, str]:
        """What ``ask_fresh`` would hear from this daemon for ``target`` (beneath the root
        this daemon serves at ``root_path``), answered in this process: a CLI's grep run
        whole here (``cli.served_grep``) reads the same files a local one would."""
        comps = strip_prefix(target.path, root_path)
        if comps is None:
            return None, f"{display(root_path)} does not hold {display(target.path)}"
        dev, ino = target.fs.identity()
        request = {"place": _b64(b"/".join(comps)), "dev": dev, "ino": ino, "q": query}
        header, paths = self.answer(root_path, request)
        if not header.get("fresh"):
            return None, f"the daemon says: {header.get('why', 'not fresh')}"
        return _fresh_answer(header, paths, display(root_path), max_file_size)

    def kept(self, root_path: bytes, identity: tuple[int, int]) -> dict[str, Any]:
        """Whether this daemon keeps the index of ``root_path`` (the directory ``identity``)
        as grep would use it, after draining its watcher: with its file count, the changes
        not folded yet and whether its symbols are in; or why not (``ask_kept``)."""
        from ..grep import DEFAULT_MAX_FILE_SIZE

        ix = self.manager.get(root_path)
        if ix is None or ix.stop.is_set():
            return {"fresh": False, "why": "the daemon no longer indexes it"}
        store = ix.index
        if ix.identity != identity:
            return {"fresh": False, "why": "its index is of another directory"}
        if ix.role != "writer":  # (it follows another process's commits: that one folds)
            return {"fresh": False, "why": "another process writes its index"}
        if not ix.answers_grep() or store is None or not store.ready or store.foreign:
            state = ix.state if ix.state != "ready" else "being folded"
            return {"fresh": False, "why": f"the daemon's index is {state}"}
        if not ix.catch_up() or not ix.answers_exactly():
            return {"fresh": False, "why": "a re-sync is pending in the daemon"}
        with ix.lock:
            changed = len(ix.dirty)
        return {"fresh": True, "pid": os.getpid(),
                "max_file_size": self.manager.max_file_size or DEFAULT_MAX_FILE_SIZE,
                "files": store.file_count, "changed": changed,
                "symbols": ix.state == "ready" and ix.built.is_set()}  # fmt: skip

    def answer(
        self, root_path: bytes, request: dict[str, Any]
    ) -> tuple[dict[str, Any], list[bytes]]:
        """Fresh, with the files the asker must read (relative to its directory, in walk
        order), or why not. The watcher is drained first (``catch_up``)."""
        from .. import confine
        from ..grep import DEFAULT_MAX_FILE_SIZE
        from .manager import shareable
        from .plan import plan

        place = _unb64(request["place"])
        identity = (int(request["dev"]), int(request["ino"]))
        query = request["q"]
        q = plan(str(query["pattern"]), regex=bool(query["regex"]),
                 case_sensitive=bool(query["case_sensitive"]))  # fmt: skip
        ix = self.manager.get(root_path)
        if ix is None or ix.stop.is_set():
            return {"fresh": False, "why": "the daemon no longer indexes it"}, []
        store = ix.index
        if not ix.answers_grep() or store is None or not store.ready or store.foreign:
            state = ix.state if ix.state != "ready" else "being folded"
            return {"fresh": False, "why": f"the daemon's index is {state}"}, []
        comps = confine.split_relpath(place) if place else []
        if b"/".join(comps) != place or b".." in comps or b"." in comps:
            return {"fresh": False, "why": "the request names its directory oddly"}, []
        if comps and not shareable(ix.fs, comps, identity):
            return {"fresh": False, "why": "its index does not hold exactly this directory's "
                    "files (a hidden directory or an ignore file on the way)"}, []  # fmt: skip
        if not comps and ix.identity != identity:
            return {"fresh": False, "why": "its index is of another directory"}, []
        if not ix.catch_up():
            return {"fresh": False, "why": "the daemon's watcher could not catch up"}, []
        if not ix.answers_exactly():
            return {"fresh": False, "why": "a re-sync is pending (an ignore file changed, or "
                    "the watcher lost events)"}, []  # fmt: skip
        # the dirty set first: a fold that lands in between leaves a changed file in one of
        # the two (dirty, or the candidates), never in neither
        dirty = ix.dirty_snapshot()
        if len(dirty) > MAX_DIRTY:
            why = (f"{len(dirty)} paths are read live (changed ones not folded in yet, and "
                   "files with more than one name): more than the index answers for")  # fmt: skip
            return {"fresh": False, "why": why}, []
        paths = store.candidates(q)  # (in walk order)
        changed = Walker(ix.fs).listed(dirty) if dirty else set()
        if changed:
            paths = sorted(changed.union(paths), key=order_key)
        if comps:
            below = place + b"/"
            cut = len(below)
            paths = [p[cut:] for p in paths if p.startswith(below)]
            changed = {p for p in changed if p.startswith(below)}
        # "held" tells the asker whether a walk would have listed any file there (an error
        # when none was searched): counted (a pass over every indexed file, 1 ms on F) only
        # when no file is answered
        held = len(paths)
        if not paths:
            held = store.count_below(place)[0] if comps else store.file_count
        if sum(map(len, paths)) + len(paths) > MAX_ANSWER:  # (here too, not only by the asker)
            return {"fresh": False, "why": "the answer would be over its cap"}, []
        answer = {
            "fresh": True,
            "pid": os.getpid(),
            "max_file_size": self.manager.max_file_size or DEFAULT_MAX_FILE_SIZE,
            "changed": len(changed),
            "held": held,  # (with no file answered, none changed either)
            "narrowed": q.op != "all",
        }
        return answer, paths

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        with self._running_lock:  # (a run blocked on a CLI that reads no more ends now)
            for conn in self._running:
                with contextlib.suppress(OSError):
                    conn.shutdown(_socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(TIMEOUT_SECONDS)
        for s in self._served:
            st = None if s.folder.closed else s.folder.stat(SOCKET_NAME)
            if st is not None and st.st_ino == s.ino:  # (still ours: not a successor's)
                with contextlib.suppress(OSError):
                    os.unlink(SOCKET_NAME, dir_fd=s.folder.fs.fd)
            s.sock.close()
        self._served.clear()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()


# -- the asking side ---------------------------------------------------------------------------


class FreshAnswer:
    """What a daemon answered for one directory: the files to read (relative to it, in walk
    order), how many of them changed since the index's last fold, how many files the index
    holds there (at least: the files answered, when there are any), whether trigrams narrowed
    them (else every text file is a candidate), and which daemon answered (for --stats). (A
    plain class, not a dataclass: the CLI's start-up does not import ``dataclasses``.)"""

    __slots__ = ("changed", "held", "narrowed", "paths", "why")

    def __init__(
        self, paths: list[bytes], changed: int, held: int, narrowed: bool, why: str
    ) -> None:
        self.paths = paths
        self.changed = changed
        self.held = held
        self.narrowed = narrowed
        self.why = why

    def batches(self, target: Root) -> Iterator[DirBatch]:
        return path_batches(target.fs, self.paths)


def _cache_of(cache_dir: str, target: Root) -> tuple[CacheDir | None, str]:
    """The cache dir opened (never created) where an index of ``target`` or a directory
    above it may be; or None and why not (none is: found without opening the cache)."""
    why = no_index_why(cache_dir, target.path)
    if why is not None:
        return None, why
    try:
        return CacheDir.open(cache_dir, create=False), ""
    except RootgrepError as e:
        return None, f"the index cache is unusable: {e}"


def ask_fresh(
    cache_dir: str,
    target: Root,
    query: dict[str, Any],
    *,
    max_file_size: int,
    meanwhile: Callable[[], object] | None = None,
) -> tuple[FreshAnswer | None, str]:
    """The files of ``target`` that can match ``query`` (``pattern``, ``regex``,
    ``case_sensitive``), from the index of it (or of a directory above it) that a running
    daemon keeps fresh; or None and why not (the grep then scans live). Nothing in the cache
    is created or written; an index folder is only locked shared while its daemon is asked.
    ``meanwhile`` is called when a request is sent, before its answer is read (again for each
    daemon asked): the asker's own work overlaps the daemon's (the CLI compiles its scan
    then: RE2's import, 2 ms)."""
    cache, why = _cache_of(cache_dir, target)
    if cache is None:
        return None, why
    try:
        names = set(cache.names())
        first_why = ""
        for above in self_and_ancestors(target.path):
            if folder_name(above) not in names:
                continue
            found, why = _ask_index(cache, above, target, query, max_file_size, meanwhile)
            if found is not None:
                return found, why
            first_why = first_why or why
        return None, first_why or no_index_of(target.path, cache_dir)
    finally:
        cache.close()


def _ask_index(
    cache: CacheDir,
    above: bytes,
    target: Root,
    query: dict[str, Any],
    max_file_size: int,
    meanwhile: Callable[[], object] | None = None,
) -> tuple[FreshAnswer | None, str]:
    shown = display(above)
    comps = strip_prefix(target.path, above)
    if comps is None:
        return None, f"{shown} does not hold {display(target.path)}"
    dev, ino = target.fs.identity()
    request = {"v": PROTOCOL, "root": _b64(above), "place": _b64(b"/".join(comps)),
               "dev": dev, "ino": ino, "q": query}  # fmt: skip
    folder = cache.open_index(above, create=False)  # (locked shared while it is asked)
    if folder is None:
        return None, f"the index of {shown} is gone (evicted)"
    try:
        header, blob, why = _exchange(folder, above, request, meanwhile)
    finally:
        folder.close()
    if header is None:
        return None, why
    paths = blob.split(b"\0") if blob else []
    if any(not p or p.startswith(b"/") for p in paths):
        return None, f"the daemon of {shown} answered nonsense"
    return _fresh_answer(header, paths, shown, max_file_size)


def _fresh_answer(
    header: dict[str, Any], paths: list[bytes], shown: str, max_file_size: int
) -> tuple[FreshAnswer | None, str]:
    if max_file_size > int(header.get("max_file_size", 0)):
        return None, "--max-file-size is above the daemon's (its index lacks larger files)"
    pid = int(header.get("pid", 0))
    why = f"the index of {shown}, kept fresh by rootgrep daemon pid {pid}"
    counts = int(header.get("changed", 0)), int(header.get("held", 0))
    return FreshAnswer(paths, *counts, bool(header.get("narrowed")), why), why


def _exchange(
    folder: IndexFolder,
    root_path: bytes,
    request: dict[str, Any],
    meanwhile: Callable[[], object] | None = None,
) -> tuple[dict[str, Any] | None, bytes, str]:
    """The daemon's answer (header and paths blob) for this index, or None and why not."""
    shown = display(root_path)
    sock, why = _connect(folder, shown)
    if sock is None:
        return None, b"", why
    try:
        sock.sendall(_request_line(request))
        if meanwhile is not None:
            meanwhile()
        line, rest = _header(sock)
        header = _parse_answer(line)
        if not header.get("fresh"):
            return None, b"", f"the daemon of {shown} says: {header.get('why', 'not fresh')}"
        size = int(header.get("bytes", 0))
        if not 0 <= size <= MAX_ANSWER:
            raise ValueError(f"an answer of {size} bytes")
        blob = bytearray(rest)
        while len(blob) < size:
            chunk = sock.recv(min(1 << 20, size - len(blob)))
            if not chunk:
                raise ValueError("the answer was cut short")
            blob += chunk
    except (OSError, ValueError) as e:
        return None, b"", f"the daemon of {shown} did not answer ({e})"
    finally:
        sock.close()
    return header, bytes(blob[:size]), ""


def _connect(folder: IndexFolder, shown: str) -> tuple[_socket.socket | None, str]:
    """A connection to the daemon of this index folder (its socket, never through a link,
    of this user's), or None and why not."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    sock.settimeout(TIMEOUT_SECONDS)
    try:
        path = socket_at(folder.fs.fd, SOCKET_NAME)  # (never through a link)
        if path is None:
            raise FileNotFoundError(errno.ENOENT, "no socket")
        sock.connect(path)
        if _peer_uid(sock) != os.geteuid():
            sock.close()
            return None, f"the daemon socket of {shown} belongs to another user"
    except OSError as e:
        sock.close()
        if e.errno in (errno.ENOENT, errno.ECONNREFUSED):
            return None, (
                f"no daemon keeps the index of {shown} fresh (`rootgrep daemon {shown}` "
                "would; an index without one may be stale)"
            )
        return None, f"the daemon of {shown} cannot be reached ({e.strerror or e})"
    return sock, ""


def _header(sock: _socket.socket) -> tuple[bytes, bytes]:
    """An answer's first line (at most ``MAX_LINE`` bytes) and what came after it."""
    buf = bytearray()
    while b"\n" not in buf:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise ValueError("the connection closed")
        buf += chunk
        if len(buf) > MAX_LINE and b"\n" not in buf:
            raise ValueError("an answer header too long")
    line, _, rest = bytes(buf).partition(b"\n")
    return line, rest


def ask_kept(cache_dir: str, target: Root) -> tuple[dict[str, Any] | None, str, str]:
    """Whether a running daemon keeps the index of ``target`` itself (not of a directory
    above it: ``rootgrep index DIR`` makes DIR's own index): its pid, ``max_file_size``, file
    count, changes not folded yet and whether its symbols are in; or None, why not and what
    the daemon said if one answered ("" if none did). Nothing in the cache is created or
    written; the folder is locked shared while asked."""
    cache, why = _cache_of(cache_dir, target)
    if cache is None:
        return None, why, ""
    shown = display(target.path)
    try:
        if folder_name(target.path) not in set(cache.names()):
            return None, no_index_of(target.path, cache_dir), ""
        folder = cache.open_index(target.path, create=False)
        if folder is None:
            return None, f"the index of {shown} is gone (evicted)", ""
        try:
            sock, why = _connect(folder, shown)
            if sock is None:
                return None, why, ""
            try:
                sock.sendall(_sync_request_line(target.path, target.fs.identity()))
                kept = _parse_kept(_header(sock)[0])
            except (OSError, ValueError) as e:
                return None, f"the daemon of {shown} did not answer ({e})", ""
            finally:
                sock.close()
        finally:
            folder.close()
    finally:
        cache.close()
    if not kept["fresh"]:
        return None, f"the daemon of {shown} says: {kept['why']}", kept["why"]
    return kept, "", ""
