"""``specrig drafter --reference speculators``: the field's EAGLE-3 trainer (speculators 0.9.0) on
specrig's own data, beside specrig's drafter, scored the same way (issue 27).

Three stages, cached like the pipeline's (:mod:`.stages`), after the pipeline's own (prompts,
the target's answers, token ids) and specrig's training on the same samples (its vocabulary is
the one both draft from):

1. ``reference-data``: the same samples (the first N training ones, then every held-out one)
   written in the layout speculators' trainer reads, with the target's hidden states
   (``inenv/speculators_data.py``, in the recipe's ``speculators`` environment);
2. ``reference-train``: ``python -m speculators.train`` as its authors run it on one GPU, with
   its EAGLE-3 defaults, specrig's draft vocabulary and draft length, ``steps`` optimiser steps.
   Its schedule (linear decay to the last step) is by steps, so equal time is steps chosen from
   its measured rate: with ``steps`` None a short run of :data:`CALIBRATION_STEPS` (its own cached
   stage) times a step, then the run gets the steps that fill specrig's training seconds on the
   same samples (:func:`equal_time_steps`), under a wall-clock cap it cannot overrun by much.
   ``steps`` 0 is its ``--dry-run``: the untrained model, saved as a trained one is (the whole
   path, and the checkpoint's load in vLLM, checked without a GPU: speculators trains on CUDA only);
3. export and evaluation: the last epoch's ``config.json`` and ``model.safetensors`` (the files
   vLLM reads) as ``drafters/RECIPE/speculators-KEY``, with a ``specrig`` block naming its data,
   scored offline by specrig's evaluation with speculators' own model making the drafts
   (``inenv/eval_speculators.py``). The bench serves it as any drafter: ``--drafter PATH``.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specrig.core import atomic
from specrig.core.errors import ConfigError
from specrig.core.log import log
from specrig.drafter.evaluate import OfflineEval, evaluate_drafter
from specrig.drafter.export import drafters_root, write_drafter
from specrig.drafter.inenv_run import INENV, run_inenv
from specrig.drafter.pipeline import _export as _export_mine
from specrig.drafter.pipeline import _prepare, _train, _train_env, bench_workload, hidden_dtype
from specrig.drafter.settings import DrafterSettings
from specrig.drafter.stages import StageResult, file_digest, run_stage
from specrig.model.drafters import RUN_RECORD
from specrig.model.offline import offline_eval_status
from specrig.recipe.schema import Recipe

__all__ = [
    "REFERENCE_ENV",
    "TOKENS_PER_STEP",
    "CALIBRATION_STEPS",
    "ReferenceRun",
    "run_reference",
    "equal_time_steps",
    "calibrated_step_s",
    "same_samples",
    "begin",
    "finish",
    "layout_stage",
]

REFERENCE_ENV = "speculators"
TOKENS_PER_STEP = 8192  # speculators' default total_seq_len: one packed sequence a step
CALIBRATION_STEPS = 100  # the short run that times a step (the first ten, warm-up, are not counted)
VERSION = 2


@dataclass(frozen=True)
class ReferenceRun:
    drafter: Path
    offline: OfflineEval
    specrig: dict[str, Any]
    """specrig's training on the same samples: its seconds, steps, stage key and samples."""
    stages: list[StageResult]
    specrig_drafter: Path | None = None
    """With a sample limit, specrig's drafter on those samples (named as ``--curve`` names it)."""
    specrig_offline: OfflineEval | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "drafter": str(self.drafter),
            "offline": self.offline.as_dict(),
            "specrig": self.specrig
            | {"drafter": str(self.specrig_drafter) if self.specrig_drafter else None}
            | ({"offline": self.specrig_offline.as_dict()} if self.specrig_offline else {}),
            "stages": [
                {"name": s.name, "key": s.key, "seconds": s.seconds, "facts": s.facts.model_dump()} for s in self.stages
            ],
        }


def train_args(
    d_path: Path, target: Path, save: Path, logs: Path, layout: dict, s: DrafterSettings, steps: int
) -> list[str]:
    """speculators' own command line: its defaults, specrig's vocabulary, aux ids and draft length, and
    its eager loss (the same KL, without its fused kernel)."""
    epochs = max(1, math.ceil(steps * TOKENS_PER_STEP / max(layout["train_tokens"], 1)))
    run = ["--epochs", str(epochs), "--max-steps", str(steps)] if steps else ["--dry-run"]
    return [
        *("--verifier-name-or-path", str(target), "--speculator-type", "eagle3"),
        *("--data-path", str(d_path), "--save-path", str(save), "--log-dir", str(logs)),
        *("--on-missing", "raise", "--target-layer-ids", *map(str, layout["aux"])),
        *("--draft-vocab-size", str(layout["draft_vocab"]), "--ttt-steps", str(s.ttt_steps)),
        *("--train-data-ratio", f"{layout['train_data_ratio']:.9f}"),
        *run,
        *("--seed", str(s.seed)),
        # its own compatibility option: the default fused Triton KL kernel fails under torch 2.11's
        # compiler (dynamo: "ListVariable(length=21) is already tracked for mutation", the forward and
        # backward kernels' shared autotune configs), first seen on the H200 on 2026-12-04
        *("--loss-implementation", "eager"),
    ]


def calibrated_step_s(calibration: dict[str, Any]) -> float | None:
    """The calibration run's cost of a step: the mean over its later half (a number of steps costs
    their sum: SpecForge's steps, one sample of varying length each, had a mean 1.6x their median on
    an H100; and its early steps compile for new lengths, so the mean over all 100 put a step of a
    1,079-step H200 run at 122 ms where it cost 90 ms; the later half said 96 ms). Older records
    give what they have: the mean after the first ten, else the median."""
    return calibration.get("late_step_s") or calibration.get("mean_step_s") or calibration.get("step_s")


def equal_time_steps(budget_s: float, calibration: dict[str, Any]) -> tuple[int, float]:
    """(steps, cap in seconds) for a reference run whose optimiser steps take ``budget_s`` (specrig's
    training loop on the same samples), from the calibration run's step cost
    (:func:`calibrated_step_s`) and the seconds it spent outside its steps (start-up, validation,
    saving), which the cap allows for twice over."""
    step_s = calibrated_step_s(calibration)
    if not step_s or step_s <= 0:
        raise ConfigError(
            "the reference's calibration run recorded no step time (fewer than a dozen steps logged)",
            hint="see its train_log.json in the reference-train stage; or give --reference-steps N",
        )
    steps = max(1, math.floor(budget_s / step_s))
    outside = max(0.0, calibration["seconds"] - calibration.get("steps_run", 0) * step_s)
    return steps, round(1.25 * (steps * step_s) + 2 * outside + 30, 1)


def run_reference(
    recipe: Recipe, s: DrafterSettings, *, steps: int | None = None, limit: int | None = None
) -> ReferenceRun:
    """The reference on the first ``limit`` training samples (all: None), ``steps`` optimiser steps
    (None: as many as fill specrig's training time on the same samples)."""
    if steps is not None and steps < 0:
        raise ConfigError(f"--reference-steps must be >= 0, got {steps}", hint="e.g. --reference-steps 2000, or auto")
    d, total, limit, mine, env = begin(recipe, s, limit, REFERENCE_ENV)
    data, layout = _data_stage(d, env, mine, limit, s)
    stages = [mine, data]
    cap = None
    if steps is None:  # equal time: a short run times a step, then the steps that fill specrig's seconds
        cal = _train_stage(d, env, data, layout, s, CALIBRATION_STEPS)
        timed = cal.facts.model_dump()
        steps, cap = equal_time_steps(mine.facts.seconds or 0.0, timed)
        log.info(
            f"reference: {calibrated_step_s(timed) * 1e3:.0f} ms a step; {steps} steps fill specrig's "
            f"{mine.facts.seconds:.0f} s of training (cap {cap:.0f} s)"
        )
        stages.append(cal)
    train = _train_stage(d, env, data, layout, s, steps, cap)
    stages.append(train)
    drafter = _export(d, train, data, layout, s, limit)
    return finish(d, env, mine, total, limit, stages, drafter, "speculators' model drafts, specrig counts")


def begin(recipe: Recipe, s: DrafterSettings, limit: int | None, env_name: str) -> tuple:
    """What a reference run starts from: the pipeline's data (its stages), the training samples'
    count, the limit (None when it takes them all), specrig's training on those samples (whose
    vocabulary both draft from and whose seconds set equal time) and the reference's environment."""
    d = _prepare(recipe, s)
    total = d.hid.facts.samples.get("train", 0)
    limit = limit if limit and limit < total else None
    label = f"{limit} samples" if limit else "all samples"
    mine = _train(d, limit, f"specrig on {label} (the reference's vocabulary):")
    return d, total, limit, mine, _train_env(recipe, env_name)


def finish(
    d, eval_env, mine: StageResult, total: int, limit: int | None, stages: list, drafter: Path, how: str
) -> ReferenceRun:
    """The reference's drafter scored offline (in ``eval_env``; ``how`` says whose model drafts),
    specrig's own on the same samples beside it when limited, and the run's record in its folder."""
    s = d.s
    bench = bench_workload(d.recipe, s.bench_tokens)
    log.step(f"offline acceptance of {drafter.name} ({how}) ...")
    offline = evaluate_drafter(eval_env, drafter, k=s.ttt_steps, bench=bench)
    facts = {"train_seconds": mine.facts.seconds, "steps": mine.facts.steps, "key": mine.key, "samples": limit or total}
    same = same_samples(d, mine, limit, s.ttt_steps, bench) if limit else (None, None)
    run = ReferenceRun(drafter, offline, facts, stages, *same)
    atomic.write_text(drafter / RUN_RECORD, json.dumps(run.summary(), indent=2, default=str))
    return run


def same_samples(d, mine: StageResult, limit: int, k: int, bench) -> tuple[Path, OfflineEval]:
    """specrig's drafter on the first ``limit`` samples, exported and scored as ``--curve`` does
    (reused when the curve already made it)."""
    name = f"eagle3-n{limit}-{mine.key}"
    folder = drafters_root(d.recipe.name) / name
    if not (folder / "config.json").is_file():
        folder, _ = _export_mine(d, mine, name)
    found, _ = offline_eval_status(folder)
    return folder, found or evaluate_drafter(d.train_env, folder, k=k, bench=bench)


def _data_stage(d, env, mine: StageResult, limit: int | None, s: DrafterSettings) -> tuple[StageResult, dict]:
    what = "reference data: specrig's samples in speculators' layout"
    return layout_stage(
        d, env, mine, limit, s, script="speculators_data.py", stage="reference-data", version=VERSION, what=what
    )


def layout_stage(
    d,
    env,
    mine: StageResult,
    limit: int | None,
    s: DrafterSettings,
    *,
    script: str,
    stage: str,
    version: int,
    what: str,
) -> tuple[StageResult, dict]:
    """A reference trainer's data: ``inenv/SCRIPT`` writes the first ``limit`` samples (with the
    target's features, in the forward's dtype as specrig's stored features: bf16 on a CPU with it,
    float32 on a GPU) and specrig's vocabulary in that trainer's layout, as ``data/`` of the stage,
    with its ``layout.json`` beside it. Returns the stage and that layout."""
    dtype = hidden_dtype(s.hidden_dtype) if s.features == "stored" else "float32"

    def build(out: Path, work: Path) -> dict:
        args = [str(d.model.path), str(d.hid.path), str(work / "data"), "--aux", ",".join(map(str, d.aux))]
        args += ["--vocab", str(mine.path / "model.safetensors"), "--max-len", str(s.max_len), "--dtype", dtype]
        run_inenv(env, script, *args, *(["--limit", str(limit)] if limit else []), what=what)
        shutil.move(str(work / "data"), str(out / "data"))
        shutil.copyfile(out / "data" / "layout.json", out / "layout.json")
        return json.loads((out / "layout.json").read_text())

    inputs = {
        "v": version,
        "hidden": d.hid.key,
        "vocab": mine.key,
        "limit": limit,
        "max_len": s.max_len,
        "dtype": dtype,
        "env": env.lock_digest,
        "scripts": file_digest(INENV / script, INENV / "eagle3_model.py"),
    }
    done = run_stage(d.root, stage, inputs, build, what=what)
    return done, json.loads((done.path / "layout.json").read_text())


def _train_stage(
    d, env, data: StageResult, layout: dict, s: DrafterSettings, steps: int, cap: float | None = None
) -> StageResult:
    def build(out: Path, work: Path) -> dict:
        save = work / f"ckpt-{steps}"  # an existing checkpoint there would be resumed: a fresh one each run
        shutil.rmtree(save, ignore_errors=True)
        args = train_args(data.path / "data", d.model.path, save, work / "logs", layout, s, steps)
        atomic.write_text(work / "args.json", json.dumps(args))
        own = ["--seconds", str(cap)] if cap else []
        log_json = str(work / "train_log.json")
        run_inenv(env, "train_speculators.py", log_json, *own, "--", *args, what="speculators' EAGLE-3 trainer")
        tl = json.loads((work / "train_log.json").read_text())
        for name in ("config.json", "model.safetensors"):
            shutil.copyfile(Path(tl["checkpoint"]) / name, out / name)
        for name in ("args.json", "train_log.json"):
            shutil.copyfile(work / name, out / name)
        return tl | {"steps": steps, "untrained": steps == 0}

    inputs = {
        "v": VERSION,
        "data": data.key,
        "steps": steps,
        "cap": cap,
        "ttt_steps": s.ttt_steps,
        "seed": s.seed,
        "env": env.lock_digest,
        "script": file_digest(INENV / "train_speculators.py", INENV / "step_times.py"),
    }
    what = (
        f"reference training: speculators, {steps} steps" if steps else "reference: speculators' --dry-run (untrained)"
    )
    return run_stage(d.root, "reference-train", inputs, build, what=what)


def _export(d, train: StageResult, data: StageResult, layout: dict, s: DrafterSettings, limit: int | None) -> Path:
    cfg = json.loads((train.path / "config.json").read_text())
    facts = train.facts.model_dump()
    cfg["specrig"] = {
        "trainer": "speculators 0.9.0 (python -m speculators.train, its EAGLE-3 defaults)",
        "target_path": str(d.model.path),
        "target": d.model.source,
        "heldout_hidden": str(d.hid.path / "heldout"),
        "ttt_steps": s.ttt_steps,
        "trained_aux_positions": layout["aux"],
        "train_samples": layout["train_rows"],
        "train_tokens": layout["train_tokens"],
        "limit": limit,
        "steps": facts.get("steps"),
        "steps_run": facts.get("steps_run"),
        "step_s": facts.get("step_s"),
        "interrupted": facts.get("interrupted"),
        "train_seconds": facts.get("seconds"),
        "data_key": data.key,
        "aux_layer_convention": "vllm: residual stream entering layer k (HF hidden_states[k])",
    }
    final = write_drafter(
        drafters_root(d.recipe.name) / f"speculators-eagle3-{train.key}", train.path / "model.safetensors", cfg
    )
    log.step(f"reference drafter: {final}")
    return final
