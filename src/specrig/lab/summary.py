"""From measurements to answers: each speculative configuration paired with
its baseline at every load point (speedup with a confidence interval over
repeats, the lossless check, acceptance and its diagnosis), where speculation
stops paying along the load axis, which method and k to use per load band,
thresholds, and the summary rebuilt from pytest-benchmark's JSON."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specrig.core.counters import sum_counters
from specrig.core.errors import SpecrigError
from specrig.engine import get_engine
from specrig.lab.divergence import explain, lossless
from specrig.lab.eager import acceptance_checks, compiled_only, with_checks
from specrig.lab.identity import ConfigId, ServerFacts
from specrig.lab.plan import BenchPlan
from specrig.lab.results import (
    BenchFailure,
    ConfigResult,
    Measurement,
    Pairing,
    ProfileBreakdown,
    RunSummary,
    Threshold,
)
from specrig.lab.roofline import rooflines
from specrig.recipe.schema import Recipe
from specrig.specdec.stats import Interval, ratio_interval
from specrig.specdec.theory import compute, diagnose

__all__ = ["pair", "lossless", "crossover_lines", "recommendations", "thresholds", "summary_from_benchmark_json"]


def pair(
    cfg: ConfigResult,
    spec_runs: list[Measurement],
    baselines: list[Measurement],
    baseline_from: str = "this run",
    engine: str | None = None,
) -> Pairing:
    """One configuration at one load point (all its repeats) against its baseline; ``engine`` names
    the adapter whose eager flag a shortfall against the offline figure suggests as the rerun."""
    spec_runs = sorted(spec_runs, key=lambda m: m.repeat)
    point = spec_runs[0].point
    ratios = []
    for m in spec_runs:
        same = [b for b in baselines if b.repeat == m.repeat] or baselines
        base_rate = statistics.fmean(b.decode_tok_s.mean for b in same if b.decode_tok_s.mean) if same else None
        if base_rate and m.decode_tok_s.mean:
            ratios.append(m.decode_tok_s.mean / base_rate)
    throughput = None
    if baselines:
        throughput = statistics.fmean(m.output_tok_s for m in spec_runs) / statistics.fmean(
            b.output_tok_s for b in baselines
        )
    counters = [m.spec_counters for m in spec_runs if m.spec_counters is not None]
    stats = None
    total = sum_counters(counters)
    if total is not None:
        tpot_s = statistics.fmean(m.latency.tpot_ms.mean or 0 for m in spec_runs) / 1000 or None
        tpot_b = statistics.fmean(b.latency.tpot_ms.mean or 0 for b in baselines) / 1000 or None if baselines else None
        stats = compute(
            total,
            tpot_spec_s=tpot_s,
            tpot_base_s=tpot_b,
            decode_tok_s_spec=statistics.fmean(m.decode_tok_s.mean or 0 for m in spec_runs) or None,
            decode_tok_s_base=statistics.fmean(b.decode_tok_s.mean or 0 for b in baselines) or None
            if baselines
            else None,
        )
    speedup = ratio_interval(ratios) if ratios else None
    if stats is not None and speedup is not None:  # one speedup figure everywhere: the repeats' geometric mean
        stats = dataclasses.replace(stats, measured_speedup=speedup.mean)
    offline = cfg.offline.rate_at(cfg.k) if cfg.offline and cfg.k else None
    matched = bool(cfg.offline and cfg.offline.matched)
    return Pairing(
        config=cfg.name,
        id=cfg.id,
        point=point,
        k=cfg.k or 0,
        speedup=speedup,
        throughput_ratio=throughput,
        acceptance_rate=stats.acceptance_rate if stats else None,
        mean_acceptance_length=stats.mean_acceptance_length if stats else None,
        per_position=list(stats.per_position) if stats and stats.per_position else None,
        lossless=lossless(spec_runs[0], baselines) if baselines else None,
        diagnosis=(
            diagnose(
                stats,
                offline,
                matched=matched,
                offline_unbound=cfg.drafter_info.offline_eval_unbound,
                drafter_fault=cfg.drafter_info.drafter_fault,
                eager_flag=get_engine(engine).eager_flag(cfg.server_argv) if engine and cfg.server_argv else None,
            )
            if stats
            else "no speculative counters"
        )
        + (f"; {cfg.layer_note}" if cfg.layer_note else ""),
        baseline_from=baseline_from,
        step_cost=stats.step_cost if stats else None,
    )


def crossover_lines(pairings: list[Pairing]) -> list[str]:
    """Per configuration, where along the load axis speculation stops paying."""
    out = []
    for ident in dict.fromkeys(p.id for p in pairings):
        pts = sorted((p for p in pairings if p.id == ident and p.speedup), key=lambda p: p.point.level)
        if not pts:
            continue
        name = pts[0].config
        pays = [p for p in pts if p.speedup and p.speedup.mean >= 1.0]
        loses = [p for p in pts if p.speedup and p.speedup.mean < 1.0]

        def at(p: Pairing) -> str:
            return f"{p.point.describe()} ({p.speedup.mean:.2f}x)"  # type: ignore[union-attr]

        if not loses:
            out.append(f"{name} pays at every load measured: " + ", ".join(at(p) for p in pts))
        elif not pays:
            out.append(f"{name} never pays here: " + ", ".join(at(p) for p in pts))
        else:
            last_pay = max(pays, key=lambda p: p.point.level)
            first_loss = min(
                (p for p in loses if p.point.level > last_pay.point.level), default=None, key=lambda p: p.point.level
            )
            if first_loss is None:
                out.append(f"{name} loses at {at(loses[0])} but pays at higher load, up to {at(last_pay)}")
            else:
                out.append(f"{name} pays up to {at(last_pay)}, loses at {at(first_loss)}")
    return out


def _repeats_to_separate(a: Interval, b: Interval) -> int | None:
    """Repeats that would shrink both intervals (1/sqrt(n)) until they no longer overlap."""
    gap = abs(a.mean - b.mean)
    if gap <= 0 or a.n < 2 or b.n < 2:
        return None
    need = ((a.half_width + b.half_width) / gap) ** 2 * max(a.n, b.n)
    return max(math.ceil(need), max(a.n, b.n) + 1)


def recommendations(pairings: list[Pairing]) -> list[str]:
    """Per load point, the configuration (method and k) that paid best, named a winner only when
    its interval separates from the runner-up's (and from 1.0x); else said indistinguishable."""
    out = []
    for level in sorted({p.point.level for p in pairings}):
        here = sorted((p for p in pairings if p.point.level == level and p.speedup), key=lambda p: -p.speedup.mean)  # type: ignore[union-attr]
        if not here:
            continue
        best = here[0]
        s = best.speedup
        assert s is not None
        where = best.point.describe()
        if s.mean < 1.0 and (s.n < 2 or s.high < 1.0):
            out.append(f"{where}: no speculation (best was {best.config} k={best.k} at {s.mean:.2f}x)")
            continue
        if s.n < 2:
            others = ", ".join(f"{p.config} k={p.k} {p.speedup.mean:.2f}x" for p in here[1:3])  # type: ignore[union-attr]
            tail = f" (then {others})" if others else ""
            out.append(
                f"{where}: best measured {best.config} (k={best.k}), {s.mean:.2f}x{tail}; one repeat gives no "
                "interval, so neither the winner nor 'it pays' is established: --repeat 3 or more tells them apart"
            )
            continue
        if s.low <= 1.0:
            out.append(
                f"{where}: {best.config} (k={best.k}) {s.describe('{:.2f}', 'x')} is not distinguishable from no speculation"
            )
            continue
        rival = here[1] if len(here) > 1 else None
        if rival is not None and rival.speedup is not None and rival.speedup.high >= s.low:
            n = _repeats_to_separate(s, rival.speedup)
            more = f"; about {n} repeats would tell them apart" if n else ""
            out.append(
                f"{where}: {best.config} (k={best.k}) {s.describe('{:.2f}', 'x')} and {rival.config} (k={rival.k}) "
                f"{rival.speedup.describe('{:.2f}', 'x')} are indistinguishable{more}"
            )
            continue
        out.append(f"{where}: use {best.config} (k={best.k}), {s.describe('{:.2f}', 'x')}")
    return out


def thresholds(
    recipe: Recipe, cfg: ConfigResult, runs: list[Measurement], pairings: list[Pairing], engine: str = ""
) -> list[Threshold]:
    """The recipe's gates judged on typed results (timed gates with the recipe's tolerance);
    a spec's gates for ``engine`` where the recipe gives that engine its own."""
    tol = recipe.bench.tolerance
    if cfg.id.eager:  # --acceptance-check's eager twin: a diagnostic, not what is served
        return []
    if not cfg.is_spec:
        if recipe.bench.min_decode_tok_s and runs:
            rate = min(m.decode_tok_s.mean or 0.0 for m in runs)
            return [
                Threshold(
                    name="decode_tok_s",
                    measured=rate,
                    threshold=recipe.bench.min_decode_tok_s,
                    tolerance=tol,
                    informational=False,
                )
            ]
        return []
    # the configuration's identity names its recipe entry: a --k or --drafter variant keeps its spec's gates
    spec = recipe.spec.get(cfg.id.spec or "")
    if spec is None:
        return []
    out = []
    mine = [p for p in pairings if p.id == cfg.id]
    min_acc, min_speedup, why = spec.gates(engine)
    if min_acc is not None:  # counted, not timed: no tolerance
        acc = min((p.acceptance_rate for p in mine if p.acceptance_rate is not None), default=None)
        out.append(
            Threshold(
                name="acceptance_rate",
                measured=acc,
                threshold=min_acc,
                tolerance=0.0,
                informational=spec.informational,
                note=why if min_acc != spec.min_acceptance_rate else "",
            )
        )
    if min_speedup is not None:
        sp = min((p.speedup.mean for p in mine if p.speedup), default=None)
        out.append(
            Threshold(
                name="speedup",
                measured=sp,
                threshold=min_speedup,
                tolerance=tol,
                informational=spec.informational,
                note=why if min_speedup != spec.min_speedup else "",
            )
        )
    return out


def gate_problems(summary: RunSummary, *, missing: bool = True) -> list[str]:
    """Every gate the run does not meet, a line each (informational gates never count), and
    (``missing``) every configuration that produced no result: the one judgement of a run's gates
    (``specrig bench`` exits with ThresholdError on it; ``pytest bench/`` by hand fails on it, where
    a configuration without a result is a failed or deselected test, said by pytest itself)."""
    problems = [
        f"{c.name}: {t.describe()}"
        for c in summary.configs
        for t in c.thresholds
        if not t.passed and not t.informational
    ]
    measured = {m.id for m in summary.measurements}
    absent = [c.name for c in summary.configs if c.id not in measured]
    if absent and missing:
        problems.append(f"no result for {', '.join(absent)} (see the pytest output above and logs/)")
    return problems


def summary_from_benchmark_json(
    data: dict[str, Any],
    plan: BenchPlan,
    recipe: Recipe,
    *,
    earlier: list[Measurement] | None = None,
    server_info: Mapping[ConfigId, ServerFacts] | None = None,
    timings: dict[str, float] | None = None,
    errors: list[BenchFailure] | list[dict[str, Any]] | None = None,
    profiles: Mapping[ConfigId, ProfileBreakdown] | None = None,
    prompts: Mapping[str, str] | None = None,
) -> RunSummary:
    """The run's summary from pytest-benchmark's JSON (each benchmark's
    ``extra_info`` holds its Measurement and any baseline measured for it).
    ``prompts`` (id -> text, once the servers are stopped): every divergence of the lossless
    check is explained by the target's own logits (plan.python, plan.model_path)."""
    measurements = _measurements(data)
    configs = _config_results(plan, server_info or {})
    baselines = [m for m in measurements if m.id.is_baseline]
    baseline_from = "this run"
    if plan.baseline_run:
        baselines, baseline_from = list(earlier or []), plan.baseline_run
    pairings = [
        pair(c, runs, [b for b in baselines if b.point == point], baseline_from, plan.engine)
        for c in configs
        if c.is_spec
        for point in plan.workload.points
        if (runs := [m for m in measurements if m.id == c.id and m.point == point])
    ]
    configs = [
        c.model_copy(
            update={
                "thresholds": thresholds(recipe, c, [m for m in measurements if m.id == c.id], pairings, plan.engine)
            }
        )
        for c in configs
    ]
    if prompts is not None:
        pairings = explain(
            pairings,
            measurements,
            baselines,
            prompts=prompts,
            python=plan.python,
            model_path=plan.model_path,
            work=Path(plan.results_dir) / "lossless",
            chat=plan.workload.chat,
        )
    roofs = rooflines(plan.roofline, baselines)
    profiled = dict(profiles or {})
    base_profile = profiled.get(plan.baseline.id) if plan.baseline else None
    pairings = [with_measured_cost(p, profiled.get(p.id), base_profile) for p in pairings]
    checks = acceptance_checks(configs, measurements, plan.workload.points, plan.configs)
    pairings, served = with_checks(pairings, checks), compiled_only(pairings)  # served: no eager twin
    return RunSummary(
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        recipe=plan.recipe,
        engine=plan.engine,
        model=plan.model_source,
        served_name=plan.served_name,
        lock_digest=plan.lock_digest,
        built=plan.built,
        host=plan.host,
        workload=plan.workload,
        timings=timings or {},
        drift=plan.drift,
        configs=configs,
        measurements=sorted(measurements, key=lambda m: (m.repeat, m.config, m.point.level)),  # by name: stable
        pairings=pairings,
        acceptance_checks=checks,
        acceptance_note=plan.acceptance_note,
        crossover=crossover_lines(served) if len(plan.workload.points) > 1 else [],
        recommendations=recommendations(served),
        roofline=roofs[0] if roofs else None,
        rooflines=roofs,
        profiles=list(profiled.values()),
        counter_warnings=_counter_warnings(measurements),
        errors=[BenchFailure.model_validate(e) for e in errors or []],
    )


def _measurements(data: dict[str, Any]) -> list[Measurement]:
    """Every Measurement in pytest-benchmark's JSON (a benchmark's own, and the baselines measured
    for it), one per (configuration, load point, repeat)."""
    seen: dict[tuple[ConfigId, str, int], Measurement] = {}
    for b in data.get("benchmarks", []):
        info = b.get("extra_info") or {}
        for raw in [info.get("specrig")] + list(info.get("specrig_baselines") or []):
            if raw:
                m = Measurement.model_validate(raw)
                seen[(m.id, m.point.label, m.repeat)] = m
    return list(seen.values())


def _config_results(plan: BenchPlan, server_info: Mapping[ConfigId, ServerFacts]) -> list[ConfigResult]:
    """Each planned configuration with what its server said (argv, aux layers, start time)."""
    out = []
    for c in plan.configs:
        info = server_info.get(c.id) or ServerFacts()
        eagle = c.spec is not None and c.spec.method.startswith("eagle")
        out.append(
            ConfigResult(
                name=c.name,
                id=c.id,
                method=c.spec.method if c.spec else None,
                k=c.spec.num_speculative_tokens if c.spec else None,
                drafter=c.drafter,
                drafter_info=c.drafter_info,
                offline=c.drafter_info.offline_for(plan.workload.dataset),
                layer_note=_layer_note(c.drafter, plan.engine, info.aux_layers) if eagle else None,
                server_argv=info.argv,
                ready_after_s=info.ready_after_s,
            )
        )
    return out


def _counter_warnings(measurements: list[Measurement]) -> list[str]:
    """Runs whose engine counters another client shared, or that could not be read."""
    return [
        f"{m.config} {m.point.label} r{m.repeat}: the engine counted {m.server_generation_tokens:g} generated tokens, "
        f"this run received {m.completion_tokens}: other traffic shared the server"
        for m in measurements
        if m.counters_own is False
    ] + [f"{m.config} {m.point.label} r{m.repeat}: {m.counter_problem}" for m in measurements if m.counter_problem]


def with_measured_cost(p: Pairing, spec: ProfileBreakdown | None, base: ProfileBreakdown | None) -> Pairing:
    """The pairing with the step cost the profiler measured (``spec``: its configuration's profile,
    ``base``: the baseline's), and its diagnosis saying what a speculative step is made of (and when
    the inferred cost disagrees)."""
    if spec is None or base is None or not base.step_ms or p.point.concurrency != 1:
        return p  # the profiled requests run one at a time: comparable with one stream only
    # per verification step: the engine's own step marks do not count verification steps alike on every
    # runner (vLLM's V2 runner marks the drafter's steps too), the tokens and the acceptance length do
    mal = p.mean_acceptance_length or 1.0
    if spec.tokens and base.tokens:
        spec_step, base_step = spec.window_ms / (spec.tokens / mal), base.window_ms / base.tokens
    else:
        spec_step, base_step = spec.step_ms, base.step_ms
    cost = spec_step / base_step
    parts = sorted(spec.per_step_ms.items(), key=lambda kv: -kv[1])[:4]
    total = sum(spec.per_step_ms.values()) or 1.0
    made_of = ", ".join(f"{k} {v / total:.0%}" for k, v in parts)
    note = f"profiled: a verification step takes {spec_step:.2f} ms ({made_of}) against {base_step:.2f} ms plain: {cost:.2f}x"
    if spec.phases is False:
        note += " (the trace marks steps, not phases: the drafter's kernels are in the target's categories)"
    if p.step_cost is not None:
        agree = abs(cost / p.step_cost - 1) <= 0.15
        note += f" (inferred {p.step_cost:.2f}x: {'agrees' if agree else 'disagrees; the profiled run is short and slowed by the profiler'})"
    return p.model_copy(update={"measured_step_cost": cost, "diagnosis": f"{p.diagnosis}; {note}"})


def _layer_note(drafter: str | None, engine: str, served: list[int] | None = None) -> str | None:
    """drafter-check's one line on the aux-layer convention (None when consistent or unknown); when the
    engine's log says which aux layers it used and they are not the drafter's, that is said instead."""
    from specrig.specdec.layers import aux_ids, layer_note, read_drafter

    asked = None
    if drafter and served is not None:
        try:
            asked = aux_ids(read_drafter(Path(drafter)))
        except SpecrigError:
            asked = None
    if served is not None and asked is not None and list(served) != list(asked):
        return (
            f"the engine ignored the drafter's aux ids {asked} and used {served} (its log says so): "
            "the drafter is served on other features than its config asks for"
        )
    note = layer_note(drafter, engine)
    if note and served is not None:
        note += f" (the engine's log: aux layers {served})"
    elif note:  # the config asks for shifted ids; whether the engine used them, its log does not say
        note += (
            f" (as the config asks; not confirmed: {engine} logged no aux layers, and an engine that "
            "ignores the config's ids serves its defaults instead)"
        )
    return note
