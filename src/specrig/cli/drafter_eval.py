"""``specrig drafter-eval DRAFTER``: offline teacher-forced acceptance of an
EAGLE-3 drafter on held-out hidden states (no server)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specrig.cli.common import add_recipe_option, resolve_recipe
from specrig.cli.drafter import offline_table
from specrig.core.log import log

HELP = "offline (teacher-forced) acceptance of an EAGLE-3 drafter: held-out ShareGPT and the bench's prompts"
DESCRIPTION = (
    "Measure a drafter's teacher-forced greedy acceptance per draft position without a server: on held-out "
    "ShareGPT hidden states and on the bench's own prompts (the target's greedy answers, through transformers), "
    "with features taken at the aux ids the folder's config serves; writes offline_eval.json into the drafter's "
    "folder. DRAFTER is a folder or "
    "@eagle3-trained / @eagle3-trained-shifted."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("drafter", help="drafter folder, or @eagle3-trained")
    add_recipe_option(p)
    p.add_argument("--k", type=int, help="draft length (default: the k it was trained for)")
    p.add_argument("--heldout", type=Path, help="held-out hidden-state folder (default: the one recorded at training)")
    p.add_argument("--target", type=Path, help="target model folder (default: the one recorded at training)")
    p.add_argument("--no-bench", action="store_true", help="skip the bench's prompts (held-out ShareGPT only)")
    p.add_argument(
        "--bench-max-tokens",
        type=int,
        help="answer length on the bench's prompts (default: the recipe's bench.max_tokens)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    from specrig.drafter.evaluate import OFFLINE_EVAL, evaluate_drafter
    from specrig.drafter.export import trained_drafter
    from specrig.drafter.pipeline import bench_workload, train_env_name
    from specrig.env.make import make_env

    recipe = resolve_recipe(args, purpose="serve")
    if args.drafter.startswith("@eagle3-trained"):
        path = trained_drafter(recipe.name, shifted=args.drafter.endswith("-shifted"))
    else:
        path = Path(args.drafter)
    env = make_env(recipe, recipe.env_named(train_env_name(recipe)))
    bench = None if args.no_bench else bench_workload(recipe, args.bench_max_tokens)
    r = evaluate_drafter(env, path, target=args.target, heldout=args.heldout, k=args.k, bench=bench)
    if args.json:
        print(json.dumps(r.as_dict(), indent=2))
    else:
        log.console.print(offline_table([(path.name, r)]))
        log.info(f"written: {path / OFFLINE_EVAL}")
    return 0
