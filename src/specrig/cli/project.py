"""``specrig project RUN...``: the full model on paper from a few of its layers measured
(:mod:`specrig.report.projection`), carried to the story's host."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "scale few-layer runs of a model to all its layers, and to the story's host"
DESCRIPTION = (
    "From bench runs of one architecture cut to different layer counts (baselines at two counts or more, "
    "EAGLE-3 at one, ideally --profile'd): the whole model's plain step, what a speculative step costs at "
    "k = 1..5 and the acceptance each k needs to break even, on one GPU and on the story's tensor-parallel "
    "host (its 82.5 tok/s and 51.5%% all-reduce share), beside what was measured there. Writes "
    "projection.json and projection.md."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", type=Path, help="results folders written by `specrig bench` (summary.json)")
    p.add_argument(
        "--to",
        help="scale to the model of this recipe (RECIPE or RECIPE:MODEL, a declared shape of the runs' "
        "architecture) instead of the story's Kimi-K2.5 (61 layers); needs that recipe here",
    )
    p.add_argument("--concurrency", type=int, default=1, help="the load point projected (default 1: the story's)")
    p.add_argument("--k", default="1,2,3,4,5", help="draft lengths to project (default 1,2,3,4,5)")
    p.add_argument("--no-host", action="store_true", help="one GPU only: leave the story's host out")
    p.add_argument("--out", type=Path, help="folder for projection.json and projection.md (default: a cache folder)")


def _layers(summary, run: Path) -> tuple[int, str]:
    from specrig.core.errors import ConfigError
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe(summary.recipe)
    for spec in [recipe.model, *recipe.models.values()]:
        if spec.served_name == summary.served_name and spec.shape is not None:
            return spec.shape.num_hidden_layers, spec.shape.architecture
    raise ConfigError(
        f"{run}: its model {summary.served_name!r} is no declared shape of recipe {summary.recipe}",
        hint="give runs of a [models.NAME.shape] model (their layer count comes from the recipe)",
    )


def _target(spec: str, architecture: str) -> int:
    from specrig.core.errors import ConfigError
    from specrig.recipe.schema import load_recipe

    name, _, model = spec.partition(":")
    recipe = load_recipe(name)
    models = [("model", recipe.model), *recipe.models.items()]
    for key, m in models:
        if m.shape is not None and (key == model if model else m.shape.architecture == architecture):
            return m.shape.num_hidden_layers
    raise ConfigError(
        f"recipe {name} has no {'model ' + model if model else architecture} with a declared shape",
        hint="--to RECIPE:MODEL naming a [models.MODEL.shape] (its num_hidden_layers is the target)",
    )


def run(args: argparse.Namespace) -> int:
    from specrig.core import atomic
    from specrig.core.errors import ConfigError
    from specrig.core.log import log
    from specrig.core.paths import subdir
    from specrig.lab.results import load_summary
    from specrig.report.projection import STORY, markdown, project

    try:
        ks = tuple(int(x) for x in args.k.split(",") if x.strip())
    except ValueError:
        ks = ()
    if not ks or min(ks) < 1:
        raise ConfigError(f"--k {args.k!r} is not a list of draft lengths", hint="e.g. --k 1,2,3,4,5")
    runs, archs = [], set()
    for run_dir in args.runs:
        s = load_summary(run_dir)
        layers, arch = _layers(s, run_dir)
        runs.append((layers, s))
        archs.add(arch)
    if len(archs) != 1:
        raise ConfigError(
            f"the runs are of different architectures ({', '.join(sorted(archs))})",
            hint="project one architecture at a time",
        )
    target = _target(args.to, archs.pop()) if args.to else STORY.layers
    proj = project(
        runs, target_layers=target, concurrency=args.concurrency, ks=ks, host=None if args.no_host else STORY
    )
    out = args.out or subdir("results") / f"projection-{target}l-c{args.concurrency}"
    fix = "name another folder: --out DIR"
    out = atomic.check_folder(out, what="the projection's folder", fix=fix, min_free=2**20)
    text = markdown(proj)
    atomic.write_json(out / "projection.json", proj.to_json())
    atomic.write_text(out / "projection.md", text)
    print(text)
    log.step(f"wrote {out / 'projection.md'} and projection.json")
    return 0
