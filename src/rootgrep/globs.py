"""The tools' globs (``find_files`` patterns, ``include``/``exclude`` of grep and search):
gitignore-style (``pathspec.GitIgnoreSpec``: ``*.py`` matches at any depth, a pattern with a
``/`` is anchored, a directory pattern covers everything below it), matched on text.

Names are bytes and need not be UTF-8, while the glob engine matches text (and its RE2 backend
refuses lone surrogates, and its ``.`` stops at a line break). ``glob_text`` is the one place
that turns a name into the text a glob sees: UTF-8 decoded, and every byte that does not
decode, and every line break, becomes one U+FFFD, which ``*`` and ``?`` match like any
character. So ``*.py`` matches ``caf\\xe9.py`` and ``a\\nb/x.py``, and one odd name never fails
a tool for the whole root. Patterns go through the same mapping.
"""

from __future__ import annotations

from collections.abc import Sequence

from pathspec import GitIgnoreSpec

from .errors import InvalidPattern

GLOB_CHARS = frozenset("*?[")
_ODD = {cp: 0xFFFD for cp in range(0xD800, 0xE000)} | {0x0A: 0xFFFD}


def glob_text(name: bytes | str) -> str:
    """A root-relative path (or a pattern) as the text globs are matched against."""
    if isinstance(name, bytes):
        if b"\n" not in name:
            try:
                return name.decode("utf-8")
            except UnicodeDecodeError:
                pass
        name = name.decode("utf-8", "surrogateescape")  # one surrogate per undecodable byte
    return name.translate(_ODD)


class Globs:
    """Compiled gitignore-style globs: ``match(path)`` says whether they select a path (the
    last pattern that matches decides, ``!`` negates, as in a ``.gitignore``)."""

    __slots__ = ("_spec",)

    def __init__(self, patterns: Sequence[str], what: str = "glob") -> None:
        try:
            self._spec = GitIgnoreSpec.from_lines([glob_text(p) for p in patterns])
        except Exception as e:  # pathspec raises its own error types for bad globs
            shown = ", ".join(repr(p) for p in patterns)[:300]
            raise InvalidPattern(f"the {what} {shown} is not valid ({e})") from None

    def match(self, path: bytes) -> bool:
        return bool(self._spec.match_file(glob_text(path)))

    def verdict(self, path: bytes, is_dir: bool = False) -> bool | None:
        """The last pattern that matches ``path`` itself decides: True for a plain pattern,
        False for a ``!`` one, None when none does. Unlike ``match``, a pattern that matches
        only a directory above ``path`` does not count (ripgrep's ``-g`` rules, where such a
        directory is pruned or entered on its own verdict)."""
        text = glob_text(path)
        if is_dir:
            text += "/"
        end = len(text) - 1 if is_dir else -1  # where a directory mark may match: its own /
        for pattern in reversed(self._spec.patterns):
            rx = getattr(pattern, "regex", None)
            if pattern.include is None or rx is None:
                continue
            m = rx.match(text)
            if m is None:
                continue
            mark = rx.groupindex.get("ps_d")  # pathspec's group for "a directory above"
            if mark is not None and m.start(mark) not in (-1, end):
                continue
            return bool(pattern.include)
        return None


def has_glob_chars(pattern: str) -> bool:
    return any(c in GLOB_CHARS for c in pattern)
