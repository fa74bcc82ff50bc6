"""Ignore files (``.gitignore``, ``.ignore``): gitignore globs matched per entry, as ripgrep does.

Why not ``pathspec.GitIgnoreSpec`` here: it also applies a directory pattern to everything below
that directory (``!b/`` re-includes ``a/b/.hidden``, ``b/`` ignores ``a/b/x`` even where a deeper
ignore file re-included ``b/``), which disagrees with ripgrep; the walker never descends into an
ignored directory, so each entry must be judged by the rules that name the entry itself.
pathspec stays in use for the tools' include/exclude globs, where "everything below" is wanted.

Globs compile to one RE2 set per file (linear time: no pattern/name pair can blow up); a line
that does not compile is skipped, as git skips a bad line.
"""

from __future__ import annotations

from dataclasses import dataclass

import re2


@dataclass(frozen=True, slots=True)
class IgnoreRule:
    pattern: bytes
    negate: bool
    dir_only: bool
    regex: bytes


def parse_rule(line: bytes) -> IgnoreRule | None:
    """One line of an ignore file, or None for blanks and comments."""
    line = line.rstrip(b"\r")
    if not line or line.startswith(b"#"):
        return None
    while line.endswith(b" ") and not line.endswith(b"\\ "):
        line = line[:-1]
    negate = False
    if line.startswith(b"!"):
        negate, line = True, line[1:]
    elif line.startswith((b"\\!", b"\\#")):
        line = line[1:]
    dir_only = line.endswith(b"/")
    if dir_only:
        line = line[:-1]
    if not line:
        return None
    anchored = b"/" in line
    if line.startswith(b"/"):
        line = line[1:]
    body = _glob_to_regex(line)
    if not anchored:
        body = b"(?:.*/)?" + body
    return IgnoreRule(line, negate, dir_only, body)


def _glob_to_regex(glob: bytes) -> bytes:
    out: list[bytes] = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i : i + 1]
        if glob.startswith(b"**", i):
            at_start = i == 0 or glob[i - 1 : i] == b"/"
            at_end = i + 2 == n or glob[i + 2 : i + 3] == b"/"
            if at_start and at_end:
                if i + 2 == n:  # trailing '/**' (or a lone '**'): everything below
                    out.append(b".*")
                    i += 2
                else:  # '**/' : zero or more directories
                    out.append(b"(?:.*/)?")
                    i += 3
                continue
            out.append(b"[^/]*")
            i += 2
            continue
        if c == b"*":
            out.append(b"[^/]*")
        elif c == b"?":
            out.append(b"[^/]")
        elif c == b"[":
            end, cls = _class(glob, i)
            if end < 0:
                out.append(_lit(c))
            else:
                out.append(cls)
                i = end
                continue
        elif c == b"\\" and i + 1 < n:
            out.append(_lit(glob[i + 1 : i + 2]))
            i += 2
            continue
        else:
            out.append(_lit(c))
        i += 1
    return b"".join(out)


def _class(glob: bytes, i: int) -> tuple[int, bytes]:
    """Translate ``[...]`` starting at ``i``; (-1, b"") when it is not a closed class."""
    j = i + 1
    negate = False
    if j < len(glob) and glob[j : j + 1] in (b"!", b"^"):
        negate = True
        j += 1
    items: list[bytes] = []
    first = True
    while j < len(glob):
        c = glob[j : j + 1]
        if c == b"]" and not first:
            body = b"".join(items)
            return j + 1, (b"[^/" + body + b"]") if negate else (b"[" + body + b"]")
        if c == b"\\" and j + 1 < len(glob):
            items.append(_lit(glob[j + 1 : j + 2]))
            j += 2
        elif c == b"-" and items and j + 1 < len(glob) and glob[j + 1 : j + 2] != b"]":
            items.append(b"-")
            j += 1
        elif c == b"/":
            j += 1  # a class never matches the separator
        else:
            items.append(b"\\" + c if c in b"\\^[]" else c)
            j += 1
        first = False
    return -1, b""


def _lit(c: bytes) -> bytes:
    return c if c.isalnum() else b"\\" + c if c.isascii() else c


_OPTIONS = re2.Options()
_OPTIONS.encoding = re2.Options.Encoding.LATIN1  # names are bytes; one byte, one character
_OPTIONS.dot_nl = True  # names may hold newlines
_OPTIONS.log_errors = False


class IgnoreFile:
    """The rules of one ignore file; the last rule that matches an entry decides."""

    __slots__ = ("_dirs", "_files", "rules")

    def __init__(self, rules: list[IgnoreRule]) -> None:
        good = [r for r in rules if _compiles(r.regex)]
        self.rules = good
        self._files = _rule_set([(i, r) for i, r in enumerate(good) if not r.dir_only])
        self._dirs = _rule_set(list(enumerate(good)))

    @classmethod
    def parse(cls, data: bytes) -> IgnoreFile:
        rules = [r for r in map(parse_rule, data.split(b"\n")) if r is not None]
        return cls(rules)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def check(self, rel: bytes, is_dir: bool) -> bool | None:
        """True: ignored; False: re-included by a negation; None: no rule names it."""
        compiled = self._dirs if is_dir else self._files
        if compiled is None:
            return None
        rset, index = compiled
        hits = rset.Match(rel)
        if not hits:
            return None
        return not self.rules[index[max(hits)]].negate


def _compiles(regex: bytes) -> bool:
    try:
        re2.compile(regex, _OPTIONS)
    except re2.error:
        return False
    return True


def _rule_set(rules: list[tuple[int, IgnoreRule]]) -> tuple[re2.Set, list[int]] | None:
    if not rules:
        return None
    rset = re2.Set.FullMatchSet(_OPTIONS)
    for _, r in rules:
        rset.Add(r.regex)
    rset.Compile()
    return rset, [i for i, _ in rules]
