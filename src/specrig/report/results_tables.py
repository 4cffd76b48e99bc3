"""The results page's tables, one function per kind of capture, each over whatever files a
``results.toml`` names (no study's name appears here):

* ``bench``: a bench run's ``summary.json`` (or ``.json.gz``) as ``specrig report`` shows it, per
  configuration and load: decode tok/s per stream, acceptance, mean acceptance length, the speedup
  over the run's own paired baseline (with its interval over repeats) and the lossless check;
* ``offline``: a drafter's ``offline_eval.json``, or a data-size curve's ``curve.json`` (one row per
  point): acceptance per position, mean acceptance length at k, walked as the engine drafts, and
  on the bench's prompts;
* ``projection``: few-layer runs of one architecture carried to the story's model and host
  (:mod:`.projection`);
* ``build``: a built wheel's wheelhouse ``manifest.json``: build time, jobs, peak memory.

Each returns the markdown lines of its table and of the captures it read."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from specrig.core.errors import ConfigError
from specrig.lab.results import OfflineEval, RunSummary
from specrig.report.projection import HOST_COLUMNS, ONE_GPU_COLUMNS, STORY, Projection, host_rows, one_gpu_rows, project
from specrig.report.render import THROUGHPUT_COLUMNS, markdown_table, throughput_rows
from specrig.report.results_file import Located, Table

__all__ = ["TABLES", "BENCH_COLUMNS", "OFFLINE_COLUMNS", "BUILD_COLUMNS", "bench", "offline", "projection", "build"]

M = TypeVar("M", bound=BaseModel)
BENCH_COLUMNS = ("config", "load", "decode tok/s", "accept", "mean len", "speedup", "lossless")
OFFLINE_COLUMNS = ("drafter", "k", "per position", "mean length", "as served", "bench prompts")
BUILD_COLUMNS = ("wheel", "archs", "build time", "jobs", "compile jobs", "peak a job GiB", "peak in all GiB")


def _text(c: Located) -> bytes:
    data = c.file.read_bytes()
    if c.file.suffix == ".gz":
        try:
            return gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise c.error(f"is not gzip ({exc})") from None
    return data


def _json(c: Located, what: str) -> Any:
    try:
        return json.loads(_text(c))
    except ValueError as exc:
        raise c.error(f"is not JSON ({exc}): a {what} expected") from None


def _typed(c: Located, model: type[M], data: Any, what: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(map(str, first["loc"])) or "(top level)"
        raise c.error(
            f"is not a {what} this specrig reads ({key}: {first['msg']})",
            hint="name the file the table's kind reads (bench: summary.json; offline: offline_eval.json or "
            "curve.json; projection: summary.json; build: manifest.json)",
        ) from None


def _summary(c: Located) -> RunSummary:
    return _typed(c, RunSummary, _json(c, "bench summary"), "bench summary (summary.json)")


def _where(s: RunSummary) -> str:
    gpus = {g.name for g in s.host.gpus}
    if gpus:
        return f"{len(s.host.gpus)} x {', '.join(sorted(gpus))}"
    return f"CPU, {s.host.cpus} cores" if s.host.cpus else "CPU"


def _source(c: Located, detail: str) -> str:
    label = f"{c.capture.label}: " if c.capture.label else ""
    shown = "/".join(part for part in c.capture.path.split("/") if part not in ("", ".", ".."))
    return f"- {label}[`{shown}`]({c.link}): {detail}"


def bench(table: Table, captures: list[Located]) -> list[str]:
    """The report's throughput table, its columns of speed and speculation, over one run or several."""
    pick = [THROUGHPUT_COLUMNS.index(col) for col in BENCH_COLUMNS]
    rows, sources = [], []
    for c in captures:
        s = _summary(c)
        unknown = sorted(set(c.capture.configs) - {x.name for x in s.configs})
        if unknown:
            raise ConfigError(
                f"{c.source}: {c.key}.configs: {', '.join(unknown)} is no configuration of {c.capture.path}",
                hint=f"its configurations: {', '.join(x.name for x in s.configs)}",
            )
        prefix = f"{c.capture.label}: " if c.capture.label else ""
        rows += [[r[i] for i in pick] for r in throughput_rows(s, prefix, c.capture.configs)]
        sources.append(_source(c, f"{s.engine} on {_where(s)}; {s.workload.describe()}"))
    return [markdown_table(BENCH_COLUMNS, rows), "", *sources]


class _CurvePoint(BaseModel):
    model_config = ConfigDict(extra="ignore")
    samples: int
    offline: OfflineEval


class _Curve(BaseModel):
    model_config = ConfigDict(extra="ignore")
    points: list[_CurvePoint]


def _evals(c: Located) -> list[tuple[str, OfflineEval]]:
    """(row name, evaluation) of an offline_eval.json (one) or a curve.json (one per point, by samples)."""
    data = _json(c, "drafter's offline_eval.json or curve.json")
    if isinstance(data, dict) and "points" in data:
        curve = _typed(c, _Curve, data, "data-size curve (curve.json)")
        head = f"{c.capture.label}, " if c.capture.label else ""
        return [(f"{head}{p.samples:,} samples", p.offline) for p in sorted(curve.points, key=lambda p: p.samples)]
    o = _typed(c, OfflineEval, data, "drafter's offline evaluation (offline_eval.json)")
    return [(c.capture.label or c.capture.path.rsplit("/", 1)[-1], o)]


def _length(per_position: list[float], k: int) -> str:
    return f"{1 + sum(per_position[:k]):.2f}" if len(per_position) >= k else "–"


def _offline_row(name: str, o: OfflineEval, k: int | None) -> list[str]:
    k = k or o.k or len(o.per_position)
    walk = (o.walk or {}).get(str(k))
    b = o.bench_prompts or {}
    on_bench = _length(list(b.get("per_position", [])), k)
    return [
        name,
        str(k),
        " / ".join(f"{x:.2f}" for x in o.per_position[:k]) or "–",
        _length(o.per_position, k),
        f"{walk['mean_acceptance_length']:.2f}" if walk and "mean_acceptance_length" in walk else "–",
        f"{on_bench} ({b.get('dataset', '?')})" if on_bench != "–" else "–",
    ]


def offline(table: Table, captures: list[Located]) -> list[str]:
    """Teacher-forced acceptance per drafter: per position, mean length at k, as served, on the bench's prompts."""
    rows, sources = [], []
    for c in captures:
        evals = _evals(c)
        rows += [_offline_row(name, o, table.k) for name, o in evals]
        first = evals[0][1]
        points = f"{len(evals)} drafters; " if len(evals) > 1 else ""
        sources.append(
            _source(c, f"{points}held out: {first.held_out_samples:,} prompts, {first.held_out_tokens:,} tokens")
        )
    return [markdown_table(OFFLINE_COLUMNS, rows), "", *sources]


def _projection_text(p: Projection) -> list[str]:
    fit = ", ".join(f"{n} layers {t:.2f} ms" for n, t in p.layer_steps.items())
    lines = [
        f"Plain step at concurrency {p.concurrency}: {fit}, so {p.per_layer_ms:.3f} ms a layer + "
        f"{p.fixed_ms:.3f} ms fixed, {p.plain_ms:.2f} ms at {p.target_layers} layers on one GPU; "
        f"EAGLE-3 measured at {p.spec_layers} layers.",
        "",
        markdown_table(ONE_GPU_COLUMNS, one_gpu_rows(p)),
    ]
    h = p.host
    if h is None or p.host_plain_ms is None:
        return lines
    lines += ["", f"On {h.name}: a plain step {p.host_plain_ms:.2f} ms, {h.comm_share:.1%} of it collectives."]
    if p.host_measured_cost is not None and h.measured_k:
        lines[-1] += (
            f" Measured there at k={h.measured_k}: {p.host_measured_speedup:.2f}x, "
            f"a speculative step {p.host_measured_cost:.2f}x a plain one."
        )
    return [*lines, "", markdown_table(HOST_COLUMNS, host_rows(p))]


def projection(table: Table, captures: list[Located]) -> list[str]:
    """The story's model on paper from the runs' layer counts (``specrig project``'s tables)."""
    runs, sources = [], []
    for c in captures:
        s = _summary(c)
        runs.append((c.capture.layers or 0, s))
        sources.append(_source(c, f"{c.capture.layers} layers; {s.engine} on {_where(s)}; {s.workload.describe()}"))
    try:
        p = project(runs, target_layers=STORY.layers)
    except ConfigError as exc:
        key = captures[0].key.rsplit(".", 1)[0]
        raise ConfigError(f"{captures[0].source}: {key}: {exc.message}", hint=exc.hint) from None
    return [*_projection_text(p), "", *sources]


class _BuildFigures(BaseModel):
    model_config = ConfigDict(extra="ignore")
    seconds: float
    jobs: int
    compile_jobs_seen: int | None = None
    peak_job_gb: float
    peak_total_gb: float


class _BuildInputs(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    archs: list[str]


class _Manifest(BaseModel):
    """The part of a wheelhouse manifest (``specrig build``) the page shows."""

    model_config = ConfigDict(extra="ignore")
    filename: str
    sha256: str
    inputs: _BuildInputs
    build: _BuildFigures


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60} min {s % 60:02d} s"


def build(table: Table, captures: list[Located]) -> list[str]:
    """One row per built wheel: its time, jobs and peak memory as the watchdog measured them."""
    rows, sources = [], []
    for c in captures:
        m = _typed(c, _Manifest, _json(c, "wheelhouse manifest"), "wheelhouse manifest (manifest.json)")
        b = m.build
        version = m.filename.split("-")[1] if m.filename.count("-") >= 2 else "?"
        rows.append(
            [
                c.capture.label or f"{m.inputs.name} {version}",
                ", ".join(f"sm_{a}" for a in m.inputs.archs),
                _duration(b.seconds),
                str(b.jobs),
                "–" if b.compile_jobs_seen is None else str(b.compile_jobs_seen),
                f"{b.peak_job_gb:.2f}",
                f"{b.peak_total_gb:.1f}",
            ]
        )
        sources.append(_source(c, f"`{m.filename}`, sha256 {m.sha256[:12]}…"))
    return [markdown_table(BUILD_COLUMNS, rows), "", *sources]


TABLES: dict[str, Callable[[Table, list[Located]], list[str]]] = {
    "bench": bench,
    "offline": offline,
    "projection": projection,
    "build": build,
}
