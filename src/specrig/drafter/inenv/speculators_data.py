"""specrig's training data in the layout speculators' trainer reads (``speculators train
--data-path DIR``, its file backend), so both trainers learn from the same samples.

usage: python speculators_data.py TARGET_DIR HIDDEN_DIR OUT_DIR --aux 2,15,27 --vocab DRAFTER.safetensors
                                  [--limit N] [--max-len 1024] [--dtype float32]

HIDDEN_DIR is specrig's hidden stage (``train/`` and ``heldout/`` shards of token ids and prompt
lengths). Written to OUT_DIR:
  the dataset      ``datasets.save_to_disk``, torch format: ``input_ids`` (int64), ``loss_mask``
                   (int64: 1 on the target's answer, 0 on the prompt) and ``seq_len``; the first
                   N training samples (specrig's order, as ``drafter --curve`` takes them), then
                   every held-out sample, so that ``--train-data-ratio`` puts the split there
  hidden_states/   ``hs_{row}.safetensors``: ``token_ids`` (int64 [T], equal to the row's
                   input_ids) and ``hidden_states`` (bf16 [T, n+1, H]: HF hidden_states[k] for each
                   aux id k, the stream entering layer k as vLLM feeds a drafter, then the last
                   layer's output before the final norm), from one forward of the target each
  d2t-V.npy, t2d-V.npy  specrig's draft vocabulary (int64 offsets, bool mask) from ``--vocab``, so
                   both drafters draft from the same V tokens
  layout.json      rows, train rows, held-out rows, tokens, bytes and the train-data ratio
Samples are cut to ``--max-len`` tokens, as specrig's trainer cuts them. Progress lines:
``progress DONE TOTAL``. Runs in an environment with torch, transformers, safetensors, numpy and
datasets; imports from specrig only its sibling eagle3_model.py.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from eagle3_model import TargetFeatures, answer_sample, layout_arguments, load_split, pick_device, read_vocab


def rows(hidden: Path, limit: int | None, max_len: int) -> tuple[list[dict], int]:
    """The training samples (the first ``limit``), then the held-out ones; and how many train."""
    train = load_split(hidden / "train")
    train = train[:limit] if limit else train
    held = load_split(hidden / "heldout")
    out = []
    for s in train + held:
        ids, mask = answer_sample(s, max_len)
        out.append({"ids": ids, "mask": mask})
    return out, len(train)


def write_vocab(vocab: Path, out: Path) -> int:
    import numpy as np

    d2t, t2d = read_vocab(vocab)
    n = len(d2t)
    np.save(out / f"d2t-{n}.npy", d2t.numpy())
    np.save(out / f"t2d-{n}.npy", t2d.numpy())
    return n


def main() -> int:
    args = layout_arguments()

    from datasets import Dataset
    from safetensors.torch import save_file

    t0 = time.monotonic()
    aux = [int(k) for k in args.aux.split(",")]
    samples, n_train = rows(args.hidden, args.limit or None, args.max_len)
    if not n_train or len(samples) == n_train:
        print(f"{args.hidden}: {n_train} training and {len(samples) - n_train} held-out samples", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    vocab = write_vocab(args.vocab, args.out)
    target = TargetFeatures(args.target, aux, pick_device(), getattr(torch, args.dtype))
    hs_dir = args.out / "hidden_states"
    hs_dir.mkdir(exist_ok=True)
    total, done, size = sum(len(s["ids"]) for s in samples), 0, 0
    for row, s in enumerate(samples):
        feats, last, _ = target(s["ids"][None])
        stacked = torch.cat([feats[0], last[0][:, None]], dim=1).to(torch.bfloat16).cpu().contiguous()
        f = hs_dir / f"hs_{row}.safetensors"
        save_file({"hidden_states": stacked, "token_ids": s["ids"].contiguous()}, str(f))
        size += f.stat().st_size
        done += len(s["ids"])
        print(f"progress {done} {total}", flush=True)
    ds = Dataset.from_dict(
        {
            "input_ids": [s["ids"].tolist() for s in samples],
            "loss_mask": [s["mask"].tolist() for s in samples],
            "seq_len": [len(s["ids"]) for s in samples],
        }
    )
    ds.set_format("torch")
    ds.save_to_disk(str(args.out))
    layout = {
        "rows": len(samples),
        "train_rows": n_train,
        "heldout_rows": len(samples) - n_train,
        "tokens": total,
        "train_tokens": sum(len(s["ids"]) for s in samples[:n_train]),
        "answer_tokens": int(sum(int(s["mask"].sum()) for s in samples)),
        "hidden_state_bytes": size,
        "train_data_ratio": (n_train + 0.5) / len(samples),
        "draft_vocab": vocab,
        "aux": aux,
        "max_len": args.max_len,
        "seconds": time.monotonic() - t0,
    }
    (args.out / "layout.json").write_text(json.dumps(layout, indent=2))
    print(
        f"speculators layout: {len(samples)} rows ({n_train} train), {total} tokens, "
        f"{size / 1e9:.2f} GB of hidden states in {layout['seconds']:.0f} s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
