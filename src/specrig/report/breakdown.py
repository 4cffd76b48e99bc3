"""Where each decode step's time goes (``--profile``): a table with one row per
configuration (ms per step in each category, the step time, the client's time
for the profiled requests beside the trace's), and a stacked bar per
configuration beside its baseline (profile.png)."""

from __future__ import annotations

from pathlib import Path

from specrig.lab.profile import CATEGORIES
from specrig.lab.results import ProfileBreakdown, RunSummary

__all__ = ["breakdown_columns", "breakdown_rows", "plot_breakdown"]


def _used(profiles: list[ProfileBreakdown]) -> list[str]:
    return [c for c in CATEGORIES if any(p.per_step_ms.get(c, 0) > 0.005 for p in profiles)]


def breakdown_columns(s: RunSummary) -> tuple[str, ...]:
    return ("config", "device", "steps", *_used(s.profiles), "step ms", "trace / client")


def breakdown_rows(s: RunSummary) -> list[list[str]]:
    cats = _used(s.profiles)
    rows = []
    for p in s.profiles:
        cover = f"{p.coverage:.0%}" if p.coverage is not None else "-"
        rows.append(
            [
                p.config,
                p.device,
                str(p.steps),
                *(f"{p.per_step_ms.get(c, 0):.2f}" for c in cats),
                f"{p.step_ms:.2f}",
                cover,
            ]
            + ([] if not p.cut else [])
        )
    return rows


def plot_breakdown(s: RunSummary, out: Path, title: str) -> Path | None:
    """One stacked bar per profiled configuration (ms per step by category)."""
    if not s.profiles:
        return None
    from specrig.report.plots import _plt, _save

    plt = _plt()
    cats = _used(s.profiles)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(s.profiles) + 3), 4.5))
    names = [p.config for p in s.profiles]
    bottom = [0.0] * len(names)
    colors = plt.get_cmap("tab20").colors
    for i, c in enumerate(cats):
        vals = [p.per_step_ms.get(c, 0.0) for p in s.profiles]
        ax.bar(names, vals, bottom=bottom, label=c, color=colors[i % len(colors)])
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    for x, p in enumerate(s.profiles):
        ax.text(x, p.step_ms, f"{p.step_ms:.1f} ms", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("ms per decode step")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return _save(fig, out)
