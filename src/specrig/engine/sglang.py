"""SGLang (pinned 0.5.17, the hopper-sm90 recipe's): ``python -m sglang.launch_server``
from the engine environment, readiness on ``/health``, speculative-decoding counters
from the per-request ``meta_info`` of the native ``/generate`` endpoint, else from the
Prometheus counters ``sglang:spec_verify_calls_total`` / ``sglang:generation_tokens_total``,
else from the cumulative ``avg_spec_accept_length`` in ``/server_info``.

Facts read from the SGLang 0.5.17 wheel (see docs/sglang.md; where 0.5.9, the
blackwell-sm120 recipe's pin, differs, both are read):

* ``/health`` and ``/health_generate`` share one handler: 503 while the server
  is starting, then a one-token generation (``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION``
  defaults to true), 200 once it answers. Its request is not counted in the metrics.
* ``/server_info`` (``/get_server_info`` still works but logs a deprecation warning on
  every call; older releases have only ``/get_server_info``).
* ``/metrics`` exists only with ``--enable-metrics``. ``sglang:spec_accept_length``
  and ``sglang:spec_accept_rate`` are gauges over the last decode-log interval:
  never differenced here. ``sglang:spec_verify_calls_total`` (0.5.17) is a counter of
  the verify steps of finished requests, labelled by ``model_name``: differenced.
  ``sglang:generation_tokens_total`` is split by an ``is_streaming`` label in 0.5.17
  (the delta sums the series).
* Per-request speculative stats are in ``meta_info`` of the finished ``/generate``
  response (last streamed chunk): ``spec_verify_ct``, ``spec_num_correct_drafts``
  (0.5.9: ``spec_accept_token_num``), ``spec_num_proposed_drafts`` (0.5.9:
  ``spec_draft_token_num``), ``spec_correct_drafts_histogram`` (0.5.9:
  ``spec_accept_histogram``, which 0.5.17 still writes as an alias, as it writes
  ``spec_accepted_drafts`` / ``spec_proposed_drafts``), ``spec_accept_length``,
  ``spec_accept_rate``. The OpenAI ``/v1/completions`` and ``/v1/chat/completions``
  endpoints drop them (0.5.17's ``sglext`` object carries routed experts and cached
  tokens only), so a client that wants them must call ``/generate``
  (:meth:`SGLangEngine.native_generate_body`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from specrig.core.errors import ConfigError
from specrig.core.registry import DRAFTER_METHODS
from specrig.engine.base import LaunchPlan, RequestSpec, SpecCounters, last_value
from specrig.engine.sglang_counters import (
    _ACCEPTED_KEYS,
    _DRAFTED_KEYS,
    _HISTOGRAM_KEYS,
    _counter_deltas,
    _first,
    _from_counters,
    _from_requests,
    _from_server_info,
    _gauge_last_interval,
    _number,
)
from specrig.host.machine import Gpu
from specrig.recipe.schema import Recipe, SpecConfig

__all__ = ["ENGINE", "SGLangEngine", "SGLANG_VERSION", "ALGORITHMS"]

SGLANG_VERSION = "0.5.17"

ALGORITHMS: dict[str, str] = {
    "eagle3": "EAGLE3",
    "eagle": "EAGLE",
    "mtp": "NEXTN",  # SGLang rewrites NEXTN to EAGLE and finds the MTP layers itself
    "draft_model": "STANDALONE",
    "ngram": "NGRAM",
}
"""specrig method -> ``--speculative-algorithm`` value (0.5.17 builtins: EAGLE, EAGLE3,
NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK; 0.5.9: the first five)."""

NEEDS_DRAFTER = DRAFTER_METHODS

NGRAM_OPTIONS_BEFORE_0_5_10 = {
    "prompt_lookup_max": "--speculative-ngram-max-match-window-size",
    "prompt_lookup_min": "--speculative-ngram-min-match-window-size",
}
"""Spec options the adapter maps for ``ngram`` on SGLang up to 0.5.9. From 0.5.10 on (0.5.17
included) NGRAM drafts from a suffix trie (``--speculative-ngram-max-trie-depth``, default
18) and the match-window flags are gone; the trie depth is not the same bound, so there
``prompt_lookup_*`` is refused rather than mapped. Pass SGLang's own ngram flags through
the extra server arguments."""

"""Counter of verify steps, summed over finished requests (0.5.17; absent in 0.5.9)."""
DEFAULT_MEMORY_SHARE = 0.88
"""What :meth:`SGLangEngine.memory_share` assumes without ``--mem-fraction-static``:
SGLang sizes its own default from the GPU's memory (about 0.88-0.9 on an H200)."""


# meta_info keys for one count, the name 0.5.17 writes first, then its compat alias,
# then 0.5.9's (PR #23530 renamed them)
class SGLangEngine:
    name = "sglang"
    health_path = "/health"
    metrics_path = "/metrics"
    server_info_path = "/server_info"
    generation_tokens_metric = "sglang:generation_tokens_total"
    native_generate_path = "/generate"
    """POST path that returns per-request speculative stats (``meta_info``)."""
    profile_paths = ("/start_profile", "/stop_profile")

    def profile_launch(self, trace_dir: str) -> tuple[list[str], dict[str, str]]:
        """SGLang's torch profiler writes ``<id>-TP-<rank>.trace.json.gz`` into ``SGLANG_TORCH_PROFILER_DIR``
        when /stop_profile is called (the answer waits for it). Its spans mark every forward
        (``step[MODE bs=N]``) and the speculative stages (``draft``, ``draft_extend``); the
        Python stacks and input shapes it records by default are left out (a trace several
        times smaller, no span lost)."""
        return [], {
            "SGLANG_TORCH_PROFILER_DIR": trace_dir,
            "SGLANG_PROFILE_WITH_STACK": "false",
            "SGLANG_PROFILE_RECORD_SHAPES": "false",
        }

    def profile_start_body(self, trace_dir: str) -> dict[str, Any] | None:
        """/start_profile takes the folder, the activities and what to leave out, also from a
        server specrig attached to."""
        return {"output_dir": trace_dir, "activities": ["CPU", "GPU"], "with_stack": False, "record_shapes": False}

    def eager_flag(self, args: list[str]) -> str | None:
        return None if "--disable-cuda-graph" in args else "--disable-cuda-graph"

    batch_cap_flag = "--max-running-requests"
    context_flag = "--context-length"

    def default_batch_cap(self, args: list[str], recipe: Recipe, gpus: Sequence[Gpu]) -> tuple[int, str] | None:
        """None: without ``--max-running-requests`` SGLang sizes its batch from the KV cache it
        allocates at start, which is not known before."""
        return None

    def memory_share(self, args: list[str]) -> float:
        """``--mem-fraction-static`` (the last one wins), else :data:`DEFAULT_MEMORY_SHARE`.
        SGLang's fraction is of the memory free when the server starts, not of the GPU."""
        value = last_value(args, "--mem-fraction-static")
        return float(value) if value is not None else DEFAULT_MEMORY_SHARE

    def shared_gpu_args(self, fraction: float, kv_cache_bytes: int) -> list[str]:
        """None: SGLang cannot share a GPU safely with servers starting beside it. It has
        no flag for a KV cache in bytes (``--max-total-tokens`` counts tokens of a model
        this adapter does not know) and sizes its cache from the memory free at its start,
        so servers started together would size from each other's allocations. The lab
        then starts SGLang servers one at a time, whatever ``--launch-ahead`` says."""
        return []

    # ------------------------------------------------------------------ launch

    def spec_args(
        self, spec: SpecConfig, drafter: str | None, model_path: str, version: str | None = None
    ) -> list[str]:
        """The ``--speculative-*`` flags for one configuration. ``k`` drafts per
        verify step: a chain (top-k 1) of ``k`` steps verifies ``k + 1`` tokens.
        ``version``: the SGLang the environment pins (default :data:`SGLANG_VERSION`)."""
        version = version or SGLANG_VERSION
        algorithm = ALGORITHMS.get(spec.method)
        if algorithm is None:
            raise ConfigError(
                f"SGLang {version} has no speculative method {spec.method!r}",
                hint=f"SGLang supports: {', '.join(sorted(ALGORITHMS))} "
                f"(--speculative-algorithm {', '.join(sorted(set(ALGORITHMS.values())))}); "
                "run this configuration on vLLM instead",
            )
        k = spec.num_speculative_tokens
        args = ["--speculative-algorithm", algorithm]
        if spec.method == "ngram":
            args += _ngram_option_args(spec, version)
            # max BFS breadth 1 keeps the draft a chain, so k drafts per step as in vLLM
            args += ["--speculative-ngram-max-bfs-breadth", "1", "--speculative-num-draft-tokens", str(k + 1)]
            return args
        if spec.options:
            raise ConfigError(
                f"spec option(s) {', '.join(sorted(spec.options))} have no SGLang mapping for method {spec.method!r}",
                hint="pass SGLang flags through the extra server arguments instead",
            )
        if spec.method in NEEDS_DRAFTER and not drafter:
            raise ConfigError(
                f"SGLang method {algorithm} needs a drafter path (--speculative-draft-model-path)",
                hint="set model in the [spec.*] table to the drafter folder",
            )
        # STANDALONE needs the path even when the target drafts for itself (draft_model
        # = @target); EAGLE heads are always another folder; NEXTN takes none
        if drafter and (spec.method in NEEDS_DRAFTER or drafter != model_path):
            args += ["--speculative-draft-model-path", drafter]
        args += [
            "--speculative-num-steps",
            str(k),
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            str(k + 1),
        ]
        return args

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
        eng = recipe.engine.get("sglang")
        if eng is None:
            raise ConfigError(
                f"recipe {recipe.name!r} has no [engine.sglang] table",
                hint="add [engine.sglang] with env = the environment that has sglang installed",
            )
        argv = [
            python,
            "-m",
            "sglang.launch_server",
            "--model-path",
            model_path,
            "--served-model-name",
            served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tp-size",
            str(recipe.model.tensor_parallel),
            "--enable-metrics",
        ]
        if recipe.model.dtype != "auto":
            argv += ["--dtype", recipe.model.dtype]
        if recipe.model.max_model_len:
            argv += ["--context-length", str(recipe.model.max_model_len)]
        if recipe.model.engine_load_format != "auto":
            argv += ["--load-format", recipe.model.engine_load_format]  # "dummy": SGLang's random weights too
        argv += list(eng.args)
        if spec is not None:
            argv += self.spec_args(spec, drafter, model_path, pinned_version(recipe))
            argv += list(eng.spec_args)
        argv += list(extra_args)
        _refuse_fa3_without_flash_ops(python, argv)
        # local folders only: never ask a model hub (the lent GPU hosts have no network)
        environment = dict(eng.environment) | {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        return LaunchPlan(argv=argv, environment=environment, base_url=f"http://127.0.0.1:{port}")

    # ------------------------------------------------------------------ requests

    def request_body_extras(self, spec: SpecConfig | None) -> dict[str, Any]:
        """The output token ids of every streamed chunk, as vLLM's: SGLang 0.5.17's
        ``/v1/completions`` takes ``return_token_ids`` and puts each chunk's new ids in
        ``choices[0].token_ids`` (``serving_completions.py``), so the lossless check compares
        token ids and classifies each divergence. (Its OpenAI endpoints still return no
        speculative stats: :meth:`native_generate_body` has them.)"""
        return {"return_token_ids": True}

    def native_generate_body(
        self,
        *,
        prompt: str,
        max_tokens: int,
        temperature: float = 0.0,
        ignore_eos: bool = False,
        stream: bool = True,
        input_ids: Sequence[int] | None = None,
    ) -> dict[str, Any]:
        """Body for ``POST /generate``. Streamed, each ``data:`` line is
        ``{"text", "output_ids", "meta_info"}`` where ``text``, ``output_ids`` and
        ``meta_info.completion_tokens`` are cumulative (``text`` and ``output_ids``
        hold only the new part if the server runs with ``--incremental-streaming-output``,
        0.5.9's ``--stream-output``); the chunk whose ``meta_info.finish_reason`` is set
        carries the speculative fields; the stream ends with ``data: [DONE]``. ``input_ids``
        (a chat prompt rendered through the model's template) are sent instead of the text."""
        params = {"max_new_tokens": max_tokens, "temperature": temperature, "ignore_eos": ignore_eos}
        said: dict[str, Any] = {"text": prompt} if input_ids is None else {"input_ids": list(input_ids)}
        return {**said, "sampling_params": params, "stream": stream}

    def request_spec(self, final_payload: dict[str, Any]) -> RequestSpec | None:
        """Stats from a finished ``/generate`` payload (or its ``meta_info``);
        None when it has no ``spec_verify_ct`` (no speculation, or an OpenAI
        payload)."""
        meta = final_payload.get("meta_info", final_payload)
        if not isinstance(meta, dict):
            return None
        if "spec_verify_ct" not in meta and isinstance(final_payload.get("sglext"), dict):
            meta = final_payload["sglext"]  # later SGLang's OpenAI carrier
        verify = _number(meta.get("spec_verify_ct"))
        if not verify:
            return None
        completion = _number(meta.get("completion_tokens"))
        accepted = _first(meta, _ACCEPTED_KEYS)
        if accepted is None and completion is not None:
            # older SGLang reports only verify_ct: this counts the prefill token as accepted
            accepted = max(completion - verify, 0.0)
        length = _number(meta.get("spec_accept_length"))
        if length is None and completion is not None:
            length = completion / verify
        keep = (
            "completion_tokens",
            "spec_verify_ct",
            "spec_accept_length",
            "spec_accept_rate",
            *_ACCEPTED_KEYS,
            *_DRAFTED_KEYS,
            *_HISTOGRAM_KEYS,
        )
        return RequestSpec(
            verify_steps=verify,
            accepted_tokens=accepted,
            draft_tokens=_first(meta, _DRAFTED_KEYS),
            acceptance_length=length,
            raw={key: meta[key] for key in keep if key in meta},
        )

    # ------------------------------------------------------------------ counters

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
        """Per-request ``meta_info`` sums when any request carried them, else the
        ``sglang:spec_verify_calls_total`` counter's delta for this model, else an
        estimate from the cumulative ``/server_info`` accept length. The counter's
        delta is recorded next to the per-request sums (``raw``) as a cross-check.
        The ``sglang:spec_accept_length`` gauge is only recorded (last value), never
        differenced: it is a snapshot of the last decode-log interval."""
        gauge = _gauge_last_interval(metrics_after, served_name)
        verify, tokens = _counter_deltas(metrics_before, metrics_after, served_name)
        counters = _from_requests(requests, spec)
        if counters is None:
            counters = _from_counters(verify, tokens, requests, spec) or _from_server_info(
                info_before, info_after, completion_tokens, spec
            )
        if counters is None:
            return None
        extra: dict[str, Any] = {}
        if verify is not None:
            extra["counter_spec_verify_calls"] = verify
        if tokens is not None:
            extra["counter_generation_tokens"] = tokens
        if gauge is not None:
            extra["gauge_spec_accept_length_last_interval"] = gauge
        return replace(counters, raw=counters.raw | extra) if extra else counters


def _refuse_fa3_without_flash_ops(python: str, argv: list[str]) -> None:
    """SGLang's Hopper default attention backend, fa3, imports ``sgl_kernel.flash_attn``, whose
    library (``flash_ops``) a repacked sglang-kernel may leave out (`specrig repack --drop`): the
    server would die at its first forward with "Can not import FA3". Refused before it starts."""
    site = sorted(Path(python).parent.parent.glob("lib/python*/site-packages/sgl_kernel"))
    if not site or any(site[0].glob("flash_ops*.so")):
        return  # no sgl_kernel where this interpreter's venv keeps packages, or FA3 there
    asked = {f: last_value(argv, f) for f in ("--attention-backend", "--speculative-draft-attention-backend")}
    fa3 = [f for f, v in asked.items() if v == "fa3"] or (
        ["--attention-backend"] if asked["--attention-backend"] is None else []
    )
    if fa3:
        raise ConfigError(
            f"the sglang-kernel in {site[0].parent} has no FA3 library (flash_ops: a repack left it out), and "
            f"{' and '.join(fa3)} {'is' if len(fa3) == 1 else 'are'} fa3 (SGLang's default on Hopper)",
            hint="serve with another backend (--engine-arg=--attention-backend --engine-arg=triton), or install the "
            "published sglang-kernel: remove its entry from recipes/RECIPE.sglang.built.toml and run `specrig env`",
        )


def pinned_version(recipe: Recipe) -> str | None:
    """The ``sglang==V`` the recipe's SGLang environment pins (None: not pinned there)."""
    eng = recipe.engine.get("sglang")
    env = recipe.env.get(eng.env) if eng is not None else None
    for line in env.requirements if env is not None else []:
        req = Requirement(line)
        if canonicalize_name(req.name) == "sglang":
            return next((s.version for s in req.specifier if s.operator in ("==", "===")), None)
    return None


def _ngram_option_args(spec: SpecConfig, version: str) -> list[str]:
    mapped = NGRAM_OPTIONS_BEFORE_0_5_10 if Version(version) < Version("0.5.10") else {}
    unknown = sorted(set(spec.options) - set(mapped))
    if unknown:
        lookup = [o for o in unknown if o.startswith("prompt_lookup_")]
        why = (
            f"; SGLang {version}'s NGRAM has no match-window flags (from 0.5.10 on it drafts from a suffix trie, "
            "--speculative-ngram-max-trie-depth)"
            if lookup and not mapped
            else ""
        )
        raise ConfigError(
            f"spec option(s) {', '.join(unknown)} have no SGLang mapping for ngram{why}",
            hint="drop the options from the [spec.*] table (or use a table without them) and pass SGLang's own "
            "--speculative-ngram-* flags through the extra server arguments (--engine-arg)",
        )
    args: list[str] = []
    for key, flag in mapped.items():
        if key in spec.options:
            args += [flag, str(spec.options[key])]
    return args


ENGINE = SGLangEngine()
