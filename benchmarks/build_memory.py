"""Where a build's memory peaks: one in-process ``RootIndex.sync`` of a folder into an empty
cache, its ``VmRSS`` sampled every 50 ms, with marks at the grep-ready point and around each
state write.

Usage: ``.venv/bin/python benchmarks/build_memory.py DIR [--cache-dir DIR]`` (default cache:
a temporary folder). Prints the peak, the marks, and the highest sample between each two
marks, then the process's ``VmHWM``. Linux only (``/proc/self/status``).
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

from rootgrep.index import store
from rootgrep.roots import pin_root


def rss_mib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--cache-dir")
    args = ap.parse_args()
    cache = args.cache_dir or tempfile.mkdtemp(prefix="build-memory-")
    started = time.perf_counter()
    samples: list[tuple[float, int]] = []
    marks: list[tuple[float, str, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            samples.append((time.perf_counter() - started, rss_mib()))

    def mark(what: str) -> None:
        marks.append((time.perf_counter() - started, what, rss_mib()))

    real = store.RootIndex._record

    def record(self: Any, entries: Any, synced_at: Any, changes: Any) -> None:
        mark(f"state write of {len(changes)} changes")
        real(self, entries, synced_at, changes)
        mark("written")

    store.RootIndex._record = record  # type: ignore[method-assign]
    threading.Thread(target=sample, daemon=True).start()
    r = pin_root(args.folder)
    ix = store.RootIndex(cache, r.path)
    try:
        ix.sync(r.fs, grep_ready=lambda: mark("ready for grep"))
        mark("built")
    finally:
        done.set()
        ix.close()
        r.close()
        if not args.cache_dir:
            shutil.rmtree(cache, ignore_errors=True)
    peak = max(samples, key=lambda s: s[1], default=(0.0, 0))
    print(f"peak {peak[1]} MiB at {peak[0]:.2f} s")
    for t, what, mib in marks:
        print(f"{t:8.2f} s {mib:6d} MiB  {what}")
    bounds = [0.0] + [t for t, _, _ in marks]
    for a, b in itertools.pairwise(bounds):
        inside = [mib for t, mib in samples if a <= t < b]
        if inside:
            print(f"  {a:8.2f}-{b:8.2f} s: at most {max(inside)} MiB")
    with open("/proc/self/status") as f:
        print("".join(line for line in f if line.startswith("VmHWM")), end="")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
