"""What a small tool call costs besides its work (issue 11): the mechanisms that keep it small,
pinned by what they do (never by timings). Real trees in tmp dirs, a real index, the real
MCP client (in memory: the costs pinned here are the server's, not the transport's)."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from jsonschema.validators import validator_for
from mcp_helpers import connect, text

from rootgrep.index.store import RootIndex
from rootgrep.service.enclosing import SYMBOL_CACHE, SymbolCache

pytestmark = pytest.mark.anyio

PY = """\
import os

LIMIT = 10


class Parser:
    def parse(self, data):
        return data

    class Inner:
        def parse(self):
            return None


def parse(text):
    return Parser().parse(text)
"""


def tree(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "parser.py").write_text(PY)
    (root / "src" / "other.py").write_text("def helper():\n    return 1\n")
    (root / "notes.txt").write_text("return to sender\n")
    return root


async def index_ready(server: Any, root: Path) -> Any:
    """The root's index once its first build is done (a hang guard, not a timing)."""
    ix = server.service.indexes.get(root.resolve().as_posix().encode())
    assert ix is not None
    with anyio.fail_after(60):
        while ix.state != "ready":
            await anyio.sleep(0.05)
    return ix


@pytest.fixture(autouse=True)
def fresh_symbol_cache() -> None:
    SYMBOL_CACHE.clear()  # (another test's index may have filled it)


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


async def test_output_schemas_are_inlined_and_accept_the_answers(
    make_server, tmp_path: Path
) -> None:
    """Every published output schema is self-contained: no ``$ref`` for a client's validator
    to resolve per item (a recursive node, directory_tree's and outline's, points into its
    own ``$defs``), a valid JSON schema, and the answers validate against it."""
    root = tree(tmp_path)
    server = make_server([root])
    async with connect(server, "legacy") as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        for name, t in tools.items():
            schema = t.output_schema
            assert schema is not None and schema.get("type") == "object", name
            validator_for(schema).check_schema(schema)
            for ref in _refs(schema):
                assert ref.startswith("#/$defs/"), (name, ref)
                assert ref.removeprefix("#/$defs/") in schema.get("$defs", {}), (name, ref)
        assert _refs(tools["grep"].output_schema) == []
        assert "$defs" not in tools["grep"].output_schema
        grep = tools["grep"].output_schema["properties"]["matches"]["items"]
        assert "root (object {id: string, name: string})" in grep["description"]
        assert "line (integer), column (integer)" in grep["description"]
        for tool, args in [
            ("grep", {"pattern": "return"}),
            ("directory_tree", {}),
            ("outline", {"path": "src/parser.py"}),
            ("list_roots", {}),
        ]:
            r = await c.call_tool(tool, args)  # (the client checks it against the schema too)
            assert not r.is_error, text(r)
            schema = tools[tool].output_schema
            errors = list(validator_for(schema)(schema).iter_errors(r.structured_content))
            assert errors == [], (tool, errors[:1])
        # the schema still refuses what the model refuses (a root without its id; a field
        # of the wrong type)
        schema = tools["list_roots"].output_schema
        for spoil in ["id", "read_only"]:
            bad = json.loads(json.dumps(r.structured_content))
            if spoil == "id":
                del bad["roots"][0]["id"]
            else:
                bad["read_only"] = "yes"
            assert list(validator_for(schema)(schema).iter_errors(bad)), spoil


async def test_a_client_checks_a_page_of_items_in_a_few_steps_each(
    make_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The items of a page-sized list (grep's matches, find_files' files, search's results,
    find_symbol's symbols, list_directory's entries) are described in one schema step each:
    the client's ``jsonschema`` check enters no sub-schema per field (it built a validator
    for each: ten a match, 40-60 µs, about 50 ms a page of 1,000), not even a ``true`` one
    (a map of them cost 2-4 ms a page). The schema still names every field of the result
    model, with its type, in the item's description, and still refuses an item without a
    required field."""
    from rootgrep.models import FileHit, GrepMatch, SearchHit, SymbolHit

    root = tree(tmp_path)
    for i in range(40):
        (root / f"f{i:02}.py").write_text("def f():\n    return 1\n")
    server = make_server([root], index=True)
    async with connect(server, "legacy") as c:
        await index_ready(server, root)
        tools = {t.name: t.output_schema for t in (await c.list_tools()).tools}
        for tool, field, model in [
            ("grep", "matches", GrepMatch),
            ("find_files", "files", FileHit),
            ("search", "results", SearchHit),
            ("find_symbol", "symbols", SymbolHit),
        ]:
            items = tools[tool]["properties"][field]["items"]
            assert set(items) == {"type", "description", "required"}, (tool, items)
            assert items["required"] == [
                n for n, f in model.model_fields.items() if f.is_required()
            ], tool
            for name in model.model_fields:
                assert f"{name} (" in items["description"], (tool, name)
        r = await c.call_tool("grep", {"pattern": "return"})
        assert not r.is_error, text(r)
        matches = r.structured_content["matches"]
        assert len(matches) >= 40
        schema = tools["grep"]
        cls = validator_for(schema)
        steps = 0
        descend = cls.descend

        def counting(self: Any, instance: Any, schema: Any, *a: Any, **kw: Any) -> Any:
            nonlocal steps
            steps += 1  # (a `true` too: it builds no validator, yet costs every item a call)
            return descend(self, instance, schema, *a, **kw)

        monkeypatch.setattr(cls, "descend", counting)
        assert list(cls(schema).iter_errors(r.structured_content)) == []
        # (one step an item, and one for each field of the result itself, whatever the
        # item's fields)
        assert steps <= len(matches) + len(schema["properties"]) + 2, (steps, len(matches))
        bad = json.loads(json.dumps(r.structured_content))
        del bad["matches"][3]["line"]
        assert list(cls(schema).iter_errors(bad))


async def test_a_call_hops_to_one_worker_thread_and_builds_no_class(
    make_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grep call with the index serving runs its blocking work in one worker thread (the
    roots resolver is a coroutine, and the indexes are started in the tool's own worker), and
    builds no pydantic class (the SDK's ``AcceptedElicitation[Any]`` is kept alive, not
    rebuilt after each garbage collection)."""
    import pydantic._internal._generics as generics

    root = tree(tmp_path)
    server = make_server([root], index=True)
    hops: list[str] = []
    classes: list[str] = []
    run_sync = anyio.to_thread.run_sync
    create = generics.create_generic_submodel

    async def counting_run_sync(func: Any, *args: Any, **kw: Any) -> Any:
        hops.append(getattr(func, "__name__", repr(func)))
        return await run_sync(func, *args, **kw)

    def counting_create(name: str, *args: Any, **kw: Any) -> Any:
        classes.append(name)
        return create(name, *args, **kw)

    async with connect(server, "legacy") as c:
        await index_ready(server, root)
        first = await c.call_tool("grep", {"pattern": "return"})  # (warm: first use)
        assert not first.is_error, text(first)
        monkeypatch.setattr(anyio.to_thread, "run_sync", counting_run_sync)
        monkeypatch.setattr(generics, "create_generic_submodel", counting_create)
        for _ in range(3):
            gc.collect()
            r = await c.call_tool("grep", {"pattern": "return"})
            assert not r.is_error, text(r)
            assert r.structured_content["index_used"] is True
    assert len(hops) == 3, hops
    assert classes == []


async def test_answers_are_checked_against_their_schema_by_the_client_only(
    make_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server does not validate each answer's structured content again against its
    result model (it is that model's own dump; the client checks it against the published
    schema): a page of matches is not parsed into models a second time per call."""
    from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata

    root = tree(tmp_path)
    server = make_server([root])
    checks: list[Any] = []
    adapter = FuncMetadata._output_adapter

    def counting(self: FuncMetadata, model: Any) -> Any:
        checks.append(model)
        return adapter(self, model)

    monkeypatch.setattr(FuncMetadata, "_output_adapter", counting)
    async with connect(server, "legacy") as c:
        for tool, args in [("grep", {"pattern": "return"}), ("list_roots", {})]:
            r = await c.call_tool(tool, args)  # (the client's check passes)
            assert not r.is_error and r.structured_content, text(r)
        listed = {t.name: t.output_schema for t in (await c.list_tools()).tools}
    assert checks == []
    assert all(schema is not None for schema in listed.values())


async def test_symbols_are_read_once_per_file_and_commit(
    make_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each match names its enclosing definition from the index's stored symbols; a second
    grep over the same commit reads no stored symbols again (they are decoded once per file
    and commit), and answers the same."""
    root = tree(tmp_path)
    server = make_server([root], index=True)
    reads: list[bytes] = []
    symbols_of = RootIndex.symbols_of

    def counting(self: RootIndex, rel: bytes) -> Any:
        reads.append(rel)
        return symbols_of(self, rel)

    monkeypatch.setattr(RootIndex, "symbols_of", counting)
    async with connect(server, "legacy") as c:
        await index_ready(server, root)
        args = {"pattern": "return", "include": "*.py"}
        r1 = await c.call_tool("grep", args)
        got = {(m["path"], m["line"]): m.get("symbol") for m in r1.structured_content["matches"]}
        assert got == {
            ("src/other.py", 2): "helper",
            ("src/parser.py", 8): "Parser.parse",
            ("src/parser.py", 12): "Inner.parse",
            ("src/parser.py", 16): "parse",
        }
        assert sorted(reads) == [b"src/other.py", b"src/parser.py"]
        reads.clear()
        r2 = await c.call_tool("grep", args)
        assert r2.structured_content == {**r1.structured_content, "elapsed_ms": ANY}
        assert reads == []


class _Any:
    def __eq__(self, other: object) -> bool:
        return True


ANY = _Any()


async def test_symbols_after_a_commit_are_the_new_ones(make_server, tmp_path: Path) -> None:
    """The decoded symbols of a file are never served past the commit they came from: after
    a file changes (dirty: no symbol) and its new version is committed, each match names the
    definitions of the new version."""
    root = tree(tmp_path)
    server = make_server([root], index=True)
    args = {"pattern": "return", "include": "src/parser.py"}
    async with connect(server, "legacy") as c:
        ix = await index_ready(server, root)
        r = await c.call_tool("grep", args)
        assert {m["line"]: m.get("symbol") for m in r.structured_content["matches"]} == {
            8: "Parser.parse",
            12: "Inner.parse",
            16: "parse",
        }
        # three lines added on top: the old symbols would put line 11 in Inner.parse and
        # line 15 in parse
        (root / "src" / "parser.py").write_text("#\n#\n#\n" + PY)
        r = await c.call_tool("reindex", {})
        assert not r.is_error, text(r)
        fs = server.service.operator_roots[0].fs
        with anyio.fail_after(60):
            while ix.dirty_snapshot() or not ix.index.is_current(fs, b"src/parser.py"):
                await anyio.sleep(0.05)
        r = await c.call_tool("grep", args)
        assert {m["line"]: m.get("symbol") for m in r.structured_content["matches"]} == {
            11: "Parser.parse",
            15: "Inner.parse",
            19: "parse",
        }


def test_the_symbol_cache_is_bounded() -> None:
    """At most ``limit`` definitions are held (a file counts its definitions plus one); the
    least recently used files go first."""

    class Store:  # (what the cache reads of an index: its entries, replaced per commit)
        def __init__(self) -> None:
            self.entries: dict[bytes, Any] = {}

    class Entry:
        def __init__(self, fid: int) -> None:
            self.fid, self.key, self.pending = fid, (fid, fid, fid), False

    cache = SymbolCache(limit=10)
    store = Store()
    loads: list[bytes] = []

    def load(rel: bytes) -> list[Any]:
        loads.append(rel)
        return [object()] * 3  # weight 4

    for i in range(4):
        rel = f"f{i}".encode()
        store.entries[rel] = Entry(i + 1)
    for i in range(4):
        rel = f"f{i}".encode()
        cache.get(store, store.entries, rel, store.entries[rel], load)
    assert cache._held <= 10
    loads.clear()
    cache.get(store, store.entries, b"f3", store.entries[b"f3"], load)  # the newest: kept
    assert loads == []
    cache.get(store, store.entries, b"f0", store.entries[b"f0"], load)  # the oldest: gone
    assert loads == [b"f0"]
    # a new commit (new entries): nothing of the old one is served
    loads.clear()
    store.entries = dict(store.entries)
    cache.get(store, store.entries, b"f3", store.entries[b"f3"], load)
    assert loads == [b"f3"]
    # across indexes too: the index used last keeps its files, the other one gives way
    other = Store()
    other.entries = {b"g": Entry(9)}
    cache.get(other, other.entries, b"g", other.entries[b"g"], load)
    cache.get(store, store.entries, b"f3", store.entries[b"f3"], load)  # (a hit: used now)
    loads.clear()
    cache.get(store, store.entries, b"f4", Entry(5), load)  # (over the cap: someone goes)
    cache.get(store, store.entries, b"f3", store.entries[b"f3"], load)
    cache.get(other, other.entries, b"g", other.entries[b"g"], load)
    assert loads == [b"f4", b"g"], loads  # (f3 stayed; the other index's file went)


async def test_the_answer_is_rendered_off_the_event_loop(make_server, tmp_path: Path) -> None:
    """A tool's text answer and its structured content are made in the call's worker thread,
    with its work: a page of 1,000 matches is milliseconds of rendering and dumping that
    otherwise held the event loop (every other session waited)."""
    import threading

    from rootgrep.models import GrepResult
    from rootgrep.tools.searching import GREP

    root = tree(tmp_path)
    server = make_server([root])
    loop_thread = threading.current_thread()
    seen: list[tuple[str, threading.Thread]] = []
    answer = GREP.answer
    dump = GrepResult.model_dump

    def rendering(r: Any, out: Any) -> str:
        seen.append(("answer", threading.current_thread()))
        return answer(r, out)

    def dumping(self: Any, *a: Any, **kw: Any) -> Any:
        seen.append(("dump", threading.current_thread()))
        return dump(self, *a, **kw)

    object.__setattr__(GREP, "answer", rendering)
    GrepResult.model_dump = dumping  # type: ignore[method-assign]
    try:
        async with connect(server, "legacy") as c:
            r = await c.call_tool("grep", {"pattern": "return"})
            assert not r.is_error and "return" in text(r), text(r)
    finally:
        object.__setattr__(GREP, "answer", answer)
        GrepResult.model_dump = dump  # type: ignore[method-assign]
    assert [k for k, _ in seen] == ["answer", "dump"]
    assert all(t is not loop_thread for _, t in seen), seen


def test_the_server_freezes_what_survives_a_full_collection(tmp_path: Path) -> None:
    """``tune_gc`` (the long-running server's collector): after a full collection its
    survivors are frozen (later collections do not walk them again), the youngest
    generation is collected less often, and a cycle that became garbage after it was frozen
    is still collected within ``FULL_GC_THAWED_EVERY`` full collections. Run in a child
    interpreter (the test process keeps its own collector as it is)."""
    import subprocess
    import sys

    code = """
import gc, weakref
from rootgrep.server import FULL_GC_THAWED_EVERY, GC_YOUNG_THRESHOLD, tune_gc
tune_gc()
tune_gc()  # (once only)
assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD
assert len(gc.callbacks) == 1
class Node: pass
a = Node(); a.self = a
gone = weakref.ref(a)
gc.collect()
assert gc.get_freeze_count() > 0
del a  # a cycle, frozen while alive, garbage now
for _ in range(FULL_GC_THAWED_EVERY + 1):
    gc.collect()
    if gone() is None:
        break
assert gone() is None, "a frozen cycle was never collected"
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


async def test_a_call_checks_all_its_nested_roots_on_one_roots_thread(
    make_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-call check that client roots nested in an operator root are still inside it
    (``sessions.check_inside``) runs as one work item on one roots thread, however many
    roots the call has (it started one thread and one wake per root, one after another on
    the session's one-thread share: 13× the call's cost with 64 nested roots); a root moved
    out since it was accepted is still left out, the others still answered."""
    import threading

    from mcp_helpers import RootsStub, uri

    from rootgrep import sessions

    op = tmp_path / "op"
    for i in range(12):
        (op / f"p{i:02}").mkdir(parents=True)
        (op / f"p{i:02}" / "f.txt").write_text(f"needle {i}\n")
    (tmp_path / "away").mkdir()
    server = make_server([op], roots_ttl=3600.0)  # (no refresh re-pins the roots meanwhile)
    stub = RootsStub([uri(op / f"p{i:02}") for i in range(12)])
    started: list[str] = []
    thread = threading.Thread

    class Counting(thread):  # type: ignore[misc,valid-type]
        def start(self) -> None:
            started.append(self.name)
            super().start()

    async with connect(server, "legacy", stub) as c:
        first = await c.call_tool("grep", {"pattern": "needle"})  # (the roots pinned)
        assert not first.is_error and len(first.structured_content["matches"]) == 12
        monkeypatch.setattr(sessions.threading, "Thread", Counting)
        for _ in range(3):
            r = await c.call_tool("grep", {"pattern": "needle"})
            assert not r.is_error and len(r.structured_content["matches"]) == 12, text(r)
        assert started.count("rootgrep-pin") == 3, started
        (op / "p03").rename(tmp_path / "away" / "p03")  # (moved out of the operator root)
        r = await c.call_tool("grep", {"pattern": "needle"})
        assert not r.is_error, text(r)
        paths = {m["root"]["name"] for m in r.structured_content["matches"]}
        assert len(paths) == 11 and "p03" not in paths, paths
