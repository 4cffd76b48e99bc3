"""A real EAGLE-3 drafter for the recipe's target, trained in miniature on this
host (``specrig drafter`` / ``nox -s drafter``).

Stages, each cached under the content hash of its inputs (see :mod:`.pipeline`):
prompts (ShareGPT, train split; held-out prompts from the bench's held-out
split) -> generate (the target's own greedy answers through the real vLLM
server) -> hidden (aux-layer and last-layer hidden states with transformers,
in vLLM's serving convention) -> train (specrig's small EAGLE-3 trainer in the
recipe's ``train`` environment) -> export (the folder vLLM loads, plus a
shifted-layer twin for the layer-convention experiment) -> evaluate (offline
teacher-forced acceptance on held-out hidden states).
"""

from specrig.drafter.settings import DrafterSettings

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = ("core", "recipe", "host", "lock", "env", "model", "engine", "serve", "specdec")

__all__ = ["DrafterSettings"]
