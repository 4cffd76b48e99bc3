"""A step's options as its command's argv, checked by that command's own parser and models.

Each key of a step is an option of its command, spelled as on the command line without the
dashes (``num_prompts`` or ``num-prompts``): a flag takes ``true``/``false``, a repeatable
option (``engine_arg``) a list, one value per occurrence, and an option that takes a comma
list (``k``, ``concurrency``, ``drafter``) a list or the text. The argv made from them is
parsed by the command's own ``argparse`` parser, then checked by its models: the bench's
:class:`~specrig.lab.options.BenchOptions` and the recipe-dependent checks of
:func:`~specrig.lab.plan.check_options`; the drafter's
:class:`~specrig.recipe.drafter.DrafterSettings` over the recipe's ``[drafter]`` table and
:func:`~specrig.drafter.flags.run_flags`; a build's target, pin, archs and imported sources as
``specrig build`` checks them before it plans; an env step's engine or environment in the recipe.
``step:NAME`` as a value stands for what an earlier step made: a bench's results folder, a
report's or projection's folder, the drafter a drafter step registered."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from specrig.core.errors import ConfigError
from specrig.study.model import describe_at

__all__ = [
    "CommandLine",
    "Step",
    "PLACED",
    "OUTPUTS",
    "REFUSED",
    "ENVIRONS",
    "REF",
    "deep_check",
    "refs_in",
    "resolve_argv",
]


class CommandLine(Protocol):
    """The command line's side of a study (``specrig.cli.study_argv``): a step's options as its
    command's argv, and that argv parsed by the command's own parser."""

    def takes_recipe(self, command: str) -> bool: ...

    def argv(self, name: str, command: str, options: dict[str, Any], recipe: str | None) -> tuple[list[str], list[str]]:
        """``(argv, problems)``: one ``  step.NAME.KEY: problem`` line per bad key."""
        ...

    def parse(self, name: str, command: str, argv: list[str]) -> Any:
        """The parsed options (a namespace); a ConfigError naming the step's key."""
        ...


REF = re.compile(r"^step:(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)$")

PLACED = {"bench": "results", "report": "out", "project": "out"}
"""The option the study sets for a command: where the step's output goes, in the study folder."""

OUTPUTS = ("bench", "report", "project", "drafter")
"""Commands whose output ``step:NAME`` can name."""

_AWAY = (
    "a step runs the build in the study's own process: detach the study (`specrig study run FILE --detach`) "
    "and watch it with `specrig study status|follow|stop`"
)
REFUSED = {"build": {"detach": _AWAY, "status": _AWAY, "follow": _AWAY, "stop": _AWAY}}
"""Options a command takes on the command line but not in a study, with why."""

ENVIRONS = ("build", "env")
"""Commands that change what a recipe's environments hold (a built wheel, the environment itself):
every later step of that recipe that builds, makes an environment or serves reads them."""


@dataclass(frozen=True)
class Step:
    """One step as it will run: its command's argv (``step:NAME`` left as written), the
    recipe it names, the earlier steps it reads."""

    name: str
    command: str
    recipe: str | None
    options: dict[str, Any]
    argv: tuple[str, ...]
    needs: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"step.{self.name}"


def refs_in(options: dict[str, Any]) -> list[tuple[str, str]]:
    """``(key, NAME)`` for every ``step:NAME`` among the options' values."""
    out = []
    for key, value in options.items():
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and (m := REF.match(v.strip())):
                out.append((key, m.group("name")))
    return out


def resolve_argv(argv: tuple[str, ...] | list[str], resolve: Callable[[str], str]) -> list[str]:
    """``argv`` with each ``step:NAME`` (a whole value, or one item of a comma list) replaced by
    ``resolve(NAME)``."""

    def one(value: str) -> str:
        return ",".join(resolve(m.group("name")) if (m := REF.match(p)) else p for p in value.split(","))

    out = []
    for token in argv:
        if token.startswith("--") and "=" in token:
            flag, _, value = token.partition("=")
            out.append(f"{flag}={one(value)}")
        else:
            out.append(one(token))
    return out


def _bench_check(step: Step, ns: Any, recipe: Any, check_ns: Any) -> list[str]:
    from specrig.lab.options import BenchOptions
    from specrig.lab.plan import check_options

    def values(n: Any) -> dict[str, Any]:
        got = {f: getattr(n, f, None) for f in BenchOptions.model_fields}
        got = {k: v for k, v in got.items() if v is not None}
        if isinstance(got.get("engine_arg"), list):
            got["engine_arg"] = tuple(got["engine_arg"])
        return got

    try:
        BenchOptions(**values(ns))
        opts = BenchOptions(**values(check_ns))
    except ValidationError as exc:
        return describe_at(exc, ("step", step.name))
    except ConfigError as exc:
        return [f"  {step.where}: {exc.message}"]
    try:
        check_options(opts, recipe)
    except ConfigError as exc:
        return [f"  {step.where}: {exc.message}"]
    return []


def _drafter_check(step: Step, ns: Any, recipe: Any) -> list[str]:
    from specrig.drafter.flags import run_flags
    from specrig.drafter.settings import DEFAULT, QUICK, DrafterSettings

    base = (QUICK if ns.quick else DEFAULT).with_overrides(**recipe.drafter.values(ns.quick))
    flags = {n: getattr(ns, n) for n in DrafterSettings.FLAGS if getattr(ns, n) is not None}
    problems = []
    try:
        DrafterSettings(**(base.model_dump() | flags))
    except ConfigError as exc:  # "drafter settings:" then one "  key: problem" line per setting
        problems += [f"  {step.where}.{line.strip()}" for line in exc.message.splitlines()[1:]]
    try:
        run_flags(ns.curve, ns.reference, ns.reference_steps, ns.reference_set)
    except ConfigError as exc:
        problems.append(f"  {step.where}: {exc.message}")
    return problems


def _build_check(step: Step, ns: Any, recipe: Any, here: Path) -> list[str]:
    """What ``specrig build`` refuses before it plans: an unknown build, one the recipe pins at another
    version or does not pin (with no ``--python`` to build in), a bad arch, a bad ``--import-source``."""
    from specrig.builder.definition import RENAMED, load_definition
    from specrig.builder.plan import check_pin, normalize_arch

    target = ns.target
    if RENAMED.get(target) in recipe.builds and target not in recipe.builds:
        target = RENAMED[target]
    if target.endswith(".toml") and not Path(target).is_absolute():
        target = str(here / target)  # the step runs in the study file's folder
    problems = []
    try:
        d = load_definition(target)
        check_pin(recipe, d)
        if d.name not in recipe.builds and not ns.python:
            raise ConfigError(
                f"recipe {recipe.name!r} has no [builds.{d.name}] table, so there is no environment to build in"
            )
    except ConfigError as exc:
        return [f"  {step.where}.target: {exc.message}" + (f" ({exc.hint})" if exc.hint else "")]
    for arch in (a for item in ns.arch or [] for a in item.split(",") if a.strip()):
        try:
            normalize_arch(arch)
        except ConfigError as exc:
            problems.append(f"  {step.where}.arch: {exc.message}")
    names = {a.name for a in d.archives()}
    for item in ns.import_source:
        name, sep, file = item.partition("=")
        if not sep or not file or name not in names:
            problems.append(
                f"  {step.where}.import_source: {item!r}: expected NAME=ARCHIVE, NAME one of {', '.join(sorted(names))}"
            )
    return problems


def _env_check(step: Step, ns: Any, recipe: Any) -> list[str]:
    """What ``specrig env`` refuses: an engine or environment the recipe lacks, ``--offline`` without a
    wheelhouse to install from."""
    try:
        recipe.env_named(ns.env) if ns.env else recipe.env_for_engine(ns.engine)
    except ConfigError as exc:
        return [f"  {step.where}.{'env' if ns.env else 'engine'}: {exc.message}"]
    if ns.offline and not ns.wheelhouse and not ns.check:
        return [f"  {step.where}.offline: --offline needs --wheelhouse DIR (the folder of wheels to install from)"]
    return []


def deep_check(step: Step, ns: Any, recipe: Any, check_ns: Any, here: Path = Path(".")) -> list[str]:
    """The command's models on its parsed options (``check_ns``: the same with ``step:NAME`` stood in
    for by what can be checked before the step that makes it ran; ``here``: the folder the step runs in)."""
    if step.command == "bench":
        return _bench_check(step, ns, recipe, check_ns)
    if step.command == "drafter":
        return _drafter_check(step, ns, recipe)
    if step.command == "build":
        return _build_check(step, ns, recipe, here)
    if step.command == "env":
        return _env_check(step, ns, recipe)
    return []
