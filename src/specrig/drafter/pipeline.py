"""``specrig drafter``: prompts -> target answers -> hidden states -> training
-> export -> offline evaluation, each stage cached by the content hash of its
inputs (:mod:`.stages`), resumable, atomic, with progress and a time per stage."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specrig.core import atomic
from specrig.core.errors import ConfigError
from specrig.core.log import log
from specrig.drafter.evaluate import BenchPrompts, OfflineEval, evaluate_drafter
from specrig.drafter.export import SHIFT, drafter_config, drafters_root, register, write_drafter
from specrig.drafter.generate import generate_samples
from specrig.drafter.inenv_run import INENV, run_inenv
from specrig.drafter.prompts import read_prompts, select_prompts, write_prompts
from specrig.drafter.settings import DrafterSettings
from specrig.drafter.stages import StageResult, file_digest, run_stage, stage_key
from specrig.env.make import Env, make_env
from specrig.model.datasets import SHAREGPT_HASH, STORY_PROMPTS, sharegpt_file
from specrig.model.folder import ModelRef, prepare_model
from specrig.recipe.schema import Recipe

__all__ = ["DrafterRun", "run_pipeline", "bench_workload", "TRAIN_ENV"]

TRAIN_ENV = "train"
VERSION = 2


@dataclass(frozen=True)
class DrafterRun:
    drafter: Path
    shifted: Path
    stages: list[StageResult]
    offline: OfflineEval
    offline_shifted: OfflineEval
    samples: dict[str, int]
    tokens: dict[str, int]
    seconds: float

    def summary(self) -> dict[str, Any]:
        return {
            "drafter": str(self.drafter),
            "shifted": str(self.shifted),
            "seconds": self.seconds,
            "samples": self.samples,
            "tokens": self.tokens,
            "offline": self.offline.as_dict(),
            "offline_shifted": self.offline_shifted.as_dict(),
            "stages": [
                {"name": s.name, "key": s.key, "seconds": s.seconds, "cached": s.cached, "facts": s.facts}
                for s in self.stages
            ],
        }


def _aux_layers(model: ModelRef, s: DrafterSettings) -> list[int]:
    cfg = json.loads((model.path / "config.json").read_text())
    n = int(cfg["num_hidden_layers"])
    aux = list(s.aux_layers) if s.aux_layers else [2, n // 2, n - 3]
    bad = [k for k in aux if not 0 < k <= n]
    if bad:
        raise ConfigError(f"aux layers {bad} are outside 1..{n} for this target ({n} layers)")
    return aux


def bench_workload(recipe: Recipe, max_tokens: int | None = None) -> BenchPrompts:
    """The bench's default workload (the story prompts at the recipe's max_tokens,
    or ``max_tokens``), for the offline figure the bench compares its online
    acceptance with. The target's answers are cached beside the stages."""
    return BenchPrompts(
        dataset="story",
        max_tokens=max_tokens or recipe.bench.max_tokens,
        prompts=[(p.id, p.text) for p in STORY_PROMPTS],
        cache=drafters_root(recipe.name) / "stages",
    )


def _train_env(recipe: Recipe) -> Env:
    if TRAIN_ENV not in recipe.env:
        raise ConfigError(
            f"recipe {recipe.name!r} has no [env.{TRAIN_ENV}] table to train a drafter in",
            hint=f"add [env.{TRAIN_ENV}] (torch, transformers, safetensors) as recipes/cpu.toml does, then "
            f"`nox -s lock -- --recipe {recipe.name} --env {TRAIN_ENV}`",
        )
    return make_env(recipe, TRAIN_ENV)


def run_pipeline(recipe: Recipe, s: DrafterSettings) -> DrafterRun:
    t_start = time.monotonic()
    root = drafters_root(recipe.name) / "stages"
    root.mkdir(parents=True, exist_ok=True)
    engine_env = make_env(recipe, recipe.env_for_engine("vllm"))
    train_env = _train_env(recipe)
    model = prepare_model(recipe, engine_env)
    aux = _aux_layers(model, s)
    stages: list[StageResult] = []

    # 1. prompts
    def build_prompts(out: Path, work: Path) -> dict:
        prompts = select_prompts(s, sharegpt_file())
        write_prompts(prompts, out / "prompts.jsonl")
        return {
            "train": sum(p.split == "train" for p in prompts),
            "heldout": sum(p.split == "heldout" for p in prompts),
        }

    p_in = {
        "v": VERSION,
        "sharegpt": SHAREGPT_HASH,
        "samples": s.samples,
        "heldout": s.heldout,
        "seed": s.seed,
        "max_prompt_chars": s.max_prompt_chars,
    }
    st = run_stage(root, "prompts", p_in, build_prompts, what="1/6 prompts from ShareGPT")
    stages.append(st)
    prompts = read_prompts(st.path / "prompts.jsonl")

    # 2. the target's own answers through the real vLLM server
    a_in = {
        "model": model.source,
        "engine_lock": engine_env.lock_digest,
        "max_new_tokens": s.max_new_tokens,
        "engine_args": recipe.engine["vllm"].model_dump(),
    }
    answers = root / f"answers-{stage_key('answers', a_in)}.jsonl"

    def build_generate(out: Path, work: Path) -> dict:
        samples, facts = generate_samples(
            recipe,
            engine_env,
            model,
            prompts,
            max_tokens=s.max_new_tokens,
            concurrency=s.concurrency,
            work=work,
            answers=answers,
            seconds=s.generate_seconds,
        )
        atomic.write_text(out / "samples.jsonl", "".join(json.dumps(r) + "\n" for r in samples))
        if (work / "server.log").exists():
            shutil.copyfile(work / "server.log", out / "server.log")
        return facts | {
            "output_tokens": sum(len(r.get("output_ids", [])) for r in samples),
            "prompt_tokens": sum(len(r.get("prompt_ids", [])) for r in samples),
        }

    g_in = {
        "v": VERSION,
        "prompts": st.key,
        "model": model.source,
        "engine_lock": engine_env.lock_digest,
        "max_new_tokens": s.max_new_tokens,
        "engine_args": recipe.engine["vllm"].model_dump(),
        "generate_seconds": s.generate_seconds,
    }
    gen = run_stage(root, "generate", g_in, build_generate, what="2/6 target answers through vLLM (self-distillation)")
    stages.append(gen)

    # 3. hidden states in vLLM's serving convention
    def build_hidden(out: Path, work: Path) -> dict:
        run_inenv(
            train_env,
            "hidden_states.py",
            str(model.path),
            str(gen.path / "samples.jsonl"),
            str(out),
            "--aux",
            ",".join(map(str, aux)),
            "--dtype",
            s.hidden_dtype,
            "--max-new-tokens",
            str(s.max_new_tokens),
            what="hidden states",
        )
        return json.loads((out / "stats.json").read_text())

    h_in = {
        "v": VERSION,
        "generate": gen.key,
        "aux": aux,
        "dtype": s.hidden_dtype,
        "train_lock": train_env.lock_digest,
        "script": file_digest(INENV / "hidden_states.py"),
    }
    hid = run_stage(root, "hidden", h_in, build_hidden, what="3/6 hidden states with transformers")
    stages.append(hid)

    # 4. training
    knobs = {
        k: getattr(s, k)
        for k in (
            "epochs",
            "lr",
            "ttt_steps",
            "step_decay",
            "draft_vocab",
            "max_len",
            "batch_tokens",
            "seed",
            "train_seconds",
        )
    }

    def build_train(out: Path, work: Path) -> dict:
        settings = atomic.write_text(work / "settings.json", json.dumps(knobs | {"max_seconds": s.train_seconds}))
        run_inenv(
            train_env,
            "train_eagle3.py",
            str(model.path),
            str(hid.path),
            str(work),
            str(settings),
            what="training the EAGLE-3 drafter",
        )
        for name in ("model.safetensors", "train_log.json"):
            atomic.replace_file(work / name, out / name)
        tl = json.loads((out / "train_log.json").read_text())
        return {
            k: tl[k]
            for k in (
                "steps",
                "seconds",
                "draft_vocab",
                "draft_vocab_coverage",
                "train_samples",
                "train_tokens",
                "stopped_early",
                "epochs",
            )
        }

    t_in = {
        "v": VERSION,
        "hidden": hid.key,
        "knobs": knobs,
        "scripts": file_digest(INENV / "train_eagle3.py", INENV / "eagle3_model.py"),
    }
    tr = run_stage(root, "train", t_in, build_train, what="4/6 training (specrig's EAGLE-3 trainer, CPU)")
    stages.append(tr)

    # 5. export: the folder vLLM loads, its shifted twin, the registry entry
    t0 = time.monotonic()
    target_cfg = json.loads((model.path / "config.json").read_text())
    facts = {
        "pipeline_key": tr.key,
        "target": model.source,
        "target_path": str(model.path),
        "heldout_hidden": str(hid.path / "heldout"),
        "ttt_steps": s.ttt_steps,
        "quick": s.quick,
        "settings": s.as_dict(),
    }
    cfg = drafter_config(target_cfg, aux=aux, draft_vocab=tr.facts["draft_vocab"], facts=facts)
    dest = drafters_root(recipe.name)
    name = f"eagle3-{'quick-' if s.quick else ''}{tr.key}"
    drafter = write_drafter(dest / name, tr.path / "model.safetensors", cfg)
    shifted = write_drafter(dest / f"{name}-shifted", tr.path / "model.safetensors", cfg, shift=SHIFT)
    stages.append(StageResult("export", tr.key, drafter, time.monotonic() - t0, False, {"shifted": str(shifted)}))
    log.step(f"5/6 export: {drafter} (and {shifted.name}: aux ids shifted by {SHIFT})")

    # 6. offline acceptance on held-out hidden states
    t0 = time.monotonic()
    log.step("6/6 offline acceptance (teacher-forced: held-out ShareGPT and the bench's prompts) ...")
    bench = bench_workload(recipe, s.bench_tokens)
    offline = evaluate_drafter(train_env, drafter, k=s.ttt_steps, bench=bench)
    shifted_offline = evaluate_drafter(train_env, shifted, k=s.ttt_steps, bench=bench)  # features where it is served
    stages.append(
        StageResult(
            "evaluate",
            tr.key,
            drafter,
            time.monotonic() - t0,
            False,
            offline.as_dict() | {"shifted": shifted_offline.as_dict()},
        )
    )
    pointer = register(recipe.name, drafter, shifted, quick=s.quick)
    gen_f, hid_f = gen.facts, hid.facts
    run = DrafterRun(
        drafter=drafter,
        shifted=shifted,
        stages=stages,
        offline=offline,
        offline_shifted=shifted_offline,
        samples={"train": hid_f["samples"].get("train", 0), "heldout": hid_f["samples"].get("heldout", 0)},
        tokens={
            "generated": gen_f.get("output_tokens", 0),
            "prompt": gen_f.get("prompt_tokens", 0),
            "train": hid_f["tokens"].get("train", 0),
            "heldout": hid_f["tokens"].get("heldout", 0),
        },
        seconds=time.monotonic() - t_start,
    )
    atomic.write_text(drafter / "run.json", json.dumps(run.summary(), indent=2, default=str))
    log.info(f"registered as @eagle3-trained for recipe {recipe.name!r} ({pointer})")
    return run
