"""Two versions' index builds side by side: ``rootgrep index`` of one folder into an empty
cache, the versions alternated run by run, so both see the same machine load.

Usage: ``.venv/bin/python benchmarks/ab_build.py OTHER_SRC [--runs N] [DIR]``: ``OTHER_SRC`` is
a ``src`` folder of another checkout (``git worktree add /tmp/base BASE``, then
``/tmp/base/src``), run by this interpreter with ``PYTHONPATH`` set to it; DIR defaults to F
(the interpreter's library folder). Prints per run and per version the wall time, the CPU
time (user + system, the parse helper's included), the peak RSS of the process and its
children, and when the index was ready for grep (what the version's ``rootgrep index`` line
says, when it says it), then the medians.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = "import sys; from rootgrep.__main__ import run; sys.argv = ['rootgrep', *sys.argv[1:]]; raise SystemExit(run())"  # noqa: E501
READY = re.compile(rb" in ([0-9.]+) s \(ready for grep in ([0-9.]+) s\)")


def build(src: str, folder: str) -> tuple[float, float, float, float | None]:
    """(wall s, CPU s, peak RSS MiB, wall s until ready for grep or None) of one build."""
    env = dict(os.environ, PYTHONPATH=src)
    with tempfile.TemporaryDirectory(prefix="ab-build-") as cache:
        started = time.perf_counter()
        argv = [sys.executable, "-c", RUN, "index", "--cache-dir", cache, folder]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        said = proc.stderr.read() if proc.stderr is not None else b""
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the build of {src} failed: {said[-500:].decode(errors='replace')}")
    m = READY.search(said)
    ready = wall - (float(m.group(1)) - float(m.group(2))) if m else None
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, ready


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("other_src")
    ap.add_argument("folder", nargs="?", default=sysconfig.get_paths()["stdlib"])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_intermixed_args()
    versions = {"other": os.path.abspath(args.other_src), "this": os.path.join(HERE, "..", "src")}
    got: dict[str, list[tuple[float, float, float, float | None]]] = {v: [] for v in versions}
    for i in range(args.runs):
        for name, src in versions.items():
            run = build(src, os.path.abspath(args.folder))
            got[name].append(run)
            ready = "" if run[3] is None else f", ready for grep after {run[3]:.2f} s"
            print(f"run {i + 1} {name}: {run[0]:.2f} s wall, {run[1]:.2f} s CPU, "
                  f"{run[2]:.0f} MiB{ready}", flush=True)  # fmt: skip
    for name, runs in got.items():
        readies = [r[3] for r in runs if r[3] is not None]
        ready = f", ready for grep {statistics.median(readies):.2f} s" if readies else ""
        print(f"{name} (medians): {statistics.median(r[0] for r in runs):.2f} s wall, "
              f"{statistics.median(r[1] for r in runs):.2f} s CPU, "
              f"{statistics.median(r[2] for r in runs):.0f} MiB{ready}")  # fmt: skip
    ratio = statistics.median(r[0] for r in got["this"]) / statistics.median(
        r[0] for r in got["other"]
    )
    print(f"this / other, wall: {ratio:.2f}×")


if __name__ == "__main__":
    main()
