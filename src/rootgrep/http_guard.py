"""HTTP connections held within bounds: a cap on open connections and a deadline on each
request's head and body (uvicorn has neither for a connection that sends nothing: 20,000 idle
TCP connections took every fd of a server and its one real client timed out).

``guarded_protocol`` makes a subclass of uvicorn's h11 protocol (uvicorn is pinned: see
pyproject) that
- counts the server's open connections; one past ``max_connections`` closes, at once, the
  oldest connection still waiting for its request (for at least ``grace``, up to 1 s),
  preferring one that never sent a whole request (a flood's) to an idle keep-alive one (a
  real client's, between calls); when there is none, the new one is closed instead;
- closes a connection whose request (head and body) has not all arrived ``request_seconds``
  after the request began (a cycle begins at the connection's start and after each answer;
  uvicorn's keep-alive time-out, 5 s, closes one idle between requests first).
A connection whose request has arrived is never closed by either: a long answer (an SSE
stream, a slow tool call) is the application's.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import time
from typing import Any

log = logging.getLogger("rootgrep.http")

DEFAULT_REQUEST_SECONDS = 10.0
WARN_SECONDS = 10.0  # at most one warning this often about refused or closed connections

# ---- who may bind where (checked by ``serve`` before it imports the MCP SDK) -----------------

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_HOST_HEADER = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?")


def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts connections from this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


def http_exposure_problem(host: str, token: str | None, allowed_hosts: list[str]) -> str | None:
    """Why an HTTP server on ``host`` must not start, or None. Beyond loopback anyone who
    can reach the port could call the tools, and a browser page could through DNS
    rebinding: such a bind needs a bearer token and the Host names clients will use."""
    for h in allowed_hosts:
        if not _HOST_HEADER.fullmatch(h):
            return f"--allowed-host {h!r} is not a host name or address (with an optional :port)"
    if is_loopback(host):
        return None
    missing = [
        flag
        for flag, ok in (("--auth-token-env VAR", token), ("--allowed-host HOST", allowed_hosts))
        if not ok
    ]
    if not missing:
        return None
    return (
        f"--host {host} is reachable beyond this machine: it needs {' and '.join(missing)} "
        "(a bearer token, and each Host name clients will use); refusing to start"
    )


def default_max_connections() -> int:
    """A quarter of the fd limit (the rest for indexes, watches and files), within
    [32, 1024]: sized for the machine, well below what exhausts it."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(32, min(1024, soft // 4))


LISTEN_BACKLOG = 2048  # connections the kernel queues for an accept (uvicorn's; no fd of ours)


def accept_batch(max_connections: int) -> int:
    """How many connections asyncio accepts at one wake-up before any of them runs (each an
    fd until its protocol closes it, a few loop iterations later): a quarter of the cap,
    within [16, 512]. asyncio takes it from the server's backlog, uvicorn's 2,048: under load
    a reconnecting flood then held far more fds than the cap in accepted, not yet closed
    sockets."""
    return max(16, min(512, max_connections // 4))


def guarded_server(config: Any) -> Any:
    """A ``uvicorn.Server`` for ``config`` (whose ``backlog`` is the accept batch) whose
    listening sockets queue ``LISTEN_BACKLOG`` connections in the kernel all the same: a
    short listen queue made a real client's connection reset under a flood."""
    import uvicorn

    class GuardedServer(uvicorn.Server):  # type: ignore[misc]
        async def startup(self, sockets: list[Any] | None = None) -> None:
            await super().startup(sockets)  # (asyncio listens with the batch as backlog)
            for sock in sockets or ():
                sock.listen(LISTEN_BACKLOG)  # (Linux: a listening socket's queue resized)

    return GuardedServer(config)


class Guard:
    """The server's connections: all open ones, and those waiting for a request in the
    order they began waiting (``waiting``; ``fresh``, those of them that never sent a whole
    request). Only a waiting one is ever closed to make room."""

    def __init__(self, max_connections: int, request_seconds: float) -> None:
        self.max_connections = max(1, max_connections)
        self.request_seconds = request_seconds
        self.grace = min(1.0, request_seconds / 2)
        self.open: set[Any] = set()
        self.waiting: dict[Any, None] = {}  # (a dict: insertion order, O(1) removal)
        self.fresh: dict[Any, None] = {}
        self.shed = 0  # connections closed to keep the cap, since the last warning
        self.late = 0  # connections closed at their request's deadline, since then
        self._warned = 0.0

    def admit(self, conn: Any, ready: bool) -> bool:
        """Whether ``conn`` (just made; ``ready``: its whole request head is already here)
        may stay: room is made by closing the oldest waiting connection, a fresh one first
        (for a ready one, whatever their age: it speaks now, they have not)."""
        if len(self.open) >= self.max_connections:
            victim = self._victim(0.0 if ready else self.grace)
            self.shed += 1
            self._warn()
            if victim is None:
                return False
            victim.drop()
        self.open.add(conn)
        return True

    def _victim(self, grace: float) -> Any:
        """The connection to close for a new one: the oldest waiting one that never sent a
        whole request and has waited ``grace`` (a client's new connection gets its request
        in long before: a burst of new connections never closes it before it can speak);
        else the oldest idle keep-alive one past its grace too; else None (the new one goes)."""
        now = time.monotonic()
        for pool in (self.fresh, self.waiting):
            for conn in pool:
                if now - conn.since >= grace:
                    return conn
                break  # (the oldest is the first: none after it has waited longer)
        return None

    def gone(self, conn: Any) -> None:
        self.open.discard(conn)
        self.waiting.pop(conn, None)
        self.fresh.pop(conn, None)

    def _warn(self) -> None:
        now = time.monotonic()
        if now - self._warned >= WARN_SECONDS and (self.shed or self.late):
            self._warned = now
            log.warning(
                "HTTP: %d connections closed to stay within --max-connections %d and %d whose "
                "request did not arrive within %g s (idle or slow clients, or a flood)",
                self.shed, self.max_connections, self.late, self.request_seconds,
            )  # fmt: skip
            self.shed = self.late = 0


def _head_here(transport: Any) -> bool:
    """Whether a whole request head already waits in the connection's socket (peeked, not
    read). A real client sends its request as it connects, and the listening socket defers
    an accept until data arrives (``defer_accept``): its new connection is ready when
    accepted, a flood's idle or byte-a-second one is not."""
    import socket

    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        with socket.fromfd(sock.fileno(), socket.AF_INET, socket.SOCK_STREAM) as dup:
            head = dup.recv(8192, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except OSError:
        return False
    return b"\r\n\r\n" in head


def defer_accept(sock: Any, seconds: float) -> None:
    """Linux: the kernel accepts a connection for the server only once it has sent data
    (or after ``seconds``): connections that send nothing never take a server fd."""
    import socket

    option = getattr(socket, "TCP_DEFER_ACCEPT", None)
    if option is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, option, max(1, int(seconds)))


def guarded_protocol(guard: Guard) -> type:
    """uvicorn's h11 protocol class, held by ``guard`` (pass it as ``Config(http=...)``)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    arrived = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR, h11.SWITCHED_PROTOCOL)

    class GuardedH11Protocol(H11Protocol):  # type: ignore[misc]
        _deadline: asyncio.TimerHandle | None = None
        _dropped = False
        since = 0.0  # (when it began waiting: ``Guard._victim``)

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            ready = _head_here(transport)
            if not guard.admit(self, ready):
                self.connections.discard(self)
                transport.abort()
                return
            self.since = time.monotonic()
            if not ready:  # (a ready one is read next: never a victim meanwhile)
                guard.fresh[self] = None
                guard.waiting[self] = None
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            guard.gone(self)
            self._stop_clock()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if not self._check() and self._deadline is None:
                self._arm()  # (the next request began: it has its time from now)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # (idle between requests: uvicorn's keep-alive time-out closes it; the clock
            # starts with the next request's first byte, so a client reusing the connection
            # is never cut by this one)
            if not self._check():
                self.since = time.monotonic()
                guard.waiting[self] = None

        def _check(self) -> bool:
            """Whether its request has arrived whole (then it is no longer waiting)."""
            if self._dropped or self.transport.is_closing():
                return True
            if self.conn.their_state in arrived:
                guard.waiting.pop(self, None)  # (its request is here: the app's now)
                guard.fresh.pop(self, None)  # (and it sent a whole one: a real client's)
                self._stop_clock()
                return True
            return False

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(guard.request_seconds, self._late)

        def _stop_clock(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _late(self) -> None:
            self._deadline = None
            if self.conn.their_state not in arrived:
                guard.late += 1
                guard._warn()
                self.drop()

        def drop(self) -> None:
            """Closed at once (no answer: it sent no whole request to answer)."""
            self._dropped = True
            guard.gone(self)
            self._stop_clock()
            self.transport.abort()

    return GuardedH11Protocol
