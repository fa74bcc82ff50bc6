"""Shared fixtures: real trees in tmp dirs, a secret outside the root, both resolution modes."""

from __future__ import annotations

import os
import shutil
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootgrep.confine import Beneath, openat2_available
from support import MARKER


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["openat2", "fallback"])
def mode(request: pytest.FixtureRequest) -> str:
    if request.param == "openat2" and not openat2_available():
        pytest.skip("openat2 is not available on this kernel")
    return str(request.param)


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """``tmp/root`` (the root), ``tmp/outside/secret.txt`` (must never leak) and a sibling
    ``tmp/root-evil`` whose name shares the root's prefix."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "sub" / "b.txt").write_text("beta\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{MARKER}\n")
    evil = tmp_path / "root-evil"
    evil.mkdir()
    (evil / "x.txt").write_text(f"{MARKER} evil\n")
    return tmp_path


@pytest.fixture
def fs(world: Path, mode: str) -> Iterator[Beneath]:
    b = Beneath.pin(str(world / "root"), use_openat2=(mode == "openat2"))
    assert b.use_openat2 == (mode == "openat2")
    yield b
    b.close()


STDLIB_MAX_TEST_FILE = 32 << 10


@pytest.fixture(scope="session")
def stdlib_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the interpreter's standard library ``*.py`` files (no site-packages), all
    but its test modules over ``STDLIB_MAX_TEST_FILE`` bytes: every module of the library
    itself and 1,624 of its 1,790 files, 18 MB of its 31 (the oracle runs of make test read
    it several times: the 166 larger test modules cost them 40% more for nothing new)."""
    src = Path(sysconfig.get_paths()["stdlib"])
    dst = tmp_path_factory.mktemp("stdlib") / "lib"
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = [d for d in dirnames if d not in ("site-packages", "__pycache__")]
        rel = Path(dirpath).relative_to(src)
        for name in filenames:
            if not name.endswith(".py"):
                continue
            testing = name.startswith("test_") or {"test", "tests"} & set(rel.parts)
            if testing and os.path.getsize(Path(dirpath) / name) > STDLIB_MAX_TEST_FILE:
                continue
            (dst / rel).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(dirpath) / name, dst / rel / name)
    return dst
