"""The cache dir and the audit log inside a served root (the default cache with a root of
$HOME): hidden from every tool, never a way to write outside the roots (items 5 and 16).
Real MCP clients, two sessions on one server, in both protocol eras."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp_helpers import MODES, RootsStub, code, connect, everything, uri

from rootgrep.audit import Audit
from rootgrep.index.cache import folder_name
from rootgrep.index.manager import IndexManager
from rootgrep.server import RootgrepServer, build_server
from rootgrep.service import Service, Settings
from support import MARKER, assert_no_marker, checksum

pytestmark = pytest.mark.anyio

B_ROOT = "projb-unique-7c1e"
B_FILE = "bfile-unique-91d2.txt"


@pytest.fixture(params=[".cache/rootgrep", "cache-here/rootgrep"])
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[dict[str, Path]]:
    """A HOME served to session A that holds the cache and the audit log (in a hidden
    directory, as by default, or in a plain one), another session's root B elsewhere, and
    a directory outside every root."""
    home = tmp_path / "home"
    (home / "proj").mkdir(parents=True)
    (home / "proj" / "code.py").write_text("def main():\n    return 'home code'\n")
    (home / "notes.txt").write_text("plain notes\n")
    b = tmp_path / B_ROOT
    b.mkdir()
    (b / B_FILE).write_text("content of session b\n")
    outside = tmp_path / "outside"
    (outside / "tantivy").mkdir(parents=True)
    (outside / "secret.txt").write_text(MARKER + "\n")
    (outside / "manifest.json").write_text('{"precious": true}')
    (home / "evil").symlink_to(outside)  # a link inside the root (as a checked-out repo has)
    cache = home / request.param
    (home / "cachelink").symlink_to(cache)  # links inside the root to the hidden ones
    (home / "auditlink").symlink_to("audit.log")
    yield {"home": home, "b": b, "outside": outside, "cache": cache,
           "audit": home / "audit.log"}  # fmt: skip


def make(world: dict[str, Path]) -> tuple[RootgrepServer, Service]:
    indexes = IndexManager(str(world["cache"]))
    service = Service([], Settings(allow_write=True), Audit(str(world["audit"])), indexes)
    return build_server(service), service


def close(service: Service) -> None:
    assert service.indexes is not None
    service.indexes.close()
    service.audit.close()


def real(p: Path) -> bytes:
    return os.fsencode(os.path.realpath(p))


async def built(service: Service, root: Path) -> bool:
    """Wait (off the event loop: the build reports progress through it) for an index."""
    assert service.indexes is not None
    return await anyio.to_thread.run_sync(service.indexes.wait_built, real(root), 60)


@pytest.mark.parametrize("mode", MODES)
async def test_one_session_never_sees_another_through_the_cache_or_the_audit_log(
    world: dict[str, Path], mode: str
) -> None:
    """Item 16: session B's root path (in its index manifest) and file names (in the audit
    log) never reach session A, whose root holds both, through any tool."""
    server, service = make(world)
    cache, home = world["cache"], world["home"]
    rel_cache = str(cache.relative_to(home))
    try:
        async with connect(server, mode, RootsStub([uri(world["b"])])) as b:
            r = await b.call_tool("search", {"query": "content"})
            assert await built(service, world["b"])
            r = await b.call_tool("read_file", {"path": B_FILE})
            assert not r.is_error, everything(r)
            b_folder = cache / folder_name(real(world["b"]))
            # the secrets really are there, on disk, inside A's root
            assert B_ROOT in (b_folder / "manifest.json").read_text()
            assert B_FILE in world["audit"].read_text()
            stub = RootsStub([uri(home), uri(cache), uri(b_folder)])  # (the last two: refused)
            async with connect(server, mode, stub) as a:
                outs: list[str] = []

                async def call(tool: str, args: dict[str, object]) -> object:
                    res = await a.call_tool(tool, args)
                    outs.append(everything(res))
                    return res

                roots = await call("list_roots", {})
                assert [x["uri"] for x in roots.structured_content["roots"]] == [uri(home)]
                for pattern in (B_ROOT, B_FILE, "root_display", "schema_version", "decision"):
                    res = await call("grep", {"pattern": pattern, "hidden": True,
                                              "no_ignore": True})  # fmt: skip
                    assert not res.is_error and res.structured_content["matches"] == [], pattern
                res = await call("find_files", {"pattern": "*", "hidden": True, "no_ignore": True,
                                                "max_results": 1000})  # fmt: skip
                paths = {f["path"] for f in res.structured_content["files"]}
                assert paths == {"proj/code.py", "notes.txt"}, paths
                for pattern in ("manifest", "audit", "state.bin", "*.json", "**/meta.json"):
                    res = await call("find_files", {"pattern": pattern, "hidden": True})
                    assert res.structured_content["files"] == [], pattern
                res = await call("directory_tree", {"max_depth": 8})
                assert "rootgrep" not in json.dumps(res.structured_content)
                assert "audit.log" not in json.dumps(res.structured_content)
                res = await call("list_directory", {})
                names = {e["name"] for e in res.structured_content["entries"]}
                assert "audit.log" not in names
                res = await call("list_directory", {"path": str(cache.parent.relative_to(home))})
                assert res.structured_content["entries"] == []
                hidden_paths = [rel_cache, f"{rel_cache}/", f"{rel_cache}/{b_folder.name}",
                                f"{rel_cache}/{b_folder.name}/manifest.json", "audit.log",
                                f"proj/../{rel_cache}/{b_folder.name}/manifest.json",
                                str(b_folder / "manifest.json"), uri(world["audit"]),
                                f"cachelink/{b_folder.name}/manifest.json", "auditlink",
                                "cachelink/"]  # fmt: skip
                for p in hidden_paths:
                    for tool, args in (("read_file", {"path": p}), ("file_info", {"path": p}),
                                       ("list_directory", {"path": p}),
                                       ("directory_tree", {"path": p}),
                                       ("grep", {"pattern": "e", "path": p, "hidden": True}),
                                       ("find_files", {"pattern": "*", "path": p})):  # fmt: skip
                        if tool == "read_file" and p.endswith("/"):
                            continue
                        if tool == "file_info" and p == "auditlink":
                            continue  # (describes the link itself, as for any link)
                        res = await call(tool, args)
                        assert code(res) == "not_found", (tool, p, everything(res))
                await call("search", {"query": "content session"})
                assert await built(service, home)
                res = await call("search", {"query": "content session"})
                assert res.structured_content["results"] == []
            # B still works: its index and the audit log are untouched
            r = await b.call_tool("search", {"query": "content"})
            assert [h["path"] for h in r.structured_content["results"]] == [B_FILE]
        for out in outs:
            assert B_ROOT not in out and B_FILE not in out, out
            assert_no_marker(out)
    finally:
        await anyio.to_thread.run_sync(close, service)  # (joins builds that report to the loop)


@pytest.mark.parametrize("mode", MODES)
async def test_writes_never_reach_into_through_or_over_the_cache_and_the_audit_log(
    world: dict[str, Path], mode: str
) -> None:
    """Item 5 with --allow-write: a client moves a symlink to the outside into the cache
    location of a root, then announces that root; and every other write into, of or over
    the cache and the audit log. Nothing outside the roots changes, nothing inside the
    cache either, and the outside marker never comes back."""
    server, service = make(world)
    cache, home, outside = world["cache"], world["home"], world["outside"]
    rel_cache = str(cache.relative_to(home))
    proj_folder = f"{rel_cache}/{folder_name(real(home / 'proj'))}"
    outside_before = checksum(outside)
    outs: list[str] = []
    try:
        stub = RootsStub([uri(home)])
        async with connect(server, mode, stub) as a:

            async def call(tool: str, args: dict[str, object]) -> object:
                res = await a.call_tool(tool, args)
                outs.append(everything(res))
                return res

            await call("search", {"query": "main"})  # home's own index, in the cache
            assert await built(service, home)
            cache_before = checksum(cache)
            audit_size = world["audit"].stat().st_size
            # the attack: the link moved to where proj's index folder will be made
            res = await call("move_path", {"source": "evil", "destination": proj_folder})
            assert code(res) == "not_found", everything(res)
            res = await call("move_path", {"source": "evil", "destination": f"{rel_cache}/x"})
            assert code(res) == "not_found"
            refused = {
                "write_file": [{"path": f"{rel_cache}/new.txt", "content": "x"},
                               {"path": f"{proj_folder}/manifest.json", "content": "{}"},
                               {"path": "audit.log", "content": "forged"}],
                "edit_file": [{"path": "audit.log",
                               "edits": [{"old_text": "allow", "new_text": "deny"}]}],
                "create_directory": [{"path": f"{proj_folder}/tantivy"},
                                     {"path": f"{rel_cache}/a/b"}],
                "move_path": [{"source": rel_cache, "destination": "stolen"},
                              {"source": "audit.log", "destination": "stolen.log"},
                              {"source": "notes.txt", "destination": "audit.log",
                               "overwrite": True},
                              {"source": "notes.txt", "destination": rel_cache,
                               "overwrite": True}],
                "copy_path": [{"source": "proj", "destination": proj_folder, "overwrite": True},
                              {"source": "notes.txt", "destination": "audit.log",
                               "overwrite": True},
                              {"source": rel_cache, "destination": "copied"}],
                "delete_path": [{"path": rel_cache, "recursive": True},
                                {"path": "audit.log"}],
            }  # fmt: skip
            for tool, calls in refused.items():
                for args in calls:
                    res = await call(tool, args)
                    assert code(res) == "not_found", (tool, args, everything(res))
            # a directory holding the cache cannot move (the index is written by path)
            top = rel_cache.split("/")[0]
            res = await call("move_path", {"source": top, "destination": "elsewhere"})
            assert code(res) == "invalid_path", everything(res)
            # copying or deleting an ancestor skips the cache and says so
            res = await call("copy_path", {"source": top, "destination": "copy-of-top"})
            assert not res.is_error, everything(res)
            assert res.structured_content["skipped"], everything(res)
            assert not (home / "copy-of-top" / "rootgrep").exists()
            res = await call("delete_path", {"path": top, "recursive": True})
            assert not res.is_error, everything(res)
            assert res.structured_content["skipped"], everything(res)
            res = await call("delete_path", {"path": ".", "recursive": True})
            assert code(res) == "invalid_path"  # (never the root itself)
            res = await call("delete_path", {"path": "copy-of-top", "recursive": True})
            assert not res.is_error
            # then the root whose folder was aimed at is announced, indexed and searched
            # (an ignore file in home: inside the home root, proj would otherwise share that
            # root's index and never have a folder of its own to attack)
            (home / ".ignore").write_text("*.tmp\n")
            stub.uris.append(uri(home / "proj"))
            if mode == "legacy":
                await a.send_roots_list_changed()
            await call("list_roots", {})
            res = await call("search", {"query": "main", "root": uri(home / "proj")})
            assert await built(service, home / "proj")
            res = await call("search", {"query": "main", "root": uri(home / "proj")})
            assert [h["path"] for h in res.structured_content["results"]] == ["code.py"]
            res = await call("grep", {"pattern": "home code", "root": uri(home / "proj")})
            assert res.structured_content["index_used"] is True
        assert (cache / folder_name(real(home / "proj"))).is_dir()
        assert not (cache / folder_name(real(home / "proj"))).is_symlink()
        assert checksum(outside) == outside_before
        assert (home / "evil").is_symlink()  # (never moved)
        log = world["audit"].read_text()
        assert world["audit"].stat().st_size > audit_size and "forged" not in log
        assert (cache / folder_name(real(home)) / "manifest.json").is_file()
        assert cache_before  # (the cache itself changed only by rootgrep's own writes)
        for out in outs:
            assert_no_marker(out)
    finally:
        await anyio.to_thread.run_sync(close, service)  # (joins builds that report to the loop)
    assert checksum(outside) == outside_before
