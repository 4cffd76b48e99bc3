"""specrig's trainer options that speculators' defaults differ in (what closes the gap to them):
``--norms eagle3.1`` and ``--optimizer muon``, run by the real trainer in the cpu recipe's train
environment on the real SmolLM2 (features computed online by the target), and written where
vLLM reads them. That the 3.1 norms compute what speculators' model computes is proved in
``tests/test_reference_speculators.py`` (the same drafts at every position and step)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from drafter_support import SAMPLES
from specrig.recipe.schema import load_recipe

pytestmark = [pytest.mark.engine, pytest.mark.slow]

ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

PAIRS = [
    ("Write a story about a lighthouse keeper.", "The keeper climbed the stairs every night to light the lamp."),
    ("Explain photosynthesis briefly.", "Plants turn light, water and carbon dioxide into sugar and oxygen."),
    ("What is a prime number?", "A prime has exactly two divisors: one and itself, like 2, 3, 5 and 7."),
    ("Why is the sky blue?", "Air scatters short blue wavelengths of sunlight more than red ones."),
]

OPTIMIZERS = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from eagle3_model import NORMS, Eagle3Draft
from train_optim import build
cfg = {"hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
       "head_dim": 8, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "num_aux": 3, "draft_vocab_size": 20}
out = {}
for kind in ("adamw", "muon"):
    torch.manual_seed(0)
    m = Eagle3Draft(cfg | NORMS["eagle3.1"])
    opt = build(m, kind, 1e-2, 0.01)
    names = {id(p): n for n, p in m.named_parameters()}
    groups = [sorted(names[id(p)] for g in o.param_groups for p in g["params"]) for o in opt.parts]
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    opt.set_lr(0.5)
    lrs = [g["lr"] for g in opt.param_groups]
    for p in m.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    moved = sorted(n for n, p in m.named_parameters() if not torch.equal(p, before[n]))
    again = build(m, kind, 1e-2, 0.01)
    again.load_state_dict(opt.state_dict())
    out[kind] = {"kinds": [type(o).__name__ for o in opt.parts], "groups": groups, "lrs": lrs, "moved": moved,
                 "params": sorted(names.values()), "resumed_lrs": [g["lr"] for g in again.param_groups]}
print(json.dumps(out))
"""


def _train_python() -> str:
    from specrig.env.make import make_env

    return str(make_env(load_recipe("cpu"), "train").python)


def test_muon_takes_the_layers_matrices_and_adamw_the_rest() -> None:
    """``--optimizer muon`` as speculators' default builds it: torch's Muon on every weight matrix of
    the layer (fc, attention, MLP), AdamW on the norms (input_norm included) and on lm_head; both
    stepped together, both scaled by the schedule, both restored from the between-epoch checkpoint."""
    from specrig.drafter.inenv_run import INENV

    proc = subprocess.run([_train_python(), "-c", OPTIMIZERS, str(INENV)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["adamw"]["kinds"] == ["AdamW"] and r["adamw"]["groups"] == [r["adamw"]["params"]]
    assert r["muon"]["kinds"] == ["Muon", "AdamW"]
    matrices, rest = r["muon"]["groups"]
    assert matrices == sorted(
        f"{n}.weight" for n in ("fc", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    )
    assert "lm_head.weight" in rest and "input_norm.weight" in rest and "norm.weight" in rest
    assert sorted(matrices + rest) == r["muon"]["params"]  # every parameter in exactly one
    for kind in ("adamw", "muon"):
        assert r[kind]["moved"] == r[kind]["params"]  # one step moves every weight
        assert set(r[kind]["lrs"]) == {0.005} and set(r[kind]["resumed_lrs"]) == {0.005}


def test_the_trainer_runs_the_eagle31_norms_with_muon_and_the_export_sets_the_keys_vllm_reads(tmp_path: Path) -> None:
    """The real trainer with ``norms`` eagle3.1 and ``optimizer`` muon on the real SmolLM2 (features
    computed online): its weights hold ``input_norm``, its log the options, and the exported config
    sets the three keys vLLM's llama_eagle3 reads; the default writes them off."""
    from specrig.drafter.export import NORM_OPTIONS, drafter_config
    from specrig.drafter.inenv_run import INENV
    from specrig.env.make import make_env
    from specrig.model.folder import prepare_model

    recipe = load_recipe("cpu")
    model = prepare_model(recipe, make_env(recipe, recipe.engine["vllm"].env)).path
    python = _train_python()
    env = __import__("os").environ | ENV

    def run(*args: str) -> str:
        proc = subprocess.run([python, *args], capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        return proc.stdout

    (tmp_path / "samples.jsonl").write_text(run("-c", SAMPLES, str(model), json.dumps(PAIRS), "3"))
    hidden = tmp_path / "hidden"
    run(str(INENV / "hidden_states.py"), str(model), str(tmp_path / "samples.jsonl"), str(hidden), "--aux", "2,15,27")
    settings = {
        "epochs": 2, "lr": 1e-3, "ttt_steps": 2, "draft_vocab": 64, "max_len": 64, "batch_tokens": 128,
        "seed": 0, "max_seconds": 0, "threads": 2, "step_decay": 1.0, "loss_on": "answer",
        "norms": "eagle3.1", "optimizer": "muon", "weight_decay": 0.01,
    }  # fmt: skip
    (tmp_path / "st.json").write_text(json.dumps(settings))
    out = tmp_path / "out"
    out.mkdir()
    run(str(INENV / "train_eagle3.py"), str(model), str(hidden), str(out), str(tmp_path / "st.json"))
    log = json.loads((out / "train_log.json").read_text())
    assert log["steps"] >= 2 and len(log["epochs"]) == 2
    assert all(log["config"][k] is True for k in NORM_OPTIONS)
    names = run(
        "-c",
        "import sys, json; from safetensors import safe_open; "
        "print(json.dumps(sorted(safe_open(sys.argv[1], 'pt').keys())))",
        str(out / "model.safetensors"),
    )
    keys = json.loads(names.strip().splitlines()[-1])
    assert "input_norm.weight" in keys and "fc.weight" in keys  # vLLM loads it as model.input_norm
    target_cfg = json.loads((model / "config.json").read_text())
    on = drafter_config(target_cfg, aux=[2, 15, 27], draft_vocab=64, facts={}, norms="eagle3.1")
    off = drafter_config(target_cfg, aux=[2, 15, 27], draft_vocab=64, facts={})
    assert all(on[k] is True and off[k] is False for k in NORM_OPTIONS)


SCHEDULE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from train_eagle3 import Schedule
slow = Schedule(plan=[], total_steps=1344, warm=67, max_seconds=240.0)  # the cpu default's plan on a slow host
steps = Schedule(plan=[], total_steps=1344, warm=67, max_seconds=0.0)
print(json.dumps({
    "slow": [slow.lr_factor(s, t) for s, t in ((0, 0.0), (2, 6.0), (3, 12.0), (30, 120.0), (55, 240.0))],
    "steps": [steps.lr_factor(s, 0.0) for s in (0, 33, 66, 67, 1344)],
}))
"""


def test_a_run_cut_by_its_time_budget_warms_up_and_decays_by_time() -> None:
    """The schedule's warm-up is the first 5% of the planned steps or of ``max_seconds``, whichever
    ends first: on a slow host (the cpu default's 14 planned epochs, 55 steps done in its 240 s) the
    rate is at its peak after 12 s and decays to 10% by the budget's end, instead of the whole run
    staying in a warm-up sized for 1,344 steps. A run without a time budget goes by steps alone."""
    from specrig.drafter.inenv_run import INENV

    proc = subprocess.run([_train_python(), "-c", SCHEDULE, str(INENV)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    slow, steps = r["slow"], r["steps"]
    assert abs(slow[0] - 1 / 67) < 1e-9 and abs(slow[1] - 0.5) < 1e-9  # by time: 6 s of 12
    assert abs(slow[2] - 1.0) < 0.01  # warm after 5% of the time, 4 steps in
    assert 0.5 < slow[3] < 0.6 and abs(slow[4] - 0.1) < 1e-9  # cosine by time: half-way, then the floor
    assert steps[:3] == [1 / 67, 34 / 67, 1.0] and abs(steps[3] - 1.0) < 1e-6 and abs(steps[4] - 0.1) < 1e-9


BATCHES = r"""
import json, random, sys, torch
sys.path.insert(0, sys.argv[1])
from train_batches import batches
lens = [random.Random(n).randint(20, 700) for n in range(400)]  # 700 > max_len: cut to 640
samples = [{"ids": torch.zeros(n, dtype=torch.long), "n": i} for i, n in enumerate(lens)]
out = {}
for bt in (1536, 768, 512):
    plan = batches(samples, bt, 640, random.Random(0))
    again = batches(samples, bt, 640, random.Random(0))
    out[bt] = {"seen": sorted(s["n"] for b in plan for s in b),
               "padded": [len(b) * max(min(len(s["ids"]), 640) for s in b) for b in plan],
               "sizes": [len(b) for b in plan], "same": [[s["n"] for s in b] for b in plan] == [[s["n"] for s in b] for b in again]}
print(json.dumps(out))
"""


def test_an_epoch_is_every_sample_once_in_batches_of_at_most_batch_tokens_padded() -> None:
    """The trainer's batches (``batch_tokens``, the cpu default 768): every sample
    once an epoch, each batch at most ``batch_tokens`` padded tokens unless it is one sample longer
    than that (cut to ``max_len``), the order the seed's; smaller batches make more steps of the same
    tokens, which took the CPU's held-out mean length from 1.40 to 1.44 at equal tokens (docs/drafter.md)."""
    from specrig.drafter.inenv_run import INENV

    proc = subprocess.run([_train_python(), "-c", BATCHES, str(INENV)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = {int(k): v for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}
    for bt, plan in r.items():
        assert plan["seen"] == list(range(400)) and plan["same"], bt
        assert all(p <= bt or n == 1 for p, n in zip(plan["padded"], plan["sizes"], strict=True)), bt
        assert max(plan["padded"]) <= max(bt, 640)
    steps = {bt: len(plan["sizes"]) for bt, plan in r.items()}
    assert steps[1536] < steps[768] < steps[512], steps


BUCKETS = r"""
import json, random, sys, torch
sys.path.insert(0, sys.argv[1])
from torch import nn
from eagle3_model import NORMS, Eagle3Draft
from train_batches import batches, collate
from train_eagle3 import Drafter, Loop, batch_loss
lens = [random.Random(n).randint(20, 700) for n in range(4000)]
samples = [{"ids": torch.zeros(n, dtype=torch.long), "n": i} for i, n in enumerate(lens)]
out = {"plans": {}}
for bucket in (1, 64):
    plan = batches(samples, 8192, 640, random.Random(0), bucket)
    shapes = [tuple(collate(b, 640, bucket)["ids"].shape) for b in plan]
    out["plans"][bucket] = {"seen": sorted(s["n"] for b in plan for s in b), "shapes": shapes}
cfg = {"hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
       "head_dim": 8, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "num_aux": 3, "draft_vocab_size": 20}
torch.manual_seed(0)
model = Eagle3Draft(cfg | NORMS["eagle3.1"]).eval()
for p in model.parameters():  # the zero-initialised projections too: every path carries signal
    p.data.normal_(0, 0.2)
drafter = Drafter(model, cfg, torch.arange(20), 1.0, nn.Embedding(50, 32), torch.ones(32), torch.randn(20, 32))
g = torch.Generator().manual_seed(1)
batch = [{"ids": torch.randint(0, 50, (n,), generator=g), "prompt_len": 5, "aux": torch.randn(n, 3, 32, generator=g),
          "last": torch.randn(n, 32, generator=g)} for n in (23, 37, 41)]
lp = Loop({"loss_on": "answer"}, torch.device("cpu"), 3, 640, torch.tensor([1.0, 0.8, 0.64]), 1e-5,
          torch.autocast("cpu", enabled=False))
with torch.no_grad():
    d = {b: collate(batch, 640, b) for b in (1, 16, 64)}
    out["t"] = {b: x["ids"].shape[1] for b, x in d.items()}
    out["loss"] = {b: batch_loss(drafter, None, x, lp).item() for b, x in d.items()}
print(json.dumps(out))
"""


def test_a_length_bucket_bounds_the_batch_shapes_and_leaves_the_loss_as_it_was() -> None:
    """``--length-bucket 64``: an epoch's 8,192-token batches of lengths up to 640 take at most
    two shapes per bucket (full batches and the one that ends it) instead of one for nearly every
    batch, still every sample once; the padding it adds is masked, so a batch's loss is the same
    to float precision at buckets 1, 16 and 64 (the H200's first-epoch steps paid for each new
    shape: studies/2026-12-05-data-curve/test_replay.py)."""
    from specrig.drafter.inenv_run import INENV

    proc = subprocess.run([_train_python(), "-c", BUCKETS, str(INENV)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    plain, bucketed = r["plans"]["1"], r["plans"]["64"]
    assert plain["seen"] == bucketed["seen"] == list(range(4000))
    assert all(t % 64 == 0 and b * t <= 8192 for b, t in bucketed["shapes"])
    shapes = {bucket: len({tuple(x) for x in p["shapes"]}) for bucket, p in (("1", plain), ("64", bucketed))}
    assert shapes["64"] <= 2 * 10 and shapes["1"] > 5 * shapes["64"], shapes
    assert r["t"] == {"1": 41, "16": 48, "64": 64}
    losses = list(r["loss"].values())
    assert losses[0] > 0 and max(losses) - min(losses) < 1e-5 * losses[0], r["loss"]
