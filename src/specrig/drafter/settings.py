"""What a drafter run is made of: sizes, training knobs, the aux layers. Every
field takes part in the stage hashes of the stages that read it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Literal

from specrig.core.errors import ConfigError

if TYPE_CHECKING:
    from specrig.recipe.schema import Recipe

__all__ = ["DrafterSettings", "DEFAULT", "QUICK", "for_recipe"]


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
    hidden_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """dtype of the transformers forward that makes the stored hidden states. auto:
    bfloat16 where the CPU computes it natively (AMX or AVX512-BF16: 2.3x float32's
    speed on SmolLM2-135M, the same 99.4% agreement with the engine's tokens), else
    float32 (emulated bf16 is slower than float32)."""
    bench_tokens: int | None = None
    """Answer length for the offline figure on the bench's prompts (None: the recipe's bench.max_tokens)."""
    turns: Literal["first", "all"] = "first"
    """ShareGPT turns used as prompts: the first human turn of each conversation, or
    every human turn with the conversation before it as chat context (about 3x as
    many prompts: the shipped file holds ~8k usable first turns in its train split)."""
    bench_shaped: float = 0.25
    """Share of the prompts answered the way the bench asks (raw text, greedy, EOS
    ignored, ``bench_shaped_tokens`` tokens), answered first: the drafter then sees what
    the bench measures it on (answers running past their end into new turns and loops).
    On the CPU default it raised the offline figure on the bench's prompts from 14.8%
    to 17.0% (k=3) and gave 1.40x at k=2 (docs/drafter.md)."""
    bench_shaped_tokens: int | None = None
    """Length of those answers (None: the recipe's bench.max_tokens)."""
    server_args: tuple[str, ...] = ()
    """Extra arguments for the generating server (e.g. a GPU's --max-num-seqs 256)."""
    features: Literal["stored", "online"] = "stored"
    """stored: the hidden-state stage writes the target's features (the CPU default);
    online: it writes token ids and the trainer computes the features on its device
    for every batch (a GPU; ~4.6 KB a token would not fit on disk at GPU scale)."""
    train_env: str = "train"
    """The [env.NAME] the hidden states, training and evaluation run in (a GPU host's
    engine environment already holds torch and transformers)."""
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        for name in ("samples", "heldout", "max_new_tokens", "epochs", "ttt_steps", "draft_vocab", "concurrency"):
            if getattr(self, name) < 1:
                raise ConfigError(f"drafter setting {name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.lr < 1:
            raise ConfigError(f"drafter setting lr must be in (0, 1), got {self.lr}")
        if not 0 <= self.bench_shaped <= 1:
            raise ConfigError(f"drafter setting bench_shaped must be in [0, 1], got {self.bench_shaped}")
        if self.turns not in ("first", "all"):
            raise ConfigError(f"drafter setting turns must be 'first' or 'all', got {self.turns!r}")
        if self.hidden_dtype not in ("auto", "float32", "bfloat16"):
            raise ConfigError(
                f"drafter setting hidden_dtype must be 'auto', 'float32' or 'bfloat16', got {self.hidden_dtype!r}"
            )
        if self.features not in ("stored", "online"):
            raise ConfigError(f"drafter setting features must be 'stored' or 'online', got {self.features!r}")

    def with_overrides(self, **kw: object) -> DrafterSettings:
        return replace(self, **{k: v for k, v in kw.items() if v is not None})

    def as_dict(self) -> dict:
        d = asdict(self)
        d["aux_layers"] = list(self.aux_layers) if self.aux_layers else None
        d["server_args"] = list(self.server_args)
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
    bench_shaped=0.0,  # 512-token answers would take most of a quick run's generation
    quick=True,
)


def for_recipe(recipe: Recipe, *, quick: bool) -> DrafterSettings:
    """The built-in defaults (:data:`DEFAULT`, or :data:`QUICK`) with the recipe's
    ``[drafter]`` table (and ``[drafter.quick]`` for ``--quick``) on top."""
    base = QUICK if quick else DEFAULT
    given = recipe.drafter.values(quick)
    known = {f.name for f in fields(DrafterSettings)} - {"quick"}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigError(
            f"recipe {recipe.name!r}: [drafter] has no setting {', '.join(map(repr, unknown))}",
            hint=f"settings: {', '.join(sorted(known))} (and a [drafter.quick] table for --quick)",
        )
    values: dict[str, Any] = {}
    for name, value in given.items():
        want = type(getattr(base, name))
        if name in ("aux_layers", "server_args"):
            value = tuple(value)
        elif want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif getattr(base, name) is not None and not isinstance(value, want):
            raise ConfigError(
                f"recipe {recipe.name!r}: [drafter] {name} = {value!r} should be a {want.__name__}",
                hint=f"the default is {getattr(base, name)!r}",
            )
        values[name] = value
    return replace(base, **values)
