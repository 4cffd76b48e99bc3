"""Does specrig's client agree with SGLang's own, ``python -m sglang.benchmark.serving``? (issue 24, item 5)

One SGLang server (launched through specrig's own APIs, or ``--endpoint``), both clients on the same
prompts (the story's, cycled as specrig cycles them), the same output length, greedy, ``ignore_eos``,
the same concurrency. A run is one client at one concurrency, with the server's ``/metrics`` read
before and after it; rounds alternate the order (ABBA). Per concurrency and figure (output tok/s,
mean TPOT, mean TTFT): the paired relative difference SGLang/specrig - 1, its mean and 95% t-interval,
judged against a tolerance (3% for tok/s and TPOT; TTFT: its noise, the larger relative range
(max - min) / mean of either client's own rounds): "agree" when the interval lies inside it,
"disagree" when wholly outside, "undecided" otherwise (more rounds). The same is computed on each
figure taken relative to the server's own histograms of that run ("vs server": tok/s x summed e2e /
tokens, TPOT / ITL, TTFT / server TTFT), which takes the server's drift out; the verdict is the raw one.

On the GPU host, with specrig importable (the kit's ``RIG/venv/bin/python`` and its launcher's exports)::

    python bench/agree_sglang.py --out agree-h200.json    # --rounds 4 --concurrency 1,8 --max-tokens 512

Not a test module (pytest collects ``test_*.py``); ``tests/test_agree_sglang.py`` checks its computation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from specrig.core import atomic, interrupts
from specrig.core.errors import BenchError, SpecrigError, ThresholdError
from specrig.core.prompt import cycle_prompts
from specrig.engine.metrics import Exposition, delta, parse
from specrig.lab.results import RunSummary, load_summary
from specrig.model.datasets import story_prompts
from specrig.recipe.schema import Recipe, load_recipe
from specrig.specdec.stats import Interval, mean_interval

FIGURES = ("output_tok_s", "tpot_ms", "ttft_ms")
TOLERANCE: dict[str, float | None] = {"output_tok_s": 0.03, "tpot_ms": 0.03, "ttft_ms": None}  # None: its noise
CLIENTS = ("specrig", "sglang")
# sglang/benchmark/serving.py (0.5.17): the keys of the line it appends to --output-file (`result`, L1772-1825, L1875)
SERVING_KEYS = {"output_tok_s": "output_throughput", "tpot_ms": "mean_tpot_ms", "ttft_ms": "mean_ttft_ms"}
TTFT, ITL = "sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds"  # histograms (0.5.17)
E2E, TOKENS = "sglang:e2e_request_latency_seconds", "sglang:generation_tokens_total"
# sglang.benchmark.datasets imports `datasets` (mmmu.py L8), which the SGLang environment prunes
DATASETS_STUB = 'def load_dataset(*args, **kwargs):\n    raise RuntimeError("datasets is not installed")\n'


# ------------------------------------------------------------------ pure: reading and comparing


def order(round_: int) -> tuple[str, str]:
    """ABBA: specrig first in even rounds, SGLang first in odd ones."""
    return CLIENTS if round_ % 2 == 0 else (CLIENTS[1], CLIENTS[0])


def from_bench_serving(line: str) -> dict[str, Any]:
    """The figures of one ``--output-file`` line of ``sglang.benchmark.serving``."""
    d = json.loads(line)
    version = (d.get("server_info") or {}).get("version")  # the server's /server_info, read after the run
    counts = {"completed": int(d["completed"]), "tokens": int(d["total_output_tokens"]), "sglang_version": version}
    return {f: float(d[k]) for f, k in SERVING_KEYS.items()} | counts


def from_summary(summary: RunSummary, concurrency: int) -> dict[str, Any]:
    """The figures of specrig's baseline measurement at ``concurrency`` in a run's summary."""
    m = next(m for m in summary.measurements if m.id.is_baseline and m.point.concurrency == concurrency)
    lat, counts = m.latency, {"completed": len(m.requests), "tokens": m.completion_tokens}
    return {"output_tok_s": m.output_tok_s, "tpot_ms": lat.tpot_ms.mean, "ttft_ms": lat.ttft_ms.mean} | counts


def server_figures(before: Exposition | None, after: Exposition | None) -> dict[str, float] | None:
    """What the server itself recorded between two scrapes (None: no SGLang histograms, or no request)."""
    if before is None or after is None:
        return None
    d = {n: delta(before, after, n) or 0.0 for h in (TTFT, ITL, E2E) for n in (f"{h}_sum", f"{h}_count")}
    tokens = delta(before, after, TOKENS)
    if not tokens or not all(d[f"{h}_count"] for h in (TTFT, ITL, E2E)):
        return None
    ms = {k: 1000 * d[f"{h}_sum"] / d[f"{h}_count"] for k, h in (("ttft_ms", TTFT), ("itl_ms", ITL))}
    return ms | {"e2e_s": d[f"{E2E}_sum"], "requests": d[f"{E2E}_count"], "tokens": tokens}


def view(run: dict[str, Any], kind: str) -> dict[str, float] | None:
    """A run's figures as its client read them ("raw"), or relative to the server's own ("vs_server")."""
    if kind == "raw":
        return {f: run[f] for f in FIGURES}
    s = run.get("server")
    if not s:
        return None
    tok_s = run["output_tok_s"] * s["e2e_s"] / s["tokens"]
    return {"output_tok_s": tok_s, "tpot_ms": run["tpot_ms"] / s["itl_ms"], "ttft_ms": run["ttft_ms"] / s["ttft_ms"]}


def noise(values: list[float]) -> float:
    """The relative range of one client's own rounds: (max - min) / mean."""
    return (max(values) - min(values)) / statistics.fmean(values)


def judge(iv: Interval, tolerance: float) -> str:
    if iv.n >= 2 and -tolerance <= iv.low and iv.high <= tolerance:
        return "agree"
    if iv.n >= 2 and (iv.low > tolerance or iv.high < -tolerance):
        return "disagree"
    return "undecided"


def compare(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per concurrency, view and figure: both clients' rounds, paired by round."""
    rows = []
    for c in sorted({r["concurrency"] for r in runs}):
        for kind in ("raw", "vs_server"):
            by_round: dict[int, dict[str, dict[str, float]]] = {}
            for r in runs:
                if r["concurrency"] == c and (v := view(r, kind)) is not None:
                    by_round.setdefault(r["round"], {})[r["client"]] = v
            pairs = [(d["specrig"], d["sglang"]) for _, d in sorted(by_round.items()) if len(d) == 2]
            for f in FIGURES if pairs else ():
                ours, theirs = [p[0][f] for p in pairs], [p[1][f] for p in pairs]
                iv = mean_interval([t / o - 1 for o, t in zip(ours, theirs, strict=True)])
                spread = {"specrig": noise(ours), "sglang": noise(theirs)}
                tol = TOLERANCE[f] if TOLERANCE[f] is not None else max(spread.values())
                rows.append(
                    {"concurrency": c, "view": kind, "figure": f, "specrig": ours, "sglang": theirs}
                    | {"diff_mean": iv.mean, "diff_low": iv.low, "diff_high": iv.high, "n": iv.n, "noise": spread}
                    | {"tolerance": tol, "verdict": judge(iv, tol)}
                )
    return rows


def overall(rows: list[dict[str, Any]]) -> str:
    verdicts = {r["verdict"] for r in rows if r["view"] == "raw"}
    return "disagree" if "disagree" in verdicts else "agree" if verdicts == {"agree"} else "undecided"


def table(rows: list[dict[str, Any]]) -> Table:
    t = Table(title="specrig's client vs sglang.benchmark.serving (SGLang / specrig - 1, 95% t-interval)")
    for col in ("c", "figure", "view", "specrig (mean)", "SGLang (mean)", "diff", "95% CI", "tolerance", "verdict"):
        t.add_column(col, justify="left" if col in ("figure", "view", "verdict") else "right")
    for r in rows:
        pct = "{:+.2%}".format
        t.add_row(
            *(str(r["concurrency"]), r["figure"], r["view"]),
            *(f"{statistics.fmean(r[k]):.4g}" for k in ("specrig", "sglang")),
            *(pct(r["diff_mean"]), f"{pct(r['diff_low'])} .. {pct(r['diff_high'])}", f"±{r['tolerance']:.1%}"),
            r["verdict"],
        )
    return t


# ------------------------------------------------------------------ running the clients


def _run(cmd: list[str], log: Path, env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> None:
    with open(log, "wb") as out:  # a subprocess's log, as specrig's Server keeps one
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False).returncode
    if rc not in ok:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise BenchError(f"{cmd[2]} exited {rc}:\n{tail}", hint=f"the whole log: {log}")


def run_specrig(a: argparse.Namespace, url: str, c: int, work: Path, tag: str, served: str) -> dict[str, Any]:
    folder = work / tag
    cmd = [sys.executable, "-m", "specrig.cli", "bench", "--recipe", a.recipe, "--engine", a.engine]
    cmd += ["--model", a.model, "--endpoint", url, "--max-tokens", str(a.max_tokens), "--concurrency", str(c)]
    cmd += ["--num-prompts", str(a.num_prompts), "--warmup", "0", "--results", str(folder)]
    _run(cmd, work / f"{tag}.log", ok=(0, ThresholdError.exit_code))  # a gate missed: still measured
    return from_summary(load_summary(folder), c) | {"argv": cmd[1:]}


def bench_serving_argv(a: argparse.Namespace, url: str, c: int, data: Path, out: Path, served: str) -> list[str]:
    """``sglang.benchmark.serving``'s flags (0.5.17, cli_main L2181-2728): ``/v1/completions`` as specrig's
    baseline (sglang-oai, L942, L960), temperature 0 and ignore_eos by default (L279-285), the custom JSONL
    dataset (datasets/custom.py), no warm-up (the server's deltas hold the measured requests only)."""
    argv = ["-m", "sglang.benchmark.serving", "--backend", "sglang-oai", "--base-url", url]
    argv += ["--model", a.tokenizer or served, "--served-model-name", served]
    argv += ["--tokenizer", a.tokenizer] if a.tokenizer else []  # else the server's /model_info names it
    argv += ["--dataset-name", "custom", "--dataset-path", str(data), "--num-prompts", str(max(a.num_prompts, c))]
    argv += ["--sharegpt-output-len", str(a.max_tokens), "--max-concurrency", str(c), "--request-rate", "inf"]
    argv += ["--warmup-requests", "0", "--extra-request-body", json.dumps({"return_token_ids": True})]
    return [*argv, "--disable-tqdm", "--output-file", str(out)]


def run_sglang(a: argparse.Namespace, url: str, c: int, work: Path, tag: str, served: str) -> dict[str, Any]:
    data = work / f"prompts-c{c}.jsonl"  # the very texts specrig sends at this concurrency (lab/measure.py)
    prompts = cycle_prompts(story_prompts(a.num_prompts), c)
    lines = [json.dumps({"conversations": [{"content": p.text}, {"content": "unused"}]}) for p in prompts]
    atomic.write_text(data, "\n".join(lines) + "\n")
    out = work / f"{tag}.jsonl"
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if subprocess.run([a.sglang_python, "-c", "import datasets"], capture_output=True).returncode != 0:
        atomic.write_text(work / "stub" / "datasets.py", DATASETS_STUB)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(work / "stub"), env.get("PYTHONPATH")]))
    argv = bench_serving_argv(a, url, c, data, out, served)
    _run([a.sglang_python, *argv], work / f"{tag}.log", env)
    return from_bench_serving(out.read_text().splitlines()[-1]) | {"argv": argv}


def scrape(url: str) -> Exposition | None:
    try:
        resp = httpx.get(url + "/metrics", timeout=10)
        return parse(resp.text) if resp.status_code == 200 else None
    except (httpx.HTTPError, SpecrigError):
        return None


def measure(a: argparse.Namespace, url: str, work: Path, served: str) -> list[dict[str, Any]]:
    levels = [int(c) for c in a.concurrency.split(",")]
    for c in levels:  # one unmeasured pass: the first requests after a start pay one-off costs
        run_specrig(a, url, c, work, f"warmup-c{c}", served)
    runs = []
    for r in range(a.rounds):
        for c in levels:
            for slot, client in enumerate(order(r)):
                tag, before = f"r{r}-c{c}-{client}", scrape(url)
                fig = (run_specrig if client == "specrig" else run_sglang)(a, url, c, work, tag, served)
                runs.append({"round": r, "slot": slot, "client": client, "concurrency": c} | fig)
                runs[-1]["server"] = server_figures(before, scrape(url))
                print(f"round {r} c={c} {client}: " + ", ".join(f"{f} {fig[f]:.4g}" for f in FIGURES), flush=True)
    return runs


def launched(a: argparse.Namespace, recipe: Recipe, work: Path, stack: ExitStack) -> tuple[str, dict[str, Any]]:
    """A baseline server for ``--model`` from the recipe, as the bench launches it; stopped on exit."""
    from specrig.engine import get_engine
    from specrig.env.make import make_env
    from specrig.model.folder import prepare_model
    from specrig.patches.declared import settle
    from specrig.serve.server import Server, free_port

    engine, env_name = get_engine(a.engine), recipe.env_for_engine(a.engine)
    env = make_env(recipe, env_name)
    for line in settle(recipe, env_name, Path(env.python), provided=env.provided):
        print(line)
    model = prepare_model(recipe, env, a.model)
    launch = {"python": str(env.python), "model_path": str(model.path), "served_name": model.served_name}
    launch |= {"port": free_port(), "recipe": recipe.serving(a.model), "spec": None, "drafter": None, "extra_args": []}
    plan = engine.launch(**launch)
    timeout = recipe.engine[a.engine].startup_timeout_s
    server = stack.enter_context(Server(plan, work / "server.log", engine.health_path, model.served_name, timeout))
    ready = server.start().wait_ready()
    print(f"server ready after {ready:.0f} s: {server.base_url}", flush=True)
    a.sglang_python, a.tokenizer = a.sglang_python or str(env.python), a.tokenizer or str(model.path)
    return server.base_url, {"argv": plan.argv, "ready_after_s": ready, "log": str(work / "server.log")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the JSON to write (each run's files go beside it, in OUT.runs/)")
    p.add_argument("--endpoint", help="measure this running server instead of launching one")
    p.add_argument("--recipe", default="hopper-sm90")
    p.add_argument("--engine", default="sglang", help="the engine specrig's client is told the server runs")
    p.add_argument("--model", default="llama8b", help="the recipe's model: default or NAME of a [models.NAME]")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--concurrency", default="1,8", help="levels, e.g. 1,8")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--num-prompts", type=int, default=16, help="story prompts per run, cycled (at least c)")
    p.add_argument("--sglang-python", help="the interpreter with SGLang (default: the recipe's environment)")
    p.add_argument("--tokenizer", help="the model folder for bench_serving (default: the launched model's)")
    a = p.parse_args(argv)
    out = Path(a.out).resolve()
    work = out.with_name(out.name + ".runs")
    work.mkdir(parents=True, exist_ok=True)
    recipe = load_recipe(a.recipe)
    served = recipe.model_named(a.model).served_name
    with ExitStack() as stack:  # the launched server is stopped on the way out, whatever ends the runs
        server: dict[str, Any] = {"endpoint": a.endpoint}
        if a.endpoint:
            url = a.endpoint.rstrip("/").removesuffix("/v1")
            if not a.sglang_python:
                from specrig.env.make import make_env

                a.sglang_python = str(make_env(recipe, recipe.env_for_engine("sglang")).python)
        else:
            url, launch = launched(a, recipe, work, stack)
            server |= launch
        runs = measure(a, url, work, served)
    rows = compare(runs)
    versions = sorted({r["sglang_version"] for r in runs if r.get("sglang_version")})
    workload = {"served_name": served, "prompts": "story, cycled to max(num_prompts, c)", "greedy": True}
    doc = {"what": "specrig's client against sglang.benchmark.serving on one server (issue 24 item 5)"}
    doc |= {"sglang_version": versions[0] if versions else None, "server": server, "options": vars(a)}
    doc |= {"workload": workload | {"ignore_eos": True}, "tolerance": TOLERANCE, "runs": runs, "comparison": rows}
    atomic.write_json(out, doc | {"verdict": overall(rows)})
    Console().print(table(rows))
    print(f"verdict: {overall(rows)} (raw figures); {out}")
    return 1 if overall(rows) == "disagree" else 0


if __name__ == "__main__":
    interrupts.install()  # SIGTERM and SIGHUP unwind like Ctrl-C does, through every `with`
    try:
        sys.exit(main())
    except SpecrigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt as exc:
        print(f"interrupted ({interrupts.received()}): the server and the clients were stopped", file=sys.stderr)
        sys.exit(interrupts.exit_code(exc))
    finally:
        interrupts.stop_descendants()  # whatever this script started and is still alive
