"""``specrig patch check|apply|status|revert`` (``nox -s patch -- ...``).

Which site-packages: ``--site-packages PATH``, else the environment ``--env``
of the recipe (``--recipe``, else the one default-recipe policy) made by
``nox -s env``. Which set: with a recipe, the version the recipe's env pins
for each family (``vllm==0.16.0`` -> ``patches/vllm/0.16.0``), and the
installed version must equal it; with ``--site-packages`` alone, the installed
version picks the set. The library returns typed results
(:mod:`specrig.patches.state`); this module renders them (rich, or ``--json``).

Every ``nox -s patch -- COMMAND`` that an error, a hint or a status line names is
written with the target this run was given (``--site-packages X``, or ``--recipe``
and ``--env`` as given, :func:`with_target`): followed literally, it acts on the same
site-packages, never on the default recipe's environment instead.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specrig.cli.common import add_recipe_option, resolve_recipe
from specrig.core.errors import ConfigError, SpecrigError
from specrig.patches import apply as ops
from specrig.patches.record import purelib_of
from specrig.patches.state import Action, GuardChange, PatchInfo, PatchRun, SetStatus, State
from specrig.patches.which_sets import choose_sets, family_status, known_families, pinned_versions
from specrig.recipe.schema import Recipe

HELP = "check/apply/status/revert patch sets on an environment"
DESCRIPTION = (
    "Versioned patch sets for vLLM and speculators, applied to an engine environment "
    "all-or-nothing, verified against the wheels' RECORD hashes."
)

_STYLE = {
    State.APPLIED: "green",
    State.NOT_APPLIED: "yellow",
    State.UPSTREAM: "cyan",
    State.NO_SET: "cyan",
    State.NEEDS_PORT: "bold red",
    State.PARTIAL: "bold red",
    State.DRIFTED: "bold red",
    State.STALE: "bold red",
    State.WRONG_VERSION: "bold red",
    State.NOT_INSTALLED: "dim",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    helps = {
        "check": "verify version and RECORD hashes and that every patch applies; change nothing",
        "apply": "apply the patch sets (all or none) and register the guard plugin",
        "status": "show what is applied and which patches upstream has made unnecessary",
        "revert": "restore every patched file to its RECORD bytes (also undoes an interrupted apply) "
        "and remove the guard plugin",
    }
    for name, text in helps.items():
        p = sub.add_parser(name, help=text, description=text)
        add_recipe_option(p)
        p.add_argument("--env", help="environment name in the recipe (default: vllm)")
        p.add_argument("--site-packages", type=Path, help="patch this site-packages folder instead of the recipe env")
        p.add_argument(
            "--set",
            dest="family",
            default="all",
            help="which family of patch sets: a folder under patches/ (vllm, speculators) or all (default)",
        )
        p.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
        p.add_argument("--patches-dir", type=Path, help=argparse.SUPPRESS)


@dataclass(frozen=True)
class _Request:
    """The command's options, resolved once (the parsed namespace is left as it was): the recipe
    is loaded unless ``--site-packages`` names the target; ``env`` defaults to ``vllm``."""

    command: str
    family: str
    site_packages: Path | None
    recipe: str | None
    """``--recipe`` as given (None: this host's default)."""
    env: str
    recipe_obj: Recipe | None
    patches_dir: Path | None
    json: bool

    @classmethod
    def of(cls, args: argparse.Namespace) -> _Request:
        return cls(
            command=args.command,
            family=args.family,
            site_packages=args.site_packages,
            recipe=args.recipe,
            env=args.env or "vllm",
            recipe_obj=None if args.site_packages else resolve_recipe(args),
            patches_dir=args.patches_dir,
            json=bool(getattr(args, "json", False)),
        )


def _families(req: _Request) -> list[str]:
    families = known_families(req.patches_dir)
    if req.family == "all":
        return families
    if req.family not in families:
        raise ConfigError(
            f"--set {req.family}: no such family of patch sets", hint=f"use one of: {', '.join(families)}, all"
        )
    return [req.family]


def _recipe_pins(req: _Request) -> dict[str, str] | None:
    if req.site_packages:
        return None
    if req.env not in req.recipe_obj.env:
        raise ConfigError(
            f"recipe {req.recipe_obj.name!r} has no env {req.env!r}", hint=f"envs: {', '.join(req.recipe_obj.env)}"
        )
    return pinned_versions(req.recipe_obj.env[req.env].requirements)


def _site_packages(req: _Request, *, required: bool = True) -> Path | None:
    if req.site_packages:
        site = req.site_packages.expanduser().resolve()
        if not site.is_dir():
            raise ConfigError(f"--site-packages {site} is not a folder")
        return site
    from specrig.core.paths import env_dir

    python = env_dir(req.recipe_obj.name, req.env) / "bin" / "python"
    if not required and not python.exists():
        return None  # status: the environment is not made yet
    return purelib_of(python)


_COMMAND = re.compile(r"nox -s patch -- (check|apply|status|revert)\b(?! --(site-packages|recipe|env)\b)")


def target_args(args: argparse.Namespace) -> str:
    """The target this run was given, as options to repeat (empty: the default recipe's env)."""
    if args.site_packages is not None:
        return f"--site-packages {shlex.quote(str(args.site_packages))}"
    given = [("--recipe", args.recipe), ("--env", args.env)]
    return " ".join(f"{flag} {shlex.quote(str(value))}" for flag, value in given if value)


def with_target(text: str | None, target: str) -> str | None:
    """``text`` with every ``nox -s patch -- COMMAND`` it names followed by ``target``."""
    if not text or not target:
        return text
    return _COMMAND.sub(lambda m: f"{m.group(0)} {target}", text)


def run(args: argparse.Namespace) -> int:
    target = target_args(args)
    try:
        return _run(_Request.of(args), target)
    except SpecrigError as exc:  # its hint names a command: the one for this target
        exc.message, exc.hint = with_target(exc.message, target) or exc.message, with_target(exc.hint, target)
        raise


def _run(req: _Request, target: str) -> int:
    families = _families(req)
    pins = _recipe_pins(req)
    root = req.patches_dir
    out = Console(highlight=False)
    if not out.is_terminal:  # logs and pipes: wide enough that patch names and subjects stay on one line
        out.width = max(out.width, 150)
    if req.command == "status":
        site = _site_packages(req, required=False)
        statuses = [family_status(f, site, pins, root) for f in families]
        statuses = [s.model_copy(update={"detail": with_target(s.detail, target)}) for s in statuses]
        if req.json:
            print(json.dumps([s.model_dump(mode="json") for s in statuses], indent=2))
        else:
            recipe = None
            if req.recipe_obj:
                recipe = req.recipe_obj.name + ("" if req.recipe else " (this host's default; --recipe picks another)")
            render_status(out, statuses, recipe)
        return 0
    if req.command == "revert":
        result = ops.revert(families, _site_packages(req))
    else:
        explicit = req.family != "all"
        if pins is not None:  # the recipe decides the sets, before its environment is looked for
            psets = choose_sets(families, None, pins, explicit=explicit, root=root)
            if not psets:
                found = [family_status(f, None, pins, root) for f in families]
                reasons = "; ".join(
                    f"{st.family}: {st.detail}" if st.pinned_version else f"{st.family}: not pinned by the recipe"
                    for st in sorted(found, key=lambda st: st.pinned_version is None)
                )
                raise ConfigError(
                    f"nothing to {req.command} for recipe {req.recipe_obj.name!r} env {req.env!r}: {reasons}",
                    hint="patch sets exist only where a pinned release needs one; --recipe picks another recipe",
                )
            site = _site_packages(req)
        else:
            site = _site_packages(req)
            psets = choose_sets(families, site, None, explicit=explicit, root=root)
            if not psets:
                raise ConfigError(f"nothing to {req.command}: no patch set matches what is installed in {site}")
        result = ops.check(psets, site) if req.command == "check" else ops.apply(psets, site)
    if req.json:
        print(result.model_dump_json(indent=2))
    else:
        render_run(out, result)
    return 0


def _styled(state: State) -> str:
    return f"[{_STYLE[state]}]{state.value}[/]"


def _patch_table(title: str, patches: tuple[PatchInfo, ...]) -> Table:
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for column in ("patch", "state", "upstream", "subject"):
        table.add_column(column)
    for p in patches:
        table.add_row(escape(p.name), _styled(p.state), escape(p.upstream), escape(p.subject))
    return table


def render_status(out: Console, statuses: list[SetStatus], recipe: str | None) -> None:
    where = {str(s.site_packages) for s in statuses if s.site_packages}
    out.print(f"site-packages: {escape(', '.join(where) or '(environment not made yet)')}", soft_wrap=True)
    if recipe:
        out.print(f"recipe: {escape(recipe)}", soft_wrap=True)
    table = Table(show_edge=False, pad_edge=False)
    for column in ("family", "installed", "pinned", "patch set", "state"):
        table.add_column(column)
    for s in statuses:
        installed = f"{s.distribution} {s.installed_version}" if s.distribution else "-"
        patch_set = "-" if s.state is State.NO_SET else (s.set_version or "-")
        table.add_row(s.family, escape(installed), s.pinned_version or "-", patch_set, _styled(s.state))
    out.print(table)
    for s in statuses:
        if s.detail:
            out.print(f"{s.family}: {escape(s.detail)}", soft_wrap=True)
        if s.applied_at:
            out.print(f"{s.family}: applied at {s.applied_at} (series {(s.series_digest or '')[:12]})", soft_wrap=True)
        if s.patches:
            title = (
                f"{s.family} {s.set_version} patches vs the installed {s.installed_version or s.pinned_version}"
                if s.state is State.NO_SET
                else f"{s.family} {s.set_version} patches"
            )
            out.print(_patch_table(title, s.patches))


_VERB = {
    Action.CHECKED: "all patches apply cleanly and compile; target files match RECORD",
    Action.APPLIED: "applied",
    Action.ALREADY_APPLIED: "already applied; nothing to do",
    Action.REVERTED: "reverted to the RECORD bytes",
    Action.RECOVERED: "interrupted apply undone from its journal; every target back to its RECORD bytes",
    Action.NOT_APPLIED: "not applied; nothing to revert",
}


def render_run(out: Console, run: PatchRun) -> None:
    out.print(f"site-packages: {escape(str(run.site_packages))}", soft_wrap=True)
    for s in run.sets:
        installed = f" ({s.distribution} {s.installed_version})" if s.distribution else ""
        count = f", {len(s.patches)} patches" if s.patches else ""
        name = " ".join(part for part in (s.family, s.version) if part)
        out.print(f"{name}{installed}{count}: {_VERB[s.action]}", soft_wrap=True)
        if s.action is Action.APPLIED:
            out.print(_patch_table(f"{s.family} {s.version}", s.patches))
        for f in s.restored:
            verified = ", hashed again: matches RECORD" if f.record_verified else ""
            note = " (an edit made after apply was discarded)" if f.edited_after_apply else ""
            out.print(f"  restored {escape(f.path)} ({f.hash}{verified}){note}", soft_wrap=True)
    if run.guard is GuardChange.REGISTERED:
        out.print("guard plugin registered: vllm.general_plugins -> specrig_patch_guard:verify")
    elif run.guard is GuardChange.REMOVED:
        out.print("guard plugin removed (no set applied any more)")
    elif run.guard is GuardChange.UPDATED:
        out.print("guard plugin stamp updated")
