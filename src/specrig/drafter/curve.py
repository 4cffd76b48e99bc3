"""The data-size curve (``specrig drafter --curve``): drafters trained on nested subsets of the
pipeline's data, each exported, scored offline on the same held-out prompts and the bench's, listed
with the full run's drafter in ``drafters/RECIPE/curve.json`` (``--drafter @curve`` serves them;
``specrig drafter --curve`` draws it beside, ``curve.png``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specrig.core.log import log
from specrig.drafter.evaluate import OfflineEval, evaluate_drafter
from specrig.drafter.export import register_curve
from specrig.drafter.facts import TrainFacts
from specrig.drafter.pipeline import DrafterRun, _export, _prepare, _train, bench_workload
from specrig.drafter.settings import DrafterSettings
from specrig.drafter.stages import StageResult
from specrig.recipe.schema import Recipe

__all__ = ["CurvePoint", "run_curve"]


@dataclass(frozen=True)
class CurvePoint:
    samples: int
    drafter: Path
    offline: OfflineEval
    train_seconds: float
    train_tokens: int
    steps: int | None = None
    epochs: float | None = None
    capped: bool = False
    """True when the training-time budget stopped it before its epochs ended."""

    def as_dict(self) -> dict[str, Any]:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return fields | {"drafter": str(self.drafter), "offline": self.offline.as_dict()}

    @classmethod
    def of(cls, samples: int, drafter: Path, offline: OfflineEval, train: StageResult[TrainFacts]) -> CurvePoint:
        f = train.facts
        return cls(
            samples, drafter, offline, train.seconds, f.train_tokens, f.steps, f.epochs_done(), bool(f.stopped_early)
        )


def run_curve(
    recipe: Recipe, s: DrafterSettings, sizes: list[int], full: DrafterRun | None = None
) -> tuple[list[CurvePoint], Path]:
    """Drafters trained on the first N training samples of the same data, one per size
    (sizes above the data's are skipped), each exported as ``eagle3-nN-KEY``, scored
    offline on the same held-out prompts and the bench's prompts, and listed with the
    full run's drafter in ``drafters/RECIPE/curve.json`` (``--drafter @curve`` serves them): the
    points and that file."""
    d = _prepare(recipe, s)
    total = d.hid.facts.samples.get("train", 0)
    bench = bench_workload(recipe, s.bench_tokens)
    points: list[CurvePoint] = []
    for n in sorted(set(sizes)):
        if n >= total:
            log.warn(
                f"curve: {n} samples is not below the {total} the data holds: skipped (the full run is that point)"
            )
            continue
        tr = _train(d, n, f"curve {n}:")
        drafter, _ = _export(d, tr, f"eagle3-n{n}-{tr.key}")
        offline = evaluate_drafter(d.train_env, drafter, k=s.ttt_steps, bench=bench)
        points.append(CurvePoint.of(n, drafter, offline, tr))
    if full is not None:
        tl = next(st for st in full.stages if st.name == "train")
        points.append(CurvePoint.of(total, full.drafter, full.offline, tl))
    points.sort(key=lambda p: p.samples)
    return points, register_curve(recipe.name, [p.as_dict() for p in points], quick=s.quick)
