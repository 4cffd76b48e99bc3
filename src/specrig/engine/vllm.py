"""vLLM: ``vllm serve`` from the engine environment, readiness on ``/health``,
speculative-decoding counters from its Prometheus ``vllm:spec_decode_*``
counters (differenced around each run, filtered by the served model's label,
summed over engines), per-request stats when the server offers them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specrig.engine.base import LaunchPlan, RequestSpec, SpecCounters, last_value
from specrig.engine.metrics import delta, parse
from specrig.host.cpus import cpu_list_text, usable_cpu_list
from specrig.host.machine import Gpu
from specrig.recipe.schema import Recipe, SpecConfig

__all__ = ["ENGINE", "VllmEngine"]

PREFIX = "vllm:spec_decode_"


def _itself(drafter: str, model_path: str) -> bool:
    """The drafter is the target's own folder, or the copy of it vLLM is given as a draft model
    (``specrig_draft_of`` in its config: :func:`specrig.model.folder.as_vllm_draft_model`)."""
    if Path(drafter).resolve() == Path(model_path).resolve():
        return True
    try:
        of = json.loads((Path(drafter) / "config.json").read_text()).get("specrig_draft_of") or {}
    except (OSError, ValueError):
        return False
    return bool(of.get("folder")) and Path(of["folder"]).resolve() == Path(model_path).resolve()


class VllmEngine:
    name = "vllm"
    health_path = "/health"
    metrics_path = "/metrics"
    server_info_path = None
    generation_tokens_metric = "vllm:generation_tokens_total"
    native_generate_path = None  # its OpenAI completions carry per-request stats
    profile_paths = ("/start_profile", "/stop_profile")

    def profile_launch(self, trace_dir: str) -> tuple[list[str], dict[str, str]]:
        """vLLM's torch profiler (``--profiler-config``, off until /start_profile), its traces gzipped
        into ``trace_dir``; the model runner's phase scopes switched on."""
        cfg = {
            "profiler": "torch",
            "torch_profiler_dir": trace_dir,
            "torch_profiler_with_stack": False,
            "torch_profiler_use_gzip": True,
            "ignore_frontend": True,
        }
        return ["--profiler-config", json.dumps(cfg)], {"VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"}

    def profile_start_body(self, trace_dir: str) -> dict[str, Any] | None:
        """None: the folder is fixed when the server starts (``--profiler-config``)."""
        return None

    def speculative_config(self, spec: SpecConfig, drafter: str | None, *, own_weights: bool = False) -> dict[str, Any]:
        """``own_weights``: a dummy-weight target's drafter folder holds real weights: load them
        (vLLM would give the drafter the target's load format, dummy, and then, its checkpoint
        unread, the target's output head instead of the drafter's own)."""
        cfg: dict[str, Any] = {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens}
        if drafter:
            cfg["model"] = drafter
        if own_weights:
            cfg["draft_load_config"] = {"load_format": "auto"}
        cfg.update(spec.options)
        return cfg

    def launch(
        self,
        *,
        python: str,
        model_path: str,
        served_name: str,
        port: int,
        recipe: Recipe,
        spec: SpecConfig | None,
        drafter: str | None,
        extra_args: list[str],
    ) -> LaunchPlan:
        eng = recipe.engine["vllm"]
        exe = str(Path(python).with_name("vllm"))
        argv = [
            exe,
            "serve",
            model_path,
            "--served-model-name",
            served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        if recipe.model.dtype != "auto":
            argv += ["--dtype", recipe.model.dtype]
        if recipe.model.max_model_len:
            argv += ["--max-model-len", str(recipe.model.max_model_len)]
        if recipe.model.engine_load_format != "auto":
            argv += ["--load-format", recipe.model.engine_load_format]
        if recipe.model.tensor_parallel > 1:
            argv += ["--tensor-parallel-size", str(recipe.model.tensor_parallel)]
        argv += list(eng.args)
        if spec is not None:
            # the target drafting for itself (the oracle) stays dummy: the same seeded weights
            own = recipe.model.dummy and bool(drafter) and not _itself(drafter or "", model_path)
            argv += ["--speculative-config", json.dumps(self.speculative_config(spec, drafter, own_weights=own))]
            argv += list(eng.spec_args)
        argv += list(extra_args)
        all_cpus = cpu_list_text(usable_cpu_list())  # the CPUs this process may use, e.g. "1,3-5"
        environment = {k: v.replace("{all_cpus}", all_cpus) for k, v in eng.environment.items()}
        environment |= {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "PYTHONUNBUFFERED": "1",
        }
        preload = _cpu_preload(python) if recipe.torch.variant == "cpu" else []
        if preload:
            environment["LD_PRELOAD"] = ":".join(preload)
        return LaunchPlan(argv=argv, environment=environment, base_url=f"http://127.0.0.1:{port}")

    def eager_flag(self, args: list[str]) -> str | None:
        return None if "--enforce-eager" in args else "--enforce-eager"

    batch_cap_flag = "--max-num-seqs"
    context_flag = "--max-model-len"

    def default_batch_cap(self, args: list[str], recipe: Recipe, gpus: Sequence[Gpu]) -> tuple[int, str] | None:
        """vLLM's own ``--max-num-seqs`` when none is given, as its API server sets it
        (``EngineArgs.get_batch_defaults``, vLLM 0.32): 128 per rank on a CPU; on a GPU 1024
        from 70 GiB (an A100 excepted), else 256; doubled by ``--performance-mode throughput``."""
        ranks = max(1, recipe.model.tensor_parallel)
        if recipe.torch.variant == "cpu":
            cap, why = 128 * ranks, f"vLLM's default on a CPU: 128 a rank, {ranks} rank(s)"
        elif gpus and min(g.memory_gib for g in gpus) >= 70 and not any("a100" in g.name.lower() for g in gpus):
            cap, why = 1024, "vLLM's default on a GPU of 70 GiB or more"
        else:
            cap, why = 256, "vLLM's default on this GPU" if gpus else "vLLM's default on a GPU under 70 GiB"
        if last_value(args, "--performance-mode") == "throughput":
            cap, why = 2 * cap, f"{why}, doubled by --performance-mode throughput"
        return cap, why

    def memory_share(self, args: list[str]) -> float:
        return float(last_value(args, "--gpu-memory-utilization") or 0.9)

    def shared_gpu_args(self, fraction: float, kv_cache_bytes: int) -> list[str]:
        # --kv-cache-memory-bytes skips vLLM's memory profiling, which reads the whole GPU's use
        return ["--gpu-memory-utilization", f"{fraction:.4f}", "--kv-cache-memory-bytes", str(kv_cache_bytes)]

    def request_body_extras(self, spec: SpecConfig | None) -> dict[str, Any]:
        # the output token ids of every streamed chunk: exact tokens per chunk (ITL under
        # speculation) and token-by-token comparison of greedy outputs (vLLM >= 0.10.2)
        return {"return_token_ids": True}

    def native_generate_body(
        self, *, prompt: str, max_tokens: int, ignore_eos: bool, input_ids: Sequence[int] | None = None
    ) -> dict[str, Any]:
        raise NotImplementedError("vLLM is measured through /v1/completions")

    def request_spec(self, final_payload: dict[str, Any]) -> RequestSpec | None:
        sd = (final_payload.get("metrics") or {}).get("speculative_decoding")
        if not sd:
            return None
        return RequestSpec(
            verify_steps=sd.get("num_spec_steps"),
            accepted_tokens=sd.get("num_accepted_draft_tokens"),
            draft_tokens=sd.get("num_draft_tokens"),
            acceptance_length=sd.get("mean_acceptance_length"),
            raw=sd,
        )

    def spec_counters(
        self,
        *,
        metrics_before: str | None,
        metrics_after: str | None,
        info_before: dict[str, Any] | None,
        info_after: dict[str, Any] | None,
        requests: list[RequestSpec | None],
        completion_tokens: int,
        served_name: str,
        spec: SpecConfig,
    ) -> SpecCounters | None:
        if metrics_after is None:
            return None
        before = parse(metrics_before) if metrics_before else None
        after = parse(metrics_after)
        match = {"model_name": served_name}
        drafts = delta(before, after, PREFIX + "num_drafts_total", match)
        if drafts is None:
            return None
        draft_tokens = delta(before, after, PREFIX + "num_draft_tokens_total", match) or 0.0
        accepted = delta(before, after, PREFIX + "num_accepted_tokens_total", match) or 0.0
        per_pos_after = after.by_label(PREFIX + "num_accepted_tokens_per_pos_total", "position", match)
        per_pos_before = (
            before.by_label(PREFIX + "num_accepted_tokens_per_pos_total", "position", match) if before else {}
        )
        per_pos = None
        if per_pos_after:
            n = max(int(p) for p in per_pos_after) + 1
            per_pos = tuple(per_pos_after.get(str(i), 0.0) - per_pos_before.get(str(i), 0.0) for i in range(n))
        return SpecCounters(
            drafts=drafts,
            draft_tokens=draft_tokens,
            accepted_tokens=accepted,
            k=spec.num_speculative_tokens,
            accepted_per_position=per_pos,
            source=f"Prometheus {PREFIX}* counters, delta around the run, model_name={served_name!r}, summed over engines",
            raw={
                "drafts": drafts,
                "draft_tokens": draft_tokens,
                "accepted_tokens": accepted,
                "accepted_per_position": list(per_pos or []),
            },
        )


def _cpu_preload(python: str) -> list[str]:
    """tcmalloc (if installed) and the env's Intel OpenMP: vLLM's CPU backend
    warns that spec decoding without them loses much speed."""
    out = []
    for cand in ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"):
        if Path(cand).exists():
            out.append(cand)
            break
    iomp = Path(python).parent.parent / "lib" / "libiomp5.so"
    if iomp.exists():
        out.append(str(iomp))
    return out


ENGINE = VllmEngine()
