"""Adversarial review of issue 9 (SPEC §8) through the real MCP client: what a hostile or
unlucky client met where the mechanisms meet."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

import anyio
import pytest
from mcp_helpers import MODES, RootsStub, code, connect, text, uri

pytestmark = pytest.mark.anyio

DEFAULT = 20_000


def long_roots(tmp_path: Path, n: int, depth: int = 12) -> list[Path]:
    """n roots, each about depth * 100 characters deep."""
    out = []
    for i in range(n):
        d = tmp_path.joinpath(*[f"{i:03}" + "d" * 96] * depth) / f"root{i}"
        d.mkdir(parents=True)
        (d / "f.txt").write_text("needle\n")
        out.append(d)
    return out


@pytest.mark.parametrize("mode", MODES)
async def test_errors_listing_roots_fit_the_budget(make_server, tmp_path: Path, mode: str) -> None:
    """An error naming the roots (ambiguous_root, unknown_root, outside_roots, no_roots)
    stays under --max-answer-chars however many roots there are and however long their
    paths; before, outside_roots and no_roots listed every operator root's URI and
    ambiguous_root up to 20 roots whole (26k characters here)."""
    roots = long_roots(tmp_path / "op", 60)
    server = make_server(roots)
    async with connect(server, mode) as c:
        calls = {
            "ambiguous_root": {"path": "f.txt"},
            "unknown_root": {"path": "f.txt", "root": "nosuch"},
            "outside_roots": {"path": str(tmp_path / "elsewhere.txt")},
        }
        for want, args in calls.items():
            r = await c.call_tool("read_file", args)
            assert code(r) == want, text(r)[:300]
            assert len(text(r)) <= DEFAULT, (want, len(text(r)))
            assert "more (list_roots shows all)" in text(r)
    elsewhere = long_roots(tmp_path / "client", 30)
    stub = RootsStub([uri(p) for p in elsewhere])
    async with connect(make_server(roots), mode, roots=stub) as c:
        r = await c.call_tool("grep", {"pattern": "needle"})
        assert code(r) == "no_roots", text(r)[:300]
        assert len(text(r)) <= DEFAULT, len(text(r))
        assert "do not overlap" in text(r)


@pytest.mark.parametrize("mode", MODES)
async def test_copy_answer_paths_round_trip_with_several_roots(
    make_server, tmp_path: Path, mode: str
) -> None:
    """copy_path's text shows its source and each skipped entry (both still there) as paths
    that round-trip with several roots; before, they were root-relative, so passed back
    without `root` they failed with ambiguous_root."""
    a, b = tmp_path / "one" / "proj", tmp_path / "two" / "proj"
    for d in (a, b):
        (d / "tree").mkdir(parents=True)
        (d / "tree" / "x.txt").write_text(f"in {d}\n")
    os.mkfifo(b / "tree" / "pipe")
    async with connect(make_server([a, b], allow_write=True), mode) as c:
        ids = [r["id"] for r in (await c.call_tool("list_roots", {})).structured_content["roots"]]
        r = await c.call_tool("copy_path", {"source": "tree", "destination": "t2", "root": ids[1]})
        t = text(r)
        assert not r.is_error, t
        head, skipped = t.splitlines()
        source = head.removeprefix("copied ").split(" -> ")[0]
        got = await c.call_tool("list_directory", {"path": source})
        assert not got.is_error, (t, text(got))
        assert got.structured_content["uri"] == uri(b / "tree"), t
        pipe = skipped.removeprefix("skipped ").split(": ")[0]
        info = await c.call_tool("file_info", {"path": pipe})
        assert not info.is_error, (t, text(info))
        assert info.structured_content["uri"] == uri(b / "tree" / "pipe"), t
        assert r.structured_content["skipped"][0]["uri"] == uri(b / "tree" / "pipe")


@pytest.mark.parametrize("mode", MODES)
async def test_invalid_argument_reads_as_a_sentence(make_server, tmp_path: Path, mode: str) -> None:
    """A length constraint's message names the argument once and reads as a sentence; before,
    an empty `edits` gave "`edits` should be List should have at least 1 item ..."."""
    (tmp_path / "a.txt").write_text("x\n")
    async with connect(make_server([tmp_path], allow_write=True), mode) as c:
        r = await c.call_tool("edit_file", {"path": "a.txt", "edits": []})
        assert code(r) == "invalid_argument", text(r)
        assert "`edits` should have at least 1 item" in text(r), text(r)
        assert "should be List" not in text(r), text(r)


@pytest.mark.parametrize("mode", MODES)
async def test_cut_reindex_and_delete_say_how_much_was_left_out(
    make_server, tmp_path: Path, mode: str
) -> None:
    """reindex with more roots than fit, and delete_path with more directories left in place
    than fit, say how many were left out (SPEC §8); before: "(cut to fit)", "(more left out)"."""
    roots = []
    for i in range(12):
        d = tmp_path / f"root{i:02}_{'n' * 120}"
        d.mkdir()
        (d / "f.txt").write_text("needle\n")
        roots.append(d)
    async with connect(make_server(roots, index=True, max_answer_chars=600), mode) as c:
        r = await c.call_tool("reindex", {})
        t = text(r)
        assert not r.is_error, t
        shown = len(r.structured_content["roots"])
        assert 0 < shown < 12, t
        assert f"({12 - shown} more roots re-indexed, left out" in t, t
    proj = tmp_path / "proj"
    (proj / "top" / "a").mkdir(parents=True)
    (proj / "top" / "a" / "x.txt").write_text("x\n")
    log = proj / "top" / "a" / "audit.log"
    server = make_server([proj], allow_write=True, max_answer_chars=1, audit=log)
    async with connect(server, mode) as c:
        r = await c.call_tool("delete_path", {"path": "top", "recursive": True})
        t = text(r)
        assert not r.is_error, t
        assert len(r.structured_content["skipped"]) == 0, t
        assert "(1 more directory left in place, left out" in t, t


@pytest.mark.parametrize("mode", MODES)
async def test_reindex_progress_rises_across_roots(make_server, tmp_path: Path, mode: str) -> None:
    """A reindex over several roots sends progress that increases through the whole call (MCP
    requires it), each message naming its root; before, each root started again from 0."""
    roots = []
    for i in range(3):
        d = tmp_path / f"r{i}"
        d.mkdir()
        for j in range(40):
            (d / f"f{j}.py").write_text(f"needle {j}\n")
        roots.append(d)
    server = make_server(roots, index=True)
    manager = server.service.indexes
    with anyio.fail_after(60):  # hang guard
        while any(
            (ix := manager.get(str(d).encode())) is None or ix.state != "ready" for d in roots
        ):
            await anyio.sleep(0.02)
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with connect(server, mode) as c:
        r = await c.call_tool("reindex", {}, progress_callback=on_progress)
        assert not r.is_error, text(r)
        with anyio.fail_after(10):  # hang guard: notifications may trail the result
            while sum(t is not None for _, t, _ in progress) < 3:
                await anyio.sleep(0.02)
    values = [d for d, _, _ in progress]
    assert all(a < b for a, b in itertools.pairwise(values)), progress
    assert values[-1] == 120, progress
    for d in roots:
        assert any((m or "").startswith(f"{d.name}: ") for _, _, m in progress), progress


POSERS = ["7:needle", "8-x", "--", "(2 matches in 2 files)", "2024-01-01.md"]


@pytest.mark.parametrize("mode", MODES)
async def test_names_that_read_as_answer_lines(make_server, tmp_path: Path, mode: str) -> None:
    """A file named like a line of grep's text (a match `7:needle`, a context line `8-x`, the
    separator `--`, a note `(…)`) is shown as ./name: the text still reads as one header per
    file, one line per match and one note, and each shown path opens its file; before, the
    header `7:needle` read as a match on line 7 and `(2 matches in 2 files)` as the footer."""
    for n in POSERS:
        (tmp_path / n).write_text(f"needle in {n}\n")
    async with connect(make_server([tmp_path]), mode) as c:
        r = await c.call_tool("grep", {"pattern": "needle"})
        lines = text(r).splitlines()
        assert sum(bool(re.match(r"^\d+:", x)) for x in lines) == len(POSERS), lines
        assert sum(x.startswith("(") for x in lines) == 1, lines
        assert "--" not in lines, lines
        headers = [x for x in lines if not re.match(r"^\d+:", x) and not x.startswith("(")]
        found = await c.call_tool("find_files", {"pattern": "*"})
        shown = [x.rsplit("  (", 1)[0] for x in text(found).splitlines()[:-1]]
        assert sorted(headers) == sorted(shown), (headers, shown)
        for h in headers:
            got = await c.call_tool("read_file", {"path": h})
            assert not got.is_error, (h, text(got))
            assert got.structured_content["content"] == f"needle in {h.removeprefix('./')}\n"


@pytest.mark.parametrize("mode", MODES)
async def test_list_roots_cut_continues_with_a_cursor(
    make_server, tmp_path: Path, mode: str
) -> None:
    """list_roots cut to fit the budget gives a cursor, and following it shows every root
    once, in order; before, the roots left out could not be listed at all."""
    roots = long_roots(tmp_path, 64, depth=3)
    async with connect(make_server(roots), mode) as c:
        whole = await c.call_tool("list_roots", {})
        first = whole.structured_content
        assert first["next_cursor"], text(whole)[-300:]
        assert len(text(whole)) <= DEFAULT + 1_000
        assert f"cursor={first['next_cursor']}" in text(whole)
        seen, cursor = list(first["roots"]), first["next_cursor"]
        while cursor:
            r = await c.call_tool("list_roots", {"cursor": cursor})
            assert not r.is_error, text(r)
            assert len(text(r)) <= DEFAULT + 1_000
            seen += r.structured_content["roots"]
            cursor = r.structured_content["next_cursor"]
    assert [x["uri"] for x in seen] == [uri(d) for d in roots]
