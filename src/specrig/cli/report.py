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
    from ..log import log
    from ..paths import subdir
    from ..report import console, load_summary, markdown_table, plot_acceptance, plot_throughput, rich_table, table_rows

    summaries = [(run, load_summary(run)) for run in args.runs]
    out = args.out or subdir("results") / ("compare-" + "-vs-".join(r.name[:24] for r in args.runs))[:120]
    out.mkdir(parents=True, exist_ok=True)

    rows, series = [], []
    for run_dir, s in summaries:
        rows += table_rows(s, f"{run_dir.name} {s['engine']}: ")
        series += [(f"{run_dir.name[-20:]} {s['engine']}/{c['name']}", c) for c in s["configs"]]
    console().print(rich_table("specrig runs side by side", rows))
    tp = plot_throughput(series, out / "throughput.png", "decode tok/s per prompt")
    acc = plot_acceptance(series, out / "acceptance.png", "per-position acceptance")
    md = ["# specrig: runs side by side", "", markdown_table(rows), ""]
    for run_dir, s in summaries:
        w = s["workload"]
        md.append(
            f"- `{run_dir}`: {s['recipe']} / {s['engine']}, {w['max_tokens']} tokens, concurrency {w['concurrency']}"
        )
        md += [f"  - {c['name']}: {c['diagnosis']}" for c in s["configs"] if c.get("diagnosis")]
    md += ["", f"![throughput]({tp.name})"] + ([f"![acceptance]({acc.name})"] if acc else [])
    (out / "compare.md").write_text("\n".join(md) + "\n")
    log.step(f"wrote {out / 'compare.md'} and plots")
    return 0
