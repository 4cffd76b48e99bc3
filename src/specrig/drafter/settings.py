"""The settings of a drafter run (the typed model lives with the recipe, whose ``[drafter]``
table it also types): the built-in defaults, the ``--quick`` ones, and the one chain that
makes a run's settings (defaults, then the recipe's table, then the flags)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specrig.core.errors import ConfigError
from specrig.recipe.drafter import DrafterSettings

if TYPE_CHECKING:
    from specrig.recipe.schema import Recipe

__all__ = ["DrafterSettings", "DEFAULT", "QUICK", "for_recipe", "run_flags"]

DEFAULT = DrafterSettings()
# --quick: minutes, for CI and plumbing; the drafter learns only a little.
QUICK = DrafterSettings(
    samples=32,
    heldout=4,
    max_new_tokens=128,
    epochs=3,
    draft_vocab=2048,
    max_len=384,
    train_seconds=100,
    generate_seconds=150,
    bench_tokens=64,
    bench_shaped=0.0,  # 512-token answers would take most of a quick run's generation
    quick=True,
)


def for_recipe(recipe: Recipe, *, quick: bool, **flags: object) -> DrafterSettings:
    """The built-in defaults (:data:`DEFAULT`, or :data:`QUICK`), the recipe's ``[drafter]``
    table (and ``[drafter.quick]`` for ``--quick``) on top, then the flags given (not None)."""
    base = QUICK if quick else DEFAULT
    return base.with_overrides(**recipe.drafter.values(quick)).with_overrides(**flags)


def run_flags(
    curve: str | None, reference: str | None, reference_steps: str, reference_set: list[str]
) -> tuple[list[int], int | None, dict[str, object]]:
    """The run's own flags beside its settings, checked before any stage runs: the curve's sizes
    (``--curve 1000,4000``), the reference's steps (None: auto) and SpecForge's own settings."""
    from specrig.drafter.reference_specforge import parse_settings

    sizes: list[int] = []
    if curve:
        try:
            sizes = [int(x) for x in curve.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(f"--curve: cannot read {curve!r}", hint="write e.g. --curve 1000,4000,16000") from None
        if not sizes or min(sizes) < 1:
            raise ConfigError(f"--curve sizes must be >= 1, got {curve!r}", hint="write e.g. --curve 1000,4000")
    steps = None if reference_steps == "auto" else _steps(reference_steps)
    if reference_set and reference != "specforge":
        raise ConfigError(
            "--reference-set sets SpecForge's own run-file settings", hint="use it with --reference specforge"
        )
    if reference == "specforge" and steps == 0:
        raise ConfigError(
            "--reference-steps 0 is speculators' dry run; SpecForge has none",
            hint="give --reference-steps N >= 1, or auto (equal training time)",
        )
    return sizes, steps, parse_settings(reference_set)


def _steps(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise ConfigError(
            f"--reference-steps: {value!r} is neither a step count >= 0 nor auto",
            hint="write --reference-steps auto (equal training time), 2000, or 0 (its untrained dry run)",
        )
    return n
