"""``specrig drafter-check DRAFTER``: warn when an EAGLE-3 drafter's training
layer convention and the serving engine's differ, when its vocabulary map (d2t/t2d)
cannot be the one it was trained with, and when its offline evaluation was computed
for other bytes than the folder holds."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specrig.core.log import log
from specrig.model.drafters import OFFLINE_EVAL, vocab_map_problem
from specrig.model.offline import offline_eval_status
from specrig.specdec.layers import ENGINES, TRAINERS, check_drafter

HELP = "warn when an EAGLE-3 drafter's aux layers are off by one for the engine"
DESCRIPTION = (
    "Warn when an EAGLE-3 drafter's training layer convention and the serving engine's differ, and refuse a "
    "drafter made for another target (--target-config), and check its vocabulary map (d2t/t2d: one-to-one into "
    "the target's vocabulary, the map training exported) and whether its offline_eval.json was computed for the "
    "files it holds. Exit 0: consistent; 1: mismatch, wrong target, wrong vocabulary map or undecidable; 2: bad input."
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


def _target_vocab(target_config: Path | None) -> int | None:
    if target_config is None:
        return None
    path = target_config / "config.json" if target_config.is_dir() else target_config
    try:
        cfg = json.loads(path.read_text())
        return int((cfg.get("text_config") or cfg)["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _folder_checks(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(what is wrong with the vocabulary map, why offline_eval.json does not hold) for a drafter folder."""
    folder = args.drafter if args.drafter.is_dir() else args.drafter.parent
    if not args.drafter.is_dir() and args.drafter.name != "config.json":
        return None, None  # a lone config file: no weights beside it to check
    vocab = vocab_map_problem(folder, target_vocab=_target_vocab(args.target_config))
    stale = offline_eval_status(folder)[1] if (folder / OFFLINE_EVAL).is_file() else None
    return vocab, stale


def run(args: argparse.Namespace) -> int:
    """0: consistent; 1: mismatch, wrong vocabulary map or undecidable; 2: bad input."""
    r = check_drafter(
        args.drafter,
        engine=args.engine,
        trained_with=args.trained_with,
        num_layers=args.num_layers,
        target_config=args.target_config,
    )
    vocab, stale = _folder_checks(args)
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
                    "vocab_map": vocab,
                    "offline_eval_stale": stale,
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
        if vocab:
            log.warn(f"WRONG VOCABULARY MAP: {vocab}; the drafter is at fault (train or export it again)")
        if stale:
            log.warn(f"offline figures do not hold: {stale}; `specrig drafter-eval {args.drafter}` scores these bytes")
    decided = r.trained_positions is not None and r.served_positions is not None
    return 1 if (r.mismatch or r.target_mismatch or vocab or not decided) else 0
