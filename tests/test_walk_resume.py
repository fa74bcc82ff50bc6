"""A page resumed from a cursor walks on from the cursor's position: a directory whose files
all came before it is not entered again (else page N of a large tree costs a walk of every
page before it). Seen through the interpreter's audit hook, which reports every os.open."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rootgrep.roots import pin_root
from rootgrep.service import Service, Settings, Token

_OPENED: list[bytes] | None = None


def _hook(event: str, args: tuple) -> None:
    if event == "open" and _OPENED is not None and isinstance(args[0], bytes):
        _OPENED.append(args[0])


sys.addaudithook(_hook)  # (hooks stay for the process: this one records only inside ``opened``)


def _opened_during(fn) -> tuple[object, list[bytes]]:  # type: ignore[no-untyped-def]
    global _OPENED
    _OPENED = []
    try:
        return fn(), _OPENED
    finally:
        _OPENED = None


@pytest.fixture
def service(tmp_path: Path):  # type: ignore[no-untyped-def]
    root = tmp_path / "root"
    for d in range(4):
        sub = root / f"dir{d}" / "inner"
        sub.mkdir(parents=True)
        for i in range(10):
            (root / f"dir{d}" / f"f{i}.txt").write_text(f"needle {d} {i}\n")
            (sub / f"g{i}.txt").write_text(f"needle inner {d} {i}\n")
    r = pin_root(str(root))
    yield Service([r], Settings()), r
    r.close()


@pytest.mark.parametrize("tool", ["find_files", "grep"])
def test_a_resumed_page_does_not_walk_what_went_before(service, tool: str) -> None:  # type: ignore[no-untyped-def]
    s, r = service

    def page(cursor: str | None):  # type: ignore[no-untyped-def]
        if tool == "find_files":
            return s.find_files([r], Token(), pattern="*.txt", max_results=20, cursor=cursor)
        return s.grep([r], Token(), pattern="needle", max_results=20, cursor=cursor)

    first = page(None)
    second = page(first.next_cursor)
    third, opened = _opened_during(lambda: page(second.next_cursor))
    items = third.matches if tool == "grep" else third.files
    shown = [h.path for h in items]
    assert shown and all(p.startswith("dir2/") for p in shown), shown
    # dir0's files were all on the first page: it is not entered again (dir1 is: the cursor
    # lies inside it, and more of it may follow)
    assert b"dir0" not in opened, opened
    assert b"dir1" in opened and b"dir2" in opened
