"""What a drafter run is made of (``specrig drafter``): sizes, training knobs, the aux
layers, as one typed model. It is the schema of a recipe's ``[drafter]`` table (this host's
defaults, ``[drafter.quick]`` for ``--quick``) and of the run itself, filled through one
chain: the built-in defaults, then the recipe's table, then the flags (the fields in
``DrafterSettings.FLAGS``, declared for the parser from here). Every field takes part in
the stage hashes of the stages that read it."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from specrig.core.errors import ConfigError
from specrig.core.validation import describe

__all__ = ["DrafterSettings", "DrafterTable"]

_Count = Annotated[int, Field(ge=1)]
_Seconds = Annotated[float, Field(ge=0)]


class _Settings(BaseModel):
    """The fields, shared by a run's settings and the recipe's tables."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    FLAGS: ClassVar[tuple[str, ...]] = (
        "samples",
        "heldout",
        "epochs",
        "max_new_tokens",
        "concurrency",
        "train_seconds",
        "bench_shaped",
        "draft_vocab",
        "ttt_steps",
        "generate_seconds",
        "aux_layers",
        "loss_on",
        "norms",
        "optimizer",
        "lr",
        "step_decay",
        "weight_decay",
        "batch_tokens",
        "length_bucket",
    )
    """The settings ``specrig drafter --NAME`` overrides (help from each field's description)."""

    samples: _Count = 1200
    """training prompts answered by the target (ShareGPT train split); the target answers as many as
    generate_seconds allows, the rest train on ShareGPT's own answer"""
    heldout: _Count = 24
    """held-out prompts (ShareGPT held-out split, never trained on) for the offline acceptance"""
    max_new_tokens: _Count = 256
    """tokens the target generates per prompt (greedy)"""
    max_prompt_chars: _Count = 1200
    """longer ShareGPT turns are skipped (keeps prompts well inside the context)"""
    generate_seconds: _Seconds = 600.0
    """time for the target's answers (0: no limit); unanswered training prompts then train on
    ShareGPT's own answer, teacher-forced through the target"""
    concurrency: _Count = 8
    """requests in flight while the target answers (the engine batches them)"""
    epochs: _Count = 14
    """training epochs, an upper bound within train_seconds (with the default data ~4 fit)"""
    lr: float = Field(1.5e-3, gt=0, lt=1)
    """learning rate"""
    ttt_steps: _Count = 3
    """draft steps unrolled in training (training-time test), and the offline k"""
    step_decay: float = Field(0.8, gt=0, le=1)
    """loss weight of draft step j is step_decay**j"""
    loss_on: Literal["all", "answer"] = "all"
    """positions the training loss counts, all or answer; all: the prompt's and the answer's, answer:
    only where the drafted token is the target's answer (speculators' and EAGLE's loss mask: what
    serving drafts)"""
    norms: Literal["eagle3", "eagle3.1"] = "eagle3"
    """the drafter's norms, eagle3 or eagle3.1; eagle3.1 (speculators' defaults, served by vLLM from the
    config): RMSNorm over the concatenated aux features before fc, the residual taken after hidden_norm,
    and the next draft step fed the normed output"""
    optimizer: Literal["adamw", "muon"] = "adamw"
    """adamw, or muon (speculators' default): torch's Muon on the layer's weight matrices, AdamW on the
    rest (norms, lm_head), both at lr"""
    weight_decay: float = Field(0.0, ge=0, lt=1)
    """AdamW's weight decay (speculators': 0.01; Muon's group keeps torch's 0.1)"""
    draft_vocab: _Count = 4096
    """draft vocabulary size (the target's most frequent choices)"""
    max_len: _Count = 640
    """training sequences are cut to this many tokens"""
    batch_tokens: _Count = 768
    """padded tokens per training batch (smaller: more steps in an epoch of the same tokens; on the CPU
    768 beat 1536: held-out mean length 1.44 against 1.40 at equal tokens, 1.50 against 1.43 at equal time)"""
    length_bucket: _Count = 1
    """pad each training batch's length up to a multiple of this (1: to its longest sample): fewer
    distinct batch shapes. On the H200 a step of a shape not seen before cost 115-145 ms against 74 ms
    for a repeated one, and at 20,000 samples every step of the first epoch is one"""
    train_seconds: _Seconds = 1200.0
    """stop training after this long (0: no limit); keeps the run in budget on a busy host"""
    aux_layers: tuple[Annotated[int, Field(ge=0)], ...] | None = None
    """aux residual positions fed to the drafter, e.g. 2,15,27 (default: vLLM's (2, N//2, N-3))"""
    hidden_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """dtype of the transformers forward that makes the stored hidden states. auto:
    bfloat16 where the CPU computes it natively (AMX or AVX512-BF16: 2.3x float32's
    speed on SmolLM2-135M, the same 99.4% agreement with the engine's tokens), else
    float32 (emulated bf16 is slower than float32)"""
    bench_tokens: _Count | None = None
    """answer length for the offline figure on the bench's prompts (None: the recipe's bench.max_tokens)"""
    turns: Literal["first", "all"] = "first"
    """ShareGPT turns used as prompts: the first human turn of each conversation, or every human
    turn with the conversation before it as chat context (about 3x as many prompts: the shipped
    file holds ~8k usable first turns in its train split)"""
    bench_shaped: float = Field(0.25, ge=0, le=1)
    """share of the training prompts answered the bench's way (raw text, greedy, EOS ignored,
    bench_shaped_tokens long), answered first: the drafter then sees what the bench measures it on.
    On the CPU default it raised the offline figure on the bench's prompts from 14.8% to 17.0% (k=3)"""
    bench_shaped_tokens: _Count | None = None
    """length of those answers (None: the recipe's bench.max_tokens)"""
    server_args: tuple[str, ...] = ()
    """extra arguments for the generating server (e.g. a GPU's --max-num-seqs 256)"""
    features: Literal["stored", "online"] = "stored"
    """stored: the hidden-state stage writes the target's features (the CPU default); online: it
    writes token ids and the trainer computes the features on its device for every batch (a GPU;
    ~4.6 KB a token would not fit on disk at GPU scale)"""
    train_env: str = "train"
    """the [env.NAME] the hidden states, training and evaluation run in (a GPU host's engine
    environment already holds torch and transformers)"""
    seed: int = 0
    """sampling seed of the prompt selection and training"""
    quick: bool = False
    """a few-minute run for CI and plumbing"""

    @field_validator("aux_layers", "server_args", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        """``--aux-layers 2,15,27`` from the command line; a TOML array as it is."""
        if isinstance(value, str):
            return tuple(x.strip() for x in value.split(",") if x.strip())
        return value


class DrafterSettings(_Settings):
    """A run's settings; a bad value is a ConfigError naming the setting."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(
                describe("drafter settings", exc, model=_Settings),
                hint="`specrig drafter --help` and docs/drafter.md describe each setting",
            ) from None

    def with_overrides(self, **kw: object) -> DrafterSettings:
        """These settings with every value given (not None) on top, checked again."""
        return DrafterSettings(**(self.model_dump() | {k: v for k, v in kw.items() if v is not None}))

    def as_dict(self) -> dict[str, Any]:
        """Plain data (lists, not tuples) in field order: what the stage hashes read."""
        d = self.model_dump()
        d["aux_layers"] = list(self.aux_layers) if self.aux_layers else None
        d["server_args"] = list(self.server_args)
        return d


class _QuickTable(_Settings):
    """``[drafter.quick]``: the same settings, for ``--quick``."""


class DrafterTable(_Settings):
    """A recipe's ``[drafter]`` table: any setting (checked by its type when the recipe is loaded,
    an unknown key named with the closest one) and a ``[drafter.quick]`` table."""

    quick: _QuickTable = _QuickTable()  # type: ignore[assignment]

    def values(self, quick: bool) -> dict[str, Any]:
        """The settings the recipe gives (only those), with ``[drafter.quick]``'s on top for ``--quick``."""
        given = {k: getattr(self, k) for k in self.model_fields_set - {"quick"}}
        if quick:
            given |= {k: getattr(self.quick, k) for k in self.quick.model_fields_set - {"quick"}}
        return given
