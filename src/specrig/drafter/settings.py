"""The settings of a drafter run (the typed model lives with the recipe, whose ``[drafter]``
table it also types): the built-in defaults, the ``--quick`` ones, and the one chain that
makes a run's settings (defaults, then the recipe's table, then the flags)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specrig.recipe.drafter import DrafterSettings

if TYPE_CHECKING:
    from specrig.recipe.schema import Recipe

__all__ = ["DrafterSettings", "DEFAULT", "QUICK", "for_recipe"]

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
