"""The house plan holds: every module is in a room of docs/architecture.md, and
no import goes against the flow that table declares."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "specrig"


def _rooms() -> tuple[dict[str, str], dict[str, set[str] | None]]:
    """module pattern -> room, and room -> rooms it may import (None: any)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## Rooms and what each may import", 1)[1]
    owner: dict[str, str] = {}
    allowed: dict[str, set[str] | None] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("room", "") or set(cells[0]) <= {"-"}:
            continue
        room, modules, _holds, may = cells
        for m in modules.split():
            owner[m] = room
        allowed[room] = None if may == "(any)" else (set() if may == "—" else set(may.split()))
    return owner, allowed


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _room_of(module: str, owner: dict[str, str]) -> str | None:
    if not module:
        return "package"
    if module in owner:
        return owner[module]
    top = module.split(".")[0]
    return owner.get(f"{top}/*") or owner.get(top)


def _imports(path: Path) -> set[str]:
    """specrig modules this file imports (relative or absolute, at any depth)."""
    pkg = _module_name(path).split(".") if path.name == "__init__.py" else _module_name(path).split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
                if node.module:
                    out.add(".".join([*base, node.module]))
                else:
                    out.update(".".join([*base, a.name]) for a in node.names)
            elif node.module and node.module.startswith("specrig."):
                out.add(node.module.removeprefix("specrig."))
        elif isinstance(node, ast.Import):
            out.update(a.name.removeprefix("specrig.") for a in node.names if a.name.startswith("specrig."))
    return out


MODULES = sorted(p for p in PKG.rglob("*.py") if p.name != "__init__.py" or p.parent != PKG)


def test_the_table_parses() -> None:
    owner, allowed = _rooms()
    assert "foundation" in allowed and allowed["cli"] is None
    unknown = {r for may in allowed.values() if may for r in may} - set(allowed)
    assert not unknown, f"'may import' names rooms the table does not define: {unknown}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_module_has_a_room_and_imports_along_the_flow(path: Path) -> None:
    owner, allowed = _rooms()
    module = _module_name(path)
    room = _room_of(module, owner)
    assert room, f"{module} is in no room of docs/architecture.md: add it to the table"
    may = allowed[room]
    if may is None:
        return
    against = sorted(
        f"{dep} ({_room_of(dep, owner)})"
        for dep in _imports(path)
        if _room_of(dep, owner) not in (room, "package", *may)
    )
    assert not against, f"{module} ({room}) imports against the flow: {', '.join(against)}"


def test_no_argument_parsing_outside_the_command_layer() -> None:
    offenders = [
        str(p.relative_to(PKG))
        for p in PKG.rglob("*.py")
        if "cli" not in p.relative_to(PKG).parts[:1]
        and "inenv" not in p.relative_to(PKG).parts
        and re.search(r"ArgumentParser\(|\.parse_args\(|\.parse_known_args\(|sys\.argv", p.read_text())
    ]
    assert not offenders, f"argv is parsed outside specrig/cli/: {offenders}"


def test_modules_stay_small() -> None:
    big = {str(p.relative_to(PKG)): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 450}
    assert not big, f"modules over 450 lines (split them by what they hold): {big}"
