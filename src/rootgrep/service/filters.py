"""Which paths a call keeps: its include/exclude globs, and the nested roots it leaves to
themselves (a path below one of them)."""

from __future__ import annotations

from collections.abc import Callable

from ..globs import Globs


def path_filter(
    include: list[str] | None, exclude: list[str] | None
) -> Callable[[bytes], bool] | None:
    if not include and not exclude:
        return None
    inc = Globs(include, "include glob") if include else None
    exc = Globs(exclude, "exclude glob") if exclude else None

    def keep(path: bytes) -> bool:
        if inc is not None and not inc.match(path):
            return False
        return not (exc is not None and exc.match(path))

    return keep


def below_any(path: bytes, dirs: frozenset[bytes]) -> bool:
    """Whether ``path`` lies below one of ``dirs`` (root-relative)."""
    i = path.find(b"/")
    while i > 0:
        if path[:i] in dirs:
            return True
        i = path.find(b"/", i + 1)
    return False
