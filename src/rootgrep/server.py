"""MCP wiring only: tools, roots lifecycle hooks, transports. The logic lives in ``service``.

Roots, by protocol era (SPEC §3):
- handshake era (2024-11-05 … 2025-11-25): a client that declared ``roots`` is asked for
  ``roots/list`` after ``notifications/initialized`` and again on ``roots/list_changed``; the
  answer is read raw (the SDK's typed model would normalise ``..`` and ``%2e``), with a bounded
  wait and retries (over HTTP the first request can be lost);
- 2026-07-28: no back channel; the roots come with each tool call through the SDK's
  ``ListRoots`` resolver when the request declares the capability (typed, so already
  normalised by the SDK before rootgrep sees them).
A client without the roots capability works in the operator's roots; no effective roots means
every filesystem tool fails with ``no_roots``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hmac
import inspect
import json
import logging
import os
import sys
import threading
import warnings
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Annotated, Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server import ServerRequestContext
from mcp.server.elicitation import AcceptedElicitation
from mcp.server.mcpserver import Context, ListRoots, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.types import (
    CallToolResult,
    EmptyResult,
    NotificationParams,
    SetLevelRequestParams,
    TextContent,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from . import __version__
from .confine import _error as confine_error
from .errors import NoRoots, RootgrepError, RootRemoved
from .http_guard import _HOST_HEADER, LOOPBACK_HOSTS, http_exposure_problem
from .memory import IdleTrim, idle_trimmer
from .roots import Root, listed
from .service import Service, Token
from .sessions import (
    REFRESH_WAIT_SECONDS,
    SESSION_ROOTS_THREADS,
    ClientRoots,
    RawRoots,
    accept_raw_roots,
    check_inside,
    hung_pins_of,
    scope,
)
from .tools import INSTRUCTIONS, TOOLS, Call, Out, ToolSpec, invalid_argument_message

# Logging notifications and roots requests are deprecated in the newest protocol era, and
# used on purpose for clients of the older ones (the SDK warns at each first use, on stderr,
# which an operator reads as a fault): not said again
warnings.filterwarnings(
    "ignore",
    message=r"The (logging|roots) capability is deprecated",
    category=MCPDeprecationWarning,
)

SPECS = {spec.name: spec for spec in TOOLS}

log = logging.getLogger("rootgrep.server")
M = TypeVar("M")

STATE_KEY = "rootgrep.client_roots"
ROOTS_ATTEMPTS = 3
ROOTS_TIMEOUT = 2.0
# roots/list on a call's own response stream cannot be lost, so running out of time there
# means only a slow answer (a loaded server or client): it is waited for as long as a call
# waits for a refresh, not taken for lost after ROOTS_TIMEOUT (which failed first calls
# with [no_roots] under load)
ROOTS_ON_REQUEST_TIMEOUT = REFRESH_WAIT_SECONDS
NOTIFY_TIMEOUT = 2.0  # a build's log notification to a client that does not read is dropped
# ---- roots, per era ----------------------------------------------------------------------------


def _modern(ctx: Context) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


async def roots_for_call(ctx: Context) -> ListRoots | None:
    """Resolver: on 2026-07-28, ask for the client's roots with this call (when the request
    declares the capability). Handshake-era calls use the roots kept per connection. (A
    coroutine: the SDK runs a plain function resolver in a worker thread, a hop per call.)"""
    if not _modern(ctx):
        return None
    caps = ctx.client_capabilities
    return ListRoots() if caps is not None and caps.roots is not None else None


CallRoots = Annotated[Any, Resolve(roots_for_call)]

# The SDK wraps every resolver's value (``roots_for_call``'s, on every call) as
# ``AcceptedElicitation[Any]``. pydantic keeps a parametrized generic only while something
# holds it (a weak cache), so between calls the garbage collector drops it and each call built
# the class again: about 1 ms per call. Held here, it is built once.
_ACCEPTED_ANY = AcceptedElicitation[Any]


async def fetch_raw_roots(conn: Any) -> RawRoots:
    """``roots/list`` on a connection's standalone channel, answer kept raw; bounded wait,
    retried on time-out."""
    last: Exception | None = None
    for _ in range(ROOTS_ATTEMPTS):
        try:
            result = await conn.outbound.send_raw_request(
                "roots/list", None, {"timeout": ROOTS_TIMEOUT}
            )
        except MCPError as e:
            last = e
            if e.error.code == -32001:  # timed out: the request may have been lost; ask again
                continue
            raise
        return _raw_roots_of(result)
    raise TimeoutError(f"roots/list got no answer after {ROOTS_ATTEMPTS} attempts") from last


async def fetch_raw_roots_on_request(session: Any) -> RawRoots:
    """``roots/list`` on the stream of the request being handled (over streamable HTTP: the
    POST's own response stream, which is open, so the request cannot be lost). One bounded
    attempt, bounded by ``ROOTS_ON_REQUEST_TIMEOUT``. The SDK's ``ListRoots`` resolver does the
    same in the handshake era; rootgrep sends it raw to keep the answer unnormalised."""
    outbound = session._request_outbound  # private in mcp 2.3; no public raw equivalent
    return _raw_roots_of(
        await outbound.send_raw_request("roots/list", None, {"timeout": ROOTS_ON_REQUEST_TIMEOUT})
    )


def _raw_roots_of(result: Any) -> RawRoots:
    roots = result.get("roots") if isinstance(result, dict) else None
    if not isinstance(roots, list):
        raise ValueError("the roots/list answer has no roots list")
    return roots


def _standalone_may_lose(ctx: Context) -> bool:
    """Whether server-initiated requests on this connection's standalone channel can be lost:
    streamable HTTP (the GET stream a client may not have opened yet) with a request stream
    that can carry a request instead."""
    rc = ctx.request_context
    return getattr(rc, "request", None) is not None and bool(ctx.session.can_send_request)


def _notifier(session: Any) -> Callable[[str], Awaitable[None]]:
    async def notify(message: str) -> None:
        await session.send_log_message("warning", message, "rootgrep.roots", None)

    return notify


_client_lock = threading.Lock()


def _client_roots(service: Service, session: Any) -> tuple[ClientRoots | None, bool]:
    """The connection's ClientRoots (created on first need); the flag says it is new."""
    caps = session.client_capabilities
    if caps is None or caps.roots is None:
        return None, False
    conn = session._connection
    with _client_lock:
        existing = conn.state.get(STATE_KEY)
        if existing is not None:
            return existing, False
        client = ClientRoots(
            service,
            partial(fetch_raw_roots, conn),
            list_changed=bool(caps.roots.list_changed),
            notify=_notifier(session),
        )
        conn.state[STATE_KEY] = client
    conn.exit_stack.callback(client.close)
    return client, True


class Lease:
    """The roots one call holds, released exactly once, by whoever finishes the call last.

    The worker thread marks the lease *started* as it begins (atomically, under the lock);
    from then on only it releases the roots, when its work returns, so no root fd is closed
    under a running thread. A waiting task that is cancelled (or fails) before its worker
    started *claims* the lease instead and releases it itself; a worker that starts after
    that finds the lease claimed and does nothing."""

    def __init__(self, held: list[Root], token: Token, client: ClientRoots | None) -> None:
        self.held = held
        self.token = token
        self.client = client
        self._lock = threading.Lock()
        self._state = "queued"  # -> "started" (by the worker) or "claimed" (by the caller)
        self._released = False

    def start(self) -> bool:
        """The worker, as it begins: False when the caller already gave the call up."""
        with self._lock:
            if self._state != "queued":
                return False
            self._state = "started"
            return True

    def claim(self) -> bool:
        """The caller, giving up: True when no worker started (the caller then releases)."""
        with self._lock:
            if self._state != "queued":
                return False
            self._state = "claimed"
            return True

    def check(self) -> None:
        """``root_removed`` unless every root is still held and none was retired since the
        lease was taken (the work may have waited long in a queue)."""
        self.token.check()
        for r in self.held:
            if r.fs.retired or r.fs.fd < 0:
                raise RootRemoved(f"root {r.name!r} was removed while this call waited; retry")

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        if self.client is not None:
            self.client.untrack(self.token)
        for r in self.held:
            r.release()


# Worker threads: at most WORKERS blocking jobs run at once over all sessions, and one session
# holds at most SESSION_WORKERS of them, so a session flooding the server with slow calls
# leaves WORKERS - SESSION_WORKERS threads to the others (its further calls wait in its own
# queue, not in the shared one). Both queues are FIFO. A handshake-era session is its
# connection; 2026-07-28 has no sessions (each call is its own connection), so its calls
# share by client address over HTTP (one share per remote host) and one share otherwise.
WORKERS = 4
SESSION_WORKERS = 2
# The small blocking steps done off the event loop outside the workers (roots re-checked;
# client roots are pinned, and their audit lines written, on their own threads: see
# sessions.ROOTS_THREADS) use anyio's default limiter:
# 40 threads by default, of which 64 HTTP sessions kept 20-30 alive and coming and going
# (each its stack and its share of the C allocator's arenas: RSS that varied by ±25 MiB with
# them). A served process bounds it at DEFAULT_THREADS.
DEFAULT_THREADS = 6
SESSION_LIMITER_KEY = "rootgrep.session_workers"
MAX_IDLE_SHARES = 256  # idle per-address shares kept before they are dropped


def bound_default_threads() -> None:
    """anyio's default thread limiter (this event loop's) at ``DEFAULT_THREADS``."""
    limiter = anyio.to_thread.current_default_thread_limiter()
    if limiter.total_tokens != DEFAULT_THREADS:
        limiter.total_tokens = DEFAULT_THREADS


def _connection_state(session: Any) -> dict[str, Any] | None:
    state = getattr(getattr(session, "_connection", None), "state", None)
    return state if isinstance(state, dict) else None


def _peer_key(ctx: Context) -> str:
    """The share a 2026-07-28 call belongs to: its HTTP client's host, or the one local
    client of a stdio or in-memory server."""
    client = getattr(getattr(ctx.request_context, "request", None), "client", None)
    host = getattr(client, "host", None)
    return f"http:{host}" if isinstance(host, str) else "local"


# ---- the server ----------------------------------------------------------------------------


class RootgrepServer(MCPServer):
    """MCPServer that hides the write tools from ``tools/list`` when serving read-only (a
    call to one still answers ``[read_only]``)."""

    def __init__(self, service: Service) -> None:
        super().__init__("rootgrep", version=__version__, instructions=INSTRUCTIONS)
        self.service = service
        self.limiter = anyio.CapacityLimiter(WORKERS)
        self._shares: dict[str, anyio.CapacityLimiter] = {}  # 2026-07-28 calls, by address
        self._pin_shares: dict[str, anyio.CapacityLimiter] = {}  # their roots' pins, too
        self.idle_trim: IdleTrim | None = None  # (set by serve_stdio / serve_http)
        self.serving = False  # (set by serve_stdio / serve_http: bound_default_threads)

    async def list_tools(self) -> list[Any]:
        tools = await super().list_tools()
        if self.service.settings.allow_write:
            return tools
        return [t for t in tools if self._listed(SPECS[t.name])]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> Any:
        """The SDK's call, with argument errors answered as one ``[invalid_argument]`` line
        naming the argument (SPEC §8), never the validation dump. A string holding a lone
        surrogate (no UTF-8 text: only an in-process client can send one) is refused the same
        way before anything reads it."""
        bad = _not_text(arguments)
        if bad is not None:
            return _error(
                f"[invalid_argument] {name[:100]}: `{bad}` is not valid text (it holds a lone "
                "surrogate); send it as UTF-8 text"
            )
        if self.serving:
            bound_default_threads()
        trim = self.idle_trim
        if trim is not None:
            trim.begin()
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as e:
            spec = SPECS.get(name)
            if isinstance(e.__cause__, ValidationError) and spec is not None:
                return _error(invalid_argument_message(name, e.__cause__, spec.args))
            if spec is None:
                known = ", ".join(s.name for s in TOOLS if self._listed(s))
                return _error(f"[invalid_argument] there is no tool {name[:100]!r}; tools: {known}")
            raise
        finally:
            if trim is not None:
                trim.end()

    def _listed(self, spec: ToolSpec[Any, Any]) -> bool:
        return self.service.settings.allow_write or not spec.write

    async def call(
        self, ctx: Context, call_roots: Any, spec: ToolSpec[Any, Any], args: Any
    ) -> CallToolResult:
        """Run one tool: effective roots, a lease on them, the blocking work in a thread,
        the answer fitted to the budget (the notes about the roots included)."""
        per_call: list[Root] = []
        notes: list[str] = []  # about the roots (over the cap), added to the answer's text
        indexes = self.service.indexes
        try:
            client: ClientRoots | None = None
            if call_roots is not None:  # 2026-07-28: roots arrived with this call
                raw = [{"uri": str(r.uri), "name": r.name} for r in call_roots.roots]
                per_call, problems = await accept_raw_roots(
                    raw, self.service, self.service.audit, (), notes, self._pin_share(ctx)
                )
                await _warn(ctx, problems)
                roots = scope(per_call, self.service)
            elif _modern(ctx):
                roots = scope(None, self.service)
            else:
                client, new = _client_roots(self.service, ctx.session)
                primed = False
                if client is not None and _standalone_may_lose(ctx):
                    primed = await client.prime(partial(fetch_raw_roots_on_request, ctx.session))
                if new and client is not None and not primed:
                    await client.refresh()
                roots = scope(await client.current() if client else None, self.service)
                notes = list(client.notes) if client else []
            if any(r.anchor is not None for r in roots):
                # (each on a roots thread, given up after PIN_SECONDS: see check_inside)
                share = client.pin_share if client is not None else self._pin_share(ctx)
                roots, unchecked = await check_inside(roots, share)
                await _warn(ctx, unchecked)
                if unchecked and not roots and spec.name != "list_roots":
                    raise NoRoots("no effective roots: " + "; ".join(unchecked))
                notes = [*notes, *unchecked]  # (said by the answer: which roots it left out)
            if not roots and spec.name != "list_roots":
                announced = (
                    per_call
                    if call_roots is not None
                    else (await client.current() if client is not None else None)
                )
                raise NoRoots(self._no_roots(announced))
            lease = await self._lease(roots, client)
            progress = _progress(ctx) if spec.progress else None
            call = Call(self.service, lease.held, lease.token, progress)
            noted = _noted("", notes)
            out = Out(
                budget=max(1, self.service.settings.max_answer_chars - len(noted)),
                several_roots=len(lease.held) > 1,
            )
            # the text answer and the structured content are made in the worker too: a page
            # of 1,000 matches is milliseconds of work that held the event loop
            work: Callable[[], Any] = partial(_answered, partial(spec.run, call, args), spec, out)
            if indexes is not None:
                # the roots' indexes are started in the worker that runs the tool, before
                # its work (stats beneath the roots: off the event loop; one thread hop a
                # call, not two); under the lease, so every root's fd is open for the dup
                work = partial(
                    _with_indexes, work, indexes, lease.held, per_call=call_roots is not None,
                    owner=id(client) if client is not None else 0,
                    listener=None if _modern(ctx) else _session_listener(ctx.session),
                )  # fmt: skip
            answer, structured = await self._run(work, lease, spec.write, self._share(ctx))
            return CallToolResult(
                content=[TextContent(type="text", text=answer + noted)],
                structured_content=structured,
            )
        except RootgrepError as e:
            return _error(_noted(str(e), notes))
        except OSError as e:  # anything the confinement layer did not translate
            return _error(_noted(str(confine_error(e)), notes))
        except Exception:
            log.exception("a tool failed unexpectedly")
            return _error(
                "[invalid_path] rootgrep failed unexpectedly on this request (a bug: the "
                "server log has the details); try another path or report it"
            )
        finally:
            for r in per_call:
                r.retire()

    def _no_roots(self, announced: list[Root] | None) -> str:
        """Why a call has no roots: what the client announced, what the operator allows,
        and that they do not overlap (or that one side has none)."""
        ops = [os.fsdecode(r.path) for r in self.service.operator_roots]
        allowed = listed(ops, "not shown") if ops else "any directory (no --root given)"
        if announced is None:
            told = "the client has no roots capability"
        elif not announced:
            told = "the client announced no usable roots"
        else:
            told = "the client announced " + listed(
                [(r.announced or r.uri)[:200] for r in announced], "not shown"
            )  # (as the client spelled them: the canonical path may lie outside every root)
        hint = (
            "announce a root inside one of the operator's roots, or ask the operator to "
            "serve yours (rootgrep serve --root DIR)"
            if ops
            else "announce a root, or start rootgrep with --root DIR"
        )
        overlap = "; they do not overlap" if announced and ops else ""
        return f"no effective roots: {told}; the operator allows {allowed}{overlap}; {hint}"

    def _share(self, ctx: Context) -> anyio.CapacityLimiter:
        """The session's share of the workers (see WORKERS)."""
        state = None if _modern(ctx) else _connection_state(ctx.session)
        with _client_lock:
            if state is not None:
                limiter = state.get(SESSION_LIMITER_KEY)
                if limiter is None:
                    limiter = state[SESSION_LIMITER_KEY] = anyio.CapacityLimiter(SESSION_WORKERS)
                return limiter
            key = _peer_key(ctx)
            limiter = self._shares.get(key)
            if limiter is None:
                if len(self._shares) >= MAX_IDLE_SHARES:
                    for k, lim in list(self._shares.items()):
                        if lim.borrowed_tokens == 0 and lim.statistics().tasks_waiting == 0:
                            del self._shares[k]
                limiter = self._shares[key] = anyio.CapacityLimiter(SESSION_WORKERS)
            return limiter

    def _pin_share(self, ctx: Context) -> anyio.CapacityLimiter:
        """A 2026-07-28 client's share of the roots threads, by address like ``_share``
        (sessions.SESSION_ROOTS_THREADS; its hung pins count against it: OWNER_HUNG_PINS)."""
        key = _peer_key(ctx)
        with _client_lock:
            limiter = self._pin_shares.get(key)
            if limiter is None:
                if len(self._pin_shares) >= MAX_IDLE_SHARES:
                    for k, lim in list(self._pin_shares.items()):
                        idle = lim.borrowed_tokens == 0 and lim.statistics().tasks_waiting == 0
                        if idle and not hung_pins_of(lim):  # (kept while it owns hung pins)
                            del self._pin_shares[k]
                limiter = self._pin_shares[key] = anyio.CapacityLimiter(SESSION_ROOTS_THREADS)
            return limiter

    async def _lease(self, roots: list[Root], client: ClientRoots | None) -> Lease:
        held: list[Root] = []
        for r in roots:
            if not r.acquire():
                for h in held:
                    h.release()
                raise RootRemoved(f"root {r.name!r} was just removed; retry with the current roots")
            held.append(r)
        token = Token(frozenset(r.id for r in held))
        if client is not None:
            client.track(token)
        return Lease(held, token, client)

    async def _run(
        self,
        work: Callable[[], M],
        lease: Lease,
        write: bool,
        share: anyio.CapacityLimiter | None = None,
    ) -> M:
        """Run ``work`` in a worker thread, within the session's share of the workers.

        The worker re-checks the lease when it starts (a call may wait long behind busy
        workers: its roots may have been removed meanwhile, and a write must then not
        happen) and releases it when the work returns. A read is abandoned when its caller
        is cancelled (its token is set, so it stops at its next check); a write that has
        started finishes (atomically) even if the caller gives up."""

        def guarded() -> M:
            if not lease.start():  # the caller gave up before this worker began
                raise RootRemoved("the call was cancelled before it started")
            try:
                lease.check()
                return work()
            finally:
                lease.release()

        try:
            async with share if share is not None else _NO_LIMIT:
                return await anyio.to_thread.run_sync(
                    guarded, limiter=self.limiter, abandon_on_cancel=not write
                )
        except BaseException as e:
            if not write and isinstance(e, anyio.get_cancelled_exc_class()):
                lease.token.cancel()  # an abandoned worker stops at its next check
            if lease.claim():  # its worker never started: release here
                lease.release()
            raise


_NO_LIMIT = contextlib.nullcontext()


def _answered(
    work: Callable[[], Any], spec: ToolSpec[Any, Any], out: Out
) -> tuple[str, dict[str, Any]]:
    """A tool's work, then its text answer (which may cut the result's items to fit) and
    its structured content (the same items)."""
    result = work()
    answer = spec.answer(result, out)
    return answer, result.model_dump(mode="json")


def _with_indexes(
    work: Callable[[], M],
    indexes: Any,
    held: list[Root],
    *,
    per_call: bool,
    owner: int,
    listener: Callable[[str], None] | None,
) -> M:
    """Start (or share) the indexes of a call's roots, then run its work (in its worker).

    A session owns its roots' indexes (released when it drops a root or ends); per-call
    roots (2026-07-28) have no owner: each is used, busy, while this work runs (left when it
    returns, also when its caller gave it up: an abandoned read still running keeps its
    index), and stopped once unused for the idle time."""
    used: list[Any] = []
    try:
        # outermost first: a nested root then shares its outer root's index
        for r in sorted(held, key=lambda r: len(r.path)):
            if not per_call:
                indexes.activate(r, owner, listener=listener)
            elif (ix := indexes.use(r, listener=listener, busy=True)) is not None:
                used.append(ix)
        return work()
    finally:
        for ix in used:
            indexes.leave(ix)


LISTENER_KEY = "rootgrep.build_listener"


MAX_ARGUMENT_DEPTH = 8  # how deep _not_text looks into nested arguments (edit_file's edits)


def _not_text(value: Any, where: str = "", depth: int = 0) -> str | None:
    """The first argument (by its place, e.g. ``edits[0].old_text``) whose text is not valid
    UTF-8, or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where or "arguments"
        return None
    if depth > MAX_ARGUMENT_DEPTH:
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            key = k if isinstance(k, str) else str(k)
            found = _not_text(key, f"{where}.{key}" if where else key, depth + 1)
            found = found or _not_text(v, f"{where}.{key}" if where else key, depth + 1)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _not_text(v, f"{where}[{i}]", depth + 1)
            if found is not None:
                return found
    return None


def _session_listener(session: Any) -> Callable[[str], None] | None:
    """The one build listener of a connection, so a session hears each message once however
    many calls it makes during a build. A 2026-07-28 call has no connection to hear it (and
    logging is deprecated in that era): it gets none, so calls during a build add nothing."""
    state = _connection_state(session)
    if state is None:
        return None
    with _client_lock:
        listener = state.get(LISTENER_KEY)
        if listener is None:
            listener = state[LISTENER_KEY] = _build_listener(session)
        return listener


def _progress(ctx: Context) -> Callable[[int, int | None, str], None]:
    """Progress notifications from a worker thread to the call's client (best effort, each
    bounded in time: the work never waits long for a client that does not read), each
    with a greater value than the one before (one that is not is dropped)."""

    async def report(done: int, total: int | None, message: str) -> None:
        with anyio.move_on_after(NOTIFY_TIMEOUT):
            await ctx.report_progress(done, total, message=message)

    last: list[int] = []  # the last value sent: a value that does not increase is dropped

    def progress(done: int, total: int | None, message: str) -> None:
        if last and done <= last[0]:  # (MCP: a call's progress must increase)
            return
        last[:] = [done]
        try:
            anyio.from_thread.run(report, done, total, message)
        except Exception:  # progress is best effort
            log.debug("progress notification failed", exc_info=True)

    return progress


def _build_listener(session: Any) -> Callable[[str], None]:
    """Logging notifications about a background build, sent from the builder's thread to
    this client (best effort: a session that is gone simply hears nothing)."""
    loop = asyncio.get_running_loop()
    sending: set[asyncio.Task[None]] = set()  # (held: the loop keeps only weak references)
    waiting: list[str] = []  # the newest message not sent yet (older ones are dropped)

    async def send(message: str) -> None:
        with anyio.move_on_after(NOTIFY_TIMEOUT):
            await session.send_log_message("info", message, "rootgrep.index", None)

    def sent(task: asyncio.Task[None]) -> None:
        sending.discard(task)
        if waiting:
            post(waiting.pop())

    def post(message: str) -> None:  # (on the event loop)
        if sending:  # one message in flight at a time; the last one always goes out
            waiting[:] = [message]
            return
        task = loop.create_task(send(message))
        sending.add(task)
        task.add_done_callback(sent)

    def listen(message: str) -> None:
        # the builder never waits for the client (it may hold the index's sync lock, and a
        # client that does not read must not stall every call that needs that index)
        loop.call_soon_threadsafe(post, message)

    return listen


async def _warn(ctx: Context, problems: list[str]) -> None:
    """Log each problem with the roots, and send it to the client (best effort)."""
    for p in problems:
        log.warning("%s", p)
        try:
            await ctx.warning(p, logger_name="rootgrep.roots")
        except Exception:  # a log message is best effort
            log.debug("could not send a log notification", exc_info=True)


def _noted(text: str, notes: list[str]) -> str:
    return "".join([text, *(f"\n(note: {n})" for n in notes)])


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def build_server(service: Service) -> RootgrepServer:
    mcp = RootgrepServer(service)
    ll = mcp._lowlevel_server
    svc = service

    async def on_initialized(ctx: ServerRequestContext[Any], params: NotificationParams) -> None:
        client, new = _client_roots(svc, ctx.session)
        if client is not None and new:
            await client.refresh()

    async def on_roots_changed(ctx: ServerRequestContext[Any], params: NotificationParams) -> None:
        client, _ = _client_roots(svc, ctx.session)
        if client is not None:
            await client.refresh()

    async def on_set_level(ctx: ServerRequestContext[Any], params: SetLevelRequestParams) -> Any:
        return EmptyResult()

    ll.add_notification_handler("notifications/initialized", NotificationParams, on_initialized)
    ll.add_notification_handler(
        "notifications/roots/list_changed", NotificationParams, on_roots_changed
    )
    ll.add_request_handler("logging/setLevel", SetLevelRequestParams, on_set_level)
    _register_tools(mcp)
    return mcp


def _register_tools(mcp: RootgrepServer) -> None:
    """Every tool of ``TOOLS``, registered the same way: its arguments validated by its own
    model (unknown names refused), its blocking work run by ``RootgrepServer.call``."""
    for spec in TOOLS:
        _register(mcp, spec)


def _register(mcp: RootgrepServer, spec: ToolSpec[Any, Any]) -> None:
    async def tool(ctx: Context, roots: CallRoots = None, **arguments: Any) -> CallToolResult:
        return await mcp.call(ctx, roots, spec, spec.args.model_construct(**arguments))

    tool.__name__ = spec.name
    params = [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context),
        inspect.Parameter("roots", inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=CallRoots),
        inspect.Parameter("arguments", inspect.Parameter.VAR_KEYWORD),
    ]  # fmt: skip
    returns = Annotated[CallToolResult, spec.result]
    tool.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
    tool.__annotations__ = {"ctx": Context, "roots": CallRoots, "return": returns}
    registered = mcp._tool_manager.add_tool(
        tool, name=spec.name, title=spec.title, description=spec.description,
        annotations=spec.annotations,
    )  # fmt: skip
    strict = type(f"{spec.args.__name__}Strict", (spec.args, ArgModelBase), {})
    registered.fn_metadata.arg_model = strict
    registered.parameters = compact_schema(strict.model_json_schema(by_alias=True))
    meta = registered.fn_metadata
    if meta.output_schema is not None:
        out = shallow_items(inline_refs(meta.output_schema), spec.bulk)
        if "$defs" in out and '"$ref"' not in json.dumps({**out, "$defs": None}):
            del out["$defs"]  # (a recursive item made shallow: nothing refers to it now)
        meta.output_schema = compact_schema(out, descriptions=False)
        # published, not checked again here: the structured content is the result model's
        # own dump (``call``), and re-validating it parsed every item of a page into models
        # a second time per call (a client checks it against the schema anyway)
        meta.output_model = None


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema with its local ``$ref``s replaced by the definitions they name and
    pydantic's generated ``title``s left out: it accepts exactly the same documents. A client
    checks each result against the tool's output schema (the SDK's, with ``jsonschema``, per
    item of a list): resolving a ``$ref`` for every match and every root of an answer was
    about a quarter of that check. A recursive definition (``directory_tree``'s node) stays a
    ``$ref`` into ``$defs`` below its first use."""
    defs: dict[str, Any] = schema.get("$defs", {})
    kept: dict[str, Any] = {}  # recursive definitions, still referenced

    def walk(node: Any, seen: tuple[str, ...], key: str | None) -> Any:
        if isinstance(node, list):
            return [walk(v, seen, None) for v in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and len(node) == 1:
            name = ref.removeprefix("#/$defs/")
            if name in seen:  # recursive: referenced, defined once in $defs
                if name not in kept:
                    kept[name] = None  # (placeholder: a cycle through it stops here)
                    kept[name] = walk(defs[name], (name,), None)
                return node
            return walk(defs[name], (*seen, name), None)
        out: dict[str, Any] = {}
        for k, v in node.items():
            if k == "$defs" or (k == "title" and isinstance(v, str) and key != "properties"):
                continue
            out[k] = walk(v, seen, k)
        return out

    top = walk(schema, (), None)
    if kept:
        top["$defs"] = kept
    return top


def compact_schema(node: Any, *, descriptions: bool = True, key: str | None = None) -> Any:
    """A JSON schema that accepts the same documents in fewer characters (a client puts
    every tool's schemas in the model's context: the tool list was 32k characters): no
    generated ``title``s, no ``"default": null``, ``anyOf`` of plain types as one ``type``
    list. ``descriptions=False`` (output schemas: the model reads the text answer) keeps only
    the descriptions of list items (``shallow_items``: they name the items' fields)."""
    if isinstance(node, list):
        return [compact_schema(v, descriptions=descriptions) for v in node]
    if not isinstance(node, dict):
        return node
    if key == "properties":  # (names, not keywords)
        return {k: compact_schema(v, descriptions=descriptions) for k, v in node.items()}
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k == "title" and isinstance(v, str):
            continue
        if k == "default" and (v is None or not descriptions):
            continue
        if k == "description" and not descriptions and key != "items":
            continue
        out[k] = compact_schema(v, descriptions=descriptions, key=k)
    members = out.get("anyOf")
    if isinstance(members, list) and _mergeable(members):
        del out["anyOf"]
        for m in members:
            out.update({k: v for k, v in m.items() if k != "type"})
        out["type"] = [m["type"] for m in members]
    return out


# the keywords that constrain one JSON type only (a value of another type passes them): an
# ``anyOf`` of single-typed members each using its own type's keywords is one ``type`` list
_TYPED = {
    "string": {"minLength", "maxLength", "pattern"},
    "integer": {"minimum", "maximum"},
    "number": {"minimum", "maximum"},
    "array": {"items", "minItems", "maxItems"},
    "null": set(),
    "boolean": set(),
}


def _mergeable(members: list[Any]) -> bool:
    seen: set[str] = set()
    kinds: set[str] = set()
    for m in members:
        if not isinstance(m, dict) or not isinstance(m.get("type"), str):
            return False
        kind = m["type"]
        own = set(m) - {"type"}
        if kind not in _TYPED or not own <= _TYPED[kind] or own & seen or kind in kinds:
            return False
        if kind in ("integer", "number") and kinds & {"integer", "number"}:
            return False  # (both would take the same minimum)
        seen |= own
        kinds.add(kind)
    return True


def shallow_items(schema: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """The output schema with the items of its page-sized lists (``fields``: a grep's up to
    1,000 matches) described in one step: each item is an object with its required fields,
    and every field's name, type and meaning are in the item's ``description``. The Python
    SDK's client checks every answer against the schema with ``jsonschema``, which builds a
    new validator for every sub-schema it enters: a typed field costs about 4 µs an item, so
    a typed match (ten sub-schemas) cost 40-60 µs and a page of 1,000 matches about 50 ms,
    more than the search itself. Described this way an item costs one step (a few µs); the
    server builds every item from its result model, so the types hold without a client
    re-checking each one. No ``properties`` map either: one of ``true`` checks nothing, yet
    each of its fields cost every item a call (2-4 ms of a page of 1,000 matches)."""
    props = schema.get("properties", {})
    for name in fields:
        items = props.get(name, {}).get("items")
        if not isinstance(items, dict) or items.get("type") != "object":
            continue
        fields_of = items.get("properties", {})
        described = ", ".join(f"{k} ({_type_of(v)})" for k, v in fields_of.items())
        shallow: dict[str, Any] = {"type": "object", "description": f"Fields: {described}."}
        if items.get("required"):
            shallow["required"] = list(items["required"])
        props[name] = {**props[name], "items": shallow}
    return schema


def _type_of(node: Any) -> str:
    """A sub-schema's type in a few words: ``string``, ``integer or null``, ``array of
    string``, ``object {id: string, name: string}``."""
    if not isinstance(node, dict):
        return "any"
    if "anyOf" in node:
        return " or ".join(_type_of(n) for n in node["anyOf"])
    if "enum" in node:
        return " | ".join(json.dumps(v) for v in node["enum"])
    kind = node.get("type", "any")
    if kind == "array":
        return f"array of {_type_of(node.get('items'))}"
    if kind == "object" and isinstance(node.get("properties"), dict):
        inner = ", ".join(f"{k}: {_type_of(v)}" for k, v in node["properties"].items())
        return f"object {{{inner}}}"
    if "$ref" in node:
        return "object (" + str(node["$ref"]).rsplit("/", 1)[-1] + ")"
    return str(kind)


# ---- transports ------------------------------------------------------------------------------


class BearerAuth:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <token>`` (401
    otherwise). The token is compared in constant time and never logged."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            got = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(got, self._expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"www-authenticate", b"Bearer"), (b"content-length", b"12")],
                    }
                )
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await self.app(scope, receive, send)


def transport_security(allowed_hosts: list[str]) -> TransportSecuritySettings:
    """Host/Origin validation for every bind (the SDK turns it on only for a bind address
    spelled 127.0.0.1, localhost or ::1): the loopback names on any port, plus each allowed
    host (on any port unless it names one), and the same as http(s) origins."""
    hosts: list[str] = []
    origins: list[str] = []
    for h in [*LOOPBACK_HOSTS, *allowed_hosts]:
        m = _HOST_HEADER.fullmatch(h)
        forms = [h] if m is not None and m.group(2) else [h, f"{h}:*"]
        hosts += forms
        origins += [f"{scheme}://{f}" for scheme in ("http", "https") for f in forms]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(dict.fromkeys(hosts)),
        allowed_origins=list(dict.fromkeys(origins)),
    )


def http_app(
    mcp: RootgrepServer, *, host: str, token: str | None, allowed_hosts: Sequence[str] = ()
) -> Any:
    problem = http_exposure_problem(host, token, list(allowed_hosts))
    if problem is not None:
        raise ValueError(problem)
    app = mcp.streamable_http_app(
        host=host, transport_security=transport_security(list(allowed_hosts))
    )
    app = NoReplay(app)
    if mcp.serving:
        app = Serving(app, mcp.idle_trim)
    return BearerAuth(app, token) if token else app


class NoReplay:
    """ASGI middleware: a request's ``Last-Event-ID`` is dropped. The server keeps no event
    history (no event store: it never sends an event id), so there is nothing to replay, and
    the SDK, asked to replay without a store, answered nothing: a 500 to a client that
    reconnects with a made-up or stale id. Dropped, the GET opens a new stream."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = scope.get("headers") or []
            if any(k == b"last-event-id" for k, _ in headers):
                scope = {**scope, "headers": [(k, v) for k, v in headers if k != b"last-event-id"]}
        await self.app(scope, receive, send)


class Serving:
    """ASGI middleware of a served process: anyio's default threads bounded before any
    request is handled (``bound_default_threads``), and each HTTP request that ends (a
    session's stream closed, its ``DELETE``) counted as activity for the idle trim, which
    then runs after it (what the session kept is freed as it closes)."""

    def __init__(self, app: Any, trim: IdleTrim | None) -> None:
        self.app = app
        self.trim = trim

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        bound_default_threads()
        try:
            await self.app(scope, receive, send)
        finally:
            if scope["type"] == "http" and self.trim is not None:
                self.trim.touch()


FULL_GC_THAWED_EVERY = 16  # one full collection in this many also looks at the frozen objects
GC_YOUNG_THRESHOLD = 10_000  # allocations between collections of the youngest generation


def tune_gc() -> None:
    """The garbage collector of a long-running server: what survives a full collection is
    frozen (``gc.freeze``: later collections do not walk it again), and one full collection
    in ``FULL_GC_THAWED_EVERY`` first thaws everything, so a cycle that became garbage after
    it was frozen is still collected. An index keeps millions of objects alive (entries,
    decoded symbols) that every full collection walked: 100-250 ms each, about one call in
    ten on F. The youngest generation is collected every ``GC_YOUNG_THRESHOLD`` allocations
    instead of 700: a call that builds a page of 1,000 matches, all alive until it returns,
    otherwise ran 14 collections that found nothing to free. (Not for the CLI's one-shot
    runs, nor in-process servers: they keep the interpreter's defaults.)"""
    if _gc_tuned:
        return
    _gc_tuned.append(True)
    _, mid, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, mid, old)
    full = [0]

    def on_collect(phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            full[0] += 1
            if full[0] % FULL_GC_THAWED_EVERY == 0:
                gc.unfreeze()
        else:
            gc.freeze()

    gc.callbacks.append(on_collect)


_gc_tuned: list[bool] = []


def serve_stdio(mcp: RootgrepServer) -> None:
    """Serve over stdin and stdout until the input ends, or until SIGINT (Ctrl-C), which
    raises KeyboardInterrupt here (exit status 130)."""
    tune_gc()
    mcp.idle_trim = idle_trimmer()
    mcp.serving = True
    if anyio.run(_stdio_until_interrupted, mcp):
        raise KeyboardInterrupt


async def _stdio_until_interrupted(mcp: RootgrepServer) -> bool:
    """The stdio session; True when SIGINT ended it. Python's own handler cannot: it runs in
    the main thread only when that thread runs bytecode, and the event loop sleeps in epoll
    while a worker thread blocks reading stdin (where the kernel may deliver the signal), so
    a Ctrl-C waited for the next input. A signal receiver wakes the loop (its wakeup fd),
    and the session is cancelled. Its stdin reader cannot be: a thread blocked in ``read``,
    which the cancellation waits for; so the process exits (status 130) once
    ``INTERRUPT_GRACE`` seconds have passed without the session ending. Nothing is lost by
    that: a write tool's writes are atomic, and an index reopens and re-syncs after any
    exit."""
    import signal

    interrupted = False
    async with anyio.create_task_group() as tg:

        async def on_interrupt() -> None:
            nonlocal interrupted
            with anyio.open_signal_receiver(signal.SIGINT) as signals:
                async for _ in signals:
                    interrupted = True
                    log.info("interrupted (SIGINT): stopping")
                    timer = threading.Timer(INTERRUPT_GRACE, _exit_interrupted)
                    timer.daemon = True
                    timer.start()
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(on_interrupt)
        await mcp.run_stdio_async()
        tg.cancel_scope.cancel()
    return interrupted


INTERRUPT_GRACE = 1.0  # seconds a stdio session has to end after SIGINT, then the process exits


def _exit_interrupted() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(130)


def serve_http(
    mcp: RootgrepServer,
    *,
    host: str,
    port: int,
    token: str | None,
    allowed_hosts: Sequence[str] = (),
    before_serving: Callable[[int], None] | None = None,
    max_connections: int | None = None,
    request_seconds: float | None = None,
) -> None:
    """Serve streamable HTTP. ``before_serving(port)`` runs once the app is built, uvicorn's
    modules are loaded and the listening socket is bound (``port`` is the one it got: with
    ``port=0`` the kernel chose it), and before the event loop (or any thread) starts: where
    the banner is printed, ``serve --sandbox`` restricts the process, and operator roots start
    indexing. Connections are capped (``max_connections``, default sized for the machine)
    and a request must arrive whole within ``request_seconds`` (``http_guard``)."""
    import uvicorn

    from .http_guard import (
        DEFAULT_REQUEST_SECONDS,
        Guard,
        accept_batch,
        default_max_connections,
        defer_accept,
        guarded_protocol,
        guarded_server,
    )

    guard = Guard(
        max_connections or default_max_connections(), request_seconds or DEFAULT_REQUEST_SECONDS
    )
    tune_gc()
    mcp.idle_trim = idle_trimmer()
    mcp.serving = True
    app = http_app(mcp, host=host, token=token, allowed_hosts=allowed_hosts)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", http=guarded_protocol(guard),
        backlog=accept_batch(guard.max_connections),
    )  # fmt: skip
    config.load()  # (imports the protocol classes uvicorn picks at run time)
    config.get_loop_factory()  # (imports the event loop's module)
    sock = config.bind_socket()
    defer_accept(sock, guard.request_seconds)
    if before_serving is not None:
        before_serving(sock.getsockname()[1])
    guarded_server(config).run(sockets=[sock])
