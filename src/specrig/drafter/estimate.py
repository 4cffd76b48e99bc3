"""How much disk the drafter's stages write, known before each starts (checked by
:func:`specrig.drafter.stages.run_stage` against the disk of the stages' folder).

* hidden states (``features = "stored"``): per token, the aux layers' and the last layer's
  hidden states in the features' dtype, plus the ids and labels; online, only the ids.
* training: the checkpoint between epochs (float32 weights and AdamW's two moments, and its
  temporary copy while it is written), the best weights kept and the exported safetensors."""

from __future__ import annotations

from specrig.model.estimate import eagle3_bytes

__all__ = ["hidden_bytes", "train_bytes", "DRAFTERS_FIX"]

DRAFTERS_FIX = "free some space there, or move specrig's cache to a larger disk: SPECRIG_CACHE_DIR=DIR"

_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def hidden_bytes(cfg: dict, aux: list[int], tokens: int, *, stored: bool, dtype: str = "bfloat16") -> int:
    """What the hidden-states stage writes for ``tokens`` tokens of a target of config ``cfg``."""
    per_token = 24  # ids, labels, masks
    if stored:
        per_token += (len(aux) + 1) * int(cfg["hidden_size"]) * min(_BYTES.get(dtype, 4), 2)  # shards are bf16
    return int(tokens * per_token * 1.1) + 2**20


def train_bytes(cfg: dict, draft_vocab: int) -> int:
    """What training writes: a float32 checkpoint with AdamW's state (twice while it is replaced),
    the best weights and the exported drafter."""
    weights = eagle3_bytes(cfg, draft_vocab, dtype_bytes=4)
    return 3 * weights * 2 + 2 * weights
