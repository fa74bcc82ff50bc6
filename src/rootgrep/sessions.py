"""Client roots over a connection's life (SPEC §3), independent of the MCP wiring.

A handshake-era connection that declared the roots capability gets a ``ClientRoots``: it is
filled after ``notifications/initialized`` and refreshed on ``roots/list_changed`` (or, for a
client without ``listChanged``, when its copy is older than ``--roots-ttl``). While a refresh
runs, new calls wait (bounded); when it fails the connection has no roots (fail closed). A root
that disappears is retired: calls using it are cancelled (``root_removed``) and its fd is closed
once the last of them lets go.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from anyio.lowlevel import EventLoopToken, RunVar

from .audit import Audit
from .errors import InvalidUri, NoRoots, RootgrepError
from .roots import Root, accept_client_root, effective_roots, is_within, parse_file_uri
from .service import Service, Token

log = logging.getLogger("rootgrep.roots")

RawRoots = list[Any]
FetchRoots = Callable[[], Awaitable[RawRoots]]
Notify = Callable[[str], Awaitable[None]]
REFRESH_WAIT_SECONDS = 10.0


# Pinning a client root opens it by name, and on a hung NFS or FUSE mount that open blocks in
# the kernel (no signal ends it). So pins run on their own daemon threads (never on anyio's
# default limiter, which a few hung pins held for good; never on a thread the interpreter
# joins at exit, which kept ``serve`` from exiting): at most ROOTS_THREADS pins run at once,
# one owner (a handshake-era session: its refresh and its first call's ask; a 2026-07-28
# client: its calls, by address) runs at most SESSION_ROOTS_THREADS of them, and a pin not
# done within PIN_SECONDS, or whose caller goes away, is given up: the root is dropped
# (``[invalid_uri]``, audited ``pin_timeout``) and its thread left to finish alone (what it
# opens late is closed). While such a thread is still blocked, a root at or beneath the path it
# opens is refused at once (no second thread blocks on it); an owner with OWNER_HUNG_PINS of
# them gets every new pin refused at once (its own: other owners' pins go on), and beyond
# MAX_HUNG_PINS of them in all (a last resort, bounding the threads hung mounts hold) every new
# pin is refused but a re-pin of a root its session already serves (bounded by the roots
# served). The same goes for the check every call makes of a client root nested in an operator
# root (``check_inside``: it opens that root's path again beneath the operator root's fd, and
# blocks there just the same): it runs on a roots thread of its owner's share, is given up
# after PIN_SECONDS (the root left out of the call, with a message saying why), and counts
# among the hung pins while its thread still blocks (a check of a root served, as a re-pin:
# MAX_HUNG_PINS does not refuse it).
ROOTS_THREADS = 8
SESSION_ROOTS_THREADS = 1


def _pin_seconds(default: float = 5.0) -> float:
    """PIN_SECONDS: ``ROOTGREP_PIN_SECONDS`` (seconds, over 0 and at most 3600: a slow network
    mount may need more), else ``default`` (also for a value that is not such a number)."""
    raw = os.environ.get("ROOTGREP_PIN_SECONDS", "")
    try:
        seconds = float(raw) if raw else default
    except ValueError:
        return default
    return seconds if 0 < seconds <= 3600 else default


PIN_SECONDS = _pin_seconds()
OWNER_HUNG_PINS = 4
MAX_HUNG_PINS = 64

_roots_threads: RunVar[anyio.CapacityLimiter] = RunVar("rootgrep.roots_threads")
_unlimited: RunVar[anyio.CapacityLimiter] = RunVar("rootgrep.unlimited")
_hung_lock = threading.Lock()
_hung: list[_Pin] = []  # given-up pins whose thread is still blocked (their path and owner)


def _limiter(var: RunVar[anyio.CapacityLimiter], tokens: float) -> anyio.CapacityLimiter:
    """This event loop's limiter held in ``var``."""
    try:
        return var.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(tokens)
        var.set(limiter)
        return limiter


class PinTimeout(InvalidUri):
    """A root whose opening did not finish within PIN_SECONDS (or one refused because an
    earlier opening of it, or too many others, still hang)."""


def _refuse_if_hung(pin: _Pin, uri: str) -> None:
    """Refuse at once a root at or beneath a path whose given-up pin (or check) still blocks,
    any new root (or check) of an owner with OWNER_HUNG_PINS of them, and (but for a re-pin or
    a check of a root already served) any root while MAX_HUNG_PINS of them block. Call with
    ``_hung_lock`` held."""
    shown = uri[:200]
    earlier = next(
        (h for h in _hung if any(is_within(a, b) for a in pin.raws for b in h.raws)), None
    )
    if earlier is not None:
        again = "retry" if pin.check else "announce it again"
        raise PinTimeout(
            f"root {shown!r} is not usable: an earlier {earlier.what} of it did not finish "
            f"within {PIN_SECONDS:g} s and has not finished yet (a hung network or FUSE "
            f"mount?); {again} once the mount answers"
        )
    done = "checked" if pin.check else "opened"
    own = sum(1 for h in _hung if h.owner is pin.owner)
    if own >= OWNER_HUNG_PINS:
        raise PinTimeout(
            f"root {shown!r} is not {done}: {own} openings of this client's roots did not "
            f"finish within {PIN_SECONDS:g} s and still hang (hung network or FUSE mounts?); "
            "retry once they answer"
        )
    if len(_hung) >= MAX_HUNG_PINS and not pin.served:
        raise PinTimeout(
            f"root {shown!r} is not {done}: {len(_hung)} openings of client roots did not "
            f"finish within {PIN_SECONDS:g} s and still hang (hung network or FUSE mounts?); "
            "retry once they answer"
        )


def hung_pins_of(owner: object) -> int:
    """How many given-up pins of ``owner`` still block (see OWNER_HUNG_PINS)."""
    with _hung_lock:
        return sum(1 for h in _hung if h.owner is owner)


Pinned = tuple[Root, Root | None]


T = TypeVar("T")


class _Pin:
    """One pin (or check of a root, see ``check_inside``) on its own thread, and who closes
    what it opened if its caller gives up."""

    def __init__(
        self, raws: tuple[bytes, ...], owner: object, served: bool, check: bool = False
    ) -> None:
        self.raws = raws  # the roots' paths (several: one call's checks, see check_inside)
        self.owner = owner  # whose hung pins it counts among (see OWNER_HUNG_PINS)
        self.served = served  # a re-pin of a root its session serves (see MAX_HUNG_PINS)
        self.check = check  # a check of a root served, not a pin
        self.what = "check" if check else "opening"  # (for messages)
        self.started = False
        self.finished = False
        self.abandoned = False
        self.hung = False  # registered in ``_hung`` (given up while blocked)
        self.result: Any = None
        self.error: BaseException | None = None

    def give_up(self) -> Any:
        """The caller will not take the result (call with ``_hung_lock`` held): a thread still
        blocked is counted in ``_hung`` until it ends. Returns what the caller must close
        (after releasing the lock)."""
        self.abandoned = True
        if self.started and not self.finished and not self.hung:
            self.hung = True
            _hung.append(self)
        result, self.result = self.result, None
        return result


def _close_new(result: Pinned | None) -> None:
    if result is None:
        return
    new, reused = result
    if reused is None:
        new.close()


def _pin_client_root(
    uri: str, name: str | None, service: Service, by_path: dict[bytes, Root]
) -> Pinned:
    """Blocking: validate and pin one client root; the old pin of the same unchanged root
    when there is one (then second), the new pin otherwise."""
    r = accept_client_root(
        uri, name, symlinks=service.settings.symlinks, use_openat2=service.settings.use_openat2
    )
    old = by_path.get(r.path)
    if old is not None and old.name == r.name and not old.fs.retired and _same_dir(old, r):
        r.close()
        return old, old
    return r, None


def _wake(done: anyio.Event, token: EventLoopToken) -> None:
    """From a pin's thread: wake its caller (nothing to wake once the event loop is gone)."""
    with contextlib.suppress(BaseException):
        anyio.from_thread.run_sync(done.set, token=token)


async def _pin(
    uri: str,
    name: str | None,
    service: Service,
    by_path: dict[bytes, Root],
    share: anyio.CapacityLimiter | None,
) -> Pinned:
    """``_pin_client_root`` on a daemon thread, given up after PIN_SECONDS (see
    ROOTS_THREADS; ``share``: the owner's share of them, and who its hung pins count for)."""
    raw = parse_file_uri(uri)
    served = raw in by_path or any(r.announced == uri for r in by_path.values())
    pin = _Pin((raw,), share, served)
    return await _on_pin_thread(
        partial(_pin_client_root, uri, name, service, by_path), pin, uri, share, _close_new
    )


async def _on_pin_thread(
    work: Callable[[], T],
    pin: _Pin,
    uri: str,
    share: anyio.CapacityLimiter | None,
    discard: Callable[[T | None], None],
) -> T:
    """Blocking ``work`` on the root ``pin`` describes, on a daemon thread of the roots
    threads (``share``: the owner's share of them), given up after PIN_SECONDS (or when the
    caller goes away): raises ``PinTimeout`` then, and ``discard`` gets what it returns late.
    Refused at once (``PinTimeout``) while given-up ones block (see ``_refuse_if_hung``)."""
    with _hung_lock:
        _refuse_if_hung(pin, uri)
    done = anyio.Event()
    token = anyio.lowlevel.current_token()

    def run() -> None:
        try:
            with _hung_lock:
                if pin.abandoned:
                    return
                _refuse_if_hung(pin, uri)  # (another pin of it may have been given up meanwhile)
                pin.started = True
            result: T | None = None
            late: T | None = None
            try:
                result = work()
            except BaseException as e:
                pin.error = e
            finally:
                with _hung_lock:
                    pin.finished = True
                    if pin.hung:
                        _hung.remove(pin)
                    if pin.abandoned:
                        late = result
                    else:
                        pin.result = result
                discard(late)  # (given up: nobody takes it)
        except BaseException as e:  # refused (PinTimeout)
            pin.error = e
        finally:
            _wake(done, token)

    async with share if share is not None else _NO_LIMIT, _limiter(_roots_threads, ROOTS_THREADS):
        threading.Thread(target=run, name="rootgrep-pin", daemon=True).start()
        try:
            with anyio.move_on_after(PIN_SECONDS):
                await done.wait()
        except BaseException:  # cancelled: the session is closing, or its caller went away
            with _hung_lock:
                late = pin.give_up()
            discard(late)
            raise
        with _hung_lock:
            finished, result, pin.result = pin.finished, pin.result, None
            late = None if finished else pin.give_up()
        discard(late)
        if pin.error is not None:  # (the pin failed, or was refused on its thread)
            raise pin.error
        if finished and result is not None:  # (done, maybe just as the time ran out)
            return result
    doing, again = ("checking", "retry") if pin.check else ("opening", "announce it again")
    log.warning("%s client root %r did not finish within %g s; given up", doing, uri[:200],
                PIN_SECONDS)  # fmt: skip
    raise PinTimeout(
        f"root {uri[:200]!r} is not usable: {doing} it did not finish within {PIN_SECONDS:g} s "
        f"(a hung network or FUSE mount?); {again} once the mount answers"
    )


def _still_inside(roots: Sequence[Root]) -> list[bool]:
    """Blocking: ``Root.still_inside`` of each root, under a hold of its pin (its fd stays
    open while a check that was given up still runs); a root retired meanwhile counts as
    inside, for the call's lease to refuse (``root_removed``)."""
    inside = []
    for r in roots:
        if not r.acquire():
            inside.append(True)
            continue
        try:
            inside.append(r.still_inside())
        finally:
            r.release()
    return inside


def _nothing(_: object) -> None:
    """Nothing to close (a check returns booleans)."""


async def check_inside(
    roots: Sequence[Root], share: anyio.CapacityLimiter | None
) -> tuple[list[Root], list[str]]:
    """The roots a call may use: the client roots nested in an operator root (their
    ``anchor``) checked to be still inside it (``Root.still_inside``), all of them in one
    work item on the roots threads like a pin (one thread and one wake a call, however many
    roots; ``share``: the owner's share of them, and who its hung checks count for), given
    up after PIN_SECONDS. Returns the roots kept and the messages of those left out because
    their check did not finish (all the call's nested roots then), or was refused (an
    earlier check or opening at or above one of them still blocks: that root alone); a root
    that left its operator root is left out with a warning in the log."""
    nested = [r for r in roots if r.anchor is not None]
    if not nested:
        return list(roots), []
    problems: list[str] = []
    asked: list[Root] = []
    with _hung_lock:
        for r in nested:
            try:
                _refuse_if_hung(_Pin((r.path,), share, True, check=True), _shown(r))
            except PinTimeout as e:
                problems.append(e.message)
            else:
                asked.append(r)
    inside: dict[int, bool] = {}
    if asked:
        pin = _Pin(tuple(r.path for r in asked), share, True, check=True)
        shown = ", ".join(_shown(r) for r in asked)
        try:
            found = await _on_pin_thread(partial(_still_inside, asked), pin, shown, share, _nothing)
        except PinTimeout as e:
            problems.append(e.message)
        else:
            inside = {id(r): ok for r, ok in zip(asked, found, strict=True)}
    kept: list[Root] = []
    for r in roots:
        if r.anchor is None or inside.get(id(r)):
            kept.append(r)
        elif id(r) in inside:
            log.warning("root %r left its operator root; it is not served", r.uri)
    return kept, problems


def _shown(r: Root) -> str:
    return r.announced or r.uri  # (see ``Root.announced``)


_NO_LIMIT = contextlib.nullcontext()


async def accept_raw_roots(
    raw: RawRoots,
    service: Service,
    audit: Audit,
    reuse: Sequence[Root] = (),
    notes: list[str] | None = None,
    share: anyio.CapacityLimiter | None = None,
) -> tuple[list[Root], list[str]]:
    """Validate a raw ``roots/list`` answer root by root, each pinned on a roots thread (see
    ROOTS_THREADS; ``share``: the session's share of them). Returns the accepted roots
    (reusing pins of unchanged ones) and one message per rejected root. An invalid root never
    invalidates the others. Beyond ``max_roots_per_session`` accepted roots the rest are
    refused unopened, in one message (also put in ``notes``: every tool's answer repeats it)."""
    accepted: list[Root] = []
    problems: list[str] = []
    decisions: list[dict[str, Any]] = []  # audit lines, written off the event loop at the end
    by_path = {r.path: r for r in reuse}
    cap = service.settings.max_roots_per_session
    items = raw if isinstance(raw, list) else []
    refused = 0
    try:
        for item in items:
            uri = item.get("uri") if isinstance(item, dict) else None
            name = item.get("name") if isinstance(item, dict) else None
            if len(accepted) >= cap:
                refused += 1
                decisions.append({"requested": uri if isinstance(uri, str) else None,
                                  "decision": "deny", "reason": "too_many_roots"})  # fmt: skip
                continue
            if not isinstance(uri, str):
                problems.append("a root without a string uri was dropped")
                decisions.append({"requested": None, "decision": "deny", "reason": "invalid_uri"})
                continue
            try:
                r, old = await _pin(
                    uri, name if isinstance(name, str) and name else None, service, by_path, share
                )
            except RootgrepError as e:
                problems.append(f"root {uri[:200]!r} was dropped: {e}")
                if isinstance(e, PinTimeout) and notes is not None:
                    # (every answer says it until the roots are fetched again: a root left
                    # out of a refresh because its mount hangs is not "none announced")
                    notes.append(e.message)
                reason = "pin_timeout" if isinstance(e, PinTimeout) else e.code
                decisions.append({"requested": uri, "decision": "deny", "reason": reason})
                continue
            if r.lookup_only and not any(is_within(o.path, r.path) for o in service.operator_roots):
                r.close()  # (unreadable, and holding no operator root: nothing of it is served)
                problems.append(f"root {uri[:200]!r} was dropped: it cannot be opened "
                                "(permission denied)")  # fmt: skip
                decisions.append({"requested": uri, "decision": "deny", "reason": "invalid_uri"})
                continue
            if old is not None:
                old.announced = uri  # (as spelled now)
            if any(a.path == r.path for a in accepted):
                if old is None:
                    r.close()
                continue
            decisions.append({"requested": uri, "decision": "allow", "reason": "valid",
                              "root_id": r.id, "path": "."})  # fmt: skip
            accepted.append(r)
        if decisions and audit.enabled:  # (its own limiter: never behind anyio's default one)
            await anyio.to_thread.run_sync(
                _record, audit, decisions, limiter=_limiter(_unlimited, math.inf)
            )
    except BaseException:  # cancelled: the pins made so far are nobody's
        kept = {id(r) for r in reuse}
        for r in accepted:
            if id(r) not in kept:
                r.close()
        raise
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


def _record(audit: Audit, decisions: list[dict[str, Any]]) -> None:
    for d in decisions:
        audit.record(tool="roots", op="accept_root", **d)


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
        self._pin_share = anyio.CapacityLimiter(SESSION_ROOTS_THREADS)  # (see ROOTS_THREADS)

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
            new, problems = await accept_raw_roots(
                raw, self.service, self.service.audit, self.roots, notes, self._pin_share
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
            new, problems = await accept_raw_roots(
                raw, self.service, self.service.audit, self.roots, notes, self._pin_share
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

    @property
    def pin_share(self) -> anyio.CapacityLimiter:
        """The session's share of the roots threads (its pins, and its calls' checks of
        nested roots: see ``check_inside``)."""
        return self._pin_share

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
