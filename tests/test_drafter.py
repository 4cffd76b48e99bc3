"""The drafter pipeline's rooms on their own: stage caching and atomicity, the
exported folder and its shifted twin as the layer check sees them, the
registry behind @eagle3-trained, the prompt split, and (in the recipe's train
environment) that the trainer's unroll computes what a serving KV-cache
drafter computes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specrig.core.errors import ConfigError
from specrig.drafter.export import drafter_config, register, trained_drafter, write_drafter
from specrig.drafter.generate import request_for
from specrig.drafter.pipeline import hidden_dtype
from specrig.drafter.prompts import DrafterPrompt
from specrig.drafter.settings import DEFAULT, QUICK, DrafterSettings
from specrig.drafter.stages import run_stage
from specrig.host.machine import cpu_flags, cpu_native_bf16
from specrig.specdec.layers import check_drafter, layer_note

TARGET = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "vocab_size": 49152,
    "num_hidden_layers": 30,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_stage_is_cached_by_inputs_and_atomic(tmp_path: Path) -> None:
    calls = []

    def build(out: Path, work: Path) -> dict:
        calls.append(1)
        (out / "x.txt").write_text("made")
        return {"n": len(calls)}

    a = run_stage(tmp_path, "s", {"a": 1}, build, what="s")
    b = run_stage(tmp_path, "s", {"a": 1}, build, what="s")
    assert not a.cached and b.cached and b.path == a.path and len(calls) == 1 and b.facts.model_dump() == {"n": 1}
    c = run_stage(tmp_path, "s", {"a": 2}, build, what="s")
    assert c.path != a.path and len(calls) == 2

    def broken(out: Path, work: Path) -> dict:
        (out / "half.txt").write_text("half")
        (work / "resume.txt").write_text("kept")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_stage(tmp_path, "s", {"a": 3}, broken, what="s")
    assert not any(p.name.startswith("s-") and (p / "half.txt").exists() for p in tmp_path.iterdir())
    work = next(tmp_path.glob(".s-*.work"))
    assert (work / "resume.txt").read_text() == "kept"  # what a resumable stage keeps survives

    def resumed(out: Path, work: Path) -> dict:
        return {"resumed": (work / "resume.txt").read_text()}

    d = run_stage(tmp_path, "s", {"a": 3}, resumed, what="s")
    assert d.facts.model_dump() == {"resumed": "kept"} and not work.exists()


def test_stage_facts_are_typed_and_checked_before_the_stage_is_published(tmp_path: Path) -> None:
    """A stage's facts are read as its model (fields, not keys), written and read back the same,
    and a build whose facts do not fit the model publishes nothing."""
    from pydantic import ValidationError

    from specrig.drafter.facts import HiddenFacts, TrainFacts

    def hidden(out: Path, work: Path) -> dict:
        return {"samples": {"train": 3, "heldout": 1}, "tokens": {"train": 30}, "label_agreement": 0.994, "x": 1}

    made = run_stage(tmp_path, "hidden", {"a": 1}, hidden, what="h", facts=HiddenFacts)
    again = run_stage(tmp_path, "hidden", {"a": 1}, hidden, what="h", facts=HiddenFacts)
    assert again.cached and again.facts == made.facts and made.facts.samples["train"] == 3
    assert made.facts.note() == "30 tokens; HF agrees with the engine on 99.4%"
    with pytest.raises(ValidationError, match="draft_vocab"):
        run_stage(tmp_path, "train", {"a": 1}, lambda out, work: {"steps": 2}, what="t", facts=TrainFacts)
    assert not list(tmp_path.glob("train-*"))


def test_a_training_cut_by_its_budget_counts_the_epochs_and_tokens_it_trained() -> None:
    """The train stage's line counts a last epoch that the time budget cut by its share of the steps
    (every epoch has the same batches): a run of 196 steps of 96 an epoch (its data packed by the
    trainer's own ``batches``) trained 2.04 epochs, not the 3 it started, at 258 tokens/s, not the
    381 a count of whole epochs would say."""
    from specrig.drafter.facts import TrainFacts

    epochs = [{"epoch": 1, "steps": 96}, {"epoch": 2, "steps": 96}, {"epoch": 3, "steps": 4}]
    cut = TrainFacts(steps=196, seconds=970.4, draft_vocab=4096, train_tokens=122598, epochs=epochs, epoch_steps=96)
    assert cut.epochs_done() == pytest.approx(196 / 96)
    assert cut.note().startswith("196 steps on cpu, 2.04 epochs (~258 tok/s)")
    whole = cut.model_copy(update={"epochs": epochs[:2], "steps": 192})
    assert "2 epochs" in whole.note()
    old = cut.model_copy(update={"epoch_steps": None})  # a log from before per-epoch steps: epochs started
    assert old.epochs_done() == 3.0 and "3 epochs" in old.note()


def _drafter(tmp_path: Path) -> tuple[Path, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"weights")
    cfg = drafter_config(TARGET, aux=[2, 15, 27], draft_vocab=4096, facts={"pipeline_key": "k"})
    good = write_drafter(tmp_path / "eagle3-k", weights, cfg)
    shifted = write_drafter(tmp_path / "eagle3-k-shifted", weights, cfg, shift=-1)
    return good, shifted


def test_export_layout_and_the_shifted_twin(tmp_path: Path) -> None:
    good, shifted = _drafter(tmp_path)
    g = json.loads((good / "config.json").read_text())
    s = json.loads((shifted / "config.json").read_text())
    assert g["architectures"] == ["LlamaForCausalLMEagle3"] and g["draft_vocab_size"] == 4096
    assert g["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [2, 15, 27], "use_aux_hidden_state": True}
    assert s["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 14, 26]
    assert s["specrig"]["trained_aux_positions"] == [2, 15, 27] and s["specrig"]["served_shift"] == -1
    assert (shifted / "model.safetensors").read_bytes() == b"weights"
    assert not list(tmp_path.glob(".eagle3-*"))  # no temporary folders left


def test_layer_check_passes_the_trained_drafter_and_names_the_shift(tmp_path: Path) -> None:
    good, shifted = _drafter(tmp_path)
    r = check_drafter(good)
    assert r.producer.name == "specrig" and not r.mismatch and r.trained_positions == [2, 15, 27]
    r = check_drafter(shifted)
    assert r.mismatch and r.offset == -1 and r.served_positions == [1, 14, 26]
    assert any("1 layer earlier" in line for line in r.findings)
    assert r.fix and "[2, 15, 27]" in r.fix
    assert layer_note(good) is None
    note = layer_note(shifted)
    assert note and note.startswith("layer convention:") and "1 layer earlier" in note


def test_registry_prefers_the_default_run(cache: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        trained_drafter("cpu")
    assert "nox -s drafter" in (err.value.hint or "")
    quick, quick_shifted = _drafter(tmp_path / "q")
    register("cpu", quick, quick_shifted, quick=True)
    assert trained_drafter("cpu") == quick and trained_drafter("cpu", shifted=True) == quick_shifted
    full, full_shifted = _drafter(tmp_path / "f")
    register("cpu", full, full_shifted, quick=False)
    assert trained_drafter("cpu") == full


def test_settings_refuse_nonsense() -> None:
    for bad in ({"samples": 0}, {"epochs": 0}, {"lr": 1.0}, {"bench_shaped": 1.5}, {"turns": "some"}):
        with pytest.raises(ConfigError, match=next(iter(bad))):  # the error names the setting
            DrafterSettings(**bad)
    # --quick is the same run made small: fewer prompts, shorter answers, fewer epochs, less time
    for knob in ("samples", "heldout", "max_new_tokens", "epochs", "generate_seconds", "train_seconds"):
        assert getattr(QUICK, knob) < getattr(DEFAULT, knob), knob
    # an override given replaces that one setting of the run it is given to (here --quick's); one not
    # given (None) keeps that run's value, not None and not the built-in default
    o = QUICK.with_overrides(epochs=None, samples=8)
    assert o.samples == 8 and {k for k, v in o.as_dict().items() if v != QUICK.as_dict()[k]} == {"samples"}


def test_hidden_states_run_in_bf16_only_where_the_cpu_computes_it_natively(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f amx_tile amx_bf16\n\nprocessor\t: 1\n")
    assert {"avx2", "amx_bf16"} <= cpu_flags(cpuinfo)
    assert cpu_flags(tmp_path / "absent") == frozenset()
    if Path("/proc/cpuinfo").exists():
        assert cpu_flags()  # this machine's own flags are read
    assert cpu_native_bf16(cpu_flags(cpuinfo)) == "amx_bf16"
    assert hidden_dtype("auto", frozenset({"avx2", "avx512f"})) == "float32"  # emulated bf16 is slower
    assert hidden_dtype("auto", frozenset({"avx512_bf16"})) == "bfloat16"
    assert hidden_dtype("float32", frozenset({"amx_bf16"})) == "float32"  # a recipe's choice wins
    assert hidden_dtype("bfloat16", frozenset()) == "bfloat16"
    # a default run follows the CPU: bf16 with AMX, float32 without native bf16
    assert hidden_dtype(DEFAULT.hidden_dtype, cpu_flags(cpuinfo)) == "bfloat16"
    assert hidden_dtype(DEFAULT.hidden_dtype, frozenset({"avx2", "avx512f"})) == "float32"
    with pytest.raises(ConfigError, match="hidden_dtype"):
        DrafterSettings(hidden_dtype="float16")  # type: ignore[arg-type]


def test_requests_are_greedy_and_return_token_ids() -> None:
    chat = request_for(DrafterPrompt("a", "train", "chat", "hi"), "m", 16)
    raw = request_for(DrafterPrompt("b", "train", "raw", "hi"), "m", 16)
    assert chat[0] == "/v1/chat/completions" and chat[1]["messages"][0]["content"] == "hi"
    assert raw[0] == "/v1/completions" and raw[1]["prompt"] == "hi"
    for _, body in (chat, raw):
        assert body["temperature"] == 0 and body["return_token_ids"] is True


def test_prompts_never_share_the_heldout_split() -> None:
    from specrig.drafter.prompts import select_prompts
    from specrig.model.datasets import sharegpt_file

    prompts = select_prompts(DrafterSettings(samples=40, heldout=10, bench_shaped=0.0), sharegpt_file())
    train = {p.id for p in prompts if p.split == "train"}
    held = {p.id for p in prompts if p.split == "heldout"}
    assert len(train) == 40 and len(held) == 10 and not train & held
    assert {p.format for p in prompts} == {"chat", "raw"}
    assert all(len(p.text) <= DEFAULT.max_prompt_chars for p in prompts)


def test_answers_come_through_the_bench_client_in_the_answers_file(tmp_path: Path) -> None:
    """The drafter's generation is the bench's client: chat, raw and bench-shaped prompts streamed
    with their token ids, each answer appended as it comes ({id, split, format, prompt_ids,
    output_ids}); past the deadline a training prompt is not sent (it trains on its dataset answer),
    a held-out one still is."""
    from specrig.drafter.generate import _answer_all, read_partial
    from specrig.serve.synthetic import PROMPT_IDS, serve_in_thread, token_id

    todo = [
        DrafterPrompt("h", "heldout", "chat", "hi"),
        DrafterPrompt("b", "train", "bench", "Explain TCP."),
        DrafterPrompt("r", "train", "raw", "hello"),
    ]
    answers = tmp_path / "answers.jsonl"
    with serve_in_thread() as s:
        tokens = _answer_all(s.base_url, "m", todo, 5, 8, answers, deadline=None, bench_tokens=7)
    done = read_partial(answers)
    assert tokens == 5 + 7 + 5 and sorted(done) == ["b", "h", "r"]
    assert done["h"] == {"id": "h", "split": "heldout", "format": "chat", "prompt_ids": PROMPT_IDS,
                         "output_ids": [token_id(i) for i in range(5)]}  # fmt: skip
    assert done["b"]["output_ids"] == [token_id(i) for i in range(7)] and done["b"]["format"] == "bench"
    # out of time: only the held-out prompt is sent
    late = tmp_path / "late.jsonl"
    with serve_in_thread() as s:
        assert _answer_all(s.base_url, "m", todo, 3, 1, late, deadline=0.0) == 3
    assert list(read_partial(late)) == ["h"]
