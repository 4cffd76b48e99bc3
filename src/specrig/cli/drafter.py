"""``specrig drafter`` (``nox -s drafter``): train a real EAGLE-3 drafter for
the recipe's target in miniature and register it as ``@eagle3-trained``."""

from __future__ import annotations

import argparse

from rich.table import Table

from ..log import log
from .common import add_recipe_option, resolve_recipe

HELP = "train an EAGLE-3 drafter for the recipe's target (ShareGPT, self-distilled, CPU)"
DESCRIPTION = (
    "Train a one-layer EAGLE-3 drafter for the recipe's target: ShareGPT prompts, the target's own answers "
    "through the real vLLM server, hidden states in vLLM's convention, specrig's trainer in the recipe's "
    "train environment, a checkpoint vLLM loads, offline acceptance on held-out prompts. Stages are cached "
    "by content hash: a rerun resumes where it stopped."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..drafter.settings import DEFAULT as D
    from ..drafter.settings import QUICK as Q

    add_recipe_option(p)
    p.add_argument(
        "--samples", type=int, help=f"training prompts answered by the target (default {D.samples}; quick {Q.samples})"
    )
    p.add_argument(
        "--heldout",
        type=int,
        help=f"held-out prompts for the offline acceptance (default {D.heldout}; quick {Q.heldout})",
    )
    p.add_argument(
        "--epochs", type=int, help=f"training epochs (default {D.epochs}, within --train-seconds; quick {Q.epochs})"
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        help=f"tokens the target generates per prompt (default {D.max_new_tokens}; quick {Q.max_new_tokens})",
    )
    p.add_argument(
        "--train-seconds",
        type=float,
        help=f"stop training after this long (default {D.train_seconds:.0f}; quick {Q.train_seconds:.0f}; 0: no limit)",
    )
    p.add_argument(
        "--generate-seconds",
        type=float,
        help=f"time for the target's answers (default {D.generate_seconds:.0f}; 0: no limit); unanswered training "
        "prompts then train on ShareGPT's own answer",
    )
    p.add_argument("--aux-layers", help="aux residual positions, e.g. 2,15,27 (default: vLLM's (2, N//2, N-3))")
    p.add_argument("--quick", action="store_true", help="a few-minute run for CI and plumbing (low acceptance)")


def run(args: argparse.Namespace) -> int:
    from ..drafter.pipeline import run_pipeline
    from ..drafter.settings import DEFAULT, QUICK

    recipe = resolve_recipe(args, purpose="serve")
    aux = tuple(int(x) for x in args.aux_layers.split(",")) if args.aux_layers else None
    s = (QUICK if args.quick else DEFAULT).with_overrides(
        samples=args.samples,
        heldout=args.heldout,
        epochs=args.epochs,
        max_new_tokens=args.max_new_tokens,
        train_seconds=args.train_seconds,
        generate_seconds=args.generate_seconds,
        aux_layers=aux,
    )
    r = run_pipeline(recipe, s)
    t = Table(title=f"drafter for {recipe.name} ({r.seconds / 60:.1f} min)")
    for col in ("stage", "seconds", "cached", "facts"):
        t.add_column(col)
    for st in r.stages:
        note = _stage_note(st.name, st.facts)
        t.add_row(st.name, f"{st.seconds:.0f}", "yes" if st.cached else "", note)
    log.console.print(t)
    o = r.offline
    per = ", ".join(f"{x:.2f}" for x in o.per_position)
    log.step(
        f"offline acceptance (held-out, k={o.k}): rate {o.acceptance_rate:.1%}, mean length "
        f"{o.mean_acceptance_length:.2f}, per position [{per}] over {o.held_out_tokens} tokens"
    )
    log.step(f"drafter: {r.drafter}")
    log.info("serve it: nox -s bench -- --spec eagle3   (shifted-layer twin: --spec eagle3-shifted)")
    return 0


def _stage_note(name: str, f: dict) -> str:
    if name == "prompts":
        return f"{f.get('train')} train / {f.get('heldout')} held-out prompts"
    if name == "generate":
        ref = f.get("reference_samples") or 0
        note = f"{f.get('output_tokens')} answer tokens ({f.get('tok_s') or 0:.0f} tok/s)"
        return note + (f"; {ref} prompts past the time budget train on ShareGPT's answer" if ref else "")
    if name == "hidden":
        tokens = sum(f.get("tokens", {}).values())
        return f"{tokens} tokens; HF agrees with the engine on {(f.get('label_agreement') or 0):.1%}"
    if name == "train":
        return (
            f"{f.get('steps')} steps; draft vocab {f.get('draft_vocab')} covers {f.get('draft_vocab_coverage', 0):.1%}"
        )
    return ""
