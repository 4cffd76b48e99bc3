"""Write seeded random weights for a model folder (its config.json written from a declared
shape), as safetensors shards with an index, in the layout and names of the Hugging Face
checkpoints: a Llama's, or a DeepSeek-V3's (Kimi-K2.5's text model): multi-head latent
attention, a dense MLP in the first ``first_k_dense_replace`` layers, then routed experts (INT4
``pack-quantized`` as compressed-tensors writes them when config.json carries that
``quantization_config``: int32 words of eight 4-bit values, a bf16 scale per group, the shape)
beside the shared experts and the router.

usage: python write_random.py MODEL_DIR [--seed 0] [--shard-gb 4]

The same folder is then the target and, as a draft model, its own drafter, both reading the
same bytes (an engine's dummy loader fills only floating-point tensors, so the integer experts
of two loads differ). Scales as a model is initialised: embeddings of unit scale, each
projection's weights of standard deviation 1 / sqrt(fan-in) (a quantized expert's too, once
dequantized), norms one. Prints ``progress DONE TOTAL bytes`` lines, then one line of JSON (files, bytes, seconds).
"""

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path


def _attention(cfg: dict, p: str) -> list:
    """Multi-head latent attention (DeepSeek-V3), else grouped-query attention (Llama)."""
    h, n = cfg["hidden_size"], cfg["num_attention_heads"]
    if not cfg.get("kv_lora_rank"):
        d = cfg.get("head_dim") or h // n
        kv = cfg.get("num_key_value_heads", n) * d
        return [(p + "q_proj.weight", (n * d, h)), (p + "k_proj.weight", (kv, h)), (p + "v_proj.weight", (kv, h)),
                (p + "o_proj.weight", (h, n * d))]  # fmt: skip
    nope, rope, v, kv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
    q = cfg.get("q_lora_rank")
    out = [
        (p + "q_a_proj.weight", (q, h)),
        (p + "q_a_layernorm.weight", (q,)),
        (p + "q_b_proj.weight", (n * (nope + rope), q)),
    ]
    if not q:
        out = [(p + "q_proj.weight", (n * (nope + rope), h))]
    return out + [
        (p + "kv_a_proj_with_mqa.weight", (kv + rope, h)),
        (p + "kv_a_layernorm.weight", (kv,)),
        (p + "kv_b_proj.weight", (n * (nope + v), kv)),
        (p + "o_proj.weight", (h, n * v)),
    ]


def _mlp(p: str, h: int, inter: int) -> list:
    return [
        (p + "gate_proj.weight", (inter, h)),
        (p + "up_proj.weight", (inter, h)),
        (p + "down_proj.weight", (h, inter)),
    ]


def tensors(cfg: dict) -> list:
    """Every tensor of the checkpoint: (name, shape, how it is drawn) in the order written."""
    h, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    quant = cfg.get("quantization_config")
    out = [("model.embed_tokens.weight", (cfg["vocab_size"], h))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,))]
        out += _attention(cfg, p + "self_attn.")
        if i < cfg.get("first_k_dense_replace", 0) or not cfg.get("n_routed_experts"):
            out += _mlp(p + "mlp.", h, cfg["intermediate_size"])
            continue
        experts, inter = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
        out += [(p + "mlp.gate.weight", (experts, h))]
        if cfg.get("topk_method") == "noaux_tc":
            out += [(p + "mlp.gate.e_score_correction_bias", (experts,))]
        if cfg.get("n_shared_experts"):
            out += _mlp(p + "mlp.shared_experts.", h, inter * cfg["n_shared_experts"])
        for j in range(experts):
            for name, shape in _mlp(f"{p}mlp.experts.{j}.", h, inter):
                out += _packed(name, shape, quant) if quant else [(name, shape)]
    head = [] if cfg.get("tie_word_embeddings") else [("lm_head.weight", (cfg["vocab_size"], h))]
    return out + [("model.norm.weight", (h,)), *head]


def _packed(name: str, shape: tuple, quant: dict) -> list:
    """compressed-tensors ``pack-quantized``: ``weight_packed`` int32 [out, in / (32 / bits)],
    ``weight_scale`` [out, in / group], ``weight_shape`` int32 [2]."""
    w = quant["config_groups"]["group_0"]["weights"]
    base = name.removesuffix(".weight")
    out, inn = shape
    return [
        (base + ".weight_packed", (out, inn * w["num_bits"] // 32)),
        (base + ".weight_scale", (out, inn // w["group_size"])),
        (base + ".weight_shape", (2,)),
    ]


def _draw(torch, gen, name: str, shape: tuple, cfg: dict):
    """One tensor: norms one, biases zero, int4 words uniform (every nibble -8..7), each scale so that
    a dequantized weight has the standard deviation of its unquantized peers, the rest normal."""
    if name.endswith("_layernorm.weight") or name == "model.norm.weight":
        return torch.ones(shape, dtype=torch.bfloat16)
    if name.endswith("e_score_correction_bias"):
        return torch.zeros(shape, dtype=torch.float32)
    if name.endswith(".weight_shape"):
        return torch.tensor(_unpacked_shape(name, cfg), dtype=torch.int32)
    if name.endswith(".weight_packed"):
        return torch.randint(-(2**31), 2**31 - 1, shape, generator=gen, dtype=torch.int32)
    if name.endswith(".weight_scale"):
        inn = _unpacked_shape(name, cfg)[1]
        return torch.full(shape, 1 / (math.sqrt(inn) * 4.61), dtype=torch.bfloat16)  # a nibble's std is 4.61
    std = 1.0 if name == "model.embed_tokens.weight" else 1 / math.sqrt(shape[1])
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * std).to(torch.bfloat16)


def _unpacked_shape(name: str, cfg: dict) -> list:
    h, inter = cfg["hidden_size"], cfg["moe_intermediate_size"]
    return [h, inter] if ".down_proj." in name else [inter, h]


def _nbytes(shape: tuple, name: str) -> int:
    width = 4 if name.endswith(("weight_packed", "weight_shape", "e_score_correction_bias")) else 2
    return math.prod(shape) * width


def main() -> int:
    a = argparse.ArgumentParser()
    a.add_argument("folder", type=Path)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--shard-gb", type=float, default=4.0)
    args = a.parse_args()
    import torch
    from safetensors.torch import save_file

    started = time.monotonic()
    cfg = json.loads((args.folder / "config.json").read_text())
    todo = tensors(cfg)
    total = sum(_nbytes(s, n) for n, s in todo)
    shards, shard, size = [], [], 0
    for name, shape in todo:  # shards of at most --shard-gb, in the order written
        if shard and size + _nbytes(shape, name) > args.shard_gb * 1e9:
            shards.append(shard)
            shard, size = [], 0
        shard.append((name, shape))
        size += _nbytes(shape, name)
    shards.append(shard)
    gen = torch.Generator().manual_seed(args.seed)
    index, done = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        data = {n: _draw(torch, gen, n, s, cfg) for n, s in shard}
        tmp = args.folder / (fname + ".part")
        save_file(data, str(tmp), metadata={"format": "pt"})
        os.replace(tmp, args.folder / fname)
        index |= dict.fromkeys(data, fname)
        done += sum(_nbytes(s, n) for n, s in shard)
        print(f"progress {done} {total} bytes", flush=True)
    (args.folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": index}, indent=1) + "\n"
    )
    seconds = round(time.monotonic() - started, 1)
    print(json.dumps({"files": len(shards), "bytes": total, "seconds": seconds, "seed": args.seed}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
