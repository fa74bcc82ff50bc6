"""The growth and edit-cost benchmarks' synthetic tree (benchmarks/synthetic.py): the same
bytes for the same file whatever the tree's size or how it grew, and the rare token in the
planted files only, so each size's selective grep has the same answers."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "synthetic.py"


@pytest.fixture(scope="module")
def synthetic() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rootgrep_bench_synthetic", _PATH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (dataclasses look their module up)
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[spec.name]
    return mod


def _files(top: Path) -> dict[str, bytes]:
    return {
        os.path.relpath(os.path.join(d, name), top): Path(d, name).read_bytes()
        for d, _, names in os.walk(top)
        for name in names
    }


def test_grown_tree_equals_tree_made_at_once(synthetic: ModuleType, tmp_path: Path) -> None:
    at_once, grown = tmp_path / "once", tmp_path / "grown"
    synthetic.make_tree(str(at_once), 250)
    synthetic.make_tree(str(grown), 130)
    synthetic.make_tree(str(grown), 250, start=130)
    once = _files(at_once)
    assert len(once) == 250
    assert once == _files(grown)
    # a hundred files per directory
    assert sorted({os.path.dirname(p) for p in once}) == [
        "pkg000/mod00",
        "pkg000/mod01",
        "pkg000/mod02",
    ]


def test_rare_token_only_in_planted_files(synthetic: ModuleType) -> None:
    vocab = synthetic.vocabulary()
    token = synthetic.RARE_TOKEN.encode()
    hits = [i for i in range(5_000) if token in synthetic.file_text(i, vocab)]
    assert hits == list(synthetic.PLANTED)
    assert all(1_000 < len(synthetic.file_text(i, vocab)) < 6_000 for i in range(0, 5_000, 97))
