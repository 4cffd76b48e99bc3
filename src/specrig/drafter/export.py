"""The trained drafter as vLLM loads it, and where specrig finds it again.

Layout (the EAGLE-3 Llama format of vllm/model_executor/models/llama_eagle3.py):
``config.json`` (architecture ``LlamaForCausalLMEagle3``, the target's shapes,
``draft_vocab_size``, ``eagle_config.eagle_aux_hidden_state_layer_ids``) and
``model.safetensors`` (``midlayer.*``, ``fc``, ``norm``, ``lm_head``, ``d2t``,
``t2d``; no ``embed_tokens``: vLLM shares the target's). "eagle3" is in the folder
name, which also lets vLLM recognise the method.

``config.json``'s ``specrig.vocab_map`` records the sha256 of ``d2t`` and ``t2d`` as
exported, and ``specrig-manifest.json`` every file's size and sha256
(:mod:`specrig.model.entry`): a drafter altered later is told apart from the one
trained (:func:`specrig.model.drafters.vocab_map_problem`, ``checked_drafter``).

The shifted twin is the same weights with every aux id one lower: vLLM then
feeds each feature one layer early, which is what a drafter trained on layer
OUTPUTS (speculators < 0.5) gets from vLLM. It exists to show what that costs.

The registry: ``drafters/RECIPE/current.json`` names the last default run's
drafter, ``current-quick.json`` the last ``--quick`` one. ``@eagle3-trained``
resolves to the first, else the second (see :func:`trained_drafter`)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from specrig.core import atomic
from specrig.model.drafters import drafters_root, register, register_curve, trained_drafter, vocab_map_facts
from specrig.model.entry import write_manifest

__all__ = [
    "eagle3_shape",
    "eagle3_serving",
    "drafter_config",
    "write_drafter",
    "register",
    "register_curve",
    "trained_drafter",
    "drafters_root",
    "SHIFT",
]

SHIFT = -1


NORM_OPTIONS = ("norm_before_fc", "norm_before_residual", "norm_output")
"""The EAGLE 3.1 options vLLM's llama_eagle3 reads from the config: all on for ``norms`` eagle3.1."""


def eagle3_shape(target_cfg: dict, draft_vocab: int) -> dict:
    """The EAGLE-3 Llama draft's config for a target: one decoder layer of the target's shape,
    drafting over ``draft_vocab`` tokens (what specrig's and SpecForge's drafters share)."""
    heads = target_cfg["num_attention_heads"]
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": target_cfg["hidden_size"],
        "intermediate_size": target_cfg["intermediate_size"],
        "num_attention_heads": heads,
        "num_key_value_heads": target_cfg.get("num_key_value_heads", heads),
        "head_dim": target_cfg.get("head_dim") or target_cfg["hidden_size"] // heads,
        "num_hidden_layers": 1,
        "vocab_size": target_cfg["vocab_size"],
        "draft_vocab_size": draft_vocab,
        "rms_norm_eps": target_cfg.get("rms_norm_eps", 1e-5),
        "rope_theta": target_cfg.get("rope_theta")
        or (target_cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0),
        "max_position_embeddings": target_cfg.get("max_position_embeddings", 2048),
        "hidden_act": target_cfg.get("hidden_act", "silu"),
        "tie_word_embeddings": False,
    }


def eagle3_serving(target_hidden: int, aux: list[int], norms: str = "eagle3") -> dict:
    """What vLLM reads besides the shape: the target's hidden size, the aux ids (nested for its V1
    model runner, top level for its V2 runner, 0.2x, which reads only that one) and the EAGLE 3.1
    options (all on for ``norms`` eagle3.1, all off for plain EAGLE-3)."""
    return {
        "target_hidden_size": target_hidden,
        "eagle_aux_hidden_state_layer_ids": list(aux),
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux), "use_aux_hidden_state": True},
        **dict.fromkeys(NORM_OPTIONS, norms == "eagle3.1"),
    }


def drafter_config(
    target_cfg: dict, *, aux: list[int], draft_vocab: int, facts: dict[str, Any], norms: str = "eagle3"
) -> dict:
    return (
        eagle3_shape(target_cfg, draft_vocab)
        | eagle3_serving(target_cfg["hidden_size"], aux, norms)
        | {
            "torch_dtype": "bfloat16",
            "specrig": {
                "trained": True,
                "trainer": "specrig EAGLE-3 trainer (drafter/inenv/train_eagle3.py)",
                "trained_aux_positions": list(aux),
                "aux_layer_convention": "vllm: residual stream entering layer k (HF hidden_states[k])",
            }
            | facts,
        }
    )


def _atomic_folder(final: Path, fill: Any) -> None:
    tmp = atomic.staging_dir(final)
    try:
        fill(tmp)
        atomic.publish_dir(tmp, final, replace=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_drafter(final: Path, weights: Path, config: dict, *, shift: int = 0) -> Path:
    """Write (atomically) a drafter folder; ``shift`` moves every aux id. Its config records
    the vocabulary map the weights hold (``specrig.vocab_map``: sha256 of d2t and t2d), and
    its manifest every file's size and sha256 (checked before the folder is served again)."""
    cfg = json.loads(json.dumps(config))
    if vocab := vocab_map_facts(weights):
        cfg.setdefault("specrig", {})["vocab_map"] = vocab
    if shift:
        ids = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
        cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [k + shift for k in ids]
        cfg["eagle_aux_hidden_state_layer_ids"] = [k + shift for k in ids]  # where every runner reads them
        cfg["specrig"]["served_shift"] = shift
        cfg["specrig"]["note"] = "aux ids deliberately shifted: vLLM feeds features the drafter was not trained on"

    def fill(tmp: Path) -> None:
        try:
            os.link(weights, tmp / "model.safetensors")
        except OSError:
            shutil.copyfile(weights, tmp / "model.safetensors")
        atomic.write_text(tmp / "config.json", json.dumps(cfg, indent=2))
        write_manifest(tmp)

    _atomic_folder(final, fill)
    return final
