"""The drafter's prompts: ShareGPT first turns from the ``train`` split for
training and from the ``heldout`` split (the split the bench samples) for the
offline acceptance, so no held-out prompt is ever trained on.

Half of the first-turn prompts are sent through the chat template and half as
raw text (the way the bench's ``/v1/completions`` workload sends them), so the
drafter sees both kinds of context; later turns (``turns = "all"``) go through
the chat template with the conversation before them. A share of the training
prompts (``bench_shaped``) is answered exactly as the bench asks: raw text,
greedy, EOS ignored, the bench's length. Every choice is a hash of the prompt
id: stable across runs and sizes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from specrig.core import atomic
from specrig.drafter.settings import DrafterSettings
from specrig.model.datasets import load_sharegpt, load_sharegpt_turns

__all__ = ["DrafterPrompt", "select_prompts", "write_prompts", "read_prompts"]


Format = Literal["chat", "raw", "bench"]


@dataclass(frozen=True)
class DrafterPrompt:
    id: str
    split: Literal["train", "heldout"]
    format: Format
    """chat: the chat template; raw: plain text to /v1/completions; bench: raw text
    answered the bench's way (EOS ignored, the bench's length)."""
    text: str
    reference: str = ""
    """The dataset's own answer (used only when the target had no time to answer)."""
    context: tuple[tuple[str, str], ...] = ()
    """Earlier (human, gpt) exchanges of the conversation (chat format only)."""

    def messages(self) -> list[dict[str, str]]:
        """The chat messages of a chat-format prompt: the context, then this turn."""
        turns = [m for h, g in self.context for m in (("user", h), ("assistant", g))]
        return [{"role": r, "content": c} for r, c in [*turns, ("user", self.text)]]


def _unit(pid: str, salt: str) -> float:
    return int(hashlib.sha256(f"{salt}:{pid}".encode()).hexdigest()[:8], 16) / 2**32


def _format(pid: str) -> Literal["chat", "raw"]:
    return "chat" if int(hashlib.sha256(pid.encode()).hexdigest()[:8], 16) % 2 == 0 else "raw"


def select_prompts(s: DrafterSettings, sharegpt: Path | None = None) -> list[DrafterPrompt]:
    out = []
    for split, n in (("train", s.samples), ("heldout", s.heldout)):
        if s.turns == "all":
            for t in load_sharegpt_turns(n, seed=s.seed, split=split, max_chars=s.max_prompt_chars, path=sharegpt):  # type: ignore[arg-type]
                fmt: Format = "chat" if t.context else _format(t.id)
                if split == "train" and not t.context and _unit(t.id, "bench") < s.bench_shaped:
                    fmt = "bench"
                out.append(DrafterPrompt(t.id, split, fmt, t.human, t.gpt, t.context))  # type: ignore[arg-type]
            continue
        for p in load_sharegpt(n, seed=s.seed, split=split, max_prompt_chars=s.max_prompt_chars, path=sharegpt):  # type: ignore[arg-type]
            fmt = _format(p.id)
            if split == "train" and _unit(p.id, "bench") < s.bench_shaped:
                fmt = "bench"
            out.append(DrafterPrompt(p.id, split, fmt, p.text, p.reference or ""))  # type: ignore[arg-type]
    return out


def write_prompts(prompts: list[DrafterPrompt], path: Path) -> None:
    atomic.write_text(path, "".join(json.dumps(asdict(p)) + "\n" for p in prompts))


def read_prompts(path: Path) -> list[DrafterPrompt]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            d["context"] = tuple(tuple(x) for x in d.get("context") or ())
            out.append(DrafterPrompt(**d))
    return out
