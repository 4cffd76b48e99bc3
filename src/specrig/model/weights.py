"""How many bytes one decoded token reads: the input of the roofline.

From the served model itself: the safetensors headers when the folder has
weights (every tensor's dtype and shape, no tensor data read), else its
``config.json`` (a dummy-weight model of a declared shape). At batch 1 a decode
step streams every weight it uses once: all of a dense model's, and of a
mixture of experts only the routed experts a token picks (``num_experts_per_tok``
of ``n_routed_experts``) plus the shared ones. The input embedding is a table
look-up (one row per token), not a read of the table, unless the output head
shares it. Besides the weights, each sequence reads its KV cache: bytes per
token of context (:attr:`WeightRead.kv_bytes_per_token`), which the roofline
multiplies by the run's mean context and batch."""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["WeightRead", "weight_read", "weight_read_from_config", "distinct_experts", "DTYPE_BYTES"]

DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8": 1,
    "int8": 1,
    "int4": 0.5,
}
_EXPERT = re.compile(r"\.experts\.(\d+)\.")
_QUANT_META = (".weight_scale", ".weight_zero_point", ".weight_shape", ".weight_g_idx")
"""compressed-tensors' companions of a ``weight_packed`` tensor."""


@dataclass(frozen=True)
class WeightRead:
    """What one decoded token reads at batch 1."""

    total_params: float
    active_params: float
    """Parameters whose weights one token reads (MoE: the routed experts it picks, the shared ones, the rest)."""
    weight_bytes_per_token: float
    kv_bytes_per_token: float
    """KV cache bytes per token of context, over all layers."""
    source: str
    """Where the figures come from (safetensors headers, or config.json estimated)."""
    total_bytes: float = 0.0
    """Every weight the engine holds (its memory, not its reads)."""
    expert_bytes: float = 0.0
    """A mixture of experts: one routed expert's bytes summed over the MoE layers."""
    routed: int = 0
    per_tok: int = 0

    @property
    def weight_gb(self) -> float:
        return self.weight_bytes_per_token / 1e9

    def distinct_experts(self, batch: int) -> float:
        return distinct_experts(self.routed, self.per_tok, batch)


def distinct_experts(routed: int, per_tok: int, batch: int) -> float:
    """Routed experts one MoE layer reads for ``batch`` tokens if each token picks its ``per_tok``
    uniformly at random (what a trained model's balanced router approaches; a dummy-weight router
    sends every token to the same ones): ``per_tok`` at batch 1, towards all of them as it grows."""
    if not routed:
        return 0.0
    return routed * (1.0 - (1.0 - per_tok / routed) ** max(1, batch))


def _kv_bytes(cfg: dict[str, Any], dtype_bytes: float) -> float:
    layers = int(cfg.get("num_hidden_layers") or 0)
    if cfg.get("kv_lora_rank"):  # multi-head latent attention caches the compressed latent and the rope key
        return layers * (int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim") or 0)) * dtype_bytes
    heads = int(cfg.get("num_attention_heads") or 1)
    kv = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or (int(cfg.get("hidden_size") or 0) // heads))
    return layers * 2 * kv * head_dim * dtype_bytes


def _moe_fraction(cfg: dict[str, Any]) -> float:
    routed = int(cfg.get("n_routed_experts") or cfg.get("num_local_experts") or cfg.get("num_experts") or 0)
    per_tok = int(cfg.get("num_experts_per_tok") or 0)
    return per_tok / routed if routed and per_tok else 1.0


def weight_read_from_config(cfg: dict[str, Any], *, expert_bits: float | None = None) -> WeightRead:
    """Estimated from the architecture: Llama-style (dense) or DeepSeek-V3-style (MLA attention,
    routed + shared experts, the first ``first_k_dense_replace`` layers dense). ``expert_bits``:
    the routed experts' weight width when they are quantized (Kimi-K2.5's native INT4: 4)."""
    h = int(cfg["hidden_size"])
    layers = int(cfg["num_hidden_layers"])
    vocab = int(cfg["vocab_size"])
    heads = int(cfg["num_attention_heads"])
    dtype = DTYPE_BYTES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"), 2)
    expert_bits = expert_bits or _served_bits(cfg)
    if cfg.get("kv_lora_rank"):
        q_lora, kv_lora = int(cfg.get("q_lora_rank") or 0), int(cfg["kv_lora_rank"])
        nope, rope, v = int(cfg["qk_nope_head_dim"]), int(cfg["qk_rope_head_dim"]), int(cfg["v_head_dim"])
        q = (h * q_lora + q_lora * heads * (nope + rope)) if q_lora else h * heads * (nope + rope)
        attn = q + h * (kv_lora + rope) + kv_lora * heads * (nope + v) + heads * v * h
    else:
        kvh = int(cfg.get("num_key_value_heads") or heads)
        hd = int(cfg.get("head_dim") or h // heads)
        attn = h * heads * hd * 2 + h * kvh * hd * 2
    dense_mlp = 3 * h * int(cfg["intermediate_size"])
    routed = int(cfg.get("n_routed_experts") or 0)
    total = active = 0.0
    expert_bytes_active = one_expert = 0.0
    per_tok = moe_total = 0
    if routed:
        moe_i = int(cfg["moe_intermediate_size"])
        expert = 3 * h * moe_i
        shared = int(cfg.get("n_shared_experts") or 0) * expert
        per_tok = int(cfg["num_experts_per_tok"])
        k_dense = int(cfg.get("first_k_dense_replace") or 0)
        moe_layers = layers - k_dense
        router = h * routed
        total += k_dense * (attn + dense_mlp) + moe_layers * (attn + shared + router + routed * expert)
        active += k_dense * (attn + dense_mlp) + moe_layers * (attn + shared + router + per_tok * expert)
        width = (expert_bits / 8) if expert_bits else dtype
        one_expert = moe_layers * expert * width
        expert_bytes_active = per_tok * one_expert
        other_active = active - moe_layers * per_tok * expert
        moe_total = moe_layers * routed * expert
    else:
        total += layers * (attn + dense_mlp)
        active += layers * (attn + dense_mlp)
        other_active = active
    tied = bool(cfg.get("tie_word_embeddings"))
    emb = vocab * h
    total += emb * (1 if tied else 2)
    active += emb  # the output head reads the whole table; the input look-up reads one row
    other_active += emb
    wbytes = other_active * dtype + expert_bytes_active
    total_bytes = (total - moe_total) * dtype + routed * one_expert
    how = f"config.json ({cfg.get('model_type') or 'llama'}-style estimate" + (
        f", routed experts at {expert_bits:g} bits)" if routed and expert_bits else ")"
    )
    return WeightRead(
        total_params=total,
        active_params=active,
        weight_bytes_per_token=wbytes,
        kv_bytes_per_token=_kv_bytes(cfg, dtype),
        source=how,
        total_bytes=total_bytes,
        expert_bytes=one_expert,
        routed=routed,
        per_tok=per_tok,
    )


def _served_bits(cfg: dict[str, Any]) -> float | None:
    """The routed experts' width a compressed-tensors ``quantization_config`` serves them at."""
    q = cfg.get("quantization_config") or {}
    if q.get("quant_method") != "compressed-tensors":
        return None
    bits = {g.get("weights", {}).get("num_bits") for g in (q.get("config_groups") or {}).values()}
    return float(bits.pop()) if len(bits) == 1 and None not in bits else None


def _headers(folder: Path) -> list[dict[str, Any]]:
    out = []
    for f in sorted(folder.glob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > 100 * 2**20:
                raise ValueError(f"{f.name}: implausible safetensors header of {n} bytes")
            out.append(json.loads(fh.read(n)))
    return out


def weight_read(folder: Path | str, *, expert_bits: float | None = None) -> WeightRead | None:
    """From the folder's safetensors headers, else its config.json; None when neither is there."""
    folder = Path(folder)
    cfg_file = folder / "config.json"
    cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
    cfg = cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg
    try:
        headers = _headers(folder)
    except (OSError, ValueError, struct.error):
        headers = []
    if not headers:
        return weight_read_from_config(cfg, expert_bits=expert_bits) if cfg.get("hidden_size") else None
    frac = _moe_fraction(cfg)
    tied = bool(cfg.get("tie_word_embeddings"))
    per_word = 32 // int(_served_bits(cfg) or 4)  # a packed int32 word holds this many weights
    total = active = wbytes = allbytes = plain = plain_bytes = 0.0
    tensors = 0
    has_head = any(n.endswith("lm_head.weight") for h in headers for n in h)
    for header in headers:
        for name, t in header.items():
            if name == "__metadata__":
                continue
            tensors += 1
            n = math.prod(t["shape"])
            size = t["data_offsets"][1] - t["data_offsets"][0]
            allbytes += size
            if name.endswith(_QUANT_META):
                n = 0  # a quantized weight's scales and shape: read with it, not weights of their own
            elif name.endswith(".weight_packed"):
                n *= per_word
            else:
                plain, plain_bytes = plain + n, plain_bytes + size
            total += n
            share = frac if _EXPERT.search(name) and "shared" not in name else 1.0
            if name.endswith("embed_tokens.weight") and (has_head or not tied):
                share = 0.0  # a look-up of one row; the output head is its own tensor
            active += n * share
            wbytes += size * share
    dtype = max(1.0, round(plain_bytes / plain)) if plain else 2.0  # the unquantized tensors' width: the KV cache's
    return WeightRead(
        total_params=total,
        active_params=active,
        weight_bytes_per_token=wbytes,
        kv_bytes_per_token=_kv_bytes(cfg, dtype) if cfg else 0.0,
        source=f"safetensors headers ({tensors} tensors)",
        total_bytes=allbytes,
    )
