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
    from specrig.report.compare import compare_runs
    from specrig.report.render import console

    written = compare_runs(args.runs, args.out, console())
    log.step(f"wrote {written} and plots")
    return 0
