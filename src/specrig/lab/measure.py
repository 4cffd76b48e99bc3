"""The bench suite's lab: one per pytest session. It measures on one server at a
time (launched by :class:`~specrig.lab.servers.Servers`, several started together
with ``launch_ahead``, or the ``--endpoint`` it attached to), switches servers as
the interleaved cases need, and measures a case: warm-up after each start,
counters scraped around the timed workload, a typed :class:`Measurement`.

Timing with pytest-benchmark: one round per measured workload run (see
:mod:`specrig.lab.rounds`).

The paired baseline is measured on demand: a speculative case whose baseline
(same load, same repeat) was not measured yet (``-k ngram``) measures it first,
or takes it from ``--baseline RUN_DIR``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from specrig.core.atomic import write_json, write_text
from specrig.core.counters import SpecCounters
from specrig.core.errors import BenchError, EngineError
from specrig.core.log import log
from specrig.core.prompt import Prompt, cycle_prompts
from specrig.core.redact import log_tail, redact_argv
from specrig.engine import get_engine
from specrig.engine.base import Engine
from specrig.engine.metrics import check_deltas, delta, describe_deltas, parse
from specrig.lab.identity import ConfigId, ServerFacts
from specrig.lab.plan import BenchPlan, Case
from specrig.lab.prelaunch import fixed_prompts
from specrig.lab.results import (
    Goodput,
    Latency,
    LoadPoint,
    Measurement,
    ProfileBreakdown,
    RequestRecord,
    Slo,
    load_summary,
)
from specrig.lab.rounds import timed_run
from specrig.lab.servers import Servers
from specrig.model.datasets import fit_to_context, load_sharegpt, story_prompts
from specrig.recipe.schema import Recipe, SpecConfig, load_recipe
from specrig.serve.auth import auth_headers
from specrig.serve.client import openai_request, run_workload
from specrig.serve.server import Server
from specrig.serve.types import Limits, RequestBuilder, RequestResult, RunResult, RunSpec
from specrig.specdec.stats import Distribution

__all__ = ["Lab", "latency_of", "record_of"]


class Lab:
    def __init__(self, plan: BenchPlan, recipe: Recipe | None = None) -> None:
        self.plan = plan
        self.recipe = (recipe or load_recipe(plan.recipe_path)).serving(plan.model)
        self.engine: Engine = get_engine(plan.engine)
        self.results = Path(plan.results_dir)
        (self.results / "logs").mkdir(parents=True, exist_ok=True)
        self.measured: dict[tuple[ConfigId, str, int], Measurement] = {}
        self.profiles: dict[ConfigId, ProfileBreakdown] = {}
        self.server_info: dict[ConfigId, ServerFacts] = {}
        self.servers = Servers(plan, self.recipe, self.engine, self.results)
        self._prompts: list[Prompt] | None = None
        self._earlier: list[Measurement] | None = None

    # ------------------------------------------------------------------ servers

    def _base_url(self, config: ConfigId, repeat: int) -> str:
        if self.plan.endpoint:
            return self.plan.endpoint
        done = {(m.id, m.repeat) for m in self.measured.values()}
        return self.servers.url((config, repeat), done, self._ready)

    def _ready(self, config: ConfigId, repeat: int, server: Server) -> None:
        """Record what the ready server says about itself, then warm it up."""
        self.server_info[config] = ServerFacts(
            argv=redact_argv(server.plan.argv),
            ready_after_s=server.ready_after_s,
            started_together=self.servers.started_together.get((config, repeat), 1),
            aux_layers=served_aux_layers(log_tail(server.log_path, 5000)),
        )
        self._warm_up(server.base_url, config)

    def _warm_up(self, base_url: str, config: ConfigId) -> None:
        n = self.plan.workload.warmup_requests
        if not n:
            return
        log.step(f"[{config.name}] warm-up ({n} request(s))")
        prompts = [Prompt(f"warmup-{p.id}", p.text, 16) for p in story_prompts(n)]
        run_workload(base_url, self._spec(config, prompts, 16))

    def close(self) -> None:
        self.servers.close()

    # ------------------------------------------------------------------ prompts

    def prompts(self, base_url: str) -> list[Prompt]:
        """The workload's prompts, made once (ShareGPT lengths with the served tokenizer)."""
        if self._prompts is not None:
            return self._prompts
        w = self.plan.workload
        ps = fixed_prompts(w)  # the story's, random words, a custom file: the ones judged before launch
        if ps is None:
            candidates = load_sharegpt(min(w.num_prompts * 3, 1000), seed=w.seed)
            count, max_len = self._tokenizer(base_url)
            ps = fit_to_context(candidates, count, max_model_len=max_len, max_tokens=w.max_tokens)[: w.num_prompts]
            if len(ps) < w.num_prompts:
                raise BenchError(f"only {len(ps)} ShareGPT prompts fit the model's context of {max_len} tokens")
        self._prompts = ps = self._rendered(ps)
        write_json(self.results / "prompts.json", [{"id": p.id, "output_len": p.output_len} for p in ps])
        return ps

    def _rendered(self, ps: list[Prompt]) -> list[Prompt]:
        """A chat workload on an engine whose per-request stats come from a native endpoint that takes
        token ids (SGLang's ``/generate``): each prompt through the model's chat template, once."""
        plan = self.plan
        if not plan.workload.chat or self.engine.native_generate_path is None:
            return ps
        if plan.python is None or plan.model_path is None:  # attached: the plan refused speculation here
            return ps
        from specrig.model.tokens import chat_token_ids

        ids = chat_token_ids(plan.python, plan.model_path, [p.text for p in ps])
        log.step(f"{len(ps)} prompts rendered through {Path(plan.model_path).name}'s chat template, sent as token ids")
        return [replace(p, input_ids=tuple(i)) for p, i in zip(ps, ids, strict=True)]

    def _tokenizer(self, base_url: str) -> tuple[Callable[[str], int], int]:
        """Token counts from the server's own tokenizer (vLLM's /tokenize)."""
        http = httpx.Client(base_url=base_url, timeout=60, headers=auth_headers(self.plan.api_key))
        max_len = self.recipe.model.max_model_len or 2048

        def count(text: str) -> int:
            r = http.post("/tokenize", json={"model": self.plan.served_name, "prompt": text})
            if r.status_code != 200:
                raise BenchError(
                    f"the server's /tokenize answered HTTP {r.status_code}",
                    hint="ShareGPT output lengths need it; pass --max-tokens N to use a fixed length instead",
                )
            data = r.json()
            nonlocal max_len
            max_len = int(data.get("max_model_len") or max_len)
            return int(data["count"])

        count("hello")
        return count, max_len

    # ------------------------------------------------------------------ measuring

    def _builder(self, config: ConfigId) -> RequestBuilder:
        spec = self.plan.config(config).spec
        extras = self.engine.request_body_extras(spec)
        w = self.plan.workload
        return _request_builder(self.engine, spec, extras, self.plan.served_name, not w.stop_at_eos, w.chat)

    def _spec(
        self,
        config: ConfigId,
        prompts: list[Prompt],
        max_tokens: int,
        point: LoadPoint | None = None,
        progress: str | None = None,
    ) -> RunSpec:
        """What one run on ``config``'s server sends: the prompts at ``point``'s load (one at a time
        without), under the workload's stall limits, with the run's API key, and a bar when it is timed."""
        w = self.plan.workload
        limits = Limits(stall_timeout_s=w.stall_timeout_s, first_token_timeout_s=w.first_token_timeout_s)
        rate = point.request_rate if point is not None else None
        return RunSpec(
            prompts=tuple(prompts),
            max_tokens=max_tokens,
            build=self._builder(config),
            # open loop: every request may be in flight; closed: the point's slots
            concurrency=len(prompts) if rate is not None else (point.concurrency if point else None) or 1,
            request_rate=rate,
            burstiness=point.burstiness if point is not None and rate is not None else 1.0,
            seed=w.seed,
            limits=limits,
            api_key=self.plan.api_key,
            progress=progress,
        )

    def measure(self, case: Case, benchmark: Any = None) -> Measurement:
        """Measure ``case`` (or return it if already measured); ``benchmark`` times it."""
        key = (case.config, case.point.label, case.repeat)
        if key in self.measured:
            return self.measured[key]
        cfg, baseline = self.plan.config(case.config), self.plan.baseline
        if cfg.spec is not None and baseline is not None and not self.plan.baseline_run:
            for p in self.plan.workload.points:  # the paired baseline first, on its own server
                self.measure(Case(baseline.id, p, case.repeat))
        base_url = self._base_url(case.config, case.repeat)
        prompts = self.prompts(base_url)
        m = self._run(case, base_url, prompts, cfg.spec, benchmark)
        self.measured[key] = m
        first = self.plan.workload.points[0]
        if self.plan.profile and case.repeat == 0 and case.point == first and case.config not in self.profiles:
            try:
                self.profiles[case.config] = self._profile(case.config, base_url, prompts)
            except BenchError as exc:  # the measurement stands; the breakdown is missing, and says why
                log.warn(f"[{case.name}] no profile breakdown: {exc.message}")
        return m

    def _profile(self, config: ConfigId, base_url: str, prompts: list[Prompt]) -> ProfileBreakdown:
        """A few short requests, one at a time, under the engine's profiler (bounded: 1 on a CPU, 4 on a GPU),
        none longer than the bench's own answers. On a CPU the stop also writes a table of the whole
        trace, its time in proportion to the tokens profiled: one request of 48 tokens keeps it under
        half a minute."""
        from specrig.lab.profile import profile_run

        gpu = self.recipe.needs_gpu
        n, tokens = (4, 128) if gpu else (1, 48)
        tokens = min(tokens, self.plan.workload.request_len)
        few = [Prompt(f"profile-{p.id}", p.text, tokens) for p in prompts[:n]]
        log.step(f"[{config.name}] profiling {len(few)} request(s) x {tokens} tokens with the engine's profiler")
        assert self.engine.profile_paths is not None
        trace_dir = self.results / "profiles" / config.name
        b = profile_run(
            base_url=base_url,
            paths=self.engine.profile_paths,
            trace_dir=trace_dir,
            config=config.name,
            run=lambda: run_workload(base_url, self._spec(config, few, tokens)),
            stop_timeout_s=self.plan.workload.first_token_timeout_s,  # the engine's longest silence
            headers=auth_headers(self.plan.api_key),
            start_body=self.engine.profile_start_body(str(trace_dir)),
        )
        log.step(
            f"[{config.name}] profiled {b.steps} steps: {b.step_ms:.2f} ms a step" + (" (trace cut)" if b.cut else "")
        )
        return b

    def earlier_baselines(self) -> list[Measurement]:
        """The baseline measurements of ``--baseline RUN_DIR`` (none without it)."""
        if not self.plan.baseline_run:
            return []
        if self._earlier is None:
            self._earlier = [m for m in load_summary(Path(self.plan.baseline_run)).measurements if m.id.is_baseline]
        return self._earlier

    def paired_baseline(self, case: Case) -> list[Measurement]:
        """Baseline measurements at the case's load: this run's (same repeat), or an earlier run's."""
        if self.plan.baseline_run:
            return [m for m in self.earlier_baselines() if m.point == case.point]
        baseline = self.plan.baseline
        m = self.measured.get((baseline.id, case.point.label, case.repeat)) if baseline else None
        return [m] if m else []

    def _run(
        self, case: Case, base_url: str, prompts: list[Prompt], spec: SpecConfig | None, benchmark: Any
    ) -> Measurement:
        w, name = self.plan.workload, f"{case.name} {case.point.label} r{case.repeat}"
        what = f"{len(prompts)} {w.dataset} prompts"
        if case.point.concurrency and case.point.request_rate is None:  # keep every slot busy
            prompts = cycle_prompts(prompts, case.point.concurrency)
            if len(prompts) > w.num_prompts:
                what += f" as {len(prompts)} requests (cycled to fill {case.point.concurrency} slots)"
        run_spec = self._spec(case.config, prompts, w.request_len, case.point, progress=name)
        server = self.servers.active
        watchdog = server.check_alive if server is not None else None  # a dead engine ends the run within a second
        with httpx.Client(base_url=base_url, timeout=10, headers=auth_headers(self.plan.api_key)) as http:
            before = self._scrape(http)
            log.step(f"[{name}] measuring {what} at {case.point.describe()}")
            run, rounds = timed_run(lambda: run_workload(base_url, run_spec, watchdog=watchdog), benchmark)
            after = self._scrape(http)
        if server is not None:
            server.check_alive()
        m = self._measurement(case, name, run, rounds, spec, before, after)
        log.step(f"[{name}] {m.completion_tokens} tokens in {m.wall_s:.1f} s ({m.output_tok_s:.1f} tok/s)")
        return m

    def _scrape(self, http: httpx.Client) -> _Scrape:
        """The server's metrics exposition and its server-info document, now (None: it has none)."""
        return _Scrape(_get(http, self.engine.metrics_path), _get_json(http, self.engine.server_info_path))

    def _measurement(
        self,
        case: Case,
        name: str,
        run: RunResult,
        rounds: int,
        spec: SpecConfig | None,
        before: _Scrape,
        after: _Scrape,
    ) -> Measurement:
        """The typed measurement of one run, from the client's requests and the server's counters."""
        m0, m1 = before.metrics, after.metrics
        tag = f"{case.name}-{case.point.label}-r{case.repeat}"
        for when, text in (("before", m0), ("after", m1)):
            if text is not None:  # the raw expositions, for anyone who wants to recompute by hand
                write_text(self.results / "logs" / f"metrics-{tag}-{when}.prom", text)
        records = [record_of(r, self.engine) for r in run.requests]
        match = {"model_name": self.plan.served_name}
        problem = describe_deltas(check_deltas(parse(m0), parse(m1), match=match)) if m0 and m1 else None
        server_tokens = None
        if self.engine.generation_tokens_metric and m1:
            server_tokens = delta(parse(m0) if m0 else None, parse(m1), self.engine.generation_tokens_metric, match)
        return Measurement(
            config=case.name,
            id=case.config,
            point=case.point,
            repeat=case.repeat,
            requests=records,
            wall_s=run.wall_s,
            completion_tokens=run.completion_tokens,
            output_tok_s=run.completion_tokens / run.wall_s if run.wall_s else 0.0,
            decode_tok_s=Distribution.of([r.decode_tok_s for r in records if r.decode_tok_s]),
            latency=latency_of(records),
            server_generation_tokens=server_tokens,
            counters_own=None if server_tokens is None else int(server_tokens) == run.completion_tokens,
            spec_counters=None if spec is None else self._spec_counters(name, spec, run, before, after),
            goodput=_goodput(self.plan.workload.slo, records, run.wall_s),
            client_cpu_share=run.client_cpu_share,
            counter_problem=problem,
            rounds=rounds,
        )

    def _spec_counters(
        self, name: str, spec: SpecConfig, run: RunResult, before: _Scrape, after: _Scrape
    ) -> SpecCounters:
        """The speculative-decoding counters of the run, as the engine reports them (refused when none)."""
        counters = self.engine.spec_counters(
            metrics_before=before.metrics,
            metrics_after=after.metrics,
            info_before=before.info,
            info_after=after.info,
            requests=[self.engine.request_spec(r.final_payload) for r in run.requests],
            completion_tokens=run.completion_tokens,
            served_name=self.plan.served_name,
            spec=spec,
        )
        if counters is None:
            raise BenchError(
                f"[{name}] the server reports no speculative-decoding counters",
                hint="is speculation enabled on it? (with --endpoint, --spec must match the server's setup)",
            )
        return counters


class _Scrape(NamedTuple):
    metrics: str | None
    info: dict[str, Any] | None


def _goodput(slo: Slo | None, records: list[RequestRecord], wall_s: float) -> Goodput | None:
    """The requests that met the workload's SLO, and their rates (None: no SLO)."""
    if slo is None:
        return None
    good = [r for r in records if slo.met(r)]
    return Goodput(
        slo=slo,
        met=len(good),
        total=len(records),
        requests_per_s=len(good) / wall_s,
        tokens_per_s=sum(r.completion_tokens for r in good) / wall_s,
    )


def latency_of(records: list[RequestRecord]) -> Latency:
    """The run's latency distributions, as every report shows them."""
    return Latency(
        ttft_ms=Distribution.of([r.ttft_ms for r in records if r.ttft_ms is not None]),
        tpot_ms=Distribution.of([r.tpot_ms for r in records if r.tpot_ms is not None]),
        itl_ms=Distribution.of([x for r in records for x in r.itl_ms]),
        e2e_ms=Distribution.of([r.e2e_ms for r in records if r.e2e_ms is not None]),
    )


def record_of(r: RequestResult, engine: Engine) -> RequestRecord:
    """A client RequestResult as a typed record."""
    rs = engine.request_spec(r.final_payload) if r.final_payload else None
    return RequestRecord(
        prompt_id=r.prompt_id,
        ttft_ms=None if r.ttft_s is None else 1000 * r.ttft_s,
        tpot_ms=None if r.tpot_s is None else 1000 * r.tpot_s,
        e2e_ms=None if r.e2e_s is None else 1000 * r.e2e_s,
        decode_tok_s=r.decode_tok_s,
        completion_tokens=r.completion_tokens,
        prompt_tokens=r.prompt_tokens,
        itl_ms=[1000 * x for x in r.itl_s],
        output_len=r.max_tokens,
        text=r.text,
        token_ids=r.token_ids or None,
        accepted_tokens=rs.accepted_tokens if rs else None,
        draft_tokens=rs.draft_tokens if rs else None,
        acceptance_length=rs.acceptance_length if rs else None,
    )


def _request_builder(
    engine: Engine, spec: SpecConfig | None, extras: dict[str, Any], model: str, ignore_eos: bool, chat: bool = False
) -> RequestBuilder:
    """OpenAI completions (chat completions with ``chat``), unless the engine returns per-request
    speculative stats only on a native endpoint (SGLang's ``/generate``): there a speculative
    configuration's raw text, and with ``chat`` every configuration's prompt as the chat template
    renders it (``Prompt.input_ids``, the same tokens a chat completion sends; a prompt without
    them, a warm-up's, goes to the chat completions)."""
    path = engine.native_generate_path
    openai = openai_request(extras, model, ignore_eos=ignore_eos, chat=chat)
    if path is None or (spec is None and not chat):
        return openai

    def build(p: Prompt, n: int) -> tuple[str, dict[str, Any]]:
        if chat and p.input_ids is None:
            return openai(p, n)
        ids = p.input_ids if chat else None
        body = engine.native_generate_body(prompt=p.text, max_tokens=n, ignore_eos=ignore_eos, input_ids=ids)
        return path, body

    return build


_AUX = re.compile(r"Using (?:Eagle3 )?auxiliary layers from (?:speculative config|config|model): \(?\[?([\d,\s]+)")


def served_aux_layers(log_text: str) -> list[int] | None:
    """The EAGLE-3 aux layers the engine says it uses (vLLM logs "Using Eagle3 auxiliary layers
    from model: (2, 15, 27)"), the last such line; None when it logged none."""
    found = _AUX.findall(log_text)
    return [int(x) for x in re.findall(r"\d+", found[-1])] if found else None


def _get(client: httpx.Client, path: str | None) -> str | None:
    if not path:
        return None
    try:
        r = client.get(path)
    except httpx.HTTPError as exc:
        raise EngineError(f"cannot scrape {path}: {exc}", hint="did the server die? see its log") from None
    return r.text if r.status_code == 200 else None


def _get_json(client: httpx.Client, path: str | None) -> dict[str, Any] | None:
    text = _get(client, path)
    if text is None:
        return None
    import json

    return json.loads(text)
