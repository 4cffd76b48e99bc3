"""Safetensors files written by hand (the format: 8-byte little-endian header length, a
JSON header with each tensor's dtype, shape and byte range, then the data), so tests
need neither torch nor the safetensors package; :func:`library_reads` asks the real
library in the cpu recipe's environment, where one is made, whether it reads a file."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
from array import array
from pathlib import Path

Tensor = tuple[str, list[int], bytes]

TARGET = {
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "vocab_size": 64,
    "num_hidden_layers": 30,
}
"""A tiny target's config, for drafters made by hand (hidden 8, vocabulary 64)."""

CPU_ENV_PYTHON = (
    Path(os.environ.get("SPECRIG_CACHE_DIR") or Path.home() / ".cache/specrig") / "envs/cpu-vllm/bin/python"
)


def write_safetensors(path: Path, tensors: dict[str, Tensor]) -> Path:
    header: dict = {"__metadata__": {"format": "pt"}}
    offset, blobs = 0, []
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))
    return path


def read_tensors(path: Path) -> dict[str, Tensor]:
    """Every tensor of a safetensors file, in file order."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n :]
    ordered = sorted(header.items(), key=lambda item: item[1]["data_offsets"][0])
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0] : v["data_offsets"][1]]) for k, v in ordered}


def int64s(values: list[int]) -> bytes:
    return array("q", values).tobytes()


def drafter_tensors(*, hidden: int, vocab: int, draft_vocab: int, seed: int = 0) -> dict[str, Tensor]:
    """An EAGLE-3 head's tensors in miniature: fc, lm_head (bf16 noise) and its vocabulary
    map: ``d2t`` (target id = draft id + d2t[draft id]) and ``t2d`` (which target ids it holds)."""
    rng = random.Random(seed)
    ids = sorted(rng.sample(range(vocab), draft_vocab))
    t2d = bytes(1 if i in set(ids) else 0 for i in range(vocab))
    return {
        "fc.weight": ("BF16", [hidden, 3 * hidden], rng.randbytes(2 * hidden * 3 * hidden)),
        "lm_head.weight": ("BF16", [draft_vocab, hidden], rng.randbytes(2 * draft_vocab * hidden)),
        "d2t": ("I64", [draft_vocab], int64s([t - i for i, t in enumerate(ids)])),
        "t2d": ("BOOL", [vocab], t2d),
    }


def library_reads(path: Path) -> bool | None:
    """Whether the real safetensors library opens ``path`` and reads every tensor (None: no
    environment with it on this machine)."""
    if not CPU_ENV_PYTHON.exists():
        return None
    code = (
        "import sys\nfrom safetensors import safe_open\n"
        "with safe_open(sys.argv[1], framework='pt') as f:\n    [f.get_tensor(k) for k in f.keys()]\n"
    )
    proc = subprocess.run([str(CPU_ENV_PYTHON), "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    return proc.returncode == 0
