"""Constants and assertions shared by the tests (import as ``from support import ...``)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rootgrep.errors import RootgrepError

MARKER = "SECRET-MARKER-7f3a9c"
# ``make fuzz`` (ROOTGREP_FUZZ=1): the property tests at benchmark length
FUZZ = os.environ.get("ROOTGREP_FUZZ", "") not in ("", "0")


def fuzz_examples(short: int, long: int) -> int:
    """How many examples a property test runs: ``short`` in ``make test``, ``long`` under
    ``make fuzz``."""
    return long if FUZZ else short


BIN = Path(sys.executable).parent
RG = str(BIN / "rg")
ROOTGREP = str(BIN / "rootgrep")


def assert_no_marker(*outputs: object) -> None:
    for out in outputs:
        text = out if isinstance(out, str | bytes) else repr(out)
        if isinstance(text, bytes):
            assert MARKER.encode() not in text
        else:
            assert MARKER not in text


def error_code(fn: object, *args: object, **kwargs: object) -> str:
    """Call ``fn`` and return the SPEC code of the RootgrepError it raises (asserting it does),
    checking that the message never carries the secret."""
    try:
        result = fn(*args, **kwargs)  # type: ignore[operator]
    except RootgrepError as e:
        assert_no_marker(str(e))
        assert str(e).startswith(f"[{e.code}] ")
        return e.code
    assert_no_marker(result)
    raise AssertionError(f"expected an error, got {result!r}")


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def fds_below(top: Path) -> int:
    """How many of this process's fds name something at or beneath ``top`` (unlike
    ``fd_count``, blind to fds other threads of the test process open or close meanwhile)."""
    base = os.fspath(top)
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target == base or target.startswith(base + "/"):
            n += 1
    return n


def flatten_chain(top: Path, name: str, depth: int) -> None:
    """Pull a chain ``top/name/name/.../name`` (``depth`` levels) up one level at a time,
    dropping the files met on the way, so that a shallow delete can finish the job (pytest's
    recursive tmp cleanup would fail on such depths)."""
    for _ in range(depth - 1):
        os.rename(top / name / name, top / ".flat")
        for leftover in os.listdir(top / name):
            os.unlink(top / name / leftover)
        os.rmdir(top / name)
        os.rename(top / ".flat", top / name)


def stop(proc: subprocess.Popen[Any], grace: float = 10.0) -> int:
    """SIGTERM a child process, SIGKILL it if it does not exit within ``grace`` seconds,
    close its pipes; its exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    return proc.returncode


def make_chain(
    top: Path, name: str, depth: int, leaf: str, extra: dict[int, str] | None = None
) -> None:
    """Create ``top/name/.../name/leaf`` (``depth`` levels, an empty file at the bottom),
    fd-relatively: the paths may be far longer than PATH_MAX. ``extra`` puts an empty file
    named ``extra[level]`` at that level on the way."""
    fd = os.open(top, os.O_RDONLY)
    try:
        for level in range(depth):
            os.mkdir(name, dir_fd=fd)
            if extra and level in extra:
                os.close(os.open(extra[level], os.O_CREAT | os.O_WRONLY, dir_fd=fd))
            nfd = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        os.close(os.open(leaf, os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    finally:
        os.close(fd)


def start_daemon(tree: Path, cache: Path) -> subprocess.Popen[str]:
    """``rootgrep daemon TREE`` with its cache in ``cache``, once it says it is watching."""
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(cache)}
    daemon = subprocess.Popen([ROOTGREP, "daemon", str(tree)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert daemon.stderr is not None
    while "watching" not in (line := daemon.stderr.readline()):
        if not line:
            stop(daemon)
            raise AssertionError("the daemon exited")
    return daemon


_OPENAT = {"x86_64": "257", "aarch64": "56"}


def blocked_in_open(tid: int) -> bool:
    """Whether thread ``tid`` of this process sleeps inside open(2) (as a FIFO writer waiting
    for a reader does)."""
    try:
        with open(f"/proc/self/task/{tid}/wchan") as f:
            if f.read().strip() == "wait_for_partner":
                return True
        with open(f"/proc/self/task/{tid}/syscall") as f:
            nr = f.read().split(" ", 1)[0]
    except OSError:
        return False
    return nr == _OPENAT.get(os.uname().machine)


def wait_blocked_in_open(tid: int, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds  # a hang guard, not a threshold
    while not blocked_in_open(tid):
        assert time.monotonic() < deadline, "the thread never blocked in open()"
        time.sleep(0.001)


def checksum(top: Path) -> str:
    """Every name, link target, mode, size and content below ``top`` (links never followed):
    equal before and after means nothing there changed."""
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            h.update(f"{os.path.relpath(p, top)}\0{st.st_mode:o}\0{st.st_size}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(p).encode())
            elif stat.S_ISREG(st.st_mode):
                h.update(Path(p).read_bytes())
    return h.hexdigest()


def rg_matches(cwd: Path, pattern: str, *flags: str) -> list[tuple[str, int]]:
    """ripgrep's matching lines of ``pattern`` beneath ``cwd`` as (path, line number), in
    path order: the oracle the indexed and live greps are checked against."""
    out = subprocess.run([RG, "-n", "--sort", "path", "--no-heading", "--with-filename",
                          *flags, "-e", pattern], cwd=cwd, capture_output=True,
                         check=False).stdout  # fmt: skip
    got = []
    for line in out.splitlines():
        path, n, _ = line.split(b":", 2)
        got.append((path.decode().removeprefix("./"), int(n)))
    return got


def shapes_tree(top: Path, shapes: str, use: str, fillers: int) -> Path:
    """A tree under ``top``: ``src/shapes.py`` (``shapes``, which defines ``Shape``),
    ``src/use.py`` (``use``) and ``fillers`` small files that do not name it."""
    (top / "src").mkdir(parents=True)
    (top / "src" / "shapes.py").write_text(shapes)
    (top / "src" / "use.py").write_text(use)
    for i in range(fillers):
        (top / "src" / f"filler{i}.py").write_text(f"def filler{i}():\n    return {i}\n")
    return top


def listening_port(pid: int, seconds: float = 30.0) -> int:
    """The TCP port process ``pid`` listens on, once it does (a server started with
    ``--port 0``: the kernel chose it, so no other process can take it between a test's
    choice and the server's bind). Found from its socket fds and ``/proc/net/tcp{,6}``; a
    hang guard, not a threshold: a server that never listens fails the test."""
    deadline = time.monotonic() + seconds
    while True:
        inodes = set()
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
        except FileNotFoundError:
            raise AssertionError(f"process {pid} exited before it listened") from None
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(OSError), open(table) as f:
                for row in f.read().splitlines()[1:]:
                    cols = row.split()
                    if cols[3] == "0A" and cols[9] in inodes:  # (0A: LISTEN)
                        return int(cols[1].rsplit(":", 1)[1], 16)
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} did not listen within {seconds} s")
        time.sleep(0.02)


def wait_until(pred: Any, seconds: float = 30.0, what: str = "the condition") -> None:
    """Until ``pred()`` holds (a hang guard, not a threshold: it fails the test only when
    the thing never happens)."""
    deadline = time.monotonic() + seconds
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.03)


@contextlib.contextmanager
def watched(tree: Path, cache: Path, *, built: bool = True) -> Any:
    """``tree`` pinned as an operator root, its index activated (built and watched first,
    unless ``built`` is False: then calls meet the build), and a service over both: yields
    (root, manager, service); all closed after."""
    from rootgrep.index.manager import IndexManager
    from rootgrep.roots import pin_root
    from rootgrep.service import Service, Settings

    r = pin_root(str(tree))
    manager = IndexManager(str(cache))
    try:
        manager.activate(r, 0)
        if built:
            assert manager.wait_built(r.path, 60)
        yield r, manager, Service([r], Settings(), indexes=manager)
    finally:
        manager.close()
        r.close()
