"""A served tree runs no code: a repository that plants ``rootgrep/``, ``tree_sitter*/``,
``re2.py``, ``tantivy.py``, ``sitecustomize.py`` or ``usercustomize.py`` at its top, served
from inside it each way a user or a client starts rootgrep (``index .``, ``daemon .``,
``serve --root .`` over stdio and HTTP), never gets any of them imported: by the command,
by its parse helper (started once a build has 8 MiB of text to parse), or by a lazy import
of a grammar. Each planted module writes a marker file outside the tree; none may appear."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_helpers import text

from rootgrep.index import parse as parse_mod
from support import ROOTGREP, listening_port, start_daemon, stop

PLANTED = ["rootgrep", "tree_sitter", "tree_sitter_python", "tree_sitter_c", "re2", "tantivy",
           "sitecustomize", "usercustomize", "watchfiles", "pathspec"]  # fmt: skip
SITE_HOOKS = {"sitecustomize", "usercustomize"}  # (imported by ``site`` itself: see below)


def hostile_tree(top: Path, markers: Path, planted: list[str] = PLANTED) -> Path:
    """A repository with each of ``planted`` at its top (a package or a module) whose import
    writes ``markers/<name>``, and about 8.6 MiB of Python so a build starts its helper."""
    top.mkdir(parents=True)
    markers.mkdir(exist_ok=True)
    for name in planted:
        body = (f"open({str(markers / name)!r}, 'w').write('ran')\n"
                f"raise SystemExit('hostile {name} ran')\n")  # fmt: skip
        if name in {"rootgrep", "tree_sitter", "tree_sitter_python", "tree_sitter_c"}:
            (top / name).mkdir()
            (top / name / "__init__.py").write_text(body)
        else:
            (top / f"{name}.py").write_text(body)
    (top / "src").mkdir()
    # (300 definitions, then a list of strings: bytes to parse, few symbols to build; not
    # comment lines, on which the grammar is quadratic)
    block = "".join(f"def handler_{i}(x):\n    return x + {i}\n\n" for i in range(300))
    block += "DATA = [\n" + f"    '{'text ' * 14}',\n" * 2_600 + "]\n"
    for i in range(40):  # (40 x 215 KiB: past HELPER_MIN_BYTES, 8 MiB)
        (top / "src" / f"mod{i}.py").write_text(block)
    (top / "src" / "needle.c").write_text("int needle_fn(void) { return 1; }\n")
    assert sum(f.stat().st_size for f in (top / "src").iterdir()) > parse_mod.HELPER_MIN_BYTES
    return top


def ran(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir())


def env_for(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.pop("ROOTGREP_PARSE_HELPER", None)
    return {**env, "ROOTGREP_CACHE_DIR": str(cache), **extra}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return hostile_tree(tmp_path / "repo", tmp_path / "markers")


def test_the_parse_helper_started_inside_a_hostile_tree_imports_nothing_of_it(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helper was ``python -m rootgrep.index.parse`` with the working directory first on
    its path: the tree's ``rootgrep/__init__.py`` ran as the user."""
    monkeypatch.chdir(tree)
    monkeypatch.delenv("ROOTGREP_PARSE_HELPER", raising=False)
    helper = parse_mod.ParseHelper.start()
    assert helper is not None
    try:
        helper.send([(b"a.py", b"def f():\n    pass\n")])
        assert helper.receive()[0][0] == ["f"]  # (it started and parsed)
    finally:
        helper.close()
    assert ran(tmp_path / "markers") == []


@pytest.mark.parametrize("verb", ["index", "daemon"])
def test_index_and_daemon_run_from_inside_a_hostile_tree_run_none_of_it(
    tree: Path, tmp_path: Path, verb: str
) -> None:
    cache = tmp_path / "cache"
    if verb == "index":
        out = subprocess.run([ROOTGREP, "index", "."], cwd=tree, env=env_for(cache),
                             capture_output=True, text=True, timeout=240)  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
    else:
        daemon = start_daemon_in(tree, cache)
        try:
            got = subprocess.run([ROOTGREP, "grep", "needle_fn", "."], cwd=tree,
                                 env=env_for(cache), capture_output=True, text=True, timeout=60)  # fmt: skip
            assert got.stdout == "./src/needle.c:1:int needle_fn(void) { return 1; }\n", got
        finally:
            assert stop(daemon) in (0, -15, 130)
    assert ran(tmp_path / "markers") == []
    got = subprocess.run([ROOTGREP, "symbols", "needle_fn", "."], cwd=tree, env=env_for(cache),
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert got.returncode == 0 and "src/needle.c:1:" in got.stdout, got
    assert ran(tmp_path / "markers") == []


def start_daemon_in(tree: Path, cache: Path) -> subprocess.Popen[str]:
    """``rootgrep daemon .`` run from inside ``tree``, once it is watching (its build, with
    its helper, done)."""
    old = os.getcwd()
    os.chdir(tree)
    try:
        return start_daemon(Path("."), cache)
    finally:
        os.chdir(old)


@pytest.mark.anyio
async def test_a_stdio_server_started_inside_a_hostile_tree_runs_none_of_it(
    tree: Path, tmp_path: Path
) -> None:
    """What an MCP client does: ``rootgrep serve --root .`` with the repository as its
    working directory; a build (with its helper), a grep (RE2), find_symbol and outline
    (grammars, imported lazily)."""
    params = StdioServerParameters(command=ROOTGREP, args=["serve", "--root", "."],
                                   env=env_for(tmp_path / "cache"), cwd=str(tree))  # fmt: skip
    with open(tmp_path / "stdio.err", "w") as err:
        with anyio.fail_after(180):
            async with Client(stdio_client(params, errlog=err), mode="legacy") as c:
                await wait_ready(c)
                r = await c.call_tool("grep", {"pattern": "needle_fn"})
                assert not r.is_error and "src/needle.c" in text(r), text(r)
                r = await c.call_tool("find_symbol", {"name": "needle_fn"})
                assert not r.is_error and "src/needle.c" in text(r), text(r)
                r = await c.call_tool("outline", {"path": "src/mod3.py"})
                assert not r.is_error and "handler_1" in text(r), text(r)
    assert ran(tmp_path / "markers") == []


async def wait_ready(c: Client) -> None:
    while True:
        r = await c.call_tool("list_roots", {})
        if r.structured_content["roots"][0]["index"]["state"] == "ready":
            return
        await anyio.sleep(0.2)


def test_an_http_server_started_inside_a_hostile_tree_runs_none_of_it(
    tree: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    proc = subprocess.Popen([ROOTGREP, "serve", "--transport", "http", "--port", "0",
                             "--root", "."], cwd=tree, env=env_for(cache),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        listening_port(proc.pid)  # (serving: its build, with its helper, has started)
        # (served once it has built: ``index`` then asks its cache, from the same folder)
        out = subprocess.run([ROOTGREP, "index", "."], cwd=tree, env=env_for(cache),
                             capture_output=True, text=True, timeout=240)  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
    finally:
        stop(proc)
    assert ran(tmp_path / "markers") == []


@pytest.mark.parametrize("how", ["python -m", "PYTHONPATH=:"])
def test_the_working_directory_put_on_the_path_loads_nothing_of_the_tree(
    tmp_path: Path, how: str
) -> None:
    """``python -m rootgrep`` puts the working directory first on the path, and so does an
    empty or relative ``PYTHONPATH`` entry (``PYTHONPATH=:$X``): modules imported after
    rootgrep starts (RE2, tantivy, the grammars, watchfiles) never come from there. (A
    ``rootgrep/`` there is what ``python -m rootgrep`` runs, and a ``sitecustomize.py`` on
    the path runs before any program does: the README says to use the ``rootgrep`` command,
    and never to leave a relative entry in ``PYTHONPATH``.)"""
    planted = [n for n in PLANTED if n not in SITE_HOOKS | ({"rootgrep"} if how == "python -m" else set())]  # fmt: skip
    tree = hostile_tree(tmp_path / "repo", tmp_path / "markers", planted)
    cache = tmp_path / "cache"
    if how == "python -m":
        cmd, env = [sys.executable, "-m", "rootgrep"], env_for(cache)
        env["PYTHONPATH"] = str(Path(parse_mod.__file__).parents[2])  # (where rootgrep is)
    else:
        cmd, env = [ROOTGREP], env_for(cache, PYTHONPATH=":rel")
    out = subprocess.run([*cmd, "index", "."], cwd=tree, env=env, capture_output=True,
                         text=True, timeout=240)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    got = subprocess.run([*cmd, "symbols", "needle_fn", "."], cwd=tree, env=env,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert got.returncode == 0 and "src/needle.c:1:" in got.stdout, got
    got = subprocess.run([*cmd, "grep", "-c", "handler_1\\b", "src/mod1.py"], cwd=tree, env=env,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert got.stdout == "1\n", got
    assert ran(tmp_path / "markers") == []
