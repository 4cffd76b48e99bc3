"""The target's own logits where a speculative run's greedy output left the baseline's.

usage: python target_margins.py MODEL_DIR IN_JSON OUT_JSON

IN_JSON: {"contexts": [{"key": str, "prompt": str, "chat": bool, "prefix": [int, ...], "tokens": [int, ...]}]}
Each context is a raw prompt (tokenized as vLLM tokenizes a /v1/completions prompt:
``tokenizer(text)["input_ids"]``), or with ``chat`` one user message (rendered by the model's
chat template with the generation prompt, then tokenized without special tokens, as vLLM's
/v1/chat/completions does), followed by the baseline's output tokens before the
first diverging position. The model (a Hugging Face folder) runs once over each, in
float32 (on CUDA when available, else on the CPU), and the logits for the next token
are read: the top two tokens and, for each token asked for, its logit and rank
(1 = the target's own greedy choice; ties count in the token's favour).

OUT_JSON: {"device", "dtype", "model", "contexts": {KEY: {"prompt_tokens", "positions",
"top": [[id, logit, text], [id, logit, text]], "tokens": {"ID": {"logit", "rank", "text"}}}}}

Prints ``progress DONE TOTAL`` lines. Runs with an engine environment's Python (torch and
transformers): imports nothing from specrig.
"""

import json
import sys
import time

import torch


def main(model_dir: str, in_json: str, out_json: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with open(in_json) as f:
        contexts = json.load(f)["contexts"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.monotonic()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device).eval()
    print(f"target loaded in float32 on {device} in {time.monotonic() - t0:.1f} s", flush=True)
    out = {}
    with torch.inference_mode():
        for n, c in enumerate(contexts, 1):
            if c.get("chat"):
                messages = [{"role": "user", "content": c["prompt"]}]
                text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
                prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
            else:
                prompt = tokenizer(c["prompt"])["input_ids"]
            ids = torch.tensor([list(prompt) + [int(t) for t in c["prefix"]]], device=device)
            logits = model(input_ids=ids).logits[0, -1].float()
            top = torch.topk(logits, 2)
            tokens = {}
            for t in dict.fromkeys(int(t) for t in c["tokens"]):
                value = logits[t]
                tokens[str(t)] = {
                    "logit": float(value),
                    "rank": 1 + int((logits > value).sum()),
                    "text": tokenizer.decode([t]),
                }
            out[c["key"]] = {
                "prompt_tokens": len(prompt),
                "positions": int(ids.shape[1]),
                "top": [
                    [int(i), float(v), tokenizer.decode([int(i)])] for v, i in zip(top.values, top.indices, strict=True)
                ],
                "tokens": tokens,
            }
            print(f"progress {n} {len(contexts)} diverging positions", flush=True)
    result = {"device": device, "dtype": "float32", "model": model_dir, "contexts": out}
    with open(out_json, "w") as f:
        f.write(json.dumps(result, indent=2))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
