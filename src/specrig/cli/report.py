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
    from specrig.core.log import log
    from specrig.core.paths import subdir
    from specrig.lab.results import load_summary
    from specrig.report.compare import write_comparison
    from specrig.report.render import console

    summaries = [(run_dir, load_summary(run_dir)) for run_dir in args.runs]
    out = args.out or subdir("results") / ("compare-" + "-vs-".join(r.name[:24] for r in args.runs))[:120]
    written = write_comparison(summaries, out, console())
    log.step(f"wrote {written} and plots")
    return 0
