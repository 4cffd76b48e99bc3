"""The one typed model of a drafter's offline evaluation (``offline_eval.json`` in its
folder): written by ``specrig drafter`` / ``drafter-eval``, read by the drafter table, the
bench's summary and its diagnosis, and what a served drafter's folder says about itself
(:class:`DrafterInfo`, recorded beside its results).

:func:`offline_eval_status` is the one way in: it reads a folder's figures as an
:class:`OfflineEval`, only for the very files they were computed from (the sha256 of every
file, :func:`specrig.model.drafters.binding_problem`), and otherwise says why not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from specrig.core import atomic
from specrig.model.drafters import OFFLINE_EVAL, binding_problem, drafter_files

__all__ = ["OfflineEval", "DrafterInfo", "offline_eval_status", "rebind_offline_eval"]


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


class DrafterInfo(BaseModel):
    """What a served drafter's folder says about itself, recorded beside its results (``drafter_info``
    of each configuration in summary.json; all None where a configuration serves no drafter): its
    config's facts, its offline figures only when they were computed for the files the folder holds
    now (``offline_eval_unbound`` says why not), and what is wrong with the drafter itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    architectures: list[str] | None = None
    aux_layers: list[int] | None = None
    """The aux hidden-state layer ids its config serves (``eagle_aux_hidden_state_layer_ids``)."""
    draft_vocab_size: int | None = None
    trained: bool | None = None
    """False for a random-weight drafter (``specrig.trained`` in its config; True when not said)."""
    trained_aux_positions: list[int] | None = None
    served_shift: int | None = None
    """How far the served aux ids sit from the trained positions (``@eagle3-trained-shifted``: -1)."""
    offline_eval: OfflineEval | None = None
    offline_eval_unbound: str | None = None
    """Why there is no offline figure (missing, unreadable, unbound or stale)."""
    drafter_fault: str | None = None
    """What is wrong with the drafter folder itself (its vocabulary map, files changed since specrig made it)."""

    def offline_for(self, dataset: str) -> OfflineEval | None:
        """Its offline figures for the bench's workload ``dataset`` (on its own prompts when measured there)."""
        return self.offline_eval.for_workload(dataset) if self.offline_eval else None


def offline_eval_status(drafter: Path) -> tuple[OfflineEval | None, str | None]:
    """``(the evaluation, None)`` when offline_eval.json holds for exactly the files the
    folder has now; ``(None, why)`` when it is missing, unreadable, unbound (written before
    binding), stale (a file changed since) or does not fit :class:`OfflineEval`."""
    d, why = _bound_json(Path(drafter))
    if d is None:
        return None, why
    try:
        return OfflineEval.model_validate(d), None
    except ValidationError as exc:
        return None, f"{OFFLINE_EVAL} does not fit its model ({exc.errors()[0]['msg']})"


def _bound_json(folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    """offline_eval.json as written, when it was computed for exactly the files ``folder`` holds now."""
    try:
        d = json.loads((folder / OFFLINE_EVAL).read_text())
    except FileNotFoundError:
        return None, f"no offline evaluation ({OFFLINE_EVAL}) in {folder.name}"
    except (OSError, ValueError) as exc:
        return None, f"{OFFLINE_EVAL} does not parse ({exc})"
    if not isinstance(d, dict):
        return None, f"{OFFLINE_EVAL} is not a JSON object"
    problem = binding_problem(folder, d.get("inputs"))
    return (None, problem) if problem else (d, None)


def rebind_offline_eval(src: Path, dest: Path) -> bool:
    """Carry ``src``'s offline evaluation to ``dest``, a copy that serves the same weights to
    another engine (only its aux ids, which feed the same positions, differ): written only
    when it holds for ``src``'s files (the file as written, every key kept), bound to ``dest``'s.
    True when written."""
    d, _ = _bound_json(Path(src))
    if d is None:
        return False
    d["inputs"] = dict(d["inputs"]) | {"drafter_files": drafter_files(dest), "carried_from": str(src)}
    atomic.write_text(Path(dest) / OFFLINE_EVAL, json.dumps(d, indent=2))
    return True
