"""The study file: ``[study]`` (its name, default recipe, description) and ``[[step]]`` tables,
each a specrig sub-command (``run``) with that command's options as keys. This module reads the
file and checks its shape; each step's options are checked by the command's own parser and
models in :mod:`.steps`. Errors name the dotted key by step name (``step.chat.concurrency``)
and the file."""

from __future__ import annotations

import itertools
import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specrig.core.errors import ConfigError
from specrig.core.validation import describe

__all__ = ["describe_at", "STUDY_COMMANDS", "StudyMeta", "StepTable", "StudyFile", "load_study_file", "NAME_PATTERN"]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"

STUDY_COMMANDS = ("bench", "drafter", "drafter-eval", "drafter-check", "report", "project", "build", "env")
"""The specrig sub-commands a step may run."""

RESERVED = ("name", "run", "recipe", "vary")
"""A step's own keys; every other key is an option of its command."""


class StudyMeta(BaseModel):
    """``[study]``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN)
    """the study's name: its default folder is $SPECRIG_CACHE_DIR/studies/NAME"""
    recipe: str | None = None
    """the recipe every step runs with unless the step names its own"""
    description: str = ""


class StepTable(BaseModel):
    """One ``[[step]]``: ``name``, ``run`` and the command's options (checked in :mod:`.steps`)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(pattern=NAME_PATTERN)
    run: str
    recipe: str | None = None
    vary: dict[str, dict[str, Any]] = {}
    """option -> {label: value}: the step once per label (several options: every combination),
    named NAME-LABEL"""

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class StudyFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    study: StudyMeta
    step: list[StepTable] = Field(min_length=1)


def _loc_key(loc: tuple[Any, ...], steps: list[Any]) -> tuple[Any, ...]:
    """``("step", 2, "run")`` -> ``("step", "chat", "run")`` where step 2 has a name."""
    if len(loc) >= 2 and loc[0] == "step" and isinstance(loc[1], int) and loc[1] < len(steps):
        name = steps[loc[1]].get("name") if isinstance(steps[loc[1]], dict) else None
        if isinstance(name, str) and name:
            return ("step", name, *loc[2:])
    return loc


def describe_at(exc: ValidationError, prefix: tuple[Any, ...], model: type[BaseModel] | None = None) -> list[str]:
    """One ``  dotted.key: problem`` line per error of ``exc``, its keys under ``prefix``
    (``("step", "chat")``): the lines :func:`describe` writes, with a did-you-mean where ``model``."""
    errors = [dict(e, loc=(*prefix, *e["loc"])) for e in exc.errors()]
    if model is not None:  # did-you-mean looks the key up in the model, not under the prefix
        lines = describe("", exc, model=model).splitlines()[1:]
        return [f"  {'.'.join(map(str, prefix))}.{line.strip()}" for line in lines]
    return describe("", _Renamed(errors)).splitlines()[1:]  # type: ignore[arg-type]


def _read(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"no study file at {path}", hint="give the path of a study.toml (see docs/study.md)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the study file {path}: {exc}", hint="check the path") from None
    try:
        return tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"study file {path} is not valid TOML: {exc}", hint="fix the syntax at the line shown"
        ) from None


def load_study_file(path: Path | str) -> StudyFile:
    """The study file's shape, checked: names, commands, unique step names (options not yet)."""
    path = Path(path)
    data = _read(path)
    steps = data.get("step") if isinstance(data.get("step"), list) else []
    try:
        study = StudyFile.model_validate(data)
    except ValidationError as exc:
        errors = [dict(e, loc=_loc_key(tuple(e["loc"]), steps)) for e in exc.errors()]
        raise ConfigError(
            describe(f"invalid study file {path}", _Renamed(errors), model=StudyFile),  # type: ignore[arg-type]
            hint="docs/study.md describes the study file",
        ) from None
    problems = []
    for step in study.step:
        problems += check_vary(step)
        if step.run not in STUDY_COMMANDS:
            problems.append(
                f"  step.{step.name}.run: {step.run!r} is not a command a step runs ({', '.join(STUDY_COMMANDS)})"
            )
    seen: set[str] = set()
    for name in (n for s in study.step for n in expanded_names(s)):
        if name in seen:
            problems.append(f"  step.{name}: two steps have this name (a varied step is named NAME-LABEL)")
        seen.add(name)
    if problems:
        raise ConfigError(f"invalid study file {path}:\n" + "\n".join(problems), hint="give each step a unique name")
    return study


def combinations(step: StepTable) -> list[tuple[str, dict[str, Any]]]:
    """The step's instances: ``(name, options)``, one per combination of its ``vary`` labels."""
    if not step.vary:
        return [(step.name, step.options)]
    keys = list(step.vary)
    out = []
    for labels in itertools.product(*(list(step.vary[k]) for k in keys)):
        opts = step.options | {k: step.vary[k][label] for k, label in zip(keys, labels, strict=True)}
        out.append(("-".join([step.name, *labels]), opts))
    return out


def expanded_names(step: StepTable) -> list[str]:
    return [name for name, _ in combinations(step)]


def check_vary(step: StepTable) -> list[str]:
    """Problems of a step's ``vary`` table (one line each, dotted keys)."""
    out = []
    for key, labels in step.vary.items():
        if key in RESERVED:
            out.append(f"  step.{step.name}.vary.{key}: {key!r} cannot vary (vary an option of the command)")
        if not labels:
            out.append(f"  step.{step.name}.vary.{key}: no label given (write {key}.LABEL = VALUE)")
        for label in labels:
            if not re.match(NAME_PATTERN, label):
                out.append(f"  step.{step.name}.vary.{key}.{label}: a label is letters, digits, '.', '_' or '-'")
    return out


class _Renamed:
    """A validation error's lines with their locations renamed (what :func:`describe` reads)."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        self._errors = errors

    def errors(self) -> list[dict[str, Any]]:
        return self._errors
