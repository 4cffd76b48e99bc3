"""The one typed model of a drafter's offline evaluation (``offline_eval.json`` in its
folder): written by ``specrig drafter`` / ``drafter-eval``, read by the drafter table, the
bench's summary and its diagnosis. A figure is read only for the very files it was computed
from (:func:`specrig.model.drafters.bound_offline_eval`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from specrig.model.drafters import OFFLINE_EVAL, bound_offline_eval

__all__ = ["OfflineEval", "offline_eval_status"]


class OfflineEval(BaseModel):
    """Teacher-forced greedy acceptance on held-out hidden states, and (``bench_prompts``) on
    the bench's own prompts."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    acceptance_rate: float
    per_position: list[float] = []
    mean_acceptance_length: float | None = None
    k: int | None = None
    held_out_tokens: int = 0
    held_out_samples: int = 0
    step_accuracy: list[float] = []
    trained_aux_positions: list[int] | None = None
    served_aux_positions: list[int] | None = None
    bench_prompts: dict[str, Any] | None = None
    walk: dict[str, dict[str, Any]] | None = None
    """Per draft length (``"1"``, ``"2"``...): the acceptance counted where the engine drafts
    (only where a verification step ends). Online acceptance follows this figure: counting
    every position overstates it where right drafts come in runs."""
    source: str = "teacher-forced greedy acceptance on held-out hidden states (specrig drafter-eval)"
    inputs: dict[str, Any] | None = None
    """What the figures were computed from (file hashes); None in files written before binding."""
    workload: str = "held-out ShareGPT"
    """Which prompts the figures above are for (set when read for a bench workload)."""
    matched: bool = False
    """True when they are the bench's own prompts (then only numerics separate it from online)."""

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude={"workload", "matched"})

    def rate_at(self, k: int) -> float:
        """The offline acceptance rate at draft length ``k`` (vLLM's accepted / drafted): as the
        engine would meet it (``walk``) when recorded, else from the per-position figures when
        they reach k, else the rate as recorded."""
        if self.walk and str(k) in self.walk:
            return float(self.walk[str(k)]["acceptance_rate"])
        if len(self.per_position) >= k:
            return sum(self.per_position[:k]) / k
        return self.acceptance_rate

    def per_position_at(self, k: int) -> list[float]:
        """Offline per-position acceptance at draft length ``k`` (the engine's walk when recorded)."""
        if self.walk and str(k) in self.walk:
            return list(self.walk[str(k)]["per_position"])
        return self.per_position[:k]

    def for_workload(self, dataset: str) -> OfflineEval:
        """The figures on the bench's own prompts when they were measured for ``dataset``."""
        b = self.bench_prompts
        if not b or b.get("dataset") != dataset or "acceptance_rate" not in b:
            return self
        return self.model_copy(
            update={
                "acceptance_rate": b["acceptance_rate"],
                "per_position": b.get("per_position", []),
                "mean_acceptance_length": b.get("mean_acceptance_length"),
                "k": b.get("k", self.k),
                "workload": f"bench prompts ({dataset} x {b.get('max_tokens')})",
                "matched": True,
                "walk": b.get("walk"),
            }
        )

    @classmethod
    def find(cls, drafter: str | Path | None, dataset: str | None = None) -> OfflineEval | None:
        """The drafter's evaluation, only for the files its folder holds now (None otherwise)."""
        if not drafter:
            return None
        found, _ = offline_eval_status(Path(drafter))
        return found.for_workload(dataset) if found and dataset else found


def offline_eval_status(drafter: Path) -> tuple[OfflineEval | None, str | None]:
    """``(the evaluation, None)`` when offline_eval.json holds for exactly the files the
    folder has now; ``(None, why)`` when it is missing, unreadable, unbound (written before
    binding) or stale (a file changed since)."""
    d, why = bound_offline_eval(Path(drafter))
    if d is None:
        return None, why
    try:
        return OfflineEval.model_validate(d), None
    except ValidationError as exc:
        return None, f"{OFFLINE_EVAL} does not fit its model ({exc.errors()[0]['msg']})"
