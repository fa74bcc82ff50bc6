"""A sync's progress says each count once: the manager turns every report into "indexing
ROOT: N files examined" for a client's log, and a listener hears no message twice
(``tests/e2e/test_answers_budget.py::test_build_messages_heard_once`` saw the total twice
under load: a tick on the last run of files reported the total that ``done`` then
reported again)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rootgrep.index import sync
from rootgrep.index.store import RootIndex
from rootgrep.roots import pin_root


@pytest.mark.parametrize("dirs", [1, 7])
def test_every_count_a_sync_reports_is_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dirs: int
) -> None:
    root = tmp_path / "root"
    for d in range(dirs):
        (root / f"d{d}").mkdir(parents=True)
        for i in range(5):
            (root / f"d{d}" / f"f{i}.txt").write_text(f"{d} {i}\n")
    monkeypatch.setattr(sync, "PROGRESS_SECONDS", 0.0)  # (a report at every chance)
    r = pin_root(str(root))
    ix = RootIndex(str(tmp_path / "cache"), r.path)
    try:
        for _ in range(3):  # the build, then re-syncs of the unchanged tree (the last with
            # every run found as kept: the walk says them, the sync's loop never sees them)
            said: list[tuple[int, int | None]] = []
            ix.sync(r.fs, progress=lambda done, total, _msg, said=said: said.append((done, total)))
            counts = [done for done, _ in said]
            assert counts == sorted(set(counts)), said  # (rising, never twice)
            assert said[0] == (0, None) and said[-1] == (5 * dirs, 5 * dirs)
            assert len(said) == 1 + dirs, said  # (the start, one per run but the first, the end)
    finally:
        ix.close()
        r.close()
