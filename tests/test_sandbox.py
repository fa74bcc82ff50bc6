"""``serve --sandbox`` (sandbox.py, Landlock): the kernel itself holds the line.

Each check runs in a child process (a restriction cannot be undone): a sandboxed server's
test probe (``ROOTGREP_TEST_SANDBOX_PROBE``, opened by plain name once restricted) of a file
outside its roots fails with EACCES, and the same probe without ``--sandbox`` opens it (so
the test can fail); ``sandbox.restrict`` grants exactly its rules (no read, write, listing or
``execve`` elsewhere, the Python prefix included; the network stays open) and refuses a
process with more than one thread; ``--sandbox`` without ``--root`` and a kernel without
Landlock (made so for one process by a seccomp filter: the syscall answers ENOSYS) are
refused in one line, unless ``--sandbox=best-effort``, which warns and serves."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rootgrep.sandbox import abi_version
from support import MARKER

ABI, WHY = abi_version()
needs_landlock = pytest.mark.skipif(ABI == 0, reason=f"no Landlock here: {WHY}")
PROBE = "ROOTGREP_TEST_SANDBOX_PROBE"

# A seccomp filter making landlock_create_ruleset (444) answer ENOSYS, as a kernel without
# Landlock does, installed before the server's interpreter is exec'd (filters survive exec).
NO_LANDLOCK = textwrap.dedent(
    """
    import ctypes, errno, os, sys
    class F(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8),
                    ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]
    class P(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(F))]
    prog = (F * 4)(F(0x20, 0, 0, 0),                       # load the syscall number
                   F(0x15, 0, 1, 444),                     # landlock_create_ruleset?
                   F(0x06, 0, 0, 0x00050000 | errno.ENOSYS),  # then ENOSYS
                   F(0x06, 0, 0, 0x7FFF0000))              # else allow
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0                 # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(P(4, prog)), 0, 0) == 0, ctypes.get_errno()
    os.execv(sys.executable, [sys.executable, "-m", "rootgrep", *sys.argv[1:]])
    """
)


@pytest.fixture
def tree(world: Path) -> Path:
    (world / "cache").mkdir(mode=0o700)
    return world / "root"


def serve(
    world: Path, *args: str, probe: Path | None = None, no_landlock: bool = False
) -> subprocess.CompletedProcess[str]:
    """``rootgrep serve`` over stdio with stdin at EOF: it starts (sandboxed or not), runs
    the probe, and stops once it reads the end of its input."""
    env = {**os.environ, "ROOTGREP_CACHE_DIR": str(world / "cache")}
    env.pop(PROBE, None)
    if probe is not None:
        env[PROBE] = str(probe)
    head = ["-c", NO_LANDLOCK] if no_landlock else ["-m", "rootgrep"]
    return subprocess.run(
        [sys.executable, *head, "serve", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        cwd=str(world),
        timeout=60,  # (hang guard)
    )


def probed(res: subprocess.CompletedProcess[str]) -> str:
    lines = [x for x in res.stderr.splitlines() if x.startswith("rootgrep: sandbox probe: ")]
    assert len(lines) == 1, res.stderr[-3000:]
    assert MARKER not in res.stdout + res.stderr
    return lines[0].removeprefix("rootgrep: sandbox probe: ")


@needs_landlock
def test_a_sandboxed_server_cannot_open_an_outside_file_by_name(world: Path, tree: Path) -> None:
    secret = world / "outside" / "secret.txt"
    res = serve(world, "--root", str(tree), "--sandbox", probe=secret)
    assert res.returncode == 0, res.stderr[-3000:]
    assert probed(res) == "errno EACCES"
    # the same probe without the sandbox opens it: the refusal is the sandbox's
    res = serve(world, "--root", str(tree), probe=secret)
    assert res.returncode == 0, res.stderr[-3000:]
    assert probed(res) == "opened"


@needs_landlock
def test_a_sandboxed_server_reads_beneath_its_roots_and_nothing_else(
    world: Path, tree: Path
) -> None:
    """Inside a root: opened. The Python prefix, a sibling sharing the root's prefix, the
    parent of the root, /etc: refused (a lazy import could not read its module either)."""
    outcomes = {
        tree / "sub" / "b.txt": "opened",
        world / "root-evil" / "x.txt": "errno EACCES",
        world: "errno EACCES",
        Path(os.__file__): "errno EACCES",
        Path("/etc/passwd"): "errno EACCES",
    }
    for path, want in outcomes.items():
        res = serve(world, "--root", str(tree), "--sandbox", "--no-index", probe=path)
        assert (probed(res), res.returncode) == (want, 0), (path, res.stderr[-2000:])


def test_sandbox_without_a_root_is_refused_in_one_line(world: Path) -> None:
    env_roots = os.environ.pop("ROOTGREP_ROOTS", None)
    try:
        res = serve(world, "--sandbox")
    finally:
        if env_roots is not None:
            os.environ["ROOTGREP_ROOTS"] = env_roots
    assert res.returncode == 2
    (line,) = res.stderr.splitlines()
    assert line.startswith("rootgrep: --sandbox needs at least one --root"), line
    assert "client roots outside them could not be served" in line
    assert "pass --root DIR" in line


def test_strict_sandbox_refuses_a_kernel_without_landlock(world: Path, tree: Path) -> None:
    secret = world / "outside" / "secret.txt"
    res = serve(world, "--root", str(tree), "--sandbox", probe=secret, no_landlock=True)
    assert res.returncode == 2, res.stderr[-3000:]
    (line,) = res.stderr.splitlines()
    assert line.startswith("rootgrep: --sandbox: the kernel has no Landlock (ENOSYS"), line
    assert "--sandbox=best-effort" in line
    assert "probe" not in res.stderr  # (it stopped before serving anything)


def test_best_effort_sandbox_warns_and_serves_without_landlock(world: Path, tree: Path) -> None:
    secret = world / "outside" / "secret.txt"
    res = serve(world, "--root", str(tree), "--sandbox=best-effort", probe=secret, no_landlock=True)
    assert res.returncode == 0, res.stderr[-3000:]
    warnings = [x for x in res.stderr.splitlines() if "--sandbox=best-effort" in x]
    assert len(warnings) == 1 and "WITHOUT the sandbox" in warnings[0], res.stderr
    assert "the kernel has no Landlock" in warnings[0]
    assert probed(res) == "opened"  # (no sandbox: the warning told the truth)


@needs_landlock
def test_best_effort_sandbox_restricts_where_landlock_is_there(world: Path, tree: Path) -> None:
    secret = world / "outside" / "secret.txt"
    res = serve(world, "--root", str(tree), "--sandbox=best-effort", probe=secret)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "warning" not in res.stderr
    assert probed(res) == "errno EACCES"


# ---- sandbox.restrict itself, in a child process --------------------------------------------

RESTRICT = textwrap.dedent(
    """
    import errno, os, socket, sys, threading
    from rootgrep import sandbox
    ro, rw, outside = sys.argv[1:4]
    fds = [os.open(ro, os.O_PATH | os.O_DIRECTORY), os.open(rw, os.O_RDONLY | os.O_DIRECTORY)]
    if sys.argv[4] == "thread":
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    try:
        sandbox.restrict([sandbox.Rule(fds[0], sandbox.READ, "ro"),
                          sandbox.Rule(fds[1], sandbox.CACHE, "rw")])
    except sandbox.SandboxError as e:
        print("refused:", e); sys.exit(0)

    def attempt(name, fn):
        try:
            fn(); print(name, "ok")
        except OSError as e:
            print(name, errno.errorcode[e.errno])

    attempt("read-ro", lambda: os.close(os.open(ro + "/f", os.O_RDONLY)))
    attempt("list-ro", lambda: os.listdir(ro))
    attempt("write-ro", lambda: os.close(os.open(ro + "/new", os.O_WRONLY | os.O_CREAT)))
    attempt("append-ro", lambda: os.close(os.open(ro + "/f", os.O_WRONLY | os.O_APPEND)))
    attempt("mkdir-rw", lambda: os.mkdir(rw + "/d"))
    attempt("write-rw", lambda: os.close(os.open(rw + "/d/n", os.O_WRONLY | os.O_CREAT)))
    attempt("rename-rw", lambda: os.rename(rw + "/d/n", rw + "/n2"))
    attempt("truncate-rw", lambda: os.truncate(rw + "/n2", 0))
    attempt("socket-rw", lambda: socket.socket(socket.AF_UNIX).bind(rw + "/s"))
    attempt("read-outside", lambda: os.close(os.open(outside, os.O_RDONLY)))
    attempt("list-outside", lambda: os.listdir(os.path.dirname(outside)))
    attempt("truncate-outside", lambda: os.truncate(outside, 0))
    attempt("read-prefix", lambda: os.close(os.open(os.__file__, os.O_RDONLY)))
    attempt("exec", lambda: os.execv("/bin/true", ["/bin/true"]))
    # a hard link or a rename bringing an outside file beneath a writable rule: refused
    attempt("link-outside-in", lambda: os.link(outside, rw + "/linked"))
    attempt("rename-outside-in", lambda: os.rename(outside, rw + "/renamed"))
    # not governed by Landlock (README: limits): metadata of files outside the rules
    meta = os.path.join(os.path.dirname(outside), "meta.txt")
    attempt("chmod-outside", lambda: os.chmod(meta, 0o600))
    attempt("utime-outside", lambda: os.utime(meta, (0, 0)))
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
    attempt("tcp", lambda: socket.socket().connect(s.getsockname()))
    """
)


def restrict_in_child(world: Path, mode: str) -> dict[str, str]:
    ro, rw = world / "root", world / "rw"
    (ro / "f").write_text("x\n")
    rw.mkdir()
    (world / "outside" / "meta.txt").write_text("metadata only\n")
    out = subprocess.run(
        [sys.executable, "-c", RESTRICT, str(ro), str(rw), str(world / "outside" / "secret.txt"),
         mode], capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    if out.startswith("refused:"):
        return {"refused": out.strip()}
    return dict(line.split(" ", 1) for line in out.splitlines())


@needs_landlock
def test_restrict_grants_exactly_its_rules(world: Path) -> None:
    before = (world / "outside" / "secret.txt").read_text()
    got = restrict_in_child(world, "alone")
    assert got == {
        "read-ro": "ok",
        "list-ro": "ok",
        "write-ro": "EACCES",
        "append-ro": "EACCES",
        "mkdir-rw": "ok",
        "write-rw": "ok",
        "rename-rw": "ok",  # (across directories: REFER)
        "truncate-rw": "ok",
        "socket-rw": "EACCES",  # (only a daemon binds a socket in the cache; serve never)
        "read-outside": "EACCES",
        "list-outside": "EACCES",
        "truncate-outside": "EACCES",
        "read-prefix": "EACCES",
        "exec": "EACCES",
        "link-outside-in": "EXDEV",
        "rename-outside-in": "EACCES",
        "chmod-outside": "ok",  # (a limit of Landlock, said in the README)
        "utime-outside": "ok",
        "tcp": "ok",  # the network is not restricted
    }, got
    assert (world / "outside" / "secret.txt").read_text() == before
    assert not (world / "rw" / "linked").exists() and not (world / "rw" / "renamed").exists()
    assert not (world / "root" / "new").exists()


@needs_landlock
def test_restrict_refuses_a_process_with_another_thread(world: Path) -> None:
    got = restrict_in_child(world, "thread")
    assert got.get("refused", "").startswith(
        "refused: refusing to restrict a process with 2 threads"
    )


# A static x86_64 program (no libc, no ld.so) that opens argv's path, baked in, and exits with
# the errno (or -fd & 0xff when the open succeeds); run from a memfd by fexecve.
MEMFD_EXEC = textwrap.dedent(
    """
    import os, struct, sys
    from rootgrep import sandbox
    path, ro, mode = sys.argv[1].encode(), sys.argv[2], sys.argv[3]
    code = (b"\\x48\\x8d\\x3d" + struct.pack("<i", 22) + b"\\x31\\xf6\\xb8\\x02\\0\\0\\0\\x0f\\x05"
            b"\\x48\\x89\\xc7\\x48\\xf7\\xdf\\xb8\\x3c\\0\\0\\0\\x0f\\x05")  # open(path, 0); exit(-r)
    body = code + path + b"\\0"
    base, eh, ph = 0x400000, 64, 56
    total = eh + ph + len(body)
    elf = (b"\\x7fELF\\x02\\x01\\x01" + bytes(9)
           + struct.pack("<HHIQQQIHHHHHH", 2, 0x3E, 1, base + eh + ph, eh, 0, 0, eh, ph, 1, 0, 0, 0)
           + struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, total, total, 0x1000) + body)
    if mode == "sandboxed":
        fd = os.open(ro, os.O_PATH | os.O_DIRECTORY)
        sandbox.restrict([sandbox.Rule(fd, sandbox.READ, "ro")])
    m = os.memfd_create("prog", 0)
    os.write(m, elf)
    pid = os.fork()
    if pid == 0:
        try:
            os.execve(m, ["prog"], {})
        finally:
            os._exit(255)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """
)


@needs_landlock
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the test program is x86_64 code")
def test_a_program_held_in_memory_runs_but_inside_the_sandbox(world: Path) -> None:
    """The README's limit, pinned: Landlock does not govern memfds, so a static program
    written into one runs by fexecve; it is in the same sandbox (its open of the outside
    file fails with EACCES, where the same program opens it without the sandbox)."""
    secret = world / "outside" / "secret.txt"

    def run(mode: str) -> int:
        out = subprocess.run(
            [sys.executable, "-c", MEMFD_EXEC, str(secret), str(world / "root"), mode],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        return int(out)

    assert run("sandboxed") == 13  # EACCES: it ran, and the kernel refused its open
    assert run("plain") not in (13, 255)  # (it opened the file: -fd & 0xff)


def _open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


@pytest.mark.parametrize("outcome", ["load_fails", "refused", "refused_best_effort", "restricted"])
def test_entering_the_sandbox_closes_its_null_device_fd_on_every_path(
    world: Path, monkeypatch: pytest.MonkeyPatch, outcome: str
) -> None:
    """The ``/dev/null`` rule's fd (opened through confine, the null device itself) is
    closed whether the lazy modules fail to load, the restriction is refused, or it holds.
    In-process: ``restrict`` itself is replaced (a real one cannot be undone), so is the
    load when it is to fail."""
    import argparse
    import stat

    from rootgrep import sandbox
    from rootgrep.cli import serve_verb
    from rootgrep.roots import pin_root

    granted: list[tuple[int, int]] = []

    def restrict(rules: list[sandbox.Rule], min_abi: int) -> int:
        for rule in rules:
            if rule.what == os.devnull:
                st = os.fstat(rule.fd)
                assert stat.S_ISCHR(st.st_mode)
                granted.append((os.major(st.st_rdev), os.minor(st.st_rdev)))
        if outcome.startswith("refused"):
            raise sandbox.SandboxError("landlock_restrict_self failed: (a test)")
        return sandbox.STRICT_MIN_ABI

    def load_fails() -> None:
        raise ImportError("a lazy module failed to load (a test)")

    monkeypatch.setattr(sandbox, "restrict", restrict)
    if outcome == "load_fails":
        monkeypatch.setattr(sandbox, "load_lazy_modules", load_fails)
    else:
        monkeypatch.setattr(sandbox, "load_lazy_modules", lambda: None)
    mode = "best-effort" if outcome == "refused_best_effort" else "strict"
    args = argparse.Namespace(sandbox=mode, allow_write=False)
    root = pin_root(str(world / "root"))
    try:
        before = _open_fds()
        if outcome == "load_fails":
            with pytest.raises(ImportError):
                serve_verb._enter_sandbox(args, [root], None)
            assert granted == []
        elif outcome == "refused":
            with pytest.raises(SystemExit):
                serve_verb._enter_sandbox(args, [root], None)
        else:
            serve_verb._enter_sandbox(args, [root], None)
        assert _open_fds() == before
        if outcome != "load_fails":
            assert granted == [(1, 3)]  # the rule held the null device itself
    finally:
        root.close()


MOUNT_TABLE = textwrap.dedent(
    """
    import os, sys
    from rootgrep import confine, sandbox
    fd = os.open(sys.argv[1], os.O_PATH | os.O_DIRECTORY)
    sandbox.load_lazy_modules()  # (what ``serve --sandbox`` does before it restricts)
    sandbox.restrict([sandbox.Rule(fd, sandbox.READ, "ro")])
    try:
        os.close(os.open("/proc/self/mountinfo", os.O_RDONLY))
        print("by-name ok")
    except OSError as e:
        print("by-name", e.errno)
    generation, mounts = confine.refresh_mounts()
    print("table", confine.open_mount_table(), len(mounts or ()))
    """
)


@needs_landlock
def test_a_sandboxed_process_still_reads_the_mount_table_it_opened_before(world: Path) -> None:
    """Watchers look at the mount table (a mount below a root makes no inotify event); once
    restricted the file cannot be opened, so the sandbox opens it before: else a sandboxed
    server would not follow mounts, silently."""
    out = subprocess.run([sys.executable, "-c", MOUNT_TABLE, str(world / "root")],
                         capture_output=True, text=True, timeout=120, check=True).stdout  # fmt: skip
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    assert lines["by-name"] != "ok"  # (the restriction holds for the file itself)
    opened, count = lines["table"].split()
    assert opened == "True" and int(count) >= 1, out
