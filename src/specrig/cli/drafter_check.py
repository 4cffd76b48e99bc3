"""``specrig drafter-check DRAFTER``: warn when an EAGLE-3 drafter's training
layer convention and the serving engine's differ."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specrig.core.log import log
from specrig.specdec.layers import ENGINES, TRAINERS, check_drafter

HELP = "warn when an EAGLE-3 drafter's aux layers are off by one for the engine"
DESCRIPTION = (
    "Warn when an EAGLE-3 drafter's training layer convention and the serving engine's differ, and refuse a "
    "drafter made for another target (--target-config). Exit 0: consistent; 1: mismatch, wrong target or "
    "undecidable; 2: bad input."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("drafter", type=Path, help="the drafter's folder or its config.json")
    p.add_argument("--engine", choices=ENGINES, default="vllm", help="serving engine (default: vllm)")
    p.add_argument("--trained-with", choices=TRAINERS, help="override what trained the drafter / made its data")
    p.add_argument("--num-layers", type=int, help="the target's num_hidden_layers (Kimi-K2.5: 61)")
    p.add_argument(
        "--target-config",
        type=Path,
        help="the target's folder or config.json: its layer count, and a check that the drafter was made for it",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """0: consistent; 1: mismatch or undecidable; 2: bad input."""
    r = check_drafter(
        args.drafter,
        engine=args.engine,
        trained_with=args.trained_with,
        num_layers=args.num_layers,
        target_config=args.target_config,
    )
    if args.json:
        print(
            json.dumps(
                {
                    "producer": r.producer.name,
                    "evidence": r.producer.evidence,
                    "engine": r.engine,
                    "num_layers": r.num_layers,
                    "config_ids": r.config_ids,
                    "trained_positions": r.trained_positions,
                    "served_positions": r.served_positions,
                    "mismatch": r.mismatch,
                    "offset": r.offset,
                    "fix": r.fix,
                    "target_mismatch": r.target_mismatch,
                },
                indent=2,
            )
        )
    else:
        for line in r.findings:
            (log.warn if line.startswith(("MISMATCH", "WRONG TARGET", "cannot", "the config names")) else log.info)(
                line
            )
        if r.fix:
            log.info(f"fix: {r.fix}")
    decided = r.trained_positions is not None and r.served_positions is not None
    return 1 if (r.mismatch or r.target_mismatch or not decided) else 0
