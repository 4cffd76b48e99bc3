"""SpecForge 0.2.0 as the second reference trainer on the CPU, with the real
SpecForge (the cpu recipe's [env.specforge]) and the real SmolLM2: its own training loop, data reader,
vocabulary map and export run for real; only its Triton loss kernel is stood in for by the same
formula in plain torch (``train_specforge.py``: no CUDA here).

1. specrig's samples written in SpecForge's offline layout by ``specforge_data.py`` and read back by
   SpecForge's own offline normalisation: the same ids, the answer mask, aux features equal to what
   plain transformers computes at 2, 15, 27, and a last state whose head gives the target's tokens.
2. ``specforge train`` with the run file specrig writes (:func:`run_config`) learns (its loss over the
   four samples falls in 24 steps), and ``specforge export`` writes a drafter of specrig's vocabulary
   that specrig's own evaluation scores once specrig adds the aux ids it was trained at.
3. specrig's model drafts what SpecForge's does: the exported weights through SpecForge's own
   ``LlamaForCausalLMEagle3`` (its projection, decoder layer with the test-time-training cache, its
   logits) and through specrig's ``Eagle3Draft`` give the same logits at every position for three
   draft steps, so specrig's offline figures for a SpecForge drafter are SpecForge's model's."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from drafter_support import py, reference_inputs, script

pytestmark = [pytest.mark.engine, pytest.mark.slow]

VOCAB = 512
STEPS = 24


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from specrig.env.make import make_env
    from specrig.model.folder import prepare_model
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe("cpu")
    env = make_env(recipe, "specforge")
    model = prepare_model(recipe, make_env(recipe, recipe.engine["vllm"].env))
    d = tmp_path_factory.mktemp("specforge")
    python = str(env.python)
    reference_inputs(python, model.path, d, VOCAB)
    aux = ["--aux", "2,15,27"]
    args = [str(model.path), str(d / "hidden"), str(d / "data"), *aux, "--vocab", str(d / "vocab.safetensors")]
    script(python, "specforge_data.py", *args, "--limit", "4", "--max-len", "64")
    return {
        "python": python,
        "model": model.path,
        "d": d,
        "layout": json.loads((d / "data" / "layout.json").read_text()),
    }


READ_BACK = r"""
import json, sys, torch
from pathlib import Path
from specforge.algorithms.eagle3.data import normalize_offline_sample
from transformers import AutoModelForCausalLM
folder, model_dir = Path(sys.argv[1]), sys.argv[2]
m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
res = []
for f in sorted((folder / "features").glob("*.ckpt")):
    s = normalize_offline_sample(torch.load(f, weights_only=False), 64)
    ids = s["input_ids"][0]
    with torch.no_grad():
        o = m(input_ids=ids[None], output_hidden_states=True)
    aux = torch.cat([o.hidden_states[k][0] for k in (2, 15, 27)], dim=-1)
    greedy = m.lm_head(s["target"][0].float()).argmax(-1)
    res.append({
        "len": len(ids), "mask": s["loss_mask"][0].tolist(),
        "shapes": [list(s["hidden_state"].shape), list(s["target"].shape)],
        "aux_max_diff": float((s["hidden_state"][0].float() - aux).abs().max()),
        "aux_scale": float(aux.abs().max()),
        "greedy_agree": float((greedy == o.logits[0].argmax(-1)).float().mean()),
    })
mapping = torch.load(folder / "vocab_mapping.pt")
index = json.loads((folder / "target" / "model.safetensors.index.json").read_text())
print(json.dumps({"rows": res, "d2t": mapping["d2t"].tolist()[:4], "t2d": int(mapping["t2d"].sum()),
                  "head": index["weight_map"].get("model.embed_tokens.weight")}))
"""


def test_specforge_reads_the_features_specrig_writes(setup: dict) -> None:
    lay = setup["layout"]
    assert (lay["rows"], lay["draft_vocab"], lay["aux"], lay["hidden_size"]) == (4, VOCAB, [2, 15, 27], 576)
    out = json.loads(py(setup["python"], READ_BACK, str(setup["d"] / "data"), str(setup["model"])))
    assert len(out["rows"]) == 4 and sum(r["len"] for r in out["rows"]) == lay["tokens"]
    for r in out["rows"]:
        n = r["len"]
        assert r["shapes"] == [[1, n, 3 * 576], [1, n, 576]]
        # the answer's tokens (after the prompt) only, and never the last (SpecForge's own rule)
        assert r["mask"][-1] == 0 and 0 < sum(r["mask"]) < n and r["mask"] == sorted(r["mask"][:-1]) + [0]
        assert r["aux_max_diff"] <= 0.02 * r["aux_scale"]  # bf16 storage of HF hidden_states[2, 15, 27]
        assert r["greedy_agree"] >= 0.95  # the stored last state is post-norm: the head reads it directly
    assert out["d2t"] == [0, 0, 0, 0] and out["t2d"] == VOCAB and out["head"] == "model.safetensors"


@pytest.fixture(scope="module")
def trained(setup: dict) -> dict:
    from specrig.drafter.reference_specforge import draft_config, run_config
    from specrig.drafter.settings import QUICK

    d, work = setup["d"], setup["d"] / "train"
    work.mkdir()
    target_cfg = json.loads((setup["model"] / "config.json").read_text())
    (work / "draft.json").write_text(json.dumps(draft_config(target_cfg, VOCAB)))
    s = QUICK.with_overrides(max_len=64, ttt_steps=3)
    run = run_config(d / "data", work, setup["layout"], s, STEPS, bool(target_cfg.get("tie_word_embeddings")))
    (work / "run.yaml").write_text(json.dumps(run))
    args = [str(work / "log.json"), str(work / "run.yaml"), str(work / "draft.json"), str(work / "export")]
    out = script(setup["python"], "train_specforge.py", *args, timeout=900)
    return {"log": json.loads((work / "log.json").read_text()), "export": work / "export", "stdout": out}


def test_specforge_trains_and_exports_a_drafter_of_specrigs_vocabulary(setup: dict, trained: dict) -> None:
    log = trained["log"]
    assert log["steps_run"] == STEPS and log["loss_kernel"].startswith("plain-torch")
    assert log["checkpoint"].endswith(f"-step{STEPS}")
    losses = log["losses"]  # one sample a step: six epochs of the four samples
    assert len(losses) == STEPS and sum(losses[-4:]) < sum(losses[:4]), losses
    cfg = json.loads((trained["export"] / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["draft_vocab_size"] == VOCAB
    keys = json.loads(py(setup["python"], SHAPES, str(trained["export"] / "model.safetensors")))
    assert keys["lm_head.weight"] == [VOCAB, 576] and keys["fc.weight"] == [576, 3 * 576]
    assert keys["d2t"] == [VOCAB] and "midlayer.self_attn.q_proj.weight" in keys and "embed_tokens.weight" not in keys
    assert keys["d2t_values"] == [0] and keys["t2d_true"] == VOCAB  # specrig's map, not one SpecForge made


SHAPES = r"""
import json, sys
from safetensors.torch import load_file
t = load_file(sys.argv[1])
out = {k: list(v.shape) for k, v in t.items()}
out["d2t_values"] = sorted(set(t["d2t"].tolist())); out["t2d_true"] = int(t["t2d"].sum())
print(json.dumps(out))
"""


def test_specrig_scores_the_export_once_it_names_its_aux_ids(setup: dict, trained: dict, tmp_path: Path) -> None:
    from specrig.drafter.reference_specforge import serving_config

    folder = tmp_path / "specforge-eagle3-test"
    folder.mkdir()
    os.link(trained["export"] / "model.safetensors", folder / "model.safetensors")
    cfg = serving_config(json.loads((trained["export"] / "config.json").read_text()), [2, 15, 27])
    (folder / "config.json").write_text(json.dumps(cfg))
    held = setup["d"] / "hidden" / "heldout"
    out = script(
        setup["python"],
        "eval_eagle3.py",
        str(setup["model"]),
        str(folder),
        str(held),
        str(tmp_path / "e.json"),
        "--k",
        "3",
    )
    res = json.loads((tmp_path / "e.json").read_text())
    assert res["k"] == 3 and res["served_aux_positions"] == [2, 15, 27] and res["held_out_tokens"] > 0, out
    assert len(res["per_position"]) == 3 and all(0.0 <= p <= 1.0 for p in res["per_position"])


SAME = r"""
import json, sys, torch
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from eagle3_model import Eagle3Draft, target_config, target_head
from safetensors.torch import load_file
from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
from transformers import LlamaConfig
export, target = Path(sys.argv[1]), Path(sys.argv[2])
torch.manual_seed(0)
embed_w, _, _ = target_head(target)
tensors = load_file(str(export / "model.safetensors"))
cfg = LlamaConfig.from_pretrained(str(export))
theirs = LlamaForCausalLMEagle3(cfg, attention_backend="sdpa")
missing, _ = theirs.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=False)
assert missing == ["embed_tokens.weight"], missing
theirs.embed_tokens.weight.data.copy_(embed_w)
theirs = theirs.float().eval()
v = tensors["lm_head.weight"].shape[0]
ours = Eagle3Draft(target_config(target) | {"num_aux": 3, "draft_vocab_size": v})
ours.load_export(tensors)
ours.eval()
t, k = 20, 3
aux = torch.randn(1, t, 3 * 576) * 4
ids = torch.randint(0, 49152, (1, t))
embed = torch.nn.Embedding.from_pretrained(embed_w)
with torch.no_grad():
    mine = ours.unroll(aux, ids, embed, k)
    hs = theirs.project_hidden_states(aux)
    mask = theirs.prepare_decoder_attention_mask(torch.ones(1, t, dtype=torch.bool), hs, 1, t, 0)
    pos, cache, out = torch.arange(t)[None], [[], []], []
    for j in range(k):
        tok = torch.zeros_like(ids)
        tok[:, : t - 1 - j] = ids[:, 1 + j :]
        hs = theirs.backbone(theirs.embed_input_ids(tok), hs, cache, mask, pos, None, True)
        out.append(theirs.compute_logits(hs))
rows = t - k  # positions whose step inputs all lie inside the sequence
print(json.dumps([{
    "max_diff": float((a[0, :rows] - b[0, :rows]).abs().max()), "scale": float(b[0, :rows].abs().max()),
    "argmax_agree": float((a[0, :rows].argmax(-1) == b[0, :rows].argmax(-1)).float().mean()),
} for a, b in zip(mine, out)]))
"""


def test_specrigs_model_drafts_what_specforges_does(setup: dict, trained: dict) -> None:
    inenv = Path(__file__).resolve().parents[1] / "src" / "specrig" / "drafter" / "inenv"
    steps = json.loads(py(setup["python"], SAME, str(trained["export"]), str(setup["model"]), str(inenv)))
    assert len(steps) == 3
    for s in steps:
        assert s["max_diff"] <= 1e-3 * max(s["scale"], 1.0) and s["argmax_agree"] == 1.0, steps


def test_a_bad_step_count_is_refused_before_anything_runs() -> None:
    from specrig.core.errors import ConfigError
    from specrig.drafter.reference_specforge import run_config
    from specrig.drafter.settings import QUICK

    with pytest.raises(ConfigError, match="at least one step"):
        run_config(Path("d"), Path("w"), {"rows": 4}, QUICK, 0, True)


HORIZON = r"""
import json, sys
from specforge.training.schedule import resolve_total_steps
print(json.dumps([resolve_total_steps(total_steps=None, max_steps=None, num_samples=n, batch_size=b,
                                      accumulation_steps=a, num_epochs=e) for n, b, a, e in json.loads(sys.argv[1])]))
"""


def test_the_epochs_let_specforge_run_every_step_at_any_batch_size(setup: dict) -> None:
    """SpecForge stops at whichever of max_steps and num_epochs comes first: the epochs specrig
    writes must hold the steps at the batch size and accumulation set (a batch of 2 once halved a
    CPU run's steps per epoch and stopped it at 1,200 of 1,357), and no more than needed. Checked
    against SpecForge's own horizon for a whole number of epochs."""
    from specrig.drafter.reference_specforge import epochs_for

    cases = [(3054, 1200, {}), (1357, 1200, {"training.batch_size": 2}), (100, 11, {"training.batch_size": 2})]
    cases += [(41, 10, {"training.batch_size": 2, "training.accumulation_steps": 3}), (5, 1200, {})]
    plans = []
    for steps, rows, settings in cases:
        e = epochs_for(steps, rows, settings)
        b, a = settings.get("training.batch_size", 1), settings.get("training.accumulation_steps", 1)
        plans += [(rows, b, a, e), (rows, b, a, max(e - 1, 1))]
    horizons = json.loads(py(setup["python"], HORIZON, json.dumps(plans)))
    for i, (steps, _, _) in enumerate(cases):
        enough, one_less = horizons[2 * i], horizons[2 * i + 1]
        assert enough >= steps, (cases[i], enough)
        assert one_less < steps or epochs_for(*cases[i]) == 1, (cases[i], one_less)
    assert epochs_for(1357, 1200, {"training.batch_size": 2}) == 3
    assert epochs_for(10, 1200, {"training.num_epochs": 4, "training.batch_size": 2}) == 4  # as given


def test_specforges_own_settings_are_read_and_put_in_place() -> None:
    from specrig.core.errors import ConfigError
    from specrig.drafter.reference_specforge import parse_settings, with_settings

    got = parse_settings(["training.attention_backend=sdpa", "training.learning_rate=2e-4", "data.max_length=512"])
    assert got == {"training.attention_backend": "sdpa", "training.learning_rate": 2e-4, "data.max_length": 512}
    cfg = {"training": {"max_steps": 5, "learning_rate": 1e-4}, "data": {}}
    out = with_settings(cfg, got)
    assert out["training"] == {"max_steps": 5, "learning_rate": 2e-4, "attention_backend": "sdpa"}
    assert out["data"] == {"max_length": 512} and cfg["training"]["learning_rate"] == 1e-4  # a copy
    for bad in ("training.lr", "lr=1", "optimizer.lr=1", "training.=1"):
        with pytest.raises(ConfigError, match="SECTION.NAME=VALUE"):
            parse_settings([bad])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--reference-set", "training.x=1"], "--reference-set sets SpecForge's own run-file settings"),
        (["--reference", "specforge", "--reference-set", "lr=1"], "not SECTION.NAME=VALUE"),
        (["--reference", "specforge", "--reference-steps", "0"], "SpecForge has none"),
    ],
)
def test_bad_reference_settings_stop_the_command_before_any_stage(args: list[str], message: str) -> None:
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "specrig.cli", "drafter", "--recipe", "cpu", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "1/6" not in proc.stderr  # no stage started
