"""specrig's training samples in the layout SpecForge 0.2.0 trains on offline
(``data.hidden_states_path``), so SpecForge learns from the same samples as specrig's trainer.

usage: python specforge_data.py TARGET_DIR HIDDEN_DIR OUT_DIR --aux 2,15,27 --vocab DRAFTER.safetensors
                                [--limit N] [--max-len 1024] [--dtype float32]

HIDDEN_DIR is specrig's hidden stage (its ``train/`` shards of token ids and prompt lengths). Written
to OUT_DIR:
  features/     ``data_{row:07d}.ckpt``, one ``torch.save`` dict a sample (SpecForge sorts them by
                name): ``input_ids`` (int64 [T]), ``loss_mask`` (int64 [T]: 1 on the target's answer,
                as SpecForge's own preprocessing marks the assistant's turn), ``hidden_state``
                (bf16 [1, T, H]: the target's last hidden state after its final norm, what its head
                reads) and ``aux_hidden_state`` (bf16 [1, T, n*H]: HF hidden_states[k] for each aux
                id k, the stream entering layer k, concatenated; for 2,15,27 the outputs of layers
                1, 14 and 26, SpecForge's own capture layers for a 30-layer target)
  target/       the target's files (symbolic links) and a ``model.safetensors.index.json`` naming
                every tensor: SpecForge reads the target's output layer through an index
  vocab_mapping.pt  ``{"d2t": int64 offsets, "t2d": bool}`` from ``--vocab``
                (``model.vocab_mapping_path``), so both drafters draft from the same V tokens
  layout.json   rows, tokens, answer tokens, bytes, draft vocabulary, aux ids, seconds
The first N training samples (specrig's order, as ``drafter --curve`` takes them), cut to
``--max-len`` tokens as specrig's trainer cuts them. Progress lines: ``progress DONE TOTAL``. Runs in
an environment with torch, transformers and safetensors; imports from specrig only its sibling
eagle3_model.py.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
from eagle3_model import TargetFeatures, answer_sample, layout_arguments, load_split, pick_device, read_vocab


def target_folder(target: Path, out: Path) -> None:
    """``out``: links to the target's files, and an index of its tensors when it has none."""
    from safetensors import safe_open

    out.mkdir(parents=True, exist_ok=True)
    for f in sorted(target.iterdir()):
        if f.is_file():
            os.symlink(f.resolve(), out / f.name)
    if any(out.glob("*.index.json")):
        return
    shards = sorted(target.glob("*.safetensors"))
    weight_map = {}
    for shard in shards:
        with safe_open(str(shard), "pt") as f:
            weight_map |= dict.fromkeys(f.keys(), shard.name)
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def write_vocab(vocab: Path, out: Path) -> int:
    d2t, t2d = read_vocab(vocab)
    torch.save({"d2t": d2t, "t2d": t2d}, out / "vocab_mapping.pt")
    return len(d2t)


def main() -> int:
    args = layout_arguments()

    t0 = time.monotonic()
    aux = [int(k) for k in args.aux.split(",")]
    train = load_split(args.hidden / "train")
    train = train[: args.limit] if args.limit else train
    if not train:
        print(f"{args.hidden}: no training samples", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    vocab = write_vocab(args.vocab, args.out)
    target_folder(args.target, args.out / "target")
    target = TargetFeatures(args.target, aux, pick_device(), getattr(torch, args.dtype))
    feats_dir = args.out / "features"
    feats_dir.mkdir(exist_ok=True)
    lengths = [min(len(s["ids"]), args.max_len) for s in train]
    total, done, size, answer = sum(lengths), 0, 0, 0
    for row, s in enumerate(train):
        ids, mask = answer_sample(s, args.max_len)
        with torch.no_grad():
            feats, last, _ = target(ids[None])
            normed = target.causal.model.norm(last)
        sample = {
            "input_ids": ids.contiguous(),
            "loss_mask": mask,
            "hidden_state": normed.to(torch.bfloat16).cpu().contiguous(),
            "aux_hidden_state": feats.flatten(2).to(torch.bfloat16).cpu().contiguous(),
        }
        f = feats_dir / f"data_{row:07d}.ckpt"
        torch.save(sample, f)
        size += f.stat().st_size
        done += len(ids)
        answer += int(mask.sum())
        print(f"progress {done} {total}", flush=True)
    layout = {
        "rows": len(train),
        "tokens": total,
        "answer_tokens": answer,
        "feature_bytes": size,
        "draft_vocab": vocab,
        "aux": aux,
        "max_len": args.max_len,
        "hidden_size": int(last.shape[-1]),
        "seconds": time.monotonic() - t0,
    }
    (args.out / "layout.json").write_text(json.dumps(layout, indent=2))
    print(
        f"SpecForge layout: {len(train)} samples, {total} tokens, {size / 1e9:.2f} GB of features "
        f"in {layout['seconds']:.0f} s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
