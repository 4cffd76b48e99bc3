"""vLLM's CPU rotary-embedding kernel (``RotaryEmbedding.forward_cpu``, ``ops.rotary_embedding``) against
its PyTorch implementation (``forward_native``), on the shapes latent attention hands it: the rope part of
the query as a 3-D strided slice ``q[..., qk_nope_head_dim:]`` of [tokens, heads, nope + rope], and the
rope key as a strided slice of the latent projection; then on contiguous copies, 3-D and 2-D. Prints the
largest difference of each. Run with the cpu recipe's vLLM environment: ``ENV/bin/python rope_kernel_check.py``."""

from __future__ import annotations

import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

TOKENS, HEADS, NOPE, ROPE, LATENT = 5, 4, 64, 64, 512


def main() -> None:
    torch.manual_seed(0)
    emb = RotaryEmbedding(ROPE, ROPE, 64, 10000.0, False, torch.float32)  # DeepSeek-V3's: not neox-style
    pos = torch.arange(TOKENS)
    q = torch.randn(TOKENS, HEADS, NOPE + ROPE)
    kv = torch.randn(TOKENS, LATENT + ROPE)
    q_ref, k_ref = emb.forward_native(pos, q[..., NOPE:].contiguous(), kv[:, LATENT:].unsqueeze(1).contiguous())
    q1, kv1 = q.clone(), kv.clone()
    qo, ko = emb.forward_cpu(pos, q1[..., NOPE:], kv1[:, LATENT:].unsqueeze(1))  # as the MLA layer calls it
    print(f"strided 3-D views (as MLA gives them): query {err(qo, q_ref):.4f}, key {err(ko, k_ref):.4f}")
    qo, ko = emb.forward_cpu(pos, q[..., NOPE:].contiguous(), kv[:, LATENT:].unsqueeze(1).contiguous())
    print(f"contiguous 3-D [tokens, heads, rope]: query {err(qo, q_ref):.4f}, key {err(ko, k_ref):.4f}")
    flat = q[..., NOPE:].contiguous().reshape(TOKENS, HEADS * ROPE)
    qo, _ = emb.forward_cpu(pos, flat, kv[:, LATENT:].contiguous())
    print(
        f"contiguous 2-D [tokens, heads * rope] (a Llama's layout): query {err(qo.view(TOKENS, HEADS, ROPE), q_ref):.4f}"
    )


def err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.reshape(b.shape) - b).abs().max().item()


if __name__ == "__main__":
    with set_current_vllm_config(VllmConfig()):
        main()
