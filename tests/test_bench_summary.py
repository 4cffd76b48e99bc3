"""From pytest-benchmark's JSON to answers: pairing per load with intervals,
the lossless check, the crossover line, per-load recommendations, thresholds,
counter ownership, goodput; then the typed report (tables, markdown, PNGs) and
`specrig report` side by side. Synthetic measurements with known answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specrig.core.counters import SpecCounters
from specrig.host.machine import Host
from specrig.lab.plan import BenchPlan, ConfigPlan, Workload
from specrig.lab.results import Latency, LoadPoint, Measurement, RequestRecord, Slo, load_summary
from specrig.lab.roofline import roofline_inputs
from specrig.lab.summary import summary_from_benchmark_json
from specrig.model.drafters import drafter_files
from specrig.model.folder import drafter_info
from specrig.recipe.schema import Recipe, load_recipe
from specrig.report.render import latency_rows, notes, throughput_rows, write_report
from specrig.specdec.stats import Distribution, mean_interval, percentile, ratio_interval

PROMPTS = ["p0", "p1", "p2", "p3"]
POINTS = [LoadPoint(concurrency=c) for c in (1, 4, 16)]


def _m(
    config: str,
    point: LoadPoint,
    repeat: int,
    rate: float,
    *,
    text: str = "same text",
    accepted: float = 0,
    server_tokens: float | None = 128,
) -> Measurement:
    reqs = [
        RequestRecord(
            prompt_id=p,
            ttft_ms=20.0 + i,
            tpot_ms=1000 / (rate + i),
            e2e_ms=1000 * 32 / rate,
            decode_tok_s=rate + i,
            completion_tokens=32,
            prompt_tokens=10,
            itl_ms=[1000 / rate] * 31,
            text=text if p == "p2" else "same text",
            accepted_tokens=accepted / 4 if accepted else None,
            draft_tokens=24.0 if accepted else None,
        )
        for i, p in enumerate(PROMPTS)
    ]
    counters = None
    if config != "baseline":
        counters = SpecCounters(
            drafts=40,
            draft_tokens=120,
            accepted_tokens=accepted,
            k=3,
            accepted_per_position=(accepted / 2, accepted / 3, accepted / 6),
        )
    lat = Latency(
        ttft_ms=Distribution.of([r.ttft_ms for r in reqs]),
        tpot_ms=Distribution.of([r.tpot_ms for r in reqs]),
        itl_ms=Distribution.of([x for r in reqs for x in r.itl_ms]),
        e2e_ms=Distribution.of([r.e2e_ms for r in reqs]),
    )
    slo = Slo(ttft_ms=22, tpot_ms=1000)
    from specrig.lab.results import Goodput

    good = [r for r in reqs if slo.met(r)]
    return Measurement(
        config=config,
        point=point,
        repeat=repeat,
        requests=reqs,
        wall_s=10.0,
        completion_tokens=128,
        output_tok_s=12.8 * rate / 10,
        decode_tok_s=Distribution.of([r.decode_tok_s for r in reqs]),
        latency=lat,
        server_generation_tokens=server_tokens,
        counters_own=None if server_tokens is None else server_tokens == 128,
        spec_counters=counters,
        goodput=Goodput(
            slo=slo, met=len(good), total=4, requests_per_s=len(good) / 10, tokens_per_s=32 * len(good) / 10
        ),
        client_cpu_share=0.05,
        rounds=4,
    )


SPEEDUP = {1: (1.3, 1.35), 4: (1.2, 1.25), 16: (0.8, 0.78)}  # per load: repeat 0, repeat 1


def _benchmark_json() -> dict:
    benches = []
    for rep in (0, 1):
        for p in POINTS:
            base = _m("baseline", p, rep, 10.0)
            spec = _m(
                "ngram",
                p,
                rep,
                10.0 * SPEEDUP[p.concurrency][rep],
                accepted=60.0,  # type: ignore[index]
                text="same text" if p.concurrency != 4 else "same tExt",
                server_tokens=128 if p.concurrency != 16 else 140,
            )
            benches.append({"extra_info": {"specrig": base.model_dump(mode="json")}})
            benches.append({"extra_info": {"specrig": spec.model_dump(mode="json"), "specrig_baselines": []}})
    return {"benchmarks": benches}


RECIPE = """
[recipe]
name = "mini"
exclude_newer = "2026-11-29T00:00:00Z"
[host]
python = "3.11"
[torch]
version = "2.13.0"
variant = "cpu"
[env.main]
requirements = ["six==1.16.0"]
[model]
served_name = "smollm2"
path = "/nonexistent"
[engine.vllm]
env = "main"
[bench]
min_decode_tok_s = 4.0
tolerance = 0.1
[bench.roofline]
bytes_per_token_gb = 0.27
memory_bandwidth_gb_s = 10.0
[spec.ngram]
method = "ngram"
num_speculative_tokens = 4
informational = true
"""


def _recipe(tmp_path: Path) -> Recipe:
    p = tmp_path / "mini.toml"
    if not p.exists():
        p.write_text(RECIPE)
    return load_recipe(p)


def _plan(tmp_path: Path) -> BenchPlan:
    recipe = _recipe(tmp_path)
    return BenchPlan(
        startup_timeout_s=60.0,
        recipe="mini",
        recipe_path=str(recipe.path),
        engine="vllm",
        results_dir=str(tmp_path),
        configs=[
            ConfigPlan(name="baseline"),
            ConfigPlan(name="ngram", spec=recipe.spec["ngram"].model_copy(update={"num_speculative_tokens": 3})),
        ],
        workload=Workload(
            dataset="sharegpt",
            num_prompts=4,
            max_tokens=32,
            points=POINTS,
            repeat=2,
            slo=Slo(ttft_ms=22, tpot_ms=1000),
            stall_timeout_s=60.0,
            first_token_timeout_s=60.0,
        ),
        served_name="smollm2",
        model_source="test",
        host={"cpus": 2, "gpus": []},
        roofline=roofline_inputs(recipe, None, None, Host(cpus=2, memory_gib=24.0, available_memory_gib=20.0)),
    )


def test_stats_percentiles_and_interval() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([1, 2, 3, 4], 90) == pytest.approx(3.7)
    d = Distribution.of(range(1, 101))
    assert (d.n, d.p50, d.p99, d.min, d.max) == (100, 50.5, pytest.approx(99.01), 1, 100)
    iv = mean_interval([1.3, 1.35])
    assert iv.mean == pytest.approx(1.325) and iv.low == pytest.approx(1.325 - 12.706 * 0.0353553 / 2**0.5, rel=1e-4)
    assert mean_interval([2.0]).low == mean_interval([2.0]).high == 2.0
    r = ratio_interval([0.5, 2.0, 1.0])  # geometric: 2x and 0.5x cancel; the interval stays above zero
    assert r.mean == pytest.approx(1.0) and 0 < r.low < 1 < r.high and r.low * r.high == pytest.approx(1.0)


def test_slo_parsing() -> None:
    assert Slo.parse("ttft_ms=500,tpot_ms=50") == Slo(ttft_ms=500, tpot_ms=50)
    from specrig.core.errors import ConfigError

    with pytest.raises(ConfigError, match="cannot read 'ttft=5'"):
        Slo.parse("ttft=5")


def test_summary_pairs_each_load_and_finds_the_crossover(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    s = summary_from_benchmark_json(_benchmark_json(), plan, _recipe(tmp_path))
    assert len(s.measurements) == 12 and len(s.pairings) == 3
    by = {p.point.concurrency: p for p in s.pairings}
    # per-stream decode rates are rate + i over four prompts, so ratios are close to, not exactly, the factors
    assert by[1].speedup.n == 2 and 1.25 < by[1].speedup.mean < 1.35 and by[1].speedup.low < by[1].speedup.mean
    assert by[16].speedup.mean < 0.82
    assert s.crossover == [
        f"ngram pays up to concurrency 4 ({by[4].speedup.mean:.2f}x), loses at concurrency 16 ({by[16].speedup.mean:.2f}x)"
    ]
    assert s.recommendations[0].startswith("concurrency 1: use ngram (k=3)")
    assert s.recommendations[2].startswith("concurrency 16: no speculation")
    # acceptance from the summed counters of both repeats: 120 accepted of 240 drafted
    assert by[1].acceptance_rate == 0.5 and by[1].mean_acceptance_length == 1 + 120 / 80
    assert by[1].per_position == pytest.approx([0.75, 0.5, 0.25])
    # lossless: identical at c1, one divergence at c4 at the changed character
    assert by[1].lossless.describe() == "identical 4/4"
    d = by[4].lossless.divergences[0]
    assert (by[4].lossless.identical, d.prompt_id, d.position, d.unit) == (3, "p2", 6, "char")
    assert "first divergence: p2 at char 6" in by[4].lossless.describe()
    # other traffic at c16: the engine counted 140 tokens, the client received 128
    assert len(s.counter_warnings) == 2 and "other traffic" in s.counter_warnings[0]
    # the recipe's decode floor (4 tok/s, 10% tolerance) judged on the typed baseline
    base = s.config("baseline")
    assert [(t.name, t.passed) for t in base.thresholds] == [("decode_tok_s", True)]
    # roofline from the recipe's declared figures: 10 GB/s over 0.27 GB per token, at every load point
    assert [r.batch for r in s.rooflines] == [1, 4, 16] and s.roofline == s.rooflines[0]
    c1 = [m.decode_tok_s.mean for m in s.measurements if m.config == "baseline" and m.point.label == "c1"]
    assert s.roofline.bound_tok_s == pytest.approx(10 / 0.27)
    assert s.roofline.achieved_tok_s == pytest.approx(sum(c1) / len(c1))
    assert "recipe [bench.roofline]" in s.roofline.source and s.roofline.reading


def test_report_tables_markdown_and_plots(tmp_path: Path) -> None:
    s = summary_from_benchmark_json(_benchmark_json(), _plan(tmp_path), _recipe(tmp_path))
    write_report(tmp_path, s)
    rows = throughput_rows(s)
    assert [r[:2] for r in rows] == [
        ["baseline", "c1"],
        ["baseline", "c4"],
        ["baseline", "c16"],
        ["ngram (k=3)", "c1"],
        ["ngram (k=3)", "c4"],
        ["ngram (k=3)", "c16"],
    ]
    assert rows[3][5] == "50.0%" and rows[3][9] == "4/4" and "[" in rows[3][8]  # interval shown
    assert rows[0][10] == "75% (0.30 req/s)"  # TTFT 20..23 ms: three of four meet ttft <= 22 ms
    lat = latency_rows(s)
    assert lat[0][2] == "8" and lat[0][3] == "22/23/23"  # TTFT 20,20,21,21,..23: p50 21.5, p90 23, p99 23
    text = "\n".join(notes(s))
    assert "crossover: ngram pays up to concurrency 4" in text and "identical 4/4" in text
    md = (tmp_path / "report.md").read_text()
    assert "Acceptance per prompt, ngram @ concurrency 1" in md and "| p0 | 15 / 24 | 62.5% |" in md
    assert "Acceptance per position, ngram @ concurrency 1: 75.0% | 50.0% | 25.0%" in md
    for png in ("throughput", "acceptance", "acceptance_per_prompt", "speedup_vs_load"):
        assert (tmp_path / f"{png}.png").stat().st_size > 5000, png
    assert load_summary(tmp_path) == s  # summary.json round-trips into the same typed object


def test_report_command_side_by_side(tmp_path: Path) -> None:
    runs = []
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        write_report(d, summary_from_benchmark_json(_benchmark_json(), _plan(d), _recipe(tmp_path)))
        runs.append(str(d))
    out = tmp_path / "cmp"
    proc = subprocess.run(
        [sys.executable, "-m", "specrig.cli", "report", *runs, "--out", str(out)],
        capture_output=True,
        text=True,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "a vllm: ngram" in proc.stdout and (out / "compare.md").is_file()
    assert "crossover: ngram pays up to concurrency 4" in (out / "compare.md").read_text()
    bad = tmp_path / "old"
    bad.mkdir()
    (bad / "summary.json").write_text(json.dumps({"configs": []}))
    proc = subprocess.run([sys.executable, "-m", "specrig.cli", "report", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2 and "not a summary this specrig can read" in proc.stderr


def test_offline_acceptance_beside_online(tmp_path: Path) -> None:
    """A drafter folder with offline_eval.json: the offline figure at the online k, and the diagnosis's side."""
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text("{}")  # the files the figures were computed for
    (drafter / "offline_eval.json").write_text(
        json.dumps(
            {
                "acceptance_rate": 0.5,
                "per_position": [0.9, 0.8, 0.7, 0.6, 0.5],
                "mean_acceptance_length": 4.5,
                "k": 5,
                "held_out_tokens": 1000,
                "inputs": {"drafter_files": drafter_files(drafter)},  # computed for the folder as it is
            }
        )
    )
    plan = _plan(tmp_path)
    served = {"drafter": str(drafter), "drafter_info": drafter_info(str(drafter))}  # as the plan records it
    cfgs = [plan.configs[0], plan.configs[1].model_copy(update=served)]
    s = summary_from_benchmark_json(_benchmark_json(), plan.model_copy(update={"configs": cfgs}), _recipe(tmp_path))
    assert s.config("ngram").offline.rate_at(3) == pytest.approx(0.8)  # type: ignore[union-attr]
    assert throughput_rows(s)[3][6] == "80.0%"
    # online 50% against offline 80% at k=3, over 240 drafted tokens: the serving side is blamed
    assert "serving side is wrong" in s.pairings[0].diagnosis


def test_offline_on_the_bench_prompts_is_the_figure_compared(tmp_path: Path) -> None:
    """When offline_eval.json also scored the bench's own prompts (drafter-eval's bench_prompts)
    for the workload's dataset, that figure stands beside the online one."""
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text("{}")  # the files the figures were computed for
    held = {"acceptance_rate": 0.8, "per_position": [0.9, 0.8, 0.7], "mean_acceptance_length": 3.4, "k": 3}
    bench = {"dataset": "story", "max_tokens": 512, "acceptance_rate": 0.5, "per_position": [0.6, 0.5, 0.4], "k": 3}
    bound = {"inputs": {"drafter_files": drafter_files(drafter)}}
    (drafter / "offline_eval.json").write_text(json.dumps(held | {"bench_prompts": bench} | bound))
    plan = _plan(tmp_path)
    served = {"drafter": str(drafter), "drafter_info": drafter_info(str(drafter))}  # as the plan records it
    cfgs = [plan.configs[0], plan.configs[1].model_copy(update=served)]
    story = plan.workload.model_copy(update={"dataset": "story"})
    s = summary_from_benchmark_json(
        _benchmark_json(), plan.model_copy(update={"configs": cfgs, "workload": story}), _recipe(tmp_path)
    )
    off = s.config("ngram").offline
    assert off is not None and off.matched and off.workload == "bench prompts (story x 512)"
    assert off.rate_at(3) == pytest.approx(0.5) and throughput_rows(s)[3][6] == "50.0%"
    assert "on these prompts" in s.pairings[0].diagnosis  # online 50% matches: serving is faithful
    s = summary_from_benchmark_json(_benchmark_json(), plan.model_copy(update={"configs": cfgs}), _recipe(tmp_path))
    assert not s.config("ngram").offline.matched  # type: ignore[union-attr]  # another workload: held-out figure


def test_a_failed_test_reaches_the_summary_as_a_typed_failure(tmp_path: Path) -> None:
    """What the suite records for a test that ended with a specrig error (a dead engine)
    becomes a typed failure in the summary and a line of the report, not a validation error."""
    from specrig.report.render import notes

    failure = {
        "test": "test_decode[r0-baseline-c1]",
        "type": "EngineError",
        "message": "the server lost its engine during the benchmark",
        "hint": "full log: logs/server-baseline-r0.log",
    }
    s = summary_from_benchmark_json(_benchmark_json(), _plan(tmp_path), _recipe(tmp_path), errors=[failure])
    assert s.errors[0].type == "EngineError" and s.errors[0].hint == failure["hint"]
    assert "error: test_decode[r0-baseline-c1]: the server lost its engine during the benchmark" in notes(s)
    again = type(s).model_validate_json(s.model_dump_json())
    assert again.errors == s.errors


def _pairing(config: str, mean: float, low: float, high: float, n: int):
    from specrig.lab.results import Pairing
    from specrig.specdec.stats import Interval

    return Pairing(
        config=config,
        point=LoadPoint(concurrency=1),
        k=3,
        speedup=Interval(mean, low, high, n),
        throughput_ratio=None,
        acceptance_rate=None,
        mean_acceptance_length=None,
        per_position=None,
        lossless=None,
        diagnosis="",
    )


def test_a_winner_is_named_only_when_the_intervals_separate() -> None:
    from specrig.lab.summary import recommendations

    # the CPU run that "recommended" the shifted twin (1.34x) over the drafter (1.19x): overlapping intervals
    both = recommendations([_pairing("eagle3-shifted", 1.34, 1.05, 1.63, 3), _pairing("eagle3", 1.19, 1.0, 1.38, 3)])
    assert "are indistinguishable" in both[0] and "repeats would tell them apart" in both[0]
    one = recommendations([_pairing("eagle3-shifted", 1.34, 1.34, 1.34, 1), _pairing("eagle3", 1.19, 1.19, 1.19, 1)])
    assert "one repeat gives no interval" in one[0] and "--repeat 3" in one[0]
    clear = recommendations([_pairing("ngram", 1.40, 1.30, 1.50, 3), _pairing("eagle3", 1.10, 1.02, 1.18, 3)])
    assert clear[0].startswith("concurrency 1: use ngram (k=3)")
    maybe = recommendations([_pairing("ngram", 1.05, 0.95, 1.15, 3)])
    assert "not distinguishable from no speculation" in maybe[0]
    assert recommendations([_pairing("ngram", 0.7, 0.7, 0.7, 1)])[0].startswith("concurrency 1: no speculation")


def test_a_drafter_variant_keeps_its_specs_gates(tmp_path: Path) -> None:
    """`--drafter @curve --k 3` makes `gated-n1000-k3`: its identity (spec gated, drafter n1000, k 3)
    travels from the plan to the summary, so the recipe's gates for [spec.gated] are judged on it
    (a name parsed back would find no `gated-n1000` in the recipe and judge nothing)."""
    from specrig.lab.identity import ConfigId
    from specrig.lab.summary import gate_problems

    p = tmp_path / "mini.toml"
    p.write_text(RECIPE + '[spec.gated]\nmethod = "ngram"\nnum_speculative_tokens = 4\nmin_acceptance_rate = 0.9\n')
    recipe = load_recipe(p)
    ident = ConfigId(spec="gated", drafter="n1000", k=3, engine="vllm")
    plan = _plan(tmp_path).model_copy(
        update={
            "configs": [
                ConfigPlan(name="baseline"),
                ConfigPlan(id=ident, spec=recipe.spec["gated"].model_copy(update={"num_speculative_tokens": 3})),
            ]
        }
    )
    assert plan.configs[1].name == "gated-n1000-k3"
    benches = [
        {
            "extra_info": {
                "specrig": _m(name, POINTS[0], 0, rate, accepted=60.0 if name != "baseline" else 0)
                .model_copy(update={"id": plan.named(name).id})
                .model_dump(mode="json")
            }
        }
        for name, rate in (("baseline", 10.0), ("gated-n1000-k3", 13.0))
    ]
    s = summary_from_benchmark_json({"benchmarks": benches}, plan, recipe)
    cfg = s.config("gated-n1000-k3")
    assert cfg.id == ident
    assert [(t.name, t.threshold, t.passed) for t in cfg.thresholds] == [("acceptance_rate", 0.9, False)]
    problems = gate_problems(s)
    assert len(problems) == 1 and problems[0].startswith("gated-n1000-k3: acceptance_rate")
    # the summary read back keeps the identity
    write_report(tmp_path, s)
    assert load_summary(tmp_path).config("gated-n1000-k3").id == ident


def test_the_summary_keys_on_identities_and_reads_old_files_by_name(tmp_path: Path) -> None:
    """Measurements and pairings carry their configuration's identity (the key); a summary written
    before they did takes each one's identity from the configuration of its name, never from
    parsing the name (a --drafter/--k variant's name is not its recipe entry)."""
    from specrig.lab.identity import ConfigId
    from specrig.lab.results import RunSummary

    p = tmp_path / "mini.toml"
    p.write_text(RECIPE + '[spec.gated]\nmethod = "ngram"\nnum_speculative_tokens = 4\n')
    recipe = load_recipe(p)
    ident = ConfigId(spec="gated", drafter="n1000", k=3, engine="vllm")
    base = ConfigId(engine="vllm")
    plan = _plan(tmp_path).model_copy(
        update={"configs": [ConfigPlan(id=base), ConfigPlan(id=ident, spec=recipe.spec["gated"])]}
    )
    benches = [
        {"extra_info": {"specrig": _m(c.name, POINTS[0], 0, rate).model_copy(update={"id": c.id}).model_dump()}}
        for c, rate in zip(plan.configs, (10.0, 13.0), strict=True)
    ]
    s = summary_from_benchmark_json({"benchmarks": benches}, plan, recipe)
    assert [m.id for m in s.measurements] == [base, ident] and [p.id for p in s.pairings] == [ident]
    assert s.baseline is not None and s.baseline.id == base and s.pairings[0].speedup is not None
    # the same file as written before identities: none on its measurements and pairings
    old = json.loads(s.model_dump_json())
    for key in ("measurements", "pairings"):
        old[key] = [{k: v for k, v in r.items() if k != "id"} for r in old[key]]
    again = RunSummary.model_validate_json(json.dumps(old))
    assert again == s
    # older still, a configuration without its identity: the recipe's name (the baseline, a [spec.NAME])
    old["configs"][0].pop("id")
    assert RunSummary.model_validate_json(json.dumps(old)).configs[0].id == ConfigId()


def test_every_captured_summary_keys_its_records_to_its_configurations() -> None:
    """The studies' GPU captures (written with names only on their measurements) load with each
    measurement and pairing keyed to a configuration of the same name."""
    import gzip

    from specrig.lab.results import RunSummary

    captures = sorted(Path(__file__).parent.parent.glob("studies/*/capture/*summary.json.gz"))
    assert captures
    for path in captures:
        s = RunSummary.model_validate_json(gzip.decompress(path.read_bytes()))
        by_id = {c.id: c.name for c in s.configs}
        assert all(by_id[r.id] == r.config for r in [*s.measurements, *s.pairings]), path
        assert sum(c.id.is_baseline for c in s.configs) <= 1
