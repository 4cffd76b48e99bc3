"""``specrig report`` (``nox -s report -- RUN_DIR...``): several bench runs side
by side (baseline vs EAGLE-3, vLLM vs SGLang, before vs after a patch)."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "put several bench runs side by side"
DESCRIPTION = "Put several bench runs side by side (markdown table and PNG plots)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", type=Path, help="results folders written by `nox -s bench`")
    p.add_argument("--out", type=Path, help="where to write compare.md and PNGs (default: a new cache folder)")


def run(args: argparse.Namespace) -> int:
    from specrig.core import atomic
    from specrig.core.log import log
    from specrig.core.paths import subdir
    from specrig.lab.results import load_summary
    from specrig.report.plots import plot_acceptance, plot_throughput
    from specrig.report.render import THROUGHPUT_COLUMNS, console, markdown_table, notes, rich_table, throughput_rows

    summaries = [(run_dir, load_summary(run_dir)) for run_dir in args.runs]
    out = args.out or subdir("results") / ("compare-" + "-vs-".join(r.name[:24] for r in args.runs))[:120]
    out.mkdir(parents=True, exist_ok=True)

    rows, series, pairings = [], [], []
    for run_dir, s in summaries:
        rows += throughput_rows(s, f"{run_dir.name} {s.engine}: ")
        series += [
            (f"{run_dir.name[-20:]} {s.engine}/{m.config} {m.point.label}", m) for m in s.measurements if m.repeat == 0
        ]
        pairings += [(f"{run_dir.name[-20:]} {p.config} {p.point.label}", p) for p in s.pairings]
    console().print(rich_table("specrig runs side by side", THROUGHPUT_COLUMNS, rows))
    tp = plot_throughput(series[:8], out / "throughput.png", "decode tok/s per prompt")
    acc = plot_acceptance(pairings, out / "acceptance.png", "acceptance per draft position")
    md = ["# specrig: runs side by side", "", markdown_table(THROUGHPUT_COLUMNS, rows), ""]
    for run_dir, s in summaries:
        md.append(f"- `{run_dir}`: {s.recipe} / {s.engine}")
        md += [f"  - {line}" for line in notes(s)]
    md += ["", f"![throughput]({tp.name})"] + ([f"![acceptance]({acc.name})"] if acc else [])
    atomic.write_text(out / "compare.md", "\n".join(md) + "\n")
    log.step(f"wrote {out / 'compare.md'} and plots")
    return 0
