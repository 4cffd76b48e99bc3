"""The one prompt type every workload is made of, and the one rule for cycling a
prompt set to a longer one. Plain data: datasets make prompts, the client sends
them, the lab records what each asked for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

__all__ = ["Prompt", "cycle_prompts"]


@dataclass(frozen=True)
class Prompt:
    """One request of a workload.

    ``output_len``: how many tokens this prompt asks for (None: the run's
    ``--max-tokens``). ``reference``: the dataset's own answer (ShareGPT's
    first GPT turn), if any. ``input_ids``: the text as the chat template renders
    it, in the served model's tokens, where a chat workload goes to an endpoint
    that takes token ids (SGLang's ``/generate``)."""

    id: str
    text: str
    output_len: int | None = None
    reference: str | None = None
    input_ids: tuple[int, ...] | None = None


def cycle_prompts(prompts: Sequence[Prompt], n: int) -> list[Prompt]:
    """``prompts`` repeated in order to ``n`` (at least one pass; ids stay unique:
    the second pass's ``a`` is ``a#1``). Used wherever a run needs more requests
    than its prompt set has (warm-up, concurrency above the set's size)."""
    if not prompts:
        return []
    out = []
    for i in range(max(n, len(prompts))):
        p = prompts[i % len(prompts)]
        rnd = i // len(prompts)
        out.append(p if rnd == 0 else replace(p, id=f"{p.id}#{rnd}"))
    return out
