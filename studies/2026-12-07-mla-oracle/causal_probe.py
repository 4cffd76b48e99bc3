"""Is a served model's prefill causal? For each story prompt, the server's first N greedy tokens with
their logprobs, then the same sequence (prompt + those tokens) sent back as a prompt with its prompt
logprobs: a position's logprob must not depend on how many tokens follow it, so the two agree to
rounding (float32: 5 decimals). Prints one line per generated token.

usage: python causal_probe.py BASE_URL SERVED_NAME [N]   (a server with --max-logprobs 5 or more)"""

from __future__ import annotations

import sys

import httpx

from specrig.model.datasets import STORY_PROMPTS


def main() -> int:
    url, name = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    worst = 0.0
    for prompt in STORY_PROMPTS:
        ids = httpx.post(f"{url}/tokenize", json={"model": name, "prompt": prompt.text}, timeout=60).json()["tokens"]
        body = {"model": name, "prompt": ids, "max_tokens": n, "temperature": 0, "ignore_eos": True, "logprobs": 1}
        gen = httpx.post(f"{url}/v1/completions", json=body | {"return_token_ids": True}, timeout=300).json()
        out, decoded = gen["choices"][0]["token_ids"], gen["choices"][0]["logprobs"]["token_logprobs"]
        again = {"model": name, "prompt": ids + out, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 1}
        given = httpx.post(f"{url}/v1/completions", json=again, timeout=300).json()["choices"][0]["prompt_logprobs"]
        for i, (token, lp) in enumerate(zip(out, decoded, strict=True)):
            other = given[len(ids) + i][str(token)]["logprob"]
            worst = max(worst, abs(lp - other))
            print(
                f"{prompt.id} token {i}: {token} logprob {lp:.5f} generated, {other:.5f} as a prompt ({other - lp:+.5f})"
            )
    print(f"largest difference: {worst:.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
