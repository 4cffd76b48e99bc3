"""``load_format = "random"``: a model given by its shape, its seeded random weights written once by
specrig (``model/inenv/write_random.py`` in the engine's environment) and loaded by the engine as any
checkpoint, so the target and itself as its draft model hold the same bytes (the draft-model oracle
on a DeepSeek-V3 / Kimi-K2.5 shape, whose INT4 experts an engine's dummy loader leaves unfilled).

On the real cpu recipe environment (its torch, safetensors and compressed-tensors): a small
DeepSeek-V3 shape with INT4 experts is written as safetensors shards with an index, every tensor
named and shaped as the Hugging Face checkpoints are, its size what the roofline reads from the
config, the packed experts unpacked by compressed-tensors itself to 4-bit values of the shape they
declare; the same seed gives the same bytes, another seed another checkpoint; prepare_model writes
it once and reuses it; and the recipe refuses what cannot work before anything runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from safetensors_support import write_safetensors
from specrig.model.entry import safetensors_header
from specrig.recipe.model import ModelShape, ModelSpec

pytestmark = [pytest.mark.engine]

INENV = Path(__file__).resolve().parents[1] / "src" / "specrig" / "model" / "inenv"

SHAPE = {  # DeepSeek-V3's architecture (Kimi-K2.5's text model), a few MB of it
    "architecture": "DeepseekV3ForCausalLM",
    "model_type": "deepseek_v3",
    "hidden_size": 256,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 48,
    "intermediate_size": 512,
    "vocab_size": 1024,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "moe_intermediate_size": 128,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "q_lora_rank": 64,
    "kv_lora_rank": 64,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
    "expert_bits": 4,
    "quantize_experts": True,
    "expert_group_size": 32,
}


@pytest.fixture(scope="module")
def python() -> Path:
    from specrig.env.make import make_env
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe("cpu")
    return Path(make_env(recipe, recipe.engine["vllm"].env).python)


@pytest.fixture(scope="module")
def written(python: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The shape written once with seed 0, in shards of 2 MB (several), and what the writer said."""
    out = tmp_path_factory.mktemp("random") / "m"
    return out, _write(python, out, seed=0, shard_gb=0.002)


def _write(python: Path, folder: Path, seed: int, shard_gb: float = 4.0) -> dict:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(ModelShape.model_validate(SHAPE).config_json()))
    args = [str(python), str(INENV / "write_random.py"), str(folder), "--seed", str(seed), "--shard-gb", str(shard_gb)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0].startswith("progress ")
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_checkpoint_is_named_shaped_and_sized_as_the_hub_ones(written: tuple[Path, dict]) -> None:
    from specrig.model.weights import weight_read, weight_read_from_config

    out, done = written
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert done["files"] == len(files) > 1 and all(f.endswith(f"-of-{len(files):05d}.safetensors") for f in files)
    headers = {}
    for f in files:
        headers |= {k: v for k, v in safetensors_header(out / f)[0].items() if k != "__metadata__"}
    assert set(headers) == set(index["weight_map"])
    assert sum(h["data_offsets"][1] - h["data_offsets"][0] for h in headers.values()) == index["metadata"]["total_size"]
    # multi-head latent attention, a dense first layer, then the router, shared and INT4 routed experts
    assert headers["model.layers.0.self_attn.kv_a_proj_with_mqa.weight"]["shape"] == [64 + 16, 256]
    assert headers["model.layers.0.self_attn.q_b_proj.weight"]["shape"] == [4 * (32 + 16), 64]
    assert headers["model.layers.0.mlp.down_proj.weight"]["shape"] == [256, 512]
    assert headers["model.layers.2.mlp.gate.e_score_correction_bias"]["dtype"] == "F32"
    assert headers["model.layers.2.mlp.shared_experts.up_proj.weight"]["dtype"] == "BF16"
    packed = headers["model.layers.2.mlp.experts.7.down_proj.weight_packed"]
    assert packed["dtype"] == "I32" and packed["shape"] == [256, 128 // 8]
    assert headers["model.layers.2.mlp.experts.7.down_proj.weight_scale"]["shape"] == [256, 128 // 32]
    assert "model.layers.1.mlp.experts.0.gate_proj.weight" not in headers and "lm_head.weight" in headers
    # what the roofline reads from the headers is what it estimated from the config before they existed
    cfg = json.loads((out / "config.json").read_text())
    assert weight_read(out).total_params == pytest.approx(weight_read_from_config(cfg).total_params, rel=0.01)


def test_compressed_tensors_unpacks_the_experts(python: Path, written: tuple[Path, dict]) -> None:
    out = written[0]
    script = """
import json, sys
from pathlib import Path
from safetensors.torch import load_file
from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
folder = Path(sys.argv[1])
t = {}
for f in sorted(folder.glob("*.safetensors")):
    t |= load_file(str(f))
p = "model.layers.1.mlp.experts.5.gate_proj."
shape = tuple(t[p + "weight_shape"].tolist())
w = unpack_from_int32(t[p + "weight_packed"], 4, shape)
print(json.dumps({"shape": list(w.shape), "min": int(w.min()), "max": int(w.max()), "distinct": int(w.unique().numel())}))
"""
    proc = subprocess.run([str(python), "-c", script, str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.splitlines()[-1])
    assert r["shape"] == [128, 256] and r["min"] == -8 and r["max"] == 7 and r["distinct"] == 16


def test_the_seed_decides_the_bytes(python: Path, written: tuple[Path, dict], tmp_path: Path) -> None:
    """The same seed again (in other shards) gives every tensor the same bytes; another seed, other bytes."""
    from safetensors_support import read_tensors

    def tensors(folder: Path) -> dict:
        out: dict = {}
        for f in sorted(folder.glob("*.safetensors")):
            out |= read_tensors(f)
        return out

    _write(python, tmp_path / "again", seed=0)
    _write(python, tmp_path / "other", seed=1)
    first = tensors(written[0])
    assert tensors(tmp_path / "again") == first != tensors(tmp_path / "other")


def test_the_recipe_refuses_what_cannot_work() -> None:
    base = {"served_name": "x", "tokenizer": "@model", "shape": SHAPE}
    assert ModelSpec.model_validate(base | {"load_format": "random"}).engine_load_format == "auto"
    assert ModelSpec.model_validate(base | {"load_format": "dummy"}).engine_load_format == "dummy"
    with pytest.raises(ValidationError, match='set load_format = "dummy"'):
        ModelSpec.model_validate(base)
    with pytest.raises(ValidationError, match="writes weights for a declared"):
        ModelSpec.model_validate({"served_name": "x", "path": "/m", "load_format": "random"})


def test_a_deepseek_v3_draft_model_is_given_to_vllm_as_the_same_network(tmp_path: Path, monkeypatch) -> None:
    """vLLM reads a ``deepseek_v3`` draft model as its MTP module; specrig gives it a copy labelled
    ``deepseek_v2`` (the same model class and code), weights hard-linked, made once; the engine
    knows the copy for the target itself (a dummy target's copy stays dummy)."""
    from specrig.engine.vllm import _itself
    from specrig.model.folder import as_vllm_draft_model

    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    target = tmp_path / "target"
    target.mkdir()
    cfg = ModelShape.model_validate(SHAPE).config_json()
    (target / "config.json").write_text(json.dumps(cfg))
    write_safetensors(target / "model.safetensors", {"model.norm.weight": ("BF16", [2], b"\x80\x3f\x80\x3f")})
    copy = Path(as_vllm_draft_model(str(target)))
    assert copy != target and as_vllm_draft_model(str(target)) == str(copy)  # made once
    got = json.loads((copy / "config.json").read_text())
    assert got["model_type"] == "deepseek_v2" and got["architectures"] == ["DeepseekV3ForCausalLM"]
    assert {k: v for k, v in got.items() if k not in ("model_type", "specrig_draft_of")} == {
        k: v for k, v in cfg.items() if k != "model_type"
    }
    assert (copy / "model.safetensors").stat().st_ino == (target / "model.safetensors").stat().st_ino
    assert _itself(str(copy), str(target)) and _itself(str(target), str(target))
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert as_vllm_draft_model(str(llama)) == str(llama) and not _itself(str(llama), str(target))


def test_a_draft_model_needs_only_the_targets_vocabulary() -> None:
    from specrig.specdec.layers import target_mismatch

    target = {"hidden_size": 256, "vocab_size": 49152}
    small = {"hidden_size": 576, "vocab_size": 49152}
    assert "hidden_size is 576" in (target_mismatch(small, target) or "")  # an EAGLE head must match it
    assert target_mismatch(small, target, own_model=True) is None
    other = {"hidden_size": 576, "vocab_size": 32000}
    assert "vocab_size is 32000" in (target_mismatch(other, target, own_model=True) or "")
