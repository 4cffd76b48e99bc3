"""The registry of trained drafters: where ``specrig drafter`` leaves the
EAGLE-3 drafter it trained for a recipe (``current.json`` for the default run,
``current-quick.json`` for ``--quick``), and how ``@eagle3-trained`` finds it.
It sits in the model room, so ``models`` resolves the name without importing
the training package.

Also what a drafter folder vouches for about itself, read without torch:

* its vocabulary map (``d2t``: target id = draft id + d2t[draft id]; ``t2d``: which
  target ids the draft vocabulary holds) must be one-to-one into the target's
  vocabulary, agree with ``t2d``, and be the map export recorded
  (``specrig.vocab_map`` in config.json: sha256 of both tensors' bytes):
  :func:`vocab_map_problem`;
* an offline evaluation (``offline_eval.json``) holds for the bytes it scored only:
  it records the sha256 of every file of the folder (``inputs.drafter_files``), and
  :func:`binding_problem` says when the folder no longer holds them. It is read, typed,
  by ``specrig.model.offline.offline_eval_status`` only."""

from __future__ import annotations

import hashlib
import json
from array import array
from pathlib import Path
from typing import Any

from specrig.core import atomic
from specrig.core.digest import sha256_file
from specrig.core.errors import ConfigError, HashMismatchError
from specrig.core.log import log
from specrig.core.paths import subdir
from specrig.model.entry import MANIFEST, check_entry, tensor_bytes

__all__ = [
    "OFFLINE_EVAL",
    "drafters_root",
    "register",
    "trained_drafter",
    "register_curve",
    "curve_drafters",
    "checked_drafter",
    "vocab_map_facts",
    "vocab_map_problem",
    "drafter_files",
    "binding_problem",
]

OFFLINE_EVAL = "offline_eval.json"
RUN_RECORD = "run.json"
"""How the pipeline made a drafter (stages, timings, its figures), written last: a record, not an
input of any evaluation."""


def drafters_root(recipe: str) -> Path:
    path = subdir("drafters") / recipe
    path.mkdir(parents=True, exist_ok=True)
    return path


def register(recipe: str, drafter: Path, shifted: Path, *, quick: bool) -> Path:
    pointer = drafters_root(recipe) / ("current-quick.json" if quick else "current.json")
    atomic.write_text(pointer, json.dumps({"drafter": str(drafter), "shifted": str(shifted), "quick": quick}, indent=2))
    return pointer


def trained_drafter(recipe: str, *, shifted: bool = False) -> Path:
    """The registered trained drafter of a recipe (the default run's, else the quick one's)."""
    root = drafters_root(recipe)
    for name in ("current.json", "current-quick.json"):
        p = root / name
        if p.is_file():
            d = json.loads(p.read_text())
            path = Path(d["shifted" if shifted else "drafter"])
            if (path / "config.json").is_file():
                return checked_drafter(path, retrain=_retrain_hint(d.get("quick", name != "current.json")))
    raise ConfigError(
        f"recipe {recipe!r} has no trained EAGLE-3 drafter yet",
        hint="train one with `nox -s drafter` (about 45 min on a 2-core CPU; `-- --quick` for a 5-minute one), "
        "or use the random head: --spec eagle3-random",
    )


def register_curve(recipe: str, points: list[dict], *, quick: bool) -> Path:
    """Record the data-size curve's drafters (``specrig drafter --curve``): one entry per
    training-set size, with its folder and offline figures."""
    pointer = drafters_root(recipe) / ("curve-quick.json" if quick else "curve.json")
    atomic.write_text(pointer, json.dumps({"quick": quick, "points": points}, indent=2, default=str))
    return pointer


def curve_drafters(recipe: str) -> list[tuple[str, Path]]:
    """``(label, folder)`` of every drafter on the recipe's data-size curve, smallest first
    (labels ``n1000``...); the default run's curve, else the quick one's."""
    root = drafters_root(recipe)
    for name in ("curve.json", "curve-quick.json"):
        p = root / name
        if p.is_file():
            points = json.loads(p.read_text())["points"]
            out = [(f"n{pt['samples']}", Path(pt["drafter"])) for pt in points]
            missing = [str(f) for _, f in out if not (f / "config.json").is_file()]
            if missing:
                raise ConfigError(
                    f"the data-size curve of {recipe!r} ({p}) names drafters that are gone: {', '.join(missing)}",
                    hint="train them again: `nox -s drafter -- --curve SIZES`",
                )
            return [(label, checked_drafter(f, retrain="`nox -s drafter -- --curve SIZES`")) for label, f in out]
    raise ConfigError(
        f"recipe {recipe!r} has no data-size curve yet",
        hint="train one: `nox -s drafter -- --curve 1000,4000,16000` (drafters on nested subsets of the same data)",
    )


# --------------------------------------------------------------------------- a trained drafter, checked before reuse


def _retrain_hint(quick: bool) -> str:
    return "`nox -s drafter -- --quick`" if quick else "`nox -s drafter`"


def checked_drafter(path: Path, *, retrain: str) -> Path:
    """``path`` when it is the folder export made (its manifest: sizes and sha256 of every
    file, safetensors headers); a folder made before manifests is checked as far as it
    allows and adopted. A damaged one is refused by name: a trained drafter cannot be
    made again without training it again."""
    check = check_entry(path)
    if check.adopted:
        log.info(f"drafter {path.name}: made before manifests; its files check out, manifest written")
    if not check.ok:
        raise HashMismatchError(
            f"the trained drafter {path} is not the folder training exported: {check.reason}",
            hint=f"remove {path} and train it again ({retrain}), or copy it again from where it was trained",
        )
    return path


# --------------------------------------------------------------------------- the vocabulary map


def _tensor(weights: Path, name: str) -> tuple[str, list[int], bytes] | None:
    try:
        return tensor_bytes(weights, name)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def vocab_map_facts(weights: Path) -> dict[str, Any] | None:
    """What export records about the vocabulary map of ``weights`` (a safetensors file):
    the sha256 of ``d2t``'s and ``t2d``'s bytes and the draft vocabulary size; None when
    the file holds no ``d2t`` (or is not safetensors)."""
    d2t = _tensor(weights, "d2t")
    if d2t is None:
        return None
    t2d = _tensor(weights, "t2d")
    return {
        "d2t_sha256": hashlib.sha256(d2t[2]).hexdigest(),
        "t2d_sha256": hashlib.sha256(t2d[2]).hexdigest() if t2d else None,
        "draft_vocab_size": d2t[1][0] if d2t[1] else 0,
    }


def _offsets(dtype: str, data: bytes) -> list[int] | None:
    codes = {"I64": "q", "I32": "i", "U32": "I"}
    if dtype not in codes:
        return None
    a = array(codes[dtype])
    a.frombytes(data)
    if array("i", [1]).tobytes()[0] != 1:  # safetensors is little-endian
        a.byteswap()
    return a.tolist()


def _target_vocab(cfg: dict[str, Any]) -> int | None:
    """The target's vocabulary size: from the target's config when the drafter names a
    folder that still holds it, else the one export copied (``vocab_size``)."""
    target = (cfg.get("specrig") or {}).get("target_path")
    if target:
        try:
            return int(json.loads((Path(target) / "config.json").read_text())["vocab_size"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return cfg.get("vocab_size")


def vocab_map_problem(folder: Path, *, target_vocab: int | None = None) -> str | None:
    """Why the vocabulary map in ``folder/model.safetensors`` cannot be the drafter's
    (None: consistent, or nothing to check: no d2t). ``target_vocab``: the served
    target's vocabulary size (default: the target the drafter names)."""
    folder = Path(folder)
    weights = folder / "model.safetensors"
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    d2t = _tensor(weights, "d2t")
    if d2t is None:
        return None
    dtype, _, data = d2t
    offsets = _offsets(dtype, data)
    if offsets is None:
        return f"its vocabulary map d2t has dtype {dtype}, not an integer"
    problems = []
    n = len(offsets)
    if cfg.get("draft_vocab_size") and n != cfg["draft_vocab_size"]:
        problems.append(f"d2t has {n} entries but config.json says draft_vocab_size {cfg['draft_vocab_size']}")
    ids = [i + d for i, d in enumerate(offsets)]
    vocab = target_vocab or _target_vocab(cfg)
    if vocab:
        outside = sum(1 for t in ids if not 0 <= t < vocab)
        if outside:
            problems.append(f"{outside} of {n} draft ids map outside the target's vocabulary (0..{vocab - 1})")
    if len(set(ids)) != n:
        problems.append(f"{n - len(set(ids))} of {n} draft ids map onto a target id another draft id maps to")
    t2d = _tensor(weights, "t2d")
    if t2d is not None:
        marked = {i for i, b in enumerate(t2d[2]) if b}
        if marked != set(ids):
            problems.append(f"t2d marks {len(marked)} target ids, {len(marked - set(ids))} of them no draft id maps to")
    recorded = (cfg.get("specrig") or {}).get("vocab_map") or {}
    for name, tensor in (("d2t", d2t), ("t2d", t2d)):
        want = recorded.get(f"{name}_sha256")
        if want and tensor is not None and (got := hashlib.sha256(tensor[2]).hexdigest()) != want:
            problems.append(f"{name} is not the map training exported (sha256 {got[:12]}…, recorded {want[:12]}…)")
    if not problems:
        return None
    return "its vocabulary map (d2t/t2d in model.safetensors) is wrong: " + "; ".join(problems)


# --------------------------------------------------------------------------- offline figures bound to their bytes


def drafter_files(folder: Path) -> dict[str, str]:
    """sha256 of every file of a drafter folder that an offline evaluation depends on
    (weights, config, anything else it holds; not the evaluation itself, the manifest, nor the
    pipeline's run record, written after the evaluation)."""
    folder = Path(folder)
    return {
        p.name: sha256_file(p)
        for p in sorted(folder.iterdir())
        if p.is_file() and not p.name.startswith(".") and p.name not in (OFFLINE_EVAL, MANIFEST, RUN_RECORD)
    }


def binding_problem(folder: Path, inputs: dict[str, Any] | None) -> str | None:
    """Why an evaluation with these recorded ``inputs`` does not hold for ``folder`` now (None: it does)."""
    recorded = (inputs or {}).get("drafter_files")
    if not recorded:
        return (
            f"{OFFLINE_EVAL} records no hash of the drafter it scored (written before evaluations were bound "
            "to their inputs), so it cannot vouch for these weights"
        )
    now = drafter_files(folder)
    changed = sorted(n for n in set(now) | set(recorded) if now.get(n) != recorded.get(n))
    if not changed:
        return None
    what = ", ".join(
        f"{n} {'is gone' if n not in now else 'is new' if n not in recorded else 'changed'}" for n in changed
    )
    return f"{OFFLINE_EVAL} was computed for other bytes than the folder holds now ({what}): it is stale"
