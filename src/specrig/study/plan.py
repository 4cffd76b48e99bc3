"""A study file made into its plan: every step (``vary`` expanded) with its command's argv,
the recipe it runs with, the earlier steps it reads, all checked before anything runs. Every
problem of the file is reported at once, one ``  step.NAME.KEY: problem`` line each, under the
file's path."""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specrig.core.errors import ConfigError
from specrig.study.model import StudyFile, StudyMeta, combinations, load_study_file
from specrig.study.steps import ENVIRONS, OUTPUTS, PLACED, CommandLine, Step, deep_check, refs_in, resolve_argv

__all__ = ["Plan", "make_plan", "study_folder", "command_line"]


@dataclass(frozen=True)
class Plan:
    """The study, checked: where it runs, its steps in order, the recipes they name."""

    meta: StudyMeta
    file: Path
    folder: Path
    steps: tuple[Step, ...]
    recipes: dict[str, Any] = field(default_factory=dict)
    """recipe name -> the loaded recipe (its digest and locks go into each step's inputs)"""
    only: tuple[str, ...] = ()
    """the steps chosen to run (``study run --steps``); empty: every step"""

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)

    @property
    def to_run(self) -> tuple[Step, ...]:
        """The steps this run runs, in the file's order."""
        return tuple(s for s in self.steps if not self.only or s.name in self.only)


def study_folder(name: str) -> Path:
    """The default folder of study ``name``: ``studies/NAME`` in the user cache
    (``$SPECRIG_STUDIES_DIR`` overrides the parent)."""
    from specrig.core.paths import subdir

    return subdir("studies") / name


def command_line(step: Step, folder: Path, resolve: Any = None) -> list[str]:
    """The whole ``specrig COMMAND ...`` a step runs: its argv, ``step:NAME`` resolved (or left as
    written), and the study-placed output folder."""
    argv = resolve_argv(step.argv, resolve) if resolve else list(step.argv)
    placed = PLACED.get(step.command)
    if placed:
        argv.append(f"--{placed}={folder / 'steps' / step.name}")
    return ["specrig", step.command, *argv]


def _recipe(name: str | None, where: str, cache: dict[str, Any], problems: list[str]) -> Any:
    """The recipe ``name`` (None: the one the bench picks on this host), loaded once."""
    from specrig.host.machine import probe
    from specrig.recipe.choose import choose_recipe

    key = name or ""
    if key not in cache:
        try:
            cache[key] = choose_recipe(name, set() if name else probe().compute_capabilities)
        except ConfigError as exc:
            cache[key] = None
            problems.append(f"  {where}: {exc.message.replace(chr(10), ' ')}")
    return cache[key]


def _needs(name: str, command: str, options: dict[str, Any], recipe: str, earlier: list[Step]) -> list[str]:
    """The earlier steps this one reads: those it names (``step:NAME``); for a drafter step or a
    step serving a named drafter (``@eagle3-trained``, ``@curve``) every earlier drafter step of its
    recipe; for a step that serves, builds or makes an environment every earlier build and env step of
    its recipe (what they made is what it runs on)."""
    needs = [n for _, n in refs_in(options)]
    named = any(
        isinstance(v, str) and v.startswith("@")
        for value in options.values()
        for v in (value if isinstance(value, list) else [value])
    )
    if command == "drafter" or (command in ("bench", "drafter-eval") and named):
        needs += [s.name for s in earlier if s.command == "drafter" and s.recipe == recipe]
    if command in ("bench", "drafter", "drafter-eval", *ENVIRONS):
        needs += [s.name for s in earlier if s.command in ENVIRONS and s.recipe == recipe]
    return list(dict.fromkeys(needs))


def _ref_problems(name: str, options: dict[str, Any], earlier: list[Step]) -> list[str]:
    out = []
    known = {s.name: s for s in earlier}
    for key, ref in refs_in(options):
        if ref not in known:
            out.append(f"  step.{name}.{key}: step:{ref} names no earlier step")
        elif known[ref].command not in OUTPUTS:
            out.append(
                f"  step.{name}.{key}: step:{ref} runs `specrig {known[ref].command}`, which makes no folder to name"
            )
    return out


def _stand_in(folder: Path, earlier: list[Step]) -> Any:
    """What ``step:NAME`` stands for in a check, before that step ran."""

    def resolve(name: str) -> str:
        s = next(x for x in earlier if x.name == name)
        if s.command == "drafter":
            return str(folder / "steps" / name / "registered" / name)  # (the real one: a hashed folder name)
        return str(folder / "steps" / name)

    return resolve


def _check_ns(step: Step, cli: CommandLine, folder: Path, earlier: list[Step]) -> Any:
    """The parsed options a check reads: ``step:NAME`` stood in for; a baseline named by
    ``step:NAME`` (not run yet) and ``@curve`` of a curve this study trains are left out."""
    argv = resolve_argv(step.argv, _stand_in(folder, earlier))
    ns = cli.parse(step.name, step.command, argv)
    if step.command == "bench":
        if any(k == "baseline" for k, _ in refs_in(step.options)):
            ns.baseline = None
        trains_curve = any(s.command == "drafter" and s.options.get("curve") for s in earlier)
        if trains_curve and ns.drafter and "@curve" in ns.drafter.split(","):
            ns.drafter = ",".join(str(folder / "curve" / x) if x == "@curve" else x for x in ns.drafter.split(","))
    return ns


def _one(
    name: str, opts: dict[str, Any], table: Any, study: StudyFile, ctx: dict[str, Any], problems: list[str]
) -> Step | None:
    """One step instance, checked; its problems appended (None: it cannot be made)."""
    cli: CommandLine = ctx["cli"]
    takes_recipe = cli.takes_recipe(table.run)
    recipe = None
    if takes_recipe:
        where = f"step.{table.name}.recipe" if table.recipe else "study.recipe"
        loaded = _recipe(table.recipe or study.study.recipe, where, ctx["recipes"], problems)
        recipe = loaded.name if loaded is not None else None
        if loaded is not None:
            ctx["loaded"][loaded.name] = loaded
    argv, bad = cli.argv(name, table.run, opts, recipe if takes_recipe else table.recipe)
    bad += _ref_problems(name, opts, ctx["steps"])
    if bad:
        problems += bad
        return None
    needs = _needs(name, table.run, opts, recipe or "", ctx["steps"])
    step = Step(name=name, command=table.run, recipe=recipe, options=opts, argv=tuple(argv), needs=tuple(needs))
    try:
        ns = cli.parse(name, table.run, argv)
        check = _check_ns(step, cli, ctx["folder"], ctx["steps"])
    except ConfigError as exc:
        problems.append(exc.message)
        return step
    if takes_recipe and recipe is not None:
        problems += deep_check(step, ns, ctx["loaded"][recipe], check, ctx["file"].parent)
    return step


def make_plan(file: Path | str, cli: CommandLine, folder: Path | None = None) -> Plan:
    """Read and check the whole study file; raise one error naming every problem."""
    file = Path(file)
    study = load_study_file(file)
    folder = Path(folder) if folder else study_folder(study.study.name)
    ctx: dict[str, Any] = {"cli": cli, "recipes": {}, "loaded": {}, "steps": [], "folder": folder, "file": file}
    problems: list[str] = []
    for table in study.step:
        for name, opts in combinations(table):
            step = _one(name, {k.replace("-", "_"): v for k, v in opts.items()}, table, study, ctx, problems)
            if step is not None:
                ctx["steps"].append(step)
    if problems:
        raise ConfigError(
            f"invalid study file {file}:\n" + "\n".join(problems),
            hint="`specrig COMMAND --help` lists each command's options; docs/study.md the study file",
        )
    return Plan(
        meta=study.study,
        file=file.resolve(),
        folder=folder.absolute(),
        steps=tuple(ctx["steps"]),
        recipes=ctx["loaded"],
    )


def recipe_inputs(recipe: Any) -> dict[str, Any]:
    """What a step's inputs record of its recipe: its digest and the digest of each lock beside it."""
    locks = {}
    for env in sorted(recipe.env):
        path = recipe.lock_path(env) if recipe.path else None
        if path is not None and path.is_file():
            locks[env] = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return {"recipe": recipe.name, "recipe_digest": recipe.digest, "locks": locks}


def shown(argv: list[str]) -> str:
    return shlex.join(argv)
