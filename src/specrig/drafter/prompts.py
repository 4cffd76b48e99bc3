"""The drafter's prompts: ShareGPT first turns from the ``train`` split for
training and from the ``heldout`` split (the split the bench samples) for the
offline acceptance, so no held-out prompt is ever trained on.

Half of the prompts are sent through the chat template and half as raw text
(the way the bench's ``/v1/completions`` workload sends them), so the drafter
sees both kinds of context. The choice is a hash of the prompt id: stable."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from specrig.core import atomic
from specrig.drafter.settings import DrafterSettings
from specrig.model.datasets import load_sharegpt

__all__ = ["DrafterPrompt", "select_prompts", "write_prompts", "read_prompts"]


@dataclass(frozen=True)
class DrafterPrompt:
    id: str
    split: Literal["train", "heldout"]
    format: Literal["chat", "raw"]
    text: str
    reference: str = ""
    """The dataset's own answer (used only when the target had no time to answer)."""


def _format(pid: str) -> Literal["chat", "raw"]:
    return "chat" if int(hashlib.sha256(pid.encode()).hexdigest()[:8], 16) % 2 == 0 else "raw"


def select_prompts(s: DrafterSettings, sharegpt: Path | None = None) -> list[DrafterPrompt]:
    out = []
    for split, n in (("train", s.samples), ("heldout", s.heldout)):
        for p in load_sharegpt(n, seed=s.seed, split=split, max_prompt_chars=s.max_prompt_chars, path=sharegpt):  # type: ignore[arg-type]
            out.append(DrafterPrompt(p.id, split, _format(p.id), p.text, p.reference or ""))  # type: ignore[arg-type]
    return out


def write_prompts(prompts: list[DrafterPrompt], path: Path) -> None:
    atomic.write_text(path, "".join(json.dumps(asdict(p)) + "\n" for p in prompts))


def read_prompts(path: Path) -> list[DrafterPrompt]:
    return [DrafterPrompt(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
