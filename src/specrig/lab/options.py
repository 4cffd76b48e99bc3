"""The bench's options, declared once: a frozen, typed :class:`BenchOptions`.

Both front doors are made from the same fields: ``specrig bench --NAME`` and
the suite's ``pytest bench/ --specrig-NAME``. :func:`declare` hands each field to
an ``add_argument``-like callable (argparse's or pytest's ``addoption``, both
take the same keywords); :meth:`BenchOptions.collect` reads the values back
through a getter, so library code never sees a parser. Each default is written
once, in the field, and the help text quotes it."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from specrig.core.errors import ConfigError
from specrig.core.registry import EngineName
from specrig.recipe.schema import (
    FIRST_TOKEN_TIMEOUT_S,
    STALL_TIMEOUT_S,
    Count,
    DraftLength,
    LaunchAhead,
    Positive,
)

__all__ = ["BenchOptions", "declare", "DATASETS"]

DATASETS = ("story", "sharegpt", "random", "custom")


def _opt(default: Any, help: str, *, metavar: str | None = None, show_default: bool = True) -> Any:
    return Field(default, description=help, json_schema_extra={"metavar": metavar, "show_default": show_default})


class BenchOptions(BaseModel):
    """What one bench invocation asks for, before anything is prepared."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    recipe: str | None = _opt(
        None,
        "recipe name or path (default: 'cpu' without an NVIDIA GPU, else the one matching the GPUs)",
        metavar="NAME|PATH",
    )
    engine: EngineName = _opt("vllm", "engine")
    spec: tuple[str, ...] = _opt(
        (),
        "speculative configurations from the recipe: NAME[,NAME...], 'all' or 'none' (the default); each is "
        "paired with a baseline at the same load",
    )
    model: str | None = _opt(
        None, "which of the recipe's models to serve: default ([model]) or NAME of a [models.NAME]"
    )
    k: tuple[DraftLength, ...] | None = _opt(
        None, "draft lengths to sweep for every speculative configuration, e.g. 1,2,3,5 (default: the recipe's)"
    )
    drafter: tuple[str, ...] | None = _opt(
        None,
        "drafters to sweep for every drafter-based configuration (eagle3, draft_model): PATH or @NAME "
        "(@eagle3-trained, @eagle3-trained-shifted, @eagle3-random, @target), or @curve for every drafter of "
        "`specrig drafter --curve` (default: the one the recipe names)",
        metavar="REF[,REF...]",
    )
    launch_ahead: LaunchAhead | None = _opt(
        None,
        "servers started at once, ahead of their turn (GPU hosts: they share the GPU's memory, measured one "
        "at a time; default: the recipe's bench.launch_ahead, else 1)",
        metavar="N",
    )
    dataset: Literal["story", "sharegpt", "random", "custom"] = _opt(
        "story", "prompts: the story's five, ShareGPT first turns, random words, or your own file (--dataset-path)"
    )
    dataset_path: str | None = _opt(
        None,
        'with --dataset custom: a JSON Lines file, one {"prompt": ..., "output_len": N} a line '
        "(the format of vllm bench serve --dataset-name custom)",
        metavar="FILE.jsonl",
    )
    num_prompts: Count | None = _opt(
        None,
        "prompts per measured run (default: 5 for story, 40 otherwise; custom: the file's lines); a smaller set "
        "(the story's five, a shorter file) is cycled to this many",
    )
    seed: int = _opt(0, "sampling seed for sharegpt/random prompts and arrivals")
    max_tokens: Count | None = _opt(
        None,
        "output tokens per request (default: the recipe's; sharegpt and custom: each prompt's own length when not given)",
    )
    random_input_len: Count = _opt(128, "words per random prompt")
    concurrency: tuple[Count, ...] | None = _opt(
        None, "requests in flight, one level or a sweep: 1,4,16 (default: the recipe's)"
    )
    request_rate: tuple[Positive, ...] | None = _opt(
        None, "requests per second (Poisson arrivals) instead of fixed concurrency; a list sweeps"
    )
    burstiness: Positive = _opt(1.0, "gamma shape of arrivals with --request-rate (1: Poisson)")
    repeat: Count = _opt(
        1, "measure every configuration N times, interleaved A,B,A,B; gives the speedup a confidence interval"
    )
    warmup: Annotated[int, Field(ge=0)] | None = _opt(
        None, "warm-up requests after each server start (default: the recipe's)"
    )
    slo: str | None = _opt(None, "objectives per request, e.g. ttft_ms=500,tpot_ms=50: share met and goodput")
    endpoint: str | None = _opt(None, "attach to this running server (e.g. http://127.0.0.1:8000) instead of launching")
    api_key: SecretStr | None = _opt(
        None,
        "API key for a server that wants one, sent with every request (a server specrig launches is given it "
        "too); default: $OPENAI_API_KEY, or the --api-key of --engine-arg",
        metavar="KEY",
    )
    baseline: str | None = _opt(
        None, "take the paired baseline from an earlier run's results folder", metavar="RUN_DIR"
    )
    port: Annotated[int, Field(ge=1, le=65535)] | None = _opt(None, "port for launched servers (default: a free one)")
    engine_arg: tuple[str, ...] = _opt(
        (),
        "extra server argument, passed through (repeatable; use --engine-arg=--flag)",
        metavar="ARG",
        show_default=False,
    )
    startup_timeout: Positive | None = _opt(
        None, "seconds a server may take to become ready (default: the recipe's)", metavar="S"
    )
    results: str | None = _opt(None, "results folder (default: a new one under the user cache)")
    python: str | None = _opt(
        None,
        "serve from this existing interpreter (a container's, a cluster module's) instead of a lock-made "
        "environment; specrig never modifies it",
        metavar="PATH",
    )
    allow_drift: bool = _opt(
        False,
        "run even when the interpreter's engine, torch, its CUDA variant or Python differ from the lock "
        "(the drift is recorded in summary.json)",
    )
    no_baseline: bool = _opt(False, "skip the paired baseline (no speedup then)")
    stop_at_eos: bool = _opt(
        False,
        "end each answer at the model's end-of-sequence token, as chat traffic does, --max-tokens at most "
        "(default: EOS ignored, every answer --max-tokens long)",
    )
    chat: bool = _opt(
        False,
        "send each prompt as a user message to /v1/chat/completions, through the served model's chat "
        "template, as chat clients do (default: the raw text to /v1/completions, the story's way)",
    )
    stall_timeout: Positive | None = _opt(
        None,
        "seconds a stream may send nothing before its request fails and the run stops "
        f"(default: the recipe's bench.stall_timeout_s, else {STALL_TIMEOUT_S['cpu']:g} on a CPU host, "
        f"{STALL_TIMEOUT_S['gpu']:g} on a GPU)",
        metavar="S",
    )
    first_token_timeout: Positive | None = _opt(
        None,
        "seconds from sending a request to its first token (default: the recipe's, else "
        f"{FIRST_TOKEN_TIMEOUT_S['cpu']:g} on a CPU host, {FIRST_TOKEN_TIMEOUT_S['gpu']:g} on a GPU)",
        metavar="S",
    )
    profile: bool = _opt(
        False,
        "after each configuration's measured run, profile a few requests with the engine's own profiler: "
        "time per decode step by category (table, JSON, profile.png; the raw trace stays in profiles/)",
    )
    acceptance_check: bool = _opt(
        False,
        "serve every speculative configuration whose server runs the engine's compiled / CUDA-graph path a "
        "second time with its eager flag (vLLM --enforce-eager, SGLang --disable-cuda-graph), on the same "
        "prompts and loads, and report the acceptance gap compiled - eager with a 95% interval: does the "
        "compiled path lose acceptance? (launched servers only; nothing is added where they already run eager)",
    )
    memory_bandwidth: Positive | None = _opt(
        None,
        "the devices' aggregate memory bandwidth in GB/s for the roofline (default: the GPU's datasheet figure, "
        "or this host's measured copy bandwidth without a GPU)",
        metavar="GB_S",
    )

    @field_validator("spec", "k", "drafter", "concurrency", "request_rate", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        """A comma list from the command line (``1,4,16``) becomes a tuple; 'none' no configuration."""
        if isinstance(value, str):
            items = tuple(x.strip() for x in value.split(",") if x.strip())
            return () if items == ("none",) else items
        return value

    @model_validator(mode="after")
    def _together(self) -> BenchOptions:
        """The rules that involve two options, checked once, before anything is prepared."""
        if self.concurrency and self.request_rate:
            raise ConfigError(
                "give --concurrency or --request-rate, not both",
                hint="closed loop: --concurrency; open loop: --request-rate",
            )
        if self.dataset == "custom" and not self.dataset_path:
            raise ConfigError("--dataset custom needs --dataset-path FILE.jsonl", hint='one {"prompt": ...} a line')
        if self.dataset_path and self.dataset != "custom":
            raise ConfigError("--dataset-path is for --dataset custom", hint="add --dataset custom")
        if "all" in self.spec and len(self.spec) > 1:
            raise ConfigError(f"--spec {','.join(self.spec)}: 'all' stands alone", hint="--spec all, or name them")
        if self.acceptance_check:
            self._check_acceptance_check()
        if self.endpoint:
            one = "--endpoint measures one running server"
            if len(self.spec) > 1 or self.spec == ("all",):
                raise ConfigError(
                    f"{one}, so --spec must name at most one configuration",
                    hint="name the configuration that server runs (it labels the run and selects its thresholds)",
                )
            for name, given in (("--drafter", self.drafter), ("--k", self.k)):
                if given and len(given) > 1:
                    raise ConfigError(f"{one}: give at most one {name} (the server's)")
        return self

    def _check_acceptance_check(self) -> None:
        """``--acceptance-check`` serves eager twins of speculative configurations: it needs both."""
        if self.endpoint:
            raise ConfigError(
                "--acceptance-check serves each configuration again with the engine's eager flag, but with "
                "--endpoint specrig does not launch the server",
                hint="leave out --endpoint so specrig launches both servers; or attach to the same server started "
                "with its eager flag (vLLM --enforce-eager, SGLang --disable-cuda-graph) and set the two runs side "
                "by side (`specrig report RUN_DIR RUN_DIR`)",
            )
        if not self.spec:
            raise ConfigError(
                "--acceptance-check compares the acceptance of speculative configurations, and --spec none has none",
                hint="name them: --spec NAME[,NAME...] or --spec all",
            )

    @classmethod
    def collect(cls, get: Callable[[str], Any], **overrides: Any) -> BenchOptions:
        """Options from a front door: ``get(name)`` returns the value given for field ``name``
        (None when not given: the field's default applies)."""
        values = {name: get(name) for name in cls.model_fields}
        values = {k: v for k, v in values.items() if v is not None} | overrides
        if isinstance(values.get("engine_arg"), list):
            values["engine_arg"] = tuple(values["engine_arg"])
        try:
            return cls(**values)
        except ValidationError as exc:
            err = exc.errors()[0]
            name = str(err["loc"][0]) if err["loc"] else "?"
            raise ConfigError(
                f"--{name.replace('_', '-')}: {err['msg']} (got {err.get('input')!r})",
                hint=f"`specrig bench --help` describes --{name.replace('_', '-')}",
            ) from None


def _scalar(annotation: Any) -> tuple[Any, tuple[str, ...] | None]:
    """The argparse type and the choices of a field's annotation."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if typing.get_origin(annotation) is Literal:
        return str, tuple(typing.get_args(annotation))
    return (annotation if annotation in (int, float) else str), None


def declare(add: Callable[..., Any], prefix: str = "") -> None:
    """Declare every option through ``add`` (argparse's ``add_argument`` or pytest's ``addoption``).
    Defaults stay None here, so an option not given reads as None and the field's default applies."""
    for name, field in BenchOptions.model_fields.items():
        extra = field.json_schema_extra or {}
        help = str(field.description)
        if extra.get("show_default", True) and field.default not in (None, False, ()):
            help += f" (default: {field.default})"
        kw: dict[str, Any] = {"help": help.replace("%", "%%"), "dest": f"{prefix}{name}".replace("-", "_")}
        if extra.get("metavar"):
            kw["metavar"] = extra["metavar"]
        if field.annotation is bool:
            kw |= {"action": "store_true", "default": None}
        elif name == "engine_arg":
            kw |= {"action": "append", "default": None}
        else:
            typ, choices = _scalar(field.annotation)
            kw |= {"type": typ, "default": None}
            if choices:
                kw["choices"] = list(choices)
        add(f"--{prefix}{name.replace('_', '-')}", **kw)
