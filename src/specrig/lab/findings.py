"""What a run found about why it is as fast as it is: the roofline's inputs and its
bound at each load point, and the profiler's breakdown of a decode step (typed,
part of summary.json through :class:`~specrig.lab.results.RunSummary`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from specrig.model.weights import distinct_experts

__all__ = ["RooflineInputs", "Roofline", "ProfileBreakdown"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RooflineInputs(_Model):
    """What bounds decode speed: bytes one decoded token reads, and how fast the devices read them."""

    weight_gb_per_token: float | None = None
    kv_bytes_per_token: float = 0.0
    """KV cache bytes per token of context (all layers); the roofline multiplies by mean context x batch."""
    weights_source: str = ""
    bandwidth_gb_s: float | None = None
    bandwidth_source: str = ""
    device: str = "GPU"
    """"GPU", or "CPU" (the bound is the host's measured copy bandwidth)."""
    expert_gb: float = 0.0
    """A mixture of experts: one routed expert summed over the MoE layers, GB (0: dense)."""
    routed: int = 0
    per_tok: int = 0

    def step_gb(self, batch: int) -> float | None:
        """Weights one decode step of ``batch`` sequences reads: a mixture of experts reads the
        union of the experts its tokens pick (uniform routing assumed)."""
        if self.weight_gb_per_token is None or not self.routed:
            return self.weight_gb_per_token
        extra = distinct_experts(self.routed, self.per_tok, batch) - self.per_tok
        return self.weight_gb_per_token + extra * self.expert_gb


class Roofline(_Model):
    """The memory-bandwidth bound at one load point, and how much of it the baseline reaches."""

    bound_tok_s: float
    """Decode tokens/s per stream if each step streamed the weights once and each sequence its KV cache."""
    achieved_tok_s: float
    config: str
    batch: int = 1
    context_tokens: float = 0.0
    weight_gb_per_token: float | None = None
    kv_gb_per_step: float = 0.0
    bandwidth_gb_s: float | None = None
    source: str = ""
    reading: str = ""

    @property
    def fraction(self) -> float:
        return self.achieved_tok_s / self.bound_tok_s

    def line(self) -> str:
        kv = (
            f" + KV {self.kv_gb_per_step:.2f} GB at {self.context_tokens:.0f} tokens of context"
            if self.kv_gb_per_step
            else ""
        )
        return (
            f"roofline at batch {self.batch}: {self.weight_gb_per_token:.2f} GB of weights{kv} per step "
            f"at {self.bandwidth_gb_s:,.0f} GB/s -> {self.bound_tok_s:,.1f} tok/s per stream; "
            f"baseline {self.achieved_tok_s:,.1f} = {self.fraction:.0%}: {self.reading}"
        )


class ProfileBreakdown(_Model):
    """One configuration's profiled run: time per decode step by category (``--profile``)."""

    config: str
    device: str
    """"GPU" (kernels; the rest is GPU idle) or "CPU" (operators; the rest is host time)."""
    steps: int
    window_ms: float
    """From the first engine step's start to the last one's end, in the trace."""
    step_ms: float
    per_step_ms: dict[str, float]
    """Milliseconds per step in each category; they add up to ``step_ms``."""
    client_ms: float | None = None
    """The client's own time for the profiled requests (sent one at a time)."""
    tokens: int = 0
    """Tokens the profiled requests generated."""
    trace_files: list[str] = []
    events: int = 0
    cut: bool = False
    """The trace had more events than specrig reads; the breakdown covers the first ones."""
    engine_version: str = ""
    phases: bool | None = None
    """The trace marks the runner's phases (forward, sample, draft). False: only each engine step
    (vLLM's V2 model runner), so a drafter's GEMMs and attention are counted in the target's
    categories and "drafter" holds only the kernels named so. None: recorded before this was kept."""

    @property
    def coverage(self) -> float | None:
        """Trace window / client time: ~1 when the trace holds the whole run."""
        return self.window_ms / self.client_ms if self.client_ms else None
