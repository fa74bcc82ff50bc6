"""Print the benchmark results as Markdown: rootgrep against its peers, group by group.

Usage: ``python benchmarks/report.py .benchmarks/latest.json`` (a file written by pytest's
``--benchmark-json``). Each group (one corpus, one operation, one pattern) becomes a row with
the median time of every tool and the ratios rootgrep/peer (above 1: rootgrep is slower).
Benchmarks are paired by their ``extra_info`` (op, corpus, tool), not by their names.

The third table is the MCP server: one call over stdio against the library (op ``rtt``: the
ratio is the protocol's overhead) and rootgrep's ``find_files`` against the reference
filesystem server's ``search_files`` (op ``find``). Its counts are each tool's own.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

CORPUS_ORDER = {"S": 0, "F": 1}


@dataclass(frozen=True)
class Table:
    op: str  # one op, or several joined by "+" (their groups share the table)
    title: str
    tools: tuple[tuple[str, str], ...]  # (tool key in extra_info, column heading)
    ratios: tuple[tuple[str, str, str], ...]  # (numerator tool, denominator tool, heading)

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(self.op.split("+"))


TABLES = (
    Table(
        "grep",
        "Grep (median wall time)",
        (
            ("rootgrep", "rootgrep live"),
            ("rootgrep-indexed", "rootgrep indexed"),
            ("rootgrep-cli", "rootgrep CLI"),
            ("rg", "rg"),
        ),
        (
            ("rootgrep", "rg", "live / rg"),
            ("rootgrep-indexed", "rg", "indexed / rg"),
            ("rootgrep-cli", "rg", "CLI / rg"),
        ),
    ),
    Table(
        "resync",
        "Index re-sync of an unchanged tree (median wall time)",
        (("rootgrep", "re-sync"), ("rg --files", "rg --files")),
        (("rootgrep", "rg --files", "re-sync / rg --files"),),
    ),
    Table(
        "walk",
        "Walk (median wall time)",
        (("rootgrep", "walker"), ("os.walk", "os.walk"), ("rg --files", "rg --files")),
        (
            ("rootgrep", "os.walk", "walker / os.walk"),
            ("rootgrep", "rg --files", "walker / rg --files"),
        ),
    ),
    Table(
        "rtt+find",
        "MCP server (median wall time per call)",
        (
            ("rootgrep-stdio", "rootgrep stdio"),
            ("rootgrep-lib", "rootgrep library"),
            ("reference-fs", "reference server"),
        ),
        (
            ("rootgrep-stdio", "rootgrep-lib", "stdio / library"),
            ("rootgrep-stdio", "reference-fs", "rootgrep / reference"),
        ),
    ),
    Table(
        "mcp",
        "MCP call latency (corpus F, index ready, median per call)",
        (("rootgrep-mcp", "rootgrep grep over stdio"), ("csearch", "csearch (process)")),
        (("rootgrep-mcp", "csearch", "rootgrep / csearch"),),
    ),
)


@dataclass
class Group:
    name: str
    op: str
    corpus: str
    pattern: str | None
    median: dict[str, float] = field(default_factory=dict)
    count: dict[str, int] = field(default_factory=dict)
    rg_count: int | None = None
    query: str | None = None  # server benchmarks: what was asked, as Markdown
    truncated: dict[str, bool] = field(default_factory=dict)


def load_groups(data: dict[str, Any]) -> list[Group]:
    groups: dict[str, Group] = {}
    for b in data.get("benchmarks", []):
        info = b.get("extra_info", {})
        if "tool" not in info or "op" not in info:
            continue  # not one of ours
        name = b.get("group") or f"{info['op']}-{info.get('corpus', '?')}"
        g = groups.setdefault(
            name, Group(name, info["op"], str(info.get("corpus", "?")), info.get("pattern"))
        )
        g.median[info["tool"]] = float(b["stats"]["median"])
        if "count" in info:
            g.count[info["tool"]] = int(info["count"])
        if "rg_count" in info:
            g.rg_count = int(info["rg_count"])
        if "query" in info:
            g.query = str(info["query"])
        if "truncated" in info:
            g.truncated[info["tool"]] = bool(info["truncated"])
    return sorted(groups.values(), key=lambda g: (CORPUS_ORDER.get(g.corpus, 9), g.name))


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


def fmt_ratio(num: float | None, den: float | None) -> str:
    if num is None or not den:
        return "—"
    return f"{num / den:.2f}×"


def fmt_counts(g: Group, table: Table) -> str:
    """The count every tool reported; a tool that disagrees with rg is shown apart."""
    ref = g.rg_count
    shown = [str(ref)] if ref is not None else []
    for tool, heading in table.tools:
        n = g.count.get(tool)
        if n is not None and n != ref and tool != "os.walk":
            shown.append(f"**{heading} {n}**")
    return " ".join(shown) or "—"


def fmt_own_counts(g: Group, table: Table) -> str:
    """Every tool's own count (no reference tool): one figure when they all agree."""
    counts = [(h, g.count[t], g.truncated.get(t, False)) for t, h in table.tools if t in g.count]
    if not counts:
        return "—"
    if len({n for _, n, _ in counts}) == 1 and not any(tr for _, _, tr in counts):
        return str(counts[0][1])
    return " · ".join(f"{h} {n}{' (truncated)' if tr else ''}" for h, n, tr in counts)


def render(table: Table, groups: Sequence[Group]) -> list[str]:
    rows = [g for g in groups if g.op in table.ops]
    if not rows:
        return []
    grep = table.op == "grep"
    server = "rtt" in table.ops or "mcp" in table.ops
    head = ["group", "pattern"] if grep else ["group", "query"] if server else ["group"]
    n_text = len(head)  # left-aligned text columns; the rest are figures
    head += [h for _, h in table.tools]
    head += [h for _, _, h in table.ratios]
    head.append("lines" if grep else "count" if server else "files")
    align = ["---"] * n_text + ["---:"] * (len(head) - n_text)
    out = [f"### {table.title}", "", "| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for g in rows:
        cells = [g.name]
        if grep:
            cells.append(f"`{g.pattern}`" if g.pattern else "—")
        elif server:
            cells.append(g.query or "—")
        cells += [fmt_time(g.median.get(t)) for t, _ in table.tools]
        cells += [fmt_ratio(g.median.get(a), g.median.get(b)) for a, b, _ in table.ratios]
        cells.append(fmt_own_counts(g, table) if server else fmt_counts(g, table))
        out.append("| " + " | ".join(cells) + " |")
    return [*out, ""]


def render_index(data: dict[str, Any]) -> list[str]:
    """Index builds (speed, size) and the growth of build and query time with file count."""
    builds, scales = [], []
    rss = ""
    for b in data.get("benchmarks", []):
        info = b.get("extra_info", {})
        if info.get("op") == "build":
            builds.append((info, float(b["stats"]["median"])))
        elif info.get("op") == "scale":
            scales.append((info, float(b["stats"]["median"])))
        elif info.get("op") == "rss":
            rss = f"Peak RSS of `rootgrep index` over {info['corpus']}: {info['peak_mib']} MiB."
    out: list[str] = []
    if builds:
        out += ["### Index build", "",
                "| corpus | files | text | build | MB/s | index size | index / text |",
                "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for info, t in sorted(builds, key=lambda x: CORPUS_ORDER.get(x[0].get("corpus"), 9)):
            out.append(
                f"| {info['corpus']} | {info['files']} | {info['text_bytes'] / 1e6:.0f} MB | "
                f"{fmt_time(t)} | {info['text_bytes'] / t / 1e6:.1f} | "
                f"{info['index_bytes'] / 1e6:.0f} MB | {info['size_ratio']:.2f} |"
            )
        out.append("")
    if scales:
        out += ["### Growth with file count (synthetic corpus)", "",
                "| files | build | selective grep (indexed, median) |",
                "|---:|---:|---:|"]  # fmt: skip
        for info, t in sorted(scales, key=lambda x: x[0]["files"]):
            out.append(f"| {info['files']} | {info['build_seconds']:.2f} s | {fmt_time(t)} |")
        out.append("")
    if rss:
        out += [rss, ""]
    return out


def machine_line(data: dict[str, Any]) -> str:
    m = data.get("machine_info", {})
    c = data.get("commit_info", {})
    cpu = m.get("cpu", {}).get("brand_raw") or m.get("processor") or "?"
    commit = (c.get("id") or "?")[:10] + (" (dirty)" if c.get("dirty") else "")
    py = m.get("python_version", "?")
    return f"_{data.get('datetime', '?')} · Python {py} · {cpu} · commit {commit}_"


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0] if argv else 'report.py'} BENCHMARK_JSON", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        data = json.load(f)
    groups = load_groups(data)
    if not groups:
        print(f"no rootgrep benchmarks in {argv[1]}", file=sys.stderr)
        return 1
    lines = [machine_line(data), ""]
    for table in TABLES:
        lines += render(table, groups)
    lines += render_index(data)
    lines.append(
        "Ratios above 1 mean rootgrep is slower. rootgrep in process runs one thread; the "
        "rootgrep CLI and rg use their default threads. The counts are rg's; a tool that "
        "disagrees is shown in bold."
    )
    if any(g.op == "mcp" for g in groups):
        lines.append(
            "\nMCP call latency: one `grep` call through a long-lived stdio session on F with "
            "its index ready, against `csearch -n` as a whole process over its own `cindex` of "
            "F (csearch prints every matching line: it has no limit); the count column gives "
            "each tool's own count."
        )
    if any(g.op in ("rtt", "find") for g in groups):
        lines.append(
            "\nMCP server: one call through a long-lived stdio session (handshake era) against "
            "the same call on the library in process; stdio / library is the protocol's "
            "overhead. find compares rootgrep's find_files (hidden and ignored files skipped, "
            "files only, at most max_results=1000) with the reference server's search_files "
            "(everything walked, directories included, every match returned); the count "
            "column gives each tool's own count."
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
