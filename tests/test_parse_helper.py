"""A build's second commit shares the tree-sitter parse with a helper process
(``index/parse.py``): the index it makes is the very one a build parsing alone makes, and a
helper that dies, stalls or answers garbage costs the build nothing but time (its chunk is
parsed on the build's thread). No helper outlives its build."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from rootgrep.index import completing
from rootgrep.index import parse as parse_mod
from rootgrep.index.parse import (
    MAX_REPLY,
    ParseHelper,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
    read_frame,
    symbol_fields,
    write_frame,
)
from rootgrep.index.store import RootIndex
from rootgrep.roots import pin_root

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def code_tree(top: Path) -> Path:
    """Real code: a few packages of the standard library (Python), plus a C and a JS file."""
    for name in ("json", "email", "http", "xml/dom", "importlib"):
        shutil.copytree(STDLIB / name, top / name, ignore=shutil.ignore_patterns("__pycache__"))
    (top / "c").mkdir()
    (top / "c" / "x.c").write_text(
        "struct point { int x; };\nint area(struct point p) { return p.x; }\n"
    )
    (top / "c" / "y.js").write_text("class Widget { render() { return 1; } }\n")
    return top


def children() -> list[int]:
    """This process's child processes now (by the kernel's word)."""
    me, out = str(os.getpid()), []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if f"\nPPid:\t{me}\n" in status:
            out.append(int(pid))
    return out


def built(tmp_path: Path, name: str, tree: Path) -> tuple[dict[bytes, Any], bool]:
    """Every file's stored symbols after a build of ``tree`` into its own cache, and whether
    the build had a helper (asserted gone once the build is over)."""
    before = set(children())  # (a test process may have children of its own)
    r = pin_root(str(tree))
    ix = RootIndex(str(tmp_path / name), r.path)
    try:
        ix.sync(r.fs)
        assert ix.complete
        assert set(children()) <= before  # (no helper outlives its build)
        return {p: ix.symbols_of(p) for p in ix.entries}, ix.last_helped
    finally:
        ix.close()
        r.close()


@pytest.fixture
def helped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A helper for every build, however small, and small chunks (many round trips)."""
    monkeypatch.setattr(completing, "HELPER_MIN_BYTES", 0)
    monkeypatch.setattr(parse_mod, "CHUNK_BYTES", 16 * 1024)
    monkeypatch.delenv("ROOTGREP_PARSE_HELPER", raising=False)


def test_a_helped_build_stores_the_very_symbols_of_a_build_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helped: None
) -> None:
    tree = code_tree(tmp_path / "tree")
    with_helper, used = built(tmp_path, "helped", tree)
    assert used
    monkeypatch.setenv("ROOTGREP_PARSE_HELPER", "0")
    alone, used = built(tmp_path, "alone", tree)
    assert not used
    assert with_helper == alone
    assert sum(1 for s in alone.values() if s) > 50  # (real definitions, many files)
    assert [s.name for s in alone[b"c/x.c"]] == ["point", "area"]


@pytest.mark.parametrize("failure", ["killed", "stalls", "garbage", "too-long", "no-executable"])
def test_a_helper_that_fails_costs_the_build_nothing_but_time(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    helped: None,
    failure: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tree = code_tree(tmp_path / "tree")
    monkeypatch.setenv("ROOTGREP_PARSE_HELPER", "0")
    alone, _ = built(tmp_path, "alone", tree)
    monkeypatch.delenv("ROOTGREP_PARSE_HELPER")
    fake = {  # a helper program that fails as named, in place of the real one
        "stalls": "import sys, time; sys.stdin.buffer.read(1); time.sleep(3600)",
        "garbage": "import os, sys; os.read(0, 1); os.write(1, b'\\x05' + bytes(7) + b'junk!'); sys.stdin.buffer.read()",
        "too-long": f"import os, struct, sys; os.read(0, 1); os.write(1, struct.pack('<Q', {MAX_REPLY + 1})); sys.stdin.buffer.read()",
    }.get(failure)
    if fake is not None:
        import subprocess

        def start(cls: type[ParseHelper]) -> ParseHelper:
            proc = subprocess.Popen(
                [sys.executable, "-c", fake], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            return cls(proc)

        monkeypatch.setattr(ParseHelper, "start", classmethod(start))
        monkeypatch.setattr(parse_mod, "REPLY_SECONDS", 1.0)
    elif failure == "killed":
        real_send = ParseHelper.send

        def send(self: ParseHelper, files: list[tuple[bytes, bytes]]) -> None:
            real_send(self, files)
            os.kill(self.proc.pid, signal.SIGKILL)  # (dies with a request in flight)

        monkeypatch.setattr(ParseHelper, "send", send)
    else:
        monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    with caplog.at_level("WARNING", logger="rootgrep.index"):
        got, used = built(tmp_path, "failed", tree)  # (a stalled helper given up after 1 s
    assert used == (failure != "no-executable")  # here: without the deadline, the build
    assert got == alone  # would wait its hour, and the suite's time-out fail it)
    if failure != "no-executable":  # (a lying helper is noticed by its answer, or by the
        # next request once it stopped reading: either way it is lost)
        assert "the parse helper is lost" in caplog.text
    if failure == "stalls":
        assert "stalled" in caplog.text


def test_the_wire_refuses_what_it_did_not_ask_for(tmp_path: Path) -> None:
    files = [(b"a.py", b"def f():\n    pass\n"), (b"b/c.js", b"function g() {}\n")]
    assert decode_request(encode_request(files)) == files
    fields = [symbol_fields(rel, data) for rel, data in files]
    assert fields[0][0] == ["f"] and fields[1][0] == ["g"]
    reply = encode_reply(fields)
    assert decode_reply(reply, 2) == fields
    for bad in (reply[:-1], reply + b"x", reply[:5]):
        with pytest.raises(ValueError):
            decode_reply(bad, 2)
    with pytest.raises(ValueError):
        decode_reply(reply, 3)  # (another number of files than asked)
    r, w = os.pipe()
    write_frame(w, b"x" * 100)
    with pytest.raises(ValueError):
        read_frame(r, 99)  # (refused on its length, before its bytes are read)
    os.close(r)
    os.close(w)
    r, w = os.pipe()
    os.close(w)
    assert read_frame(r, 1000) is None  # (the input ended between frames)
    os.close(r)
    r, w = os.pipe()
    os.write(w, (10).to_bytes(8, "little") + b"12345")
    os.close(w)
    with pytest.raises(ValueError):
        read_frame(r, 1000)  # (ended inside a frame)
    os.close(r)


def test_a_helper_gets_none_of_the_servers_environment_but_what_it_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bearer token's variable (``serve --auth-token-env``), or any other, stays with the
    server: the helper is started with PATH and the locale only (and isolated, ``-I``)."""
    from support import MARKER

    monkeypatch.setenv("ROOTGREP_TOKEN", MARKER)
    monkeypatch.delenv("ROOTGREP_PARSE_HELPER", raising=False)
    helper = ParseHelper.start()
    assert helper is not None
    try:
        helper.send([(b"a.py", b"def f():\n    pass\n")])
        assert helper.receive() == [(["f"], symbol_fields(b"a.py", b"def f():\n    pass\n")[1])]
        # (read once it has answered: right after its start, the kernel may not have set up
        # its environment yet, and /proc says nothing of it)
        environ = Path(f"/proc/{helper.proc.pid}/environ").read_bytes()
        assert MARKER.encode() not in environ and b"PATH=" in environ
        assert b"PYTHONPATH=" not in environ
    finally:
        helper.close()
    assert helper.proc.poll() is not None


def test_a_helped_build_works_with_the_helpers_fds_over_1023(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helped: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by review: the helper's pipes were waited on with ``select``, which refuses an
    fd over 1023: in a process holding that many (a server with many roots and clients),
    every build of a large tree failed."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard fd limit is {hard}")
    if soft != resource.RLIM_INFINITY and soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    try:
        tree = code_tree(tmp_path / "tree")
        with caplog.at_level("WARNING", logger="rootgrep.index"):
            got, used = built(tmp_path, "many-fds", tree)
        assert used and "lost" not in caplog.text  # (it parsed: not given up)
    finally:
        for fd in held:
            os.close(fd)
        if soft != resource.RLIM_INFINITY and soft < 1200:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    monkeypatch.setenv("ROOTGREP_PARSE_HELPER", "0")
    assert got == built(tmp_path, "alone", tree)[0]


def test_many_tiny_files_with_long_paths_keep_requests_and_the_queue_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helped: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by review: a chunk was closed by its text alone, so thousands of tiny files with
    long paths made a request past the helper's limit (the helper was lost) and held a queue
    as long as the tree."""
    tree = tmp_path / "tree"
    deep = tree.joinpath(*["d" * 60] * 3)
    deep.mkdir(parents=True)
    for i in range(3000):
        (deep / f"{'n' * 80}_{i}.py").write_text(f"x{i}=1\n")
    sizes: list[int] = []
    real_send = ParseHelper.send

    def send(self: ParseHelper, files: list[tuple[bytes, bytes]]) -> None:
        sizes.append(len(encode_request(files)))
        real_send(self, files)

    monkeypatch.setattr(ParseHelper, "send", send)
    longest = {"queue": 0}
    real_add = parse_mod.SharedParse.add

    def add(self: Any, item: Any, rel: bytes, data: bytes) -> None:
        real_add(self, item, rel, data)
        longest["queue"] = max(longest["queue"], len(self.queue))

    monkeypatch.setattr(parse_mod.SharedParse, "add", add)
    with caplog.at_level("WARNING", logger="rootgrep.index"):
        got, used = built(tmp_path, "tiny", tree)
    assert used and sizes and "lost" not in caplog.text
    chunk = parse_mod.CHUNK_BYTES  # (16 KiB here)
    assert max(sizes) <= chunk + 4096  # (one file's weight past the chunk at most)
    assert longest["queue"] <= 2 * chunk // parse_mod.FILE_WEIGHT + 2
    assert sum(1 for s in got.values() if s) == 3000


def test_a_helper_whose_build_goes_away_ends_quietly(tmp_path: Path) -> None:
    """Found by review: a helper answering a build that had closed its pipes (Ctrl-C, a
    cancel) printed a BrokenPipeError traceback on the user's terminal."""
    import subprocess

    for _ in range(3):
        p = subprocess.Popen(parse_mod.helper_command(), env=parse_mod.helper_environment(),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        assert p.stdin is not None and p.stdout is not None and p.stderr is not None
        files = [(f"f{i}.py".encode(), b"def f():\n    pass\n" * 200) for i in range(50)]
        write_frame(p.stdin.fileno(), encode_request(files))
        p.stdout.close()  # (gone before the answer is written)
        p.stdin.close()
        assert p.wait(30) == 0
        assert p.stderr.read() == b""
        p.stderr.close()
