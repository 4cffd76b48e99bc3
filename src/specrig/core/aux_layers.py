"""Where each engine takes an EAGLE-3 drafter's features from, for the ids in its
config: the residual position p an id k names (p = the input of layer p; p = N
is the final pre-norm output). vLLM feeds the input of layer k (p = k); SGLang
captures the output of layer k (p = k + 1). One fact, used by the layer check
(:mod:`specrig.specdec.layers`) and by the drafter folder each engine is served
(:func:`specrig.model.folder.prepare_drafter`)."""

from __future__ import annotations

__all__ = ["POSITION_OFFSET", "positions_served", "ids_for"]

POSITION_OFFSET = {"vllm": 0, "sglang": 1}
"""Residual position served for aux id k: k + offset."""


def positions_served(engine: str, ids: list[int]) -> list[int]:
    off = POSITION_OFFSET[engine]
    return [k + off for k in ids]


def ids_for(engine: str, positions: list[int]) -> list[int]:
    """The ids that make ``engine`` feed exactly ``positions``."""
    off = POSITION_OFFSET[engine]
    return [p - off for p in positions]
