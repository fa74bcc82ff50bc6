"""``rootgrep grep``'s output, as rg prints it: match and context lines, -l, -c, -o, --json."""

from __future__ import annotations

from ..confine import display
from ..grep import (
    FileMatches,
    LineMatch,
    Matcher,
    Room,
    match_spans,
)

TYPE_CHECKING = False  # (``typing`` is not imported at run time: the CLI's start-up)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import BinaryIO

    from .targets import Target


OMITTED_MATCH = b"[Omitted long matching line]"  # rg 14's words for a line over -M


OMITTED_CONTEXT = b"[Omitted long context line]"


class Sink:
    """Prints what ``rg -n --sort path`` prints: ``path:line:text``; context lines as
    ``path-line-text`` with ``--`` between groups that do not touch; ``-l`` paths; ``-c``
    ``path:N``. Without a file name (one file PATH): ``line:text``, ``N``. ``--json``: see
    the flag's help."""

    def __init__(
        self,
        out: BinaryIO,
        args: argparse.Namespace,
        context: int,
        names: bool,
        matcher: Matcher | None = None,
    ) -> None:
        self.out = out
        self.mode: str = args.mode or "content"
        self.json: bool = args.json
        self.context = context
        self.max_columns: int = args.max_columns
        self.with_filename = names
        self.target: Target | None = None
        self.first = True
        self.max_count: int | None = args.max_count
        self.shown = 0  # files with a line shown (-m 0 shows none)
        self.invert: bool = args.invert_match
        # -o: each match of a line printed alone (-v prints whole lines, as rg)
        self.only_flag: bool = args.only_matching
        self.only: Matcher | None = matcher if self.only_flag and not self.invert else None
        # -c alone: each file's matching lines counted, none of them held (``count_lines``)
        counting = self.mode == "count" and not (self.json or self.only_flag or self.invert)
        self._room = Room(count=True) if counting and self.max_count is None else None

    def room(self, path: bytes) -> Room | None:
        """What the search may gather of a file (``run_grep`` asks): for -c alone, a count."""
        return self._room

    def __call__(self, fm: FileMatches) -> bool:
        assert self.target is not None
        path = self.target.shown(fm.path)
        w = self.out.write
        late: list[LineMatch] = []  # (-m: matches past NUM, shown only as context)
        if self.max_count is not None and len(fm.matches) > self.max_count:
            late = fm.matches[self.max_count :]
            fm = FileMatches(fm.path, fm.matches[: self.max_count])
        if fm.count > 0:  # (a counting room's answer: ``room``)
            self.shown += 1
            n = b"%d" % fm.count
            self.out.write(path + b":" + n + b"\n" if self.with_filename else n + b"\n")
            return True
        if not fm.matches:
            return True
        self.shown += 1
        if self.json:
            self._json(fm)
        elif self.mode == "files":
            w(path + b"\n")
        elif self.mode == "count":
            n = b"%d" % self._count(fm.matches)
            w(path + b":" + n + b"\n" if self.with_filename else n + b"\n")
        else:
            self._content(path, fm, late)
        return True

    def _count(self, matches: list[LineMatch]) -> int:
        """-c's number: matching lines; with -o the matches in them (as rg: 0 with -v)."""
        if not self.only_flag:
            return len(matches)
        if self.only is None:  # (-o -v)
            return 0
        return sum(1 for lm in matches for _ in match_spans(self.only, lm.text))

    def _line(self, path: bytes, n: int, text: bytes, is_match: bool) -> None:
        w = self.out.write
        if is_match and self.only is not None:
            for s, e in match_spans(self.only, text):  # (-o: each match alone)
                w(self._one_line(path, n, text[s:e], True, True))
            return
        w(self._one_line(path, n, text, is_match, False))

    def _one_line(self, path: bytes, n: int, text: bytes, is_match: bool, alone: bool) -> bytes:
        sep = b":" if is_match else b"-"
        if alone:  # (-o: a match longer than -M's N; rg counts no terminator then)
            if self.max_columns and len(text) > self.max_columns:
                text = OMITTED_MATCH
        elif self.max_columns and len(text) + 1 > self.max_columns:
            # (rg counts the line terminator; a last line without one is counted as if it
            # had one here)
            text = OMITTED_MATCH if is_match else OMITTED_CONTEXT
        if self.with_filename:
            return b"%s%s%d%s%s\n" % (path, sep, n, sep, text)
        return b"%d%s%s\n" % (n, sep, text)

    def _content(self, path: bytes, fm: FileMatches, late: Sequence[LineMatch] = ()) -> None:
        w = self.out.write
        if not self.context:
            for lm in fm.matches:
                self._line(path, lm.line, lm.text, True)
            return
        lines: dict[int, tuple[bytes, bool]] = {}
        for lm in fm.matches:
            for i, t in enumerate(lm.before):
                lines.setdefault(lm.line - len(lm.before) + i, (t, False))
            lines[lm.line] = (lm.text, True)
            for i, t in enumerate(lm.after):
                lines.setdefault(lm.line + 1 + i, (t, False))
        for lm in late:  # (a match past -m's NUM within the context shown: as rg, a match)
            if lm.line in lines:
                lines[lm.line] = (lm.text, True)
        prev = None
        for n in sorted(lines):
            if (prev is not None and n != prev + 1) or (prev is None and not self.first):
                w(b"--\n")
            text, is_match = lines[n]
            self._line(path, n, text, is_match)
            prev = n
        self.first = False

    def _json(self, fm: FileMatches) -> None:
        import json

        assert self.target is not None
        root = self.target.root.identity()
        path = display(fm.path)
        if self.mode != "content":
            rec: dict[str, object] = {
                "root": root,
                "path": path,
                "matches": len(fm.matches),
            }
            self.out.write(json.dumps(rec, ensure_ascii=False).encode() + b"\n")
            return
        for lm in fm.matches:
            rec = {
                "root": root,
                "path": path,
                "line": lm.line,
                "column": lm.column,
                "text": lm.text.decode("utf-8", "replace"),
                "before": [b.decode("utf-8", "replace") for b in lm.before],
                "after": [a.decode("utf-8", "replace") for a in lm.after],
            }
            self.out.write(json.dumps(rec, ensure_ascii=False).encode() + b"\n")
