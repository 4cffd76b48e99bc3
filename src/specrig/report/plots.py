"""PNG plots of typed results: decode rate per prompt, acceptance per draft position and per
prompt, speedup against load, a drafter's data-size curve and its held-out acceptance against
training time. Measures nothing; a plot with nothing to show is not drawn (each returns None then)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from specrig.core import atomic
from specrig.lab.results import Measurement, Pairing

__all__ = [
    "plot_throughput",
    "plot_acceptance",
    "plot_prompt_acceptance",
    "plot_speedup_vs_load",
    "plot_curve",
    "draw_curve",
    "plot_training_time",
]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, out: Path) -> Path:
    fig.tight_layout()
    with atomic.atomic_path(out, suffix=out.suffix) as tmp:  # renamed over ``out`` once the PNG is whole
        fig.savefig(tmp, dpi=110, format=out.suffix.lstrip(".") or "png")
    _plt().close(fig)
    return out


def plot_throughput(series: list[tuple[str, Measurement]], out: Path, title: str) -> Path | None:
    """Grouped bars: per-stream decode tok/s per prompt for each (label, measurement)."""
    series = [(label, m) for label, m in series if any(r.decode_tok_s for r in m.requests)]
    if not series:
        return None
    plt = _plt()
    prompts: list[str] = list(dict.fromkeys(r.prompt_id for _, m in series for r in m.requests))[:40]
    n = max(len(series), 1)
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(max(7, 0.5 * len(prompts) * n / 2 + 3), 4.2))
    for i, (label, m) in enumerate(series):
        vals = {r.prompt_id: r.decode_tok_s or 0.0 for r in m.requests}
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(prompts))]
        bars = ax.bar(xs, [vals.get(p, 0.0) for p in prompts], width, label=label)
        if len(prompts) <= 8:
            ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(
        range(len(prompts)),
        [p[:14] for p in prompts],
        rotation=45 if len(prompts) > 6 else 0,
        ha="right" if len(prompts) > 6 else "center",
        fontsize=7,
    )
    ax.set_ylabel("decode tok/s (per stream)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, out)


def plot_acceptance(
    pairings: list[tuple[str, Pairing]],
    out: Path,
    title: str,
    offline: dict[str, tuple[str, list[float]]] | None = None,
) -> Path | None:
    """Per-position acceptance (unconditional, as the engine counts it), the
    i.i.d. curve a^(i+1) with a = the first position's rate, and where known
    (``offline``: label -> (workload, per position)) the drafter's offline
    teacher-forced figure."""
    curves = [(label, p) for label, p in pairings if p.per_position]
    if not curves:
        return None
    plt = _plt()
    # many series (a report over several runs): the i.i.d. references are left out and the
    # figure grows with its legend, so the plot keeps its size
    iid = len(curves) <= 6
    entries = len(curves) * (2 if iid else 1) + sum(1 for label, _ in curves if offline and label in offline)
    fig, ax = plt.subplots(figsize=(9.5, max(4.2, 0.21 * entries + 0.9)))
    colors = plt.get_cmap("tab20").colors if len(curves) > 10 else [None]
    for i, (label, p) in enumerate(curves):
        color = colors[i % len(colors)]
        pp = p.per_position or []
        pos = list(range(1, len(pp) + 1))
        line = ax.plot(pos, pp, marker="o", color=color, label=f"{label}: measured")[0]
        a = pp[0]
        if iid:
            ax.plot(
                pos,
                [a**i for i in pos],
                linestyle="--",
                color=line.get_color(),
                alpha=0.6,
                label=f"{label}: i.i.d. a={a:.2f}",
            )
        if offline and label in offline:
            workload, off = offline[label]
            off = off[: len(pp)]
            ax.plot(
                list(range(1, len(off) + 1)),
                off,
                marker="x",
                linestyle=":",
                color=line.get_color(),
                label=f"{label}: offline, {workload}",
            )
    ax.set_xlabel("draft position")
    ax.set_ylabel("P(draft token at this position accepted)")
    ax.set_ylim(-0.02, 1.05)
    ax.set_xticks(range(1, max(len(p.per_position or []) for _, p in curves) + 1))
    ax.set_title(title if iid else f"{title} ({len(curves)} series; i.i.d. references left out)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return _save(fig, out)


def plot_prompt_acceptance(series: list[tuple[str, Measurement]], out: Path, title: str) -> Path | None:
    """Acceptance rate per prompt, from the per-request stats the engine returned."""
    rows = [(label, m) for label, m in series if any(r.draft_tokens for r in m.requests)]
    if not rows:
        return None
    plt = _plt()
    prompts = list(dict.fromkeys(r.prompt_id for _, m in rows for r in m.requests if r.draft_tokens))[:40]
    n = len(rows)
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(max(7, 0.35 * len(prompts) * n + 3), 4.2))
    for i, (label, m) in enumerate(rows):
        vals = {r.prompt_id: (r.accepted_tokens or 0) / r.draft_tokens for r in m.requests if r.draft_tokens}
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(prompts))]
        ax.bar(xs, [vals.get(p, 0.0) for p in prompts], width, label=label)
    ax.set_xticks(
        range(len(prompts)),
        [p[:14] for p in prompts],
        rotation=45 if len(prompts) > 6 else 0,
        ha="right" if len(prompts) > 6 else "center",
        fontsize=7,
    )
    ax.set_ylabel("accepted / drafted tokens")
    ax.set_ylim(0, 1.05)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, out)


def plot_speedup_vs_load(pairings: list[Pairing], out: Path, title: str) -> Path | None:
    """Speedup (with its interval when repeated) against the load level, per configuration."""
    pts = [p for p in pairings if p.speedup]
    if not pts:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for name in dict.fromkeys(p.config for p in pts):
        mine = sorted((p for p in pts if p.config == name), key=lambda p: p.point.level)
        xs = [p.point.level for p in mine]
        ys = [p.speedup.mean for p in mine]  # type: ignore[union-attr]
        err = [[p.speedup.mean - p.speedup.low for p in mine], [p.speedup.high - p.speedup.mean for p in mine]]  # type: ignore[union-attr]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=name)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    rate = pts[0].point.request_rate is not None
    ax.set_xlabel("request rate (req/s)" if rate else "concurrency (requests in flight)")
    if not rate:
        ax.set_xscale("log", base=2)
        levels = sorted({p.point.level for p in pts})
        ax.set_xticks(levels, [f"{x:g}" for x in levels])
    ax.set_ylabel("speedup vs paired baseline")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, out)


def _samples(n: int) -> str:
    return f"{n / 1000:g}k" if n >= 1000 and n % 100 == 0 else str(n)


def _mark_held(ax, rows: list, held: list[float], color) -> None:
    """Hollow rings on the held-out points the time budget cut; steps and epochs above each point."""
    xs = [n for n, _, _ in rows]
    capped = [(n, y) for (n, _, p), y in zip(rows, held, strict=True) if p.get("capped")]
    if capped:
        ax.plot(
            *zip(*capped, strict=True),
            marker="o",
            linestyle="",
            markersize=11,
            markerfacecolor="none",
            color=color,
            label="training stopped by the time budget",
        )
    for i, ((n, _, p), y) in enumerate(zip(rows, held, strict=True)):
        if p.get("steps"):  # above each point; neighbours closer than 1.6x apart lean away from each other
            near_next = i + 1 < len(xs) and xs[i + 1] / n < 1.6
            near_prev = i > 0 and n / xs[i - 1] < 1.6
            ha, dx = ("right", -4) if near_next else ("left", 4) if near_prev else ("center", 0)
            e = p.get("epochs")
            epochs = "" if e is None else f"\n{e:.0f} epochs" if abs(e - round(e)) < 0.005 else f"\n{e:.2f} epochs"
            ax.annotate(
                f"{p['steps']:,} steps{epochs}",
                (n, y),
                textcoords="offset points",
                xytext=(dx, 8),
                ha=ha,
                va="bottom",
                fontsize=7,
            )


def plot_curve(
    points: list[dict[str, Any]],
    out: Path,
    title: str,
    online: dict[int, float] | None = None,
    online_label: str = "served, the engine's counters",
) -> Path | None:
    """A drafter's data-size curve (``curve.json``'s points): mean acceptance length against the
    training samples, offline on held-out ShareGPT (teacher-forced at the evaluation's k, and
    walked as the engine drafts at k=3) and on the bench's own prompts; ``online`` (samples ->
    the engine's measured mean length) adds served figures, named by ``online_label`` (which
    traffic, load and k they were served at). Each held-out point is labelled with
    its steps and epochs; those the training-time budget cut are drawn hollow."""
    rows = sorted(((int(p["samples"]), p["offline"], p) for p in points if p.get("offline")), key=lambda r: r[0])
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    xs = [n for n, _, _ in rows]
    k = rows[0][1].get("k") or len(rows[0][1]["per_position"])
    held = [o.get("mean_acceptance_length") or 1 + sum(o["per_position"]) for _, o, _ in rows]
    line = ax.plot(xs, held, marker="o", label=f"held-out ShareGPT, k={k} (teacher-forced)")[0]
    _mark_held(ax, rows, held, line.get_color())
    walk = [(n, (o.get("walk") or {}).get("3")) for n, o, _ in rows]
    walked = [(n, w["mean_acceptance_length"]) for n, w in walk if w]
    if walked:
        ax.plot(
            *zip(*walked, strict=True), marker="s", linestyle="--", label="held-out ShareGPT, k=3 walked (as served)"
        )
    bench = [
        (n, o["bench_prompts"]) for n, o, _ in rows if (o.get("bench_prompts") or {}).get("mean_acceptance_length")
    ]
    if bench:
        b0 = bench[0][1]
        name = f"the bench's prompts ({b0.get('dataset')} x {b0.get('max_tokens')}), k={b0.get('k', k)}"
        ax.plot(
            [n for n, _ in bench],
            [b["mean_acceptance_length"] for _, b in bench],
            marker="^",
            linestyle=":",
            label=name,
        )
    if online:
        ax.plot(
            list(online),
            list(online.values()),
            marker="*",
            markersize=13,
            linestyle="-." if len(online) > 1 else "",
            label=online_label,
        )
    ax.set_xscale("log")
    ax.set_xticks(xs, [_samples(n) for n in xs])
    ax.minorticks_off()
    ax.set_xlabel("training samples (nested subsets of the same data)")
    ax.set_ylabel("mean acceptance length (tokens per step)")
    top = max(
        [*held, *(y for _, y in walked), *(b["mean_acceptance_length"] for _, b in bench), *(online or {}).values()]
    )
    ax.set_ylim(1.0, top + 0.35)
    ax.set_xlim(xs[0] / 1.4, xs[-1] * 1.4)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    return _save(fig, out)


def draw_curve(curve_json: Path, title: str) -> Path | None:
    """``curve.json`` (a run's, or a captured one) drawn as the PNG beside it (``curve.png``)."""
    points = json.loads(curve_json.read_text())["points"]
    return plot_curve(points, curve_json.with_suffix(".png"), title)


def plot_training_time(runs: dict[str, dict[str, Any]], out: Path, title: str) -> Path | None:
    """Held-out mean acceptance length (1 + the sum of the per-position rates of each epoch's
    held-out check) against the training seconds spent so far, one line per training run
    (label -> a train stage's facts: ``epochs`` with ``seconds`` and ``heldout_per_position``).
    Where each run stopped is labelled with its steps."""
    lines = {
        label: (facts, epochs)
        for label, facts in runs.items()
        if (epochs := [e for e in facts.get("epochs") or [] if e.get("heldout_per_position")])
    }
    if not lines:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    for label, (facts, epochs) in lines.items():
        xs = list(itertools.accumulate(e["seconds"] for e in epochs))
        ys = [1 + sum(e["heldout_per_position"]) for e in epochs]
        ax.plot(xs, ys, marker="o", label=label)
        if steps := facts.get("steps"):
            ax.annotate(f"{steps:,} steps", (xs[-1], ys[-1]), textcoords="offset points", xytext=(4, -10), fontsize=7)
    k = len(next(iter(lines.values()))[1][0]["heldout_per_position"])
    ax.set_xlabel("training seconds (each point: an epoch's held-out check)")
    ax.set_ylabel(f"held-out mean acceptance length, k={k} (teacher-forced)")
    ax.set_xlim(left=0)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    return _save(fig, out)
