"""``specrig drafter --reference specforge``: SpecForge 0.2.0's EAGLE-3 trainer on specrig's own data,
beside specrig's drafter, scored the same way (issue 27's second reference).

SpecForge trains offline from a folder of the target's features (its online mode needs a patched
SGLang server). The stages, cached like the pipeline's (:mod:`.stages`), after the pipeline's own
and specrig's training on the same samples (its vocabulary is the one both draft from):

1. ``specforge-data``: the first N training samples with the target's features in SpecForge's
   offline layout, a target folder it can read the output layer from, and specrig's vocabulary map
   (``inenv/specforge_data.py``, in the recipe's ``specforge`` environment);
2. ``specforge-train``: ``specforge train`` with its EAGLE-3 defaults (AdamW at 1e-4, cosine with
   1.5% warm-up, one sample a step, gradient clip 0.5, its FSDP and flex attention on a GPU),
   specrig's draft vocabulary, draft length and maximum length, ``steps`` optimiser steps; then
   ``specforge export --to sglang`` (``inenv/train_specforge.py``). Equal time as for speculators:
   with ``steps`` None a short run of :data:`CALIBRATION_STEPS` times a step, then the run gets the
   steps that fill specrig's training seconds on the same samples (:func:`.reference.equal_time_steps`);
3. export and evaluation: SpecForge's export with the aux ids the features were taken at (its
   capture layers, written where vLLM reads them) and a ``specrig`` block naming its data, as
   ``drafters/RECIPE/specforge-eagle3-KEY``; scored offline by specrig's own evaluation
   (``eval_eagle3.py``: the export is the plain EAGLE-3 Llama format specrig's drafters use, and
   tests/test_reference_specforge.py checks that specrig's model drafts what SpecForge's does).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from specrig.core import atomic
from specrig.core.errors import ConfigError
from specrig.core.log import log
from specrig.drafter.export import drafters_root, eagle3_serving, eagle3_shape, write_drafter
from specrig.drafter.inenv_run import INENV, run_inenv
from specrig.drafter.reference import ReferenceRun, begin, calibrated_step_s, equal_time_steps, finish, layout_stage
from specrig.drafter.settings import DrafterSettings
from specrig.drafter.stages import StageResult, file_digest, run_stage
from specrig.recipe.schema import Recipe

__all__ = [
    "SPECFORGE_ENV",
    "CALIBRATION_STEPS",
    "run_config",
    "draft_config",
    "serving_config",
    "epochs_for",
    "parse_settings",
    "with_settings",
    "run_specforge",
]

SPECFORGE_ENV = "specforge"
CALIBRATION_STEPS = 100  # one sample a step; the first ten (warm-up, compilation) are not counted
VERSION = 2  # 2: the data stage's files under data/, as the speculators reference's


def draft_config(target_cfg: dict, draft_vocab: int) -> dict:
    """SpecForge's draft model: one Llama decoder layer of the target's shape, specrig's vocabulary."""
    shape = eagle3_shape(target_cfg, draft_vocab)
    return shape | {
        "rope_parameters": {"rope_theta": shape["rope_theta"], "rope_type": "default"},
        "attention_bias": False,
        "mlp_bias": False,
        **{k: target_cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in target_cfg},
    }


def serving_config(exported: dict, aux: list[int]) -> dict:
    """SpecForge's exported config with what vLLM (and specrig's evaluation) read besides: the aux ids
    the features were taken at (HF hidden_states[k]; SpecForge's export names none, and vLLM's default
    for a 30-layer target is the same 2, 15, 27), and the EAGLE 3.1 options off (SpecForge's EAGLE-3
    feeds the next step the pre-norm output)."""
    return exported | eagle3_serving(exported["hidden_size"], aux)


def run_config(
    data: Path,
    work: Path,
    layout: dict,
    s: DrafterSettings,
    steps: int,
    tied: bool,
    settings: dict[str, object] | None = None,
) -> dict:
    """SpecForge's run file: offline features, its EAGLE-3 defaults, specrig's draft length and
    maximum length, ``steps`` optimiser steps in the epochs they need (:func:`epochs_for`), one
    checkpoint at the end; ``settings`` (SpecForge's own, :func:`parse_settings`) put over it."""
    if steps < 1:
        raise ConfigError(
            f"SpecForge needs at least one step, got {steps}", hint="give --reference-steps N >= 1, or auto"
        )
    settings = settings or {}
    head = "model.embed_tokens.weight" if tied else "lm_head.weight"
    cfg = {
        "model": {
            "target_model_path": str(data / "target"),
            "draft_model_config": str(work / "draft.json"),
            "vocab_mapping_path": str(data / "vocab_mapping.pt"),
            "lm_head_key": head,
            "embedding_key": "model.embed_tokens.weight",
            "torch_dtype": "bfloat16",
        },
        "data": {
            "hidden_states_path": str(data / "features"),
            "max_length": s.max_len,
            "cache_dir": str(work / "cache"),
        },
        "training": {
            "num_epochs": epochs_for(steps, layout["rows"], settings),
            "max_steps": steps,
            "ttt_length": s.ttt_steps,
            "seed": s.seed,
            "log_interval": 1,
            "save_interval": steps,
        },
        "deployment": {"mode": "local_colocated"},
        "output_dir": str(work / "out"),
    }
    return with_settings(cfg, settings)


SECTIONS = ("model", "data", "training", "deployment")


def epochs_for(steps: int, rows: int, settings: dict[str, object]) -> int:
    """The epochs SpecForge needs to run ``steps`` optimiser steps over ``rows`` samples at the run's
    batch size and accumulation (its loader drops a last partial batch; accumulation spans epochs):
    it stops at whichever of ``max_steps`` and ``num_epochs`` comes first. A ``training.num_epochs``
    setting is kept as given."""

    def positive(key: str) -> int:
        v = settings.get(key, 1)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 1  # else its schema says

    if "training.num_epochs" in settings:
        return positive("training.num_epochs")
    batches = max(rows // positive("training.batch_size"), 1)
    return max(1, math.ceil(steps * positive("training.accumulation_steps") / batches))


def parse_settings(items: list[str]) -> dict[str, object]:
    """``KEY=VALUE`` strings as SpecForge's dotted overrides: the value read as JSON where it is
    (numbers, true/false, lists), else as text. SpecForge's own schema checks the names."""
    out: dict[str, object] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        section = key.split(".")[0]
        if not sep or "." not in key or section not in SECTIONS or not key.split(".")[-1]:
            raise ConfigError(
                f"--reference-set {item!r}: not SECTION.NAME=VALUE with SECTION one of {', '.join(SECTIONS)}",
                hint="e.g. --reference-set training.attention_backend=sdpa",
            )
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


def with_settings(cfg: dict, settings: dict[str, object]) -> dict:
    """``cfg`` with each dotted setting put in place (a copy)."""
    cfg = json.loads(json.dumps(cfg))
    for key, value in settings.items():
        *path, leaf = key.split(".")
        node = cfg
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return cfg


def run_specforge(
    recipe: Recipe,
    s: DrafterSettings,
    *,
    steps: int | None = None,
    limit: int | None = None,
    settings: dict[str, object] | None = None,
) -> ReferenceRun:
    """SpecForge on the first ``limit`` training samples (all: None), ``steps`` optimiser steps (None:
    as many as fill specrig's training time on the same samples); ``settings``: SpecForge's own
    dotted run-file settings over specrig's (:func:`parse_settings`)."""
    settings = settings or {}
    if steps is not None and steps < 1:
        raise ConfigError(
            f"--reference-steps for specforge must be >= 1 or auto, got {steps}",
            hint="SpecForge has no dry run: give e.g. --reference-steps 2000, or auto",
        )
    d, total, limit, mine, env = begin(recipe, s, limit, SPECFORGE_ENV)
    what = "SpecForge data: specrig's samples, its layout"
    data, layout = layout_stage(
        d, env, mine, limit, s, script="specforge_data.py", stage="specforge-data", version=VERSION, what=what
    )
    stages = [mine, data]
    if steps is None:
        cal = _train_stage(d, env, data, layout, s, CALIBRATION_STEPS, settings)
        timed = cal.facts.model_dump()
        steps, _ = equal_time_steps(mine.facts.seconds or 0.0, timed)
        log.info(
            f"SpecForge: {calibrated_step_s(timed) * 1e3:.0f} ms a step; {steps} steps fill specrig's "
            f"{mine.facts.seconds:.0f} s of training"
        )
        stages.append(cal)
    train = _train_stage(d, env, data, layout, s, steps, settings)
    stages.append(train)
    drafter = _export(d, train, data, layout, s, limit, settings)
    # the export is the plain EAGLE-3 format specrig's own model reads (and drafts as SpecForge's does)
    return finish(d, d.train_env, mine, total, limit, stages, drafter, "specrig's evaluation")


def _train_stage(
    d, env, data: StageResult, layout: dict, s: DrafterSettings, steps: int, settings: dict[str, object]
) -> StageResult:
    target_cfg = json.loads((d.model.path / "config.json").read_text())
    tied = bool(target_cfg.get("tie_word_embeddings", False))

    def build(out: Path, work: Path) -> dict:
        shutil.rmtree(work / "out", ignore_errors=True)  # a checkpoint there would be resumed
        atomic.write_text(work / "draft.json", json.dumps(draft_config(target_cfg, layout["draft_vocab"]), indent=2))
        run = run_config(data.path / "data", work, layout, s, steps, tied, settings)
        atomic.write_text(work / "run.yaml", json.dumps(run, indent=2))  # JSON is YAML
        log_json = work / "train_log.json"
        args = [str(log_json), str(work / "run.yaml"), str(work / "draft.json"), str(work / "export")]
        run_inenv(env, "train_specforge.py", *args, what="SpecForge's EAGLE-3 trainer")
        for name in ("config.json", "model.safetensors"):
            shutil.copyfile(work / "export" / name, out / name)
        for name in ("run.yaml", "draft.json", "train_log.json"):
            shutil.copyfile(work / name, out / name)
        return json.loads(log_json.read_text()) | {"steps": steps}

    inputs = {
        "v": VERSION,
        "data": data.key,
        "steps": steps,
        "ttt_steps": s.ttt_steps,
        "max_len": s.max_len,
        "seed": s.seed,
        "env": env.lock_digest,
        "scripts": file_digest(INENV / "train_specforge.py", INENV / "step_times.py"),
    } | ({"settings": settings} if settings else {})  # none: the keys of runs before the option
    return run_stage(d.root, "specforge-train", inputs, build, what=f"SpecForge training, {steps} steps")


def _export(
    d, train: StageResult, data: StageResult, layout: dict, s: DrafterSettings, limit: int | None, settings: dict
) -> Path:
    facts = train.facts.model_dump()
    aux = list(layout["aux"])
    cfg = serving_config(json.loads((train.path / "config.json").read_text()), aux)
    cfg["specrig"] = {
        "trainer": "SpecForge 0.2.0 (specforge train, offline, its EAGLE-3 defaults; export --to sglang)",
        "target_path": str(d.model.path),
        "target": d.model.source,
        "heldout_hidden": str(d.hid.path / "heldout"),
        "ttt_steps": s.ttt_steps,
        "trained_aux_positions": aux,
        "train_samples": layout["rows"],
        "train_tokens": layout["tokens"],
        "limit": limit,
        "steps": facts.get("steps"),
        "steps_run": facts.get("steps_run"),
        "step_s": facts.get("step_s"),
        "train_seconds": facts.get("seconds"),
        "loss_kernel": facts.get("loss_kernel"),
        "settings": settings,
        "data_key": data.key,
        "aux_layer_convention": "vllm: residual stream entering layer k (HF hidden_states[k])",
    }
    final = write_drafter(
        drafters_root(d.recipe.name) / f"specforge-eagle3-{train.key}", train.path / "model.safetensors", cfg
    )
    log.step(f"SpecForge's drafter: {final}")
    return final
