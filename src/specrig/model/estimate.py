"""How much disk the model room's cache entries take, known before they are made, so that
the space is checked before a conversion or a generation starts (:mod:`specrig.core.space`).

* A GGUF converted to a Hugging Face folder: every tensor of the GGUF (its header lists each
  one's shape; no tensor data is read) in the recipe's dtype, plus the tokenizer files. A
  quantized GGUF (Q4_1: about 0.6 bytes a weight) becomes 2 bytes a weight in bfloat16.
* A random EAGLE-3 drafter for a target: one decoder layer of the target's shape, the fusion
  layer and the draft vocabulary's head, from the target's config.json.

Each figure is rounded up (an estimate that is short lets the child meet the full disk, which
is then named too, :func:`specrig.core.space.full_disk_error`)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

__all__ = ["gguf_elements", "conversion_bytes", "eagle3_bytes", "TOKENIZER_BYTES"]

TOKENIZER_BYTES = 32 * 2**20
"""Room for the tokenizer files and config a converted folder holds besides its weights."""

_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

# GGUF metadata value types: fixed sizes by type id (8: string, 9: array)
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _u(f: BinaryIO, fmt: str) -> int:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("the GGUF header ends early")
    return struct.unpack(fmt, data)[0]


def _skip_value(f: BinaryIO, kind: int) -> None:
    if kind in _FIXED:
        f.seek(_FIXED[kind], 1)
    elif kind == 8:
        f.seek(_u(f, "<Q"), 1)
    elif kind == 9:
        inner, count = _u(f, "<I"), _u(f, "<Q")
        if inner in _FIXED:
            f.seek(_FIXED[inner] * count, 1)
        else:
            for _ in range(count):
                _skip_value(f, inner)
    else:
        raise ValueError(f"unknown GGUF metadata type {kind}")


def gguf_elements(path: Path) -> int:
    """The number of weights in a GGUF file (the sum over its tensors of their shapes' products),
    read from its header (GGUF v2/v3); ValueError for a file that is not one."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version = _u(f, "<I")
        if version < 2:
            raise ValueError(f"GGUF version {version} is not read here")
        tensors, kvs = _u(f, "<Q"), _u(f, "<Q")
        for _ in range(kvs):
            f.seek(_u(f, "<Q"), 1)  # the key
            _skip_value(f, _u(f, "<I"))
        total = 0
        for _ in range(tensors):
            f.seek(_u(f, "<Q"), 1)  # the name
            n = 1
            for _ in range(_u(f, "<I")):
                n *= _u(f, "<Q")
            f.seek(4 + 8, 1)  # type, offset
            total += n
        return total


def conversion_bytes(gguf: Path, dtype: str) -> int:
    """What converting ``gguf`` to a Hugging Face folder in ``dtype`` writes (about)."""
    try:
        weights = gguf_elements(gguf) * _DTYPE_BYTES.get(dtype, 4)
    except (OSError, ValueError):  # unreadable: as big as float32 of a file of ~0.5 bytes a weight
        weights = gguf.stat().st_size * 8
    return int(weights * 1.05) + TOKENIZER_BYTES


def eagle3_bytes(cfg: dict, draft_vocab: int = 8192, dtype_bytes: int = 2) -> int:
    """What a random EAGLE-3 drafter for the target of config ``cfg`` writes (about): one layer of
    the target's shape on doubled inputs, the 3-to-1 fusion, the draft head and the vocabulary maps."""
    hidden, inter = int(cfg["hidden_size"]), int(cfg["intermediate_size"])
    heads = int(cfg["num_attention_heads"])
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    vocab = int(cfg["vocab_size"])
    draft_vocab = min(draft_vocab, vocab)
    attention = (heads + 2 * kv_heads) * head_dim * 2 * hidden + hidden * heads * head_dim
    weights = attention + 3 * inter * hidden + 3 * hidden * hidden + draft_vocab * hidden + 4 * hidden
    maps = draft_vocab * 8 + vocab
    return int((weights * dtype_bytes + maps) * 1.05) + 2**20
