"""The command line's side of ``specrig study`` (:class:`specrig.study.steps.CommandLine`): a
step's options as its command's argv, parsed by that command's own ``argparse`` parser, its
complaints named by the step's dotted key. A flag takes true or false; a repeatable option
(``engine_arg``) a list, one value per occurrence; an option that takes a comma list (``k``,
``concurrency``, ``drafter``) a list or the text; each value goes as ``--flag=VALUE``, so a value
may start with a dash (``--engine-arg=--enforce-eager``)."""

from __future__ import annotations

import argparse
import difflib
import re
from typing import Any

from specrig.core.errors import ConfigError
from specrig.study.steps import PLACED, REFUSED

__all__ = ["StudyCommandLine"]

_NEVER = ("state_file", "help")


class _Bad(Exception):
    """One key's problem (the message without the key)."""


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


def _step_argv(
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
        if dest in REFUSED.get(command, {}):
            problems.append(f"  {where}.{key}: {REFUSED[command][dest]}")
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


def _parse_step(name: str, command: str, argv: list[str], parser: argparse.ArgumentParser) -> argparse.Namespace:
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


class StudyCommandLine:
    """The parsers of the specrig commands (``specrig.cli.parser_for``), one made per use (a parse
    replaces the parser's error handler)."""

    def takes_recipe(self, command: str) -> bool:
        from specrig.cli import parser_for

        return "recipe" in _actions(parser_for(command))

    def argv(self, name: str, command: str, options: dict[str, Any], recipe: str | None) -> tuple[list[str], list[str]]:
        from specrig.cli import parser_for

        return _step_argv(name, command, options, recipe, parser_for(command))

    def parse(self, name: str, command: str, argv: list[str]) -> argparse.Namespace:
        from specrig.cli import parser_for

        return _parse_step(name, command, argv, parser_for(command))
