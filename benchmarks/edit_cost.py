"""What a small edit costs the index: bytes written and CPU per one-line edit, at two tree
sizes (issue 11: the bytes written per edited file must not grow with the tree).

``python benchmarks/edit_cost.py [--sizes 50000,200000] [--edits 10] [--interval 0]
[--hold-writer] [--out FILE]``

At each size a fresh child process indexes a synthetic tree (``synthetic.py``), then makes
``--edits`` one-line edits, one file each (spread over the tree, written in place), each
followed by ``sync(only=[that path])`` — what the watcher's flush does — and reads the
process's ``/proc/self/io`` around each sync: ``write_bytes`` (bytes this process sent
towards the disk, counted when the pages are dirtied), ``wchar`` (bytes passed to write
calls, page cache or not) and ``cancelled_write_bytes`` (dirty bytes dropped because their file
was truncated or deleted before reaching the disk: a replaced state file). The edits' own
writes fall outside those windows. ``--interval`` waits between edits (the issue's run: one a
second); ``--hold-writer`` keeps the index writer for the process's life, as the daemon does
(its merges may then run after a sync returns: the total, taken after ``close``, counts them).
Prints one JSON line per size and a Markdown table; ``--out`` also writes the JSON lines there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import synthetic
from growth import MIB, cpu_seconds, dir_bytes, read_rows

DEFAULT_SIZES = (50_000, 200_000)
IO_FIELDS = ("wchar", "write_bytes", "cancelled_write_bytes")


def read_io() -> dict[str, int]:
    """This process's I/O counters (every thread)."""
    out: dict[str, int] = {}
    with open("/proc/self/io") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key.strip()] = int(value)
    return out


def io_delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: b[k] - a[k] for k in IO_FIELDS}


def edited_files(n: int, edits: int) -> list[int]:
    """The files edited in a tree of ``n``: spread evenly over it, none twice."""
    return sorted({(k * n) // edits + 7 for k in range(edits)} & set(range(n)))


def one_line_edit(path: str, k: int) -> str:
    """Rewrite ``path`` in place with its third line changed; the marker the edit adds (no
    vowel: found nowhere else in the tree)."""
    marker = f"qjzxv_edit_{k}_mark"
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    lines[2] += f"  # {marker}".encode()
    with open(path, "wb") as f:
        f.write(b"\n".join(lines))
    return marker


def measure(tree: str, cache: str, n: int, edits: int, interval: float,
            hold_writer: bool) -> dict[str, Any]:  # fmt: skip
    from rootgrep.index.plan import plan
    from rootgrep.index.store import RootIndex
    from rootgrep.roots import pin_root

    vocab = synthetic.vocabulary()
    out: dict[str, Any] = {}
    root = pin_root(tree)
    try:
        ix = RootIndex(cache, root.path, hold_writer=hold_writer, identity=root.fs.identity())
        closed = False
        try:
            t0 = time.perf_counter()
            stats = ix.sync(root.fs)
            out["build_s"] = round(time.perf_counter() - t0, 1)
            out["files"] = stats.files
            out["source_bytes"] = stats.bytes
            out["index_bytes"] = dir_bytes(ix.dir)
            per_edit: list[dict[str, Any]] = []
            own = dict.fromkeys(IO_FIELDS, 0)  # the edits' own writes (outside the windows)
            start = read_io()
            c_start = cpu_seconds()
            for k, i in enumerate(edited_files(n, edits)):
                rel = synthetic.rel_path(i, vocab)
                a = read_io()
                marker = one_line_edit(os.path.join(tree, rel), k)
                for key, v in io_delta(a, read_io()).items():
                    own[key] += v
                if interval:
                    time.sleep(interval)
                io0, c0, t0 = read_io(), cpu_seconds(), time.perf_counter()
                s = ix.sync(root.fs, only=[os.fsencode(rel)])
                io1, c1, t1 = read_io(), cpu_seconds(), time.perf_counter()
                assert s.read == 1 and s.updated == 1, s
                assert os.fsencode(rel) in ix.candidates(plan(marker, regex=False)), rel
                per_edit.append({"path": rel, "ms": round((t1 - t0) * 1000, 1),
                                 "cpu_ms": round((c1 - c0) * 1000, 1),
                                 **io_delta(io0, io1)})  # fmt: skip
            ix.close()  # (a held writer's merges finish here: counted in the total)
            closed = True
            total = io_delta(start, read_io())
            total = {k: total[k] - own[k] for k in IO_FIELDS}
            count = len(per_edit)
            out.update(
                edits=count,
                edits_cpu_s=round(cpu_seconds() - c_start, 2),
                total=total,
                per_file={k: total[k] // count for k in IO_FIELDS},
                median_sync_ms=statistics.median(e["ms"] for e in per_edit),
                median_sync_cpu_ms=statistics.median(e["cpu_ms"] for e in per_edit),
                per_edit=per_edit,
            )
        finally:
            if not closed:
                ix.close()
    finally:
        root.close()
    return out


def run_child(tree: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    cache = tempfile.mkdtemp(prefix="rootgrep-edit-cache-")
    try:
        argv = [sys.executable, os.path.abspath(__file__), "--child", tree, "--cache", cache,
                "--sizes", str(n), "--edits", str(args.edits), "--interval", str(args.interval),
                *(["--hold-writer"] if args.hold_writer else [])]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of ``rows``. The median edit is the state's own cost; the mean
    includes the edits whose commit also merged index segments (the largest one shown)."""
    lines = [
        "| files | index | edits | written per edited file: median (mean) | largest edit"
        " | `wchar` per edited file: median (mean) | total written | sync per edit: median"
        " wall (CPU), total CPU |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        edits = r["per_edit"]
        wb = [e["write_bytes"] for e in edits]
        wc = [e["wchar"] for e in edits]
        pf, tot = r["per_file"], r["total"]
        lines.append(
            f"| {r['files']:,} | {r['index_bytes'] / MIB:,.0f} MiB | {r['edits']}"
            f" | {statistics.median(wb) / MIB:,.2f} MiB ({pf['write_bytes'] / MIB:,.2f} MiB)"
            f" | {max(wb) / MIB:,.1f} MiB"
            f" | {statistics.median(wc) / MIB:,.2f} MiB ({pf['wchar'] / MIB:,.2f} MiB)"
            f" | {tot['write_bytes'] / MIB:,.1f} MiB"
            f" | {r['median_sync_ms']:,.0f} ms ({r['median_sync_cpu_ms']:,.0f} ms),"
            f" {r['edits_cpu_s']:.1f} s |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                    help="file counts, comma-separated (default %(default)s)")  # fmt: skip
    ap.add_argument("--edits", type=int, default=10, help="one-line edits per size")
    ap.add_argument("--interval", type=float, default=0.0, help="seconds between edits")
    ap.add_argument("--hold-writer", action="store_true",
                    help="keep the index writer between syncs, as the daemon does")  # fmt: skip
    ap.add_argument("--out", help="also write the JSON lines to this file")
    ap.add_argument("--tmp", default=None, help="where the tree is made (default: $TMPDIR)")
    ap.add_argument("--table", metavar="JSONL", help="only reprint the table of an --out file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.table:
        print(table(read_rows(args.table)))
        return 0
    sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()})
    if args.child:
        row = measure(args.child, args.cache, sizes[0], args.edits, args.interval,
                      args.hold_writer)  # fmt: skip
        print(json.dumps(row))
        return 0

    rows: list[dict[str, Any]] = []
    out = open(args.out, "w") if args.out else None  # noqa: SIM115 (closed below)
    try:
        vocab = synthetic.vocabulary()
        for n in sizes:  # a fresh tree per size: the edits of the last one are not in it
            base = tempfile.mkdtemp(prefix="rootgrep-edit-", dir=args.tmp)
            try:
                tree = os.path.join(base, "tree")
                os.mkdir(tree)
                synthetic.make_tree(tree, n, 0, vocab)
                print(f"# {n:,} files in the tree; measuring", file=sys.stderr, flush=True)
                row = {"size": n, "interval": args.interval, "hold_writer": args.hold_writer,
                       **run_child(tree, n, args)}  # fmt: skip
            finally:
                shutil.rmtree(base, ignore_errors=True)
            rows.append(row)
            line = json.dumps(row)
            print(line, flush=True)
            if out is not None:
                out.write(line + "\n")
                out.flush()
    finally:
        if out is not None:
            out.close()
    if rows:
        print()
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
