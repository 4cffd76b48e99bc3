"""A configuration's identity: which of the recipe's ``[spec.NAME]`` it comes from,
the draft length ``--k`` gave it, the drafter ``--drafter`` swapped in, the engine
that serves it, and whether its server runs eager (``--acceptance-check``'s twin).
It is made once, in the plan, and carried to the summary; the name
(``eagle3-n1000-k2``, ``eagle3-k1-eager``) is only for display and is never parsed back."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from specrig.core.errors import ConfigError
from specrig.core.registry import DRAFTER_METHODS
from specrig.recipe.schema import Recipe, SpecConfig

__all__ = ["ConfigId", "ServerFacts", "select_specs", "drafter_refs", "spec_variants"]


class ConfigId(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: str | None = None
    """The recipe's ``[spec.NAME]`` (its method, options and gates); None: the baseline."""
    k: int | None = None
    """Draft tokens a step when ``--k`` set them (None: the recipe's)."""
    drafter: str | None = None
    """The ``--drafter`` label (``n1000``, ``trained-shifted``, a folder's name); None: the recipe's."""
    engine: str | None = None
    eager: bool = False
    """Served with the engine's eager flag added (``--acceptance-check``'s twin of the same
    configuration on the compiled path; the name ends ``-eager``)."""

    @property
    def is_baseline(self) -> bool:
        return self.spec is None

    @property
    def name(self) -> str:
        if self.spec is None:
            return "baseline"
        name = self.spec + (f"-{self.drafter}" if self.drafter else "") + (f"-k{self.k}" if self.k is not None else "")
        return name + ("-eager" if self.eager else "")

    def compiled(self) -> ConfigId:
        """The configuration an eager twin is the twin of (itself when not a twin)."""
        return self.model_copy(update={"eager": False})


class ServerFacts(BaseModel):
    """What a configuration's server said about itself once ready (the lab records it, the
    summary reads it): its command line (key redacted), its start time, how many servers
    started with it, and the aux layer ids it logged (EAGLE-3; None: not logged)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    argv: list[str] = []
    ready_after_s: float | None = None
    started_together: int = 1
    aux_layers: list[int] | None = None


def select_specs(recipe: Recipe, choice: tuple[str, ...]) -> list[str]:
    if choice == ("all",):
        return list(recipe.spec)
    unknown = [n for n in choice if n not in recipe.spec]
    if unknown:
        raise ConfigError(
            f"recipe {recipe.name!r} has no speculative configuration {', '.join(map(repr, unknown))}",
            hint=f"configurations: {', '.join(recipe.spec) or '(none)'}; or use --spec all / none",
        )
    return list(choice)


def drafter_refs(recipe: Recipe, refs: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(label, ref)`` for each ``--drafter`` value: ``@curve`` is every drafter of the
    recipe's data-size curve (labels ``n1000``...), ``@NAME`` a named drafter, else a folder."""
    from specrig.model.drafters import curve_drafters

    out: list[tuple[str, str]] = []
    for ref in refs:
        if ref == "@curve":
            out += [(label, str(path)) for label, path in curve_drafters(recipe.name)]
        elif ref.startswith("@"):
            out.append((ref[1:].removeprefix("eagle3-"), ref))
        else:
            path = Path(ref).expanduser().resolve()
            out.append((path.name, str(path)))
    labels = [label for label, _ in out]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"--drafter names two drafters with the same label: {labels}", hint="give distinct folders")
    return out


def spec_variants(
    recipe: Recipe,
    names: list[str],
    ks: tuple[int, ...] | None = None,
    drafters: tuple[str, ...] | None = None,
    engine: str | None = None,
) -> list[tuple[ConfigId, SpecConfig]]:
    """Each named configuration, once per ``--drafter`` (drafter-based methods) and once per
    ``--k`` value, or as the recipe has it; each with its typed identity."""
    chosen = [(ConfigId(spec=n, engine=engine), recipe.spec[n]) for n in names]
    if drafters:
        refs = drafter_refs(recipe, drafters)
        if not any(spec.method in DRAFTER_METHODS for _, spec in chosen):
            raise ConfigError(
                "--drafter needs a drafter-based configuration in --spec (eagle3, eagle or draft_model)",
                hint="e.g. --spec eagle3 --drafter @curve",
            )
        chosen = [
            v
            for ident, spec in chosen
            for v in (
                [
                    (ident.model_copy(update={"drafter": label}), spec.model_copy(update={"model": ref}))
                    for label, ref in refs
                ]
                if spec.method in DRAFTER_METHODS
                else [(ident, spec)]
            )
        ]
    if not ks:
        return chosen
    return [
        (ident.model_copy(update={"k": k}), spec.model_copy(update={"num_speculative_tokens": k}))
        for ident, spec in chosen
        for k in ks
    ]
