"""``--acceptance-check``: does the engine's compiled / CUDA-graph path lose acceptance?

The plan serves every speculative configuration whose server runs compiled a second time,
right after it, with the engine adapter's eager flag added (``Engine.eager_flag``: vLLM
``--enforce-eager``, SGLang ``--disable-cuda-graph``): its twin ``NAME-eager``
(``ConfigId.eager``), on the same prompts at the same load points. Where the servers already
run eager there is nothing to compare: that is said once and no twin is added. The twin
needs no baseline of its own; its speed is the eager path's, so it is neither gated nor
recommended. The summary compares each configuration's acceptance with its twin's at every
load point, the repeats' counters added up (:func:`specrig.specdec.gap.rate_gap`: compiled -
eager, with its 95% interval), and appends the verdict to the configuration's diagnosis."""

from __future__ import annotations

from typing import Any

from specrig.core.counters import SpecCounters, sum_counters
from specrig.lab.identity import ConfigId
from specrig.lab.results import AcceptanceCheck, ConfigResult, LoadPoint, Measurement, Pairing
from specrig.specdec.gap import RESOLUTION, RateGap, rate_gap

__all__ = ["eager_twin_flag", "with_eager_twins", "acceptance_checks", "with_checks", "compiled_only", "check_line"]


def eager_twin_flag(engine: Any, args: list[str], *, asked: bool) -> tuple[str | None, str | None]:
    """(the flag every eager twin's server gets, None: no twin; what to say once when none is added),
    for servers started with ``args`` (the recipe's engine arguments, its speculative ones, --engine-arg)."""
    if not asked:
        return None, None
    flag = engine.eager_flag(args)
    if flag is not None:
        return flag, None
    return None, (
        f"--acceptance-check: the servers already run eager ({engine.eager_flag([])} is among their arguments): "
        "there is no compiled path to compare, so no eager twin is added"
    )


def with_eager_twins(configs: list[Any], flag: str | None) -> list[Any]:
    """The plan's configurations (``ConfigPlan``), each speculative one followed by its eager twin:
    the same configuration, ``flag`` added to its server's arguments (none without a flag)."""
    out = []
    for c in configs:
        out.append(c)
        if flag and c.spec is not None and not c.id.eager:
            twin = c.id.model_copy(update={"eager": True})
            out.append(c.model_copy(update={"id": twin, "name": twin.name, "server_args": [*c.server_args, flag]}))
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def check_line(g: RateGap, flag: str, resolution: float = RESOLUTION) -> str:
    """The verdict in words: the two rates, the gap with its interval, and what it means."""
    return f"acceptance under the compiled path {_pct(g.first)} vs eager ({flag}) {_pct(g.second)}: {_gap_words(g, resolution)}"


def _gap_words(g: RateGap, resolution: float = RESOLUTION) -> str:
    return (
        f"gap {100 * g.gap:+.1f} points (95% CI {100 * g.low:+.1f} to {100 * g.high:+.1f}): {_meaning(g, resolution)}"
    )


def _meaning(g: RateGap, resolution: float = RESOLUTION) -> str:
    verdict = g.verdict(resolution)
    if verdict == "loses":
        return "the compiled path loses acceptance"
    if verdict == "gains":
        return "eager accepts less, the compiled path is not the cause"
    if verdict == "within noise":
        return "within noise: the compiled path is not the cause"
    return (
        f"too few draft tokens to tell (the interval holds a loss of up to {-100 * g.low:.1f} points): "
        "measure more (--num-prompts, --repeat)"
    )


def _check(
    cfg: ConfigResult, twin: ConfigResult, point: LoadPoint, ms: list[Measurement], args: list[str]
) -> AcceptanceCheck:
    """One configuration against its twin at one load point (``args``: the twin's own server arguments)."""
    compiled = sum_counters([m.spec_counters for m in ms if m.id == cfg.id and m.spec_counters])
    eager = sum_counters([m.spec_counters for m in ms if m.id == twin.id and m.spec_counters])
    check = AcceptanceCheck(
        config=cfg.name,
        eager_config=twin.name,
        point=point,
        k=cfg.k or 0,
        eager_args=args,
        compiled_rate=_rate(compiled),
        eager_rate=_rate(eager),
        compiled_draft_tokens=compiled.draft_tokens if compiled else 0.0,
        eager_draft_tokens=eager.draft_tokens if eager else 0.0,
        verdict="unmeasured",
        line="",
    )
    if compiled is None or eager is None or check.compiled_rate is None or check.eager_rate is None:
        missing = [c.name for c, rate in ((cfg, check.compiled_rate), (twin, check.eager_rate)) if rate is None]
        line = f"no acceptance check: {' and '.join(missing)} counted no draft tokens at {point.describe()}"
        return check.model_copy(update={"line": line})
    g = rate_gap(compiled, eager)
    prompts, same = _same_text(ms, cfg.id, twin.id)
    line = check_line(g, " ".join(args)) + _text_note(prompts, same)
    update = {"gap": g.gap, "gap_low": g.low, "gap_high": g.high, "verdict": g.verdict(), "line": line}
    return check.model_copy(update={**update, "prompts": prompts, "same_text": same})


def _same_text(ms: list[Measurement], compiled: ConfigId, eager: ConfigId) -> tuple[int, int]:
    """(prompts both answered, how many of them token for token alike), over every repeat."""
    answers: dict[ConfigId, dict[tuple[int, str], tuple[int, ...]]] = {compiled: {}, eager: {}}
    for m in ms:
        for r in m.requests:
            if m.id in answers and r.token_ids is not None:
                answers[m.id][(m.repeat, r.prompt_id)] = tuple(r.token_ids)
    both = answers[compiled].keys() & answers[eager].keys()
    return len(both), sum(answers[compiled][key] == answers[eager][key] for key in both)


def _text_note(prompts: int, same: int) -> str:
    """What the interval leaves out where the two paths wrote different answers: the rates were
    counted over different text, and a text alone moves a drafter's rate."""
    if same >= prompts:
        return ""
    return (
        f"; the two paths' answers differ on {prompts - same} of {prompts} prompts, so the rates count different "
        "text: the interval counts verification steps, not prompts; confirm on many prompts "
        "(--dataset sharegpt --num-prompts 40, --repeat 3)"
    )


def _rate(c: SpecCounters | None) -> float | None:
    return c.accepted_tokens / c.draft_tokens if c is not None and c.draft_tokens > 0 else None


def acceptance_checks(
    configs: list[ConfigResult], measurements: list[Measurement], points: list[LoadPoint], planned: list[Any]
) -> list[AcceptanceCheck]:
    """Each configuration that has an eager twin against it, at every load point where either was
    measured; ``planned``: the plan's configurations (``ConfigPlan``: a twin's own server arguments)."""
    args = {c.id: list(c.server_args) for c in planned}
    twins = {c.id.compiled(): c for c in configs if c.id.eager}
    out = []
    for cfg in configs:
        twin = twins.get(cfg.id) if not cfg.id.eager else None
        if twin is None:
            continue
        for point in points:
            here = [m for m in measurements if m.point == point and m.id in (cfg.id, twin.id)]
            if here:
                out.append(_check(cfg, twin, point, here, args.get(twin.id) or []))
    return out


def with_checks(pairings: list[Pairing], checks: list[AcceptanceCheck]) -> list[Pairing]:
    """The pairings with each check's verdict in the compiled configuration's diagnosis, and each
    twin's diagnosis saying what the twin is."""
    out = []
    for p in pairings:
        mine = next((c for c in checks if c.config == p.config and c.point == p.point), None)
        twin = next((c for c in checks if c.eager_config == p.config), None)
        if mine is not None and mine.gap is not None:
            assert mine.compiled_rate is not None and mine.eager_rate is not None
            assert mine.gap_low is not None and mine.gap_high is not None
            g = RateGap(mine.compiled_rate, mine.eager_rate, mine.gap, mine.gap_low, mine.gap_high)
            rerun = f"--acceptance-check ran it eager ({' '.join(mine.eager_args)}, the same prompts)"
            p = p.model_copy(
                update={
                    "diagnosis": f"{p.diagnosis}; {rerun}: {_gap_words(g)}{_text_note(mine.prompts, mine.same_text)}"
                }
            )
        elif twin is not None:
            note = (
                f"the eager twin of {twin.config} ({' '.join(twin.eager_args)}, --acceptance-check): its speed is "
                "the eager path's, neither gated nor recommended"
            )
            p = p.model_copy(update={"diagnosis": f"{note}; {p.diagnosis}"})
        out.append(p)
    return out


def compiled_only(pairings: list[Pairing]) -> list[Pairing]:
    """The pairings of the configurations as served (the eager twins left out): what is recommended."""
    return [p for p in pairings if not p.id.eager]
