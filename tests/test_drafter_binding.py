"""An offline evaluation holds for the bytes it scored only. A drafter is exported the
way `specrig drafter` exports it (safetensors weights with a real vocabulary map,
d2t/t2d), evaluated (offline_eval.json with the hashes of the files it scored; the
scoring script itself is stood in for: it needs the trained pipeline's hidden
states), then copied and its d2t permuted: the copy's evaluation is stale, the
diagnosis blames the drafter's vocabulary map instead of serving, and
`specrig drafter-check` names it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from safetensors_support import TARGET, drafter_tensors, int64s, read_tensors, write_safetensors
from specrig.cli import main as specrig_main
from specrig.core.counters import SpecCounters
from specrig.core.errors import ConfigError
from specrig.drafter import evaluate
from specrig.drafter.export import drafter_config, write_drafter
from specrig.env.make import Env
from specrig.lab.results import ConfigResult
from specrig.model.drafters import vocab_map_problem
from specrig.model.entry import tensor_bytes
from specrig.model.folder import drafter_info, for_engine
from specrig.model.offline import DrafterInfo, OfflineEval, offline_eval_status
from specrig.specdec.theory import compute, diagnose

OFFLINE = {
    "acceptance_rate": 0.22,
    "per_position": [0.4, 0.2, 0.06],
    "mean_acceptance_length": 1.66,
    "k": 3,
    "held_out_tokens": 500,
    "held_out_samples": 20,
    "step_accuracy": [0.4, 0.3, 0.2],
    "served_aux_positions": [2, 15, 27],
}


@pytest.fixture
def trained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An exported drafter with an offline evaluation written by evaluate_drafter."""
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECRIG_MODELS_DIR", raising=False)
    target, heldout = tmp_path / "target", tmp_path / "heldout"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(TARGET))
    heldout.mkdir()
    (heldout / "shard-0.pt").write_bytes(b"hidden states")
    weights = write_safetensors(tmp_path / "w.safetensors", drafter_tensors(hidden=8, vocab=64, draft_vocab=16))
    facts = {"pipeline_key": "k", "target_path": str(target), "heldout_hidden": str(heldout), "ttt_steps": 3}
    cfg = drafter_config(TARGET, aux=[2, 15, 27], draft_vocab=16, facts=facts)
    drafter = write_drafter(tmp_path / "drafters" / "eagle3-test", weights, cfg)

    def scored(env: Env, script: str, *args: str, what: str) -> None:  # eval_eagle3.py's answer
        assert script == "eval_eagle3.py" and Path(args[1]) == drafter
        Path(args[3]).write_text(json.dumps(OFFLINE))

    monkeypatch.setattr(evaluate, "run_inenv", scored)
    evaluate.evaluate_drafter(Env(tmp_path / "env", "cpu", "vllm", "digest"), drafter)
    return drafter


def permute_d2t(folder: Path) -> None:
    """Reverse the vocabulary map's offsets in the weights file (same size, other bytes)."""
    weights = folder / "model.safetensors"
    tensors = read_tensors(weights)
    dtype, shape, data = tensors["d2t"]
    offsets = [int.from_bytes(data[i : i + 8], "little", signed=True) for i in range(0, len(data), 8)]
    tensors["d2t"] = (dtype, shape, int64s(offsets[::-1]))
    weights.unlink()  # a new file: the original's hard links keep their bytes
    write_safetensors(weights, tensors)


def stats_at(acceptance: float):
    drafted = 600
    accepted = round(acceptance * drafted)
    counters = SpecCounters(200, drafted, accepted, 3, (accepted, 0, 0), source="test")
    return compute(counters, tpot_spec_s=0.0139, tpot_base_s=0.01, decode_tok_s_spec=72.0, decode_tok_s_base=100.0)


def test_the_evaluation_records_what_it_scored(trained: Path) -> None:
    found, _ = offline_eval_status(trained)
    assert found is not None and found.acceptance_rate == pytest.approx(0.22)
    files = found.inputs["drafter_files"]
    assert set(files) == {"model.safetensors", "config.json"}
    assert found.inputs["heldout_listing_sha256"] and found.inputs["target_config_sha256"]
    info = drafter_info(str(trained))
    assert isinstance(info, DrafterInfo) and isinstance(info.offline_eval, OfflineEval)
    assert info.offline_eval == found and info.offline_eval.acceptance_rate == pytest.approx(0.22)
    assert info.offline_eval_unbound is None and info.drafter_fault is None
    assert info.aux_layers == [2, 15, 27] and info.trained is True and info.served_shift == 0
    cfg = json.loads((trained / "config.json").read_text())
    assert cfg["specrig"]["vocab_map"]["draft_vocab_size"] == 16 and vocab_map_problem(trained) is None


def test_drafter_info_is_typed_and_summaries_written_before_still_read(trained: Path) -> None:
    """drafter_info rides on the plan and the summary as a typed DrafterInfo; a summary written while it
    was a raw dict (the figure as offline_eval.json holds it; ``{}`` for no drafter) reads into the same."""
    info = drafter_info(str(trained))
    assert drafter_info(None) == DrafterInfo() == drafter_info(str(trained / "absent"))
    written_before = info.model_dump(mode="json") | {
        "offline_eval": json.loads((trained / "offline_eval.json").read_text())
    }
    assert "workload" not in written_before["offline_eval"]  # as the file holds it, not the model's dump
    assert ConfigResult.model_validate({"name": "e", "drafter_info": written_before}).drafter_info == info
    assert ConfigResult.model_validate({"name": "baseline", "drafter_info": {}}).drafter_info == DrafterInfo()
    result = ConfigResult(name="e", drafter_info=info)
    assert ConfigResult.model_validate_json(result.model_dump_json()) == result
    assert info.offline_for("story") == info.offline_eval and DrafterInfo().offline_for("story") is None


def test_a_drafter_config_with_a_fact_of_the_wrong_type_is_named(trained: Path) -> None:
    cfg = json.loads((trained / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ["two", 15, 27]
    (trained / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as exc:
        drafter_info(str(trained))
    assert "aux_layers.0" in str(exc.value) and "config.json" in str(exc.value)


def test_the_run_record_written_after_the_evaluation_keeps_it_bound(trained: Path) -> None:
    """The pipeline writes run.json last (the H200 drafter's figures read "stale" until it was left out)."""
    (trained / "run.json").write_text('{"seconds": 1}')
    found, why = offline_eval_status(trained)
    assert why is None and found is not None
    (trained / "notes.txt").write_text("any other file is an input")
    assert "notes.txt is new" in (offline_eval_status(trained)[1] or "")


def test_a_copy_with_its_vocabulary_map_permuted_is_the_drafters_fault(trained: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copied" / "eagle3-test"
    shutil.copytree(trained, copy)
    assert offline_eval_status(copy)[0] is not None  # a faithful copy keeps its figure
    permute_d2t(copy)

    found, why = offline_eval_status(copy)
    assert found is None and why and "model.safetensors changed" in why and "stale" in why
    assert offline_eval_status(trained)[0] is not None, "the original is untouched"

    problem = vocab_map_problem(copy)
    assert problem and "vocabulary map" in problem and "d2t is not the map training exported" in problem
    assert "t2d marks 16 target ids" in problem

    info = drafter_info(str(copy))
    assert info.offline_eval is None and "stale" in (info.offline_eval_unbound or "")
    assert "vocabulary map" in (info.drafter_fault or "")

    # online 0% served: no word of the serving side being wrong, the map is named
    s = stats_at(0.0)
    line = diagnose(s, None, offline_unbound=info.offline_eval_unbound, drafter_fault=info.drafter_fault)
    assert "serving side is wrong" not in line
    assert "the drafter is at fault, not serving: its vocabulary map" in line
    # even a figure somebody passed along could not blame serving while the drafter is faulty
    assert "serving side is wrong" not in diagnose(s, 0.22, drafter_fault=info.drafter_fault)
    # a drafter only re-weighted (map intact) but not re-evaluated: no verdict, the reason said
    unbound = diagnose(s, None, offline_unbound=info.offline_eval_unbound)
    assert "no offline figure for the served drafter" in unbound and "drafter-eval" in unbound


def test_drafter_check_names_the_map_and_the_stale_figure(trained: Path, tmp_path: Path, capsys) -> None:
    assert specrig_main(["drafter-check", str(trained)]) == 0
    copy = tmp_path / "copied" / "eagle3-test"
    shutil.copytree(trained, copy)
    permute_d2t(copy)
    capsys.readouterr()
    assert specrig_main(["drafter-check", str(copy)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "WRONG VOCABULARY MAP" in err and "offline figures do not hold" in err
    assert specrig_main(["drafter-check", str(copy), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert "d2t" in report["vocab_map"] and "stale" in report["offline_eval_stale"]


def test_a_map_outside_the_targets_vocabulary_is_named(trained: Path) -> None:
    assert "outside the target's vocabulary (0..31)" in (vocab_map_problem(trained, target_vocab=32) or "")


def test_the_copy_for_another_engine_carries_a_bound_figure(trained: Path) -> None:
    copy = Path(for_engine(str(trained), "sglang"))
    carried, _ = offline_eval_status(copy)
    assert carried is not None and carried.acceptance_rate == pytest.approx(0.22)
    assert carried.inputs["carried_from"] == str(trained)


def test_the_tensor_reader_reads_what_was_written(trained: Path) -> None:
    dtype, shape, data = tensor_bytes(trained / "model.safetensors", "d2t")
    assert dtype == "I64" and shape == [16] and len(data) == 128
