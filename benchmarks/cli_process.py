"""Whole-process timings of the ``rootgrep grep`` CLI beside ``csearch`` and ``rg`` (hyperfine).

Usage: ``python benchmarks/cli_process.py`` (``make bench`` runs it after the pytest
benchmarks). On F, the interpreter's library folder, with the index ready (a ``rootgrep daemon``
keeps it fresh in a temporary cache; ``cindex`` builds ``csearch``'s index in a temporary file):
``rootgrep grep getrecursionlimit F`` against ``csearch getrecursionlimit`` and
``rg getrecursionlimit F`` (and rootgrep's own live scan, ``--no-index``); then start-up: a grep
of a one-file directory against ``rg``. Prints a Markdown table with medians and ratios.
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


def _hyperfine(commands: dict[str, list[str]], env: dict[str, str]) -> dict[str, float]:
    """Median seconds of each command (hyperfine -N: no shell in between)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        argv = ["hyperfine", "-N", "--warmup", "3", "--runs", str(RUNS), "--style", "none",
                "--export-json", out.name]  # fmt: skip
        for name, cmd in commands.items():
            argv += ["-n", name, " ".join(_quote(c) for c in cmd)]
        subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)
        with open(out.name) as f:
            results = json.load(f)["results"]
    return {r["command"]: r["median"] for r in results}


def _quote(arg: str) -> str:
    return arg if arg and all(c.isalnum() or c in "/._-=" for c in arg) else repr(arg)


def _lines(cmd: list[str], env: dict[str, str]) -> int:
    out = subprocess.run(cmd, capture_output=True, env=env, check=False, timeout=600)
    return out.stdout.count(b"\n")


def _start_daemon(tree: str, cache: str, env: dict[str, str]) -> subprocess.Popen[str]:
    cmd = [ROOTGREP, "daemon", tree, "--cache-dir", cache]
    daemon = subprocess.Popen(cmd, env=env, text=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)  # fmt: skip
    assert daemon.stderr is not None
    while "watching" not in (line := daemon.stderr.readline()):
        if not line:
            raise SystemExit("the rootgrep daemon exited before it was ready")
    return daemon


def _ms(s: float) -> str:
    return f"{s * 1000:.1f} ms"


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
            t = _hyperfine(commands, env)
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
        s = _hyperfine(start, env)
    print(f"\n### CLI as a process (hyperfine, median of {RUNS}; {corpus})\n")
    print(f"rootgrep: {used[0].strip() if used else 'no --stats line'}\n")
    print("| work | rootgrep | peer | ratio |")
    print("|---|---|---|---|")
    rare = f"`rootgrep grep {PATTERN} F` ({counts['rootgrep']} lines)"
    if csearch:
        rows.append(f"| {rare} vs `csearch` ({counts['csearch']} lines) | "
                    f"{_ms(t['rootgrep'])} | {_ms(t['csearch'])} | "
                    f"{t['rootgrep'] / t['csearch']:.2f}× csearch (target ≤ 1.5×) |")  # fmt: skip
    else:
        rows.append(f"| {rare} vs `csearch` | {_ms(t['rootgrep'])} | skipped: `codesearch` "
                    "is not installed (`apt-get install codesearch`) | — |")  # fmt: skip
    rows.append(f"| {rare} vs `rg` ({counts['rg']} lines) | {_ms(t['rootgrep'])} | "
                f"{_ms(t['rg'])} | {t['rootgrep'] / t['rg']:.2f}× rg |")  # fmt: skip
    rows.append(f"| `rootgrep grep --no-index` (live) vs `rg` | {_ms(t['rootgrep --no-index'])}"
                f" | {_ms(t['rg'])} | {t['rootgrep --no-index'] / t['rg']:.2f}× rg |")  # fmt: skip
    su, sr = s["rootgrep (start-up)"], s["rg (start-up)"]
    rows.append(f"| start-up: grep of a one-file directory | {_ms(su)} (target ≤ 60 ms) | "
                f"`rg` {_ms(sr)} | {su / sr:.1f}× rg |")  # fmt: skip
    print("\n".join(rows))
    if counts["rootgrep"] != counts["rg"]:
        print(f"\nWARNING: rootgrep printed {counts['rootgrep']} lines, rg {counts['rg']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
