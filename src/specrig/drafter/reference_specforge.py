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
from specrig.drafter.evaluate import evaluate_drafter
from specrig.drafter.export import NORM_OPTIONS, drafters_root, write_drafter
from specrig.drafter.inenv_run import INENV, run_inenv
from specrig.drafter.pipeline import _prepare, _train, _train_env, bench_workload, hidden_dtype
from specrig.drafter.reference import ReferenceRun, equal_time_steps, same_samples
from specrig.drafter.settings import DrafterSettings
from specrig.drafter.stages import StageResult, file_digest, run_stage
from specrig.model.drafters import RUN_RECORD
from specrig.recipe.schema import Recipe

__all__ = [
    "SPECFORGE_ENV",
    "CALIBRATION_STEPS",
    "run_config",
    "draft_config",
    "serving_config",
    "parse_settings",
    "with_settings",
    "run_specforge",
]

SPECFORGE_ENV = "specforge"
CALIBRATION_STEPS = 100  # one sample a step; the first ten (warm-up, compilation) are not counted
VERSION = 1


def draft_config(target_cfg: dict, draft_vocab: int) -> dict:
    """SpecForge's draft model: one Llama decoder layer of the target's shape, specrig's vocabulary."""
    heads = target_cfg["num_attention_heads"]
    rope = target_cfg.get("rope_theta") or (target_cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": target_cfg["hidden_size"],
        "intermediate_size": target_cfg["intermediate_size"],
        "num_attention_heads": heads,
        "num_key_value_heads": target_cfg.get("num_key_value_heads", heads),
        "head_dim": target_cfg.get("head_dim") or target_cfg["hidden_size"] // heads,
        "num_hidden_layers": 1,
        "vocab_size": target_cfg["vocab_size"],
        "draft_vocab_size": draft_vocab,
        "hidden_act": target_cfg.get("hidden_act", "silu"),
        "rms_norm_eps": target_cfg.get("rms_norm_eps", 1e-5),
        "max_position_embeddings": target_cfg.get("max_position_embeddings", 2048),
        "rope_theta": rope,
        "rope_parameters": {"rope_theta": rope, "rope_type": "default"},
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        **{k: target_cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in target_cfg},
    }


def serving_config(exported: dict, aux: list[int]) -> dict:
    """SpecForge's exported config with what vLLM (and specrig's evaluation) read besides: the aux ids
    the features were taken at (HF hidden_states[k]; SpecForge's export names none, and vLLM's default
    for a 30-layer target is the same 2, 15, 27), where both of vLLM's runners read them, and the
    EAGLE 3.1 options off (SpecForge's EAGLE-3 feeds the next step the pre-norm output)."""
    return exported | {
        "target_hidden_size": exported["hidden_size"],
        "eagle_aux_hidden_state_layer_ids": list(aux),
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux), "use_aux_hidden_state": True},
        **dict.fromkeys(NORM_OPTIONS, False),
    }


def run_config(data: Path, work: Path, layout: dict, s: DrafterSettings, steps: int, tied: bool) -> dict:
    """SpecForge's run file: offline features, its EAGLE-3 defaults, specrig's draft length and
    maximum length, ``steps`` optimiser steps (one sample each), one checkpoint at the end."""
    if steps < 1:
        raise ConfigError(
            f"SpecForge needs at least one step, got {steps}", hint="give --reference-steps N >= 1, or auto"
        )
    head = "model.embed_tokens.weight" if tied else "lm_head.weight"
    return {
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
            "num_epochs": max(1, math.ceil(steps / max(layout["rows"], 1))),
            "max_steps": steps,
            "ttt_length": s.ttt_steps,
            "seed": s.seed,
            "log_interval": 1,
            "save_interval": steps,
        },
        "deployment": {"mode": "local_colocated"},
        "output_dir": str(work / "out"),
    }


SECTIONS = ("model", "data", "training", "deployment")


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
    d = _prepare(recipe, s)
    total = d.hid.facts.samples.get("train", 0)
    limit = limit if limit and limit < total else None
    mine = _train(d, limit, f"specrig on {f'{limit} samples' if limit else 'all samples'} (SpecForge's vocabulary):")
    env = _train_env(recipe, SPECFORGE_ENV)
    data = _data_stage(d, env, mine, limit, s)
    layout = json.loads((data.path / "layout.json").read_text())
    stages = [mine, data]
    if steps is None:
        cal = _train_stage(d, env, data, layout, s, CALIBRATION_STEPS, settings)
        timed = cal.facts.model_dump()
        steps, _ = equal_time_steps(mine.facts.seconds or 0.0, timed)
        log.info(
            f"SpecForge: {timed['step_s'] * 1e3:.0f} ms a step; {steps} steps fill specrig's "
            f"{mine.facts.seconds:.0f} s of training"
        )
        stages.append(cal)
    train = _train_stage(d, env, data, layout, s, steps, settings)
    stages.append(train)
    drafter = _export(d, train, data, layout, s, limit, settings)
    bench = bench_workload(recipe, s.bench_tokens)
    log.step(f"offline acceptance of {drafter.name} (specrig's evaluation) ...")
    offline = evaluate_drafter(d.train_env, drafter, k=s.ttt_steps, bench=bench)
    facts = {"train_seconds": mine.facts.seconds, "steps": mine.facts.steps, "key": mine.key, "samples": limit or total}
    same = same_samples(d, mine, limit, s.ttt_steps, bench) if limit else (None, None)
    run = ReferenceRun(drafter, offline, facts, stages, *same)
    atomic.write_text(drafter / RUN_RECORD, json.dumps(run.summary(), indent=2, default=str))
    return run


def _data_stage(d, env, mine: StageResult, limit: int | None, s: DrafterSettings) -> StageResult:
    dtype = hidden_dtype(s.hidden_dtype) if s.features == "stored" else "float32"

    def build(out: Path, work: Path) -> dict:
        args = [str(d.model.path), str(d.hid.path), str(work / "data"), "--aux", ",".join(map(str, d.aux))]
        args += ["--vocab", str(mine.path / "model.safetensors"), "--max-len", str(s.max_len), "--dtype", dtype]
        run_inenv(
            env, "specforge_data.py", *args, *(["--limit", str(limit)] if limit else []), what="SpecForge's layout"
        )
        for name in ("features", "target", "vocab_mapping.pt", "layout.json"):
            shutil.move(str(work / "data" / name), str(out / name))
        return json.loads((out / "layout.json").read_text())

    inputs = {
        "v": VERSION,
        "hidden": d.hid.key,
        "vocab": mine.key,
        "limit": limit,
        "max_len": s.max_len,
        "dtype": dtype,
        "env": env.lock_digest,
        "scripts": file_digest(INENV / "specforge_data.py", INENV / "eagle3_model.py"),
    }
    return run_stage(d.root, "specforge-data", inputs, build, what="SpecForge data: specrig's samples, its layout")


def _train_stage(
    d, env, data: StageResult, layout: dict, s: DrafterSettings, steps: int, settings: dict[str, object]
) -> StageResult:
    target_cfg = json.loads((d.model.path / "config.json").read_text())
    tied = bool(target_cfg.get("tie_word_embeddings", False))

    def build(out: Path, work: Path) -> dict:
        shutil.rmtree(work / "out", ignore_errors=True)  # a checkpoint there would be resumed
        atomic.write_text(work / "draft.json", json.dumps(draft_config(target_cfg, layout["draft_vocab"]), indent=2))
        run = with_settings(run_config(data.path, work, layout, s, steps, tied), settings)
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
        "scripts": file_digest(INENV / "train_specforge.py"),
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
