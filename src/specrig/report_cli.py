"""``specrig report`` (``nox -s report -- RUN_DIR...``): several bench runs side
by side (baseline vs EAGLE-3, vLLM vs SGLang, before vs after a patch)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .log import log
from .paths import subdir
from .report import console, load_summary, markdown_table, plot_acceptance, plot_throughput, rich_table, table_rows

__all__ = ["main"]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="nox -s report --", description="Put several bench runs side by side.")
    p.add_argument("runs", nargs="+", type=Path, help="results folders written by `nox -s bench`")
    p.add_argument("--out", type=Path, help="where to write compare.md and PNGs (default: a new cache folder)")
    args = p.parse_args(argv)
    summaries = [(run, load_summary(run)) for run in args.runs]
    out = args.out or subdir("results") / ("compare-" + "-vs-".join(r.name[:24] for r in args.runs))[:120]
    out.mkdir(parents=True, exist_ok=True)

    rows, series = [], []
    for run, s in summaries:
        label = f"{run.name} {s['engine']}: "
        rows += table_rows(s, label)
        series += [(f"{run.name[-20:]} {s['engine']}/{c['name']}", c) for c in s["configs"]]
    console().print(rich_table("specrig runs side by side", rows))
    tp = plot_throughput(series, out / "throughput.png", "decode tok/s per prompt")
    acc = plot_acceptance(series, out / "acceptance.png", "per-position acceptance")
    md = ["# specrig: runs side by side", "", markdown_table(rows), ""]
    for (run, s) in summaries:
        w = s["workload"]
        md.append(f"- `{run}`: {s['recipe']} / {s['engine']}, {w['max_tokens']} tokens, concurrency {w['concurrency']}")
        md += [f"  - {c['name']}: {c['diagnosis']}" for c in s["configs"] if c.get("diagnosis")]
    md += ["", f"![throughput]({tp.name})"] + ([f"![acceptance]({acc.name})"] if acc else [])
    (out / "compare.md").write_text("\n".join(md) + "\n")
    log.step(f"wrote {out / 'compare.md'} and plots")
    return 0
