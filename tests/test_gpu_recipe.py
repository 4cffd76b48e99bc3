"""The hopper-sm90 recipe as it is proven on the H200 (docs/gpu.md): its models,
the launch line each gets, the layered environment's lock, and the repacked vLLM
that replaces the published one. Fast: no network, no GPU."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from specrig.engine.vllm import ENGINE
from specrig.lock.built import read_record, record_path, supersede
from specrig.lock.resolve import read_lock
from specrig.model.folder import prepare_model
from specrig.recipe.schema import load_recipe

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def recipe():
    return load_recipe("hopper-sm90")


def _argv(recipe, name):
    served = recipe.serving(name)
    plan = ENGINE.launch(
        python="/env/bin/python",
        model_path="/m",
        served_name=served.model.served_name,
        port=8000,
        recipe=served,
        spec=None,
        drafter=None,
        extra_args=[],
    )
    return plan


def test_models_and_their_launch_lines(recipe):
    smol = _argv(recipe, None)
    assert "--load-format" not in smol.argv and "--tensor-parallel-size" not in smol.argv
    assert smol.environment["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    tp1 = _argv(recipe, "llama8b").argv
    assert tp1[tp1.index("--load-format") + 1] == "dummy" and "--tensor-parallel-size" not in tp1
    tp2 = _argv(recipe, "llama8b-tp2").argv
    assert tp2[tp2.index("--tensor-parallel-size") + 1] == "2"
    assert tp2[tp2.index("--served-model-name") + 1] == "llama8b-dummy-tp2"
    # the shape is Llama-3.1-8B's with SmolLM2's vocabulary: ~7.4 B parameters
    assert 7.3e9 < recipe.models["llama8b"].shape.parameters < 7.5e9


def test_shaped_model_folder_is_dummy_and_labelled(recipe, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text('{"model": {"vocab": {}}}')
    (tok / "tokenizer_config.json").write_text("{}")
    monkeypatch.setenv("SPECRIG_TEST_TOKENIZER", str(tok))
    spec = recipe.models["llama8b"].model_copy(update={"tokenizer": "$SPECRIG_TEST_TOKENIZER"})
    shaped = recipe.model_copy(update={"models": {**recipe.models, "llama8b": spec}})
    ref = prepare_model(shaped, None, "llama8b")
    cfg = json.loads((ref.path / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["vocab_size"]) == (
        4096,
        32,
        8,
        49152,
    )
    assert (ref.path / "tokenizer.json").is_file() and not list(ref.path.glob("*.safetensors"))
    assert ref.source.startswith("DUMMY WEIGHTS") and ref.served_name == "llama8b-dummy"


def test_lock_installs_only_what_the_image_lacks(recipe):
    lock = read_lock(recipe.lock_path("vllm"))
    provided = {p.name for p in lock.provided_packages}
    assert {"torch", "triton", "transformers", "numpy", "nvidia-nccl-cu13"} <= provided
    installed = {p.name for p in lock.installed_packages}
    assert {"vllm", "pydantic", "xgrammar", "llguidance", "gguf"} <= installed
    assert not installed & {"flashinfer-python", "torchvision", "torchaudio", "tilelang"}
    torch = next(p for p in lock.packages if p.name == "torch")
    assert torch.version == "2.11.0" and torch.provided


def test_repacked_vllm_replaces_the_published_one(recipe):
    lock = read_lock(recipe.lock_path("vllm"))
    record = read_record(record_path(lock.path))
    (wheel,) = record.wheel
    published = next(p for p in lock.packages if p.name == "vllm")
    assert wheel.version == published.version == "0.26.0"
    # its own hash, and the published wheel's hash as its source: the lock's check is not weakened
    assert f"sha256:{wheel.sha256}" not in published.hashes
    assert f"sha256:{wheel.source_sha256}" in published.hashes
    # build 1: the MoE kernels kept (the Kimi-K2.5 shape's INT4 experts run on them); build 0 dropped them
    assert "-1sm90-" in wheel.filename
    assert "compressed-tensors" in {p.name for p in lock.installed_packages}  # its INT4 config's reader
    text = supersede(lock, record).requirements_text()
    assert "vllm==" not in text and "pydantic==" in text


def test_repack_tool_is_byte_reproducible(tmp_path):
    import subprocess
    import sys

    src = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(src, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("demo/__init__.py", "x = 1\n")
        zf.writestr("demo/big.so", b"\0" * 10000)
        zf.writestr("demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        zf.writestr("demo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("demo-1.0.dist-info/RECORD", "demo/__init__.py,,\ndemo/big.so,,\ndemo-1.0.dist-info/RECORD,,\n")
    import hashlib

    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    outs = []
    for n in (1, 2):
        out = tmp_path / f"out{n}"
        cmd = [
            sys.executable,
            "-m",
            "specrig.cli",
            "repack",
            str(src),
            "--source-sha256",
            sha,
            "--drop",
            "demo/big.so",
            "--build-tag",
            "0test",
            "--out",
            str(out),
        ]
        doc = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        outs.append(doc["sha256"])
        with zipfile.ZipFile(out / doc["filename"]) as zf:
            assert zf.testzip() is None
            assert "demo/big.so" not in zf.namelist()
            assert "demo/big.so" not in zf.read("demo-1.0.dist-info/RECORD").decode()
            assert "Build: 0test" in zf.read("demo-1.0.dist-info/WHEEL").decode()
    assert outs[0] == outs[1]
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "specrig.cli",
            "repack",
            str(src),
            "--source-sha256",
            "0" * 64,
            "--drop",
            "x",
            "--build-tag",
            "0t",
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 4 and "expected" in bad.stderr and "hint:" in bad.stderr


# --------------------------------------------------------------------------- SGLang (docs/sglang.md)

# What the SGLang server never imports for a dense bf16 Llama with EAGLE-3 on SM90 (the recipe's
# comments say why): none of these may come back into the lock.
SGLANG_PRUNED = {
    "flash-attn-4",
    "nvidia-cutlass-dsl",
    "quack-kernels",
    "tilelang",
    "tokenspeed-mla",
    "torchaudio",
    "torchcodec",
    "torchao",
    "datasets",
    "pyarrow",
    "outlines",
    "llguidance",
    "openai-harmony",
    "modelscope",
    "scipy",
    "timm",
}


def _sglang_launch(recipe, name=None, spec=None, drafter=None):
    from specrig.engine.sglang import ENGINE as SGLANG

    served = recipe.serving(name)
    return SGLANG.launch(
        python="/env/bin/python",
        model_path="/m",
        served_name=served.model.served_name,
        port=30000,
        recipe=served,
        spec=spec,
        drafter=drafter,
        extra_args=[],
    )


def test_sglang_lock_installs_only_what_the_image_lacks(recipe):
    lock = read_lock(recipe.lock_path("sglang"))
    versions = lock.versions()
    assert versions["sglang"] == "0.5.17" and versions["sglang-kernel"] == "0.4.5"
    provided = {p.name for p in lock.provided_packages}
    installed = {p.name for p in lock.installed_packages}
    assert {"torch", "triton", "numpy", "nvidia-nccl-cu13", "huggingface-hub"} <= provided
    # SGLang's own transformers pin (0.5.17 does not import with the image's 5.17.0): in the venv
    assert versions["transformers"] == "5.12.1" and versions["tokenizers"] == "0.22.2"
    assert {"transformers", "tokenizers"} <= installed
    # what the measured imports need, flashinfer included (sglang imports it on CUDA)
    assert {"sglang", "sglang-kernel", "flashinfer-python", "xgrammar", "pydantic", "nvidia-ml-py", "dill"} <= installed
    assert not (installed | provided) & SGLANG_PRUNED
    torch = next(p for p in lock.packages if p.name == "torch")
    assert torch.version == "2.11.0" and torch.provided


def test_sglang_and_vllm_locks_agree_on_the_image(recipe):
    """Both venvs sit on the same host interpreter: every package both locks take from it has one version."""
    sgl = {p.name: p.version for p in read_lock(recipe.lock_path("sglang")).provided_packages}
    vllm = {p.name: p.version for p in read_lock(recipe.lock_path("vllm")).provided_packages}
    shared = sgl.keys() & vllm.keys()
    assert len(shared) > 60
    assert {n: (sgl[n], vllm[n]) for n in shared if sgl[n] != vllm[n]} == {}
    # nothing the sglang venv takes from the host is missing from what the vLLM proof found there
    assert set(sgl) <= set(vllm)


def test_sglang_overrides_prune_what_the_comments_say(recipe):
    spec = recipe.env["sglang"]
    dropped = {o.split(";")[0].strip() for o in spec.overrides if "sys_platform == 'never'" in o}
    assert SGLANG_PRUNED - {"pyarrow"} <= dropped  # pyarrow goes with datasets
    names = {p.name for p in read_lock(recipe.lock_path("sglang")).packages}
    assert not names & dropped
    # what a real start on the H200 imported that the import sweep never reached: every speculative
    # worker imports deep_gemm when it captures its CUDA graphs (it died without it), with its tvm-ffi
    assert {"sgl-deep-gemm", "apache-tvm-ffi", "flashinfer-python"} <= names - dropped


def test_repacked_sglang_kernel_replaces_the_published_one(recipe):
    lock = read_lock(recipe.lock_path("sglang"))
    record = read_record(record_path(lock.path))
    (wheel,) = record.wheel
    published = next(p for p in lock.packages if p.name == "sglang-kernel")
    assert wheel.key == "sglang-kernel" and wheel.version == published.version == "0.4.5"
    assert f"sha256:{wheel.sha256}" not in published.hashes
    assert f"sha256:{wheel.source_sha256}" in published.hashes
    assert "-0sm90-" in wheel.filename and wheel.archs == ("90",) and wheel.definition == "specrig.builder.repack"
    text = supersede(lock, record).requirements_text()
    assert "sglang-kernel==" not in text and "sglang==0.5.17" in text


def test_sglang_launch_lines(recipe):
    smol = _sglang_launch(recipe)
    argv = smol.argv
    assert argv[:3] == ["/env/bin/python", "-m", "sglang.launch_server"]
    # no FA3 (flash_ops is repacked out) and no flashinfer JIT sampling
    assert argv[argv.index("--attention-backend") + 1] == "triton"
    assert argv[argv.index("--sampling-backend") + 1] == "pytorch"
    assert "--enable-metrics" in argv and "--load-format" not in argv
    assert smol.environment["HF_HUB_OFFLINE"] == "1" and smol.environment["NCCL_NVLS_ENABLE"] == "0"
    tp1 = _sglang_launch(recipe, "llama8b").argv
    assert tp1[tp1.index("--load-format") + 1] == "dummy" and tp1[tp1.index("--tp-size") + 1] == "1"
    tp2 = _sglang_launch(recipe, "llama8b-tp2").argv
    assert tp2[tp2.index("--tp-size") + 1] == "2"
    eagle = _sglang_launch(recipe, spec=recipe.spec["eagle3"], drafter="/d").argv
    assert eagle[eagle.index("--speculative-algorithm") :] == [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "/d",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
    ]
    oracle = _sglang_launch(recipe, spec=recipe.spec["draft_model"], drafter="/m").argv
    assert oracle[oracle.index("--speculative-algorithm") + 1 : oracle.index("--speculative-algorithm") + 4] == [
        "STANDALONE",
        "--speculative-draft-model-path",
        "/m",
    ]
