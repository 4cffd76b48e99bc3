"""``specrig results`` (``nox -s results``): the results page, docs/results.md, made from the
studies' captures (:mod:`specrig.report.results_page`); ``--check`` says whether it is current."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "make the results page (docs/results.md) from the studies' captures"
DESCRIPTION = (
    "Read every studies/NAME/results.toml in name order and write one markdown page of the studies' "
    "headline tables, each made from the capture files it names (bench summaries, drafter evaluations, "
    "projections, build manifests). The page is the same bytes for the same files; --check writes "
    "nothing and exits 1 naming the first line where the page differs."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--studies", type=Path, help="the folder of study folders (default: the checkout's studies/)")
    p.add_argument("--out", type=Path, help="the page to write (default: the checkout's docs/results.md)")
    p.add_argument(
        "--check", action="store_true", help="write nothing: exit 1 if the page differs from what it would write"
    )


def run(args: argparse.Namespace) -> int:
    from specrig.core.log import log
    from specrig.core.paths import repo_root
    from specrig.report.results_page import check_page, write_page

    studies = args.studies or repo_root() / "studies"
    out = args.out or repo_root() / "docs" / "results.md"
    if args.check:
        problem = check_page(studies, out)
        if problem is not None:
            log.error(problem)
            return 1
        log.step(f"{out} is what the captures give")
        return 0
    log.step(f"wrote {write_page(studies, out)}")
    return 0
