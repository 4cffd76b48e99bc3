"""``specrig drafter`` (``nox -s drafter``): train a real EAGLE-3 drafter for
the recipe's target in miniature and register it as ``@eagle3-trained``."""

from __future__ import annotations

import argparse
import typing
from typing import TYPE_CHECKING

from rich.table import Table

from specrig.cli.common import add_recipe_option, resolve_recipe
from specrig.core.log import log

if TYPE_CHECKING:
    from specrig.drafter.evaluate import OfflineEval

HELP = "train an EAGLE-3 drafter for the recipe's target (ShareGPT, self-distilled; CPU or GPU)"
DESCRIPTION = (
    "Train a one-layer EAGLE-3 drafter for the recipe's target: ShareGPT prompts, the target's own answers "
    "through the real vLLM server, hidden states in vLLM's convention, specrig's trainer in the recipe's "
    "train environment, a checkpoint vLLM loads, offline acceptance on held-out prompts. Stages are cached "
    "by content hash: a rerun resumes where it stopped. The recipe's [drafter] table sets this host's "
    "defaults (a GPU recipe: more data, features on the GPU); flags override them."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from specrig.drafter.settings import DEFAULT, QUICK, DrafterSettings

    add_recipe_option(p)
    for name in DrafterSettings.FLAGS:  # declared once, on the model: its type checks the value
        field = DrafterSettings.model_fields[name]
        what = " ".join(str(field.description).split()).split(";")[0].split(" (")[0]
        d, q = getattr(DEFAULT, name), getattr(QUICK, name)
        defaults = f" (default {d:g}; quick {q:g})" if isinstance(d, int | float) else ""
        choices = typing.get_args(field.annotation) if typing.get_origin(field.annotation) is typing.Literal else None
        if choices:
            defaults = f" (default {d}; quick {q})"
        flag, metavar = f"--{name.replace('_', '-')}", None if choices else "N" if defaults else "A,B,C"
        p.add_argument(flag, metavar=metavar, choices=choices, help=what + defaults)
    p.add_argument("--quick", action="store_true", help="a few-minute run for CI and plumbing (low acceptance)")
    p.add_argument(
        "--curve",
        metavar="N,N,...",
        help="also train drafters on the first N training samples of the same data (the data-size curve), "
        "each scored offline; bench them with --spec eagle3 --drafter @curve",
    )
    p.add_argument(
        "--reference",
        choices=("speculators", "specforge"),
        help="also train a field's trainer on the same samples, with specrig's vocabulary, and score it the "
        "same way: speculators 0.9.0 (the recipe's [env.speculators]; needs a CUDA GPU) or SpecForge 0.2.0 "
        "(its [env.specforge], offline from specrig's features; on a CPU with its loss kernel stood in)",
    )
    p.add_argument(
        "--reference-steps",
        default="auto",
        metavar="N|auto",
        help="the reference's optimiser steps (speculators: 8192 tokens each; SpecForge: one sample each); auto "
        "(default): a 100-step run times a step, then the steps that fill specrig's training time on the same "
        "samples; 0 (speculators only): its --dry-run, an untrained checkpoint (checks the path and vLLM's load "
        "without a GPU)",
    )
    p.add_argument(
        "--reference-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="SpecForge only: one of its own run-file settings, dotted as its CLI takes them, over specrig's "
        "(e.g. training.attention_backend=sdpa, training.learning_rate=2e-4); repeatable",
    )
    p.add_argument(
        "--reference-samples",
        type=int,
        default=0,
        metavar="N",
        help="train both on the first N training samples (default: all)",
    )


def run(args: argparse.Namespace) -> int:
    from specrig.drafter.curve import run_curve
    from specrig.drafter.flags import run_flags
    from specrig.drafter.pipeline import run_pipeline
    from specrig.drafter.settings import DrafterSettings, for_recipe

    recipe = resolve_recipe(args, purpose="serve")
    sizes, ref_steps, ref_settings = run_flags(  # bad input stops here, before any stage runs
        args.curve, args.reference, args.reference_steps, args.reference_set
    )
    s = for_recipe(recipe, quick=args.quick, **{name: getattr(args, name) for name in DrafterSettings.FLAGS})
    r = run_pipeline(recipe, s)
    t = Table(title=f"drafter for {recipe.name} ({r.seconds / 60:.1f} min)")
    for col in ("stage", "seconds", "cached", "facts"):
        t.add_column(col)
    for st in r.stages:
        note = st.facts.note()
        t.add_row(st.name, f"{st.seconds:.0f}", "yes" if st.cached else "", note)
    log.console.print(t)
    log.console.print(offline_table([("trained", r.offline), ("shifted ids", r.offline_shifted)]))
    log.step(f"drafter: {r.drafter}")
    if sizes:
        from specrig.report.plots import draw_curve

        points, curve = run_curve(recipe, s, sizes, full=r)
        log.console.print(offline_table([(f"{p.samples} samples", p.offline) for p in points]))
        drawn = draw_curve(curve, f"{recipe.name}: acceptance against training data")
        log.info(f"the curve: {curve}" + (f", drawn in {drawn}" if drawn else ""))
        log.info("serve them: nox -s bench -- --spec eagle3 --drafter @curve")
    if args.reference:
        from specrig.drafter.reference import run_reference
        from specrig.drafter.reference_specforge import run_specforge

        limit = args.reference_samples or None
        if args.reference == "specforge":
            ref = run_specforge(recipe, s, steps=ref_steps, limit=limit, settings=ref_settings)
        else:
            ref = run_reference(recipe, s, steps=ref_steps, limit=limit)
        mine = ref.specrig_offline or r.offline
        n = ref.specrig["samples"]
        rows = [(f"specrig, {n} samples", mine), (f"{args.reference}, {n} samples", ref.offline)]
        log.console.print(offline_table(rows))
        log.info(
            f"serve both: nox -s bench -- --spec eagle3 --drafter {ref.specrig_drafter or '@eagle3-trained'},{ref.drafter}"
        )
    log.info("serve it: nox -s bench -- --spec eagle3   (shifted-layer twin: --spec eagle3-shifted)")
    return 0


def offline_table(evals: list[tuple[str, OfflineEval]]) -> Table:
    """Offline acceptance per drafter and workload: held-out ShareGPT, and the bench's prompts."""
    t = Table(title="offline acceptance (teacher-forced, greedy)")
    for col in ("drafter", "served aux ids", "prompts", "k", "rate", "mean length", "per position", "tokens"):
        t.add_column(col)
    for name, o in evals:
        rows = [("held-out ShareGPT", o.as_dict())]
        if o.bench_prompts:
            b = o.bench_prompts
            rows.append((f"bench: {b.get('dataset')} x {b.get('max_tokens')}", b))
        for label, d in rows:
            t.add_row(
                name,
                str(o.served_aux_positions or o.trained_aux_positions or ""),
                label,
                str(d["k"]),
                f"{d['acceptance_rate']:.1%}",
                f"{d['mean_acceptance_length']:.2f}",
                ", ".join(f"{x:.2f}" for x in d["per_position"]),
                str(d["held_out_tokens"]),
            )
    return t
