"""speculators 0.9.0's own trainer (``python -m speculators.train``), run as its authors run it on
one GPU, timed, with what it saved listed afterwards.

usage: python train_speculators.py LOG_JSON -- SPECULATORS_TRAIN_ARGS...

The arguments after ``--`` go to speculators' ``TrainConfig`` unchanged. LOG_JSON gets
``seconds`` (the trainer's wall time: model build, data loading, compilation and every step),
``save_path``, ``epochs`` (the epoch folders it saved, in order) and ``checkpoint`` (the last
epoch's folder; with ``--dry-run``, the save path, where it writes the untrained model). Runs in the speculators
environment; imports nothing from specrig.
"""

import json
import sys
import time
from pathlib import Path


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    log, args = Path(sys.argv[1]), sys.argv[3:]
    save = Path(args[args.index("--save-path") + 1])
    from speculators.train.cli import main as train
    from speculators.train.config import TrainConfig

    sys.argv = ["speculators.train", *args]
    t0 = time.monotonic()
    train(TrainConfig.resolve())
    seconds = time.monotonic() - t0
    epochs = sorted((d for d in save.iterdir() if d.is_dir() and d.name.isdigit()), key=lambda d: int(d.name))
    # --dry-run saves the untrained model in SAVE itself; a run saves SAVE/<epoch>/ each epoch
    checkpoint = save if "--dry-run" in args else (epochs[-1] if epochs else None)
    names = [d.name for d in epochs]
    log.write_text(
        json.dumps({"seconds": seconds, "save_path": str(save), "epochs": names, "checkpoint": str(checkpoint)})
    )
    print(f"speculators ran for {seconds:.0f} s; saved epochs {names}; checkpoint {checkpoint}", flush=True)
    return 0 if checkpoint and (checkpoint / "config.json").is_file() else 1


if __name__ == "__main__":
    sys.exit(main())
