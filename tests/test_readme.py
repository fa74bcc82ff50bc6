"""The README and docs/ say only what exists.

README.md is a front page (at most 300 lines, `make run` / `make test` first); every relative
link in README.md and docs/*.md reaches a file, and its ``#anchor`` a heading of that file (as
GitHub makes anchors); every ``make X`` shown names a Makefile target; every ``rootgrep VERB
--flag`` shown (in a code block, inline code, or a client configuration's ``args``) names a
verb the CLI has and flags that verb's own parser accepts; the flag tables of docs/server.md
and docs/cli.md hold every flag of their parsers; and the layers table of docs/design.md names
every module under src/rootgrep, and nothing else. No network, no subprocess: the parsers are
the CLI's own argparse objects.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootgrep.cli import _top_parser
from rootgrep.cli.common import VERBS
from rootgrep.cli.index_verbs import index_parser
from rootgrep.cli.query_verbs import outline_parser, search_parser, symbols_parser
from rootgrep.cli.rg_flags import grep_parser
from rootgrep.cli.serve_verb import serve_parser

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
PACKAGE = REPO / "src" / "rootgrep"
MAX_README_LINES = 300


# A target the README documents that another change adds to the Makefile: while it is not
# there its check is skipped (saying so); once the Makefile has it, the check is a plain one.
def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def page_ids() -> list[str]:
    return [str(p.relative_to(REPO)) for p in pages()]


# ---- reading markdown -------------------------------------------------------------------------

FENCE = re.compile(r"^ {0,3}(```+|~~~+)\s*([\w+-]*)")
INLINE_CODE = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)


def split_code(text: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The prose lines (fenced blocks blanked out, so line numbers stay) and the fenced code
    blocks as (language, text)."""
    prose: list[str] = []
    blocks: list[tuple[str, str]] = []
    fence: str | None = None
    lang = ""
    body: list[str] = []
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence, lang, body = m.group(1)[0] * 3, m.group(2).lower(), []
            prose.append("")
        elif fence is not None and line.strip().startswith(fence):
            blocks.append((lang, "\n".join(body)))
            fence = None
            prose.append("")
        elif fence is not None:
            body.append(line)
            prose.append("")
        else:
            prose.append(line)
    assert fence is None, "an unclosed code fence"
    return prose, blocks


def paragraphs(prose: list[str]) -> Iterator[tuple[int, str]]:
    """(first line number, text) of each run of non-blank prose lines: an inline code span or
    a link may go on over a line break, never over a blank line."""
    start, run = 0, []
    for n, line in enumerate([*prose, ""], 1):
        if line.strip():
            start = start or n
            run.append(line)
        elif run:
            yield start, "\n".join(run)
            start, run = 0, []


def code_snippets(text: str) -> Iterator[str]:
    """Every piece of code a page shows: each line of its fenced blocks, each inline span."""
    prose, blocks = split_code(text)
    for _, block in blocks:
        yield from block.splitlines()
    for _, para in paragraphs(prose):
        for m in INLINE_CODE.finditer(para):
            yield " ".join(m.group(2).split())


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: markup dropped, lower case, anything but letters,
    digits, spaces, hyphens and underscores removed, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    prose, _ = split_code(path.read_text())
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in prose:
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = github_slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(path: Path) -> Iterator[tuple[int, str]]:
    prose, _ = split_code(path.read_text())
    for n, para in paragraphs(prose):
        para = INLINE_CODE.sub("", para)
        for m in LINK.finditer(para):
            yield n + para.count("\n", 0, m.start()), m.group(1)


# ---- 1. the front page ------------------------------------------------------------------------


def test_the_readme_is_a_front_page_that_starts_with_make_run_and_make_test() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most 300)"
    assert lines[0].startswith("# "), "README.md starts with its title"
    rest = [x for x in lines[1:] if x.strip()]
    assert rest and FENCE.match(rest[0]), "the first thing after the title is a code block"
    block = []
    for x in rest[1:]:
        if x.strip().startswith("```"):
            break
        block.append(x.strip())
    assert len(block) >= 2, block
    assert block[0].startswith("make run"), block
    assert block[1].startswith("make test"), block


# ---- 2. links ---------------------------------------------------------------------------------


@pytest.mark.parametrize("page", pages(), ids=page_ids())
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    bad = []
    for n, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        where, _, anchor = target.partition("#")
        dest = (page.parent / where).resolve() if where else page
        if not dest.exists():
            bad.append(f"{page.name}:{n}: {target}: no such file")
            continue
        if not str(dest).startswith(str(REPO)):
            bad.append(f"{page.name}:{n}: {target}: outside the repository")
            continue
        if anchor:
            if dest.suffix != ".md":
                bad.append(f"{page.name}:{n}: {target}: an anchor into a file that is not markdown")
            elif anchor not in anchors(dest):
                bad.append(f"{page.name}:{n}: {target}: no heading #{anchor} in {dest.name}")
    assert not bad, "\n".join(bad)


def test_the_readme_links_every_docs_page() -> None:
    linked = {
        (README.parent / t.partition("#")[0]).resolve()
        for _, t in links(README)
        if not re.match(r"^[a-z]+:", t)
    }
    missing = [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked]
    assert not missing, f"README.md links no docs page {missing}"


# ---- 3. make targets --------------------------------------------------------------------------


def makefile_targets() -> set[str]:
    targets = set()
    for line in (REPO / "Makefile").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.][A-Za-z0-9_. -]*?)\s*::?(?!=)", line)
        if m:
            targets.update(t for t in m.group(1).split() if not t.startswith("."))
    return targets


def make_targets_shown(text: str) -> set[str]:
    shown = set()
    for code in code_snippets(text):
        for m in re.finditer(r"(?:^|[\s;&|(])make((?:\s+\S+)+)", code):
            for word in m.group(1).split():
                if word in ("#", "|", ";", "&&", "||", ">", "2>") or word.startswith("#"):
                    break
                if "=" in word or word.startswith("-") or word in ("…", "..."):
                    continue
                word = word.strip("`\"',;:)")
                if re.fullmatch(r"[a-z][a-z0-9-]*", word):
                    shown.add(word)
                else:
                    break
    return shown


def _shown_targets() -> list[tuple[str, str]]:
    out = []
    for page in pages():
        for t in sorted(make_targets_shown(page.read_text())):
            out.append((str(page.relative_to(REPO)), t))
    return out


@pytest.mark.parametrize(("page", "target"), _shown_targets())
def test_every_make_command_shown_is_a_makefile_target(page: str, target: str) -> None:
    targets = makefile_targets()
    assert target in targets, f"{page} shows `make {target}`; the Makefile has {sorted(targets)}"


def test_make_commands_are_found() -> None:
    """The scan itself: the README's first block is found, and prose is not taken for code."""
    assert {"run", "test"} <= make_targets_shown(README.read_text())
    assert make_targets_shown("make sure of it; `make bench ARGS=x` and `make PYTHON=p lint`") == {
        "bench",
        "lint",
    }


# ---- 4. rootgrep verbs and flags --------------------------------------------------------------


def verb_parsers() -> dict[str, argparse.ArgumentParser]:
    return {
        "grep": grep_parser(),
        "serve": serve_parser(),
        "index": index_parser("index"),
        "daemon": index_parser("index"),  # (main: daemon is `index --watch`)
        "status": index_parser("status"),
        "search": search_parser(),
        "symbols": symbols_parser(),
        "outline": outline_parser(),
    }


def test_every_verb_has_its_parser() -> None:
    assert set(verb_parsers()) == set(VERBS)


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def bad_flags(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """The words that look like flags and that ``parser`` does not know."""
    opts = options(parser)
    bad = []
    for w in words:
        w = w.strip("[](){},").removesuffix("...").removesuffix("…")
        if not w.startswith("-") or w in ("-", "--") or re.fullmatch(r"-\d.*", w):
            continue
        if w.startswith("--"):
            if w.split("=", 1)[0] not in opts:
                bad.append(w)
            continue
        if w in opts:
            continue
        rest = w[1:]  # a cluster of short flags (-uu, -il), or one with its value (-C2)
        while rest:
            action = opts.get("-" + rest[0])
            if action is None:
                bad.append(w)
                break
            if action.nargs != 0:
                break  # the rest is its value
            rest = rest[1:]
    return bad


SEPARATORS = {"|", "||", "&&", ";", ">", "2>", "&", "<"}


def rootgrep_commands(text: str) -> Iterator[tuple[str, list[str]]]:
    """(the snippet, the words after `rootgrep`) for every rootgrep command a page shows."""
    for code in code_snippets(text):
        for line in code.splitlines():
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                words = line.split()
            for i, w in enumerate(words):
                if w == "rootgrep" or w.endswith("/rootgrep"):
                    if i > 0 and words[i - 1] in ("install", "uninstall"):
                        continue  # `pipx install rootgrep`: a package, not a command
                    if words[i + 1 : i + 2] == ["--"]:
                        continue  # `claude mcp add rootgrep -- CMD`: a server's name
                    if w != "rootgrep" and w.startswith(("scripts/", "src/")):
                        continue  # the file, named
                    after = []
                    for x in words[i + 1 :]:
                        if x in SEPARATORS or x == "rootgrep":
                            break
                        after.append(x)
                    if after:
                        yield line, after
    _, blocks = split_code(text)
    for lang, block in blocks:
        if lang != "json":
            continue
        for entry in json_entries(json.loads(block)):
            yield json.dumps(entry), list(entry["args"])


def json_entries(doc: object) -> Iterator[dict]:
    """The client configuration entries whose command is rootgrep."""
    if isinstance(doc, dict):
        cmd = doc.get("command")
        if isinstance(cmd, str) and cmd.rsplit("/", 1)[-1] == "rootgrep":
            yield doc
        for v in doc.values():
            yield from json_entries(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from json_entries(v)


@pytest.mark.parametrize("page", pages(), ids=page_ids())
def test_every_rootgrep_command_shown_names_a_verb_and_its_flags(page: Path) -> None:
    parsers = verb_parsers()
    bad = []
    for line, words in rootgrep_commands(page.read_text()):
        verb = words[0]
        if verb.startswith("-"):
            problems = bad_flags(_top_parser(), words[:1])
        elif verb in parsers:
            problems = bad_flags(parsers[verb], words[1:])
        elif re.fullmatch(r"[a-z]+", verb):
            problems = [f"no verb {verb!r}"]
        else:
            continue  # `rootgrep`'s own words, e.g. "`rootgrep` command" or a placeholder
        if problems:
            bad.append(f"{page.name}: {line.strip()}: {', '.join(problems)}")
    assert not bad, "\n".join(bad)


def test_the_command_scan_sees_what_it_must() -> None:
    text = (
        "`rootgrep grep -uu -C2 --glob=x PAT` and `rootgrep serve --bogus`\n"
        '```json\n{"a": {"command": "/v/bin/rootgrep", "args": ["serve", "--nope"]}}\n```\n'
    )
    found = list(rootgrep_commands(text))
    assert [w[0] for _, w in found] == ["grep", "serve", "serve"]
    parsers = verb_parsers()
    assert bad_flags(parsers["grep"], found[0][1][1:]) == []
    assert bad_flags(parsers["serve"], found[1][1][1:]) == ["--bogus"]
    assert bad_flags(parsers["serve"], found[2][1][1:]) == ["--nope"]


def flag_table(path: Path) -> str:
    """The first column of the first table of ``path`` whose first header cell is `flag`."""
    prose, _ = split_code(path.read_text())
    cells: list[str] = []
    inside = False
    for line in prose:
        if re.match(r"^\|\s*flag\s*\|", line):
            inside = True
            continue
        if inside:
            if not line.startswith("|"):
                break
            cells.append(line.split("|")[1])
    assert cells, f"{path.name} has no table whose first column is `flag`"
    return " ".join(cells)


@pytest.mark.parametrize(("page", "verb"), [("server.md", "serve"), ("cli.md", "grep")])
def test_the_flag_tables_hold_every_flag_of_their_verb(page: str, verb: str) -> None:
    column = flag_table(DOCS / page)
    shown = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", column))
    parser = verb_parsers()[verb]
    missing = [
        "/".join(a.option_strings)
        for a in parser._actions
        if a.option_strings
        and "-h" not in a.option_strings
        and not any(s in shown for s in a.option_strings)
    ]
    assert not missing, f"docs/{page}'s flag table does not show {missing}"
    unknown = bad_flags(parser, sorted(shown))
    assert not unknown, f"docs/{page}'s flag table shows flags `rootgrep {verb}` lacks: {unknown}"


def test_the_cli_page_shows_every_verb() -> None:
    text = (DOCS / "cli.md").read_text()
    shown = {w[0] for _, w in rootgrep_commands(text)}
    assert set(VERBS) <= shown, f"docs/cli.md shows no `rootgrep {sorted(set(VERBS) - shown)}`"


# ---- 5. the layers table ----------------------------------------------------------------------


def design_rows() -> list[tuple[str, str]]:
    prose, _ = split_code((DOCS / "design.md").read_text())
    rows = []
    inside = False
    for line in prose:
        if re.match(r"^\|\s*module\s*\|\s*owns\s*\|", line):
            inside = True
            continue
        if inside:
            if not line.startswith("|"):
                break
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if set(cells[0]) <= set("-: "):
                continue
            m = re.fullmatch(r"`([^`]+)`.*", cells[0])
            assert m, f"a layers row names no module: {line}"
            rows.append((m.group(1), " | ".join(cells[1:])))
    assert rows, "docs/design.md has no `| module | owns |` table"
    return rows


def covered_modules(rows: list[tuple[str, str]]) -> tuple[set[Path], list[str]]:
    """The modules the rows name, and what they name that does not exist.

    A row is a module (``roots.py``, ``index/plan.py``), a package (``cli/``: its own
    ``__init__.py`` and each of its modules the row names as `name.py`), or a file of the
    repository outside the package (``scripts/rootgrep``)."""
    covered: set[Path] = set()
    missing: list[str] = []
    for name, owns in rows:
        if name.endswith("/"):
            pkg = PACKAGE / name
            if not (pkg / "__init__.py").is_file():
                missing.append(name)
                continue
            covered.add(pkg / "__init__.py")
            for mod in re.findall(r"`([\w]+\.py)`", owns):
                if (pkg / mod).is_file():
                    covered.add(pkg / mod)
                else:
                    missing.append(name + mod)
        elif name.endswith(".py"):
            if (PACKAGE / name).is_file():
                covered.add(PACKAGE / name)
            else:
                missing.append(name)
        elif not (REPO / name).is_file():
            missing.append(name)
    return covered, missing


def test_the_layers_table_names_every_module_and_nothing_else() -> None:
    covered, missing = covered_modules(design_rows())
    assert not missing, f"docs/design.md's layers table names what does not exist: {missing}"
    modules = set(PACKAGE.rglob("*.py"))
    # a sub-package's __init__ is covered by a row of the package or of any of its modules
    for init in [m for m in modules if m.name == "__init__.py" and m.parent != PACKAGE]:
        if any(c.parent == init.parent for c in covered):
            covered.add(init)
    left = sorted(str(m.relative_to(PACKAGE)) for m in modules - covered)
    assert not left, f"docs/design.md's layers table has no row for {left}"
