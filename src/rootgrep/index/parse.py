"""A file's symbols as the index stores them (``symbol_fields``), and a helper process that
parses files beside the build's own thread (``ParseHelper``).

tree-sitter's parse holds the GIL (py-tree-sitter 0.26 releases it nowhere a parse goes), so
no second thread of this process can parse while the build's thread does: the second commit
of a build (``RootIndex._complete_locked``) is most of a build's time, and about 70% of it is
the parse. A helper process (an isolated interpreter running ``serve``: ``helper_command``)
parses chunks of files the build hands it over a pipe while the build's thread parses others,
so both cores parse.

The helper never touches the filesystem: it is given each file's path (for its language) and
bytes, and answers each file's ``sym`` names and encoded symbols. Its answers are read as
length-prefixed bytes and strings only (no pickle: a helper that a crafted file took over
could at most give wrong names for the files it was given). Every frame is bounded both ways
(``MAX_REQUEST``, ``MAX_REPLY``); a helper that dies, stalls past ``REPLY_SECONDS`` or says
anything malformed is killed and its chunk parsed on the build's thread. Where no helper can
start (``serve --sandbox`` refuses ``execve``; no interpreter path) the build parses alone,
as before.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import struct
import sys
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .. import symbols
from ..symbols import Symbol

log = logging.getLogger("rootgrep.index")
T = TypeVar("T")

MINOR_KINDS = frozenset({"variable", "constant"})
MINOR = "\x01"  # before a ``sym`` term: the file defines that name only as a minor kind
_KIND_CODES = {k: chr(ord("a") + i) for i, k in enumerate(symbols.KINDS)}
_CODE_KINDS = {c: k for k, c in _KIND_CODES.items()}
_FIELD, _ROW = "\x1f", "\x1e"  # (never in a name: ``_clean`` replaces them)

# the ``sym`` names of a file, and its encoded symbols (None: no language of ours)
SymbolFields = tuple[list[str], bytes | None]

CHUNK_BYTES = 1 << 20  # a chunk of files handed over at once (their text)
# a file parsed by the helper is at most this large (larger ones are not parsed anyway)
MAX_FILE = symbols.MAX_PARSE_BYTES
# (a chunk is closed once its weight passes CHUNK_BYTES: its last file, with its path of at
# most a few KiB, may pass it by up to MAX_FILE)
MAX_REQUEST = CHUNK_BYTES + MAX_FILE + (1 << 20)
MAX_REPLY = 8 * MAX_REQUEST  # (names and symbols of a chunk: far less than its text)
REPLY_SECONDS = 60.0  # a helper silent this long after a request is given up
HELPER_MIN_BYTES = 8 << 20  # less text to parse than this: not worth a process's start
# what a queued file counts for besides its text: its path's bytes plus this (the request's
# framing, and the item, tuple and stat result held for it), so neither a request nor the
# queue grows past its bound with many tiny files or long paths
FILE_WEIGHT = 256
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def _clean(name: str) -> str:
    return name.replace(_FIELD, "?").replace(_ROW, "?")


def encode_symbols(syms: list[Symbol]) -> bytes:
    """A file's symbols, compactly: per symbol its name, kind (one letter), line, the lines
    it spans after that and its container, without the signature (the service reads it from
    the file as it is now). Lines are deltas from the symbol before."""
    rows, last = [], 0
    for s in syms:
        rows.append(_FIELD.join((
            _clean(s.name), _KIND_CODES.get(s.kind, "a"), str(s.line - last),
            str(s.end_line - s.line), "" if s.container is None else _clean(s.container),
        )))  # fmt: skip
        last = s.line
    return _ROW.join(rows).encode("utf-8", "surrogatepass")


def decode_symbols(raw: object) -> list[Symbol] | None:
    if not isinstance(raw, bytes):
        return []
    out, last = [], 0
    try:
        for row in raw.decode("utf-8", "surrogatepass").split(_ROW) if raw else ():
            name, code, line, span, container = row.split(_FIELD)
            last += int(line)
            kind = _CODE_KINDS[code]
            out.append(Symbol(name, kind, last, last + int(span), container or None, ""))
    except (ValueError, KeyError):
        return []
    return out


def symbol_fields(rel: bytes, data: bytes) -> SymbolFields:
    """What a file's main document holds of its symbols: every name it defines (case kept;
    one defined only as a variable or constant behind ``MINOR``), and its symbols encoded
    (None for a file in no language of ours)."""
    syms = symbols.extract(rel, data, signatures=False)  # (stored without them)
    if syms is None:
        return [], None
    main = {s.name: None for s in syms if s.kind not in MINOR_KINDS}
    names = [*main, *(MINOR + s.name for s in syms if s.name not in main)]
    return list(dict.fromkeys(names)), encode_symbols(syms)


def parsed_by_helper(rel: bytes, data: bytes) -> bool:
    """Whether a file is worth handing to the helper: in a language of ours, and small
    enough to be parsed at all (the rest cost nothing to do here)."""
    return 0 < len(data) <= MAX_FILE and symbols.language_of(rel) is not None


# -- the wire: frames of a u64 length, then the payload ----------------------------------------


def _pack(items: list[bytes]) -> bytes:
    out = [_U32.pack(len(items))]
    for b in items:
        out.append(_U32.pack(len(b)))
        out.append(b)
    return b"".join(out)


class _Reader:
    """Length-prefixed items out of one payload, every length checked against what is left."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def u32(self) -> int:
        if self.at + 4 > len(self.data):
            raise ValueError("short frame")
        (n,) = _U32.unpack_from(self.data, self.at)
        self.at += 4
        return int(n)

    def item(self) -> bytes:
        n = self.u32()
        if self.at + n > len(self.data):
            raise ValueError("short item")
        b = self.data[self.at : self.at + n]
        self.at += n
        return b

    def items(self) -> list[bytes]:
        return [self.item() for _ in range(self.u32())]

    def end(self) -> None:
        if self.at != len(self.data):
            raise ValueError("trailing bytes")


def encode_request(files: list[tuple[bytes, bytes]]) -> bytes:
    return _pack([b for rel, data in files for b in (rel, data)])


def decode_request(payload: bytes) -> list[tuple[bytes, bytes]]:
    r = _Reader(payload)
    flat = r.items()
    r.end()
    if len(flat) % 2:
        raise ValueError("odd request")
    return list(zip(flat[::2], flat[1::2], strict=True))


def encode_reply(fields: list[SymbolFields]) -> bytes:
    out = [_U32.pack(len(fields))]
    for names, blob in fields:
        out.append(_pack([n.encode("utf-8", "surrogatepass") for n in names]))
        out.append(_pack([] if blob is None else [blob]))
    return b"".join(out)


def decode_reply(payload: bytes, want: int) -> list[SymbolFields]:
    r = _Reader(payload)
    if r.u32() != want:
        raise ValueError("another number of files")
    out: list[SymbolFields] = []
    for _ in range(want):
        names = [n.decode("utf-8", "surrogatepass") for n in r.items()]
        blob = r.items()
        if len(blob) > 1:
            raise ValueError("two blobs")
        out.append((names, blob[0] if blob else None))
    r.end()
    return out


def _ready(fd: int, writing: bool, seconds: float) -> bool:
    """Whether ``fd`` can be read (or written) without blocking, waiting up to ``seconds``
    (``poll``: ``select`` refuses an fd over 1023, which a server holding many roots and
    connections reaches). A hung-up or failed fd counts as ready: its read or write says
    why."""
    import select

    p = select.poll()
    p.register(fd, select.POLLOUT if writing else select.POLLIN)
    return bool(p.poll(max(int(seconds * 1000), 0)))


def _wait(fd: int, writing: bool, deadline: float | None) -> None:
    """Until ``fd`` can be read (or written) without blocking; past ``deadline`` (monotonic
    seconds), ``TimeoutError``."""
    if deadline is None:
        return
    import time

    if not _ready(fd, writing, deadline - time.monotonic()):
        raise TimeoutError("the other side stalled")


def _read_exactly(fd: int, n: int, deadline: float | None = None) -> bytes | None:
    """``n`` bytes of ``fd``; None at its end before any byte (a short end raises)."""
    parts, got = [], 0
    while got < n:
        _wait(fd, False, deadline)
        try:
            b = os.read(fd, min(n - got, 1 << 20))
        except BlockingIOError:  # (a non-blocking fd, woken for nothing)
            continue
        if not b:
            if got == 0:
                return None
            raise ValueError("cut short")
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def read_frame(fd: int, limit: int, deadline: float | None = None) -> bytes | None:
    """One frame's payload (None: the input ended between frames), at most ``limit`` bytes;
    with a ``deadline``, ``TimeoutError`` once it passes."""
    head = _read_exactly(fd, _U64.size, deadline)
    if head is None:
        return None
    (n,) = _U64.unpack(head)
    if n > limit:
        raise ValueError(f"a frame of {n} bytes (at most {limit})")
    body = _read_exactly(fd, n, deadline) if n else b""
    if body is None:
        raise ValueError("cut short")
    return body


def write_frame(fd: int, payload: bytes, deadline: float | None = None) -> None:
    data = memoryview(_U64.pack(len(payload)) + payload)
    while data:
        _wait(fd, True, deadline)
        try:
            data = data[os.write(fd, data) :]
        except BlockingIOError:
            continue


# -- the helper process, and the build's handle on it -----------------------------------------


def serve() -> None:
    """The helper: parse each request's files, answer their fields, until its input ends."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a terminal's Ctrl-C is the build's)
    try:
        while True:
            payload = read_frame(0, MAX_REQUEST)
            if payload is None:
                return
            files = decode_request(payload)
            write_frame(1, encode_reply([symbol_fields(rel, data) for rel, data in files]))
    except (BrokenPipeError, ConnectionResetError):  # (the build ended, or gave it up)
        return
    except ValueError as e:  # (a malformed request: said in one line, no traceback)
        print(f"rootgrep parse helper: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def helper_command() -> list[str]:
    """The helper's command line: an isolated interpreter (``-I``: no working directory, no
    ``PYTHONPATH``, no user site on its path, no ``PYTHON*`` variable read) given this
    process's own module path (its absolute entries but the working directory: a package or
    dependency found through ``PYTHONPATH`` or ``pip --target`` is found there too), so it
    imports this very package from where this process found it, and nothing by a relative
    name. Started
    from a served tree (``rootgrep index .``, a client's ``serve`` run in its repository), a
    ``rootgrep/``, ``tree_sitter_python/``, ``re2.py`` or ``sitecustomize.py`` at the tree's
    top is never imported: ``-m rootgrep.index.parse`` put the working directory first."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        cwd = os.path.normpath(os.getcwd())
    except OSError:
        cwd = ""
    path = [here] + [
        p for p in sys.path if os.path.isabs(p) and os.path.normpath(p) not in (cwd, here)
    ]
    code = (
        "import sys; sep = sys.argv.pop(1); sys.path[:0] = sys.argv.pop(1).split(sep); "
        "from rootgrep.index.parse import serve; serve()"
    )
    flags = ["-I", "-B"] if sys.dont_write_bytecode else ["-I"]
    return [sys.executable, *flags, "-c", code, os.pathsep, os.pathsep.join(path)]


def helper_environment() -> dict[str, str]:
    """The helper's environment: ``PATH`` and the locale only (a bearer token's variable, or
    any other of this process's, stays here; ``-I`` reads no ``PYTHON*`` one anyway)."""
    return {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL") if k in os.environ}


class HelperGone(Exception):
    """The helper died, stalled or answered something malformed."""


class ParseHelper:
    """One helper process (at most one request in flight: the build writes a chunk only to
    an idle helper, so neither side ever blocks on a full pipe while the other writes)."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self.out = proc.stdin.fileno()
        self.back = proc.stdout.fileno()
        self.waiting = 0  # files of the request in flight (0: idle)
        # (non-blocking: a write or read that would block waits in ``poll``, so each
        # frame's deadline holds however the helper stalls)
        os.set_blocking(self.out, False)
        os.set_blocking(self.back, False)

    @classmethod
    def start(cls) -> ParseHelper | None:
        """A helper, or None where none can start (then the build parses alone): one CPU,
        no interpreter path, ``ROOTGREP_PARSE_HELPER=0``, or no ``execve`` (sandboxed)."""
        if (os.cpu_count() or 1) < 2 or not sys.executable:
            return None
        if os.environ.get("ROOTGREP_PARSE_HELPER") == "0":
            return None
        try:
            import subprocess

            proc = subprocess.Popen(
                helper_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                env=helper_environment(), cwd="/", close_fds=True,
            )  # fmt: skip
        except Exception as e:  # (sandboxed: no execve; no interpreter; no fds left)
            log.info("no parse helper (%s); parsing on the build's thread alone", e)
            return None
        return cls(proc)

    def send(self, files: list[tuple[bytes, bytes]]) -> None:
        import time

        assert not self.waiting and files
        try:
            write_frame(self.out, encode_request(files), time.monotonic() + REPLY_SECONDS)
        except (OSError, ValueError) as e:  # (TimeoutError included)
            raise HelperGone(f"writing to it: {e}") from None
        self.waiting = len(files)

    def ready(self) -> bool:
        """Whether the answer to the request in flight can be read now (or the helper is
        gone: then ``receive`` says so at once)."""
        return bool(self.waiting) and _ready(self.back, False, 0)

    def receive(self) -> list[SymbolFields]:
        """The fields of the request's files, in its order (waits for them)."""
        import time

        want, self.waiting = self.waiting, 0
        try:
            payload = read_frame(self.back, MAX_REPLY, time.monotonic() + REPLY_SECONDS)
            if payload is None:
                raise ValueError("it ended")
            return decode_reply(payload, want)
        except (OSError, ValueError) as e:
            raise HelperGone(str(e)) from None

    def close(self) -> None:
        """End the helper: its input closed, then killed if it has not ended at once."""
        import subprocess

        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError, ValueError):
                f.close()
        try:
            self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _weight(rel: bytes, data: bytes) -> int:
    """What a file counts for in a chunk and in the queue (``FILE_WEIGHT``)."""
    return len(data) + len(rel) + FILE_WEIGHT


class SharedParse(Generic[T]):
    """Files whose symbols are parsed on this thread or by a helper, both kept busy: the files
    a helper would parse (``parsed_by_helper``) queue up; whenever the helper is idle it is
    handed the front of the queue (about ``CHUNK_BYTES``), and while the queue holds more than
    two chunks this thread parses from its back, one file at a time, looking at the helper
    between files. ``done(item, fields)`` hears each file's fields once known: not in the
    order given. Without a helper (or once it is lost) every file is parsed here. At most
    three chunks are held (two queued, one with the helper), each of about ``CHUNK_BYTES``
    of weight (``_weight``: a file's text, its path and ``FILE_WEIGHT``)."""

    def __init__(self, done: Callable[[T, SymbolFields], None], helper: ParseHelper | None):
        self.done = done
        self.helper = helper
        self.queue: collections.deque[tuple[T, bytes, bytes]] = collections.deque()
        self.size = 0  # the weight queued (``_weight``)
        self.sent: list[tuple[T, bytes, bytes]] | None = None  # the helper's (in flight)
        self.by_helper = 0  # files the helper parsed (for the tests and the figures)

    def add(self, item: T, rel: bytes, data: bytes) -> None:
        if self.helper is None or not parsed_by_helper(rel, data):
            self.done(item, symbol_fields(rel, data))
            return
        self.queue.append((item, rel, data))
        self.size += _weight(rel, data)
        self._pump(last=False)
        while self.size > 2 * CHUNK_BYTES or (self.helper is None and self.queue):
            self._here_one()
            self._pump(last=False)

    def finish(self) -> None:
        """Every file given so far parsed and heard (the helper's last answer awaited)."""
        while self.queue:
            self._pump(last=True)
            if self.queue:
                self._here_one()
        if self.sent is not None:
            self._collect()

    def close(self) -> None:
        if self.helper is not None:
            self.helper.close()
            self.helper = None

    def _pump(self, *, last: bool) -> None:
        """Take the helper's answer if it is there, and hand an idle helper the front of the
        queue (a whole chunk; with ``last``, whatever is left)."""
        if self.helper is None:
            return
        if self.sent is not None:
            if not self.helper.ready():
                return
            self._collect()
        if self.helper is None or not (self.size >= CHUNK_BYTES or (last and self.queue)):
            return
        chunk, size = [], 0
        while self.queue and size < CHUNK_BYTES:
            chunk.append(self.queue.popleft())
            size += _weight(chunk[-1][1], chunk[-1][2])
        self.size -= size
        try:
            self.helper.send([(rel, data) for _, rel, data in chunk])
            self.sent = chunk
        except HelperGone as e:
            self._lost(e)
            self._here(chunk)

    def _collect(self) -> None:
        chunk, self.sent = self.sent, None
        assert chunk is not None and self.helper is not None
        try:
            fields = self.helper.receive()
        except HelperGone as e:
            self._lost(e)
            self._here(chunk)
            return
        self.by_helper += len(chunk)
        for (item, _, _), f in zip(chunk, fields, strict=True):
            self.done(item, f)

    def _here_one(self) -> None:
        item, rel, data = self.queue.pop()
        self.size -= _weight(rel, data)
        self.done(item, symbol_fields(rel, data))

    def _here(self, chunk: list[tuple[T, bytes, bytes]]) -> None:
        for item, rel, data in chunk:
            self.done(item, symbol_fields(rel, data))

    def _lost(self, e: Exception) -> None:
        log.warning("the parse helper is lost (%s); parsing on the build's thread", e)
        self.close()


if __name__ == "__main__":
    serve()
