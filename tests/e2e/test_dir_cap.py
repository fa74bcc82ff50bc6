"""A directory with more entries than one listing reads (``confine.MAX_DIR_ENTRIES``; lowered
here so the tree stays small): listings hold a bounded part of it and say so, the walk goes
on past it, a recursive delete still empties it, and a copy reports what it left."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp_helpers import code, connect, everything, text

from rootgrep import confine
from rootgrep.confine import listing
from rootgrep.roots import pin_root
from rootgrep.walker import Walker

CAP = 40
FILES = 100


@pytest.fixture
def huge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(listing, "MAX_DIR_ENTRIES", CAP)  # (the cap the listings keep to)
    root = tmp_path / "root"
    big = root / "big"
    big.mkdir(parents=True)
    for i in range(FILES):
        (big / f"f{i:03}.txt").write_text(f"needle {i}\n")
    (big / "sub").mkdir()
    (big / "sub" / "deep.txt").write_text("needle deep\n")
    (root / "small.txt").write_text("needle small\n")
    return root


def test_a_listing_reads_at_most_the_cap(huge: Path) -> None:
    fd = confine.os.open(huge / "big", confine.os.O_RDONLY | confine.os.O_DIRECTORY)
    try:
        listed = confine.scan_fd(fd)
    finally:
        confine.os.close(fd)
    assert len(listed) == CAP and listed.cut
    names = [e.name for e in listed]
    assert names == sorted(names)
    fd = confine.os.open(huge, confine.os.O_RDONLY | confine.os.O_DIRECTORY)
    try:
        small = confine.scan_fd(fd)
    finally:
        confine.os.close(fd)
    assert not small.cut and {e.name for e in small} == {b"big", b"small.txt"}


@pytest.mark.anyio
async def test_list_directory_says_a_huge_directory_is_listed_in_part(
    huge: Path, make_server
) -> None:
    server = make_server([huge])
    async with connect(server, "legacy") as c:
        seen: list[str] = []
        cursor = None
        for _ in range(10):
            args = {"path": "big", **({"cursor": cursor} if cursor else {})}
            r = await c.call_tool("list_directory", args)
            assert code(r) is None, text(r)
            seen += [e["name"] for e in r.structured_content["entries"]]
            cursor = r.structured_content.get("next_cursor")
            if not cursor:
                break
        assert len(seen) == CAP == len(set(seen))
        assert r.structured_content["truncated"] is True
        assert "more than" in text(r) and "find_files" in text(r)
        r = await c.call_tool("list_directory", {})
        assert r.structured_content["truncated"] is False
        # the walk goes on past the cut directory: the file beside it is still found
        r = await c.call_tool("grep", {"pattern": "needle small"})
        assert code(r) is None and "small.txt" in everything(r)


@pytest.mark.anyio
async def test_a_recursive_delete_empties_a_huge_directory(huge: Path, make_server) -> None:
    server = make_server([huge], allow_write=True)
    async with connect(server, "legacy") as c:
        r = await c.call_tool("delete_path", {"path": "big", "recursive": True})
        assert code(r) is None, text(r)
    assert not (huge / "big").exists()
    assert (huge / "small.txt").read_text() == "needle small\n"


@pytest.mark.anyio
async def test_a_copy_of_a_huge_directory_reports_what_it_left(huge: Path, make_server) -> None:
    server = make_server([huge], allow_write=True)
    async with connect(server, "legacy") as c:
        r = await c.call_tool("copy_path", {"source": "big", "destination": "copy"})
        assert code(r) is None, text(r)
        assert "entries; only that many copied" in text(r)
    copied = {p.name for p in (huge / "copy").iterdir()}
    assert len(copied) == CAP and copied <= {p.name for p in (huge / "big").iterdir()}


def test_the_walk_says_the_cap_it_cut_a_directory_at(huge: Path) -> None:
    """(The walker's message read the package's copy of the cap, not the one the listing
    keeps to: it said 200000 where the listing stopped at 40.)"""
    r = pin_root(str(huge))
    try:
        walker = Walker(r.fs)
        found = []
        for batch in walker.batches():
            with batch:
                found += [f.path for f in batch.files]
    finally:
        r.close()
    assert b"small.txt" in found and len([p for p in found if p.startswith(b"big/")]) < FILES
    assert (b"big", f"more than {CAP} entries: rest skipped") in walker.errors, walker.errors
