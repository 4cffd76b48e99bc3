"""Several bench runs side by side (``specrig report RUN_DIR...``): one
throughput table over every run, the throughput and acceptance plots, and each
run's notes, as compare.md with its PNGs.

What is given may be a whole results folder's listing (``specrig report results/*``): a folder
that is no run (a comparison this command wrote there, a projection, anything without a
summary.json or an INCOMPLETE marker) and a file are skipped, named; a run that did not finish is
skipped when it has no summary. The comparison's default folder is named after the runs it shows."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from specrig.core import atomic
from specrig.core.errors import ConfigError
from specrig.core.log import log
from specrig.core.paths import subdir
from specrig.lab.folder import INCOMPLETE, incomplete
from specrig.lab.results import RunSummary, load_summary
from specrig.report.plots import plot_acceptance, plot_throughput
from specrig.report.render import THROUGHPUT_COLUMNS, markdown_table, notes, rich_table, throughput_rows

__all__ = ["legend_names", "not_a_run", "compare_runs", "write_comparison"]


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


def not_a_run(path: Path) -> str | None:
    """Why ``path`` is no run's results folder (None: it is one, finished or not): a file, a
    comparison ``specrig report`` wrote, a projection ``specrig project`` wrote, or another folder.
    A path that does not exist is a run given wrongly, not skipped (:func:`load_summary` names it)."""
    if not path.exists() or (path / "summary.json").is_file() or (path / INCOMPLETE).exists():
        return None
    if not path.is_dir():
        return "a file, not a run's results folder"
    if (path / "compare.md").is_file():
        return "a comparison `specrig report` wrote, not a run"
    if (path / "projection.md").is_file():
        return "a projection `specrig project` wrote, not a run"
    return "not a run's results folder (no summary.json, no INCOMPLETE marker)"


def _gather(runs: list[Path]) -> tuple[list[tuple[Path, RunSummary]], dict[Path, str], dict[Path, str]]:
    """The runs to show with their summaries, the runs still marked INCOMPLETE (why), and what is
    skipped (why), each skip named as it is met."""
    summaries, unfinished, skipped = [], {}, {}
    for run_dir in runs:
        why = not_a_run(run_dir)
        if why is not None:
            skipped[run_dir] = why
            log.warn(f"skipped {run_dir}: {why}")
            continue
        why = incomplete(run_dir)
        if why is not None:
            unfinished[run_dir] = why
            if not (run_dir / "summary.json").is_file():
                skipped[run_dir] = f"a run that did not finish ({why})"
                log.warn(f"skipped {run_dir}: a run that did not finish ({why}), no summary.json")
                continue
            log.warn(f"{run_dir} is marked INCOMPLETE ({why}): its summary is shown as it is")
        summaries.append((run_dir, load_summary(run_dir)))
    return summaries, unfinished, skipped


def compare_runs(runs: list[Path], out: Path | None, console: Console) -> Path:
    """compare.md and its PNGs for the runs among ``runs`` (skipping what is no run, named), in
    ``out`` or, by default, a folder in the cache's results folder named after the runs shown
    (and only those). Returns compare.md."""
    summaries, unfinished, skipped = _gather([Path(r) for r in runs])
    if not summaries:
        raise ConfigError(
            "none of the runs given finished: nothing to put side by side"
            if all(d in unfinished for d in skipped)
            else f"no run among the {len(runs)} paths given: nothing to put side by side",
            hint="give results folders of finished runs (a folder holding INCOMPLETE did not finish)",
        )
    fix = "name another folder: --out DIR"
    if out is None:
        try:
            results = subdir("results")
        except OSError as exc:
            raise atomic.os_error(exc, None, "the comparison's folder", fix) or ConfigError(
                str(exc), hint=fix
            ) from None
        out = results / ("compare-" + "-vs-".join(d.name[:24] for d, _ in summaries))[:120]
    out = atomic.check_folder(out, what="the comparison's folder", fix=fix, min_free=2**20)
    try:
        return write_comparison(summaries, out, console, unfinished, skipped)
    except OSError as exc:
        raise atomic.os_error(exc, out, "writing the comparison", fix) or ConfigError(
            f"writing the comparison in {out} failed: {exc}", hint=fix
        ) from None


def write_comparison(
    summaries: list[tuple[Path, RunSummary]],
    out: Path,
    console: Console,
    unfinished: dict[Path, str] | None = None,
    skipped: dict[Path, str] | None = None,
) -> Path:
    """compare.md and PNGs for ``summaries`` in ``out``; the table is printed on ``console``.
    ``unfinished``: run folders still marked INCOMPLETE, and why; ``skipped``: what was given and
    not shown (no run, or a run with no summary), and why."""
    unfinished, skipped = unfinished or {}, skipped or {}
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
        mark = f" (INCOMPLETE: {unfinished[run_dir]})" if run_dir in unfinished else ""
        built = f"; built wheels: {', '.join(s.built)}" if s.built else ""
        md.append(f"- `{run_dir}`: {s.recipe} / {s.engine}{built}{mark}")
        md += [f"  - {line}" for line in notes(s)]
    md += [f"- `{d}`: skipped, {why}" for d, why in skipped.items()]
    md += [""] + [f"![{p.stem}]({p.name})" for p in (tp, acc) if p is not None]
    return atomic.write_text(out / "compare.md", "\n".join(md) + "\n")
