"""rg's ``-t/--type``, ``-T/--type-not`` and ``--type-list``: file types as sets of globs
matched against a file's name (not its path).

The table holds rg 14's definitions for the types most repositories have (each equal to
the line ``rg --type-list`` prints for it: ``tests/test_cli_types.py`` checks them against
rg); a type rg has and this table lacks is refused with a pointer to ``--type-list``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

TYPES: dict[str, tuple[str, ...]] = {
    "asm": ("*.S", "*.asm", "*.s"),
    "bazel": (
        "*.BUILD",
        "*.bazel",
        "*.bazelrc",
        "*.bzl",
        "BUILD",
        "MODULE.bazel",
        "WORKSPACE",
        "WORKSPACE.bazel",
    ),
    "c": ("*.[chH]", "*.[chH].in", "*.cats"),
    "clojure": ("*.clj", "*.cljc", "*.cljs", "*.cljx"),
    "cmake": ("*.cmake", "CMakeLists.txt"),
    "config": ("*.cfg", "*.conf", "*.config", "*.ini"),
    "cpp": (
        "*.[ChH]",
        "*.[ChH].in",
        "*.[ch]pp",
        "*.[ch]pp.in",
        "*.[ch]xx",
        "*.[ch]xx.in",
        "*.cc",
        "*.cc.in",
        "*.hh",
        "*.hh.in",
        "*.inl",
    ),
    "cs": ("*.cs",),
    "css": ("*.css", "*.scss"),
    "csv": ("*.csv",),
    "cuda": ("*.cu", "*.cuh"),
    "cython": ("*.pxd", "*.pxi", "*.pyx"),
    "d": ("*.d",),
    "dart": ("*.dart",),
    "diff": ("*.diff", "*.patch"),
    "docker": ("*Dockerfile*",),
    "elisp": ("*.el",),
    "elixir": ("*.eex", "*.ex", "*.exs", "*.heex", "*.leex", "*.livemd"),
    "erlang": ("*.erl", "*.hrl"),
    "fish": ("*.fish",),
    "fortran": (
        "*.F",
        "*.F77",
        "*.F90",
        "*.F95",
        "*.f",
        "*.f77",
        "*.f90",
        "*.f95",
        "*.pfo",
    ),
    "go": ("*.go",),
    "gradle": (
        "*.gradle",
        "*.gradle.kts",
        "gradle-wrapper.*",
        "gradle.properties",
        "gradlew",
        "gradlew.bat",
    ),
    "graphql": ("*.graphql", "*.graphqls"),
    "groovy": ("*.gradle", "*.groovy"),
    "haskell": ("*.c2hs", "*.cpphs", "*.hs", "*.hsc", "*.lhs"),
    "hs": ("*.hs", "*.lhs"),
    "html": ("*.ejs", "*.htm", "*.html"),
    "java": ("*.java", "*.jsp", "*.jspx", "*.properties"),
    "jinja": ("*.j2", "*.jinja", "*.jinja2"),
    "js": ("*.cjs", "*.js", "*.jsx", "*.mjs", "*.vue"),
    "json": ("*.json", "*.sarif", "composer.lock"),
    "jsonl": ("*.jsonl",),
    "julia": ("*.jl",),
    "jupyter": ("*.ipynb", "*.jpynb"),
    "kotlin": ("*.kt", "*.kts"),
    "less": ("*.less",),
    "license": (
        "*[.-]LICEN[CS]E*",
        "AGPL-*[0-9]*",
        "APACHE-*[0-9]*",
        "BSD-*[0-9]*",
        "CC-BY-*",
        "COPYING",
        "COPYING[.-]*",
        "COPYRIGHT",
        "COPYRIGHT[.-]*",
        "EULA",
        "EULA[.-]*",
        "GFDL-*[0-9]*",
        "GNU-*[0-9]*",
        "GPL-*[0-9]*",
        "LGPL-*[0-9]*",
        "LICEN[CS]E",
        "LICEN[CS]E[.-]*",
        "MIT-*[0-9]*",
        "MPL-*[0-9]*",
        "NOTICE",
        "NOTICE[.-]*",
        "OFL-*[0-9]*",
        "PATENTS",
        "PATENTS[.-]*",
        "UNLICEN[CS]E",
        "UNLICEN[CS]E[.-]*",
        "agpl[.-]*",
        "gpl[.-]*",
        "lgpl[.-]*",
        "licen[cs]e",
        "licen[cs]e.*",
    ),
    "lisp": ("*.el", "*.jl", "*.lisp", "*.lsp", "*.sc", "*.scm"),
    "lock": ("*.lock", "package-lock.json"),
    "log": ("*.log",),
    "lua": ("*.lua",),
    "make": (
        "*.mak",
        "*.mk",
        "[Gg][Nn][Uu]makefile",
        "[Gg][Nn][Uu]makefile.am",
        "[Gg][Nn][Uu]makefile.in",
        "[Mm]akefile",
        "[Mm]akefile.am",
        "[Mm]akefile.in",
    ),
    "markdown": ("*.markdown", "*.md", "*.mdown", "*.mdwn", "*.mdx", "*.mkd", "*.mkdn"),
    "md": ("*.markdown", "*.md", "*.mdown", "*.mdwn", "*.mdx", "*.mkd", "*.mkdn"),
    "nim": ("*.nim", "*.nimble", "*.nimf", "*.nims"),
    "nix": ("*.nix",),
    "objc": ("*.h", "*.m"),
    "objcpp": ("*.h", "*.mm"),
    "ocaml": ("*.ml", "*.mli", "*.mll", "*.mly"),
    "perl": ("*.PL", "*.perl", "*.pl", "*.plh", "*.plx", "*.pm", "*.t"),
    "php": (
        "*.php",
        "*.php3",
        "*.php4",
        "*.php5",
        "*.php7",
        "*.php8",
        "*.pht",
        "*.phtml",
    ),
    "protobuf": ("*.proto",),
    "ps": ("*.cdxml", "*.ps1", "*.ps1xml", "*.psd1", "*.psm1"),
    "py": ("*.py", "*.pyi"),
    "r": ("*.R", "*.Rmd", "*.Rnw", "*.r"),
    "readme": ("*README", "README*"),
    "rst": ("*.rst",),
    "ruby": (
        "*.gemspec",
        "*.rb",
        "*.rbw",
        ".irbrc",
        "Gemfile",
        "Rakefile",
        "config.ru",
    ),
    "rust": ("*.rs",),
    "sass": ("*.sass", "*.scss"),
    "scala": ("*.sbt", "*.scala"),
    "sh": (
        "*.bash",
        "*.bashrc",
        "*.csh",
        "*.cshrc",
        "*.ksh",
        "*.kshrc",
        "*.sh",
        "*.tcsh",
        "*.zsh",
        ".bash_login",
        ".bash_logout",
        ".bash_profile",
        ".bashrc",
        ".cshrc",
        ".kshrc",
        ".login",
        ".logout",
        ".profile",
        ".tcshrc",
        ".zlogin",
        ".zlogout",
        ".zprofile",
        ".zshenv",
        ".zshrc",
        "bash_login",
        "bash_logout",
        "bash_profile",
        "bashrc",
        "profile",
        "zlogin",
        "zlogout",
        "zprofile",
        "zshenv",
        "zshrc",
    ),
    "sql": ("*.psql", "*.sql"),
    "svelte": ("*.svelte",),
    "swift": ("*.swift",),
    "tcl": ("*.tcl",),
    "tex": ("*.bib", "*.cls", "*.dtx", "*.ins", "*.ltx", "*.sty", "*.tex"),
    "tf": (
        "*.auto.tfvars",
        "*.auto.tfvars.json",
        "*.terraform.lock.hcl",
        "*.terraformrc",
        "*.tf",
        "*.tf.json",
        "*.tfrc",
        "terraform.rc",
        "terraform.tfvars",
        "terraform.tfvars.json",
    ),
    "thrift": ("*.thrift",),
    "toml": ("*.toml", "Cargo.lock"),
    "ts": ("*.cts", "*.mts", "*.ts", "*.tsx"),
    "txt": ("*.txt",),
    "vim": ("*.vim", ".gvimrc", ".vimrc", "_gvimrc", "_vimrc", "gvimrc", "vimrc"),
    "vue": ("*.vue",),
    "xml": (
        "*.dtd",
        "*.rng",
        "*.sch",
        "*.xhtml",
        "*.xjb",
        "*.xml",
        "*.xml.dist",
        "*.xsd",
        "*.xsl",
        "*.xslt",
    ),
    "yaml": ("*.yaml", "*.yml"),
    "zig": ("*.zig",),
    "zsh": (
        "*.zsh",
        ".zlogin",
        ".zlogout",
        ".zprofile",
        ".zshenv",
        ".zshrc",
        "zlogin",
        "zlogout",
        "zprofile",
        "zshenv",
        "zshrc",
    ),
}

ALL = "all"  # as rg: every type of the table


class UnknownType(ValueError):
    pass


def type_list() -> str:
    """``--type-list``'s output: ``name: glob, glob`` per type, sorted, as rg prints it."""
    return "".join(f"{name}: {', '.join(sorted(TYPES[name]))}\n" for name in sorted(TYPES))


def _matcher(names: list[str]) -> Callable[[str], object]:
    import fnmatch
    import re

    globs = [g for n in names for g in TYPES[n]]
    return re.compile("|".join(fnmatch.translate(g) for g in globs)).match


class FileTypes:
    """The ``-t``/``-T`` selections in the order given: for a file name, the last one whose
    globs match decides (``-t``: searched, ``-T``: not); a name none matches is not searched
    when any ``-t`` was given, else the types do not decide (None)."""

    def __init__(self, selections: list[tuple[str, str]]) -> None:
        self._rules: list[tuple[bool, Callable[[str], object]]] = []
        for how, name in selections:
            if name != ALL and name not in TYPES:
                raise UnknownType(
                    f"unrecognized file type: {name} (rootgrep knows {len(TYPES)} of rg's "
                    "types: see --type-list)"
                )
            names = sorted(TYPES) if name == ALL else [name]
            self._rules.append((how == "select", _matcher(names)))
        self._any_select = any(select for select, _ in self._rules)

    def verdict(self, name: str) -> bool | None:
        for select, match in reversed(self._rules):
            if match(name):
                return select
        return False if self._any_select else None
