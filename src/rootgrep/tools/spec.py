"""What a tool is: its arguments (each with a description), its result model, its text.

A ``ToolSpec`` is a tool's whole contract in one value: the server lists and calls every spec
the same way, so adding a tool means adding one spec (in the module of its family). The
arguments are a pydantic model that refuses unknown names; a bad argument becomes one
``[invalid_argument]`` line naming it (``invalid_argument_message``), never a validation dump.

Text answers are made for a model with a bounded context window: each spec's ``answer`` renders
a result within a budget of characters (``--max-answer-chars``), cutting at an item boundary and
saying what was left out and how to continue (``fit``); the structured content then holds the
same items as the text.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, ValidationError

from ..roots import Root, faithful, parse_file_uri, uri_like
from ..service import Service, Token

M = TypeVar("M", bound=BaseModel)
A = TypeVar("A", bound="Args")

READ = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
WRITE = ToolAnnotations(  # adds, never replaces or removes (create_directory)
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
DESTRUCTIVE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)
OVERWRITE = ToolAnnotations(  # replaces what was there; the same call twice changes nothing more
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)

DEFAULT_MAX_ANSWER_CHARS = 20_000  # --max-answer-chars (SPEC §8: about 5k tokens)


class Args(BaseModel):
    """A tool's arguments: unknown names are refused (SPEC §8), and every field carries a
    description (tests check ``tools/list``)."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True, slots=True)
class Call:
    """What a tool's ``run`` gets besides its arguments: the effective roots it holds, the
    call's cancellation token, and a progress callback (``reindex``)."""

    service: Service
    roots: Sequence[Root]
    token: Token
    progress: Callable[[int, int | None, str], None] | None = None


@dataclass(frozen=True, slots=True)
class Out:
    """How a text answer is written: its budget in characters, and whether several roots are
    served (paths are then shown absolute, so each one names its file without `root`)."""

    budget: int = DEFAULT_MAX_ANSWER_CHARS
    several_roots: bool = False

    def path(self, rel: str, uri: str) -> str:
        """A path to show for an item: passed back as any tool's ``path`` (without ``root``)
        it names the same file. Root-relative with one root, absolute with several; the
        item's URI when the name would not survive as text (undecodable bytes, a backslash,
        a control character, or a name that reads as a URI); ``./`` before a name that would
        read as a line of the answer's own format."""
        if self.several_roots:
            try:
                shown = parse_file_uri(uri).decode("utf-8")
            except (UnicodeDecodeError, ValueError, Exception):
                return uri
            return shown if faithful(shown) else uri
        if not faithful(rel) or uri_like(rel):
            return uri
        # a name that reads as a line of an answer (a match `7:x`, a context line `7-x`, the
        # separator `--`, a note `(…)`) is shown as ./name: still a path, never such a line
        return "./" + rel if _POSES.match(rel) else rel


def shown_name(name: str) -> str:
    """An entry's name as one line of a listing: as it is, or as a quoted JSON string when it
    holds a line break or another control character (which would otherwise read as more
    entries, or as the answer's own notes)."""
    return json.dumps(name, ensure_ascii=False) if _CONTROL.search(name) else name


_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\x85]")
_POSES = re.compile(r"^(?:\d+[:-]|--(?:/|$)|\()")


@dataclass(frozen=True)
class ToolSpec(Generic[A, M]):
    name: str
    title: str
    description: str
    args: type[A]
    result: type[M]
    run: Callable[[Call, A], M]
    answer: Callable[[M, Out], str]
    annotations: ToolAnnotations = field(default_factory=lambda: READ)
    write: bool = False  # listed only with --allow-write; a started write is never abandoned
    progress: bool = False  # sends progress notifications (Call.progress)
    # the result's list fields that hold a page of items (up to 1,000): their items are
    # published with the fields named and described, not typed one by one, so a client's
    # schema check of an answer costs a few µs an item (see server.shallow_items)
    bulk: tuple[str, ...] = ()


def fit(pieces: Sequence[str], budget: int, footer: Callable[[int], str]) -> tuple[int, str]:
    """How many of ``pieces`` (each an item's text, in order) fit in ``budget`` characters
    with the footer ``footer(k)`` for k kept items, and the joined text. At least one piece
    is always kept (so paging advances): an answer passes its budget by at most one item,
    and every item is bounded (lines are cut at max_line_chars)."""
    total = 0
    k = 0
    reserve = len(footer(len(pieces)))
    for p in pieces:
        if k and total + len(p) + 1 + reserve > budget:
            break
        total += len(p) + 1
        k += 1
    while True:
        tail = footer(k)
        if k <= 1 or total + len(tail) <= budget:
            break
        k -= 1
        total -= len(pieces[k]) + 1
    body = "\n".join(pieces[:k])
    return k, (body + "\n" + tail if body and tail else body or tail)


def cut_items(r: Any, field: str, k: int) -> None:
    """Keep the first k items of a result's list ``field`` (its structured content then holds
    what the text shows, never more), with the cursor that continues after them."""
    items = getattr(r, field)
    if k >= len(items):
        return
    setattr(r, field, items[:k])
    r.next_cursor = r.resume_at(k)
    if hasattr(r, "truncated"):
        r.truncated = True
    if field == "matches" and hasattr(r, "total_matches"):
        r.total_matches = k


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


_ARG_WHAT = {
    "missing": "is required",
    "extra_forbidden": "is not an argument of this tool",
}


def invalid_argument_message(tool: str, err: ValidationError, args: type[BaseModel]) -> str:
    """One ``[invalid_argument]`` message for a validation failure: which argument, what was
    wrong, and what the tool accepts (never the raw dump, never the rejected value)."""
    problems: list[str] = []
    names: list[str] = []
    nested = _nested_fields(args)
    for e in err.errors():
        loc = list(e.get("loc", ())) or ["arguments"]
        top = str(loc[0])
        last = len(loc) - 1
        # (a union's member tags, such as `str` or `list[str]`, are not places: left out)
        name = top + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}"
            for i, p in enumerate(loc[1:], 1)
            if isinstance(p, int)
            or p in nested
            or (i == last and e.get("type") in ("missing", "extra_forbidden"))
        )
        if name in names or len(names) >= 5:
            continue
        names.append(name)
        kind = e.get("type", "")
        if kind == "extra_forbidden" and len(loc) > 1:
            what = "is not accepted there"
        else:
            what = _ARG_WHAT.get(kind) or _reason(e)
        if kind == "extra_forbidden" and len(loc) == 1:
            meant = did_you_mean_argument(top, args)
            what += f" (did you mean {meant}?)" if meant else ""
        field = args.model_fields.get(top) if len(loc) == 1 else None
        accepted = f" ({field.description})" if field is not None and field.description else ""
        problems.append(f"`{name}` {what}{accepted}")
    known = ", ".join(sorted(args.model_fields))
    return (
        f"[invalid_argument] {tool}: " + "; ".join(problems)
        + f". Its arguments are: {known}; fix the call and retry"
    )  # fmt: skip


# what other tools (rg, agents' built-in grep and read tools) call an argument, and its name
# (or value) here
_OTHER_NAMES: dict[str, str | tuple[str, ...]] = {
    "ignore_case": "case_sensitive=false",
    "case_insensitive": "case_sensitive=false",
    "i": "case_sensitive=false",
    "literal": "fixed_strings=true",
    "fixed": "fixed_strings=true",
    "F": "fixed_strings=true",
    "word": "whole_word=true",
    "word_regexp": "whole_word=true",
    "w": "whole_word=true",
    "glob": "include",
    "globs": "include",
    "file_pattern": "include",
    "type": "include",
    "limit": ("max_results", "max_lines"),
    "max_count": "max_results",
    "head_limit": "max_results",
    "offset": ("start_line", "cursor"),
    "page": "cursor",
    "file": "path",
    "file_path": "path",
    "filepath": "path",
    "filename": "path",
    "directory": "path",
    "dir": "path",
    "A": "after",
    "B": "before",
    "C": "context",
    "query": "pattern",
    "regexp": "regex",
    "line": "start_line",
    "lines": "max_lines",
    "limit_lines": "max_lines",
}


def did_you_mean_argument(name: str, args: type[BaseModel]) -> str | None:
    """The argument of this tool that an unknown ``name`` most likely meant, as a backquoted
    name (or ``name=value``), or None."""
    fields = args.model_fields
    other = _OTHER_NAMES.get(name) or _OTHER_NAMES.get(name.lower().lstrip("-"))
    for meant in (other,) if isinstance(other, str) else other or ():
        if meant.split("=")[0] in fields:  # (the first of them this tool has)
            return f"`{meant}`"
    close = difflib.get_close_matches(name.lower(), list(fields), n=1, cutoff=0.6)
    return f"`{close[0]}`" if close else None


def _nested_fields(model: type[BaseModel]) -> set[str]:
    """The field names of the models nested in a tool's arguments (edit_file's edits)."""
    out: set[str] = set()
    todo = [f.annotation for f in model.model_fields.values()]
    while todo:
        t = todo.pop()
        if isinstance(t, type) and issubclass(t, BaseModel):
            if not out.issuperset(t.model_fields):
                out.update(t.model_fields)
                todo += [f.annotation for f in t.model_fields.values()]
        else:
            todo += list(getattr(t, "__args__", ()))
    return out


def _reason(e: Any) -> str:
    msg = str(e.get("msg", "is not valid"))
    msg = msg.removeprefix("Value error, ").removeprefix("Input should be ")
    msg = _SUBJECT.sub("", msg)  # ("List should have at least 1 item": the argument is named)
    return "should be " + msg if not msg.startswith(("should", "is", "must")) else msg


_SUBJECT = re.compile(r"^(?:Input|List|String|Tuple|Set|Dictionary|Object|Value) (?=should )")
