"""What a drafter run is made of: sizes, training knobs, the aux layers. Every
field takes part in the stage hashes of the stages that read it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from specrig.core.errors import ConfigError

__all__ = ["DrafterSettings", "DEFAULT", "QUICK"]


@dataclass(frozen=True, kw_only=True)
class DrafterSettings:
    samples: int = 1200
    """Training prompts (ShareGPT train split); the target answers as many as
    ``generate_seconds`` allows, the rest train on ShareGPT's own answer."""
    heldout: int = 24
    """Held-out prompts (ShareGPT held-out split, never trained on) for offline acceptance."""
    max_new_tokens: int = 256
    """Tokens the target generates per prompt (greedy)."""
    max_prompt_chars: int = 1200
    """Longer ShareGPT first turns are skipped (keeps prompts well inside the context)."""
    generate_seconds: float = 600.0
    """Time for the target's answers (0: no limit); training prompts left unanswered
    then train on ShareGPT's own answer, teacher-forced through the target."""
    concurrency: int = 8
    """Requests in flight while generating (the engine batches them)."""
    epochs: int = 14
    """An upper bound: with the default data ~4 epochs fit in ``train_seconds``."""
    lr: float = 1.5e-3
    ttt_steps: int = 3
    """Draft steps unrolled in training (training-time test); also the eval k."""
    step_decay: float = 0.8
    """Loss weight of draft step j is step_decay**j."""
    draft_vocab: int = 4096
    max_len: int = 640
    """Training sequences are cut to this many tokens."""
    batch_tokens: int = 1536
    """Padded tokens per training batch."""
    train_seconds: float = 1200.0
    """Stop training after this many seconds (0: no limit); keeps the run in budget on a busy host."""
    aux_layers: tuple[int, ...] | None = None
    """Residual positions fed to the drafter (None: vLLM's default (2, N//2, N-3))."""
    hidden_dtype: str = "float32"
    """dtype of the transformers forward that makes the hidden states."""
    bench_tokens: int | None = None
    """Answer length for the offline figure on the bench's prompts (None: the recipe's bench.max_tokens)."""
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        for name in ("samples", "heldout", "max_new_tokens", "epochs", "ttt_steps", "draft_vocab", "concurrency"):
            if getattr(self, name) < 1:
                raise ConfigError(f"drafter setting {name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.lr < 1:
            raise ConfigError(f"drafter setting lr must be in (0, 1), got {self.lr}")

    def with_overrides(self, **kw: object) -> DrafterSettings:
        return replace(self, **{k: v for k, v in kw.items() if v is not None})

    def as_dict(self) -> dict:
        d = asdict(self)
        d["aux_layers"] = list(self.aux_layers) if self.aux_layers else None
        return d


DEFAULT = DrafterSettings()
# --quick: minutes, for CI and plumbing; the drafter learns only a little.
QUICK = DrafterSettings(
    samples=32,
    heldout=4,
    max_new_tokens=128,
    epochs=3,
    draft_vocab=2048,
    max_len=384,
    train_seconds=100,
    generate_seconds=150,
    bench_tokens=64,
    quick=True,
)
