"""A study's ``results.toml``: the headline tables it names for the results page (``specrig results``),
typed, and the captures those tables read, found on disk.

::

    title = "The training budget at 20,000 samples"
    host = "1 x H100"

    [[table]]
    kind = "offline"            # bench | offline | projection | build
    caption = "Held-out acceptance of three drafters trained on the same 20,000 answers"
    host = "1 x H100"           # optional: where this table's captures were made, if not the study's host
    k = 4                       # offline only: the draft length of the mean length (default: each eval's own)
    captures = [
        { path = "capture/default-offline_eval.json", label = "150 s" },
    ]

A capture's ``path`` is relative to the study's folder: its own capture beside its README
(``capture/FILE``), or another study's (``../FOLDER/capture/FILE``). ``label`` names it in the table; a bench
capture may rename its configurations (``configs = { "eagle3-x-k3" = "eagle3 300 s" }``); a
projection's captures give the layer count each run was cut to (``layers = 4``)."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from specrig.core.errors import ConfigError
from specrig.core.validation import describe

__all__ = [
    "Capture",
    "Table",
    "StudyResults",
    "Study",
    "Located",
    "KINDS",
    "find_studies",
    "load_study",
    "locate",
    "link",
]

KINDS = ("bench", "offline", "projection", "build")
FOLDER = re.compile(r"^(\d{4}-\d{2}-\d{2})-[a-z0-9][a-z0-9.-]*$")
HINT = (
    "write title, host and one [[table]] or more, each with kind (bench, offline, projection or build), "
    "caption and captures = [{ path = ... }] (src/specrig/report/results_file.py shows the keys)"
)


def _one_line(v: str, *, cell: bool = False) -> str:
    """``v`` when it fits one line of the page (and, in a table's cell, holds no ``|``)."""
    if "\n" in v or "\r" in v:
        raise ValueError(f"one line of text, got {v!r}")
    if cell and "|" in v:
        raise ValueError(f"a table's cell: no '|', got {v!r}")
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Capture(_Strict):
    """One capture file a table reads."""

    path: str
    """Relative to the study's folder, ``/``-separated (``capture/FILE``, ``../FOLDER/capture/FILE``)."""
    label: str = ""
    """What the table calls it (a bench's rows start with it; an offline row is named by it)."""
    layers: int | None = Field(None, ge=1)
    """A projection's run: the layer count the model was cut to."""
    configs: dict[str, str] = {}
    """A bench's run: a configuration's name as the table shows it, where not its own."""

    @field_validator("path")
    @classmethod
    def _relative(cls, v: str) -> str:
        p = PurePosixPath(v)
        if not v.strip() or p.is_absolute() or "\\" in v or v.startswith("~"):
            raise ValueError(f"a path relative to the study's folder, e.g. capture/FILE, got {v!r}")
        return v

    @field_validator("label")
    @classmethod
    def _cell(cls, v: str) -> str:
        return _one_line(v, cell=True)

    @field_validator("configs")
    @classmethod
    def _cells(cls, v: dict[str, str]) -> dict[str, str]:
        return {name: _one_line(shown, cell=True) for name, shown in v.items()}


class Table(_Strict):
    """One headline table: which kind, what it shows, where it was measured, from which files."""

    kind: Literal["bench", "offline", "projection", "build"]
    caption: str = Field(min_length=1)
    host: str | None = None
    k: int | None = Field(None, ge=1)
    captures: list[Capture] = Field(min_length=1)

    @field_validator("caption", "host")
    @classmethod
    def _line(cls, v: str | None) -> str | None:
        return None if v is None else _one_line(v)


class StudyResults(_Strict):
    """A study's ``results.toml``."""

    title: str = Field(min_length=1)
    host: str = Field(min_length=1)
    table: list[Table] = Field(min_length=1)

    @field_validator("title", "host")
    @classmethod
    def _line(cls, v: str) -> str:
        return _one_line(v)


@dataclass(frozen=True)
class Study:
    name: str
    folder: Path
    source: Path
    """Its results.toml."""
    results: StudyResults

    @property
    def date(self) -> str:
        m = FOLDER.match(self.name)
        return m.group(1) if m else ""


@dataclass(frozen=True)
class Located:
    """A capture of a table found on disk: the file, its link from the page, its key in results.toml."""

    capture: Capture
    file: Path
    link: str
    key: str
    """``table.N.captures.M``."""
    source: Path
    """The results.toml naming it."""

    def error(self, problem: str, hint: str | None = None) -> ConfigError:
        """A ConfigError naming the results.toml, this capture's key and its path."""
        return ConfigError(f"{self.source}: {self.key}.path: {self.capture.path} {problem}", hint=hint)


def _kind_problems(r: StudyResults) -> list[str]:
    """Keys that do not fit their table's kind, as ``dotted.key: problem``."""
    out = []
    for i, t in enumerate(r.table):
        if t.k is not None and t.kind != "offline":
            out.append(f"table.{i}.k: only an offline table takes k (this one is {t.kind})")
        for j, c in enumerate(t.captures):
            key = f"table.{i}.captures.{j}"
            if t.kind == "projection" and c.layers is None:
                out.append(f"{key}.layers: required key is missing (a projection's run: its layer count)")
            if t.kind != "projection" and c.layers is not None:
                out.append(f"{key}.layers: only a projection's captures give layers (this table is {t.kind})")
            if t.kind != "bench" and c.configs:
                out.append(f"{key}.configs: only a bench table's captures rename configurations (this is {t.kind})")
    return out


def load_study(source: Path) -> Study:
    """One study's results.toml, typed; refused with the file and the dotted key of each problem."""
    folder = source.parent
    if not FOLDER.match(folder.name):
        raise ConfigError(
            f"{source}: its folder {folder.name!r} is not named YYYY-MM-DD-slug",
            hint="a study folder is named after the date of its first measurement, e.g. 2026-12-06-training-budget",
        )
    try:
        data = tomllib.loads(source.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source} is not TOML ({exc})", hint=HINT) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source} cannot be read ({exc})", hint=HINT) from None
    try:
        results = StudyResults.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe(f"{source} is not a results file", exc, model=StudyResults), hint=HINT) from None
    problems = _kind_problems(results)
    if problems:
        raise ConfigError(f"{source} is not a results file:\n" + "\n".join(f"  {p}" for p in problems), hint=HINT)
    return Study(folder.name, folder, source, results)


def find_studies(studies: Path) -> list[Path]:
    """Every ``studies/*/results.toml``, in the order of their folders' names."""
    if not studies.is_dir():
        raise ConfigError(
            f"{studies} is not a folder of studies", hint="--studies DIR: the folder holding NAME/results.toml"
        )
    found = sorted(studies.glob("*/results.toml"), key=lambda p: p.parent.name)
    if not found:
        raise ConfigError(
            f"no study in {studies} names its results (no {studies.name}/*/results.toml)",
            hint="write studies/NAME/results.toml for the studies whose tables the page shows",
        )
    return found


def link(target: Path, page_dir: Path) -> str:
    """``target`` as the page links it: relative to the page's folder, ``/``-separated (``..`` taken
    lexically, as a reader of the page takes it, not through symbolic links)."""
    return os.path.relpath(os.path.abspath(target), os.path.abspath(page_dir)).replace(os.sep, "/")


def locate(study: Study, index: int, page_dir: Path) -> list[Located]:
    """The captures of the study's table ``index`` found on disk; a missing one is named."""
    out = []
    for j, c in enumerate(study.results.table[index].captures):
        file = study.folder / c.path
        found = Located(c, file, link(file, page_dir), f"table.{index}.captures.{j}", study.source)
        if not file.is_file():
            raise found.error(
                "does not exist" + (" (it is a folder)" if file.is_dir() else ""),
                hint="name a capture file relative to the study's folder (its own: capture/FILE)",
            )
        out.append(found)
    return out
