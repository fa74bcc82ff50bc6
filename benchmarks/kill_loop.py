"""Kills at every step: SIGKILL an indexing process at random moments, then check the index.

A real tree (a copy of the standard library's ``.py`` files) is edited between kills (adds,
edits, deletes, renames, now and then a quarter of the tree rewritten, so a sync takes a
while). Each round starts an indexing process over it and SIGKILLs it at a moment aimed at
one phase:

- ``build``: ``rootgrep index DIR`` after a large change, killed after a random delay drawn
  over the measured length of a full build;
- ``fold``: ``rootgrep daemon DIR`` folding edits made while it watches, killed after a
  random delay over about two fold periods;
- ``commit``: killed as soon as tantivy's folder changes (a new segment file, or
  ``meta.json`` replaced), plus 0-5 ms;
- ``state``: killed as soon as the temp of the next ``state.bin`` appears, ``state.bin`` is
  replaced or ``state.log`` grows, plus 0-2 ms.

After each kill the next start is checked in this process: the index the killed process
left opens (``RootIndex``), re-syncs, names exactly the files a walk lists, and answers a
set of queries exactly as a live scan (``run_grep`` over the walk) and ripgrep (``rg -l``)
do; no temp of an atomic write stays in the index folder. It reports the kills per phase,
the failures (target 0) and the time.

``python benchmarks/kill_loop.py --kills 100`` (``make kill-loop``); the test
``tests/test_kill_loop.py`` runs a short version of the same code.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rootgrep import confine
from rootgrep.grep import FileMatches, GrepQuery, Matcher, run_grep
from rootgrep.index.cache import folder_name
from rootgrep.index.plan import plan
from rootgrep.index.store import RootIndex
from rootgrep.roots import pin_root
from rootgrep.walker import Walker, list_files, path_batches

PHASES = ("build", "fold", "commit", "state")
BIN = Path(sys.executable).parent
ROOTGREP = str(BIN / "rootgrep")
RG = str(BIN / "rg")
HANG_GUARD = 60.0  # seconds a process may take before the loop gives up on it (not a bound)
FIXED_QUERIES = (r"def __init__", r"class \w+Error", r"import (os|sys)$", r"killtok_\d+")


@dataclass
class Report:
    kills: Counter[str] = field(default_factory=Counter)  # SIGKILLs that landed, per phase
    missed: Counter[str] = field(default_factory=Counter)  # the process ended first
    failures: list[str] = field(default_factory=list)
    checks: int = 0
    temps_left: int = 0  # temps of atomic writes a kill left in the index folder
    files: int = 0
    build_seconds: float = 0.0
    resync_seconds: float = 0.0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "kills": sum(self.kills.values()),
            "per_phase": dict(self.kills),
            "ended_before_the_kill": dict(self.missed),
            "failures": len(self.failures),
            "failure_details": self.failures[:20],
            "checks": self.checks,
            "temps_left_by_kills": self.temps_left,
            "files": self.files,
            "build_seconds": round(self.build_seconds, 2),
            "resync_seconds": round(self.resync_seconds, 2),
            "seconds": round(self.seconds, 1),
        }


def make_tree(dest: Path, files: int) -> None:
    """``files`` of the standard library's ``.py`` files (sorted, so the same every run)."""
    src = Path(sysconfig.get_paths()["stdlib"])
    picked = []
    for p in sorted(src.rglob("*.py")):
        rel = p.relative_to(src)
        if any(part.startswith(".") or part in ("site-packages", "test") for part in rel.parts):
            continue
        picked.append(rel)
        if len(picked) >= files:
            break
    for rel in picked:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest / rel)


class Editor:
    """Random edits of the tree between kills (and while a daemon watches it)."""

    def __init__(self, tree: Path, rng: random.Random) -> None:
        self.tree = tree
        self.rng = rng
        self.token = 0

    def files(self) -> list[Path]:
        return sorted(p for p in self.tree.rglob("*.py") if p.is_file())

    def _tok(self) -> str:
        self.token += 1
        return f"killtok_{self.token}"

    def small(self, n: int) -> None:
        """``n`` edits: add, edit, delete or rename a file."""
        for _ in range(n):
            files = self.files()
            what = self.rng.choice(("add", "edit", "edit", "delete", "rename"))
            if what == "add" or len(files) < 10:
                src = self.rng.choice(files) if files else None
                body = src.read_text(errors="replace") if src else ""
                d = self.rng.choice([p.parent for p in files] or [self.tree])
                (d / f"added_{self.token}.py").write_text(f"# {self._tok()}\n{body}")
            elif what == "edit":
                p = self.rng.choice(files)
                with p.open("a") as f:
                    f.write(f"\n{self._tok()} = 1\n")
            elif what == "delete":
                self.rng.choice(files).unlink()
            else:
                p = self.rng.choice(files)
                d = self.rng.choice([q.parent for q in files])
                p.rename(d / f"renamed_{self.token}_{p.name}")
                self._tok()

    def large(self) -> None:
        """Rewrite a quarter of the files (a sync then reads them all again)."""
        files = self.files()
        for p in self.rng.sample(files, max(1, len(files) // 4)):
            p.write_text(f"# {self._tok()}\n" + p.read_text(errors="replace"))


def _start(argv: list[str], cache: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(cache)}
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )


def _wait_line(proc: subprocess.Popen[bytes], needle: bytes) -> bool:
    assert proc.stderr is not None
    while True:
        line = proc.stderr.readline()
        if not line:
            return False
        if needle in line:
            return True


def _kill(proc: subprocess.Popen[bytes]) -> bool:
    """SIGKILL ``proc`` (only this child, by its pid); whether it was still running."""
    alive = proc.poll() is None
    if alive:
        proc.send_signal(signal.SIGKILL)
    proc.wait(HANG_GUARD)
    if proc.stderr is not None:
        proc.stderr.close()
    return alive and proc.returncode == -signal.SIGKILL


def _stamp_tantivy(d: Path) -> tuple[frozenset[str], int]:
    try:
        names = frozenset(os.listdir(d))
    except OSError:
        return frozenset(), -1
    try:
        ino = os.stat(d / "meta.json").st_ino
    except OSError:
        ino = -1
    return names, ino


def _stamp_state(d: Path) -> tuple[int, int, bool]:
    """The snapshot's inode, the journal's size, and whether a temp of an atomic write
    (the next snapshot being written) is there now."""
    try:
        snap = os.stat(d / "state.bin").st_ino
    except OSError:
        snap = -1
    try:
        log = os.stat(d / "state.log").st_size
    except OSError:
        log = -1
    try:
        temp = any(confine.is_temp_name(n) for n in os.listdir(os.fsencode(d)))
    except OSError:
        temp = False
    return snap, log, temp


def _temps_in(d: Path) -> int:
    try:
        return sum(1 for n in os.listdir(os.fsencode(d)) if confine.is_temp_name(n))
    except OSError:
        return 0


def _watch_until(
    proc: subprocess.Popen[bytes],
    stamp: Callable[[], object],
    changed: Callable[[object, object], bool],
) -> bool:
    """Poll ``stamp`` until it changes (True) or the process ends (False)."""
    before = stamp()
    deadline = time.monotonic() + HANG_GUARD
    while proc.poll() is None and time.monotonic() < deadline:
        now = stamp()
        if changed(before, now):
            return True
        time.sleep(0.0002)
    return False


def _new_segment(before: object, now: object) -> bool:
    (b_names, b_ino), (n_names, n_ino) = before, now  # type: ignore[misc]
    fresh = {n for n in n_names - b_names if not n.startswith(".")}
    return bool(fresh) or (b_ino != -1 and n_ino != b_ino)


def _state_moved(before: object, now: object) -> bool:
    """A snapshot being written (its temp appeared) or replaced, or the journal grew."""
    (b_snap, b_log, b_temp), (n_snap, n_log, n_temp) = before, now  # type: ignore[misc]
    return n_snap != b_snap or n_log > b_log or (n_temp and not b_temp)


class KillLoop:
    def __init__(self, work: Path, *, files: int, seed: int, log: Callable[[str], None]) -> None:
        self.work = work
        self.tree = work / "tree"
        self.cache = work / "cache"
        self.tree.mkdir(parents=True)
        make_tree(self.tree, files)
        self.rng = random.Random(seed)
        self.edit = Editor(self.tree, self.rng)
        self.log = log
        self.report = Report()
        r = pin_root(str(self.tree))
        try:
            self.root_path = r.path
        finally:
            r.close()
        self.folder = self.cache / folder_name(self.root_path)
        self._live: subprocess.Popen[bytes] | None = None  # the process to kill at the end

    # -- the processes killed ---------------------------------------------------------------

    def _index(self) -> subprocess.Popen[bytes]:
        return _start([ROOTGREP, "index", str(self.tree)], self.cache)

    def _daemon(self) -> subprocess.Popen[bytes] | None:
        p = _start([ROOTGREP, "daemon", str(self.tree)], self.cache)
        if not _wait_line(p, b"watching"):
            _kill(p)
            return None
        return p

    def _timed_index(self) -> float:
        started = time.perf_counter()
        p = self._index()
        self._live = p
        p.wait(HANG_GUARD * 5)
        if p.stderr is not None:
            p.stderr.close()
        return time.perf_counter() - started

    def measure(self) -> None:
        """How long a build from nothing takes, and a re-sync after a large change (the
        ranges the ``build`` kills' delays are drawn over)."""
        self.report.build_seconds = self._timed_index()
        self.edit.large()
        self.report.resync_seconds = self._timed_index()

    def round(self, phase: str) -> None:
        if phase == "build":
            if self.rng.random() < 0.5:  # a build from nothing (a new cache folder)
                shutil.rmtree(self.folder, ignore_errors=True)
                self.edit.small(self.rng.randint(1, 5))
                longest = self.report.build_seconds
            else:
                self.edit.large()
                longest = self.report.resync_seconds
            p = self._index()
            self._live = p
            time.sleep(self.rng.uniform(0, longest))
            landed = _kill(p)
        elif phase == "fold":
            self.edit.small(self.rng.randint(1, 5))
            p0 = self._daemon()
            self._live = p0
            if p0 is None:
                self.report.failures.append("fold: the daemon did not start")
                return
            self.edit.small(self.rng.randint(1, 8))
            time.sleep(self.rng.uniform(0, 2.5))
            landed = _kill(p0)
        else:
            big = self.rng.random() < 0.3
            self.edit.large() if big else self.edit.small(self.rng.randint(1, 8))
            use_daemon = not big and self.rng.random() < 0.5
            p1 = self._daemon() if use_daemon else self._index()
            self._live = p1
            if p1 is None:
                self.report.failures.append(f"{phase}: the daemon did not start")
                return
            if use_daemon:
                self.edit.small(self.rng.randint(1, 8))
            if phase == "commit":
                seen = _watch_until(
                    p1, lambda: _stamp_tantivy(self.folder / "tantivy"), _new_segment
                )
                time.sleep(self.rng.uniform(0, 0.005) if seen else 0)
            else:
                seen = _watch_until(p1, lambda: _stamp_state(self.folder), _state_moved)
                time.sleep(self.rng.uniform(0, 0.002) if seen else 0)
            landed = _kill(p1)
        (self.report.kills if landed else self.report.missed)[phase] += 1
        self.report.temps_left += _temps_in(self.folder)
        self.check(phase)

    # -- the check after each kill ----------------------------------------------------------

    def queries(self) -> list[str]:
        tokens = [f"killtok_{self.rng.randint(1, max(1, self.edit.token))}\\b" for _ in range(3)]
        return [*FIXED_QUERIES, *tokens]

    def check(self, phase: str) -> None:
        """The index the killed process left opens, re-syncs and answers as a live scan."""
        self.report.checks += 1
        n = self.report.checks
        r = pin_root(str(self.tree))
        try:
            try:
                ix = RootIndex(str(self.cache), r.path, identity=r.fs.identity())
            except Exception as e:  # (a failure to report, not to stop the loop)
                self.report.failures.append(f"#{n} {phase}: the index does not open: {e!r}")
                return
            try:
                try:
                    ix.sync(r.fs)
                except Exception as e:
                    self.report.failures.append(f"#{n} {phase}: the re-sync failed: {e!r}")
                    return
                files = list_files(r.fs)
                self.report.files = len(files)
                problems = []
                if not ix.ready:
                    problems.append("not ready after a sync")
                if sorted(ix.entries) != sorted(files):
                    extra = set(ix.entries).symmetric_difference(files)
                    problems.append(f"state differs from the tree: {sorted(extra)[:5]}")
                for pattern in self.queries():
                    live = _grep(r.fs, pattern, None)
                    indexed = _grep(r.fs, pattern, ix)
                    if indexed != live:
                        diff = set(indexed).symmetric_difference(live)
                        problems.append(f"{pattern!r}: index {len(indexed)} vs live {len(live)} "
                                        f"({sorted(diff)[:3]})")  # fmt: skip
                    rg = _rg(self.tree, pattern)
                    if rg is not None and rg != {p for p, _ in live}:
                        problems.append(f"{pattern!r}: live grep differs from rg")
                if _temps_in(self.folder):
                    problems.append("temps left in the index folder after its next open")
                for p in problems:
                    self.report.failures.append(f"#{n} {phase}: {p}")
            finally:
                ix.close()
        finally:
            r.close()

    def run(self, kills: int) -> Report:
        try:
            return self._run(kills)
        finally:
            if self._live is not None and self._live.poll() is None:
                _kill(self._live)

    def _run(self, kills: int) -> Report:
        started = time.perf_counter()
        self.measure()
        self.log(f"tree: {len(self.edit.files())} files; a build takes "
                 f"{self.report.build_seconds:.2f} s, a re-sync of a quarter "
                 f"{self.report.resync_seconds:.2f} s")  # fmt: skip
        order = [PHASES[i % len(PHASES)] for i in range(kills)]
        self.rng.shuffle(order)
        tries = 0
        while sum(self.report.kills.values()) < kills and tries < kills * 3:
            tries += 1
            phase = order[sum(self.report.kills.values()) % len(order)]
            self.round(phase)
            done = sum(self.report.kills.values())
            self.log(f"{done}/{kills} kills ({phase}), {len(self.report.failures)} failures")
        self.report.seconds = time.perf_counter() - started
        return self.report


def _grep(
    fs: confine.Beneath, pattern: str, ix: RootIndex | None
) -> list[tuple[bytes, tuple[int, ...]]]:
    """(path, matching lines) of every file matching ``pattern``: over the walk (live) or
    over the index's candidates, each read and matched on disk."""
    m = Matcher(GrepQuery(pattern, regex=True))
    found: list[tuple[bytes, tuple[int, ...]]] = []

    def sink(fm: FileMatches) -> bool:
        found.append((fm.path, tuple(lm.line for lm in fm.matches)))
        return True

    if ix is None:
        batches = Walker(fs).batches()
    else:
        batches = path_batches(fs, ix.candidates(plan(pattern, regex=True)))
    run_grep(m, batches, sink)
    return found


def _rg(tree: Path, pattern: str) -> set[bytes] | None:
    if not os.path.exists(RG):
        return None
    out = subprocess.run([RG, "-l", "--no-messages", pattern, "."], cwd=tree,
                         capture_output=True, check=False)  # fmt: skip
    return {line.removeprefix(b"./") for line in out.stdout.splitlines()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--files", type=int, default=1500, help="standard library files copied")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    args = ap.parse_args(argv)
    # (SIGTERM unwinds, so the process being killed and the temporary tree go too)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="rootgrep-kill-") as work:
        loop = KillLoop(Path(work), files=args.files, seed=args.seed,
                        log=lambda s: print(s, file=sys.stderr, flush=True))  # fmt: skip
        report = loop.run(args.kills)
    out = report.as_dict()
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    for f in report.failures:
        print("FAILURE", f, file=sys.stderr)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
