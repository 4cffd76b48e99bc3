"""speculators 0.9.0's own trainer (``python -m speculators.train``), run as its authors run it on
one GPU, timed, with what it saved listed afterwards.

usage: python train_speculators.py LOG_JSON [--seconds S] -- SPECULATORS_TRAIN_ARGS...

The arguments after ``--`` go to speculators' ``TrainConfig`` unchanged. ``--seconds S`` is a
wall-clock cap: the first step to end after S seconds raises speculators' own
``TrainingInterruptedError`` (what its Ctrl+C handler raises), which its graceful shutdown turns
into a checkpoint saved as ``SAVE/interrupted``. It is raised at a step's end, from the step's
metric record, not by a signal: a SIGINT that lands while a record is printed is swallowed by
logging's error handling, and speculators ignores every later one.

LOG_JSON gets ``seconds`` (the trainer's wall time: model build, data loading, compilation and
every step), ``first_step_s`` (from the start to the first step's end), ``step_s`` (the median
step time after the first ten, from its per-step metric records), ``steps_run``, ``capped``, ``interrupted``,
``train`` (every 10th step's metrics and the last), ``val`` (each epoch's validation metrics),
``save_path``, ``epochs`` (the epoch folders it saved, in order) and ``checkpoint`` (the
interrupted one, else the last epoch's folder; with ``--dry-run``, the save path, where it writes
the untrained model). Runs in the speculators environment; imports from specrig only its sibling
step_times.py.
"""

import json
import logging
import sys
import time
from pathlib import Path

from step_times import step_summary


class StepRecords(logging.Handler):
    """speculators' metric records (its ``speculators.metrics`` logger: one dict a step at its default
    ``--log-freq 1``, one a validation), kept with the time each arrived; past ``cap`` seconds, the
    next step's record stops the training loop as its Ctrl+C would."""

    def __init__(self, t0: float, cap: float | None = None) -> None:
        super().__init__()
        self.t0, self.cap = t0, cap
        self.steps: list[tuple[int, float, dict]] = []
        self.val: list[dict] = []
        self.capped = False

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.msg
        if record.name != "speculators.metrics" or not isinstance(msg, dict):
            return
        if "global_step" in msg and isinstance(msg.get("train"), dict):
            train = {k: float(v) for k, v in msg["train"].items() if isinstance(v, int | float)}
            self.steps.append((int(msg["global_step"]), time.monotonic() - self.t0, train))
            if self.cap is not None and self.steps[-1][1] > self.cap and not self.capped:
                from speculators.train.graceful_shutdown import TrainingInterruptedError

                self.capped = True  # raised through logger.info into the loop (Handler.handle does not catch)
                raise TrainingInterruptedError(f"the wall-clock cap of {self.cap:.0f} s")
        elif isinstance(msg.get("val"), dict):
            self.val.append({"epoch": msg.get("epoch"), "step": len(self.steps)} | msg["val"])

    def summary(self) -> dict:
        return step_summary(self.steps) | {"capped": self.capped, "val": self.val}


def main() -> int:
    argv = sys.argv[1:]
    if len(argv) < 2 or "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    cut = argv.index("--")
    log, own, args = Path(argv[0]), argv[1:cut], argv[cut + 1 :]
    cap = float(own[own.index("--seconds") + 1]) if "--seconds" in own else None
    save = Path(args[args.index("--save-path") + 1])
    from speculators.train.cli import main as train
    from speculators.train.config import TrainConfig
    from speculators.train.logger import setup_root_logger

    t0 = time.monotonic()
    setup_root_logger()  # its console handler (its own call then keeps it), and ours beside it, first:
    records = StepRecords(t0, cap)  # that one's filter rewrites each record's dict into text as it passes
    logging.getLogger().handlers.insert(0, records)
    sys.argv = ["speculators.train", *args]
    train(TrainConfig.resolve())
    seconds = time.monotonic() - t0
    epochs = sorted((d for d in save.iterdir() if d.is_dir() and d.name.isdigit()), key=lambda d: int(d.name))
    interrupted = (save / "interrupted" / "config.json").is_file()
    # --dry-run saves the untrained model in SAVE itself; a run saves SAVE/<epoch>/ each epoch
    if "--dry-run" in args:
        checkpoint = save
    elif interrupted:
        checkpoint = save / "interrupted"
    else:
        checkpoint = epochs[-1] if epochs else None
    names = [d.name for d in epochs]
    out = {"seconds": seconds, "cap_s": cap, "interrupted": interrupted} | records.summary()
    out |= {"save_path": str(save), "epochs": names, "checkpoint": str(checkpoint)}
    log.write_text(json.dumps(out))
    rate = f", {out['step_s'] * 1e3:.0f} ms a step" if out["step_s"] else ""
    print(
        f"speculators ran for {seconds:.0f} s: {out['steps_run']} steps{rate}; saved epochs {names}"
        f"{' and an interrupted one' if interrupted else ''}; checkpoint {checkpoint}",
        flush=True,
    )
    return 0 if checkpoint and (checkpoint / "config.json").is_file() else 1


if __name__ == "__main__":
    sys.exit(main())
