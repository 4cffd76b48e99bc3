"""What each drafter stage records about its output (``stage.json``'s ``facts``), typed: the
pipeline, the curve, the export and ``specrig drafter``'s table read fields, never keys.
A stage may record more than its model names (kept, untyped); what is named is checked."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["StageFacts", "PromptFacts", "GenerateFacts", "HiddenFacts", "TrainFacts", "ExportFacts"]


class StageFacts(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    def note(self) -> str:
        """One line for the stage table."""
        return ""


class PromptFacts(StageFacts):
    train: int = 0
    heldout: int = 0
    formats: dict[str, int] = {}
    with_context: int = 0

    def note(self) -> str:
        kinds = ", ".join(f"{v} {k}" for k, v in self.formats.items() if v)
        return f"{self.train} train / {self.heldout} held-out prompts" + (f" ({kinds})" if kinds else "")


class GenerateFacts(StageFacts):
    output_tokens: int = 0
    prompt_tokens: int = 0
    tokens: int = 0
    tok_s: float | None = None
    generate_s: float | None = None
    server_ready_s: float | None = None
    reference_samples: int = 0
    """Training prompts past the time budget: they train on ShareGPT's own answer."""

    def note(self) -> str:
        note = f"{self.output_tokens} answer tokens ({self.tok_s or 0:.0f} tok/s)"
        ref = self.reference_samples
        return note + (f"; {ref} prompts past the time budget train on ShareGPT's answer" if ref else "")


class HiddenFacts(StageFacts):
    samples: dict[str, int] = {}
    """Per split (train, heldout)."""
    tokens: dict[str, int] = {}
    features: str = "stored"
    label_agreement: float | None = None
    """Share of response positions where transformers' argmax equals the engine's token."""

    def note(self) -> str:
        n = sum(self.tokens.values())
        if self.features == "online":
            return f"{n} tokens (features computed on the training device)"
        return f"{n} tokens; HF agrees with the engine on {(self.label_agreement or 0):.1%}"


class TrainFacts(StageFacts):
    steps: int | None = None
    seconds: float | None = None
    draft_vocab: int
    draft_vocab_coverage: float = 0.0
    train_samples: int | None = None
    train_tokens: int = 0
    stopped_early: bool | None = None
    epochs: list[Any] = []
    best_epoch: int | None = None
    device: str | None = None
    features: str | None = None
    epoch_steps: int | None = None

    def epochs_done(self) -> float:
        """Epochs trained, the last one cut by the time budget counted by its share of the steps
        (a log without per-epoch steps, from before 2026-12-05: the epochs started)."""
        steps = [e.get("steps") for e in self.epochs]
        if not self.epoch_steps or None in steps:
            return float(len(self.epochs))
        return sum(steps) / self.epoch_steps

    def note(self) -> str:
        done = self.epochs_done()
        rate = self.train_tokens * done / max(self.seconds or 1, 1e-9)
        return (
            f"{self.steps} steps on {self.device or 'cpu'}, {done:.3g} epochs (~{rate:.0f} tok/s); "
            f"draft vocab {self.draft_vocab} covers {self.draft_vocab_coverage:.1%}"
        )


class ExportFacts(StageFacts):
    shifted: str
