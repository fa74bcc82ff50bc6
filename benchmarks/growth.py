"""How the index grows with the tree: build time, peak memory, index size, re-sync and a
selective grep on synthetic trees of increasing size (issue 11's growth targets: build time
linear in the file count, a selective grep in flat time, under 1.5 GiB RSS at 500k files).

``python benchmarks/growth.py [--sizes 50000,100000,200000,500000] [--out FILE] [--rounds R]``

One tree (``synthetic.py``: ~3 KB of code-like text per file, ``RARE_TOKEN`` in five files
whatever the size) grows in place under a temporary directory; at each size a fresh child
process (so its peak RSS is that build's own, imports included) builds the index from scratch
with ``RootIndex.sync``, re-syncs the unchanged tree, then serves the grep the way a serving
process does (``IndexManager`` watching the root, ``Service.grep``, the index ready) and scans
live once for comparison. Each size prints one JSON line; a Markdown table follows (``--out``:
the JSON lines are also written there). Everything is deleted at the end. Times are this
machine's, wall and CPU (CPU counts every thread of the child), with whatever else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import synthetic

DEFAULT_SIZES = (50_000, 100_000, 200_000, 500_000)
MIB = 1024 * 1024


def cpu_seconds() -> float:
    """CPU of this process, every thread, user and system."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def peak_rss_mib() -> float:
    """The process's peak resident set so far (``ru_maxrss``: KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def dir_bytes(path: str) -> int:
    """Bytes of every regular file beneath ``path`` (links not followed)."""
    total = 0
    for d, _, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(d, name))
            except OSError:
                continue
            total += st.st_size
    return total


def timed(fn: Callable[[], Any], rounds: int, warmup: int = 1) -> tuple[float, float, Any]:
    """Median wall and median CPU seconds of ``fn`` over ``rounds`` (after ``warmup`` untimed
    calls), and its last result."""
    for _ in range(warmup):
        fn()
    walls, cpus = [], []
    result = None
    for _ in range(rounds):
        c0, t0 = cpu_seconds(), time.perf_counter()
        result = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(cpu_seconds() - c0)
    return statistics.median(walls), statistics.median(cpus), result


def find_rg() -> str | None:
    here = os.path.join(os.path.dirname(sys.executable), "rg")
    return here if os.access(here, os.X_OK) else shutil.which("rg")


# -- the child: one size, measured in a fresh process ------------------------------------------


def measure(tree: str, cache: str, rounds: int, live: bool) -> dict[str, Any]:
    from rootgrep.index.manager import IndexManager
    from rootgrep.index.store import RootIndex
    from rootgrep.roots import pin_root
    from rootgrep.service import Service, Settings, Token

    out: dict[str, Any] = {"rss_before_build_mib": round(peak_rss_mib())}
    root = pin_root(tree)
    try:
        # bound to the directory, as a serving process binds it (else it rebuilds the index)
        ix = RootIndex(cache, root.path, identity=root.fs.identity())
        try:
            c0, t0 = cpu_seconds(), time.perf_counter()
            stats = ix.sync(root.fs)
            out["build_s"] = round(time.perf_counter() - t0, 2)
            out["build_cpu_s"] = round(cpu_seconds() - c0, 2)
            out["peak_rss_build_mib"] = round(peak_rss_mib())
            out["files"] = stats.files
            out["source_bytes"] = stats.bytes
            out["index_bytes"] = dir_bytes(ix.dir)

            def resync() -> int:
                s = ix.sync(root.fs)
                assert s.read == 0 and s.removed == 0, s  # (the tree did not change)
                return s.files

            wall, cpu, _ = timed(resync, rounds=3)
            out["resync_s"], out["resync_cpu_s"] = round(wall, 3), round(cpu, 3)
        finally:
            ix.close()

        rg = find_rg()
        if rg is not None:

            def rg_files() -> int:
                proc = subprocess.run([rg, "--files", tree], capture_output=True, check=True)
                return proc.stdout.count(b"\n")

            wall, _, listed = timed(rg_files, rounds=3)
            assert listed == out["files"], (listed, out["files"])
            out["rg_files_s"] = round(wall, 3)

        # the grep a serving process answers: the manager watches the root, the index ready
        manager = IndexManager(cache)
        try:
            t0 = time.perf_counter()
            manager.activate(root, 0)
            assert manager.wait_built(root.path, 3600)
            entry = manager.get(root.path)
            assert entry is not None and entry.state == "ready", entry and entry.state
            out["served_ready_s"] = round(time.perf_counter() - t0, 2)
            svc = Service([root], Settings(), indexes=manager)

            def grep(**kw: Any) -> int:
                res = svc.grep([root], Token(), pattern=synthetic.RARE_TOKEN, max_results=100,
                               **kw)  # fmt: skip
                assert res.index_used == (not kw.get("no_ignore", False)), res.index_used
                return len(res.matches)

            wall, cpu, found = timed(grep, rounds=rounds, warmup=2)
            out["grep_ms"], out["grep_cpu_ms"] = round(wall * 1000, 2), round(cpu * 1000, 2)
            out["grep_matches"] = found
            assert found == len(synthetic.PLANTED), found
            if live:  # (no_ignore: the index is not used; the tree has no ignore file)
                wall, cpu, found = timed(lambda: grep(no_ignore=True), rounds=1, warmup=0)
                out["live_grep_ms"] = round(wall * 1000, 1)
                assert found == len(synthetic.PLANTED), found
        finally:
            manager.close()
    finally:
        root.close()
    out["peak_rss_mib"] = round(peak_rss_mib())
    return out


# -- the parent: grows the tree, runs a child per size, prints the table ------------------------


def run_child(tree: str, rounds: int, live: bool) -> dict[str, Any]:
    cache = tempfile.mkdtemp(prefix="rootgrep-growth-cache-")
    try:
        argv = [sys.executable, os.path.abspath(__file__), "--child", tree, "--cache", cache,
                "--rounds", str(rounds), *([] if live else ["--no-live"])]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of ``rows`` (the JSON lines). Linearity is read from the build's CPU
    per file (wall time moves with whatever else runs on the machine)."""
    per_file0 = rows[0]["build_cpu_s"] / rows[0]["files"]
    lines = [
        "| files | text | build wall (CPU) | build CPU per file (× first) | peak RSS building"
        " | index (× text) | re-sync (× `rg --files`) | selective grep, served: wall (CPU)"
        " | live scan |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        per_file = r["build_cpu_s"] / r["files"]
        rg = r.get("rg_files_s")
        ratio = f" ({r['resync_s'] / rg:.1f}×)" if rg else ""
        live = f"{r['live_grep_ms']:,.0f} ms" if "live_grep_ms" in r else "—"
        lines.append(
            f"| {r['files']:,} | {r['source_bytes'] / MIB:,.0f} MiB"
            f" | {r['build_s']:,.1f} s ({r['build_cpu_s']:,.1f} s)"
            f" | {per_file * 1e6:,.0f} µs ({per_file / per_file0:.2f}×)"
            f" | {r['peak_rss_build_mib']:,} MiB"
            f" | {r['index_bytes'] / MIB:,.0f} MiB ({r['index_bytes'] / r['source_bytes']:.2f})"
            f" | {r['resync_s']:.2f} s{ratio}"
            f" | {r['grep_ms']:.2f} ms ({r['grep_cpu_ms']:.2f} ms) | {live} |"
        )
    return "\n".join(lines)


def read_rows(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                    help="file counts, comma-separated (default %(default)s)")  # fmt: skip
    ap.add_argument("--out", help="also write the JSON lines to this file")
    ap.add_argument("--rounds", type=int, default=20, help="timed greps per size")
    ap.add_argument("--no-live", dest="live", action="store_false",
                    help="skip the live (unindexed) scan at each size")  # fmt: skip
    ap.add_argument("--tmp", default=None, help="where the tree is made (default: $TMPDIR)")
    ap.add_argument("--table", metavar="JSONL", help="only reprint the table of an --out file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.table:
        print(table(read_rows(args.table)))
        return 0
    if args.child:
        print(json.dumps(measure(args.child, args.cache, args.rounds, args.live)))
        return 0

    sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()})
    base = tempfile.mkdtemp(prefix="rootgrep-growth-", dir=args.tmp)
    tree = os.path.join(base, "tree")
    os.mkdir(tree)
    rows: list[dict[str, Any]] = []
    out = open(args.out, "w") if args.out else None  # noqa: SIM115 (closed below)
    try:
        vocab = synthetic.vocabulary()
        have = 0
        for n in sizes:
            t0 = time.perf_counter()
            synthetic.make_tree(tree, n, have, vocab)
            have = n
            made = time.perf_counter() - t0
            print(f"# {n:,} files in the tree ({made:.0f} s to grow it); measuring",
                  file=sys.stderr, flush=True)  # fmt: skip
            row = {"size": n, **run_child(tree, args.rounds, args.live)}
            rows.append(row)
            line = json.dumps(row)
            print(line, flush=True)
            if out is not None:
                out.write(line + "\n")
                out.flush()
    finally:
        if out is not None:
            out.close()
        shutil.rmtree(base, ignore_errors=True)
    if rows:
        print()
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
