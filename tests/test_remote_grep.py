"""``rootgrep grep`` run whole by the daemon of its working directory (``remote_grep``,
``cli.served_grep``): the same bytes, stderr and status as the grep run here, edits seen at
once, a decline (and a local run) for what the daemon does not answer exactly, nothing opened
outside the daemon's root, and a CLI that stops reading holding one run, not the daemon."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootgrep.index import run_wire
from support import MARKER, RG, ROOTGREP, stop
from test_cli_index import WORD
from test_cli_index import make_tree as cli_index_tree

ENV = {
    k: v for k, v in os.environ.items() if k not in ("RIPGREP_CONFIG_PATH", "ROOTGREP_GREP_HERE")
}
# what ``run_by_daemon`` did, in a fresh process at a working directory: the status, or
# None (declined, or no daemon); the output the daemon sent goes to this process's fds
ASK = (
    "import os, sys\n"
    "from rootgrep import remote_grep\n"
    "from rootgrep.remote_grep import run_by_daemon\n"
    "remote_grep.CONNECT_SECONDS = float(os.environ.get('ASK_CONNECT_SECONDS', '5'))\n"
    "status = run_by_daemon(sys.argv[1:])\n"
    "os.write(int(os.environ['ASK_FD']), repr(status).encode())\n"
)


def make_tree(root: Path) -> Path:
    """``test_cli_index``'s tree, with an odd name, a file of 40,000 matching lines and a
    link out of it to a secret."""
    tree = cli_index_tree(root)
    (tree / "odd name ü.py").write_text(f"{WORD} = 'odd'\n")
    (tree / "many.txt").write_text("".join(f"line {i} {WORD}\n" for i in range(40_000)))
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{MARKER} {WORD}\n")
    (tree / "out").symlink_to(outside)
    return tree


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, Path, subprocess.Popen[str]]]:
    yield from _served(tmp_path)


@pytest.fixture(scope="module")
def served_unchanged(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, Path, subprocess.Popen[str]]]:
    """``served``, one daemon for the tests that change nothing in its tree."""
    yield from _served(tmp_path_factory.mktemp("served"))


def _served(tmp_path: Path) -> Iterator[tuple[Path, Path, subprocess.Popen[str]]]:
    tree = make_tree(tmp_path)
    cache = tmp_path / "cache"
    daemon = subprocess.Popen(
        [ROOTGREP, "daemon", str(tree)], env={**ENV, "ROOTGREP_CACHE_DIR": str(cache)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert daemon.stderr is not None
    while "watching" not in (line := daemon.stderr.readline()):
        if not line:
            raise AssertionError("the daemon exited")
    yield tree, cache, daemon
    assert stop(daemon, 15) == 0


def asked(
    cache: Path, cwd: Path, *args: str, connect_seconds: float = 5.0
) -> tuple[object, bytes, bytes]:
    """(what ``run_by_daemon`` returned, its stdout, its stderr) at ``cwd``."""
    r, w = os.pipe()
    try:
        out = subprocess.run(
            [sys.executable, "-c", ASK, *args], cwd=cwd, capture_output=True, pass_fds=(w,),
            env={**ENV, "ROOTGREP_CACHE_DIR": str(cache), "ASK_FD": str(w),
                 "ASK_CONNECT_SECONDS": str(connect_seconds)}, timeout=60,
            check=False,
        )  # fmt: skip
        os.close(w)
        w = -1
        said = os.read(r, 100).decode()
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert out.returncode == 0, out.stderr
    return eval(said), out.stdout, out.stderr  # (an int or None)


def cli(cache: Path, cwd: Path, *args: str, here: bool = False) -> tuple[bytes, bytes, int]:
    env = {**ENV, "ROOTGREP_CACHE_DIR": str(cache), **({"ROOTGREP_GREP_HERE": "1"} if here else {})}
    out = subprocess.run([ROOTGREP, "grep", *args], cwd=cwd, capture_output=True, env=env,
                         timeout=60, check=False)  # fmt: skip
    return out.stdout, out.stderr, out.returncode


RUN_BY_THE_DAEMON = [
    [WORD],
    ["-i", WORD],
    ["-w", "-F", WORD],
    ["-c", WORD],
    ["-l", WORD],
    ["-o", r"frob\w+"],
    ["-A", "1", "-B", "1", "call"],
    ["-m", "2", WORD],
    ["-g", "*.py", WORD],
    ["-t", "py", WORD],
    ["--json", WORD],
    ["-M", "5", WORD],
    ["-e", WORD, "-e", "return"],
    ["nothing matches this"],
    [WORD, "pkg"],
    [WORD, "./pkg/", "."],
]


@pytest.mark.parametrize("args", RUN_BY_THE_DAEMON, ids=" ".join)
def test_the_daemon_prints_what_a_grep_here_prints(served_unchanged, args: list[str]) -> None:  # type: ignore[no-untyped-def]
    tree, cache, _ = served_unchanged
    status, out, err = asked(cache, tree, *args)
    assert status is not None, err  # the daemon ran it
    here = cli(cache, tree, *args, here=True)
    assert (out, err, status) == here
    assert cli(cache, tree, *args) == here  # (the command itself: the same)
    assert MARKER.encode() not in out + err


def test_a_grep_from_below_the_root_and_rg_agree(served_unchanged) -> None:  # type: ignore[no-untyped-def]
    tree, cache, _ = served_unchanged
    status, out, err = asked(cache, tree / "pkg", WORD)
    assert status == 0, err
    rg = subprocess.run([RG, "-n", "--sort", "path", WORD], cwd=tree / "pkg", capture_output=True,
                        env=ENV, check=False).stdout  # fmt: skip
    assert out == rg and out.startswith(b"c.py:2:# call frobnicate_widget later\n")
    assert b"sub/d.txt:2:frobnicate_widget\n" in out and b"skip.log" not in out


def test_edits_are_seen_at_once(served) -> None:  # type: ignore[no-untyped-def]
    tree, cache, _ = served
    (tree / "b.py").write_text(f"now {WORD} is here\n")
    (tree / "a.py").unlink()
    (tree / "pkg" / "new.py").write_text(f"import {WORD}\n")
    status, out, _ = asked(cache, tree, "-l", WORD)
    assert status == 0
    assert out.split(b"\n") == [b"b.py", b"many.txt", b"odd name \xc3\xbc.py", b"pkg/c.py",
                                b"pkg/gone.py", b"pkg/new.py", b"pkg/sub/d.txt", b""]  # fmt: skip


DECLINED = [
    ["-v", WORD],  # (any file may hold a line without a match)
    ["--hidden", WORD],
    ["-u", WORD],
    ["--no-index", WORD],
    ["--stats", WORD],
    ["--files"],
    [WORD, "a.py"],  # a file PATH
    [WORD, "out"],  # a link out of the root
    [WORD, "pkg/../out"],
    [WORD, "../outside"],  # outside the root
    [WORD, "no-such-dir"],
    ["bad(regex"],
    ["--no-such-flag", WORD],
]


@pytest.mark.parametrize("args", DECLINED, ids=" ".join)
def test_what_the_daemon_does_not_answer_exactly_is_run_here(
    served_unchanged, args: list[str]
) -> None:  # type: ignore[no-untyped-def]
    tree, cache, _ = served_unchanged
    status, out, err = asked(cache, tree, *args)
    assert (status, out, err) == (None, b"", b"")  # declined before it wrote a byte
    # and the command runs it here: the same as it runs without any daemon (--stats's last
    # line: the seconds it took)
    assert untimed(cli(cache, tree, *args)) == untimed(cli(cache, tree, *args, here=True))


def untimed(run: tuple[bytes, bytes, int]) -> tuple[bytes, bytes, int]:
    out, err, status = run
    lines = out.split(b"\n")
    if len(lines) > 1 and lines[-2].endswith(b" seconds"):
        out = b"\n".join(lines[:-2])
    return out, err, status


def test_no_daemon_or_a_dead_socket_is_no_answer(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    assert asked(tmp_path / "no-cache", tree, WORD) == (None, b"", b"")
    # a socket file no daemon listens on any more (one that was killed)
    from rootgrep.index.names import SOCKET_NAME, folder_name

    folder = tmp_path / "cache" / folder_name(os.fsencode(tree))
    folder.mkdir(parents=True)
    # (bound by its name in the folder: the whole path is longer than a socket's may be)
    bind = f"import socket; s = socket.socket(socket.AF_UNIX); s.bind({SOCKET_NAME!r})"
    subprocess.run([sys.executable, "-c", bind], cwd=folder, check=True)
    assert (folder / SOCKET_NAME).is_socket()
    assert asked(tmp_path / "cache", tree, WORD) == (None, b"", b"")


@pytest.mark.parametrize("planted", ["folder link", "socket link", "cache writable by others"])
def test_a_socket_planted_in_the_cache_dir_is_not_asked(tmp_path: Path, planted: str) -> None:
    """The root's index folder, or its socket, a symlink to a listening socket elsewhere; or
    a real socket in a cache dir that group or others may write in (which the index refuses):
    the CLI does not connect to it (it runs the grep here), so what that socket would answer
    never reaches the output."""
    import socket
    import threading

    from rootgrep.index.names import SOCKET_NAME, folder_name

    tree = make_tree(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    folder = cache / folder_name(os.fsencode(tree))
    elsewhere = folder if planted == "cache writable by others" else tmp_path / "elsewhere"
    elsewhere.mkdir()
    dfd = os.open(elsewhere, os.O_PATH | os.O_DIRECTORY)
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(f"/proc/self/fd/{dfd}/{SOCKET_NAME}")  # (a path short enough to bind)
    finally:
        os.close(dfd)
    listener.listen(4)
    listener.settimeout(0.2)
    accepted: list[int] = []
    done = threading.Event()

    def answer() -> None:  # what a planted "daemon" would print
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            with conn:
                conn.recv(1 << 16)
                conn.sendall(run_wire.frame(run_wire.OUT, b"")
                             + run_wire.frame(run_wire.OUT, MARKER.encode() + b"\n")
                             + run_wire.frame(run_wire.EXIT, b"0"))  # fmt: skip

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    if planted == "folder link":
        folder.symlink_to(elsewhere)
    elif planted == "socket link":
        folder.mkdir()
        (folder / SOCKET_NAME).symlink_to(elsewhere / SOCKET_NAME)
    else:
        cache.chmod(0o770)
    try:
        assert asked(cache, tree, WORD) == (None, b"", b"")
        if planted != "cache writable by others":  # (then the index refuses the cache: said)
            out, err, _status = cli(cache, tree, WORD)
            assert MARKER.encode() not in out + err
            assert (out, err) == cli(cache, tree, WORD, here=True)[:2]
        assert not accepted
    finally:
        done.set()
        thread.join()
        listener.close()


def test_a_cli_that_stops_reading_holds_one_run_and_not_the_daemon(served) -> None:  # type: ignore[no-untyped-def]
    """Greps whose readers stop (a pager) each hold one of the daemon's run threads; the
    daemon goes on answering, one over ``MAX_RUNS`` is declined (and run here, right), and
    once those readers are gone the daemon runs greps again."""
    from rootgrep.index.freshness import MAX_RUNS

    tree, cache, _ = served
    env = {**ENV, "ROOTGREP_CACHE_DIR": str(cache)}
    stalled = [
        subprocess.Popen(
            [ROOTGREP, "grep", WORD],
            cwd=tree,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(MAX_RUNS)
    ]
    try:
        time.sleep(2.0)  # (each has filled its pipe and its socket: 40,000 lines)
        assert all(p.poll() is None for p in stalled)
        status, out, err = asked(cache, tree, "-c", WORD)
        assert (status, out, err) == (None, b"", b"")  # busy: declined
        assert cli(cache, tree, "-c", WORD) == cli(cache, tree, "-c", WORD, here=True)
    finally:
        for p in stalled:
            p.send_signal(signal.SIGKILL)
            p.wait()
            for f in (p.stdout, p.stderr):
                if f is not None:
                    f.close()
    deadline = time.monotonic() + 10
    while (got := asked(cache, tree, "-c", WORD))[0] is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert got[0] == 0 and got[1] == cli(cache, tree, "-c", WORD, here=True)[0]


def test_a_reader_gone_mid_answer_stops_quietly(served) -> None:  # type: ignore[no-untyped-def]
    """``rootgrep grep ... | head -1``: the first line, status 0 and nothing on stderr, as
    rg; the daemon's run ends (it answers the next one)."""
    tree, cache, _ = served
    out = subprocess.run(f"{ROOTGREP} grep {WORD} | head -1", shell=True, cwd=tree, capture_output=True,
                         env={**ENV, "ROOTGREP_CACHE_DIR": str(cache)}, timeout=60, check=False)  # fmt: skip
    assert out.stdout == f"a.py:1:def {WORD}():\n".encode() and out.stderr == b""
    assert asked(cache, tree, "-l", "return")[0] == 0


def test_a_run_that_says_nothing_for_long_is_waited_for(served) -> None:  # type: ignore[no-untyped-def]
    """The daemon says at once that it runs the grep (an empty frame); from then on the CLI
    waits as long as the grep takes, however long it says nothing (-c over a large tree):
    it is not given up and run again here, twice the work (seen with the wait until the
    first output bounded by the connect time-out)."""
    tree, cache, _ = served
    # (half a million matches counted one by one: its scan far outlasts a 0.1 s wait, and no
    # output comes before the end)
    args = ("-c", "-o", r"\w\w")
    status, out, err = asked(cache, tree, *args, connect_seconds=0.1)
    assert status == 0 and (out, err, status) == cli(cache, tree, *args, here=True)


def test_help_and_usage_errors_print_nothing_in_the_daemon(tmp_path: Path) -> None:
    """A CLI's ``--help`` or bad flag is declined and said by the CLI; the daemon's own
    stdout and stderr get none of it (a daemon whose stdout nobody reads would block)."""
    tree = make_tree(tmp_path)
    cache = tmp_path / "cache"
    out_path, err_path = tmp_path / "daemon.out", tmp_path / "daemon.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        daemon = subprocess.Popen([ROOTGREP, "daemon", str(tree)], stdout=out, stderr=err,
                                  env={**ENV, "ROOTGREP_CACHE_DIR": str(cache)})  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while b"watching" not in err_path.read_bytes():
            assert time.monotonic() < deadline and daemon.poll() is None
            time.sleep(0.05)
        for args in (["--help"], ["-x", WORD], ["--threads", "many", WORD]):
            assert asked(cache, tree, *args) == (None, b"", b"")
            here = cli(cache, tree, *args)
            assert here == cli(cache, tree, *args, here=True) and (here[0] + here[1])
    finally:
        assert stop(daemon, 15) == 0
    said = out_path.read_bytes() + err_path.read_bytes()
    assert b"usage:" not in said and b"unrecognized" not in said and b"invalid int" not in said


def test_a_write_error_here_is_said_as_a_grep_here_says_it(served) -> None:  # type: ignore[no-untyped-def]
    """stdout on a full device: the error is this process's, said in a local grep's words
    (not blamed on the daemon)."""
    tree, cache, _ = served
    env = {**ENV, "ROOTGREP_CACHE_DIR": str(cache)}

    def full(here: bool) -> tuple[bytes, int]:
        with open("/dev/full", "wb") as dev:
            out = subprocess.run([ROOTGREP, "grep", WORD], cwd=tree, stdout=dev,
                                 stderr=subprocess.PIPE, timeout=60, check=False,
                                 env={**env, **({"ROOTGREP_GREP_HERE": "1"} if here else {})})  # fmt: skip
        return out.stderr, out.returncode

    assert asked(cache, tree, WORD)[0] == 0  # (the daemon runs this one)
    assert full(False) == full(True) == (b"rootgrep: [error] No space left on device\n", 2)


# -- the wire ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv", [[], ["-e", "a b\nc"], ["\udcff\udc80", "ü", "--", "-x"], ["x" * 10_000]]
)
def test_a_run_request_reads_back(argv: list[str]) -> None:
    line = run_wire.run_request("/w/odd dir", argv)
    assert line.endswith(b"\n") and b"\n" not in line[:-1]
    assert run_wire.is_run_request(line)
    assert run_wire.parse_run_request(line[:-1]) == ("/w/odd dir", argv)


@pytest.mark.parametrize(
    "line",
    [b"run 2 Lw==", b"run 3", b"run 3 !!!", b"run 3 " + run_wire._b64("relative"), b"2 x y"],
)
def test_a_run_request_of_another_version_or_garbage_is_refused(line: bytes) -> None:
    with pytest.raises(ValueError):
        run_wire.parse_run_request(line)


def test_frames_are_taken_whole_from_a_stream_cut_anywhere() -> None:
    stream = b"".join(run_wire.frame(k, p) for k, p in
                      [(b"o", b"abc"), (b"e", b""), (b"o", b"x" * 70), (b"x", b"1")])  # fmt: skip
    for cut in range(len(stream) + 1):
        buf, got = bytearray(stream[:cut]), []
        got += run_wire.frames(buf)
        buf += stream[cut:]
        got += run_wire.frames(buf)
        assert got == [(b"o", b"abc"), (b"e", b""), (b"o", b"x" * 70), (b"x", b"1")]
        assert buf == b""
    with pytest.raises(ValueError):
        run_wire.frames(bytearray(b"z\0\0\0\1a"))
    with pytest.raises(ValueError):
        run_wire.frames(bytearray(b"o\1\0\0\0"))


def test_greps_asked_while_the_daemon_builds_are_exact(tmp_path: Path) -> None:
    """What a user does: start ``rootgrep daemon`` and grep at once, while its first build
    runs, an edit landing meanwhile. Each grep the daemon takes prints what a grep here
    prints; one it declines (its index not ready) runs here, the same bytes; once it
    watches, it takes them."""
    tree = make_tree(tmp_path)
    bulk = tree / "bulk"
    bulk.mkdir()
    for i in range(1_500):  # (a build of a few seconds: greps land inside it)
        lines = [f"value_{i}_{j} = {j}\n" for j in range(120)]
        if i % 50 == 0:
            lines[i % 120] = f"{WORD}({i})\n"
        (bulk / f"m{i:04}.py").write_text("".join(lines))
    cache = tmp_path / "cache"
    err_path = tmp_path / "daemon.err"
    with open(err_path, "wb") as err_file:
        daemon = subprocess.Popen([ROOTGREP, "daemon", str(tree)], stdout=subprocess.DEVNULL,
                                  stderr=err_file, env={**ENV, "ROOTGREP_CACHE_DIR": str(cache)})  # fmt: skip
    try:
        during = 0  # (greps asked between "building" and "ready (built)")
        deadline = time.monotonic() + 120  # (a hang guard)
        while b"ready" not in (said := err_path.read_bytes()):
            assert time.monotonic() < deadline and daemon.poll() is None, said
            building = b"building" in said
            if during >= 4:  # (enough asked mid-build: the rest of it waited out)
                time.sleep(0.05)
                continue
            if during == 1:  # (an edit while it builds)
                (bulk / "m0001.py").write_text(f"{WORD} = 'edited during the build'\n")
            status, out, err = asked(cache, tree, WORD)
            here = cli(cache, tree, WORD, here=True)
            if status is None:  # declined: the command runs it here
                assert (out, err) == (b"", b"") and cli(cache, tree, WORD) == here
            else:
                assert (out, err, status) == here
            during += building and b"ready" not in err_path.read_bytes()
        assert during > 1, err_path.read_bytes()  # (the greps did come while it built)
        status, out, err = asked(cache, tree, WORD)
        assert status == 0 and (out, err, status) == cli(cache, tree, WORD, here=True)
        assert b"bulk/m0001.py:1:" in out and MARKER.encode() not in out + err
    finally:
        assert stop(daemon, 15) == 0
