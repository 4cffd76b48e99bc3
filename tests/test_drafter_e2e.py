"""End to end on the CPU default: `specrig drafter --quick` trains an EAGLE-3
drafter (the target's own answers through a real vLLM server, hidden states,
training, export), `specrig drafter-eval` scores it offline, and a real vLLM
bench serves it: the engine's own counters must show accepted draft tokens.

About 6-8 minutes on a fresh 2-core host (two server starts, a ~2-minute
training); stages are cached, so a rerun takes about 3."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specrig.drafter.reference import calibrated_step_s
from specrig.lab.results import load_summary

pytestmark = [pytest.mark.engine, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
MAX_TOKENS = 48


def specrig(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specrig.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ | {"COLUMNS": "160"},
    )


@pytest.fixture(scope="module")
def quick_drafter() -> Path:
    from specrig.drafter.export import drafters_root

    proc = specrig("drafter", "--quick", "--recipe", "cpu")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    pointer = json.loads((drafters_root("cpu") / "current-quick.json").read_text())
    path = Path(pointer["drafter"])
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    for stage in ("prompts", "generate", "hidden", "train", "export", "evaluate"):
        assert stage in proc.stderr
    return path


def test_offline_eval_writes_its_fields(quick_drafter: Path) -> None:
    (quick_drafter / "offline_eval.json").unlink()
    proc = specrig("drafter-eval", str(quick_drafter), "--recipe", "cpu", "--json", "--bench-max-tokens", "32")
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(proc.stdout)
    assert r == json.loads((quick_drafter / "offline_eval.json").read_text())
    assert r["k"] == 3 and len(r["per_position"]) == 3 and r["held_out_tokens"] > 100
    assert 0 <= r["acceptance_rate"] <= 1
    assert r["per_position"][0] >= r["per_position"][1] >= r["per_position"][2]  # a chain only shortens
    assert r["mean_acceptance_length"] == pytest.approx(1 + sum(r["per_position"]))
    assert r["acceptance_rate"] == pytest.approx(sum(r["per_position"]) / 3)
    assert r["served_aux_positions"] == r["trained_aux_positions"] == [2, 15, 27]
    b = r["bench_prompts"]  # the bench's five story prompts, 32 greedy tokens each: 32 - 3 + 1 drafts per prompt
    assert b["dataset"] == "story" and b["max_tokens"] == 32 and b["prompts"] == 5 and b["held_out_tokens"] == 150
    assert b["per_position"][0] >= b["per_position"][1] >= b["per_position"][2]
    # the same drafter, data, prompts and scripts again: the written figures, not a second run
    args = ("drafter-eval", str(quick_drafter), "--recipe", "cpu", "--json", "--bench-max-tokens", "32")
    again = specrig(*args)
    assert again.returncode == 0 and json.loads(again.stdout) == r, again.stderr[-4000:]
    assert "cached (offline_eval.json holds for these inputs)" in again.stderr
    # an evaluation recorded for other scripts is made again
    edited = json.loads((quick_drafter / "offline_eval.json").read_text())
    edited["inputs"]["scripts"] = "0" * 16
    (quick_drafter / "offline_eval.json").write_text(json.dumps(edited))
    redone = specrig(*args)
    assert redone.returncode == 0 and "cached" not in redone.stderr, redone.stderr[-4000:]
    assert json.loads(redone.stdout) == r


def test_the_curve_is_trained_scored_recorded_and_drawn(quick_drafter: Path) -> None:
    """``drafter --quick --curve 16``: the quick run's stages cached, a drafter on the first 16 of
    its 32 training samples, scored offline on the same held-out prompts; curve-quick.json lists it
    with the full run's drafter, each with its steps, epochs and whether the time cap stopped it,
    and curve-quick.png draws them."""
    from specrig.drafter.export import drafters_root

    proc = specrig("drafter", "--quick", "--recipe", "cpu", "--curve", "16")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    curve = drafters_root("cpu") / "curve-quick.json"
    points = json.loads(curve.read_text())["points"]
    assert [p["samples"] for p in points] == [16, 32]
    assert Path(points[1]["drafter"]) == quick_drafter
    small = Path(points[0]["drafter"])
    assert small.name.startswith("eagle3-n16-") and (small / "model.safetensors").is_file()
    for p in points:
        assert p["steps"] > 0 and p["epochs"] > 0 and isinstance(p["capped"], bool)
        assert p["capped"] or p["epochs"] == pytest.approx(3)  # --quick's three epochs, unless the cap cut them
        assert p["offline"]["k"] == 3 and p["offline"]["held_out_tokens"] > 100
    assert points[0]["offline"]["held_out_tokens"] == points[1]["offline"]["held_out_tokens"]  # the same prompts
    assert points[0]["train_tokens"] < points[1]["train_tokens"]
    png = curve.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "drawn in" in proc.stderr


def test_the_shifted_twin_is_scored_where_it_is_served(quick_drafter: Path) -> None:
    """The pipeline scores the shifted twin on features at its served ids (recomputed by the target)."""
    shifted = quick_drafter.with_name(quick_drafter.name + "-shifted")
    r = json.loads((shifted / "offline_eval.json").read_text())
    assert r["served_aux_positions"] == [1, 14, 26] and r["trained_aux_positions"] == [2, 15, 27]
    assert r["bench_prompts"]["max_tokens"] == 64  # --quick's bench answers
    mine = json.loads((quick_drafter / "offline_eval.json").read_text())
    assert r["held_out_tokens"] == mine["held_out_tokens"]


def test_quick_drafter_is_accepted_in_a_real_bench(quick_drafter: Path, tmp_path: Path) -> None:
    """Serve exactly this drafter: a copy of the cpu recipe whose [spec.eagle3]
    names its folder (the registry might point at a longer run's drafter)."""
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    for lock in (ROOT / "recipes").glob("cpu.*.lock"):
        shutil.copy(lock, recipes / lock.name)
    text = (ROOT / "recipes" / "cpu.toml").read_text()
    assert 'model = "@eagle3-trained"\n' in text
    (recipes / "cpu.toml").write_text(text.replace('model = "@eagle3-trained"\n', f'model = "{quick_drafter}"\n', 1))
    results = tmp_path / "run"
    proc = specrig(
        "bench",
        "--recipe",
        str(recipes / "cpu.toml"),
        "--spec",
        "eagle3",
        "--no-baseline",
        "--max-tokens",
        str(MAX_TOKENS),
        "--results",
        str(results),
        timeout=1200,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    s = load_summary(results)
    cfg = next(c for c in s.configs if c.name == "eagle3")
    assert cfg.drafter == str(quick_drafter) and cfg.offline is not None  # offline figure travels with it
    runs = [m for m in s.measurements if m.config == "eagle3"]
    assert runs and all(m.spec_counters is not None for m in runs)
    drafted = sum(m.spec_counters.draft_tokens for m in runs if m.spec_counters)
    accepted = sum(m.spec_counters.accepted_tokens for m in runs if m.spec_counters)
    assert drafted > 0 and accepted > 0, f"accepted {accepted} of {drafted} draft tokens"


def test_unroll_equals_a_serving_kv_cache_drafter(quick_drafter: Path) -> None:
    """The TTT unroll the trainer optimises gives, for every draft step, the
    logits of a token-by-token KV-cache drafter (vLLM's way), in float64."""
    from specrig.core.paths import subdir
    from specrig.drafter.inenv_run import INENV

    python = subdir("envs") / "cpu-train" / "bin" / "python"  # made by `specrig drafter` (the fixture)
    script = Path(__file__).parent / "fixtures" / "drafter" / "serving_equivalence.py"
    proc = subprocess.run([str(python), str(script), str(INENV)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_reference_trainers_checkpoint_is_scored_and_served(quick_drafter: Path, tmp_path: Path) -> None:
    """``drafter --quick --reference speculators --reference-steps 0``: speculators 0.9.0's dry run
    (its untrained model, saved as a trained one is: speculators trains on CUDA only) on the quick
    run's samples (the pipeline's stages cached), exported, scored by specrig's evaluation with
    speculators' model drafting, then served by a real vLLM bench with ``--drafter PATH``: vLLM
    reads speculators' format (the EAGLE 3.1 options, specrig's vocabulary map) as it is."""
    from specrig.drafter.export import drafters_root

    proc = specrig("drafter", "--quick", "--recipe", "cpu", "--reference", "speculators", "--reference-steps", "0")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    made = [p for p in drafters_root("cpu").glob("speculators-eagle3-*") if (p / "run.json").is_file()]
    folder = max(made, key=lambda p: (p / "run.json").stat().st_mtime)  # this run's (its record is the newest)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3" and cfg["norm_before_fc"] and cfg["norm_output"]
    meta = cfg["specrig"]
    assert meta["steps"] == 0 and meta["train_samples"] == 32 and meta["trained_aux_positions"] == [2, 15, 27]
    mine = json.loads((quick_drafter / "config.json").read_text())["specrig"]
    assert meta["heldout_hidden"] == mine["heldout_hidden"]  # the same held-out prompts as specrig's drafter
    ev = json.loads((folder / "offline_eval.json").read_text())
    assert ev["served_aux_positions"] == [2, 15, 27] and ev["k"] == 3
    assert ev["held_out_tokens"] == json.loads((quick_drafter / "offline_eval.json").read_text())["held_out_tokens"]
    _served_and_drafting(folder, tmp_path / "run")


def test_specforge_trains_on_the_same_samples_and_vllm_serves_its_export(quick_drafter: Path, tmp_path: Path) -> None:
    """``drafter --quick --reference specforge``: SpecForge 0.2.0's own loop (its Triton loss stood in
    on the CPU) on the quick run's samples and vocabulary (the pipeline's stages cached), a
    100-step run timing its step, then the steps that fill specrig's training seconds; its export
    scored by specrig's evaluation on the same held-out prompts, then served by a real vLLM bench:
    vLLM loads SpecForge's format with the aux ids specrig names, and drafts from it."""
    from specrig.drafter.export import drafters_root

    proc = specrig("drafter", "--quick", "--recipe", "cpu", "--reference", "specforge")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    made = [p for p in drafters_root("cpu").glob("specforge-eagle3-*") if (p / "run.json").is_file()]
    folder = max(made, key=lambda p: (p / "run.json").stat().st_mtime)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27]
    mine = json.loads((quick_drafter / "config.json").read_text())
    assert cfg["draft_vocab_size"] == mine["draft_vocab_size"] and not cfg["norm_output"]
    meta = cfg["specrig"]
    assert meta["train_samples"] == 32 and meta["loss_kernel"].startswith("plain-torch")
    run = json.loads((folder / "run.json").read_text())
    cal, train = run["stages"][-2]["facts"], run["stages"][-1]["facts"]
    assert cal["steps_run"] == 100 and train["steps_run"] == train["steps"] == meta["steps"] >= 1
    step = calibrated_step_s(cal)  # the later half's mean step (not the median: lengths vary)
    assert step == cal["late_step_s"] > 0
    assert abs(train["steps"] * step - run["specrig"]["train_seconds"]) <= step  # equal time
    ev = json.loads((folder / "offline_eval.json").read_text())
    assert ev["served_aux_positions"] == [2, 15, 27] and ev["k"] == 3
    assert ev["held_out_tokens"] == json.loads((quick_drafter / "offline_eval.json").read_text())["held_out_tokens"]
    _served_and_drafting(folder, tmp_path / "run")


def _served_and_drafting(folder: Path, results: Path) -> None:
    """A real vLLM bench serves the reference drafter ``folder`` (``--drafter PATH``, no baseline, two
    prompts): its offline figure travels with it, it drafts, and every answer is whole."""
    proc = specrig(
        *("bench", "--recipe", "cpu", "--spec", "eagle3", "--drafter", str(folder), "--no-baseline"),
        *("--num-prompts", "2", "--max-tokens", str(MAX_TOKENS), "--results", str(results)),
        timeout=1200,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    s = load_summary(results)
    [c] = [c for c in s.configs if c.name.startswith("eagle3")]
    assert c.drafter == str(folder) and c.offline is not None
    runs = [m for m in s.measurements if m.config == c.name]
    assert runs and sum(m.spec_counters.draft_tokens for m in runs if m.spec_counters) > 0  # it drafted
    assert all(m.completion_tokens == 2 * MAX_TOKENS for m in runs)


def test_answers_streamed_sixteen_tokens_at_a_time_are_whole(tmp_path: Path) -> None:
    """The GPU recipe generates with ``--stream-interval 16`` (one event per 16 tokens, not per
    token: at 512 answers in flight the front end and the client set the pace). On a real CPU vLLM
    with that flag, the generation's own streaming client (one request at a time, so each answer
    is the server's deterministic one) records for chat and bench-shaped prompts exactly the token
    ids the same server returns unstreamed, and the stream did come 16 tokens an event."""
    import httpx

    from specrig.drafter.generate import _answer_all, generation_server, read_partial, request_for
    from specrig.drafter.prompts import DrafterPrompt
    from specrig.env.make import make_env
    from specrig.model.folder import prepare_model
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe("cpu")
    env = make_env(recipe, recipe.engine["vllm"].env)
    model = prepare_model(recipe, env)
    server = generation_server(recipe, env, model, ["--stream-interval", "16"], tmp_path / "server.log")
    plan = server.plan
    questions = ["Write a short poem about the sea.", "How do I sort a list in Python?", "Why is the sky blue?"]
    prompts = [DrafterPrompt(f"q{i}-{f}", "train", f, q) for i, q in enumerate(questions) for f in ("chat", "bench")]
    n = 40
    with server:
        server.start()
        server.wait_ready()
        _answer_all(plan.base_url, model.served_name, prompts, n, 1, tmp_path / "answers.jsonl", None, n)
        streamed = read_partial(tmp_path / "answers.jsonl")
        for p in prompts:
            path, body = request_for(p, model.served_name, n, n)
            whole = httpx.post(plan.base_url + path, json=body, timeout=300).json()["choices"][0]
            assert streamed[p.id]["output_ids"] == whole["token_ids"], p.id
        path, body = request_for(prompts[1], model.served_name, n, n)  # bench-shaped: all n tokens, EOS ignored
        sizes = []
        with httpx.stream("POST", plan.base_url + path, json=body | {"stream": True}, timeout=300) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    ids = json.loads(line[6:])["choices"][0].get("token_ids") or []
                    if ids:
                        sizes.append(len(ids))
    assert sum(sizes) == n and max(sizes) == 16 and len(sizes) <= 1 + -(-n // 16) + 1, sizes
    assert [len(streamed[p.id]["output_ids"]) for p in prompts if p.format == "bench"] == [n] * 3
