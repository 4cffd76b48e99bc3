"""Offline (teacher-forced, greedy) acceptance of an EAGLE-3 drafter: no server.

usage: python eval_eagle3.py TARGET_DIR DRAFTER_DIR HELDOUT_DIR OUT_JSON [--k 3] [--max-len 1024]
           [--bench-prompts PROMPTS_JSON --bench-answers ANSWERS_JSON]

Features are taken at the aux ids the drafter's config SERVES
(``eagle_aux_hidden_state_layer_ids``). When those differ from the ids it was
trained on (``specrig.trained_aux_positions``, e.g. the shifted twin), the
held-out features are recomputed from the target at the served ids, so the
figure is what vLLM would accept with that config.

--bench-prompts: {"dataset", "max_tokens", "prompts": [{"id", "text"}]}, the
bench's own workload. The target answers each raw prompt greedily for
max_tokens tokens, EOS ignored, as the bench asks vLLM to (cached in
ANSWERS_JSON); the drafter is then scored on those answers too.

Prints one JSON document (also written to OUT_JSON): acceptance_rate,
per_position, mean_acceptance_length, k, held_out_tokens, step_accuracy,
served_aux_positions, and ``bench_prompts`` (the same figures on the bench's
prompts) when asked.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from eagle3_model import (
    Eagle3Draft,
    TargetFeatures,
    load_split,
    norm_options,
    pick_device,
    target_config,
    target_head,
    teacher_forced_acceptance,
)
from torch import nn


def served_ids(dcfg: dict) -> list[int]:
    ids = dcfg.get("eagle_aux_hidden_state_layer_ids") or (dcfg.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids"
    )
    return [int(k) for k in ids]


class Target:
    """The target in transformers (float32, on CUDA when there is one): features at
    given residual positions (HF hidden_states[k], the stream entering layer k),
    greedy labels, answers."""

    def __init__(self, path: Path, device: torch.device) -> None:
        from transformers import AutoTokenizer

        self.path, self.device = path, device
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self._feats: dict[tuple[int, ...], TargetFeatures] = {}

    def _at(self, aux: list[int]) -> TargetFeatures:
        if not self._feats:
            self._feats[tuple(aux)] = TargetFeatures(self.path, aux, self.device, torch.float32)
        f = next(iter(self._feats.values()))
        f.aux = list(aux)  # one model serves every aux set
        return f

    @property
    def model(self):
        return self._at([0]).causal

    def features(self, ids: torch.Tensor, aux: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        a, _, labels = self._at(aux)(ids[None], labels=True)
        return a[0].to(torch.bfloat16), labels[0]  # stored as trained

    @torch.inference_mode()
    def answer(self, text: str, max_tokens: int) -> tuple[list[int], list[int]]:
        """Greedy, exactly max_tokens new tokens (EOS ignored, like the bench's requests)."""
        prompt = self.tokenizer(text)["input_ids"]
        ids, past, out = torch.tensor([prompt], device=self.device), None, []
        for _ in range(max_tokens):
            r = self.model(input_ids=ids, past_key_values=past, use_cache=True)
            past = r.past_key_values
            nxt = int(r.logits[0, -1].argmax())
            out.append(nxt)
            ids = torch.tensor([[nxt]], device=self.device)
        return prompt, out


def bench_samples(target: Target, spec: dict, answers: Path, aux: list[int]) -> list[dict]:
    cache = json.loads(answers.read_text()) if answers.is_file() else {}
    key = f"{spec['max_tokens']}"
    have = cache.setdefault(key, {})
    todo = [p for p in spec["prompts"] if p["text"] not in have]
    for done, p in enumerate(todo, 1):
        prompt, out = target.answer(p["text"], int(spec["max_tokens"]))
        have[p["text"]] = {"prompt_ids": prompt, "output_ids": out}
        print(f"progress {done} {len(todo)} bench answers", flush=True)
        tmp = answers.with_name(answers.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache))
        tmp.replace(answers)
    samples = []
    for p in spec["prompts"]:
        a = have[p["text"]]
        ids = torch.tensor(a["prompt_ids"] + a["output_ids"], dtype=torch.int64)
        feats, labels = target.features(ids, aux)
        samples.append({"ids": ids, "aux": feats, "labels": labels, "prompt_len": len(a["prompt_ids"])})
    return samples


def arguments(drafter: str) -> argparse.Namespace:
    """The command line both evaluation scripts take (``drafter``: the name of the drafter's folder)."""
    p = argparse.ArgumentParser()
    p.add_argument("target", type=Path)
    p.add_argument(drafter, type=Path)
    p.add_argument("heldout", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--bench-prompts", type=Path)
    p.add_argument("--bench-answers", type=Path)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    return args


def heldout_features(target: Target, held: list[dict], served: list[int], max_len: int) -> None:
    """What vLLM feeds the drafter at its served ids, computed by the target for every held-out sample."""
    for n, s in enumerate(held):
        s["aux"], s["labels"] = target.features(s["ids"][:max_len], served)
        print(f"progress {n + 1} {len(held)} held-out features at aux ids {served}", flush=True)


def score(args, model, draft_ids, served, held, target, *, embed=None, drafts=None) -> dict:
    """The figures on the held-out samples and (``--bench-prompts``) on the bench's own prompts."""
    result = teacher_forced_acceptance(model, held, embed, draft_ids, args.k, args.max_len, drafts)
    result["served_aux_positions"] = served
    if args.bench_prompts:
        spec = json.loads(args.bench_prompts.read_text())
        samples = bench_samples(target, spec, args.bench_answers, served)
        longest = max(len(s["ids"]) for s in samples)
        r = teacher_forced_acceptance(model, samples, embed, draft_ids, args.k, max(args.max_len, longest), drafts)
        r |= {"dataset": spec["dataset"], "max_tokens": spec["max_tokens"], "prompts": len(samples)}
        result["bench_prompts"] = r
    return result


def finish(args, result: dict, t0: float, label: str = "") -> int:
    """OUT_JSON and the closing line."""
    result["seconds"] = time.monotonic() - t0
    args.out.write_text(json.dumps(result, indent=2))
    line = f"offline acceptance at k={args.k}: {result['acceptance_rate']:.1%} (mean length {result['mean_acceptance_length']:.2f})"
    if "bench_prompts" in result:
        line += f"; on the bench's prompts {result['bench_prompts']['acceptance_rate']:.1%}"
    print(line + label, flush=True)
    return 0


def main() -> int:
    args = arguments("drafter")
    from safetensors.torch import load_file

    t0 = time.monotonic()
    dev = pick_device()
    tensors = load_file(str(args.drafter / "model.safetensors"))
    dcfg = json.loads((args.drafter / "config.json").read_text())
    n_aux = tensors["fc.weight"].shape[1] // dcfg["hidden_size"]
    v = tensors["lm_head.weight"].shape[0]
    cfg = target_config(args.target) | {"num_aux": n_aux, "draft_vocab_size": v} | norm_options(dcfg)
    model = Eagle3Draft(cfg)
    model.load_export(tensors)
    model.to(dev)
    draft_ids = torch.arange(v) + tensors["d2t"]
    embed_w, _, _ = target_head(args.target)
    embed = nn.Embedding.from_pretrained(embed_w, freeze=True).to(dev)
    held = load_split(args.heldout)
    if not held:
        print(f"no held-out samples in {args.heldout}", file=sys.stderr)
        return 2
    served = served_ids(dcfg)
    trained = (dcfg.get("specrig") or {}).get("trained_aux_positions") or served
    target = None
    recompute = served != list(trained) or "aux" not in held[0]  # what vLLM feeds with this config, or online features
    if recompute or args.bench_prompts:
        target = Target(args.target, dev)
    if recompute:
        heldout_features(target, held, served, args.max_len)
    return finish(args, score(args, model, draft_ids, served, held, target, embed=embed), t0)


if __name__ == "__main__":
    sys.exit(main())
