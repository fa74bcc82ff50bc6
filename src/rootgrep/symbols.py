"""Code symbols: the definitions in one file's bytes, found with tree-sitter (SPEC §9).

This module owns the answer to "what does this file define, and where": `language_of` maps a
path to a language by its extension, `extract` parses the bytes and walks the syntax tree for
definitions (`Symbol`), and `outline` nests them into a tree. It reads no files and knows
nothing of indexes or tools: the index and the tools hand it bytes they read beneath a root.

What counts as a definition is written per language below (`_Walk` and its `_LANGUAGES`
tables): a walk of the tree that descends only into nodes that can hold definitions
(module, class and namespace bodies, function bodies for nested definitions, preprocessor
and `export` wrappers, error-recovery nodes), so the work stays close to the parse itself. A
declaration without a body (a C prototype, a trait or interface method signature, an
abstract method) is not a definition. A decorated Python definition is reported at its `def`
or `class` line.

Caps (each keeps one file from costing more than a bounded amount):
- `MAX_PARSE_BYTES` (2 MiB): a larger file is not parsed (`extract` returns []).
- `MAX_AVERAGE_LINE` (10,000 characters): a file whose lines average longer is taken for
  minified or generated and not parsed ([]).
- `PARSE_TIMEOUT_SECONDS` (2 s of the parsing thread's CPU time), and less for a smaller file:
  0.25 s plus 2 s per MiB (`parse_seconds`; a parse runs at 4-20 MiB/s, so even a file dense
  with definitions has ten times the time it needs). tree-sitter 0.26 has no timeout
  setting, so the parse runs with a progress callback that halts it past the deadline; a
  halted parse gives []. The deadline scales with the size because some grammars are far
  slower on some shapes (Python's on a long run of comment lines after code: quadratic, 2 s
  for 60 KB): a repository of such files costs a build about 0.3-0.7 s per file, not 2 s. A
  Python file halted so is parsed once more with its comments blanked
  (`_blank_python_comments`), which is linear: the same names, kinds, lines and signatures
  (checked on the 11,174 files of the standard library), only a definition's `end_line` no
  longer takes in the comment lines that follow its body. A blanked parse with a syntax error
  is not taken (a misread string). Such a file costs at most twice its deadline plus one
  linear pass (about 0.4 s per MiB).
  CPU time, not wall time: a parse whose process was stopped (SIGSTOP, a suspend) or starved
  by a busy machine for a while is not cut short, so what a file's symbols are does not
  depend on the load it was parsed under.
- `MAX_SYMBOLS` (5,000): at most this many symbols per file, the first in source order.
- `MAX_DEPTH` (64): definitions nested deeper (counting wrappers such as `if` blocks) are
  not looked for, so a pathological nesting cannot exhaust the stack.
- `MAX_SIGNATURE` (200 characters): a signature (the definition's first line, trimmed) and a
  name are cut to this length.

Names and signatures are decoded as UTF-8 with invalid bytes replaced (U+FFFD). Parsers
are not thread-safe: each thread keeps its own, one per language (`threading.local`).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import tree_sitter

__all__ = [
    "KINDS",
    "MAX_AVERAGE_LINE",
    "MAX_DEPTH",
    "MAX_PARSE_BYTES",
    "MAX_SIGNATURE",
    "MAX_SYMBOLS",
    "PARSE_TIMEOUT_SECONDS",
    "OutlineNode",
    "Symbol",
    "extract",
    "extract_why",
    "language_of",
    "line_signature",
    "outline",
    "parse_seconds",
    "unparsed_why",
]

MAX_PARSE_BYTES = 2 * 1024 * 1024
MAX_AVERAGE_LINE = 10_000
PARSE_TIMEOUT_SECONDS = 2.0
PARSE_BASE_SECONDS = 0.25  # a parse's deadline: this, plus a second per PARSE_MIN_RATE bytes,
PARSE_MIN_RATE = 512 << 10  # up to PARSE_TIMEOUT_SECONDS
MAX_SYMBOLS = 5_000
MAX_DEPTH = 64
MAX_SIGNATURE = 200

KINDS = (
    "class",
    "function",
    "method",
    "struct",
    "enum",
    "interface",
    "trait",
    "type",
    "constant",
    "macro",
    "module",
    "variable",
)


@dataclass(frozen=True, slots=True)
class Symbol:
    """One definition: `line`/`end_line` are 1-based and inclusive; `container` is the name of
    the enclosing definition (for a Go method its receiver type, for Rust an `impl`'s type, for
    a C++ `A::f` defined out of line `A`)."""

    name: str
    kind: str
    line: int
    end_line: int
    container: str | None
    signature: str


@dataclass(slots=True)
class OutlineNode:
    symbol: Symbol
    children: list[OutlineNode] = field(default_factory=list)


_EXTENSIONS: dict[bytes, str] = {
    b".py": "python",
    b".pyi": "python",
    b".js": "javascript",
    b".mjs": "javascript",
    b".cjs": "javascript",
    b".jsx": "javascript",
    b".ts": "typescript",
    b".mts": "typescript",
    b".cts": "typescript",
    b".tsx": "tsx",
    b".go": "go",
    b".rs": "rust",
    b".c": "c",
    b".h": "c",
    b".cc": "cpp",
    b".cpp": "cpp",
    b".cxx": "cpp",
    b".hpp": "cpp",
    b".hh": "cpp",
    b".hxx": "cpp",
    b".h++": "cpp",
    b".java": "java",
}


def supported_languages() -> str:
    """The languages parsed, with their file extensions, for a message."""
    names = {"python": "Python", "javascript": "JavaScript", "typescript": "TypeScript",
             "tsx": "TSX", "go": "Go", "rust": "Rust", "c": "C", "cpp": "C++",
             "java": "Java"}  # fmt: skip
    by: dict[str, list[str]] = {}
    for ext, lang in _EXTENSIONS.items():
        by.setdefault(lang, []).append(ext.decode())
    return ", ".join(f"{names.get(lang, lang)} ({' '.join(exts)})" for lang, exts in by.items())


def language_of(path: bytes) -> str | None:
    """The language of a file by its extension (case-insensitive), or None."""
    base = path.rsplit(b"/", 1)[-1]
    dot = base.rfind(b".")
    if dot <= 0:  # no extension, or a dotfile such as `.py`
        return None
    return _EXTENSIONS.get(base[dot:].lower())


def _grammar(language: str) -> object:
    # imported on first use: a process that never meets a Go file never loads its grammar
    if language == "python":
        import tree_sitter_python as m

        return m.language()
    if language == "javascript":
        import tree_sitter_javascript as m

        return m.language()
    if language in ("typescript", "tsx"):
        import tree_sitter_typescript as m

        return m.language_typescript() if language == "typescript" else m.language_tsx()
    if language == "go":
        import tree_sitter_go as m

        return m.language()
    if language == "rust":
        import tree_sitter_rust as m

        return m.language()
    if language == "c":
        import tree_sitter_c as m

        return m.language()
    if language == "cpp":
        import tree_sitter_cpp as m

        return m.language()
    if language == "java":
        import tree_sitter_java as m

        return m.language()
    raise KeyError(language)


_languages: dict[str, tree_sitter.Language] = {}
_languages_lock = threading.Lock()
_CHUNK = 65536


class _Slot:
    """What one parse uses: a parser per language and the buffer tree-sitter reads from.

    tree-sitter 0.26 never releases what the read callable returns: every chunk handed to it
    would stay alive for the life of the process (memoryview slices would keep the whole
    file alive). So each chunk is copied into the slot's buffer, and what is handed over is
    a view of that buffer, made once per length and handed out again: what stays behind is
    at most one small view per length and the buffer, whatever the number of parses.

    Slots are pooled, not kept per thread: what tree-sitter keeps of a slot is never freed,
    so a slot per thread leaked a buffer and its views for every worker thread that ever
    parsed (a server's worker threads come and go: about 60 KiB per thread, for ever). The
    pool holds as many slots as parses ever ran at once."""

    def __init__(self) -> None:
        self.parsers: dict[str, tree_sitter.Parser] = {}
        self.buf = bytearray(_CHUNK)
        self.views: dict[int, memoryview] = {_CHUNK: memoryview(self.buf)}

    def parser(self, language: str) -> tree_sitter.Parser:
        parser = self.parsers.get(language)
        if parser is None:
            with _languages_lock:
                lang = _languages.get(language)
                if lang is None:
                    lang = _languages[language] = tree_sitter.Language(_grammar(language))
            parser = self.parsers[language] = tree_sitter.Parser(lang)
        return parser


_free_slots: list[_Slot] = []
_slots_lock = threading.Lock()
_slots_made = 0  # (the pool's size: tests read it)


def _take_slot() -> _Slot:
    global _slots_made
    with _slots_lock:
        if _free_slots:
            return _free_slots.pop()
        _slots_made += 1
    return _Slot()


def _parse(language: str, data: bytes) -> tree_sitter.Tree | None:
    slot = _take_slot()
    try:
        return _parse_with(slot, language, data)
    finally:
        with _slots_lock:
            _free_slots.append(slot)


def parse_seconds(size: int) -> float:
    """The CPU time a parse of ``size`` bytes may take before it is halted."""
    return min(PARSE_TIMEOUT_SECONDS, PARSE_BASE_SECONDS + size / PARSE_MIN_RATE)


def _parse_with(slot: _Slot, language: str, data: bytes) -> tree_sitter.Tree | None:
    parser = slot.parser(language)
    buf, views = slot.buf, slot.views
    # (a thread's CPU time never runs ahead of the wall clock: the CPU clock, a system call
    # and 7 times dearer, is read only once the wall clock's deadline has passed; the parse
    # calls back every 64 bytes or so: read each time, it cost 1.1 s of CPU in a build of F)
    seconds = parse_seconds(len(data))
    cpu_deadline = time.thread_time() + seconds  # (the callback runs here)
    wall_deadline = time.monotonic() + seconds

    def read(offset: int, _point: object) -> memoryview:
        chunk = data[offset : offset + _CHUNK]
        n = len(chunk)
        buf[:n] = chunk
        view = views.get(n)
        if view is None:
            view = views[n] = views[_CHUNK][:n]
        return view

    def past_deadline(_offset: int, _has_error: bool) -> bool:
        return time.monotonic() > wall_deadline and time.thread_time() > cpu_deadline

    try:
        return parser.parse(read, progress_callback=past_deadline)
    except ValueError:  # halted by the callback: the parser keeps the half-done state
        parser.reset()
        return None


SIGNATURE_LOOK = 4 * MAX_SIGNATURE  # bytes looked at on either side of a definition's start


def line_signature(raw: bytes) -> str:
    """A signature from the bytes of a definition's first line (at most ``SIGNATURE_LOOK``
    of them either side of its start): decoded, trimmed, cut to ``MAX_SIGNATURE``. A line
    no longer than ``SIGNATURE_LOOK`` is taken whole, so its signature is this of the whole
    line (what the index's readers rely on: it stores no signatures)."""
    return raw.decode("utf-8", "replace").strip()[:MAX_SIGNATURE]


def extract(path: bytes, data: bytes, *, signatures: bool = True) -> list[Symbol] | None:
    """The definitions in `data` (the bytes of the file at `path`), in source order; None when
    the path's language is not supported, [] when the file is over a cap (module docstring).
    Without `signatures`, each symbol's signature is "" (the index stores none: it reads them
    from the file when it shows one), and finding them costs nothing."""
    found, _why = extract_why(path, data, signatures=signatures)
    return found


UNPARSED_LARGE = "large"  # over MAX_PARSE_BYTES
UNPARSED_LONG_LINES = "long lines"  # lines averaging over MAX_AVERAGE_LINE
UNPARSED_TIMEOUT = "timeout"  # the parse passed its deadline (parse_seconds)


def unparsed_why(reason: str) -> str:
    """One of the ``UNPARSED_*`` reasons in words, as outline's text and the CLI say it."""
    if reason == UNPARSED_LARGE:
        return f"it is over the {MAX_PARSE_BYTES >> 20} MiB parse cap"
    if reason == UNPARSED_LONG_LINES:
        return (f"its lines average over {MAX_AVERAGE_LINE:,} characters (minified or "
                "generated, or lines ended by CR alone)")  # fmt: skip
    per_mib = (1 << 20) / PARSE_MIN_RATE
    return (f"its parse passed its time limit ({PARSE_BASE_SECONDS:g} s of CPU plus "
            f"{per_mib:g} s a MiB, at most {PARSE_TIMEOUT_SECONDS:g} s)")  # fmt: skip


def extract_why(
    path: bytes, data: bytes, *, signatures: bool = True
) -> tuple[list[Symbol] | None, str | None]:
    """``extract``, and why the file was not parsed (one of the ``UNPARSED_*``), or None when
    it was: an outline of a file a cap stopped must not read as "no definitions"."""
    language = language_of(path)
    if language is None:
        return None, None
    if not data:
        return [], None
    if len(data) > MAX_PARSE_BYTES:
        return [], UNPARSED_LARGE
    if len(data) / (data.count(b"\n") + 1) > MAX_AVERAGE_LINE:
        return [], UNPARSED_LONG_LINES
    tree = _parse(language, data)
    if tree is None and language == "python":  # (once more, its comments blanked: see below)
        tree = _parse(language, _blank_python_comments(data))
        if tree is not None and tree.root_node.has_error:
            tree = None  # (blanked text that no longer parses clean: not taken)
    if tree is None:
        return [], UNPARSED_TIMEOUT
    walk = _Walk(data, _LANGUAGES[language], signatures=signatures)
    with contextlib.suppress(_Full):
        walk.children(tree.root_node, _Ctx(None, "module", 0))
    walk.out.sort(key=lambda s: s.line)  # stable: a definition stays before what it holds
    return walk.out, None


# where a token of Python's that matters for finding comments may start (a prefix letter
# changes nothing of where a string ends), and what may end a one-line string
_PY_TOKEN = re.compile(rb"[#'\"]")
_PY_ONE_LINE_END = {q: re.compile(rb"[\\\n" + q + rb"]") for q in (b"'", b'"')}


def _blank_python_comments(data: bytes) -> bytes:
    """``data`` with the text of each comment (``#`` to the end of its line; string literals
    skipped over, so a ``#`` inside one is kept) replaced by spaces: the same length, lines and
    offsets, the same definitions. tree-sitter's Python grammar is quadratic in a run of
    comment lines after code (a generated config file of commented-out options: a second for
    100 KB) and linear in blank ones; a parse halted on its deadline is tried once so.

    One pass, each step a search forward from the last (no regex that could backtrack: one
    did, quadratically, on ``\\'''`` repeated). A string this misreads (a 3.12 f-string
    nesting its own quotes) can only blank too much, which leaves the parse with an error:
    ``extract_why`` then does not take it."""
    out = bytearray(data)
    n = len(data)
    pos = 0
    while True:
        m = _PY_TOKEN.search(data, pos)
        if m is None:
            return bytes(out)
        k = m.start()
        c = data[k : k + 1]
        if c == b"#":
            e = data.find(b"\n", k)  # (a CR alone ends no comment, as for tree-sitter)
            e = n if e < 0 else e
            out[k:e] = b" " * (e - k)
            pos = e
        elif data[k : k + 3] == c * 3:  # a triple-quoted string: to its closing triple
            j = k + 3
            while True:
                j = data.find(c * 3, j)
                if j < 0:
                    return bytes(out)  # (it runs to the end)
                b = 0
                while data[j - 1 - b] == 0x5C:  # (backslashes before it: odd, it is escaped)
                    b += 1
                if b % 2 == 0:
                    break
                j += 1
            pos = j + 3
        else:  # a one-line string: to its quote, or the end of the line (unterminated)
            j = k + 1
            ends = _PY_ONE_LINE_END[c]
            while True:
                e = ends.search(data, j)
                if e is None:
                    return bytes(out)
                if data[e.start()] == 0x5C:  # (an escape: the next byte, a newline too)
                    j = e.start() + 2
                    continue
                pos = e.start() + 1
                break


# kinds that own methods: a method defined outside one (a Rust `impl X`, a Go receiver, a C++
# `X::f` out of line) is nested under the one of its file named by its container (a `type`
# only at the top: an associated type or alias inside an impl owns nothing)
_OWNERS = frozenset(("class", "struct", "enum", "interface", "trait", "type"))


def outline(symbols: Iterable[Symbol]) -> list[OutlineNode]:
    """Nest symbols (in source order) into a tree: a symbol is the child of the innermost
    enclosing symbol (by line range) named by its `container`; failing that, of the file's
    first type-like definition of that name (a Rust `impl X { fn f }`, a Go `func (x *X)
    f()` or a C++ `void X::f()` outside X's lines); failing that, of the innermost enclosing
    one (a C++ `A::f` inside a namespace); a symbol without a container is at the top.
    Children are in line order."""
    nodes = [OutlineNode(s) for s in symbols]
    owners: dict[str, OutlineNode] = {}
    for top_only in (True, False):  # (a top-level owner of the name first)
        for n in nodes:
            k = n.symbol
            top_level = k.container is None
            if k.kind in _OWNERS and top_level == top_only and (top_level or k.kind != "type"):
                owners.setdefault(k.name, n)
    top: list[OutlineNode] = []
    stack: list[OutlineNode] = []
    parent_of: dict[int, OutlineNode] = {}
    moved = False
    for node in nodes:
        symbol = node.symbol
        while stack and not (
            stack[-1].symbol.line <= symbol.line and symbol.end_line <= stack[-1].symbol.end_line
        ):
            stack.pop()
        parent = None
        if symbol.container is not None:
            parent = next((n for n in reversed(stack) if n.symbol.name == symbol.container), None)
            owner = owners.get(symbol.container)
            if parent is None and owner is not None and not _within(owner.symbol, symbol):
                parent, moved = owner, True
            elif parent is None and stack:
                parent = stack[-1]
        (parent.children if parent is not None else top).append(node)
        if parent is not None:
            parent_of[id(node)] = parent
        stack.append(node)
    if moved:  # (a method placed under an owner defined after it, or between its members)
        _unloop(nodes, top, parent_of)
        _in_line_order(top)
    return top


def _unloop(nodes: list[OutlineNode], top: list[OutlineNode], parent_of: dict[int, Any]) -> None:
    """Every node reachable from the top once: a node that owners nested into a loop (each
    under another's name) is put back at the top, its own subtree with it. One pass (each
    node is marked reachable once), whatever the number of loops."""
    seen: set[int] = set()

    def mark(start: OutlineNode) -> None:
        todo = [start]
        while todo:
            n = todo.pop()
            if id(n) not in seen:
                seen.add(id(n))
                todo.extend(n.children)

    for n in top:
        mark(n)
    for n in nodes:  # (in source order: the first of a loop goes to the top)
        if id(n) in seen:
            continue
        parent = parent_of.pop(id(n), None)
        if parent is not None:
            parent.children.remove(n)
        top.append(n)
        mark(n)


def _within(outer: Symbol, inner: Symbol) -> bool:
    """Whether ``outer``'s lines lie within ``inner``'s (nesting it there would make a loop)."""
    return inner.line <= outer.line and outer.end_line <= inner.end_line


def _in_line_order(nodes: list[OutlineNode]) -> None:
    nodes.sort(key=lambda n: n.symbol.line)
    for n in nodes:
        _in_line_order(n.children)


# --- the walk ------------------------------------------------------------------------------


class _Full(Exception):
    """MAX_SYMBOLS reached: the walk stops."""


@dataclass(frozen=True, slots=True)
class _Ctx:
    container: str | None
    scope: str  # "module", "class" (a class/struct/trait/impl body) or "function"
    depth: int

    def into(self, container: str | None, scope: str) -> _Ctx:
        return _Ctx(container, scope, self.depth + 1)

    def deeper(self) -> _Ctx:
        return _Ctx(self.container, self.scope, self.depth + 1)


_Handler = Callable[["_Walk", tree_sitter.Node, _Ctx], None]
_UPPER = re.compile(r"_*[A-Z][A-Z0-9_]*\Z")


class _Walk:
    __slots__ = ("data", "handlers", "out", "signatures")

    def __init__(
        self, data: bytes, handlers: dict[str, _Handler], *, signatures: bool = True
    ) -> None:
        self.data = data
        self.handlers = handlers
        self.out: list[Symbol] = []
        self.signatures = signatures

    def children(self, node: tree_sitter.Node, ctx: _Ctx) -> None:
        if ctx.depth > MAX_DEPTH:
            return
        handlers = self.handlers
        for child in node.named_children:
            handler = handlers.get(child.type)
            if handler is not None:
                handler(self, child, ctx)

    def body(self, node: tree_sitter.Node, ctx: _Ctx, name: str = "body") -> None:
        body = node.child_by_field_name(name)
        if body is not None:
            self.children(body, ctx)

    def text(self, node: tree_sitter.Node) -> str:
        raw = self.data[node.start_byte : min(node.end_byte, node.start_byte + 4 * MAX_SIGNATURE)]
        return raw.decode("utf-8", "replace")[:MAX_SIGNATURE]

    def emit(self, name: str, kind: str, node: tree_sitter.Node, container: str | None) -> None:
        if len(self.out) >= MAX_SYMBOLS:
            raise _Full
        signature = self.signature(node) if self.signatures else ""
        first = node.start_point.row
        end = node.end_point
        # a node ending at a line's start (a `#define` holds its newline) ends on the line before
        last = end.row - 1 if end.column == 0 and end.row > first else end.row
        self.out.append(
            Symbol(
                name=name[:MAX_SIGNATURE],
                kind=kind,
                line=first + 1,
                end_line=last + 1,
                container=container,
                signature=signature,
            )
        )

    def signature(self, node: tree_sitter.Node) -> str:
        data = self.data
        # the whole first line (`export function f() {`), within a bounded look either side
        start = node.start_byte
        line_start = data.rfind(b"\n", max(0, start - SIGNATURE_LOOK), start) + 1
        if line_start == 0 and start > SIGNATURE_LOOK:
            line_start = start
        stop = data.find(b"\n", start, start + SIGNATURE_LOOK)
        if stop < 0:
            stop = min(max(node.end_byte, start + 1), start + SIGNATURE_LOOK)
        return line_signature(data[line_start:stop])

    def named(self, node: tree_sitter.Node, field_name: str = "name") -> str | None:
        n = node.child_by_field_name(field_name)
        return None if n is None else self.text(n)


def _transparent(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    w.children(node, ctx.deeper())


def _constant_or_variable(name: str) -> str:
    return "constant" if _UPPER.match(name) else "variable"


# --- Python ---


def _class(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    """A class (Python, JavaScript, TypeScript): its name, then its body."""
    name = w.named(node)
    if name is None:
        return
    w.emit(name, "class", node, ctx.container)
    w.body(node, ctx.into(name, "class"))


def _py_function(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    name = w.named(node)
    if name is None:
        return
    w.emit(name, "method" if ctx.scope == "class" else "function", node, ctx.container)
    body = node.child_by_field_name("body")
    # in a function's body only a `def` or a `class` defines (no assignment does): a body
    # whose bytes hold neither word is not walked (most are not: the walk is what costs)
    if body is not None and _py_may_define(w.data, body.start_byte, body.end_byte):
        w.children(body, ctx.into(name, "function"))


def _py_may_define(data: bytes, start: int, end: int) -> bool:
    return data.find(b"def", start, end) >= 0 or data.find(b"class", start, end) >= 0


def _py_decorated(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    definition = node.child_by_field_name("definition")
    if definition is not None:
        handler = w.handlers.get(definition.type)
        if handler is not None:
            handler(w, definition, ctx)


def _py_expression_statement(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    if ctx.scope != "module":
        return
    for child in node.named_children:
        if child.type == "assignment":
            _py_assignment(w, child, ctx)


def _py_assignment(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    """Targets of an assignment, and of each link of a chain ``a = b = 1`` (a loop: a chain
    of any length costs no stack)."""
    at: tree_sitter.Node | None = node
    while at is not None and at.type == "assignment":
        left = at.child_by_field_name("left")
        if left is None:
            return
        targets = [left] if left.type == "identifier" else []
        if left.type in ("pattern_list", "tuple_pattern"):
            targets = [c for c in left.named_children if c.type == "identifier"]
        for target in targets:
            name = w.text(target)
            w.emit(name, _constant_or_variable(name), at, ctx.container)
        at = at.child_by_field_name("right")


_PYTHON: dict[str, _Handler] = {
    "class_definition": _class,
    "function_definition": _py_function,
    "decorated_definition": _py_decorated,
    "expression_statement": _py_expression_statement,
    **dict.fromkeys(
        (
            "if_statement",
            "elif_clause",
            "else_clause",
            "try_statement",
            "except_clause",
            "finally_clause",
            "with_statement",
            "block",
            "ERROR",
        ),
        _transparent,
    ),
}

# --- JavaScript / TypeScript ---

_JS_FUNCTION_VALUES = frozenset(
    ("arrow_function", "function_expression", "function", "generator_function")
)


def _js_function(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    name = w.named(node)
    if name is None or node.child_by_field_name("body") is None:
        return
    w.emit(name, "function", node, ctx.container)
    w.body(node, ctx.into(name, "function"))


def _js_method(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    name = w.named(node)
    if name is None or node.child_by_field_name("body") is None:
        return
    w.emit(name, "method", node, ctx.container)
    w.body(node, ctx.into(name, "function"))


def _js_simple(kind: str) -> _Handler:
    def handler(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
        name = w.named(node)
        if name is not None:
            w.emit(name, kind, node, ctx.container)

    return handler


def _js_namespace(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    name = w.named(node)
    if name is None:
        return
    w.emit(name, "module", node, ctx.container)
    w.body(node, ctx.into(name, "module"))


def _js_export(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    declaration = node.child_by_field_name("declaration")
    if declaration is None:
        w.children(node, ctx.deeper())  # `export default class X {}`
    elif declaration.type in ("lexical_declaration", "variable_declaration"):
        _js_variables(w, declaration, ctx, exported=True)
    else:
        handler = w.handlers.get(declaration.type)
        if handler is not None:
            handler(w, declaration, ctx)


def _js_declaration(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    _js_variables(w, node, ctx, exported=False)


def _js_variables(w: _Walk, node: tree_sitter.Node, ctx: _Ctx, *, exported: bool) -> None:
    if ctx.scope != "module":
        return
    is_const = node.child(0) is not None and node.child(0).type == "const"
    for declarator in node.named_children:
        if declarator.type != "variable_declarator":
            continue
        target = declarator.child_by_field_name("name")
        if target is None or target.type != "identifier":
            continue
        name = w.text(target)
        value = _js_unwrap(declarator.child_by_field_name("value"))
        if value is not None and value.type in _JS_FUNCTION_VALUES:
            w.emit(name, "function", declarator, ctx.container)
            body = value.child_by_field_name("body")
            if body is not None and body.type == "statement_block":
                w.children(body, ctx.into(name, "function"))
        elif is_const and _UPPER.match(name):
            w.emit(name, "constant", declarator, ctx.container)
        elif exported or (is_const and not _js_is_import(w, value)):
            w.emit(name, "variable", declarator, ctx.container)


def _js_is_import(w: _Walk, value: tree_sitter.Node | None) -> bool:
    """Whether a declaration's value only brings in another module (``require("x")``,
    ``require("x").y``, ``await import("x")``): the name is defined there, not here."""
    while value is not None and value.type in ("member_expression", "await_expression"):
        value = value.child_by_field_name("object") or (
            value.named_children[0] if value.named_child_count else None
        )
    if value is None or value.type != "call_expression":
        return False
    callee = value.child_by_field_name("function")
    return callee is not None and (callee.type == "import" or w.text(callee) == "require")


def _js_unwrap(node: tree_sitter.Node | None) -> tree_sitter.Node | None:
    """``node`` without the parentheses around it (``(function () {…})``)."""
    while node is not None and node.type == "parenthesized_expression":
        node = node.named_children[0] if node.named_child_count == 1 else None
    return node


def _js_call(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    """A module-level function called at once (an IIFE: ``(function () {…})()``, ``(() =>
    {…})()``, ``(function () {…}.call(this))``, the UMD wrapper): its body is the module's
    scope, so what it defines is looked for as at the top."""
    if ctx.scope != "module":
        return
    callee = _js_unwrap(node.child_by_field_name("function"))
    if callee is not None and callee.type == "member_expression":
        prop = callee.child_by_field_name("property")
        if prop is None or w.text(prop) not in ("call", "apply"):
            return
        callee = _js_unwrap(callee.child_by_field_name("object"))
    if callee is None or callee.type not in _JS_FUNCTION_VALUES:
        return
    body = callee.child_by_field_name("body")
    if body is not None and body.type == "statement_block":
        w.children(body, ctx.deeper())


def _js_assignment(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    """A module-level ``exports.x = …`` / ``module.exports.x = …`` (an export: a function, or
    else a variable) and ``obj.x = function …`` / ``Obj.prototype.x = function …`` (a method
    of ``obj`` / ``Obj``): the CommonJS ways to define what a module offers. Each target of a
    chain ``a.x = a.y = function …`` is one (a loop: a chain of any length costs no stack)."""
    if ctx.scope != "module":
        return
    targets: list[tree_sitter.Node] = []
    value: tree_sitter.Node | None = node
    while value is not None and value.type == "assignment_expression":
        left = value.child_by_field_name("left")
        if left is not None and left.type == "member_expression":
            targets.append(left)
        value = value.child_by_field_name("right")
    if value is None:
        return
    is_function = value.type in _JS_FUNCTION_VALUES
    names = []
    for left in targets:
        named = _js_member_target(w, left, is_function=is_function)
        if named is not None:
            w.emit(*named[:2], node, named[2])
            names.append(named[0])
    body = value.child_by_field_name("body") if is_function else None
    if names and body is not None and body.type == "statement_block":
        w.children(body, ctx.into(names[-1], "function"))


def _js_member_target(
    w: _Walk, left: tree_sitter.Node, *, is_function: bool
) -> tuple[str, str, str | None] | None:
    """(name, kind, container) of an assignment's ``owner.name`` target, or None when it
    defines nothing (see ``_js_assignment``)."""
    prop, owner = left.child_by_field_name("property"), left.child_by_field_name("object")
    if prop is None or owner is None or prop.type != "property_identifier":
        return None
    name, owner_text = w.text(prop), w.text(owner)
    if owner_text in ("exports", "module.exports"):
        return name, "function" if is_function else "variable", None
    if not is_function:
        return None
    if owner.type == "identifier":
        return name, "method", owner_text
    if owner.type == "member_expression" and owner_text.endswith(".prototype"):
        inner = owner.child_by_field_name("object")
        if inner is not None and inner.type == "identifier":
            return name, "method", w.text(inner)
    return None


_JAVASCRIPT: dict[str, _Handler] = {
    "assignment_expression": _js_assignment,
    "call_expression": _js_call,
    "function_declaration": _js_function,
    "generator_function_declaration": _js_function,
    "class_declaration": _class,
    "abstract_class_declaration": _class,
    "method_definition": _js_method,
    "lexical_declaration": _js_declaration,
    "variable_declaration": _js_declaration,
    "export_statement": _js_export,
    "interface_declaration": _js_simple("interface"),
    "type_alias_declaration": _js_simple("type"),
    "enum_declaration": _js_simple("enum"),
    "internal_module": _js_namespace,
    "module": _js_namespace,
    **dict.fromkeys(
        (
            "class_body",
            "statement_block",
            "expression_statement",
            "parenthesized_expression",
            "ambient_declaration",
            "ERROR",
        ),
        _transparent,
    ),
}

# --- Go ---


def _go_function(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    name = w.named(node)
    if name is not None and node.child_by_field_name("body") is not None:
        w.emit(name, "function", node, ctx.container)


def _go_receiver_type(w: _Walk, node: tree_sitter.Node) -> str | None:
    stack = [node]
    while stack:  # the first type name in the receiver: `(p *Point)`, `(s Stack[T])`
        n = stack.pop()
        if n.type == "type_identifier":
            return w.text(n)
        stack.extend(reversed(n.named_children))
    return None


def _go_method(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    name = w.named(node)
    if name is None or node.child_by_field_name("body") is None:
        return
    receiver = node.child_by_field_name("receiver")
    container = None if receiver is None else _go_receiver_type(w, receiver)
    w.emit(name, "method", node, container)


def _go_type_spec(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    name = w.named(node)
    if name is None:
        return
    value = node.child_by_field_name("type")
    kind = "type"
    if node.type == "type_spec" and value is not None:
        kind = {"struct_type": "struct", "interface_type": "interface"}.get(value.type, "type")
    w.emit(name, kind, node, ctx.container)


def _go_spec(kind: str) -> _Handler:
    def handler(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
        for target in node.children_by_field_name("name"):
            w.emit(w.text(target), kind, node, ctx.container)

    return handler


_GO: dict[str, _Handler] = {
    "function_declaration": _go_function,
    "method_declaration": _go_method,
    "type_spec": _go_type_spec,
    "type_alias": _go_type_spec,
    "const_spec": _go_spec("constant"),
    "var_spec": _go_spec("variable"),
    **dict.fromkeys(
        ("type_declaration", "const_declaration", "var_declaration", "var_spec_list", "ERROR"),
        _transparent,
    ),
}

# --- Rust ---


def _rs_function(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    name = w.named(node)
    if name is None or node.child_by_field_name("body") is None:
        return
    w.emit(name, "method" if ctx.scope == "class" else "function", node, ctx.container)
    w.body(node, ctx.into(name, "function"))


def _rs_item(kind: str, *, scope: str | None = None) -> _Handler:
    def handler(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
        name = w.named(node)
        if name is None:
            return
        w.emit(name, kind, node, ctx.container)
        if scope is not None:
            w.body(node, ctx.into(name, scope))

    return handler


def _rs_type_name(w: _Walk, node: tree_sitter.Node) -> str:
    while node.type in ("generic_type", "reference_type", "pointer_type", "scoped_type_identifier"):
        field_name = "name" if node.type == "scoped_type_identifier" else "type"
        inner = node.child_by_field_name(field_name)
        if inner is None:
            break
        node = inner
    return w.text(node)


def _rs_impl(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    target = node.child_by_field_name("type")
    name = None if target is None else _rs_type_name(w, target)
    w.body(node, ctx.into(name, "class"))


_RUST: dict[str, _Handler] = {
    "function_item": _rs_function,
    "struct_item": _rs_item("struct"),
    "union_item": _rs_item("struct"),
    "enum_item": _rs_item("enum"),
    "trait_item": _rs_item("trait", scope="class"),
    "type_item": _rs_item("type"),
    "const_item": _rs_item("constant"),
    "static_item": _rs_item("constant"),
    "macro_definition": _rs_item("macro"),
    "mod_item": _rs_item("module", scope="module"),
    "impl_item": _rs_impl,
    **dict.fromkeys(("declaration_list", "block", "ERROR"), _transparent),
}

# --- C / C++ ---

_C_DECLARATOR_NAMES = frozenset(
    (
        "identifier",
        "field_identifier",
        "qualified_identifier",
        "destructor_name",
        "operator_name",
        "template_function",
        "type_identifier",
        "primitive_type",
    )
)


def _c_declarator_name(node: tree_sitter.Node | None) -> tree_sitter.Node | None:
    """The name inside a (pointer, function, array, reference, parenthesized…) declarator."""
    while node is not None and node.type not in _C_DECLARATOR_NAMES:
        inner = node.child_by_field_name("declarator")
        if inner is None:  # reference_declarator, parenthesized_declarator: no field
            inner = next((c for c in node.named_children if c.type != "type_qualifier"), None)
        node = inner
    return node


def _c_function(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    body = node.child_by_field_name("body")
    if body is None:
        return
    if body.has_error:
        # a parse error inside (an `#ifdef` cutting a statement in two) can make the parser
        # take the definitions after it for part of this body: they are looked for there too
        w.children(body, ctx.deeper())
    name_node = _c_declarator_name(node.child_by_field_name("declarator"))
    if name_node is None:
        return
    if name_node.type == "qualified_identifier":  # `A::f` (or `ns::A::f`) defined out of line
        scope = None
        while name_node is not None and name_node.type == "qualified_identifier":
            scope_node = name_node.child_by_field_name("scope")
            scope = None if scope_node is None else w.text(scope_node)
            name_node = name_node.child_by_field_name("name")
        if name_node is None:
            return
        w.emit(w.text(name_node), "method", node, scope)
        return
    w.emit(w.text(name_node), "method" if ctx.scope == "class" else "function", node, ctx.container)


_C_SPECIFIER_KINDS = {
    "struct_specifier": "struct",
    "union_specifier": "struct",
    "enum_specifier": "enum",
    "class_specifier": "class",
}


def _c_specifier(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    """A struct/union/enum/class with a body (one without is only a reference to it)."""
    name = w.named(node)
    body = node.child_by_field_name("body")
    if body is None:
        return
    if name is not None:
        w.emit(name, _C_SPECIFIER_KINDS[node.type], node, ctx.container)
    if node.type != "enum_specifier":
        w.children(body, ctx.into(name, "class") if name is not None else ctx.deeper())


def _c_declaration(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    """`struct s {…} v;` or a field whose type is a nested struct: the type part defines."""
    type_node = node.child_by_field_name("type")
    if type_node is not None and type_node.type in _C_SPECIFIER_KINDS:
        _c_specifier(w, type_node, ctx)


def _c_typedef(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    _c_declaration(w, node, ctx)
    for declarator in node.children_by_field_name("declarator"):
        name = _c_declarator_name(declarator)
        if name is not None:
            w.emit(w.text(name), "type", node, ctx.container)


def _c_macro(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    name = w.named(node)
    if name is not None:
        w.emit(name, "macro", node, ctx.container)


def _cpp_namespace(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    name = w.named(node)
    if name is None:  # an anonymous namespace only wraps
        w.body(node, ctx.deeper())
        return
    w.emit(name, "module", node, ctx.container)
    w.body(node, ctx.into(name, "module"))


def _cpp_alias(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    name = w.named(node)
    if name is not None:
        w.emit(name, "type", node, ctx.container)


_C: dict[str, _Handler] = {
    "function_definition": _c_function,
    **dict.fromkeys(_C_SPECIFIER_KINDS, _c_specifier),
    "declaration": _c_declaration,
    "field_declaration": _c_declaration,
    "type_definition": _c_typedef,
    "preproc_def": _c_macro,
    "preproc_function_def": _c_macro,
    **dict.fromkeys(
        (
            "preproc_if",
            "preproc_ifdef",
            "preproc_else",
            "preproc_elif",
            "preproc_elifdef",
            "linkage_specification",  # `extern "C" {…}` around a C header's declarations
            "declaration_list",
            "ERROR",
        ),
        _transparent,
    ),
}

_CPP: dict[str, _Handler] = {
    **_C,
    "namespace_definition": _cpp_namespace,
    "alias_declaration": _cpp_alias,
    "template_declaration": _transparent,
}

# --- Java ---


def _java_type(kind: str) -> _Handler:
    def handler(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
        name = w.named(node)
        if name is None:
            return
        w.emit(name, kind, node, ctx.container)
        w.body(node, ctx.into(name, "class"))

    return handler


def _java_method(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    name = w.named(node)
    if name is not None and node.child_by_field_name("body") is not None:
        w.emit(name, "method", node, ctx.container)


def _java_modifiers(w: _Walk, node: tree_sitter.Node) -> set[str]:
    for child in node.named_children:
        if child.type == "modifiers":
            return set(w.text(child).split())
    return set()


def _java_constants(w: _Walk, node: tree_sitter.Node, ctx: _Ctx) -> None:
    # a field is a constant when static final; in an interface every field is
    if node.type == "field_declaration" and not {"static", "final"} <= _java_modifiers(w, node):
        return
    for declarator in node.children_by_field_name("declarator"):
        name = w.named(declarator)
        if name is not None:
            w.emit(name, "constant", declarator, ctx.container)


_JAVA: dict[str, _Handler] = {
    "class_declaration": _java_type("class"),
    "record_declaration": _java_type("class"),
    "interface_declaration": _java_type("interface"),
    "annotation_type_declaration": _java_type("interface"),
    "enum_declaration": _java_type("enum"),
    "method_declaration": _java_method,
    "constructor_declaration": _java_method,
    "compact_constructor_declaration": _java_method,
    "field_declaration": _java_constants,
    "constant_declaration": _java_constants,
    **dict.fromkeys(
        (
            "class_body",
            "interface_body",
            "enum_body",
            "enum_body_declarations",
            "annotation_type_body",
            "ERROR",
        ),
        _transparent,
    ),
}

_LANGUAGES: dict[str, dict[str, _Handler]] = {
    "python": _PYTHON,
    "javascript": _JAVASCRIPT,
    "typescript": _JAVASCRIPT,
    "tsx": _JAVASCRIPT,
    "go": _GO,
    "rust": _RUST,
    "c": _C,
    "cpp": _CPP,
    "java": _JAVA,
}
