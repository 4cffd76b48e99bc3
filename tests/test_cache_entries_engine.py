"""The cpu recipe's real cache entries, damaged the way the issue found them and made
again before anything serves them: the GGUF conversion of SmolLM2 with its
model.safetensors truncated to half (converted again, about a minute on 2 cores),
and the random EAGLE-3 drafter (generated again, ~10 s). Needs the cpu recipe's
vllm environment (`nox -s env`); the entries are made in tmp_path, the environment
and the fetched GGUF package are only read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specrig.core import paths
from specrig.env.make import Env
from specrig.model import entry
from specrig.model.folder import CONVERTER_VERSION, prepare_drafter, prepare_model
from specrig.recipe.schema import load_recipe

pytestmark = [pytest.mark.engine, pytest.mark.slow]


@pytest.fixture
def cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(recipe, its vllm env as made, the real models folder); models are made in tmp_path."""
    recipe = load_recipe("cpu")
    env_name = recipe.engine["vllm"].env
    env_path = paths.env_dir(recipe.name, env_name)
    if not (env_path / "bin" / "python").exists():
        pytest.skip("the cpu recipe's vllm environment is not made (nox -s env)")
    real = paths.subdir("models")
    models = tmp_path / "models"
    models.mkdir()
    if (real / "packages").is_dir():  # the fetched GGUF package: read, not fetched again
        (models / "packages").symlink_to(real / "packages")
    monkeypatch.setenv("SPECRIG_MODELS_DIR", str(models))
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))  # locks
    # an Env as make_env returns it, without re-verifying (and possibly re-making) a shared environment
    return recipe, Env(env_path, recipe.name, env_name, "not checked"), real


def truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


def test_a_conversion_truncated_to_half_is_converted_again(cpu, capsys) -> None:
    recipe, env, real = cpu
    converted = [p for p in real.glob(f"*-c{CONVERTER_VERSION}-*") if (p / "config.json").is_file()]
    if not converted:
        pytest.skip("no converted model in the cache to copy")
    models = paths.subdir("models")
    damaged = models / converted[0].name
    shutil.copytree(converted[0], damaged)
    (damaged / entry.MANIFEST).unlink(missing_ok=True)  # as a conversion made before manifests
    truncate(damaged / "model.safetensors")

    ref = prepare_model(recipe, env)
    assert ref.path == damaged
    err = " ".join(capsys.readouterr().err.split())
    assert f"{damaged.name} is damaged (model.safetensors is" in err and "making it again" in err
    assert "converting" in err and ": cached" not in err
    assert entry.safetensors_problem(damaged / "model.safetensors") is None
    assert entry.check_entry(damaged).ok and not entry.check_entry(damaged).adopted
    # the model's context, not transformers' 1e30 for "unset" (SGLang's /tokenize returns it and
    # could not serialise 1e30: HTTP 500 on the H200, so no ShareGPT bench ran there)
    assert json.loads((damaged / "tokenizer_config.json").read_text())["model_max_length"] == 8192

    assert prepare_model(recipe, env).path == damaged
    assert "cached (files checked against its manifest)" in capsys.readouterr().err


def test_a_random_drafter_cut_short_is_generated_again(cpu, capsys) -> None:
    recipe, env, real = cpu
    converted = [p for p in real.glob(f"*-c{CONVERTER_VERSION}-*") if (p / "config.json").is_file()]
    if not converted:
        pytest.skip("no converted model in the cache to draft for")
    from specrig.model.folder import ModelRef

    target = ModelRef(converted[0], "target", "test")
    spec = recipe.spec["eagle3-random"]
    first = Path(prepare_drafter(spec, target, env) or "")
    assert entry.check_entry(first).ok
    truncate(first / "model.safetensors")
    capsys.readouterr()
    again = Path(prepare_drafter(spec, target, env) or "")
    assert again == first
    err = " ".join(capsys.readouterr().err.split())
    assert f"{first.name} is damaged" in err and "making it again" in err
    assert entry.check_entry(first).ok and entry.safetensors_problem(first / "model.safetensors") is None
