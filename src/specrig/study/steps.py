"""A step's options as its command's argv, checked by that command's own parser and models.

Each key of a step is an option of its command, spelled as on the command line without the
dashes (``num_prompts`` or ``num-prompts``): a flag takes ``true``/``false``, a repeatable
option (``engine_arg``) a list, one value per occurrence, and an option that takes a comma
list (``k``, ``concurrency``, ``drafter``) a list or the text. The argv made from them is
parsed by the command's own ``argparse`` parser, then checked by its models: the bench's
:class:`~specrig.lab.options.BenchOptions` and the recipe-dependent checks of
:func:`~specrig.lab.plan.check_options`; the drafter's
:class:`~specrig.recipe.drafter.DrafterSettings` over the recipe's ``[drafter]`` table and
:func:`~specrig.drafter.settings.run_flags`. ``step:NAME`` as a value stands for what an
earlier step made: a bench's results folder, a report's or projection's folder, the drafter
a drafter step registered."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from specrig.core.errors import ConfigError
from specrig.study.model import describe_at

__all__ = ["ParserFor", "Step", "PLACED", "OUTPUTS", "REF", "step_argv", "deep_check", "refs_in", "resolve_argv"]

ParserFor = Callable[[str], argparse.ArgumentParser]
"""The command line's parser of one specrig command (``specrig.cli.parser_for``)."""

REF = re.compile(r"^step:(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)$")

PLACED = {"bench": "results", "report": "out", "project": "out"}
"""The option the study sets for a command: where the step's output goes, in the study folder."""

OUTPUTS = ("bench", "report", "project", "drafter")
"""Commands whose output ``step:NAME`` can name."""

_NEVER = ("state_file", "help")


class _Bad(Exception):
    """One key's problem (the message without the key)."""


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


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.dest not in _NEVER and a.help != argparse.SUPPRESS}


def _text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _Bad(f"takes text or a number, got {value!r}")
    return str(value)


def _tokens(action: argparse.Action, value: Any) -> list[str]:
    """The argv of one option's value (``--flag=VALUE`` so a value may start with a dash)."""
    flag = action.option_strings[-1] if action.option_strings else None
    if action.nargs == 0:
        if not isinstance(value, bool):
            raise _Bad(f"is a flag: write true or false, got {value!r}")
        return [flag] if value and flag else []
    values = value if isinstance(value, list) else [value]
    if flag is None:  # a positional argument
        if not isinstance(value, list) and action.nargs in ("+", "*"):
            values = [value]
        elif isinstance(value, list) and action.nargs not in ("+", "*"):
            raise _Bad(f"takes one value, got a list {value!r}")
        return [_text(v) for v in values]
    if isinstance(action, argparse._AppendAction):
        return [f"{flag}={_text(v)}" for v in values]
    if isinstance(value, list):
        if not value:
            raise _Bad("an empty list: leave the key out for the default")
        return [f"{flag}={','.join(_text(v) for v in value)}"]
    return [f"{flag}={_text(value)}"]


def _unknown(key: str, command: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f"`specrig {command}` has no option --{key.replace('_', '-')}" + (
        f"; did you mean {close[0]!r}?" if close else f" (see `specrig {command} --help`)"
    )


def step_argv(
    name: str, command: str, options: dict[str, Any], recipe: str | None, parser: argparse.ArgumentParser
) -> tuple[list[str], list[str]]:
    """``(argv, problems)``: the command's argv from a step's options (``--recipe`` first where the
    command takes one; the study-placed output not included), and one line per bad key."""
    actions, problems = _actions(parser), []
    where = f"step.{name}"
    head: list[str] = []
    if "recipe" in actions:
        head = [f"--recipe={recipe}"] if recipe else []
    elif recipe:
        problems.append(f"  {where}.recipe: `specrig {command}` takes no recipe")
    positional: list[str] = []
    optional: list[str] = []
    for key, value in options.items():
        dest = key.replace("-", "_")
        if dest == PLACED.get(command):
            problems.append(f"  {where}.{key}: the study places each step's output in its folder; leave {key} out")
            continue
        if dest not in actions or dest == "recipe":
            problems.append(f"  {where}.{key}: {_unknown(dest, command, [d for d in actions if d != 'recipe'])}")
            continue
        try:
            (optional if actions[dest].option_strings else positional).extend(_tokens(actions[dest], value))
        except _Bad as exc:
            problems.append(f"  {where}.{key}: {exc}")
    return [*positional, *head, *optional], problems


class _ParseError(Exception):
    pass


def parse_step(name: str, command: str, argv: list[str], parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The command's own parser on ``argv``; its complaint names the step's key."""

    def fail(message: str) -> None:
        raise _ParseError(message)

    parser.error = fail  # type: ignore[method-assign,assignment]
    try:
        return parser.parse_args(argv)
    except _ParseError as exc:
        message = str(exc)
        m = re.match(r"argument (--)?([\w-]+)(/[\w-]+)?: (.*)", message, re.S)
        if m:
            key, message = m.group(2).replace("-", "_"), m.group(4)
        else:
            m = re.match(r"the following arguments are required: (.*)", message)
            key, message = (m.group(1).split(",")[0].strip(), "required key is missing") if m else ("", message)
        raise ConfigError(f"  step.{name}{'.' + key if key else ''}: {message}") from None


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


def _bench_check(step: Step, ns: argparse.Namespace, recipe: Any, check_ns: argparse.Namespace) -> list[str]:
    from specrig.lab.options import BenchOptions
    from specrig.lab.plan import check_options

    def values(n: argparse.Namespace) -> dict[str, Any]:
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


def _drafter_check(step: Step, ns: argparse.Namespace, recipe: Any) -> list[str]:
    from specrig.drafter.settings import DEFAULT, QUICK, DrafterSettings, run_flags

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


def deep_check(step: Step, ns: argparse.Namespace, recipe: Any, check_ns: argparse.Namespace) -> list[str]:
    """The command's models on its parsed options (``check_ns``: the same with ``step:NAME`` stood in
    for by what can be checked before the step that makes it ran)."""
    if step.command == "bench":
        return _bench_check(step, ns, recipe, check_ns)
    if step.command == "drafter":
        return _drafter_check(step, ns, recipe)
    return []
