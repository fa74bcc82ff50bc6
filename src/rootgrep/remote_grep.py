"""``rootgrep grep`` run whole by the daemon that keeps the working directory's index fresh.

A CLI grep that imports rootgrep's search (the walker, the confinement, RE2, the printer)
spends about 10 ms on that before it reads a file: as long as ripgrep's whole run on a
repository of 1,500 files. A running ``rootgrep daemon`` has all of it loaded, and the index
and the files' pages at hand. So, before anything else of rootgrep is imported, the command
looks for the daemon of its working directory (or of a directory above it): the socket
``daemon.sock`` in that root's index folder of the cache dir (``index.names``). Found, it
sends its arguments and working directory (``index.run_wire``) and copies what the daemon
writes to its stdout and stderr, then exits with the daemon's status. The daemon runs the very
code a local grep runs (``cli.served_grep``), with the index's candidates (the files of a
fresh answer, ``index.freshness``), so the output is the same bytes.

The daemon declines before it writes anything (then the grep runs here, as without a daemon)
when it would not answer from its index exactly: ``-v``, ``--hidden``/``--no-ignore``/``-u``,
``--no-index``, ``--files``, ``--type-list``, ``--stats``, a file PATH, a PATH its index does
not hold exactly, an index being built or re-synced, a usage error (said here, in the same
words), or more than ``MAX_RUNS`` of these greps running at once. ``ROOTGREP_GREP_HERE=1``
runs every grep here (the index is still asked for its file list).

Only the socket is touched, through ``confine.sockets``: the cache dir is pinned (``O_PATH``;
refused, as the index refuses it, when it is a link, another user's or writable by others),
the root's index folder opened beneath it without following a link, and the socket connected
to through that folder's fd (a path short enough for ``connect``); both ends check that the
other runs as the same user (``SO_PEERCRED``), as the freshness protocol does. The daemon
opens every file itself, beneath its pinned root.
"""

from __future__ import annotations

import _socket
import errno
import os
import sys

from .confine.sockets import pin_lookup, socket_beneath
from .index.names import SOCKET_NAME, default_cache_dir, folder_name
from .index.run_wire import EXIT, LOCAL, MAX_REQUEST, OUT, frames, run_request

# until the daemon's first frame: it runs the grep (an empty stdout frame) or declines (its
# one answering thread may be busy with other askers: then the grep runs here)
CONNECT_SECONDS = 5.0
HERE_ENV = "ROOTGREP_GREP_HERE"


def run_by_daemon(argv: list[str]) -> int | None:
    """The exit status of ``rootgrep grep ARGV`` as the daemon of the working directory ran
    it, its output copied to this process's stdout and stderr; None when no daemon ran it
    (none found, or it declined before writing anything): the caller runs it here."""
    if os.environ.get(HERE_ENV) or "--no-index" in argv:
        return None
    try:
        cwd = os.getcwd()
    except OSError:  # (deleted: nothing to find a daemon by)
        return None
    request = run_request(cwd, argv)
    if len(request) > MAX_REQUEST:
        return None
    sock = _connect(_cache_dir(argv), os.fsencode(cwd))
    if sock is None:
        return None
    try:
        return _relay(sock, request)
    finally:
        sock.close()


def _cache_dir(argv: list[str]) -> str:
    """``--cache-dir`` as given (the last before a ``--``), else the default."""
    found = None
    for i, a in enumerate(argv):
        if a == "--":
            break
        if a == "--cache-dir" and i + 1 < len(argv):
            found = argv[i + 1]
        elif a.startswith("--cache-dir="):
            found = a.partition("=")[2]
    return found or default_cache_dir()


def _connect(cache: str, cwd: bytes) -> _socket.socket | None:
    """A connection to the daemon of ``cwd`` or of the nearest directory above it that has
    one, running as this user; None when there is none."""
    cache_fd = pin_lookup(cache)
    if cache_fd is None:  # (no cache, or not a private one: no daemon of ours)
        return None
    try:
        at = cwd
        while True:
            found = socket_beneath(cache_fd, folder_name(at), SOCKET_NAME)
            if found is not None:
                fd, path = found
                sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
                sock.settimeout(CONNECT_SECONDS)
                try:
                    sock.connect(path)
                    if _peer_uid(sock) == os.geteuid():
                        return sock
                except OSError as e:
                    if e.errno not in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTDIR):
                        sock.close()
                        return None
                finally:
                    os.close(fd)
                sock.close()
            up = os.path.dirname(at)
            if up == at:
                return None
            at = up
    finally:
        os.close(cache_fd)


def _peer_uid(sock: _socket.socket) -> int:
    cred = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)  # pid, uid, gid
    return int.from_bytes(cred[4:8], sys.byteorder, signed=True)


def _relay(sock: _socket.socket, request: bytes) -> int | None:
    """Send the request; copy the daemon's frames to fds 1 and 2 until its exit status."""
    accepted = wrote = False  # (until something is written, a broken run is run here)
    buf = bytearray()
    try:
        sock.sendall(request)
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
            for kind, payload in frames(buf):
                if kind == EXIT:
                    return int(payload)
                if kind == LOCAL:
                    if not wrote:
                        return None
                    raise ValueError("declined after its output began")
                if not accepted:  # (the first frame, empty: the daemon runs it)
                    accepted = True
                    sock.settimeout(None)  # (a daemon that dies closes the connection)
                if not payload:
                    continue
                wrote = True
                try:
                    _write_all(1 if kind == OUT else 2, payload)
                except BrokenPipeError:
                    raise
                except OSError as e:  # (this process's own stream: said as a local grep says it)
                    why = e.strerror or str(e)
                    _write_all(2, f"rootgrep: [error] {' '.join(why.split())}\n".encode())
                    return 2
    except BrokenPipeError:
        # the reader of stdout went away (``| head``): stop quietly, as rg does
        return 0
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError) as e:
        if not wrote:
            return None
        _write_all(2, f"rootgrep: [error] the daemon's answer broke off ({e})\n".encode())
        return 2
    if not wrote:
        return None
    _write_all(2, b"rootgrep: [error] the daemon's answer broke off (it closed)\n")
    return 2


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
