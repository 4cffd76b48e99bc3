"""The drafter's GPU-scale choices, checked without a GPU: the recipe's [drafter]
defaults, multi-turn and bench-shaped prompts, the requests they make, the
data-size curve's registry and the bench's --drafter sweep, the target identity a
drafter carries, servers started together on a GPU (their memory shares), and in
a real environment that the features the trainer computes online are the ones
the hidden-state stage stores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specrig.core.errors import ConfigError
from specrig.drafter.generate import request_for
from specrig.drafter.prompts import DrafterPrompt, select_prompts
from specrig.drafter.settings import DEFAULT, QUICK, DrafterSettings, for_recipe
from specrig.recipe.schema import load_recipe

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _recipe_with(tmp_path: Path, extra: str) -> Path:
    d = tmp_path / "recipes"
    d.mkdir(exist_ok=True)
    (d / "cpu.toml").write_text((ROOT / "recipes" / "cpu.toml").read_text() + extra)
    return d / "cpu.toml"


def test_gpu_recipe_defaults_and_quick_come_from_its_drafter_table() -> None:
    r = load_recipe("hopper-sm90")
    s = for_recipe(r, quick=False)
    assert (s.samples, s.features, s.turns, s.train_env) == (20000, "online", "all", "vllm")
    assert s.server_args == ("--max-num-seqs", "512", "--stream-interval", "16") and not s.quick
    # why each setting (the studies' replays): speculators' loss mask and EAGLE 3.1 norms, 1.87 -> 2.67 held out
    # on the H200 (studies/2026-12-05-gap-variants); speculators' step size, 2.65 -> 3.16
    # (studies/2026-12-05-h200-batch-8k); 20k samples, two epochs, 3.11 -> 3.44 (studies/2026-12-06-training-budget)
    assert (s.loss_on, s.norms, s.optimizer) == ("answer", "eagle3.1", "adamw")
    assert s.batch_tokens == 8192
    assert s.train_seconds == 300
    q = for_recipe(r, quick=True)
    assert q.quick and q.samples == 512 and q.features == "online"  # the host's path, a quick size
    assert for_recipe(load_recipe("cpu"), quick=False) == DEFAULT  # the CPU default is the built-in one
    assert for_recipe(load_recipe("cpu"), quick=True) == QUICK


def test_unknown_or_mistyped_drafter_keys_are_named(tmp_path: Path) -> None:
    """The recipe's [drafter] table is typed by the settings' own model: refused when the recipe
    is loaded, by dotted key, before any drafter stage (the same model types the flags)."""
    with pytest.raises(ConfigError) as err:
        load_recipe(_recipe_with(tmp_path, "\n[drafter]\nsampels = 10\n"))
    assert "drafter.sampels: unknown key; did you mean 'drafter.samples'?" in err.value.message
    with pytest.raises(ConfigError) as err:
        load_recipe(_recipe_with(tmp_path, '\n[drafter]\nsamples = "many"\n[drafter.quick]\nsamples = 0\n'))
    assert "drafter.samples: Input should be a valid integer" in err.value.message
    assert "drafter.quick.samples: Input should be greater than or equal to 1" in err.value.message
    with pytest.raises(ConfigError, match="bench_shaped: Input should be less than or equal to 1"):
        DrafterSettings(bench_shaped=1.5)
    # the chain: built-in defaults, the recipe's table ([drafter.quick] for --quick), then the flags
    r = load_recipe(_recipe_with(tmp_path, "\n[drafter]\nsamples = 500\nepochs = 2\n[drafter.quick]\nsamples = 9\n"))
    assert (for_recipe(r, quick=False).samples, for_recipe(r, quick=False).epochs) == (500, 2)
    assert (for_recipe(r, quick=True).samples, for_recipe(r, quick=True).epochs) == (9, 2)
    assert for_recipe(r, quick=False, samples=7, epochs=None).samples == 7
    assert for_recipe(r, quick=False, aux_layers="2,15,27").aux_layers == (2, 15, 27)
    with pytest.raises(ConfigError, match=r"aux_layers\.1: Input should be a valid integer"):
        for_recipe(r, quick=False, aux_layers="2,x")


def test_all_turns_bench_shaped_prompts_and_an_untouched_heldout_split() -> None:
    from specrig.model.datasets import sharegpt_file

    s = DrafterSettings(samples=400, heldout=40, turns="all", bench_shaped=0.25, max_prompt_chars=3000)
    prompts = select_prompts(s, sharegpt_file())
    train = [p for p in prompts if p.split == "train"]
    held = [p for p in prompts if p.split == "heldout"]
    assert len(train) == 400 and len(held) == 40
    conv = lambda pid: pid.split("-t")[0]  # noqa: E731 (a turn's conversation)
    assert not {conv(p.id) for p in train} & {conv(p.id) for p in held}  # no held-out conversation trains
    later = [p for p in train if p.context]
    assert later and all(p.format == "chat" for p in later)  # later turns carry their conversation
    bench = [p for p in train if p.format == "bench"]
    first = [p for p in train if not p.context]
    assert 0.12 < len(bench) / len(first) < 0.40 and not any(p.format == "bench" for p in held)
    assert all(len(p.text) + sum(len(h) + len(g) for h, g in p.context) <= 3000 for p in prompts)
    # stable: the same settings choose the same prompts and formats
    again = select_prompts(s, sharegpt_file())
    assert [(p.id, p.format) for p in again] == [(p.id, p.format) for p in prompts]


def test_bench_shaped_and_multi_turn_requests() -> None:
    bench = request_for(DrafterPrompt("b", "train", "bench", "Explain TCP."), "m", 256, 512)
    assert bench[0] == "/v1/completions" and bench[1]["ignore_eos"] is True and bench[1]["max_tokens"] == 512
    assert bench[1]["temperature"] == 0 and bench[1]["prompt"] == "Explain TCP."
    chat = request_for(DrafterPrompt("c", "train", "chat", "and UDP?", context=(("TCP?", "A stream."),)), "m", 256)
    roles = [m["role"] for m in chat[1]["messages"]]
    assert roles == ["user", "assistant", "user"] and chat[1]["messages"][-1]["content"] == "and UDP?"
    assert "ignore_eos" not in chat[1] and chat[1]["max_tokens"] == 256


def test_curve_registry_and_the_drafter_sweep(cache: Path, tmp_path: Path) -> None:
    from specrig.lab.plan import spec_variants
    from specrig.model.drafters import register_curve

    r = load_recipe("cpu")
    with pytest.raises(ConfigError) as err:
        spec_variants(r, ["eagle3"], None, ("@curve",))
    assert "--curve" in (err.value.hint or "")
    folders = []
    for n in (1000, 4000):
        f = tmp_path / f"eagle3-n{n}"
        f.mkdir()
        (f / "config.json").write_text("{}")
        folders.append({"samples": n, "drafter": str(f)})
    register_curve("cpu", folders, quick=False)
    v = spec_variants(r, ["eagle3", "ngram"], (1, 3), ("@curve", "@eagle3-trained-shifted"))
    names = [i.name for i, _ in v]
    assert names == [
        "eagle3-n1000-k1",
        "eagle3-n1000-k3",
        "eagle3-n4000-k1",
        "eagle3-n4000-k3",
        "eagle3-trained-shifted-k1",
        "eagle3-trained-shifted-k3",
        "ngram-k1",
        "ngram-k3",
    ]
    spec = {i.name: sp for i, sp in v}
    ident = {i.name: i for i, _ in v}
    # the identity travels typed: the recipe entry, k and drafter label, never parsed back from the name
    assert ident["eagle3-n4000-k3"].model_dump() == {
        "spec": "eagle3",
        "k": 3,
        "drafter": "n4000",
        "engine": None,
        "eager": False,
    }
    assert ident["ngram-k1"].spec == "ngram" and ident["ngram-k1"].drafter is None
    assert (
        spec["eagle3-n4000-k3"].model == folders[1]["drafter"] and spec["eagle3-n4000-k3"].num_speculative_tokens == 3
    )
    assert spec["eagle3-trained-shifted-k1"].model == "@eagle3-trained-shifted" and spec["ngram-k3"].model is None
    with pytest.raises(ConfigError):
        spec_variants(r, ["ngram"], None, ("@curve",))  # no drafter-based configuration to sweep


def test_a_drafter_for_another_target_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import hashlib

    from specrig.cli import main
    from specrig.lab.plan import _refuse_other_target
    from specrig.specdec.layers import target_mismatch

    target = tmp_path / "target"
    target.mkdir()
    tcfg = {"hidden_size": 576, "vocab_size": 49152, "num_hidden_layers": 30}
    (target / "config.json").write_text(json.dumps(tcfg))
    raw = (target / "config.json").read_bytes()
    drafter = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": 576,
        "target_hidden_size": 576,
        "vocab_size": 49152,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 15, 27]},
        "specrig": {
            "trained": True,
            "trained_aux_positions": [2, 15, 27],
            "target_config_sha256": hashlib.sha256(raw).hexdigest(),
        },
    }
    assert target_mismatch(drafter, target) is None
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps(tcfg | {"num_hidden_layers": 24}))
    assert "another target" in (target_mismatch(drafter, other) or "")
    wide = {k: v for k, v in drafter.items() if k != "specrig"} | {"target_hidden_size": 960, "hidden_size": 960}
    assert "hidden_size is 960, the target's 576" in (target_mismatch(wide, target) or "")
    d = tmp_path / "eagle3-x"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(drafter))
    with pytest.raises(ConfigError) as err:
        _refuse_other_target("eagle3", d, other)
    assert "was not made for the served model other" in err.value.message
    _refuse_other_target("eagle3", d, target)  # its own target: no complaint
    assert main(["drafter-check", str(d), "--target-config", str(other)]) == 1
    assert "WRONG TARGET" in capsys.readouterr().err
    assert main(["drafter-check", str(d), "--target-config", str(target)]) == 0


def test_the_same_target_written_by_another_converter_is_accepted(tmp_path: Path) -> None:
    """A drafter trained on one host is accepted on another whose target's config.json, converted
    from the same GGUF, carries another transformers version stamp (5.12.1's against 5.19.0's): the
    fingerprint ignores how the config was written."""
    import hashlib

    from specrig.core.digest import config_fingerprint
    from specrig.specdec.layers import target_mismatch

    here = {"hidden_size": 576, "vocab_size": 49152, "num_hidden_layers": 30, "transformers_version": "5.19.0"}
    there = tmp_path / "there"
    there.mkdir()
    (there / "config.json").write_text(
        json.dumps(here | {"transformers_version": "5.12.1", "dtype": "float16"}, indent=1)
    )
    meta = {"target_config_fingerprint": config_fingerprint(here), "target_layers": 30, "target": "smollm2"}
    drafter = {"hidden_size": 576, "target_hidden_size": 576, "vocab_size": 49152, "specrig": meta}
    assert target_mismatch(drafter, there) is None
    assert target_mismatch(drafter, here) is None  # a dict is checked too
    assert "target_config_fingerprint" in (target_mismatch(drafter, here | {"num_hidden_layers": 24}) or "")
    assert "(30 layers then, 24 now)" in (target_mismatch(drafter, here | {"num_hidden_layers": 24}) or "")
    # a drafter from before fingerprints (the file's sha256) is held to the exact file, as it was
    legacy = drafter | {"specrig": {"target_config_sha256": hashlib.sha256(json.dumps(here).encode()).hexdigest()}}
    assert "target_config_sha256" in (target_mismatch(legacy, there) or "")


def _servers(n: int, gib: float, args: list[str]):
    from specrig.engine import get_engine
    from specrig.lab.plan import BenchPlan, ConfigPlan
    from specrig.lab.results import HostInfo, LoadPoint, Workload
    from specrig.lab.servers import Servers

    r = load_recipe("hopper-sm90")
    plan = BenchPlan(
        startup_timeout_s=60.0,
        recipe=r.name,
        recipe_path=str(r.path),
        engine="vllm",
        results_dir="/nonexistent",
        configs=[ConfigPlan(name=c) for c in ("baseline", "a", "b", "c")],
        workload=Workload(
            points=[LoadPoint(concurrency=1), LoadPoint(concurrency=4)],
            repeat=2,
            stall_timeout_s=60.0,
            first_token_timeout_s=60.0,
        ),
        engine_args=args,
        host=HostInfo.model_validate(
            {"gpus": [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0", "memory_gib": gib}]}
        ),
        launch_ahead=n,
    )
    return Servers(plan, r, get_engine("vllm"), Path("/nonexistent"))


def test_servers_started_together_share_the_gpu() -> None:
    s = _servers(3, 140.0, [])
    n, args = s._share()
    assert n == 3
    util = float(args[args.index("--gpu-memory-utilization") + 1])
    kv = int(args[args.index("--kv-cache-memory-bytes") + 1])
    assert util == pytest.approx(0.85 / 3, abs=1e-4)  # the recipe's 0.85, split three ways
    assert kv == pytest.approx((0.85 / 3 * 140 - 4) * 2**30, rel=1e-3)
    # in the cases' order (repeat 0: baseline, a, b, c; then repeat 1), skipping what is measured
    a, b, c, base = (s.plan.named(x).id for x in ("a", "b", "c", "baseline"))
    assert s._ahead((a, 0), done=set()) == [(a, 0), (b, 0), (c, 0)]
    assert s._ahead((c, 0), done={(base, 1)}) == [(c, 0), (a, 1), (b, 1)]
    two = s._share(2)[1]  # a batch of two (the last of the plan) splits the memory two ways
    assert float(two[two.index("--gpu-memory-utilization") + 1]) == pytest.approx(0.85 / 2, abs=1e-4)
    assert _servers(3, 10.0, [])._share()[0] == 1  # a small GPU: one at a time
    assert _servers(8, 40.0, [])._share()[0] == 6  # as many as leave each >= 1 GiB of KV: 0.85 x 40 / 6 - 4 = 1.7
    one = _servers(1, 140.0, [])
    assert one._share() == (1, []) and one._ahead((a, 0), set()) == [(a, 0)]
    sglang = _servers(4, 140.0, [])
    sglang.engine = __import__("specrig.engine", fromlist=["get_engine"]).get_engine("sglang")
    assert sglang._share() == (1, [])  # sizes its cache from the free memory: one at a time
    cpu_plan = _servers(4, 140.0, [])
    cpu_plan.recipe = load_recipe("cpu")
    assert cpu_plan._share() == (1, [])  # a CPU host never shares


def test_online_features_equal_stored_ones(tmp_path: Path) -> None:
    """In a real environment: the features the trainer computes online on its device are
    the ones the hidden-state stage stores (same aux positions, bf16)."""
    from specrig.core.paths import subdir
    from specrig.drafter.inenv_run import INENV

    python = subdir("envs") / "cpu-train" / "bin" / "python"
    models = sorted(subdir("models").glob("SmolLM2-135M-Instruct*"))
    if not python.exists() or not models:
        pytest.skip("needs the cpu recipe's train environment and the converted target (made by the e2e tests)")
    code = r"""
import sys, json, torch
sys.path.insert(0, sys.argv[1])
from eagle3_model import TargetFeatures
from transformers import AutoModelForCausalLM
target = sys.argv[2]
ids = torch.tensor([[1, 504, 3458, 314, 253, 1345, 30, 378, 1085, 2]])
f = TargetFeatures(target, [2, 15, 27], torch.device("cpu"), torch.float32)
aux, last, labels = f(ids, torch.ones_like(ids, dtype=torch.bool), labels=True)
m = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
with torch.no_grad():
    out = m(input_ids=ids, output_hidden_states=True)
ref = torch.stack([out.hidden_states[k][0] for k in (2, 15, 27)], dim=1)
print(json.dumps({"aux": (aux[0] - ref).abs().max().item(), "labels": bool((labels[0] == out.logits[0].argmax(-1)).all()),
                  "shape": list(aux.shape)}))
"""
    proc = subprocess.run(
        [str(python), "-c", code, str(INENV), str(models[-1])], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["shape"] == [1, 10, 3, 576] and r["aux"] < 1e-5 and r["labels"]


def test_the_drafter_cli_names_a_bad_curve() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "specrig.cli", "drafter", "--recipe", "cpu", "--curve", "1k"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "--curve" in proc.stderr and "Traceback" not in proc.stderr


def test_the_drafter_cli_names_bad_reference_steps() -> None:
    """Neither a count nor auto: named, with what to write, before any stage runs."""
    cmd = [sys.executable, "-m", "specrig.cli", "drafter", "--recipe", "cpu", "--reference", "speculators"]
    proc = subprocess.run([*cmd, "--reference-steps", "lots"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--reference-steps: 'lots'" in proc.stderr and "--reference-steps auto" in proc.stderr


def test_generation_survives_a_dropped_connection(tmp_path: Path) -> None:
    """Seen on the H200 at 512 requests in flight: the server closed kept-alive connections
    as they were reused and the whole generation stopped. The drafter's runs retry a dropped
    connection (3 times, the bench's client's option): a request whose connection drops is sent
    again; one that keeps failing still fails, named."""
    import asyncio

    import aiohttp

    from specrig.serve.http import Transport, _post

    calls = {"n": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        calls["n"] += 1
        if calls["n"] <= 2:  # drop the first two requests without a word
            writer.close()
            return
        body = b'{"ok": true}'
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    async def main() -> tuple[int, int, str]:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with server, Transport(url, 1, retries=3, retry_backoff_s=0.01) as drafter:
            r = await _post(drafter, "/v1/completions", {"prompt": "x"}, 10)
            sent = calls["n"]
            calls["n"] = -10  # from now on every request is dropped
            try:
                await _post(drafter, "/v1/completions", {"prompt": "x"}, 10)
            except aiohttp.ClientError as exc:
                return r.status, sent, type(exc).__name__
        return r.status, sent, "no error"

    status, sent, err = asyncio.run(main())
    assert status == 200 and sent == 3 and err in ("ServerDisconnectedError", "ClientOSError")


def test_offline_acceptance_as_the_engine_meets_it() -> None:
    """Right drafts in runs (a model repeating itself): counting every position says 50%,
    the engine (drafting only where a verification step ends) meets 33% at k=1; the bench
    compares its online figure with the engine's walk."""
    from specrig.core.paths import subdir
    from specrig.drafter.inenv_run import INENV
    from specrig.lab.results import OfflineEval

    python = subdir("envs") / "cpu-train" / "bin" / "python"
    if not python.exists():
        pytest.skip("needs the cpu recipe's train environment (made by the e2e tests)")
    code = r"""
import sys, json, torch
sys.path.insert(0, sys.argv[1])
from eagle3_model import served_walk
rows = torch.zeros(20, 2, dtype=torch.bool); rows[:10] = True   # 10 right, then 10 wrong
alt = torch.zeros(20, 2, dtype=torch.bool); alt[::2, 0] = True  # right and wrong alternate: no runs
print(json.dumps([served_walk([rows], 1), served_walk([rows], 2), served_walk([alt], 1)]))
"""
    proc = subprocess.run([str(python), "-c", code, str(INENV)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    k1, k2, alt = json.loads(proc.stdout.strip().splitlines()[-1])
    assert k1["drafts"] == 15 and k1["acceptance_rate"] == pytest.approx(5 / 15)
    assert k2["drafts"] == 12 and k2["per_position"] == pytest.approx([4 / 12, 4 / 12])
    assert alt["acceptance_rate"] == 1.0  # each accepted draft jumps over the wrong start: the walk can be higher too
    o = OfflineEval(acceptance_rate=0.5, per_position=[0.5, 0.3], walk={"1": k1, "2": k2})
    assert o.rate_at(1) == pytest.approx(5 / 15) and o.per_position_at(2) == pytest.approx([1 / 3, 1 / 3])
    assert OfflineEval(acceptance_rate=0.5, per_position=[0.5, 0.3]).rate_at(2) == pytest.approx(0.4)


def test_one_drafter_is_served_what_it_was_trained_on_by_every_engine(cache: Path, tmp_path: Path) -> None:
    """vLLM feeds the input of layer k for aux id k, SGLang the output (position k + 1): the
    drafter trained on positions [2, 15, 27] is served to SGLang as a copy with ids [1, 14, 26],
    its shifted twin (one position earlier) with [0, 13, 25]; vLLM gets the folders as they are."""
    from safetensors_support import write_safetensors
    from specrig.model.folder import for_engine
    from specrig.specdec.layers import check_drafter

    def drafter(name: str, ids: list[int], shift: int = 0) -> Path:
        d = tmp_path / name
        d.mkdir()
        meta = {"trained": True, "trained_aux_positions": [2, 15, 27]} | ({"served_shift": shift} if shift else {})
        cfg = {
            "architectures": ["LlamaForCausalLMEagle3"],
            "eagle_aux_hidden_state_layer_ids": ids,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids},
            "specrig": meta,
        }
        (d / "config.json").write_text(json.dumps(cfg))
        write_safetensors(d / "model.safetensors", {"w": ("F32", [2], b"\x00" * 8)})  # a whole file (checked on copy)
        return d

    good, twin = drafter("eagle3-x", [2, 15, 27]), drafter("eagle3-x-shifted", [1, 14, 26], shift=-1)
    assert for_engine(str(good), "vllm") == str(good)
    served = Path(for_engine(str(good), "sglang"))
    cfg = json.loads((served / "config.json").read_text())
    assert (
        cfg["eagle_aux_hidden_state_layer_ids"]
        == [1, 14, 26]
        == cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    )
    assert (served / "model.safetensors").read_bytes() == (good / "model.safetensors").read_bytes()
    assert cfg["specrig"]["served_for"] == "sglang"
    assert not check_drafter(served, engine="sglang").mismatch  # consistent on SGLang
    assert check_drafter(good, engine="sglang").mismatch  # the vLLM folder would be one layer off there
    assert for_engine(str(good), "sglang") == str(served)  # made once
    twin_served = json.loads((Path(for_engine(str(twin), "sglang")) / "config.json").read_text())
    assert twin_served["eagle_aux_hidden_state_layer_ids"] == [0, 13, 25]  # still exactly one layer off


def test_the_answer_only_loss_counts_only_drafted_answer_tokens() -> None:
    """``--loss-on answer`` (speculators' and EAGLE's mask, an A/B against specrig's all-position
    loss on the H200): draft step j at base position i learns the target's distribution at
    p = i+1+j, which must be inside the sample; with answer, the token it drafts (at p+1) must
    also be the target's answer, not the prompt; padding never counts."""
    from specrig.drafter.inenv_run import INENV
    from specrig.env.make import make_env

    recipe = load_recipe("cpu")
    python = make_env(recipe, "train").python
    code = r"""
import sys, json, torch
sys.path.insert(0, sys.argv[1])
from train_eagle3 import collate, loss_positions
batch = [{"ids": torch.arange(8), "prompt_len": 3}, {"ids": torch.arange(6), "prompt_len": 5}]
d = collate(batch, max_len=8)
out = {on: [loss_positions(d["lens"], d["plens"], 8 - 1 - j, j, on).int().tolist() for j in (0, 1)]
       for on in ("all", "answer")}
print(json.dumps({"plens": d["plens"].tolist(), "lens": d["lens"].tolist()} | out))
"""
    proc = subprocess.run([str(python), "-c", code, str(INENV)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["plens"] == [3, 5] and r["lens"] == [8, 6]
    # step 0: base i drafts token i+2; sample 1 has tokens 0..7 (its answer from 3), sample 2 tokens 0..5
    # (its answer from 5)
    assert r["all"][0] == [[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]]
    assert r["answer"][0] == [[0, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0]]
    assert r["answer"][1] == [[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0]]  # step 1: base i drafts token i+3
