"""The daemon's wire (``index.freshness``): a request and an answer header are lines of words
that read back to what was sent, whatever the pattern holds; a line of another version is
refused, and the asker then scans live."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rootgrep.index.freshness import (
    PROTOCOL,
    _answer_line,
    _b64,
    _kept_line,
    _parse_answer,
    _parse_kept,
    _parse_request,
    _parse_sync_request,
    _request_line,
    _sync_request_line,
)

PATTERNS = ["getrecursionlimit", "a b\nc\td", "ünïcødé ✓", "\udcff raw byte", "", " ", "=\0"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_request_reads_back_as_it_was_sent(pattern: str) -> None:
    request = {"v": PROTOCOL, "root": _b64(b"/srv/a b"), "place": _b64(b"lib/\xff sub"),
               "dev": 2049, "ino": 1 << 40, "q": {"pattern": pattern, "regex": True,
                                                   "case_sensitive": False}}  # fmt: skip
    line = _request_line(request)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert _parse_request(line[:-1]) == request
    flipped = {**request, "q": {"pattern": pattern, "regex": False, "case_sensitive": True}}
    assert _parse_request(_request_line(flipped)[:-1]) == flipped


@pytest.mark.parametrize(
    "line",
    [
        b'{"v":1,"root":"Lw==","place":"","dev":1,"ino":2,"q":{}}',  # (protocol 1: JSON)
        b"1 Lw== Lw== 1 2 eA== 1 1",
        b"2 Lw== Lw== 1 2 eA== 1",
        b"2 Lw== Lw== 1 2 eA== 1 2",
        b"2 Lw== Lw== x 2 eA== 1 1",
        b"",
    ],
)
def test_a_request_of_another_version_or_garbage_is_refused(line: bytes) -> None:
    with pytest.raises(ValueError):
        _parse_request(line)


def test_an_answer_header_reads_back() -> None:
    fresh = {"fresh": True, "pid": 41, "max_file_size": 20 << 20, "changed": 3, "held": 7,
             "narrowed": True}  # fmt: skip
    line = _answer_line(fresh, 1234)
    assert line.count(b"\n") == 1
    assert _parse_answer(line[:-1]) == {**fresh, "bytes": 1234}
    assert _parse_answer(_answer_line({**fresh, "narrowed": False}, 0)[:-1])["narrowed"] is False
    why = {"fresh": False, "why": "ValueError: two\nlines"}
    assert _parse_answer(_answer_line(why, 0)[:-1]) == {"fresh": False,
                                                        "why": "ValueError: two lines"}  # fmt: skip


@pytest.mark.parametrize("line", [b'{"fresh":true}', b"1 2 3", b"1 a b c d e f", b"", b"2 x"])
def test_an_answer_of_another_version_or_garbage_is_refused(line: bytes) -> None:
    with pytest.raises(ValueError):
        _parse_answer(line)


@contextlib.contextmanager
def daemon_over(tmp_path: Path, files: dict[str, str]) -> Iterator[tuple[str, Any, Any, Any]]:
    """A tree of ``files``, a daemon's index of it built, and its freshness socket served:
    (cache dir, root, manager, server), all closed after."""
    from rootgrep.index.freshness import FreshnessServer
    from rootgrep.index.manager import IndexManager
    from rootgrep.roots import pin_root

    tree = tmp_path / "tree"
    tree.mkdir()
    for name, text in files.items():
        (tree / name).write_text(text)
    cache = str(tmp_path / "cache")
    r = pin_root(str(tree))
    manager = IndexManager(cache, hold_writer=True)
    server = FreshnessServer(manager)
    try:
        manager.activate(r, 0)
        assert manager.wait_built(r.path, 60)
        yield cache, r, manager, server
    finally:
        server.close()
        manager.close()
        r.close()


def asked(cache: str, r: Any, pattern: str, **kw: Any) -> list[bytes]:
    """The candidate paths the daemon answers for a literal ``pattern`` (asserted answered)."""
    from rootgrep.index.freshness import ask_fresh

    query = {"pattern": pattern, "regex": False, "case_sensitive": True}
    found, why = ask_fresh(cache, r, query, max_file_size=1 << 20, **kw)
    assert found is not None, why
    return found.paths


def test_the_askers_own_work_overlaps_the_daemons(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``meanwhile`` (the CLI compiles its candidates' scan there: RE2's import) runs once
    the request is sent, while the daemon works on it, not after its answer is read: here
    the daemon answers only once the asker's ``meanwhile`` has run (a wait that is a hang
    guard only: it returns as soon as it has)."""
    files = {"a.py": "frobnicate_widget = 1\n", "b.py": "other = 2\n"}
    with daemon_over(tmp_path, files) as (cache, r, _manager, server):
        ran = threading.Event()
        seen: list[bool] = []
        answer = server.answer

        def answer_after_meanwhile(root_path: bytes, request: dict) -> tuple[dict, list[bytes]]:  # type: ignore[type-arg]
            seen.append(ran.wait(30))
            return answer(root_path, request)

        monkeypatch.setattr(server, "answer", answer_after_meanwhile)
        assert server.serve(r.path) is None
        assert asked(cache, r, "frobnicate_widget", meanwhile=ran.set) == [b"a.py"]
        assert seen == [True]


def test_a_long_pattern_is_still_answered_from_the_index(tmp_path: Path) -> None:
    """A request line holds the pattern in base64 (a third longer than the pattern): a
    pattern of 60 KiB (80 KiB on the wire, over the 64 KiB a JSON request line had) is still
    answered by the daemon, not refused as a line too long (the asker would scan live)."""
    word = "frobnicate_" + "x" * (60 << 10)
    with daemon_over(tmp_path, {"a.py": word + "\n", "b.py": "other = 2\n"}) as (
        cache, r, _manager, server,
    ):  # fmt: skip
        assert server.serve(r.path) is None
        assert asked(cache, r, word) == [b"a.py"]


def test_an_asker_trickling_its_request_cannot_hold_the_daemon(tmp_path: Path) -> None:
    """One thread of the daemon answers every asker in turn: a peer that sends its request a
    byte at a time is cut off once ``REQUEST_SECONDS`` have passed, so an asker behind it is
    still answered from the index (before, each byte restarted a 5 s time-out: the trickle
    held the thread, and every other asker timed out and scanned live)."""
    import socket

    from rootgrep.confine import socket_at
    from rootgrep.index.names import SOCKET_NAME

    done = threading.Event()
    with daemon_over(tmp_path, {"a.py": "frobnicate = 1\n"}) as (cache, r, manager, server):
        try:
            assert server.serve(r.path) is None
            ix = manager.get(r.path)
            assert ix is not None and ix.index is not None
            path = socket_at(ix.index.folder.fs.fd, SOCKET_NAME)
            assert path is not None
            started = threading.Event()

            def trickle() -> None:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.connect(path)
                    started.set()
                    for _ in range(200):  # (up to 20 s: longer than any asker waits)
                        if done.wait(0.1):
                            return
                        try:
                            s.send(b"2")
                        except OSError:
                            return  # (cut off)

            threading.Thread(target=trickle, daemon=True).start()
            assert started.wait(10)
            assert asked(cache, r, "frobnicate") == [b"a.py"]
        finally:
            done.set()


def test_a_socket_name_that_is_a_link_is_replaced_not_connected_through(tmp_path: Path) -> None:
    """The index folder's ``daemon.sock`` a symlink to a listening socket elsewhere: the
    daemon does not take that for another daemon serving the index (it would not serve), nor
    connect through it; it replaces the link with its own socket, and answers."""
    import socket

    from rootgrep.index.names import SOCKET_NAME

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dfd = os.open(elsewhere, os.O_PATH | os.O_DIRECTORY)
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(f"/proc/self/fd/{dfd}/{SOCKET_NAME}")
    finally:
        os.close(dfd)
    listener.listen(4)
    listener.setblocking(False)
    try:
        with daemon_over(tmp_path, {"a.py": "frobnicate_widget = 1\n"}) as (
            cache, r, manager, server,
        ):  # fmt: skip
            fd = manager.get(r.path).index.folder.fs.fd
            os.symlink(elsewhere / SOCKET_NAME, SOCKET_NAME, dir_fd=fd)
            assert server.serve(r.path) is None
            assert asked(cache, r, "frobnicate_widget") == [b"a.py"]
            assert not os.path.islink(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
        with pytest.raises(BlockingIOError):
            listener.accept()  # (nothing ever connected to it)
    finally:
        listener.close()


def test_a_sync_request_and_its_answer_read_back() -> None:
    root = b"/srv/a b\xff"
    line = _sync_request_line(root, (2049, 1 << 40))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert _parse_sync_request(line[:-1], root) == (2049, 1 << 40)
    with pytest.raises(ValueError):
        _parse_sync_request(line[:-1], b"/srv/other")  # (another root's socket)
    for bad in (line.replace(b"sync %d" % PROTOCOL, b"sync 1"), b"sync", b"sync 2 x 1"):
        with pytest.raises(ValueError):
            _parse_sync_request(bad.rstrip(b"\n"), root)
    kept = {"fresh": True, "pid": 7, "max_file_size": 20 << 20, "files": 50_721, "changed": 3,
            "symbols": False}  # fmt: skip
    assert _parse_kept(_kept_line(kept)[:-1]) == kept
    why = {"fresh": False, "why": "the daemon's index is\nbuilding"}
    assert _parse_kept(_kept_line(why)[:-1]) == {"fresh": False,
                                                 "why": "the daemon's index is building"}  # fmt: skip
    for bad in (b"1 2 3", b"1 a b c d e", b"", b"2 x"):
        with pytest.raises(ValueError):
            _parse_kept(bad)


def test_a_daemon_says_it_keeps_its_roots_index_and_no_other(tmp_path: Path) -> None:
    """``ask_kept`` (what ``rootgrep index DIR`` asks first): the daemon keeping DIR's own
    index answers with its file count and the changes not folded yet; a directory below it
    (which ``index`` would give an index of its own), or no daemon, is no answer."""
    from rootgrep.index.freshness import ask_kept
    from rootgrep.roots import pin_root

    files = {"a.py": "x = 1\n", "b.py": "y = 2\n"}
    with daemon_over(tmp_path, files) as (cache, r, _manager, server):
        kept, why, said = ask_kept(cache, r)
        assert kept is None and "no daemon" in why and said == ""  # (not served yet)
        assert server.serve(r.path) is None
        kept, why, said = ask_kept(cache, r)
        assert kept is not None, why
        assert (kept["pid"], kept["files"], kept["changed"]) == (os.getpid(), 2, 0)
        (tmp_path / "tree" / "c.py").write_text("z = 3\n")
        kept, why, said = ask_kept(cache, r)  # (the watcher is drained first: the new file is seen)
        assert kept is not None, why
        assert kept["changed"] >= 1 or kept["files"] == 3, kept  # (not folded in yet, or so)
        ix = _manager.get(r.path)
        ix.role = "reader"  # (as when another process held the writer at its start)
        kept, why, said = ask_kept(cache, r)
        assert kept is None and "another process writes" in why, why
        assert said == "another process writes its index"
        ix.role = "writer"
        (tmp_path / "tree" / "sub").mkdir()
        below = pin_root(str(tmp_path / "tree" / "sub"))
        try:
            kept, why, said = ask_kept(cache, below)
            assert kept is None and "no index" in why, why
        finally:
            below.close()
        server.close()
        kept, why, said = ask_kept(cache, r)
        assert kept is None and "no daemon" in why, why
