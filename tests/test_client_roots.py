"""ClientRoots below the wire, made deterministic: a call's own-stream fetch (``prime``) while
the session's first roots/list is lost, and coalesced refreshes."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from rootgrep.audit import Audit
from rootgrep.roots import path_to_uri
from rootgrep.service import Service, Settings, Token
from rootgrep.sessions import ClientRoots

pytestmark = pytest.mark.anyio


def _uri(p: Path) -> str:
    return path_to_uri(str(p).encode())


async def test_the_lost_first_request_failing_later_keeps_the_primed_roots(tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.mkdir()
    service = Service([], Settings(), Audit(None))
    lost = anyio.Event()

    async def standalone() -> list[dict[str, str]]:  # the GET stream's request: never answered
        await lost.wait()
        raise TimeoutError("roots/list got no answer")

    async def on_the_calls_stream() -> list[dict[str, str]]:
        return [{"uri": _uri(a)}]

    client = ClientRoots(service, standalone, list_changed=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.refresh)  # after initialized
        await anyio.wait_all_tasks_blocked()
        assert client.needs_prime()
        assert await client.prime(on_the_calls_stream)
        roots = await client.current()  # no wait for the lost request
        assert [r.path for r in roots] == [str(a).encode()]
        token = Token(frozenset(r.id for r in roots))
        client.track(token)
        lost.set()  # the lost request gives up after its retries
    assert not token.cancelled  # an older request's failure does not take the newer answer
    assert [r.path for r in await client.current()] == [str(a).encode()]
    assert not client.needs_prime() and client.primed == 1
    client.close()


async def test_prime_does_nothing_once_an_answer_arrived(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    service = Service([], Settings(), Audit(None))

    async def standalone() -> list[dict[str, str]]:
        return [{"uri": _uri(a)}]

    async def other() -> list[dict[str, str]]:
        return [{"uri": _uri(b)}]

    client = ClientRoots(service, standalone, list_changed=True)
    await client.refresh()
    assert not await client.prime(other)
    assert [r.path for r in await client.current()] == [str(a).encode()]
    client.close()


async def test_refreshes_coalesce_to_one_in_flight_and_one_queued(tmp_path: Path) -> None:
    dirs = [tmp_path / f"d{i}" for i in range(3)]
    for d in dirs:
        d.mkdir()
    service = Service([], Settings(), Audit(None))
    current = [dirs[0]]
    gate = anyio.Event()
    fetched: list[list[Path]] = []

    async def fetch() -> list[dict[str, str]]:
        snapshot = list(current)  # what the client says when the request arrives
        await gate.wait()
        fetched.append(snapshot)
        return [{"uri": _uri(p)} for p in snapshot]

    client = ClientRoots(service, fetch, list_changed=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.refresh)
        await anyio.wait_all_tasks_blocked()  # one fetch in flight, with d0
        current[:] = [dirs[1], dirs[2]]
        for _ in range(300):
            tg.start_soon(client.refresh)
        await anyio.wait_all_tasks_blocked()
        gate.set()
    assert fetched == [[dirs[0]], [dirs[1], dirs[2]]]  # 301 refreshes, two fetches
    assert [r.path for r in await client.current()] == [str(d).encode() for d in dirs[1:]]
    assert client.requested == 301 and client.fetches == 2
    client.close()


async def test_calls_queued_behind_an_unanswered_ask_do_not_ask_again(tmp_path: Path) -> None:
    """Five first calls of a session whose client never answers ``roots/list``: one ask on a
    call's own stream (the others waited for it and share its outcome), not five asks one
    after another, each waiting its whole time-out."""
    service = Service([], Settings(), Audit(None))
    asked: list[int] = []
    give_up = anyio.Event()

    async def never_answered() -> list[dict[str, str]]:
        asked.append(1)
        await give_up.wait()  # (the time-out, made an event: no timing here)
        raise TimeoutError("roots/list got no answer")

    client = ClientRoots(service, never_answered, list_changed=True)
    results: list[bool] = []

    async def first_call() -> None:
        results.append(await client.prime(never_answered))

    with anyio.fail_after(30):  # (a hang guard)
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(first_call)
            await anyio.wait_all_tasks_blocked()
            assert len(asked) == 1
            give_up.set()
    assert asked == [1] and results == [False] * 5
    assert client.needs_prime()  # (still no answer: the next call may ask again)
    client.close()


@pytest.mark.parametrize(
    ("raw", "want"),
    [("", 5.0), ("12.5", 12.5), ("0", 5.0), ("-1", 5.0), ("4000", 5.0), ("soon", 5.0),
     ("3600", 3600.0)],
)  # fmt: skip
def test_the_pin_time_out_is_set_by_the_environment_within_bounds(
    raw: str, want: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rootgrep import sessions

    monkeypatch.setenv("ROOTGREP_PIN_SECONDS", raw)
    assert sessions._pin_seconds() == want
