"""Offline (teacher-forced, greedy) acceptance of a drafter speculators trained, scored exactly
as eval_eagle3.py scores specrig's own: the same held-out samples, the target's features at the
drafter's aux ids, the same counting (``eagle3_model.teacher_forced_acceptance``: per position
and the engine's walk). Only the drafts differ: they come from speculators' own model
(``Eagle3DraftModel.forward``, which teacher-forces the later steps as its trainer does), so its
options (the EAGLE 3.1 norms, its vocabulary map) are read from its checkpoint, not re-made here.

usage: python eval_speculators.py TARGET_DIR CHECKPOINT_DIR HELDOUT_DIR OUT_JSON [--k 3] [--max-len 1024]
           [--threads N] [--bench-prompts PROMPTS_JSON --bench-answers ANSWERS_JSON]

CHECKPOINT_DIR: ``config.json`` (``speculators_model_type: eagle3``) and ``model.safetensors``, as
``speculators train`` saves an epoch. Its verifier path is replaced by TARGET_DIR. Attention runs
in eager mode (dense masks), on CUDA when there is one. Writes the same JSON as eval_eagle3.py.
"""

import sys
import time
from pathlib import Path

import torch
from eagle3_model import load_split, pick_device
from eval_eagle3 import Target, arguments, finish, heldout_features, score


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
    args = arguments("checkpoint")
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
    heldout_features(target, held, served, args.max_len)  # at the ids this drafter is served with
    result = score(args, model, draft_ids, served, held, target, drafts=reference_drafts(model))
    return finish(args, result | {"trainer": "speculators"}, t0, " (speculators' drafter)")


if __name__ == "__main__":
    sys.exit(main())
