"""Drafter layer-convention check on drafter configs: one written by the real
speculators 0.3.0 library (Eagle3SpeculatorConfig.save_pretrained, Kimi-K2.5
verifier), and representative SpecForge/SGLang- and speculators-0.5-format ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specrig.cli import main as cli_main
from specrig.specdec.layers import check_drafter


def main(argv: list[str]) -> int:
    return cli_main(["drafter-check", *argv])


FIXTURES = Path(__file__).parent / "fixtures" / "patches_drafters"
KIMI_LAYERS = 61


def test_speculators_0_3_drafter_is_one_layer_off_under_vllm():
    r = check_drafter(FIXTURES / "speculators-0.3.0-kimi.json", num_layers=KIMI_LAYERS)
    assert r.producer.name == "speculators-0.3"
    assert r.config_ids is None  # speculators 0.3.0 wrote null
    assert r.trained_positions == [3, 31, 59]
    assert r.served_positions == [2, 30, 58]
    assert r.mismatch and r.offset == -1
    assert r.fix is not None and "[3, 31, 59]" in r.fix


def test_speculators_0_3_drafter_matches_sglang_default_only_if_shifted():
    r = check_drafter(FIXTURES / "speculators-0.3.0-kimi.json", engine="sglang", num_layers=KIMI_LAYERS)
    assert r.mismatch and r.offset == -1
    assert "[2, 30, 58]" in r.fix  # SGLang adds +1 to the ids it is given


def test_sglang_trained_ids_are_one_off_in_vllm_but_fine_in_sglang():
    vllm = check_drafter(FIXTURES / "specforge-ids.json", num_layers=KIMI_LAYERS)
    assert vllm.producer.name == "specforge"
    assert vllm.mismatch and vllm.offset == -1
    sglang = check_drafter(FIXTURES / "specforge-ids.json", engine="sglang", num_layers=KIMI_LAYERS)
    assert not sglang.mismatch


def test_defaults_without_ids_are_consistent_for_specforge_and_speculators_0_5():
    assert not check_drafter(FIXTURES / "specforge-no-ids.json", num_layers=KIMI_LAYERS).mismatch
    assert not check_drafter(FIXTURES / "speculators-0.5.0-kimi.json").mismatch


def test_layer_count_from_target_config(tmp_path: Path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(
        json.dumps({"model_type": "kimi_k25", "text_config": {"num_hidden_layers": 61}})
    )
    r = check_drafter(FIXTURES / "speculators-0.3.0-kimi.json", target_config=target)
    assert r.num_layers == 61 and r.offset == -1


def test_cli_exit_codes(tmp_path: Path, capsys):
    assert main([str(FIXTURES / "speculators-0.3.0-kimi.json"), "--num-layers", "61"]) == 1
    assert main([str(FIXTURES / "specforge-no-ids.json"), "--num-layers", "61"]) == 0
    assert main([str(FIXTURES / "speculators-0.3.0-kimi.json")]) == 1  # layer count unknown: undecided
    unknown = tmp_path / "config.json"
    unknown.write_text(json.dumps({"model_type": "llama"}))
    assert main([str(unknown), "--num-layers", "61"]) == 1
    assert main([str(unknown), "--num-layers", "61", "--trained-with", "vllm"]) == 0
    assert main([str(tmp_path / "missing")]) == 2
    capsys.readouterr()
    assert main([str(FIXTURES / "speculators-0.3.0-kimi.json"), "--num-layers", "61", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["offset"] == -1 and report["trained_positions"] == [3, 31, 59]


def test_help_works():
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0


def test_the_aux_layers_the_engine_says_it_used_win(tmp_path: Path) -> None:
    """vLLM 0.26's V2 runner read only a top-level id list and fell back to its defaults, logging
    "Using Eagle3 auxiliary layers from model: (2, 15, 27)" (seen on the H200); the note must say so."""
    import json

    from specrig.lab.measure import served_aux_layers
    from specrig.lab.summary import _layer_note

    d = tmp_path / "shifted"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 13, 25]},
            }
        )
    )
    served = served_aux_layers(
        "(EngineCore) INFO [eagle3_utils.py:30] Using Eagle3 auxiliary layers from model: (2, 15, 27)\n"
    )
    assert served == [2, 15, 27]
    note = _layer_note(str(d), "vllm", served)
    assert note and "ignored the drafter's aux ids [0, 13, 25] and used [2, 15, 27]" in note
    assert served_aux_layers("INFO Using auxiliary layers from speculative config: [0, 13, 25]") == [0, 13, 25]
    assert _layer_note(str(d), "vllm", [0, 13, 25]) != note  # served as asked: no such claim


def test_a_shift_the_engine_did_not_confirm_is_said_to_be_unconfirmed(tmp_path: Path) -> None:
    """A shifted twin served by an engine that logs no aux layers (SGLang): the note gives
    the config's mismatch and says the engine did not confirm it used those ids."""
    import json

    from specrig.lab.summary import _layer_note

    d = tmp_path / "eagle3-shifted"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 14, 26]},
                "specrig": {"trained": True, "trained_aux_positions": [2, 15, 27]},
            }
        )
    )
    unconfirmed = _layer_note(str(d), "vllm", None)
    assert unconfirmed and "1 layer earlier" in unconfirmed and "not confirmed" in unconfirmed
    confirmed = _layer_note(str(d), "vllm", [1, 14, 26])
    assert confirmed and "not confirmed" not in confirmed and "the engine's log: aux layers [1, 14, 26]" in confirmed
