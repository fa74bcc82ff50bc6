"""The one SHA-256 helper (review leftover 3): ``roots`` and ``index.names`` (the cache's folder names) both use
``rootgrep.digest.sha256``, the lean C module of the running Python (``_sha2`` from 3.12 on,
``_sha256`` on 3.11), never OpenSSL's ``hashlib`` (which costs the CLI's start-up), and it
gives hashlib's digest. Checked in this interpreter and, when installed, in real 3.12+ ones
(where the module is ``_sha2``: a helper that knew only ``_sha256`` fell back to hashlib),
and in this one with the other name of the module simulated (the old one hidden)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rootgrep import digest, roots
from rootgrep.index import names

SRC = Path(__file__).resolve().parent.parent / "src"
SAMPLES = [b"", b"/a", b"/srv/project", bytes(range(256)) * 5]

# imports only the two users (their own imports are stdlib), from the source tree
PROBE = """
import hashlib as _h, json, sys
if len(sys.argv) > 2:  # the other layout, simulated: only the other name of the C module
    import importlib
    have, other = ("_sha2", "_sha256") if sys.version_info >= (3, 12) else ("_sha256", "_sha2")
    sys.modules[other] = importlib.import_module(have)
    sys.modules[have] = None  # (an import of it fails)
sys.modules.pop("hashlib", None)
sys.path.insert(0, sys.argv[1])
from rootgrep import digest, roots
from rootgrep.index import names
loaded = "hashlib" in sys.modules
samples = [b"", b"/a", b"/srv/project", bytes(range(256)) * 5]
print(json.dumps({
    "hashlib_loaded": loaded,
    "one_helper": roots.sha256 is digest.sha256 is names.sha256,
    "module": getattr(digest.sha256, "__module__", None),
    "same_digest": all(digest.sha256(s).hexdigest() == _h.sha256(s).hexdigest() for s in samples),
}))
"""


def test_the_chosen_sha256_gives_hashlibs_digest() -> None:
    for s in SAMPLES:
        assert digest.sha256(s).hexdigest() == hashlib.sha256(s).hexdigest()
    assert roots.sha256 is digest.sha256 and names.sha256 is digest.sha256
    assert roots.root_id(b"/a") == hashlib.sha256(b"/a").hexdigest()[:12]
    assert names.folder_name(b"/a", 10) == hashlib.sha256(b"/a").hexdigest()[:20] + "-v10"


def _interpreters() -> list[str]:
    """This Python, and the installed 3.12+ ones (on PATH, or beside this one, as pyenv
    keeps them)."""
    found = [sys.executable]
    for minor in range(12, 16):
        beside = sorted(Path(sys.base_prefix).parent.glob(f"3.{minor}*/bin/python3.{minor}"))
        for exe in [shutil.which(f"python3.{minor}"), *map(str, beside[-1:])]:
            if exe is None:
                continue
            ok = subprocess.run([exe, "-c", "import sys"], capture_output=True, timeout=60)
            if ok.returncode == 0:  # (a pyenv shim of a version not selected fails)
                found.append(exe)
                break
    return found


@pytest.mark.parametrize("layout", ["real", "other_name"])
@pytest.mark.parametrize("exe", _interpreters())
def test_no_hashlib_on_any_python(exe: str, layout: str) -> None:
    args = [exe, "-c", PROBE, str(SRC), *(["simulate"] if layout == "other_name" else [])]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True)
    got = json.loads(out.stdout)
    assert got == {
        "hashlib_loaded": False,
        "one_helper": True,
        "module": got["module"],
        "same_digest": True,
    }, got
    assert got["module"] in ("_sha2", "_sha256"), got
