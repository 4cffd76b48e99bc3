"""What one bench measures, as the plan resolved it: the load points, the service-level objectives,
the workload (prompts, lengths, timeouts: every default applied once, in :mod:`specrig.lab.plan`),
and the machine measured. Frozen; :mod:`specrig.lab.results` records them in the summary."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict

from specrig.core.errors import ConfigError
from specrig.core.prompt import Prompt

__all__ = ["LoadPoint", "Slo", "GpuInfo", "HostInfo", "Workload"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Timed(Protocol):
    """A request's latencies (a :class:`specrig.lab.results.RequestRecord`)."""

    @property
    def ttft_ms(self) -> float | None: ...
    @property
    def tpot_ms(self) -> float | None: ...
    @property
    def e2e_ms(self) -> float | None: ...


class LoadPoint(_Model):
    """One load level: a fixed number of requests in flight, or an arrival rate."""

    concurrency: int | None = None
    request_rate: float | None = None
    """Requests per second (Poisson arrivals, or gamma with ``burstiness`` != 1)."""
    burstiness: float = 1.0

    @property
    def label(self) -> str:
        if self.request_rate is not None:
            b = "" if self.burstiness == 1.0 else f"b{self.burstiness:g}"
            return f"r{self.request_rate:g}{b}"
        return f"c{self.concurrency or 1}"

    @property
    def level(self) -> float:
        """The number the load axis shows."""
        return self.request_rate if self.request_rate is not None else float(self.concurrency or 1)

    def describe(self) -> str:
        if self.request_rate is not None:
            b = "" if self.burstiness == 1.0 else f", burstiness {self.burstiness:g}"
            return f"request rate {self.request_rate:g}/s{b}"
        return f"concurrency {self.concurrency or 1}"


class Slo(_Model):
    """Service-level objectives a request must meet, all of them, to count as good."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    @classmethod
    def parse(cls, text: str) -> Slo:
        """``ttft_ms=500,tpot_ms=50`` (keys: ttft_ms, tpot_ms, e2e_ms)."""
        values: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, val = part.partition("=")
            if not sep or key not in cls.model_fields:
                raise ConfigError(f"--slo: cannot read {part!r}", hint="write e.g. --slo ttft_ms=500,tpot_ms=50")
            try:
                values[key] = float(val)
            except ValueError:
                raise ConfigError(f"--slo: {key} must be a number, got {val!r}") from None
        if not values:
            raise ConfigError("--slo names no objective", hint="write e.g. --slo ttft_ms=500,tpot_ms=50")
        return cls(**values)

    def met(self, r: _Timed) -> bool:
        checks = ((self.ttft_ms, r.ttft_ms), (self.tpot_ms, r.tpot_ms), (self.e2e_ms, r.e2e_ms))
        return all(limit is None or (v is not None and v <= limit) for limit, v in checks)


class GpuInfo(_Model):
    index: int
    name: str
    compute_capability: str
    memory_gib: float


class HostInfo(_Model):
    """The machine a run measured (from the host room's probe)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    cpus: int | None = None
    memory_gib: float | None = None
    gpus: list[GpuInfo] = []
    driver: str | None = None
    glibc: str | None = None
    nvcc: str | None = None


class Workload(_Model):
    dataset: str = "story"
    dataset_path: str | None = None
    """The user's prompt file (``--dataset custom``)."""
    num_prompts: int = 5
    seed: int = 0
    max_tokens: int | None = 512
    """Output tokens per request; None: each prompt's own length (ShareGPT answers, a custom file's lines)."""
    default_output_len: int = 512
    """The length of a prompt that has none of its own (a custom line without ``output_len``): the recipe's."""
    random_input_len: int = 128
    points: list[LoadPoint] = [LoadPoint(concurrency=1)]
    repeat: int = 1
    warmup_requests: int = 1
    slo: Slo | None = None
    stall_timeout_s: float
    """A stream silent this long fails its request (resolved by the plan: the option, the recipe's, the host's)."""
    first_token_timeout_s: float
    """A request with no first token this long after sending fails (resolved by the plan, as above)."""
    stop_at_eos: bool = False
    """Answers end at the model's EOS (chat traffic); False: EOS ignored, every answer max_tokens long."""
    chat: bool = False
    """Prompts sent as chat messages (/v1/chat/completions, the model's chat template); False: raw text."""

    @property
    def request_len(self) -> int:
        """The output tokens a request asks for when its prompt sets none: ``max_tokens``, else (each
        prompt's own length asked) the recipe's length for a prompt that has none of its own."""
        return self.max_tokens if self.max_tokens is not None else self.default_output_len

    def output_len(self, prompt: Prompt) -> int:
        """The output tokens ``prompt`` asks for: its own length, else :attr:`request_len`."""
        return prompt.output_len or self.request_len

    def describe(self) -> str:
        out = "answer-length" if self.max_tokens is None else f"{self.max_tokens}"
        out += " (to EOS)" if self.stop_at_eos else ""
        loads = ", ".join(p.describe() for p in self.points)
        rep = f", {self.repeat} repeats interleaved" if self.repeat > 1 else ""
        chat = " as chat messages" if self.chat else ""
        return f"{self.num_prompts} {self.dataset} prompts{chat} x {out} tokens; {loads}{rep}"
