"""The CLI's grep imports only what it needs: start-up is mostly imports (issue 11). Also its
other start-up costs: the garbage collections set off while modules load, and one write(2)
per printed line when Python's stdout is unbuffered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import ROOTGREP, stop

# the server's stack, the index's, the parsers', the progress bars', the -g globs' and the
# thread pool's: none is needed to grep a small tree live
NOT_NEEDED = (
    "mcp", "pydantic", "uvicorn", "starlette", "anyio", "tantivy", "tree_sitter", "rich",
    "pathspec", "concurrent.futures", "rootgrep.service", "rootgrep.server",
    # nor what a grep of a literal does not use: dataclasses (with inspect, ast, dis ...),
    # OpenSSL's hashlib (sha256 of a root's path), urllib.parse (a root's URI), base64 (the
    # daemon's protocol)
    "dataclasses", "inspect", "hashlib", "urllib", "ipaddress", "base64", "socket", "threading",
    # nor argparse (with gettext and locale) for the flags a grep is mostly given
    "argparse", "gettext", "locale",
    # nor ``re`` (with enum), nor ``typing``: a literal is found by bytes.find or RE2
    "re", "enum", "typing",
)  # fmt: skip
# a grep the daemon answers: nothing of the index itself (RE2 is loaded: its scan tests the
# index's candidates, most of which do not hold the literal, faster than bytes.find)
NOT_NEEDED_ASKING = (
    *NOT_NEEDED, "rootgrep.index.store", "rootgrep.index.manager",
    "rootgrep.index.state", "rootgrep.index.plan", "selectors",
    "json",  # (the daemon's wire is words, not JSON)
)  # fmt: skip


def imported_by(args: list[str], cwd: Path) -> tuple[int, bytes, set[str]]:
    code = (
        "import sys\nfrom rootgrep.cli import main\n"
        f"code = main({args!r})\nsys.stdout.flush()\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\nsys.exit(code)\n"
    )
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(cwd / "no-cache")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=cwd, env=env,
                         timeout=60, check=False)  # fmt: skip
    return out.returncode, out.stdout, set(out.stderr.decode().split())


# and where there is no index cache at all (a newcomer's first grep): none of the index, nor
# ctypes (openat2: a path of one name, or none, is resolved without it), nor contextlib
NOT_NEEDED_LIVE = (
    *NOT_NEEDED, "rootgrep.index.freshness", "rootgrep.index.cache", "ctypes", "contextlib",
)  # fmt: skip
# and a grep of one file (bytes.find, not RE2, whose wrapper loads them): nor collections and
# functools (namedtuple and lru_cache: 2.4 ms with keyword, operator and reprlib)
NOT_NEEDED_ONE_FILE = (*NOT_NEEDED_LIVE, "re2", "collections", "functools")


def test_a_live_grep_of_a_tiny_tree_imports_only_what_it_uses(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / ".gitignore").write_text("*.log\n")
    code, out, modules = imported_by(["grep", "hello"], tmp_path)
    assert code == 0 and out == b"a.txt:1:hello\n"
    assert not loaded(modules, NOT_NEEDED_LIVE)
    code, out, modules = imported_by(["grep", "hello", "a.txt"], tmp_path)
    assert code == 0 and out == b"1:hello\n"
    assert not loaded(modules, NOT_NEEDED_ONE_FILE)


def test_glob_rules_still_load_what_they_need(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / "b.py").write_text("hello\n")
    code, out, modules = imported_by(["grep", "-g", "*.py", "hello"], tmp_path)
    assert code == 0 and out == b"b.py:1:hello\n"
    assert "pathspec" in modules


def loaded(modules: set[str], names: tuple[str, ...]) -> set[str]:
    return {m for m in names if any(x == m or x.startswith(m + ".") for x in modules)}


def test_a_grep_a_daemon_answers_imports_none_of_the_index(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / ".ignore").write_text("*.log\n")
    (tree / "a.py").write_text("def frobnicate():\n    pass\n")
    (tree / "pkg" / "b.py").write_text("frobnicate()\n")
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(tmp_path / "cache")}
    daemon = subprocess.Popen([ROOTGREP, "daemon", str(tree)], env=env, text=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    assert daemon.stderr is not None
    try:
        while "watching" not in (line := daemon.stderr.readline()):
            assert line, "the daemon exited"
        code = (
            "import sys\nfrom rootgrep.cli import main\n"
            f"code = main(['grep', '--stats', 'frobnicate', {str(tree)!r}])\n"
            "sys.stdout.flush()\nprint(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
            "sys.exit(code)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env,
                             timeout=60, check=False)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert b"searched by index" in out.stdout  # (the daemon answered)
        assert out.stdout.startswith(f"{tree}/a.py:1:def frobnicate():\n".encode())
        assert not loaded(set(out.stderr.decode().split()), NOT_NEEDED_ASKING)
        # a grep the daemon runs whole: of the confinement only ``confine.sockets`` (no ctypes)
        whole = (
            "import sys\nsys.argv = ['rootgrep', 'grep', 'frobnicate']\n"
            "from rootgrep.__main__ import run\ncode = run()\nsys.stdout.flush()\n"
            "print(' '.join(sorted(sys.modules)), file=sys.stderr)\nsys.exit(code)\n"
        )
        out = subprocess.run([sys.executable, "-c", whole], capture_output=True, env=env,
                             cwd=tree, timeout=60, check=False)  # fmt: skip
        assert out.returncode == 0 and out.stdout.startswith(b"a.py:1:def frobnicate():\n")
        modules = set(out.stderr.decode().split())
        assert "rootgrep.confine.sockets" in modules  # (the daemon was found through it)
        assert not loaded(modules, (*NOT_NEEDED_ASKING, "ctypes", "rootgrep.confine.beneath"))
    finally:
        assert stop(daemon, 15) == 0


def test_no_garbage_is_collected_while_the_cli_loads(tmp_path: Path) -> None:
    """The entry point pauses the collector while the modules load (their objects live until
    exit, and every collection walked them again), then runs it as usual."""
    (tmp_path / "a.txt").write_text("hello\n")
    code = (
        "import gc, sys\n"
        "early = []\n"
        "def seen(phase, info):\n"
        "    cli = sys.modules.get('rootgrep.cli')\n"
        "    if phase == 'start' and not hasattr(cli, 'main'):\n"
        "        early.append(info['generation'])\n"
        "sys.argv = ['rootgrep', 'grep', 'hello']\n"
        "from rootgrep.__main__ import run\n"
        "gc.callbacks.append(seen)\n"  # (after: compiling the entry itself may collect)
        "code = run()\nsys.stdout.flush()\n"
        "print(len(early), gc.isenabled(), file=sys.stderr)\nsys.exit(code)\n"
    )
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(tmp_path / "no-cache")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=tmp_path,
                         env=env, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 0 and out.stdout == b"a.txt:1:hello\n", out.stderr
    assert out.stderr.split() == [b"0", b"True"]


def test_unbuffered_stdout_is_still_written_in_blocks(tmp_path: Path) -> None:
    """With ``python -u`` (or PYTHONUNBUFFERED) sys.stdout is raw; the grep's output still
    goes out in large writes, not one write(2) per line (counted by the kernel)."""
    (tmp_path / "a.txt").write_text("hello world\n" * 2000)
    code = (
        "import sys\nfrom rootgrep.cli import main\n"
        "def writes():\n"
        "    with open('/proc/self/io') as f:\n"
        "        return int(dict(l.split(': ') for l in f.read().splitlines())['syscw'])\n"
        "before = writes()\ncode = main(['grep', 'hello', 'a.txt'])\n"
        "print(writes() - before, file=sys.stderr)\nsys.exit(code)\n"
    )
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(tmp_path / "no-cache")}
    out = subprocess.run([sys.executable, "-u", "-c", code], capture_output=True,
                         cwd=tmp_path, env=env, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"".join(b"%d:hello world\n" % (i + 1) for i in range(2000))
    assert int(out.stderr) <= len(out.stdout) // (32 << 10) + 2  # (64 KiB blocks: 1 here)


def test_the_rootgrep_command_itself_imports_no_re(tmp_path: Path) -> None:
    """The installed command is a script file, not pip's entry-point wrapper (which imports
    ``re`` to tidy its argv[0] before rootgrep runs): its grep of a literal loads no ``re``,
    ``enum`` or ``typing`` from the first line on (``PYTHONPROFILEIMPORTTIME`` lists every
    import of the process on stderr)."""
    (tmp_path / "a.txt").write_text("hello\n")
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1", "ROOTGREP_CACHE_DIR": str(tmp_path / "c")}
    out = subprocess.run([ROOTGREP, "grep", "hello", str(tmp_path)], capture_output=True,
                         env=env, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 0 and out.stdout.endswith(b"a.txt:1:hello\n"), out
    names = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.decode().splitlines()
             if line.startswith("import time:")}  # fmt: skip
    assert "rootgrep.cli" in names  # (the listing is there)
    assert not names & {"re", "enum", "typing"}, sorted(names & {"re", "enum", "typing"})


def test_a_refused_serve_imports_no_mcp(tmp_path: Path) -> None:
    """``serve`` checks its flags, its roots and its cache directory before it imports the MCP
    SDK (about a second of CPU, mostly its pydantic types): a start it refuses says why at
    once (each used to cost that second, in a client's retry loop and in make test)."""
    (tmp_path / "root").mkdir()
    unsafe = tmp_path / "cache"
    unsafe.mkdir(mode=0o777)
    unsafe.chmod(0o777)  # (writable by all: refused)
    refused = [
        ["--transport", "http", "--host", "0.0.0.0"],  # (beyond loopback, with no token)
        ["--transport", "http", "--allowed-host", "bad host"],
        ["--auth-token-env", "ROOTGREP_TEST_NO_SUCH_VARIABLE"],
        ["--max-connections", "0"],
        ["--cache-dir", str(unsafe)],
    ]
    for flags in refused:
        code, out, modules = imported_by(["serve", "--root", str(tmp_path / "root"), *flags],
                                         tmp_path)  # fmt: skip
        assert code == 2 and out == b"", flags
        assert "rootgrep.cli" in modules  # (the listing is there)
        loaded = {m for m in ("mcp", "pydantic", "uvicorn", "starlette", "rootgrep.server")
                  if any(x == m or x.startswith(m + ".") for x in modules)}  # fmt: skip
        assert not loaded, (flags, loaded)
