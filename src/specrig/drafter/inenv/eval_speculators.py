"""Offline (teacher-forced, greedy) acceptance of a drafter speculators trained, scored exactly
as eval_eagle3.py scores specrig's own: the same held-out samples, the target's features at the
drafter's aux ids, the same counting (``eagle3_model.teacher_forced_acceptance``: per position
and the engine's walk). Only the drafts differ: they come from speculators' own model
(``Eagle3DraftModel.forward``, which teacher-forces the later steps as its trainer does), so its
options (the EAGLE 3.1 norms, its vocabulary map) are read from its checkpoint, not re-made here.

usage: python eval_speculators.py TARGET_DIR CHECKPOINT_DIR HELDOUT_DIR OUT_JSON [--k 3] [--max-len 1024]
           [--bench-prompts PROMPTS_JSON --bench-answers ANSWERS_JSON]

CHECKPOINT_DIR: ``config.json`` (``speculators_model_type: eagle3``) and ``model.safetensors``, as
``speculators train`` saves an epoch. Its verifier path is replaced by TARGET_DIR. Attention runs
in eager mode (dense masks), on CUDA when there is one. Writes the same JSON as eval_eagle3.py.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from eagle3_model import load_split, pick_device, teacher_forced_acceptance
from eval_eagle3 import Target, bench_samples


def load_reference(ckpt: Path, target: Path, device: torch.device):
    """speculators' EAGLE-3 model from its checkpoint, float32, eager attention, on ``device``."""
    from speculators.models.eagle3 import Eagle3SpeculatorConfig
    from speculators.models.eagle3.core import Eagle3DraftModel

    cfg = Eagle3SpeculatorConfig.from_pretrained(str(ckpt))
    cfg.speculators_config.verifier.name_or_path = str(target)
    cfg.transformer_layer_config._attn_implementation = "eager"
    model = Eagle3DraftModel.from_pretrained(str(ckpt), config=cfg)
    return model.float().to(device).eval(), cfg


def reference_drafts(model):
    """``drafts(aux [1, T, n*H], ids [1, T], k)``: speculators' draft-vocabulary ids per step at
    every base position i (its features at i, the token at i + 1, teacher-forced after that),
    padded to T. speculators pairs them by dropping the first token (its ``shift_batch``)."""

    @torch.inference_mode()
    def run(aux: torch.Tensor, ids: torch.Tensor, k: int) -> list[torch.Tensor]:
        t = ids.shape[1]
        hs, inp = aux[:, : t - 1], ids[:, 1:]
        out = model(hidden_states=hs, input_ids=inp, document_ids=torch.zeros_like(inp), ttt_steps=k)
        return [torch.cat([d[0], d.new_zeros(1)]) for d in out]

    return run


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("target", type=Path)
    p.add_argument("checkpoint", type=Path)
    p.add_argument("heldout", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--bench-prompts", type=Path)
    p.add_argument("--bench-answers", type=Path)
    args = p.parse_args()
    t0 = time.monotonic()
    dev = pick_device()
    model, cfg = load_reference(args.checkpoint, args.target, dev)
    served = [int(x) for x in cfg.eagle_aux_hidden_state_layer_ids]
    draft_ids = torch.arange(len(model.d2t), device=dev) + model.d2t.to(dev)
    held = load_split(args.heldout)
    if not held:
        print(f"no held-out samples in {args.heldout}", file=sys.stderr)
        return 2
    target = Target(args.target, dev)
    for n, s in enumerate(held):  # the features at the ids this drafter is served with
        s["aux"], s["labels"] = target.features(s["ids"][: args.max_len], served)
        print(f"progress {n + 1} {len(held)} held-out features at aux ids {served}", flush=True)
    drafts = reference_drafts(model)
    result = teacher_forced_acceptance(model, held, None, draft_ids, args.k, args.max_len, drafts=drafts)
    result |= {"served_aux_positions": served, "trainer": "speculators"}
    if args.bench_prompts:
        spec = json.loads(args.bench_prompts.read_text())
        samples = bench_samples(target, spec, args.bench_answers, served)
        longest = max(len(s["ids"]) for s in samples)
        r = teacher_forced_acceptance(model, samples, None, draft_ids, args.k, max(args.max_len, longest), drafts)
        r |= {"dataset": spec["dataset"], "max_tokens": spec["max_tokens"], "prompts": len(samples)}
        result["bench_prompts"] = r
    result["seconds"] = time.monotonic() - t0
    args.out.write_text(json.dumps(result, indent=2))
    print(f"offline acceptance at k={args.k}: {result['acceptance_rate']:.1%} (speculators' drafter)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
