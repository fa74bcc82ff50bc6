"""A synthetic source tree of any size, for the growth and edit-cost benchmarks.

File ``i`` depends only on ``(seed, i)``: a tree of N files is files ``0 .. N-1``, so a tree
grown from 50k to 200k files is byte for byte the tree made at 200k directly. Each file is
Python-like code of about 3 KB (a docstring, imports, constants, functions and classes whose
bodies come from a seeded pool, with names and numbers unique to the file), 100 files per
directory, 100 directories per package (``pkg000/mod00/name_0.py``). ``RARE_TOKEN`` is planted
in the ``PLANTED`` files only, whatever the size (all below 5,000): a selective grep has the
same five answers in every tree.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

SEED = 11
FILES_PER_DIR = 100
DIRS_PER_PACKAGE = 100
# no vowel: never made of the vocabulary's syllables, nor of hex digits
RARE_TOKEN = "zxqvj_sentinel_kw"
PLANTED = (17, 1_234, 2_345, 3_456, 4_567)

_CONSONANTS = "bcdfghklmnprstvw"
_VOWELS = "aeiou"
_STATEMENTS = (
    "{a} = {b}.{c}({d}, {e})",
    "{a} = {b}({c}=@, {d}={e})",
    'if {a} is None:\n    raise ValueError("{w} {x} {y}")',
    "for {a} in {b}:\n    {c}.append({a}.{d})",
    "# {w} {x} the {y} before {a}",
    "{a} = [{b} for {b} in {c} if {b}.{d}]",
    "with open({a}_path) as {b}:\n    {c} = {b}.read()",
    'logger.debug("%s {w} {x}", {a})',
    "{a} += len({b}) * {n}",
    "try:\n    {a} = {b}[{c}]\nexcept KeyError:\n    {a} = @",
    "while {a} < {n}:\n    {a} = {b}({a})",
    '{a} = {{"{w}": {b}, "{x}": {n}}}',
)


@dataclass(frozen=True)
class Vocabulary:
    """Everything a file is assembled from, made once from the seed."""

    words: tuple[str, ...]
    modules: tuple[str, ...]
    bodies: tuple[str, ...]  # function bodies, indented once; '@' stands for a file's own name


def _word(rng: random.Random) -> str:
    return "".join(
        rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.choice((2, 2, 3, 4)))
    )


def vocabulary(seed: int = SEED) -> Vocabulary:
    rng = random.Random(seed)
    words = tuple(sorted({_word(rng) for _ in range(3_000)}))
    modules = tuple(
        ".".join(rng.choice(words) for _ in range(rng.choice((1, 2, 3)))) for _ in range(300)
    )
    bodies = []
    for _ in range(4_000):
        lines = []
        for _ in range(rng.randint(3, 8)):
            stmt = rng.choice(_STATEMENTS).format(
                a=rng.choice(words), b=rng.choice(words), c=rng.choice(words),
                d=rng.choice(words), e=rng.choice(words), w=rng.choice(words),
                x=rng.choice(words), y=rng.choice(words), n=rng.randint(2, 9999),
            )  # fmt: skip
            lines.extend("    " + line for line in stmt.split("\n"))
        lines.append(f"    return {rng.choice(words)}")
        bodies.append("\n".join(lines))
    return Vocabulary(words, modules, tuple(bodies))


def rel_path(i: int, vocab: Vocabulary) -> str:
    """File ``i``'s path relative to the tree."""
    d = i // FILES_PER_DIR
    name = vocab.words[(i * 7_919) % len(vocab.words)]
    return f"pkg{d // DIRS_PER_PACKAGE:03d}/mod{d % DIRS_PER_PACKAGE:02d}/{name}_{i}.py"


def file_text(i: int, vocab: Vocabulary, seed: int = SEED) -> bytes:
    """File ``i``'s bytes (about 1.5 to 5 KB, 3 KB on average)."""
    rng = random.Random(seed * 1_000_003 + i)
    words, bodies, choice = vocab.words, vocab.bodies, rng.choice
    own = f"{choice(words)}_{i:x}"  # a name only this file uses
    out = [
        f'"""{choice(words).capitalize()} {choice(words)} helpers for {choice(vocab.modules)}."""',
        "",
    ]
    out += [f"import {choice(vocab.modules)}" for _ in range(rng.randint(1, 4))]
    out += [
        f"from {choice(vocab.modules)} import {choice(words)}, {choice(words)}",
        "",
        f"{own.upper()}_LIMIT = 0x{rng.getrandbits(32):08x}",
    ]
    if i in PLANTED:
        out.append(f'SENTINEL = "{RARE_TOKEN}"')
    out.append("")
    target = rng.randint(1_500, 4_500)
    size = sum(len(line) + 1 for line in out)
    while size < target:
        body = choice(bodies).replace("@", own)
        if rng.random() < 0.2:
            block = (
                f"class {choice(words).capitalize()}{choice(words).capitalize()}:\n"
                f"    def {choice(words)}_{choice(words)}(self, {own}):\n"
                + "\n".join("    " + line for line in body.split("\n"))
            )
        else:
            block = f"def {choice(words)}_{choice(words)}({choice(words)}, {own}):\n{body}"
        out += ["", block, ""]
        size += len(block) + 3
    return ("\n".join(out) + "\n").encode()


def make_tree(dest: str, n: int, start: int = 0, vocab: Vocabulary | None = None) -> int:
    """Write files ``start .. n-1`` beneath ``dest`` (files below ``start`` are expected to be
    there already: a tree grows in place). Returns the bytes written."""
    vocab = vocab or vocabulary()
    written = 0
    for i in range(start, n):
        path = os.path.join(dest, rel_path(i, vocab))
        if i == start or i % FILES_PER_DIR == 0:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        data = file_text(i, vocab)
        with open(path, "wb") as f:
            f.write(data)
        written += len(data)
    return written
