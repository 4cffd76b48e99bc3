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
    from specrig.core.errors import ConfigError
    from specrig.core.log import log
    from specrig.core.paths import subdir
    from specrig.lab.folder import incomplete
    from specrig.lab.results import load_summary
    from specrig.report.compare import write_comparison
    from specrig.report.render import console

    summaries, unfinished = [], {}
    for run_dir in args.runs:
        why = incomplete(run_dir)
        if why is not None:
            unfinished[run_dir] = why
            if not (run_dir / "summary.json").is_file():
                log.warn(f"skipped {run_dir}: a run that did not finish ({why}), no summary.json")
                continue
            log.warn(f"{run_dir} is marked INCOMPLETE ({why}): its summary is shown as it is")
        summaries.append((run_dir, load_summary(run_dir)))
    if not summaries:
        raise ConfigError(
            "none of the runs given finished: nothing to put side by side",
            hint="give results folders of finished runs (a folder holding INCOMPLETE did not finish)",
        )
    fix = "name another folder: --out DIR"
    if args.out:
        out = args.out
    else:
        try:
            out = subdir("results") / ("compare-" + "-vs-".join(r.name[:24] for r in args.runs))[:120]
        except OSError as exc:
            raise atomic.os_error(exc, None, "the comparison's folder", fix) or ConfigError(
                str(exc), hint=fix
            ) from None
    out = atomic.check_folder(out, what="the comparison's folder", fix=fix, min_free=2**20)
    try:
        written = write_comparison(summaries, out, console(), unfinished)
    except OSError as exc:
        raise atomic.os_error(exc, out, "writing the comparison", fix) or ConfigError(
            f"writing the comparison in {out} failed: {exc}", hint=fix
        ) from None
    log.step(f"wrote {written} and plots")
    return 0
