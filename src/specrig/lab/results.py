"""The typed results of a bench run, end to end: what one measured run of one
configuration at one load produced (:class:`Measurement`), how a speculative
configuration compares with its paired baseline (:class:`Pairing`), and the
whole run (:class:`RunSummary`, written as ``summary.json``).

Pydantic models: the pytest suite stores each Measurement in pytest-benchmark's
``extra_info``; the summary is rebuilt from that JSON and validated here, and the
report reads attributes, never string keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from specrig.core.atomic import write_json
from specrig.core.counters import SpecCounters
from specrig.core.errors import ConfigError
from specrig.core.prompt import Prompt
from specrig.core.validation import json_problem
from specrig.env.provided import Drift
from specrig.lab.findings import ProfileBreakdown, Roofline, RooflineInputs
from specrig.lab.folder import incomplete
from specrig.lab.identity import ConfigId
from specrig.lab.lossless import Divergence, Lossless, TargetMargin
from specrig.model.offline import OfflineEval  # the one model; re-exported for lab's readers
from specrig.specdec.stats import Distribution, Interval

__all__ = [
    "LoadPoint",
    "Slo",
    "RequestRecord",
    "Latency",
    "Goodput",
    "Measurement",
    "Threshold",
    "Divergence",
    "TargetMargin",
    "Lossless",
    "OfflineEval",
    "Pairing",
    "AcceptanceCheck",
    "ConfigResult",
    "Roofline",
    "RooflineInputs",
    "ProfileBreakdown",
    "RunSummary",
    "load_summary",
]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


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

    def met(self, r: RequestRecord) -> bool:
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


class RequestRecord(_Model):
    prompt_id: str
    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None
    decode_tok_s: float | None
    completion_tokens: int
    prompt_tokens: int
    output_len: int | None = None
    """The output length this request asked for (its prompt's own, else the run's)."""
    itl_ms: list[float] = []
    """Gaps between token-bearing chunks, each divided by the tokens it carried."""
    text: str = ""
    token_ids: list[int] | None = None
    accepted_tokens: float | None = None
    """Per-request speculative stats the engine returned (None if it returns none)."""
    draft_tokens: float | None = None
    acceptance_length: float | None = None


class Latency(_Model):
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2e_ms: Distribution


class Goodput(_Model):
    slo: Slo
    met: int
    total: int
    requests_per_s: float
    tokens_per_s: float

    @property
    def share(self) -> float:
        return self.met / self.total if self.total else 0.0


class Measurement(_Model):
    """One measured run: one configuration, one load point, one repeat."""

    config: str
    point: LoadPoint
    repeat: int
    requests: list[RequestRecord]
    wall_s: float
    completion_tokens: int
    output_tok_s: float
    decode_tok_s: Distribution
    """Per-stream decode rate over requests (1 / TPOT)."""
    latency: Latency
    server_generation_tokens: float | None = None
    counters_own: bool | None = None
    """The engine's generation-token delta equals the tokens this run received
    (False: other traffic shared the server; None: the engine has no such counter)."""
    spec_counters: SpecCounters | None = None
    goodput: Goodput | None = None
    client_cpu_share: float | None = None
    counter_problem: str | None = None
    """Counters of this run that went backwards or read NaN (an engine restart, another server answering)."""
    """CPU time of the bench process over the run's wall time (1.0 = one core busy)."""
    rounds: int = 0
    """pytest-benchmark rounds timed (one per measured workload run; 0: not timed)."""


class Threshold(_Model):
    name: str
    measured: float | None
    threshold: float
    tolerance: float
    informational: bool
    note: str = ""
    """Why this gate differs from the recipe's general one (an engine's own gate)."""

    @property
    def floor(self) -> float:
        return self.threshold * (1.0 - self.tolerance)

    @property
    def passed(self) -> bool:
        return self.measured is not None and self.measured >= self.floor

    def describe(self) -> str:
        m = "n/a" if self.measured is None else f"{self.measured:.3g}"
        return (
            f"{self.name} = {m}, threshold {self.threshold:g} "
            f"(pass at >= {self.floor:.3g}, tolerance {self.tolerance:.0%})" + (f"; {self.note}" if self.note else "")
        )


class Pairing(_Model):
    """A speculative configuration against its baseline at one load point."""

    config: str
    point: LoadPoint
    k: int
    speedup: Interval | None
    """Per-stream decode tok/s, spec / baseline, over repeats (None: no baseline)."""
    throughput_ratio: float | None
    """Output tok/s of the whole run, spec / baseline (mean over repeats)."""
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position: list[float] | None
    lossless: Lossless | None
    diagnosis: str
    baseline_from: str = "this run"
    step_cost: float | None = None
    """A speculative step's time over a plain decode step's, inferred from tokens and wall time."""
    measured_step_cost: float | None = None
    """The same ratio from the profiler (``--profile``): step time spec / step time baseline."""

    @property
    def rate_spread(self) -> float | None:
        """The speedup over mean length / step cost: how much wider the speculative requests' decode
        rates spread than the baseline's (``SpecStats.rate_spread``), from this pairing's figures."""
        if not (self.speedup and self.step_cost and self.mean_acceptance_length):
            return None
        return self.speedup.mean * self.step_cost / self.mean_acceptance_length


class AcceptanceCheck(_Model):
    """``--acceptance-check``: a speculative configuration served on the engine's compiled path
    against its eager twin at one load point, the counters of every repeat added up."""

    config: str
    """The configuration on the compiled path (its twin is ``eager_config``)."""
    eager_config: str
    point: LoadPoint
    k: int
    eager_args: list[str]
    """What the twin's server got on top of the configuration's (the engine's eager flag)."""
    compiled_rate: float | None
    eager_rate: float | None
    compiled_draft_tokens: float = 0.0
    eager_draft_tokens: float = 0.0
    gap: float | None = None
    """compiled_rate - eager_rate (None: a side counted no draft tokens)."""
    gap_low: float | None = None
    """The 95% interval of the gap (verification steps as the unit: :mod:`specrig.specdec.gap`)."""
    gap_high: float | None = None
    verdict: Literal["loses", "within noise", "too few", "gains", "unmeasured"]
    line: str
    """The verdict in words, as the console and report.md print it."""


class ConfigResult(_Model):
    name: str
    id: ConfigId | None = None
    """The configuration's identity from the plan (None in summaries written before it existed)."""
    method: str | None = None
    k: int | None = None
    drafter: str | None = None
    drafter_info: dict[str, Any] = {}
    offline: OfflineEval | None = None
    layer_note: str | None = None
    """What is wrong with an EAGLE drafter's aux-layer convention (drafter-check), if anything."""
    server_argv: list[str] = []
    ready_after_s: float | None = None
    thresholds: list[Threshold] = []

    @property
    def is_spec(self) -> bool:
        return self.method is not None


class BenchFailure(_Model):
    """A test of the suite that ended with a specrig error (a dead engine, a bad option)."""

    test: str
    type: str
    message: str
    hint: str | None = None

    def line(self) -> str:
        return f"{self.test}: {self.message}"


class RunSummary(_Model):
    specrig_summary: int = 2
    created: str
    recipe: str
    engine: str
    model: str
    served_name: str
    lock_digest: str | None
    built: list[str] = []
    """The wheels specrig built that the engine's environment held (``name version sha256:...``)."""
    host: HostInfo
    workload: Workload
    timings: dict[str, float] = {}
    drift: Drift | None = None
    """A provided interpreter's differences from the recipe's lock (bench --python)."""
    configs: list[ConfigResult]
    measurements: list[Measurement]
    pairings: list[Pairing] = []
    acceptance_checks: list[AcceptanceCheck] = []
    """``--acceptance-check``: each compiled configuration against its eager twin, per load point."""
    acceptance_note: str | None = None
    """Why ``--acceptance-check`` compared nothing (the servers already ran eager)."""
    crossover: list[str] = []
    recommendations: list[str] = []
    roofline: Roofline | None = None
    """The bound at the first load point (one stream when measured)."""
    rooflines: list[Roofline] = []
    """The bound at every load point of the baseline."""
    profiles: list[ProfileBreakdown] = []
    """``--profile``: each configuration's time per decode step by category."""
    counter_warnings: list[str] = []
    errors: list[BenchFailure] = []

    def config(self, name: str) -> ConfigResult | None:
        return next((c for c in self.configs if c.name == name), None)

    def write(self, path: Path) -> None:
        write_json(path, self.model_dump(mode="json"))


def load_summary(run_dir: Path) -> RunSummary:
    """The run's summary. Named when it cannot be: a folder that does not exist (or a file), a run
    that did not finish (marked INCOMPLETE), a summary.json cut short or not JSON (where the parser
    stopped), and only then one that parses but is not a summary this specrig reads."""
    run_dir = Path(run_dir)
    p = run_dir / "summary.json"
    if not p.is_file():
        raise _no_summary(run_dir)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p} cannot be read ({exc})", hint="give folders written by `nox -s bench`") from None
    problem = json_problem(text)
    if problem is not None:
        raise ConfigError(
            f"{p} is {problem}",
            hint="the file was cut short or damaged (a full disk, an interrupted copy): copy it again, or rerun the bench",
        )
    try:
        return RunSummary.model_validate_json(text)
    except ValueError as exc:
        raise ConfigError(
            f"{p} is not a summary this specrig can read ({str(exc).splitlines()[0]})",
            hint="it may come from an older specrig: rerun the bench",
        ) from None


def _no_summary(run_dir: Path) -> ConfigError:
    """Why ``run_dir`` holds no summary.json: it does not exist, is a file, or did not finish."""
    if not run_dir.exists():
        return ConfigError(f"{run_dir} does not exist", hint="give folders written by `nox -s bench` (check the path)")
    if not run_dir.is_dir():
        return ConfigError(
            f"{run_dir} is a file, not a run's results folder", hint="give folders written by `nox -s bench`"
        )
    why = incomplete(run_dir)
    if why is not None:
        return ConfigError(
            f"{run_dir} is a run that did not finish ({why}): it holds no summary.json",
            hint="give a finished run's folder, or rerun the bench",
        )
    return ConfigError(f"{run_dir} holds no summary.json", hint="give folders written by `nox -s bench`")
