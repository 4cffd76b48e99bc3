"""The study files in studies/ and the pages that link them: every ``studies/*/study.toml`` passes
``specrig study check`` (each step checked by its command's own parser and models, nothing run), a
study's name is its folder's slug, and every relative link of the studies' pages and of docs/ points
at a file that is there (the pictures, reports and logs live beside the study that made them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specrig.cli import main as specrig_main
from specrig.cli.study_argv import StudyCommandLine
from specrig.study.plan import make_plan

ROOT = Path(__file__).resolve().parents[1]
STUDY_FILES = sorted((ROOT / "studies").glob("*/study.toml"))
PAGES = sorted([*(ROOT / "studies").glob("**/README.md"), *(ROOT / "docs").glob("*.md"), ROOT / "README.md"])
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def test_the_gpu_jobs_are_study_files() -> None:
    """Each GPU job is its study's study file; no shell script of a job is left in docs/."""
    names = {p.parent.name for p in STUDY_FILES}
    assert names >= {
        "2026-12-02-one-drafter-two-engines",
        "2026-12-03-flash-attn-h200",
        "2026-12-03-kimi-layers",
        "2026-12-03-sglang-kernel-build",
        "2026-12-04-sglang-kernel-ops",
        "2026-12-04-sm120-cross-builds",
        "2026-12-06-training-budget",
        "2026-12-07-compile-modes",
    }
    assert not (ROOT / "docs" / "gpu").exists()
    assert not list((ROOT / "docs").rglob("*.sh"))


@pytest.mark.parametrize("path", STUDY_FILES, ids=lambda p: p.parent.name)
def test_every_study_file_checks(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert specrig_main(["study", "check", str(path), "--out", str(out)]) == 0
    assert not out.exists()  # checked, nothing made
    plan = make_plan(path, StudyCommandLine(), out)
    assert plan.meta.name == path.parent.name.split("-", 3)[3]  # YYYY-MM-DD-NAME
    assert plan.steps and plan.meta.description


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file(page: Path) -> None:
    missing = []
    for target in LINK.findall(page.read_text()):
        path = target.split("#")[0]
        if not path or re.match(r"[a-z]+:", path):
            continue  # an anchor on the page, a URL
        if not (page.parent / path).exists():
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)} links to what is not there: {missing}"
