"""Kimi-K2.5's architecture cut to 4 and 8 layers, replayed from REAL captures of one H200 (issue 25,
2026-12-03): the summaries ``specrig bench`` wrote there through the kit (the steps of
studies/2026-12-03-kimi-layers/study.toml) for ``--model kimi-4l --spec eagle3-random --k 1,2,3``
and ``--model kimi-8l --spec eagle3-random --k 3``, both at 1, 4 and 16 streams and ``--profile``d,
vLLM 0.26.0 (MLA, 384 INT4 experts on Marlin, dummy weights). Paths of that host are rewritten
($SPECRIG_CACHE_DIR, RUN/, ~/); nothing else is changed.

What CI checks without the GPU: today's code reads those runs, ``specrig project`` turns them into
the table the README quotes, and the recipe's shape, memory and roofline code agree with what the
engine did there."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from replay_support import cells, page_tables
from specrig.cli import main
from specrig.lab.findings import RooflineInputs
from specrig.lab.results import RunSummary
from specrig.lab.roofline import rooflines
from specrig.model.weights import weight_read_from_config
from specrig.recipe.schema import load_recipe
from specrig.report.projection import STORY, project

FIXTURES = Path(__file__).resolve().parent / "capture"


def captured(name: str) -> RunSummary:
    return RunSummary.model_validate_json(gzip.decompress((FIXTURES / f"{name}.summary.json.gz").read_bytes()))


@pytest.fixture(scope="module")
def runs() -> dict[str, RunSummary]:
    return {n: captured(n) for n in ("kimi-4l", "kimi-8l")}


@pytest.fixture
def run_dirs(tmp_path: Path) -> list[Path]:
    out = []
    for name in ("kimi-4l", "kimi-8l"):
        d = tmp_path / name
        d.mkdir()
        (d / "summary.json").write_bytes(gzip.decompress((FIXTURES / f"{name}.summary.json.gz").read_bytes()))
        out.append(d)
    return out


def test_the_shape_served_with_int4_experts_and_eagle3_unpatched(runs):
    """vLLM 0.26.0 served the DeepSeek-V3 class with the quantized experts and loaded EAGLE-3 on it with
    no patch: every configuration measured at every load, every token counted by the engine itself."""
    for name, layers, ks in (("kimi-4l", 4, {1, 2, 3}), ("kimi-8l", 8, {3})):
        s = runs[name]
        assert s.engine == "vllm" and s.host.gpus[0].name == "NVIDIA H200"
        assert f"DeepseekV3ForCausalLM of the declared shape ({layers} layers" in s.model
        assert "routed experts INT4" in s.model and "DUMMY WEIGHTS" in s.model
        spec = [c for c in s.configs if c.is_spec]
        assert {c.k for c in spec} == ks and all(c.method == "eagle3" for c in spec)
        points = {(m.config, m.point.concurrency) for m in s.measurements}
        assert points == {(c.name, n) for c in s.configs for n in (1, 4, 16)}
        assert all(m.counters_own for m in s.measurements)
        # a random head accepts nothing, so every output is the baseline's
        assert all(p.lossless and p.lossless.identical == p.lossless.compared == 16 for p in s.pairings)
    # the random head's three aux layers: distinct on a 4-layer target (vLLM's default would repeat one)
    assert runs["kimi-4l"].config("eagle3-random-k1").drafter_info.aux_layers == [1, 2, 3]
    assert runs["kimi-8l"].config("eagle3-random-k3").drafter_info.aux_layers == [2, 4, 5]


def test_the_recipe_shapes_are_what_was_served(runs):
    recipe = load_recipe("hopper-sm90")
    for name in ("kimi-4l", "kimi-8l"):
        spec = recipe.model_named(name)
        cfg = spec.shape.config_json()
        q = cfg["quantization_config"]
        assert q["quant_method"] == "compressed-tensors" and q["format"] == "pack-quantized"
        w = q["config_groups"]["group_0"]["weights"]
        assert (w["num_bits"], w["group_size"], w["symmetric"]) == (4, 32, True)
        assert cfg["n_routed_experts"] == 384 and cfg["num_experts_per_tok"] == 8 and cfg["kv_lora_rank"] == 512
        assert runs[name].served_name == spec.served_name
    held = {n: weight_read_from_config(recipe.model_named(n).shape.config_json()) for n in ("kimi-4l", "kimi-8l")}
    assert 31 < held["kimi-4l"].total_bytes / 1e9 < 33 and 66 < held["kimi-8l"].total_bytes / 1e9 < 68


def test_the_batch_roofline_counts_the_experts_a_batch_picks(runs):
    """At one stream the 8-layer shape reads 6.65 GB a token and reached 57% of the bound; with uniform
    routing 16 streams pick ~110 of 384 experts a layer (22.3 GB a step). The capture ran faster than
    that bound: its dummy router sends every token to the same experts, and the roofline says so."""
    shape = load_recipe("hopper-sm90").model_named("kimi-8l").shape
    w = weight_read_from_config(shape.config_json())
    inputs = RooflineInputs(
        weight_gb_per_token=w.weight_gb,
        bandwidth_gb_s=4800.0,
        expert_gb=w.expert_bytes / 1e9,
        routed=w.routed,
        per_tok=w.per_tok,
    )
    assert inputs.step_gb(1) == pytest.approx(6.65, abs=0.01)
    assert 109 < w.distinct_experts(16) < 111 and inputs.step_gb(16) == pytest.approx(22.34, abs=0.05)
    bounds = {
        r.batch: r for r in rooflines(inputs, [m for m in runs["kimi-8l"].measurements if m.config == "baseline"])
    }
    assert set(bounds) == {1, 4, 16}
    assert 0.55 < bounds[1].fraction < 0.6 and "partly bandwidth-bound" in bounds[1].reading
    assert bounds[16].fraction > 1 and "same few" in bounds[16].reading


def test_the_projection_of_the_captures(runs):
    """The table the README quotes: 0.092 ms a layer, 7.29 ms for 61 layers on one GPU, an EAGLE-3 step
    1.34-1.73x a plain one at k = 1..5; on the story's host 1.44x at k=5 against the 2.64x it measured."""
    p = project([(4, runs["kimi-4l"]), (8, runs["kimi-8l"])], target_layers=STORY.layers)
    assert p.per_layer_ms == pytest.approx(0.092, abs=0.001) and p.plain_ms == pytest.approx(7.29, abs=0.01)
    assert p.spec_layers == 4 and [r.measured for r in p.rows] == [True, True, True, False, False]
    costs = [round(r.cost, 2) for r in p.rows]
    assert costs == [1.34, 1.45, 1.54, 1.63, 1.73]
    assert all(r.verify_extra == 0 for r in p.rows)  # the V2 runner's trace cannot split the drafter out
    assert [round(r.host_cost, 2) for r in p.rows][-1] == 1.44 and p.host_measured_cost == pytest.approx(2.64, abs=0.01)
    assert p.rows[-1].host_predicted_speedup == pytest.approx(1.22, abs=0.01) and p.host_a == pytest.approx(
        0.432, abs=0.001
    )
    # the 8-layer EAGLE-3 run, not fitted: its overhead did not grow with the target's layers
    (check,) = p.checks
    assert "k=3 at 8 layers: measured 5.80 ms" in check and "3.38 ms against 3.90 ms" in check


def test_project_command_writes_its_table(run_dirs, tmp_path, capsys):
    out = tmp_path / "proj"
    assert main(["project", *map(str, run_dirs), "--out", str(out)]) == 0
    text = (out / "projection.md").read_text()
    assert "**0.092 ms per layer**" in text and "| 5 | extrapolated |" in text and "**2.64x**" in text
    data = json.loads((out / "projection.json").read_text())
    assert data["target_layers"] == 61 and data["host"]["comm_share"] == 0.515
    assert "61 layers on paper" in capsys.readouterr().out


def test_project_refuses_what_cannot_be_projected(run_dirs, tmp_path, capsys):
    """One layer count gives no per-layer time; a bad --k is named. Errors, not tracebacks."""
    assert main(["project", str(run_dirs[0]), "--out", str(tmp_path / "a")]) != 0
    assert "two layer counts" in capsys.readouterr().err.replace("\n", " ")
    assert main(["project", *map(str, run_dirs), "--k", "0,x", "--out", str(tmp_path / "b")]) != 0
    assert "--k" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_recheck_with_the_heads_own_weights():
    """The same lease's last minutes, a fresh H200: the random head loaded from its own file
    (draft_load_config), baseline and k=1 at one stream. A speculative step cost 2.23x a plain one,
    as with the target's output head borrowed: the overhead is the engine's, not the head's."""
    s = captured("kimi-4l-own-head")
    spec = s.config("eagle3-random-k1")
    cfg = json.loads(spec.server_argv[spec.server_argv.index("--speculative-config") + 1])
    assert cfg["draft_load_config"] == {"load_format": "auto"}
    (pair,) = s.pairings
    borrowed = next(
        p for p in captured("kimi-4l").pairings if p.config == "eagle3-random-k1" and p.point.concurrency == 1
    )
    assert pair.step_cost == pytest.approx(2.23, abs=0.01) and borrowed.step_cost == pytest.approx(2.23, abs=0.01)
    from specrig.report.projection import step_ms

    assert step_ms(s, "baseline", 1) == pytest.approx(1.71, abs=0.01)
    assert step_ms(s, "eagle3-random-k1", 1) - step_ms(s, "baseline", 1) == pytest.approx(2.11, abs=0.01)


def test_the_results_page_shows_the_projection() -> None:
    """The study's table as the results page draws it: 0.092 ms a layer, 7.29 ms at 61 layers on one
    GPU, an EAGLE-3 step 1.34-1.73x a plain one at k = 1..5; on the story's host 1.44x at k=5 against
    the 2.64x measured there."""
    (lines,) = page_tables(FIXTURES.parent)
    assert "0.092 ms a layer" in lines[0] and "7.29 ms at 61 layers" in lines[0]
    assert [r[5] for r in cells(lines[2:])] == ["1.34x", "1.45x", "1.54x", "1.63x", "1.73x"]
    host = next(i for i, line in enumerate(lines) if line.startswith("On the story's host"))
    assert "Measured there at k=5: 0.66x, a speculative step 2.64x a plain one." in lines[host]
    assert cells(lines[host + 2 :])[-1][:3] == ["5", "17.41", "1.44x"]
