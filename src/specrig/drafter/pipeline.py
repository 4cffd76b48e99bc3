"""``specrig drafter``: prompts -> target answers -> hidden states -> training
-> export -> offline evaluation, each stage cached by the content hash of its
inputs (:mod:`.stages`), resumable, atomic, with progress and a time per stage.

The same stages run on a CPU (features stored, trained on the CPU) and on a GPU host (the
recipe's ``[drafter]``: the engine environment trains, features computed for every batch).
:mod:`.curve` trains further drafters on nested subsets of the same data."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specrig.core import atomic
from specrig.core.digest import config_fingerprint
from specrig.core.errors import ConfigError
from specrig.core.log import log
from specrig.core.space import Need
from specrig.drafter.estimate import DRAFTERS_FIX, hidden_bytes, train_bytes
from specrig.drafter.evaluate import BenchPrompts, OfflineEval, evaluate_drafter
from specrig.drafter.export import SHIFT, drafter_config, drafters_root, register, write_drafter
from specrig.drafter.facts import ExportFacts, GenerateFacts, HiddenFacts, PromptFacts, StageFacts, TrainFacts
from specrig.drafter.generate import generate_samples
from specrig.drafter.inenv_run import INENV, run_inenv
from specrig.drafter.prompts import read_prompts, select_prompts, write_prompts
from specrig.drafter.settings import DrafterSettings
from specrig.drafter.stages import StageResult, file_digest, run_stage, stage_key
from specrig.env.make import Env, make_env
from specrig.host.machine import cpu_native_bf16
from specrig.model.datasets import SHAREGPT_HASH, STORY_PROMPTS, sharegpt_file
from specrig.model.drafters import RUN_RECORD
from specrig.model.folder import ModelRef, prepare_model
from specrig.recipe.schema import Recipe

__all__ = ["DrafterRun", "run_pipeline", "bench_workload", "train_env_name", "TRAIN_ENV"]

TRAIN_ENV = "train"
VERSION = 2
TRAIN_KNOBS = ("epochs", "lr", "ttt_steps", "step_decay", "loss_on", "draft_vocab", "max_len", "batch_tokens")
TRAIN_KNOBS += ("seed", "train_seconds", "norms", "optimizer", "weight_decay")


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
                {"name": s.name, "key": s.key, "seconds": s.seconds, "cached": s.cached, "facts": s.facts.model_dump()}
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


def train_env_name(recipe: Recipe, s: DrafterSettings | None = None) -> str:
    """The environment the drafter trains and is evaluated in: the setting's (the recipe's
    ``[drafter] train_env``), ``train`` by default."""
    return s.train_env if s is not None else recipe.drafter.values(False).get("train_env", TRAIN_ENV)


def _train_env(recipe: Recipe, name: str) -> Env:
    if name not in recipe.env:
        raise ConfigError(
            f"recipe {recipe.name!r} has no [env.{name}] table to train a drafter in",
            hint=f"add [env.{name}] (torch, transformers, safetensors) as recipes/cpu.toml does, then "
            f"`nox -s lock -- --recipe {recipe.name} --env {name}`; or name an environment that has them "
            "in the recipe's [drafter] train_env",
        )
    return make_env(recipe, name)


@dataclass
class _Data:
    """What every drafter of one data set shares: the environments, the target, the
    prompts, the answers and the hidden states (or token ids)."""

    recipe: Recipe
    s: DrafterSettings
    root: Path
    train_env: Env
    model: ModelRef
    aux: list[int]
    stages: list[StageResult]
    gen: StageResult[GenerateFacts]
    hid: StageResult[HiddenFacts]


def _prepare(recipe: Recipe, s: DrafterSettings) -> _Data:
    root = drafters_root(recipe.name) / "stages"
    root.mkdir(parents=True, exist_ok=True)
    engine_env = make_env(recipe, recipe.env_for_engine("vllm"))
    train_env = engine_env if s.train_env == recipe.env_for_engine("vllm") else _train_env(recipe, s.train_env)
    model = prepare_model(recipe, engine_env)
    aux = _aux_layers(model, s)
    bench_tokens = s.bench_shaped_tokens or recipe.bench.max_tokens
    chosen = _prompts_stage(root, s)
    gen = _generate_stage(root, recipe, s, engine_env, model, chosen, bench_tokens)
    hid = _hidden_stage(root, s, train_env, model, aux, gen, bench_tokens)
    return _Data(recipe, s, root, train_env, model, aux, [chosen, gen, hid], gen, hid)


def _prompts_stage(root: Path, s: DrafterSettings) -> StageResult[PromptFacts]:
    """Stage 1/6: the training and held-out prompts (``prompts.jsonl``)."""

    def build_prompts(out: Path, work: Path) -> dict:
        prompts = select_prompts(s, sharegpt_file())
        write_prompts(prompts, out / "prompts.jsonl")
        return {
            "train": sum(p.split == "train" for p in prompts),
            "heldout": sum(p.split == "heldout" for p in prompts),
            "formats": {f: sum(p.format == f for p in prompts) for f in ("chat", "raw", "bench")},
            "with_context": sum(bool(p.context) for p in prompts),
        }

    p_in = {
        "v": VERSION,
        "sharegpt": SHAREGPT_HASH,
        "samples": s.samples,
        "heldout": s.heldout,
        "seed": s.seed,
        "max_prompt_chars": s.max_prompt_chars,
        "turns": s.turns,
        "bench_shaped": s.bench_shaped,
    }
    return run_stage(root, "prompts", p_in, build_prompts, what="1/6 prompts from ShareGPT", facts=PromptFacts)


def _generate_stage(
    root: Path, recipe: Recipe, s: DrafterSettings, env: Env, model: ModelRef, chosen: StageResult, bench_tokens: int
) -> StageResult[GenerateFacts]:
    """Stage 2/6: the target's own answers through the real vLLM server (``samples.jsonl``)."""
    prompts = read_prompts(chosen.path / "prompts.jsonl")
    a_in = {
        "model": model.source,
        "engine_lock": env.lock_digest,
        "max_new_tokens": s.max_new_tokens,
        "engine_args": recipe.engine["vllm"].model_dump(),
        "bench_tokens": bench_tokens,
        "server_args": list(s.server_args),
    }
    answers = root / f"answers-{stage_key('answers', a_in)}.jsonl"

    def build_generate(out: Path, work: Path) -> dict:
        samples, facts = generate_samples(
            recipe,
            env,
            model,
            prompts,
            max_tokens=s.max_new_tokens,
            concurrency=s.concurrency,
            work=work,
            answers=answers,
            seconds=s.generate_seconds,
            bench_tokens=bench_tokens,
            server_args=s.server_args,
        )
        atomic.write_text(out / "samples.jsonl", "".join(json.dumps(r) + "\n" for r in samples))
        if (work / "server.log").exists():
            shutil.copyfile(work / "server.log", out / "server.log")
        return facts | {
            "output_tokens": sum(len(r.get("output_ids", [])) for r in samples),
            "prompt_tokens": sum(len(r.get("prompt_ids", [])) for r in samples),
        }

    g_in = {"v": VERSION, "prompts": chosen.key, "generate_seconds": s.generate_seconds} | a_in
    what = "2/6 target answers through vLLM (self-distillation)"
    return run_stage(root, "generate", g_in, build_generate, what=what, facts=GenerateFacts)


def _hidden_stage(
    root: Path, s: DrafterSettings, env: Env, model: ModelRef, aux: list[int], gen: StageResult, bench_tokens: int
) -> StageResult[HiddenFacts]:
    """Stage 3/6: hidden states in vLLM's serving convention (or, online, only the token ids)."""
    dtype = hidden_dtype(s.hidden_dtype) if s.features == "stored" else s.hidden_dtype  # online: the trainer's own
    cfg = json.loads((model.path / "config.json").read_text())
    tokens = gen.facts.prompt_tokens + gen.facts.output_tokens
    size = hidden_bytes(cfg, aux, tokens, stored=s.features == "stored", dtype=dtype)
    need = Need(root, size, "the hidden states" if s.features == "stored" else "the token ids", DRAFTERS_FIX)

    def build_hidden(out: Path, work: Path) -> dict:
        run_inenv(
            env,
            "hidden_states.py",
            str(model.path),
            str(gen.path / "samples.jsonl"),
            str(out),
            "--aux",
            ",".join(map(str, aux)),
            "--dtype",
            dtype,
            "--max-new-tokens",
            str(max(s.max_new_tokens, bench_tokens)),
            "--features",
            s.features,
            what="hidden states" if s.features == "stored" else "token ids",
            writes=[need],
        )
        return json.loads((out / "stats.json").read_text())

    h_in = {
        "v": VERSION,
        "generate": gen.key,
        "aux": aux,
        "dtype": dtype,
        "train_lock": env.lock_digest,
        "script": file_digest(INENV / "hidden_states.py"),
        "features": s.features,
    }
    what = (
        "3/6 hidden states with transformers"
        if s.features == "stored"
        else "3/6 token ids (the trainer computes the features on its device)"
    )
    return run_stage(root, "hidden", h_in, build_hidden, what=what, facts=HiddenFacts, need=need)


def hidden_dtype(setting: str, flags: frozenset[str] | None = None) -> str:
    """The dtype the hidden-states forward runs in: ``auto`` is bfloat16 on a CPU that
    computes it natively, float32 elsewhere."""
    if setting != "auto":
        return setting
    flag = cpu_native_bf16(flags)
    if flag:
        log.info(f"hidden states in bfloat16: the CPU has {flag}")
        return "bfloat16"
    log.info("hidden states in float32: the CPU has no native bf16 (amx_bf16, avx512_bf16)")
    return "float32"


def _train(d: _Data, limit: int | None, label: str) -> StageResult[TrainFacts]:
    s = d.s
    if s.optimizer == "muon" and not d.recipe.host.gpu_count and not cpu_native_bf16():
        log.warn(  # measured: 33 s a step against AdamW's 3.8 s on a 2-core AVX2 host
            "--optimizer muon on a CPU without native bf16: torch's Muon orthogonalises in bf16, emulated "
            "here, about 9x slower a step than AdamW; it is meant for a GPU"
        )
    knobs = {k: getattr(s, k) for k in TRAIN_KNOBS}
    if limit:
        knobs["limit"] = limit
    if s.length_bucket > 1:  # named only when set, as limit is
        knobs["length_bucket"] = s.length_bucket
    cfg = json.loads((d.model.path / "config.json").read_text())
    need = Need(d.root, train_bytes(cfg, s.draft_vocab), "the drafter's training", DRAFTERS_FIX)

    def build_train(out: Path, work: Path) -> dict:
        settings = atomic.write_text(work / "settings.json", json.dumps(knobs | {"max_seconds": s.train_seconds}))
        run_inenv(
            d.train_env,
            "train_eagle3.py",
            str(d.model.path),
            str(d.hid.path),
            str(work),
            str(settings),
            what="training the EAGLE-3 drafter",
            writes=[need],
        )
        for name in ("model.safetensors", "train_log.json"):
            atomic.replace_file(work / name, out / name)
        tl = json.loads((out / "train_log.json").read_text())
        return {
            k: tl.get(k)
            for k in (
                "steps",
                "seconds",
                "draft_vocab",
                "draft_vocab_coverage",
                "train_samples",
                "train_tokens",
                "stopped_early",
                "epochs",
                "best_epoch",
                "device",
                "features",
                "epoch_steps",
            )
        }

    t_in = {
        "v": VERSION,
        "hidden": d.hid.key,
        "knobs": knobs,
        "scripts": file_digest(  # train_progress.py draws the bar only: not an input of the weights
            *(INENV / f for f in ("train_eagle3.py", "train_batches.py", "eagle3_model.py", "train_optim.py"))
        ),
    }
    what = f"{label} training (specrig's EAGLE-3 trainer)"
    return run_stage(d.root, "train", t_in, build_train, what=what, facts=TrainFacts, need=need)


def _export(d: _Data, tr: StageResult[TrainFacts], name: str) -> tuple[Path, Path]:
    """The drafter folder vLLM loads and its shifted twin. The folder carries what a
    drafter needs on another machine: the target's identity, the aux ids, the vocabulary
    map (d2t/t2d in the weights) and the training facts."""
    s, model = d.s, d.model
    target_cfg = json.loads((model.path / "config.json").read_text())
    gen, hid = d.gen.facts, d.hid.facts
    facts = {
        "pipeline_key": tr.key,
        "target": model.source,
        "target_path": str(model.path),
        "target_config_fingerprint": config_fingerprint(target_cfg),
        "target_layers": target_cfg.get("num_hidden_layers"),
        "heldout_hidden": str(d.hid.path / "heldout"),
        "ttt_steps": s.ttt_steps,
        "quick": s.quick,
        "settings": s.as_dict(),
        "train_samples": tr.facts.train_samples,
        "train_tokens": tr.facts.train_tokens,
        "data": {
            "target_answered": hid.samples.get("train", 0) - gen.reference_samples,
            "reference_samples": gen.reference_samples,
            "answer_tokens": gen.output_tokens,
        },
        "trained_on": tr.facts.device,
    }
    cfg = drafter_config(target_cfg, aux=d.aux, draft_vocab=tr.facts.draft_vocab, facts=facts, norms=s.norms)
    dest = drafters_root(d.recipe.name)
    drafter = write_drafter(dest / name, tr.path / "model.safetensors", cfg)
    shifted = write_drafter(dest / f"{name}-shifted", tr.path / "model.safetensors", cfg, shift=SHIFT)
    return drafter, shifted


def run_pipeline(recipe: Recipe, s: DrafterSettings) -> DrafterRun:
    t_start = time.monotonic()
    d = _prepare(recipe, s)
    stages = d.stages
    tr = _train(d, None, "4/6")
    stages.append(tr)

    # 5. export: the folder vLLM loads, its shifted twin, the registry entry
    t0 = time.monotonic()
    drafter, shifted = _export(d, tr, f"eagle3-{'quick-' if s.quick else ''}{tr.key}")
    stages.append(
        StageResult("export", tr.key, drafter, time.monotonic() - t0, False, ExportFacts(shifted=str(shifted)))
    )
    log.step(f"5/6 export: {drafter} (and {shifted.name}: aux ids shifted by {SHIFT})")

    # 6. offline acceptance on held-out hidden states
    t0 = time.monotonic()
    log.step("6/6 offline acceptance (teacher-forced: held-out ShareGPT and the bench's prompts) ...")
    bench = bench_workload(recipe, s.bench_tokens)
    offline = evaluate_drafter(d.train_env, drafter, k=s.ttt_steps, bench=bench)
    shifted_offline = evaluate_drafter(d.train_env, shifted, k=s.ttt_steps, bench=bench)  # features where it is served
    stages.append(
        StageResult(
            "evaluate",
            tr.key,
            drafter,
            time.monotonic() - t0,
            False,
            StageFacts.model_validate(offline.as_dict() | {"shifted": shifted_offline.as_dict()}),
        )
    )
    pointer = register(recipe.name, drafter, shifted, quick=s.quick)
    gen_f, hid_f = d.gen.facts, d.hid.facts
    run = DrafterRun(
        drafter=drafter,
        shifted=shifted,
        stages=stages,
        offline=offline,
        offline_shifted=shifted_offline,
        samples={"train": hid_f.samples.get("train", 0), "heldout": hid_f.samples.get("heldout", 0)},
        tokens={
            "generated": gen_f.output_tokens,
            "prompt": gen_f.prompt_tokens,
            "train": hid_f.tokens.get("train", 0),
            "heldout": hid_f.tokens.get("heldout", 0),
        },
        seconds=time.monotonic() - t_start,
    )
    atomic.write_text(drafter / RUN_RECORD, json.dumps(run.summary(), indent=2, default=str))
    log.info(f"registered as @eagle3-trained for recipe {recipe.name!r} ({pointer})")
    return run
