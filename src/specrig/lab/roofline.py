"""The roofline of a run, derived, not declared: bytes read per decoded token
from the served model itself (:mod:`specrig.model.weights`), the devices'
memory bandwidth from the table of known GPUs or this host's measured copy
bandwidth (:mod:`specrig.host.bandwidth`); ``[bench.roofline]`` in the recipe
or ``--memory-bandwidth`` override either figure.

At batch B (the load point's concurrency) each decode step reads the weights
once for all B sequences and each sequence's KV cache at its context, so one
stream is bounded by ``bandwidth / (weights + B x context x kv_bytes)`` tokens/s.
The reading says what the fraction achieved means: near the bound the run is
bandwidth-bound (only fewer bytes help: quantization, or speculation, which
reads the weights once for several tokens); far below it, the GPU idles between
steps (the host side: scheduling, sampling, Python) or kernels are slow. A mixture
of experts reads at batch B the union of the experts its B tokens pick (uniform
routing assumed: ``per_tok`` experts at batch 1, nearly all of them at large B),
so its bound falls with the batch where a dense model's does not."""

from __future__ import annotations

from pathlib import Path

from specrig.host.bandwidth import gpu_bandwidth, measure_host_copy_gb_s
from specrig.host.machine import Host
from specrig.lab.results import Measurement, Roofline, RooflineInputs
from specrig.model.weights import weight_read, weight_read_from_config
from specrig.recipe.schema import Recipe

__all__ = ["roofline_inputs", "rooflines", "reading"]


def roofline_inputs(
    recipe: Recipe, model_name: str | None, model_path: Path | None, host: Host, bandwidth_gb_s: float | None = None
) -> RooflineInputs:
    """The two figures for this run, with where each came from (None where unknown)."""
    spec = recipe.model_named(model_name)
    declared = recipe.bench.roofline
    expert_bits = spec.shape.expert_bits if spec.shape else None
    w = None
    if declared and declared.bytes_per_token_gb:
        weight_gb, kv, wsrc = declared.bytes_per_token_gb, 0.0, "recipe [bench.roofline] bytes_per_token_gb"
    else:
        if model_path is not None:
            w = weight_read(model_path, expert_bits=expert_bits)
        elif spec.shape is not None:
            w = weight_read_from_config(spec.shape.config_json(), expert_bits=expert_bits)
        weight_gb, kv, wsrc = (w.weight_gb, w.kv_bytes_per_token, w.source) if w else (None, 0.0, "unknown")
    moe = {"expert_gb": w.expert_bytes / 1e9, "routed": w.routed, "per_tok": w.per_tok} if w and w.routed else {}
    gpus = host.gpus[: max(1, spec.tensor_parallel)]
    device = "GPU" if recipe.needs_gpu else "CPU"
    if bandwidth_gb_s:
        bw, bsrc = bandwidth_gb_s, "--memory-bandwidth"
    elif declared and declared.memory_bandwidth_gb_s:
        bw, bsrc = declared.memory_bandwidth_gb_s, "recipe [bench.roofline] memory_bandwidth_gb_s"
    elif device == "GPU" and gpus:
        known = gpu_bandwidth(gpus[0].name, len(gpus))
        bw, bsrc = (known.gb_s, known.source) if known else (None, f"{gpus[0].name} is not in the bandwidth table")
    elif device == "CPU":
        m = measure_host_copy_gb_s()
        bw, bsrc = m.gb_s, m.source
    else:
        bw, bsrc = None, "no GPU seen on this host (attached to a remote server?)"
    return RooflineInputs(
        weight_gb_per_token=weight_gb,
        kv_bytes_per_token=kv,
        weights_source=wsrc,
        bandwidth_gb_s=bw,
        bandwidth_source=bsrc,
        device=device,
        **moe,
    )


def reading(fraction: float, device: str) -> str:
    if fraction >= 0.6:
        return "bandwidth-bound: only fewer bytes per token help (quantization, or speculation reading the weights once for several tokens)"
    if fraction >= 0.3:
        return "partly bandwidth-bound: kernels, launches or communication take the rest of each step"
    if device == "GPU":
        return (
            "host-bound: the GPU idles between steps (scheduling, sampling, Python), so more bandwidth would not help"
        )
    return "compute- or host-bound: the CPU does more per token than stream the weights"


def rooflines(inputs: RooflineInputs | None, baselines: list[Measurement]) -> list[Roofline]:
    """The bound at each load point of the baseline (repeats averaged), against the per-stream decode rate."""
    if inputs is None or not inputs.weight_gb_per_token or not inputs.bandwidth_gb_s:
        return []
    out = []
    for label in dict.fromkeys(m.point.label for m in baselines):
        runs = [m for m in baselines if m.point.label == label]
        rates = [m.decode_tok_s.mean for m in runs if m.decode_tok_s.mean]
        if not rates:
            continue
        point = runs[0].point
        batch = point.concurrency or max(1, round(sum(len(m.requests) for m in runs) / len(runs)))
        recs = [r for m in runs for r in m.requests]
        context = sum(r.prompt_tokens + r.completion_tokens / 2 for r in recs) / len(recs) if recs else 0.0
        kv_gb = batch * context * inputs.kv_bytes_per_token / 1e9
        weight_gb = inputs.step_gb(batch)
        bound = inputs.bandwidth_gb_s / (weight_gb + kv_gb)
        achieved = sum(rates) / len(rates)
        out.append(
            Roofline(
                bound_tok_s=bound,
                achieved_tok_s=achieved,
                config=runs[0].config,
                batch=batch,
                context_tokens=context,
                weight_gb_per_token=weight_gb,
                kv_gb_per_step=kv_gb,
                bandwidth_gb_s=inputs.bandwidth_gb_s,
                source=f"weights: {inputs.weights_source}; bandwidth: {inputs.bandwidth_source}",
                reading=(
                    "above this bound: the batch read fewer experts than uniform routing picks (a dummy-weight "
                    "router scores every expert alike, so its tokens pick the same few); a trained model's "
                    "balanced routing reads nearer the bound"
                    if inputs.routed and batch > 1 and achieved > bound
                    else reading(achieved / bound, inputs.device)
                ),
            )
        )
    return out
