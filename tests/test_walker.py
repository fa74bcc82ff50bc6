"""The walker: same file list as ``rg --files``, confined, fd-bounded, robust to odd trees."""

from __future__ import annotations

import os
import resource
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rootgrep.confine import Beneath
from rootgrep.walker import Walker, WalkOptions, list_files, order_key, path_batches
from support import MARKER, RG, fd_count, flatten_chain, make_chain

RG_WALK = ["--files", "--sort", "path", "--null", "--no-require-git", "--no-ignore-global",
           "--no-ignore-parent"]  # fmt: skip


def rg_files(root: Path, *extra: str) -> list[bytes]:
    out = subprocess.run([RG, *RG_WALK, *extra], cwd=root, capture_output=True, check=False)
    assert out.returncode in (0, 1), out.stderr
    return [p for p in out.stdout.split(b"\0") if p]


def write(root: Path, rel: str, text: str = "x\n") -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    files = [
        "README.md", "setup.py", "src/app.py", "src/app.log", "src/keep.log", "src/gen/out.py",
        "src/gen/keep/me.py", "build/x.o", "build/y.py", "docs/a.md", "docs/b.tmp",
        "docs/deep/c.tmp", "docs/deep/d.md", "a-b/z.py", "a/z.py", "a.b", ".hidden.py",
        ".config/x.py", "node_modules/pkg/index.js", "vendor/lib.py", "vendor/keep.py",
        "top.txt", "sub/top.txt", "space name/f.py", "x/y/z/w.py",
    ]  # fmt: skip
    for f in files:
        write(r, f)
    write(r, ".gitignore", "*.log\n!keep.log\nbuild/\n/top.txt\nnode_modules\n# comment\n\n")
    write(r, ".ignore", "vendor/*\n!vendor/keep.py\n")
    write(r, "src/.gitignore", "gen/\n")
    write(r, "src/.ignore", "!gen/\ngen/out.py\n")  # .ignore beats .gitignore in the same dir
    write(r, "docs/.gitignore", "*.tmp\n")
    write(r, "docs/deep/.gitignore", "!c.tmp\n")  # deeper beats shallower
    os.symlink("src", r / "link_dir")
    os.symlink("README.md", r / "link_file")
    os.symlink(str(tmp_path), r / "escape")
    os.mkfifo(r / "fifo")
    return r


@pytest.fixture
def fs(tree: Path, mode: str) -> Iterator[Beneath]:
    b = Beneath.pin(str(tree), use_openat2=(mode == "openat2"))
    yield b
    b.close()


def test_file_list_equals_rg_files(fs: Beneath, tree: Path) -> None:
    got = list_files(fs)
    assert got == rg_files(tree)
    assert b"src/gen/keep/me.py" in got and b"src/keep.log" in got and b"docs/deep/c.tmp" in got
    assert b"link_file" not in got and b"fifo" not in got


@pytest.mark.parametrize(
    ("opts", "flags"),
    [
        ({"hidden": True}, ["--hidden"]),
        ({"no_ignore": True}, ["--no-ignore"]),
        ({"hidden": True, "no_ignore": True}, ["--hidden", "--no-ignore"]),
    ],
)
def test_flags_equal_rg(fs: Beneath, tree: Path, opts: dict[str, bool], flags: list[str]) -> None:
    assert list_files(fs, **opts) == rg_files(tree, *flags)


def test_start_below_the_root_applies_ancestor_ignores(fs: Beneath, tree: Path) -> None:
    got = list_files(fs, b"src")
    # the same files as the whole-tree walk lists below src/ (the root's rules still apply)
    assert got == [p for p in rg_files(tree) if p.startswith(b"src/")]
    assert b"src/app.log" not in got and b"src/keep.log" in got


def test_explicit_file_start(fs: Beneath) -> None:
    assert [f.path for f in Walker(fs, b"src/app.log").files()] == [b"src/app.log"]


def test_symlinks_are_never_followed(fs: Beneath, tree: Path) -> None:
    (tree.parent / "outside.txt").write_text(MARKER)
    got = list_files(fs, hidden=True, no_ignore=True)
    assert not any(p.startswith((b"link_dir", b"escape", b"link_file")) for p in got)


def test_odd_names(tmp_path: Path, mode: str) -> None:
    r = os.fsencode(tmp_path / "odd")
    os.mkdir(r)
    names = [b"new\nline.py", b"bad\xff.py", b"tab\t.py", b"\xe2\x80\xa5.py", b"-rf"]
    for n in names:
        with open(r + b"/" + n, "wb") as f:
            f.write(b"x\n")
    os.mkdir(r + b"/dir\xfe")
    with open(r + b"/dir\xfe/in.py", "wb") as f:
        f.write(b"x\n")
    with Beneath.pin(r, use_openat2=(mode == "openat2")) as b:
        got = list_files(b)
    assert got == sorted([*names, b"dir\xfe/in.py"])
    assert got == rg_files(Path(os.fsdecode(r)))


def test_max_file_size_skips_large_files(fs: Beneath, tree: Path) -> None:
    write(tree, "big.py", "x" * 5000)
    got = [f.path for f in Walker(fs, b"", WalkOptions(max_file_size=4096)).files()]
    assert b"big.py" not in got and b"setup.py" in got
    assert all(f.stat is not None for f in Walker(fs, b"", WalkOptions(max_file_size=1)).files())


def test_wide_tree_under_a_low_fd_limit(tmp_path: Path, mode: str) -> None:
    r = tmp_path / "wide"
    for i in range(3000):
        (r / f"d{i:05}").mkdir(parents=True)
        (r / f"d{i:05}" / "f.py").write_text("x\n")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        with Beneath.pin(str(r), use_openat2=(mode == "openat2")) as b:
            got = list_files(b)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert len(got) == 3000 and got[0] == b"d00000/f.py"


def test_deep_tree_bounded_fds_and_no_recursion_limit(tmp_path: Path, mode: str) -> None:
    r = tmp_path / "deep"
    r.mkdir()
    make_chain(r, "d", 1200, "leaf.py")  # deeper than a recursive walker could go
    (r / "top.py").write_text("x\n")
    peak = 0
    before = fd_count()
    seen: list[bytes] = []
    with Beneath.pin(str(r), use_openat2=(mode == "openat2")) as b:
        for batch in Walker(b).batches():
            with batch:
                peak = max(peak, fd_count() - before)
                seen.extend(f.path for f in batch.files)
    assert seen == [b"d/" * 1200 + b"leaf.py", b"top.py"]
    assert peak < 80  # MAX_HELD_FDS plus a few, not one per level
    assert fd_count() == before
    flatten_chain(r, "d", 1200)


def test_no_fd_leak_when_the_consumer_stops_early(fs: Beneath) -> None:
    before = fd_count()
    it = Walker(fs).batches()
    with next(it):
        pass
    it.close()
    assert fd_count() == before


def test_unreadable_directory_is_reported_not_fatal(fs: Beneath, tree: Path) -> None:
    locked = tree / "locked"
    locked.mkdir()
    (locked / "x.py").write_text("x")
    os.chmod(locked, 0)
    try:
        w = Walker(fs)
        got = [f.path for f in w.files()]
    finally:
        os.chmod(locked, 0o755)
    assert b"setup.py" in got
    # as root, permissions do not stop us; as a user, the error is recorded instead
    assert b"locked/x.py" in got or any(p == b"locked" for p, _ in w.errors)


# -- ignore semantics against ripgrep on generated trees -------------------------------------

NAMES = st.sampled_from(["a", "b", "ab", "x.py", "y.log", "z.md", ".h", "a.py"])
PATTERNS = st.sampled_from(
    ["*.log", "!y.log", "a", "a/", "/a", "b/", "!b/", "*.py", "!x.py", "a/*.py", "**/b",
     "ab*", "!ab", "/z.md", "z.md", "*", "!*/", ".h", "!.h", "a/**", "[ax].py", "[!a]*",
     "?.py", "a/**/a", "**/a/b", "\\!x.py", "*.py ", "b/**/", "#a"]
)  # fmt: skip


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[str], dict[str, str]]:
    files = draw(st.lists(st.lists(NAMES, min_size=1, max_size=3), min_size=1, max_size=12))
    paths = sorted({"/".join(p) for p in files})
    dirs = sorted({"/".join(p[:i]) for p in files for i in range(len(p))})
    ignores = {}
    for d in draw(st.lists(st.sampled_from(dirs), max_size=3, unique=True)):
        kind = draw(st.sampled_from([".gitignore", ".ignore"]))
        ignores[f"{d}/{kind}" if d else kind] = "\n".join(draw(st.lists(PATTERNS, max_size=4)))
    return paths, ignores


@settings(max_examples=150, deadline=None)
@given(spec=trees())
def test_generated_ignore_trees_equal_rg(spec: tuple[list[str], dict[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _compare_generated(Path(tmp), *spec)


def _compare_generated(root: Path, paths: list[str], ignores: dict[str, str]) -> None:
    made = []
    for p in paths:
        target = root / p
        if any(q.startswith(p + "/") for q in paths):
            continue  # a name used as a directory elsewhere
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.parent.is_file():
            continue
        target.write_text("x\n")
        made.append(p)
    for p, text in ignores.items():
        if (root / p).parent.is_dir():
            (root / p).write_text(text + "\n")
    with Beneath.pin(str(root)) as b:
        for opts, flags in (({}, []), ({"hidden": True}, ["--hidden"])):
            assert list_files(b, **opts) == rg_files(root, *flags), (paths, ignores)


def test_bad_ignore_lines_are_skipped_not_fatal(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "[z-a]\n!\nfoo\\\n\xff\n*.log\n")
    write(tmp_path, "a.log")
    write(tmp_path, "b.py")
    with Beneath.pin(str(tmp_path)) as b:
        assert list_files(b) == [b"b.py"]


@pytest.mark.timeout(60, method="thread")  # a backtracking engine would never finish this
def test_ignore_globs_cannot_blow_up(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b\n")
    write(tmp_path, "a" * 200)
    with Beneath.pin(str(tmp_path)) as b:
        assert list_files(b) == [b"a" * 200]


def test_deep_tree_with_long_names_beyond_path_max(tmp_path: Path, mode: str) -> None:
    """Paths longer than 4096 bytes: the walker gets back into closed levels name by name."""
    r = tmp_path / "long"
    r.mkdir()
    name = "n" * 200
    # 90 * 201 bytes > 4096, and deeper than the fds the walker keeps
    make_chain(r, name, 90, "leaf.py", extra={45: "mid.py"})
    (r / "zz.py").write_text("x\n")
    with Beneath.pin(str(r), use_openat2=(mode == "openat2")) as b:
        w = Walker(b)
        got = [f.path for f in w.files()]
    n = name.encode()
    assert got == [(n + b"/") * 45 + b"mid.py", (n + b"/") * 90 + b"leaf.py", b"zz.py"]
    assert w.errors == []
    flatten_chain(r, name, 90)


def test_explicit_start_through_an_inside_link_is_searched(fs: Beneath, tree: Path) -> None:
    os.symlink("src/app.py", tree / "entry.py")
    got = [f.path for f in Walker(fs, b"entry.py").files()]
    assert got == [b"entry.py"]
    batches = list(Walker(fs, b"entry.py").batches())
    with batches[0] as batch:
        from rootgrep.confine import read_searchable_at

        assert read_searchable_at(batch.fd, batch.files[0].name, 1 << 20) == b"x\n"


def test_any_ignore_file_beats_any_gitignore_like_rg(tmp_path: Path) -> None:
    """Found by the generated trees: a root .ignore whitelist wins over a deeper .gitignore."""
    write(tmp_path, ".ignore", "!x.py\n")
    write(tmp_path, "a/a/.gitignore", "[ax].py\n")
    write(tmp_path, "a/a/x.py")
    write(tmp_path, "a/a/y.py")
    with Beneath.pin(str(tmp_path)) as b:
        assert list_files(b) == rg_files(tmp_path) == [b"a/a/x.py", b"a/a/y.py"]


# -- path_batches: an index's known paths, opened beneath the root ------------------------------


def test_path_batches_read_the_walked_files_again(fs: Beneath, tree: Path) -> None:
    walked = list_files(fs)
    got: list[bytes] = []
    before = fd_count()
    for batch in path_batches(fs, walked):
        with batch:
            for f in batch.files:
                # each file opens by its one name beneath the batch's directory fd
                fd = os.open(f.name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=batch.fd)
                os.close(fd)
                got.append(f.path)
    assert got == walked
    assert fd_count() == before


def test_path_batches_never_follow_a_link_or_leave_the_root(fs: Beneath, tree: Path) -> None:
    # a directory that became a link (to inside and to outside the root), a ".." and a
    # directory that is gone: each is skipped with its files, nothing else is
    paths = [b"../outside.py", b"a/z.py", b"escape/x", b"gone/f.py", b"link_dir/app.py",
             b"src/app.py"]  # fmt: skip
    before = fd_count()
    got = [f.path for b in path_batches(fs, paths) for f in b.files if not b.close()]
    assert got == [b"a/z.py", b"src/app.py"]
    assert fd_count() == before


def test_path_batches_on_a_deep_tree_keep_fds_bounded(tmp_path: Path, mode: str) -> None:
    r = tmp_path / "deep"
    r.mkdir()
    make_chain(r, "d", 300, "leaf.py", extra={10: "mid.py"})
    with Beneath.pin(str(r), use_openat2=(mode == "openat2")) as b:
        walked = list_files(b)
        before = fd_count()
        peak = 0
        got: list[bytes] = []
        for batch in path_batches(b, walked):
            with batch:
                peak = max(peak, fd_count() - before)
                got.extend(f.path for f in batch.files)
        assert got == walked and len(walked) == 2
        assert peak < 80
        assert fd_count() == before
    flatten_chain(r, "d", 300)


@given(st.lists(st.lists(st.sampled_from([b"a", b"a.b", b"a-", b"b", b"\xff", b"A"]),
                         min_size=1, max_size=4), max_size=12))  # fmt: skip
def test_order_key_is_component_wise_order(comps: list[list[bytes]]) -> None:
    paths = [b"/".join(c) for c in comps]
    assert sorted(paths, key=order_key) == sorted(paths, key=lambda p: p.split(b"/"))


def test_listed_is_what_a_walk_lists(fs: Beneath, tree: Path) -> None:
    every = [os.fsencode(os.path.relpath(os.path.join(d, n), tree))
             for d, dirs, files in os.walk(tree) for n in dirs + files]  # fmt: skip
    every += [b"missing.py", b"src/missing/x.py", b"../outside", b"link_dir/app.py"]
    assert Walker(fs).listed(every) == set(list_files(fs))
    dirs = Walker(fs).listed(every, kind="dir")
    assert b"src" in dirs and b"build" not in dirs and b"link_dir" not in dirs


def test_a_lent_walk_lists_the_same_files_and_holds_no_fd_after(tmp_path: Path) -> None:
    """``batches(lent=True)`` (the re-sync's walk) hands out the walker's own directory fds:
    the same files with the same stats as a walk of dups, a batch's close leaves the fd to
    the walker, and the walk leaves no fd open behind it."""
    root = tmp_path / "root"
    for i in range(30):
        write(root, f"d{i % 4}/sub{i % 3}/f{i}.txt", "x" * i)
    write(root, "d0/.hidden/h.txt")
    os.symlink("d1", root / "link")
    fs = Beneath.pin(str(root))
    try:
        opts = WalkOptions(max_file_size=20)
        before = fd_count()
        lent, dups = [], []
        for batch in Walker(fs, b"", opts).batches(lent=True):
            with batch:
                assert not batch.owned and os.fstat(batch.fd)
                lent += [(f.path, f.stat.st_size) for f in batch.files if f.stat is not None]
                kept = batch.fd
            assert batch.fd == -1 and os.fstat(kept)  # (closed by the walker, not the batch)
        assert fd_count() == before
        for batch in Walker(fs, b"", opts).batches():
            with batch:
                dups += [(f.path, f.stat.st_size) for f in batch.files if f.stat is not None]
        assert lent == dups and len(lent) == 21  # (f0..f20: at most 20 bytes)
        assert [p for p, _ in lent] == list_files(fs, max_file_size=20)
    finally:
        fs.close()


def test_the_walks_listing_and_stat_helpers_keep_links_and_specials_out(tmp_path: Path) -> None:
    """``confine.scan_split``: dot names apart, each list in name order, links unfollowed;
    ``confine.stat_regular_each``: regular files up to the size only, by one name each."""
    from rootgrep import confine
    from rootgrep.walker import FileEntry

    d = tmp_path / "d"
    d.mkdir()
    (d / "b.txt").write_text("bb")
    (d / "a.txt").write_text("a")
    (d / "big.txt").write_text("x" * 100)
    (d / ".dot").write_text("d")
    (d / "sub").mkdir()
    os.symlink("a.txt", d / "ln")
    os.mkfifo(d / "fifo")
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        dotted, plain, _cut = confine.scan_split(fd)
        assert dotted == [(b".dot", "file")]
        assert plain == [(b"a.txt", "file"), (b"b.txt", "file"), (b"big.txt", "file"),
                         (b"fifo", "other"), (b"ln", "symlink"), (b"sub", "dir")]  # fmt: skip
        names = [b"a.txt", b"b.txt", b"big.txt", b"fifo", b"ln", b"sub", b"gone"]
        got = confine.stat_regular_each(fd, names, b"d/", 10, FileEntry)
        assert [(f.name, f.path, f.stat.st_size) for f in got] == [
            (b"a.txt", b"d/a.txt", 1), (b"b.txt", b"d/b.txt", 2)
        ]  # fmt: skip
        assert all(isinstance(f, FileEntry) for f in got)
    finally:
        os.close(fd)
