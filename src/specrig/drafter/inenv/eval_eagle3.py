"""Offline (teacher-forced, greedy) acceptance of an EAGLE-3 drafter on
held-out hidden states: no server.

usage: python eval_eagle3.py TARGET_DIR DRAFTER_DIR HELDOUT_DIR OUT_JSON [--k 3] [--max-len 1024]

Prints one JSON document (also written to OUT_JSON): acceptance_rate,
per_position, mean_acceptance_length, k, held_out_tokens, step_accuracy.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from eagle3_model import Eagle3Draft, load_split, target_config, target_head, teacher_forced_acceptance
from torch import nn


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("target", type=Path)
    p.add_argument("drafter", type=Path)
    p.add_argument("heldout", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from safetensors.torch import load_file

    t0 = time.monotonic()
    tensors = load_file(str(args.drafter / "model.safetensors"))
    dcfg = json.loads((args.drafter / "config.json").read_text())
    n_aux = tensors["fc.weight"].shape[1] // dcfg["hidden_size"]
    v = tensors["lm_head.weight"].shape[0]
    cfg = target_config(args.target) | {"num_aux": n_aux, "draft_vocab_size": v}
    model = Eagle3Draft(cfg)
    model.load_export(tensors)
    draft_ids = torch.arange(v) + tensors["d2t"]
    embed_w, _, _ = target_head(args.target)
    embed = nn.Embedding.from_pretrained(embed_w, freeze=True)
    held = load_split(args.heldout)
    if not held:
        print(f"no held-out samples in {args.heldout}", file=sys.stderr)
        return 2
    result = teacher_forced_acceptance(model, held, embed, draft_ids, args.k, args.max_len)
    result["seconds"] = time.monotonic() - t0
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
