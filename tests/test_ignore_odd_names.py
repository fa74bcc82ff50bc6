"""Ignore rules over odd names (any bytes but NUL and '/') give the file list of ``rg --files``:
the rules match bytes, so no name can make them fail or differ."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rootgrep import ignore
from rootgrep.roots import pin_root
from rootgrep.walker import list_files
from support import RG

RG_WALK = ["--files", "--sort", "path", "--null", "--no-require-git", "--no-ignore-global",
           "--no-ignore-parent", "--hidden"]  # fmt: skip
ODD = [b"caf\xe9", b"\xed\xa0\x80", b"\xff", b"a b", b"\xc3\xa9", b"x\r", b"\xf0\x9f\x98\x80"]
RESERVED = {b".", b"..", b".gitignore", b".ignore"}


def _name() -> st.SearchStrategy[bytes]:
    raw = st.binary(min_size=1, max_size=6).map(
        lambda b: b.replace(b"/", b"_").replace(b"\0", b"_").replace(b"\n", b"_")
    )
    # a trailing backslash is no rule; and ripgrep never matches a rule ending in '.' (git
    # does): names end otherwise here
    # (a rule of a lone "!" re-includes everything in ripgrep: rules never start with '!' or
    # '#' here, other than as the negation drawn below)
    return (
        st.one_of(raw, st.sampled_from(ODD))
        .map(lambda b: b"_" + b if b[:1] in (b"!", b"#") else b)
        .map(lambda b: b + b"_" if b[-1:] in (b"\\", b".") else b)
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[bytes], bytes]:
    names = [n for n in draw(st.lists(_name(), min_size=1, max_size=8, unique=True))
             if n not in RESERVED]  # fmt: skip
    rules = []
    for _ in range(draw(st.integers(1, 5))):
        base = draw(st.sampled_from(names)) if names and draw(st.booleans()) else draw(_name())
        kind = draw(st.sampled_from(["as is", "star", "suffix", "question", "negate",
                                     "anchored", "dir"]))  # fmt: skip
        if kind == "star":
            base = base[:1] + b"*"
        elif kind == "suffix":
            base = b"*" + base[-2:]
        elif kind == "anchored":
            base = b"/" + base
        elif kind == "dir":
            base = base + b"/"
        elif kind == "question":
            base = b"?" + base[1:]
        elif kind == "negate" and base.decode("utf-8", "replace").strip():
            base = b"!" + base  # (a "!" with nothing after it re-includes everything in rg)
        rules.append(base)
    return names, b"\n".join(rules) + b"\n"


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("oddignore")


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=cases())
def test_ignore_rules_over_odd_names_equal_rg_files(
    place: Path, monkeypatch: pytest.MonkeyPatch, case: tuple[list[bytes], bytes]
) -> None:
    names, rules = case
    root = os.fsencode(place / "root")
    if os.path.exists(root):
        shutil.rmtree(root)
    os.mkdir(root)
    # the first name is a directory holding the others too: directory rules, anchored paths
    # and names at depth all take part
    sub = os.path.join(root, names[0])
    os.mkdir(sub)
    for n in names[1:]:
        for where in (root, sub):
            with open(os.path.join(where, n), "wb") as f:
                f.write(b"x\n")
    with open(os.path.join(root, b".gitignore"), "wb") as f:
        f.write(rules)
    out = subprocess.run([RG, *RG_WALK], cwd=root, capture_output=True, check=False)
    assert out.returncode in (0, 1), out.stderr
    expected = [p for p in out.stdout.split(b"\0") if p]
    r = pin_root(os.fsdecode(root))
    try:
        assert list_files(r.fs, hidden=True) == expected, rules
        # and with the dict look-ups of large files used for these few rules too
        with monkeypatch.context() as m:
            m.setattr(ignore, "DICT_RULES_MIN", 0)
            assert list_files(r.fs, hidden=True) == expected, rules
    finally:
        r.close()


BRACE_NAMES = ["}", "a}", "a", "b", "{}", "x", "xa", "x,y", "z.py", "q", "a,b", "c", "{a}"]


@pytest.mark.parametrize(
    "rule",
    ["}", "a}", "}*", "{a,b}", "{}", "{a}", "x{a,}", "x{,a}", "{,}", "{a,{b,c}}", "{*.py,q}",
     "x,y", "{a\\,b,c}", "{a,b", "[ab", "a\t", "a\u3000", "a\\ ", "caf\xe9"],
)  # fmt: skip
def test_rules_ripgrep_reads_its_own_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rule: str
) -> None:
    """Alternatives ``{a,b}`` (not nested; empty ones dropped; a stray ``}`` dropped), rules
    ripgrep refuses (unclosed ``[`` or ``{``: skipped), trailing Unicode white space."""
    root = tmp_path / "r"
    root.mkdir()
    for n in BRACE_NAMES:
        (root / n).write_text("x\n")
    (root / ".gitignore").write_bytes(rule.encode("latin-1" if rule == "caf\xe9" else "utf-8"))
    out = subprocess.run([RG, *RG_WALK], cwd=root, capture_output=True, check=False)
    expected = [p for p in out.stdout.split(b"\0") if p]
    r = pin_root(str(root))
    try:
        assert list_files(r.fs, hidden=True) == expected
        monkeypatch.setattr(ignore, "DICT_RULES_MIN", 0)
        assert list_files(r.fs, hidden=True) == expected
    finally:
        r.close()
