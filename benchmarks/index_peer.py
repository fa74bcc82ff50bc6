"""Index build beside its nearest indexed peer, as whole processes in one run:
``rootgrep index DIR`` against ``cindex DIR`` (Russ Cox's trigram index, Debian package
``codesearch``), alternated, each into an empty cache or index file. Reports, per tool, the
median wall time, CPU time (user + system of the process and its children), peak RSS and the
index size, and rootgrep's ratios to cindex; for rootgrep also when the index was ready for
grep (a build commits every file's trigrams first, then their words and symbols: the
process's wall time less what its sync says it spent after that point); then the re-sync of
the unchanged tree (a second ``rootgrep index``) beside ``rg --files`` over the same tree.

``python benchmarks/index_peer.py [DIR] [--runs N]`` (default: F, the interpreter's library
folder; 3 runs). Without ``cindex`` on PATH its rows say so (``apt-get install codesearch``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)


@dataclass
class Run:
    wall: float
    cpu: float
    rss_mib: float
    size: int
    grep_ready: float | None = None  # (rootgrep: wall seconds until grep could use the index)


def _tool(name: str) -> str | None:
    beside = os.path.join(BIN, name)
    return beside if os.access(beside, os.X_OK) else shutil.which(name)


def _dir_bytes(path: str) -> int:
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(d, f)).st_size
    return total


TEXT_BYTES = re.compile(rb"\((\d+) bytes\)")
_text_seen: list[int] = []  # the bytes of text rootgrep index says it read
# ``rootgrep index``'s line: "... in 21.30 s (ready for grep in 6.10 s)" (times from its
# sync's start)
GREP_READY = re.compile(rb" in ([0-9.]+) s \(ready for grep in ([0-9.]+) s\)")
_grep_ready: list[float] = []  # the seconds each build spent after it was ready for grep


def _measure(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS MiB) of one process."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        said = out.read() + err.read()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{argv[0]} failed ({code}): {said[-500:].decode(errors='replace')}")
    m = TEXT_BYTES.search(said)
    if m and int(m.group(1)):
        _text_seen.append(int(m.group(1)))
    m = GREP_READY.search(said)
    if m:
        _grep_ready.append(float(m.group(1)) - float(m.group(2)))
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def rootgrep_build(folder: str) -> tuple[Run, str]:
    cache = tempfile.mkdtemp(prefix="rootgrep-peer-")
    exe = _tool("rootgrep") or "rootgrep"
    _grep_ready.clear()
    wall, cpu, rss = _measure([exe, "index", "--cache-dir", cache, folder], dict(os.environ))
    ready = wall - _grep_ready[0] if _grep_ready else None
    return Run(wall, cpu, rss, _dir_bytes(cache), ready), cache


def cindex_build(exe: str, folder: str) -> Run:
    tmp = tempfile.mkdtemp(prefix="cindex-peer-")
    try:
        env = dict(os.environ, CSEARCHINDEX=os.path.join(tmp, "index"))
        wall, cpu, rss = _measure([exe, folder], env)
        return Run(wall, cpu, rss, _dir_bytes(tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _median(runs: list[Run], attr: str) -> float:
    return statistics.median(getattr(r, attr) for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", nargs="?", default=sysconfig.get_paths()["stdlib"])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    folder = os.path.abspath(args.folder)
    cindex = _tool("cindex")
    rg = _tool("rg")
    ours: list[Run] = []
    theirs: list[Run] = []
    resync: list[float] = []
    rg_files: list[float] = []
    for _ in range(args.runs):
        run, cache = rootgrep_build(folder)
        ours.append(run)
        try:  # the unchanged tree again: a re-sync, as a whole process
            exe = _tool("rootgrep") or "rootgrep"
            resync.append(
                _measure([exe, "index", "--cache-dir", cache, folder], dict(os.environ))[0]
            )
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        if rg:
            rg_files.append(_measure([rg, "--files", folder], dict(os.environ))[0])
        if cindex:
            theirs.append(cindex_build(cindex, folder))
    text = max(_text_seen, default=0) or 1  # (the text files rootgrep indexed)
    print(f"#### Index build of {folder} ({args.runs} runs each, alternated, medians)\n")
    print(f"text: {text / 1e6:.0f} MB in the files rootgrep indexes (the same tree for both)\n")
    print("| tool | wall | CPU | peak RSS | index | index / text |")
    print("|---|---:|---:|---:|---:|---:|")
    rows = [("rootgrep index", ours)] + ([("cindex", theirs)] if theirs else [])
    for name, runs in rows:
        size = _median(runs, "size")
        print(
            f"| {name} | {_median(runs, 'wall'):.2f} s | {_median(runs, 'cpu'):.2f} s"
            f" | {_median(runs, 'rss_mib'):.0f} MiB | {size / 1e6:.0f} MB | {size / text:.2f} |"
        )
    if theirs:
        print(
            "\nratios rootgrep / cindex: wall"
            f" {_median(ours, 'wall') / _median(theirs, 'wall'):.2f}×, CPU"
            f" {_median(ours, 'cpu') / _median(theirs, 'cpu'):.2f}×, RSS"
            f" {_median(ours, 'rss_mib') / _median(theirs, 'rss_mib'):.2f}×, size"
            f" {_median(ours, 'size') / _median(theirs, 'size'):.2f}×"
        )
    readies = [r.grep_ready for r in ours if r.grep_ready is not None]
    if readies:
        ready = statistics.median(readies)
        line = f"\nrootgrep index ready for grep after {ready:.2f} s (median wall"
        if theirs:
            line += f"; {ready / _median(theirs, 'wall'):.2f}× cindex's whole build"
        print(line + ")")
    if not theirs:
        print("\ncindex: not installed (apt-get install codesearch): no ratio")
    line = f"\nre-sync of the unchanged tree (whole process): {statistics.median(resync):.2f} s"
    if rg_files:
        rgm = statistics.median(rg_files)
        line += f"; rg --files {rgm:.2f} s: {statistics.median(resync) / rgm:.2f}×"
    print(line)


if __name__ == "__main__":
    main()
