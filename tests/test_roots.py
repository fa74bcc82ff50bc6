"""Client root URI validation, root identity, effective roots and request mapping (SPEC §3-§4)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from rootgrep.roots import (
    Root,
    accept_client_root,
    effective_roots,
    find_root,
    parse_file_uri,
    path_to_uri,
    pin_root,
    resolve_target,
    root_id,
)
from support import error_code


def uri(p: Path | str) -> str:
    return "file://" + quote(str(p))


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("file:///srv/repo", b"/srv/repo"),
        ("FILE:///srv/repo", b"/srv/repo"),
        ("File://localhost/srv/repo", b"/srv/repo"),
        ("file://LOCALHOST/srv/repo", b"/srv/repo"),
        ("file:/srv/repo", b"/srv/repo"),
        ("file:///srv/a%20b", b"/srv/a b"),
        ("file:///srv/a%2fb", b"/srv/a/b"),
        ("file:///srv/%252e", b"/srv/%2e"),  # decoded exactly once
        ("file:///srv/%c0%ae", b"/srv/\xc0\xae"),  # bytes, never lenient UTF-8
        ("file:///srv/%E2%80%A5", "/srv/‥".encode()),
    ],
)
def test_parse_file_uri_accepts(text: str, path: bytes) -> None:
    assert parse_file_uri(text) == path


@pytest.mark.parametrize(
    "text",
    [
        "file://evil/share/x",
        "http://localhost/srv",
        "https:///srv",
        "smb://host/share",
        "data:text/plain,hello",
        "file:rel/x",
        "file:///srv/repo?q=1",
        "file:///srv/repo#frag",
        "file:///srv/%00x",
        "file:///srv/\0x",
        "/srv/repo",
        "relative/path",
        "",
        "file://localhost",
    ],
)
def test_parse_file_uri_refuses(text: str) -> None:
    assert error_code(parse_file_uri, text) == "invalid_uri"


@pytest.fixture
def dirs(tmp_path: Path) -> Path:
    for d in ("projects/inv/src", "projects/web", "other", "projects-old"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "file.txt").write_text("x")
    return tmp_path


def test_client_root_validation(dirs: Path) -> None:
    r = accept_client_root(uri(dirs / "projects"), "proj")
    try:
        assert (r.name, r.source, r.path) == ("proj", "client", os.fsencode(dirs / "projects"))
        assert r.id == root_id(r.path) and len(r.id) == 12
        assert r.uri == path_to_uri(r.path)
        assert r.identity() == {"id": r.id, "name": "proj", "uri": r.uri}
    finally:
        r.close()
    for bad in (
        uri(dirs / "missing"),
        uri(dirs / "file.txt"),
        uri(dirs / "projects") + "/../other",
        uri(dirs / "projects") + "/%2e%2e/other",
        "http://x/y",
    ):
        assert error_code(accept_client_root, bad) == "invalid_uri"


def test_root_id_is_stable_for_a_canonical_path(dirs: Path) -> None:
    os.symlink(dirs / "projects", dirs / "alias")
    a = pin_root(dirs / "projects")
    b = accept_client_root(uri(dirs / "alias"))
    try:
        assert a.id == b.id and a.uri == b.uri
    finally:
        a.close()
        b.close()


@pytest.fixture
def pins(dirs: Path) -> Iterator[dict[str, Root]]:
    made = {
        "c_projects": accept_client_root(uri(dirs / "projects"), "projects"),
        "c_other": accept_client_root(uri(dirs / "other"), "other"),
        "c_old": accept_client_root(uri(dirs / "projects-old"), "old"),
        "o_inv": pin_root(dirs / "projects" / "inv"),
        "o_projects": pin_root(dirs / "projects"),
        "o_web": pin_root(dirs / "projects" / "web"),
    }
    yield made
    for r in made.values():
        r.close()


def test_intersection_is_component_wise(pins: dict[str, Root], dirs: Path) -> None:
    p = pins
    # client /projects ∩ operator /projects/inv = /projects/inv
    eff = effective_roots([p["c_projects"]], [p["o_inv"]])
    assert [r.path for r in eff] == [os.fsencode(dirs / "projects" / "inv")]
    # client deeper than operator: the client's root
    eff = effective_roots([p["o_inv"]], [p["o_projects"]])
    assert [r.path for r in eff] == [os.fsencode(dirs / "projects" / "inv")]
    # disjoint, and a string-prefix sibling, give nothing
    assert effective_roots([p["c_other"]], [p["o_projects"]]) == []
    assert effective_roots([p["c_old"]], [p["o_projects"]]) == []
    # equal: both sources, the client's name
    (both,) = effective_roots([p["c_projects"]], [p["o_projects"]])
    assert both.source == "both" and both.name == "projects"
    # several
    eff = effective_roots([p["c_projects"], p["c_other"]], [p["o_inv"], p["o_web"]])
    assert [r.path for r in eff] == [
        os.fsencode(dirs / "projects" / "inv"),
        os.fsencode(dirs / "projects" / "web"),
    ]


def test_scope_without_client_roots_or_without_operator_roots(pins: dict[str, Root]) -> None:
    p = pins
    assert effective_roots(None, [p["o_inv"]]) == [p["o_inv"]]  # no roots capability
    assert effective_roots([p["c_other"]], []) == [p["c_other"]]  # no operator roots
    assert effective_roots([], [p["o_inv"]]) == []  # an empty list is not "everything"


def test_resolve_target_rules(pins: dict[str, Root], dirs: Path) -> None:
    inv, web = pins["o_inv"], pins["o_web"]
    assert error_code(resolve_target, [], "x") == "no_roots"
    assert resolve_target([inv], "src/a.py") == (inv, [b"src", b"a.py"])
    assert resolve_target([inv], None) == (inv, [])
    assert error_code(resolve_target, [inv, web], "src/a.py") == "ambiguous_root"
    assert error_code(resolve_target, [inv, web], None) == "ambiguous_root"
    assert resolve_target([inv, web], "a.py", web.id) == (web, [b"a.py"])
    assert resolve_target([inv, web], "a.py", web.name) == (web, [b"a.py"])
    assert resolve_target([inv, web], "a.py", web.uri) == (web, [b"a.py"])
    assert error_code(resolve_target, [inv, web], "a.py", "nope") == "unknown_root"
    absolute = str(dirs / "projects" / "web" / "x" / "y.py")
    assert resolve_target([inv, web], absolute) == (web, [b"x", b"y.py"])
    assert resolve_target([inv, web], uri(absolute)) == (web, [b"x", b"y.py"])
    assert error_code(resolve_target, [inv, web], str(dirs / "other" / "x")) == "outside_roots"
    assert error_code(resolve_target, [inv], absolute, inv.id) == "outside_roots"
    assert error_code(resolve_target, [inv], "http://x/y") == "invalid_uri"


def test_nested_roots_pick_the_deepest(pins: dict[str, Root], dirs: Path) -> None:
    outer, inner = pins["o_projects"], pins["o_inv"]
    got = resolve_target([outer, inner], str(dirs / "projects" / "inv" / "src"))
    assert got == (inner, [b"src"])


def test_find_root_by_path(pins: dict[str, Root], dirs: Path) -> None:
    inv = pins["o_inv"]
    assert find_root([inv], str(dirs / "projects" / "inv")) is inv
    assert find_root([inv], uri(dirs / "projects" / "inv")) is inv
    assert error_code(find_root, [inv], str(dirs / "projects")) == "unknown_root"


def test_pin_root_refuses_missing_and_files(dirs: Path) -> None:
    assert error_code(pin_root, dirs / "missing") == "invalid_path"
    assert error_code(pin_root, dirs / "file.txt") == "invalid_path"


def test_a_root_uri_is_quoted_as_urllib_quotes_it() -> None:
    """``path_to_uri`` writes what ``urllib.parse.quote_from_bytes(path, safe="/")`` does,
    without importing it (issue 11: 1.5 ms of every CLI start), for every byte value."""
    for b in range(256):
        path = b"/a" + bytes([b]) + b"/z" + bytes([b])
        assert path_to_uri(path) == "file://" + quote(path, safe="/")
    assert path_to_uri(b"/plain/Path_1.-~") == "file:///plain/Path_1.-~"
