"""Hidden states of the target for EAGLE-3 training, in vLLM's serving convention.

usage: python hidden_states.py TARGET_DIR SAMPLES_JSONL OUT_DIR --aux 2,15,27 [--dtype float32] [--shard-tokens 65536]
                               [--features stored|online]

For every sample (prompt ids + the target's own response ids) one forward pass
with transformers gives, per token position:
  aux    [T, n, H]  HF hidden_states[k] for each aux id k: the residual stream
                    ENTERING decoder layer k, which is what vLLM feeds an EAGLE-3
                    drafter for ``eagle_aux_hidden_state_layer_ids`` = k
  last   [T, H]     the last decoder layer's output BEFORE the final norm (a
                    forward hook; HF's hidden_states[L] is already normed)
  labels [T]        the target's greedy next token at each position
Written to OUT_DIR/<split>/shard_NNNN.safetensors (bf16 features), then
OUT_DIR/stats.json. Progress lines: ``progress DONE TOTAL``.

--features online: only the token ids (and prompt lengths) are written; the
trainer computes the features on its device for every batch (a GPU recomputes
them faster than it would read ~4.6 KB a token back from disk).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("target", type=Path)
    p.add_argument("samples", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--aux", required=True)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--shard-tokens", type=int, default=65536)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--features", choices=("stored", "online"), default="stored")
    return p.parse_args()


def capture_last(model, captured: dict) -> None:
    """``captured["last"]``: the last decoder layer's output (before the final norm) of every forward."""
    layers = model.model.layers

    def hook(_mod, _inp, out):
        captured["last"] = out[0] if isinstance(out, tuple) else out

    layers[len(layers) - 1].register_forward_hook(hook)


def tokenize_references(samples: list[dict], target: Path, max_new_tokens: int) -> None:
    """Training prompts the target had no time to answer: the dataset's answer, tokenized
    (``prompt_ids``, ``output_ids``) as the engine would have."""
    tokenizer = None
    for s in samples:
        if "reference" not in s:
            continue
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(target))
        if s["format"] == "chat":
            turns = [m for h, g in s.get("context") or [] for m in (("user", h), ("assistant", g))]
            messages = [{"role": r, "content": c} for r, c in [*turns, ("user", s["prompt"])]]
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            s["prompt_ids"] = tokenizer(text, add_special_tokens=False)["input_ids"]
            answer = s["reference"]
        else:
            s["prompt_ids"] = tokenizer(s["prompt"])["input_ids"]
            answer = "\n\n" + s["reference"]
        s["output_ids"] = tokenizer(answer, add_special_tokens=False)["input_ids"][:max_new_tokens]


class Shards:
    """Per split, the samples buffered until a shard is written (``OUT/<split>/shard_NNNN.safetensors``)."""

    def __init__(self, out: Path, online: bool, save_file) -> None:
        self.out, self.online, self.save_file = out, online, save_file
        self.buffers: dict[str, dict] = {}
        self.shards: dict[str, int] = {}

    def buffer(self, split: str) -> dict:
        return self.buffers.setdefault(split, {"ids": [], "aux": [], "last": [], "labels": [], "prompt_lens": []})

    def flush(self, split: str) -> None:
        import torch

        b = self.buffers.pop(split, None)
        if not b or not b["ids"]:
            return
        n = self.shards.get(split, 0)
        self.shards[split] = n + 1
        folder = self.out / split
        folder.mkdir(parents=True, exist_ok=True)
        offsets = [0]
        for ids in b["ids"]:
            offsets.append(offsets[-1] + len(ids))
        tensors = {
            "input_ids": torch.cat(b["ids"]),
            "offsets": torch.tensor(offsets, dtype=torch.int64),
            "prompt_lens": torch.tensor(b["prompt_lens"], dtype=torch.int64),
        }
        if not self.online:
            tensors |= {"aux": torch.cat(b["aux"]), "last": torch.cat(b["last"]), "labels": torch.cat(b["labels"])}
        self.save_file(
            tensors,
            str(folder / f"shard_{n:04d}.safetensors"),
        )

    def flush_all(self) -> None:
        for split in list(self.buffers):
            self.flush(split)


def record_features(model, captured: dict, aux_ids: list[int], s: dict, ids, b: dict, stats: dict) -> None:
    """One forward of the target over a sample: its aux features, last hidden state and greedy
    labels into the buffer, and how often those labels agree with the engine's answer."""
    import torch

    out = model(input_ids=ids, output_hidden_states=True)
    hs = out.hidden_states
    labels = out.logits[0].argmax(-1)
    b["aux"].append(torch.stack([hs[k][0] for k in aux_ids], dim=1).to(torch.bfloat16))
    b["last"].append(captured["last"][0].to(torch.bfloat16))
    b["labels"].append(labels)
    # does HF's greedy choice agree with the tokens the engine generated?
    pl, resp = len(s["prompt_ids"]), ids[0, len(s["prompt_ids"]) :]
    if len(resp) > 1 and "reference" not in s:
        agree = (labels[pl - 1 : -1] == resp).sum().item()
        stats["label_agrees_with_engine"][0] += int(agree)
        stats["label_agrees_with_engine"][1] += len(resp)


def count_sample(stats: dict, s: dict, n_tokens: int) -> None:
    stats["tokens"][s["split"]] = stats["tokens"].get(s["split"], 0) + n_tokens
    if "reference" in s:
        stats["reference_tokens"] = stats.get("reference_tokens", 0) + n_tokens
    stats["samples"][s["split"]] = stats["samples"].get(s["split"], 0) + 1


def process(
    samples: list[dict], total: int, model, captured: dict, aux_ids: list[int], shards: Shards, args, stats: dict
) -> int:
    """Every sample into its split's shards (with its features unless online); the tokens done."""
    import torch

    done = 0
    with torch.inference_mode():
        for s in samples:
            ids = torch.tensor([s["prompt_ids"] + s["output_ids"]], dtype=torch.int64)
            b = shards.buffer(s["split"])
            b["ids"].append(ids[0])
            b["prompt_lens"].append(len(s["prompt_ids"]))
            if model is not None:
                record_features(model, captured, aux_ids, s, ids, b, stats)
            count_sample(stats, s, ids.shape[1])
            if sum(len(x) for x in b["ids"]) >= args.shard_tokens:
                shards.flush(s["split"])
            done += ids.shape[1]
            print(f"progress {done} {total}", flush=True)
    return done


def finish(stats: dict, args, aux_ids: list[int], done: int, t0: float) -> None:
    """OUT/stats.json, and the closing line."""
    a, n = stats["label_agrees_with_engine"]
    stats["label_agreement"] = a / n if n else None
    stats["seconds"] = time.monotonic() - t0
    stats["aux_ids"] = aux_ids
    stats["dtype"] = args.dtype
    stats["features"] = args.features
    (args.out / "stats.json").write_text(json.dumps(stats, indent=2))
    if args.features == "online":
        print(f"token ids: {done} tokens of {sum(stats['samples'].values())} samples (features: online)", flush=True)
    else:
        print(
            f"hidden states: {done} tokens in {stats['seconds']:.0f} s; HF agrees with the engine on "
            f"{stats['label_agreement'] or 0:.1%} of response tokens",
            flush=True,
        )


def main() -> int:
    args = parse_args()
    online = args.features == "online"

    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    if args.threads:
        torch.set_num_threads(args.threads)
    aux_ids = [int(k) for k in args.aux.split(",")]
    captured = {}
    model = None
    if not online:
        model = AutoModelForCausalLM.from_pretrained(str(args.target), dtype=getattr(torch, args.dtype))
        model.eval()
        capture_last(model, captured)
    samples = [json.loads(line) for line in args.samples.read_text().splitlines() if line.strip()]
    tokenize_references(samples, args.target, args.max_new_tokens)
    total = sum(len(s["prompt_ids"]) + len(s["output_ids"]) for s in samples)
    shards = Shards(args.out, online, save_file)
    stats = {"tokens": {}, "samples": {}, "label_agrees_with_engine": [0, 0]}
    t0 = time.monotonic()
    done = process(samples, total, model, captured, aux_ids, shards, args, stats)
    shards.flush_all()
    finish(stats, args, aux_ids, done, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
