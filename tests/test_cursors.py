"""Cursors are authenticated (an HMAC under a per-process key): a forged, garbled, tampered or
foreign cursor answers ``[invalid_argument]`` saying to restart the listing without a cursor,
through every tool that takes one, and never crashes a handler."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rootgrep.errors import InvalidArgument
from rootgrep.index.manager import IndexManager
from rootgrep.roots import Root, pin_root
from rootgrep.service import LIST_PAGE, Service, Settings, Token
from rootgrep.service import base as service_mod

RESTART = "without a cursor"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Root]]:
    root = tmp_path_factory.mktemp("cursors") / "root"
    (root / "d").mkdir(parents=True)
    for i in range(LIST_PAGE + 5):  # more than a page of list_directory
        (root / "d" / f"f{i:04}.txt").write_text(f"needle {i}\nneedle again\n")
    r = pin_root(str(root))
    manager = IndexManager(str(tmp_path_factory.mktemp("cache")))
    yield Service([r], Settings(), indexes=manager), r
    manager.close()
    r.close()


def _tools(s: Service, r: Root) -> dict[str, Callable[[str], Any]]:
    """Each cursor-taking tool with small pages, as a function of the cursor."""
    roots = [r]
    return {
        "grep": lambda c: s.grep(roots, Token(), pattern="needle", max_results=3, cursor=c),
        "find_files": lambda c: s.find_files(
            roots, Token(), pattern="*.txt", max_results=3, cursor=c
        ),
        "search": lambda c: s.search(roots, Token(), query="needle", max_results=3, cursor=c),
        "list_directory": lambda c: s.list_directory(roots, path="d", cursor=c),
    }


KINDS = {"grep": "grep", "find_files": "find", "search": "search", "list_directory": "ls"}
FPS = {  # the fingerprints the calls above use (a forger who knows the format)
    "grep": dict(
        t="grep",
        p="needle",
        r=None,
        pa=None,
        re=False,
        cs=True,
        w=False,
        i=None,
        e=None,
        c=0,
        h=False,
        n=False,
    ),
    "find_files": dict(t="find", p="*.txt", r=None, pa=None, h=False, n=False),
    "search": dict(t="search", q="needle", r=None, pa=None, i=None, e=None),
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@st.composite
def forged(draw: st.DrawFn, tool: str, r: Root) -> str:
    """A cursor as a forger would write one: the right kind and fingerprint, made-up
    positions, with or without something that looks like a MAC."""
    fp_args = FPS.get(tool) or dict(t="ls", r=r.id, p="d")
    data: dict[str, Any] = {"k": KINDS[tool], "f": service_mod._fingerprint(**fp_args)}
    for key in draw(st.lists(st.sampled_from(["t", "p", "l", "o", "n"]), max_size=4)):
        data[key] = draw(json_values | st.text(alphabet="ABCabc=-_0189", max_size=12))
    body = _b64(json.dumps(data).encode())
    tail = draw(st.sampled_from(["", ".", ".AAAAAAAAAAAAAAAAAAAAAA"]) | st.text(max_size=30))
    return body + tail


@st.composite
def tampered(draw: st.DrawFn, genuine: str) -> str:
    i = draw(st.integers(0, len(genuine) - 1))
    c = draw(st.characters(codec="ascii").filter(lambda ch: ch != genuine[i]))
    return genuine[:i] + c + genuine[i + 1 :]


def _genuine(tools: dict[str, Callable[[str], Any]], tool: str) -> str:
    page = tools[tool](None)
    assert page.next_cursor, tool
    return str(page.next_cursor)


def _refused(call: Callable[[str], Any], cursor: str) -> None:
    if not cursor:
        return  # an empty cursor is no cursor
    with pytest.raises(InvalidArgument) as e:
        call(cursor)
    assert RESTART in str(e.value) and str(e.value).startswith("[invalid_argument]")


FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.parametrize("tool", list(KINDS))
def test_random_text_cursors_are_refused_cleanly(tree: tuple[Service, Root], tool: str) -> None:
    s, r = tree
    call = _tools(s, r)[tool]

    @FUZZ
    @given(st.text(max_size=300) | st.binary(max_size=200).map(_b64))
    def check(cursor: str) -> None:
        _refused(call, cursor)

    check()


@pytest.mark.parametrize("tool", list(KINDS))
def test_forged_cursors_are_refused(tree: tuple[Service, Root], tool: str) -> None:
    s, r = tree
    call = _tools(s, r)[tool]

    @FUZZ
    @given(forged(tool, r))
    def check(cursor: str) -> None:
        _refused(call, cursor)

    check()


@pytest.mark.parametrize("tool", ["grep", "find_files", "list_directory"])
def test_tampered_genuine_cursors_are_refused(tree: tuple[Service, Root], tool: str) -> None:
    s, r = tree
    tools = _tools(s, r)
    genuine = _genuine(tools, tool)
    assert tools[tool](genuine) is not None  # the genuine one pages on

    @FUZZ
    @given(tampered(genuine))
    def check(cursor: str) -> None:
        _refused(tools[tool], cursor)

    check()


def test_a_cursor_of_another_process_or_tool_is_refused(
    tree: tuple[Service, Root], monkeypatch: pytest.MonkeyPatch
) -> None:
    s, r = tree
    tools = _tools(s, r)
    genuine = {t: _genuine(tools, t) for t in ("grep", "find_files", "list_directory")}
    for t, c in genuine.items():  # another tool's cursor
        for other in tools:
            if other != t:
                _refused(tools[other], c)
    monkeypatch.setattr(service_mod, "_CURSOR_KEY", b"another process's key" * 2)
    for t, c in genuine.items():
        _refused(tools[t], c)
