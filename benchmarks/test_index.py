"""Index benchmarks: build speed and size, re-sync of an unchanged tree, indexed grep beside
ripgrep, peak memory while indexing, and how build and query time grow with the file count.

Indexed grep is measured in process with the index ready (what a serving process does); its
matching-line count must equal ripgrep's, so the times compare the same work.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from rootgrep.grep import GrepQuery, Matcher, run_grep
from rootgrep.index.manager import IndexManager
from rootgrep.index.plan import plan
from rootgrep.index.store import RootIndex, _dir_bytes
from rootgrep.roots import Root, pin_root
from rootgrep.service import Service, Settings, Token, indexed_batches, narrows
from runners import PATTERNS, Corpus, Pattern, Reference, Tools, rg_files

pytestmark = [pytest.mark.timeout(1800)]


class Indexed:
    def __init__(self, corpus: Corpus) -> None:
        self.cache = tempfile.mkdtemp(prefix="rootgrep-bench-cache-")
        self.root: Root = pin_root(corpus.path)
        self.manager = IndexManager(self.cache)  # watched, as a serving process runs it
        started = time.perf_counter()
        self.manager.activate(self.root, 0)
        assert self.manager.wait_built(self.root.path, 1800)
        self.build_seconds = time.perf_counter() - started
        ix = self.manager.get(self.root.path)
        assert ix is not None and ix.index is not None and ix.state == "ready"
        self.store = ix.index
        self.service = Service([self.root], Settings(), indexes=self.manager)

    def close(self) -> None:
        self.manager.close()
        self.root.close()
        shutil.rmtree(self.cache, ignore_errors=True)


@pytest.fixture(scope="module")
def indexed_s(corpus_s: Corpus) -> Iterator[Indexed]:
    ix = Indexed(corpus_s)
    yield ix
    ix.close()


@pytest.fixture(scope="module")
def indexed_f(corpus_f: Corpus) -> Iterator[Indexed]:
    ix = Indexed(corpus_f)
    yield ix
    ix.close()


def _indexed(request: pytest.FixtureRequest, name: str) -> Indexed:
    return request.getfixturevalue(f"indexed_{name.lower()}")


def grep_all(ix: Indexed, pattern: Pattern) -> int:
    """Every matching line through the index (candidates, then RE2 on each candidate file),
    without paging: the same work ``rg`` and the live benchmark do."""
    entry = ix.manager.get(ix.root.path)
    assert entry is not None
    matcher = Matcher(GrepQuery(pattern.text, regex=pattern.regex))
    q = plan(pattern.text, regex=pattern.regex)
    batches = indexed_batches(ix.root, (entry, b""), q, b"")
    return run_grep(matcher, batches, lambda fm: True, join=not narrows(q)).matches


@pytest.mark.parametrize("name", ["S", "F"])
@pytest.mark.parametrize("pattern", PATTERNS, ids=[p.key for p in PATTERNS])
def test_indexed_grep(benchmark: BenchmarkFixture, request: pytest.FixtureRequest, name: str,
                      pattern: Pattern, reference: Reference) -> None:  # fmt: skip
    ix = _indexed(request, name)
    corpus = request.getfixturevalue(f"corpus_{name.lower()}")
    benchmark.group = f"grep-{name}-{pattern.key}"
    benchmark.extra_info.update(op="grep", corpus=name, tool="rootgrep-indexed",
                                pattern=pattern.text)  # fmt: skip
    got = benchmark.pedantic(grep_all, args=(ix, pattern), rounds=corpus.rounds, iterations=1,
                             warmup_rounds=1)  # fmt: skip
    want = reference.lines(corpus, pattern)
    benchmark.extra_info.update(count=got, rg_count=want)
    assert got == want


@pytest.mark.parametrize("name", ["S", "F"])
def test_resync_unchanged(benchmark: BenchmarkFixture, request: pytest.FixtureRequest,
                          name: str, tools: Tools) -> None:  # fmt: skip
    ix = _indexed(request, name)
    benchmark.group = f"resync-{name}"
    benchmark.extra_info.update(op="resync", corpus=name, tool="rootgrep")
    stats = benchmark.pedantic(lambda: ix.store.sync(ix.root.fs), rounds=5, iterations=1,
                               warmup_rounds=1)  # fmt: skip
    assert stats.read == 0


@pytest.mark.parametrize("name", ["S", "F"])
def test_rg_files_for_resync(benchmark: BenchmarkFixture, request: pytest.FixtureRequest,
                             name: str, tools: Tools) -> None:  # fmt: skip
    corpus = request.getfixturevalue(f"corpus_{name.lower()}")
    benchmark.group = f"resync-{name}"
    benchmark.extra_info.update(op="resync", corpus=name, tool="rg --files")
    benchmark.pedantic(rg_files, args=(tools.rg, corpus.path), rounds=5, iterations=1,
                       warmup_rounds=1)  # fmt: skip


@pytest.mark.parametrize("name", ["S", "F"])
def test_build(benchmark: BenchmarkFixture, request: pytest.FixtureRequest, name: str) -> None:
    """A fresh build of the whole corpus (one round: it is long), and the index's size."""
    corpus = request.getfixturevalue(f"corpus_{name.lower()}")
    root = pin_root(corpus.path)
    caches: list[str] = []

    took: list[float] = []

    def build() -> RootIndex:
        cache = tempfile.mkdtemp(prefix="rootgrep-bench-build-")
        caches.append(cache)
        started = time.perf_counter()
        ix = RootIndex(cache, root.path)
        ix.sync(root.fs)
        took.append(time.perf_counter() - started)
        return ix

    try:
        benchmark.group = f"build-{name}"
        ix = benchmark.pedantic(build, rounds=1, iterations=1)
        text = ix.size_bytes
        size = _dir_bytes(ix.dir)
        seconds = took[-1]  # (also when benchmarking is disabled: pytest without --benchmark-*)
        benchmark.extra_info.update(
            op="build", corpus=name, tool="rootgrep", files=ix.file_count, text_bytes=text,
            index_bytes=size, size_ratio=round(size / text, 3),
            mb_per_s=round(text / seconds / 1e6, 1),
        )  # fmt: skip
    finally:
        root.close()
        for c in caches:
            shutil.rmtree(c, ignore_errors=True)


def test_peak_rss_while_indexing(
    benchmark: BenchmarkFixture, corpus_f: Corpus, tools: Tools
) -> None:
    """Peak resident memory of `rootgrep index` over F, in a child process (one round)."""
    cache = tempfile.mkdtemp(prefix="rootgrep-bench-rss-")

    peak: list[float] = []

    def index() -> None:
        # a wrapper process whose only child is the indexer: its children's peak is the
        # indexer's own (this process's children include rg, node and servers)
        probe = (
            "import resource, subprocess, sys; "
            "subprocess.run(sys.argv[1:], check=True, capture_output=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
        )
        out = subprocess.run(
            [sys.executable, "-c", probe, tools.rootgrep, "index", corpus_f.path,
             "--cache-dir", cache],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        peak.append(int(out.stdout.strip()) / 1024)

    try:
        benchmark.group = "rss-F"
        benchmark.pedantic(index, rounds=1, iterations=1)
        peak_mib = peak[-1]
        benchmark.extra_info.update(op="rss", corpus="F", tool="rootgrep index",
                                    peak_mib=round(peak_mib))  # fmt: skip
        assert peak_mib < 1024  # 1 GiB
    finally:
        shutil.rmtree(cache, ignore_errors=True)


# -- growth with the number of files (a synthetic corpus) --------------------------------------

SCALES = [25_000, 50_000, 100_000, 200_000]


@pytest.fixture(scope="module")
def synthetic() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="rootgrep-bench-synth-"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _grow(base: Path, n: int) -> Path:
    """A tree of ``n`` small source-like files (grown incrementally across scales)."""
    root = base / "tree"
    have = sum(len(f) for _, _, f in os.walk(root)) if root.exists() else 0
    for i in range(have, n):
        d = root / f"pkg{i // 1000:03}" / f"mod{(i // 100) % 10}"
        if i % 100 == 0:
            d.mkdir(parents=True, exist_ok=True)
        (d / f"file{i}.py").write_text(
            f"def handler_{i}(request):\n    value = compute_{i % 977}(request)\n"
            f"    if value is None:\n        raise ValueError('missing {i}')\n    return value\n"
        )
    return root


@pytest.mark.parametrize("n", SCALES)
def test_scaling(benchmark: BenchmarkFixture, synthetic: Path, n: int) -> None:
    root_dir = _grow(synthetic, n)
    root = pin_root(str(root_dir))
    cache = tempfile.mkdtemp(prefix="rootgrep-bench-scale-")
    try:
        ix = RootIndex(cache, root.path)
        started = time.perf_counter()
        ix.sync(root.fs)
        build = time.perf_counter() - started
        manager = IndexManager(cache)
        manager.activate(root, 0)
        assert manager.wait_built(root.path, 600)
        assert manager.get(root.path).state == "ready"
        svc = Service([root], Settings(), indexes=manager)

        def query() -> int:
            res = svc.grep([root], Token(), pattern="handler_4242(", max_results=100)
            assert res.index_used
            return len(res.matches)

        benchmark.group = "scale"
        benchmark.extra_info.update(op="scale", files=n, tool="rootgrep",
                                    build_seconds=round(build, 2))  # fmt: skip
        got = benchmark.pedantic(query, rounds=10, iterations=1, warmup_rounds=1)
        assert got == (1 if n > 4242 else 0)
        manager.close()
    finally:
        root.close()
        shutil.rmtree(cache, ignore_errors=True)
