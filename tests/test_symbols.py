"""The symbol extractor (SPEC §9): every definition kind per language, outlines, the caps,
broken input and threads. Sources are written here; expectations are exact."""

from __future__ import annotations

import gc
import sys
import threading
import tracemalloc

import pytest

from rootgrep import symbols
from rootgrep.symbols import Symbol, extract, language_of, outline

CASES = [
    pytest.param(
        "a.py",
        """\
# Doc.
import os

MAX_SIZE = 10
default_name = "x"
A, B = 1, 2


@decorator
class Outer(Base):
    attr = 1

    def method(self, x):
        return x

    @property
    def prop(self):
        return 1

    class Inner:
        def deep(self):
            pass


def helper(a, b=2):
    def nested():
        pass
    return nested


async def fetch():
    pass


if True:
    CONDITIONAL = 3
x: int = 5
""",
        [
            ("MAX_SIZE", "constant", 4, 4, None),
            ("default_name", "variable", 5, 5, None),
            ("A", "constant", 6, 6, None),
            ("B", "constant", 6, 6, None),
            ("Outer", "class", 10, 22, None),
            ("method", "method", 13, 14, "Outer"),
            ("prop", "method", 17, 18, "Outer"),
            ("Inner", "class", 20, 22, "Outer"),
            ("deep", "method", 21, 22, "Inner"),
            ("helper", "function", 25, 28, None),
            ("nested", "function", 26, 27, "helper"),
            ("fetch", "function", 31, 32, None),
            ("CONDITIONAL", "constant", 36, 36, None),
            ("x", "variable", 37, 37, None),
        ],
        id="python",
    ),
    pytest.param(
        "a.js",
        """\
import x from "y";

export const API_URL = "http://x";
const arrow = (a) => a + 1;
let fnExpr = function () {};
var counter = 0;

export function exported(a) {
  return a;
}

function plain() {}

class Animal extends Base {
  constructor(name) {
    this.name = name;
  }
  speak() {
    return 1;
  }
  static create() {}
}

export default class Dog {}

export const config = { a: 1 };
""",
        [
            ("API_URL", "constant", 3, 3, None),
            ("arrow", "function", 4, 4, None),
            ("fnExpr", "function", 5, 5, None),
            ("exported", "function", 8, 10, None),
            ("plain", "function", 12, 12, None),
            ("Animal", "class", 14, 22, None),
            ("constructor", "method", 15, 17, "Animal"),
            ("speak", "method", 18, 20, "Animal"),
            ("create", "method", 21, 21, "Animal"),
            ("Dog", "class", 24, 24, None),
            ("config", "variable", 26, 26, None),
        ],
        id="javascript",
    ),
    pytest.param(
        "a.ts",
        """\
export interface Shape {
  area(): number;
}

type Id = string | number;

enum Color {
  Red,
  Green,
}

export class Circle implements Shape {
  private r: number;
  constructor(r: number) {
    this.r = r;
  }
  area(): number {
    return 3.14 * this.r * this.r;
  }
}

export const MAX: number = 10;
const make = (r: number): Circle => new Circle(r);

function total(xs: Shape[]): number {
  return 0;
}

abstract class Base {
  abstract run(): void;
}
namespace NS {
  export function inner() {}
}
""",
        [
            ("Shape", "interface", 1, 3, None),
            ("Id", "type", 5, 5, None),
            ("Color", "enum", 7, 10, None),
            ("Circle", "class", 12, 20, None),
            ("constructor", "method", 14, 16, "Circle"),
            ("area", "method", 17, 19, "Circle"),
            ("MAX", "constant", 22, 22, None),
            ("make", "function", 23, 23, None),
            ("total", "function", 25, 27, None),
            ("Base", "class", 29, 31, None),
            ("NS", "module", 32, 34, None),
            ("inner", "function", 33, 33, "NS"),
        ],
        id="typescript",
    ),
    pytest.param(
        "a.tsx",
        """\
interface Props {
  name: string;
}

export function Hello(props: Props) {
  return <div>{props.name}</div>;
}

const Button = () => <button />;
""",
        [
            ("Props", "interface", 1, 3, None),
            ("Hello", "function", 5, 7, None),
            ("Button", "function", 9, 9, None),
        ],
        id="tsx",
    ),
    pytest.param(
        "a.go",
        """\
package main

import "fmt"

const Pi = 3.14

const (
	A = iota
	B
)

var Global = 1

type Point struct {
	X, Y int
}

type Shape interface {
	Area() float64
}

type ID string

type (
	Alias = int
	Pair  struct{ a, b int }
)

func (p *Point) Move(dx int) {
	p.X += dx
}

func (p Point) Area() float64 {
	return 0
}

func main() {
	fmt.Println(Pi)
}

func Generic[T any](x T) T {
	return x
}
""",
        [
            ("Pi", "constant", 5, 5, None),
            ("A", "constant", 8, 8, None),
            ("B", "constant", 9, 9, None),
            ("Global", "variable", 12, 12, None),
            ("Point", "struct", 14, 16, None),
            ("Shape", "interface", 18, 20, None),
            ("ID", "type", 22, 22, None),
            ("Alias", "type", 25, 25, None),
            ("Pair", "struct", 26, 26, None),
            ("Move", "method", 29, 31, "Point"),
            ("Area", "method", 33, 35, "Point"),
            ("main", "function", 37, 39, None),
            ("Generic", "function", 41, 43, None),
        ],
        id="go",
    ),
    pytest.param(
        "a.rs",
        """\
use std::fmt;

pub const MAX: usize = 10;
static mut COUNTER: u32 = 0;

pub struct Point {
    x: i32,
    y: i32,
}

enum Shape {
    Circle(f64),
    Square(f64),
}

pub trait Area {
    fn area(&self) -> f64;
    fn describe(&self) -> String {
        String::new()
    }
}

type Meters = f64;

impl Point {
    pub fn new(x: i32, y: i32) -> Self {
        Point { x, y }
    }
}

impl Area for Shape {
    fn area(&self) -> f64 {
        0.0
    }
}

impl<T> fmt::Display for Wrapper<T> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        Ok(())
    }
}

macro_rules! square {
    ($x:expr) => {
        $x * $x
    };
}

mod inner {
    pub fn helper() {}
}

mod external;

fn main() {
    println!("{}", square!(2));
}

union IntOrFloat {
    i: u32,
    f: f32,
}
""",
        [
            ("MAX", "constant", 3, 3, None),
            ("COUNTER", "constant", 4, 4, None),
            ("Point", "struct", 6, 9, None),
            ("Shape", "enum", 11, 14, None),
            ("Area", "trait", 16, 21, None),
            ("describe", "method", 18, 20, "Area"),
            ("Meters", "type", 23, 23, None),
            ("new", "method", 26, 28, "Point"),
            ("area", "method", 32, 34, "Shape"),
            ("fmt", "method", 38, 40, "Wrapper"),
            ("square", "macro", 43, 47, None),
            ("inner", "module", 49, 51, None),
            ("helper", "function", 50, 50, "inner"),
            ("external", "module", 53, 53, None),
            ("main", "function", 55, 57, None),
            ("IntOrFloat", "struct", 59, 62, None),
        ],
        id="rust",
    ),
    pytest.param(
        "a.c",
        """\
#include <stdio.h>

#define MAX 10
#define SQUARE(x) ((x) * (x))

struct point {
    int x;
    int y;
};

union value {
    int i;
    float f;
};

enum color { RED, GREEN };

typedef struct point point_t;

typedef struct {
    int a;
} anon_t;

int prototype(int a);

struct point;

static int add(int a, int b)
{
    return a + b;
}

char *name_of(struct point *p) {
    return "p";
}

int main(void) {
    return 0;
}
""",
        [
            ("MAX", "macro", 3, 3, None),
            ("SQUARE", "macro", 4, 4, None),
            ("point", "struct", 6, 9, None),
            ("value", "struct", 11, 14, None),
            ("color", "enum", 16, 16, None),
            ("point_t", "type", 18, 18, None),
            ("anon_t", "type", 20, 22, None),
            ("add", "function", 28, 31, None),
            ("name_of", "function", 33, 35, None),
            ("main", "function", 37, 39, None),
        ],
        id="c",
    ),
    pytest.param(
        "a.cpp",
        """\
#include <vector>

#define VERSION 2

namespace geo {

class Shape {
public:
    virtual double area() const = 0;
    void describe() {}
};

struct Point {
    int x;
    int distance() const { return 0; }
};

double Shape::scale(double f) {
    return f;
}

}  // namespace geo

template <typename T>
T maximum(T a, T b) {
    return a > b ? a : b;
}

enum class Mode { On, Off };

typedef int Int;
using Real = double;

int free_function() {
    return 1;
}

void geo::Point::move(int dx) {}
""",
        [
            ("VERSION", "macro", 3, 3, None),
            ("geo", "module", 5, 22, None),
            ("Shape", "class", 7, 11, "geo"),
            ("describe", "method", 10, 10, "Shape"),
            ("Point", "struct", 13, 16, "geo"),
            ("distance", "method", 15, 15, "Point"),
            ("scale", "method", 18, 20, "Shape"),
            ("maximum", "function", 25, 27, None),
            ("Mode", "enum", 29, 29, None),
            ("Int", "type", 31, 31, None),
            ("Real", "type", 32, 32, None),
            ("free_function", "function", 34, 36, None),
            ("move", "method", 38, 38, "Point"),
        ],
        id="cpp",
    ),
    pytest.param(
        "b.cpp",
        """\
class Outer {
  class Inner { void f() {} };
  struct S { int a; } s;
  enum E { X };
  template <typename T> void g(T t) {}
  Outer() {}
  ~Outer() {}
  bool operator==(const Outer& o) const { return true; }
};
namespace { int anon() { return 0; } }
extern "C" { int cfunc() { return 1; } }
struct point { int x; } origin;
#ifdef X
int in_ifdef() { return 0; }
#endif
Outer::Outer(int x) : a(x) {}
int& ref_fn() { static int x; return x; }
""",
        [
            ("Outer", "class", 1, 9, None),
            ("Inner", "class", 2, 2, "Outer"),
            ("f", "method", 2, 2, "Inner"),
            ("S", "struct", 3, 3, "Outer"),
            ("E", "enum", 4, 4, "Outer"),
            ("g", "method", 5, 5, "Outer"),
            ("Outer", "method", 6, 6, "Outer"),
            ("~Outer", "method", 7, 7, "Outer"),
            ("operator==", "method", 8, 8, "Outer"),
            ("anon", "function", 10, 10, None),
            ("cfunc", "function", 11, 11, None),
            ("point", "struct", 12, 12, None),
            ("in_ifdef", "function", 14, 14, None),
            ("Outer", "method", 16, 16, "Outer"),
            ("ref_fn", "function", 17, 17, None),
        ],
        id="cpp_more",
    ),
    pytest.param(
        "A.java",
        """\
package demo;

import java.util.List;

public class Shop {
    public static final int MAX_ITEMS = 10;
    private int count;

    public Shop(int count) {
        this.count = count;
    }

    public int total() {
        return count;
    }

    static class Item {
        void use() {}
    }
}

interface Payable {
    void pay();
}

enum Currency {
    EUR, USD;
    String symbol() { return ""; }
}

record Pair(int a, int b) {}

@interface Marker {
    int LIMIT = 5;
}
""",
        [
            ("Shop", "class", 5, 20, None),
            ("MAX_ITEMS", "constant", 6, 6, "Shop"),
            ("Shop", "method", 9, 11, "Shop"),
            ("total", "method", 13, 15, "Shop"),
            ("Item", "class", 17, 19, "Shop"),
            ("use", "method", 18, 18, "Item"),
            ("Payable", "interface", 22, 24, None),
            ("Currency", "enum", 26, 29, None),
            ("symbol", "method", 28, 28, "Currency"),
            ("Pair", "class", 31, 31, None),
            ("Marker", "interface", 33, 35, None),
            ("LIMIT", "constant", 34, 34, "Marker"),
        ],
        id="java",
    ),
    pytest.param(  # CommonJS: what a module offers is assigned, not declared
        "lib/response.js",
        """\
var res = Object.create(http.ServerResponse.prototype);
exports.etag = createETagGenerator({ weak: false });
module.exports.version = function version() {
  return 1;
};
res.send = function send(body) {
  function helper() {}
};
res.set =
res.header = function header(field, val) {};
Router.prototype.route = function route(path) {};
res.locals = {};
exports.nested = function () {
  exports.inner = 1;
};
""",
        [
            ("etag", "variable", 2, 2, None),
            ("version", "function", 3, 5, None),
            ("send", "method", 6, 8, "res"),
            ("helper", "function", 7, 7, "send"),
            ("set", "method", 9, 10, "res"),
            ("header", "method", 9, 10, "res"),
            ("route", "method", 11, 11, "Router"),
            ("nested", "function", 13, 15, None),
        ],
        id="javascript_commonjs",
    ),
    pytest.param(  # a module wrapped in a function called at once (UMD, lodash, jQuery)
        "lodash.js",
        """\
;(function() {
  var VERSION = '4.0';
  var runInContext = (function runInContext(context) {
    function debounce(func) {}
    return debounce;
  });
  (() => {
    class Inner {}
  })();
}.call(this));
(function () { function later() {} })();
""",
        [
            ("runInContext", "function", 3, 6, None),
            ("debounce", "function", 4, 4, "runInContext"),
            ("Inner", "class", 8, 8, None),
            ("later", "function", 11, 11, None),
        ],
        id="javascript_iife",
    ),
    pytest.param(  # a module-level `const` defines its name; `require`/`import` only bind one
        "config.mjs",
        """\
const fs = require("fs");
const join = require("path").join;
const mod = await import("./mod.js");
const config = { port: 80 };
const MAX = 3;
let state = 0;
function f() {
  const local = 1;
}
""",
        [
            ("config", "variable", 4, 4, None),
            ("MAX", "constant", 5, 5, None),
            ("f", "function", 7, 9, None),
        ],
        id="javascript_const",
    ),
    pytest.param(  # a C header's declarations inside `extern "C" {…}` (for C++ readers)
        "hiredis.h",
        """\
#ifdef __cplusplus
extern "C" {
#endif
typedef struct redisReply {
    int type;
} redisReply;
#define REDIS_OPTIONS_SET_PRIVDATA(opts, data) do { (opts)->privdata = data; } while (0)
typedef int redisFD;
static inline int redis_inline(void) { return 0; }
#ifdef __cplusplus
}
#endif
""",
        [
            ("redisReply", "struct", 4, 6, None),
            ("redisReply", "type", 4, 6, None),
            ("REDIS_OPTIONS_SET_PRIVDATA", "macro", 7, 7, None),
            ("redisFD", "type", 8, 8, None),
            ("redis_inline", "function", 9, 9, None),
        ],
        id="c_extern",
    ),
]


def _rows(found: list[Symbol] | None) -> list[tuple[str, str, int, int, str | None]]:
    assert found is not None
    return [(s.name, s.kind, s.line, s.end_line, s.container) for s in found]


@pytest.mark.parametrize(("path", "source", "expected"), CASES)
def test_every_definition_kind_is_found_with_its_lines_and_container(path, source, expected):
    assert _rows(extract(path.encode(), source.encode())) == expected


def test_each_language_case_covers_its_kinds():
    kinds = {
        case.id: {row[1] for row in case.values[2]}  # type: ignore[attr-defined]
        for case in CASES
    }
    assert kinds["python"] == {"class", "function", "method", "constant", "variable"}
    assert kinds["javascript"] == {"class", "function", "method", "constant", "variable"}
    assert {
        "interface",
        "type",
        "enum",
        "class",
        "method",
        "function",
        "constant",
        "module",
    } <= kinds["typescript"]
    assert kinds["go"] == {
        "constant",
        "variable",
        "struct",
        "interface",
        "type",
        "method",
        "function",
    }
    assert kinds["rust"] == {
        "constant",
        "struct",
        "enum",
        "trait",
        "method",
        "type",
        "macro",
        "module",
        "function",
    }
    assert kinds["c"] == {"macro", "struct", "enum", "type", "function"}
    assert {"macro", "module", "class", "struct", "method", "function", "enum", "type"} <= kinds[
        "cpp"
    ]
    assert kinds["java"] == {"class", "constant", "method", "interface", "enum"}
    assert set().union(*kinds.values()) == set(symbols.KINDS)


def _find(path: str, source: str, name: str) -> Symbol:
    found = extract(path.encode(), source.encode())
    assert found is not None
    return next(s for s in found if s.name == name)


def _case(case_id: str) -> tuple[str, str]:
    case = next(c for c in CASES if c.id == case_id)
    return case.values[0], case.values[1]  # type: ignore[attr-defined]


def test_signatures_are_the_whole_first_line_trimmed():
    assert _find(*_case("python"), "Outer").signature == "class Outer(Base):"  # not the decorator
    assert _find(*_case("python"), "fetch").signature == "async def fetch():"
    assert _find(*_case("javascript"), "exported").signature == "export function exported(a) {"
    assert _find(*_case("go"), "Move").signature == "func (p *Point) Move(dx int) {"
    assert _find(*_case("rust"), "new").signature == "pub fn new(x: i32, y: i32) -> Self {"
    assert _find(*_case("c"), "SQUARE").signature == "#define SQUARE(x) ((x) * (x))"
    assert _find(*_case("cpp"), "scale").signature == "double Shape::scale(double f) {"
    assert _find(*_case("java"), "MAX_ITEMS").signature == "public static final int MAX_ITEMS = 10;"


def test_a_signature_is_cut_at_200_characters():
    source = "def f(" + ", ".join(f"a{i}" for i in range(100)) + "):\n    pass\n"
    (found,) = extract(b"long.py", source.encode())
    assert len(found.signature) == 200
    assert source.startswith(found.signature)


def test_bodiless_declarations_are_not_definitions():
    c = "int prototype(int a);\nstruct fwd;\nextern int counter;\n"
    assert extract(b"p.h", c.encode()) == []
    rust = "trait T {\n    fn only_sig(&self);\n}\n"
    assert _rows(extract(b"t.rs", rust.encode())) == [("T", "trait", 1, 3, None)]
    ts = "abstract class A {\n  abstract run(): void;\n}\nfunction over(a: string): void;\n"
    assert _rows(extract(b"a.ts", ts.encode())) == [("A", "class", 1, 3, None)]
    java = "interface I {\n    void pay();\n}\n"
    assert _rows(extract(b"I.java", java.encode())) == [("I", "interface", 1, 3, None)]


def test_language_of_maps_extensions():
    assert language_of(b"src/a.py") == "python"
    assert language_of(b"a.pyi") == "python"
    assert language_of(b"x/y.MJS") == "javascript"
    assert language_of(b"a.cts") == "typescript"
    assert language_of(b"a.tsx") == "tsx"
    assert language_of(b"a.h") == "c"
    assert language_of(b"a.h++") == "cpp"
    assert language_of(b"a.hh") == "cpp"
    assert language_of(b"Main.java") == "java"
    assert language_of(b"a.txt") is None
    assert language_of(b"Makefile") is None
    assert language_of(b".py") is None
    assert extract(b"README.md", b"# title\n") is None


def _shape(nodes: list[symbols.OutlineNode]) -> list[tuple[str, list]]:
    return [(n.symbol.name, _shape(n.children)) for n in nodes]


def test_outline_nests_methods_under_their_class_and_nested_classes():
    tree = outline(extract(*[x.encode() for x in _case("python")]) or [])
    assert _shape(tree) == [
        ("MAX_SIZE", []),
        ("default_name", []),
        ("A", []),
        ("B", []),
        ("Outer", [("method", []), ("prop", []), ("Inner", [("deep", [])])]),
        ("helper", [("nested", [])]),
        ("fetch", []),
        ("CONDITIONAL", []),
        ("x", []),
    ]


def test_outline_follows_containers_in_cpp_and_keeps_siblings_with_one_range_apart():
    tree = outline(extract(*[x.encode() for x in _case("cpp")]) or [])
    geo = _shape(tree)[1]
    # `Shape::scale` (out of line inside the namespace) and `geo::Point::move` (out of it)
    # are under their owners
    assert geo == (
        "geo",
        [("Shape", [("describe", []), ("scale", [])]), ("Point", [("distance", []), ("move", [])])],
    )
    assert "move" not in [name for name, _ in _shape(tree)]
    c = "typedef struct tag {\n    int a;\n} tag_t;\n"
    assert _shape(outline(extract(b"t.c", c.encode()) or [])) == [("tag", []), ("tag_t", [])]


def test_a_file_over_the_size_cap_is_not_parsed(monkeypatch):
    source = b"def f():\n    pass\n" * 10
    assert len(extract(b"a.py", source) or []) == 10
    monkeypatch.setattr(symbols, "MAX_PARSE_BYTES", len(source) - 1)
    assert extract(b"a.py", source) == []
    big = b"x = 1\n" * (2 * 1024 * 1024 // 6 + 1)
    monkeypatch.undo()
    assert len(big) > symbols.MAX_PARSE_BYTES
    assert extract(b"big.py", big) == []


def test_a_minified_file_is_not_parsed():
    one_line = b"function f0(){return 0}"
    line = b";".join(b"function f%d(){return %d}" % (i, i) for i in range(2000))
    assert len(line) > symbols.MAX_AVERAGE_LINE
    assert extract(b"app.min.js", line + b"\n") == []
    assert _rows(extract(b"app.js", one_line + b"\n")) == [("f0", "function", 1, 1, None)]


def test_a_parse_past_its_deadline_gives_nothing_and_the_parser_recovers(monkeypatch):
    source = b"def f():\n    pass\n" * 5000
    monkeypatch.setattr(symbols, "PARSE_TIMEOUT_SECONDS", -1.0)
    assert extract(b"slow.py", source) == []
    monkeypatch.undo()
    # the halted parse left no state behind in this thread's parser
    assert _rows(extract(b"ok.py", b"def g():\n    pass\n")) == [("g", "function", 1, 2, None)]


def test_a_slow_shape_costs_a_parse_of_its_size_not_the_whole_time_limit(monkeypatch):
    """Python's grammar is quadratic on a long run of comment lines after code (this 60 KB
    file takes seconds to parse whole; a generated config file of commented-out options is
    such a file): the parse is halted within what its size allows (0.25 s plus 2 s a MiB of
    CPU, not the 2 s every file once had) and tried again with its comments blanked, which
    parses in milliseconds and finds the same definitions (with the 2 s limit alone, none)."""
    source = "".join(f"def handler_{i}(x):\n    return x\n\n" for i in range(300))
    source += "# a comment line, 'quoted'\n" * 3_000
    data = source.encode()
    deadlines: list[float] = []
    real = symbols.parse_seconds
    monkeypatch.setattr(symbols, "parse_seconds", lambda n: deadlines.append(real(n)) or real(n))
    found, why = symbols.extract_why(b"slow.py", data)
    assert why is None and [s.name for s in found or []] == [f"handler_{i}" for i in range(300)]
    # (each parse was given the time this size allows, a fraction of the 2 s cap)
    assert deadlines and all(d < symbols.PARSE_TIMEOUT_SECONDS / 4 for d in deadlines)
    # what a halted parse gives when even the second one is halted
    monkeypatch.setattr(symbols, "PARSE_TIMEOUT_SECONDS", -1.0)
    assert symbols.extract_why(b"slow.py", data) == ([], symbols.UNPARSED_TIMEOUT)
    monkeypatch.undo()
    # a file dense with definitions, larger still, parses whole within its own time
    dense = "".join(f"def f_{i}(x):\n    return x + {i}\n\n" for i in range(9_000)).encode()
    found, why = symbols.extract_why(b"dense.py", dense)
    assert why is None and len(found or []) == symbols.MAX_SYMBOLS


def test_comments_blanked_for_a_second_parse_leave_strings_whole():
    """The second parse blanks comments, never a ``#`` inside a string: a string whose line
    starts with ``#`` and ends it (``#\"\"\"``), escaped quotes, and a ``#`` in a one-line
    string keep the definitions after them where they are."""
    tricky = (
        b'x = """\n#"""\n'  # (a triple-quoted string ending on a line starting with #)
        b"def after_triple():\n    pass\n"
        b"y = 'it\\'s # not a comment'\n"
        b"def after_single():\n    pass\n"
        b"z = r'\\\\' # a comment after a raw string\n"
        b"def after_raw():\n    pass\n"
    )
    blanked = symbols._blank_python_comments(tricky)
    assert len(blanked) == len(tricky) and blanked.count(b"\n") == tricky.count(b"\n")
    assert b'#"""' in blanked and b"# not a comment" in blanked
    assert b"a comment after" not in blanked
    names = [(s.name, s.line) for s in extract(b"t.py", tricky) or []]
    tree = symbols._parse("python", blanked)
    assert tree is not None and not tree.root_node.has_error
    assert names == [("x", 1), ("after_triple", 3), ("y", 5), ("after_single", 6),
                     ("z", 8), ("after_raw", 9)]  # fmt: skip


def test_the_comment_blanking_is_linear_and_a_misread_is_not_taken():
    """The blanking once was a regex that backtracked: a backslash and a triple quote,
    repeated (each triple quote escaped, the string never closed), took 21 s of CPU for
    100 KB, holding the GIL (about 40 minutes for the MiB here: the suite's time-out, not a
    threshold, is what fails it). And a 3.12 f-string nesting its own quotes
    (``f"{d["#"]}"``) was read as a string and a comment: blanked, the rest of the file
    vanished from a parse that said nothing was wrong (300 of 401 symbols). Now one pass
    forward, and a blanked parse with an error is not taken: all the symbols, or none with
    the reason."""
    for unit in (b"\\'''\n", b'"""x', b'"abc\n', b"\\" * 50 + b"'''"):  # (no comment in them)
        data = unit * ((1 << 20) // len(unit))
        assert symbols._blank_python_comments(data) == data
    data = b"#\n" * (1 << 19)
    assert symbols._blank_python_comments(data) == b" \n" * (1 << 19)
    defs = [f"def f_{i}():\n    pass\n" for i in range(400)]
    nested = "".join(defs[:300]) + "# a comment line\n" * 3_000
    nested += 'KEY = f"{cfg["#"]}"\n' + "".join(defs[300:])
    found, why = symbols.extract_why(b"a.py", nested.encode())
    assert (len(found or []), why) in ((401, None), (0, symbols.UNPARSED_TIMEOUT)), why


def test_symbols_per_file_are_capped(monkeypatch):
    monkeypatch.setattr(symbols, "MAX_SYMBOLS", 7)
    found = extract(b"many.py", b"".join(b"def f%d(): pass\n" % i for i in range(20)))
    assert [s.name for s in found or []] == [f"f{i}" for i in range(7)]


def test_deep_nesting_is_bounded():
    depth = 300
    source = (
        "".join("    " * i + f"def f{i}():\n" for i in range(depth)) + "    " * depth + "pass\n"
    )
    found = extract(b"deep.py", source.encode()) or []
    assert 0 < len(found) <= symbols.MAX_DEPTH + 1
    assert [s.name for s in found] == [f"f{i}" for i in range(len(found))]


def test_a_syntax_error_still_yields_what_parses():
    source = "def good():\n    return 1\n\ndef broken(:\n    pass\n\nclass Still:\n    def works(self):\n        return 2\n"
    rows = _rows(extract(b"err.py", source.encode()))
    assert ("good", "function", 1, 2, None) in rows
    assert ("Still", "class", 7, 9, None) in rows
    assert ("works", "method", 8, 9, "Still") in rows
    c = "int ok(void) { return 0; }\n@@@ garbage (\nint also(void) { return 1; }\n"
    names = [s.name for s in extract(b"e.c", c.encode()) or []]
    assert names[0] == "ok"
    assert "also" in names


def test_a_c_function_a_parse_error_pulls_into_the_body_before_it_is_still_found():
    """A brace left open (or an `#ifdef` cutting a statement, as in jq's jv_print.c) makes
    tree-sitter read the next functions as part of the body before them."""
    c = "int first(int x) {\n  if (x) {\n    return 1;\n}\n\nint second(void) {\n  return 2;\n}\n"
    assert _rows(extract(b"open.c", c.encode())) == [
        ("first", "function", 1, 8, None),
        ("second", "function", 6, 8, None),
    ]


def test_bytes_that_are_not_utf8_are_replaced_not_fatal():
    source = b"X\xff = 1\ndef caf\xe9():\n    pass\n\nclass Ok:\n    pass\n"
    found = extract(b"latin1.py", source) or []
    assert ("Ok", "class", 5, 6, None) in _rows(found)
    for s in found:
        s.name.encode("utf-8")  # always valid text
        s.signature.encode("utf-8")
    assert any("\ufffd" in s.signature for s in found)


def test_an_empty_file_has_no_symbols():
    assert extract(b"empty.py", b"") == []
    assert extract(b"empty.rs", b"\n\n") == []
    assert outline([]) == []


def test_four_threads_at_once_give_the_same_answers():
    inputs = [(c.values[0].encode(), c.values[1].encode()) for c in CASES]  # type: ignore[attr-defined]
    big = (
        b"x.py",
        b"".join(b"class C%d:\n    def m(self):\n        pass\n" % i for i in range(300)),
    )
    inputs.append(big)
    expected = [extract(p, d) for p, d in inputs]
    results: list[list] = [[] for _ in range(4)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def work(slot: int) -> None:
        try:
            barrier.wait(timeout=30)
            for _ in range(15):
                results[slot].append([extract(p, d) for p, d in inputs])
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    for slot in results:
        assert len(slot) == 15
        for answer in slot:
            assert answer == expected


def test_a_long_chained_assignment_costs_no_stack() -> None:
    """``a0 = a1 = … = 0`` with thousands of links (a recursion per link raised
    RecursionError, and outline answered 'failed unexpectedly')."""
    n = 3000  # (one link per line, continued: not a minified line)
    src = (" = \\\n".join(f"A{i}" for i in range(n)) + " = 0\n").encode()
    got = extract(b"chain.py", src)
    assert got is not None and len(got) == n
    assert (
        {s.kind for s in got} == {"constant"}
        and got[0].name == "A0"
        and got[-1].name == f"A{n - 1}"
    )


@pytest.mark.parametrize("size", ["small", "large"])
def test_a_parse_keeps_nothing_of_the_file_alive(size: str) -> None:
    """tree-sitter 0.26 never releases what its read callable returns: handed the file's
    bytes (or views of them), every parsed file stayed in memory for good (3 GiB at 500k
    files). Nothing of the bytes may outlive ``extract``."""
    unit = b"def f(x):\n    return x + 1\n\n\nclass C:\n    def m(self):\n        pass\n"
    data = unit * (2 if size == "small" else 6000)  # (one chunk, or several)
    before = sys.getrefcount(data)
    assert symbols.extract(b"m.py", data)
    assert sys.getrefcount(data) == before
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for _ in range(4):
            symbols.extract(b"m.py", bytes(data))  # (a new object each time, as files are)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert held < len(data) + 200_000, held  # (not 4 files' bytes)


def test_parsing_many_files_keeps_a_bounded_amount_alive() -> None:
    """What tree-sitter keeps of each read (the view it was handed) is one of a bounded set
    of views, not a new object per parse: 3,000 parses hold no more than a few."""
    data = b"def f(x):\n    return x\n"
    symbols.extract(b"m.py", data)  # (the views of these lengths made)
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for _ in range(3_000):
            symbols.extract(b"m.py", data)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert held < 100_000, held  # (a view per parse would be about 1 MB)


def test_parsing_in_short_lived_threads_keeps_a_bounded_amount_alive() -> None:
    """A server's worker threads come and go; what tree-sitter keeps of a parse (the buffer
    it read from and its views) must not be one set per thread that ever parsed: 20
    threads, each parsing once and ending, hold no more than the few parses running at
    once (was a 64 KiB buffer and its views per thread, about 1.3 MB here)."""
    data = b"def f(x):\n    return x\n" * 2_000  # (several chunks: views of two lengths)

    def parse_once() -> None:
        assert symbols.extract(b"m.py", data)

    parse_once()
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for _ in range(20):
            t = threading.Thread(target=parse_once)
            t.start()
            t.join()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert held < 500_000, held


NESTED_PY = """\
def outer():
    x = 1
    if x:
        def inner():
            pass
    try:
        class InTry:
            y = 2
    finally:
        pass
    with x:
        @wrap
        async def in_with():
            s = "a string"
    return x


def tabbed():
    if True:
        def\tby_tab():
            pass
    class\tInTab:
        pass


def flat():
    s = "no nested definition here"
    return s
"""


@pytest.mark.parametrize(
    ("path", "source"),
    [(c.values[0], c.values[1]) for c in CASES] + [("nested.py", NESTED_PY)],  # type: ignore[attr-defined]
)
def test_without_signatures_the_same_symbols(path: str, source: str) -> None:
    """What the index extracts (no signatures; in a Python function only bodies whose bytes
    hold ``def`` or ``class`` walked) is what a live parse finds, signatures aside."""
    import dataclasses

    data = source.encode()
    full = extract(path.encode(), data)
    assert full is not None
    assert extract(path.encode(), data, signatures=False) == [
        dataclasses.replace(s, signature="") for s in full
    ]
    if path == "nested.py":
        assert [(s.name, s.kind, s.container) for s in full] == [
            ("outer", "function", None),
            ("inner", "function", "outer"),
            ("InTry", "class", "outer"),
            ("in_with", "function", "outer"),
            ("tabbed", "function", None),
            ("by_tab", "function", "tabbed"),
            ("InTab", "class", "tabbed"),
            ("flat", "function", None),
        ]


def test_a_parse_stopped_past_its_deadline_still_finishes():
    """The deadline is the parsing thread's CPU time: a process stopped (SIGSTOP, a suspend)
    or starved mid-parse for longer than ``PARSE_TIMEOUT_SECONDS`` still gets the file's
    symbols (before, a wall-clock deadline stored such a file with none, until it changed).
    The child parses one large file over and over; the stop lands in one of the parses."""
    import os
    import signal
    import subprocess
    import time

    child = (
        "import sys, time\n"
        "from rootgrep import symbols\n"
        "src = b''.join(b'def f%d(x):\\n    return x + 1\\n' % i for i in range(60000))\n"
        "src = src[: src.rfind(b'\\n', 0, symbols.MAX_PARSE_BYTES) + 1]\n"
        "symbols.extract(b'warm.py', b'def g(): pass\\n')\n"  # (the grammar loaded before)
        "print('go', flush=True)\n"
        "for _ in range(5):\n"
        "    t = time.monotonic()\n"
        "    found = symbols.extract(b'big.py', src)\n"
        "    print(len(found), time.monotonic() - t, flush=True)\n"
    )
    with subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True) as p:
        try:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "go"
            time.sleep(0.1)  # (within the first parses)
            os.kill(p.pid, signal.SIGSTOP)
            time.sleep(symbols.PARSE_TIMEOUT_SECONDS + 1.0)  # (past the deadline in wall time)
            os.kill(p.pid, signal.SIGCONT)
            runs = [line.split() for line in p.stdout]
            assert p.wait(timeout=120) == 0
        finally:
            if p.poll() is None:
                p.kill()
    assert len(runs) == 5
    # the stop came during a parse (so the test means something), and no parse was cut short
    assert max(float(wall) for _, wall in runs) > symbols.PARSE_TIMEOUT_SECONDS
    assert [int(count) for count, _ in runs] == [symbols.MAX_SYMBOLS] * 5


def test_every_symbol_is_in_the_outline_once_whatever_the_owners():
    """Owners found by name (a Rust impl's type, a Go receiver) never make a loop or take a
    method under an associated type: two impls whose associated types name each other lost
    both from the outline; a method went under `type Value = Value` inside another impl."""

    def flat(nodes):
        return [(n.symbol.name, n.symbol.line) for n in nodes] + [
            x for n in nodes for x in flat(n.children)
        ]

    looped = b"impl A { type B = u8; }\nimpl B { type A = u8; }\n"
    serde = (
        b"struct Value;\nstruct ValueVisitor;\nimpl Visitor for ValueVisitor {\n"
        b"    type Value = Value;\n    fn visit(self) {}\n}\n"
        b"impl Serialize for Value {\n    fn serialize(&self) {}\n}\n"
    )
    for source in (looped, serde):
        syms = extract(b"a.rs", source) or []
        tree = outline(syms)
        assert sorted(flat(tree)) == sorted((s.name, s.line) for s in syms)
    tree = outline(extract(b"a.rs", serde) or [])
    assert _shape(tree) == [
        ("Value", [("serialize", [])]),
        ("ValueVisitor", [("Value", []), ("visit", [])]),
    ]
