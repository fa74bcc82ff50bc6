"""The attack catalogue of CONFINEMENT.md at the confinement and path-resolution layer.

Every row runs in both resolution modes (openat2 and the component walk) and asserts the SPEC
error code, and that the secret's marker never appears in any output or message.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rootgrep.confine import Beneath, is_binary, split_relpath
from rootgrep.errors import RootgrepError
from rootgrep.roots import Root, pin_root, resolve_target
from support import (
    MARKER,
    assert_no_marker,
    error_code,
    fd_count,
    fds_below,
    flatten_chain,
    make_chain,
)


@pytest.fixture
def root(world: Path, mode: str) -> Iterator[Root]:
    r = pin_root(str(world / "root"), use_openat2=(mode == "openat2"))
    yield r
    r.close()


def read(root: Root, path: str) -> bytes:
    """What a read tool does: map the argument to a root, then read beneath its fd."""
    r, comps = resolve_target([root], path)
    return r.fs.read(comps).data


def uri(p: Path | str, tail: str = "") -> str:
    return "file://" + quote(str(p)) + tail


# -- traversal -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "sub/../../root/../outside/secret.txt",
        "..",
        "../root-evil/x.txt",
    ],
)
def test_relative_traversal_is_refused(root: Root, path: str) -> None:
    assert error_code(read, root, path) == "outside_roots"


def test_absolute_paths_outside_and_sibling_prefix(root: Root, world: Path) -> None:
    assert error_code(read, root, "/etc/passwd") == "outside_roots"
    assert error_code(read, root, str(world / "outside" / "secret.txt")) == "outside_roots"
    # /w/root-evil is not inside /w/root: containment is by components, not string prefix
    assert error_code(read, root, str(world / "root-evil" / "x.txt")) == "outside_roots"
    assert error_code(read, root, uri(world / "root-evil" / "x.txt")) == "outside_roots"
    # a parent that does not exist is still outside
    assert error_code(read, root, str(world / "nope" / "x")) == "outside_roots"


def test_dotdot_that_stays_inside_is_allowed(root: Root, world: Path) -> None:
    assert read(root, "sub/../a.txt") == b"alpha\n"
    assert read(root, str(world / "root" / "sub" / ".." / "a.txt")) == b"alpha\n"
    assert read(root, "./sub/./b.txt") == b"beta\n"


@pytest.mark.parametrize(
    "tail",
    ["/%2e%2e/outside/secret.txt", "/%2E%2E/outside/secret.txt", "/..%2foutside%2fsecret.txt"],
)
def test_percent_encoded_traversal_is_decoded_once_then_refused(
    root: Root, world: Path, tail: str
) -> None:
    assert error_code(read, root, uri(world / "root", tail)) == "outside_roots"


def test_double_encoding_is_a_literal_name(root: Root, world: Path) -> None:
    tail = "/%252e%252e/outside/secret.txt"
    assert error_code(read, root, uri(world / "root", tail)) == "not_found"
    literal = world / "root" / "%2e%2e"
    literal.mkdir()
    (literal / "f.txt").write_text("literal\n")
    assert read(root, uri(world / "root", "/%252e%252e/f.txt")) == b"literal\n"


def test_encoded_slash_decodes_to_a_separator(root: Root, world: Path) -> None:
    assert read(root, uri(world / "root", "/sub%2fb.txt")) == b"beta\n"


def test_nul_is_refused_before_any_syscall(root: Root, world: Path) -> None:
    assert error_code(read, root, uri(world / "root", "/a.txt%00.png")) == "invalid_uri"
    assert error_code(read, root, "a.txt\0") == "invalid_path"
    assert error_code(root.fs.read, b"a\0b") == "invalid_path"


@pytest.mark.parametrize(
    "path",
    [
        "%c0%ae%c0%ae/outside/secret.txt",  # overlong UTF-8: never decoded leniently to '.'
        "．．/outside/secret.txt",  # fullwidth full stops: never NFKC-normalised
        "‥/outside/secret.txt",
        "．．／outside／secret.txt",
        "..\\..\\outside\\secret.txt",  # backslashes are ordinary characters on POSIX
        "C:\\outside\\secret.txt",
        "\\\\host\\share\\secret.txt",
        "~/.ssh/id_rsa",  # ~ is not expanded
    ],
)
def test_lookalikes_are_literal_names(root: Root, path: str) -> None:
    assert error_code(read, root, path) == "not_found"


def test_overlong_utf8_in_a_uri_stays_bytes(root: Root, world: Path) -> None:
    assert error_code(read, root, uri(world / "root", "/%c0%ae%c0%ae/outside")) == "not_found"


def test_a_literal_backslash_name_is_readable(root: Root, world: Path) -> None:
    (world / "root" / "..\\x").write_text("odd\n")
    assert read(root, "..\\x") == b"odd\n"


def test_case_variant_of_the_root_is_not_the_root(root: Root, world: Path) -> None:
    upper = str(world / "ROOT" / "a.txt")
    assert error_code(read, root, upper) == "outside_roots"


def test_long_names_and_paths_are_invalid(root: Root) -> None:
    assert error_code(read, root, "x" * 256) == "invalid_path"
    assert error_code(read, root, "/".join(["d"] * 2100)) == "invalid_path"


# -- symlinks --------------------------------------------------------------------------------


@pytest.fixture
def links(world: Path) -> Path:
    r = world / "root"
    secret = world / "outside" / "secret.txt"
    os.symlink("sub/b.txt", r / "in_rel")
    os.symlink(str(r / "a.txt"), r / "in_abs")
    os.symlink("../outside/secret.txt", r / "out_rel")
    os.symlink(str(secret), r / "out_abs")
    os.symlink("../outside", r / "out_dir")
    os.symlink("../root-evil", r / "evil_dir")
    os.symlink(f"/proc/self/root{secret}", r / "proc_root")
    os.symlink("sub/../../outside/secret.txt", r / "out_chain")
    os.symlink("loop_b", r / "loop_a")
    os.symlink("loop_a", r / "loop_b")
    os.symlink("sub", r / "in_dir")
    return r


def test_symlinks_within_the_root_are_followed(root: Root, links: Path) -> None:
    assert read(root, "in_rel") == b"beta\n"
    assert read(root, "in_abs") == b"alpha\n"  # an absolute link that stays inside
    assert read(root, "in_dir/b.txt") == b"beta\n"
    assert [e.name for e in root.fs.list_dir("in_dir")] == [b"b.txt"]


@pytest.mark.parametrize(
    "path",
    ["out_rel", "out_abs", "out_dir/secret.txt", "evil_dir/x.txt", "proc_root", "out_chain"],
)
def test_symlinks_leaving_the_root_are_refused(root: Root, links: Path, path: str) -> None:
    assert error_code(read, root, path) == "outside_roots"
    assert error_code(root.fs.stat, path) == "outside_roots"


def test_escaping_directory_link_cannot_be_listed(root: Root, links: Path) -> None:
    assert error_code(root.fs.list_dir, "out_dir") == "outside_roots"
    assert error_code(root.fs.list_dir, "evil_dir") == "outside_roots"


def test_magic_fd_link_is_refused(root: Root, world: Path) -> None:
    fd = os.open(world / "outside" / "secret.txt", os.O_RDONLY)
    try:
        os.symlink(f"/proc/self/fd/{fd}", world / "root" / "fdlink")
        os.symlink(f"/proc/{os.getpid()}/fd/{fd}", world / "root" / "pidlink")
        assert error_code(read, root, "fdlink") == "outside_roots"
        assert error_code(read, root, "pidlink") == "outside_roots"
    finally:
        os.close(fd)


@pytest.mark.timeout(60, method="thread")  # a hang guard, not a speed test
def test_symlink_loop_does_not_hang(root: Root, links: Path) -> None:
    assert error_code(read, root, "loop_a") in ("invalid_path", "outside_roots")


def test_stat_without_following_describes_the_link_itself(root: Root, links: Path) -> None:
    st = root.fs.stat("out_abs", follow=False)
    assert stat.S_ISLNK(st.st_mode)


def test_policy_never_refuses_every_link(world: Path, links: Path, mode: str) -> None:
    fs = Beneath.pin(str(world / "root"), symlinks="never", use_openat2=(mode == "openat2"))
    try:
        assert error_code(fs.read, "in_rel") == "outside_roots"
        assert error_code(fs.read, "in_dir/b.txt") == "outside_roots"
        assert fs.read("sub/b.txt").data == b"beta\n"
    finally:
        fs.close()


def test_root_announced_through_a_symlink(world: Path, mode: str) -> None:
    alias = world / "alias"
    os.symlink(world / "root", alias)
    r = pin_root(str(alias), use_openat2=(mode == "openat2"))
    try:
        assert r.path == os.fsencode(world / "root")
        assert r.uri == uri(world / "root")
        # both spellings work for requests
        assert read(r, str(alias / "a.txt")) == b"alpha\n"
        assert read(r, str(world / "root" / "a.txt")) == b"alpha\n"
        assert read(r, uri(alias, "/sub/b.txt")) == b"beta\n"
        assert error_code(read, r, str(alias / ".." / "outside" / "secret.txt")) == (
            "outside_roots"
        )
    finally:
        r.close()


# -- special files ---------------------------------------------------------------------------


def _with_deadline(fn: object, seconds: float = 5.0) -> object:
    box: list[object] = []
    t = threading.Thread(target=lambda: box.append(_capture(fn)), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the operation blocked"
    return box[0]


def _capture(fn: object) -> object:
    try:
        return fn()  # type: ignore[operator]
    except RootgrepError as e:
        return e


def test_fifo_device_and_socket_are_not_regular_and_never_block(root: Root, world: Path) -> None:
    r = world / "root"
    os.mkfifo(r / "fifo")
    os.mknod(r / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(r / "sock"))
    try:
        for name in ("fifo", "null", "sock"):
            res = _with_deadline(lambda name=name: read(root, name))
            assert isinstance(res, RootgrepError) and res.code == "not_regular_file", name
    finally:
        sock.close()


def test_directory_is_not_a_file(root: Root) -> None:
    assert error_code(read, root, "sub") == "not_a_file"
    assert error_code(root.fs.list_dir, "a.txt") == "not_a_directory"


def test_reads_are_capped_for_huge_and_sparse_files(root: Root, world: Path) -> None:
    sparse = world / "root" / "sparse.txt"
    with open(sparse, "wb") as f:
        f.write(b"head\n")
        f.truncate(1 << 30)  # 1 GiB, nearly all holes
    res = root.fs.read("sparse.txt", max_bytes=1 << 20, allow_binary=True)
    assert len(res.data) == 1 << 20 and res.truncated
    assert is_binary(res.data)  # holes read as NUL bytes
    assert error_code(root.fs.read, "sparse.txt") == "binary_file"
    small = root.fs.read("a.txt", max_bytes=3)
    assert small.data == b"alp" and small.truncated


def test_hard_link_to_outside_is_readable_but_writes_never_change_the_outside_inode(
    root: Root, world: Path
) -> None:
    secret = world / "outside" / "secret.txt"
    os.link(secret, world / "root" / "hard.txt")
    # invisible to path checks: the content is readable (SPEC catalogue), by design
    assert MARKER.encode() in read(root, "hard.txt")
    before = secret.stat()
    root.fs.atomic_write("hard.txt", b"replaced\n")
    assert secret.read_text() == f"{MARKER}\n"
    assert secret.stat().st_ino == before.st_ino and secret.stat().st_nlink == 1
    assert read(root, "hard.txt") == b"replaced\n"


def test_write_over_an_escaping_symlink_replaces_the_link(root: Root, links: Path) -> None:
    secret = links.parent / "outside" / "secret.txt"
    root.fs.atomic_write("out_abs", b"mine\n")
    assert secret.read_text() == f"{MARKER}\n"
    assert not os.path.islink(links / "out_abs")
    assert error_code(root.fs.atomic_write, "out_dir/new.txt", b"x") == "outside_roots"
    assert not (links.parent / "outside" / "new.txt").exists()


def test_atomic_write_create_only_and_modes(root: Root, world: Path) -> None:
    st = root.fs.atomic_write("new.txt", b"one\n", create_only=True)
    assert stat.S_ISREG(st.st_mode)
    assert error_code(root.fs.atomic_write, "new.txt", b"two\n", create_only=True) == "exists"
    os.chmod(world / "root" / "new.txt", 0o640)
    root.fs.atomic_write("new.txt", b"two\n")
    assert (world / "root" / "new.txt").read_bytes() == b"two\n"
    assert stat.S_IMODE((world / "root" / "new.txt").stat().st_mode) == 0o640
    assert error_code(root.fs.atomic_write, "sub", b"x") == "not_a_file"
    leftovers = [n for n in os.listdir(world / "root") if ".rootgrep-" in n]
    assert leftovers == []


# -- odd names, depth, lifecycle ---------------------------------------------------------------


def test_odd_names_are_listed_and_readable(root: Root, world: Path) -> None:
    r = os.fsencode(world / "root")
    for name in (b"new\nline.txt", b"bad\xff\xfe.txt", b" lead space", b"-dash"):
        with open(r + b"/" + name, "wb") as f:
            f.write(b"odd\n")
        assert root.fs.read(name).data == b"odd\n"
    names = {e.name for e in root.fs.list_dir()}
    assert {b"new\nline.txt", b"bad\xff\xfe.txt", b" lead space", b"-dash"} <= names


def test_deep_tree_resolves_with_bounded_fds(root: Root, world: Path) -> None:
    parts = ["d"] * 400
    deep = world / "root" / Path(*parts)
    deep.mkdir(parents=True)
    (deep / "f.txt").write_text("deep\n")
    before = fd_count()
    assert read(root, "/".join([*parts, "f.txt"])) == b"deep\n"
    assert read(root, "/".join([*parts, "..", "..", *parts[:2], "f.txt"])) == b"deep\n"
    assert fd_count() == before


def test_no_fd_leaks_on_errors(root: Root, links: Path) -> None:
    before = fd_count()
    for _ in range(50):
        for p in ("out_dir/secret.txt", "nope/x", "sub/../../x", "loop_a", "in_dir/b.txt", "sub"):
            with contextlib.suppress(RootgrepError):
                read(root, p)
    assert fd_count() == before


def test_root_deleted_mid_session_gives_clean_errors(root: Root, world: Path) -> None:
    (world / "root" / "a.txt").unlink()
    (world / "root" / "sub" / "b.txt").unlink()
    (world / "root" / "sub").rmdir()
    (world / "root").rmdir()
    assert error_code(read, root, "a.txt") == "not_found"
    assert error_code(root.fs.list_dir, "sub") == "not_found"


def test_root_renamed_mid_session_stays_pinned(root: Root, world: Path) -> None:
    os.rename(world / "root", world / "moved")
    (world / "root").mkdir()  # an impostor at the old name
    (world / "root" / "a.txt").write_text(f"{MARKER} impostor\n")
    assert read(root, "a.txt") == b"alpha\n"  # the pinned fd follows the real directory


def test_split_relpath_keeps_dotdot_and_drops_dots() -> None:
    assert split_relpath("a/./b//c") == [b"a", b"b", b"c"]
    assert split_relpath("a/b/") == split_relpath("a/b/.") == [b"a", b"b", b"."]
    assert split_relpath("a/../b") == [b"a", b"..", b"b"]
    assert split_relpath("") == []
    assert error_code(split_relpath, "/abs") == "outside_roots"


def test_every_read_path_stays_quiet_about_the_secret(root: Root, links: Path) -> None:
    outputs: list[object] = []
    for p in ("out_rel", "out_abs", "out_dir/secret.txt", "proc_root", "../outside/secret.txt"):
        for fn in (read, lambda r, p: r.fs.list_dir(p), lambda r, p: r.fs.stat(p)):
            try:
                outputs.append(fn(root, p))
            except RootgrepError as e:
                outputs.append(str(e))
    assert_no_marker(*outputs)


# -- review findings: hardening ----------------------------------------------------------------


def test_reading_a_fifo_never_opens_it(root: Root, world: Path) -> None:
    fifo = world / "root" / "fifo"
    os.mkfifo(fifo)
    opened = threading.Event()

    def writer() -> None:
        fd = os.open(fifo, os.O_WRONLY)  # blocks until some reader opens the FIFO
        opened.set()
        os.close(fd)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    assert error_code(read, root, "fifo") == "not_regular_file"
    assert not opened.wait(0.3), "reading opened the FIFO (a writer was released)"
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # release the writer ourselves
    t.join(5)


def test_write_never_keeps_setuid_and_keeps_the_owner(root: Root, world: Path) -> None:
    target = world / "root" / "tool.sh"
    target.write_text("#!/bin/sh\n")
    os.chmod(target, 0o6755)
    if os.geteuid() == 0:
        os.chown(target, 1000, 1000)
    root.fs.atomic_write("tool.sh", b"#!/bin/sh\necho hi\n")
    st = target.stat()
    assert stat.S_IMODE(st.st_mode) == 0o755
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (1000, 1000)
    root.fs.atomic_write("new.sh", b"x", mode=0o4777)
    assert stat.S_IMODE((world / "root" / "new.sh").stat().st_mode) == 0o777


def test_trailing_slash_means_a_directory(root: Root) -> None:
    assert error_code(read, root, "a.txt/") == "not_a_directory"
    assert error_code(root.fs.atomic_write, "x/", b"data") == "not_a_directory"
    assert error_code(root.fs.read, "a.txt/.") == "not_a_directory"


def test_lone_surrogates_are_invalid_not_a_crash(root: Root, world: Path) -> None:
    assert error_code(read, root, "a.txt\ud800") == "invalid_path"
    assert error_code(read, root, uri(world / "root") + "/\ud800") == "invalid_uri"


def test_fallback_walk_keeps_fds_bounded_on_long_paths(world: Path) -> None:
    r = world / "root"
    make_chain(r, "d", 1500, "f")
    os.symlink("/".join(["d"] * 1500), r / "deep_link")
    fs = Beneath.pin(str(r), use_openat2=False)
    before = fd_count()
    assert fds_below(r) == 1  # (the pinned root)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (before + 40, hard))  # far fewer than 1500
    try:
        assert stat.S_ISREG(fs.stat("deep_link/f").st_mode)
        assert fs.read("deep_link/../d/f").data == b""  # '..' after closed levels: reopened
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        fs.close()
    assert fds_below(r) == 0  # (every level's fd closed; other threads' fds do not count)
    flatten_chain(r, "d", 1500)


def test_pinning_a_symlinked_root_under_a_swap_race_never_misnames_it(world: Path) -> None:
    """A thread keeps swapping which directory an alias points to while roots are pinned:
    every pin must report the path of the directory its fd really holds."""
    a, b = world / "root", world / "outside"
    alias = world / "alias"
    os.symlink(a, alias)
    tmp = world / "alias.tmp"
    stop = threading.Event()

    def swapper() -> None:
        flip = False
        while not stop.is_set():
            os.symlink(b if flip else a, tmp)
            os.replace(tmp, alias)
            flip = not flip

    t = threading.Thread(target=swapper, daemon=True)
    t.start()
    try:
        for _ in range(2000):
            try:
                fs = Beneath.pin(str(alias))
            except (OSError, RootgrepError):
                continue
            try:
                st = os.fstat(fs.fd)
                real = os.stat(fs.path)
                assert (st.st_dev, st.st_ino) == (real.st_dev, real.st_ino)
            finally:
                fs.close()
    finally:
        stop.set()
        t.join(5)


def test_physical_components_follow_dotdot_as_the_kernel_does(root: Root, world: Path) -> None:
    r = world / "root"
    (r / "deep" / "er").mkdir(parents=True)
    (r / "deep" / "x.txt").write_text("in deep\n")
    os.symlink("deep/er", r / "link")
    # link/.. is the parent of the link's target (deep), not the link's parent (the root)
    assert root.fs.physical([b"link", b"..", b"x.txt"]) == [b"deep", b"x.txt"]
    assert read(root, "link/../x.txt") == b"in deep\n"
    assert root.fs.physical([b"sub", b"..", b"a.txt"]) == [b"a.txt"]
    assert root.fs.physical([b"deep", b"er", b"..", b".."]) == []
    assert root.fs.physical([b"sub", b"b.txt"]) == [b"sub", b"b.txt"]  # nothing to resolve
    assert error_code(root.fs.physical, [b"sub", b"..", b"..", b"x"]) == "outside_roots"


# ---- temp names, told without ``re`` ------------------------------------------------------------

_TEMP_RE = re.compile(rb"\A\.[^/]{1,200}\.rootgrep-[0-9a-f]{12}\.tmp\Z", re.DOTALL)
_TANTIVY_RE = re.compile(rb"\A\.tmp[A-Za-z0-9]{6}\Z")
_NAME_BYTES = st.sampled_from([b"a", b"/", b".", b"\n", b"f", b"0", b"Z", b"-", b"\xff"])


@given(
    st.one_of(
        st.binary(max_size=240),
        st.builds(
            lambda mid, hexes, tail: b"." + mid + b".rootgrep-" + hexes + tail,
            st.lists(_NAME_BYTES, max_size=205).map(b"".join),
            st.text("0123456789abcdefABCDEFg", min_size=11, max_size=13).map(str.encode),
            st.sampled_from([b".tmp", b".tmp\n", b".tm", b"", b".tmpx"]),
        ),
    )
)
def test_temp_names_are_told_as_the_regex_tells_them(name: bytes) -> None:
    from rootgrep.confine import is_temp_name

    assert is_temp_name(name) == (_TEMP_RE.match(name) is not None)


@given(
    st.one_of(
        st.binary(max_size=12),
        st.text("abcXYZ019_.-é", min_size=0, max_size=8).map(lambda t: (".tmp" + t).encode()),
    )
)
def test_tantivy_temp_names_are_told_as_the_regex_tells_them(name: bytes) -> None:
    from rootgrep.index.cache import is_tantivy_temp

    assert is_tantivy_temp(name) == (_TANTIVY_RE.match(name) is not None)


@pytest.mark.parametrize("visible", [3, 4])
def test_a_split_listing_cut_with_a_hidden_entry_says_it_was_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, visible: int
) -> None:
    """The walker's listing (``scan_split``) caps what it reads at ``MAX_DIR_ENTRIES``
    (lowered here) after leaving hidden entries out, as ``scan_fd`` does: a hidden entry
    among those read no longer makes a cut listing look whole (a file was then left out of
    every walk without a word)."""
    from rootgrep import confine
    from rootgrep.confine import listing

    for name in "abcd"[:visible]:
        (tmp_path / name).write_text(name)
    (tmp_path / ".cache").mkdir()
    monkeypatch.setattr(listing, "MAX_DIR_ENTRIES", 3)  # (where scan_split and scan_fd read it)
    hidden_fd = os.open(tmp_path / ".cache", os.O_RDONLY | os.O_DIRECTORY)
    key = confine.hide(hidden_fd)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        dotted, plain, cut = confine.scan_split(fd)
        whole = confine.scan_fd(fd)
    finally:
        os.close(fd)
        confine.unhide(key)
        os.close(hidden_fd)
    assert dotted == []  # (the hidden directory is never shown)
    assert cut == whole.cut == (visible > 3)
    assert [n for n, _ in plain] == [e.name for e in whole]
