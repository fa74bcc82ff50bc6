"""Fixtures for end-to-end tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from rootgrep.audit import Audit
from rootgrep.roots import pin_root
from rootgrep.server import RootgrepServer, build_server
from rootgrep.service import Service, Settings


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., RootgrepServer]]:
    made: list[Service] = []

    def make(
        operator: Sequence[Path] = (), *, allow_write: bool = False, audit: Path | None = None,
        roots_ttl: float = 5.0,
    ) -> RootgrepServer:  # fmt: skip
        service = Service(
            [pin_root(str(p)) for p in operator],
            Settings(allow_write=allow_write, roots_ttl=roots_ttl),
            Audit(str(audit) if audit else None),
        )
        made.append(service)
        return build_server(service)

    yield make  # type: ignore[misc]
    for s in made:
        for r in s.operator_roots:
            r.close()
        s.audit.close()
