"""How long a stopped index takes to answer again (issue 24, item 8): on F, the interpreter's
library folder, an index is built once in a temporary cache; then, in fresh processes, a new
server-side ``IndexManager`` opens it and the first ``find_symbol`` is asked (through the
service, as a tool call makes it), timed from the root's activation to the answer, and the
time until the re-sync has made it ready. Beside it, the peer: ``csearch`` (Debian's
``codesearch``) opening its own index of F for a lookup, as a whole process, when installed.

Usage: ``python benchmarks/reopen.py`` (``make bench`` runs it). Target: <= 200 ms.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

F = sysconfig.get_paths()["stdlib"]
RUNS = int(os.environ.get("REOPEN_RUNS", "5"))

# one process's reopen: activation to the first find_symbol answer, and to ready
_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from rootgrep.index.manager import IndexManager
from rootgrep.roots import pin_root
from rootgrep.service import Service, Settings, Token
cache, top = sys.argv[1], sys.argv[2]
manager = IndexManager(cache)
root = pin_root(top)
service = Service([root], Settings(), indexes=manager)
imported = time.perf_counter()
ix = manager.activate(root, 0)
while ix.index is None and ix.state != "off":
    time.sleep(0.002)
r = service.find_symbol([root], Token(), name="getrecursionlimit")
answered = time.perf_counter()
assert r.symbols, "no definition found"
while ix.state != "ready":
    time.sleep(0.005)
ready = time.perf_counter()
print(json.dumps({"answer_ms": (answered - imported) * 1000, "ready_ms": (ready - imported) * 1000,
                  "resyncing": bool(r.resyncing)}))
manager.close()
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        from rootgrep.index.manager import IndexManager
        from rootgrep.roots import pin_root

        manager = IndexManager(cache)
        root = pin_root(F)
        started = time.perf_counter()
        ix = manager.activate(root, 0)
        while ix.state != "ready":
            time.sleep(0.05)
        built = time.perf_counter() - started
        manager.close()
        root.close()
        rows = []
        for _ in range(RUNS):
            out = subprocess.run(
                [sys.executable, "-c", _CHILD, cache, F], capture_output=True, text=True
            )
            if out.returncode:
                raise SystemExit(out.stderr)
            rows.append(json.loads(out.stdout))
        answer = statistics.median(r["answer_ms"] for r in rows)
        ready = statistics.median(r["ready_ms"] for r in rows)
        peer = _csearch(tmp)
    print(f"\nF's index built in {built:.1f} s; reopened {RUNS} times in fresh processes:\n")
    print("| what | median |\n|---|---|")
    print(f"| first find_symbol answer after reopening (target <= 200 ms) | {answer:.0f} ms |")
    print(f"| ready (re-synced) after reopening | {ready:.0f} ms |")
    if peer is not None:
        print(f"| peer: `csearch getrecursionlimit` (whole process, its index) | {peer:.0f} ms |")
        print(f"\nratio, first answer / csearch: {answer / peer:.2f}x")
    else:
        print("\n(csearch not installed: `apt-get install codesearch` for the peer's figure)")
    print(f"answered from the last build while re-syncing: {all(r['resyncing'] for r in rows)}")


def _csearch(tmp: str) -> float | None:
    cindex, csearch = shutil.which("cindex"), shutil.which("csearch")
    if cindex is None or csearch is None:
        return None
    env = {**os.environ, "CSEARCHINDEX": os.path.join(tmp, "csearchindex")}
    subprocess.run([cindex, F], env=env, capture_output=True, check=True)
    times = []
    for _ in range(RUNS):
        t = time.perf_counter()
        subprocess.run([csearch, "getrecursionlimit"], env=env, capture_output=True)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


if __name__ == "__main__":
    main()
