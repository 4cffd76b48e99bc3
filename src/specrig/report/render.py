"""A run's summary as a readable table, markdown and PNG plots; several runs
side by side. Reads the typed :class:`RunSummary` (attributes, never string
keys); measures nothing. Regressions are pytest-benchmark's job
(``--benchmark-compare-fail``), not this module's."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specrig.core import atomic
from specrig.lab.results import Measurement, Pairing, RunSummary
from specrig.report.breakdown import breakdown_columns, breakdown_rows, plot_breakdown
from specrig.report.plots import plot_acceptance, plot_prompt_acceptance, plot_speedup_vs_load, plot_throughput
from specrig.specdec.stats import Distribution

__all__ = [
    "console",
    "rich_table",
    "markdown_table",
    "latency_rows",
    "throughput_rows",
    "notes",
    "print_summary",
    "write_report",
    "LATENCY_COLUMNS",
    "THROUGHPUT_COLUMNS",
]

LATENCY_COLUMNS = (
    "config",
    "load",
    "n",
    "TTFT ms p50/p90/p99",
    "TPOT ms p50/p90/p99",
    "ITL ms p50/p90/p99",
    "E2E s p50/p90/p99",
    "TTFT/TPOT mean±std",
)
THROUGHPUT_COLUMNS = (
    "config",
    "load",
    "out tok/s",
    "decode tok/s",
    "tokens",
    "accept",
    "offline",
    "mean len",
    "speedup",
    "lossless",
    "goodput",
    "gates",
)


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "–" if x is None else fmt.format(x)


def _pcts(d: Distribution, scale: float = 1.0, fmt: str = "{:.0f}") -> str:
    if not d.n:
        return "–"
    return "/".join(fmt.format(v * scale) for v in (d.p50, d.p90, d.p99))  # type: ignore[operator]


def _groups(s: RunSummary) -> list[tuple[str, str, list[Measurement]]]:
    """Measurements grouped by (configuration, load point), the baseline first, then in plan order;
    each group named by its configuration's name."""
    order = [c.id for c in sorted(s.configs, key=lambda c: not c.id.is_baseline)]
    keys = sorted(
        dict.fromkeys((m.id, m.config, m.point.label, m.point.level) for m in s.measurements),
        key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[3]),
    )
    return [
        (name, label, [m for m in s.measurements if m.id == ident and m.point.label == label])
        for ident, name, label, _ in keys
    ]


def _merged(ms: list[Measurement]) -> Measurement:
    """All repeats' requests as one distribution (the first measurement's other fields)."""
    if len(ms) == 1:
        return ms[0]
    reqs = [r for m in ms for r in m.requests]
    from specrig.lab.results import Latency

    lat = Latency(
        ttft_ms=Distribution.of([r.ttft_ms for r in reqs if r.ttft_ms is not None]),
        tpot_ms=Distribution.of([r.tpot_ms for r in reqs if r.tpot_ms is not None]),
        itl_ms=Distribution.of([x for r in reqs for x in r.itl_ms]),
        e2e_ms=Distribution.of([r.e2e_ms for r in reqs if r.e2e_ms is not None]),
    )
    return ms[0].model_copy(
        update={
            "requests": reqs,
            "latency": lat,
            "decode_tok_s": Distribution.of([r.decode_tok_s for r in reqs if r.decode_tok_s]),
            "output_tok_s": statistics.fmean(m.output_tok_s for m in ms),
            "completion_tokens": sum(m.completion_tokens for m in ms),
        }
    )


def latency_rows(s: RunSummary, label: str = "") -> list[list[str]]:
    rows = []
    for config, load, ms in _groups(s):
        m = _merged(ms)
        lat = m.latency
        rows.append(
            [
                f"{label}{config}",
                load,
                str(len(m.requests)),
                _pcts(lat.ttft_ms),
                _pcts(lat.tpot_ms, fmt="{:.1f}"),
                _pcts(lat.itl_ms, fmt="{:.1f}"),
                _pcts(lat.e2e_ms, 1 / 1000, "{:.2f}"),
                f"{_f(lat.ttft_ms.mean, '{:.0f}')}±{_f(lat.ttft_ms.std, '{:.0f}')} / "
                f"{_f(lat.tpot_ms.mean)}±{_f(lat.tpot_ms.std)}",
            ]
        )
    return rows


def _pairing(s: RunSummary, config: str, load: str) -> Pairing | None:
    return next((p for p in s.pairings if p.config == config and p.point.label == load), None)


def throughput_rows(s: RunSummary, label: str = "", names: Mapping[str, str] | None = None) -> list[list[str]]:
    """One row per configuration and load point; ``names``: a configuration's name as shown, where not its own."""
    names = names or {}
    rows = []
    for config, load, ms in _groups(s):
        m = _merged(ms)
        cfg = s.config(config)
        p = _pairing(s, config, load)
        gates = cfg.thresholds if cfg else []
        gate = (
            "–"
            if not gates
            else (
                "pass"
                if all(t.passed for t in gates)
                else "FAIL"
                if any(not t.passed and not t.informational for t in gates)
                else "info"
            )
        )
        speed = "–"
        if p and p.speedup:
            sp = p.speedup
            speed = f"{sp.mean:.2f}x" + (f" [{sp.low:.2f}–{sp.high:.2f}]" if sp.n > 1 else "")
        good = "–"
        if m.goodput:
            good = f"{m.goodput.share:.0%} ({m.goodput.requests_per_s:.2f} req/s)"
        shown = names.get(config, config)
        name = f"{label}{shown}" + (f" (k={cfg.k})" if cfg and cfg.k and f"-k{cfg.k}" not in shown else "")
        rows.append(
            [
                name,
                load,
                _f(m.output_tok_s),
                _f(m.decode_tok_s.mean),
                str(m.completion_tokens),
                _f(p.acceptance_rate if p else None, "{:.1%}"),
                _f(cfg.offline.rate_at(cfg.k) if cfg and cfg.offline and cfg.k else None, "{:.1%}"),
                _f(p.mean_acceptance_length if p else None, "{:.2f}"),
                speed,
                p.lossless.cell() if p and p.lossless else "–",
                good,
                gate,
            ]
        )
    return rows


def notes(s: RunSummary) -> list[str]:
    """Plain lines under the tables: diagnoses, acceptance checks, crossover, recommendations, checks."""
    out = []
    for p in s.pairings:
        head = f"{p.config} @ {p.point.describe()}"
        if p.speedup and p.speedup.n > 1:
            head += f": speedup {p.speedup.describe(unit='x')}"
        out.append(f"{head}: {p.diagnosis}")
        if p.lossless:
            out.append(f"  lossless vs baseline ({p.baseline_from}): {p.lossless.describe()}")
    out += [f"acceptance check, {c.config} @ {c.point.describe()}: {c.line}" for c in s.acceptance_checks]
    out += [s.acceptance_note] if s.acceptance_note else []
    out += [f"crossover: {line}" for line in s.crossover]
    out += [f"recommendation, {line}" for line in s.recommendations]
    out += [f"warning: {w}" for w in s.counter_warnings]
    for r in s.rooflines or ([s.roofline] if s.roofline else []):
        out.append(r.line())
    for c in s.configs:
        for t in c.thresholds:
            mark = "ok" if t.passed else ("info" if t.informational else "FAIL")
            out.append(f"[{mark}] {c.name}.{t.describe()}")
    own = [m.counters_own for m in s.measurements if m.counters_own is not None]
    if own and all(own):
        out.append(
            f"counters are this run's own: engine generation-token delta == tokens received ({len(own)}/{len(own)})"
        )
    cpu = [m.client_cpu_share for m in s.measurements if m.client_cpu_share is not None]
    if cpu:
        out.append(f"bench client CPU share: max {max(cpu):.0%} of one core")
    out += [f"error: {e.line()}" for e in s.errors]
    return out


def rich_table(title: str, columns: tuple[str, ...], rows: list[list[str]]) -> Table:
    t = Table(title=title)
    for col in columns:
        t.add_column(col, justify="left" if col in ("config", "load") else "right")
    for row in rows:
        t.add_row(*row)
    return t


def console() -> Console:
    """Stdout console; wide enough for the tables when not on a terminal."""
    return Console(width=None if Console().is_terminal else 200)


def _title(s: RunSummary) -> str:
    return f"{s.recipe} / {s.engine}: {s.workload.describe()}"


def print_summary(s: RunSummary, out: Console | None = None) -> None:
    out = out or console()
    out.print(rich_table(_title(s) + " — throughput and speculation", THROUGHPUT_COLUMNS, throughput_rows(s)))
    out.print(rich_table("latency distributions", LATENCY_COLUMNS, latency_rows(s)))
    if s.profiles:
        out.print(
            rich_table(
                "where a decode step's time goes (ms per step, --profile)", breakdown_columns(s), breakdown_rows(s)
            )
        )
    for line in notes(s):
        out.print(escape(line))


def markdown_table(columns: tuple[str, ...], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(["---"] * len(columns)) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _per_prompt_md(s: RunSummary) -> list[str]:
    """Acceptance per prompt (per-request engine stats) for each spec configuration."""
    lines = []
    for m in s.measurements:
        reqs = [r for r in m.requests if r.draft_tokens]
        if not reqs or m.repeat:
            continue
        lines += [
            "",
            f"Acceptance per prompt, {m.config} @ {m.point.describe()}:",
            "",
            "| prompt | accepted / drafted | rate | mean length |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r.prompt_id} | {r.accepted_tokens:g} / {r.draft_tokens:g} | "
            f"{(r.accepted_tokens or 0) / r.draft_tokens:.1%} | {_f(r.acceptance_length, '{:.2f}')} |"
            for r in reqs
        ]
    for p in s.pairings:
        if p.per_position:
            cells = " | ".join(f"{x:.1%}" for x in p.per_position)
            lines += ["", f"Acceptance per position, {p.config} @ {p.point.describe()}: {cells}"]
    return lines


def _offline_curves(s: RunSummary) -> dict[str, tuple[str, list[float]]]:
    out = {}
    for p in s.pairings:
        cfg = s.config(p.config)
        if cfg and cfg.offline and cfg.offline.per_position:
            k = cfg.k or len(cfg.offline.per_position)
            out[f"{p.config} {p.point.label}"] = (cfg.offline.workload, cfg.offline.per_position_at(k))
    return out


def write_report(results: Path, s: RunSummary) -> None:
    """summary.json, report.md and the PNGs in ``results``."""
    s.write(results / "summary.json")
    first = [(f"{m.config} {m.point.label}", m) for m in s.measurements if m.repeat == 0]
    title = f"{s.recipe} / {s.engine}"
    pngs = [
        plot_throughput(first[:8], results / "throughput.png", f"{title}: decode tok/s per prompt"),
        plot_acceptance(
            [(f"{p.config} {p.point.label}", p) for p in s.pairings],
            results / "acceptance.png",
            f"{title}: acceptance per draft position",
            offline=_offline_curves(s),
        ),
        plot_prompt_acceptance(
            [(lbl, m) for lbl, m in first if not m.id.is_baseline][:6],
            results / "acceptance_per_prompt.png",
            f"{title}: acceptance per prompt",
        ),
        plot_speedup_vs_load(s.pairings, results / "speedup_vs_load.png", f"{title}: speedup against load")
        if len({p.point.level for p in s.pairings}) > 1
        else None,
        plot_breakdown(s, results / "profile.png", f"{title}: time per decode step"),
    ]
    lines = [
        f"# specrig bench: {_title(s)}",
        "",
        f"Model `{s.model}`; host {s.host.cpus} CPUs, GPUs: {len(s.host.gpus)}."
        + (f" Built wheels served: {'; '.join(f'`{b}`' for b in s.built)}." if s.built else ""),
        "",
        markdown_table(THROUGHPUT_COLUMNS, throughput_rows(s)),
        "",
        markdown_table(LATENCY_COLUMNS, latency_rows(s)),
        "",
    ]
    if s.profiles:
        lines += ["Where a decode step's time goes (ms per step; raw traces in profiles/):", ""]
        lines += [markdown_table(breakdown_columns(s), breakdown_rows(s)), ""]
    lines += [f"- {line}" for line in notes(s)]
    if s.drift is not None:
        lines += ["", f"Provided interpreter: {s.drift.summary()}"]
        lines += [f"- drift: {item.line()}" for item in s.drift.items if item.core or item.kind != "extra"][:30]
    lines += _per_prompt_md(s)
    lines += [""] + [f"![{p.stem}]({p.name})" for p in pngs if p is not None]
    if s.timings:
        lines += ["", "Timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in s.timings.items())]
    atomic.write_text(results / "report.md", "\n".join(lines) + "\n")
