"""Ignore files (``.gitignore``, ``.ignore``): gitignore globs matched per entry, as ripgrep does.

Why not ``pathspec.GitIgnoreSpec`` here: it also applies a directory pattern to everything below
that directory (``!b/`` re-includes ``a/b/.hidden``, ``b/`` ignores ``a/b/x`` even where a deeper
ignore file re-included ``b/``), which disagrees with ripgrep; the walker never descends into an
ignored directory, so each entry must be judged by the rules that name the entry itself.
pathspec stays in use for the tools' include/exclude globs, where "everything below" is wanted.

Globs compile to RE2 sets (linear time: no pattern/name pair can blow up), in parts of at most
``PART_RULES`` rules: one RE2 set has a memory budget, and a large ignore file (ripgrep takes
100k rules) would not fit in one. A part that still does not fit is halved until it does; a rule
that cannot compile even alone is skipped with a warning, as ripgrep skips a bad glob: one ignore
file never breaks a root.
"""

from __future__ import annotations

import _thread  # (its Lock: ``threading``'s set-up is 0.5 ms of the CLI's start-up)

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    from typing import Any

    import re2


def _warn(msg: str, *args: object) -> None:
    """A warning on the ``rootgrep.ignore`` logger (logging is imported only then: the CLI's
    start-up does without it)."""
    import logging

    logging.getLogger("rootgrep.ignore").warning(msg, *args)


PART_RULES = 2000  # rules per RE2 set (one set of 5,200 ordinary rules exceeds RE2's 8 MiB)


class IgnoreRule:
    """One rule: its pattern as written, whether it negates (``!``), holds for directories
    only (a trailing ``/``), its RE2 regex, and whether it is anchored (the pattern held a
    ``/``: it matches the whole relative path). (A plain class, not a dataclass: the CLI's
    start-up does not import ``dataclasses``.)"""

    __slots__ = ("anchored", "dir_only", "negate", "pattern", "regex")

    def __init__(
        self, pattern: bytes, negate: bool, dir_only: bool, regex: bytes, anchored: bool = False
    ) -> None:
        self.pattern = pattern
        self.negate = negate
        self.dir_only = dir_only
        self.regex = regex
        self.anchored = anchored

    def __repr__(self) -> str:
        return f"IgnoreRule({self.pattern!r}, negate={self.negate}, dir_only={self.dir_only})"


# Unicode White_Space (what ripgrep's trim_end removes; Python's isspace has a few more)
_WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + ("\u2028\u2029\u202f\u205f\u3000")
)


def parse_rule(line: bytes) -> IgnoreRule | None:
    """One line of an ignore file, or None for blanks and comments."""
    line = line.rstrip(b"\r")
    if not line or line.startswith(b"#"):
        return None
    if not line.endswith(b"\\ "):  # trailing white space goes, unless escaped (as ripgrep)
        line = (
            line.decode("utf-8", "surrogateescape")
            .rstrip(_WHITE_SPACE)
            .encode("utf-8", "surrogateescape")
        )
        if not line:
            return None
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
    try:
        body = _glob_to_regex(line)
    except ValueError as e:
        _warn("ignore rule %r is not a valid glob (%s); skipped", _text(line), e)
        return None
    if not anchored:
        body = b"(?:.*/)?" + body
    return IgnoreRule(line, negate, dir_only, body, anchored)


def _glob_to_regex(glob: bytes) -> bytes:
    """A gitignore glob as a regex over bytes, with ripgrep's ``{a,b}`` alternatives (not
    nested); ValueError for what ripgrep refuses (an unclosed class or group)."""
    out: list[bytes] = []
    i, n = 0, len(glob)
    outer: list[bytes] | None = None  # set inside a group: the regex before it
    alts: list[bytes] = []
    while i < n:
        c = glob[i : i + 1]
        if c == b"{":
            if outer is not None:
                raise ValueError("nested alternate groups")
            outer, out, alts = out, [], []
            i += 1
            continue
        if c == b"}":
            if outer is None:  # a '}' with no '{': ripgrep drops it
                i += 1
                continue
            alts.append(b"".join(out))
            kept = [a for a in alts if a]  # as ripgrep, empty alternatives are dropped
            out, outer = outer, None
            out.append(b"(?:" + b"|".join(kept) + b")")
            i += 1
            continue
        if c == b"," and outer is not None:
            alts.append(b"".join(out))
            out = []
            i += 1
            continue
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
            if end < 0:  # an unclosed class: not a glob (ripgrep skips such a rule)
                raise ValueError("unclosed character class")
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
    if outer is not None:
        raise ValueError("an unclosed '{'")
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


_made: dict[str, Any] = {}


def _options() -> Any:
    """RE2's options for the rules (RE2 imported on first use: plain rules, looked up in
    dicts, never need it, and the import is 2 ms of a CLI grep's start-up)."""
    opts = _made.get("options")
    if opts is None:
        import re2

        opts = re2.Options()
        opts.encoding = re2.Options.Encoding.LATIN1  # names are bytes; one byte, one character
        opts.dot_nl = True  # names may hold newlines
        opts.log_errors = False
        _made["options"] = opts  # (made twice by two threads at once: the same options)
    return opts


_META = frozenset(b"*?[]{}\\")
DICT_RULES_MIN = 256  # from this many rules on, plain ones are looked up in dicts


class IgnoreFile:
    """The rules of one ignore file; the last rule that matches an entry decides.

    Rules without glob characters (a name, an anchored path) and ``*SUFFIX`` rules are looked
    up in dicts (the bulk of a large generated ignore file, and an RE2 set costs memory for
    every rule it holds: its DFA cache grows to its budget); the others go to RE2 sets. A
    small file (under ``DICT_RULES_MIN`` rules) is one RE2 set: one match per entry."""

    __slots__ = ("_all", "_names", "_parts", "_paths", "_suffix_lens", "_suffixes", "rules")

    def __init__(self, rules: list[IgnoreRule]) -> None:
        self._all = rules
        # key -> (last rule position, last position of a rule that also applies to files)
        self._names: dict[bytes, tuple[int, int]] = {}
        self._paths: dict[bytes, tuple[int, int]] = {}
        self._suffixes: dict[bytes, tuple[int, int]] = {}
        complex_rules: list[tuple[int, IgnoreRule]] = []
        kept: list[int] = []
        lookups = len(rules) >= DICT_RULES_MIN
        for pos, r in enumerate(rules):
            table = None
            key = r.pattern
            if not lookups:
                pass
            elif not _META.intersection(key):
                table = self._paths if r.anchored else self._names
            elif (
                not r.anchored
                and key.startswith(b"*")
                and len(key) > 1
                and not _META.intersection(key[1:])
            ):
                table, key = self._suffixes, key[1:]
            if table is None:
                complex_rules.append((pos, r))
                continue
            last_file = table.get(key, (-1, -1))[1]
            table[key] = (pos, last_file if r.dir_only else pos)
            kept.append(pos)
        self._suffix_lens = sorted({len(k) for k in self._suffixes})
        self._parts: list[tuple[re2.Set, list[int]]] = []
        for rset, members in _compile_parts(complex_rules):
            self._parts.append((rset, members))
            kept.extend(members)
        self.rules: list[IgnoreRule] = [rules[p] for p in sorted(kept)]

    @classmethod
    def parse(cls, data: bytes) -> IgnoreFile:
        return _parse_cached(data, DICT_RULES_MIN)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def check(self, rel: bytes, is_dir: bool) -> bool | None:
        """True: ignored; False: re-included by a negation; None: no rule names it."""
        k = 0 if is_dir else 1
        best = -1
        if self._names or self._suffixes or self._paths:
            base = rel[rel.rfind(b"/") + 1 :]
            hit = self._names.get(base)
            if hit is not None:
                best = hit[k]
            hit = self._paths.get(rel)
            if hit is not None and hit[k] > best:
                best = hit[k]
            for n in self._suffix_lens:
                if n > len(base):
                    break
                hit = self._suffixes.get(base[-n:])
                if hit is not None and hit[k] > best:
                    best = hit[k]
        rules = self._all
        for rset, ids in reversed(self._parts):  # later parts hold later rules: they win
            if ids[-1] <= best:
                break
            hits = rset.Match(rel)
            if not hits:
                continue
            top = -1
            for h in hits:
                i = ids[h]
                if i > top and (is_dir or not rules[i].dir_only):
                    top = i
            if top >= 0:
                best = max(best, top)
                break
        return None if best < 0 else not rules[best].negate


PARSED_KEPT = 32  # ignore files kept parsed, the least recently used dropped first
_parsed: dict[tuple[bytes, int], IgnoreFile] = {}  # (in use order: the last used last)
_parsed_lock = _thread.allocate_lock()


def _parse_cached(data: bytes, lookups_from: int) -> IgnoreFile:
    """Parsed ignore files by content: every walk loads the ignore files it meets, and a large
    one costs seconds to compile (an IgnoreFile is immutable and RE2 matching thread-safe).
    (Not ``functools.lru_cache``: importing functools, with collections, is 2 ms of a CLI
    grep's start-up.)"""
    key = (data, lookups_from)
    with _parsed_lock:
        got = _parsed.pop(key, None)
        if got is not None:
            _parsed[key] = got  # (now the last used)
            return got
    got = _parse(data)  # (outside the lock: two threads may parse one file at once)
    with _parsed_lock:
        _parsed[key] = got
        while len(_parsed) > PARSED_KEPT:
            del _parsed[next(iter(_parsed))]
    return got


def _parse(data: bytes) -> IgnoreFile:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        # as ripgrep reads an ignore file: line by line up to the first one that is not
        # UTF-8 (its rules and all later ones are not used)
        _warn("an ignore file holds a line that is not UTF-8: rules from there on unused")
        data = data[: data.rfind(b"\n", 0, e.start) + 1]
    rules = [r for r in map(parse_rule, data.split(b"\n")) if r is not None]
    return IgnoreFile(rules)


def _compile_parts(
    rules: list[tuple[int, IgnoreRule]],
) -> list[tuple[re2.Set, list[int]]]:
    """RE2 sets over ``rules`` (position, rule) in order, each with the positions of the
    rules it holds (those that compiled), ascending."""
    import re2

    out: list[tuple[re2.Set, list[int]]] = []
    pending = [rules[i : i + PART_RULES] for i in range(0, len(rules), PART_RULES)]
    pending.reverse()  # a stack: the next part to compile on top
    while pending:
        part = pending.pop()
        rset = re2.Set.FullMatchSet(_options())
        kept: list[tuple[int, IgnoreRule]] = []
        for pos, r in part:
            try:
                rset.Add(r.regex)
            except re2.error:
                _warn("ignore rule %r does not compile; skipped", _shown(r))
                continue
            kept.append((pos, r))
        if not kept:
            continue
        try:
            rset.Compile()
        except re2.error:
            if len(kept) == 1:
                _warn("ignore rule %r is too large to compile; skipped", _shown(kept[0][1]))
                continue
            half = len(kept) // 2  # over RE2's memory budget: halve it, keep the order
            pending.append(kept[half:])
            pending.append(kept[:half])
            continue
        out.append((rset, [pos for pos, _ in kept]))
    return out


def _shown(r: IgnoreRule) -> str:
    return ("!" if r.negate else "") + _text(r.pattern)


def _text(pattern: bytes) -> str:
    return pattern[:200].decode("utf-8", "replace")
