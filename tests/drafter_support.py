"""What the drafter tests that run the trainer's in-env scripts share: the script that writes
their samples in the layout ``hidden_states.py`` reads (run in an environment with transformers),
running code and in-env scripts offline in an environment's Python, and the reference trainers'
common inputs (samples, their token ids, a vocabulary map)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

SAMPLES = r"""
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
pairs, heldout_from = json.loads(sys.argv[2]), int(sys.argv[3])
for n, (q, a) in enumerate(pairs):
    split = "heldout" if n >= heldout_from else "train"
    print(json.dumps({"id": f"s{n}", "split": split, "format": "raw",
                      "prompt_ids": tok(q)["input_ids"], "output_ids": tok(" " + a, add_special_tokens=False)["input_ids"]}))
"""
"""usage: python -c SAMPLES MODEL_DIR PAIRS_JSON HELDOUT_FROM: one JSON line per (question, answer)
pair, the pairs from index HELDOUT_FROM on in the held-out split."""

INENV = Path(__file__).resolve().parents[1] / "src" / "specrig" / "drafter" / "inenv"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def py(python: str, code: str, *args: str, timeout: float = 600) -> str:
    import os

    proc = subprocess.run(
        [python, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=os.environ | ENV
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc.stdout


def script(python: str, name: str, *args: str, timeout: float = 900) -> str:
    import os

    cmd = [python, str(INENV / name), *args] if name.endswith(".py") else [python, "-m", name, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ | ENV)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc.stdout


PAIRS = [
    (
        "Write a story about a lighthouse keeper.",
        "The keeper climbed the stairs every night to light the lamp for the ships.",
    ),
    (
        "Explain photosynthesis briefly.",
        "Plants turn light, water and carbon dioxide into sugar and oxygen in their leaves.",
    ),
    ("What is a prime number?", "A prime number has exactly two divisors: one and itself, like 2, 3, 5 and 7."),
    ("Give me a recipe for tea.", "Boil water, pour it over the leaves, wait three minutes and strain the cup."),
    ("Name three rivers.", "The Nile, the Amazon and the Danube are three of the longest rivers on Earth."),
    ("Why is the sky blue?", "Air scatters short blue wavelengths of sunlight more than the longer red ones."),
    ("Summarise the water cycle.", "Water evaporates, condenses into clouds, falls as rain and flows back to the sea."),
    ("How do magnets work?", "Aligned electron spins in iron make a field that pulls on other magnetic metals."),
    ("Tell me about owls.", "Owls hunt at night with silent wings, sharp hearing and eyes that see in dim light."),
]

VOCAB_FILE = r"""
import sys, torch
from safetensors.torch import save_file
n, v = int(sys.argv[2]), int(sys.argv[3])
t2d = torch.zeros(v, dtype=torch.bool); t2d[:n] = True
save_file({"d2t": torch.zeros(n, dtype=torch.int64), "t2d": t2d}, sys.argv[1])
"""


def reference_inputs(python: str, model: Path, d: Path, vocab: int) -> None:
    """In ``d``: nine question/answer pairs (six train, three held out) as ``samples.jsonl``, their
    token ids as ``hidden/`` (``hidden_states.py --features online``) and a ``vocab``-token map of
    the first ids as ``vocab.safetensors``."""
    (d / "samples.jsonl").write_text(py(python, SAMPLES, str(model), json.dumps(PAIRS), "6"))
    args = [str(model), str(d / "samples.jsonl"), str(d / "hidden"), "--aux", "2,15,27", "--features", "online"]
    script(python, "hidden_states.py", *args)
    py(python, VOCAB_FILE, str(d / "vocab.safetensors"), str(vocab), "49152")
