"""A one-layer EAGLE-3 drafter in plain torch, written to compute exactly what
vLLM's ``Eagle3LlamaForCausalLM`` (vllm/model_executor/models/llama_eagle3.py,
default options) computes when it serves the drafter, plus the training-time
test (TTT) unroll that trains the later draft positions.

Runs inside the recipe's ``train`` environment (torch, safetensors only); the
specrig package is not importable here.

Serving math per draft step (hidden size H, n aux layers):
  x      = fc(cat(aux_1..aux_n))       step 0: the target's features at position i
         = prenorm output of step j-1  step j > 0
  e      = embed(token)                 the target's (shared, frozen) embedding
  h      = cat(input_layernorm(e), hidden_norm(x))       [2H]
  r      = x + o_proj(attention(h))                      residual is x itself
  y      = r + mlp(post_attention_layernorm(r))          prenorm output (next step's x)
  logits = lm_head(norm(y))                              over the draft vocabulary
With the EAGLE 3.1 options (``norms`` eagle3.1 in specrig's settings; speculators' defaults,
each a config key vLLM reads): ``norm_before_fc`` normalises cat(aux) over all n*H before fc
(``input_norm``), ``norm_before_residual`` makes the residual hidden_norm(x) instead of x, and
``norm_output`` feeds the next step norm(y) instead of y (the logits are lm_head(norm(y)) either way).
At step j the query at base position i sits at rotary position i + j and sees
the step-0 keys of positions <= i plus its own keys of steps 1..j at i, which is
what vLLM's KV cache holds when it drafts from position i.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

NORM_OPTIONS = ("norm_before_fc", "norm_before_residual", "norm_output")
NORMS = {"eagle3": dict.fromkeys(NORM_OPTIONS, False), "eagle3.1": dict.fromkeys(NORM_OPTIONS, True)}
"""specrig's ``norms`` setting as the config keys vLLM's llama_eagle3 (and speculators) read."""


def norm_options(cfg: dict) -> dict:
    """The EAGLE 3.1 options a drafter's config.json sets (absent: off, as vLLM reads them)."""
    return {k: bool(cfg.get(k, False)) for k in NORM_OPTIONS}


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * x).to(dtype)


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim))
    freqs = positions.float()[..., None] * inv  # [..., T, hd/2]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rot * sin


class Eagle3Draft(nn.Module):
    def __init__(self, cfg: dict) -> None:
        super().__init__()
        h, inter = cfg["hidden_size"], cfg["intermediate_size"]
        self.heads, self.kv_heads, self.head_dim = (
            cfg["num_attention_heads"],
            cfg["num_key_value_heads"],
            cfg["head_dim"],
        )
        self.theta = float(cfg["rope_theta"])
        eps = cfg["rms_norm_eps"]
        n_aux = cfg["num_aux"]
        self.norm_before_fc, self.norm_before_residual, self.norm_output = (bool(cfg.get(k)) for k in NORM_OPTIONS)
        if self.norm_before_fc:
            self.input_norm = RMSNorm(n_aux * h, eps)
        self.fc = nn.Linear(n_aux * h, h, bias=False)
        self.input_layernorm = RMSNorm(h, eps)
        self.hidden_norm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.q_proj = nn.Linear(2 * h, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * h, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * h, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=False)
        self.gate_proj = nn.Linear(h, inter, bias=False)
        self.up_proj = nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)
        self.norm = RMSNorm(h, eps)
        self.lm_head = nn.Linear(h, cfg["draft_vocab_size"], bias=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)

    # vLLM checkpoint names (llama_eagle3 renames midlayer. -> layers.0.)
    NAMES = {
        "input_norm": "input_norm",
        "fc": "fc",
        "norm": "norm",
        "lm_head": "lm_head",
        "input_layernorm": "midlayer.input_layernorm",
        "hidden_norm": "midlayer.hidden_norm",
        "post_attention_layernorm": "midlayer.post_attention_layernorm",
        "q_proj": "midlayer.self_attn.q_proj",
        "k_proj": "midlayer.self_attn.k_proj",
        "v_proj": "midlayer.self_attn.v_proj",
        "o_proj": "midlayer.self_attn.o_proj",
        "gate_proj": "midlayer.mlp.gate_proj",
        "up_proj": "midlayer.mlp.up_proj",
        "down_proj": "midlayer.mlp.down_proj",
    }

    def export_state(self) -> dict[str, torch.Tensor]:
        out = {}
        for name, t in self.state_dict().items():
            mod, _, leaf = name.partition(".")
            out[f"{self.NAMES[mod]}.{leaf}"] = t.detach().to(torch.bfloat16).contiguous()
        return out

    def load_export(self, tensors: dict[str, torch.Tensor]) -> None:
        back = {v: k for k, v in self.NAMES.items()}
        state = {}
        for name, t in tensors.items():
            mod, _, leaf = name.rpartition(".")
            if mod in back:
                state[f"{back[mod]}.{leaf}"] = t.float()
        self.load_state_dict(state)

    def step(
        self,
        x: torch.Tensor,
        emb: torch.Tensor,
        pos: torch.Tensor,
        cache: list[tuple[torch.Tensor, torch.Tensor]],
        pad: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One draft step over [B, T] base positions. ``cache`` holds the keys
        and values of earlier steps (step 0 first); this step's are appended.
        Returns (the next step's x: prenorm output y, or norm(y) with ``norm_output``; logits)."""
        b, t, _ = x.shape
        hx = self.hidden_norm(x)
        h = torch.cat([self.input_layernorm(emb), hx], dim=-1)
        q = self.q_proj(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = rope_tables(pos, self.head_dim, self.theta)
        cos, sin = cos[:, None], sin[:, None]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        cache.append((k, v))
        scale = 1.0 / math.sqrt(self.head_dim)
        k0, v0 = cache[0]
        s0 = (q @ k0.transpose(-1, -2)) * scale  # [B, h, T, T]: step-0 keys, causal
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        mask = causal[None, None] if pad is None else causal[None, None] & pad[:, None, None, :]
        s0 = s0.masked_fill(~mask, float("-inf"))
        diag = [((q * ks).sum(-1, keepdim=True) * scale) for ks, _ in cache[1:]]  # [B, h, T, 1] each
        scores = torch.cat([s0, *diag], dim=-1) if diag else s0
        p = scores.softmax(-1)
        out = p[..., :t] @ v0
        for j, (_, vs) in enumerate(cache[1:]):
            out = out + p[..., t + j : t + j + 1] * vs
        out = out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
        r = (hx if self.norm_before_residual else x) + self.o_proj(out)
        m = self.post_attention_layernorm(r)
        y = r + self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m))
        post = self.norm(y)
        return (post if self.norm_output else y), self.lm_head(post)

    def unroll(
        self, aux: torch.Tensor, ids: torch.Tensor, embed: nn.Embedding, steps: int, pad: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """Draft logits for steps 0..steps-1 at every base position i of
        [B, T] sequences (teacher forced: step j reads token ids[i + 1 + j]).
        Logits of step j at i predict the target's token at i + 2 + j; rows
        whose input token lies past the end are garbage and must be masked."""
        b, t = ids.shape
        x = self.fc(self.input_norm(aux) if self.norm_before_fc else aux)
        base = torch.arange(t, device=ids.device)[None].expand(b, t)
        cache: list[tuple[torch.Tensor, torch.Tensor]] = []
        out = []
        for j in range(steps):
            tok = torch.zeros_like(ids)
            tok[:, : max(t - 1 - j, 0)] = ids[:, 1 + j :]
            y, logits = self.step(x, embed(tok), base + j, cache, pad)
            out.append(logits)
            x = y
        return out


def target_config(target: Path) -> dict:
    cfg = json.loads((target / "config.json").read_text())
    heads = cfg["num_attention_heads"]
    rope = cfg.get("rope_parameters") or {}
    return {
        "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "num_attention_heads": heads,
        "num_key_value_heads": cfg.get("num_key_value_heads", heads),
        "head_dim": cfg.get("head_dim") or cfg["hidden_size"] // heads,
        "rms_norm_eps": cfg.get("rms_norm_eps", 1e-5),
        "rope_theta": cfg.get("rope_theta") or rope.get("rope_theta", 10000.0),
        "vocab_size": cfg["vocab_size"],
        "num_hidden_layers": cfg["num_hidden_layers"],
        "max_position_embeddings": cfg.get("max_position_embeddings", 2048),
        "hidden_act": cfg.get("hidden_act", "silu"),
    }


def target_head(target: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The target's input embedding, final norm weight and lm_head (tied or not)."""
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for f in sorted(target.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    embed = tensors["model.embed_tokens.weight"].float()
    norm = tensors["model.norm.weight"].float()
    head = tensors.get("lm_head.weight", tensors["model.embed_tokens.weight"]).float()
    return embed, norm, head


def load_split(folder: Path) -> list[dict[str, torch.Tensor]]:
    """The samples of one hidden-state split: per sample ``ids`` [T] and
    ``prompt_len``; with stored features also ``aux`` [T, n, H], ``last`` [T, H]
    (prenorm) and ``labels`` [T] (target argmax). A split written with online
    features (``hidden_states.py --features online``) holds token ids only: the
    trainer and the evaluation compute the features with :class:`TargetFeatures`."""
    from safetensors.torch import load_file

    samples = []
    for f in sorted(folder.glob("shard_*.safetensors")):
        d = load_file(str(f))
        off = d["offsets"].tolist()
        for n in range(len(off) - 1):
            a, b = off[n], off[n + 1]
            s = {"ids": d["input_ids"][a:b], "prompt_len": int(d["prompt_lens"][n])}
            for name in ("aux", "last", "labels"):
                if name in d:
                    s[name] = d[name][a:b]
            samples.append(s)
    return samples


def answer_sample(s: dict[str, torch.Tensor], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A sample of :func:`load_split` cut to ``max_len`` tokens, as the trainer cuts it: its ids
    (int64) and the answer's mask (int64: 1 after the prompt)."""
    ids = s["ids"][:max_len].to(torch.int64)
    mask = torch.zeros(len(ids), dtype=torch.int64)
    mask[min(s["prompt_len"], len(ids)) :] = 1
    return ids, mask


def read_vocab(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """A drafter's vocabulary map from its weights: ``d2t`` (int64 offsets), ``t2d`` (bool)."""
    from safetensors.torch import load_file

    t = load_file(str(path))
    return t["d2t"].to(torch.int64), t["t2d"].to(torch.bool)


def layout_arguments():
    """The command line of the scripts that write specrig's samples in a reference trainer's layout:
    TARGET_DIR HIDDEN_DIR OUT_DIR --aux IDS --vocab DRAFTER.safetensors [--limit] [--max-len] [--dtype]."""
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("target", type=Path)
    p.add_argument("hidden", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--aux", required=True)
    p.add_argument("--vocab", type=Path, required=True)
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--dtype", default="float32")
    return p.parse_args()


def pick_device() -> torch.device:
    """CUDA when this torch sees a GPU, else the CPU (SPECRIG_TRAIN_DEVICE overrides)."""
    import os

    want = os.environ.get("SPECRIG_TRAIN_DEVICE")
    if want:
        return torch.device(want)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class TargetFeatures:
    """The target in transformers on a device: what vLLM feeds an EAGLE-3 drafter
    for aux ids ``aux`` (HF ``hidden_states[k]``, the residual stream entering
    layer k), the last layer's output before the final norm (a forward hook), and
    the target's greedy labels. Batched over right-padded sequences."""

    def __init__(self, path: Path, aux: list[int], device: torch.device, dtype: torch.dtype) -> None:
        from transformers import AutoModelForCausalLM

        self.causal = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).to(device).eval()
        self.aux, self.device = list(aux), device
        self._last: torch.Tensor | None = None
        layers = self.causal.model.layers

        def hook(_mod, _inp, out) -> None:
            self._last = out[0] if isinstance(out, tuple) else out

        layers[len(layers) - 1].register_forward_hook(hook)

    @torch.no_grad()
    def __call__(
        self, ids: torch.Tensor, pad: torch.Tensor | None = None, *, labels: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(aux [B, T, n, H], last [B, T, H], labels [B, T] or None) for ids [B, T]."""
        ids = ids.to(self.device)
        mask = None if pad is None else pad.to(self.device).long()
        out = self.causal.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        hs = out.hidden_states
        aux = torch.stack([hs[k] for k in self.aux], dim=2)
        last = self._last
        assert last is not None
        lab = None
        if labels:
            lab = self.causal.lm_head(self.causal.model.norm(last)).argmax(-1)
        return aux, last, lab


def teacher_forced_acceptance(
    model: nn.Module,
    samples: list[dict],
    embed: nn.Embedding | None,
    d2t_ids: torch.Tensor,
    k: int,
    max_len: int,
    drafts=None,
) -> dict:
    """Greedy acceptance per draft position, teacher forced, the way vLLM counts
    it: position j is accepted when draft tokens 0..j all equal the target's
    greedy tokens. Drafting starts at every base position i whose input token
    i+1 the target generated itself (the response), with k labels left.
    ``drafts(aux [1, T, n*H], ids [1, T], k)``: another model's draft-vocabulary ids per
    step at every base position (``[T]`` each, the same convention as :meth:`Eagle3Draft.unroll`);
    None: ``model`` is an :class:`Eagle3Draft`."""
    accepted = torch.zeros(k)
    step_hits = torch.zeros(k)
    starts = 0
    hit_rows: list[torch.Tensor] = []
    dev = next(model.parameters()).device
    d2t_ids = d2t_ids.to(dev)
    model.eval()
    with torch.inference_mode():
        for s in samples:
            ids, labels = s["ids"][:max_len].to(dev), s["labels"][:max_len].to(dev)
            t = len(ids)
            lo, hi = max(s["prompt_len"] - 1, 0), t - k  # base positions: lo <= i < hi
            if hi <= lo:
                continue
            aux = s["aux"][:max_len].to(dev).reshape(t, -1)[None].float()
            if drafts is None:
                steps = [logits[0].argmax(-1) for logits in model.unroll(aux, ids[None], embed, k)]
            else:
                steps = drafts(aux, ids[None], k)
            chain = torch.ones(hi - lo, dtype=torch.bool, device=dev)
            hits = []
            for j in range(k):
                pred = d2t_ids[steps[j][lo:hi]]
                hit = pred == labels[lo + 1 + j : hi + 1 + j]
                hits.append(hit)
                step_hits[j] += int(hit.sum())
                chain &= hit
                accepted[j] += int(chain.sum())
            hit_rows.append(torch.stack(hits, dim=1).cpu())
            starts += hi - lo
    per_pos = (accepted / max(starts, 1)).tolist()
    return {
        "k": k,
        "per_position": per_pos,
        "acceptance_rate": sum(per_pos) / k,
        "mean_acceptance_length": 1.0 + sum(per_pos),
        "step_accuracy": (step_hits / max(starts, 1)).tolist(),
        "held_out_tokens": starts,
        "held_out_samples": len(samples),
        "walk": {str(kk): served_walk(hit_rows, kk) for kk in range(1, k + 1)},
    }


def served_walk(hit_rows: list[torch.Tensor], k: int) -> dict:
    """Acceptance as the engine meets it: draft k tokens at the start, accept the
    leading run of right ones, move on by that many plus the target's own token, draft
    again. The per-position figures above count every position as a start; the engine
    starts only where a verification step ended, which skips the positions inside
    accepted runs. Where right drafts come in runs (a model repeating itself), the two
    differ, and online acceptance follows this walk. ``hit_rows``: per sample, [starts, K]
    unconditional hits (draft j at start i right)."""
    accepted = [0] * k
    drafts = 0
    for rows in hit_rows:
        right = rows[:, :k].tolist()
        i = 0
        while i < len(right):
            m = 0
            while m < k and right[i][m]:
                m += 1
            for j in range(m):
                accepted[j] += 1
            drafts += 1
            i += m + 1
    per = [a / max(drafts, 1) for a in accepted]
    return {
        "per_position": per,
        "acceptance_rate": sum(per) / k,
        "mean_acceptance_length": 1 + sum(per),
        "drafts": drafts,
    }
