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
import hmac
import ipaddress
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Annotated, Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server import ServerRequestContext
from mcp.server.mcpserver import Context, ListRoots, MCPServer, Resolve
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CallToolResult,
    EmptyResult,
    NotificationParams,
    SetLevelRequestParams,
    TextContent,
    ToolAnnotations,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from . import __version__
from .confine import _error as confine_error
from .errors import RootgrepError, RootRemoved
from .models import (
    CopyResult,
    DeleteResult,
    DirectoryTreeResult,
    EditResult,
    FileInfoResult,
    FindFilesResult,
    GrepResult,
    ListDirectoryResult,
    ListRootsResult,
    MoveResult,
    PathResult,
    ReadFileResult,
    ReindexResult,
    SearchResult,
    TreeNode,
    WriteResult,
)
from .roots import Root
from .service import Service, Token
from .sessions import ClientRoots, RawRoots, accept_raw_roots, scope

log = logging.getLogger("rootgrep.server")
M = TypeVar("M", bound=BaseModel)

STATE_KEY = "rootgrep.client_roots"
ROOTS_ATTEMPTS = 3
ROOTS_TIMEOUT = 2.0
NOTIFY_TIMEOUT = 2.0  # a build's log notification to a client that does not read is dropped
WRITE_TOOLS = frozenset(
    {"write_file", "edit_file", "create_directory", "move_path", "copy_path", "delete_path"}
)

READ = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
WRITE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
DESTRUCTIVE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)
OVERWRITE = ToolAnnotations(  # replaces what was there; the same call twice changes nothing more
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)

INSTRUCTIONS = """rootgrep searches and reads files inside the client's roots (intersected with
the operator's). Start with list_roots. grep is exact and exhaustive (literal by default,
regex=true for RE2); find_files matches paths (globs like *.py, or a substring); read_file
reads text with optional line ranges. Paths are root-relative, absolute, or file:// URIs;
with several roots pass `root`. Lists page with `cursor` -> `next_cursor`. Errors start with
a [code] and say what to do next."""


# ---- roots, per era ----------------------------------------------------------------------------


def _modern(ctx: Context) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def roots_for_call(ctx: Context) -> ListRoots | None:
    """Resolver: on 2026-07-28, ask for the client's roots with this call (when the request
    declares the capability). Handshake-era calls use the roots kept per connection."""
    if not _modern(ctx):
        return None
    caps = ctx.client_capabilities
    return ListRoots() if caps is not None and caps.roots is not None else None


CallRoots = Annotated[Any, Resolve(roots_for_call)]


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
    attempt. The SDK's ``ListRoots`` resolver does the same in the handshake era; rootgrep
    sends it raw to keep the answer unnormalised."""
    outbound = session._request_outbound  # private in mcp 2.3; no public raw equivalent
    return _raw_roots_of(
        await outbound.send_raw_request("roots/list", None, {"timeout": ROOTS_TIMEOUT})
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
SESSION_LIMITER_KEY = "rootgrep.session_workers"
MAX_IDLE_SHARES = 256  # idle per-address shares kept before they are dropped


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

    async def list_tools(self) -> list[Any]:
        tools = await super().list_tools()
        if self.service.settings.allow_write:
            return tools
        return [t for t in tools if t.name not in WRITE_TOOLS]

    async def call(
        self,
        ctx: Context,
        call_roots: Any,
        fn: Callable[..., M],
        render: Callable[[M], str],
        *,
        write: bool = False,
        token_arg: bool = False,
    ) -> CallToolResult:
        """Run one tool: effective roots, a lease on them, the blocking work in a thread."""
        per_call: list[Root] = []
        notes: list[str] = []  # about the roots (over the cap), added to the answer's text
        used: list[Any] = []  # indexes this call uses without an owner (per-call roots)
        indexes = self.service.indexes
        try:
            client: ClientRoots | None = None
            if call_roots is not None:  # 2026-07-28: roots arrived with this call
                raw = [{"uri": str(r.uri), "name": r.name} for r in call_roots.roots]
                per_call, problems = await anyio.to_thread.run_sync(
                    accept_raw_roots, raw, self.service, self.service.audit, (), notes
                )
                for p in problems:
                    log.warning("%s", p)
                    try:
                        await ctx.warning(p, logger_name="rootgrep.roots")
                    except Exception:  # a log message is best effort
                        log.debug("could not send a log notification", exc_info=True)
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
                roots = await anyio.to_thread.run_sync(_still_inside, roots)
            lease = await self._lease(roots, client)
            if indexes is not None:  # under the lease: every root's fd is open for the dup
                # a session owns its roots' indexes (released when it drops a root or ends);
                # per-call roots have no owner: stopped once unused for the idle time
                owner = id(client) if client is not None else 0
                listener = _build_listener(ctx.session)

                def start_indexes() -> None:  # (stats beneath the roots: off the event loop)
                    # outermost first: a nested root then shares its outer root's index
                    for r in sorted(lease.held, key=lambda r: len(r.path)):
                        if call_roots is None:
                            indexes.activate(r, owner, listener=listener)
                        elif (ix := indexes.use(r, listener=listener, busy=True)) is not None:
                            used.append(ix)

                try:
                    await anyio.to_thread.run_sync(start_indexes)
                except BaseException:
                    if lease.claim():
                        lease.release()
                    raise
            work = partial(fn, lease.held, lease.token) if token_arg else partial(fn, lease.held)
            result = await self._run(work, lease, write, self._share(ctx))
            return CallToolResult(
                content=[TextContent(type="text", text=_noted(render(result), notes))],
                structured_content=result.model_dump(mode="json"),
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
            if indexes is not None:
                for ix in used:
                    indexes.leave(ix)
            for r in per_call:
                r.retire()

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


def _still_inside(roots: list[Root]) -> list[Root]:
    kept = [r for r in roots if r.still_inside()]
    for r in roots:
        if r not in kept:
            log.warning("root %r left its operator root; it is not served", r.uri)
    return kept


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


def _noted(text: str, notes: list[str]) -> str:
    return "\n".join([text, *(f"(note: {n})" for n in notes)])


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
    _register_tools(mcp, service)
    return mcp


def _register_tools(mcp: RootgrepServer, s: Service) -> None:
    @mcp.tool(name="list_roots", title="List roots", annotations=READ)
    async def list_roots(
        ctx: Context, roots: CallRoots = None
    ) -> Annotated[CallToolResult, ListRootsResult]:
        """The effective roots (client's ∩ operator's) with their ids, names, URIs and
        index state, and whether writes are allowed."""

        def fn(held: list[Root]) -> ListRootsResult:
            return s.list_roots(held)

        return await mcp.call(ctx, roots, fn, render_roots)

    @mcp.tool(name="grep", title="Exact search (like ripgrep)", annotations=READ)
    async def grep(
        ctx: Context,
        pattern: str,
        root: str | None = None,
        path: str | None = None,
        regex: bool = False,
        case_sensitive: bool = True,
        whole_word: bool = False,
        include: list[str] | None = None,
        exclude: list[str] | None = None,
        context: int = 0,
        hidden: bool = False,
        no_ignore: bool = False,
        max_results: int = 200,
        cursor: str | None = None,
        roots: CallRoots = None,
    ) -> Annotated[CallToolResult, GrepResult]:
        """Every line matching `pattern` (a literal; RE2 regex with regex=true) in the roots,
        respecting .gitignore/.ignore and skipping hidden and binary files unless told
        otherwise. `path` narrows to a file or directory; `include`/`exclude` are gitignore
        globs (`*.py`, `src/**`); `context` adds up to 10 lines around each match. Ordered by
        root, path, line; page with `cursor`."""
        fn = partial(
            s.grep, pattern=pattern, root=root, path=path, regex=regex,
            case_sensitive=case_sensitive, whole_word=whole_word, include=include,
            exclude=exclude, context=context, hidden=hidden, no_ignore=no_ignore,
            max_results=max_results, cursor=cursor,
        )  # fmt: skip
        return await mcp.call(ctx, roots, fn, render_grep, token_arg=True)

    @mcp.tool(name="search", title="Ranked search", annotations=READ)
    async def search(
        ctx: Context,
        query: str,
        root: str | None = None,
        path: str | None = None,
        include: list[str] | None = None,
        exclude: list[str] | None = None,
        max_results: int = 20,
        cursor: str | None = None,
        roots: CallRoots = None,
    ) -> Annotated[CallToolResult, SearchResult]:
        """Ranked search over the per-root indexes (BM25, boosted for file names and
        identifiers): words are ANDed, "quoted phrases", -word excludes, path:GLOB and ext:py
        filter. Each result has snippets with line numbers; partial=true while an index is
        still being built. For exact, exhaustive matches use grep."""
        fn = partial(
            s.search, query=query, root=root, path=path, include=include, exclude=exclude,
            max_results=max_results, cursor=cursor,
        )  # fmt: skip
        return await mcp.call(ctx, roots, fn, render_search, token_arg=True)

    @mcp.tool(name="reindex", title="Re-index", annotations=READ)
    async def reindex(
        ctx: Context, root: str | None = None, roots: CallRoots = None
    ) -> Annotated[CallToolResult, ReindexResult]:
        """Bring the index of a root (or of every root) up to date now, re-reading only files
        that changed; sends progress notifications."""

        async def report(done: int, total: int | None, message: str) -> None:
            with anyio.move_on_after(NOTIFY_TIMEOUT):  # (the sync waits: never for long)
                await ctx.report_progress(done, total, message=message)

        def progress(done: int, total: int | None, message: str) -> None:
            try:
                anyio.from_thread.run(report, done, total, message)
            except Exception:  # progress is best effort
                log.debug("progress notification failed", exc_info=True)

        fn = partial(s.reindex, root=root, progress=progress)
        return await mcp.call(ctx, roots, fn, render_reindex, token_arg=True)

    @mcp.tool(name="find_files", title="Find files by name", annotations=READ)
    async def find_files(
        ctx: Context,
        pattern: str,
        root: str | None = None,
        path: str | None = None,
        hidden: bool = False,
        no_ignore: bool = False,
        max_results: int = 200,
        cursor: str | None = None,
        roots: CallRoots = None,
    ) -> Annotated[CallToolResult, FindFilesResult]:
        """Files whose root-relative path matches `pattern`: a gitignore-style glob when it
        has glob characters (`*.py` at any depth, `src/*.ts` anchored at the root), else a
        case-insensitive substring. Page with `cursor`."""
        fn = partial(
            s.find_files, pattern=pattern, root=root, path=path, hidden=hidden,
            no_ignore=no_ignore, max_results=max_results, cursor=cursor,
        )  # fmt: skip
        return await mcp.call(ctx, roots, fn, render_find, token_arg=True)

    @mcp.tool(name="read_file", title="Read a text file", annotations=READ)
    async def read_file(
        ctx: Context,
        path: str,
        root: str | None = None,
        start_line: int | None = None,
        end_line: int | None = None,
        roots: CallRoots = None,
    ) -> Annotated[CallToolResult, ReadFileResult]:
        """A text file's content (or lines start_line..end_line, 1-based, inclusive). Reads
        are capped (truncated=true says the file is larger); binary files are refused."""
        fn = partial(s.read_file, path=path, root=root, start_line=start_line, end_line=end_line)
        return await mcp.call(ctx, roots, fn, render_read)

    @mcp.tool(name="list_directory", title="List a directory", annotations=READ)
    async def list_directory(
        ctx: Context,
        path: str | None = None,
        root: str | None = None,
        cursor: str | None = None,
        roots: CallRoots = None,
    ) -> Annotated[CallToolResult, ListDirectoryResult]:
        """Entries of a directory (default: the root), links shown as links, sorted by name."""
        fn = partial(s.list_directory, path=path, root=root, cursor=cursor)
        return await mcp.call(ctx, roots, fn, render_ls)

    @mcp.tool(name="directory_tree", title="Directory tree", annotations=READ)
    async def directory_tree(
        ctx: Context,
        path: str | None = None,
        root: str | None = None,
        max_depth: int = 3,
        max_entries: int = 500,
        roots: CallRoots = None,
    ) -> Annotated[CallToolResult, DirectoryTreeResult]:
        """The files and directories below a directory, nested, to `max_depth` levels, with
        .gitignore/.ignore rules applied and hidden entries left out."""
        fn = partial(
            s.directory_tree, path=path, root=root, max_depth=max_depth, max_entries=max_entries
        )
        return await mcp.call(ctx, roots, fn, render_tree, token_arg=True)

    @mcp.tool(name="file_info", title="File information", annotations=READ)
    async def file_info(
        ctx: Context, path: str, root: str | None = None, roots: CallRoots = None
    ) -> Annotated[CallToolResult, FileInfoResult]:
        """Type, size, modification time and mode of a path (a link is described itself)."""
        fn = partial(s.file_info, path=path, root=root)
        return await mcp.call(ctx, roots, fn, render_info)

    # -- write tools: listed only with --allow-write; otherwise a call answers [read_only] --

    @mcp.tool(name="write_file", title="Write a file", annotations=OVERWRITE)
    async def write_file(
        ctx: Context,
        path: str,
        content: str,
        root: str | None = None,
        create_only: bool = False,
        roots: CallRoots = None,
    ) -> Annotated[CallToolResult, WriteResult]:
        """Create or replace a file atomically (create_only=true refuses an existing one)."""
        fn = partial(s.write_file, path=path, content=content, root=root, create_only=create_only)
        return await mcp.call(ctx, roots, fn, render_write, write=True)

    @mcp.tool(name="edit_file", title="Edit a file", annotations=DESTRUCTIVE)
    async def edit_file(
        ctx: Context,
        path: str,
        edits: list[dict[str, str]],
        root: str | None = None,
        dry_run: bool = False,
        roots: CallRoots = None,
    ) -> Annotated[CallToolResult, EditResult]:
        """Replace text: each edit's old_text must occur exactly once; applied in order,
        atomically. Returns a unified diff (dry_run=true shows it without writing)."""
        pairs = [(e.get("old_text", ""), e.get("new_text", "")) for e in edits]
        fn = partial(s.edit_file, path=path, edits=pairs, root=root, dry_run=dry_run)
        return await mcp.call(ctx, roots, fn, render_edit, write=True)

    @mcp.tool(name="create_directory", title="Create a directory", annotations=WRITE)
    async def create_directory(
        ctx: Context, path: str, root: str | None = None, roots: CallRoots = None
    ) -> Annotated[CallToolResult, PathResult]:
        """Create a directory and any missing parents (nothing happens if it exists)."""
        fn = partial(s.create_directory, path=path, root=root)
        return await mcp.call(ctx, roots, fn, lambda r: f"directory {r.path} exists", write=True)

    @mcp.tool(name="move_path", title="Move or rename", annotations=DESTRUCTIVE)
    async def move_path(
        ctx: Context,
        source: str,
        destination: str,
        root: str | None = None,
        overwrite: bool = False,
        roots: CallRoots = None,
    ) -> Annotated[CallToolResult, MoveResult]:
        """Move or rename a file or directory within a root (atomic rename)."""
        fn = partial(
            s.move_path, source=source, destination=destination, root=root, overwrite=overwrite
        )
        return await mcp.call(
            ctx, roots, fn, lambda r: f"moved {r.source} -> {r.destination}", write=True
        )

    @mcp.tool(name="copy_path", title="Copy", annotations=OVERWRITE)
    async def copy_path(
        ctx: Context,
        source: str,
        destination: str,
        root: str | None = None,
        overwrite: bool = False,
        roots: CallRoots = None,
    ) -> Annotated[CallToolResult, CopyResult]:
        """Copy a file or directory tree within a root; links leaving the root and special
        files are skipped and reported."""
        fn = partial(
            s.copy_path, source=source, destination=destination, root=root, overwrite=overwrite
        )
        return await mcp.call(ctx, roots, fn, render_copy, write=True)

    @mcp.tool(name="delete_path", title="Delete", annotations=DESTRUCTIVE)
    async def delete_path(
        ctx: Context,
        path: str,
        root: str | None = None,
        recursive: bool = False,
        roots: CallRoots = None,
    ) -> Annotated[CallToolResult, DeleteResult]:
        """Delete a file, link or directory (recursive=true for a non-empty one); never a
        root itself. A link is removed, never followed."""
        fn = partial(s.delete_path, path=path, root=root, recursive=recursive)
        return await mcp.call(
            ctx, roots, fn, lambda r: f"deleted {r.path} ({r.removed} entries)"
            + "".join(f"\nleft {k.path}: {k.reason}" for k in r.skipped), write=True,
        )  # fmt: skip


# ---- text renderings -------------------------------------------------------------------------


def render_roots(r: ListRootsResult) -> str:
    lines = [f"{x.name} ({x.id}) {x.uri} [{x.source}]" for x in r.roots] or ["(no roots)"]
    lines.append("read-only" if r.read_only else "writes allowed")
    return "\n".join(lines)


def render_grep(r: GrepResult) -> str:
    out: list[str] = []
    for m in r.matches:
        for i, b in enumerate(m.before):
            out.append(f"{m.root.name}/{m.path}-{m.line - len(m.before) + i}-{b}")
        out.append(f"{m.root.name}/{m.path}:{m.line}:{m.column}: {m.text}")
        for i, a in enumerate(m.after):
            out.append(f"{m.root.name}/{m.path}-{m.line + 1 + i}-{a}")
    more = f"; more: pass cursor={r.next_cursor}" if r.next_cursor else ""
    out.append(f"({len(r.matches)} matches in {r.files_searched} files, {r.elapsed_ms} ms{more})")
    return "\n".join(out)


def render_search(r: SearchResult) -> str:
    out: list[str] = []
    for h in r.results:
        out.append(f"{h.root.name}/{h.path}  (score {h.score})")
        out += [f"  {sn.line}: {sn.text}" for sn in h.snippets]
    if r.partial:
        out.append("(partial: an index is still being built)")
    if r.next_cursor:
        out.append(f"(more: pass cursor={r.next_cursor})")
    return "\n".join(out) or "(no results)"


def render_reindex(r: ReindexResult) -> str:
    return "\n".join(
        f"{x.root.name}: {x.files} files, {x.bytes} bytes read; +{x.added} ~{x.updated} "
        f"-{x.removed} in {x.elapsed_ms} ms"
        for x in r.roots
    )


def render_find(r: FindFilesResult) -> str:
    out = [f"{f.root.name}/{f.path}  ({f.size} bytes, {f.mtime})" for f in r.files]
    more = f"; more: pass cursor={r.next_cursor}" if r.next_cursor else ""
    out.append(f"({len(r.files)} files{more})")
    return "\n".join(out)


def render_read(r: ReadFileResult) -> str:
    note = " (truncated: the file is larger than the read cap)" if r.truncated else ""
    head = f"{r.root.name}/{r.path} lines {r.start_line}-{r.end_line} of {r.total_lines}{note}"
    return f"{head}\n{r.content}"


def render_ls(r: ListDirectoryResult) -> str:
    mark = {"dir": "/", "symlink": "@", "other": "|", "file": ""}
    out = [f"{e.name}{mark[e.type]}" for e in r.entries] or ["(empty)"]
    if r.next_cursor:
        out.append(f"(more: pass cursor={r.next_cursor})")
    return "\n".join(out)


def render_tree(r: DirectoryTreeResult) -> str:
    out: list[str] = []

    def walk(node: TreeNode, depth: int) -> None:
        out.append("  " * depth + node.name + ("/" if node.type == "dir" else ""))
        for child in node.children or []:
            walk(child, depth + 1)

    walk(r.tree, 0)
    if r.truncated:
        out.append("(truncated: raise max_entries or narrow the path)")
    return "\n".join(out)


def render_info(r: FileInfoResult) -> str:
    return (
        f"{r.root.name}/{r.path}: {r.type}, {r.size} bytes, mode {r.mode}, modified {r.mtime}"
        + (", symlink" if r.is_symlink else "")
    )


def render_write(r: WriteResult) -> str:
    return f"{'created' if r.created else 'replaced'} {r.path} ({r.bytes} bytes)"


def render_edit(r: EditResult) -> str:
    return (r.diff or "(no change)") + ("" if r.applied else "\n(dry run: nothing written)")


def render_copy(r: CopyResult) -> str:
    out = [f"copied {r.source} -> {r.destination}: {r.files} files, {r.directories} dirs"]
    out += [f"skipped {s.path}: {s.reason}" for s in r.skipped]
    return "\n".join(out)


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
    return BearerAuth(app, token) if token else app


def serve_stdio(mcp: RootgrepServer) -> None:
    mcp.run("stdio")


def serve_http(
    mcp: RootgrepServer,
    *,
    host: str,
    port: int,
    token: str | None,
    allowed_hosts: Sequence[str] = (),
) -> None:
    import uvicorn

    app = http_app(mcp, host=host, token=token, allowed_hosts=allowed_hosts)
    uvicorn.run(app, host=host, port=port, log_level="warning")
