"""The registry of trained drafters: where ``specrig drafter`` leaves the
EAGLE-3 drafter it trained for a recipe (``current.json`` for the default run,
``current-quick.json`` for ``--quick``), and how ``@eagle3-trained`` finds it.
It sits in the model room, so ``models`` resolves the name without importing
the training package."""

from __future__ import annotations

import json
from pathlib import Path

from specrig.core import atomic
from specrig.core.errors import ConfigError
from specrig.core.paths import subdir

__all__ = ["drafters_root", "register", "trained_drafter", "register_curve", "curve_drafters"]


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
                return path
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
            return out
    raise ConfigError(
        f"recipe {recipe!r} has no data-size curve yet",
        hint="train one: `nox -s drafter -- --curve 1000,4000,16000` (drafters on nested subsets of the same data)",
    )
