"""The lossless check's typed results: where a speculative run's greedy output left the
baseline's (:class:`Divergence`), what the target's own logits say about that position
(:class:`TargetMargin`, computed offline by :mod:`specrig.lab.margins`), the verdict
(:func:`classify`, with the threshold :data:`NEAR_TIE_LOGITS`), and one pairing's check
(:class:`Lossless`, part of summary.json through :class:`~specrig.lab.results.Pairing`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["NEAR_TIE_LOGITS", "Verdict", "classify", "TargetMargin", "Divergence", "Lossless"]

Verdict = Literal["near-tie", "real loss"]

NEAR_TIE_LOGITS = 0.5
"""Two tokens whose float32 logits both lie within this many logits of the target's top logit are
a numerical near-tie: bf16 serving can order them either way.

Why 0.5. bf16 keeps 8 significant bits: a logit of 16-32 is stored to the nearest 0.125, one of
32-64 to the nearest 0.25, so the rounding of the two logits alone moves their difference by up to
that much, and every layer's matmuls and residual adds round again before. The two sides of a
lossless check also compute with different kernels (the baseline decodes one token a step, the
speculative run verifies k+1 at once). Measured on SmolLM2-135M (5 story prompts x 200 greedy
tokens, 1000 positions, top logits 16-34 at the 10th-90th percentile), the error on the top-2
margin: bf16 against float32 median 0.06, 99th percentile 0.27, 99.9th 0.52; two bf16 forwards of
different shapes (token by token with a KV cache, and the whole sequence at once) median 0.125,
99th percentile 0.375, 99.9th 0.5, max 1.4 (one position). Every position where that error could
flip the greedy choice (25 of 1000) had a float32 margin of 0.29 or less. 0.5 lies above all of
them and at the 99.9th percentile of the error: tokens further apart than that are all but never
swapped by bf16 rounding. A deeper or wider target rounds more: there, a figure just above 0.5
deserves a look (summary.json carries every figure). docs/metrics.md, "Lossless check"."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def classify(top_logit: float, baseline_logit: float, spec_logit: float, threshold: float = NEAR_TIE_LOGITS) -> Verdict:
    """``near-tie`` when both sides' tokens score within ``threshold`` of the target's own choice
    (the usual case: one side took the runner-up, the top-2 margin is small), else ``real loss``."""
    worst = max(top_logit - baseline_logit, top_logit - spec_logit)
    return "near-tie" if worst <= threshold else "real loss"


class TargetMargin(_Model):
    """The target's own next-token logits where a greedy output diverged, in float32, from the
    prompt and the baseline's tokens before the divergence (``lab/inenv/target_margins.py``)."""

    top: list[int]
    """The target's two highest-scoring tokens, its greedy choice first."""
    top_logits: list[float]
    margin: float
    """The logit of the target's choice minus the runner-up's."""
    baseline_token: int
    spec_token: int
    baseline_logit: float
    spec_logit: float
    gap: float
    """The baseline token's logit minus the spec token's."""
    baseline_rank: int
    spec_rank: int
    """1: the target's own choice, 2: the runner-up, ..."""
    threshold: float
    """The near-tie threshold (logits) the verdict used."""
    verdict: Verdict
    device: str = "cpu"
    baseline_text: str | None = None
    spec_text: str | None = None

    @property
    def spec_below_top(self) -> float:
        return self.top_logits[0] - self.spec_logit

    def detail(self) -> str:
        if self.verdict == "near-tie":
            if (self.baseline_rank, self.spec_rank) == (1, 2):
                return f"the target's top-2 margin {self.margin:.2f} logits, spec took the runner-up"
            if (self.baseline_rank, self.spec_rank) == (2, 1):
                return f"the target's top-2 margin {self.margin:.2f} logits, the baseline took the runner-up"
            return (
                f"spec's token ranks {self.spec_rank} and the baseline's {self.baseline_rank}, "
                f"{abs(self.gap):.2f} logits apart, within {self.threshold:g} of the target's choice"
            )
        if self.spec_rank == 1:
            below = self.top_logits[0] - self.baseline_logit
            return (
                f"the baseline's token ranks {self.baseline_rank}, {below:.2f} logits below the target's choice, "
                "which spec took"
            )
        return f"spec's token ranks {self.spec_rank}, {self.spec_below_top:.2f} logits below the target's choice"


class Divergence(_Model):
    prompt_id: str
    position: int
    unit: str
    """``token`` when token ids were compared, else ``char``."""
    baseline: str
    spec: str
    target: TargetMargin | None = None
    """The target's own logits at this position (computed after the run); None: see ``unexplained``."""
    unexplained: str | None = None
    """Why ``target`` is empty (text-only outputs, one side ended there, the computation failed)."""

    def where(self) -> str:
        return f"{self.prompt_id} at {self.unit} {self.position}"

    def explained(self) -> str:
        assert self.target is not None
        return f"{self.where()}: {self.target.detail()}"


class Lossless(_Model):
    compared: int
    identical: int
    divergences: list[Divergence] = []

    @property
    def real_losses(self) -> list[Divergence]:
        return [d for d in self.divergences if d.target is not None and d.target.verdict == "real loss"]

    @property
    def near_ties(self) -> list[Divergence]:
        return [d for d in self.divergences if d.target is not None and d.target.verdict == "near-tie"]

    def cell(self) -> str:
        """The table's cell: identical/compared, marked when a divergence is a real loss
        (``LOSS``) or every one is a near-tie (``ties``)."""
        out = f"{self.identical}/{self.compared}"
        if self.real_losses:
            return f"{out} LOSS"
        if self.divergences and len(self.near_ties) == len(self.divergences):
            return f"{out} ties"
        return out

    def describe(self) -> str:
        if self.compared == 0:
            return "lossless check: nothing to compare"
        head = f"identical {self.identical}/{self.compared}"
        if not self.divergences:
            return head
        losses, ties = self.real_losses, self.near_ties
        if not losses and not ties:
            d = self.divergences[0]
            why = f"; not classified: {d.unexplained}" if d.unexplained else ""
            return f"{head}; first divergence: {d.where()} (baseline {d.baseline!r}, spec {d.spec!r}){why}"
        n = len(self.divergences)
        if n == 1:
            kind = "a REAL LOSS" if losses else "a numerical near-tie"
            return f"{head}; 1 divergence, {kind} ({self.divergences[0].explained()})"
        # the worst of each kind: the loss furthest below the target's choice, the tie widest apart
        worst = max(losses, key=lambda d: d.target.spec_below_top if d.target else 0.0, default=None)
        widest = max(ties, key=lambda d: abs(d.target.gap) if d.target else 0.0, default=None)
        if widest is not None and len(ties) == n:
            return f"{head}; {n} divergences, all numerical near-ties (widest: {widest.explained()})"
        parts = []
        if worst is not None:
            label = "1 REAL LOSS (" if len(losses) == 1 else f"{len(losses)} REAL LOSSES (worst: "
            parts.append(f"{label}{worst.explained()})")
        if widest is not None:
            tie = "1 numerical near-tie" if len(ties) == 1 else f"{len(ties)} numerical near-ties"
            parts.append(tie if worst is not None else f"{tie} (widest: {widest.explained()})")
        unknown = [d for d in self.divergences if d.target is None]
        if unknown:
            why = f" ({unknown[0].unexplained})" if unknown[0].unexplained else ""
            parts.append(f"{len(unknown)} not classified{why}")
        return f"{head}; {n} divergences: " + ", ".join(parts)
