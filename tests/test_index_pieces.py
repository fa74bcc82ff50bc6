"""A large file's trigrams indexed in pieces cut at line ends (schema 9, ``tri_pieces``): indexed
grep still equals a live scan and ripgrep where a match sits at or across a piece's edge, a rare
literal's trigrams spread far apart in a big file no longer make it a candidate, and the part
documents never show anywhere else (search, symbols) nor outlive their file."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootgrep.grep import text_of
from rootgrep.index.manager import IndexManager
from rootgrep.index.plan import Q, plan
from rootgrep.index.search_syntax import parse_search
from rootgrep.index.store import RootIndex
from rootgrep.index.trigrams import PIECE_CHARS, PIECE_OVER, tri_pieces
from rootgrep.roots import Root, pin_root
from rootgrep.service import Service, Settings, Token
from support import RG, rg_matches

FILLER = "filler line {:06d} holds nothing of note here\n"


def filler(n: int) -> list[str]:
    return [FILLER.format(i) for i in range(n)]


def pieces_of(path: Path) -> list[str]:
    return tri_pieces(text_of(path.read_bytes()).decode("utf-8", "replace"))


def put(lines: list[str], i: int, text: str) -> None:
    """Line ``i`` replaced by ``text`` padded to the same length (the pieces stay put)."""
    old = lines[i]
    assert len(text) < len(old)
    lines[i] = text + "." * (len(old) - 1 - len(text)) + "\n"


def first_lines(lines: list[str]) -> list[int]:
    """The index of the line each piece of the text of ``lines`` starts with."""
    starts, i = [], 0
    for piece in tri_pieces("".join(lines)):
        starts.append(i)
        i += piece.count("\n")
    return starts


@pytest.fixture(scope="module")
def edges(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tree with one large file whose matches sit at the edges of its pieces."""
    tree = tmp_path_factory.mktemp("edges")
    lines = filler(4000)  # (about 180 KB: a dozen pieces)
    starts = first_lines(lines)
    assert len(starts) > 6
    put(lines, starts[3], "right_after_an_edge = 1")  # the first line of a piece
    put(lines, starts[3] - 1, "right_before_an_edge = 2")  # the last line of the one before
    put(lines, len(lines) - 1, "only_in_the_last_piece()")
    # a rare word's two halves on either side of an edge, on two lines: every trigram of
    # "alphaomega" is in the file, none of its lines holds the word
    put(lines, starts[4] - 1, "the tail ends with alphao")
    put(lines, starts[4], "aomega starts the head")
    # and a regex's two literals so (ALPHA\s*OMEGA: ALPHA and OMEGA on one line)
    put(lines, starts[5] - 1, "the tail ends with ALPHA")
    put(lines, starts[5], "OMEGA starts the head")
    # and on one line in another piece, where it does match (case-insensitively)
    put(lines, starts[1] + 7, "here alpha then omega on one line")
    text = "".join(lines[: starts[6]])
    # a line longer than a piece, its match near its end, then the rest of the file
    long_line = "x" * (PIECE_CHARS + 5000) + " inside_a_long_line\n"
    text += long_line + "".join(lines[starts[6] :])
    (tree / "big.txt").write_text(text)
    (tree / "small.txt").write_text("right_after_an_edge in a small file\nAlpha Omega\n")
    pieces = pieces_of(tree / "big.txt")
    assert len(pieces) > 6 and any(p == long_line or long_line in p for p in pieces)
    assert any(p.startswith("right_after_an_edge") for p in pieces)
    assert any(p.startswith("OMEGA") for p in pieces)
    assert any(p.startswith("aomega") for p in pieces)
    assert "only_in_the_last_piece" in pieces[-1]
    assert all("only_in_the_last_piece" not in p for p in pieces[:-1])
    return tree


@pytest.fixture(scope="module")
def served(
    edges: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Root, Service, Service, IndexManager]]:
    r = pin_root(str(edges))
    manager = IndexManager(str(tmp_path_factory.mktemp("cache")))
    try:
        manager.activate(r, 0)
        assert manager.wait_built(r.path, 60)
        yield r, Service([r], Settings(), indexes=manager), Service([r], Settings()), manager
    finally:
        manager.close()
        r.close()


def lines_of(svc: Service, r: Root, pattern: str, regex: bool, cs: bool) -> tuple[list, bool]:  # type: ignore[type-arg]
    res = svc.grep([r], Token(), pattern=pattern, regex=regex, case_sensitive=cs,
                   max_results=1000)  # fmt: skip
    return [(m.path, m.line) for m in res.matches], res.index_used


def rg_lines(tree: Path, pattern: str, regex: bool, cs: bool) -> list[tuple[str, int]]:
    return rg_matches(tree, pattern, *([] if regex else ["-F"]), *([] if cs else ["-i"]))


@pytest.mark.parametrize(
    ("pattern", "regex", "cs", "matches"),
    [
        ("right_after_an_edge", False, True, 2),
        ("right_before_an_edge", False, True, 1),
        (r"^right_after_an_edge = 1\.*$", True, True, 1),
        (r"right_before_an_edge = 2\.*$", True, True, 1),
        ("only_in_the_last_piece()", False, True, 1),
        ("inside_a_long_line", False, True, 1),
        (r"x{100} inside_a_long_line$", True, True, 1),
        ("alphaomega", False, True, 0),  # (its trigrams straddle an edge, on two lines)
        ("ALPHAOMEGA", False, False, 0),
        (r"ALPHA\s*OMEGA", True, True, 0),
        (r"(?i)alpha.*omega", True, True, 2),  # (on one line: in another piece, and small.txt)
        (r"alpha.*omega", True, False, 2),
        ("filler line 003998", False, True, 1),
    ],
)
def test_indexed_grep_equals_a_live_scan_and_rg_at_the_edges_of_pieces(
    edges: Path, served: tuple[Root, Service, Service, IndexManager], pattern: str,
    regex: bool, cs: bool, matches: int,
) -> None:  # fmt: skip
    r, indexed, live, _ = served
    got, used = lines_of(indexed, r, pattern, regex, cs)
    want, used_live = lines_of(live, r, pattern, regex, cs)
    assert used and not used_live
    assert got == want == rg_lines(edges, pattern, regex, cs)
    assert len(got) == matches


def test_trigrams_straddling_an_edge_on_two_lines_make_no_candidate(
    served: tuple[Root, Service, Service, IndexManager],
) -> None:
    r, _, _, manager = served
    held = manager.get(r.path)
    assert held is not None and held.index is not None
    ix = held.index
    # (the whole file holds every trigram of these; no one piece holds them all)
    assert ix.candidates(plan("alphaomega", regex=False)) == []
    assert ix.candidates(plan("ALPHAOMEGA", regex=False, case_sensitive=False)) == []
    assert ix.candidates(plan(r"ALPHA\s*OMEGA", regex=True)) == []
    assert ix.candidates(plan(r"(?i)alpha.*omega", regex=True)) == [b"big.txt", b"small.txt"]


def rare_tree(root: Path) -> None:
    root.mkdir()
    # a big file that holds every trigram of "getrecursionlimit", far apart, never the word
    lines = filler(3000)
    put(lines, 10, "sys.getrecursion()")
    put(lines, 2990, "the recursionlimit is set")
    (root / "big.json").write_text("".join(lines))
    (root / "a.py").write_text("import sys\nprint(sys.getrecursionlimit())\n")
    (root / "z.py").write_text("x = 1\n" * 20_000 + "sys.getrecursionlimit()\n")  # (a match)


def test_a_big_file_holding_a_rare_literals_trigrams_far_apart_is_no_candidate(
    tmp_path: Path,
) -> None:
    rare_tree(tmp_path / "tree")
    r = pin_root(str(tmp_path / "tree"))
    ix = RootIndex(str(tmp_path / "cache"), r.path)
    try:
        ix.sync(r.fs)
        assert len(pieces_of(tmp_path / "tree" / "big.json")) > 4
        assert ix.candidates(plan("getrecursionlimit", regex=False)) == [b"a.py", b"z.py"]
        # (each piece of z.py that holds it answers for it: one path, once)
        assert ix.candidates(plan("x = 1", regex=False)) == [b"z.py"]
        assert ix.candidates(plan("filler line", regex=False)) == [b"big.json"]
        assert ix.candidates(Q("all")) == [b"a.py", b"big.json", b"z.py"]
    finally:
        ix.close()
        r.close()


def doc_count(ix: RootIndex) -> int:
    ix.reload()
    return int(ix.index.searcher().num_docs)


def pieces_in(tree: Path) -> int:
    """The documents the index should hold for ``tree``: per (text) file, one part document
    per piece of its trigrams and its main document."""
    return sum(len(pieces_of(p)) + 1 for p in tree.rglob("*") if p.is_file())


def test_editing_and_deleting_a_large_file_leaves_no_part_documents(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    rare_tree(tree)
    r = pin_root(str(tree))
    ix = RootIndex(str(tmp_path / "cache"), r.path)
    try:
        ix.sync(r.fs)
        assert doc_count(ix) == pieces_in(tree) > 2 * 3 + 4
        big = tree / "big.json"
        big.write_text("".join(filler(1500)) + "getrecursionlimit at last\n")  # fewer pieces
        ix.sync(r.fs)
        assert doc_count(ix) == pieces_in(tree)
        assert ix.candidates(plan("getrecursionlimit", regex=False)) == [
            b"a.py", b"big.json", b"z.py"
        ]  # fmt: skip
        big.unlink()
        (tree / "z.py").write_text("small now\n")
        ix.sync(r.fs)
        assert doc_count(ix) == pieces_in(tree) == 4
        assert ix.candidates(plan("getrecursionlimit", regex=False)) == [b"a.py"]
        assert ix.candidates(plan("filler line", regex=False)) == []
        assert ix.candidates(plan("x = 1", regex=False)) == []
    finally:
        ix.close()
        r.close()


@pytest.mark.parametrize("query", ["-nothingatall", "ext:json", "-ext:py", "-recursionlimit"])
def test_a_search_of_only_filters_or_excludes_shows_each_file_once(
    tmp_path: Path, query: str
) -> None:
    rare_tree(tmp_path / "tree")
    r = pin_root(str(tmp_path / "tree"))
    ix = RootIndex(str(tmp_path / "cache"), r.path)
    try:
        ix.sync(r.fs)
        got = sorted(rel for _, rel, _ in ix.rank(parse_search(query)).hits)
        want = {
            "-nothingatall": [b"a.py", b"big.json", b"z.py"],
            "ext:json": [b"big.json"],
            "-ext:py": [b"big.json"],
            "-recursionlimit": [b"a.py", b"z.py"],  # (big.json holds the word)
        }[query]
        assert got == want
    finally:
        ix.close()
        r.close()


def test_the_symbols_of_a_large_file_come_from_its_main_document(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    body = "".join(f"    v{i} = {i}\n" for i in range(6000))
    (tree / "big.py").write_text("def first():\n" + body + "def last():\n    pass\n")
    r = pin_root(str(tree))
    ix = RootIndex(str(tmp_path / "cache"), r.path)
    try:
        ix.sync(r.fs)
        assert len(pieces_of(tree / "big.py")) > 2
        syms = ix.symbols_of(b"big.py")
        assert syms is not None and [s.name for s in syms] == ["first", "last"]
        assert [rel for rel, _ in ix.find_symbols("last")] == [b"big.py"]
    finally:
        ix.close()
        r.close()


def test_pieces_are_cut_at_line_ends_and_join_to_the_text() -> None:
    text = "".join(filler(3000)) + "y" * (3 * PIECE_CHARS) + "\nend"
    pieces = tri_pieces(text)
    assert "".join(pieces) == text and len(pieces) > 3
    assert all(p.endswith("\n") and len(p) >= PIECE_CHARS for p in pieces[:-1])
    assert any(p.strip("\n") == "y" * (3 * PIECE_CHARS) or "y" * (3 * PIECE_CHARS) in p
               for p in pieces)  # fmt: skip
    assert tri_pieces("a\n" * (PIECE_OVER // 2)) == ["a\n" * (PIECE_OVER // 2)]  # (not over)


@pytest.mark.parametrize("pattern", [r"c\C", r"abc\Cdef", r"\C", r"(?s)x|\C+", r"\\\C"])
def test_a_regex_with_any_byte_is_refused_as_ripgrep_refuses_it(
    tmp_path: Path, pattern: str
) -> None:
    """RE2's ``\\C`` matches any byte, a line end too (``never_nl`` leaves it free): a "line"
    match then spans lines (and files joined for one scan), where a piece's trigrams are not
    all of a match's. ripgrep refuses the escape; so does grep, live or indexed."""
    from rootgrep.errors import InvalidPattern

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("one abc\n")
    (tree / "b.txt").write_text("def two\n")
    (tree / "c.txt").write_text("xabc\ndefx\nC and \\C\n")
    r = pin_root(str(tree))
    manager = IndexManager(str(tmp_path / "cache"))
    try:
        manager.activate(r, 0)
        assert manager.wait_built(r.path, 60)
        for svc in (Service([r], Settings(), indexes=manager), Service([r], Settings())):
            with pytest.raises(InvalidPattern, match=r"\\C"):
                svc.grep([r], Token(), pattern=pattern, regex=True, max_results=100)
        rg = subprocess.run([RG, "-e", pattern], cwd=tree, capture_output=True, check=False)
        assert rg.returncode == 2 and not rg.stdout
        # an escaped backslash before C, or C quoted, is no any-byte escape
        for ok in (r"\\C", r"and \\C$", r"\Qx\C\E|\\C"):
            live = Service([r], Settings()).grep([r], Token(), pattern=ok, regex=True)
            assert [(m.path, m.line) for m in live.matches] == [("c.txt", 3)]
    finally:
        manager.close()
        r.close()


def ranked(tmp_path: Path, tree: Path, name: str, query: str) -> list[tuple[float, bytes]]:
    r = pin_root(str(tree))
    ix = RootIndex(str(tmp_path / name), r.path)
    try:
        ix.sync(r.fs)
        return sorted(((round(s, 9), rel) for s, rel, _ in ix.rank(parse_search(query)).hits),
                      key=lambda t: (-t[0], t[1]))  # fmt: skip
    finally:
        ix.close()
        r.close()


@pytest.mark.xfail(strict=True, reason="known: BM25's corpus statistics count part documents")
def test_part_documents_leave_searchs_scores_as_one_document_per_file_gives_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BM25 (``search``'s tie-breaker) takes its number of documents and average field length
    from every document of the index, part documents too: a large file's pieces lower every
    field's average length and raise every word's IDF, which moves the scores and can swap
    files of nearly equal score. Not fixed: tantivy takes those figures from the segments
    (no per-query statistics), and a separate index for the pieces is a larger change."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "big.txt").write_text("".join(filler(20_000)))  # (about 60 pieces)
    (tree / "a.py").write_text("import os\n" + "x = os.sep\n" * 40)
    (tree / "b.py").write_text("import os\nimport sys\n" + "y = 2\n" * 3)
    (tree / "c.py").write_text("import sys\n" * 3)
    with_pieces = ranked(tmp_path, tree, "c1", "import os")
    monkeypatch.setattr("rootgrep.index.trigrams.tri_pieces", lambda text: [text])
    one_each = ranked(tmp_path, tree, "c2", "import os")
    assert with_pieces == one_each  # (on rootgrep's own src/: 13 of 15 queries reordered)


def test_a_file_growing_past_the_cut_renamed_and_shrinking_keeps_one_file_in_the_index(
    tmp_path: Path,
) -> None:
    """Under 32 KiB, over it (pieces), renamed, back under: after each sync the index holds
    exactly the pieces of the tree's files, each file once in ``search``, and a literal
    split over a piece edge of the old text is no candidate."""
    tree = tmp_path / "tree"
    tree.mkdir()
    f = tree / "grow.txt"
    f.write_text("".join(filler(100)) + "getrecursionlimit\n")
    (tree / "other.txt").write_text("nothing\n")
    r = pin_root(str(tree))
    ix = RootIndex(str(tmp_path / "cache"), r.path)

    def check(names: list[bytes], holding: list[bytes]) -> None:
        ix.sync(r.fs)
        assert doc_count(ix) == pieces_in(tree)
        assert sorted(rel for _, rel, _ in ix.rank(parse_search("-nothingatall")).hits) == names
        assert ix.candidates(plan("getrecursionlimit", regex=False)) == holding

    try:
        check([b"grow.txt", b"other.txt"], [b"grow.txt"])
        lines = filler(3000)
        put(lines, 5, "getrecursion")  # (far apart now: in two pieces)
        put(lines, 2995, "recursionlimit")
        f.write_text("".join(lines))
        assert len(pieces_of(f)) > 4
        check([b"grow.txt", b"other.txt"], [])
        f.rename(tree / "moved.txt")
        check([b"moved.txt", b"other.txt"], [])
        (tree / "moved.txt").write_text("getrecursionlimit\n")
        check([b"moved.txt", b"other.txt"], [b"moved.txt"])
    finally:
        ix.close()
        r.close()
