"""The reference trainer's path on the CPU, with the real speculators 0.9.0 (the
cpu recipe's [env.speculators]) and the real SmolLM2: what can run without CUDA.

1. specrig's samples (its hidden stage's token ids, made by ``hidden_states.py``) written in
   speculators' layout by ``speculators_data.py``, then read back by speculators' own dataset
   (``ArrowDataset``, the split at the ratio the layout names): the same rows and masks, and
   hidden states equal to what plain transformers computes for them (the aux ids' inputs, and a
   last state whose final norm and head give the target's own greedy tokens).
2. ``speculators.train --dry-run`` on that layout saves a checkpoint drafting from specrig's
   vocabulary (its d2t), and ``eval_speculators.py`` scores it.
3. specrig's evaluation of a speculators checkpoint counts what specrig's own would: a drafter of
   specrig's (seeded weights) put in speculators' format drafts the same tokens through
   speculators' model as through specrig's, at every position and step, with plain EAGLE-3 options
   and with the EAGLE 3.1 norms of speculators' defaults (specrig's ``--norms eagle3.1``); plain
   weights served with the 3.1 options do not.

speculators trains on CUDA only (``model.to(local_rank)``): training itself ran on the H200."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drafter_support import INENV, py, reference_inputs, script
from module_support import load_file

pytestmark = [pytest.mark.engine, pytest.mark.slow]

VOCAB = 512


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from specrig.env.make import make_env
    from specrig.model.folder import prepare_model
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe("cpu")
    env = make_env(recipe, "speculators")
    model = prepare_model(recipe, make_env(recipe, recipe.engine["vllm"].env))
    d = tmp_path_factory.mktemp("reference")
    python = str(env.python)
    reference_inputs(python, model.path, d, VOCAB)
    args = [
        str(model.path),
        str(d / "hidden"),
        str(d / "layout"),
        "--aux",
        "2,15,27",
        "--vocab",
        str(d / "vocab.safetensors"),
    ]
    script(python, "speculators_data.py", *args, "--limit", "4", "--max-len", "64")
    return {
        "python": python,
        "model": model.path,
        "d": d,
        "layout": json.loads((d / "layout" / "layout.json").read_text()),
    }


READ_BACK = r"""
import json, sys, torch
from datasets import load_from_disk
from speculators.train.data import ArrowDataset
from transformers import AutoModelForCausalLM
folder, model_dir, ratio = sys.argv[1], sys.argv[2], float(sys.argv[3])
rows = load_from_disk(folder)
m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
out = {}
for split in ("train", "val"):
    ds = ArrowDataset(max_len=8192, datapath=folder, on_missing="raise", train_ratio=ratio, split=split)
    res = []
    for i in range(len(ds)):
        item, row = ds[i], rows[ds._map_to_file_idx(i)]
        ids = item["input_ids"]
        with torch.no_grad():
            o = m(input_ids=ids[None], output_hidden_states=True)
        aux = torch.cat([o.hidden_states[k][0] for k in (2, 15, 27)], dim=-1).to(torch.bfloat16)
        last = item["verifier_last_hidden_states"].float()[None]
        greedy = m.lm_head(m.model.norm(last))[0].argmax(-1)
        res.append({
            "ids_equal": bool(torch.equal(ids, row["input_ids"])),
            "mask": item["loss_mask"].tolist(), "row_mask": row["loss_mask"].tolist(),
            "shape": list(item["hidden_states"].shape),
            "aux_max_diff": float((item["hidden_states"].float() - aux.float()).abs().max()),
            "greedy_agree": float((greedy == o.logits[0].argmax(-1)).float().mean()),
        })
    out[split] = res
print(json.dumps(out))
"""


def test_speculators_reads_the_layout_specrig_writes(setup: dict) -> None:
    lay = setup["layout"]
    assert (lay["rows"], lay["train_rows"], lay["heldout_rows"]) == (7, 4, 3) and lay["draft_vocab"] == VOCAB
    assert int(lay["rows"] * lay["train_data_ratio"]) == 4  # speculators' split falls where the held-out rows start
    out = json.loads(
        py(
            setup["python"], READ_BACK, str(setup["d"] / "layout"), str(setup["model"]), str(lay["train_data_ratio"])
        ).splitlines()[-1]
    )
    assert [len(out["train"]), len(out["val"])] == [4, 3]
    for r in out["train"] + out["val"]:
        assert r["ids_equal"] and r["mask"] == r["row_mask"] and 0 < sum(r["mask"]) < len(r["mask"])
        assert r["mask"][0] == 0 and r["mask"][-1] == 1  # the prompt is not trained on, the answer is
        assert r["shape"] == [len(r["mask"]), 3 * 576]
        assert r["aux_max_diff"] < 0.05  # bf16 of the same float32 forward
        assert r["greedy_agree"] == 1.0  # the last state is before the final norm: norm + head give the target's tokens


def _dry_run(setup: dict, save: Path) -> None:
    lay = setup["layout"]
    script(
        setup["python"], "speculators.train",
        *("--verifier-name-or-path", str(setup["model"]), "--speculator-type", "eagle3"),
        *("--data-path", str(setup["d"] / "layout"), "--save-path", str(save), "--log-dir", str(save.parent / "logs")),
        *("--on-missing", "raise", "--target-layer-ids", "2", "15", "27", "--draft-vocab-size", str(VOCAB)),
        *("--ttt-steps", "3", "--train-data-ratio", str(lay["train_data_ratio"]), "--dry-run"),
    )  # fmt: skip


def test_a_dry_run_checkpoint_drafts_from_specrigs_vocabulary_and_is_scored(setup: dict, tmp_path: Path) -> None:
    save = tmp_path / "ckpt"
    _dry_run(setup, save)
    cfg = json.loads((save / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3" and cfg["draft_vocab_size"] == VOCAB
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27] and cfg["norm_before_fc"] and cfg["norm_output"]
    d2t = py(
        setup["python"],
        "import sys; from safetensors.torch import load_file; print(load_file(sys.argv[1])['d2t'].abs().sum().item())",
        str(save / "model.safetensors"),
    )
    assert d2t.strip() == "0"  # specrig's map (all offsets 0 for this vocabulary), not one of its own
    out = tmp_path / "eval.json"
    script(
        setup["python"],
        "eval_speculators.py",
        str(setup["model"]),
        str(save),
        str(setup["d"] / "hidden" / "heldout"),
        str(out),
        "--k",
        "3",
    )
    r = json.loads(out.read_text())
    assert r["k"] == 3 and r["held_out_samples"] == 3 and r["held_out_tokens"] > 0 and r["trainer"] == "speculators"
    assert len(r["per_position"]) == 3 and set(r["walk"]) == {"1", "2", "3"}


SAME_DRAFTS = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[5])
from pathlib import Path
from safetensors.torch import load_file, save_file
from torch import nn
from eagle3_model import NORMS, Eagle3Draft, load_split, target_config, target_head
from eval_eagle3 import Target
from eval_speculators import load_reference, reference_drafts
model_dir, dry, out, heldout = map(Path, sys.argv[1:5])
dry_t = load_file(str(dry / "model.safetensors"))
v = dry_t["lm_head.weight"].shape[0]


def made(norms):
    torch.manual_seed(0)
    m = Eagle3Draft(target_config(model_dir) | {"num_aux": 3, "draft_vocab_size": v} | NORMS[norms]).eval()
    for p in m.parameters():  # weights that give every position its own argmax
        nn.init.normal_(p, std=0.05) if p.dim() > 1 else nn.init.normal_(p, mean=1.0, std=0.1)
    exported = m.export_state()
    m.load_export(exported)  # the bf16 weights, as both see them
    return m, exported


embed = nn.Embedding.from_pretrained(target_head(model_dir)[0], freeze=True)
target = Target(model_dir, torch.device("cpu"))
result = {}
# specrig's model with its norms, put in speculators' format with the options of the norms served
for label, mine_norms, served in (("plain", "eagle3", "eagle3"), ("eagle-3.1", "eagle3.1", "eagle3.1"),
                                  ("plain as 3.1", "eagle3", "eagle3.1")):
    mine, exported = made(mine_norms)
    folder = out / label
    folder.mkdir(parents=True)
    cfg = json.loads((dry / "config.json").read_text()) | NORMS[served]
    (folder / "config.json").write_text(json.dumps(cfg))
    t = {k.replace("midlayer.", "layers.0."): x for k, x in exported.items()}
    t |= {k: dry_t[k] for k in ("embed_tokens.weight", "d2t", "t2d")}
    if served == "eagle3.1" and "input_norm.weight" not in t:
        t["input_norm.weight"] = dry_t["input_norm.weight"]
    save_file(t, str(folder / "model.safetensors"))
    run = reference_drafts(load_reference(folder, model_dir, torch.device("cpu"))[0])
    same = total = 0
    for s in load_split(heldout):
        ids = s["ids"]
        aux = target.features(ids, [2, 15, 27])[0].reshape(len(ids), -1)[None].float()
        with torch.inference_mode():
            a = [x[0].argmax(-1) for x in mine.unroll(aux, ids[None], embed, 3)]
        b = run(aux, ids[None], 3)
        for j in range(3):
            n = len(ids) - 1 - j
            same += int((a[j][:n] == b[j][:n]).sum()); total += n
    result[label] = [same, total]
print(json.dumps(result))
"""


def test_specrig_counts_speculators_drafts_as_it_counts_its_own(setup: dict, tmp_path: Path) -> None:
    _dry_run(setup, tmp_path / "ckpt")
    args = (
        str(setup["model"]),
        str(tmp_path / "ckpt"),
        str(tmp_path / "made"),
        str(setup["d"] / "hidden" / "heldout"),
        str(INENV),
    )
    out = json.loads(py(setup["python"], SAME_DRAFTS, *args).splitlines()[-1])
    same, total = out["plain"]
    assert total > 100 and same == total  # every step at every position: the same drafts
    assert out["eagle-3.1"] == [total, total]  # specrig's EAGLE 3.1 norms compute what speculators' do
    same_x, total_x = out["plain as 3.1"]
    assert total_x == total and same_x < 0.9 * total  # the options are read from the checkpoint, and they matter


CAPPED_RUN = r"""
import json, logging, sys, time, types
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from speculators.train.graceful_shutdown import with_graceful_shutdown
from speculators.train.logger import setup_metric_logger, setup_root_logger
from train_speculators import StepRecords

t0 = time.monotonic()
setup_root_logger()  # as train_speculators.main: speculators' console handler, the records before it
records = StepRecords(t0, cap=float(sys.argv[3]))
logging.getLogger().handlers.insert(0, records)
setup_metric_logger("", "run", sys.argv[2])  # what speculators' main does next: its dictConfig
metrics = logging.getLogger("speculators.metrics")

class Loop:  # speculators' shutdown wraps a trainer's loop: the two attributes it uses, and a loop
    checkpointer = types.SimpleNamespace(path=Path(sys.argv[2]))
    saved = []
    def maybe_save_checkpoint(self, label):
        self.saved.append(label)
    @with_graceful_shutdown()
    def run_training(self):
        metrics.info({"val": {"loss_epoch": 2.5}, "epoch": 0}, extra={"step": 0})
        for step in range(10_000):
            metrics.info({"train": {"loss": 3.0 - step / 1e4, "full_acc_0": 0.5}, "global_step": step, "epoch": 0},
                         extra={"step": step})
            time.sleep(0.01)

loop = Loop()
loop.run_training()
print(json.dumps({"saved": loop.saved} | records.summary()))
"""


def test_the_step_records_and_the_cap_work_through_speculators_own_logging_and_shutdown(
    setup: dict, tmp_path: Path
) -> None:
    """``train_speculators.py`` times speculators' steps from its metric records and caps a run by
    wall clock: its records handler survives speculators' own logging setup (a dictConfig that
    replaces its loggers' handlers) and sees each record before speculators' console handler turns
    it into text; the first step past the cap raises what speculators' Ctrl+C handler raises, which
    its graceful shutdown turns into an ``interrupted`` checkpoint, ending the loop."""
    out = json.loads(py(setup["python"], CAPPED_RUN, str(INENV), str(tmp_path), "1.5").splitlines()[-1])
    assert out["saved"] == ["interrupted"] and out["capped"]  # the loop was stopped by the cap, not run to its end
    assert 12 <= out["steps_run"] < 10_000 and out["step_s"] > 0 and out["first_step_s"] is not None
    kept = [r["step"] for r in out["train"]]
    assert kept[:3] == [0, 10, 20] and kept[-1] == out["steps_run"] - 1  # every 10th step, and the last
    assert out["train"][0]["loss"] == 3.0 and out["train"][0]["full_acc_0"] == 0.5
    assert out["val"] == [{"epoch": 0, "step": 0, "loss_epoch": 2.5}]


def test_equal_time_steps_fill_specrigs_seconds_from_the_calibration_run() -> None:
    """The reference's steps for equal training time: specrig's loop seconds over the calibration
    run's step time; the cap allows for its time outside the steps; no step time is a clear error."""
    from specrig.core.errors import ConfigError
    from specrig.drafter.reference import equal_time_steps

    cal = {"seconds": 40.0, "steps_run": 100, "step_s": 0.1}  # 10 s of steps, 30 s outside them
    steps, cap = equal_time_steps(150.0, cal)
    assert steps == 1500 and cap == 1.25 * 150 + 2 * 30 + 30
    # a record with the mean step: the mean counts (steps cost their sum), not the median
    steps, _ = equal_time_steps(150.0, cal | {"mean_step_s": 0.15})
    assert steps == 1000
    # with the later half's mean (early steps compile for new shapes), that one counts
    steps, _ = equal_time_steps(150.0, cal | {"mean_step_s": 0.15, "late_step_s": 0.12})
    assert steps == 1250
    with pytest.raises(ConfigError) as e:
        equal_time_steps(150.0, {"seconds": 5.0, "steps_run": 3, "step_s": None})
    assert "no step time" in e.value.message and "--reference-steps N" in e.value.hint


def _step_times():
    """inenv/step_times.py as the trainers' processes import it (a file beside them, no package)."""
    return load_file(INENV / "step_times.py")


def test_the_step_summary_keeps_the_mean_step_beside_the_median() -> None:
    """One sample a step: the steps vary with its length. Ten warm-up records left out, then 100 gaps,
    90 of 0.1 s and 10 of 1.0 s: the median 0.1 s, the mean 0.19 s, which is what 100 steps cost."""
    mod = _step_times()
    t, records = 5.0, []
    for n in range(111):
        t += 3.0 if n <= 10 else (1.0 if n % 10 == 0 else 0.1)
        records.append((n + 1, t, {"loss": 1.0}))
    out = mod.step_summary(records)
    assert out["steps_run"] == 111 and out["first_step_s"] == 8.0
    assert out["step_s"] == pytest.approx(0.1) and out["mean_step_s"] == pytest.approx(0.19)
    assert out["late_step_s"] == pytest.approx(0.19)  # the later half costs alike here


def test_the_step_summary_times_a_step_by_the_later_half_once_compiling_settles() -> None:
    """Early steps that compile for new shapes (as SpecForge's flex attention does through about step
    50 of a calibration): 50 gaps of 0.2 s, then 50 of 0.1 s. The mean over all says 0.15 s; the
    later half, what the steps of a long run cost, 0.1 s."""
    mod = _step_times()
    t, records = 0.0, []
    for n in range(111):
        t += 3.0 if n <= 10 else (0.2 if n <= 60 else 0.1)
        records.append((n + 1, t, {}))
    out = mod.step_summary(records)
    assert out["mean_step_s"] == pytest.approx(0.15) and out["late_step_s"] == pytest.approx(0.1)
    assert mod.step_summary(records[:11])["late_step_s"] is None  # no step past the warm-up: nothing to time
