"""Whole-process timings of the ``rootgrep grep`` CLI beside ``csearch`` and ``rg`` (hyperfine).

Usage: ``python benchmarks/cli_process.py`` (``make bench`` runs it after the pytest
benchmarks). On F, the interpreter's library folder, with the index ready (a ``rootgrep daemon``
keeps it fresh in a temporary cache; ``cindex`` builds ``csearch``'s index in a temporary file):
``rootgrep grep getrecursionlimit F`` against ``csearch getrecursionlimit`` and
``rg getrecursionlimit F`` (and rootgrep's own live scan, ``--no-index``); then start-up: a grep
of a one-file directory against ``rg``. Prints a Markdown table with medians and ratios (and
each command's CPU time, user + system: on a busy machine wall times swing, CPU much less),
then where the rare literal's time goes: the interpreter's start (bare, then with site and
the editable install's .pth) and each step of the grep, timed inside fresh processes.
``csearch`` is skipped with a note when the ``codesearch`` package is not installed
(``apt-get install codesearch``). Targets (issue 11): rare literal <= 1.5x csearch, start-up
<= 60 ms. Timing thresholds are not checked here (nor in ``make test``): the figures are shown.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent
ROOTGREP = str(BIN / "rootgrep")
RG = str(BIN / "rg") if (BIN / "rg").exists() else shutil.which("rg")
PATTERN = "getrecursionlimit"
RUNS = int(os.environ.get("CLI_BENCH_RUNS", "20"))


def _hyperfine(
    commands: dict[str, list[str]],
    env: dict[str, str],
    cpu: dict[str, float] | None = None,
    stat: str = "median",
    cwd: str | None = None,
) -> dict[str, float]:
    """Median (or ``stat``) seconds of each command (hyperfine -N: no shell in between);
    ``cpu`` gets each one's mean CPU seconds (user + system: less moved by a busy machine)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        argv = ["hyperfine", "-N", "--warmup", "3", "--runs", str(RUNS), "--style", "none",
                "--export-json", out.name]  # fmt: skip
        for name, cmd in commands.items():
            argv += ["-n", name, " ".join(_quote(c) for c in cmd)]
        subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, cwd=cwd)
        with open(out.name) as f:
            results = json.load(f)["results"]
    if cpu is not None:
        cpu.update({r["command"]: r["user"] + r["system"] for r in results})
    return {r["command"]: r[stat] for r in results}


def _quote(arg: str) -> str:
    return arg if arg and all(c.isalnum() or c in "/._-=" for c in arg) else repr(arg)


def _lines(cmd: list[str], env: dict[str, str], cwd: str | None = None) -> int:
    out = subprocess.run(cmd, capture_output=True, env=env, check=False, timeout=600, cwd=cwd)
    return out.stdout.count(b"\n")


# Run in the repository, as a user does (``cd repo; rootgrep grep ...``): there the daemon of
# the working directory runs the whole grep (``remote_grep``); each beside ``rg --sort path``,
# the order rootgrep prints in (rg then searches on one thread), and plain ``rg``
IN_REPO = (
    ("rare literal", ["getrecursionlimit"]),
    ("common literal", ["return"]),
    ("-c -F", ["-c", "-F", "return"]),
)


def _in_repo_rows(name: str, repo: str, cache: str, env: dict[str, str]) -> list[str]:
    """The ``IN_REPO`` greps run in ``repo`` with its daemon up (rows of the table)."""
    env = {**env, "ROOTGREP_CACHE_DIR": cache}  # (where the command looks for the daemon)
    daemon = _start_daemon(repo, cache, env)
    rows = []
    try:
        for what, args in IN_REPO:
            commands = {
                "rootgrep": [ROOTGREP, "grep", *args],
                "rg --sort path": [RG, "--sort", "path", "-n", *args],
                "rg": [RG, "-n", *args],
            }
            counts = {k: _lines(v, env, repo) for k, v in commands.items()}
            cpu: dict[str, float] = {}
            t = _hyperfine(commands, env, cpu, cwd=repo)
            sort, plain = t["rg --sort path"], t["rg"]
            rows.append(
                f"| {name}: `rootgrep grep {' '.join(args)}` ({what}, {counts['rootgrep']} lines) "
                f"| {_ms(t['rootgrep'])} | `rg --sort path` {_ms(sort)}, `rg` {_ms(plain)} | "
                f"{t['rootgrep'] / sort:.2f}× / {t['rootgrep'] / plain:.2f}× | "
                f"{_ms(cpu['rootgrep'])} (the CLI's alone) vs {_ms(cpu['rg --sort path'])} |"
            )
            if len(set(counts.values())) != 1:
                rows.append(f"| WARNING: lines differ: {counts} | | | | |")
    finally:
        daemon.terminate()
        daemon.wait(30)
        if daemon.stderr is not None:
            daemon.stderr.close()
    return rows


def _start_daemon(tree: str, cache: str, env: dict[str, str]) -> subprocess.Popen[str]:
    cmd = [ROOTGREP, "daemon", tree, "--cache-dir", cache]
    daemon = subprocess.Popen(cmd, env=env, text=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)  # fmt: skip
    assert daemon.stderr is not None
    building = False
    while "watching" not in (line := daemon.stderr.readline()):
        if not line:
            raise SystemExit("the rootgrep daemon exited before it was ready")
        building = building or "grep answered from it now" in line
    # (it answers grep from its build's first commit on: the timings wait for the second,
    # whose parse would share the machine with them)
    while building and not ("(built)" in line or "(failed" in line):
        if not (line := daemon.stderr.readline()):
            raise SystemExit("the rootgrep daemon exited before its build was done")
    return daemon


def _ms(s: float) -> str:
    return f"{s * 1000:.1f} ms"


# One grep's phases, timed inside fresh processes (the CLI's own steps, as
# ``cli.grep_verb.grep`` takes them); the process's start before them is timed apart
# (bare interpreter, then site).
_PHASES = """
import gc, io, os, sys, time
gc.disable()
clock = time.perf_counter
cpu = time.process_time
marks = [(clock(), cpu())]
from rootgrep import cli
from rootgrep.cli import grep_verb as g
from rootgrep.cli.targets import open_target
gc.freeze(); gc.enable()
marks.append((clock(), cpu()))
a = cli.parse_grep_args(sys.argv[1:])
marks.append((clock(), cpu()))
m = g.Matcher(g._query_of(a.args[:1], a, 0, 0))
target = open_target(a.args[1], True, "within")
src = g._Source(a, target, m)
marks.append((clock(), cpu()))
buf = io.BytesIO()
sink = g.Sink(buf, a, 0, True)
sink.target = target
g.run_grep(m, src.batches, sink, join=src.join)
marks.append((clock(), cpu()))
fd = os.open(os.devnull, os.O_WRONLY)
os.write(fd, buf.getvalue())
marks.append((clock(), cpu()))
assert src.kind == "index", src.why
print(*(b[0] - a[0] for a, b in zip(marks, marks[1:])))
print(*(b[1] - a[1] for a, b in zip(marks, marks[1:])))
"""
PHASES = ("imports", "arguments", "index asked (daemon)", "candidates read and matched", "output")


def _breakdown(argv: list[str], env: dict[str, str]) -> list[tuple[str, float, float, float]]:
    """(phase, median, best, median CPU) seconds over RUNS fresh processes: the interpreter's
    start (bare, then site with the editable install's .pth; hyperfine's best and mean CPU),
    then each of the grep's steps (the daemon's own work is wall time here, not CPU)."""
    py = sys.executable
    cpu: dict[str, float] = {}
    best = _hyperfine({"bare": [py, "-I", "-S", "-c", "pass"], "site": [py, "-c", "pass"]}, env,
                      cpu, stat="min")  # fmt: skip
    rows = [("interpreter start (-I -S)", best["bare"], best["bare"], cpu["bare"]),
            ("site, .pth of the editable install", best["site"] - best["bare"],
             best["site"] - best["bare"], cpu["site"] - cpu["bare"])]  # fmt: skip
    runs: list[tuple[list[float], list[float]]] = []
    for _ in range(RUNS):
        out = subprocess.run([py, "-c", _PHASES, *argv], capture_output=True, env=env,
                             check=True, timeout=120)  # fmt: skip
        wall, used = out.stdout.decode().splitlines()
        runs.append(([float(x) for x in wall.split()], [float(x) for x in used.split()]))
    for i, name in enumerate(PHASES):
        col = sorted(r[0][i] for r in runs)
        used_col = sorted(r[1][i] for r in runs)
        rows.append((name, col[len(col) // 2], col[0], used_col[len(used_col) // 2]))
    return rows


def main() -> int:
    if shutil.which("hyperfine") is None:
        print("cli_process: hyperfine is not installed; skipped (apt-get install hyperfine)")
        return 0
    if RG is None:
        print("cli_process: rg is not installed; skipped")
        return 0
    corpus = sysconfig.get_paths()["stdlib"]
    # the package's own modules compiled once: with PYTHONDONTWRITEBYTECODE (set on this
    # machine) every start would otherwise compile them again
    src = Path(__file__).resolve().parent.parent / "src"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=False,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    csearch = shutil.which("csearch") and shutil.which("cindex")
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rootgrep-cli-bench-") as tmp:
        cache = os.path.join(tmp, "cache")
        env = {**os.environ, "CSEARCHINDEX": os.path.join(tmp, "csearchindex")}
        env.pop("RIPGREP_CONFIG_PATH", None)
        env.pop("ROOTGREP_GREP_HERE", None)
        s_repo = os.path.join(tmp, "stdlib")  # S: the standard library without site-packages
        shutil.copytree(corpus, s_repo, symlinks=True,
                        ignore=shutil.ignore_patterns("site-packages", "__pycache__"))  # fmt: skip
        print(f"cli_process: indexing {s_repo} (rootgrep daemon) ...", file=sys.stderr)
        in_repo = _in_repo_rows("S", s_repo, os.path.join(tmp, "cache-s"), env)
        if csearch:
            subprocess.run(["cindex", corpus], env=env, check=True, capture_output=True)
        print(f"cli_process: indexing {corpus} (rootgrep daemon) ...", file=sys.stderr)
        daemon = _start_daemon(corpus, cache, env)
        try:
            mine = [ROOTGREP, "grep", "--cache-dir", cache, PATTERN, corpus]
            stats = subprocess.run([*mine, "--stats"], capture_output=True, env=env, check=False)
            used = [ln for ln in stats.stdout.decode().splitlines() if "searched by" in ln]
            commands = {
                "rootgrep": mine,
                "rootgrep --no-index": [ROOTGREP, "grep", "--no-index", PATTERN, corpus],
                "rg": [RG, PATTERN, corpus],
            }
            if csearch:
                commands["csearch"] = ["csearch", PATTERN]
            counts = {k: _lines(v, env) for k, v in commands.items()}
            cpu: dict[str, float] = {}
            t = _hyperfine(commands, env, cpu)
            phases = _breakdown(["--cache-dir", cache, PATTERN, corpus], env)
        finally:
            daemon.terminate()
            daemon.wait(30)
            if daemon.stderr is not None:
                daemon.stderr.close()
        one = os.path.join(tmp, "one")
        os.mkdir(one)
        Path(one, "a.txt").write_text("hello\n")
        nocache = os.path.join(tmp, "no-cache")
        start = {
            "rootgrep (start-up)": [ROOTGREP, "grep", "--cache-dir", nocache, "hello", one],
            "rg (start-up)": [RG, "hello", one],
        }
        s_cpu: dict[str, float] = {}
        s = _hyperfine(start, env, s_cpu)
    print(f"\n### CLI as a process (hyperfine, median of {RUNS}; {corpus})\n")
    print(f"rootgrep: {used[0].strip() if used else 'no --stats line'}\n")
    print("| work | rootgrep | peer | ratio (wall) | CPU (user + system, means) |")
    print("|---|---|---|---|---|")

    def cpu_ratio(a: str, b: str, peer: str) -> str:
        return f"{_ms(cpu[a])} vs {_ms(cpu[b])}: {cpu[a] / cpu[b]:.2f}× {peer}"

    rare = f"`rootgrep grep {PATTERN} F` ({counts['rootgrep']} lines)"
    if csearch:
        rows.append(f"| {rare} vs `csearch` ({counts['csearch']} lines) | "
                    f"{_ms(t['rootgrep'])} | {_ms(t['csearch'])} | "
                    f"{t['rootgrep'] / t['csearch']:.2f}× csearch (target ≤ 1.5×) | "
                    f"{cpu_ratio('rootgrep', 'csearch', 'csearch')} |")  # fmt: skip
    else:
        rows.append(f"| {rare} vs `csearch` | {_ms(t['rootgrep'])} | skipped: `codesearch` "
                    "is not installed (`apt-get install codesearch`) | — | — |")  # fmt: skip
    rows.append(f"| {rare} vs `rg` ({counts['rg']} lines) | {_ms(t['rootgrep'])} | "
                f"{_ms(t['rg'])} | {t['rootgrep'] / t['rg']:.2f}× rg | "
                f"{cpu_ratio('rootgrep', 'rg', 'rg')} |")  # fmt: skip
    live = "rootgrep --no-index"
    rows.append(f"| `rootgrep grep --no-index` (live) vs `rg` | {_ms(t[live])}"
                f" | {_ms(t['rg'])} | {t[live] / t['rg']:.2f}× rg | "
                f"{cpu_ratio(live, 'rg', 'rg')} |")  # fmt: skip
    su, sr = s["rootgrep (start-up)"], s["rg (start-up)"]
    rows.append(
        f"| start-up: grep of a one-file directory | {_ms(su)} (target ≤ 60 ms) | "
        f"`rg` {_ms(sr)} | {su / sr:.1f}× rg | "
        f"{_ms(s_cpu['rootgrep (start-up)'])} vs {_ms(s_cpu['rg (start-up)'])} |"
    )
    print("\n".join(rows))
    print(
        "\nIn the repository, its daemon running (it runs the whole grep), beside rg, medians;"
        " ratio to `rg --sort path` / to `rg`:\n"
    )
    print("| work | rootgrep | rg | ratio (wall) | CPU (user + system, means) |")
    print("|---|---|---|---|---|")
    print("\n".join(in_repo))
    print(f"\nWhere the rare literal's time goes (fresh processes, median and best of {RUNS}):\n")
    print("| phase | median | best | CPU (median) |")
    print("|---|---|---|---|")
    for name, med, best, used in phases:
        print(f"| {name} | {_ms(med)} | {_ms(best)} | {_ms(used)} |")
    if counts["rootgrep"] != counts["rg"]:
        print(f"\nWARNING: rootgrep printed {counts['rootgrep']} lines, rg {counts['rg']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
