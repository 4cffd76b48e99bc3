"""The full model on paper, from a few of its layers measured: ``specrig project``.

Input: bench runs of one architecture cut to different layer counts (at least two
counts with a baseline; one of them with speculative configurations, ideally
``--profile``d). Output: the step time of the whole model on one GPU, the cost of a
speculative step against a plain one at k = 1..5, the acceptance each k needs to
break even; then the same on a tensor-parallel host whose plain step is known (its
decode rate) and whose communication share is known (its profile), set beside what
was measured there. Every assumption is returned next to the numbers it makes.

The model (ms per decode step at one load point):

* plain(L)      = fixed + per_layer x L         (least squares over the runs' layer counts)
* spec(L, k)    = plain(L) x (1 + verify_k) + drafter_k
  measured at the speculative run's L: drafter_k is the drafter's share of the step
  from the profile (else the whole overhead, verify_k = 0), verify_k the rest
  relative to the plain step; k past the measured ones extrapolated linearly in k
* cost ratio    r_k = spec(L, k) / plain(L);  break-even: T(a*, k) = r_k (i.i.d. a)
* a TP host     plain = 1000 / tok_s = compute + comm, comm = share x plain;
                spec = compute x r_k + comm x (1 + draft_collectives x k / collectives)

Pure functions over :class:`~specrig.lab.results.RunSummary`; no I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from specrig.core.errors import ConfigError
from specrig.lab.results import RunSummary
from specrig.specdec.theory import break_even, solve_a_from_mean, tokens_per_step

__all__ = [
    "Host",
    "Projection",
    "project",
    "STORY",
    "markdown",
    "one_gpu_rows",
    "host_rows",
    "ONE_GPU_COLUMNS",
    "HOST_COLUMNS",
]


@dataclass(frozen=True)
class Host:
    """A tensor-parallel host the projection is carried to, with what was measured there."""

    name: str
    layers: int
    tensor_parallel: int
    baseline_tok_s: float
    comm_share: float
    """Share of a plain decode step spent in collectives (all-reduce), from a profile there."""
    draft_collectives: int = 4
    """Collectives one draft forward of a one-layer EAGLE-3 head adds (embedding, attention, MLP, logits)."""
    measured_k: int | None = None
    measured_accepted: int | None = None
    measured_drafts: int | None = None
    measured_tok_s: float | None = None
    source: str = ""

    @property
    def collectives_per_step(self) -> int:
        """Collectives a plain step makes: two per layer (attention out, MLP out), the embedding's, the logits' gather."""
        return 2 * self.layers + 2


# docs/story.md: Kimi-K2.5 INT4 on 8x RTX PRO 6000 Blackwell, TP 8, vLLM 0.16
STORY = Host(
    name="the story's host (8x RTX PRO 6000 Blackwell, TP 8, Kimi-K2.5 INT4)",
    layers=61,
    tensor_parallel=8,
    baseline_tok_s=82.5,
    comm_share=0.515,
    measured_k=5,
    measured_accepted=1127,
    measured_drafts=1506,
    measured_tok_s=54.6,
    source="docs/story.md: 82.5 tok/s baseline; all-reduce 51.5% of decode; EAGLE-3 k=5 1,127 accepted "
    "in 1,506 drafts (7,530 draft tokens, 15.0%), 54.6 tok/s",
)


@dataclass
class Row:
    k: int
    measured: bool
    drafter_ms: float
    verify_extra: float
    spec_ms: float
    cost: float
    break_even_a: float | None
    host_spec_ms: float | None = None
    host_cost: float | None = None
    host_break_even_a: float | None = None
    host_predicted_speedup: float | None = None
    """At the host's measured drafter quality (an i.i.d. a fitted to its tokens per step)."""


@dataclass
class Projection:
    concurrency: int
    layer_steps: dict[int, float]
    """Measured plain step ms per layer count."""
    per_layer_ms: float
    fixed_ms: float
    spec_layers: int
    target_layers: int
    plain_ms: float
    rows: list[Row]
    host: Host | None = None
    host_plain_ms: float | None = None
    host_comm_ms: float | None = None
    host_a: float | None = None
    host_measured_cost: float | None = None
    host_measured_speedup: float | None = None
    assumptions: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    """Other measured runs set against what the projection says of them."""

    def to_json(self) -> dict:
        out = asdict(self)
        out["host"] = asdict(self.host) if self.host else None
        return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def step_ms(summary: RunSummary, config: str, concurrency: int) -> float | None:
    """Milliseconds per decode step of one configuration at one load point (repeats averaged):
    TPOT for a plain step; TPOT x tokens per step for a speculative one."""
    runs = [m for m in summary.measurements if m.config == config and m.point.concurrency == concurrency]
    tpots = [m.latency.tpot_ms.mean for m in runs if m.latency.tpot_ms.mean]
    if not tpots:
        return None
    pair = next((p for p in summary.pairings if p.config == config and p.point.concurrency == concurrency), None)
    length = pair.mean_acceptance_length if pair and pair.mean_acceptance_length else 1.0
    return _mean(tpots) * length


def _fit(points: dict[int, float]) -> tuple[float, float]:
    """(fixed, per_layer) of plain(L) = fixed + per_layer x L, least squares."""
    xs, ys = list(points), list(points.values())
    mx, my = _mean(xs), _mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - slope * mx, slope


def _line(ks: list[int], ys: list[float], k: int) -> float:
    if len(ks) == 1:
        return ys[0] * k / ks[0]  # one k: proportional to k
    fixed, slope = _fit(dict(zip(ks, ys, strict=True)))
    return max(0.0, fixed + slope * k)


def _collect(runs: list[tuple[int, RunSummary]], concurrency: int) -> tuple[dict[int, float], list]:
    """(layers -> mean plain step ms, the runs holding an EAGLE-3 configuration), refused when either is short."""
    plain: dict[int, list[float]] = {}
    spec_runs: list[tuple[int, RunSummary]] = []
    for layers, s in runs:
        t = step_ms(s, s.baseline.name, concurrency) if s.baseline else None
        if t is not None:
            plain.setdefault(layers, []).append(t)
        if any(c.is_spec and c.method == "eagle3" for c in s.configs):
            spec_runs.append((layers, s))
    if len(plain) < 2:
        raise ConfigError(
            f"a projection needs baselines at two layer counts or more at concurrency {concurrency}; "
            f"got {sorted(plain) or 'none'}",
            hint="give runs of the same shape cut to different layer counts (e.g. kimi-8l and kimi-4l), "
            "each with its baseline at that concurrency",
        )
    if not spec_runs:
        raise ConfigError(
            "no run holds an EAGLE-3 configuration: nothing says what a speculative step costs",
            hint="add a run with --spec eagle3-random (or a trained eagle3) and --k 1,2,3",
        )
    return {n: _mean(v) for n, v in sorted(plain.items())}, spec_runs


def _overheads(s: RunSummary, base: float, concurrency: int) -> dict[int, tuple[float, float, float]]:
    """k -> (drafter ms, verify extra, spec step ms) of one run's EAGLE-3 configurations over ``base`` ms."""
    profiles = {p.config: p for p in s.profiles if p.step_ms}
    out = {}
    for c in s.configs:
        t = step_ms(s, c.name, concurrency) if c.is_spec and c.method == "eagle3" and c.k else None
        if t is None:
            continue
        prof = profiles.get(c.name)
        share = prof.per_step_ms.get("drafter", 0.0) / prof.step_ms if prof and prof.phases else None
        drafter = t * share if share is not None else t - base
        out[c.k] = (max(0.0, drafter), max(0.0, (t - drafter) / base - 1.0), t)
    return out


def _checks(per_run: list, chosen: tuple, plain_at) -> list[str]:
    """Each other EAGLE-3 run's measured step against the one projected from the chosen run."""
    spec_layers, s, own = chosen
    checks = []
    for n, other, theirs in per_run:
        if other is s:
            continue
        for k, (_, _, t) in sorted(theirs.items()):
            if k in own:
                d, v, _ = own[k]
                want = plain_at(n) * (1 + v) + d
                checks.append(
                    f"EAGLE-3 k={k} at {n} layers: measured {t:.2f} ms a step, projected from {spec_layers} "
                    f"layers {want:.2f} ms ({t / want - 1:+.1%}); its overhead over the plain step "
                    f"{t - plain_at(n):.2f} ms against {own[k][2] - plain_at(spec_layers):.2f} ms at "
                    f"{spec_layers} layers"
                )
    return checks


def _split_note(spec_layers: int, profiled: bool) -> str:
    how = (
        "the drafter's share of each step from the profile (--profile), the rest of the overhead the verify's "
        "extra over a plain step"
        if profiled
        else "no profile that separates the drafter (none, or vLLM's V2 runner, whose trace marks steps, not "
        "phases): the whole overhead over a plain step is taken as the drafter's, fixed (a verify of k+1 tokens "
        "at this batch costs what a plain step does: verify extra 0)"
    )
    return (
        f"speculative step at {spec_layers} layers split as: {how}; the drafter's time does not grow with the "
        "target's layers, the verify's extra grows with them (a fraction of the plain step)"
    )


def _rows(measured: dict[int, tuple[float, float]], ks: tuple[int, ...], target_plain: float) -> list[Row]:
    """One row per k: measured overheads where measured, else extrapolated linearly in k."""
    mk = sorted(measured)
    rows = []
    for k in ks:
        d, v = (
            measured[k]
            if k in measured
            else (_line(mk, [measured[j][0] for j in mk], k), _line(mk, [measured[j][1] for j in mk], k))
        )
        spec = target_plain * (1 + v) + d
        cost = spec / target_plain
        rows.append(Row(k, k in measured, d, v, spec, cost, break_even(cost, k)))
    return rows


def project(
    runs: list[tuple[int, RunSummary]],
    *,
    target_layers: int,
    concurrency: int = 1,
    ks: tuple[int, ...] = (1, 2, 3, 4, 5),
    host: Host | None = STORY,
) -> Projection:
    """The projection (see the module's docstring) from ``(layers, summary)`` pairs."""
    layer_steps, spec_runs = _collect(runs, concurrency)
    fixed, per_layer = _fit(layer_steps)
    assumptions = [
        f"plain step = {fixed:.3f} ms + {per_layer:.3f} ms x layers, fitted to the baselines at "
        f"{', '.join(f'{n} layers {t:.2f} ms' for n, t in layer_steps.items())} (concurrency {concurrency}): "
        "every further layer costs what the measured ones added (the first layer dense, the rest MoE alike)",
    ]

    def plain_at(layers: int) -> float:
        """The plain step at ``layers``: measured there, else the fit."""
        return layer_steps.get(layers) or (fixed + per_layer * layers)

    # the run with the most draft lengths measured (then the most layers) sets the overheads
    per_run = [(n, s, _overheads(s, plain_at(n), concurrency)) for n, s in spec_runs]
    chosen = max(per_run, key=lambda r: (len(r[2]), r[0]))
    spec_layers, s, own = chosen
    measured = {k: (d, v) for k, (d, v, _) in own.items()}
    checks = _checks(per_run, chosen, plain_at)
    if not measured:
        raise ConfigError(
            f"the EAGLE-3 run ({spec_layers} layers) has no measurement at concurrency {concurrency}",
            hint="measure the speculative configurations at the concurrency projected (--concurrency)",
        )
    assumptions.append(_split_note(spec_layers, any(p.step_ms and p.phases for p in s.profiles)))
    if any(k not in measured for k in ks):
        assumptions.append(
            f"k not measured ({', '.join(str(k) for k in ks if k not in measured)}): drafter ms and verify "
            f"extra extrapolated linearly in k from k = {', '.join(map(str, sorted(measured)))}"
        )
    target_plain = fixed + per_layer * target_layers
    proj = Projection(
        concurrency=concurrency,
        layer_steps=layer_steps,
        per_layer_ms=per_layer,
        fixed_ms=fixed,
        spec_layers=spec_layers,
        target_layers=target_layers,
        plain_ms=target_plain,
        rows=_rows(measured, ks, target_plain),
        assumptions=assumptions,
        checks=checks,
    )
    if host is not None:
        _carry(proj, host)
    return proj


def _carry(proj: Projection, host: Host) -> None:
    """The one-GPU cost ratios carried to a tensor-parallel host of known plain step and comm share."""
    plain = 1000.0 / host.baseline_tok_s
    comm = host.comm_share * plain
    compute = plain - comm
    proj.host, proj.host_plain_ms, proj.host_comm_ms = host, plain, comm
    if host.measured_k and host.measured_drafts and host.measured_accepted is not None:
        length = 1.0 + host.measured_accepted / host.measured_drafts
        proj.host_a = solve_a_from_mean(length - 1.0, host.measured_k)
        if host.measured_tok_s:
            proj.host_measured_speedup = host.measured_tok_s / host.baseline_tok_s
            proj.host_measured_cost = length / proj.host_measured_speedup
    for r in proj.rows:
        extra_comm = comm * host.draft_collectives * r.k / host.collectives_per_step
        r.host_spec_ms = compute * r.cost + comm + extra_comm
        r.host_cost = r.host_spec_ms / plain
        r.host_break_even_a = break_even(r.host_cost, r.k)
        if proj.host_a is not None:
            r.host_predicted_speedup = tokens_per_step(proj.host_a, r.k) / r.host_cost
    proj.assumptions += [
        f"{host.name}: a plain step is {plain:.2f} ms (1000 / {host.baseline_tok_s:g} tok/s), "
        f"{host.comm_share:.1%} of it collectives ({comm:.2f} ms) and the rest compute ({compute:.2f} ms) "
        f"[{host.source}]",
        "its compute part costs what one GPU's does, in the same ratio: compute x r_k (the one-GPU projection "
        f"at {proj.target_layers} layers; the RTX PRO 6000's bandwidth and TP {host.tensor_parallel} slicing scale "
        "plain and speculative steps alike)",
        f"its collectives are latency-bound (small messages at batch 1), so a verify of k+1 tokens makes the "
        f"same {host.collectives_per_step} as a plain step in the same time, and each draft forward adds "
        f"{host.draft_collectives} more of the same cost",
    ]
    if proj.host_a is not None:
        proj.assumptions.append(
            f"the drafter's quality there: {1 + host.measured_accepted / host.measured_drafts:.3f} tokens per "
            f"step at k={host.measured_k} is an i.i.d. acceptance a = {proj.host_a:.3f} per position; other k "
            "predicted with that a"
        )


def _f(x: float | None, fmt: str, none: str = "none") -> str:
    return none if x is None else format(x, fmt)


ONE_GPU_COLUMNS = (
    "k",
    "measured",
    "drafter ms",
    "verify extra",
    "spec step ms",
    "cost ratio",
    "break-even a",
    "break-even tokens/step",
)
HOST_COLUMNS = ("k", "spec step ms", "cost ratio", "break-even a", "predicted speedup at the measured drafter")


def one_gpu_rows(proj: Projection) -> list[list[str]]:
    """The table per k on one GPU at the target's layers (cells as ``markdown`` shows them)."""
    return [
        [
            str(r.k),
            "yes" if r.measured else "extrapolated",
            f"{r.drafter_ms:.2f}",
            f"{r.verify_extra:+.1%}",
            f"{r.spec_ms:.2f}",
            f"{r.cost:.2f}x",
            _f(r.break_even_a, ".2f", "unreachable"),
            f"{r.cost:.2f}",
        ]
        for r in proj.rows
    ]


def host_rows(proj: Projection) -> list[list[str]]:
    """The table per k carried to the host (empty without one)."""
    if proj.host is None:
        return []
    return [
        [
            str(r.k),
            _f(r.host_spec_ms, ".2f"),
            f"{_f(r.host_cost, '.2f')}x",
            _f(r.host_break_even_a, ".2f", "unreachable"),
            f"{_f(r.host_predicted_speedup, '.2f', '–')}x",
        ]
        for r in proj.rows
    ]


def _md_rows(columns: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    head = ["| " + " | ".join(columns) + " |", "|" + "|".join(["---"] * len(columns)) + "|"]
    return head + ["| " + " | ".join(r) + " |" for r in rows]


def markdown(proj: Projection) -> str:
    """The projection as a readable page: the fit, the table per k, the host, the assumptions."""
    fit = ", ".join(f"{n} layers {t:.2f} ms" for n, t in proj.layer_steps.items())
    lines = [
        f"# {proj.target_layers} layers on paper, from {len(proj.layer_steps)} layer counts measured",
        "",
        f"Plain decode step at concurrency {proj.concurrency}: {fit} -> **{proj.per_layer_ms:.3f} ms per layer** "
        f"+ {proj.fixed_ms:.3f} ms fixed; at {proj.target_layers} layers **{proj.plain_ms:.2f} ms** "
        f"({1000 / proj.plain_ms:.1f} tok/s per stream on one GPU's worth of work). EAGLE-3 measured at "
        f"{proj.spec_layers} layers.",
        "",
        *_md_rows(ONE_GPU_COLUMNS, one_gpu_rows(proj)),
    ]
    h = proj.host
    if h is not None and proj.host_plain_ms is not None:
        lines += [
            "",
            f"## On {h.name}",
            "",
            f"Plain step {proj.host_plain_ms:.2f} ms ({h.baseline_tok_s:g} tok/s), of which collectives "
            f"{proj.host_comm_ms:.2f} ms ({h.comm_share:.1%}).",
            "",
            *_md_rows(HOST_COLUMNS, host_rows(proj)),
        ]
        if proj.host_measured_cost is not None and h.measured_k:
            row = next((r for r in proj.rows if r.k == h.measured_k), None)
            lines += [
                "",
                f"Measured there at k={h.measured_k}: {proj.host_measured_speedup:.2f}x, so a speculative step "
                f"cost **{proj.host_measured_cost:.2f}x** a plain one (tokens per step / speedup)"
                + (
                    f"; projected **{row.host_cost:.2f}x** (predicted {row.host_predicted_speedup:.2f}x). "
                    f"Measured over projected: {proj.host_measured_cost / row.host_cost:.2f}x, the cost "
                    "the architecture and the assumptions below do not account for."
                    if row and row.host_cost and row.host_predicted_speedup
                    else "."
                ),
            ]
    if proj.checks:
        lines += ["", "## Checks against runs the projection was not fitted to", "", *[f"- {c}" for c in proj.checks]]
    lines += ["", "## Assumptions", "", *[f"- {a}" for a in proj.assumptions], ""]
    return "\n".join(lines)
