"""Write a tiny EAGLE-3 drafter with random weights for a Llama-architecture
target, in the layout vLLM's ``Eagle3LlamaForCausalLM`` loads.

usage: python make_eagle3.py TARGET_DIR OUT_DIR [--draft-vocab 8192] [--seed 0]

It has the correct config fields (``eagle_config.eagle_aux_hidden_state_layer_ids``,
``draft_vocab_size``, ``target_hidden_size``) and draft-vocabulary maps
(``d2t``: target_id = draft_id + d2t[draft_id]; ``t2d``: which target ids are in
the draft vocabulary). Untrained: its acceptance is expected to be ~0.
"""

import argparse
import json
import sys
from pathlib import Path


def _config(
    cfg: dict, hidden: int, inter: int, heads: int, kv_heads: int, head_dim: int, draft_vocab: int, aux: list, seed: int
) -> dict:
    """The drafter's config.json: one decoder layer of the target's shape, the aux layer ids, the draft vocabulary."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "num_hidden_layers": 1,
        "vocab_size": cfg["vocab_size"],
        "draft_vocab_size": draft_vocab,
        "target_hidden_size": hidden,
        "rms_norm_eps": cfg.get("rms_norm_eps", 1e-5),
        "rope_theta": cfg.get("rope_theta", 10000.0),
        "max_position_embeddings": cfg.get("max_position_embeddings", 2048),
        "hidden_act": cfg.get("hidden_act", "silu"),
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "eagle_aux_hidden_state_layer_ids": aux,  # top level: vLLM's V2 runner reads only this one
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True},
        "specrig": {
            "generator": "specrig random EAGLE-3 drafter",
            "seed": seed,
            "trained": False,
            "aux_layer_convention": "vllm (residual stream entering layer k)",
        },
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("target", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--draft-vocab", type=int, default=8192)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    import torch
    from safetensors.torch import save_file

    cfg = json.loads((args.target / "config.json").read_text())
    hidden, inter = cfg["hidden_size"], cfg["intermediate_size"]
    heads, kv_heads = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim") or hidden // heads
    vocab, layers = cfg["vocab_size"], cfg["num_hidden_layers"]
    draft_vocab = min(args.draft_vocab, vocab)
    aux = [2, layers // 2, layers - 3]  # vLLM's default choice for Llama targets
    if len(set(aux)) < 3 or min(aux) < 1:  # a few-layer target: three distinct layers, early, middle, late
        aux = [1, layers // 2, layers - 1]

    g = torch.Generator().manual_seed(args.seed)

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    ones = lambda n: torch.ones(n, dtype=torch.bfloat16)  # noqa: E731
    tensors = {
        "midlayer.self_attn.q_proj.weight": w(heads * head_dim, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": w(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": w(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": w(hidden, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": w(inter, hidden),
        "midlayer.mlp.up_proj.weight": w(inter, hidden),
        "midlayer.mlp.down_proj.weight": w(hidden, inter),
        "midlayer.input_layernorm.weight": ones(hidden),
        "midlayer.hidden_norm.weight": ones(hidden),
        "midlayer.post_attention_layernorm.weight": ones(hidden),
        "fc.weight": w(hidden, 3 * hidden),
        "norm.weight": ones(hidden),
        "lm_head.weight": w(draft_vocab, hidden),
    }
    # draft vocabulary = the first draft_vocab target ids (a real drafter takes the most frequent ones)
    draft_ids = torch.arange(draft_vocab)
    tensors["d2t"] = (draft_ids - torch.arange(draft_vocab)).to(torch.int64)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[draft_ids] = True
    tensors["t2d"] = t2d

    config = _config(cfg, hidden, inter, heads, kv_heads, head_dim, draft_vocab, aux, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(args.out / "model.safetensors"), metadata={"format": "pt"})
    (args.out / "config.json").write_text(json.dumps(config, indent=2))
    n = sum(t.numel() for t in tensors.values())
    print(f"wrote a random EAGLE-3 drafter: {n / 1e6:.1f} M parameters, aux layers {aux}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
