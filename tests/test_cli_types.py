"""rg's file types (``-t``/``-T``/``--type-list``): rootgrep's table is rg 14's, and each
type selects the names rg's selects, on a tree of names made from every type's globs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from rootgrep.cli.file_types import FileTypes, type_list, types
from support import RG


def _names_of(glob: str) -> set[str]:
    """Names a glob matches, and near misses: ``*`` as nothing and as a word, each class as
    its first and last member, and the name with a letter changed in case or appended."""
    out: set[str] = set()
    for star in ("", "x"):
        for pick in (0, -1):
            name = re.sub(r"\[([^]]+)\]", lambda m, i=pick: m.group(1)[i], glob.replace("*", star))
            out |= {name, name + "x", name.swapcase(), "x" + name}
    out |= {n + "." for n in out}  # (as rg: a name ending in "." is of no type)
    return {n for n in out if n and "/" not in n and n not in (".", "..")}


def test_the_type_list_is_rgs() -> None:
    ref = subprocess.run([RG, "--type-list"], capture_output=True, check=True, text=True)
    assert type_list() == ref.stdout
    assert len(types()) == len(ref.stdout.splitlines()) > 200


def test_each_type_selects_the_names_rg_selects(tmp_path: Path) -> None:
    table = types()
    names = sorted({n for globs in table.values() for g in globs for n in _names_of(g)})
    for n in names:
        (tmp_path / n).write_text("x\n")
    listed = {p.name for p in tmp_path.iterdir()}  # (names alike but for case: one file)
    differ: list[str] = []
    for name in sorted(table):
        ref = subprocess.run(
            [RG, "--files", "--hidden", "--no-ignore", "-t", name],
            cwd=tmp_path, capture_output=True, check=False, text=True,
        )  # fmt: skip
        rg_selects = set(ref.stdout.split("\n")) - {""}
        verdict = FileTypes([("select", name)]).verdict
        mine = {n for n in listed if verdict(n)}
        if mine != rg_selects:
            differ.append(f"{name}: only rg {rg_selects - mine}, only rootgrep {mine - rg_selects}")
    assert not differ, differ
    assert len(listed) > 1000
