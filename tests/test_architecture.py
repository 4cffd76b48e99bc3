"""The house plan holds: every module lives in a room (a package directly under
``src/specrig/``), each room declares in its ``__init__.py`` which rooms it may
import (``MAY_IMPORT``), no import goes against that, and the modules import
each other without a circle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "specrig"
ROOMS = sorted(p.parent.name for p in PKG.glob("*/__init__.py"))


def _declared(room: str) -> set[str] | None:
    """The rooms ``room`` may import, read from its ``MAY_IMPORT`` (None: any)."""
    tree = ast.parse((PKG / room / "__init__.py").read_text())
    for node in tree.body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if isinstance(target, ast.Name) and target.id == "MAY_IMPORT":
            value = ast.literal_eval(node.value)
            return None if value == "*" else set(value)
    raise AssertionError(f"src/specrig/{room}/__init__.py declares no MAY_IMPORT (the rooms it may import)")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    """specrig modules (dotted, without ``specrig.``) this file imports, relative or absolute."""
    module = _module_name(path).split(".")
    pkg = module if path.name == "__init__.py" else module[:-1]
    tree = ast.parse(path.read_text())
    nodes = ast.walk(tree) if not top_level_only else _module_level(tree)
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
                mod = ".".join([*base, node.module] if node.module else base)
            elif node.module and (node.module == "specrig" or node.module.startswith("specrig.")):
                mod = node.module.removeprefix("specrig").lstrip(".")
            else:
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}" if mod else a.name
                out.add(sub if _is_module(sub) else mod)
        elif isinstance(node, ast.Import):
            out.update(a.name.removeprefix("specrig.") for a in node.names if a.name.startswith("specrig."))
    return {m for m in out if m}


def _module_level(tree: ast.Module):
    """Statements run at import time (also inside if/try blocks, including TYPE_CHECKING)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If | ast.Try):
            stack.extend(node.body + node.orelse + getattr(node, "handlers", []) + getattr(node, "finalbody", []))
        elif isinstance(node, ast.ExceptHandler):
            stack.extend(node.body)


def _is_module(dotted: str) -> bool:
    p = PKG / dotted.replace(".", "/")
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


MODULES = sorted(p for p in PKG.rglob("*.py") if p.parent != PKG)


def test_every_module_lives_in_a_room() -> None:
    loose = sorted(p.name for p in PKG.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert not loose, f"modules directly under src/specrig/ (put each in the package of its room): {loose}"
    assert {"core", "cli", "lab", "engine", "serve"} <= set(ROOMS)


def test_every_room_declares_rooms_that_exist() -> None:
    for room in ROOMS:
        may = _declared(room)
        unknown = (may or set()) - set(ROOMS)
        assert not unknown, f"{room}'s MAY_IMPORT names rooms that are not packages: {sorted(unknown)}"
    assert _declared("core") == set(), "the foundation imports no other room"
    assert _declared("cli") is None


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_imports_go_along_the_flow(path: Path) -> None:
    room = path.relative_to(PKG).parts[0]
    may = _declared(room)
    if may is None:
        return
    against = sorted(dep for dep in _imports(path) if dep.split(".")[0] not in (room, *may))
    assert not against, f"{_module_name(path)} ({room}) imports against the flow: {', '.join(against)}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("lazy", [False, True], ids=["module-level", "with-imports-inside-functions"])
def test_no_import_circle_between_modules(lazy: bool) -> None:
    """Counting every import at module level, TYPE_CHECKING ones included, and then every import
    inside functions too: an import moved into a function hides a circle from Python, not from
    the design (a package's ``__init__`` importing its own modules is not a circle back to it)."""
    graph = {}
    for p in MODULES:
        name = _module_name(p)
        graph[name] = {d for d in _imports(p, top_level_only=not lazy) if not name.startswith(d + ".") and d != name}
    assert not _cycles(graph), f"modules that import each other in a circle: {_cycles(graph)}"


def test_the_circle_check_can_fail() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_argument_parsing_outside_the_command_layer() -> None:
    offenders = [
        str(p.relative_to(PKG))
        for p in PKG.rglob("*.py")
        if "cli" not in p.relative_to(PKG).parts[:1]
        and "inenv" not in p.relative_to(PKG).parts
        and re.search(
            r"ArgumentParser\(|\.parse_args\(|\.parse_known_args\(|sys\.argv|^import argparse|argparse\.Namespace",
            p.read_text(),
            re.M,
        )
    ]
    assert not offenders, f"argv is parsed (or argparse reached) outside specrig/cli/: {offenders}"


def _path_writes(source: str) -> list[str]:
    """The calls in ``source`` that write or rename a file in place: ``os.replace``/``os.rename``,
    ``X.rename(...)``, ``X.write_text(...)``/``X.write_bytes(...)`` (but ``atomic.write_text``), and
    ``X.replace(target)``: one positional argument and no keyword is a path's replace (a ``str``'s
    takes two, a dataclass's or a datetime's takes keywords)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        attr, owner = node.func.attr, node.func.value
        owner_name = owner.id if isinstance(owner, ast.Name) else None
        if (
            (owner_name == "os" and attr in ("replace", "rename"))
            or (attr == "rename" and owner_name != "os")
            or (attr in ("write_text", "write_bytes") and owner_name != "atomic")
            or (attr == "replace" and len(node.args) == 1 and not node.keywords)
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}(...)")
    return found


def test_path_writes_are_found() -> None:
    """The check below can fail: it finds each in-place write or rename, and passes what is not one."""
    flagged = (
        "import os\nos.replace(a, b)\nos.rename(a, b)\np.rename(q)\np.write_text('x')\np.write_bytes(b'')\np.replace(q)"
    )
    assert len(_path_writes(flagged)) == 6
    fine = (
        "atomic.write_text(p, 'x')\natomic.write_bytes(p, b'')\ns.replace('.', '')\n"
        "dataclasses.replace(x, a=1)\nnow.replace(microsecond=0)\nreplace(p, provided=True)"
    )
    assert _path_writes(fine) == []


def test_one_atomic_write_helper() -> None:
    """Every temp-and-rename goes through specrig.core.atomic; results are not written in place."""
    helper = PKG / "core" / "atomic.py"
    offenders = {
        str(p.relative_to(ROOT)): found
        for p in [*PKG.rglob("*.py"), *(ROOT / "bench").glob("*.py")]
        if p != helper and "inenv" not in p.parts and (found := _path_writes(p.read_text()))
    }
    assert not offenders, f"files written or renamed outside specrig.core.atomic: {offenders}"


def test_modules_stay_small() -> None:
    big = {str(p.relative_to(PKG)): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 450}
    assert not big, f"modules over 450 lines (split them by what they hold): {big}"


def test_engines_and_methods_are_named_in_one_registry() -> None:
    """core/registry.py names the engines and the speculative methods; the schema, the options,
    the adapters and the layer convention read them, and no other module spells the list."""
    import typing

    from specrig.core.aux_layers import POSITION_OFFSET
    from specrig.core.registry import DRAFTER_METHODS, ENGINES, SPEC_METHODS
    from specrig.engine import get_engine
    from specrig.lab.options import BenchOptions
    from specrig.recipe.schema import SpecConfig

    assert set(POSITION_OFFSET) == set(ENGINES)
    assert all(get_engine(name).name == name for name in ENGINES)
    assert typing.get_args(BenchOptions.model_fields["engine"].annotation) == ENGINES
    assert typing.get_args(SpecConfig.model_fields["method"].annotation) == SPEC_METHODS
    assert set(DRAFTER_METHODS) <= set(SPEC_METHODS)
    spelled = re.compile(
        r"""\(\s*["'](vllm|sglang)["']\s*,\s*["'](vllm|sglang)["']\s*\)|["']eagle3["']\s*,\s*["']eagle["']"""
    )
    again = [str(p.relative_to(PKG)) for p in MODULES if p.name != "registry.py" and spelled.search(p.read_text())]
    assert not again, f"modules that spell the registry's lists again: {again}"


MAX_FUNCTION_LINES = 80


def test_no_function_is_longer_than_80_lines():
    """Every function in src/ (its decorators, signature, docstring and body) fits in 80 lines: a longer one
    is split into named steps."""
    long = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if node.end_lineno - first + 1 > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - first + 1})")
    assert not long, "functions over 80 lines:\n" + "\n".join(long)
