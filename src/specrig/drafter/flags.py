"""The flags of ``specrig drafter`` beside its settings (:mod:`.settings`): the data-size curve's
sizes and the reference trainer's steps and settings, checked before any stage runs."""

from __future__ import annotations

from specrig.core.errors import ConfigError

__all__ = ["run_flags"]


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
