"""``specrig drafter-eval DRAFTER``: offline teacher-forced acceptance of an
EAGLE-3 drafter on held-out hidden states (no server)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..log import log
from .common import add_recipe_option, resolve_recipe

HELP = "offline (teacher-forced) acceptance of an EAGLE-3 drafter on held-out hidden states"
DESCRIPTION = (
    "Measure a drafter's teacher-forced greedy acceptance per draft position on held-out hidden states, "
    "without a server; writes offline_eval.json into the drafter's folder. DRAFTER is a folder or "
    "@eagle3-trained / @eagle3-trained-shifted."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("drafter", help="drafter folder, or @eagle3-trained")
    add_recipe_option(p)
    p.add_argument("--k", type=int, help="draft length (default: the k it was trained for)")
    p.add_argument("--heldout", type=Path, help="held-out hidden-state folder (default: the one recorded at training)")
    p.add_argument("--target", type=Path, help="target model folder (default: the one recorded at training)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    from ..drafter.evaluate import OFFLINE_EVAL, evaluate_drafter
    from ..drafter.export import trained_drafter
    from ..drafter.pipeline import TRAIN_ENV
    from ..env import make_env

    recipe = resolve_recipe(args, purpose="serve")
    if args.drafter.startswith("@eagle3-trained"):
        path = trained_drafter(recipe.name, shifted=args.drafter.endswith("-shifted"))
    else:
        path = Path(args.drafter)
    env = make_env(recipe, TRAIN_ENV)
    r = evaluate_drafter(env, path, target=args.target, heldout=args.heldout, k=args.k)
    if args.json:
        print(json.dumps(r.as_dict(), indent=2))
    else:
        per = ", ".join(f"{x:.3f}" for x in r.per_position)
        log.step(
            f"{path.name}: offline acceptance rate {r.acceptance_rate:.1%}, mean acceptance length "
            f"{r.mean_acceptance_length:.2f} (k={r.k}), per position [{per}], "
            f"{r.held_out_tokens} held-out tokens"
        )
        log.info(f"written: {path / OFFLINE_EVAL}")
    return 0
