"""Several bench runs side by side (``specrig report RUN_DIR...``): one
throughput table over every run, the throughput and acceptance plots, and each
run's notes, as compare.md with its PNGs."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from specrig.core import atomic
from specrig.lab.results import RunSummary
from specrig.report.plots import plot_acceptance, plot_throughput
from specrig.report.render import THROUGHPUT_COLUMNS, markdown_table, notes, rich_table, throughput_rows

__all__ = ["legend_names", "write_comparison"]


def legend_names(names: list[str], width: int = 24) -> list[str]:
    """Run names short enough for a plot's legend: the words every name starts with are
    dropped (``pair-sglang-x``, ``pair-vllm-x`` -> ``sglang-x``, ``vllm-x``), and a name
    still longer than ``width`` keeps its start, whole words, and ends in an ellipsis."""
    words = [n.replace("_", "-").split("-") for n in names]
    common = 0
    while len(names) > 1 and all(len(w) > common + 1 and w[common] == words[0][common] for w in words):
        common += 1
    out = []
    for n, w in zip(names, words, strict=True):
        short = n[sum(len(x) + 1 for x in w[:common]) :]
        out.append(short if len(short) <= width else short[: width - 1].rsplit("-", 1)[0] + "…")
    return out


def write_comparison(
    summaries: list[tuple[Path, RunSummary]],
    out: Path,
    console: Console,
    incomplete: dict[Path, str] | None = None,
) -> Path:
    """compare.md and PNGs for ``summaries`` in ``out``; the table is printed on ``console``.
    ``incomplete``: run folders still marked INCOMPLETE, and why (skipped ones have no summary)."""
    incomplete = incomplete or {}
    out.mkdir(parents=True, exist_ok=True)
    rows, series, pairings = [], [], []
    for (run_dir, s), short in zip(summaries, legend_names([d.name for d, _ in summaries]), strict=True):
        rows += throughput_rows(s, f"{run_dir.name} {s.engine}: ")
        series += [(f"{short} {s.engine}/{m.config} {m.point.label}", m) for m in s.measurements if m.repeat == 0]
        pairings += [(f"{short} {p.config} {p.point.label}", p) for p in s.pairings]
    console.print(rich_table("specrig runs side by side", THROUGHPUT_COLUMNS, rows))
    tp = plot_throughput(series[:8], out / "throughput.png", "decode tok/s per prompt")
    acc = plot_acceptance(pairings, out / "acceptance.png", "acceptance per draft position")
    md = ["# specrig: runs side by side", "", markdown_table(THROUGHPUT_COLUMNS, rows), ""]
    for run_dir, s in summaries:
        mark = f" (INCOMPLETE: {incomplete[run_dir]})" if run_dir in incomplete else ""
        built = f"; built wheels: {', '.join(s.built)}" if s.built else ""
        md.append(f"- `{run_dir}`: {s.recipe} / {s.engine}{built}{mark}")
        md += [f"  - {line}" for line in notes(s)]
    shown = {d for d, _ in summaries}
    md += [f"- `{d}`: skipped, a run that did not finish ({why})" for d, why in incomplete.items() if d not in shown]
    md += [""] + [f"![{p.stem}]({p.name})" for p in (tp, acc) if p is not None]
    return atomic.write_text(out / "compare.md", "\n".join(md) + "\n")
