"""What the drafter tests that run the trainer's in-env scripts share: the script that writes
their samples in the layout ``hidden_states.py`` reads (run in an environment with transformers)."""

from __future__ import annotations

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
