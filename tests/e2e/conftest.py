"""Fixtures for end-to-end tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from rootgrep.audit import Audit
from rootgrep.index.manager import IndexManager
from rootgrep.roots import pin_root
from rootgrep.server import RootgrepServer, build_server
from rootgrep.service import Service, Settings


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., RootgrepServer]]:
    made: list[Service] = []

    def make(
        operator: Sequence[Path] = (), *, allow_write: bool = False, audit: Path | None = None,
        roots_ttl: float = 5.0, index: bool = False, max_answer_chars: int | None = None,
    ) -> RootgrepServer:  # fmt: skip
        roots = [pin_root(str(p)) for p in operator]
        indexes = IndexManager(str(tmp_path / "cache")) if index else None
        for r in roots if indexes else []:
            indexes.activate(r, 0)
        service = Service(
            roots,
            Settings(
                allow_write=allow_write,
                roots_ttl=roots_ttl,
                **({"max_answer_chars": max_answer_chars} if max_answer_chars else {}),
            ),
            Audit(str(audit) if audit else None),
            indexes,
        )
        made.append(service)
        return build_server(service)

    yield make  # type: ignore[misc]
    for s in made:
        if s.indexes is not None:
            s.indexes.close()
        for r in s.operator_roots:
            r.close()
        s.audit.close()
