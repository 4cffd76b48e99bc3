"""How a file that fails its typed model is reported, the same way everywhere
(recipes, locks, built-wheel records, build definitions, patch sets, stamps):
one ``  dotted.key: problem`` line per error, with a did-you-mean for an
unknown key. :func:`first_toml` reads the first of a few places a manifest may stand
(a bundle's, a study pack's: any volume holds one)."""

from __future__ import annotations

import difflib
import json
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from specrig.core.errors import ConfigError

__all__ = ["describe", "keys_at", "json_problem", "first_toml"]

M = TypeVar("M", bound=BaseModel)


def keys_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names valid at ``loc`` in ``model`` (list indexes and free dict keys are stepped over)."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if fields is None:
            return []
        if part in fields:
            ann = fields[part].annotation
            nested = [a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)]
            current = nested[-1] if nested else ann
        # a free dict key (an env or set name) leaves the model unchanged
    return [k for k, f in getattr(current, "model_fields", {}).items() if not f.exclude]


def _key(loc: tuple[Any, ...]) -> str:
    return ".".join(f'"{p}"' if isinstance(p, str) and ("/" in p or "." in p) else str(p) for p in loc)


def describe(
    what: str,
    exc: ValidationError,
    *,
    model: type[BaseModel] | None = None,
    label: Callable[[tuple[Any, ...]], str] | None = None,
    pattern: str | None = None,
) -> str:
    """``what:`` then one line per error. ``model`` enables did-you-mean on unknown
    keys; ``label(loc)`` may add a note after the key (e.g. a package's name);
    ``pattern`` says what a value that fails its pattern should look like
    (e.g. "must be a RECORD hash ...")."""
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        key = _key(loc) or "(top level)"
        if label and (note := label(loc)):
            key += f" ({note})"
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
            allowed = keys_at(model, loc) if model else []
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            if close:
                msg += f"; did you mean {_key((*loc[:-1], close[0]))!r}?"
            elif allowed:
                msg += f"; allowed here: {', '.join(allowed)}"
        elif err["type"] == "missing":
            msg = "required key is missing"
        elif err["type"] == "string_pattern_mismatch" and pattern:
            msg = f"{pattern}, got {err['input']!r}"
        else:
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] != "value_error" and "input" in err and not isinstance(err["input"], dict):
                msg += f" (got {err['input']!r})"
        lines.append(f"  {key}: {msg}")
    return f"{what}:\n" + "\n".join(lines)


def json_problem(text: str) -> str | None:
    """What ``text`` is instead of a JSON document (None: it parses), to follow "FILE is": cut short
    (a full disk, a killed copy: the parser ran out of text) or invalid, with the line and column
    where the file ends or the parser stopped."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        if not text.strip():
            return "empty (truncated, or never written)"
        body = text.rstrip()
        if exc.pos >= len(body) or exc.msg.startswith("Unterminated string"):  # the text ran out mid-document
            line = body.count("\n") + 1
            column = len(body) - body.rfind("\n")
            return f"truncated: the file ends at line {line}, column {column}, in the middle of its JSON"
        return f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
    return None


def first_toml(candidates: Iterable[Path], model: type[M], *, not_what: str, hint: str) -> M | None:
    """The first of ``candidates`` that is a file, read as TOML into ``model`` (None: none is a file).
    One that is not valid TOML or fails the model is a :class:`ConfigError`: "FILE is ``not_what``: why"."""
    for cand in candidates:
        if cand.is_file():
            try:
                return model.model_validate(tomllib.loads(cand.read_text()))
            except (tomllib.TOMLDecodeError, ValidationError) as exc:
                raise ConfigError(f"{cand} is {not_what}: {exc}", hint=hint) from None
    return None
