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

from pydantic import BaseModel, ConfigDict, model_validator

from specrig.core.atomic import write_json
from specrig.core.counters import SpecCounters
from specrig.core.errors import ConfigError
from specrig.core.validation import json_problem
from specrig.env.provided import Drift
from specrig.lab.findings import ProfileBreakdown, Roofline, RooflineInputs
from specrig.lab.folder import incomplete
from specrig.lab.identity import ConfigId
from specrig.lab.lossless import Divergence, Lossless, TargetMargin
from specrig.lab.workload import GpuInfo, HostInfo, LoadPoint, Slo, Workload
from specrig.model.offline import DrafterInfo, OfflineEval  # one model each; re-exported for lab's readers
from specrig.specdec.stats import Distribution, Interval

__all__ = [
    "LoadPoint",
    "Slo",
    "Workload",
    "HostInfo",
    "GpuInfo",
    "RequestRecord",
    "Latency",
    "Goodput",
    "Measurement",
    "Threshold",
    "Divergence",
    "TargetMargin",
    "Lossless",
    "OfflineEval",
    "DrafterInfo",
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


def recorded_id(name: str) -> ConfigId:
    """The identity of a configuration a file recorded only by name (written before identities
    were): the name as the recipe has it, the baseline or a ``[spec.NAME]``. Only for reading such
    a file (a summary fills its records' identities from its configurations first)."""
    return ConfigId() if name == ConfigId().name else ConfigId(spec=name)


def _with_id(data: Any) -> Any:
    if isinstance(data, dict) and data.get("id") is None and isinstance(data.get("config"), str):
        return {**data, "id": recorded_id(data["config"])}
    return data


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
    """The configuration's name, for display (``id.name``)."""
    id: ConfigId
    """The configuration: what pairing and the summary's lookups key on."""
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

    @model_validator(mode="before")
    @classmethod
    def _recorded(cls, data: Any) -> Any:
        """Recorded before identities were: the configuration's identity from its name."""
        return _with_id(data)


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
    """The configuration's name, for display (``id.name``)."""
    id: ConfigId
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

    @model_validator(mode="before")
    @classmethod
    def _recorded(cls, data: Any) -> Any:
        """Recorded before identities were: the configuration's identity from its name."""
        return _with_id(data)


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
    prompts: int = 0
    """Prompts both sides answered (each repeat's counted apart)."""
    same_text: int = 0
    """Of those, the ones whose answers were token for token alike: where fewer, the rates count different text."""
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
    """For display (``id.name``)."""
    id: ConfigId
    """The configuration's identity from the plan (a summary written before it existed: from its name)."""
    method: str | None = None
    k: int | None = None
    """Draft tokens a step as served (the recipe's, or ``--k``'s: ``id.k`` is only the latter)."""
    drafter: str | None = None
    """The drafter served (its folder; ``id.drafter`` is only ``--drafter``'s label)."""
    drafter_info: DrafterInfo = DrafterInfo()
    """What the drafter's folder said about itself (every field None where there was no drafter; ``{}`` in older summaries)."""
    offline: OfflineEval | None = None
    layer_note: str | None = None
    """What is wrong with an EAGLE drafter's aux-layer convention (drafter-check), if anything."""
    server_argv: list[str] = []
    ready_after_s: float | None = None
    thresholds: list[Threshold] = []

    @property
    def is_spec(self) -> bool:
        return not self.id.is_baseline

    @model_validator(mode="before")
    @classmethod
    def _recorded(cls, data: Any) -> Any:
        """A configuration recorded before identities were: the baseline (no method) or a ``[spec.NAME]``."""
        if isinstance(data, dict) and data.get("id") is None and isinstance(data.get("name"), str):
            return {**data, "id": ConfigId() if data.get("method") is None else ConfigId(spec=data["name"])}
        return data


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

    @model_validator(mode="before")
    @classmethod
    def _recorded(cls, data: Any) -> Any:
        """A summary written before its measurements and pairings carried their configuration's
        identity: each takes the identity of the configuration of its name."""
        if not isinstance(data, dict) or not isinstance(data.get("configs"), list):
            return data
        ids = {}
        for c in data["configs"]:
            c = ConfigResult.model_validate(c) if isinstance(c, dict) else c
            ids[c.name] = c.id
        for key in ("measurements", "pairings"):
            if isinstance(data.get(key), list):
                data = {**data, key: [_filled(r, ids) for r in data[key]]}
        return data

    def config(self, name: str) -> ConfigResult | None:
        """The configuration of this display name (the report's lookup)."""
        return next((c for c in self.configs if c.name == name), None)

    @property
    def baseline(self) -> ConfigResult | None:
        """The baseline measured in this run (None: none, or taken from ``--baseline RUN_DIR``)."""
        return next((c for c in self.configs if c.id.is_baseline), None)

    def write(self, path: Path) -> None:
        write_json(path, self.model_dump(mode="json"))


def _filled(record: Any, ids: dict[str, ConfigId]) -> Any:
    """A measurement's or pairing's raw record with its configuration's identity (an old file's)."""
    if isinstance(record, dict) and record.get("id") is None and record.get("config") in ids:
        return {**record, "id": ids[record["config"]]}
    return record


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
