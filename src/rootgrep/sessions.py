"""Client roots over a connection's life (SPEC §3), independent of the MCP wiring.

A handshake-era connection that declared the roots capability gets a ``ClientRoots``: it is
filled after ``notifications/initialized`` and refreshed on ``roots/list_changed`` (or, for a
client without ``listChanged``, when its copy is older than ``--roots-ttl``). While a refresh
runs, new calls wait (bounded); when it fails the connection has no roots (fail closed). A root
that disappears is retired: calls using it are cancelled (``root_removed``) and its fd is closed
once the last of them lets go.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import anyio.to_thread

from .audit import Audit
from .errors import NoRoots, RootgrepError
from .roots import Root, accept_client_root, effective_roots, is_within
from .service import Service, Token

log = logging.getLogger("rootgrep.roots")

RawRoots = list[Any]
FetchRoots = Callable[[], Awaitable[RawRoots]]
Notify = Callable[[str], Awaitable[None]]
REFRESH_WAIT_SECONDS = 10.0


def accept_raw_roots(
    raw: RawRoots,
    service: Service,
    audit: Audit,
    reuse: Sequence[Root] = (),
    notes: list[str] | None = None,
) -> tuple[list[Root], list[str]]:
    """Validate a raw ``roots/list`` answer root by root (blocking: it pins directories).
    Returns the accepted roots (reusing pins of unchanged ones) and one message per rejected
    root. An invalid root never invalidates the others. Beyond ``max_roots_per_session``
    accepted roots the rest are refused unopened, in one message (also put in ``notes``:
    every tool's answer repeats it)."""
    accepted: list[Root] = []
    problems: list[str] = []
    by_path = {r.path: r for r in reuse}
    cap = service.settings.max_roots_per_session
    items = raw if isinstance(raw, list) else []
    refused = 0
    for item in items:
        uri = item.get("uri") if isinstance(item, dict) else None
        name = item.get("name") if isinstance(item, dict) else None
        if len(accepted) >= cap:
            refused += 1
            audit.record(tool="roots", op="accept_root",
                         requested=uri if isinstance(uri, str) else None, decision="deny",
                         reason="too_many_roots")  # fmt: skip
            continue
        if not isinstance(uri, str):
            problems.append("a root without a string uri was dropped")
            audit.record(tool="roots", op="accept_root", requested=None, decision="deny",
                         reason="invalid_uri")  # fmt: skip
            continue
        try:
            r = accept_client_root(
                uri,
                name if isinstance(name, str) and name else None,
                symlinks=service.settings.symlinks,
                use_openat2=service.settings.use_openat2,
            )
        except RootgrepError as e:
            problems.append(f"root {uri[:200]!r} was dropped: {e}")
            audit.record(tool="roots", op="accept_root", requested=uri, decision="deny",
                         reason=e.code)  # fmt: skip
            continue
        if r.lookup_only and not any(is_within(o.path, r.path) for o in service.operator_roots):
            r.close()  # (unreadable, and holding no operator root: nothing of it is served)
            problems.append(f"root {uri[:200]!r} was dropped: it cannot be opened (permission "
                            "denied)")  # fmt: skip
            audit.record(tool="roots", op="accept_root", requested=uri, decision="deny",
                         reason="invalid_uri")  # fmt: skip
            continue
        old = by_path.get(r.path)
        if old is not None and old.name == r.name and not old.fs.retired and _same_dir(old, r):
            r.close()
            old.announced = uri  # (as spelled now)
            r = old
        if any(a.path == r.path for a in accepted):
            if r is not old:
                r.close()
            continue
        audit.record(tool="roots", op="accept_root", requested=uri, decision="allow",
                     reason="valid", root_id=r.id, path=".")  # fmt: skip
        accepted.append(r)
    if refused:
        note = (
            f"{refused} of the {len(items)} roots the client announced were refused: at most "
            f"{cap} roots are served per session (the first {cap} valid ones); announce "
            "fewer roots, or ask the operator to raise --max-roots-per-session"
        )
        problems.append(note)
        if notes is not None:
            notes.append(note)
    return accepted, problems


def _same_dir(a: Root, b: Root) -> bool:
    """Whether two pins hold the very same directory (a path may name another one since)."""
    try:
        return a.fs.identity() == b.fs.identity()
    except OSError:
        return False


class ClientRoots:
    """The roots one handshake-era client announced, kept fresh."""

    def __init__(
        self,
        service: Service,
        fetch: FetchRoots,
        *,
        list_changed: bool,
        notify: Notify | None = None,
    ) -> None:
        self.service = service
        self.fetch = fetch
        self.list_changed = list_changed
        self.notify = notify
        self.roots: list[Root] = []
        self.fetched_at: float | None = None
        self.failed = False
        self.fetches = 0  # roots/list answers received
        self.requested = 0  # refreshes asked for (notifications, TTL expiries)
        self.primed = 0  # answers fetched on a call's own stream (see ``prime``)
        self._prime_lock = anyio.Lock()
        self._prime_tries = 0  # own-stream asks finished (a caller queued behind one shares it)
        self.notes: list[str] = []  # said by every tool's answer (roots over the cap)
        self._ready = anyio.Event()
        self._queued: anyio.Event | None = None  # the refresh waiting behind the running one
        self._lock = anyio.Lock()
        self._inflight: set[Token] = set()

    async def refresh(self) -> None:
        """Fetch the client's roots again. New calls wait from this moment until a fetch that
        starts after it ends. Refreshes coalesce: one fetch runs, at most one waits queued
        behind it, and a refresh asked for while one is queued joins that one (it has not
        started yet, so it will see this change too): a burst of N ``list_changed``
        notifications costs at most two ``roots/list`` round trips, not N."""
        self.requested += 1
        queued = self._queued
        if queued is not None:
            await queued.wait()
            return
        ready = anyio.Event()  # calls from now on wait for this refresh, not an older one
        self._ready = ready
        self._queued = ready
        problems: list[str] | None = None
        try:
            async with self._lock:
                self._queued = None  # running from here: a later change needs a later fetch
                problems = await self._fetch_and_swap()
        finally:
            if problems is None:  # cancelled (the session is closing): fail closed
                if self._queued is ready:
                    self._queued = None
                self.failed = True
            ready.set()
        for p in problems:
            log.warning("%s", p)
            if self.notify is not None:
                try:
                    await self.notify(p)
                except Exception:  # a log message is best effort
                    log.debug("could not send a log notification", exc_info=True)

    async def _fetch_and_swap(self) -> list[str]:
        answers = self.fetches
        try:
            raw = await self.fetch()
            self.fetches += 1
            notes: list[str] = []
            new, problems = await anyio.to_thread.run_sync(
                accept_raw_roots, raw, self.service, self.service.audit, self.roots, notes
            )
            failed = False
        except Exception as e:  # the client did not answer: no roots (fail closed)
            if self.fetches != answers and not self.failed:
                # an answer to a newer request (see ``prime``) arrived meanwhile: this
                # older request's failure says nothing about the roots now
                log.info("roots/list failed (%r) after a newer answer; keeping it", e)
                return []
            log.warning("roots/list failed: %r; the session has no roots until it succeeds", e)
            new, problems, failed = [], [f"roots/list failed ({type(e).__name__})"], True
            notes = []
        self._swap(new)
        self.notes = notes
        self.fetched_at = time.monotonic()
        self.failed = failed
        return problems

    def needs_prime(self) -> bool:
        """Whether the session has no usable roots answer yet (none arrived, or the last
        refresh failed)."""
        return self.fetches == 0 or self.failed

    async def prime(self, fetch: FetchRoots) -> bool:
        """For a call of a session without a usable answer yet: ask with ``fetch`` (on the
        call's own stream; over HTTP the first ``roots/list`` of a session goes out on the
        standalone stream, which the client may not have opened yet, so it can be lost and
        only its retry answered, seconds later). The answer is taken unless a refresh
        started or answered meanwhile (that one is as new, and calls wait for it). One
        attempt, bounded by the fetch's own time-out. True when an answer was taken."""
        if not self.needs_prime():
            return False
        tries = self._prime_tries
        async with self._prime_lock:
            # an ask that finished while this call waited for the lock is its answer too:
            # calls queued behind one unanswered ask do not ask again one after another
            if not self.needs_prime() or self._prime_tries != tries:
                return False
            ready = self._ready
            try:
                raw = await fetch()
            except Exception as e:  # the regular refresh still decides
                log.info("roots/list on the call's stream failed: %r", e)
                return False
            finally:
                self._prime_tries += 1
            notes: list[str] = []
            new, problems = await anyio.to_thread.run_sync(
                accept_raw_roots, raw, self.service, self.service.audit, self.roots, notes
            )
            if self._ready is not ready or not self.needs_prime():
                kept = {id(r) for r in self.roots}
                for r in new:
                    if id(r) not in kept:
                        r.close()
                return False
            self.fetches += 1
            self.primed += 1
            self._swap(new)
            self.notes = notes
            self.fetched_at = time.monotonic()
            self.failed = False
            ready.set()
        for p in problems:
            log.warning("%s", p)
        return True

    def _swap(self, new: list[Root]) -> None:
        # answers computed concurrently (a refresh and a prime) may pin the same directory
        # twice: keep the pin already served, so calls holding it are not cancelled
        current = {r.path: r for r in self.roots if not r.fs.retired}
        merged: list[Root] = []
        for r in new:
            old = current.get(r.path)
            if old is not None and old is not r and old.name == r.name and _same_dir(old, r):
                r.close()
                old.announced = r.announced
                r = old
            merged.append(r)
        new = merged
        keep = {id(r) for r in new}
        gone = [r for r in self.roots if id(r) not in keep]
        self.roots = new
        gone_ids = {r.id for r in gone}
        for token in list(self._inflight):
            if token.roots & gone_ids:
                token.cancel()
        indexes = self.service.indexes
        for r in gone:
            if indexes is not None:
                indexes.release(r.path, id(self))
            r.retire()

    async def current(self) -> list[Root]:
        """The client's roots as of now: waits for a running refresh, re-fetches a copy
        older than the TTL for clients that send no change notifications."""
        with anyio.move_on_after(REFRESH_WAIT_SECONDS):
            await self._ready.wait()
        if not self._ready.is_set():
            raise NoRoots("the client's roots are being refreshed and did not arrive; retry")
        ttl = self.service.settings.roots_ttl
        stale = self.fetched_at is None or time.monotonic() - self.fetched_at > ttl
        if not self.list_changed and stale:
            await self.refresh()
        return [] if self.failed else list(self.roots)

    def track(self, token: Token) -> None:
        self._inflight.add(token)

    def untrack(self, token: Token) -> None:
        self._inflight.discard(token)

    def close(self) -> None:
        indexes = self.service.indexes
        for r in self.roots:
            if indexes is not None:
                indexes.release(r.path, id(self))
            r.retire()
        self.roots = []


def scope(client_roots: Sequence[Root] | None, service: Service) -> list[Root]:
    """Effective roots: client ∩ operator (``None``: the client has no roots capability)."""
    return effective_roots(client_roots, service.operator_roots)
