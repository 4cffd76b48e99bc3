"""One benchmark configuration, end to end: launch (or attach to) the server,
warm it up, scrape its counters, run the workload, scrape again, and turn it
all into one result document with thresholds judged.

The plan for a whole invocation (:class:`BenchPlan`) is written to JSON by the
bench command and read back by the pytest-benchmark suite in ``bench/``, so
the suite needs no options of its own.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import httpx

from .client import PROMPTS, RequestBuilder, RunResult, openai_request, run_workload
from .engines import get_engine
from .engines.base import Engine
from .errors import BenchError
from .log import log
from .metrics import delta, parse
from .recipe import Recipe, SpecConfig, load_recipe
from .server import Server, attach, check_port_free, free_port
from .specdec import compute, diagnose

__all__ = ["ConfigPlan", "BenchPlan", "run_config", "Threshold"]


@dataclass(frozen=True)
class ConfigPlan:
    name: str
    spec: dict[str, Any] | None
    drafter: str | None = None
    drafter_info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BenchPlan:
    recipe: str
    recipe_path: str
    engine: str
    results_dir: str
    configs: list[ConfigPlan]
    max_tokens: int
    concurrency: int
    warmup_requests: int
    python: str | None = None
    """The engine environment's Python (None when attaching)."""
    model_path: str | None = None
    served_name: str = ""
    model_source: str = ""
    endpoint: str | None = None
    port: int | None = None
    engine_args: list[str] = field(default_factory=list)
    lock_digest: str | None = None
    startup_timeout_s: float | None = None
    host: dict[str, Any] = field(default_factory=dict)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def read(cls, path: Path) -> "BenchPlan":
        d = json.loads(Path(path).read_text())
        d["configs"] = [ConfigPlan(**c) for c in d["configs"]]
        return cls(**d)


@dataclass(frozen=True)
class Threshold:
    name: str
    measured: float | None
    threshold: float
    tolerance: float
    informational: bool

    @property
    def floor(self) -> float:
        return self.threshold * (1.0 - self.tolerance)

    @property
    def passed(self) -> bool:
        return self.measured is not None and self.measured >= self.floor

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"floor": self.floor, "passed": self.passed}

    def describe(self) -> str:
        m = "n/a" if self.measured is None else f"{self.measured:.3g}"
        return f"{self.name} = {m}, threshold {self.threshold:g} (pass at >= {self.floor:.3g}, tolerance {self.tolerance:.0%})"


def _scrape(client: httpx.Client, path: str | None) -> str | None:
    if not path:
        return None
    r = client.get(path, timeout=30)
    return r.text if r.status_code == 200 else None


def _info(client: httpx.Client, path: str | None) -> dict[str, Any] | None:
    if not path:
        return None
    r = client.get(path, timeout=30)
    return r.json() if r.status_code == 200 else None


def _thresholds(recipe: Recipe, name: str, spec: SpecConfig | None, agg: dict, stats: Any) -> list[Threshold]:
    tol = recipe.bench.tolerance
    out = []
    if spec is None:
        if recipe.bench.min_decode_tok_s:
            out.append(Threshold("decode_tok_s", agg["decode_tok_s_mean"], recipe.bench.min_decode_tok_s, tol, False))
        return out
    info = spec.informational
    if spec.min_acceptance_rate is not None:  # counted, not timed: no tolerance
        out.append(Threshold("acceptance_rate", stats.acceptance_rate if stats else None, spec.min_acceptance_rate, 0.0, info))
    if spec.min_speedup is not None:
        out.append(Threshold("speedup", stats.measured_speedup if stats else None, spec.min_speedup, tol, info))
    return out


def run_config(
    plan: BenchPlan,
    name: str,
    *,
    measure: Callable[[Callable[[], RunResult]], RunResult] = lambda f: f(),
) -> dict[str, Any]:
    """Run one configuration and return (and store) its result document.

    ``measure`` wraps the timed workload (the bench suite passes
    pytest-benchmark's ``pedantic``)."""
    recipe = load_recipe(plan.recipe_path)
    engine: Engine = get_engine(plan.engine)
    cfg = next(c for c in plan.configs if c.name == name)
    spec = SpecConfig(**cfg.spec) if cfg.spec else None
    results = Path(plan.results_dir)
    doc: dict[str, Any] = {"name": name, "engine": plan.engine, "recipe": plan.recipe, "spec": cfg.spec,
                           "drafter": cfg.drafter, "drafter_info": cfg.drafter_info}  # fmt: skip
    server: Server | None = None
    try:
        if plan.endpoint:
            base_url = attach(plan.endpoint, engine.health_path)
            doc["server"] = {"endpoint": base_url}
        else:
            if plan.port:
                check_port_free(plan.port)
            port = plan.port or free_port()
            launch = engine.launch(
                python=str(plan.python), model_path=str(plan.model_path), served_name=plan.served_name, port=port,
                recipe=recipe, spec=spec, drafter=cfg.drafter, extra_args=plan.engine_args,
            )  # fmt: skip
            server = Server(
                plan=launch, log_path=results / "logs" / f"server-{name}.log", health_path=engine.health_path,
                served_name=plan.served_name,
                startup_timeout_s=plan.startup_timeout_s or recipe.engine[plan.engine].startup_timeout_s,
            )  # fmt: skip
            log.step(f"[{name}] starting {plan.engine} on {launch.base_url} (log: {server.log_path})")
            server.start()
            ready = server.wait_ready()
            log.step(f"[{name}] ready after {ready:.0f} s")
            base_url = launch.base_url
            doc["server"] = {"ready_after_s": ready, "log": str(server.log_path), "argv": launch.argv}
        extras = engine.request_body_extras(spec)
        build = _request_builder(engine, spec, extras, plan.served_name)
        with httpx.Client(base_url=base_url) as http:
            if plan.warmup_requests:
                log.step(f"[{name}] warm-up ({plan.warmup_requests} request(s))")
                run_workload(base_url, plan.served_name, prompts=PROMPTS[: plan.warmup_requests],
                             max_tokens=min(plan.max_tokens, 32), build=build)  # fmt: skip
            m0, i0 = _scrape(http, engine.metrics_path), _info(http, engine.server_info_path)
            log.step(f"[{name}] measuring {len(PROMPTS)} prompts x {plan.max_tokens} tokens, concurrency {plan.concurrency}")
            t0 = time.monotonic()
            run = measure(lambda: run_workload(base_url, plan.served_name, max_tokens=plan.max_tokens,
                                               concurrency=plan.concurrency, build=build))  # fmt: skip
            log.step(f"[{name}] {run.completion_tokens} tokens in {time.monotonic() - t0:.1f} s")
            m1, i1 = _scrape(http, engine.metrics_path), _info(http, engine.server_info_path)
        if server is not None:
            server.check_alive()
    finally:
        if server is not None:
            server.stop()

    agg = run.aggregate()
    doc["aggregate"] = agg
    doc["requests"] = [r.as_dict() for r in run.requests]
    # cross-check the client's token count against the server's own counter
    server_tokens = None
    if engine.generation_tokens_metric and m1:
        server_tokens = delta(parse(m0) if m0 else None, parse(m1), engine.generation_tokens_metric,
                              {"model_name": plan.served_name})  # fmt: skip
    doc["server_generation_tokens"] = server_tokens
    doc["token_count_error"] = (
        abs(run.completion_tokens - server_tokens) / server_tokens if server_tokens else None
    )
    for when, text in (("before", m0), ("after", m1)):
        if text is not None:  # the raw expositions, for anyone who wants to recompute by hand
            (results / "logs" / f"metrics-{name}-{when}.prom").write_text(text)
    per_request = [engine.request_spec(r.final_payload) for r in run.requests]
    doc["per_request_spec"] = [asdict(p) if p else None for p in per_request]
    known = [p for p in per_request if p is not None and p.draft_tokens is not None and p.accepted_tokens is not None]
    if known:
        drafted = sum(p.draft_tokens or 0 for p in known)
        accepted = sum(p.accepted_tokens or 0 for p in known)
        doc["per_request_spec_totals"] = {
            "requests": len(known), "draft_tokens": drafted, "accepted_tokens": accepted,
            "verify_steps": sum(p.verify_steps or 0 for p in known),
            "acceptance_rate": accepted / drafted if drafted else None,
        }  # fmt: skip

    stats = None
    if spec is not None:
        counters = engine.spec_counters(
            metrics_before=m0, metrics_after=m1, info_before=i0, info_after=i1, requests=per_request,
            completion_tokens=run.completion_tokens, served_name=plan.served_name, spec=spec,
        )  # fmt: skip
        if counters is None:
            raise BenchError(
                f"[{name}] the server reports no speculative-decoding counters",
                hint="is speculation really enabled on it? (with --endpoint, --spec must match the server's setup)",
            )
        base = _baseline(results)
        stats = compute(
            counters,
            tpot_spec_s=(agg["tpot_ms_mean"] or 0) / 1000 or None,
            tpot_base_s=(base["aggregate"]["tpot_ms_mean"] or 0) / 1000 or None if base else None,
            decode_tok_s_spec=agg["decode_tok_s_mean"],
            decode_tok_s_base=base["aggregate"]["decode_tok_s_mean"] if base else None,
        )
        doc["spec_counters"] = counters.raw | {"k": counters.k, "source": counters.source}
        doc["spec_stats"] = stats.as_dict()
        doc["diagnosis"] = diagnose(stats)
        doc["speedup"] = stats.measured_speedup
        log.step(f"[{name}] {doc['diagnosis']}")
    thresholds = _thresholds(recipe, name, spec, agg, stats)
    doc["thresholds"] = [t.as_dict() for t in thresholds]
    (results / "configs").mkdir(parents=True, exist_ok=True)
    (results / "configs" / f"{name}.json").write_text(json.dumps(doc, indent=2))
    return doc


def _request_builder(engine: Engine, spec: SpecConfig | None, extras: dict[str, Any], model: str) -> RequestBuilder:
    """OpenAI completions, unless the engine returns per-request speculative
    stats only on a native endpoint (SGLang's ``/generate``)."""
    native = getattr(engine, "native_generate_body", None)
    if spec is not None and native is not None:
        path = engine.native_generate_path  # type: ignore[attr-defined]
        return lambda p, n: (path, native(prompt=p.text, max_tokens=n, ignore_eos=True))
    return openai_request(extras, model)


def _baseline(results: Path) -> dict[str, Any] | None:
    p = results / "configs" / "baseline.json"
    return json.loads(p.read_text()) if p.exists() else None


def failed_thresholds(doc: dict[str, Any]) -> list[str]:
    """Human lines for every non-informational threshold that failed."""
    out = []
    for t in doc.get("thresholds", []):
        if not t["passed"] and not t["informational"]:
            th = Threshold(t["name"], t["measured"], t["threshold"], t["tolerance"], t["informational"])
            out.append(f"{doc['name']}: {th.describe()}")
    return out
