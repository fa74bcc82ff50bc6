"""Installed without the checkout: the wheel ``make dist`` builds (the same command, offline:
no build isolation), installed into a fresh venv by that venv's own installer, gives a
``rootgrep`` command whose first line names that venv's interpreter, that prints its version,
loads rootgrep from the venv (bytecode compiled at install, none written at run time), greps
from a folder outside the checkout and serves a real MCP client over stdio.

The fresh venv gets the wheel alone (``--no-deps --no-index``: nothing downloaded); its
dependencies come from this test's own venv through a ``.pth`` file naming that venv's
site-packages. The editable install of rootgrep there is a ``.pth`` file of its own (naming
the checkout's ``src``), and ``site`` processes ``.pth`` files only in a site directory, not
in a folder another ``.pth`` file adds: the checkout stays off the path, which the imports
seen below check (and the venv's own site-packages comes first on the path in any case)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult

import rootgrep

CHECKOUT = Path(__file__).resolve().parents[1]
MARKER = "DIST-MARKER-5e1b7c"


def clean_env(cache: Path, **extra: str) -> dict[str, str]:
    """The environment a user's shell or MCP client gives: none of this run's ``PYTHON*``
    settings or its venv, the project venv's ``bin`` off ``PATH``."""
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTHON") and k not in ("VIRTUAL_ENV", "ROOTGREP_PARSE_HELPER")}  # fmt: skip
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != bin_dir)
    return {**env, "ROOTGREP_CACHE_DIR": str(cache), **extra}


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make dist``'s command: the sdist, then the wheel built from it, with this venv's
    setuptools (nothing downloaded). Built from a copy of the checkout: the sdist step writes
    ``src/rootgrep.egg-info`` beside the package, which tests serving the checkout would see."""
    out = tmp_path_factory.mktemp("dist")
    source = out / "source"
    litter = shutil.ignore_patterns(".*", "dist", "build", "*.egg-info", "__pycache__")
    shutil.copytree(CHECKOUT, source, ignore=litter)
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True, text=True, timeout=180, env=clean_env(out / "cache"),
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheels = list(out.glob("rootgrep-*.whl"))
    assert [w.name for w in wheels] == [f"rootgrep-{rootgrep.__version__}-py3-none-any.whl"]
    assert (out / f"rootgrep-{rootgrep.__version__}.tar.gz").is_file()
    return wheels[0]


@pytest.fixture(scope="session")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel, installed by pip run with the venv's own interpreter
    (``pip --python``: as ``pipx`` does, the venv's python runs the install)."""
    v = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True, timeout=60)
    python = v / "bin" / "python"
    got = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--disable-pip-version-check", str(wheel)],
        capture_output=True, text=True, timeout=120, env=clean_env(v / "cache"),
    )  # fmt: skip
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (Path(site) / "_rootgrep_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return v


def test_the_command_names_the_venvs_interpreter_and_loads_rootgrep_from_it(
    venv: Path, wheel: Path, tmp_path: Path
) -> None:
    with zipfile.ZipFile(wheel) as z:  # (the wheel's placeholder, for the installer to fill)
        script = z.read(f"rootgrep-{rootgrep.__version__}.data/scripts/rootgrep")
    assert script.startswith(b"#!python\n")
    command = venv / "bin" / "rootgrep"
    assert command.read_bytes().split(b"\n", 1)[0] == b"#!" + str(venv / "bin" / "python").encode()
    # (no bytecode may be written: what it loads was compiled at install)
    got = subprocess.run(
        [str(command), "--version"], capture_output=True, text=True, timeout=30, cwd=tmp_path,
        env=clean_env(tmp_path / "cache", PYTHONVERBOSE="1", PYTHONDONTWRITEBYTECODE="1"),
    )  # fmt: skip
    assert got.returncode == 0, got.stderr[-3000:]
    assert got.stdout == f"rootgrep {rootgrep.__version__}\n"
    site = next((venv / "lib").glob("python3*/site-packages"))
    loaded = re.findall(r"^# code object from '?(.*?/rootgrep/[^']*?)'?$", got.stderr, re.M)
    assert len(loaded) >= 3, got.stderr[-3000:]  # (rootgrep, __main__, cli at least)
    for path in loaded:
        assert path.startswith(str(site / "rootgrep")) and "/__pycache__/" in path, path
    assert str(CHECKOUT / "src") not in got.stderr
    path = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print(sys.path)"],
                          capture_output=True, text=True, check=True, env=clean_env(tmp_path)).stdout  # fmt: skip
    assert repr(str(CHECKOUT / "src")) not in path  # (the editable install's .pth: unread)
    # every module of the package has its bytecode, as pip compiles at install
    package = site / "rootgrep"
    sources = sorted(package.rglob("*.py"))
    assert len(sources) > 20
    tag = sys.implementation.cache_tag
    missing = [
        p for p in sources if not (p.parent / "__pycache__" / f"{p.stem}.{tag}.pyc").exists()
    ]
    assert missing == []


def test_the_installed_grep_answers_from_outside_the_checkout(venv: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "found.txt").write_text(f"before\nthe {MARKER} line\n")
    (tree / "other.txt").write_text("nothing here\n")
    away = tmp_path / "away"
    away.mkdir()
    got = subprocess.run(
        [str(venv / "bin" / "rootgrep"), "grep", MARKER, str(tree)], capture_output=True,
        text=True, timeout=60, cwd=away, env=clean_env(tmp_path / "cache"),
    )  # fmt: skip
    assert (got.returncode, got.stdout, got.stderr) == (
        0, f"{tree}/sub/found.txt:2:the {MARKER} line\n", ""
    )  # fmt: skip


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.anyio
async def test_the_installed_server_answers_a_real_client_over_stdio(
    venv: Path, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "needle.py").write_text(f"def needle():\n    return '{MARKER}'\n")
    away = tmp_path / "away"
    away.mkdir()
    params = StdioServerParameters(
        command=str(venv / "bin" / "rootgrep"), args=["serve", "--root", str(tree)],
        env=clean_env(tmp_path / "cache"), cwd=str(away),
    )  # fmt: skip
    with open(tmp_path / "stdio.err", "w") as err:
        with anyio.fail_after(60):
            async with Client(stdio_client(params, errlog=err), mode="legacy") as c:
                r = await c.call_tool("list_roots", {})
                assert not r.is_error, text(r)
                roots = r.structured_content["roots"]
                assert [x["uri"] for x in roots] == [tree.as_uri()], roots
                r = await c.call_tool("grep", {"pattern": MARKER})
                assert not r.is_error, text(r)
                assert "src/needle.py" in text(r) and MARKER in text(r), text(r)
    assert "Traceback" not in (tmp_path / "stdio.err").read_text()
