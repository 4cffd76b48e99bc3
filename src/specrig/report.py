"""Results as JSON, a readable table, markdown and PNG plots; several runs side
by side; regressions against an earlier run. Measures nothing itself."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = [
    "build_summary",
    "write_report",
    "print_table",
    "rich_table",
    "console",
    "table_rows",
    "markdown_table",
    "plot_throughput",
    "plot_acceptance",
    "regressions",
    "find_previous_run",
    "load_summary",
]

COLUMNS = ("config", "decode tok/s", "range", "TTFT ms", "TPOT ms", "tokens", "accept", "mean len", "speedup", "gates")


def build_summary(results: Path, plan: Any, timings: dict[str, float]) -> dict[str, Any]:
    configs = []
    for c in plan.configs:
        p = results / "configs" / f"{c.name}.json"
        if p.exists():
            configs.append(json.loads(p.read_text()))
    return {
        "specrig_summary": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "recipe": plan.recipe,
        "engine": plan.engine,
        "model": plan.model_source,
        "served_name": plan.served_name,
        "lock_digest": plan.lock_digest,
        "host": plan.host,
        "workload": {"prompts": 5, "max_tokens": plan.max_tokens, "concurrency": plan.concurrency},
        "timings": timings,
        "configs": configs,
    }


def load_summary(run_dir: Path) -> dict[str, Any]:
    p = Path(run_dir) / "summary.json"
    if not p.is_file():
        from .errors import ConfigError

        raise ConfigError(f"{run_dir} holds no summary.json", hint="give folders written by `nox -s bench`")
    return json.loads(p.read_text())


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "–" if x is None else fmt.format(x)


def table_rows(summary: dict[str, Any], label: str = "") -> list[list[str]]:
    rows = []
    for c in summary["configs"]:
        a = c["aggregate"]
        s = c.get("spec_stats") or {}
        gates = [t for t in c.get("thresholds", [])]
        gate = "–" if not gates else (
            "pass" if all(t["passed"] for t in gates) else
            "FAIL" if any(not t["passed"] and not t["informational"] for t in gates) else "info"
        )  # fmt: skip
        name = f"{label}{c['name']}" + (f" (k={s['k']})" if s.get("k") else "")
        rows.append([
            name,
            _f(a["decode_tok_s_mean"]),
            f"{_f(a['decode_tok_s_min'])}–{_f(a['decode_tok_s_max'])}",
            _f((a["ttft_s_median"] or 0) * 1000 if a["ttft_s_median"] is not None else None, "{:.0f}"),
            _f(a["tpot_ms_median"]),
            str(a["completion_tokens"]),
            _f(s.get("acceptance_rate"), "{:.1%}"),
            _f(s.get("mean_acceptance_length"), "{:.2f}"),
            _f(c.get("speedup"), "{:.2f}x"),
            gate,
        ])  # fmt: skip
    return rows


def rich_table(title: str, rows: list[list[str]]) -> Table:
    t = Table(title=title)
    for col in COLUMNS:
        t.add_column(col, justify="left" if col == "config" else "right")
    for row in rows:
        t.add_row(*row)
    return t


def console() -> Console:
    """Stdout console; wide enough for the table when not on a terminal."""
    return Console(width=None if Console().is_terminal else 150)


def print_table(summary: dict[str, Any], out: Console | None = None) -> None:
    out = out or console()
    w = summary["workload"]
    title = f"{summary['recipe']} / {summary['engine']}: 5 prompts x {w['max_tokens']} tokens, concurrency {w['concurrency']}"
    out.print(rich_table(title, table_rows(summary)))
    for c in summary["configs"]:
        if c.get("diagnosis"):
            out.print(f"[bold]{c['name']}[/]: {escape(c['diagnosis'])}")
        for th in c.get("thresholds", []):
            mark = "ok" if th["passed"] else ("info" if th["informational"] else "FAIL")
            m = "n/a" if th["measured"] is None else f"{th['measured']:.3g}"
            out.print(f"  \\[{mark}] {c['name']}.{th['name']} = {m} (threshold {th['threshold']:g}, floor {th['floor']:.3g})")


def markdown_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join(["---"] * len(COLUMNS)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _per_prompt(c: dict[str, Any]) -> dict[str, float]:
    return {r["prompt_id"]: r["decode_tok_s"] or 0.0 for r in c["requests"]}


def plot_throughput(series: list[tuple[str, dict[str, Any]]], out: Path, title: str) -> Path:
    """Grouped bars: decode tok/s per prompt for each (label, config)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    prompts: list[str] = []
    for _, c in series:
        for p in _per_prompt(c):
            if p not in prompts:
                prompts.append(p)
    n = max(len(series), 1)
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(max(7, 1.6 * len(prompts) + 1), 4.2))
    for i, (label, c) in enumerate(series):
        vals = _per_prompt(c)
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(prompts))]
        bars = ax.bar(xs, [vals.get(p, 0.0) for p in prompts], width, label=label)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(range(len(prompts)), prompts)
    ax.set_ylabel("decode tok/s (per stream)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_acceptance(series: list[tuple[str, dict[str, Any]]], out: Path, title: str) -> Path | None:
    """Per-position acceptance: measured (unconditional) and the i.i.d. curve a^(i+1)."""
    curves = [(label, c["spec_stats"]) for label, c in series if (c.get("spec_stats") or {}).get("per_position")]
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    for label, s in curves:
        pos = list(range(1, len(s["per_position"]) + 1))
        line = ax.plot(pos, s["per_position"], marker="o", label=f"{label}: measured")[0]
        if s.get("a") is not None:
            ax.plot(pos, [s["a"] ** i for i in pos], linestyle="--", color=line.get_color(), alpha=0.6,
                    label=f"{label}: i.i.d. a={s['a']:.2f}")  # fmt: skip
    ax.set_xlabel("draft position")
    ax.set_ylabel("P(draft token at this position accepted)")
    ax.set_ylim(-0.02, 1.05)
    ax.set_xticks(range(1, max(len(s["per_position"]) for _, s in curves) + 1))
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def write_report(results: Path, summary: dict[str, Any]) -> None:
    (results / "summary.json").write_text(json.dumps(summary, indent=2))
    series = [(c["name"], c) for c in summary["configs"]]
    title = f"{summary['recipe']} / {summary['engine']}"
    tp = plot_throughput(series, results / "throughput.png", f"{title}: decode tok/s per prompt")
    acc = plot_acceptance(series, results / "acceptance.png", f"{title}: per-position acceptance")
    w = summary["workload"]
    lines = [
        f"# specrig bench: {title}",
        "",
        f"Model `{summary['model']}`; 5 prompts x {w['max_tokens']} tokens, concurrency {w['concurrency']}; "
        f"host {summary['host'].get('cpus')} CPUs, GPUs: {len(summary['host'].get('gpus') or [])}.",
        "",
        markdown_table(table_rows(summary)),
        "",
    ]
    for c in summary["configs"]:
        if c.get("diagnosis"):
            lines.append(f"- **{c['name']}**: {c['diagnosis']}")
        s = c.get("spec_stats")
        if s:
            lines.append(
                f"  - counters ({s['source']}): drafts {s['drafts']:g}, draft tokens {s['draft_tokens']:g}, "
                f"accepted {s['accepted_tokens']:g}; a = {_f(s['a'], '{:.3f}')} ({s['a_source']}); "
                f"theoretical tokens/step {_f(s['theoretical_tokens_per_step'], '{:.2f}')}; "
                f"predicted speedup {_f(s['predicted_speedup'], '{:.2f}x')}, measured {_f(s['measured_speedup'], '{:.2f}x')}; "
                f"break-even a {_f(s['break_even_a'], '{:.2f}')}"
            )
        for th in c.get("thresholds", []):
            mark = "pass" if th["passed"] else ("informational" if th["informational"] else "**FAIL**")
            m = "n/a" if th["measured"] is None else f"{th['measured']:.3g}"
            lines.append(f"  - gate {th['name']}: {m} vs {th['threshold']:g} (floor {th['floor']:.3g}): {mark}")
    lines += ["", f"![throughput]({tp.name})"]
    if acc:
        lines.append(f"![acceptance]({acc.name})")
    t = summary.get("timings") or {}
    if t:
        lines += ["", "Timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in t.items())]
    (results / "report.md").write_text("\n".join(lines) + "\n")


def find_previous_run(current: Path, recipe: str, engine: str) -> Path | None:
    """The newest other results folder of the same recipe and engine next to ``current``."""
    candidates = []
    for d in current.parent.iterdir():
        if d == current or not (d / "summary.json").is_file():
            continue
        try:
            s = json.loads((d / "summary.json").read_text())
        except ValueError:
            continue
        if s.get("recipe") == recipe and s.get("engine") == engine:
            candidates.append((s.get("created", ""), d))
    return max(candidates)[1] if candidates else None


def regressions(summary: dict[str, Any], previous: Path, tolerance: float) -> list[str]:
    """Drops beyond ``tolerance`` in decode tok/s or acceptance versus an earlier run."""
    prev = {c["name"]: c for c in load_summary(previous)["configs"]}
    out = []
    for c in summary["configs"]:
        p = prev.get(c["name"])
        if p is None:
            continue
        pairs = [("decode tok/s", c["aggregate"]["decode_tok_s_mean"], p["aggregate"]["decode_tok_s_mean"])]
        if c.get("spec_stats") and p.get("spec_stats"):
            pairs.append(("acceptance", c["spec_stats"]["acceptance_rate"], p["spec_stats"]["acceptance_rate"]))
        for what, now, before in pairs:
            if now is None or not before:
                continue
            if now < before * (1 - tolerance):
                out.append(
                    f"{c['name']}: {what} regressed from {before:.3g} to {now:.3g} "
                    f"({now / before - 1:+.1%}, tolerance {tolerance:.0%}) vs {previous}"
                )
    return out
