"""Processes opening one brand-new index at the same moment: a server, a daemon and a CLI
started together on a root nobody indexed yet. Each must open it; none may remove the index
another has just made (before the fix one in about ten such meetings failed with
FileNotFoundError or tantivy's "No such file or directory")."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

from rootgrep.index.plan import Q
from rootgrep.index.store import RootIndex
from rootgrep.roots import pin_root

PROCESSES = 3
ROUNDS = 40


def _open_each(roots: list[str], cache: str, barrier: Any, out: Any) -> None:
    from rootgrep.index.plan import Q
    from rootgrep.index.store import RootIndex

    failures: list[str] = []
    for root in roots:
        barrier.wait(timeout=60)  # (all at once: the race is between the openers)
        try:
            ix = RootIndex(cache, root.encode())
        except Exception as e:  # (reported, not raised: the parent counts them)
            failures.append(f"{root}: {e!r}")
            continue
        try:  # (the index answers; its one writer may be another process's: not synced)
            ix.candidates(Q("tri", tri="VAL"))
        except Exception as e:
            failures.append(f"{root}: query: {e!r}")
        finally:
            ix.close()
    out.put(failures)


def test_processes_making_one_new_index_at_once_all_open_it(tmp_path: Path) -> None:
    roots = []
    for i in range(ROUNDS):
        root = tmp_path / f"root{i}"
        root.mkdir()
        (root / "a.py").write_text(f"VALUE_{i} = {i}\n")
        roots.append(str(root))
    cache = str(tmp_path / "cache")
    ctx = multiprocessing.get_context("spawn")  # (no fork of pytest's threads)
    barrier = ctx.Barrier(PROCESSES)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_open_each, args=(roots, cache, barrier, out)) for _ in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    try:
        failures = [f for _ in procs for f in out.get(timeout=240)]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert failures == []
    assert all(p.exitcode == 0 for p in procs)
    for root in roots[:3]:  # (then each index builds, and finds its file)
        ix = RootIndex(cache, root.encode())
        try:
            ix.sync(pin_root(root).fs)
            assert list(ix.candidates(Q("tri", tri="LUE"))) == [b"a.py"]
        finally:
            ix.close()
