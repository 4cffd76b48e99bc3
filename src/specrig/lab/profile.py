"""Where each decode step's time goes, from the engine's own profiler.

``--profile``: after a configuration's measured run (the first load point,
the first repeat), the lab switches on the engine's torch profiler
(``/start_profile``), sends a few short requests one at a time, switches it off
(``/stop_profile``), and reads the trace it wrote (a Chrome trace, kept in the
results folder for a trace viewer). vLLM marks the phases of every engine step
(``gpu_model_runner: forward`` / ``sample`` / ``draft`` / ``preprocess`` ...,
with ``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1``); each recorded operator (on a CPU)
or kernel (on a GPU) is put in the phase it ran in and, inside the target's
forward, in a category by its name: dense GEMM, attention, MoE, communication
(NCCL, all-reduce, all-gather), other operators. On a CPU the rest of a step is
host time (Python in the forward, pre/post-processing, the scheduler between
steps); on a GPU it is GPU idle, the host between kernels. The categories add up
to the profiled window by construction; the report also compares that window
with the client's own time for the same requests (they should agree within ~10%:
the trace covers the whole run). In a speculative configuration the forward is
the target's verification of the drafted tokens and ``draft`` the drafter's
forward: the measured step cost replaces the one inferred from tokens and time.

SGLang (0.5.17) marks its stages with nested spans instead: each forward of a model
(``step[DECODE bs=N]``, ``step[TARGET_VERIFY bs=N]``, ``step[EXTEND ...]``), the speculative
stages (``draft``, ``draft_extend``) around the drafter's forwards, and the scheduler's
(``scheduler.run_batch``, ``scheduler.process_batch_result``). A step is a forward of the
target (one outside the drafter's spans); where spans nest, the drafter's wins over the
target's forward, and the forward over the scheduler's stage. Its verification of the draft
(the tree's greedy or sampled acceptance) counts with the drafter, as vLLM's rejection
sampler does."""

from __future__ import annotations

import bisect
import gzip
import json
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from specrig.core.errors import BenchError
from specrig.lab.results import ProfileBreakdown

__all__ = ["summarize_trace", "wait_for_trace", "CATEGORIES", "MAX_EVENTS"]

MAX_EVENTS = 4_000_000
"""A trace with more events is cut at this many (and says so)."""

_PHASES = {
    "gpu_model_runner: forward": "forward",
    "gpu_model_runner: sample": "sampling",
    "gpu_model_runner: draft": "drafter",
    "gpu_model_runner: preprocess": "host",
    "gpu_model_runner: postprocess": "host",
    "gpu_model_runner: bookkeep": "host",
    "gpu_model_runner: ModelRunnerOutput": "host",
    "gpu_model_runner: eplb": "host",
}
_KINDS = [
    (
        "communication",
        re.compile(r"nccl|all_?reduce|all_?gather|reduce_?scatter|c10d|custom_ar|cross_device|allreduce", re.I),
    ),
    ("moe", re.compile(r"moe|expert|topk_softmax|grouped_gemm", re.I)),
    ("attention", re.compile(r"attention|attn|flash|fmha|paged|sdpa|kv_cache|reshape_and_cache|rotary|rope|mla", re.I)),
    (
        "gemm",
        re.compile(
            r"\bmm\b|_mm\b|matmul|linear|gemm|gemv|addmm|bmm|onednn_mm|cutlass|xmma|cublas|nvjet|wgmma|sm\d+_", re.I
        ),
    ),
]
CATEGORIES = (
    "target: dense GEMM",
    "target: attention",
    "target: MoE",
    "target: communication",
    "target: other ops",
    "target: host (Python, launches)",
    "sampling",
    "drafter",
    "host: pre/post-processing",
    "host: scheduler, between steps",
    "GPU idle (host between kernels)",
)


def _kind(name: str) -> str:
    for kind, pattern in _KINDS:
        if pattern.search(name):
            return kind
    return "other"


_FORWARD = {
    "gemm": "target: dense GEMM",
    "attention": "target: attention",
    "moe": "target: MoE",
    "communication": "target: communication",
    "other": "target: other ops",
}


_SAMPLING = re.compile(r"sampl|gumbel|argmax|top_?k|top_?p|logprob|penalt", re.I)
_DRAFTER = re.compile(r"eagle|(?<!and_)draft|propos|ngram|spec_decode|rejection|verify_tree|tree_speculative", re.I)

_SGLANG_SPANS = {
    "draft": "drafter",
    "draft_extend": "drafter",
    "scheduler.run_batch": "host",
    "scheduler.process_batch_result": "host",
}
_SGLANG_STEP = "step["
_RANK = {"host": 0, "forward": 1, "drafter": 2}
"""Where SGLang's spans nest, the phase of the innermost that counts: the drafter's stages hold
forwards of the drafter, the scheduler's stage holds every forward."""


def _category(phase: str | None, name: str) -> str:
    """Where one operator or kernel goes: the drafter's and the sampler's phases whole; elsewhere
    the target's compute by kind (the output head's GEMM runs in post-processing), the rest by phase.
    Without phase scopes (vLLM's V2 runner) the sampler's and the drafter's kernels go by name."""
    if phase in ("sampling", "drafter"):
        return phase
    if phase != "forward" and _DRAFTER.search(name):
        return "drafter"
    if phase != "forward" and _SAMPLING.search(name):
        return "sampling"
    kind = _kind(name)
    if kind != "other" or phase in ("forward", "step"):  # "step": a V2-runner step, its kernels the model's
        return _FORWARD[kind]
    return "host: pre/post-processing" if phase == "host" else "host: scheduler, between steps"


def wait_for_trace(folder: Path, before: set[Path], timeout_s: float = 180.0) -> list[Path]:
    """The trace files the profiler wrote into ``folder`` since ``before`` (their size settled)."""
    deadline = time.monotonic() + timeout_s
    last: dict[Path, int] = {}
    while time.monotonic() < deadline:
        new = sorted(p for p in folder.rglob("*.json*") if p not in before and p.is_file())
        sizes = {p: p.stat().st_size for p in new}
        if new and sizes == last:
            return new
        last = sizes
        time.sleep(1.0)
    raise BenchError(
        f"the engine wrote no profiler trace into {folder} within {timeout_s:.0f} s",
        hint="see the server log; a large trace takes long to write: profile fewer tokens",
    )


def _load(files: Iterable[Path]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    events: list[dict[str, Any]] = []
    meta: dict[str, Any] = {}
    for f in files:
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt") as fh:
            try:
                data = json.load(fh)
            except (json.JSONDecodeError, OSError, EOFError) as exc:
                raise BenchError(f"cannot read the profiler trace {f}: {exc}", hint="see the server log") from None
        events += data.get("traceEvents", []) if isinstance(data, dict) else data
        if isinstance(data, dict):
            meta.update({k: data[k] for k in ("vllm_version", "deviceProperties") if k in data})
    return events, meta


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total / 1000


_Scope = tuple[float, float, str, Any]
"""One step's phase scope in the trace: start and end (µs), the phase, the thread."""


def summarize_trace(
    files: list[Path], config: str, *, client_ms: float | None = None, tokens: int = 0
) -> ProfileBreakdown:
    """The per-step breakdown of one profiled run (``client_ms``: the client's time for the same requests)."""
    events, meta = _load(files)
    cut = len(events) > MAX_EVENTS
    events = events[:MAX_EVENTS]
    xs = [e for e in events if e.get("ph") == "X" and isinstance(e.get("dur"), (int, float)) and "ts" in e]
    scopes, steps = _step_scopes(xs, config)
    start, end = scopes[0][0], max(s[1] for s in scopes)
    window_ms = (end - start) / 1000
    phase_at = _phase_finder(scopes)
    kernels = [e for e in xs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if kernels:
        cats, window_ms = _gpu_categories(xs, kernels, start, end, phase_at)
        device = "GPU"
    else:
        cats = _cpu_categories(xs, start, end, window_ms, phase_at)
        device = "CPU"
    per_step = {k: v / steps for k, v in cats.items() if v > 0}
    return ProfileBreakdown(
        config=config,
        device=device,
        steps=steps,
        window_ms=window_ms,
        step_ms=window_ms / steps,
        per_step_ms=per_step,
        client_ms=client_ms,
        tokens=tokens,
        trace_files=[str(f) for f in files],
        events=len(events),
        cut=cut,
        engine_version=str(meta.get("vllm_version") or ""),
        phases=any(sc[2] != "step" for sc in scopes),
    )


def _step_scopes(xs: list[dict[str, Any]], config: str) -> tuple[list[_Scope], int]:
    """The phase scopes of the engine steps, by start, and how many steps there were."""
    if sglang := _sglang_scopes(xs):
        return sglang
    scopes = sorted(
        ((e["ts"], e["ts"] + e["dur"], _PHASES[e["name"]], e.get("tid")) for e in xs if e.get("name") in _PHASES),
        key=lambda s: s[0],
    )
    steps = sum(1 for e in xs if e.get("name") == "gpu_model_runner: forward")
    if not steps:  # vLLM's V2 model runner (0.2x on a GPU) marks each engine step, not its phases
        marks = [
            e for e in xs if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("execute_context")
        ]
        steps = len(marks)
        scopes = sorted(((e["ts"], e["ts"] + e["dur"], "step", e.get("tid")) for e in marks), key=lambda s: s[0])
    if not steps:
        raise BenchError(
            f"the profiler trace of {config} has no engine steps (neither vLLM's 'gpu_model_runner: forward' "
            "or 'execute_context' scopes nor SGLang's 'step[...]' spans)",
            hint="vLLM must run with VLLM_CUSTOM_SCOPES_FOR_PROFILING=1 (specrig sets it with --profile); "
            "SGLang 0.5.17 marks them with record_function spans (an older SGLang may not)",
        )
    return scopes, steps


def _sglang_scopes(xs: list[dict[str, Any]]) -> tuple[list[_Scope], int] | None:
    """SGLang's nested spans flattened into phase scopes that follow each other, and its steps
    (the target's forwards); None for a trace without SGLang's step spans."""
    spans = [e for e in xs if e.get("cat") == "user_annotation"]
    marked = [(e, phase) for e in spans for phase in [_sglang_phase(e)] if phase]
    if not any(phase == "forward" for _, phase in marked):
        return None
    scopes = _flatten([(e["ts"], e["ts"] + e["dur"], phase) for e, phase in marked])
    phase_at = _phase_finder(scopes)
    steps = sum(1 for e, phase in marked if phase == "forward" and phase_at(e["ts"]) == "forward")
    return scopes, steps


def _sglang_phase(e: dict[str, Any]) -> str | None:
    name = str(e.get("name", ""))
    return "forward" if name.startswith(_SGLANG_STEP) else _SGLANG_SPANS.get(name)


def _flatten(spans: list[tuple[float, float, str]]) -> list[_Scope]:
    """Nested spans as scopes that do not overlap: at each moment, the phase of highest :data:`_RANK` open."""
    edges = sorted([(a, 1, phase) for a, _, phase in spans] + [(b, -1, phase) for _, b, phase in spans])
    open_ = dict.fromkeys(_RANK, 0)
    scopes: list[_Scope] = []
    for i, (ts, step, phase) in enumerate(edges):
        open_[phase] += step
        nxt = edges[i + 1][0] if i + 1 < len(edges) else ts
        now = max((p for p, n in open_.items() if n > 0), key=_RANK.__getitem__, default=None)
        if now is None or nxt <= ts:
            continue
        if scopes and scopes[-1][2] == now and scopes[-1][1] == ts:
            scopes[-1] = (scopes[-1][0], nxt, now, None)
        else:
            scopes.append((ts, nxt, now, None))
    return scopes


def _phase_finder(scopes: list[_Scope]) -> Callable[[float], str | None]:
    starts = [s[0] for s in scopes]

    def phase_at(ts: float) -> str | None:
        """The phase scope holding ``ts`` (the phases of one step follow each other, none nests)."""
        i = bisect.bisect_right(starts, ts) - 1
        return scopes[i][2] if i >= 0 and ts < scopes[i][1] else None

    return phase_at


def _gpu_categories(
    xs: list[dict[str, Any]],
    kernels: list[dict[str, Any]],
    start: float,
    end: float,
    phase_at: Callable[[float], str | None],
) -> tuple[dict[str, float], float]:
    """On a GPU: each kernel launched inside the window in the phase it was launched in, the
    rest GPU idle; and the window, stretched to the last kernel's end."""
    window_ms = (end - start) / 1000
    cats = dict.fromkeys(CATEGORIES, 0.0)
    launches = {
        (e.get("args") or {}).get("correlation"): e["ts"]
        for e in xs
        if e.get("cat") == "cuda_runtime" and (e.get("args") or {}).get("correlation") is not None
    }
    busy = []
    for k in kernels:
        when = launches.get((k.get("args") or {}).get("correlation"), k["ts"])
        if not (start <= when < end):
            continue
        busy.append((k["ts"], k["ts"] + k["dur"]))
        cats[_category(phase_at(when) or "host", str(k.get("name", "")))] += k["dur"] / 1000
    if busy:  # the GPU finishes the last step's kernels after the host's scope closed
        window_ms = (max(end, max(b for _, b in busy)) - start) / 1000
    cats["GPU idle (host between kernels)"] = max(0.0, window_ms - _union_ms(busy))
    return cats, window_ms


def _cpu_categories(
    xs: list[dict[str, Any]], start: float, end: float, window_ms: float, phase_at: Callable[[float], str | None]
) -> dict[str, float]:
    """On a CPU: each operator's self time in the window by its phase and name, the rest the
    scheduler between steps."""
    cats = dict.fromkeys(CATEGORIES, 0.0)
    ops = sorted(
        (e for e in xs if e.get("cat") in ("cpu_op", "user_annotation") and start <= e["ts"] < end),
        key=lambda e: (e.get("tid"), e["ts"], -e["dur"]),
    )
    covered = 0.0
    for ev, own in _self_times(ops):
        own_ms = max(own, 0.0) / 1000
        covered += own_ms
        name = str(ev.get("name", ""))
        if name in _PHASES:
            phase = _PHASES[name]
            key = {"forward": "target: host (Python, launches)", "sampling": "sampling", "drafter": "drafter"}.get(
                phase, "host: pre/post-processing"
            )
        else:
            key = _category(phase_at(ev["ts"]), name)
        cats[key] += own_ms
    cats["host: scheduler, between steps"] += max(0.0, window_ms - covered)
    return cats


def _self_times(ops: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    """The self time of each event (sorted by thread, start, longest first): its duration less
    its direct children's (one stack per thread)."""
    stack: list[list[Any]] = []  # [end, event, child time]
    selfs: list[tuple[dict[str, Any], float]] = []

    def pop_until(ts: float, tid: Any) -> None:
        while stack and (stack[-1][0] <= ts or stack[-1][1].get("tid") != tid):
            e_end, ev, child = stack.pop()
            selfs.append((ev, ev["dur"] - child))
            if stack and stack[-1][1].get("tid") == ev.get("tid"):
                stack[-1][2] += ev["dur"]

    for e in ops:
        pop_until(e["ts"], e.get("tid"))
        stack.append([e["ts"] + e["dur"], e, 0.0])
    pop_until(float("inf"), object())
    return selfs


def profile_run(
    *,
    base_url: str,
    paths: tuple[str, str],
    trace_dir: Path,
    config: str,
    run: Any,
    stop_timeout_s: float = 120.0,
    headers: dict[str, str] | None = None,
    start_body: dict[str, Any] | None = None,
) -> ProfileBreakdown:
    """Start the engine's profiler, ``run()`` a few requests (returns the client's RunResult),
    stop it, and summarise the trace it wrote into ``trace_dir``. The stop answers once the
    trace is written (on a CPU, also a table of it, which takes longer than the trace), so it
    waits up to ``stop_timeout_s``; a request that fails is a :class:`BenchError` (the caller
    keeps the measurement and says why the breakdown is missing). ``headers``: the server's API
    key (SGLang's guards its profiler's paths too); ``start_body``: the JSON the start path takes."""
    import httpx

    trace_dir.mkdir(parents=True, exist_ok=True)
    before = set(trace_dir.rglob("*"))
    start, stop = paths
    with httpx.Client(base_url=base_url, timeout=120, headers=headers or {}) as http:
        try:
            r = http.post(start, json=start_body)  # None: no body
        except httpx.HTTPError as exc:
            raise BenchError(
                f"the server's {start} did not answer ({exc or type(exc).__name__})",
                hint="see the server log: did it die, or was it started without its profiler?",
            ) from None
        if r.status_code != 200:
            raise BenchError(
                f"the server's {start} answered HTTP {r.status_code}",
                hint="was it started with its profiler configured? (specrig does that with --profile; "
                "with --endpoint, start the server with vLLM's --profiler-config)",
            )
        ran = False
        try:
            result = run()
            ran = True
        finally:
            try:
                http.post(stop, timeout=stop_timeout_s)
            except httpx.HTTPError as exc:
                if ran:  # else the run's own error stands
                    late = f"within {stop_timeout_s:g} s " if isinstance(exc, httpx.TimeoutException) else ""
                    raise BenchError(
                        f"the server's {stop} did not answer {late}({exc or type(exc).__name__})",
                        hint="its profiler writes the trace before it answers; give it longer with "
                        "--first-token-timeout S, or profile on a less busy host",
                    ) from None
    client_ms = 1000 * sum(q.e2e_s or 0 for q in result.requests)
    files = [f for f in wait_for_trace(trace_dir, before) if ".trace.json" in f.name or f.suffix == ".json"]
    return summarize_trace(files, config, client_ms=client_ms, tokens=result.completion_tokens)
